"""JSON Schema and Protobuf typed writes without a server: the schemas derived from Spark types,
the checks of a column's type against a given schema, and the encoders (values, wire format headers,
FAILFAST naming the field)."""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark.typed_protobuf import _reader, schema_text, text_files
from pyklog.connector.spark.typed_write import encode_column
from pyklog.connector.spark.typed_write_formats import (
    RecordEncodeError,
    WriteFormat,
    check_json_writable,
    check_proto_writable,
    json_schema_for,
    message_indexes,
    proto_for,
)
from pyklog.connector.spark.typed_write_resolve import resolve_json_or_protobuf

STRUCT = T.StructType(
    [
        T.StructField("id", T.LongType(), False),
        T.StructField("name", T.StringType()),
        T.StructField("at", T.TimestampType()),
        T.StructField("amount", T.DecimalType(10, 2)),
        T.StructField("raw", T.BinaryType()),
        T.StructField("tags", T.ArrayType(T.StringType(), False)),
        T.StructField("attrs", T.MapType(T.StringType(), T.IntegerType(), False)),
        T.StructField("inner", T.StructType([T.StructField("x", T.DoubleType(), False)])),
    ]
)
ARROW = pa.struct(
    [
        ("id", pa.int64()),
        ("name", pa.string()),
        ("at", pa.timestamp("us", "UTC")),
        ("amount", pa.decimal128(10, 2)),
        ("raw", pa.binary()),
        ("tags", pa.list_(pa.string())),
        ("attrs", pa.map_(pa.string(), pa.int32())),
        ("inner", pa.struct([("x", pa.float64())])),
    ]
)
AT = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
ROW = {
    "id": 7,
    "name": None,
    "at": AT,
    "amount": decimal.Decimal("12.35"),
    "raw": b"\x00\xff",
    "tags": ["a", "b"],
    "attrs": [("k", 1)],
    "inner": {"x": 1.5},
}


def test_json_schema_derived_from_the_spark_type():
    s = json_schema_for(T.StructType([*STRUCT.fields, T.StructField("day", T.DateType())]), False, "shop.Reading")
    assert s["title"] == "shop.Reading" and s["type"] == "object"
    assert list(s["properties"]) == ["id", "name", "at", "amount", "raw", "tags", "attrs", "inner", "day"]
    assert s["required"] == ["id"]
    p = s["properties"]
    assert p["id"] == {"type": "integer"} and p["name"] == {"type": ["string", "null"]}
    assert p["at"] == {"type": ["string", "null"], "format": "date-time"}
    assert p["day"] == {"type": ["string", "null"], "format": "date"}
    assert p["amount"] == {"type": ["number", "null"]}
    assert p["raw"] == {"type": ["string", "null"], "contentEncoding": "base64"}
    assert p["tags"] == {"type": ["array", "null"], "items": {"type": "string"}}
    assert p["attrs"] == {"type": ["object", "null"], "additionalProperties": {"type": "integer"}}
    assert p["inner"] == {"type": ["object", "null"], "properties": {"x": {"type": "number"}}, "required": ["x"]}
    with pytest.raises(ConfigError, match=r"field value\.m: JSON objects have string keys"):
        json_schema_for(T.StructType([T.StructField("m", T.MapType(T.IntegerType(), T.StringType()))]))


def test_proto_derived_from_the_spark_type_builds_and_is_the_first_message():
    text = proto_for(STRUCT, "Reading", "shop")
    assert text == (
        'syntax = "proto3";\npackage shop;\nimport "google/protobuf/timestamp.proto";\n\n'
        "message Reading {\n  int64 id = 1;\n  optional string name = 2;\n  google.protobuf.Timestamp at = 3;\n"
        "  optional string amount = 4;\n  optional bytes raw = 5;\n  repeated string tags = 6;\n"
        "  map<string, int32> attrs = 7;\n  Inner inner = 8;\n  message Inner {\n    double x = 1;\n  }\n}\n"
    )
    desc = _reader(schema_text(text_files(text), None))[0]
    assert desc.full_name == "shop.Reading" and message_indexes(desc) == [0]
    assert message_indexes(desc.nested_types[0]) == [0, 0]
    with pytest.raises(ConfigError, match=r"field value\.day: Protobuf has no date type"):
        proto_for(T.StructType([T.StructField("day", T.DateType())]))
    with pytest.raises(ConfigError, match=r"field value\.xs: Protobuf has no repeated field of arrays"):
        proto_for(T.StructType([T.StructField("xs", T.ArrayType(T.ArrayType(T.IntegerType())))]))
    with pytest.raises(ConfigError, match="a Protobuf column is a struct"):
        proto_for(T.StringType())


def test_a_column_type_checked_against_a_given_schema():
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "x": {"type": "string"}}}
    st = T.StructType([T.StructField("id", T.DoubleType()), T.StructField("x", T.StringType())])
    with pytest.raises(
        ConfigError, match=r"field value\.id: Spark type double cannot be written as JSON Schema type integer"
    ):
        check_json_writable(st, schema, "value")
    closed = dict(schema, additionalProperties=False, required=["id", "x"])
    extra = T.StructType([T.StructField("id", T.LongType()), T.StructField("y", T.StringType())])
    with pytest.raises(ConfigError, match=r"field value\.y: not a property"):
        check_json_writable(extra, closed, "value")
    with pytest.raises(ConfigError, match=r"field value\.x: the JSON Schema requires it"):
        check_json_writable(T.StructType([T.StructField("id", T.LongType())]), closed, "value")
    desc = _reader(schema_text(text_files('syntax = "proto3"; message M { int32 id = 1; string s = 2; }'), None))[0]
    check_proto_writable(T.StructType([T.StructField("id", T.ShortType())]), desc, "value")
    with pytest.raises(ConfigError, match=r"field value\.id: Spark type bigint cannot be written as Protobuf integer"):
        check_proto_writable(T.StructType([T.StructField("id", T.LongType())]), desc, "value")
    with pytest.raises(ConfigError, match=r"field value\.z: not in the Protobuf message M"):
        check_proto_writable(T.StructType([T.StructField("z", T.LongType())]), desc, "value")


def test_json_values_as_to_json_writes_them_in_the_wire_format():
    fmt = resolve_json_or_protobuf("value", T.StructField("value", STRUCT), {}, "t", "json")
    fmt = WriteFormat("value", "json-confluent", fmt.schema, 9, "t-value")
    out = encode_column(fmt, pa.array([ROW, None], ARROW)).to_pylist()
    assert out[1] is None and out[0][:5] == b"\x00\x00\x00\x00\x09"
    assert json.loads(out[0][5:]) == {
        "id": 7,
        "name": None,
        "at": "2026-01-02T03:04:05.123456Z",
        "amount": 12.35,
        "raw": "AP8=",
        "tags": ["a", "b"],
        "attrs": {"k": 1},
        "inner": {"x": 1.5},
    }
    bad = dict(ROW, inner={"x": None})
    with pytest.raises(RecordEncodeError, match=r"row 1 of a batch .*field value\.inner\.x is null"):
        encode_column(fmt, pa.array([ROW, bad], ARROW))
    nan = dict(ROW, inner={"x": float("nan")})
    with pytest.raises(RecordEncodeError, match="row 0 .*JSON has no NaN"):
        encode_column(fmt, pa.array([nan], ARROW))


def test_protobuf_messages_with_message_indexes_and_rows_that_do_not_fit():
    fmt = resolve_json_or_protobuf("value", T.StructField("value", STRUCT), {}, "t", "protobuf")
    wire = WriteFormat("value", "protobuf-confluent", fmt.schema, 3, "t-value", (0,))
    out = encode_column(wire, pa.array([ROW, None], ARROW)).to_pylist()
    assert out[1] is None and out[0][:6] == b"\x00\x00\x00\x00\x03\x00"
    m = _reader(fmt.schema)[1].FromString(out[0][6:])
    assert (m.id, m.HasField("name"), m.at.ToDatetime(dt.UTC), m.amount, m.raw) == (7, False, AT, "12.35", b"\x00\xff")
    assert (list(m.tags), dict(m.attrs), m.inner.x) == (["a", "b"], {"k": 1}, 1.5)

    given = 'syntax = "proto3"; message M { int64 id = 1; string s = 2; repeated string xs = 3; }'
    st = T.StructType(
        [
            T.StructField(n, t)
            for n, t in (("id", T.LongType()), ("s", T.StringType()), ("xs", T.ArrayType(T.StringType())))
        ]
    )
    f = resolve_json_or_protobuf("value", T.StructField("value", st), {"valueschema": given}, "t", "protobuf")
    typ = pa.struct([("id", pa.int64()), ("s", pa.string()), ("xs", pa.list_(pa.string()))])
    assert len(encode_column(f, pa.array([{"id": 1, "s": "a", "xs": None}], typ))) == 1
    with pytest.raises(
        RecordEncodeError, match=r"row 1 .*field value\.s is null and the Protobuf field has no presence"
    ):
        encode_column(f, pa.array([{"id": 1, "s": "a", "xs": []}, {"id": 2, "s": None, "xs": []}], typ))
    with pytest.raises(RecordEncodeError, match=r"row 0 .*field value\.xs holds a null element"):
        encode_column(f, pa.array([{"id": 1, "s": "a", "xs": ["x", None]}], typ))


def test_a_json_key_of_a_plain_type_and_options_that_do_not_fit():
    fmt = resolve_json_or_protobuf("key", T.StructField("key", T.StringType()), {}, "t", "json")
    assert json.loads(fmt.schema) == {"type": "string"}
    assert encode_column(fmt, pa.array(["a\u00e9", None])).to_pylist() == ['"a\u00e9"'.encode(), None]
    with pytest.raises(ConfigError, match="keyMessageName is for the Protobuf formats"):
        resolve_json_or_protobuf("key", T.StructField("key", T.StringType()), {"keymessagename": "M"}, "t", "json")
    with pytest.raises(ConfigError, match="needs option schema.registry.url"):
        resolve_json_or_protobuf("key", T.StructField("key", T.StringType()), {}, "t", "json-confluent")
