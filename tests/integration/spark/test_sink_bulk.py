"""The sink's executor-side write path (``PyklogBatchWriter.write``: Arrow batches ->
``Producer.send_many``) against a real broker, without Spark: rows of several topics in one batch,
partition / key / headers columns, string and binary columns, and a null topic."""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from pyklog.broker.errors import ConfigError
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.partitioner import partition_for_key
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink import PyklogBatchWriter, PyklogCommitMessage

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType(
    [
        StructField("topic", StringType()),
        StructField("key", StringType()),
        StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", HEADERS),
    ]
)
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(rows):
    cols = list(zip(*rows))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(cols[0], pa.string()),
            pa.array(cols[1], pa.string()),
            pa.array(cols[2], pa.binary()),
            pa.array(cols[3], pa.int32()),
            pa.array(cols[4], ARROW_HEADERS),
        ],
        names=["topic", "key", "value", "partition", "headers"],
    )


def test_sink_write_arrow_batches_through_send_many(broker):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("sa", 3)
        c.create_topic("sb", 2)
        opts = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "kafka.linger.ms": "5"})
        w = PyklogBatchWriter(opts, SCHEMA)
        rows1 = [
            (
                "sa" if i % 3 else "sb",
                f"k{i}",
                b"v%d" % i,
                None if i % 5 else i % 2,
                [{"key": "n", "value": b"%d" % i}] if i % 4 == 0 else None,
            )
            for i in range(500)
        ]
        rows2 = [("sa", None, b"w%d" % i, None, []) for i in range(100)]
        msg = w.write(iter([_batch(rows1), pa.Table.from_batches([_batch(rows2)])]))
        assert isinstance(msg, PyklogCommitMessage)
        n_b = sum(1 for r in rows1 if r[0] == "sb")
        assert msg.records == 600 and msg.per_topic == {"sa": 600 - n_b, "sb": n_b}
        consumer = SimpleConsumer(client=c)
        got = {}
        for t, n in (("sa", 3), ("sb", 2)):
            for p in range(n):
                for r in consumer.iter_records(t, p, 0):
                    got[r.value] = (t, p, r.key, r.headers)
        assert len(got) == 600
        for t, k, v, part, h in rows1:
            want_p = part if part is not None else partition_for_key(k.encode(), 3 if t == "sa" else 2)
            want_h = tuple((e["key"], e["value"]) for e in h) if h else ()
            assert got[v] == (t, want_p, k.encode(), want_h), v
        assert all(got[r[2]][0] == "sa" and got[r[2]][2] is None for r in rows2)
        # a null topic fails the task with the row named
        bad = _batch([("sa", "k", b"x", None, None), (None, "k", b"y", None, None)])
        with pytest.raises(ConfigError, match="null topic in row 1"):
            w.write(iter([bad]))


def _confluent_read(bootstrap, topic, nparts, isolation="read_uncommitted"):
    """Every record of ``topic`` with a stock consumer (confluent-kafka / librdkafka):
    ``{value: (partition, key, headers)}`` and the number of records read."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"chk-{topic}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(nparts)])
    got, count, eof = {}, 0, set()
    import time as _time

    deadline = _time.monotonic() + 60
    while len(eof) < nparts and _time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is None:
            continue
        if m.error():
            if m.error().code() == -191:  # _PARTITION_EOF
                eof.add(m.partition())
                continue
            raise AssertionError(m.error())
        count += 1
        got[m.value()] = (m.partition(), m.key(), tuple(m.headers() or ()))
    c.close()
    assert len(eof) == nparts, f"{topic}: only partitions {eof} reached their end"
    return got, count


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_bulk_sink_rows_read_back_with_confluent_kafka(broker, guarantee):
    """The bulk encoder's batches through the idempotent (at-least-once) and the transactional
    (exactly-once: prepared by the task, committed by the driver's commit) producer: every row
    once with its key, headers and partition (explicit, murmur2 of the key, sticky for null keys),
    read back by librdkafka; several Arrow batches, unicode, empty values, null values."""
    topic = f"bulk-{guarantee}"
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic(topic, 3)
    opts = parse_sink_options(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "kafka.linger.ms": "5",
            "kafka.batch.size": "4096",
            "deliveryGuarantee": guarantee,
            "topic": topic,
        }
    )
    w = PyklogBatchWriter(opts, SCHEMA)
    rows = []
    for i in range(3000):
        key = None if i % 3 == 0 else f"cl\u00e9-{i % 97}"
        part = (i % 2) if i % 7 == 0 else None
        hdr = [{"key": "\u00fc", "value": b"%d" % i}, {"key": "e", "value": b""}] if i % 5 == 0 else None
        rows.append((None, key, b"v%05d" % i + (b"\xe2\x98\x83" * (i % 4)), part, hdr))
    batches = [_batch(rows[a : a + 700]) for a in range(0, len(rows), 700)]
    msg = w.write(iter(batches))
    assert msg.records == 3000 and msg.per_topic == {topic: 3000}
    if guarantee == "exactly-once":
        assert msg.transaction is not None
        before, _ = _confluent_read(broker.bootstrap, topic, 3, "read_committed")
        assert before == {}  # prepared, not committed: nothing visible yet
        w.commit([msg])
    got, count = _confluent_read(broker.bootstrap, topic, 3, "read_committed")
    assert count == 3000 and len(got) == 3000
    for _, key, value, part, hdr in rows:
        kb = key.encode() if key is not None else None
        if part is None and kb is not None:
            part = partition_for_key(kb, 3)
        p, k, h = got[value]
        assert k == kb and h == (tuple((e["key"], e["value"]) for e in hdr) if hdr else ()), value
        if part is not None:
            assert p == part, value
    # null keys without a partition are sticky: several rows per batch on one partition, not spread row by row
    sticky = [got[r[2]][0] for r in rows if r[1] is None and r[3] is None]
    assert sum(1 for a, b in itertools.pairwise(sticky) if a != b) < len(sticky) // 4
