"""Protobuf ``key`` / ``value`` columns: ``protobuf-confluent`` (Confluent's wire format: magic byte
0, a 4-byte schema id, the message indexes, the message) and ``protobuf`` (the bare message of a
given ``.proto``).

The reader schema is one message of a file: the subject's latest (or pinned) version with its
references (imports of other subjects' schemas, resolved through the registry), or the ``.proto``
text of ``valueSchema``; ``valueMessageName`` picks the message (default: the file's first).  It is
kept as the files' serialized FileDescriptorProtos in dependency order, so a worker builds the
descriptor pool and the message class once per schema and process.

Types as spark-protobuf's SchemaConverters maps them, with its options ``unwrap.primitive.wrapper.types``
and ``upcast.unsigned.ints`` on (no value is truncated): int32/sint32/sfixed32 -> int,
uint32/fixed32 -> bigint, int64/sint64/sfixed64 -> bigint, uint64/fixed64 -> decimal(20,0) (the
unsigned fixed types too: spark-protobuf reads them as signed Java numbers), float, double,
bool -> boolean, string, bytes -> binary, enum -> string (its symbol), message -> struct,
repeated -> array, map -> map, google.protobuf.Timestamp -> timestamp, the wrapper types
(Int32Value, StringValue, ...) -> the wrapped type.  A field with presence (message fields, proto2
optional, proto3 ``optional``, oneof members, wrappers) is null when absent; a proto3 field without
presence reads as its value, zero included (spark-protobuf's ``emit.default.values``).  Recursive
messages are refused, as by spark-protobuf's default.

Schema evolution: the wire format of a message is read by field numbers, so every record is parsed
with the reader's message; fields the reader does not know are skipped, fields the writer did not
have read as absent.  The writer's schema id is still looked up (once per id and worker): an id the
registry does not know, or message indexes that name another message than the reader's, make the
record a bad record.

Decoding in bulk: protobuf's C parser (upb) per record, then per field ONE pass over the batch's
messages through C-level getters (``map(attrgetter(name), messages)``) into an Arrow array; no
Python step per field and record, no dict per record.
"""

from __future__ import annotations

import base64
import json
from operator import attrgetter, getitem, methodcaller

import pyarrow as pa

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.typed_formats import TIMESTAMP, IdLookup, registry_version

FORMATS = ("protobuf", "protobuf-confluent")

# FieldDescriptor.TYPE_* numbers
_INT32, _SINT32, _SFIXED32, _FIXED32, _UINT32 = 5, 17, 15, 7, 13
_INT64, _SINT64, _SFIXED64, _FIXED64, _UINT64 = 3, 18, 16, 6, 4
_FLOAT, _DOUBLE, _BOOL, _STRING, _BYTES, _ENUM, _MESSAGE, _GROUP = 2, 1, 8, 9, 12, 14, 11, 10

_SCALAR = {
    _INT32: pa.int32(),
    _SINT32: pa.int32(),
    _SFIXED32: pa.int32(),
    _FIXED32: pa.int64(),
    _UINT32: pa.int64(),
    _INT64: pa.int64(),
    _SINT64: pa.int64(),
    _SFIXED64: pa.int64(),
    _FIXED64: pa.decimal128(20, 0),
    _UINT64: pa.decimal128(20, 0),
    _FLOAT: pa.float32(),
    _DOUBLE: pa.float64(),
    _BOOL: pa.bool_(),
    _STRING: pa.string(),
    _BYTES: pa.binary(),
    _ENUM: pa.string(),
}
#: the type Arrow first builds a scalar column in, before a cast to the column's type
_BUILD = {_FIXED64: pa.uint64(), _UINT64: pa.uint64()}
_WRAPPERS = {
    "google.protobuf.DoubleValue": pa.float64(),
    "google.protobuf.FloatValue": pa.float32(),
    "google.protobuf.Int64Value": pa.int64(),
    "google.protobuf.UInt64Value": pa.decimal128(20, 0),
    "google.protobuf.Int32Value": pa.int32(),
    "google.protobuf.UInt32Value": pa.int64(),
    "google.protobuf.BoolValue": pa.bool_(),
    "google.protobuf.StringValue": pa.string(),
    "google.protobuf.BytesValue": pa.binary(),
}
_WELL_KNOWN = (
    "any_pb2",
    "duration_pb2",
    "empty_pb2",
    "field_mask_pb2",
    "struct_pb2",
    "timestamp_pb2",
    "wrappers_pb2",
)


# -- the reader schema (driver side) --------------------------------------------------------------


def _well_known_file(name: str) -> bytes:
    """The serialized FileDescriptorProto of one of protobuf's own files (``google/protobuf/...``),
    which Confluent's serializers import without registering them."""
    import importlib

    from google.protobuf import descriptor_pb2, descriptor_pool

    for m in _WELL_KNOWN:
        importlib.import_module(f"google.protobuf.{m}")
    try:
        fd = descriptor_pool.Default().FindFileByName(name)
    except KeyError:
        raise ConfigError(f"the Protobuf schema imports {name!r}, which is neither a reference nor known") from None
    out = descriptor_pb2.FileDescriptorProto()
    fd.CopyToProto(out)
    return out.SerializeToString()


def _add_file(fdp_bytes: bytes, name: str, files: dict, resolve_ref) -> None:
    """Add a file and, first, its dependencies to ``files`` (name -> bytes, in dependency order)."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto.FromString(fdp_bytes)
    fdp.name = name
    for dep in fdp.dependency:
        if dep in files:
            continue
        if not resolve_ref(dep):  # True: added, with its own dependencies
            _add_file(_well_known_file(dep), dep, files, lambda _d: False)
    files[name] = fdp.SerializeToString()


def registry_files(url: str, schema_id: int, references: list, name: str, files: dict) -> None:
    """The files of a registered Protobuf schema and of its references, recursively, added to ``files``."""
    from pyklog.connector.spark.typed_formats import client

    c = client(url)
    refs = {r["name"]: r for r in references or []}

    def resolve(dep: str):
        r = refs.get(dep)
        if r is None:
            return False
        v = c.get_version(r["subject"], r["version"])
        registry_files(url, int(v["id"]), v.get("references") or [], dep, files)
        return True

    serialized = c.get_schema(schema_id, "serialized")["schema"]
    _add_file(base64.b64decode(serialized), name, files, resolve)


def text_files(text: str) -> dict:
    """The files of ``.proto`` text given as an option (its imports: protobuf's own files only)."""
    from pyklog.connector.schema_registry.protobuf import ProtobufSchemaError, to_descriptor

    try:
        data = to_descriptor(text, "reader.proto")
    except ProtobufSchemaError as e:
        raise ConfigError(f"not a valid Protobuf schema: {e}") from e
    files: dict = {}
    _add_file(data, "reader.proto", files, lambda _d: False)
    return files


def schema_text(files: dict, message: str | None) -> str:
    """The column's schema: the files (dependency order) and the message's full name, as JSON
    (checked now: the pool builds and the message exists)."""
    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto.FromString(files[list(files)[-1]])
    if not message:
        if not fdp.message_type:
            raise ConfigError("the Protobuf schema defines no message")
        message = f"{fdp.package}.{fdp.message_type[0].name}" if fdp.package else fdp.message_type[0].name
    elif fdp.package and not message.startswith(fdp.package + ".") and _has_message(files, f"{fdp.package}.{message}"):
        message = f"{fdp.package}.{message}"  # a name within the schema's package
    text = json.dumps({"files": [base64.b64encode(b).decode() for b in files.values()], "message": message})
    try:
        _reader(text)
    except KeyError:
        raise ConfigError(f"the Protobuf schema has no message {message!r} (give its full name)") from None
    except (TypeError, ValueError) as e:
        raise ConfigError(f"the Protobuf schema does not build: {e}") from e
    return text


def _has_message(files: dict, name: str) -> bool:
    text = json.dumps({"files": [base64.b64encode(b).decode() for b in files.values()], "message": name})
    try:
        _reader(text)
    except KeyError:
        return False
    return True


def parse_reader(
    column: str,
    fmt: str,
    schema: str | None,
    message: str | None,
    *,
    registry_url: str | None,
    subject: str | None,
    version: str | None,
    topics: tuple,
) -> str:
    """The column's schema text (see :func:`schema_text`), from ``schema`` (``.proto`` text) or the registry."""
    if schema:
        files = text_files(schema)
    elif fmt == "protobuf-confluent":
        found = registry_version(column, registry_url, subject, version, topics, "PROTOBUF")
        files = {}
        registry_files(
            registry_url, int(found["id"]), found.get("references") or [], f"schema-{found['id']}.proto", files
        )
    else:
        raise ConfigError(f"option {column}Format={fmt} needs option {column}Schema (the .proto text)")
    out = schema_text(files, message)
    arrow_type(out)  # refuses recursive messages now
    return out


# -- descriptors -> Arrow types -------------------------------------------------------------------

_READERS: dict = {}


def _reader(text: str):
    """``(message descriptor, message class)`` of a column's schema text (cached per process)."""
    got = _READERS.get(text)
    if got is None:
        from google.protobuf import descriptor_pool, message_factory

        doc = json.loads(text)
        pool = descriptor_pool.DescriptorPool()
        for b64 in doc["files"]:
            pool.AddSerializedFile(base64.b64decode(b64))
        desc = pool.FindMessageTypeByName(doc["message"])
        got = _READERS[text] = (desc, message_factory.GetMessageClass(desc))
    return got


def _is_map(fd) -> bool:
    return fd.type == _MESSAGE and fd.message_type.GetOptions().map_entry


def _is_timestamp(md) -> bool:
    return md.full_name == "google.protobuf.Timestamp"


def _element_type(fd, seen: tuple) -> pa.DataType:
    if fd.type in _SCALAR:
        return _SCALAR[fd.type]
    if fd.type not in (_MESSAGE, _GROUP):
        raise ConfigError(f"Protobuf field {fd.full_name}: type {fd.type} is not supported")
    md = fd.message_type
    if _is_timestamp(md):
        return TIMESTAMP
    if md.full_name in _WRAPPERS:
        return _WRAPPERS[md.full_name]
    return _struct_type(md, seen)


def _struct_type(md, seen: tuple) -> pa.DataType:
    if md.full_name in seen:
        raise ConfigError(
            f"the Protobuf message {md.full_name} contains itself: recursive messages have no Spark type "
            "(spark-protobuf refuses them too by default)"
        )
    seen = seen + (md.full_name,)
    return pa.struct([pa.field(fd.name, _field_type(fd, seen)) for fd in md.fields])


def _field_type(fd, seen: tuple) -> pa.DataType:
    if _is_map(fd):
        k, v = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        return pa.map_(_element_type(k, seen), _element_type(v, seen))
    t = _element_type(fd, seen)
    return pa.list_(t) if _repeated(fd) else t


def _repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)  # protobuf >= 6 (``label`` is gone)
    return rep if rep is not None else fd.label == 3


_TYPES: dict = {}


def arrow_type(text: str) -> pa.DataType:
    got = _TYPES.get(text)
    if got is None:
        got = _TYPES[text] = _struct_type(_reader(text)[0], ())
    return got


# -- messages -> Arrow arrays ---------------------------------------------------------------------


def _scalars(fd, values: list) -> pa.Array:
    """A column of scalar values (no nulls but those in ``values``)."""
    if fd.type == _ENUM:
        import pyarrow.compute as pc

        numbers = [v.number for v in fd.enum_type.values]
        names = pa.array([v.name for v in fd.enum_type.values], pa.string())
        idx = pc.index_in(pa.array(values, pa.int32()), value_set=pa.array(numbers, pa.int32()))
        return names.take(idx)
    build = _BUILD.get(fd.type)
    if build is not None:
        return pa.array(values, build).cast(_SCALAR[fd.type])
    return pa.array(values, _SCALAR[fd.type])


def _elements(fd, values: list, valid: list | None, seen: tuple) -> pa.Array:
    """A column of ``fd``'s element type from ``values`` (messages or scalars; ``valid``: False
    where the value is absent, None: all present)."""
    if fd.type not in (_MESSAGE, _GROUP):
        if valid is not None:
            values = [v if ok else None for v, ok in zip(values, valid)]
        return _scalars(fd, values)
    md = fd.message_type
    mask = None if valid is None else pa.array([not ok for ok in valid], pa.bool_())
    if _is_timestamp(md):
        import pyarrow.compute as pc

        secs = pa.array(list(map(attrgetter("seconds"), values)), pa.int64())
        nanos = pa.array(list(map(attrgetter("nanos"), values)), pa.int64())
        micros = pc.add(pc.multiply(secs, 1_000_000), pc.divide(nanos, 1000))
        if mask is not None:
            micros = pc.if_else(mask, pa.scalar(None, pa.int64()), micros)
        return micros.cast(TIMESTAMP)
    if md.full_name in _WRAPPERS:
        inner = md.fields_by_name["value"]
        return _elements(inner, list(map(attrgetter("value"), values)), valid, seen)
    return _struct(md, values, mask, seen)


def _struct(md, messages: list, mask: pa.Array | None, seen: tuple) -> pa.StructArray:
    seen = seen + (md.full_name,)
    children, fields = [], []
    for fd in md.fields:
        children.append(_field(fd, messages, seen))
        fields.append(pa.field(fd.name, children[-1].type))
    if not fields:
        return pa.array([{}] * len(messages), pa.struct([])) if mask is None else pa.nulls(len(messages), pa.struct([]))
    return pa.StructArray.from_arrays(children, fields=fields, mask=mask)


def _offsets(lengths: list) -> pa.Array:
    import itertools

    return pa.array([0, *itertools.accumulate(lengths)], pa.int32())


def _field(fd, messages: list, seen: tuple) -> pa.Array:
    """The column of field ``fd`` over ``messages`` (all present: absent messages were replaced
    by the default instance and are masked by the caller)."""
    import itertools

    containers = list(map(attrgetter(fd.name), messages))
    if _is_map(fd):
        k, v = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
        lengths = list(map(len, containers))
        offsets = _offsets(lengths)
        # iterating a map gives its keys in C; each value by a C-level lookup in its own map
        keys = list(itertools.chain.from_iterable(containers))
        owners = itertools.chain.from_iterable(map(itertools.repeat, containers, lengths))
        vals = list(map(getitem, owners, keys))
        return pa.MapArray.from_arrays(offsets, _elements(k, keys, None, seen), _elements(v, vals, None, seen))
    if _repeated(fd):
        offsets = _offsets(list(map(len, containers)))
        flat = list(itertools.chain.from_iterable(containers))
        return pa.ListArray.from_arrays(offsets, _elements(fd, flat, None, seen))
    valid = list(map(methodcaller("HasField", fd.name), messages)) if fd.has_presence else None
    if valid is not None and all(valid):
        valid = None
    return _elements(fd, containers, valid, seen)


def _message_name(fdp, indexes: list[int]) -> str:
    names = [fdp.package] if fdp.package else []
    level = fdp.message_type
    for i in indexes:
        if i < 0 or i >= len(level):
            raise ValueError(f"message indexes {indexes} name no message of the writer's schema")
        names.append(level[i].name)
        level = level[i].nested_type
    return ".".join(names)


_WRITER_NAMES: dict = {}


def _writer_message(lookup: IdLookup, schema_id: int, indexes: list[int]) -> str:
    """The full name of the message a record was written with (cached per process)."""
    key = (lookup.url, schema_id, tuple(indexes))
    got = _WRITER_NAMES.get(key)
    if got is None:
        from google.protobuf import descriptor_pb2

        found = lookup.get(schema_id)
        fdp = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(found["schema"]))
        got = _WRITER_NAMES[key] = _message_name(fdp, indexes)
    return got


def decode(fmt, values: list) -> tuple[pa.Array, list]:
    """``(the column as an Arrow struct array, error message or None per value)``; a record that
    does not parse is null with its error."""
    from google.protobuf.message import DecodeError

    from pyklog.connector.schema_registry.wire import WireFormatError, decode_header

    desc, cls = _reader(fmt.schema)
    confluent = fmt.fmt == "protobuf-confluent"
    lookup = IdLookup(fmt.registry_url, "PROTOBUF", "serialized") if confluent else None
    empty = cls()
    messages, errors, mask = [], [], []
    for v in values:
        if v is None:
            messages.append(empty)
            errors.append(None)
            mask.append(True)
            continue
        try:
            start = 0
            if confluent:
                schema_id, indexes, start = decode_header(v, protobuf=True)
                name = _writer_message(lookup, schema_id, indexes)
                if name != desc.full_name:
                    raise ValueError(f"written as message {name}, the column reads {desc.full_name}")
            m = cls.FromString(v[start:]) if start else cls.FromString(v)
            messages.append(m)
            errors.append(None)
            mask.append(False)
        except (DecodeError, WireFormatError, ValueError, IndexError) as e:
            messages.append(empty)
            errors.append(f"{type(e).__name__}: {e}")
            mask.append(True)
    arr = _struct(desc, messages, pa.array(mask, pa.bool_()) if any(mask) else None, ())
    return arr, errors
