"""Followers SIGKILLed under load: confluent-kafka produces acks=all with idempotence while each
follower of a 3-broker, replication factor 3 cluster is SIGKILLed and restarted in turn (the last with
its log directory wiped), then the leader is SIGKILLed.  Every acknowledged record must be read back
once, in order per partition.

The quick replication scenarios (ISR shrink and expansion, high watermark, min.insync.replicas,
truncation of a deposed leader) are in tests/integration/replication/test_fetch.py.
"""

from __future__ import annotations

import time
import uuid

import tests.support as support
from tests.integration.replication_support import (
    LAG_MS,
    assert_replicas_identical,
    consume_all,
    list_latest,
    log_end_offset,
    produce_raw,
    start_brokers,
    state,
)
from tests.support import wait_for


def test_followers_killed_restarted_and_wiped_under_acks_all_load_then_leader_killed(broker_factory, zk):
    """confluent-kafka produces acks=all + idempotence without pause while each follower is SIGKILLed
    and restarted in turn (the last one with its log directory wiped), min.insync.replicas=2: no
    delivery fails; every acknowledged record is read back once, in order per partition.  Then the
    leader is SIGKILLed: the controller elects a follower from the ISR, which takes writes; nothing
    acknowledged is lost."""
    import shutil
    import threading

    from confluent_kafka import Producer

    brokers = start_brokers(broker_factory)
    leader, f1, f2 = brokers
    topic = f"load-{uuid.uuid4().hex[:6]}"
    with support.Wire(leader.port) as w:  # every partition led by broker 0 (CreateTopics' assignments)
        created = support.create_topic(
            w,
            topic,
            num_partitions=-1,
            replication_factor=-1,
            assignments=[
                {"partition_index": 0, "broker_ids": [0, 1, 2]},
                {"partition_index": 1, "broker_ids": [0, 2, 1]},
            ],
        )
    assert created["error_code"] == 0, created
    acked, errors, stop = [], [], threading.Event()

    def on_delivery(err, msg):
        (acked.append((msg.partition(), msg.offset(), msg.value())) if err is None else errors.append(err))

    def produce():
        p = Producer(
            {
                "bootstrap.servers": leader.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        i = 0
        while not stop.is_set():
            try:
                p.produce(topic, value=b"m%06d" % i, partition=i % 2, on_delivery=on_delivery)
                i += 1
            except BufferError:
                pass
            p.poll(0.001 if i % 50 else 0.02)
        p.flush(120)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    timings = []
    try:
        for victim, wipe in ((f1, False), (f2, False), (f1, False), (f2, True)):
            before = len(acked)
            wait_for(lambda: len(acked) >= before + 200, timeout=60, message="acknowledged writes go on")
            victim.kill()
            t0 = time.monotonic()
            wait_for(
                lambda: all(victim.broker_id not in state(zk, topic, p)["isr"] for p in (0, 1)),
                timeout=LAG_MS / 1000 + 30,
                message=f"broker {victim.broker_id} leaves the ISRs",
            )
            shrunk = time.monotonic() - t0
            mark = len(acked)
            wait_for(lambda: len(acked) >= mark + 200, timeout=60, message="writes go on with ISR 2")
            if wipe:
                shutil.rmtree(victim.props["log.dirs"])
            victim.start()
            t1 = time.monotonic()
            wait_for(
                lambda: all(state(zk, topic, p)["isr"] == [0, 1, 2] for p in (0, 1)),
                timeout=90,
                message=f"broker {victim.broker_id} rejoins the ISRs",
            )
            timings.append((victim.broker_id, wipe, round(shrunk, 1), round(time.monotonic() - t1, 1)))
    finally:
        stop.set()
        t.join(150)
    assert not errors, errors[:5]
    n = {p: sum(1 for a in acked if a[0] == p) for p in (0, 1)}
    for p in (0, 1):
        assert list_latest(leader.port, topic, p) == n[p]
        wait_for(lambda p=p: all(log_end_offset(b, topic, p) == n[p] for b in brokers), message="replicas equal")
        assert_replicas_identical(brokers, topic, p)
    got = consume_all(leader.bootstrap, topic, [0, 1], len(acked))
    assert sorted(got) == sorted(acked)  # 0 lost, 0 duplicated
    for p in (0, 1):
        assert [o for q, o, _ in got if q == p] == list(range(n[p]))  # in order, no gap
    print(
        f"acknowledged {len(acked)}, read back {len(got)}, lost 0, duplicated 0; "
        f"(broker, wiped, ISR shrink s, rejoin s): {timings}"
    )

    # the leader SIGKILLed: the controller elects a follower of the ISR (epoch + 1), which takes writes
    leader.kill()
    by_id = {b.broker_id: b for b in brokers}
    new_leaders = {
        p: wait_for(
            lambda p=p: (st := state(zk, topic, p))["leader"] not in (-1, 0) and st["leader"],
            timeout=60,
            message="a new leader elected",
        )
        for p in (0, 1)
    }
    assert all(state(zk, topic, p)["leader_epoch"] >= 1 for p in (0, 1))
    new0 = by_id[new_leaders[0]]
    codes: list = []  # a raw (non-idempotent) write that timed out waiting for the ISR may be in the
    # log and is retried: at least once, as with any client without idempotence
    wait_for(
        lambda: codes.append(produce_raw(new0.port, topic, 0, b"back")["error_code"]) or codes[-1] == 0,
        message="new leader takes writes",
    )
    maybe_written = sum(1 for c in codes if c in (0, 7))  # NONE, REQUEST_TIMED_OUT
    leader.start()
    got = consume_all(new0.bootstrap, topic, [0, 1], len(acked) + maybe_written)
    values = [v for _, _, v in got]
    assert sorted(v for v in values if v != b"back0") == sorted(v for _, _, v in acked)  # 0 lost, 0 duplicated
    assert 1 <= values.count(b"back0") <= maybe_written, codes
