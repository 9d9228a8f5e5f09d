"""OffsetForLeaderEpoch (key 23) against a real broker process: the answers of v0-4 from the log's
leader epoch cache, KIP-320 fencing (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH), and stock
consumers (confluent-kafka / librdkafka, kafka-python) validating their positions after a leader
epoch change: a consumer whose position lies beyond the new end of its epoch (the log was
truncated while it was away) resumes at the divergence point and reads every record of the new
epoch, none skipped.

The leader epoch change is made as the controller will make it: the broker stops, the partition
state znode gets a higher ``leader_epoch``, and the log is changed offline the way a returning
follower's log is (truncated to where the old epoch ended on the new leader, then the new
leader's records appended with their offsets and epochs by ``append_as_follower``)."""

from __future__ import annotations

import json
import os
import re
import time
import uuid

from pyklog.broker.log import Log
from pyklog.broker.log.checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from pyklog.broker.log.leader_epoch import LEADER_EPOCH_CHECKPOINT
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from pyklog.broker.zk import paths
from tests.support import (
    Wire,
    create_topic,
    kazoo_client,
    produce,
    records,
    values,
    wait_for,
)

OFLE = ApiKey.OFFSET_FOR_LEADER_EPOCH


def _topic() -> str:
    return f"ofle-{uuid.uuid4().hex[:8]}"


def ask(w: Wire, version: int, topic: str, epoch: int, current: int = -1, partition: int = 0) -> dict:
    body = {
        "replica_id": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "current_leader_epoch": current, "leader_epoch": epoch}],
            }
        ],
    }
    resp = w.request(OFLE, version, body)
    (t,) = resp["topics"]
    assert t["topic"] == topic
    (p,) = t["partitions"]
    return p


def set_leader_epoch(zk_connect: str, topic: str, epoch: int, partition: int = 0) -> None:
    """Bump the partition state znode's leader_epoch (what the controller does on a leader change)."""
    kc = kazoo_client(zk_connect)
    try:
        path = paths.partition_state(topic, partition)
        data, stat = kc.get(path)
        st = json.loads(data)
        st["leader_epoch"] = epoch
        kc.set(path, json.dumps(st).encode(), version=stat.version)
    finally:
        kc.stop()
        kc.close()


def became_follower_offline(b, topic: str, truncate_at: int, new_epoch: int, new_values: list[bytes]) -> None:
    """With the broker stopped: the partition's log becomes what a returning follower's log is after
    truncation by epoch and catching up with the new leader: cut at ``truncate_at`` and then the new
    leader's batch (epoch ``new_epoch``, offsets from ``truncate_at``) appended as a follower."""
    d = os.path.join(b.props["log.dirs"], f"{topic}-0")
    lg = Log(d, clean_shutdown=True)
    try:
        lg.truncate_to(truncate_at)
        assert lg.log_end_offset == truncate_at
        batch = build_batch(
            [(b"k", v, None, ()) for v in new_values], base_offset=truncate_at, partition_leader_epoch=new_epoch
        )
        lg.append_as_follower(batch)
    finally:
        lg.close()


def ofle_requests(b) -> int:
    return len(re.findall(r"request api_key=23 ", b.output()))


def test_answers_every_version_and_fences(broker_factory, zk_chroot):
    b = broker_factory(0)
    topic = _topic()
    with Wire(b.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
        wait_for(lambda: produce(w, topic, records(5))["error_code"] == 0, message="first produce")
        for v in range(5):  # epoch 0 is the current one: it ends at the log end offset
            p = ask(w, v, topic, 0)
            assert (p["error_code"], p["end_offset"]) == (0, 5), (v, p)
            assert p.get("leader_epoch", -1) == (0 if v >= 1 else -1)  # v0 has no LeaderEpoch field
    b.stop()
    set_leader_epoch(zk_chroot, topic, 3)
    b.start()
    with Wire(b.port) as w:
        # before anything is written in epoch 3: answered as if the cache ended with (3, LEO)
        got = wait_for(
            lambda: [
                (p["error_code"], p["leader_epoch"], p["end_offset"])
                for p in (ask(w, 4, topic, e, current=3) for e in (0, 2, 3, 4))
            ],
            message="answers",
        )
        assert got == [(0, 0, 5), (0, 0, 5), (0, 3, 5), (0, -1, -1)]
        wait_for(lambda: produce(w, topic, records(3))["error_code"] == 0, message="produce in epoch 3")
        assert produce(w, topic, records(2))["base_offset"] == 8
        v = 4
        assert (ask(w, v, topic, 0)["leader_epoch"], ask(w, v, topic, 0)["end_offset"]) == (0, 5)
        p = ask(w, v, topic, 2)  # never led: the largest epoch below it and the start of the next
        assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, 0, 5)
        p = ask(w, v, topic, 3, current=3)
        assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, 3, 10)
        p = ask(w, v, topic, 7)  # above the latest epoch: undefined
        assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, -1, -1)
        p = ask(w, v, topic, -1)
        assert (p["error_code"], p["leader_epoch"], p["end_offset"]) == (0, -1, -1)
        for v in (2, 3, 4):
            assert ask(w, v, topic, 0, current=2)["error_code"] == 74  # FENCED_LEADER_EPOCH
            p = ask(w, v, topic, 0, current=4)
            assert (p["error_code"], p["end_offset"]) == (75, -1)  # UNKNOWN_LEADER_EPOCH
        assert ask(w, 1, topic, 0)["error_code"] == 0  # v0-1 carry no current epoch: not fenced
        assert ask(w, 4, topic, 0, partition=9)["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        assert ask(w, 4, "no-such-topic-x", 0)["error_code"] == 3
        # several partitions and topics in one request, answered in order
        resp = w.request(
            OFLE,
            3,
            {
                "replica_id": 1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {"partition": 0, "current_leader_epoch": 3, "leader_epoch": e} for e in (3, 0, 1)
                        ],
                    }
                ],
            },
        )
        got = [
            (p["partition"], p["error_code"], p["leader_epoch"], p["end_offset"])
            for p in resp["topics"][0]["partitions"]
        ]
        assert got == [(0, 0, 3, 10), (0, 0, 0, 5), (0, 0, 0, 5)]
    # a clean stop checkpoints the high watermark (not replicated: the log end offset)
    b.stop()
    data_dir = b.props["log.dirs"]
    hw = OffsetCheckpointFile(os.path.join(data_dir, REPLICATION_OFFSET_CHECKPOINT)).read()
    assert hw[(topic, 0)] == 10
    # SIGKILL with the epoch checkpoint lost: the restarted broker rebuilds it from the batches
    b.start()
    with Wire(b.port) as w:
        wait_for(lambda: ask(w, 4, topic, 3)["end_offset"] == 10, message="answers after restart")
    b.kill()
    os.unlink(os.path.join(data_dir, f"{topic}-0", LEADER_EPOCH_CHECKPOINT))
    b.start()
    with Wire(b.port) as w:
        got = wait_for(
            lambda: [
                (p["error_code"], p["leader_epoch"], p["end_offset"]) for p in (ask(w, 4, topic, e) for e in (0, 2, 3))
            ],
            message="answers",
        )
        assert got == [(0, 0, 5), (0, 0, 5), (0, 3, 10)]
    assert re.search(r"ERROR .*leader-epoch-checkpoint missing; rebuilt 2 entries", b.output())
    assert "Traceback" not in b.output()


def _consume(poll, want: int, timeout: float = 60.0) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < want and time.monotonic() < deadline:
        out.extend(poll())
    return out


def test_stock_consumers_reset_to_the_divergence_point_after_truncation(broker_factory, zk_chroot):
    """confluent-kafka (librdkafka 2.x) reads offsets 0-19 (epoch 0) and commits 20.  Meanwhile "a
    new leader" had only 0-14 of epoch 0 and wrote 15-19 in epoch 3; the returning broker's log is
    truncated and caught up accordingly, and the state znode says epoch 3.

    The consumer, running through the restart, sees epoch 3 in Metadata, sends OffsetForLeaderEpoch
    (epoch 0, current 3), learns epoch 0 ends at 15 < its position 20 and seeks back to 15: it reads
    the five records of epoch 3 at 15-19 and the later ones, in order, none skipped, none twice.
    Without OffsetForLeaderEpoch it fetches from 20 and loses 15-19 (checked by disabling the
    handler).

    Not covered, as the clients behave today: librdkafka 2.16 and kafka-python 3.0.12 do not validate
    a committed offset's leader epoch when a new consumer starts from it (both start at 20: seen);
    kafka-python validates a running consumer only if its metadata shows the new epoch before its
    next fetch, which Kafka guarantees by fencing consumer Fetches by current_leader_epoch (the
    Fetch handler's business): without that fence it fetched from 20 in 2 of 5 runs."""
    from confluent_kafka import Consumer, TopicPartition

    b = broker_factory(0, log_level="DEBUG")
    topic = _topic()
    with Wire(b.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
        wait_for(lambda: produce(w, topic, records(5, prefix=b"old"))["error_code"] == 0, message="produce")
        for _ in range(3):  # batches of 5: the truncation point 15 is a batch boundary
            assert produce(w, topic, records(5, prefix=b"old"))["error_code"] == 0

    group = f"g-{uuid.uuid4().hex[:6]}"

    def consumer():
        c = Consumer(
            {
                "bootstrap.servers": b.bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "topic.metadata.refresh.interval.ms": 500,
                "reconnect.backoff.max.ms": 500,
            }
        )
        return c

    def poll(c):
        return lambda: [(m.offset(), m.value()) for m in c.consume(50, 0.2) if m.error() is None]

    ck = consumer()
    ck.assign([TopicPartition(topic, 0, 0)])
    try:
        first = _consume(poll(ck), 20)
        assert [o for o, _ in first] == list(range(20))
        ck.commit(asynchronous=False)
        (c,) = ck.committed([TopicPartition(topic, 0)], 10)
        assert (c.offset, c.leader_epoch) == (20, 0)

        b.stop()
        new = [b"new%d" % i for i in range(5)]
        became_follower_offline(b, topic, 15, 3, new)
        set_leader_epoch(zk_chroot, topic, 3)
        before = ofle_requests(b)
        b.start()
        with Wire(b.port) as w:
            wait_for(lambda: produce(w, topic, records(5, prefix=b"later"))["error_code"] == 0, message="produce")

        want = [(15 + i, v) for i, v in enumerate(new)] + [(20 + i, b"later%d" % i) for i in range(5)]
        got = _consume(poll(ck), 10)
        assert got == want, got
        assert ofle_requests(b) - before >= 1  # validated through the new API
    finally:
        ck.close()


def test_consumer_fetch_is_fenced_by_its_current_leader_epoch(broker_factory, zk_chroot):
    """KIP-320 as Kafka's ``Partition.checkCurrentLeaderEpoch``: a consumer's Fetch (replica_id -1,
    v9+) naming an older leader epoch gets FENCED_LEADER_EPOCH and no records (it must refresh its
    metadata and validate its position before reading from a leader that may have truncated), a
    newer one UNKNOWN_LEADER_EPOCH, the current one or -1 its records."""
    b = broker_factory(0)
    topic = _topic()

    def consumer_fetch(w, current):
        resp = w.request(
            ApiKey.FETCH,
            12,
            {
                "replica_id": -1,
                "max_wait_ms": 0,
                "min_bytes": 0,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic": topic,
                        "partitions": [
                            {
                                "partition": 0,
                                "current_leader_epoch": current,
                                "fetch_offset": 0,
                                "partition_max_bytes": 1 << 20,
                            }
                        ],
                    }
                ],
            },
        )
        p = resp["responses"][0]["partitions"][0]
        return p["error_code"], len(values(p["records"]))

    with Wire(b.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
        wait_for(lambda: produce(w, topic, records(5))["error_code"] == 0, message="first produce")
    b.stop()
    set_leader_epoch(zk_chroot, topic, 3)
    b.start()
    with Wire(b.port) as w:
        wait_for(lambda: consumer_fetch(w, 3) == (0, 5), message="fetch at the current epoch")
        assert consumer_fetch(w, -1) == (0, 5)
        assert consumer_fetch(w, 2) == (74, 0)  # FENCED_LEADER_EPOCH
        assert consumer_fetch(w, 4) == (75, 0)  # UNKNOWN_LEADER_EPOCH
