"""Avro schemas: parsing (with named references) and Avro's schema resolution rules.

:func:`parse` checks a schema with fastavro and returns its JSON value; references (schemas other
subjects hold, named by the full names they define) are given as already-parsed JSON values and
are resolved by name.  :func:`check` answers whether a *reader* schema can read data written with
a *writer* schema, by the rules of the Avro specification's "Schema Resolution" section (the rules
Avro's Java ``SchemaCompatibility`` implements, which Confluent's registry uses):

* records: matched by name (the writer's full or unqualified name, or one of the reader's
  aliases); each reader field is looked up in the writer by name, then by its aliases; a reader
  field missing in the writer needs a default; writer fields the reader lacks are skipped;
* enums: matched by name; a writer symbol the reader lacks needs the reader's enum ``default``;
* fixed: matched by name and size;
* arrays / maps: their items / values resolve;
* unions: a writer union resolves if every branch does; a reader union if one of its branches
  reads the writer's type;
* promotions: int to long, float or double; long to float or double; float to double; string to
  bytes and bytes to string.

Pure: no I/O.  The answers are lists of Confluent-style messages (empty: compatible).
"""

from __future__ import annotations

import json

import fastavro
from fastavro.schema import SchemaParseException, UnknownType

PRIMITIVES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = frozenset({"record", "error", "enum", "fixed"})
_PROMOTIONS = {
    "int": {"long", "float", "double"},
    "long": {"float", "double"},
    "float": {"double"},
    "string": {"bytes"},
    "bytes": {"string"},
}


class AvroSchemaError(ValueError):
    """The text is not a valid Avro schema (the registry answers 42201)."""


def parse(text: str, references: list | None = None):
    """The schema's JSON value after checking it; ``references`` are the JSON values of the
    schemas it refers to by name (each a named type or a union of them)."""
    try:
        value = json.loads(text)
    except ValueError:
        # a bare type name ("string") is valid Avro JSON only quoted; Confluent accepts it unquoted
        value = text.strip()
        if value not in PRIMITIVES:
            raise AvroSchemaError(f"not JSON: {text[:80]!r}") from None
    named: dict = {}
    try:
        for ref in references or []:
            fastavro.parse_schema(ref, named_schemas=named, _write_hint=False)
        fastavro.parse_schema(value, named_schemas=named, _write_hint=False)
        _load(value, references)  # what fastavro lets pass: a record without fields
    except AvroSchemaError:
        raise
    except (SchemaParseException, UnknownType, TypeError, KeyError, AttributeError, ValueError) as e:
        raise AvroSchemaError(str(e) or type(e).__name__) from None
    return value


def canonical(value) -> str:
    """A stable text of the schema (compact JSON, key order kept) used to compare schemas."""
    return json.dumps(value, separators=(",", ":"), sort_keys=False)


# --------------------------------------------------------------------------- normalized form
def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _short(fullname: str) -> str:
    return fullname.rsplit(".", 1)[-1]


class _Names:
    def __init__(self):
        self.types: dict[str, dict] = {}

    def deref(self, node: dict) -> dict:
        while node["type"] == "ref":
            found = self.types.get(node["name"])
            if found is None:
                raise AvroSchemaError(f"unknown type {node['name']!r}")
            node = found
        return node


def _normalize(schema, namespace: str | None, names: _Names) -> dict:
    if isinstance(schema, str):
        if schema in PRIMITIVES:
            return {"type": schema}
        return {"type": "ref", "name": _fullname(schema, namespace)}
    if isinstance(schema, list):
        return {"type": "union", "types": [_normalize(s, namespace, names) for s in schema]}
    if not isinstance(schema, dict):
        raise AvroSchemaError(f"not a schema: {schema!r}")
    t = schema.get("type")
    if isinstance(t, (dict, list)):
        return _normalize(t, namespace, names)
    if t in PRIMITIVES:
        return {"type": t}
    if t in NAMED:
        ns = schema.get("namespace", namespace)
        full = _fullname(schema["name"], ns)
        ns = full.rpartition(".")[0] or None
        node: dict = {
            "type": "record" if t == "error" else t,
            "name": full,
            "aliases": {_fullname(a, ns) for a in schema.get("aliases", [])},
        }
        names.types[full] = node
        if t in ("record", "error"):
            if not isinstance(schema.get("fields"), list):
                raise AvroSchemaError(f"record {full}: expected a list of fields")
            node["fields"] = [
                {
                    "name": f["name"],
                    "aliases": list(f.get("aliases", [])),
                    "has_default": "default" in f,
                    "type": _normalize(f["type"], ns, names),
                }
                for f in schema.get("fields", [])
            ]
        elif t == "enum":
            node["symbols"] = list(schema.get("symbols", []))
            node["default"] = schema.get("default")
        else:
            node["size"] = schema.get("size")
        return node
    if t == "array":
        return {"type": "array", "items": _normalize(schema["items"], namespace, names)}
    if t == "map":
        return {"type": "map", "values": _normalize(schema["values"], namespace, names)}
    if isinstance(t, str):
        return {"type": "ref", "name": _fullname(t, namespace)}
    raise AvroSchemaError(f"not a schema: {schema!r}")


def _load(value, references) -> tuple[dict, _Names]:
    names = _Names()
    for ref in references or []:
        _normalize(ref, None, names)
    return _normalize(value, None, names), names


# --------------------------------------------------------------------------- resolution
class _Checker:
    def __init__(self, rnames: _Names, wnames: _Names):
        self.rnames = rnames
        self.wnames = wnames
        self.assumed: set = set()  # (reader name, writer name) pairs under check: recursive types
        self.errors: list[str] = []

    def fail(self, kind: str, path: str, description: str) -> None:
        self.errors.append(f"{{errorType:'{kind}', description:'{description}', additionalInfo:'{path}'}}")

    @staticmethod
    def _name_matches(reader: dict, writer: dict) -> bool:
        if reader["name"] == writer["name"] or _short(reader["name"]) == _short(writer["name"]):
            return True
        return writer["name"] in reader["aliases"] or _short(writer["name"]) in {_short(a) for a in reader["aliases"]}

    def readable(self, reader: dict, writer: dict) -> bool:
        """True when ``reader`` reads ``writer`` without errors (used to pick a union branch)."""
        saved = self.errors
        self.errors = []
        try:
            self.check(reader, writer, "")
            return not self.errors
        finally:
            self.errors = saved

    def check(self, reader: dict, writer: dict, path: str) -> None:
        reader = self.rnames.deref(reader)
        writer = self.wnames.deref(writer)
        rt, wt = reader["type"], writer["type"]
        if wt == "union":
            for i, branch in enumerate(writer["types"]):
                self.check(reader, branch, f"{path}/{i}")
            return
        if rt == "union":
            if not any(self.readable(b, writer) for b in reader["types"]):
                self.fail(
                    "MISSING_UNION_BRANCH",
                    path or "/",
                    f"The new schema is missing a type inside a union field at path '{path or '/'}' in the old "
                    f"schema: reader union lacks type: {wt.upper()}",
                )
            return
        if rt != wt:
            if rt in _PROMOTIONS.get(wt, ()):
                return
            self.fail(
                "TYPE_MISMATCH",
                path or "/",
                f"The type (path '{path or '/'}') of a field in the new schema does not match with the old "
                f"schema: reader type: {rt.upper()} not compatible with writer type: {wt.upper()}",
            )
            return
        if rt in NAMED or rt == "record":
            if not self._name_matches(reader, writer):
                self.fail(
                    "NAME_MISMATCH",
                    f"{path}/name",
                    f"The name of the schema has changed (path '{path}/name'): expected: {writer['name']}",
                )
                return
            key = (reader["name"], writer["name"])
            if key in self.assumed:
                return
            self.assumed.add(key)
        if rt == "record":
            by_name = {f["name"]: f for f in writer["fields"]}
            for i, rf in enumerate(reader["fields"]):
                wf = by_name.get(rf["name"])
                if wf is None:
                    wf = next((by_name[a] for a in rf["aliases"] if a in by_name), None)
                fpath = f"{path}/fields/{i}"
                if wf is None:
                    if not rf["has_default"]:
                        self.fail(
                            "READER_FIELD_MISSING_DEFAULT_VALUE",
                            rf["name"],
                            f"The field '{rf['name']}' at path '{fpath}' in the new schema has no default value "
                            "and is missing in the old schema",
                        )
                    continue
                self.check(rf["type"], wf["type"], f"{fpath}/type")
        elif rt == "enum":
            missing = [s for s in writer["symbols"] if s not in reader["symbols"]]
            if missing and reader.get("default") is None:
                self.fail(
                    "MISSING_ENUM_SYMBOLS",
                    f"{path}/symbols",
                    f"The new schema is missing enum symbols '{missing}' at path '{path}/symbols' in the old schema",
                )
        elif rt == "fixed":
            if reader["size"] != writer["size"]:
                self.fail(
                    "FIXED_SIZE_MISMATCH",
                    f"{path}/size",
                    f"The size of FIXED type field at path '{path}/size' in the new schema does not match with "
                    f"the old schema: expected: {writer['size']}, found: {reader['size']}",
                )
        elif rt == "array":
            self.check(reader["items"], writer["items"], f"{path}/items")
        elif rt == "map":
            self.check(reader["values"], writer["values"], f"{path}/values")


def check(reader, writer, reader_refs=None, writer_refs=None) -> list[str]:
    """The reasons a reader with schema ``reader`` cannot read data written with ``writer`` (JSON
    values as :func:`parse` returns them; ``*_refs`` the JSON values of their references)."""
    rnode, rnames = _load(reader, reader_refs)
    wnode, wnames = _load(writer, writer_refs)
    checker = _Checker(rnames, wnames)
    checker.check(rnode, wnode, "")
    return checker.errors
