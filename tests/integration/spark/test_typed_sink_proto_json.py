"""JSON Schema and Protobuf typed writes of the Spark sink against a real registry process, a real
broker and a real SparkSession: rows written as ``json-confluent`` and ``protobuf-confluent``
(schemas derived from the struct) are read back by confluent-kafka's JSONDeserializer and
ProtobufDeserializer with equal values and by pyklog's own typed reader; an incompatible struct is
refused by the registry before anything is written; a row with a null where the given schema has
none fails naming the field; the latest version pinned, and a registered schema looked up."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import uuid

import pytest

from pyklog.connector.schema_registry.process import RegistryProcess
from tests.integration.spark.support import make_topic, read_values

DDL = (
    "key string, value struct<id:bigint,name:string,at:timestamp,amount:decimal(10,2),raw:binary,"
    "tags:array<string>,attrs:map<string,int>,inner:struct<x:double,label:string>>"
)
UTC = dt.UTC


def _row(i: int) -> dict:
    return {
        "id": i,
        "name": None if i % 5 == 0 else f"n\u00e9-{i}",
        "at": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(seconds=i, microseconds=i * 7),
        "amount": decimal.Decimal(i) / 100,
        "raw": bytes([i % 256, 1]),
        "tags": [f"t{j}" for j in range(i % 3)],
        "attrs": {"a": i} if i % 2 else {},
        "inner": {"x": i / 4, "label": None if i % 3 else "l"} if i % 4 else None,
    }


def _proto_time(t: dt.datetime) -> str:
    """A Timestamp as protobuf's JSON writes it (0, 3, 6 or 9 fraction digits)."""
    frac = (
        ""
        if not t.microsecond
        else f".{t.microsecond // 1000:03d}"
        if t.microsecond % 1000 == 0
        else f".{t.microsecond:06d}"
    )
    return t.strftime("%Y-%m-%dT%H:%M:%S") + frac + "Z"


def _write(df, boot, url, topic, fmt, **extra):
    w = (
        df.write.mode("append")
        .format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("topic", topic)
        .option("valueFormat", fmt)
        .option("schema.registry.url", url)
    )
    for k, v in extra.items():
        w = w.option(k, v)
    w.save()


def _read_back(spark, boot, url, topic, fmt):
    df = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("valueFormat", fmt)
        .option("schema.registry.url", url)
        .load()
    )
    return sorted((r.asDict(recursive=True) for r in df.select("value.*").collect()), key=lambda r: r["id"])


def test_json_and_protobuf_rows_read_by_confluent_and_by_pyklog(spark, broker_factory, tmp_path):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.json_schema import JSONDeserializer
    from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext
    from google.protobuf.json_format import MessageToDict

    broker = broker_factory(0, group_initial_rebalance_delay_ms=0)
    boot = broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    jt, pt = f"json-{tag}", f"proto-{tag}"
    make_topic(boot, jt, 2)
    make_topic(boot, pt, 2)
    registry = RegistryProcess(boot, tmp_path, "sr").start()
    try:
        url = registry.url
        sr = SchemaRegistryClient({"url": url})
        rows = [_row(i) for i in range(120)]
        df = spark.createDataFrame([(str(r["id"]), r) for r in rows], DDL)

        # -- json-confluent, the JSON Schema derived from the struct
        _write(df, boot, url, jt, "json-confluent")
        latest = sr.get_latest_version(f"{jt}-value")
        assert latest.schema.schema_type == "JSON"
        schema = json.loads(latest.schema.schema_str)
        assert list(schema["properties"]) == list(rows[0]) and schema["required"] == []  # DDL fields are nullable
        assert schema["properties"]["at"] == {"type": ["string", "null"], "format": "date-time"}
        deser = JSONDeserializer(None, schema_registry_client=sr)
        ctx = SerializationContext(jt, MessageField.VALUE)
        got = sorted((deser(v, ctx) for v in read_values(boot, jt, 2, "read_uncommitted")), key=lambda r: r["id"])
        import base64

        def as_json(r):
            return {
                **r,
                "at": r["at"].strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                "amount": float(r["amount"]),
                "raw": base64.b64encode(r["raw"]).decode(),
            }

        assert got == [as_json(r) for r in rows]
        back = _read_back(spark, boot, url, jt, "json-confluent")
        assert [(b["id"], b["name"], b["at"].astimezone(UTC), b["tags"], b["inner"]) for b in back] == [
            (r["id"], r["name"], r["at"], r["tags"], r["inner"]) for r in rows
        ]

        # an incompatible struct (id becomes a string): the registry refuses it, nothing is written
        bad = spark.createDataFrame([("x", ("nope",))], "key string, value struct<id:string>")
        with pytest.raises(Exception, match=rf"schema registry at {url} answered error 409"):
            _write(bad, boot, url, jt, "json-confluent")
        assert len(read_values(boot, jt, 2, "read_uncommitted")) == len(rows)

        # a given schema where name is required: a row with a null name fails naming the field
        given = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
        given["required"] = ["id", "name"]
        small = spark.createDataFrame(
            [("1", (1, "a")), ("2", (2, None))], "key string, value struct<id:bigint,name:string>"
        )
        with pytest.raises(Exception, match=r"field value\.name is null"):
            _write(small, boot, url, f"{jt}-x", "json", valueSchema=json.dumps(given))

        # -- protobuf-confluent, the .proto derived from the struct
        _write(df, boot, url, pt, "protobuf-confluent", valueRecordName="shop.Reading")
        latest = sr.get_latest_version(f"{pt}-value")
        assert latest.schema.schema_type == "PROTOBUF"
        assert [r.name for r in latest.schema.references] == ["google/protobuf/timestamp.proto"]
        from pyklog.connector.spark.typed_protobuf import _reader, registry_files, schema_text

        files: dict = {}
        registry_files(url, latest.schema_id, [r.to_dict() for r in latest.schema.references], "r.proto", files)
        cls = _reader(schema_text(files, None))[1]
        pdeser = ProtobufDeserializer(cls, {"use.deprecated.format": False}, sr)
        ctx = SerializationContext(pt, MessageField.VALUE)
        msgs = [pdeser(v, ctx) for v in read_values(boot, pt, 2, "read_uncommitted")]
        got = sorted((MessageToDict(m, preserving_proto_field_name=True) for m in msgs), key=lambda r: int(r["id"]))

        def as_proto(r):
            out = {
                "id": str(r["id"]),
                "at": _proto_time(r["at"]),
                "amount": f"{r['amount']:.2f}",
                "raw": base64.b64encode(r["raw"]).decode(),
            }
            if r["name"] is not None:
                out["name"] = r["name"]
            if r["tags"]:
                out["tags"] = r["tags"]
            if r["attrs"]:
                out["attrs"] = r["attrs"]
            if r["inner"] is not None:
                out["inner"] = {k: v for k, v in r["inner"].items() if v is not None}
            return out

        for g in got:  # MessageToDict drops a zero double
            if "inner" in g and "x" not in g["inner"]:
                g["inner"]["x"] = 0.0
        assert got == [as_proto(r) for r in rows]
        back = _read_back(spark, boot, url, pt, "protobuf-confluent")
        assert [(b["id"], b["name"], b["at"].astimezone(UTC), b["tags"], b["attrs"], b["amount"]) for b in back] == [
            (r["id"], r["name"], r["at"], r["tags"], r["attrs"], f"{r['amount']:.2f}") for r in rows
        ]

        # a message whose field 1 changes type: the registry refuses it before anything is written
        with pytest.raises(Exception, match=rf"schema registry at {url} answered error 409"):
            _write(bad, boot, url, pt, "protobuf-confluent", valueRecordName="shop.Reading")

        # pinned: the subject's latest version; the registered schema looked up (no registration)
        _write(df.limit(5), boot, url, jt, "json-confluent", **{"use.latest.version": "true"})
        extra = {"auto.register.schemas": "false", "valueRecordName": "shop.Reading"}
        _write(df.limit(5), boot, url, pt, "protobuf-confluent", **extra)
        for t in (jt, pt):
            values = read_values(boot, t, 2, "read_uncommitted")
            assert len(values) == len(rows) + 5 and len({v[1:5] for v in values}) == 1
    finally:
        registry.stop()
