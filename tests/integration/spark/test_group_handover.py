"""Handing a consumer group's partitions from one Spark query to another when the first one stops,
crashes or is paused past its ZooKeeper session, with real ZooKeeper, a real broker and the suite's
SparkSession; counting the rows read, lost and read twice.

Each query writes with ``foreachBatch`` into this process (rows as (partition, offset)), so a batch
is complete exactly when Spark says so.  The member's planner is the Python worker whose pid is in
its consumer id (``<host>-spark-<pid>-<hex>``); the tests SIGKILL and SIGSTOP that process.

* stop: a query stopped right after a batch completed, before its next trigger (a 1 h trigger
  interval), then a second member takes over: nothing is read twice.
* SIGKILL: the planner of a query killed after a batch completed: the successor reads nothing twice.
* SIGSTOP: the planner paused during a batch (the sink holds the batch) past the session; another
  member takes over; the batch completes and the planner resumes: its commit is refused, no
  offset moves backwards, it rejoins and resumes at the group's offsets.  Read twice: exactly the
  batch that was in flight.
"""

from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter

import pytest
from kazoo.client import KazooClient

from pyklog.broker.zk import paths
from pyklog.connector.offsets import OffsetStore
from pyklog.connector.producer import Producer
from tests.integration.spark.support import group_members, make_topic
from tests.integration.spark.support import wait_query as support_wait_query
from tests.support import wait_for

SESSION_MS = "4000"  # ZooKeeper's minimum with the test server (tickTime 2 s)


def produce(bootstrap, topic, per_partition, partitions, start=0):
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for part in range(partitions):
            for i in range(start, start + per_partition):
                p.produce(topic, f"{part}-{i}".encode(), partition=part)
        p.flush()


class Sink:
    """foreachBatch target: keeps every (partition, offset) each query saw, in this process.
    ``hold`` (a batch id) makes that batch wait in the sink until :meth:`release`."""

    def __init__(self, hold=None):
        self.rows: list = []
        self.batches: list = []
        self.hold = hold
        self.held = threading.Event()
        self._release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
        if batch_id == self.hold and got:
            self.held.set()
            self._release.wait(120)
        with self._lock:
            self.rows.extend(got)
            self.batches.append((batch_id, len(got)))

    def release(self):
        self._release.set()


def start(spark, sink, opts, trigger="1 second"):
    r = spark.readStream.format("pyklog")
    for k, v in opts.items():
        r = r.option(k, v)
    return r.load().writeStream.foreachBatch(sink).trigger(processingTime=trigger).start()


def planner_pid(consumer_id):
    """The planner worker's pid from its consumer id ``<host>-spark-<pid>-<hex>``."""
    return int(consumer_id.rsplit("-", 2)[-2])


def counts(produced, *sinks):
    """(rows read, lost, read twice) over all sinks."""
    seen = Counter(row for s in sinks for row in s.rows)
    lost = sorted(set(produced) - set(seen))
    twice = sum(n - 1 for n in seen.values() if n > 1)
    return sum(seen.values()), len(lost), twice


def wait_query(q, predicate, timeout=60.0, what="query progress"):
    """support.wait_query polling every 0.2 s, 60 s by default (these queries trigger every second)."""
    support_wait_query(q, predicate, timeout, what, interval=0.2)


@pytest.fixture
def group_env(spark, broker, zk_chroot):
    boot = broker.bootstrap
    store = OffsetStore.create("zookeeper", False, zk_chroot)
    yield boot, store
    store.close()


def opts_for(zk_chroot, topic, group):
    return {
        "zookeeper.connect": zk_chroot,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "group.id": group,
        "zookeeper.session.timeout.ms": SESSION_MS,
    }


def test_stop_after_a_batch_hands_over_nothing_to_read_twice(spark, group_env, zk_chroot):
    boot, store = group_env
    make_topic(boot, "stop", 2)
    produce(boot, "stop", 10, 2)
    tps = [("stop", 0), ("stop", 1)]
    opts = opts_for(zk_chroot, "stop", "stop-g")
    a, b = Sink(), Sink()
    qa = start(spark, a, opts, trigger="1 hour")  # batch 0 at once, the next trigger in an hour
    try:
        wait_query(qa, lambda: len(a.rows) == 20, what="A's first batch")
        # the batch has completed: give the completion a moment to be committed, then stop A
        try:
            wait_for(lambda: store.fetch("stop-g", tps) == dict.fromkeys(tps, 10), 5, message="A's commit")
        except AssertionError:
            pass  # without a batch-end commit it never comes: counted below
    finally:
        qa.stop()
    assert qa.exception() is None
    produce(boot, "stop", 10, 2, start=10)
    qb = start(spark, b, opts)
    try:
        wait_query(qb, lambda: store.fetch("stop-g", tps) == dict.fromkeys(tps, 20), what="B caught up")
    finally:
        qb.stop()
    read, lost, twice = counts([(p, o) for p in range(2) for o in range(20)], a, b)
    print(f"\nstop after a batch: read {read}, lost {lost}, read twice {twice}")
    assert (lost, twice) == (0, 0)


def test_planner_sigkilled_after_a_batch(spark, group_env, zk_chroot):
    boot, store = group_env
    make_topic(boot, "kill", 2)
    produce(boot, "kill", 10, 2)
    tps = [("kill", 0), ("kill", 1)]
    opts = opts_for(zk_chroot, "kill", "kill-g")
    a, b = Sink(), Sink()
    qa = start(spark, a, opts, trigger="1 hour")
    qb = None
    try:
        wait_query(qa, lambda: len(a.rows) == 20, what="A's first batch")
        try:
            wait_for(lambda: store.fetch("kill-g", tps) == dict.fromkeys(tps, 10), 5, message="A's commit")
        except AssertionError:
            pass
        (cid,) = group_members(zk_chroot, "kill-g")
        os.kill(planner_pid(cid), signal.SIGKILL)
        produce(boot, "kill", 10, 2, start=10)
        t0 = time.monotonic()
        qb = start(spark, b, opts)  # joins once A's session has expired
        wait_query(qb, lambda: store.fetch("kill-g", tps) == dict.fromkeys(tps, 20), what="B took over")
        took = time.monotonic() - t0
    finally:
        qa.stop()
        if qb is not None:
            qb.stop()
    read, lost, twice = counts([(p, o) for p in range(2) for o in range(20)], a, b)
    print(
        f"\nplanner SIGKILLed after a batch: B caught up after {took:.1f} s; read {read}, lost {lost}, "
        f"read twice {twice}"
    )
    assert (lost, twice) == (0, 0)


def test_planner_paused_past_its_session_during_a_batch(spark, group_env, zk_chroot):
    boot, store = group_env
    make_topic(boot, "zomb", 2)
    produce(boot, "zomb", 10, 2)
    tps = [("zomb", 0), ("zomb", 1)]
    opts = opts_for(zk_chroot, "zomb", "zomb-g")
    a, b = Sink(hold=1), Sink()
    history = {tp: [] for tp in tps}
    watching = threading.Event()

    def watch():
        while not watching.is_set():
            for tp, off in store.fetch("zomb-g", tps).items():
                if not history[tp] or history[tp][-1] != off:
                    history[tp].append(off)
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    qa = start(spark, a, opts)
    qb = None
    pid = None
    try:
        wait_query(qa, lambda: len(a.rows) == 20, what="A's first batch")
        wait_for(lambda: store.fetch("zomb-g", tps) == dict.fromkeys(tps, 10), 10, message="A's commit of batch 0")
        (cid,) = group_members(zk_chroot, "zomb-g")
        pid = planner_pid(cid)
        produce(boot, "zomb", 10, 2, start=10)
        wait_query(qa, a.held.is_set, what="A's batch 1 in the sink")
        os.kill(pid, signal.SIGSTOP)  # the planner is paused; A's batch 1 (rows 10-19) is in flight
        qb = start(spark, b, opts)  # B joins when A's session expires, and starts at the group's offsets
        wait_query(qb, lambda: store.fetch("zomb-g", tps) == dict.fromkeys(tps, 20), what="B took over")
        produce(boot, "zomb", 10, 2, start=20)
        wait_query(qb, lambda: store.fetch("zomb-g", tps) == dict.fromkeys(tps, 30), what="B read on")
        a.release()  # A's batch 1 completes; its completion is reported to the paused planner
        wait_query(qa, lambda: any(bid == 1 for bid, _ in a.batches), what="A's batch 1 to complete")
        os.kill(pid, signal.SIGCONT)
        pid = None
        # A notices its expired session, rejoins and takes one partition back at the group's offset
        wait_for(lambda: len(group_members(zk_chroot, "zomb-g")) == 2, 30, message="A to rejoin")
        produce(boot, "zomb", 10, 2, start=30)
        wait_query(
            qb, lambda: store.fetch("zomb-g", tps) == dict.fromkeys(tps, 40), timeout=60, what="A and B to read on"
        )
        time.sleep(1.5)  # a trigger more: anything else either would read shows up
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        a.release()
        qa.stop()
        if qb is not None:
            qb.stop()
        watching.set()
        watcher.join(5)
    read, lost, twice = counts([(p, o) for p in range(2) for o in range(40)], a, b)
    backwards = {tp: h for tp, h in history.items() if any(y < x for x, y in itertools.pairwise(h))}
    in_flight = Counter(row for row in a.rows if 10 <= row[1] < 20)
    print(
        f"\nplanner paused past its session during a batch: read {read}, lost {lost}, read twice {twice} "
        f"(A's batch in flight: {len(in_flight)} rows); offsets history {history}; backwards {backwards}"
    )
    assert lost == 0
    assert backwards == {}
    # only A's batch in flight (rows 10-19 of both partitions, also read by B) is read twice
    assert twice == 20
    assert sorted(r for r, n in Counter(a.rows + b.rows).items() if n > 1) == [
        (p, o) for p in range(2) for o in range(10, 20)
    ]


def test_member_keeps_reading_what_it_owns_after_a_new_member_joins_under_load(spark, group_env, zk_chroot):
    """Member A keeps running while B joins and takes partitions, with records produced all along (the
    group_handover notebook's stall at high load: A stopped producing micro-batches).  A must keep
    completing batches with rows of the partitions it still owns, trigger after trigger; the offsets
    Spark records for A (endOffset, latestOffset of its progress) must stay bounded; nothing produced
    is lost and nothing but a batch in flight at the handover is read twice."""

    boot, store = group_env
    parts = 4
    make_topic(boot, "load", parts)
    tps = [("load", p) for p in range(parts)]
    opts = opts_for(zk_chroot, "load", "load-g")
    a, b = Sink(), Sink()
    produced = dict.fromkeys(range(parts), 0)
    stop = threading.Event()

    def keep_producing():
        with Producer({"bootstrap.servers": boot, "linger.ms": 5}) as p:
            while not stop.is_set():
                for part in range(parts):
                    for _ in range(25):
                        p.produce("load", f"{part}-{produced[part]}".encode(), partition=part)
                        produced[part] += 1
                p.flush()
                time.sleep(0.05)

    producer = threading.Thread(target=keep_producing, daemon=True)
    producer.start()
    qa = start(spark, a, opts, trigger="0 seconds")
    qb = None
    sizes = []
    try:
        wait_query(
            qa,
            lambda: len([p for p in qa.recentProgress if p["numInputRows"]]) >= 3,
            timeout=90,
            what="A's first batches",
        )
        (cid_a,) = group_members(zk_chroot, "load-g")
        qb = start(spark, b, opts, trigger="0 seconds")
        kc = KazooClient(hosts=zk_chroot)
        kc.start(timeout=30)
        try:

            def owners():
                out = {}
                for p in range(parts):
                    try:
                        out[p] = kc.get(paths.partition_owner("load-g", "load", p))[0].decode()
                    except Exception:  # noqa: BLE001 - NoNodeError: between owners
                        out[p] = None
                return out

            wait_query(
                qb,
                lambda: any(o not in (None, cid_a) for o in owners().values()),
                timeout=90,
                what="B owning partitions",
            )
            wait_query(
                qa,
                lambda: (
                    set(owners().values()) - {None} != {cid_a} and sum(1 for o in owners().values() if o == cid_a) > 0
                ),
                timeout=60,
                what="A and B both owning partitions",
            )
            mine = {p for p, o in owners().items() if o == cid_a}
            # A goes on: count its batches with rows after the handover, for many triggers
            seen_batches = len(a.batches)
            rows_before = {p: sum(1 for r in a.rows if r[0] == p) for p in mine}

            def a_went_on():
                for prog in qa.recentProgress[-5:]:
                    for s in prog["sources"]:
                        sizes.append(len(s.get("endOffset") or "") + len(s.get("latestOffset") or ""))
                grown = all(sum(1 for r in a.rows if r[0] == p) > rows_before[p] + 100 for p in mine)
                return len(a.batches) >= seen_batches + 20 and grown

            wait_query(qa, a_went_on, timeout=120, what="A to keep reading the partitions it owns")
            assert owners().keys() == set(range(parts))
        finally:
            kc.stop()
            kc.close()
    finally:
        stop.set()
        producer.join(30)
        try:
            if qb is not None:
                wait_query(qb, lambda: True)
            want = {("load", p): produced[p] for p in range(parts)}
            wait_for(lambda: store.fetch("load-g", tps) == want, 90, message="A and B read to the end")
        finally:
            qa.stop()
            if qb is not None:
                qb.stop()
    assert qa.exception() is None and (qb is None or qb.exception() is None)
    read, lost, twice = counts([(p, o) for p in range(parts) for o in range(produced[p])], a, b)
    print(
        f"\nA kept reading after B joined under load: A {len(a.batches)} batches, B {len(b.batches)}; "
        f"read {read}, lost {lost}, read twice {twice}; offsets JSON of A's progress {min(sizes)}-{max(sizes)} chars"
    )
    assert lost == 0
    assert max(sizes) < 400, max(sizes)  # {"load": {"0": n, ...}} and the batch-end path: bounded
