"""Protobuf and JSON typed columns without a server: the Spark types (spark-protobuf's mapping, the
JSON Schema mapping), bulk decoding into Arrow structs, Confluent's message indexes, FAILFAST and
PERMISSIVE, and Avro references made self-contained."""

from __future__ import annotations

import datetime
import decimal
import json

import pyarrow as pa
import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark import typed, typed_protobuf
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.typed import RecordDecodeError, convert_batch, spark_ddl

BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
UTC = datetime.UTC

PROTO = """
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Order {
  int32 id = 1;
  string customer = 2;
  repeated Item items = 3;
  map<string, int64> tags = 4;
  Status status = 5;
  google.protobuf.Timestamp at = 6;
  optional double discount = 7;
  oneof pay { string card = 8; int64 voucher = 9; }
  google.protobuf.Int32Value priority = 10;
  uint32 u32 = 11;
  uint64 u64 = 12;
  bytes blob = 13;
  map<string, Item> by_name = 14;
  message Item { string sku = 1; sint32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; SHIPPED = 2; }
}
message Other { string x = 1; }
"""


def _batch(values: list) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
        }
    )


def _proto_opts(**extra):
    return parse_source_options({**BASE, "valueFormat": "protobuf", "valueSchema": PROTO, **extra}, streaming=False)


def test_protobuf_types_follow_spark_protobuf():
    fmt = _proto_opts().formats[0]
    assert spark_ddl(fmt) == (
        "struct<`id`:int,`customer`:string,`items`:array<struct<`sku`:string,`qty`:int>>,"
        "`tags`:map<string,bigint>,`status`:string,`at`:timestamp,`discount`:double,`card`:string,"
        "`voucher`:bigint,`priority`:int,`u32`:bigint,`u64`:decimal(20,0),`blob`:binary,"
        "`by_name`:map<string,struct<`sku`:string,`qty`:int>>>"
    )
    other = _proto_opts(valueMessageName="shop.Other").formats[0]
    assert spark_ddl(other) == "struct<`x`:string>"
    assert spark_ddl(_proto_opts(valueMessageName="Order.Item").formats[0]) == "struct<`sku`:string,`qty`:int>"
    with pytest.raises(ConfigError, match="no message 'Nope'"):
        _proto_opts(valueMessageName="Nope")
    with pytest.raises(ConfigError, match="shop.Node contains itself"):
        _proto_opts(valueSchema='syntax = "proto3"; package shop; message Node { Node next = 1; }')
    with pytest.raises(ConfigError, match="valueMessageName is for valueFormat=protobuf"):
        parse_source_options(
            {**BASE, "valueFormat": "json", "valueSchema": "{}", "valueMessageName": "X"}, streaming=False
        )


def test_protobuf_records_decode_in_bulk_with_presence_and_bad_records():
    fmt = _proto_opts().formats[0]
    _, cls = typed_protobuf._reader(fmt.schema)
    m = cls(id=7, customer="ann", status=1, discount=0.0, card="c1", u32=4_000_000_000, u64=2**64 - 1, blob=b"\0")
    m.items.add(sku="a", qty=-2)
    m.tags["k"] = 5
    m.at.seconds, m.at.nanos = 1_700_000_000, 123_456_000
    m.priority.value = 0
    m.by_name["z"].sku = "zz"
    values = [m.SerializeToString(), None, cls(id=1).SerializeToString(), b"\xff\xff\xff"]
    with pytest.raises(RecordDecodeError, match="t-0 at offset 103 is not protobuf"):
        convert_batch(_batch(values), (fmt,))
    out = convert_batch(_batch(values), _proto_opts(mode="PERMISSIVE").formats)
    rows = out.column("value").to_pylist()
    assert rows[0] == {
        "id": 7,
        "customer": "ann",
        "items": [{"sku": "a", "qty": -2}],
        "tags": [("k", 5)],
        "status": "PAID",
        "at": datetime.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC),
        "discount": 0.0,  # proto3 optional: present although zero
        "card": "c1",
        "voucher": None,  # the other oneof member
        "priority": 0,  # a wrapper: present although zero
        "u32": 4_000_000_000,
        "u64": decimal.Decimal(2**64 - 1),
        "blob": b"\0",
        "by_name": [("z", {"sku": "zz", "qty": 0})],
    }
    assert rows[1] is None and rows[3] is None
    assert rows[2]["id"] == 1 and rows[2]["customer"] == "" and rows[2]["status"] == "NEW"
    assert rows[2]["at"] is None and rows[2]["discount"] is None and rows[2]["priority"] is None
    assert out.column("valueRaw").to_pylist() == [None, None, None, values[3]]
    assert out.column("valueError").to_pylist()[3].startswith("DecodeError")


def test_confluent_message_indexes_name_the_writer_message():
    from google.protobuf import descriptor_pb2

    from pyklog.connector.schema_registry.protobuf import to_descriptor
    from pyklog.connector.schema_registry.wire import decode_header, encode

    fdp = descriptor_pb2.FileDescriptorProto.FromString(to_descriptor(PROTO))
    assert typed_protobuf._message_name(fdp, [0]) == "shop.Order"
    item = [n.name for n in fdp.message_type[0].nested_type].index("Item")  # map entries are nested types too
    assert typed_protobuf._message_name(fdp, [0, item]) == "shop.Order.Item"
    assert typed_protobuf._message_name(fdp, [1]) == "shop.Other"
    with pytest.raises(ValueError, match="name no message"):
        typed_protobuf._message_name(fdp, [2])
    assert decode_header(encode(3, b"xy", [0]), protobuf=True) == (3, [0], 6)
    assert decode_header(encode(3, b"xy", [1, 0]), protobuf=True) == (3, [1, 0], 8)


JSON_SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": ["string", "null"]},
        "score": {"type": "number"},
        "ok": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "addr": {"$ref": "#/definitions/Addr"},
        "kind": {"enum": ["A", "B"]},
    },
    "definitions": {"Addr": {"type": "object", "properties": {"city": {"type": "string"}}}},
}


def _json_opts(schema=JSON_SCHEMA, **extra):
    return parse_source_options(
        {**BASE, "valueFormat": "json", "valueSchema": json.dumps(schema), **extra}, streaming=False
    )


def test_json_schema_types():
    assert spark_ddl(_json_opts().formats[0]) == (
        "struct<`id`:bigint,`name`:string,`score`:double,`ok`:boolean,`at`:timestamp,`day`:date,"
        "`tags`:array<string>,`addr`:struct<`city`:string>,`kind`:string>"
    )
    with_map = {"type": "object", "properties": {"m": {"type": "object", "additionalProperties": {"type": "integer"}}}}
    assert spark_ddl(_json_opts(with_map).formats[0]) == "struct<`m`:map<string,bigint>>"
    for bad, why in [
        ({"type": "object"}, "without properties"),
        ({"type": ["string", "integer"]}, "no single Spark type"),
        ({"type": "object", "properties": {"a": {"$ref": "#/nope"}}}, "points at nothing"),
        ({"type": "object", "properties": {"a": {"$ref": "#"}}}, "refers to itself"),
    ]:
        with pytest.raises(ConfigError, match=why):
            _json_opts(bad)


def test_json_records_decode_in_bulk_and_bad_ones_are_found_alone():
    good = {
        "id": 1,
        "name": "a",
        "score": 1.5,
        "ok": True,
        "at": "2024-01-02T03:04:05.5+01:00",
        "day": "2024-01-02",
        "tags": ["x"],
        "addr": {"city": "c"},
        "kind": "B",
        "unknown": {"deep": 1},
    }
    values = [json.dumps(good).encode(), None, b'{\n  "id": 2\n}', b'{"id": "two"}', b"not json", b'{"id":4}{"id":5}']
    out = convert_batch(_batch(values[:3]), _json_opts().formats)
    rows = out.column("value").to_pylist()
    assert rows[0] == {
        **{k: v for k, v in good.items() if k != "unknown"},
        "at": datetime.datetime(2024, 1, 2, 2, 4, 5, 500000, tzinfo=UTC),
        "day": datetime.date(2024, 1, 2),
    }
    assert rows[1] is None and rows[2]["id"] == 2 and rows[2]["name"] is None
    with pytest.raises(RecordDecodeError, match="t-0 at offset 103 is not json .* 3 of 6 records"):
        convert_batch(_batch(values), _json_opts().formats)
    out = convert_batch(_batch(values), _json_opts(mode="PERMISSIVE").formats)
    rows = out.column("value").to_pylist()
    assert [r and r["id"] for r in rows] == [1, None, 2, None, None, None]
    assert out.column("valueRaw").to_pylist() == [None, None, None, *values[3:]]
    assert all(e for e in out.column("valueError").to_pylist()[3:])


def test_json_maps_and_confluent_headers():
    schema = {
        "type": "object",
        "properties": {"m": {"type": "object", "additionalProperties": {"type": "string", "format": "date-time"}}},
    }
    fmt = _json_opts(schema, mode="PERMISSIVE").formats[0]
    out = convert_batch(_batch([b'{"m": {"a": "2024-01-02T03:04:05Z"}}', b'{"m": 3}']), (fmt,))
    assert out.column("value").to_pylist() == [{"m": [("a", datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC))]}, None]
    # json-confluent: a record without the header is bad before any registry call
    confluent = typed.ColumnFormat("value", "json-confluent", fmt.schema, True, "http://127.0.0.1:9")
    out = convert_batch(_batch([b"{}", b"\x01\x00\x00\x00\x01{}"]), (confluent,))
    assert out.column("value").to_pylist() == [None, None]
    errors = out.column("valueError").to_pylist()
    assert "at least 5 bytes" in errors[0] and "magic byte 0" in errors[1]


def test_avro_references_are_written_in_at_their_first_use():
    from fastavro import parse_schema

    named: dict = {}
    addr = {
        "type": "record",
        "name": "Addr",
        "namespace": "geo",
        "fields": [{"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}}],
    }
    typed._collect_named(addr, "", named)
    assert sorted(named) == ["geo.Addr", "geo.Kind"]
    person = {
        "type": "record",
        "name": "Person",
        "namespace": "geo",
        "fields": [
            {"name": "home", "type": "Addr"},
            {"name": "work", "type": ["null", "geo.Addr"]},
            {"name": "k", "type": "Kind"},
        ],
    }
    out = typed._inline(person, "", named, set())
    parse_schema(out)  # self-contained: every name defined before its uses
    assert out["fields"][0]["type"]["fields"][0]["type"]["type"] == "enum"
    assert out["fields"][1]["type"] == ["null", "geo.Addr"] and out["fields"][2]["type"] == "geo.Kind"


def test_json_refs_name_other_subjects_schemas():
    from pyklog.connector.spark import typed_json

    refs = {
        "addr.json": {"type": "object", "properties": {"city": {"type": "string"}}, "$defs": {"Z": {"type": "integer"}}}
    }
    schema = {
        "type": "object",
        "properties": {"home": {"$ref": "addr.json"}, "zip": {"$ref": "addr.json#/$defs/Z"}},
    }
    text = json.dumps({"schema": schema, "refs": refs})
    assert str(typed_json.arrow_type(text)) == "struct<home: struct<city: string>, zip: int64>"
    with pytest.raises(ConfigError, match="names no reference"):
        typed_json.arrow_type(json.dumps({"schema": {"$ref": "other.json"}, "refs": refs}))
