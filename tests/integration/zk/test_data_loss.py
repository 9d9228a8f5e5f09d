"""A ZooKeeper that loses its data never costs a record: meta.properties, stray logs, deletion records.

Real ZooKeeper processes (a private one per test where it is restarted), real broker processes,
confluent-kafka with acks=all.  Each test counts what was acknowledged, lost and duplicated.
"""

from __future__ import annotations

import glob
import os
import time

from tests.support import kazoo_client, wait_for

N = 3000


def _produce(
    bootstrap: str, topic: str, n: int, partitions: int = 1, timestamp_ms: int = 0, first: int = 0, **config
) -> int:
    """Produce ``n`` distinct values with acks=all; return how many were acknowledged."""
    from confluent_kafka import Producer

    acked = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "enable.idempotence": False,
            "topic.metadata.refresh.interval.ms": 1000,
            **config,
        }
    )

    errors = []

    def cb(err, msg):
        if err is None:
            acked.append(msg.value())
        else:
            errors.append(err)

    for i in range(first, first + n):
        p.produce(topic, value=b"v%06d" % i, partition=i % partitions, on_delivery=cb, timestamp=timestamp_ms)
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    if errors:
        print(f"{len(errors)} produce error(s), first: {errors[0]}")
    return len(acked)


def _consume_all(bootstrap: str, topic: str, partitions: int, expect: int, timeout: float = 30.0) -> list[bytes]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{time.time_ns()}",
            "enable.auto.commit": False,
            "allow.auto.create.topics": False,
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expect and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                out.append(m.value())
    finally:
        c.close()
    return out


def _create_topic(bootstrap: str, topic: str, partitions: int = 1, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=config or {})])[topic].result(30)


def _counts(acked: int, values: list[bytes], n: int) -> dict:
    want = {b"v%06d" % i for i in range(n)}
    got = set(values)
    return {"acknowledged": acked, "lost": len(want - got), "duplicated": len(values) - len(got)}


def _check_all_read(bootstrap: str, topic: str, partitions: int, acked: int, what: str) -> None:
    """Read the topic back and require every one of the N acknowledged values, once."""
    counts = _counts(acked, _consume_all(bootstrap, topic, partitions, N), N)
    print(f"{what}:", counts)
    assert counts == {"acknowledged": N, "lost": 0, "duplicated": 0}


def _stop_in_order(*servers) -> None:
    """Stop the broker before its private ZooKeeper (a broker whose ZooKeeper is gone takes 20 s
    to stop); None entries are skipped."""
    for s in servers:
        if s is not None:
            s.stop()


def test_empty_zookeeper_refused_then_restored_loses_nothing(broker_factory, tmp_path):
    """(a) ZooKeeper restarted EMPTY: the broker refuses to start (cluster id), deletes nothing; after
    the operator restores ZooKeeper's data every acknowledged record is readable.
    Old code: the broker registered a new cluster and deleted every log not in ZooKeeper (lost = N)."""
    from pyklog.broker.zk.server import ZooKeeperServer, free_port

    port = free_port()
    original = ZooKeeperServer(data_dir=str(tmp_path / "zk-original"), port=port)
    original.start()
    empty = None
    b = None
    try:
        b = broker_factory(0, zk_connect=original.connect_string)
        _create_topic(b.bootstrap, "keep", 2)
        acked = _produce(b.bootstrap, "keep", N, partitions=2)
        assert b.stop() == 0
        original.stop()

        empty = ZooKeeperServer(data_dir=str(tmp_path / "zk-empty"), port=port)
        empty.start()
        b.start(expect_ready=False)
        assert b.wait_exit(60) == 1
        out = b.output()
        assert "does not match ZooKeeper" in out and "cluster ID" in out, out[-3000:]
        assert "deleted log" not in out
        data = os.path.join(b.log_dir, "data")
        assert sorted(d for d in os.listdir(data) if d.startswith("keep-")) == ["keep-0", "keep-1"]
        kc = kazoo_client(empty.connect_string)
        try:
            assert kc.exists("/cluster/id") is None, "the refusing broker created a cluster id"
            assert kc.exists("/brokers") is None, "the refusing broker wrote into the empty ZooKeeper"
        finally:
            kc.stop()
            kc.close()
        b.stop()
        empty.stop()
        empty = None

        original.start()  # the operator restores ZooKeeper's data
        b.start()
        _check_all_read(b.bootstrap, "keep", 2, acked, "empty ZooKeeper, then restored")
    finally:
        _stop_in_order(b, empty, original)


def test_broker_id_mismatch_refused(broker_factory):
    """meta.properties keeps broker.id: the same log dir under another broker.id is refused."""
    b = broker_factory(0)
    assert b.stop() == 0
    b.props["broker.id"] = "7"
    b.start(expect_ready=False)
    assert b.wait_exit(60) == 1
    assert "does not match stored broker.id 0" in b.output()


def _snapshot(kc, path: str) -> list[tuple[str, bytes]]:
    out = [(path, kc.get(path)[0])]
    for c in sorted(kc.get_children(path)):
        out += _snapshot(kc, f"{path}/{c}")
    return out


def test_topic_removed_behind_the_brokers_back_is_kept(broker_factory, zk):
    """(b) A topic's znodes deleted directly: its log stays on disk, reported at ERROR once, not
    served; restoring the znodes brings every record back.  Old code: the log was deleted (lost = N)."""
    b = broker_factory(0)
    _create_topic(b.bootstrap, "gone", 1)
    acked = _produce(b.bootstrap, "gone", N)
    saved = _snapshot(zk, "/brokers/topics/gone") + _snapshot(zk, "/config/topics/gone")
    zk.delete("/brokers/topics/gone", recursive=True)
    zk.delete("/config/topics/gone", recursive=True)
    wait_for(
        lambda: "keeping 1 log(s) whose topic is not in the ZooKeeper registry" in b.output(),
        30,
        message="ERROR about the stray log",
    )
    time.sleep(11)  # the 10 s periodic sync runs once more: still kept, not reported again
    out = b.output()
    assert out.count("whose topic is not in the ZooKeeper registry") == 1
    assert "deleted log of gone" not in out
    assert os.path.isdir(os.path.join(b.log_dir, "data", "gone-0"))
    for path, data in saved:
        zk.create(path, data)
    values = _consume_all(b.bootstrap, "gone", 1, N)
    counts = _counts(acked, values, N)
    print("znodes removed and restored:", counts)
    assert counts == {"acknowledged": N, "lost": 0, "duplicated": 0}


def test_stray_log_is_not_cleaned_under_default_retention(broker_factory, zk):
    """A topic kept forever (retention.ms=-1) whose znodes vanish, then a broker restart: the log is
    loaded with the broker's default retention (7 days) since its config is gone, but its retention
    is paused while it is a stray, so 30-day-old records survive; restored, all are readable.
    Old code: the log was deleted at the first sync (lost = N)."""
    b = broker_factory(0, log_retention_check_interval_ms=200)
    _create_topic(b.bootstrap, "forever", 1, {"retention.ms": "-1", "segment.bytes": "20000"})
    month_ago = int(time.time() * 1000) - 30 * 24 * 3600 * 1000
    acked = _produce(b.bootstrap, "forever", N, timestamp_ms=month_ago, **{"batch.size": 8000})
    assert acked == N
    seg_dir = os.path.join(b.log_dir, "data", "forever-0")
    segments = [f for f in os.listdir(seg_dir) if f.endswith(".log")]
    assert len(segments) > 2
    # restored config first, as Kafka's createTopic writes it: a topic that reappeared before its
    # config would be loaded with the default 7-day retention and lose its month-old segments
    saved = _snapshot(zk, "/config/topics/forever") + _snapshot(zk, "/brokers/topics/forever")
    zk.delete("/brokers/topics/forever", recursive=True)
    zk.delete("/config/topics/forever", recursive=True)
    wait_for(lambda: "whose topic is not in the ZooKeeper registry" in b.output(), 30, message="stray ERROR")
    assert b.stop() == 0
    b.start()
    time.sleep(2)  # ten retention checks at the default 7 days
    assert sorted(f for f in os.listdir(seg_dir) if f.endswith(".log")) == sorted(segments)
    for path, data in saved:
        zk.create(path, data)
    values = _consume_all(b.bootstrap, "forever", 1, N)
    counts = _counts(acked, values, N)
    print("stray log through a restart under default retention:", counts)
    assert counts == {"acknowledged": N, "lost": 0, "duplicated": 0}


def test_explicit_delete_still_deletes_on_every_broker(broker_factory, zk):
    """(c) DeleteTopics deletes the logs on the broker that handled it and, through the deletion
    record, on the other broker; re-creating the name starts empty."""
    b0 = broker_factory(0)
    b1 = broker_factory(1)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": b0.bootstrap})
    admin.create_topics([NewTopic("bye", 2, 1)])["bye"].result(30)  # one partition on each broker
    _produce(b0.bootstrap, "bye", 200, partitions=2)
    (d0,) = glob.glob(os.path.join(b0.log_dir, "data", "bye-*"))
    (d1,) = glob.glob(os.path.join(b1.log_dir, "data", "bye-*"))
    admin.delete_topics(["bye"])["bye"].result(30)
    wait_for(lambda: not os.path.isdir(d0) and not os.path.isdir(d1), 30, message="logs deleted")
    # the controller completes the deletion once both brokers answered
    wait_for(lambda: zk.exists("/admin/deleted_topics/bye") is not None, 30, message="the deletion recorded")
    assert "not in the ZooKeeper registry" not in b1.output()
    admin.create_topics([NewTopic("bye", 2, 1)])["bye"].result(30)
    assert zk.exists("/admin/deleted_topics/bye") is None
    assert _consume_all(b0.bootstrap, "bye", 2, 1, timeout=3) == []


def test_zookeeper_restarted_empty_under_a_running_broker(broker_factory, tmp_path):
    """(e) ZooKeeper restarted EMPTY under a running broker: it refuses the broker's session for
    ever (zxid); the broker logs one ERROR saying so and exits 1 within a bound, keeping its logs;
    after ZooKeeper's data is restored every acknowledged record is readable.
    Old code: the broker never exits (kazoo retries silently for ever; wait_exit times out)."""
    from pyklog.broker.zk.server import ZooKeeperServer, free_port

    port = free_port()
    original = ZooKeeperServer(data_dir=str(tmp_path / "zk-original"), port=port)
    original.start()
    empty = None
    b = None
    try:
        b = broker_factory(0, zk_connect=original.connect_string)
        _create_topic(b.bootstrap, "live", 1)
        acked = _produce(b.bootstrap, "live", N)
        mark = len(b.output().splitlines())
        original.stop()
        empty = ZooKeeperServer(data_dir=str(tmp_path / "zk-empty"), port=port)
        empty.start()
        started = time.monotonic()
        assert b.wait_exit(45) == 1
        took = time.monotonic() - started
        lines = b.output().splitlines()[mark:]
        errors = [ln for ln in lines if " ERROR " in ln and "lost its data" in ln]
        print(f"exited after {took:.1f}s with {len(lines)} log lines, {len(errors)} ERROR line(s)")
        assert errors, "\n".join(lines[-50:])
        assert len(lines) < 100, "the broker spun in its logs:\n" + "\n".join(lines[-50:])
        assert not any("deleted log" in ln for ln in lines)
        b.stop()
        empty.stop()
        empty = None

        original.start()
        b.start()
        _check_all_read(b.bootstrap, "live", 1, acked, "ZooKeeper emptied under a running broker, then restored")
    finally:
        _stop_in_order(b, empty, original)


def test_zookeeper_away_then_back_with_its_data(broker_factory, tmp_path):
    """ZooKeeper stopped for 12 s and restarted WITH its data under a running broker: no false
    alarm (the broker keeps running and serving), the outage is logged at a bounded rate, and every
    record acknowledged before and after is readable."""
    from pyklog.broker.zk.server import ZooKeeperServer, free_port

    port = free_port()
    original = ZooKeeperServer(data_dir=str(tmp_path / "zk"), port=port)
    original.start()
    b = None
    try:
        b = broker_factory(0, zk_connect=original.connect_string)
        _create_topic(b.bootstrap, "steady", 1)
        acked = _produce(b.bootstrap, "steady", N // 2)
        mark = len(b.output().splitlines())
        original.stop()
        time.sleep(12)
        original.start()
        wait_for(
            lambda: "registered broker 0" in "\n".join(b.output().splitlines()[mark:]) or "back after" in b.output(),
            30,
            message="reconnected",
        )
        assert b.proc.poll() is None, b.output()[-3000:]
        acked += _produce(b.bootstrap, "steady", N - N // 2, first=N // 2)
        lines = b.output().splitlines()[mark:]
        ours = [ln for ln in lines if "no ZooKeeper connection" in ln]
        print(f"outage: {len(lines)} log lines, {len(ours)} watchdog warning(s)")
        assert not any("lost its data" in ln for ln in lines)
        assert 1 <= len(ours) <= 3 and len(lines) < 60, "\n".join(lines)
        _check_all_read(b.bootstrap, "steady", 1, acked, "ZooKeeper away 12 s, back with its data")
    finally:
        _stop_in_order(b, original)
