"""Typed ``key`` / ``value`` columns for the ``pyklog`` sink: Spark columns encoded as Avro (here),
JSON or Protobuf (:mod:`.typed_write_formats`, resolved by :mod:`.typed_write_resolve`).

Options (sink; the source's names where they mean the same)::

    valueFormat / keyFormat   binary (default: the column is string or binary, written as is) |
                              avro (the Avro binary of the column) | avro-confluent (Confluent's
                              wire format: magic byte 0, the 4-byte schema id, the Avro payload)
    valueSchema / keySchema   the Avro schema (JSON) to write with; default: derived from the
                              column's Spark type as Spark's ``to_avro`` derives it
                              (:func:`avro_schema_for`)
    valueRecordName / keyRecordName   the full name (``namespace.Name``) of the derived record
                              (default ``topLevelRecord``, as ``to_avro``)
    schema.registry.url       the registry (``avro-confluent``)
    value.subject.name.strategy / key.subject.name.strategy   TopicNameStrategy (default,
                              ``<topic>-value``), RecordNameStrategy (the record's full name),
                              TopicRecordNameStrategy (``<topic>-<full name>``); Confluent's
                              class names are accepted too
    valueSubject / keySubject the subject itself (wins over the strategy)
    auto.register.schemas     true (default: the schema is registered under the subject, which
                              checks it against the subject's compatibility) | false (it must be
                              registered already: looked up)
    valueSchemaId / keySchemaId                 write with this registered schema
    valueSchemaVersion / keySchemaVersion       write with this version of the subject
    use.latest.version        true: write with the subject's latest version

Everything that needs the registry runs on the driver when the writer is created, before a task
starts (:func:`resolve_write_formats`): a schema the subject's compatibility refuses fails the
write with the registry's message and nothing is written.  The column's Spark type is checked
against the chosen schema there too (:func:`check_writable`; a ConfigError naming the field).

Encoding (:func:`encode_column`, executor side, per Arrow batch): time columns are turned into
their Avro numbers in Arrow (no ``datetime`` per value); a flat record is then encoded column by
column in Arrow (:func:`_columnar`, no Python object per row); any other column becomes Python
values with one ``to_pylist`` (maps as dicts) and fastavro's C ``schemaless_writer`` writes each
record (no Python step per field).  The result is a binary Arrow column for the bulk record encoder.  A null struct is
a null value (a tombstone), as Confluent's serializer writes ``None``.  A row that does not fit the
schema (a null in a non-nullable field, an enum symbol the schema does not have) fails the task
naming the column, the row and the field (FAILFAST).  Pure functions of picklable values.
"""

from __future__ import annotations

import io
import json
import math
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.typed_write_formats import RecordEncodeError, WriteFormat

__all__ = [
    "WRITE_FORMATS",
    "RecordEncodeError",
    "WriteFormat",
    "avro_schema_for",
    "check_writable",
    "encode_column",
    "resolve_write_formats",
]

WRITE_FORMATS = (
    "binary",
    "avro",
    "avro-confluent",
    "json",
    "json-confluent",
    "protobuf",
    "protobuf-confluent",
)


# -- Spark type -> Avro schema, as Spark's SchemaConverters.toAvroType ----------------------------


def _min_bytes_for_precision(precision: int) -> int:
    n = 1
    while math.pow(2.0, 8 * n - 1) < math.pow(10.0, precision):
        n += 1
    return n


def avro_schema_for(data_type, nullable: bool = False, record_name: str = "topLevelRecord", namespace: str = ""):
    """The Avro schema (JSON-able) of a Spark type, as Spark's ``to_avro`` derives it
    (``SchemaConverters.toAvroType``): a struct is a record named ``record_name`` in ``namespace``
    whose nested records are named after their fields in the namespace ``<namespace>.<name>``;
    nullable types are unions ``[type, "null"]``; byte/short/int -> int, date -> int (date),
    timestamp -> long (timestamp-micros), timestamp_ntz -> long (local-timestamp-micros),
    decimal(p, s) -> fixed (decimal) of the fewest bytes that hold p digits, binary -> bytes,
    map<string, _> -> map.  ConfigError for a type Avro cannot hold (a map with non-string keys,
    intervals, variants, ...)."""
    from pyspark.sql import types as T

    dt = data_type
    if isinstance(dt, T.BooleanType):
        schema = "boolean"
    elif isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
        schema = "int"
    elif isinstance(dt, T.LongType):
        schema = "long"
    elif isinstance(dt, T.FloatType):
        schema = "float"
    elif isinstance(dt, T.DoubleType):
        schema = "double"
    elif isinstance(dt, T.StringType):
        schema = "string"
    elif isinstance(dt, T.BinaryType):
        schema = "bytes"
    elif isinstance(dt, T.NullType):
        return "null"
    elif isinstance(dt, T.DateType):
        schema = {"type": "int", "logicalType": "date"}
    elif isinstance(dt, T.TimestampNTZType):
        schema = {"type": "long", "logicalType": "local-timestamp-micros"}
    elif isinstance(dt, T.TimestampType):
        schema = {"type": "long", "logicalType": "timestamp-micros"}
    elif isinstance(dt, T.DecimalType):
        name = f"{record_name}.fixed" if not namespace else f"{namespace}.{record_name}.fixed"
        schema = {
            "type": "fixed",
            "name": name,
            "size": _min_bytes_for_precision(dt.precision),
            "logicalType": "decimal",
            "precision": dt.precision,
            "scale": dt.scale,
        }
    elif isinstance(dt, T.ArrayType):
        schema = {"type": "array", "items": avro_schema_for(dt.elementType, dt.containsNull, record_name, namespace)}
    elif isinstance(dt, T.MapType):
        if not isinstance(dt.keyType, T.StringType):
            raise ConfigError(
                f"field {record_name!r}: Avro maps have string keys, the column's map has "
                f"{dt.keyType.simpleString()} keys"
            )
        schema = {"type": "map", "values": avro_schema_for(dt.valueType, dt.valueContainsNull, record_name, namespace)}
    elif isinstance(dt, T.StructType):
        child_ns = f"{namespace}.{record_name}" if namespace else record_name
        schema = {
            "type": "record",
            "name": record_name,
            **({"namespace": namespace} if namespace else {}),
            "fields": [
                {"name": f.name, "type": avro_schema_for(f.dataType, f.nullable, f.name, child_ns)} for f in dt.fields
            ],
        }
    else:
        raise ConfigError(f"field {record_name!r}: Spark type {dt.simpleString()} has no Avro type")
    return [schema, "null"] if nullable else schema


def full_name(schema) -> str | None:
    """The full name of a named Avro schema (a record, enum or fixed), else None."""
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        ns = schema.get("namespace")
        return name if "." in name or not ns else f"{ns}.{name}"
    return None


# -- can the Spark type be written with the schema? -----------------------------------------------


def _register_names(schema, named: dict, namespace: str = "") -> None:
    """Remember ``schema``'s named types (full and short names) in ``named``."""
    if isinstance(schema, dict) and schema.get("type") in ("record", "enum", "fixed"):
        name = schema["name"]
        ns = schema.get("namespace", namespace)
        full = name if "." in name or not ns else f"{ns}.{name}"
        named[full] = schema
        named.setdefault(name.rsplit(".", 1)[-1], schema)


def _resolve(schema, named: dict):
    if isinstance(schema, str) and schema in named:
        return named[schema]
    if isinstance(schema, dict) and isinstance(schema.get("type"), (dict, list)):
        return _resolve(schema["type"], named)
    _register_names(schema, named)
    return schema


def _kind(schema) -> str:
    return schema if isinstance(schema, str) else schema.get("type") if isinstance(schema, dict) else "union"


def check_writable(data_type, schema, path: str, named: dict | None = None) -> None:
    """Raise ConfigError naming ``path`` (``value.address.city``) when values of the Spark type
    cannot be written with the Avro ``schema`` (JSON-able).  Matching as Spark's ``to_avro`` with a
    given schema: struct fields by name (a field the schema lacks is an error; a schema field the
    struct lacks needs a default or null), ints widen to long/float/double, float to double,
    string to string or enum, binary to bytes or fixed, decimal(p, s) to a decimal of scale s and
    precision >= p, date to int (date), timestamp to long (timestamp-millis/-micros); nullability
    is checked row by row when writing (a nullable column may hold no nulls)."""
    from pyspark.sql import types as T

    named = {} if named is None else named
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        members = [_resolve(m, named) for m in schema if m != "null"]
        if not members:
            raise ConfigError(f"field {path}: the schema allows only null")
        if len(members) > 1:
            raise ConfigError(
                f"field {path}: writing a union of several types ({', '.join(map(_kind, members))}) is not supported; "
                "use a union of null and one type"
            )
        return check_writable(data_type, members[0], path, named)
    kind = _kind(schema)
    logical = schema.get("logicalType") if isinstance(schema, dict) else None
    dt = data_type
    if isinstance(dt, T.NullType):
        return

    def refuse(why: str = ""):
        want = kind + (f" ({logical})" if logical else "")
        raise ConfigError(
            f"field {path}: Spark type {dt.simpleString()} cannot be written as Avro {want}"
            + (f": {why}" if why else "")
        )

    if isinstance(dt, T.BooleanType):
        ok = kind == "boolean"
    elif isinstance(dt, (T.ByteType, T.ShortType, T.IntegerType)):
        ok = kind in ("int", "long", "float", "double") and logical is None
    elif isinstance(dt, T.LongType):
        ok = kind in ("long", "float", "double") and logical is None
    elif isinstance(dt, T.FloatType):
        ok = kind in ("float", "double")
    elif isinstance(dt, T.DoubleType):
        ok = kind == "double"
    elif isinstance(dt, T.StringType):
        ok = kind in ("string", "enum")
    elif isinstance(dt, T.BinaryType):
        ok = kind in ("bytes", "fixed") and logical is None
    elif isinstance(dt, T.DateType):
        ok = kind == "int" and logical in ("date", None)
    elif isinstance(dt, (T.TimestampType, T.TimestampNTZType)):
        ok = kind == "long" and logical in (
            None,
            "timestamp-millis",
            "timestamp-micros",
            "local-timestamp-millis",
            "local-timestamp-micros",
        )
    elif isinstance(dt, T.DecimalType):
        ok = kind in ("bytes", "fixed") and logical == "decimal"
        if ok:
            p, s = int(schema["precision"]), int(schema.get("scale", 0))
            if s != dt.scale or p < dt.precision:
                refuse(f"the schema's decimal({p},{s}) does not hold decimal({dt.precision},{dt.scale})")
    elif isinstance(dt, T.ArrayType):
        if kind != "array":
            refuse()
        return check_writable(dt.elementType, schema["items"], f"{path}[]", named)
    elif isinstance(dt, T.MapType):
        if kind != "map":
            refuse()
        if not isinstance(dt.keyType, T.StringType):
            refuse("Avro maps have string keys")
        return check_writable(dt.valueType, schema["values"], f"{path}{{}}", named)
    elif isinstance(dt, T.StructType):
        if kind != "record":
            refuse()
        by_name = {f["name"]: f for f in schema["fields"]}
        for f in dt.fields:
            if f.name not in by_name:
                raise ConfigError(
                    f"field {path}.{f.name}: not in the Avro record {full_name(schema)!r} "
                    f"(its fields: {', '.join(by_name)})"
                )
            check_writable(f.dataType, by_name[f.name]["type"], f"{path}.{f.name}", named)
        mine = {f.name for f in dt.fields}
        for name, af in by_name.items():
            if name in mine or "default" in af:
                continue
            t = af["type"]
            if not (isinstance(t, list) and "null" in t):
                raise ConfigError(
                    f"field {path}.{name}: the Avro record {full_name(schema)!r} requires it (no default, "
                    "not nullable) and the column has no such field"
                )
        return
    else:
        ok = False
    if not ok:
        refuse()


# -- driver side: options -> WriteFormat ----------------------------------------------------------


def _schema_text(column: str, field, opts: dict) -> str:
    """The given ``<column>Schema``, or the one derived from the column's Spark type."""
    given = opts.get(f"{column}schema")
    if given:
        try:
            parsed = json.loads(given)
            from fastavro import parse_schema

            parse_schema(parsed)
        except Exception as e:  # noqa: BLE001 - json and fastavro raise several kinds
            raise ConfigError(f"option {column}Schema is not a valid Avro schema: {e}") from e
        return json.dumps(parsed)
    record = (opts.get(f"{column}recordname") or "topLevelRecord").strip()
    ns, _, name = record.rpartition(".")
    return json.dumps(avro_schema_for(field.dataType, False, name, ns))


def resolve_write_format(column: str, field, opts: dict, topic: str | None) -> WriteFormat | None:
    """Driver side: the format ``column`` (a StructField of the DataFrame) is written with, from
    the sink's lower-cased options; None for binary.  ``avro-confluent`` asks the registry now:
    registers the schema (a refusal is a ConfigError with the registry's message), or finds the
    pinned one.  ``topic``: the ``topic`` option (TopicNameStrategy needs it)."""

    option = f"{column}Format"
    fmt = (opts.get(f"{column}format") or "binary").strip().lower()
    if fmt not in WRITE_FORMATS:
        raise ConfigError(f"option {option}: expected one of {', '.join(WRITE_FORMATS)}, got {fmt!r}")
    if fmt == "binary":
        for extra in ("schema", "schemaid", "subject", "schemaversion", "recordname", "messagename"):
            if opts.get(f"{column}{extra}"):
                raise ConfigError(
                    f"option {column}{extra[0].upper()}{extra[1:]} is given but {option} is binary; "
                    f"set {option} to a typed format"
                )
        return None
    if fmt not in ("avro", "avro-confluent"):
        from pyklog.connector.spark.typed_write_resolve import resolve_json_or_protobuf

        return resolve_json_or_protobuf(column, field, opts, topic, fmt)
    if fmt == "avro":
        schema = _schema_text(column, field, opts)
        check_writable(field.dataType, json.loads(schema), column)
        return WriteFormat(column, fmt, schema)

    from pyklog.connector.spark.typed_write_resolve import RegistryKind, registry_type_check, resolve_registered

    class Avro(RegistryKind):
        name = "AVRO"

        def local(self):
            schema = _schema_text(column, field, opts)
            return schema, full_name(json.loads(schema))

        def check_local(self, schema):
            check_writable(field.dataType, json.loads(schema), column)

        def from_registry(self, found, schema_id, subject, what):
            registry_type_check(found, self.name, what)
            schema = json.dumps(json.loads(found["schema"]))
            check_writable(field.dataType, json.loads(schema), column)
            return WriteFormat(column, fmt, schema, schema_id, subject)

        def registered(self, client, schema, schema_id, subject):
            return WriteFormat(column, fmt, schema, schema_id, subject)

    return resolve_registered(column, opts, topic, Avro())


def resolve_write_formats(schema, opts: dict, topic: str | None) -> dict:
    """``{column: WriteFormat}`` for the typed ones of ``key`` / ``value`` (driver side)."""
    fields = {f.name.lower(): f for f in schema.fields} if schema is not None else {}
    out = {}
    for column in ("key", "value"):
        f = fields.get(column)
        if f is None:
            if (opts.get(f"{column}format") or "binary").strip().lower() != "binary":
                raise ConfigError(f"option {column}Format is set but the DataFrame has no column '{column}'")
            continue
        wf = resolve_write_format(column, f, opts, topic)
        if wf is not None:
            out[column] = wf
    return out


# -- executor side: encoding ----------------------------------------------------------------------


@dataclass(frozen=True)
class _EncodePlan:
    parsed: object  # fastavro's parsed schema, time logical types as their plain numbers
    full: object  # the schema as given (JSON-able), logical types kept
    times: bool  # the schema has time logical types: columns are converted first


_PLANS: dict = {}


def _plan(fmt: WriteFormat) -> _EncodePlan:
    got = _PLANS.get(fmt.schema)
    if got is None:
        from fastavro import parse_schema

        from pyklog.connector.spark.typed import _has_time, _strip_time

        full = json.loads(fmt.schema)
        got = _PLANS[fmt.schema] = _EncodePlan(parse_schema(_strip_time(full)), full, _has_time(full))
    return got


_MILLIS = ("timestamp-millis", "local-timestamp-millis")


def _numbers(schema, arr: pa.Array, named: dict) -> pa.Array:
    """``arr`` with its timestamp and date values as the numbers Avro stores (micros or millis
    since the epoch, days), computed in Arrow column-wise."""
    schema = _resolve(schema, named)
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        return _numbers(members[0], arr, named) if len(members) == 1 else arr
    t = pa.types
    typ = arr.type
    if t.is_timestamp(typ):
        logical = schema.get("logicalType") if isinstance(schema, dict) else None
        micros = arr.cast(pa.timestamp("us", typ.tz), safe=False).cast(pa.int64())
        if logical not in _MILLIS:
            return micros
        # floor division, as Spark's microsToMillis (Arrow's integer division truncates)
        return pc.divide(pc.subtract(micros, pc.if_else(pc.less(micros, 0), 999, 0)), 1000)
    if t.is_date32(typ):
        return arr.cast(pa.int32())
    if t.is_struct(typ) and isinstance(schema, dict) and schema.get("type") == "record":
        by_name = {f["name"]: f["type"] for f in schema["fields"]}
        children = [
            _numbers(by_name[typ.field(i).name], arr.field(i), named) if typ.field(i).name in by_name else arr.field(i)
            for i in range(typ.num_fields)
        ]
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(children, names=[typ.field(i).name for i in range(typ.num_fields)], mask=mask)
    if (t.is_list(typ) or t.is_large_list(typ)) and isinstance(schema, dict) and schema.get("type") == "array":
        values = _numbers(schema["items"], arr.values, named)
        cls = pa.LargeListArray if t.is_large_list(typ) else pa.ListArray
        return cls.from_arrays(arr.offsets, values, mask=arr.is_null() if arr.null_count else None)
    if t.is_map(typ) and isinstance(schema, dict) and schema.get("type") == "map":
        items = _numbers(schema["values"], arr.items, named)
        return pa.MapArray.from_arrays(arr.offsets, arr.keys, items, mask=arr.is_null() if arr.null_count else None)
    return arr


def _row_error(fmt: WriteFormat, parsed, value, row: int, e: Exception) -> RecordEncodeError:
    """The FAILFAST error of one row: fastavro's validator names the field."""
    from fastavro.validation import ValidationError, validate

    why = f"{type(e).__name__}: {e}"
    try:
        validate(value, parsed, raise_errors=True)
    except ValidationError as ve:
        why = "; ".join(str(m) for m in ve.errors) if getattr(ve, "errors", None) else str(ve)
    except Exception:  # noqa: BLE001 - keep the writer's own message
        pass
    return RecordEncodeError(
        f"pyklog sink: row {row} of a batch does not fit the {fmt.column} column's Avro schema "
        f"({fmt.subject or full_name(json.loads(fmt.schema)) or 'given'}): {why}; nothing of the task is "
        "committed (exactly-once) and the task fails"
    )


# -- column-wise encoding of flat records ----------------------------------------------------------

#: Avro primitive types the column-wise encoder writes (after :func:`_numbers`: dates and
#: timestamps are ints and longs by then)
_FLAT = ("boolean", "int", "long", "float", "double", "string", "bytes")


def _flat_field(schema, named: dict) -> tuple[str, int, int] | None:
    """``(primitive type, union branch of the value or -1, fixed size)`` of a record field the
    column-wise encoder can write: a primitive (logical types on int/long included), a decimal
    ``fixed`` (kind ``decimal``), or a union of null and one of those; None otherwise."""
    branch = -1
    if isinstance(schema, list):
        if len(schema) != 2 or "null" not in schema:
            return None
        branch = 1 - schema.index("null")
        schema = schema[branch]
    schema = _resolve(schema, named)
    if isinstance(schema, dict) and schema.get("type") == "fixed":
        if schema.get("logicalType") != "decimal" or not 0 < int(schema["size"]) <= 16:
            return None
        return "decimal", branch, int(schema["size"])
    if isinstance(schema, dict):
        if schema.get("type") not in ("int", "long") or schema.get("logicalType") not in (
            None,
            "date",
            "timestamp-millis",
            "timestamp-micros",
            "local-timestamp-millis",
            "local-timestamp-micros",
        ):
            return None
        schema = schema["type"]
    return (schema, branch, 0) if schema in _FLAT else None


def _fixed_width(data, width: int, n: int) -> pa.Array:
    import numpy as np

    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def _field_bytes(kind: str, col: pa.Array, size: int = 0) -> pa.Array | None:
    """The Avro binary of every value of ``col`` (nulls: any bytes, masked by the caller); None
    when the column's type is not one this encodes."""
    import numpy as np

    from pyklog.connector.spark.arrow_encode import as_binary, varint_bytes

    n = len(col)
    if kind == "decimal":
        # a decimal fixed: the unscaled value, big-endian two's complement in ``size`` bytes; Arrow
        # keeps it little-endian in 16 bytes (the scale was checked equal on the driver)
        if not pa.types.is_decimal128(col.type):
            return None
        raw = np.frombuffer(col.buffers()[1], dtype=np.uint8)[col.offset * 16 : (col.offset + n) * 16]
        data = np.ascontiguousarray(raw.reshape(n, 16)[:, size - 1 :: -1] if size < 16 else raw.reshape(n, 16)[:, ::-1])
        return _fixed_width(data.reshape(-1), size, n)
    if kind in ("int", "long"):
        return varint_bytes(col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64))
    if kind == "boolean":
        return _fixed_width(col.fill_null(False).to_numpy(zero_copy_only=False).astype(np.uint8), 1, n)
    if kind in ("float", "double"):
        dtype = "<f4" if kind == "float" else "<f8"
        values = col.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)
        return _fixed_width(values.view(np.uint8), values.itemsize, n)
    data = as_binary(col).fill_null(b"")
    lengths = pc.binary_length(data).to_numpy(zero_copy_only=False).astype(np.int64)
    return pc.binary_join_element_wise(varint_bytes(lengths), data, b"")


def _columnar(plan: _EncodePlan, arr: pa.Array, header: bytes) -> pa.Array | None:
    """The records of ``arr`` (a struct column, time values already numbers) encoded column by
    column in Arrow, as the record encoder builds record batches: each field's bytes as one binary
    column (numpy varints, fixed-width floats, length-prefixed strings, a union's branch byte), the
    records joined with one ``binary_join_element_wise``.  None when the schema is not a flat
    record of primitives (and nullable primitives) the struct holds every field of, or a field the
    schema does not let be null has a null: the per-record writer then encodes (and names the field
    of a row that does not fit)."""
    schema = plan.full
    if not (pa.types.is_struct(arr.type) and isinstance(schema, dict) and schema.get("type") == "record"):
        return None
    named: dict = {}
    _register_names(schema, named)
    typ = arr.type
    index = {typ.field(i).name: i for i in range(typ.num_fields)}
    valid = arr.is_valid() if arr.null_count else None
    parts = [pa.scalar(header, pa.binary())] if header else []
    for f in schema["fields"]:
        flat = _flat_field(f["type"], named)
        if flat is None or f["name"] not in index:
            return None
        kind, branch, size = flat
        col = arr.field(index[f["name"]])
        if pa.types.is_null(col.type):
            return None
        nulls = col.is_null() if valid is None else pc.and_(col.is_null(), valid)
        has_nulls = col.null_count > 0 and pc.any(nulls).as_py()
        if has_nulls and branch < 0:
            return None
        value = _field_bytes(kind, col, size)
        if value is None:
            return None
        if branch >= 0:
            null_branch = 1 - branch  # the union's index of null; the branch is a zigzag varint byte
            if has_nulls:
                tag = pc.if_else(nulls, bytes([2 * null_branch]), bytes([2 * branch]))
                value = pc.binary_join_element_wise(tag, pc.if_else(nulls, b"", value), b"")
            else:
                value = pc.binary_join_element_wise(pa.scalar(bytes([2 * branch]), pa.binary()), value, b"")
        parts.append(value)
    if len(parts) == (1 if header else 0):  # a record without fields: its encoding is empty
        parts.append(pa.scalar(b"", pa.binary()))
    joined = pc.binary_join_element_wise(*parts, b"")
    if not isinstance(joined, pa.Array):
        joined = pa.array([joined.as_py()] * len(arr), type=pa.binary())
    return pc.if_else(valid, joined, pa.scalar(None, pa.binary())) if valid is not None else joined


_JSON_NULLS: dict = {}


def _json_nulls(schema: str) -> dict:
    got = _JSON_NULLS.get(schema)
    if got is None:
        from pyklog.connector.spark.typed_write_formats import json_nulls

        got = _JSON_NULLS[schema] = json_nulls(json.loads(schema))
    return got


def encode_column(fmt: WriteFormat, arr: pa.Array) -> pa.Array:
    """The Avro (``avro``) or wire-format (``avro-confluent``) bytes of every value of ``arr``
    (a binary Arrow array; a null stays null).  RecordEncodeError names the first row that does
    not fit the schema."""
    if fmt.fmt.startswith("json"):
        from pyklog.connector.spark.typed_write_formats import encode_json

        return encode_json(fmt, arr, _json_nulls(fmt.schema))
    if fmt.fmt.startswith("protobuf"):
        from pyklog.connector.spark.typed_write_formats import encode_protobuf

        return encode_protobuf(fmt, arr)
    from fastavro import schemaless_writer

    plan = _plan(fmt)
    if plan.times:
        arr = _numbers(plan.full, arr, {})
    if len(arr):
        fast = _columnar(plan, arr, fmt.header)
        if fast is not None:
            return fast
    values = arr.to_pylist(maps_as_pydicts="strict")
    header = fmt.header
    parsed = plan.parsed
    out: list = []
    append = out.append
    buf = io.BytesIO()
    row = 0
    try:
        for row, v in enumerate(values):  # noqa: B007 - the row is named in the error
            if v is None:
                append(None)
                continue
            buf.seek(0)
            buf.truncate()
            buf.write(header)
            schemaless_writer(buf, parsed, v)
            append(buf.getvalue())
    except Exception as e:  # noqa: BLE001 - fastavro raises TypeError, ValueError, AttributeError...
        raise _row_error(fmt, parsed, values[row], row, e) from None
    return pa.array(out, type=pa.binary())


def encode_batch(batch: pa.RecordBatch, formats: dict, plan: dict) -> pa.RecordBatch:
    """``batch`` with the typed columns (``formats``: ``{column: WriteFormat}``; ``plan``: the
    sink's ``{column: source column name}``) replaced by their encoded bytes."""
    names = batch.schema.names
    arrays = list(batch.columns)
    fields = list(batch.schema)
    for column, fmt in formats.items():
        i = names.index(plan[column])
        arrays[i] = encode_column(fmt, arrays[i])
        fields[i] = pa.field(names[i], pa.binary())
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))
