"""Protobuf and JSON Schema typed columns through the real source and a real registry process:
records produced by confluent-kafka's ProtobufSerializer and JSONSerializer (two versions of a
compatible schema each; Protobuf importing another subject's schema and protobuf's Timestamp) are
read by a real SparkSession as typed columns with the values the producer wrote; an Avro schema
that references another subject's named type reads too, and a JSON Schema whose $ref names a
reference.  Bad input: a truncated message (PERMISSIVE keeps it with its bytes and error), an
unknown schema id (FAILFAST names the registry's 40403), a registry that is down (the error names
its URL, in PERMISSIVE mode too)."""

from __future__ import annotations

import datetime
import io
import json
import uuid

import pytest

from tests.integration.spark.support import make_topic

UTC = datetime.UTC

MONEY = """syntax = "proto3";
package fin;
message Money { string currency = 1; int64 cents = 2; }
"""
ORDER_V1 = """syntax = "proto3";
package shop;
import "money.proto";
import "google/protobuf/timestamp.proto";
message Order {
  int32 id = 1;
  repeated Line lines = 2;
  map<string, string> attrs = 3;
  Status status = 4;
  google.protobuf.Timestamp at = 5;
  fin.Money total = 6;
  message Line { string sku = 1; int32 qty = 2; }
  enum Status { NEW = 0; PAID = 1; }
}
"""
ORDER_V2 = ORDER_V1.replace("  fin.Money total = 6;\n", "  fin.Money total = 6;\n  optional string note = 7;\n")


def _classes(files: list[tuple[str, str]]):
    """Message classes of ``.proto`` texts (no protoc: the registry's parser builds the descriptors)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2

    from pyklog.connector.schema_registry.protobuf import to_descriptor

    pool = descriptor_pool.DescriptorPool()
    ts = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(ts)
    pool.Add(ts)
    for name, text in files:
        pool.AddSerializedFile(to_descriptor(text, name))
    return {n: message_factory.GetMessageClass(pool.FindMessageTypeByName(n)) for n in ("shop.Order", "fin.Money")}


def _order(cls, i: int, v2: bool):
    m = cls(id=i, status=i % 2)
    for j in range(i % 3):
        m.lines.add(sku=f"s{j}", qty=j + 1)
    if i % 2:
        m.attrs["k"] = f"v{i}"
    m.at.seconds, m.at.nanos = 1_700_000_000 + i, 1000 * i
    m.total.currency, m.total.cents = "EUR", 100 * i
    if v2 and i % 4:
        m.note = f"n{i}"
    return m


def _expected_order(i: int, v2: bool) -> dict:
    return {
        "id": i,
        "lines": [{"sku": f"s{j}", "qty": j + 1} for j in range(i % 3)],
        "attrs": {"k": f"v{i}"} if i % 2 else {},
        "status": ("NEW", "PAID")[i % 2],
        "at": datetime.datetime.fromtimestamp(1_700_000_000 + i, UTC) + datetime.timedelta(microseconds=i),
        "total": {"currency": "EUR", "cents": 100 * i},
        "note": f"n{i}" if v2 and i % 4 else None,
    }


PERSON_V1 = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "born": {"type": "string", "format": "date"},
        "seen": {"type": "string", "format": "date-time"},
        "scores": {"type": "array", "items": {"type": "number"}},
        "home": {"type": "object", "properties": {"city": {"type": "string"}}},
        "labels": {"type": "object", "additionalProperties": {"type": "integer"}},
    },
    "required": ["name"],
}
PERSON_V2 = {**PERSON_V1, "properties": {**PERSON_V1["properties"], "vip": {"type": ["boolean", "null"]}}}


def _person(i: int, v2: bool) -> dict:
    p = {
        "name": f"p{i}",
        "age": 20 + i,
        "born": f"2000-01-{1 + i % 28:02d}",
        "seen": f"2026-11-28T01:02:{i % 60:02d}Z",
        "scores": [i / 2, 1.0],
        "home": {"city": f"c{i}"},
        "labels": {"a": i},
    }
    if v2:
        p["vip"] = bool(i % 2)
    return p


def _read(spark, boot, topic, url, fmt, **extra):
    r = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("valueFormat", fmt)
        .option("schema.registry.url", url)
    )
    for k, v in extra.items():
        r = r.option(k, v)
    return r.load()


def test_protobuf_json_and_avro_references_from_confluent_serializers(spark, broker_factory, tmp_path):
    from confluent_kafka import Producer as CProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONSerializer
    from confluent_kafka.schema_registry.protobuf import ProtobufSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pyklog.connector.schema_registry.process import RegistryProcess

    broker = broker_factory(0, group_initial_rebalance_delay_ms=0)
    boot = broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    orders, people, avro_topic = f"orders-{tag}", f"people-{tag}", f"visits-{tag}"
    for t in (orders, people, avro_topic):
        make_topic(boot, t, 2)
    registry = RegistryProcess(boot, tmp_path, "sr").start()
    stopped = False
    try:
        sr = SchemaRegistryClient({"url": registry.url})
        p = CProducer({"bootstrap.servers": boot, "linger.ms": 5})

        # -- Protobuf: version 1, then version 2 (an optional field added), money.proto a reference
        ctx = SerializationContext(orders, MessageField.VALUE)
        n = 60
        for version, text in ((1, ORDER_V1), (2, ORDER_V2)):
            cls = _classes([("money.proto", MONEY), ("order.proto", text)])["shop.Order"]
            ser = ProtobufSerializer(cls, sr, {"use.deprecated.format": False})
            for i in range(n * (version - 1), n * version):
                p.produce(orders, ser(_order(cls, i, version == 2), ctx), partition=i % 2)
        assert p.flush(30) == 0
        latest = sr.get_latest_version(f"{orders}-value")
        assert latest.version == 2 and [r.name for r in latest.schema.references] == ["money.proto"]

        df = _read(spark, boot, orders, registry.url, "protobuf-confluent")
        assert dict(df.dtypes)["value"] == (
            "struct<id:int,lines:array<struct<sku:string,qty:int>>,attrs:map<string,string>,status:string,"
            "at:timestamp,total:struct<currency:string,cents:bigint>,note:string>"
        )
        rows = df.selectExpr("value.*").collect()
        got = sorted((r.asDict(recursive=True) for r in rows), key=lambda r: r["id"])
        for r in got:  # Spark's timestamps are local wall-clock datetimes: compare in UTC
            r["at"] = r["at"].astimezone(UTC)
        assert got == [_expected_order(i, i >= n) for i in range(2 * n)]

        # -- JSON Schema: version 1, then version 2 (an optional property in a closed model)
        ctx = SerializationContext(people, MessageField.VALUE)
        for version, schema in ((1, PERSON_V1), (2, PERSON_V2)):
            ser = JSONSerializer(json.dumps(schema), sr)
            for i in range(n * (version - 1), n * version):
                p.produce(people, ser(_person(i, version == 2), ctx), partition=i % 2)
        assert p.flush(30) == 0
        df = _read(spark, boot, people, registry.url, "json-confluent")
        assert dict(df.dtypes)["value"] == (
            "struct<name:string,age:bigint,born:date,seen:timestamp,scores:array<double>,"
            "home:struct<city:string>,labels:map<string,bigint>,vip:boolean>"
        )
        got = sorted((r.asDict(recursive=True) for r in df.selectExpr("value.*").collect()), key=lambda r: r["age"])
        for r in got:
            r["born"] = r["born"].isoformat()
            r["seen"] = r["seen"].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        assert got == [{"vip": None, **_person(i, i >= n)} for i in range(2 * n)]

        # -- Avro and JSON Schema: a field whose type is another subject's schema (a schema reference)
        _avro_reference(spark, boot, avro_topic, registry.url)
        _json_reference(spark, boot, f"trips-{tag}", registry.url)

        # -- bad input: a truncated message, an unknown schema id
        good = ser(_person(1, True), ctx)
        p.produce(people, good[:-3], partition=0)
        unknown = b"\x00" + (987654).to_bytes(4, "big") + b"\x00" + b"\x08\x01"  # header, index [0], id=1
        p.produce(orders, unknown, partition=0)
        assert p.flush(30) == 0
        bad = _read(spark, boot, people, registry.url, "json-confluent", mode="PERMISSIVE").where("value IS NULL")
        bad = bad.collect()
        assert len(bad) == 1 and bad[0].valueRaw == good[:-3] and "not JSON" in bad[0].valueError
        with pytest.raises(Exception, match=r"schema id 987654 is not in the schema registry at .*40403"):
            _read(spark, boot, orders, registry.url, "protobuf-confluent").collect()

        # -- the registry down: the read fails naming the registry's URL (no hang, bounded retries)
        registry.stop()
        stopped = True
        p.produce(orders, b"\x00" + (987655).to_bytes(4, "big") + b"\x00\x08\x01", partition=1)  # not cached
        p.produce(avro_topic, b"\x00" + (987656).to_bytes(4, "big") + b"\x02a", partition=1)
        assert p.flush(30) == 0
        del p  # its connections closed before the broker stops
        # (the driver's cached reader schema may have expired: then the query's definition fails)
        down = rf"schema registry at {registry.url} (did not answer|cannot be reached)"
        with pytest.raises(Exception, match=down):
            _read(spark, boot, orders, registry.url, "protobuf-confluent", mode="PERMISSIVE").collect()
        with pytest.raises(Exception, match=down):  # Avro too, not a bad row per record
            _read(spark, boot, avro_topic, registry.url, "avro-confluent", mode="PERMISSIVE").collect()
    finally:
        if not stopped:
            registry.stop()


ADDR = {"type": "record", "name": "Addr", "namespace": "geo", "fields": [{"name": "city", "type": "string"}]}
VISIT = {
    "type": "record",
    "name": "Visit",
    "namespace": "geo",
    "fields": [
        {"name": "who", "type": "string"},
        {"name": "where", "type": "Addr"},
        {"name": "back", "type": ["null", "Addr"]},
    ],
}


def _avro_reference(spark, boot, topic, url):
    from fastavro import parse_schema, schemaless_writer

    from pyklog.connector.producer import Producer
    from pyklog.connector.schema_registry.client import SchemaRegistryClient

    c = SchemaRegistryClient(url)
    c.register("geo-addr", json.dumps(ADDR))
    schema_id = c.register(
        f"{topic}-value", json.dumps(VISIT), references=[{"name": "geo.Addr", "subject": "geo-addr", "version": 1}]
    )
    full = parse_schema({**VISIT, "fields": [VISIT["fields"][0], {"name": "where", "type": ADDR}, VISIT["fields"][2]]})
    with Producer({"bootstrap.servers": boot}) as p:
        for i in range(10):
            buf = io.BytesIO()
            schemaless_writer(
                buf, full, {"who": f"w{i}", "where": {"city": f"c{i}"}, "back": {"city": "b"} if i % 2 else None}
            )
            p.produce(topic, b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue(), partition=i % 2)
        p.flush()
    df = _read(spark, boot, topic, url, "avro-confluent")
    assert dict(df.dtypes)["value"] == "struct<who:string,where:struct<city:string>,back:struct<city:string>>"
    got = sorted((r.who, r.where.city, r.back and r.back.city) for r in df.select("value.*").collect())
    assert got == sorted((f"w{i}", f"c{i}", "b" if i % 2 else None) for i in range(10))


def _json_reference(spark, boot, topic, url):
    from pyklog.connector.producer import Producer
    from pyklog.connector.schema_registry.client import SchemaRegistryClient

    make_topic(boot, topic, 1)
    c = SchemaRegistryClient(url)
    place = {"type": "object", "properties": {"city": {"type": "string"}}}
    c.register("place.json", json.dumps(place), "JSON")
    trip = {"type": "object", "properties": {"to": {"$ref": "place.json"}, "km": {"type": "number"}}}
    refs = [{"name": "place.json", "subject": "place.json", "version": 1}]
    schema_id = c.register(f"{topic}-value", json.dumps(trip), "JSON", references=refs)
    with Producer({"bootstrap.servers": boot}) as p:
        for i in range(5):
            p.produce(
                topic, b"\x00" + schema_id.to_bytes(4, "big") + json.dumps({"to": {"city": f"c{i}"}, "km": i}).encode()
            )
        p.flush()
    df = _read(spark, boot, topic, url, "json-confluent")
    assert dict(df.dtypes)["value"] == "struct<to:struct<city:string>,km:double>"
    assert sorted((r.to.city, r.km) for r in df.select("value.*").collect()) == [(f"c{i}", float(i)) for i in range(5)]
