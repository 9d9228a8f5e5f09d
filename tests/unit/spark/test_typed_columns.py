"""Typed key / value columns of the source without a server: Avro schemas mapped to Spark and Arrow
types as Spark's ``from_avro`` maps them, records decoded in bulk into Arrow structs (schema
evolution through fastavro's resolution is the registry's part), FAILFAST and PERMISSIVE."""

from __future__ import annotations

import datetime
import decimal
import io
import json

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.typed import RecordDecodeError, arrow_type, convert_batch, spark_ddl

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "item", "type": "string"},
        {"name": "qty", "type": ["null", "int"], "default": None},
        {"name": "price", "type": {"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "double"}},
        {"name": "kind", "type": {"type": "enum", "name": "Kind", "symbols": ["A", "B"]}},
        {"name": "ref", "type": ["null", "string", "long"], "default": None},
    ],
}
BASE = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}


def _encode(rec) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(SCHEMA), rec)
    return buf.getvalue()


def _order(i, **kw):
    rec = {
        "id": i,
        "item": f"item-{i}",
        "qty": i if i % 2 else None,
        "price": decimal.Decimal("12.50"),
        "day": datetime.date(2026, 11, 28),
        "at": datetime.datetime(2026, 11, 28, 1, 2, 3, tzinfo=datetime.UTC),
        "tags": ["x", "y"][: i % 3],
        "attrs": {"w": 1.5},
        "kind": "B",
        "ref": "r" if i == 1 else (7 if i == 2 else None),
    }
    rec.update(kw)
    return rec


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


def _opts(**extra):
    return parse_source_options(
        {**BASE, "valueFormat": "avro", "valueSchema": json.dumps(SCHEMA), **extra}, streaming=False
    )


def test_types_follow_spark_from_avro():
    fmt = _opts().formats[0]
    ddl = spark_ddl(fmt)
    assert ddl.startswith("struct<`id`:bigint,`item`:string,`qty`:int,`price`:decimal(9,2),`day`:date,")
    assert "`at`:timestamp,`tags`:array<string>,`attrs`:map<string,double>,`kind`:string" in ddl
    assert "`ref`:struct<member0:string,member1:bigint>" in ddl
    t = arrow_type(fmt)
    assert t.field("price").type == pa.decimal128(9, 2) and t.field("at").type == pa.timestamp("us", tz="UTC")


def test_a_batch_decodes_into_one_struct_column_with_tombstones_as_nulls():
    fmt = _opts().formats
    values = [_encode(_order(i)) for i in range(3)] + [None]
    out = convert_batch(_batch(values), fmt)
    assert out.schema.field("value").type == arrow_type(fmt[0]) and out.num_rows == 4
    rows = out.column("value").to_pylist()
    assert rows[0]["id"] == 0 and rows[0]["qty"] is None and rows[1]["qty"] == 1
    assert rows[1]["ref"] == {"member0": "r", "member1": None} and rows[2]["ref"] == {"member0": None, "member1": 7}
    assert rows[0]["price"] == decimal.Decimal("12.50") and rows[2]["tags"] == ["x", "y"]
    assert rows[0]["attrs"] == [("w", 1.5)] and rows[0]["kind"] == "B"
    # time logical types are read as numbers and converted column-wise: the same values
    assert rows[1]["at"] == datetime.datetime(2026, 11, 28, 1, 2, 3, tzinfo=datetime.UTC)
    assert rows[1]["day"] == datetime.date(2026, 11, 28)
    assert rows[3] is None
    assert out.column("offset").to_pylist() == [100, 101, 102, 103]  # the other columns untouched


def test_failfast_names_the_record_and_permissive_keeps_it():
    values = [_encode(_order(0)), b"\x02garbage", _encode(_order(1))[:-3]]
    with pytest.raises(RecordDecodeError, match="t-0 at offset 101 .* 2 of 3 records"):
        convert_batch(_batch(values), _opts().formats)
    out = convert_batch(_batch(values), _opts(mode="PERMISSIVE").formats)
    assert out.schema.names[-2:] == ["valueRaw", "valueError"]
    assert out.column("value").to_pylist()[0]["id"] == 0
    assert out.column("value").to_pylist()[1:] == [None, None]
    assert out.column("valueRaw").to_pylist() == [None, values[1], values[2]]
    errors = out.column("valueError").to_pylist()
    assert errors[0] is None and errors[1] and errors[2]


def test_bad_options_are_named():
    with pytest.raises(ConfigError, match="valueFormat=avro needs option valueSchema"):
        parse_source_options({**BASE, "valueFormat": "avro"}, streaming=False)
    with pytest.raises(ConfigError, match="valueSchema is not a valid Avro schema"):
        parse_source_options({**BASE, "valueFormat": "avro", "valueSchema": '{"type": "recrod"}'}, streaming=False)
    with pytest.raises(ConfigError, match="keyFormat: expected one of binary, avro"):
        parse_source_options({**BASE, "keyFormat": "thrift"}, streaming=False)
    with pytest.raises(ConfigError, match="mode: expected FAILFAST or PERMISSIVE"):
        _opts(mode="lenient")
    recursive = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "next", "type": ["null", "shop.Order"]}]}
    with pytest.raises(ConfigError, match="'shop.Order' refers to itself"):
        spark_ddl(_opts(valueSchema=json.dumps(recursive)).formats[0])
