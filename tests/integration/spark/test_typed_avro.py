"""Typed Avro values through the real source: records written as Avro by a producer are read by a
real SparkSession as a struct column (``select("value.*")`` gives the fields), in a batch read and a
streaming query; a record that is not Avro of the schema fails the read (FAILFAST, naming where) or
comes back as a null with its bytes and the error (PERMISSIVE)."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from fastavro import parse_schema, schemaless_writer

from pyklog.connector.producer import Producer
from tests.integration.spark.support import make_topic, wait_query

SCHEMA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "user", "type": "string"},
        {"name": "page", "type": "int"},
        {"name": "ms", "type": ["null", "long"], "default": None},
    ],
}


def _avro(rec) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(SCHEMA), rec)
    return buf.getvalue()


def _reader(spark, boot, topic, **extra):
    r = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("valueFormat", "avro")
        .option("valueSchema", json.dumps(SCHEMA))
    )
    for k, v in extra.items():
        r = r.option(k, v)
    return r.load()


def test_avro_values_read_as_struct_columns_batch_and_stream(spark, broker, tmp_path):
    boot = broker.bootstrap
    topic = f"avro-{uuid.uuid4().hex[:6]}"
    make_topic(boot, topic, 2)
    expected = [{"user": f"u{i}", "page": i % 7, "ms": i * 10 if i % 3 else None} for i in range(500)]
    with Producer({"bootstrap.servers": boot, "linger.ms": 5}) as p:
        for i, rec in enumerate(expected):
            p.produce(topic, _avro(rec), key=str(i).encode(), partition=i % 2)
        p.flush()

    df = _reader(spark, boot, topic)
    assert dict(df.dtypes)["value"] == "struct<user:string,page:int,ms:bigint>"
    rows = df.select("value.*").collect()
    assert sorted((r.user, r.page, r.ms) for r in rows) == sorted((e["user"], e["page"], e["ms"]) for e in expected)
    assert df.where("value.page = 3").count() == sum(1 for e in expected if e["page"] == 3)

    got = []
    q = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("valueFormat", "avro")
        .option("valueSchema", json.dumps(SCHEMA))
        .load()
        .select("value.user", "value.page")
        .writeStream.foreachBatch(lambda d, _id: got.extend(tuple(r) for r in d.collect()))
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        wait_query(q, lambda: len(got) >= len(expected), what="the stream to read every record")
    finally:
        q.stop()
    assert sorted(got) == sorted((e["user"], e["page"]) for e in expected)

    # a record that is not Avro of the schema
    with Producer({"bootstrap.servers": boot}) as p:
        p.produce(topic, b"\xff\xff not avro", partition=1)
        p.flush()
    with pytest.raises(Exception, match=rf"{topic}-1 at offset \d+ is not avro"):
        _reader(spark, boot, topic).collect()
    bad = _reader(spark, boot, topic, mode="PERMISSIVE").where("value IS NULL").collect()
    assert len(bad) == 1 and bad[0].valueRaw == b"\xff\xff not avro" and bad[0].valueError


V1 = {"type": "record", "name": "Reading", "namespace": "iot", "fields": [{"name": "sensor", "type": "string"}]}
V2 = {
    "type": "record",
    "name": "Reading",
    "namespace": "iot",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "celsius", "type": "double", "default": -273.15},
    ],
}


def test_confluent_avro_with_a_registry_reads_two_schema_versions_into_one_type(spark, broker_factory, tmp_path):
    """confluent-kafka's AvroSerializer writes with version 1, then with version 2 (a field added
    with a default): the query reads every record into version 2's type, version 1's records with
    the default; a schema id the registry does not know fails naming the registry's URL."""
    from confluent_kafka import Producer as CProducer
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pyklog.connector.schema_registry.process import RegistryProcess

    broker = broker_factory(0, group_initial_rebalance_delay_ms=0)
    boot = broker.bootstrap
    topic = f"readings-{uuid.uuid4().hex[:6]}"
    make_topic(boot, topic, 2)
    registry = RegistryProcess(boot, tmp_path, "sr").start()
    try:
        sr = SchemaRegistryClient({"url": registry.url})
        ctx = SerializationContext(topic, MessageField.VALUE)
        p = CProducer({"bootstrap.servers": boot})
        v1 = AvroSerializer(sr, json.dumps(V1))
        for i in range(50):
            p.produce(topic, v1({"sensor": f"s{i}"}, ctx), partition=i % 2)
        v2 = AvroSerializer(sr, json.dumps(V2))
        for i in range(50, 100):
            p.produce(topic, v2({"sensor": f"s{i}", "celsius": float(i)}, ctx), partition=i % 2)
        assert p.flush(30) == 0

        def read(**extra):
            r = (
                spark.read.format("pyklog")
                .option("kafka.bootstrap.servers", boot)
                .option("subscribe", topic)
                .option("valueFormat", "avro-confluent")
                .option("schema.registry.url", registry.url)
            )
            for k, v in extra.items():
                r = r.option(k, v)
            return r.load()

        df = read()
        assert dict(df.dtypes)["value"] == "struct<sensor:string,celsius:double>"
        got = sorted((r.sensor, r.celsius) for r in df.select("value.*").collect())
        want = sorted([(f"s{i}", -273.15) for i in range(50)] + [(f"s{i}", float(i)) for i in range(50, 100)])
        assert got == want
        # a pinned version reads everything into version 1's type
        pinned = read(valueSchemaVersion="1")
        assert dict(pinned.dtypes)["value"] == "struct<sensor:string>" and pinned.count() == 100

        with Producer({"bootstrap.servers": boot}) as pp:  # an id nobody registered
            pp.produce(topic, b"\x00\x00\x00\x03\xe7" + b"\x02a", partition=0)
            pp.flush()
        with pytest.raises(Exception, match=r"40403|not found"):
            read().collect()
    finally:
        registry.stop()
