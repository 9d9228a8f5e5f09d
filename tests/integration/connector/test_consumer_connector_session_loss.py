"""ConsumerConnector after its ZooKeeper session expired: the member registers again and gets its
partitions back; they continue at the consumer's own position, never at the group's older commit
(the commit of what it read since could not be written before the session was lost)."""

from __future__ import annotations

from collections import Counter

from pyklog.connector.client import ClusterClient
from pyklog.connector.high_level import ConsumerConnector
from pyklog.connector.offsets import OffsetStore
from pyklog.connector.producer import Producer
from tests.support import expire_session, wait_for

TOPIC = "relost"


def _produce(bootstrap, start, n):
    with Producer(bootstrap_servers=bootstrap, linger_ms=2) as p:
        for part in range(2):
            for i in range(start, start + n):
                p.send(TOPIC, f"{part}-{i}".encode(), partition=part)
        p.flush()


def test_position_is_kept_over_an_older_group_commit_after_the_session_expired(zk_chroot, broker):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic(TOPIC, 2)
    _produce(broker.bootstrap, 0, 5)
    conn = ConsumerConnector(
        {
            "zookeeper.connect": zk_chroot,
            "group.id": "relost-g",
            "auto.offset.reset": "smallest",
            "auto.commit.enable": False,
            "consumer.timeout.ms": 200,
            "zookeeper.session.timeout.ms": 4000,
        }
    )
    got: list = []
    tps = [(TOPIC, 0), (TOPIC, 1)]
    try:
        [stream] = conn.create_message_streams({TOPIC: 1})[TOPIC]
        wait_for(lambda: got.extend((r.partition, r.offset) for r in stream) or len(got) >= 10, 30)
        assert conn.commit_offsets() == dict.fromkeys(tps, 5)
        _produce(broker.bootstrap, 5, 5)
        wait_for(lambda: got.extend((r.partition, r.offset) for r in stream) or len(got) >= 20, 30)
        # read up to 10, committed 5: the session expires before the next commit
        epoch = conn.member.epoch
        expire_session(zk_chroot, conn.member.zk)
        wait_for(lambda: conn.member.epoch > epoch and conn.member.is_stable(), 30, message="re-registered")
        assert conn.assignment() == set(tps)
        _produce(broker.bootstrap, 10, 5)
        wait_for(
            lambda: got.extend((r.partition, r.offset) for r in stream) or len(set(got)) >= 30,
            30,
            message="the records written after the re-registration",
        )
        got.extend((r.partition, r.offset) for r in stream)  # anything read twice would come now
        assert conn.commit_offsets() == dict.fromkeys(tps, 15)
    finally:
        conn.shutdown()
    twice = sum(n - 1 for n in Counter(got).values() if n > 1)
    assert twice == 0, sorted(k for k, n in Counter(got).items() if n > 1)
    assert sorted(set(got)) == [(p, o) for p in range(2) for o in range(15)]
    store = OffsetStore.create("zookeeper", False, zk_chroot)
    try:
        assert store.fetch("relost-g", tps) == dict.fromkeys(tps, 15)
    finally:
        store.close()
