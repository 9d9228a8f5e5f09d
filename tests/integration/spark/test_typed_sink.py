"""Typed writes of the Spark sink against a real registry process, a real broker and a real
SparkSession: struct columns encoded in Confluent's Avro wire format are read back by
confluent-kafka's DeserializingConsumer with AvroDeserializer with equal values; a second schema
version after an evolution; an incompatible struct fails before anything is written, with the
registry's message; a registry that cannot be reached fails naming its URL; RecordNameStrategy
on both sides; an exactly-once stream with a typed value, and an exactly-once batch whose row
does not fit the schema (nothing committed)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest

from pyklog.connector.schema_registry.process import RegistryProcess, free_port
from tests.integration.spark.support import make_topic, read_values, wait_query

VALUE_DDL = (
    "key string, value struct<id:bigint,name:string,small:int,at:timestamp,day:date,amount:decimal(10,2),"
    "tags:array<string>,attrs:map<string,int>,inner:struct<x:double,label:string>>"
)
UTC = dt.UTC


def _row(i: int) -> dict:
    return {
        "id": i,
        "name": None if i % 5 == 0 else f"n\u00e9-{i}",
        "small": i % 100,
        "at": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i * 7),
        "day": dt.date(2024, 1, 1) + dt.timedelta(days=i),
        "amount": decimal.Decimal(i) / 100,
        "tags": [f"t{j}" for j in range(i % 3)],
        "attrs": {"a": i, "b": None} if i % 2 else None,
        "inner": {"x": i / 4, "label": None} if i % 4 else None,
    }


def _write(df, boot, url, topic=None, **extra):
    w = (
        df.write.mode("append")
        .format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("valueFormat", "avro-confluent")
        .option("schema.registry.url", url)
    )
    if topic:
        w = w.option("topic", topic)
    for k, v in extra.items():
        w = w.option(k, v)
    w.save()


def _deserialized(boot, url, topic, nparts, isolation="read_uncommitted"):
    """Every record of ``topic`` through confluent-kafka's DeserializingConsumer with
    AvroDeserializer: ``[(key, value dict, schema id)]``."""
    from confluent_kafka import DeserializingConsumer, KafkaError, TopicPartition
    from confluent_kafka.error import ConsumeError
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import StringDeserializer

    c = DeserializingConsumer(
        {
            "bootstrap.servers": boot,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "key.deserializer": StringDeserializer("utf_8"),
            "value.deserializer": AvroDeserializer(SchemaRegistryClient({"url": url})),
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(nparts)])
    out, eof = [], set()
    import time

    deadline = time.monotonic() + 60
    try:
        while len(eof) < nparts and time.monotonic() < deadline:
            try:
                m = c.poll(1.0)
            except ConsumeError as e:  # the deserializing consumer raises what Consumer returns
                if e.code != KafkaError._PARTITION_EOF:
                    raise
                eof.add(e.kafka_message.partition())
                continue
            if m is not None:
                out.append((m.key(), m.value()))
    finally:
        c.close()
    assert len(eof) == nparts, f"{topic}: only partitions {eof} reached their end"
    return out


def _ids(boot, topic, nparts):
    return {int.from_bytes(v[1:5], "big") for v in read_values(boot, topic, nparts, "read_uncommitted")}


def test_typed_rows_read_by_confluent_then_evolved_then_incompatible(spark, broker_factory, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    broker = broker_factory(0, group_initial_rebalance_delay_ms=0)  # the registry's election group
    boot = broker.bootstrap
    topic = f"typed-{uuid.uuid4().hex[:6]}"
    make_topic(boot, topic, 2)
    registry = RegistryProcess(boot, tmp_path, "sr").start()
    try:
        url = registry.url
        rows = [_row(i) for i in range(200)]
        df = spark.createDataFrame([(str(r["id"]), r) for r in rows], VALUE_DDL)
        _write(df, boot, url, topic)

        got = _deserialized(boot, url, topic, 2)
        assert sorted(got, key=lambda kv: kv[1]["id"]) == [(str(r["id"]), r) for r in rows]
        sr = SchemaRegistryClient({"url": url})
        v1 = sr.get_latest_version(f"{topic}-value")
        assert v1.version == 1 and json.loads(v1.schema.schema_str)["name"] == "topLevelRecord"

        # evolution: a given schema, version 1 plus a field with a default (BACKWARD compatible)
        v2 = json.loads(v1.schema.schema_str)
        v2["fields"].append({"name": "unit", "type": ["null", "string"], "default": None})
        more = [dict(_row(i), unit="celsius") for i in range(200, 250)]
        df2 = spark.createDataFrame([(str(r["id"]), r) for r in more], VALUE_DDL[:-1] + ",unit:string>")
        _write(df2, boot, url, topic, valueSchema=json.dumps(v2))
        assert sr.get_versions(f"{topic}-value") == [1, 2]
        deser = AvroDeserializer(sr)
        ctx = SerializationContext(topic, MessageField.VALUE)
        got = sorted((deser(v, ctx) for v in read_values(boot, topic, 2, "read_uncommitted")), key=lambda r: r["id"])
        assert got == rows + more  # version 1's records without the new field
        ids = _ids(boot, topic, 2)
        assert len(ids) == 2  # two schema ids on the wire

        # pinned: the subject's latest version (use.latest.version); a schema the subject does not
        # hold with auto.register.schemas=false fails on the driver, naming the registry
        _write(df2.limit(5), boot, url, topic, **{"use.latest.version": "true"})
        assert _ids(boot, topic, 2) == ids
        with pytest.raises(
            Exception,
            match=rf"value schema of subject '{topic}-value': the schema registry at {url} answered error 40403",
        ):
            _write(df2, boot, url, topic, **{"auto.register.schemas": "false"})

        # an incompatible struct (id becomes a string): the registry refuses it, nothing is written
        bad = spark.createDataFrame([("x", ("not-a-number",))], "key string, value struct<id:string>")
        with pytest.raises(Exception, match=rf"schema registry at {url} answered error 409.*incompatible"):
            _write(bad, boot, url, topic)
        assert len(read_values(boot, topic, 2, "read_uncommitted")) == 255
        assert sr.get_versions(f"{topic}-value") == [1, 2]

        # a registry that cannot be reached: an error naming its URL (bounded retries)
        down = f"http://127.0.0.1:{free_port()}"
        with pytest.raises(Exception, match=rf"schema registry at {down}.*cannot be reached"):
            _write(df2, boot, down, topic)

        # RecordNameStrategy (Confluent's class name) on the sink and on the source
        other = f"orders-{uuid.uuid4().hex[:6]}"
        make_topic(boot, other, 1)
        strategy = "io.confluent.kafka.serializers.subject.RecordNameStrategy"
        small = spark.createDataFrame([(i, f"o{i}") for i in range(10)], "id int, name string").selectExpr(
            "struct(id, name) AS value"
        )
        _write(small, boot, url, other, **{"value.subject.name.strategy": strategy, "valueRecordName": "shop.Order"})
        assert sr.get_versions("shop.Order") == [1]
        back = (
            spark.read.format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", other)
            .option("valueFormat", "avro-confluent")
            .option("schema.registry.url", url)
            .option("value.subject.name.strategy", strategy)
            .option("valueRecordName", "shop.Order")
            .load()
        )
        assert sorted((r.id, r.name) for r in back.select("value.*").collect()) == [(i, f"o{i}") for i in range(10)]
    finally:
        registry.stop()


def test_exactly_once_typed_stream_and_a_batch_row_that_does_not_fit(spark, broker_factory, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from pyklog.connector.producer import Producer

    broker = broker_factory(0, group_initial_rebalance_delay_ms=0)  # the registry's election group
    boot = broker.bootstrap
    src, out = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}"
    make_topic(boot, src, 2)
    make_topic(boot, out, 2)
    n = 300
    with Producer({"bootstrap.servers": boot, "linger.ms": 5}) as p:
        for i in range(n):
            p.produce(src, str(i).encode(), partition=i % 2)
        p.flush()
    registry = RegistryProcess(boot, tmp_path, "sr").start()
    try:
        url = registry.url
        q = (
            spark.readStream.format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr(
                "CAST(CAST(value AS STRING) AS BIGINT) AS n",
                "CAST(value AS STRING) AS s",
                "partition AS p",
                "timestamp",
            )
            .selectExpr(  # a flat record (encoded column-wise) with a nullable double
                "struct(n, s, p, IF(n % 3 = 0, NULL, n / 2) AS half, timestamp AS at) AS value"
            )
            .writeStream.format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("topic", out)
            .option("deliveryGuarantee", "exactly-once")
            .option("kafka.transaction.timeout.ms", "60000")
            .option("valueFormat", "avro-confluent")
            .option("schema.registry.url", url)
            .option("checkpointLocation", str(tmp_path / "chk"))
            .start()
        )
        try:
            wait_query(q, lambda: len(read_values(boot, out, 2, "read_committed")) >= n, what="every row committed")
        finally:
            q.stop()
        deser = AvroDeserializer(SchemaRegistryClient({"url": url}))
        ctx = SerializationContext(out, MessageField.VALUE)
        got = [deser(v, ctx) for v in read_values(boot, out, 2, "read_committed")]
        assert sorted(g["n"] for g in got) == list(range(n))
        assert all(g["s"] == str(g["n"]) and g["p"] == g["n"] % 2 for g in got)
        assert all(g["half"] == (None if g["n"] % 3 == 0 else g["n"] / 2) for g in got)
        assert all(isinstance(g["at"], dt.datetime) and g["at"].year >= 2024 for g in got)

        # exactly-once batch: a row with a null in a field the given schema requires fails the job
        # naming the field, and nothing of the write is committed
        strict = {
            "type": "record",
            "name": "Strict",
            "fields": [{"name": "n", "type": "long"}, {"name": "s", "type": "string"}],
        }
        bad = spark.createDataFrame([(i, None if i == 150 else str(i)) for i in range(200)], "n long, s string")
        bad_topic = f"strict-{uuid.uuid4().hex[:6]}"
        make_topic(boot, bad_topic, 1)
        with pytest.raises(Exception, match=r"does not fit the value column's Avro schema.*Strict\.s"):
            _write(
                bad.selectExpr("struct(n, s) AS value").coalesce(1),
                boot,
                url,
                bad_topic,
                valueSchema=json.dumps(strict),
                deliveryGuarantee="exactly-once",
                **{"kafka.transaction.timeout.ms": "20000"},
            )
        assert read_values(boot, bad_topic, 1, "read_committed") == []
    finally:
        registry.stop()


def test_a_registry_that_does_not_answer_fails_the_write_naming_its_url():
    """A registry that accepts connections and never answers: the writer's creation (driver) gives
    up after the client's bounded attempts with an error naming the URL, never hangs."""
    import socket
    import time

    from pyspark.sql import types as T

    from pyklog.broker.errors import ConfigError
    from pyklog.connector.schema_registry.client import SchemaRegistryClient
    from pyklog.connector.spark import typed_formats
    from pyklog.connector.spark.options import parse_sink_options
    from pyklog.connector.spark.sink import PyklogBatchWriter

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        # the client the sink takes for this URL, with a short timeout (the default is 10 s x 3 attempts)
        typed_formats._CLIENTS[url] = SchemaRegistryClient(url, timeout_s=0.3, retries=2)
        try:
            opts = parse_sink_options(
                {
                    "kafka.bootstrap.servers": "127.0.0.1:1",
                    "topic": "t",
                    "valueFormat": "avro-confluent",
                    "schema.registry.url": url,
                }
            )
            schema = T.StructType([T.StructField("value", T.StructType([T.StructField("a", T.IntegerType())]))])
            t0 = time.monotonic()
            with pytest.raises(
                ConfigError,
                match=rf"value schema of subject 't-value': the schema registry at {url} cannot be reached: timed out",
            ):
                PyklogBatchWriter(opts, schema)
            assert time.monotonic() - t0 < 5
        finally:
            del typed_formats._CLIENTS[url]
