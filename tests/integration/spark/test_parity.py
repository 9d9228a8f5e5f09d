"""Parity of format("pyklog") with Spark's format("kafka"), measured against the real parts (the
suite's ZooKeeper, broker processes and shared SparkSession).

* Batch writes: PySpark refuses ErrorIfExists (the default) for every Python data source; Overwrite,
  which Spark's Kafka sink refuses, is refused with pyklog's message and writes nothing; Append writes.
* maxRecordsPerPartition (Spark 4.x) splits a real batch read into tasks; offsets JSON naming only
  some partitions is refused naming the missing one, and start and end JSON bound the read as in Spark.
* Progress: what PySpark shows for a Python source (``PythonMicroBatchStream``, no metrics) and
  Spark's description and offsets-behind-latest figures for a running query.
* The ``update`` output mode through foreachBatch with pyklog's batch writer.
* CreatePartitions while a streaming query runs (subscribe and subscribePattern, with and without
  a ZooKeeper group): the new partitions are read from offset 0; every row exactly once.

The rules checked without a server are in tests/unit/spark/test_parity.py.
"""

from __future__ import annotations

import json
import uuid

import pytest

from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.progress import source_progress


# ------------------------------------------------------------------------------------------------
# integration: real broker(s), ZooKeeper, the shared SparkSession
# ------------------------------------------------------------------------------------------------
def _make_topic(bootstrap, name, partitions):
    from pyklog.connector.client import ClusterClient

    with ClusterClient(bootstrap) as c:
        c.create_topic(name, partitions)


def _produce(bootstrap, topic, values_by_partition: dict):
    from pyklog.connector.producer import Producer

    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for part, values in values_by_partition.items():
            for v in values:
                p.produce(topic, v.encode(), key=v.encode(), partition=part)
        p.flush()


def _read(spark, boot, topic, **opts):
    r = spark.read.format("pyklog").option("kafka.bootstrap.servers", boot).option("subscribe", topic)
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load()


def _wait_query(q, predicate, timeout=120.0, what="query progress"):
    from tests.support import wait_for

    def check():
        if q.exception() is not None:
            raise AssertionError(f"query failed while waiting for {what}: {q.exception()}")
        return predicate()

    wait_for(check, timeout, interval=0.3, message=f"{what}; last progress {q.lastProgress}")


def test_batch_save_modes(spark, broker):
    boot = broker.bootstrap
    topic = f"modes-{uuid.uuid4().hex[:6]}"
    _make_topic(boot, topic, 2)
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(30)], "key string, value string")
    w = df.write.format("pyklog").option("kafka.bootstrap.servers", boot).option("topic", topic)
    # Spark's Kafka guide writes df.write.format("kafka")...save(): PySpark refuses the default
    # ErrorIfExists for every Python data source before pyklog is asked (nothing to intercept)
    with pytest.raises(Exception) as ei:
        w.save()
    assert "UNSUPPORTED_DATA_SOURCE_SAVE_MODE" in str(ei.value), str(ei.value)[:2000]
    # overwrite: refused (Spark's Kafka sink refuses it too) rather than silently appending
    with pytest.raises(Exception) as ei:
        w.mode("overwrite").save()
    assert "save mode 'overwrite' is not allowed" in str(ei.value), str(ei.value)[:2000]
    assert _read(spark, boot, topic).count() == 0
    w.mode("append").save()
    got = _read(spark, boot, topic).selectExpr("CAST(value AS STRING) v").collect()
    assert sorted(r.v for r in got) == sorted(f"v{i}" for i in range(30))


def test_batch_max_records_per_partition_and_partial_json(spark, broker):
    boot = broker.bootstrap
    topic = f"split-{uuid.uuid4().hex[:6]}"
    _make_topic(boot, topic, 2)
    _produce(boot, topic, {0: [f"a{i}" for i in range(23)], 1: [f"b{i}" for i in range(5)]})
    df = _read(spark, boot, topic, maxRecordsPerPartition="7")
    assert df.rdd.getNumPartitions() == 4 + 1  # ceil(23/7) + ceil(5/7)
    rows = df.select("partition", "offset").collect()
    assert len(rows) == 28 and len({(r.partition, r.offset) for r in rows}) == 28
    # JSON naming one of the two partitions: refused, naming the missing one (as Spark)
    with pytest.raises(Exception) as ei:
        _read(spark, boot, topic, startingOffsets=json.dumps({topic: {"0": 20}})).count()
    assert "must name every partition" in str(ei.value) and f"missing {topic}-1" in str(ei.value)
    rows = (
        _read(
            spark,
            boot,
            topic,
            startingOffsets=json.dumps({topic: {"0": 20, "1": -2}}),
            endingOffsets=json.dumps({topic: {"0": -1, "1": 2}}),
        )
        .select("partition", "offset")
        .collect()
    )
    assert sorted((r.partition, r.offset) for r in rows) == [(0, 20), (0, 21), (0, 22), (1, 0), (1, 1)]


def test_stream_progress_description_and_offsets_behind_latest(spark, broker, tmp_path):
    boot = broker.bootstrap
    topic = f"prog-{uuid.uuid4().hex[:6]}"
    _make_topic(boot, topic, 2)
    _produce(boot, topic, {0: [f"a{i}" for i in range(30)], 1: [f"b{i}" for i in range(10)]})
    df = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "8")
        .option("maxRecordsPerPartition", "4")
        .load()
    )
    name = f"prog_{uuid.uuid4().hex[:6]}"
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    assert q.exception() is None
    rows = spark.sql(f"SELECT partition, offset FROM {name}").collect()
    assert len(rows) == 40 and len({(r.partition, r.offset) for r in rows}) == 40
    with_rows = [p for p in q.recentProgress if p["numInputRows"]]
    assert len(with_rows) >= 5 and max(p["numInputRows"] for p in with_rows) <= 8
    first = with_rows[0]["sources"][0]
    # what PySpark itself shows for a Python source: the JVM wrapper's class, no metrics
    assert ".python.PythonMicroBatchStream" in first["description"], first["description"]
    assert not first.get("metrics")
    # the helper: Spark's Kafka figures from endOffset and latestOffset
    mine = source_progress(with_rows[0])[0]
    assert mine["description"] == f"pyklog[{topic}]"
    end = json.loads(first["endOffset"])[topic]
    latest = json.loads(first["latestOffset"])[topic]
    behind = [latest[p] - end[p] for p in latest]
    assert sum(end.values()) == 8 and sum(latest.values()) == 40
    assert mine["metrics"] == {
        "avgOffsetsBehindLatest": str(sum(behind) / 2),
        "maxOffsetsBehindLatest": str(max(behind)),
        "minOffsetsBehindLatest": str(min(behind)),
    }
    last = source_progress(with_rows[-1])[0]["metrics"]
    assert last["maxOffsetsBehindLatest"] == "0"
    assert source_progress(q)  # a StreamingQuery works too


def test_update_output_mode_through_foreach_batch(spark, broker, tmp_path):
    from pyspark.sql import functions as F

    boot = broker.bootstrap
    src, dst = f"upd-in-{uuid.uuid4().hex[:6]}", f"upd-out-{uuid.uuid4().hex[:6]}"
    _make_topic(boot, src, 2)
    _make_topic(boot, dst, 1)
    counts = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "25")
        .load()
        .groupBy(F.col("key").cast("string").alias("word"))
        .count()
    )
    # PySpark's Python sinks have no update mode: refused when the query starts
    with pytest.raises(Exception) as ei:
        q = (
            counts.writeStream.outputMode("update")
            .format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("topic", dst)
            .option("checkpointLocation", str(tmp_path / "bad"))
            .start()
        )
        q.awaitTermination(60)
    assert "update" in str(ei.value).lower() or "Update" in str(ei.value), str(ei.value)[:2000]

    # the recipe (docs/spark-connector.md): foreachBatch writes each batch's updated rows with the batch writer
    def write_updates(batch_df, batch_id):
        (
            batch_df.select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))
            .write.format("pyklog")
            .mode("append")
            .option("kafka.bootstrap.servers", boot)
            .option("topic", dst)
            .save()
        )

    words = {"apple": 40, "pear": 15, "fig": 5}
    _produce(
        boot,
        src,
        {
            0: [w for w, n in words.items() for _ in range(n // 2)],
            1: [w for w, n in words.items() for _ in range(n - n // 2)],
        },
    )
    q = (
        counts.writeStream.outputMode("update")
        .foreachBatch(write_updates)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(240)
    assert q.exception() is None
    out = _read(spark, boot, dst).selectExpr("CAST(key AS STRING) k", "CAST(value AS STRING) v", "offset").collect()
    latest = {}
    for r in sorted(out, key=lambda r: r.offset):
        latest[r.k] = int(r.v)
    assert latest == words
    batches = [p for p in q.recentProgress if p["numInputRows"]]
    assert len(batches) >= 3  # 60 rows at 25 a trigger: updates, not one final answer
    assert len(out) < 3 * len(batches) + 1  # update mode: only changed keys per batch, never a full table per row


def _grow(boot, topic, count):
    from kafka.admin import KafkaAdminClient, NewPartitions

    admin = KafkaAdminClient(bootstrap_servers=boot, request_timeout_ms=30000)
    try:
        admin.create_partitions({topic: NewPartitions(count)})
    finally:
        admin.close()


@pytest.mark.parametrize("group", [False, True])
def test_planner_starts_added_partitions_at_earliest(broker, zk_chroot, group):
    """The planner's side, step by step (no Spark): partitions added while the query runs, with
    records already in them when it first sees them, enter at offset 0 and are then read whole."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pyklog.connector.spark.source import PyklogStreamReader

    boot = broker.bootstrap
    topic = f"pgrow-{uuid.uuid4().hex[:6]}"
    _make_topic(boot, topic, 2)
    _produce(boot, topic, {0: ["a0", "a1"], 1: ["b0"]})
    opts = {"subscribe": topic, "startingOffsets": "earliest"}
    opts.update(
        {"zookeeper.connect": zk_chroot, "group.id": f"g-{topic}"} if group else {"kafka.bootstrap.servers": boot}
    )
    r = PyklogStreamReader(parse_source_options(opts, streaming=True))
    try:
        s0 = r.initialOffset()
        assert s0 == {topic: {"0": 0, "1": 0}}
        s1 = r.latestOffset(s0, ReadAllAvailable())
        assert s1 == {topic: {"0": 2, "1": 1}}
        _grow(boot, topic, 4)
        _produce(boot, topic, {2: ["c0", "c1", "c2"], 3: ["d0"], 0: ["a2"]})

        def seen():
            end = r.latestOffset(s1, ReadAllAvailable())
            return end if "2" in end[topic] and "3" in end[topic] else None

        from tests.support import wait_for

        s2 = wait_for(seen, 30, interval=0.2, message="the planner to see the added partitions")
        # added partitions enter at their earliest offset (0), although they hold records already
        assert s2 == {topic: {"0": 3, "1": 1, "2": 0, "3": 0}}
        assert r.reportLatestOffset()[topic] == {"0": 3, "1": 1, "2": 3, "3": 1}
        s3 = r.latestOffset(s2, ReadAllAvailable())
        assert s3 == {topic: {"0": 3, "1": 1, "2": 3, "3": 1}}
        got = sorted((p.partition, p.start, p.end) for p in r.partitions(s2, s3))
        assert got == [(2, 0, 3), (3, 0, 1)]
    finally:
        r.stop()


@pytest.mark.parametrize(
    "kind,group", [("subscribe", False), ("subscribePattern", False), ("subscribe", True), ("subscribePattern", True)]
)
def test_running_query_reads_partitions_added_by_create_partitions(spark, broker, zk_chroot, tmp_path, kind, group):
    boot = broker.bootstrap
    tag = uuid.uuid4().hex[:6]
    topic = f"grow-{tag}"
    _make_topic(boot, topic, 2)
    _produce(boot, topic, {0: [f"a{i}" for i in range(10)], 1: [f"b{i}" for i in range(10)]})
    r = spark.readStream.format("pyklog").option("startingOffsets", "earliest")
    r = r.option("subscribe", topic) if kind == "subscribe" else r.option("subscribePattern", f"grow-{tag}.*")
    if group:
        r = r.option("zookeeper.connect", zk_chroot).option("group.id", f"grp-{tag}")
    else:
        r = r.option("kafka.bootstrap.servers", boot)
    name = f"grow_{tag}"
    q = (
        r.load()
        .selectExpr("partition", "offset", "CAST(value AS STRING) v")
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="500 milliseconds")
        .start()
    )

    def rows():
        return spark.sql(f"SELECT partition, offset, v FROM {name}").collect()

    try:
        _wait_query(q, lambda: len(rows()) >= 20, what="the first 20 rows")
        _grow(boot, topic, 4)
        # written to the new partitions at once, before the query has seen them: read from offset 0
        _produce(boot, topic, {p: [f"p{p}-{i}" for i in range(6)] for p in range(4)})
        _wait_query(q, lambda: len(rows()) >= 44, what="the rows of the added partitions")
        got = rows()
    finally:
        q.stop()
    assert q.exception() is None
    keys = [(r.partition, r.offset) for r in got]
    assert len(keys) == 44 and len(set(keys)) == 44, sorted(keys)  # nothing lost, nothing twice
    for p in (2, 3):
        assert sorted(o for part, o in keys if part == p) == list(range(6))
    assert sorted(r.v for r in got) == sorted(
        [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)] + [f"p{p}-{i}" for p in range(4) for i in range(6)]
    )
