"""The sink's JSON Schema and Protobuf typed columns: schemas derived from Spark types, checks of a
column's type against a given schema, and the encoders (executor side).

``json`` / ``json-confluent``: one JSON object per row, as Spark's ``to_json`` writes it (timestamps
as ISO-8601 strings in UTC, dates ``yyyy-MM-dd``, decimals as numbers, binary as base64 strings),
except that a null field is written as ``null`` (``to_json`` leaves it out); in Confluent's wire
format (magic byte 0, the 4-byte schema id, the UTF-8 JSON) for ``json-confluent``.  The JSON
Schema is the given one or :func:`json_schema_for` of the column's type.

``protobuf`` / ``protobuf-confluent``: the message of a given ``.proto`` (``valueMessageName``, or
the file's first message) or :func:`proto_for` of the column's type; Confluent's wire format adds the
message indexes (``0`` alone for a file's first message).  Messages are built from the row's
Python values by protobuf's C implementation (upb): one constructor call per record with the nested
dicts, lists and datetimes, one ``SerializeToString``.

Rows that do not fit fail the task naming the row and the field (FAILFAST): a null where the schema
has none (a required JSON property, a Protobuf field without presence, an element of a repeated
field or a map value), a value the schema's type refuses.
"""

from __future__ import annotations

import base64
import json
import re
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pyklog.broker.errors import ConfigError, PyklogError

JSON_FORMATS = ("json", "json-confluent")
PROTOBUF_FORMATS = ("protobuf", "protobuf-confluent")

_DRAFT = "http://json-schema.org/draft-07/schema#"


class RecordEncodeError(PyklogError):
    """A row's key or value does not fit the schema it is written with (FAILFAST)."""


@dataclass(frozen=True)
class WriteFormat:
    """How one of ``key`` / ``value`` is written: the schema (Avro or JSON Schema JSON text, or the
    Protobuf files and message as :func:`.typed_protobuf.schema_text` gives them) and, for the
    ``-confluent`` formats, the registered schema's id and the subject it was found under."""

    column: str
    fmt: str
    schema: str
    schema_id: int | None = None
    subject: str | None = None
    #: Protobuf: the message's indexes in its file (Confluent's wire format writes them)
    indexes: tuple | None = None

    @property
    def header(self) -> bytes:
        if self.schema_id is None:
            return b""
        from pyklog.connector.schema_registry.wire import encode

        return encode(self.schema_id, b"", list(self.indexes) if self.indexes is not None else None)


def _flag(opts: dict, name: str, default: bool) -> bool:
    v = opts.get(name)
    if v is None:
        return default
    s = v.strip().lower()
    if s not in ("true", "false"):
        raise ConfigError(f"option '{name}': expected true or false, read {v!r}")
    return s == "true"


# -- Spark type -> JSON Schema --------------------------------------------------------------------


def json_schema_for(data_type, nullable: bool = False, title: str | None = None, path: str = "value") -> dict:
    """The JSON Schema of a Spark type: struct -> ``object`` with ``properties`` in the struct's
    order and ``required`` the non-nullable fields; array -> ``array`` of ``items``;
    ``map<string, _>`` -> ``object`` with ``additionalProperties``; boolean; byte, short, int,
    long -> ``integer``; float, double, decimal -> ``number``; string; binary -> ``string``
    (``contentEncoding: base64``); date -> ``string`` (``format: date``); timestamp and
    timestamp_ntz -> ``string`` (``format: date-time``).  A nullable type's ``type`` is the list
    ``[t, "null"]``.  ``title``: the top-level object's title (the record name of the record subject
    strategies).  ConfigError naming the field for a type JSON cannot hold."""
    from pyspark.sql import types as T

    dt = data_type
    if isinstance(dt, T.BooleanType):
        s: dict = {"type": "boolean"}
    elif isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        s = {"type": "integer"}
    elif isinstance(dt, (T.FloatType, T.DoubleType, T.DecimalType)):
        s = {"type": "number"}
    elif isinstance(dt, T.StringType):
        s = {"type": "string"}
    elif isinstance(dt, T.BinaryType):
        s = {"type": "string", "contentEncoding": "base64"}
    elif isinstance(dt, T.DateType):
        s = {"type": "string", "format": "date"}
    elif isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        s = {"type": "string", "format": "date-time"}
    elif isinstance(dt, T.ArrayType):
        s = {"type": "array", "items": json_schema_for(dt.elementType, dt.containsNull, None, f"{path}[]")}
    elif isinstance(dt, T.MapType):
        if not isinstance(dt.keyType, T.StringType):
            raise ConfigError(
                f"field {path}: JSON objects have string keys, the column's map has {dt.keyType.simpleString()} keys"
            )
        s = {
            "type": "object",
            "additionalProperties": json_schema_for(dt.valueType, dt.valueContainsNull, None, f"{path}{{}}"),
        }
    elif isinstance(dt, T.StructType):
        s = {"type": "object"}
        if title:
            s = {"$schema": _DRAFT, "title": title, "type": "object"}
        s["properties"] = {f.name: json_schema_for(f.dataType, f.nullable, None, f"{path}.{f.name}") for f in dt.fields}
        s["required"] = [f.name for f in dt.fields if not f.nullable]
    else:
        raise ConfigError(f"field {path}: Spark type {dt.simpleString()} has no JSON Schema type")
    if nullable:
        s["type"] = [s["type"], "null"]
    return s


def _json_types(s: dict) -> set | None:
    t = s.get("type")
    if t is None:
        return None
    return {t} if isinstance(t, str) else set(t)


def _json_deref(s, root: dict):
    from pyklog.connector.spark.typed_json import _resolve

    seen = 0
    while isinstance(s, dict) and "$ref" in s and seen < 32:
        s, _doc = _resolve(s["$ref"], root, {})
        seen += 1
    if isinstance(s, dict):
        for key in ("oneOf", "anyOf"):
            alts = s.get(key)
            if isinstance(alts, list):
                rest = [a for a in alts if not (isinstance(a, dict) and a.get("type") == "null")]
                if len(rest) == 1 and len(rest) < len(alts):
                    inner = dict(_json_deref(rest[0], root))
                    types = _json_types(inner)
                    if types is not None:
                        inner["type"] = sorted(types | {"null"})
                    return inner
    return s


def check_json_writable(data_type, schema, path: str, root: dict | None = None) -> None:
    """ConfigError naming ``path`` when values of the Spark type cannot be written as the JSON
    Schema ``schema``: its ``type`` must allow the JSON the Spark type becomes (ints as
    ``integer`` or ``number``, other numbers as ``number``, strings, binary, dates and timestamps as
    ``string``, structs and maps as ``object``, arrays as ``array``); a struct field the object's
    ``properties`` lack needs ``additionalProperties`` not false, a ``required`` property the struct
    lacks is an error.  Nulls are checked row by row when writing."""
    from pyspark.sql import types as T

    root = schema if root is None else root
    if not isinstance(schema, dict):
        if schema is False:
            raise ConfigError(f"field {path}: the JSON Schema allows no value")
        return
    schema = _json_deref(schema, root)
    types = _json_types(schema)
    dt = data_type
    if isinstance(dt, T.NullType) or types is None:
        return
    if isinstance(dt, T.BooleanType):
        want = {"boolean"}
    elif isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        want = {"integer", "number"}
    elif isinstance(dt, (T.FloatType, T.DoubleType, T.DecimalType)):
        want = {"number"}
    elif isinstance(dt, (T.StringType, T.BinaryType, T.DateType, T.TimestampType, T.TimestampNTZType)):
        want = {"string"}
    elif isinstance(dt, T.ArrayType):
        want = {"array"}
    elif isinstance(dt, (T.MapType, T.StructType)):
        want = {"object"}
    else:
        raise ConfigError(f"field {path}: Spark type {dt.simpleString()} has no JSON Schema type")
    if not (types & want):
        raise ConfigError(
            f"field {path}: Spark type {dt.simpleString()} cannot be written as JSON Schema type "
            f"{'/'.join(sorted(types - {'null'})) or 'null'}"
        )
    if isinstance(dt, T.ArrayType) and isinstance(schema.get("items"), dict):
        check_json_writable(dt.elementType, schema["items"], f"{path}[]", root)
    elif isinstance(dt, T.MapType) and isinstance(schema.get("additionalProperties"), dict):
        check_json_writable(dt.valueType, schema["additionalProperties"], f"{path}{{}}", root)
    elif isinstance(dt, T.StructType):
        props = schema.get("properties") or {}
        closed = schema.get("additionalProperties") is False
        for f in dt.fields:
            if f.name in props:
                check_json_writable(f.dataType, props[f.name], f"{path}.{f.name}", root)
            elif closed:
                raise ConfigError(
                    f"field {path}.{f.name}: not a property of the JSON Schema's object (its properties: "
                    f"{', '.join(props)}) and it allows no other"
                )
        mine = {f.name for f in dt.fields}
        for name in schema.get("required") or []:
            if name not in mine:
                raise ConfigError(f"field {path}.{name}: the JSON Schema requires it and the column has no such field")


def json_nulls(schema, root: dict | None = None) -> dict:
    """``{field path: {nested...}}``: the tree of struct fields whose JSON Schema allows no null
    (``None`` leaves), for the row-wise null check."""
    root = schema if root is None else root
    out: dict = {}
    if not isinstance(schema, dict):
        return out
    schema = _json_deref(schema, root)
    props = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    for name, sub in props.items():
        sub = _json_deref(sub, root) if isinstance(sub, dict) else sub
        types = _json_types(sub) if isinstance(sub, dict) else None
        refuses = (types is not None and "null" not in types) or name in required
        child = json_nulls(sub, root) if isinstance(sub, dict) and sub.get("properties") else {}
        if refuses or child:
            out[name] = (refuses, child)
    return out


# -- Spark type -> .proto -------------------------------------------------------------------------

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def _proto_name(name: str, path: str) -> str:
    if not _IDENT.match(name):
        raise ConfigError(f"field {path}: {name!r} is not a Protobuf identifier (letters, digits, _)")
    return name


def _message_name(field: str, taken: set) -> str:
    base = "".join(p[:1].upper() + p[1:] for p in field.split("_") if p) or "Message"
    name = base
    n = 2
    while name in taken:
        name, n = f"{base}{n}", n + 1
    taken.add(name)
    return name


def proto_for(data_type, record_name: str = "topLevelRecord", package: str = "") -> str:
    """``.proto`` (proto3) text of a Spark struct type: a message ``record_name`` (in ``package``)
    whose fields are numbered 1, 2, ... in the struct's order; a nested struct is a nested message
    named after its field (``address`` -> ``Address``); arrays are ``repeated``; ``map<k, v>``
    (string or integral keys) a map; boolean -> bool, byte/short/int -> int32, long -> int64,
    float, double, string, binary -> bytes, decimal -> string (its exact digits), timestamp and
    timestamp_ntz -> google.protobuf.Timestamp (the file imports ``google/protobuf/timestamp.proto``);
    a nullable scalar is ``optional`` (presence), a message field has presence already.  ConfigError
    naming the field for a type Protobuf cannot hold (dates, arrays of arrays, maps of arrays or maps,
    ...)."""
    from pyspark.sql import types as T

    if not isinstance(data_type, T.StructType):
        raise ConfigError(
            f"a Protobuf column is a struct (a message); the column is {data_type.simpleString()} "
            "(wrap it: struct(col) AS value)"
        )
    uses_time = [False]

    def scalar(dt, path: str) -> str | None:
        if isinstance(dt, T.BooleanType):
            return "bool"
        if isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
            return "int32"
        if isinstance(dt, T.LongType):
            return "int64"
        if isinstance(dt, T.FloatType):
            return "float"
        if isinstance(dt, T.DoubleType):
            return "double"
        if isinstance(dt, (T.StringType, T.DecimalType)):
            return "string"
        if isinstance(dt, T.BinaryType):
            return "bytes"
        if isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
            uses_time[0] = True
            return "google.protobuf.Timestamp"
        if isinstance(dt, T.DateType):
            raise ConfigError(
                f"field {path}: Protobuf has no date type; cast the column to timestamp or string, or give valueSchema"
            )
        return None

    def element(dt, field: str, path: str, nested: list, taken: set) -> str:
        t = scalar(dt, path)
        if t is not None:
            return t
        if isinstance(dt, T.StructType):
            name = _message_name(field, taken)
            nested.append(message(dt, name, path))
            return name
        raise ConfigError(f"field {path}: Spark type {dt.simpleString()} cannot be a Protobuf element here")

    def message(st, name: str, path: str) -> list:
        lines = [f"message {name} {{"]
        nested: list = []
        taken = {name}
        for number, f in enumerate(st.fields, 1):
            fname = _proto_name(f.name, f"{path}.{f.name}")
            fpath = f"{path}.{f.name}"
            dt = f.dataType
            if isinstance(dt, T.ArrayType):
                if isinstance(dt.elementType, (T.ArrayType, T.MapType)):
                    raise ConfigError(f"field {fpath}: Protobuf has no repeated field of arrays or maps")
                decl = f"repeated {element(dt.elementType, f.name, fpath + '[]', nested, taken)}"
            elif isinstance(dt, T.MapType):
                k = dt.keyType
                if isinstance(k, T.StringType):
                    key = "string"
                elif isinstance(k, (T.ByteType, T.ShortType, T.IntegerType)):
                    key = "int32"
                elif isinstance(k, T.LongType):
                    key = "int64"
                elif isinstance(k, T.BooleanType):
                    key = "bool"
                else:
                    raise ConfigError(
                        f"field {fpath}: Protobuf map keys are strings, integers or bools, not {k.simpleString()}"
                    )
                if isinstance(dt.valueType, (T.ArrayType, T.MapType)):
                    raise ConfigError(f"field {fpath}: Protobuf has no map of arrays or maps")
                decl = f"map<{key}, {element(dt.valueType, f.name, fpath + '{}', nested, taken)}>"
            else:
                t = element(dt, f.name, fpath, nested, taken)
                is_message = isinstance(dt, (T.StructType, T.TimestampType, T.TimestampNTZType))
                decl = f"optional {t}" if f.nullable and not is_message else t
            lines.append(f"  {decl} {fname} = {number};")
        for n in nested:
            lines.extend("  " + line for line in n)
        lines.append("}")
        return lines

    body = message(data_type, _proto_name(record_name, "value"), "value")
    head = ['syntax = "proto3";']
    if package:
        head.append(f"package {package};")
    if uses_time[0]:
        head.append('import "google/protobuf/timestamp.proto";')
    return "\n".join(head + [""] + body) + "\n"


# -- Spark type against a Protobuf message ---------------------------------------------------------

_PB_INTS = {5, 17, 15, 3, 18, 16, 7, 13, 6, 4}  # the int32/64, sint, sfixed, fixed, uint types
_PB_FLOAT, _PB_DOUBLE, _PB_BOOL, _PB_STRING, _PB_BYTES, _PB_ENUM, _PB_MESSAGE = 2, 1, 8, 9, 12, 14, 11
_PB_32 = {5, 17, 15}  # int32, sint32, sfixed32
_PB_U32 = {7, 13}  # fixed32, uint32


def _pb_type_name(fd) -> str:
    if fd.type == _PB_MESSAGE:
        return fd.message_type.full_name
    names = {1: "double", 2: "float", 8: "bool", 9: "string", 12: "bytes", 14: "enum"}
    return names.get(fd.type, "integer")


def check_proto_writable(data_type, desc, path: str) -> None:
    """ConfigError naming ``path`` when values of the Spark struct type cannot be written as the
    message ``desc`` (a Descriptor): fields by name; ints to any integer type wide enough (byte,
    short, int to 32 or 64 bits; long to 64 bits) or to float/double; float to float/double, double
    to double; string to string or enum; binary to bytes; decimal to string; timestamps to
    google.protobuf.Timestamp; structs to messages; arrays to repeated fields; maps to maps."""
    from pyspark.sql import types as T

    if not isinstance(data_type, T.StructType):
        raise ConfigError(f"field {path}: a Protobuf message is written from a struct, not {data_type.simpleString()}")
    by_name = desc.fields_by_name
    for f in data_type.fields:
        fd = by_name.get(f.name)
        fpath = f"{path}.{f.name}"
        if fd is None:
            raise ConfigError(
                f"field {fpath}: not in the Protobuf message {desc.full_name} (its fields: {', '.join(by_name)})"
            )
        dt = f.dataType
        is_map = fd.type == _PB_MESSAGE and fd.message_type.GetOptions().map_entry
        if is_map:
            if not isinstance(dt, T.MapType):
                _pb_refuse(dt, fd, fpath)
            entry = fd.message_type
            _check_pb_value(dt.keyType, entry.fields_by_name["key"], fpath + "{key}")
            _check_pb_value(dt.valueType, entry.fields_by_name["value"], fpath + "{}")
        elif fd.is_repeated:
            if not isinstance(dt, T.ArrayType):
                _pb_refuse(dt, fd, fpath)
            _check_pb_value(dt.elementType, fd, fpath + "[]")
        else:
            _check_pb_value(dt, fd, fpath)


def _pb_refuse(dt, fd, path: str):
    rep = "repeated " if fd.is_repeated else ""
    raise ConfigError(
        f"field {path}: Spark type {dt.simpleString()} cannot be written as Protobuf {rep}{_pb_type_name(fd)}"
    )


def _check_pb_value(dt, fd, path: str) -> None:
    from pyspark.sql import types as T

    t = fd.type
    if isinstance(dt, T.NullType):
        return
    if isinstance(dt, T.BooleanType):
        ok = t == _PB_BOOL
    elif isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
        ok = t in _PB_INTS or t in (_PB_FLOAT, _PB_DOUBLE)
    elif isinstance(dt, T.LongType):
        ok = (t in _PB_INTS and t not in _PB_32 and t not in _PB_U32) or t == _PB_DOUBLE
    elif isinstance(dt, T.FloatType):
        ok = t in (_PB_FLOAT, _PB_DOUBLE)
    elif isinstance(dt, T.DoubleType):
        ok = t == _PB_DOUBLE
    elif isinstance(dt, T.StringType):
        ok = t in (_PB_STRING, _PB_ENUM)
    elif isinstance(dt, T.DecimalType):
        ok = t == _PB_STRING
    elif isinstance(dt, T.BinaryType):
        ok = t == _PB_BYTES
    elif isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        ok = t == _PB_MESSAGE and fd.message_type.full_name == "google.protobuf.Timestamp"
    elif isinstance(dt, T.StructType):
        if t != _PB_MESSAGE or fd.message_type.GetOptions().map_entry:
            _pb_refuse(dt, fd, path)
        check_proto_writable(dt, fd.message_type, path)
        return
    else:
        ok = False
    if not ok:
        _pb_refuse(dt, fd, path)


def message_indexes(desc) -> list:
    """Confluent's message indexes of a message: its index in the file (and in each enclosing message)."""
    path = []
    d = desc
    while d.containing_type is not None:
        path.append(list(d.containing_type.nested_types).index(d))
        d = d.containing_type
    path.append(list(d.file.message_types_by_name.values()).index(d))
    return path[::-1]


# -- executor side: Arrow -> JSON -----------------------------------------------------------------


def _check_nulls(arr: pa.Array, tree: dict, path: str, fmt_desc: str) -> None:
    """FAILFAST on a null in a struct field the schema gives no null (``tree``: :func:`json_nulls`)."""
    if not tree or not pa.types.is_struct(arr.type):
        return
    valid = arr.is_valid()
    typ = arr.type
    for name, (refuses, child) in tree.items():
        i = typ.get_field_index(name)
        if i < 0:
            continue
        col = arr.field(i)
        if refuses and col.null_count:
            bad = pc.and_(col.is_null(), valid)
            if pc.any(bad).as_py():
                row = pc.index(bad, True).as_py()
                raise RecordEncodeError(
                    f"pyklog sink: row {row} of a batch does not fit the {fmt_desc}: field {path}.{name} is null "
                    "and the schema has no null there; nothing of the task is committed (exactly-once) and the task fails"
                )
        if child:
            _check_nulls(col, child, f"{path}.{name}", fmt_desc)


def _b64(arr: pa.Array) -> pa.Array:
    return pa.array([None if b is None else base64.b64encode(b).decode() for b in arr.to_pylist()], pa.string())


def _nested_with(arr: pa.Array, fn, *, keys: bool) -> pa.Array:
    """``arr`` with ``fn`` applied to the children of a struct, list or map (to map keys too if
    ``keys``), nulls kept; any other array as it is."""
    t = pa.types
    typ = arr.type
    if not (t.is_struct(typ) or t.is_list(typ) or t.is_large_list(typ) or t.is_map(typ)):
        return arr
    if arr.offset and not t.is_struct(typ):
        arr = pa.concat_arrays([arr])  # the offsets of a sliced list start past 0: rebase them
    mask = arr.is_null() if arr.null_count else None
    if t.is_struct(typ):
        children = [fn(arr.field(i)) for i in range(typ.num_fields)]
        return pa.StructArray.from_arrays(children, names=[typ.field(i).name for i in range(typ.num_fields)], mask=mask)
    if t.is_map(typ):
        return pa.MapArray.from_arrays(arr.offsets, fn(arr.keys) if keys else arr.keys, fn(arr.items), mask=mask)
    cls = pa.LargeListArray if t.is_large_list(typ) else pa.ListArray
    return cls.from_arrays(arr.offsets, fn(arr.values), mask=mask)


def json_ready(arr: pa.Array) -> pa.Array:
    """``arr`` with the values JSON has no type for as to_json writes them, computed in Arrow:
    timestamps -> ISO-8601 strings in UTC (``2026-01-02T03:04:05.123456Z``), dates -> ``yyyy-MM-dd``,
    decimals -> the nearest float64, binary -> base64 strings."""
    t = pa.types
    typ = arr.type
    if t.is_timestamp(typ):
        utc = arr.cast(pa.timestamp("us", "UTC"), safe=False) if typ.tz else arr.cast(pa.timestamp("us"), safe=False)
        text = pc.strftime(utc, format="%Y-%m-%dT%H:%M:%S", locale="C")
        return pc.binary_join_element_wise(text, pa.scalar("Z"), "")
    if t.is_date(typ):
        return arr.cast(pa.string())
    if t.is_decimal(typ):  # through the digits: the nearest double (a direct cast may not round so)
        return arr.cast(pa.string()).cast(pa.float64())
    if t.is_binary(typ) or t.is_large_binary(typ) or t.is_fixed_size_binary(typ):
        return _b64(arr)
    return _nested_with(arr, json_ready, keys=True)


def encode_json(fmt, arr: pa.Array, tree: dict) -> pa.Array:
    """The JSON (``json``) or wire-format (``json-confluent``) bytes of every value of ``arr``."""
    what = f"{fmt.column} column's JSON Schema ({fmt.subject or 'given'})"
    _check_nulls(arr, tree, fmt.column, what)
    values = json_ready(arr).to_pylist(maps_as_pydicts="strict")
    header = fmt.header
    dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
    out: list = []
    append = out.append
    row = 0
    try:
        for row, v in enumerate(values):  # noqa: B007 - the row is named in the error
            append(None if v is None else header + dumps(v).encode())
    except ValueError as e:
        raise RecordEncodeError(
            f"pyklog sink: row {row} of a batch does not fit the {what}: {e} (JSON has no NaN or infinity); "
            "nothing of the task is committed (exactly-once) and the task fails"
        ) from None
    return pa.array(out, type=pa.binary())


# -- executor side: Arrow -> Protobuf --------------------------------------------------------------


def proto_ready(arr: pa.Array) -> pa.Array:
    """``arr`` with decimals as their exact digits (a Protobuf string field)."""
    t = pa.types
    typ = arr.type
    if t.is_decimal(typ):
        return arr.cast(pa.string())
    if t.is_timestamp(typ) and not typ.tz:
        return arr.cast(pa.timestamp("us", "UTC"))
    return _nested_with(arr, proto_ready, keys=False)


def _has_null_scalar(desc) -> dict:
    """``{field: kind}`` of the message's fields a null does not fit: ``scalar`` (no presence),
    ``repeated`` / ``map`` (a null element or value); messages map to their own."""
    out: dict = {}
    for fd in desc.fields:
        is_map = fd.type == _PB_MESSAGE and fd.message_type.GetOptions().map_entry
        if is_map:
            out[fd.name] = ("map", fd.message_type.fields_by_name["value"])
        elif fd.is_repeated:
            out[fd.name] = ("repeated", fd)
        elif not fd.has_presence:
            out[fd.name] = ("scalar", fd)
        elif fd.type == _PB_MESSAGE:
            out[fd.name] = ("message", fd)
    return out


def _find_bad(desc, value: dict, path: str) -> str:
    """Why a row's dict does not build message ``desc``, naming the field."""
    kinds = _has_null_scalar(desc)
    for name, v in value.items():
        fpath = f"{path}.{name}"
        kind, fd = kinds.get(name, ("other", None))
        if v is None:
            if kind == "scalar":
                return f"field {fpath} is null and the Protobuf field has no presence (declare it optional)"
            continue
        if kind == "repeated" and any(x is None for x in v):
            return f"field {fpath} holds a null element: a repeated Protobuf field holds no null"
        if kind == "map" and any(x is None for x in v.values()):
            return f"field {fpath} holds a null map value: a Protobuf map holds no null"
        if kind == "message" and isinstance(v, dict) and fd.message_type.full_name != "google.protobuf.Timestamp":
            inner = _find_bad(fd.message_type, v, fpath)
            if inner:
                return inner
        if kind in ("repeated", "map") and fd.type == _PB_MESSAGE and not fd.message_type.GetOptions().map_entry:
            for x in v:
                if isinstance(x, dict):
                    inner = _find_bad(fd.message_type, x, fpath + "[]")
                    if inner:
                        return inner
        from google.protobuf import message_factory

        try:
            message_factory.GetMessageClass(desc)(**{name: v})
        except Exception as e:  # noqa: BLE001 - upb raises TypeError, ValueError
            return f"field {fpath}: {type(e).__name__}: {e}"
    return ""


def _no_none(desc, value: dict) -> dict:
    """The row's dict with the nulls of fields with presence left out (unset), nested messages too."""
    out = {}
    fields = desc.fields_by_name
    for k, v in value.items():
        fd = fields.get(k)
        if v is None:
            if fd is not None and not fd.has_presence and not fd.is_repeated:
                raise ValueError(f"field {k} is null")
            continue
        if (
            isinstance(v, dict)
            and fd is not None
            and fd.type == _PB_MESSAGE
            and not fd.message_type.GetOptions().map_entry
        ):
            if fd.message_type.full_name != "google.protobuf.Timestamp":
                v = _no_none(fd.message_type, v)
        elif isinstance(v, list) and fd is not None and fd.type == _PB_MESSAGE:
            v = [_no_none(fd.message_type, x) if isinstance(x, dict) else x for x in v]
        out[k] = v
    return out


def _needs_cleaning(desc) -> bool:
    """Whether a row's dict needs :func:`_no_none`: upb takes None for an unset top-level field
    but not inside a nested message's dict (a Timestamp is built from a datetime, not a dict)."""
    return any(
        fd.type == _PB_MESSAGE
        and fd.message_type.full_name != "google.protobuf.Timestamp"
        and not (fd.message_type.GetOptions().map_entry and fd.message_type.fields_by_name["value"].type != _PB_MESSAGE)
        for fd in desc.fields
    )


def encode_protobuf(fmt, arr: pa.Array) -> pa.Array:
    """The Protobuf (``protobuf``) or wire-format (``protobuf-confluent``) bytes of every value of ``arr``."""
    from pyklog.connector.spark.typed_protobuf import _reader

    desc, cls = _reader(fmt.schema)
    values = proto_ready(arr).to_pylist(maps_as_pydicts="strict")
    header = fmt.header
    clean = _needs_cleaning(desc)
    strict = {name for name, (kind, _fd) in _has_null_scalar(desc).items() if kind == "scalar"}
    out: list = []
    append = out.append
    row = 0
    try:
        for row, v in enumerate(values):  # noqa: B007 - the row is named in the error
            if v is None:
                append(None)
                continue
            if strict and any(v.get(n, 0) is None for n in strict):
                raise ValueError("null")
            m = cls(**(_no_none(desc, v) if clean else v))
            append(header + m.SerializeToString())
    except Exception as e:  # noqa: BLE001 - upb raises TypeError, ValueError
        why = _find_bad(desc, values[row], fmt.column) or f"{type(e).__name__}: {e}"
        raise RecordEncodeError(
            f"pyklog sink: row {row} of a batch does not fit the {fmt.column} column's Protobuf message "
            f"{desc.full_name} ({fmt.subject or 'given'}): {why}; nothing of the task is committed "
            "(exactly-once) and the task fails"
        ) from None
    return pa.array(out, type=pa.binary())
