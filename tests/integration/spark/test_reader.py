"""The pyklog stream reader's planner logic against a real broker and ZooKeeper, driven the way
Spark's planner drives it (initialOffset, latestOffset(start, limit), partitions, read, commit),
without a SparkSession: consumer-group split and handover, commits, admission control,
Trigger.AvailableNow, data loss, restart with another member having advanced.  The same code runs
inside Spark in tests/integration/spark/test_source.py."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from pyklog.broker.errors import DataLossError
from pyklog.connector.client import ClusterClient
from pyklog.connector.offsets import OffsetStore
from pyklog.connector.producer import Producer
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.source import PyklogBatchReader, PyklogStreamReader
from tests.integration.spark.support import make_topic_again
from tests.support import wait_for


def make_topic(bootstrap, name, partitions, **configs):
    with ClusterClient(bootstrap) as c:
        c.create_topic(name, partitions, configs=configs or None)


def produce(bootstrap, topic, per_partition, partitions, start=0, codec="none"):
    with Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20}) as p:
        for part in range(partitions):
            for i in range(start, start + per_partition):
                p.produce(topic, f"{part}-{i}".encode(), key=str(i).encode(), partition=part)
        p.flush()


def reader(**opts):
    return PyklogStreamReader(parse_source_options(opts, streaming=True))


def read_all(r, start, end):
    """Rows of a micro-batch as {(partition, offset): value}, through read() like an executor."""
    rows = {}
    for part in r.partitions(start, end):
        for batch in r.read(part):
            assert isinstance(batch, pa.RecordBatch)
            for p, o, v in zip(
                batch.column("partition").to_pylist(),
                batch.column("offset").to_pylist(),
                batch.column("value").to_pylist(),
            ):
                assert (p, o) not in rows
                rows[(p, o)] = v
    return rows


def test_group_split_handover_exactly_once(broker, zk_chroot):
    boot = broker.bootstrap
    make_topic(boot, "ev", 4)
    produce(boot, "ev", 10, 4)
    common = dict(
        zookeeper_connect=zk_chroot,
        subscribe="ev",
        startingOffsets="earliest",
        **{"group.id": "g1", "partition.assignment.strategy": "roundrobin"},
    )
    common["zookeeper.connect"] = common.pop("zookeeper_connect")
    a, b = reader(**common), reader(**common)
    seen: dict = {}

    def batch(r, start, end):
        got = read_all(r, start, end)
        overlap = set(got) & set(seen)
        assert not overlap, f"read twice: {sorted(overlap)}"
        seen.update(got)

    try:
        a0 = a.initialOffset()
        assert a0 == {"ev": {"0": 0, "1": 0, "2": 0, "3": 0}} and a.initialOffset() == a0
        a1 = a.latestOffset(a0, ReadAllAvailable())
        assert a1 == {"ev": {"0": 10, "1": 10, "2": 10, "3": 10}}
        batch(a, a0, a1)
        # B joins: it waits for A to release half at A's next batch boundary
        b_init: dict = {}
        t = threading.Thread(target=lambda: b_init.update(off=b.initialOffset()))
        t.start()
        wait_for(a._driver.member.to_release, 20, message="rebalance after B joined")
        produce(boot, "ev", 5, 4, start=10)
        a2 = a.latestOffset(a1, ReadAllAvailable())  # commits a1, releases what moved to B
        t.join(30)
        b0 = b_init["off"]
        a_parts = set(a2["ev"])
        assert len(a_parts) == 2 and set(b0["ev"]) == {"0", "1", "2", "3"} - a_parts
        assert all(v == 10 for v in b0["ev"].values())  # B starts at the group's committed offsets
        batch(a, a1, a2)
        b1 = b.latestOffset(b0, ReadAllAvailable())
        batch(b, b0, b1)
        # the group's offsets are visible (lag) while the queries run
        store = OffsetStore.create("zookeeper", False, zk_chroot)
        try:
            a3 = a.latestOffset(a2, ReadAllAvailable())  # next trigger: commits a2
            assert a3 == a2
            b.latestOffset(b1, ReadAllAvailable())
            # committed off the trigger's critical path, by the planner's committer thread
            wait_for(
                lambda: store.fetch("g1", [("ev", p) for p in range(4)]) == {("ev", p): 15 for p in range(4)},
                10,
                interval=0.02,
                message="the group's offsets committed",
            )
        finally:
            store.close()
        # A stops: B takes over A's partitions at A's committed offsets
        a.stop()
        produce(boot, "ev", 5, 4, start=15)
        b2 = wait_for(
            lambda: (lambda o: o if len(o["ev"]) == 4 else None)(b.latestOffset(b1, ReadAllAvailable())),
            20,
            interval=0.3,
            message="B owns every partition",
        )
        assert all(b2["ev"][p] == 15 for p in a_parts)  # newly owned: recorded, read next batch
        batch(b, b1, b2)
        b3 = b.latestOffset(b2, ReadAllAvailable())
        batch(b, b2, b3)
        assert b3 == {"ev": {"0": 20, "1": 20, "2": 20, "3": 20}}
        assert sorted(seen) == [(p, o) for p in range(4) for o in range(20)]
        assert seen[(2, 17)] == b"2-17"
    finally:
        a.stop()
        b.stop()


def test_admission_control_and_available_now(broker):
    boot = broker.bootstrap
    make_topic(boot, "adm", 2)
    produce(boot, "adm", 50, 2)
    r = reader(
        **{
            "kafka.bootstrap.servers": boot,
            "subscribe": "adm",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "30",
            "minOffsetsPerTrigger": "5",
            "maxTriggerDelay": "2s",
        }
    )
    try:
        assert isinstance(r.getDefaultReadLimit(), ReadMaxRows)
        s0 = r.initialOffset()
        s1 = r.latestOffset(s0, ReadMaxRows(30))
        assert s1 == {"adm": {"0": 15, "1": 15}}
        assert r.reportLatestOffset() == {"adm": {"0": 50, "1": 50}}  # how far behind the query is
        s2 = r.latestOffset(s1, ReadAllAvailable())  # the engine may lift the limit
        assert s2 == {"adm": {"0": 50, "1": 50}}
        produce(boot, "adm", 1, 2, start=50)  # 2 < minOffsetsPerTrigger: wait ...
        assert r.latestOffset(s2, ReadMinRows(5)) == s2
        time.sleep(2.2)  # ... at most maxTriggerDelay
        assert r.latestOffset(s2, ReadMinRows(5)) == {"adm": {"0": 51, "1": 51}}
    finally:
        r.stop()
    # Trigger.AvailableNow: batches of maxOffsetsPerTrigger up to the target, then nothing new
    r = reader(
        **{
            "kafka.bootstrap.servers": boot,
            "subscribe": "adm",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "40",
        }
    )
    try:
        s = r.initialOffset()
        r.prepareForTriggerAvailableNow()
        produce(boot, "adm", 10, 2, start=51)  # after the target: not read
        ends = []
        while True:
            e = r.latestOffset(s, r.getDefaultReadLimit())
            if e == s:
                break
            ends.append(e)
            s = e
        assert ends[-1] == {"adm": {"0": 51, "1": 51}} and len(ends) == 3
    finally:
        r.stop()


def test_fail_on_data_loss_topic_recreated(broker):
    boot = broker.bootstrap
    make_topic(boot, "lossy", 1)
    produce(boot, "lossy", 20, 1)
    opts = {"kafka.bootstrap.servers": boot, "subscribe": "lossy", "startingOffsets": "earliest"}
    strict, lenient = reader(**opts), reader(**opts, failOnDataLoss="false")
    try:
        s = strict.latestOffset(strict.initialOffset(), ReadAllAvailable())
        l1 = lenient.latestOffset(lenient.initialOffset(), ReadAllAvailable())
        assert s == l1 == {"lossy": {"0": 20}}
        with ClusterClient(boot) as c:
            c.delete_topic("lossy")
            wait_for(lambda: not _exists(c, "lossy"), 20, message="topic deleted")
        make_topic_again(boot, "lossy", 1)
        produce(boot, "lossy", 5, 1)
        with pytest.raises(DataLossError) as ei:
            strict.latestOffset(s, ReadAllAvailable())
        assert "lossy-0" in str(ei.value) and "failOnDataLoss" in str(ei.value)
        l2 = lenient.latestOffset(l1, ReadAllAvailable())  # warns, drops the partition for one batch
        assert l2 == {}
        l3 = lenient.latestOffset(l2, ReadAllAvailable())  # then restarts it at the earliest offset
        assert l3 == {"lossy": {"0": 0}}
        l4 = lenient.latestOffset(l3, ReadAllAvailable())
        assert list(read_all(lenient, l3, l4)) == [(0, o) for o in range(5)]
        # a planned range whose data is gone: fail, or skip with a warning
        from pyklog.connector.spark.source import PyklogInputPartition, read_range

        gone = PyklogInputPartition("lossy", 0, 5, 20, None)
        with pytest.raises(DataLossError, match=r"lossy-0 lost offsets \[5, 20\)"):
            list(read_range(strict.opts, gone))
        assert list(read_range(lenient.opts, gone)) == []
    finally:
        strict.stop()
        lenient.stop()


def _exists(client, topic):
    try:
        return bool(client.partitions_for(topic))
    except Exception:  # noqa: BLE001
        return False


def test_restart_after_another_member_advanced(broker, zk_chroot):
    """A query restarted from its checkpoint resumes where the group is, if another member
    advanced its partitions meanwhile (no re-read)."""
    boot = broker.bootstrap
    make_topic(boot, "rs", 1)
    produce(boot, "rs", 10, 1)
    opts = {"zookeeper.connect": zk_chroot, "subscribe": "rs", "startingOffsets": "earliest", "group.id": "g2"}
    r = reader(**opts)
    try:
        s0 = r.initialOffset()
        s1 = r.latestOffset(s0, ReadAllAvailable())
    finally:
        r.stop()
    store = OffsetStore.create("zookeeper", False, zk_chroot)
    store.commit("g2", {("rs", 0): 8})  # another member read up to 8 while this query was down
    store.close()
    again = reader(**opts)  # restart: latestOffset first, with the checkpointed start
    try:
        e1 = again.latestOffset(s0, ReadAllAvailable())
        assert e1 == {}  # dropped for one batch ...
        e2 = again.latestOffset(e1, ReadAllAvailable())
        assert e2 == {"rs": {"0": 8}}  # ... and resumed at the group's offset
        e3 = again.latestOffset(e2, ReadAllAvailable())
        assert list(read_all(again, e2, e3)) == [(0, 8), (0, 9)]
    finally:
        again.stop()
    assert s1 == {"rs": {"0": 10}}


def test_batch_reader_offsets_and_timestamps(broker):
    boot = broker.bootstrap
    make_topic(boot, "bt", 2)
    with Producer({"bootstrap.servers": boot}) as p:
        for i in range(20):
            p.produce("bt", b"v%d" % i, partition=i % 2, timestamp_ms=1_000_000 + i * 1000)
        p.flush()

    def rows(**o):
        br = PyklogBatchReader(parse_source_options({"kafka.bootstrap.servers": boot, **o}, streaming=False))
        out = []
        for part in br.partitions():
            for b in br.read(part):
                out += list(zip(b.column("partition").to_pylist(), b.column("offset").to_pylist()))
        return sorted(out)

    assert len(rows(subscribe="bt")) == 20
    assert rows(subscribe="bt", startingOffsets='{"bt":{"0":8,"1":-2}}', endingOffsets='{"bt":{"0":-1,"1":2}}') == [
        (0, 8),
        (0, 9),
        (1, 0),
        (1, 1),
    ]
    # records 14.. have timestamps >= 1_014_000: partition 0 offsets 7.., partition 1 offsets 7..
    assert rows(subscribe="bt", startingTimestamp="1014000") == [(0, 7), (0, 8), (0, 9), (1, 7), (1, 8), (1, 9)]
    assert rows(assign='{"bt":[1]}', startingOffsetsByTimestamp='{"bt":{"1":1017000}}') == [(1, 8), (1, 9)]
    br = PyklogBatchReader(
        parse_source_options(
            {"kafka.bootstrap.servers": boot, "subscribe": "bt", "minPartitions": "5"}, streaming=False
        )
    )
    assert len(br.partitions()) >= 5


def test_fail_on_data_loss_retention(broker_factory):
    """Offsets removed by retention: a planned range that starts below the log start offset fails
    with the lost range (failOnDataLoss=true) or skips to the log start (false)."""
    b = broker_factory(0, log_retention_check_interval_ms=300)
    boot = b.bootstrap
    make_topic(boot, "ret", 1, **{"segment.bytes": "3000", "retention.ms": "1000"})
    with Producer({"bootstrap.servers": boot}) as p:
        for i in range(6):  # one ~2.3 KB batch each: a segment each (3000-byte segments)
            for j in range(20):
                p.produce("ret", b"x" * 100 + str(20 * i + j).encode(), partition=0)
            p.flush()
    with ClusterClient(boot) as c:
        log_start = wait_for(
            lambda: c.list_offsets({("ret", 0): -2})[("ret", 0)],
            30,
            interval=0.3,
            message="retention to delete the oldest segments",
        )
    from pyklog.connector.spark.source import PyklogInputPartition, read_range

    part = PyklogInputPartition("ret", 0, 0, 120, None)
    strict = parse_source_options({"kafka.bootstrap.servers": boot, "subscribe": "ret"}, streaming=True)
    with pytest.raises(DataLossError, match=rf"ret-0 lost offsets \[0, {log_start}\)"):
        list(read_range(strict, part))
    lenient = parse_source_options(
        {"kafka.bootstrap.servers": boot, "subscribe": "ret", "failOnDataLoss": "false"}, streaming=True
    )
    offsets = [o for batch in read_range(lenient, part) for o in batch.column("offset").to_pylist()]
    assert offsets and offsets[0] >= log_start and offsets == list(range(offsets[0], 120))
