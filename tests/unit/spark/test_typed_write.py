"""The sink's typed columns without a server: the Avro schema derived from a Spark type (as Spark's
``to_avro``), the check that a Spark type is writable with a given schema, the encoding of Arrow
columns (read back with fastavro), and the subject naming strategies."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_reader
from pyspark.sql import types as T

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.typed import subject_for
from pyklog.connector.spark.typed_write import (
    RecordEncodeError,
    WriteFormat,
    avro_schema_for,
    check_writable,
    encode_column,
    resolve_write_format,
)

ROW = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType(), True),
        T.StructField("small", T.ShortType(), True),
        T.StructField("at", T.TimestampType(), True),
        T.StructField("day", T.DateType(), True),
        T.StructField("amount", T.DecimalType(10, 2), True),
        T.StructField("tags", T.ArrayType(T.StringType(), False), True),
        T.StructField("attrs", T.MapType(T.StringType(), T.IntegerType(), True), True),
        T.StructField("inner", T.StructType([T.StructField("x", T.DoubleType(), False)]), True),
    ]
)


def test_schema_derived_as_spark_to_avro_derives_it():
    s = avro_schema_for(ROW)
    assert s["type"] == "record" and s["name"] == "topLevelRecord" and "namespace" not in s
    f = {x["name"]: x["type"] for x in s["fields"]}
    assert f["id"] == "long"  # not nullable: no union
    assert f["name"] == ["string", "null"]  # nullable: [type, null], in Spark's order
    assert f["small"] == ["int", "null"]
    assert f["at"] == [{"type": "long", "logicalType": "timestamp-micros"}, "null"]
    assert f["day"] == [{"type": "int", "logicalType": "date"}, "null"]
    # decimal: a fixed of the fewest bytes holding 10 digits, named after the field
    assert f["amount"] == [
        {
            "type": "fixed",
            "name": "topLevelRecord.amount.fixed",
            "size": 5,
            "logicalType": "decimal",
            "precision": 10,
            "scale": 2,
        },
        "null",
    ]
    assert f["tags"] == [{"type": "array", "items": "string"}, "null"]
    assert f["attrs"] == [{"type": "map", "values": ["int", "null"]}, "null"]
    # nested records: named after their field, in the namespace of the enclosing record
    assert f["inner"] == [
        {"type": "record", "name": "inner", "namespace": "topLevelRecord", "fields": [{"name": "x", "type": "double"}]},
        "null",
    ]
    parse_schema(s)  # a valid Avro schema
    assert avro_schema_for(T.TimestampNTZType()) == {"type": "long", "logicalType": "local-timestamp-micros"}
    assert avro_schema_for(T.BinaryType(), True) == ["bytes", "null"]
    named = avro_schema_for(ROW, record_name="Reading", namespace="iot")
    assert (named["name"], named["namespace"]) == ("Reading", "iot")
    assert {x["name"]: x["type"] for x in named["fields"]}["inner"][0]["namespace"] == "iot.Reading"
    with pytest.raises(ConfigError, match="string keys"):
        avro_schema_for(T.MapType(T.IntegerType(), T.StringType()))


def test_writable_check_names_the_field():
    schema = avro_schema_for(ROW)
    check_writable(ROW, schema, "value")
    wrong = json.loads(json.dumps(schema))
    wrong["fields"][8]["type"][0]["fields"][0]["type"] = "string"
    with pytest.raises(ConfigError, match=r"field value\.inner\.x: Spark type double cannot be written as Avro string"):
        check_writable(ROW, wrong, "value")
    narrow = T.StructType([T.StructField("id", T.LongType())])
    with pytest.raises(ConfigError, match=r"value\.id: Spark type bigint cannot be written as Avro int"):
        check_writable(narrow, {"type": "record", "name": "R", "fields": [{"name": "id", "type": "int"}]}, "value")
    extra = T.StructType([T.StructField("id", T.IntegerType()), T.StructField("other", T.StringType())])
    with pytest.raises(ConfigError, match=r"value\.other: not in the Avro record 'R'"):
        check_writable(extra, {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}]}, "value")
    required = {"type": "record", "name": "R", "fields": [{"name": "id", "type": "long"}, {"name": "z", "type": "int"}]}
    with pytest.raises(ConfigError, match=r"value\.z: the Avro record 'R' requires it"):
        check_writable(T.StructType([T.StructField("id", T.IntegerType())]), required, "value")
    # a missing field with a default, and int widened to long, are fine
    required["fields"][1]["default"] = 0
    check_writable(T.StructType([T.StructField("id", T.IntegerType())]), required, "value")
    with pytest.raises(ConfigError, match=r"decimal\(5,2\) does not hold decimal\(10,2\)"):
        check_writable(
            T.DecimalType(10, 2),
            {"type": "bytes", "logicalType": "decimal", "precision": 5, "scale": 2},
            "value",
        )


def _fmt(spark_type, schema=None, schema_id=None):
    return WriteFormat("value", "avro", json.dumps(schema or avro_schema_for(spark_type)), schema_id)


def _arrow_rows():
    at = dt.datetime(2024, 5, 1, 12, 30, 15, 123456, tzinfo=dt.UTC)
    rows = [
        {
            "id": 1,
            "name": "a",
            "small": 3,
            "at": at,
            "day": dt.date(2024, 5, 1),
            "amount": decimal.Decimal("12.34"),
            "tags": ["x", "y"],
            "attrs": [("k", 1), ("n", None)],
            "inner": {"x": 1.5},
        },
        {
            "id": 2,
            "name": None,
            "small": None,
            "at": None,
            "day": None,
            "amount": None,
            "tags": None,
            "attrs": None,
            "inner": None,
        },
        None,
    ]
    typ = pa.struct(
        [
            ("id", pa.int64()),
            ("name", pa.string()),
            ("small", pa.int16()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("amount", pa.decimal128(10, 2)),
            ("tags", pa.list_(pa.string())),
            ("attrs", pa.map_(pa.string(), pa.int32())),
            ("inner", pa.struct([("x", pa.float64())])),
        ]
    )
    return pa.array(rows, type=typ), at


def test_encoded_rows_read_back_with_the_schema():
    arr, at = _arrow_rows()
    fmt = _fmt(ROW, schema_id=7)
    out = encode_column(fmt, arr)
    assert out.type == pa.binary() and out[2].as_py() is None  # a null struct is a tombstone
    parsed = parse_schema(json.loads(fmt.schema))
    first = out[0].as_py()
    assert first[:5] == b"\x00\x00\x00\x00\x07"  # Confluent's header: magic 0, id 7
    got = schemaless_reader(io.BytesIO(first[5:]), parsed, None)
    assert got == {
        "id": 1,
        "name": "a",
        "small": 3,
        "at": at,
        "day": dt.date(2024, 5, 1),
        "amount": decimal.Decimal("12.34"),
        "tags": ["x", "y"],
        "attrs": {"k": 1, "n": None},
        "inner": {"x": 1.5},
    }
    second = schemaless_reader(io.BytesIO(out[1].as_py()[5:]), parsed, None)
    assert second["id"] == 2 and second["name"] is None and second["inner"] is None
    # a given schema with timestamp-millis: the micros are cut to millis in Arrow
    millis = json.loads(fmt.schema)
    millis["fields"][3]["type"][0]["logicalType"] = "timestamp-millis"
    out = encode_column(WriteFormat("value", "avro", json.dumps(millis)), arr)
    back = schemaless_reader(io.BytesIO(out[0].as_py()), parse_schema(millis), None)
    assert back["at"] == at.replace(microsecond=123000)


def test_a_row_that_does_not_fit_fails_naming_the_field():
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "id", "type": "long"}, {"name": "s", "type": "string"}],
    }
    arr = pa.array(
        [{"id": 1, "s": "ok"}, {"id": 2, "s": None}], type=pa.struct([("id", pa.int64()), ("s", pa.string())])
    )
    with pytest.raises(RecordEncodeError, match=r"row 1 .*value column.*R\.s"):
        encode_column(WriteFormat("value", "avro", json.dumps(schema)), arr)
    enum = {"type": "enum", "name": "Color", "symbols": ["RED"]}
    with pytest.raises(RecordEncodeError, match="row 0"):
        encode_column(WriteFormat("value", "avro", json.dumps(enum)), pa.array(["BLUE"]))


def test_plain_avro_format_from_options():
    field = T.StructField("value", ROW, True)
    wf = resolve_write_format("value", field, {"valueformat": "avro", "valuerecordname": "iot.Reading"}, "t")
    s = json.loads(wf.schema)
    assert (s["name"], s["namespace"], wf.schema_id, wf.header) == ("Reading", "iot", None, b"")
    assert resolve_write_format("value", field, {}, "t") is None
    with pytest.raises(ConfigError, match="valueSchema is given but valueFormat is binary"):
        resolve_write_format("value", field, {"valueschema": '"long"'}, "t")
    with pytest.raises(ConfigError, match="needs option schema.registry.url"):
        resolve_write_format("value", field, {"valueformat": "avro-confluent"}, "t")
    with pytest.raises(ConfigError, match=r"field value\.id"):
        resolve_write_format(
            "value",
            field,
            {
                "valueformat": "avro",
                "valueschema": '{"type":"record","name":"R","fields":[{"name":"id","type":"int"}]}',
            },
            "t",
        )


def test_subject_naming_strategies():
    assert subject_for("value", ("orders",), None, "shop.Order") == "orders-value"
    assert subject_for("key", ("orders",), "TopicNameStrategy", None) == "orders-key"
    assert subject_for("value", ("orders",), "RecordNameStrategy", "shop.Order") == "shop.Order"
    assert subject_for("value", (), "io.confluent.kafka.serializers.subject.RecordNameStrategy", "shop.Order") == (
        "shop.Order"
    )
    cls = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    assert subject_for("value", ("orders",), cls, "shop.Order") == "orders-shop.Order"
    with pytest.raises(ConfigError, match="value.subject.name.strategy: expected one of"):
        subject_for("value", ("orders",), "FancyStrategy", "x")
    with pytest.raises(ConfigError, match="valueRecordName"):
        subject_for("value", ("orders",), "RecordNameStrategy", None)
    with pytest.raises(ConfigError, match="the 'topic' option"):
        subject_for("value", (), None, None, sink=True)


def test_sink_writer_takes_typed_columns_only_with_a_format():
    from pyklog.connector.spark.options import parse_sink_options
    from pyklog.connector.spark.sink import PyklogBatchWriter

    schema = T.StructType([T.StructField("key", T.StringType()), T.StructField("value", ROW)])
    base = {"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "t"}
    with pytest.raises(ConfigError, match="column 'value' must be string or binary.*set valueFormat=avro"):
        PyklogBatchWriter(parse_sink_options(base), schema)
    w = PyklogBatchWriter(parse_sink_options({**base, "valueFormat": "avro", "valueRecordName": "iot.Reading"}), schema)
    assert set(w.formats) == {"value"} and w.plan["value"] == "value"
    assert json.loads(w.formats["value"].schema)["name"] == "Reading"
    # the registry options reach the writer; a format without its column is refused
    opts = parse_sink_options({**base, "keyFormat": "avro", "value.subject.name.strategy": "RecordNameStrategy"})
    assert dict(opts.typed_options)["value.subject.name.strategy"] == "RecordNameStrategy"
    with pytest.raises(ConfigError, match="keyFormat is set but the DataFrame has no column 'key'"):
        PyklogBatchWriter(opts, T.StructType([T.StructField("value", T.BinaryType())]))


def test_flat_records_encoded_column_wise_equal_fastavro_bytes():
    """Flat records (primitives, nullable primitives, dates and timestamps) are encoded column by
    column in Arrow; every byte equals fastavro's writer's, for sliced input, null structs, both
    orders of a union with null, and widened types."""
    from fastavro import schemaless_writer

    from pyklog.connector.spark import typed_write

    schema = {
        "type": "record",
        "name": "Flat",
        "fields": [
            {"name": "i", "type": "int"},
            {"name": "l", "type": ["null", "long"]},
            {"name": "wide", "type": "double"},  # an int column, widened
            {"name": "f", "type": ["float", "null"]},
            {"name": "d", "type": "double"},
            {"name": "b", "type": ["null", "boolean"]},
            {"name": "s", "type": ["string", "null"]},
            {"name": "raw", "type": "bytes"},
            {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
            {
                "name": "amount",
                "type": [
                    "null",
                    {"type": "fixed", "name": "amt", "size": 5, "logicalType": "decimal", "precision": 10, "scale": 2},
                ],
            },
            {
                "name": "big",
                "type": {
                    "type": "fixed",
                    "name": "big",
                    "size": 16,
                    "logicalType": "decimal",
                    "precision": 38,
                    "scale": 0,
                },
            },
        ],
    }
    n = 50
    at0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
    rows = [
        None
        if i % 11 == 5
        else {
            "i": i - 25,
            "l": None if i % 3 == 0 else (i - 20) * 10**12,
            "wide": i * 1000,
            "f": None if i % 4 == 0 else i / 8,
            "d": -i / 3,
            "b": None if i % 5 == 0 else i % 2 == 0,
            "s": None if i % 7 == 0 else "\u00e9" * (i % 4) + "x" * (i * 3),
            "raw": bytes(range(i % 5)),
            "at": None if i % 6 == 0 else at0 + dt.timedelta(milliseconds=i * 1001, microseconds=i),
            "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
            "amount": None if i % 9 == 0 else decimal.Decimal(i * 12345 - 300000) / 100,
            "big": decimal.Decimal(-(10**37) + i * 10**30),
        }
        for i in range(n)
    ]
    typ = pa.struct(
        [
            ("i", pa.int32()),
            ("l", pa.int64()),
            ("wide", pa.int32()),
            ("f", pa.float32()),
            ("d", pa.float64()),
            ("b", pa.bool_()),
            ("s", pa.string()),
            ("raw", pa.binary()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("day", pa.date32()),
            ("amount", pa.decimal128(10, 2)),
            ("big", pa.decimal128(38, 0)),
        ]
    )
    arr = pa.array(rows, type=typ).slice(3, 40)
    fmt = WriteFormat("value", "avro-confluent", json.dumps(schema), 258)
    plan = typed_write._plan(fmt)
    fast = typed_write._columnar(plan, typed_write._numbers(plan.full, arr, {}), fmt.header)
    assert fast is not None
    parsed = parse_schema(schema)
    for row, got in zip(rows[3:43], fast.to_pylist(), strict=True):
        if row is None:
            assert got is None
            continue
        buf = io.BytesIO()
        schemaless_writer(
            buf,
            parsed,
            {**row, "at": row["at"].replace(microsecond=row["at"].microsecond // 1000 * 1000) if row["at"] else None},
        )
        assert got == b"\x00\x00\x00\x01\x02" + buf.getvalue(), row
    assert encode_column(fmt, arr).to_pylist() == fast.to_pylist()
