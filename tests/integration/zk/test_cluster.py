"""ZkCluster against the real ZooKeeper (one chroot per test) and the pure topic rules."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
from kazoo.client import KazooClient

from pyklog.broker.errors import (
    BrokerIdInUseError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
)
from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.server import free_port
from pyklog.broker.zk.znodes import parse_topic_id
from tests.support import expire_session, wait_for

SESSION_MS = 6000


@pytest.fixture
def cluster_factory(zk_chroot):
    made: list[ZkCluster] = []

    def make(broker_id, port=None, start=True, **kw):
        c = ZkCluster(
            zk_chroot,
            broker_id,
            "127.0.0.1" if broker_id is not None else None,
            port or (9000 + broker_id if broker_id is not None else None),
            session_timeout_ms=SESSION_MS,
            **kw,
        )
        made.append(c)
        return c.start() if start else c

    yield make
    for c in made:
        c.stop()


# ---------------------------------------------------------------------------- pure rules


# ---------------------------------------------------------------------------- against ZooKeeper


def test_cluster_id_created_once_and_reused(cluster_factory, zk):
    a = cluster_factory(0)
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", a.cluster_id)
    stored = json.loads(zk.get(paths.CLUSTER_ID)[0])
    assert stored == {"version": "1", "id": a.cluster_id}
    b = cluster_factory(1)
    assert b.cluster_id == a.cluster_id
    a.stop()
    assert cluster_factory(0).cluster_id == stored["id"]


def test_chroot_is_created_when_missing(zookeeper):
    connect = f"{zookeeper}/pyklog-fresh-{free_port()}/deep"
    # an admin client does not create a cluster under a chroot nobody uses
    with pytest.raises(ZooKeeperError, match="has no chroot /pyklog-fresh-.*/deep: no pyklog cluster"):
        ZkCluster(connect, None, session_timeout_ms=SESSION_MS).start()
    c = ZkCluster(connect, 0, "127.0.0.1", 9000, session_timeout_ms=SESSION_MS).start()
    try:
        assert c.zk.exists(paths.BROKER_TOPICS) and c.registered
        admin = ZkCluster(connect, None, session_timeout_ms=SESSION_MS).start()
        assert admin.live_brokers() == {0: ("127.0.0.1", 9000)}
        admin.stop()
    finally:
        c.stop()


def test_registration_json_as_kafka(cluster_factory, zk):
    c = cluster_factory(3, port=9093)
    data, stat = zk.get(paths.broker_id(3))
    info = json.loads(data)
    assert stat.ephemeralOwner == c.session_id
    assert info["host"] == "127.0.0.1" and info["port"] == 9093
    assert info["endpoints"] == ["PLAINTEXT://127.0.0.1:9093"]
    assert info["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT"}
    assert info["jmx_port"] == -1 and info["rack"] is None and info["version"] == 4
    assert abs(int(info["timestamp"]) - time.time() * 1000) < 60000
    assert wait_for(lambda: c.live_brokers() == {3: ("127.0.0.1", 9093)})
    assert c.controller_id == 3
    c.stop()
    assert zk.exists(paths.broker_id(3)) is None


def test_duplicate_broker_id_is_refused(cluster_factory, zk):
    first = cluster_factory(0, port=9100)
    t0 = time.monotonic()
    with pytest.raises(BrokerIdInUseError, match=r"broker.id 0 is already registered.*PLAINTEXT://127.0.0.1:9100"):
        cluster_factory(0, port=9101)
    assert time.monotonic() - t0 < SESSION_MS / 1000  # a live holder at another address: refused at once
    # the first registration is untouched
    assert zk.get(paths.broker_id(0))[1].ephemeralOwner == first.session_id


def test_stale_registration_with_our_endpoints_is_waited_out(cluster_factory, zk_chroot):
    # A crashed predecessor of this broker (same id, same address) whose session is still open.
    predecessor = KazooClient(hosts=zk_chroot)
    predecessor.start(timeout=30)
    stale = ZkCluster(zk_chroot, 7, "127.0.0.1", 9107).registration()
    predecessor.create(paths.broker_id(7), json.dumps(stale).encode(), ephemeral=True, makepath=True)
    timer = threading.Timer(1.0, lambda: (predecessor.stop(), predecessor.close()))
    timer.start()
    try:
        t0 = time.monotonic()
        c = cluster_factory(7, port=9107)
        assert time.monotonic() - t0 >= 0.9
        assert c.registered and c.zk.get(paths.broker_id(7))[1].ephemeralOwner == c.session_id
    finally:
        timer.join()


def test_reregisters_after_session_expiry(cluster_factory, zk, zk_chroot):
    c = cluster_factory(5, port=9105)
    other = cluster_factory(6, port=9106)
    assert wait_for(lambda: set(other.live_brokers()) == {5, 6})
    changes = []
    c.add_listener(lambda: changes.append(1))
    c.create_topic("before", 2)
    old_session = c.session_id
    expire_session(zk_chroot, c.zk)
    wait_for(
        lambda: c.session_id not in (None, old_session) and c.registered, timeout=30, message="new session registered"
    )
    _, stat = zk.get(paths.broker_id(5))
    assert stat.ephemeralOwner == c.session_id != old_session
    # watches are armed again: a topic created elsewhere and a broker leaving are both seen
    other.create_topic("after", 1)
    wait_for(lambda: "after" in c.topics(), message="topic created after the expiry")
    other.stop()
    wait_for(lambda: set(c.live_brokers()) == {5}, message="broker 6 gone")
    assert changes


def test_topic_creation_spreads_over_brokers(cluster_factory, zk):
    brokers = [cluster_factory(i) for i in range(3)]
    for b in brokers:
        wait_for(lambda b=b: len(b.live_brokers()) == 3)
    seen = threading.Event()
    brokers[2].add_listener(lambda: "spread" in brokers[2].topics() and seen.set())
    assignment = brokers[0].create_topic("spread", 6, configs={"retention.ms": "1000"})
    assert sorted(assignment) == list(range(6))
    assert sorted(r[0] for r in assignment.values()) == [0, 0, 1, 1, 2, 2]
    # what is in ZooKeeper is Kafka's layout
    reg = json.loads(zk.get(paths.topic("spread"))[0])
    # Kafka's TopicZNode v3: the topic id (KIP-516, 22 chars of URL-safe base64) and empty reassignments
    assert reg == {
        "version": 3,
        "topic_id": reg["topic_id"],
        "partitions": {str(p): r for p, r in assignment.items()},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert brokers[0].topic("spread") is not None
    assert len(reg["topic_id"]) == 22 and brokers[0].topic_id("spread") == parse_topic_id(reg["topic_id"])
    state = json.loads(zk.get(paths.partition_state("spread", 4))[0])
    assert state == {
        "controller_epoch": 1,
        "leader": assignment[4][0],
        "version": 1,
        "leader_epoch": 0,
        "isr": [assignment[4][0]],
    }
    assert json.loads(zk.get(paths.topic_config("spread"))[0]) == {"version": 1, "config": {"retention.ms": "1000"}}
    # every broker's cache sees the same metadata, refreshed by the watch
    assert seen.wait(10)
    for b in brokers:
        wait_for(lambda b=b: "spread" in b.topics())
        parts = b.topics()["spread"]
        assert {p: s.leader for p, s in parts.items()} == {p: r[0] for p, r in assignment.items()}
        assert b.topic_config("spread") == {"retention.ms": "1000"}
    assert brokers[1].partitions_led_by(1) == {("spread", p) for p, r in assignment.items() if r[0] == 1}
    # replication factor: only as many replicas as live brokers
    three = brokers[1].create_topic("rf3", 4, replication_factor=3)
    assert all(sorted(r) == [0, 1, 2] for r in three.values())
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 3"):
        brokers[1].create_topic("rf4", 1, replication_factor=4)
    with pytest.raises(TopicAlreadyExistsError):
        brokers[2].create_topic("spread", 1)
    with pytest.raises(InvalidPartitionsError):
        brokers[2].create_topic("zero", 0)
    with pytest.raises(InvalidConfigError):
        brokers[2].create_topic("badcfg", 1, configs={"segment.bytes": "x"})
    assert brokers[2].create_topic("dry", 3, validate_only=True)
    # a manual replica assignment (CreateTopics with assignments) is checked against the live brokers
    assert brokers[0].create_topic("manual", 2, 1, replica_assignment={0: [2], 1: [0]}) == {0: [2], 1: [0]}
    assert {p: s.leader for p, s in brokers[0].topics()["manual"].items()} == {0: 2, 1: 0}
    for bad in ({0: [7]}, {1: [0]}, {0: [0, 0]}, {0: [0], 1: [0, 1]}):
        with pytest.raises(InvalidReplicaAssignmentError):
            brokers[0].create_topic("manual2", len(bad), 1, replica_assignment=bad)
    assert zk.exists(paths.topic("dry")) is None and zk.exists(paths.topic("badcfg")) is None
    # a broker that leaves: its partitions report leader -1
    brokers[2].stop()
    wait_for(lambda: 2 not in brokers[0].live_brokers())
    parts = brokers[0].topics()["spread"]
    assert {p for p, s in parts.items() if s.leader == -1} == {p for p, r in assignment.items() if r[0] == 2}


def test_invalid_names_write_nothing(cluster_factory, zk):
    c = cluster_factory(0)
    for bad in ["", "..", "a/b", "../../etc", "x" * 250, "sp ace"]:
        with pytest.raises(InvalidTopicError):
            c.create_topic(bad, 1)
    c.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        c.create_topic("a_b", 1)
    assert c.topic("../a.b") is None and c.topic("nope") is None
    assert sorted(zk.get_children(paths.BROKER_TOPICS)) == ["a.b"]
    assert sorted(zk.get_children(paths.CONFIG_TOPICS)) == ["a.b"]


def test_delete_topic(cluster_factory, zk):
    a, b = cluster_factory(0), cluster_factory(1)
    a.create_topic("doomed", 3, configs={"cleanup.policy": "compact"})
    wait_for(lambda: "doomed" in b.topics())
    assert b.topic_config("doomed") == {"cleanup.policy": "compact"}
    deleted = threading.Event()
    b.add_listener(lambda: "doomed" not in b.topics() and deleted.set())
    b.delete_topic("doomed")
    assert zk.exists(paths.topic("doomed")) is None
    assert zk.exists(paths.topic_config("doomed")) is None
    wait_for(lambda: "doomed" not in a.topics(), message="deletion seen by the other broker")
    assert deleted.wait(10)
    with pytest.raises(UnknownTopicOrPartitionError):
        a.delete_topic("doomed")
    # re-created with another partition count: the caches follow
    a.create_topic("doomed", 5)
    wait_for(lambda: len(b.topics().get("doomed", {})) == 5)
    assert b.topic_config("doomed") == {}
    # deleted and re-created elsewhere while this broker cached its config: the cache follows
    a.create_topic("again", 1, configs={"cleanup.policy": "compact"})
    wait_for(lambda: "again" in b.topics())
    assert b.topic_config("again") == {"cleanup.policy": "compact"}
    a.delete_topic("again")
    a.create_topic("again", 2, configs={"retention.ms": "5"})
    wait_for(lambda: len(b.topics().get("again", {})) == 2)
    assert b.topic_config("again") == {"retention.ms": "5"}
    # a deletion request written as Kafka's old tools do is carried out by the controller
    zk.create(paths.delete_topic_request("doomed"), b"")
    wait_for(lambda: zk.exists(paths.topic("doomed")) is None, message="request carried out")
    wait_for(lambda: zk.get_children(paths.ADMIN_DELETE_TOPICS) == [])


def test_allocate_producer_ids_unique_under_concurrency(cluster_factory, zk):
    clusters = [cluster_factory(i) for i in range(3)]
    blocks: list[range] = []
    lock = threading.Lock()

    def worker(c):
        for _ in range(10):
            r = c.allocate_producer_ids(100)
            with lock:
                blocks.append(r)

    threads = [threading.Thread(target=worker, args=(c,)) for c in clusters for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(blocks) == 60 and all(len(r) == 100 for r in blocks)
    starts = sorted(r.start for r in blocks)
    assert starts == list(range(0, 6000, 100))  # disjoint and contiguous
    last = json.loads(zk.get(paths.LATEST_PRODUCER_ID_BLOCK)[0])
    assert last["version"] == 1 and last["block_start"] == "5900" and last["block_end"] == "5999"


def test_admin_client_and_unreachable_zookeeper(cluster_factory):
    admin = cluster_factory(None)
    with pytest.raises(InvalidReplicationFactorError, match="available brokers: 0"):
        admin.create_topic("nobody", 1)
    cluster_factory(0)
    admin.create_topic("somebody", 2)
    assert set(admin.topics()["somebody"]) == {0, 1}
    t0 = time.monotonic()
    dead = ZkCluster(f"127.0.0.1:{free_port()}", 0, "127.0.0.1", 1, connect_timeout_s=1.5)
    with pytest.raises(ZooKeeperError, match="could not connect to ZooKeeper"):
        dead.start()
    assert time.monotonic() - t0 < 15


def test_alter_topic_config_reaches_every_broker(cluster_factory, zk):
    a, b = cluster_factory(0), cluster_factory(1)
    a.create_topic("conf", 1, configs={"retention.ms": "1000", "segment.bytes": "4096"})
    wait_for(lambda: "conf" in b.topics())
    assert b.topic_config("conf") == {"retention.ms": "1000", "segment.bytes": "4096"}
    changed = threading.Event()
    b.add_listener(lambda: b.topic_config("conf").get("cleanup.policy") == "compact" and changed.set())
    new = a.alter_topic_config("conf", {"cleanup.policy": "compact"}, delete_configs=["segment.bytes"])
    assert new == {"retention.ms": "1000", "cleanup.policy": "compact"}
    assert changed.wait(10), "broker 1 was told and re-read the config"
    assert b.topic_config("conf") == new
    assert json.loads(zk.get(paths.topic_config("conf"))[0]) == {"version": 1, "config": new}
    notes = zk.get_children(paths.CONFIG_CHANGES)
    assert len(notes) == 1 and notes[0].startswith("config_change_")
    assert json.loads(zk.get(f"{paths.CONFIG_CHANGES}/{notes[0]}")[0]) == {"version": 2, "entity_path": "topics/conf"}
    with pytest.raises(UnknownTopicOrPartitionError):
        a.alter_topic_config("absent", {"retention.ms": "1"})
    with pytest.raises(InvalidConfigError):
        a.alter_topic_config("conf", {"retention.ms": "soon"})
    with pytest.raises(InvalidConfigError):
        a.alter_topic_config("conf", delete_configs=["no.such"])
