"""BrokerConnection and ClusterClient against real brokers (real ZooKeeper, `python -m pyklog.broker`)."""

from __future__ import annotations

import time

import pytest

from pyklog.broker.errors import (
    NetworkError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol import SUPPORTED, ApiKey
from pyklog.connector.client import CLIENT_MAX, BrokerConnection, ClusterClient
from pyklog.connector.producer import Producer
from tests.support import wait_for


def test_connection_negotiates_and_pipelines(broker):
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="t")
    try:
        for key, (_lo, hi) in SUPPORTED.items():
            assert conn.version_for(key) == min(hi, CLIENT_MAX.get(int(key), hi), conn.api_versions[int(key)][1])
        assert conn.version_for(ApiKey.FETCH) == 12  # the consumer fetches by name (Fetch v13+ is by id)
        # three requests in flight, answers read in reverse order (the connection parks frames)
        cids = [conn.send(ApiKey.METADATA, {"topics": None}) for _ in range(3)]
        bodies = [conn.receive(c) for c in reversed(cids)]
        assert all(b["brokers"][0]["port"] == broker.port for b in bodies)
        broker.stop()
        with pytest.raises(NetworkError):
            for _ in range(3):
                conn.request(ApiKey.METADATA, {"topics": None})
        assert conn.closed
        with pytest.raises(NetworkError, match="closed"):
            conn.request(ApiKey.METADATA, {"topics": None})
    finally:
        conn.close()
    with pytest.raises(NetworkError, match="cannot connect"):
        BrokerConnection("127.0.0.1", broker.port, timeout_s=2)


def test_metadata_topics_and_offsets_by_bootstrap(broker):
    with ClusterClient(broker.bootstrap) as c:
        md = c.metadata()
        assert md.brokers == {0: ("127.0.0.1", broker.port)} and md.controller_id == 0 and md.cluster_id
        c.create_topic("orders", 3, {"retention.ms": "3600000"})
        assert c.partitions_for("orders") == [0, 1, 2]
        assert c.leader_for("orders", 2) == 0
        with pytest.raises(TopicAlreadyExistsError):
            c.create_topic("orders", 3)
        with pytest.raises(UnknownTopicOrPartitionError, match="nosuch"):
            c.partitions_for("nosuch")
        with pytest.raises(UnknownTopicOrPartitionError):
            c.leader_for("orders", 7, timeout_s=0.5)
        with Producer(bootstrap_servers=broker.bootstrap) as p:
            t0 = int(time.time() * 1000) - 10000
            for i in range(5):
                p.send_sync("orders", b"v%d" % i, partition=1, timestamp_ms=t0 + i * 1000)
        tp = ("orders", 1)
        assert c.list_offsets({tp: -2, ("orders", 0): -1}) == {tp: 0, ("orders", 0): 0}
        assert c.list_offsets({tp: -1}) == {tp: 5}
        assert c.offsets_for_times({tp: t0 + 2500}) == {tp: (3, t0 + 3000)}
        assert c.offsets_for_times({tp: t0 + 99999}) == {tp: None}
        assert c.offsets_before("orders", 1, -1, 5)[0] == 5
        c.delete_topic("orders")
        wait_for(lambda: "orders" not in c.metadata(None, refresh=True).topics, message="topic deleted")


def test_zookeeper_discovery_and_new_brokers(broker_factory, zk_chroot):
    b0 = broker_factory(0)
    with ClusterClient(zookeeper_connect=zk_chroot) as c:
        assert set(c.metadata().brokers) == {0}
        broker_factory(1)
        # the registry watch marks the metadata stale: the next lookup sees the new broker
        wait_for(lambda: set(c.metadata([]).brokers) == {0, 1}, message="broker 1 in metadata")
        c.create_topic("spread", 4)
        leaders = {c.leader_for("spread", p) for p in range(4)}
        assert leaders == {0, 1}
        conn = c.connection(1)
        assert conn.port != b0.port and conn.node_id == 1


def test_coordinator_commit_and_fetch(broker):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("events", 2)
        node = c.find_coordinator("group-a")
        assert node == 0
        assert c.fetch_committed("group-a", [("events", 0), ("events", 1)]) == {
            ("events", 0): None,
            ("events", 1): None,
        }
        c.commit_offsets("group-a", {("events", 0): 42, ("events", 1): (7, "meta")})
        assert c.fetch_committed("group-a", [("events", 0), ("events", 1)]) == {("events", 0): 42, ("events", 1): 7}
        assert c.fetch_committed("group-a", None) == {("events", 0): 42, ("events", 1): 7}
        c.commit_offsets("group-a", {("events", 0): 43})
        assert c.fetch_committed("group-a", [("events", 0)]) == {("events", 0): 43}
        assert c.fetch_committed("group-b", [("events", 0)]) == {("events", 0): None}
    # after a broker restart the coordinator reloads the offsets (retrying while it loads)
    broker.restart()
    with ClusterClient(broker.bootstrap) as c:
        assert c.fetch_committed("group-a", [("events", 0), ("events", 1)], timeout_s=30) == {
            ("events", 0): 43,
            ("events", 1): 7,
        }
