"""Fetch sessions (KIP-227) on real brokers: followers replicate in sessions and stay in the ISR while
idle (their quiet partitions are neither named nor read), acks=all to many partitions is acknowledged,
and a client's incremental fetch answers only the partitions with something new, long-polls until
an append, and gets FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH for a bad session."""

from __future__ import annotations

import threading
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.protocol.api import encode_request
from tests.integration.replication_support import (
    LAG_MS,
    create_topic,
    log_end_offset,
    produce_acks_all,
    start_brokers,
    state,
)
from tests.support import wait_for

PARTITIONS = 24


def _fetch(w, session_id, epoch, parts, max_wait_ms=0, forgotten=()):
    """Fetch v12 as a consumer; returns (response, size of the answer in bytes)."""
    body = {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic": t,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": off,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 65536,
                    }
                    for p, off in ps
                ],
            }
            for t, ps in parts.items()
        ],
        "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten],
        "rack_id": "",
    }
    from pyklog.broker.protocol import decode_response

    w.cid += 1
    w.sock.sendall(encode_request(ApiKey.FETCH, 12, w.cid, "pyklog-test", body))
    frame = w.recv_frame()
    cid, resp = decode_response(ApiKey.FETCH, 12, frame)
    assert cid == w.cid
    return resp, len(frame)


def _answered(resp):
    return sorted((t["topic"], p["partition_index"]) for t in resp["responses"] for p in t["partitions"])


def test_followers_and_clients_fetch_in_sessions(broker_factory, zk):
    brokers = start_brokers(broker_factory, n=2)
    topic = f"sessions-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=PARTITIONS, rf=2)
    wait_for(lambda: all(len(state(zk, topic, p)["isr"]) == 2 for p in assignment), message="full ISR")

    # acks=all, one record to every partition: acknowledged, on both replicas
    acked, errors = produce_acks_all(brokers[0].bootstrap, topic, [b"r%d" % i for i in range(4 * PARTITIONS)])
    assert not errors and len(acked) == 4 * PARTITIONS
    per_partition = {p: sum(1 for a in acked if a[0] == p) for p in assignment}
    wait_for(
        lambda: all(log_end_offset(b, topic, p) == n for b in brokers for p, n in per_partition.items()),
        message="both replicas at the leader's log end offset",
    )
    # every follower fetched in a session (the leader opened one per follower fetcher)
    for b in brokers:
        other = 1 - b.broker_id
        assert "fetch session" in b.output() and f"opened for replica {other}" in b.output(), b.output()[-3000:]

    # idle for more than the replica lag time: the followers' incremental fetches name and read no
    # partition, yet every follower stays in the ISR
    time.sleep(LAG_MS / 1000 * 1.5)
    assert all(len(state(zk, topic, p)["isr"]) == 2 for p in assignment)

    # a client's session with the partitions broker 0 leads
    led = sorted(p for p in assignment if state(zk, topic, p)["leader"] == 0)
    assert len(led) >= 2
    with support.Wire(brokers[0].port) as w:
        full, full_size = _fetch(w, 0, 0, {topic: [(p, 0) for p in led]})
        sid = full["session_id"]
        assert full["error_code"] == 0 and sid != 0
        assert _answered(full) == [(topic, p) for p in led]  # a full fetch answers every partition
        ends = {p["partition_index"]: p["high_watermark"] for t in full["responses"] for p in t["partitions"]}
        # the client moves to the end: one incremental fetch names every partition at its new offset
        moved, _ = _fetch(w, sid, 1, {topic: [(p, ends[p]) for p in led]})
        assert moved["error_code"] == 0 and moved["session_id"] == sid
        # idle: nothing answered, a few bytes against the full answer
        idle, idle_size = _fetch(w, sid, 2, {})
        assert idle["error_code"] == 0 and _answered(idle) == [] and idle_size < 40 < full_size
        # an append to one partition: only it is answered, with its record
        target = led[1]
        support_resp = produce_one(brokers[0].port, topic, target)
        assert support_resp["error_code"] == 0
        one, _ = _fetch(w, sid, 3, {}, max_wait_ms=5000)  # until the follower moved the high watermark
        assert _answered(one) == [(topic, target)]
        assert one["responses"][0]["partitions"][0]["high_watermark"] == ends[target] + 1
        # a long poll of the session wakes on an append, not at its max wait
        later = threading.Timer(0.5, produce_one, (brokers[0].port, topic, led[0]))
        t0 = time.monotonic()
        later.start()
        polled, _ = _fetch(w, sid, 4, {topic: [(target, ends[target] + 1)]}, max_wait_ms=20000)
        later.join()
        assert time.monotonic() - t0 < 10 and _answered(polled) == [(topic, led[0])]
        # forgotten partitions are no longer answered
        _fetch(w, sid, 5, {}, forgotten=[(topic, [led[0]])])
        produce_one(brokers[0].port, topic, led[0])
        after_forget, _ = _fetch(w, sid, 6, {}, max_wait_ms=300)
        assert _answered(after_forget) == []
        # a wrong epoch, an unknown session: the whole answer's error, no partitions
        bad, _ = _fetch(w, sid, 99, {})
        assert bad["error_code"] == 71 and bad["responses"] == [] and bad["session_id"] == 0
        unknown, _ = _fetch(w, sid + 1, 1, {})
        assert unknown["error_code"] == 70 and unknown["responses"] == []
        # closing the session (epoch -1): answered in full, without a session
        closed, _ = _fetch(w, sid, -1, {topic: [(led[0], 0)]})
        assert closed["session_id"] == 0 and _answered(closed) == [(topic, led[0])]
        gone, _ = _fetch(w, sid, 7, {})
        assert gone["error_code"] == 70


def produce_one(port, topic, p) -> dict:
    with support.Wire(port) as w:
        resp = w.request(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": p, "records": support.records(1)}]}],
            },
        )
    return resp["responses"][0]["partition_responses"][0]
