"""JSON Schema: parsing and the compatibility rules the registry applies.

:func:`parse` loads the text and checks it against its draft's meta-schema (``$schema``, or the
newest draft jsonschema knows).  :func:`check` answers whether a *reader* schema accepts every
document a *writer* schema accepts, as far as these rules reach (Confluent's JSON Schema rules,
in part):

* ``type``: the reader's types must include the writer's (``integer`` is within ``number``);
* objects, the content model: a property of the writer missing in a *closed* reader
  (``additionalProperties: false``) is refused (PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL); a
  property of the reader missing in an *open* writer is refused (PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL:
  the writer may have written anything under that name); a property the reader requires and the
  writer did not is refused (REQUIRED_PROPERTY_ADDED); properties in both are checked recursively;
* arrays: ``items`` recursively;
* ``enum``: the reader's values must include the writer's.

Other keywords (``oneOf``, ``allOf``, ``$ref``, numeric and string bounds) are not compared: a
change in them is accepted.  Pure: no I/O.
"""

from __future__ import annotations

import json

import jsonschema
from jsonschema.exceptions import SchemaError


class JsonSchemaError(ValueError):
    """The text is not a valid JSON Schema (the registry answers 42201)."""


def parse(text: str, references: list | None = None):
    try:
        value = json.loads(text)
    except ValueError as e:
        raise JsonSchemaError(f"not JSON: {e}") from None
    if not isinstance(value, (dict, bool)):
        raise JsonSchemaError(f"a JSON Schema is an object or a boolean, got {type(value).__name__}")
    try:
        jsonschema.validators.validator_for(value).check_schema(value)
    except SchemaError as e:
        raise JsonSchemaError(e.message) from None
    return value


def canonical(value) -> str:
    return json.dumps(value, separators=(",", ":"))


def _types(schema) -> set | None:
    if not isinstance(schema, dict) or "type" not in schema:
        return None  # any type
    t = schema["type"]
    return set(t) if isinstance(t, list) else {t}


def _open(schema: dict) -> bool:
    return schema.get("additionalProperties", True) is not False


def _check(reader, writer, path: str, out: list) -> None:
    if reader is True or reader == {}:
        return
    if writer is True or writer == {}:
        writer = {}
    if reader is False or writer is False:
        if reader is False and writer is not False:
            out.append(f"{{errorType:'TYPE_NARROWED', description:'{path or '#/'} accepts nothing now'}}")
        return
    rt, wt = _types(reader), _types(writer)
    if rt is not None:
        widened = set(rt) | ({"integer"} if "number" in rt else set())
        if wt is None or not wt <= widened:
            out.append(
                f"{{errorType:'TYPE_NARROWED', description:'type at {path or '#/'} is {sorted(rt)}, was "
                f"{sorted(wt) if wt else 'any'}'}}"
            )
            return
    if "enum" in reader:
        if "enum" not in writer or any(v not in reader["enum"] for v in writer["enum"]):
            out.append(f"{{errorType:'ENUM_ARRAY_NARROWED', description:'enum at {path or '#/'} lost values'}}")
    rprops = reader.get("properties") or {}
    wprops = writer.get("properties") or {}
    if rprops or wprops or "additionalProperties" in reader:
        for name, ws in wprops.items():
            p = f"{path}#/properties/{name}"
            if name in rprops:
                _check(rprops[name], ws, p, out)
            elif not _open(reader):
                out.append(f"{{errorType:'PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL', description:'{p}'}}")
        for name in rprops:
            if name not in wprops and _open(writer):
                out.append(
                    f"{{errorType:'PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL', description:'{path}#/properties/{name}'}}"
                )
        for name in reader.get("required") or []:
            if name not in (writer.get("required") or []):
                out.append(f"{{errorType:'REQUIRED_PROPERTY_ADDED', description:'{path}#/required/{name}'}}")
    if isinstance(reader.get("items"), dict) and isinstance(writer.get("items"), dict):
        _check(reader["items"], writer["items"], f"{path}#/items", out)


def check(reader, writer) -> list[str]:
    """The reasons documents valid under ``writer`` may be invalid under ``reader`` (empty: none)."""
    out: list[str] = []
    _check(reader, writer, "", out)
    return out
