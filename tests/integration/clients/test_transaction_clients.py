"""Transactions end to end with real broker processes and stock clients (KIP-98): confluent-kafka's
and kafka-python's transactional producers, a zombie fenced by a second producer, a transaction left
open by a SIGKILLed producer aborted after transaction.timeout.ms, the coordinator SIGKILLed between
PrepareCommit and the markers, markers crossing brokers.

What a read_committed reader sees is computed from the partition's batches as Kafka's consumer does
(data of a producer is held until its COMMIT marker, dropped at its ABORT marker; what has no marker
yet is "undecided"), over a raw read_uncommitted fetch: the counts below check the markers the
coordinator wrote, independently of any client's read_committed implementation.  Each test counts
records acknowledged as committed, visible, lost (committed but not visible), duplicated and leaked
(aborted or undecided but visible).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.reader import iter_batches
from tests.integration.transaction_support import (
    read_committed_values,
    sigkill_in_open_transaction,
    two_brokers,
)
from tests.support import Wire, create_topic, wait_for

TXN_PROPS = {
    "transaction.state.log.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def read_partition(port: int, topic: str, partition: int) -> dict:
    """The partition's records by read_committed rules: {"committed": [...], "aborted": [...],
    "undecided": [...], "markers": [(producer_id, commit)]} (values as bytes)."""
    out = {"committed": [], "aborted": [], "undecided": [], "markers": []}
    pending: dict[int, list] = {}
    offset = 0
    with Wire(port) as w:
        while True:
            r = w.request(
                ApiKey.FETCH,
                4,
                {
                    "replica_id": -1,
                    "max_wait_ms": 0,
                    "min_bytes": 0,
                    "max_bytes": 1 << 22,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [
                                {"partition": partition, "fetch_offset": offset, "partition_max_bytes": 1 << 22}
                            ],
                        }
                    ],
                },
            )
            p = r["responses"][0]["partitions"][0]
            assert p["error_code"] == 0, p
            batches = list(iter_batches(bytes(p["records"] or b"")))
            if not batches:
                break
            for b in batches:
                if b.next_offset <= offset:
                    continue
                offset = b.next_offset
                if b.is_control:
                    commit = b.control_type == 1
                    out["markers"].append((b.producer_id, commit))
                    out["committed" if commit else "aborted"].extend(pending.pop(b.producer_id, []))
                elif b.is_transactional:
                    pending.setdefault(b.producer_id, []).extend(rec.value for rec in b.records)
                else:
                    out["committed"].extend(rec.value for rec in b.records)
            if offset >= p["high_watermark"]:
                break
    for values in pending.values():
        out["undecided"].extend(values)
    return out


def read_topic(port_of, topic: str, partitions: int) -> dict:
    """``read_partition`` over every partition (``port_of(p)`` = the leader's port), merged."""
    total = {"committed": [], "aborted": [], "undecided": [], "markers": []}
    for p in range(partitions):
        got = read_partition(port_of(p), topic, p)
        for k in total:
            total[k].extend(got[k])
    return total


def read_decided(port: int, topic: str, partitions: int, timeout: float = 30.0, message: str = "markers") -> dict:
    """:func:`read_topic` once every transaction in ``topic`` is decided (its marker written):
    fails after ``timeout`` naming ``message``."""
    return wait_for(
        lambda: (s := read_topic(lambda _p: port, topic, partitions)) and not s["undecided"] and s,
        timeout=timeout,
        message=message,
    )


def count(acked_committed, must_not_see, seen: dict) -> dict:
    visible = Counter(seen["committed"])
    acked = set(acked_committed)
    return {
        "committed": len(acked),
        "visible": sum(visible.values()),
        "lost": sum(1 for v in acked if visible[v] == 0),
        "duplicated": sum(c - 1 for c in visible.values() if c > 1),
        "leaked": sum(1 for v in must_not_see if visible[v] > 0),
    }


def confluent_producer(bootstrap: str, tid: str, **extra):
    from confluent_kafka import Producer

    conf = {"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, "transaction.timeout.ms": 60000}
    conf.update(extra)
    return Producer(conf)


def produce_values(p, topic: str, values: list[bytes], partitions: int):
    errors = []
    for i, v in enumerate(values):
        p.produce(
            topic,
            value=v,
            partition=i % partitions,
            on_delivery=lambda err, msg: err is not None and errors.append(err),
        )
    p.flush(30)
    assert errors == []


def test_confluent_kafka_commit_and_abort(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    topic = f"txc-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 3)["error_code"] == 0
    p = confluent_producer(b.bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    p.init_transactions(30)
    committed, aborted = [], []
    for round_ in range(4):
        p.begin_transaction()
        values = [b"r%d-%d" % (round_, i) for i in range(50)]
        produce_values(p, topic, values, 3)
        if round_ % 2 == 0:
            p.commit_transaction(30)
            committed += values
        else:
            p.abort_transaction(30)
            aborted += values
    seen = read_decided(b.port, topic, 3, message="every marker written")
    c = count(committed, aborted, seen)
    assert c == {"committed": 100, "visible": 100, "lost": 0, "duplicated": 0, "leaked": 0}, c
    assert count(committed, aborted, {"committed": read_committed_values(b.bootstrap, topic, 3)}) == c
    assert sorted(seen["aborted"]) == sorted(aborted)
    # 4 transactions x 3 partitions: one marker each (commit, abort, commit, abort)
    assert Counter(commit for _, commit in seen["markers"]) == {True: 6, False: 6}


def test_kafka_python_transactional_producer(broker_factory):
    from kafka import KafkaProducer

    b = broker_factory(0, **TXN_PROPS)
    topic = f"txk-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
    p = KafkaProducer(bootstrap_servers=b.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}", max_block_ms=30000)
    try:
        p.init_transactions()
        p.begin_transaction()
        committed = [b"c%d" % i for i in range(40)]
        for i, v in enumerate(committed):
            p.send(topic, value=v, partition=i % 2)
        p.commit_transaction()
        p.begin_transaction()
        aborted = [b"a%d" % i for i in range(40)]
        for i, v in enumerate(aborted):
            p.send(topic, value=v, partition=i % 2)
        p.flush()
        p.abort_transaction()
    finally:
        p.close(timeout=10)
    seen = read_decided(b.port, topic, 2, message="every marker written")
    c = count(committed, aborted, seen)
    assert c == {"committed": 40, "visible": 40, "lost": 0, "duplicated": 0, "leaked": 0}, c


def test_zombie_is_fenced_by_a_second_producer(broker_factory):
    from confluent_kafka import KafkaException

    b = broker_factory(0, **TXN_PROPS)
    topic = f"txz-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
    tid = f"tx-{uuid.uuid4().hex[:8]}"
    zombie = confluent_producer(b.bootstrap, tid)
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie_values = [b"z%d" % i for i in range(30)]
    produce_values(zombie, topic, zombie_values, 2)
    # a second producer with the same transactional.id: its init aborts the zombie's transaction
    fresh = confluent_producer(b.bootstrap, tid)
    fresh.init_transactions(30)
    with pytest.raises(KafkaException) as ei:
        zombie.commit_transaction(30)
    err = ei.value.args[0]
    assert err.fatal() or "fenced" in err.str().lower(), err
    fresh.begin_transaction()
    fresh_values = [b"f%d" % i for i in range(30)]
    produce_values(fresh, topic, fresh_values, 2)
    fresh.commit_transaction(30)
    seen = read_decided(b.port, topic, 2, message="every marker written")
    c = count(fresh_values, zombie_values, seen)
    assert c == {"committed": 30, "visible": 30, "lost": 0, "duplicated": 0, "leaked": 0}, c
    assert count(fresh_values, zombie_values, {"committed": read_committed_values(b.bootstrap, topic, 2)}) == c
    assert sorted(seen["aborted"]) == sorted(zombie_values)


def test_transaction_of_a_sigkilled_producer_is_aborted_after_its_timeout(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    topic = f"txo-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
    sigkill_in_open_transaction(b.bootstrap, f"tx-{uuid.uuid4().hex[:8]}", topic, transaction_timeout_ms=2000)
    killed_at = time.monotonic()
    # another producer commits after the open transaction: held back until the open one is aborted
    p = confluent_producer(b.bootstrap, f"tx-{uuid.uuid4().hex[:8]}")
    p.init_transactions(30)
    p.begin_transaction()
    later = [b"later%d" % i for i in range(20)]
    produce_values(p, topic, later, 2)
    p.commit_transaction(30)
    open_values = sorted(b"open%d" % i for i in range(25))
    seen = wait_for(
        lambda: (s := read_topic(lambda _p: b.port, topic, 2)) and len(s["committed"]) == 20 and s,
        message="the later transaction's markers",
    )
    # the killed producer's records are undecided until the coordinator aborts them (never committed)
    assert sorted(seen["undecided"] + seen["aborted"]) == open_values
    if seen["undecided"]:
        # a read_committed consumer stops at the open transaction: the later commit is not delivered yet
        held = read_committed_values(b.bootstrap, topic, 2)
        assert not set(held) & set(open_values)
    seen = read_decided(b.port, topic, 2, timeout=30, message="the open transaction aborted")
    waited = time.monotonic() - killed_at
    c = count(later, open_values, seen)
    assert c == {"committed": 20, "visible": 20, "lost": 0, "duplicated": 0, "leaked": 0}, c
    assert len(seen["aborted"]) == 25
    delivered = read_committed_values(b.bootstrap, topic, 2)  # stock read_committed consumer: same counts
    assert count(later, open_values, {"committed": delivered}) == c
    assert waited < 15, f"the abort took {waited:.1f}s (transaction.timeout.ms=2000, checked every 500 ms)"


def _tid_coordinated_by(port: int, node: int) -> str:
    with Wire(port) as w:
        for _ in range(200):
            tid = f"tx-{uuid.uuid4().hex[:8]}"
            r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
            if r["error_code"] == 0 and r["node_id"] == node:
                return tid
    raise AssertionError(f"no transactional id coordinated by broker {node}")


def test_coordinator_sigkilled_between_prepare_commit_and_markers(broker_factory):
    """The transaction's partitions are led by broker 1, its coordinator is broker 0 (markers cross
    brokers).  Broker 1 is SIGKILLed before the commit, so the markers cannot be written; the
    commit is acknowledged (PrepareCommit in __transaction_state); broker 0 is SIGKILLed; broker 1
    comes back: the transaction is still undecided; broker 0 comes back, reloads PrepareCommit and
    writes the markers: every acknowledged record is visible once."""
    b0, b1 = two_brokers(broker_factory, **TXN_PROPS)
    topic = f"txx-{uuid.uuid4().hex[:6]}"
    with Wire(b0.port) as w:
        created = create_topic(
            w,
            topic,
            partitions=-1,
            replication_factor=-1,
            assignments=[{"partition_index": 0, "broker_ids": [1]}, {"partition_index": 1, "broker_ids": [1]}],
        )
        assert created["error_code"] == 0, created
    tid = _tid_coordinated_by(b0.port, 0)
    p = confluent_producer(f"{b0.bootstrap},{b1.bootstrap}", tid)
    p.init_transactions(30)
    # A: an ordinary transaction whose markers go from broker 0 to broker 1
    p.begin_transaction()
    first = [b"a%d" % i for i in range(30)]
    produce_values(p, topic, first, 2)
    p.commit_transaction(30)
    seen = read_decided(b1.port, topic, 2, message="markers written across brokers")
    assert count(first, [], seen)["lost"] == 0
    # B: the records are on broker 1, then broker 1 dies; the commit is acknowledged by broker 0
    p.begin_transaction()
    second = [b"b%d" % i for i in range(30)]
    produce_values(p, topic, second, 2)
    b1.kill()
    p.commit_transaction(30)  # answered once PrepareCommit is written; the markers cannot reach broker 1
    b0.kill()
    b1.start()
    seen = read_topic(lambda _p: b1.port, topic, 2)
    assert sorted(seen["undecided"]) == sorted(second), "the markers were written before the coordinator died"
    assert sorted(read_committed_values(b1.bootstrap, topic, 2)) == sorted(first)  # B not delivered yet
    b0.start()
    seen = read_decided(b1.port, topic, 2, timeout=60, message="the restarted coordinator completes the commit")
    c = count(first + second, [], seen)
    assert c == {"committed": 60, "visible": 60, "lost": 0, "duplicated": 0, "leaked": 0}, c
    assert count(first + second, [], {"committed": read_committed_values(b0.bootstrap, topic, 2)}) == c
    assert "left in PrepareCommit: sending its 2 markers again" in b0.output()
    # the coordinator wrote CompleteCommit: the producer's next transaction is accepted at once
    p.begin_transaction()
    third = [b"c%d" % i for i in range(10)]
    produce_values(p, topic, third, 2)
    p.commit_transaction(60)
    seen = read_decided(b1.port, topic, 2, message="third transaction")
    c = count(first + second + third, [], seen)
    assert c == {"committed": 70, "visible": 70, "lost": 0, "duplicated": 0, "leaked": 0}, c
    # D: the partitions' leader is down while the (live) coordinator sends the markers: retried with
    # backoff until it is back
    p.begin_transaction()
    fourth = [b"d%d" % i for i in range(10)]
    produce_values(p, topic, fourth, 2)
    b1.kill()
    failures = b0.output().count("cannot send transaction markers to broker 1")
    p.commit_transaction(30)
    wait_for(
        lambda: b0.output().count("cannot send transaction markers to broker 1") > failures,
        message="a marker attempt failed while broker 1 is down",
    )
    b1.start()
    seen = read_decided(b1.port, topic, 2, timeout=60, message="markers delivered once the leader is back")
    c = count(first + second + third + fourth, [], seen)
    assert c == {"committed": 80, "visible": 80, "lost": 0, "duplicated": 0, "leaked": 0}, c
    p.flush(10)
    for b in (b0, b1):
        assert "Traceback" not in b.output(), b.output()[-5000:]


def test_concurrent_transactional_producers(broker_factory):
    """Four confluent-kafka producers (four transactional ids) commit and abort concurrently on the
    same partitions: the handlers run on several threads; every committed record is visible once."""
    import threading

    b = broker_factory(0, **TXN_PROPS)
    topic = f"txp-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 3)["error_code"] == 0
    committed, aborted, errors = [], [], []
    lock = threading.Lock()

    def run(n: int) -> None:
        try:
            p = confluent_producer(b.bootstrap, f"tx-{n}-{uuid.uuid4().hex[:6]}")
            p.init_transactions(30)
            for t in range(8):
                p.begin_transaction()
                values = [b"p%d-t%d-%d" % (n, t, i) for i in range(15)]
                produce_values(p, topic, values, 3)
                if (n + t) % 3:
                    p.commit_transaction(30)
                    with lock:
                        committed.extend(values)
                else:
                    p.abort_transaction(30)
                    with lock:
                        aborted.extend(values)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    seen = read_decided(b.port, topic, 3, message="every marker written")
    c = count(committed, aborted, seen)
    assert c == {"committed": len(committed), "visible": len(committed), "lost": 0, "duplicated": 0, "leaked": 0}, c
    assert len(committed) + len(aborted) == 4 * 8 * 15
    assert count(committed, aborted, {"committed": read_committed_values(b.bootstrap, topic, 3)}) == c
    assert "Traceback" not in b.output()
