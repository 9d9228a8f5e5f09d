"""Typed ``key`` / ``value`` columns for the ``pyklog`` source: Avro records decoded into Spark structs;
the Protobuf and JSON formats are read by :mod:`.typed_protobuf` and :mod:`.typed_json` (this
module checks the options and dispatches to them).

Options (source)::

    valueFormat / keyFormat   binary (default: the bytes, as Spark's Kafka source) | avro |
                              avro-confluent (Confluent's wire format: magic byte 0, a 4-byte
                              schema id, the Avro payload; the writer's schema from the registry) |
                              protobuf | protobuf-confluent | json | json-confluent (their modules)
    valueSchema / keySchema   the Avro schema (JSON) of the records: required with ``avro``; with
                              ``avro-confluent`` an optional pinned reader schema
    schema.registry.url       the registry (``avro-confluent``; pyklog's or Confluent's)
    valueSubject / keySubject the subject of the reader schema (default: TopicNameStrategy,
                              ``<topic>-value`` / ``<topic>-key`` of the one subscribed topic)
    valueSchemaVersion / keySchemaVersion   a pinned version of that subject (default: latest)
    value.subject.name.strategy / key.subject.name.strategy   how that subject is named
                              (:func:`subject_for`: TopicNameStrategy, RecordNameStrategy,
                              TopicRecordNameStrategy; Confluent's class names too)
    valueRecordName / keyRecordName   the record's full name, for the two record strategies
    mode                      FAILFAST (default: a record that does not decode fails the query,
                              naming topic, partition and offset) | PERMISSIVE (the column is null
                              and two more columns say why: ``<column>Raw`` binary, the record's
                              bytes, and ``<column>Error`` string; both null for good rows)

Schema evolution (``avro-confluent``): each record is read with its writer's schema (looked up by
id, cached per worker) and resolved into the reader schema (the subject's latest version when the
query is defined, or the pinned one) by Avro's rules, so records written with older and newer
versions of a compatible schema read into one Spark type.

With ``avro`` the column takes the schema's Spark type in place of ``binary`` (a record becomes a
struct, so ``select("value.*")`` gives its fields); a null value (a tombstone) is a null struct.
Types as Spark's ``from_avro`` maps them: boolean, int, long, float, double, bytes/fixed ->
binary, string/enum/uuid -> string, record -> struct, array -> array, map -> map<string, _>,
a union of null and one type -> that type (nullable), other unions -> a struct of ``member0``,
``member1``, ...; logical types date -> date, timestamp-millis/micros (and local-) -> timestamp,
decimal -> decimal(p, s).

How: for every Arrow batch a read task produces (:func:`pyklog.connector.spark.read_task.read_range`),
the binary column is decoded in bulk, column-wise (:mod:`pyklog.connector.spark.avro_bulk`); the
records it leaves (bad ones, other writer schemas, schemas it does not walk) go through fastavro's
C reader one record at a time, and the resulting dicts become ONE Arrow struct array in C
(``pyarrow.array`` with the target type).  Pure functions of picklable options; safe in any worker.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from pyklog.broker.errors import ConfigError, PyklogError

__all__ = [
    "FORMATS",
    "ColumnFormat",
    "RecordDecodeError",
    "arrow_type",
    "convert_batch",
    "extra_fields",
    "parse_column_format",
    "source_ddl",
    "spark_ddl",
    "subject_for",
]

#: Protobuf and JSON formats: typed_protobuf / typed_json (the module that reads each)
_OTHER = {
    "protobuf": "typed_protobuf",
    "protobuf-confluent": "typed_protobuf",
    "json": "typed_json",
    "json-confluent": "typed_json",
}
FORMATS = ("binary", "avro", "avro-confluent", *_OTHER)
MODES = ("FAILFAST", "PERMISSIVE")


class RecordDecodeError(PyklogError):
    """A record's key or value does not decode with the given format (FAILFAST)."""


@dataclass(frozen=True)
class ColumnFormat:
    """How one of ``key`` / ``value`` is read: ``fmt`` and, for Avro, the schema's JSON text."""

    column: str
    fmt: str = "binary"
    schema: str | None = None  # the reader schema (JSON text)
    permissive: bool = False
    registry_url: str | None = None  # avro-confluent

    @property
    def typed(self) -> bool:
        return self.fmt != "binary"

    def parsed(self):
        """The fastavro-parsed schema records are decoded with (time logical types as plain
        numbers, see :func:`_strip_time`; cached per process and schema text)."""
        return _parsed_schema(self.schema)

    def parsed_full(self):
        """The fastavro-parsed schema as given (logical types kept): the column's types."""
        got = _PARSED_FULL.get(self.schema)
        if got is None:
            from fastavro import parse_schema

            got = _PARSED_FULL[self.schema] = parse_schema(json.loads(self.schema))
        return got


_PARSED: dict = {}
_PARSED_FULL: dict = {}


def _parsed_schema(text: str):
    """The schema fastavro decodes with: time logical types read as their plain numbers
    (:func:`_strip_time`), turned into Arrow timestamps and dates column-wise afterwards."""
    got = _PARSED.get(text)
    if got is None:
        from fastavro import parse_schema

        got = _PARSED[text] = parse_schema(_strip_time(json.loads(text)))
    return got


#: time logical types read as plain numbers, and the factor to microseconds
_TIME_LOGICAL = {
    "timestamp-millis": 1000,
    "local-timestamp-millis": 1000,
    "timestamp-micros": 1,
    "local-timestamp-micros": 1,
}


def _strip_time(schema):
    """``schema`` (Avro JSON) with the timestamp and date logical types removed: fastavro then
    returns their numbers instead of a ``datetime`` per value, and :func:`_finish` converts whole
    columns in Arrow (measured: decode plus Arrow build 1.9x faster on a record with a timestamp)."""
    if isinstance(schema, list):
        return [_strip_time(m) for m in schema]
    if not isinstance(schema, dict):
        return schema
    logical = schema.get("logicalType")
    if logical in _TIME_LOGICAL or (logical == "date" and schema.get("type") == "int"):
        return schema["type"]
    out = dict(schema)
    if "fields" in out:
        out["fields"] = [{**f, "type": _strip_time(f["type"])} for f in out["fields"]]
    for k in ("items", "values"):
        if k in out:
            out[k] = _strip_time(out[k])
    if isinstance(out.get("type"), (dict, list)):
        out["type"] = _strip_time(out["type"])
    return out


def _has_time(schema) -> bool:
    return _strip_time(schema) != schema


def _finish(schema, arr: pa.Array, named: dict) -> pa.Array:
    """``arr`` decoded with :func:`_strip_time`'s schema, its time columns made timestamps and dates."""
    if isinstance(schema, str):
        return _finish(named[schema], arr, named) if schema in named else arr
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) == 1:
            return _finish(members[0], arr, named)
        children = [_finish(m, arr.field(i), named) for i, m in enumerate(members)]
        return pa.StructArray.from_arrays(
            children, names=[f"member{i}" for i in range(len(members))], mask=arr.is_null()
        )
    logical = schema.get("logicalType")
    if logical in _TIME_LOGICAL:
        micros = pc.multiply(arr.cast(pa.int64()), _TIME_LOGICAL[logical])
        return micros.cast(_TIMESTAMP)
    if logical == "date" and schema.get("type") == "int":
        return arr.cast(pa.date32())
    t = schema.get("type")
    if t == "record":
        named[schema["name"]] = schema
        if schema.get("namespace"):
            named[f"{schema['namespace']}.{schema['name']}"] = schema
        children = [_finish(f["type"], arr.field(i), named) for i, f in enumerate(schema["fields"])]
        return pa.StructArray.from_arrays(children, names=[f["name"] for f in schema["fields"]], mask=arr.is_null())
    if t == "array":
        return pa.ListArray.from_arrays(arr.offsets, _finish(schema["items"], arr.values, named), mask=arr.is_null())
    if t == "map":
        items = _finish(schema["values"], arr.items, named)
        return pa.MapArray.from_arrays(arr.offsets, arr.keys, items, mask=arr.is_null())
    if isinstance(t, (dict, list)):
        return _finish(t, arr, named)
    return arr


def parse_column_format(
    column: str,
    fmt: str | None,
    schema: str | None,
    mode: str | None,
    *,
    registry_url: str | None = None,
    subject: str | None = None,
    version: str | None = None,
    topics: tuple = (),
    message: str | None = None,
    strategy: str | None = None,
    record_name: str | None = None,
) -> ColumnFormat:
    """Check one column's options (driver side); ConfigError naming the option on a bad value.
    ``avro-confluent`` without a pinned schema asks the registry for the reader schema now."""
    option = f"{column}Format"
    fmt = (fmt or "binary").strip().lower()
    if fmt not in FORMATS:
        raise ConfigError(f"option {option}: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    mode = (mode or "FAILFAST").strip().upper()
    if mode not in MODES:
        raise ConfigError(f"option mode: expected FAILFAST or PERMISSIVE, got {mode!r}")
    if fmt == "binary":
        if schema:
            raise ConfigError(f"option {column}Schema is given but {option} is binary; set {option}=avro")
        return ColumnFormat(column)
    if message and not fmt.startswith("protobuf"):
        raise ConfigError(f"option {column}MessageName is for {option}=protobuf or protobuf-confluent, not {fmt}")
    if fmt in _OTHER:
        if fmt.endswith("-confluent") and not registry_url:
            raise ConfigError(f"option {option}={fmt} needs option schema.registry.url")
        if fmt.endswith("-confluent") and not subject and not schema and (strategy or record_name):
            subject = subject_for(column, topics, strategy, record_name)
        extra = {"message": message} if fmt.startswith("protobuf") else {}
        text = _module(fmt).parse_reader(
            column, fmt, schema, registry_url=registry_url, subject=subject, version=version, topics=topics, **extra
        )
        return ColumnFormat(column, fmt, text, mode == "PERMISSIVE", registry_url)
    if fmt == "avro-confluent":
        if not registry_url:
            raise ConfigError(f"option {option}={fmt} needs option schema.registry.url")
        if not schema:
            schema = _reader_schema(column, registry_url, subject, version, topics, strategy, record_name)
    if not schema:
        raise ConfigError(f"option {option}={fmt} needs option {column}Schema (the Avro schema as JSON)")
    try:
        parsed = json.loads(schema)
        from fastavro import parse_schema

        parse_schema(parsed)
    except Exception as e:  # noqa: BLE001 - json and fastavro raise several kinds
        raise ConfigError(f"option {column}Schema is not a valid Avro schema: {e}") from e
    return ColumnFormat(column, fmt, json.dumps(parsed, sort_keys=True), mode == "PERMISSIVE", registry_url)


def subject_for(
    column: str, topics: tuple, strategy: str | None, record_name: str | None, *, sink: bool = False
) -> str:
    """The subject of ``column``'s schema by a subject name strategy (option
    ``<column>.subject.name.strategy``, Confluent's ``key.subject.name.strategy`` /
    ``value.subject.name.strategy``): ``TopicNameStrategy`` (default) ``<topic>-<column>``;
    ``RecordNameStrategy`` the record's full name; ``TopicRecordNameStrategy``
    ``<topic>-<full name>``.  Confluent's class names
    (``io.confluent.kafka.serializers.subject.RecordNameStrategy``) are accepted too.  ConfigError
    naming the option that is missing (one topic, the record's name)."""
    from pyklog.connector.schema_registry.client import SUBJECT_NAME_STRATEGIES

    option = f"{column}.subject.name.strategy"
    short = (strategy or "TopicNameStrategy").strip().rsplit(".", 1)[-1]
    kind = SUBJECT_NAME_STRATEGIES.get(short)
    if kind is None:
        raise ConfigError(
            f"option {option}: expected one of {', '.join(SUBJECT_NAME_STRATEGIES)} (or Confluent's class "
            f"names io.confluent.kafka.serializers.subject.*), got {strategy!r}"
        )
    where = "the 'topic' option" if sink else "exactly one topic in 'subscribe'"
    if kind != "record" and len(topics) != 1:
        raise ConfigError(f"option {column}Subject is needed: the subject of {short} (<topic>-...) needs {where}")
    if kind != "topic" and not record_name:
        raise ConfigError(
            f"{short} names the subject after the record: set option {column}RecordName (the record's "
            f"full name) or {column}Subject"
        )
    if kind == "topic":
        return f"{topics[0]}-{column}"
    return record_name if kind == "record" else f"{topics[0]}-{record_name}"


def _reader_schema(
    column: str,
    url: str,
    subject: str | None,
    version: str | None,
    topics: tuple,
    strategy: str | None = None,
    record_name: str | None = None,
) -> str:
    """The reader schema of an ``avro-confluent`` column from the registry (driver side)."""
    from pyklog.connector.schema_registry.errors import SchemaRegistryError

    if not subject:
        subject = subject_for(column, topics, strategy, record_name)
    try:
        found = _client(url).get_version(subject, version or "latest")
    except SchemaRegistryError as e:
        raise ConfigError(f"the schema registry at {url} has no usable schema for subject {subject!r}: {e}") from e
    if found.get("schemaType", "AVRO") != "AVRO":
        raise ConfigError(f"subject {subject!r} holds a {found['schemaType']} schema, not Avro")
    return _with_references(url, found["schema"], found.get("references"))


def _client(url: str):
    """One registry client per URL and process (its caches shared by the worker's tasks)."""
    from pyklog.connector.spark.typed_formats import client

    return client(url)


_WRITERS: dict = {}


def _writer_schema(url: str, schema_id: int):
    """The parsed writer schema of ``schema_id`` (cached per process)."""
    key = (url, schema_id)
    got = _WRITERS.get(key)
    if got is None:
        from fastavro import parse_schema

        from pyklog.connector.schema_registry.errors import SchemaRegistryError
        from pyklog.connector.spark.typed_formats import RegistryUnavailable

        try:
            found = _client(url).get_schema(schema_id)
        except SchemaRegistryError as e:
            if e.status >= 500 or e.status in (401, 403):  # the registry's state, not the record's
                raise RegistryUnavailable(
                    f"the schema registry at {url} did not answer for schema id {schema_id}: {e}"
                ) from None
            raise
        if found.get("schemaType", "AVRO") != "AVRO":
            raise ValueError(f"schema id {schema_id} is a {found['schemaType']} schema, not Avro")
        text = _with_references(url, found["schema"], found.get("references"))
        got = _WRITERS[key] = parse_schema(_strip_time(json.loads(text)))
    return got


_AVRO_PRIMITIVES = frozenset(["null", "boolean", "int", "long", "float", "double", "bytes", "string"])
_AVRO_KEYWORDS = _AVRO_PRIMITIVES | {"record", "error", "enum", "fixed", "array", "map"}


def _referenced_types(url: str, references: list, out: dict) -> None:
    """The named types of the referenced subjects' schemas (and of their references), by full name."""
    for r in references:
        found = _client(url).get_version(r["subject"], r["version"])
        _referenced_types(url, found.get("references") or [], out)
        top = json.loads(found["schema"])
        for t in top if isinstance(top, list) else [top]:
            _collect_named(t, "", out)


def _collect_named(schema, ns: str, out: dict) -> None:
    if isinstance(schema, list):
        for m in schema:
            _collect_named(m, ns, out)
        return
    if not isinstance(schema, dict):
        return
    if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
        name = schema["name"]
        ns = schema.get("namespace", ns) if "." not in name else name.rsplit(".", 1)[0]
        full = name if "." in name else (f"{ns}.{name}" if ns else name)
        out.setdefault(full, {**schema, "name": full, "namespace": ""} if "." not in name and ns else schema)
    for f in schema.get("fields", []):
        _collect_named(f.get("type"), ns, out)
    for k in ("items", "values", "type"):
        if isinstance(schema.get(k), (dict, list)):
            _collect_named(schema[k], ns, out)


def _inline(schema, ns: str, named: dict, defined: set):
    """``schema`` with each first use of a referenced type's name replaced by its definition."""
    if isinstance(schema, str):
        if schema in _AVRO_PRIMITIVES:
            return schema
        full = schema if "." in schema or not ns else f"{ns}.{schema}"
        for candidate in (full, schema):
            if candidate in defined:
                return candidate
            if candidate in named:
                defined.add(candidate)
                return _inline(named[candidate], ns, named, defined)
        return schema
    if isinstance(schema, list):
        return [_inline(m, ns, named, defined) for m in schema]
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if out.get("type") in ("record", "error", "enum", "fixed") and "name" in out:
        name = out["name"]
        ns = out.get("namespace", ns) if "." not in name else name.rsplit(".", 1)[0]
        defined.add(name if "." in name else (f"{ns}.{name}" if ns else name))
    if "fields" in out:
        out["fields"] = [{**f, "type": _inline(f["type"], ns, named, defined)} for f in out["fields"]]
    for k in ("items", "values", "type"):
        v = out.get(k)
        # ``type`` of a dict is also the keyword (record, array, ...): only a name is a reference
        if isinstance(v, (dict, list)) or (isinstance(v, str) and (k != "type" or v not in _AVRO_KEYWORDS)):
            out[k] = _inline(v, ns, named, defined)
    return out


def _with_references(url: str, text: str, references) -> str:
    """A registered Avro schema made self-contained: the named types of its references (other
    subjects' schemas, as Confluent's registry keeps them) written in at their first use."""
    if not references:
        return text
    named: dict = {}
    _referenced_types(url, references, named)
    return json.dumps(_inline(json.loads(text), "", named, set()))


# -- Avro schema -> Arrow / Spark types ----------------------------------------------------------

_PRIMITIVE = {
    "boolean": (pa.bool_(), "boolean"),
    "int": (pa.int32(), "int"),
    "long": (pa.int64(), "bigint"),
    "float": (pa.float32(), "float"),
    "double": (pa.float64(), "double"),
    "bytes": (pa.binary(), "binary"),
    "string": (pa.string(), "string"),
}
_TIMESTAMP = pa.timestamp("us", tz="UTC")


def _types(schema, named: dict) -> tuple[pa.DataType, str]:
    """``(arrow type, Spark DDL)`` of a parsed Avro schema (``named``: named types met so far)."""
    if isinstance(schema, str):
        if schema in _PRIMITIVE:
            return _PRIMITIVE[schema]
        if schema in named:
            if named[schema] is None:
                raise ConfigError(
                    f"the Avro type {schema!r} refers to itself: recursive types have no Spark type "
                    "(Spark's from_avro refuses them too)"
                )
            return named[schema]
        raise ConfigError(f"Avro type {schema!r} is not supported here (unknown name)")
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) == 1:
            return _types(members[0], named)
        parts = [_types(m, named) for m in members]
        arrow = pa.struct([pa.field(f"member{i}", a) for i, (a, _) in enumerate(parts)])
        return arrow, "struct<" + ",".join(f"member{i}:{d}" for i, (_, d) in enumerate(parts)) + ">"
    t = schema.get("type")
    logical = schema.get("logicalType")
    if logical == "date" and t == "int":
        return pa.date32(), "date"
    if logical in ("timestamp-millis", "timestamp-micros", "local-timestamp-millis", "local-timestamp-micros"):
        return _TIMESTAMP, "timestamp"
    if logical == "decimal" and t in ("bytes", "fixed"):
        p, s = int(schema["precision"]), int(schema.get("scale", 0))
        return pa.decimal128(p, s), f"decimal({p},{s})"
    if t == "record":
        named[schema["name"]] = None  # being defined: a reference from inside is a recursion
        fields = [(f["name"], _types(f["type"], named)) for f in schema["fields"]]
        out = (
            pa.struct([pa.field(n, a) for n, (a, _) in fields]),
            "struct<" + ",".join(f"`{n}`:{d}" for n, (_, d) in fields) + ">",
        )
        named[schema["name"]] = out
        return out
    if t == "enum":
        named[schema["name"]] = (pa.string(), "string")
        return pa.string(), "string"
    if t == "fixed":
        named[schema["name"]] = (pa.binary(), "binary")
        return pa.binary(), "binary"
    if t == "array":
        a, d = _types(schema["items"], named)
        return pa.list_(a), f"array<{d}>"
    if t == "map":
        a, d = _types(schema["values"], named)
        return pa.map_(pa.string(), a), f"map<string,{d}>"
    return _types(t, named)


def _module(fmt: str):
    import importlib

    return importlib.import_module(f"pyklog.connector.spark.{_OTHER[fmt]}")


def arrow_type(fmt: ColumnFormat) -> pa.DataType:
    if fmt.fmt in _OTHER:
        return _module(fmt.fmt).arrow_type(fmt.schema)
    return _types(fmt.parsed_full(), {})[0] if fmt.typed else pa.binary()


def spark_ddl(fmt: ColumnFormat) -> str:
    if fmt.fmt in _OTHER:
        from pyklog.connector.spark.typed_formats import spark_ddl_of

        return spark_ddl_of(arrow_type(fmt))
    return _types(fmt.parsed_full(), {})[1] if fmt.typed else "binary"


def extra_fields(fmt: ColumnFormat) -> list[tuple[str, pa.DataType, str]]:
    """The PERMISSIVE columns of ``fmt``: ``<column>Raw`` and ``<column>Error``."""
    if not (fmt.typed and fmt.permissive):
        return []
    return [(f"{fmt.column}Raw", pa.binary(), "binary"), (f"{fmt.column}Error", pa.string(), "string")]


def source_ddl(base_fields: list, formats: tuple[ColumnFormat, ...]) -> str:
    """The source's Spark schema as DDL: ``base_fields`` (``(name, arrow type, ddl)``, the binary
    schema) with typed columns in place and the PERMISSIVE columns appended."""
    by_column = {f.column: f for f in formats if f.typed}
    parts = [f"{n} {spark_ddl(by_column[n]) if n in by_column else ddl}" for n, _, ddl in base_fields]
    parts += [f"{n} {ddl}" for f in formats for n, _, ddl in extra_fields(f)]
    return ", ".join(parts)


# -- decoding -------------------------------------------------------------------------------------


def _has_multi_union(schema) -> bool:
    if isinstance(schema, list):
        return len([m for m in schema if m != "null"]) > 1 or any(_has_multi_union(m) for m in schema)
    if isinstance(schema, dict):
        t = schema.get("type")
        if t == "record":
            return any(_has_multi_union(f["type"]) for f in schema["fields"])
        if t == "array":
            return _has_multi_union(schema["items"])
        if t == "map":
            return _has_multi_union(schema["values"])
        return isinstance(t, (list, dict)) and _has_multi_union(t)
    return False


def _reshape(schema, value, named: dict):
    """Turn values of multi-type unions into ``{"memberN": value}`` dicts (fastavro must have been
    asked for ``return_record_name``-free values: the member is found by type)."""
    if value is None:
        return None
    if isinstance(schema, str):
        return _reshape(named[schema], value, named) if schema in named else value
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) == 1:
            return _reshape(members[0], value, named)
        for i, m in enumerate(members):
            if _matches(m, value, named):
                return {f"member{i}": _reshape(m, value, named)}
        return None
    t = schema.get("type")
    if t == "record":
        named[schema["name"]] = schema
        return {f["name"]: _reshape(f["type"], value.get(f["name"]), named) for f in schema["fields"]}
    if t == "array":
        return [_reshape(schema["items"], v, named) for v in value]
    if t == "map":
        return {k: _reshape(schema["values"], v, named) for k, v in value.items()}
    if isinstance(t, (list, dict)):
        return _reshape(t, value, named)
    return value


def _matches(schema, value, named) -> bool:
    from fastavro.validation import validate

    if isinstance(schema, str) and schema in named:
        schema = named[schema]

    try:
        return validate(value, schema, raise_errors=False)
    except Exception:  # noqa: BLE001 - a named reference fastavro cannot resolve standalone
        return False


@dataclass(frozen=True)
class _DecodePlan:
    """What decoding a column needs beyond its schema, worked out once per schema and process
    (not per batch): the column's Arrow type, the type fastavro's values are built into first when
    time logical types are converted afterwards (None: none in the schema), and whether values of
    multi-type unions need reshaping."""

    arrow_type: pa.DataType
    decode_type: pa.DataType | None
    reshape: bool


_PLANS: dict = {}


def _plan(fmt: ColumnFormat) -> _DecodePlan:
    got = _PLANS.get(fmt.schema)
    if got is None:
        full = fmt.parsed_full()
        decode_type = _types(fmt.parsed(), {})[0] if _has_time(full) else None
        got = _PLANS[fmt.schema] = _DecodePlan(arrow_type(fmt), decode_type, _has_multi_union(fmt.parsed()))
    return got


def _decode_values(fmt: ColumnFormat, values: list):
    """``(decoded values or None, error message or None)`` per input value."""
    from fastavro import schemaless_reader

    from pyklog.connector.spark.typed_formats import RegistryUnavailable

    schema = fmt.parsed()
    reshape = _plan(fmt).reshape
    confluent = fmt.fmt == "avro-confluent"
    out, errors = [], []
    for v in values:
        if v is None:
            out.append(None)
            errors.append(None)
            continue
        try:
            buf = io.BytesIO(v)
            if confluent:
                if len(v) < 5 or v[0] != 0:
                    raise ValueError("not Confluent's wire format (magic byte 0 and a 4-byte schema id)")
                buf.seek(5)
                writer = _writer_schema(fmt.registry_url, int.from_bytes(v[1:5], "big"))
                rec = schemaless_reader(buf, writer, schema)
            else:
                rec = schemaless_reader(buf, schema, None)
            if buf.tell() != len(v):
                raise ValueError(f"{len(v) - buf.tell()} bytes left after the record")
            out.append(_reshape(schema, rec, {}) if reshape else rec)
            errors.append(None)
        except RegistryUnavailable:
            raise  # fails the read in every mode (each record would wait for the retries again)
        except Exception as e:  # noqa: BLE001 - fastavro raises EOFError, ValueError, IndexError, ...
            out.append(None)
            errors.append(f"{type(e).__name__}: {e}" if str(e) else type(e).__name__)
    return out, errors


def _bulk_decode(fmt: ColumnFormat, column: pa.Array, decode_type: pa.DataType):
    """``(values, errors)`` of an Avro column decoded in bulk (:mod:`.avro_bulk`), or None when
    its schema needs the per-record decoder (multi-type unions, arrays, maps, decimals...)."""
    from pyklog.connector.spark.avro_bulk import bulk_decode

    if _plan(fmt).reshape:
        return None
    confluent = fmt.fmt == "avro-confluent"
    return bulk_decode(
        fmt.parsed(),
        column,
        decode_type,
        lambda values: _decode_values(fmt, values),
        confluent=confluent,
        writer_schema=(lambda schema_id: _writer_schema(fmt.registry_url, schema_id)) if confluent else None,
    )


def convert_batch(batch: pa.RecordBatch, formats: tuple[ColumnFormat, ...]) -> pa.RecordBatch:
    """``batch`` (the source's binary schema) with each typed column decoded in place (and the
    PERMISSIVE columns appended after the source's columns).  FAILFAST: RecordDecodeError naming
    the first bad record's topic, partition and offset."""
    names = list(batch.schema.names)
    arrays = list(batch.columns)
    fields = list(batch.schema)
    extra_arrays, extra_fields_ = [], []
    for fmt in formats:
        if not fmt.typed:
            continue
        i = names.index(fmt.column)
        if fmt.fmt in _OTHER:
            decoded_array, errors = _module(fmt.fmt).decode(fmt, arrays[i].to_pylist())
            plan = None
        else:
            plan = _plan(fmt)
            decoded = _bulk_decode(fmt, arrays[i], plan.decode_type or plan.arrow_type)
            if decoded is None:
                values, errors = _decode_values(fmt, arrays[i].to_pylist())
                decoded = pa.array(values, type=plan.decode_type or plan.arrow_type), errors
            decoded_array, errors = decoded
        bad = [j for j, e in enumerate(errors) if e is not None]
        if bad and not fmt.permissive:
            j = bad[0]
            topic = batch.column(names.index("topic"))[j].as_py()
            partition = batch.column(names.index("partition"))[j].as_py()
            offset = batch.column(names.index("offset"))[j].as_py()
            raise RecordDecodeError(
                f"pyklog source: the {fmt.column} of {topic}-{partition} at offset {offset} is not "
                f"{fmt.fmt} of the {fmt.column} schema ({errors[j]}); {len(bad)} of {len(errors)} "
                f"records in this batch failed. Set mode=PERMISSIVE to read such records as nulls "
                f"with the raw bytes and the error"
            )
        if plan is None:
            arrays[i] = decoded_array
            fields[i] = pa.field(fmt.column, decoded_array.type)
        else:
            arrays[i] = _finish(fmt.parsed_full(), decoded_array, {}) if plan.decode_type is not None else decoded_array
            fields[i] = pa.field(fmt.column, plan.arrow_type)
        if fmt.permissive:
            failed = pa.array([e is not None for e in errors], type=pa.bool_())
            raw_bad = pc.if_else(failed, batch.column(i), pa.scalar(None, batch.column(i).type))
            extra_arrays += [raw_bad.cast(pa.binary()), pa.array(errors, type=pa.string())]
            extra_fields_ += [pa.field(name, typ) for name, typ, _ in extra_fields(fmt)]
    return pa.RecordBatch.from_arrays(arrays + extra_arrays, schema=pa.schema(fields + extra_fields_))
