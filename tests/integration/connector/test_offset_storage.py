"""Offset storage: zookeeper, kafka (a real broker's coordinator) and dual commit, including the
seed's migration from ZooKeeper to Kafka."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.connector.offsets import (
    DualOffsetStore,
    KafkaOffsetStore,
    OffsetStore,
    ZooKeeperOffsetStore,
)
from tests.support import wait_for


@pytest.fixture
def cluster(broker):
    from pyklog.connector.client import ClusterClient

    c = ClusterClient(broker.bootstrap)
    c.create_topic("t", 3)
    yield c
    c.close()


def test_zookeeper_store_layout_and_round_trip(zk):
    store = OffsetStore.create("zookeeper", False, zk, None)
    assert isinstance(store, ZooKeeperOffsetStore)
    assert store.fetch("g", [("t", 0), ("t", 1)]) == {}
    store.commit("g", {("t", 0): 42, ("t", 1): 0})
    assert zk.get(paths.consumer_offset("g", "t", 0))[0] == b"42"
    assert store.fetch("g", [("t", 0), ("t", 1), ("t", 2)]) == {("t", 0): 42, ("t", 1): 0}
    store.commit("g", {("t", 0): 50})
    assert store.fetch("g", [("t", 0)]) == {("t", 0): 50}
    assert store.fetch("other", [("t", 0)]) == {}


def test_zookeeper_store_with_connect_string_and_bad_values(zk_chroot, zk):
    with OffsetStore.create("zookeeper", False, zk_chroot) as store:
        store.commit("g", {("t", 3): 7})
        zk.create(paths.consumer_offset("g", "t", 4), b"seven", makepath=True)
        with pytest.raises(
            ZooKeeperError, match=r"/consumers/g/offsets/t/4: expected an offset as decimal text, read b'seven'"
        ):
            store.fetch("g", [("t", 4)])
        with pytest.raises(ValueError, match="offset to commit for t-0 must be an int >= 0.*got -1"):
            store.commit("g", {("t", 0): -1})
        assert store.fetch("g", [("t", 3)]) == {("t", 3): 7}


def test_kafka_store_round_trip(cluster):
    store = OffsetStore.create("kafka", False, None, cluster)
    assert isinstance(store, KafkaOffsetStore)
    assert store.fetch("gk", [("t", 0)]) == {}
    store.commit("gk", {("t", 0): 10, ("t", 2): 3})
    assert store.fetch("gk", [("t", 0), ("t", 1), ("t", 2)]) == {("t", 0): 10, ("t", 2): 3}


def test_migration_zookeeper_to_kafka(zk, cluster):
    group = "migrating"
    tps = [("t", 0), ("t", 1), ("t", 2)]
    # 1. the old consumers: offsets.storage=zookeeper
    old = OffsetStore.create("zookeeper", False, zk, cluster)
    old.commit(group, {("t", 0): 100, ("t", 1): 200})
    # 2. rolling bounce with offsets.storage=kafka, dual.commit.enabled=true: Kafka has nothing yet,
    #    the larger of the two is read, and commits land in both
    dual = OffsetStore.create("kafka", True, zk, cluster)
    assert isinstance(dual, DualOffsetStore) and dual.storage == "kafka"
    assert dual.fetch(group, tps) == {("t", 0): 100, ("t", 1): 200}
    dual.commit(group, {("t", 0): 150, ("t", 2): 5})
    assert old.fetch(group, tps) == {("t", 0): 150, ("t", 1): 200, ("t", 2): 5}
    kafka_only = OffsetStore.create("kafka", False, zk, cluster)
    assert kafka_only.fetch(group, tps) == {("t", 0): 150, ("t", 2): 5}
    # a ZooKeeper value ahead of Kafka's wins (larger), and vice versa
    old.commit(group, {("t", 2): 9})
    kafka_only.commit(group, {("t", 0): 170})
    assert dual.fetch(group, tps) == {("t", 0): 170, ("t", 1): 200, ("t", 2): 9}
    dual.commit(group, dual.fetch(group, tps))  # what a consumer does when it takes the partitions over
    # 3. dual.commit.enabled=false: Kafka alone keeps everything
    assert kafka_only.fetch(group, tps) == {("t", 0): 170, ("t", 1): 200, ("t", 2): 9}
    kafka_only.commit(group, {("t", 1): 201})
    assert kafka_only.fetch(group, tps) == {("t", 0): 170, ("t", 1): 201, ("t", 2): 9}
    assert old.fetch(group, [("t", 1)]) == {("t", 1): 200}  # ZooKeeper no longer updated


def test_broker_offset_commit_v0_and_zookeeper_store_share_one_node(broker, zk):
    """OffsetCommit/OffsetFetch v0 (the broker's ZooKeeper offset store, Kafka 0.8.2) and the connector's
    ZooKeeperOffsetStore read and write the same node in the same form; an unreadable node is no offset
    for the broker (logged) and an error naming the node for the store."""
    from pyklog.broker.protocol import ApiKey
    from tests.support import Wire

    w = Wire(broker.port)
    try:

        def commit_v0(offset):
            resp = w.request(
                ApiKey.OFFSET_COMMIT,
                0,
                {
                    "group_id": "zg",
                    "topics": [
                        {
                            "name": "t",
                            "partitions": [
                                {"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}
                            ],
                        }
                    ],
                },
            )
            return resp["topics"][0]["partitions"][0]["error_code"]

        def fetch_v0():
            resp = w.request(
                ApiKey.OFFSET_FETCH, 0, {"group_id": "zg", "topics": [{"name": "t", "partition_indexes": [0]}]}
            )
            p = resp["topics"][0]["partitions"][0]
            return p["committed_offset"], p["error_code"]

        store = ZooKeeperOffsetStore(zk)
        assert commit_v0(17) == 0
        assert zk.get(paths.consumer_offset("zg", "t", 0))[0] == b"17"
        assert store.fetch("zg", [("t", 0)]) == {("t", 0): 17}
        store.commit("zg", {("t", 0): 23})
        assert fetch_v0() == (23, 0)
        zk.set(paths.consumer_offset("zg", "t", 0), b"twenty")
        assert fetch_v0() == (-1, 0)
        with pytest.raises(ZooKeeperError, match=r"/consumers/zg/offsets/t/0: expected an offset as decimal text"):
            store.fetch("zg", [("t", 0)])
        assert commit_v0(30) == 0 and store.fetch("zg", [("t", 0)]) == {("t", 0): 30}
    finally:
        w.close()


def test_kafka_store_timeout_bounds_the_whole_commit_when_the_coordinator_is_gone(broker_factory):
    """The store's ``timeout_s`` is the bound of the whole commit: one retry loop, not the store's
    loop around the client's loop around a FindCoordinator loop (that took request.timeout.ms, 30 s,
    per coordinator lookup).  The coordinator's broker is stopped; its offsets partition (one
    replica) has no leader, so the surviving broker answers COORDINATOR_NOT_AVAILABLE."""
    import time

    from pyklog.broker.errors import CoordinatorNotAvailableError
    from pyklog.connector.client import ClusterClient

    brokers = {i: broker_factory(i, offsets_topic_num_partitions=1, offsets_topic_replication_factor=1) for i in (0, 1)}
    with ClusterClient(",".join(b.bootstrap for b in brokers.values())) as both:
        wait_for(lambda: len(both.metadata(None, refresh=True).brokers) == 2, message="both brokers registered")
        both.create_topic("t", 2)
        KafkaOffsetStore(both, timeout_s=30).commit("g", {("t", 0): 1})  # creates __consumer_offsets
        coordinator = both.find_coordinator("g", refresh=True)
    brokers[coordinator].stop()
    survivor = brokers[1 - coordinator]
    with ClusterClient(survivor.bootstrap) as client:
        wait_for(
            lambda: list(client.metadata(None, refresh=True).brokers) == [survivor.broker_id],
            message="the coordinator's broker is gone from the metadata",
        )
        store = KafkaOffsetStore(client, timeout_s=2)
        started = time.monotonic()
        with pytest.raises(CoordinatorNotAvailableError, match="FindCoordinator for group 'g'"):
            store.commit("g", {("t", 0): 2})
        elapsed = time.monotonic() - started
        assert elapsed < 8, f"commit with timeout_s=2 gave up after {elapsed:.1f}s (a nested retry?)"
        started = time.monotonic()
        with pytest.raises(CoordinatorNotAvailableError, match="FindCoordinator for group 'g'"):
            store.fetch("g", [("t", 0)])
        assert time.monotonic() - started < 8
