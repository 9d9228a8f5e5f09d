"""The sink's executor-side write path (``PyklogBatchWriter.write``: Arrow batches ->
``Producer.send_many``) against a real broker, without Spark: rows of several topics in one batch,
partition / key / headers columns, string and binary columns, and a null topic."""
from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructField, StructType

from pyklog.broker.errors import ConfigError
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.partitioner import partition_for_key
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink import PyklogBatchWriter, PyklogCommitMessage

HEADERS = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
SCHEMA = StructType([StructField("topic", StringType()), StructField("key", StringType()),
                     StructField("value", BinaryType()), StructField("partition", IntegerType()),
                     StructField("headers", HEADERS)])
ARROW_HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def _batch(rows):
    cols = list(zip(*rows))
    return pa.RecordBatch.from_arrays(
        [pa.array(cols[0], pa.string()), pa.array(cols[1], pa.string()), pa.array(cols[2], pa.binary()),
         pa.array(cols[3], pa.int32()), pa.array(cols[4], ARROW_HEADERS)],
        names=["topic", "key", "value", "partition", "headers"])


@pytest.mark.integration
def test_sink_write_arrow_batches_through_send_many(broker):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("sa", 3)
        c.create_topic("sb", 2)
        opts = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "kafka.linger.ms": "5"})
        w = PyklogBatchWriter(opts, SCHEMA)
        rows1 = [("sa" if i % 3 else "sb", f"k{i}", b"v%d" % i, None if i % 5 else i % 2,
                  [{"key": "n", "value": b"%d" % i}] if i % 4 == 0 else None) for i in range(500)]
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
