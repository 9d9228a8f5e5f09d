"""JSON ``key`` / ``value`` columns: ``json-confluent`` (Confluent's JSON Schema wire format: magic
byte 0, a 4-byte schema id, UTF-8 JSON) and ``json`` (bare JSON text, with the JSON Schema given as
``valueSchema``).

The reader schema is a JSON Schema: the given one, or the subject's latest (or pinned) version from
the registry, with its references (a ``$ref`` naming a reference reads the referenced subject's
schema).  Its Spark type: ``object`` with ``properties`` -> a struct of them (in their order), an
object with only ``additionalProperties: {schema}`` -> ``map<string, _>``, ``array`` -> array of
``items``, ``string`` -> string (``format: date-time`` -> timestamp, ``format: date`` -> date),
``integer`` -> bigint, ``number`` -> double, ``boolean``, a string ``enum`` -> string; ``null`` in a
type list or a ``oneOf``/``anyOf`` with ``null`` and one schema -> that schema's type (Spark's
columns are nullable; a property that is missing or null reads as null); ``$ref`` to
``#/definitions/...``, ``#/$defs/...`` or a reference.  Other unions and recursive schemas are
refused when the query is defined.  Properties the schema does not name are ignored.

Decoding in bulk: every record's JSON is wrapped as ``{"v": <record>}`` and the batch is read by ONE
``pyarrow.json.read_json`` call with the column's type as explicit schema (a C parser and builder;
dates and timestamps read as strings first, then one Arrow cast).  A schema with a map has no
pyarrow.json reader (it cannot build maps): then ``json.loads`` per record (C) and one
``pyarrow.array`` build.  When the batch does not read as a whole (a record that is not JSON or
whose values do not fit the type), every record is read alone, so that FAILFAST names the first bad
one and PERMISSIVE nulls exactly the bad ones.
"""

from __future__ import annotations

import io
import json

import pyarrow as pa

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.typed_formats import TIMESTAMP, IdLookup, registry_version

FORMATS = ("json", "json-confluent")


# -- the reader schema (driver side) --------------------------------------------------------------


def parse_reader(
    column: str,
    fmt: str,
    schema: str | None,
    *,
    registry_url: str | None,
    subject: str | None,
    version: str | None,
    topics: tuple,
) -> str:
    """The column's schema text: ``{"schema": <JSON Schema>, "refs": {name: <JSON Schema>}}``."""
    refs: dict = {}
    if schema:
        text = schema
    elif fmt == "json-confluent":
        found = registry_version(column, registry_url, subject, version, topics, "JSON")
        text = found["schema"]
        _collect_refs(registry_url, found.get("references") or [], refs)
    else:
        raise ConfigError(f"option {column}Format={fmt} needs option {column}Schema (the JSON Schema)")
    try:
        parsed = json.loads(text)
    except ValueError as e:
        raise ConfigError(f"option {column}Schema is not JSON: {e}") from e
    out = json.dumps({"schema": parsed, "refs": refs})  # key order kept: the struct follows the properties
    arrow_type(out)  # a ConfigError now for a schema without a Spark type
    return out


def _collect_refs(url: str, references: list, refs: dict) -> None:
    from pyklog.connector.spark.typed_formats import client

    for r in references:
        if r["name"] in refs:
            continue
        v = client(url).get_version(r["subject"], r["version"])
        refs[r["name"]] = json.loads(v["schema"])
        _collect_refs(url, v.get("references") or [], refs)


# -- JSON Schema -> Arrow types -------------------------------------------------------------------


def _pointer(doc, fragment: str, ref: str):
    node = doc
    for part in [p for p in fragment.lstrip("/").split("/") if p]:
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            raise ConfigError(f"the JSON Schema's $ref {ref!r} points at nothing")
        node = node[part]
    return node


def _resolve(ref: str, root, refs: dict):
    """``(schema, its document)`` a ``$ref`` names."""
    name, _, fragment = ref.partition("#")
    if not name:
        return _pointer(root, fragment, ref), root
    doc = refs.get(name)
    if doc is None:
        raise ConfigError(f"the JSON Schema's $ref {ref!r} names no reference of the schema")
    return _pointer(doc, fragment, ref), doc


def _type(s, root, refs: dict, seen: tuple, read: bool) -> pa.DataType:
    """The Arrow type of schema ``s``; ``read``: the type pyarrow reads first (times as strings)."""
    if not isinstance(s, dict):
        raise ConfigError(f"the JSON Schema {json.dumps(s)[:80]} has no Spark type (give it a type)")
    if "$ref" in s:
        ref = s["$ref"]
        if ref in seen:
            raise ConfigError(f"the JSON Schema refers to itself through {ref!r}: recursive schemas have no Spark type")
        target, doc = _resolve(ref, root, refs)
        return _type(target, doc, refs, seen + (ref,), read)
    for key in ("oneOf", "anyOf"):
        if key in s:
            members = [m for m in s[key] if not (isinstance(m, dict) and m.get("type") == "null")]
            if len(members) != 1:
                raise ConfigError(
                    f"the JSON Schema's {key} of {len(members)} non-null schemas has no single Spark type"
                )
            return _type(members[0], root, refs, seen, read)
    t = s.get("type")
    if isinstance(t, list):
        ts = [x for x in t if x != "null"]
        if len(ts) != 1:
            raise ConfigError(f"the JSON Schema's type list {t} has no single Spark type")
        t = ts[0]
    if t is None:
        if "properties" in s or "additionalProperties" in s:
            t = "object"
        elif "items" in s:
            t = "array"
        elif "enum" in s and all(isinstance(v, str) for v in s["enum"] if v is not None):
            t = "string"
    if t == "object":
        props = s.get("properties")
        if props:
            return pa.struct([pa.field(n, _type(p, root, refs, seen, read)) for n, p in props.items()])
        extra = s.get("additionalProperties")
        if isinstance(extra, dict):
            return pa.map_(pa.string(), _type(extra, root, refs, seen, read))
        raise ConfigError(
            "a JSON Schema object without properties has no Spark type (give it properties, or "
            "additionalProperties with a schema for a map)"
        )
    if t == "array":
        items = s.get("items")
        if not isinstance(items, dict):
            raise ConfigError("a JSON Schema array needs one schema in items to have a Spark type")
        return pa.list_(_type(items, root, refs, seen, read))
    if t == "string":
        fmt = s.get("format")
        if fmt == "date-time" and not read:
            return TIMESTAMP
        if fmt == "date" and not read:
            return pa.date32()
        return pa.string()
    simple = {"integer": pa.int64(), "number": pa.float64(), "boolean": pa.bool_()}
    if t in simple:
        return simple[t]
    raise ConfigError(f"the JSON Schema type {t!r} has no Spark type")


_TYPES: dict = {}


def _types(text: str) -> tuple[pa.DataType, pa.DataType, bool]:
    """``(column type, the type read first, whether pyarrow.json can read it)`` (cached)."""
    got = _TYPES.get(text)
    if got is None:
        doc = json.loads(text)
        s, refs = doc["schema"], doc["refs"]
        target = _type(s, s, refs, (), False)
        read = _type(s, s, refs, (), True)
        got = _TYPES[text] = (target, read, not _has_map(read))
    return got


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t):
        return _has_map(t.value_type)
    return False


def arrow_type(text: str) -> pa.DataType:
    return _types(text)[0]


# -- decoding -------------------------------------------------------------------------------------


def _finish(arr: pa.Array, target: pa.DataType) -> pa.Array:
    """``arr`` (times as strings) as ``target``: string leaves cast to timestamp / date."""
    if arr.type == target:
        return arr
    if pa.types.is_struct(target):
        children = arr.flatten()  # each child with the struct's nulls (no hidden values left)
        return pa.StructArray.from_arrays(
            [_finish(c, target.field(i).type) for i, c in enumerate(children)],
            fields=[target.field(i) for i in range(target.num_fields)],
            mask=arr.is_null(),
        )
    if pa.types.is_list(target):
        return pa.ListArray.from_arrays(arr.offsets, _finish(arr.values, target.value_type), mask=arr.is_null())
    if pa.types.is_map(target):
        return pa.MapArray.from_arrays(arr.offsets, arr.keys, _finish(arr.items, target.item_type), mask=arr.is_null())
    return arr.cast(target)


def _clean(payload: bytes) -> bytes:
    # a raw line break can only be whitespace in valid JSON: one record stays one line
    if b"\n" in payload or b"\r" in payload:
        return payload.replace(b"\n", b" ").replace(b"\r", b" ")
    return payload


def _read(payloads: list, read: pa.DataType, bulk: bool) -> pa.Array:
    """The payloads (JSON texts) as one Arrow array of ``read``; raises when any does not fit."""
    if not payloads:
        return pa.array([], read)
    if bulk:
        import pyarrow.json as pj

        data = b"".join(b'{"v":' + _clean(p) + b"}\n" for p in payloads)
        table = pj.read_json(
            io.BytesIO(data),
            read_options=pj.ReadOptions(block_size=max(1 << 20, len(data) + 1)),
            parse_options=pj.ParseOptions(
                explicit_schema=pa.schema([pa.field("v", read)]), unexpected_field_behavior="ignore"
            ),
        )
        if table.num_rows != len(payloads):
            raise ValueError(f"{table.num_rows} JSON values in {len(payloads)} records")
        return table.column(0).combine_chunks()
    return pa.array([json.loads(p) for p in payloads], read)


def decode(fmt, values: list) -> tuple[pa.Array, list]:
    """``(the column as an Arrow array, error message or None per value)``."""
    from pyklog.connector.schema_registry.wire import WireFormatError, decode_header

    target, read, bulk = _types(fmt.schema)
    confluent = fmt.fmt == "json-confluent"
    lookup = IdLookup(fmt.registry_url, "JSON") if confluent else None
    errors: list = [None] * len(values)
    payloads, where = [], []
    for j, v in enumerate(values):
        if v is None:
            continue
        if confluent:
            try:
                schema_id, _, start = decode_header(v)
                lookup.get(schema_id)
            except (WireFormatError, ValueError) as e:
                errors[j] = f"{type(e).__name__}: {e}"
                continue
            v = v[start:]
        payloads.append(v)
        where.append(j)
    try:
        good = _finish(_read(payloads, read, bulk), target)
    except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
        good = None
        first_error = e
    if good is None:  # read each record alone: which ones are bad
        parts = []
        for p, j in zip(payloads, where):
            try:
                parts.append(_finish(_read([p], read, bulk), target))
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as e:
                errors[j] = f"not JSON of the column's schema: {e}" if str(e) else type(e).__name__
                parts.append(pa.nulls(1, target))
        if not any(errors[j] for j in where):  # each alone reads: the batch did not (should not happen)
            raise first_error
        good = pa.concat_arrays(parts) if parts else pa.array([], target)
    # place the records' values among the nulls (tombstones, bad headers)
    if len(where) == len(values):
        return good, errors
    import pyarrow.compute as pc

    idx = [None] * len(values)
    for k, j in enumerate(where):
        idx[j] = k
    return pc.take(good, pa.array(idx, pa.int64())), errors
