"""A split between an old leader and ZooKeeper.  The leader of a replicated partition is
SIGSTOPped past its ZooKeeper session: the controller elects another leader from the ISR and the
producers move there.  Produce requests with acks=all that clients had already sent to the old
leader (stale metadata) wait in its socket buffers while it is stopped; more are sent to it right
after SIGCONT, before it has seen the new partition state.  The old leader must not acknowledge any
of them unless the new leader has the record: its followers now fetch from the new leader, so its
high watermark cannot pass what they have, and it steps down when it reads the new state.

Counts: records acknowledged by the new leader, Produce requests to the old leader and how each
ended (acknowledged / refused / no answer), and, after the old leader rejoined as a follower, what
the partition holds: every acknowledged record exactly once, nothing that only the old leader
acknowledged.  Real broker processes and ZooKeeper, 3 brokers, replication factor 3,
``min.insync.replicas=2``.
"""

from __future__ import annotations

import signal
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey, decode_response
from tests.integration.replication_support import (
    assert_replicas_identical,
    consume_all,
    create_topic,
    produce_acks_all,
    start_brokers,
    state,
)
from tests.support import wait_for

SESSION_MS = 6000
STALE_REQUESTS = 20  # acks=all Produce requests queued at the stopped leader
AFTER_RESUME = 20  # and sent to it right after SIGCONT


def _produce_body(topic: str, value: bytes) -> dict:
    return {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 3000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": support.records(1, prefix=value)}]}],
    }


def _answer(w: support.Wire, cid: int) -> int | None:
    """The error code of the Produce response ``cid`` on ``w``; None if the connection closed or
    nothing came within its timeout (not acknowledged either way)."""
    try:
        got, resp = decode_response(ApiKey.PRODUCE, 8, w.recv_frame())
    except (TimeoutError, ConnectionError, OSError):
        return None
    assert got == cid
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def test_old_leader_split_from_zookeeper_acknowledges_nothing_the_new_leader_lacks(broker_factory, zk):
    brokers = start_brokers(broker_factory, zookeeper_session_timeout_ms=str(SESSION_MS))
    by_id = {b.broker_id: b for b in brokers}
    topic = f"split-{uuid.uuid4().hex[:6]}"
    create_topic(zk, brokers, topic, partitions=1, rf=3)
    acked, errors = produce_acks_all(brokers[0].bootstrap, topic, [b"before%d" % i for i in range(10)], partition=0)
    assert not errors and len(acked) == 10
    wait_for(lambda: len(state(zk, topic, 0)["isr"]) == 3, timeout=60, message="full ISR")
    old_id = state(zk, topic, 0)["leader"]
    old = by_id[old_id]
    epoch = state(zk, topic, 0)["leader_epoch"]

    # stale clients: connections to the old leader, opened while it still leads
    stale = [support.Wire(old.port, timeout=20) for _ in range(STALE_REQUESTS)]
    old.proc.send_signal(signal.SIGSTOP)
    resumed = False
    try:
        sent = [(w, w.send(ApiKey.PRODUCE, 8, _produce_body(topic, b"stale%d-" % i))) for i, w in enumerate(stale)]
        t0 = time.monotonic()
        wait_for(
            lambda: state(zk, topic, 0)["leader"] not in (old_id, -1),
            timeout=SESSION_MS / 1000 + 40,
            interval=0.2,
            message="a new leader elected while the old one is stopped",
        )
        elected_s = time.monotonic() - t0
        new_state = state(zk, topic, 0)
        assert new_state["leader_epoch"] > epoch and old_id not in new_state["isr"], new_state
        new = by_id[new_state["leader"]]
        more, errors = produce_acks_all(new.bootstrap, topic, [b"after%d" % i for i in range(20)], partition=0)
        assert not errors and len(more) == 20
        acked += more
        old.proc.send_signal(signal.SIGCONT)
        resumed = True
        late = []
        for i in range(AFTER_RESUME):  # right after SIGCONT, before it has read the new state (or after)
            try:
                w = support.Wire(old.port, timeout=10)
            except OSError:
                continue
            stale.append(w)
            late.append((w, w.send(ApiKey.PRODUCE, 8, _produce_body(topic, b"late%d-" % i))))
        outcomes = [(_answer(w, cid), which) for which, batch in (("stale", sent), ("late", late)) for w, cid in batch]
    finally:
        if not resumed:
            old.proc.send_signal(signal.SIGCONT)
        for w in stale:
            w.close()
    acknowledged_by_old = [which for code, which in outcomes if code == 0]
    refused = sorted({code for code, _ in outcomes if code not in (0, None)})
    unanswered = sum(1 for code, _ in outcomes if code is None)

    # the old leader comes back as a follower and catches up
    wait_for(lambda: old_id in state(zk, topic, 0)["isr"], timeout=90, message="the old leader rejoins the ISR")
    leader = by_id[state(zk, topic, 0)["leader"]]
    got = consume_all(leader.bootstrap, topic, [0], len(acked) + len(acknowledged_by_old), timeout=60)
    values = [v for _, _, v in got]
    want = {v for _, _, v in acked}
    counts = {
        "acknowledged by the new leader": len(acked),
        "requests to the old leader": len(outcomes),
        "acknowledged by the old leader": len(acknowledged_by_old),
        "refused": len(outcomes) - unanswered - len(acknowledged_by_old),
        "unanswered": unanswered,
        "error codes": refused,
        "read": len(values),
        "lost": len(want - set(values)),
        "duplicated": len(values) - len(set(values)),
        "leader elected after (s)": round(elected_s, 1),
    }
    print("old leader split from ZooKeeper:", counts)
    assert counts["lost"] == 0 and counts["duplicated"] == 0, counts
    # nothing the old leader acknowledged is missing from the partition (it acknowledged none here)
    assert not acknowledged_by_old, counts
    assert not any(v.startswith((b"stale", b"late")) for v in values), counts
    assert [o for _, o, _ in got] == list(range(len(got)))

    def identical() -> bool:
        try:
            assert_replicas_identical(brokers, topic, 0)
            return True
        except AssertionError:
            return False

    wait_for(identical, timeout=30, message="the three replicas byte-identical")
