"""Source option ``fetchOnDriver`` (connector/spark/driver_fetch.py): the planner fetches each
micro-batch's records and hands them to Spark with the plan.  Real SparkSession (the suite's shared
one), real ZooKeeper and broker: every record read exactly once across a checkpoint restart, a batch
that Spark replays after its commit-log entry is lost reads the same records again, a ZooKeeper group
query commits its offsets, and the options it cannot honour are refused with a clear error."""

from __future__ import annotations

import os
import threading

import pytest
from pyspark.sql import functions as F

from pyklog.connector.offsets import OffsetStore
from tests.integration.spark.support import (
    group_members,
    make_topic,
    produce,
    stream,
    wait_query,
)
from tests.support import wait_for


class Rows:
    """foreachBatch target: the (batch id, partition, offset, value) of every row, in the driver."""

    def __init__(self):
        self.rows: list[tuple[int, int, int, str]] = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(batch_id, r.partition, r.offset, r.v) for r in df.collect()]
        with self.lock:
            self.rows.extend(got)

    def offsets(self):
        with self.lock:
            return sorted((p, o) for _, p, o, _ in self.rows)


def test_fetch_on_driver_reads_once_across_restart_and_replays_a_lost_commit(spark, broker, zk_chroot, tmp_path):
    boot = broker.bootstrap
    make_topic(boot, "drv", 3)
    produce(boot, "drv", 30, 3)
    chk = str(tmp_path / "chk")
    opts = {
        "zookeeper.connect": zk_chroot,
        "subscribe": "drv",
        "startingOffsets": "earliest",
        "group.id": "drv-app",
        "fetchOnDriver": "true",
    }
    sink = Rows()

    def start():
        df = stream(spark, **opts).select(F.col("value").cast("string").alias("v"), "partition", "offset")
        return (
            df.writeStream.foreachBatch(sink)
            .option("checkpointLocation", chk)
            .trigger(processingTime="200 milliseconds")
            .start()
        )

    q = start()
    try:
        wait_query(q, lambda: len(sink.rows) >= 30, what="the first 30 records")
        produce(boot, "drv", 15, 3, start=30)
        wait_query(q, lambda: len(sink.rows) >= 45, what="15 more")
        assert len(group_members(zk_chroot, "drv-app")) == 1
    finally:
        q.stop()
    assert q.exception() is None
    assert sink.offsets() == [(p, o) for p in range(3) for o in range(15)], "loss or duplicates"
    assert sorted(v for *_, v in sink.rows) == sorted(f"v{i}" for i in range(45))
    # the group's offsets were committed (at Spark's commit of each batch, the next trigger)
    with OffsetStore.create("zookeeper", False, zk_chroot) as store:
        committed = store.fetch("drv-app", [("drv", p) for p in range(3)])
    assert all(10 <= committed.get(("drv", p), -1) <= 15 for p in range(3)), committed

    # Spark lost the commit-log entry of the last batch: on restart it runs that batch again, whose
    # records are no longer in the planner's memory (a new process): readBetweenOffsets fetches them
    commits = os.path.join(chk, "commits")
    last = max(int(f) for f in os.listdir(commits) if f.isdigit())
    replayed = sorted((p, o) for b, p, o, _ in sink.rows if b == last)
    assert replayed, "the last batch read nothing"
    os.remove(os.path.join(commits, str(last)))
    crc = os.path.join(commits, f".{last}.crc")
    if os.path.exists(crc):
        os.remove(crc)
    before = len(sink.rows)
    produce(boot, "drv", 15, 3, start=45)  # while the query is down
    q = start()
    try:
        wait_query(q, lambda: len(sink.rows) >= before + len(replayed) + 15, what="the replay and 15 more")
        # the replay ran in a Python task: it fetched without joining the group
        assert len(group_members(zk_chroot, "drv-app")) == 1
    finally:
        q.stop()
    assert q.exception() is None
    again = sorted((p, o) for b, p, o, _ in sink.rows[before:] if b == last)
    assert again == replayed, "the replayed batch read other records than the original"
    rest = sorted((p, o) for b, p, o, _ in sink.rows[before:] if b != last)
    assert rest == [(p, o) for p in range(3) for o in range(15, 20)], "loss or duplicates after the restart"
    wait_for(
        lambda: group_members(zk_chroot, "drv-app") == [],
        45,
        interval=0.3,
        message="the stopped query's group registration to disappear",
    )


def test_fetch_on_driver_group_from_latest_reads_every_partition_as_one_member(spark, broker, zk_chroot, tmp_path):
    """The query's first batch has no records in the planner's memory (from "latest" it is empty):
    Spark reads it in a Python task (readBetweenOffsets).  That task must not join the group: a
    second member would take half the partitions and the query would read only the others (it did:
    20 of 40 records, partition 0 only)."""
    boot = broker.bootstrap
    make_topic(boot, "drv-latest", 2)
    sink = Rows()
    df = stream(
        spark,
        **{
            "zookeeper.connect": zk_chroot,
            "subscribe": "drv-latest",
            "startingOffsets": "latest",
            "group.id": "drv-latest-app",
            "fetchOnDriver": "true",
        },
    )
    q = (
        df.select(F.col("value").cast("string").alias("v"), "partition", "offset")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    try:
        wait_query(q, lambda: q.lastProgress is not None, what="the first (empty) batch")
        produce(boot, "drv-latest", 40, 2)
        wait_query(q, lambda: len(sink.rows) >= 40, timeout=60, what="40 records from both partitions")
        assert len(group_members(zk_chroot, "drv-latest-app")) == 1
    finally:
        q.stop()
    assert q.exception() is None
    assert sink.offsets() == [(p, o) for p in range(2) for o in range(20)], "loss or duplicates"


@pytest.mark.parametrize("extra", [{"maxOffsetsPerTrigger": "10"}, {"minPartitions": "4"}])
def test_fetch_on_driver_refuses_read_limits(spark, broker, extra):
    make_topic(broker.bootstrap, "drv-limits", 1)
    q = None
    with pytest.raises(Exception) as e:  # at load(), where the source options are checked
        df = stream(
            spark,
            **{
                "kafka.bootstrap.servers": broker.bootstrap,
                "subscribe": "drv-limits",
                "fetchOnDriver": "true",
                **extra,
            },
        )
        q = df.writeStream.format("noop").start()
        q.awaitTermination(60)
    if q is not None:
        q.stop()
    assert "fetchOnDriver" in str(e.value) and next(iter(extra)) in str(e.value), str(e.value)[-2000:]


def test_fetch_on_driver_plans_a_trigger_with_one_fetch(broker, monkeypatch):
    """fetchOnDriver asks no ListOffsets per trigger: one Fetch at the query's positions gives each
    partition's end (high watermark) and the records, decoded for the batch; what that Fetch did not
    reach (a partition with more than maxPartitionFetchBytes) is read on from where it stopped.  The
    rows equal what the ordinary read path gives for the same offsets.  A position outside the log
    falls back to ListOffsets, which reports the loss as before."""
    from pyklog.broker.errors import DataLossError
    from pyklog.connector.consumer import SimpleConsumer
    from pyklog.connector.producer import Producer
    from pyklog.connector.spark.driver_fetch import PyklogDriverStreamReader
    from pyklog.connector.spark.options import LATEST, parse_source_options
    from pyklog.connector.spark.planner import SourcePlanner

    boot = broker.bootstrap
    make_topic(boot, "drv-one", 2)

    def write(n, start):
        with Producer({"bootstrap.servers": boot, "linger.ms": 5}) as p:
            for i in range(start, start + n):
                p.produce("drv-one", f"small {i}".encode(), partition=0)
                if i % 10 == 0:  # partition 1: ~20 KB records, more than one Fetch's 50 KB per trigger
                    p.produce("drv-one", f"big {i} ".encode() + b"x" * 20_000, partition=1)
            p.flush()

    write(300, 0)
    calls = {"ListOffsets": 0, "planner Fetch": 0, "task Fetch": 0}
    real_list, real_multi, real_fetch = (
        SourcePlanner.list_offsets,
        SimpleConsumer.multi_fetch_raw,
        SimpleConsumer.fetch_raw,
    )

    def list_offsets(self, tps, spec):
        calls["ListOffsets"] += spec == LATEST
        return real_list(self, tps, spec)

    def multi_fetch_raw(self, *a, **kw):
        calls["planner Fetch"] += self is reader._planner._driver._fetcher  # not a task's (fetch_raw)
        return real_multi(self, *a, **kw)

    def fetch_raw(self, *a, **kw):
        calls["task Fetch"] += 1
        return real_fetch(self, *a, **kw)

    monkeypatch.setattr(SourcePlanner, "list_offsets", list_offsets)
    monkeypatch.setattr(SimpleConsumer, "multi_fetch_raw", multi_fetch_raw)
    monkeypatch.setattr(SimpleConsumer, "fetch_raw", fetch_raw)
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": boot,
            "subscribe": "drv-one",
            "startingOffsets": "earliest",
            "fetchOnDriver": "true",
            "kafka.max.partition.fetch.bytes": "50000",
        },
        streaming=True,
    )
    reader = PyklogDriverStreamReader(opts)
    try:

        def rows(batches):
            return [r for b in batches for r in b.select(["partition", "offset", "value"]).to_pylist()]

        start = reader.initialOffset()
        for round_ in range(2):
            before = dict(calls)
            it, end = reader.read(start)
            got = rows(it)
            assert end == {"drv-one": {"0": 300 * (round_ + 1), "1": 30 * (round_ + 1)}}
            assert (
                calls["ListOffsets"] == before["ListOffsets"] and calls["planner Fetch"] == before["planner Fetch"] + 1
            )
            assert calls["task Fetch"] > before["task Fetch"]  # partition 1 read on past the 50 KB
            assert got == rows(reader.readBetweenOffsets(start, end))  # the ordinary read path
            assert [(r["partition"], r["offset"]) for r in got] == [
                (0, o) for o in range(300 * round_, 300 * (round_ + 1))
            ] + [(1, o) for o in range(30 * round_, 30 * (round_ + 1))]
            write(300, 300)
            start = end
        # a position beyond the log end: the Fetch answers OFFSET_OUT_OF_RANGE, ListOffsets decides
        before = calls["ListOffsets"]
        with pytest.raises(DataLossError, match="beyond the log end"):
            reader.read({"drv-one": {"0": 10_000, "1": 60}})
        assert calls["ListOffsets"] == before + 1
    finally:
        reader._stop()
