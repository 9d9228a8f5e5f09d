"""ReplicaManager (partition leadership, leader logs) in-process, against a real ZooKeeper and real logs:
which partitions a broker leads, UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER for the others,
logs created and deleted as the registry changes."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import (
    InvalidTopicError,
    NotLeaderOrFollowerError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.log import LogManager
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.server.replica_manager import ReplicaManager
from pyklog.broker.zk.cluster import ZkCluster


@pytest.fixture
def two_brokers(zk_chroot, tmp_path):
    """Broker 0's ReplicaManager (with its LogManager) and broker 1's registration, both live."""
    b0 = ZkCluster(zk_chroot, 0, "127.0.0.1", 9400, session_timeout_ms=10000).start()
    b1 = ZkCluster(zk_chroot, 1, "127.0.0.1", 9401, session_timeout_ms=10000).start()
    config = ServerConfig.from_properties(
        {"broker.id": "0", "zookeeper.connect": zk_chroot, "log.dirs": str(tmp_path / "logs"), "num.partitions": "2"}
    )
    logs = LogManager([str(tmp_path / "logs")], config.log_config(), topic_config=b0.topic_config)
    logs.startup()
    yield ReplicaManager(config, logs, b0), b0
    logs.shutdown()
    b1.stop()
    b0.stop()


def test_leader_logs_follow_the_registry(two_brokers):
    rm, cluster = two_brokers
    cluster.create_topic("split", 2, replica_assignment={0: [0], 1: [1]})
    rm.sync_logs()
    assert rm.led_partitions == frozenset({("split", 0)})
    assert set(rm.logs.logs()) == {("split", 0)}  # no log for the partition broker 1 leads
    lg = rm.leader_log("split", 0)
    assert lg is rm.leader_log("split", 0) and rm.leader_epoch("split", 0) == 0
    with pytest.raises(NotLeaderOrFollowerError, match="broker 0 is not the leader of split-1 .leader: 1."):
        rm.leader_log("split", 1)
    with pytest.raises(UnknownTopicOrPartitionError, match="does not host partition split-2"):
        rm.leader_log("split", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        rm.leader_log("nowhere", 0)
    with pytest.raises(InvalidTopicError):
        rm.leader_log("../escape", 0)
    # a partition created after the last sync is found through the registry at once
    cluster.create_topic("fresh", 1, replica_assignment={0: [0]})
    assert rm.leader_log("fresh", 0) is rm.local_log("fresh", 0)
    # a topic deleted elsewhere: the next sync deletes its log; DeleteTopics here deletes at once
    cluster.delete_topic("fresh")
    rm.sync_logs()
    assert rm.local_log("fresh", 0) is None and ("fresh", 0) not in rm.led_partitions
    rm.delete_local_logs("split")
    assert rm.local_log("split", 0) is None and rm.led_partitions == frozenset()


def test_auto_create_and_wait(two_brokers):
    rm, cluster = two_brokers
    assert not rm.wait_for_topic("auto", 0.05)
    rm.auto_create_topic("auto")
    rm.auto_create_topic("auto")  # created meanwhile: no error
    assert rm.wait_for_topic("auto", 2.0)
    assert sorted(cluster.topic("auto")) == [0, 1]  # num.partitions


def test_after_its_controlled_shutdown_a_broker_resigns_moved_leaderships_and_reads_no_states(
    two_brokers, zk, zk_chroot
):
    """A broker whose controlled shutdown succeeded stops leading every partition with a replica
    elsewhere at once (Produce gets NOT_LEADER_OR_FOLLOWER), keeps its single-replica partitions,
    and reads none of the states written for its departure, while other brokers do."""
    import json

    from pyklog.broker.zk import paths
    from tests.support import wait_for

    rm, cluster = two_brokers
    cluster.create_topic("leaving", 1, replica_assignment={0: [0, 1]})
    cluster.create_topic("alone", 1, replica_assignment={0: [0]})
    rm.sync_logs()
    assert rm.led_partitions == frozenset({("leaving", 0), ("alone", 0)})
    assert rm.resign_moved_leaderships() == 1
    with pytest.raises(NotLeaderOrFollowerError):
        rm.leader_log("leaving", 0)
    assert rm.leader_log("alone", 0) is rm.local_log("alone", 0)  # nobody else can lead it
    assert rm.led_partitions == frozenset({("alone", 0)})
    # the cache still says leader 0 (the states written for the departure are not read): neither
    # a Produce (above) nor a registry sync makes this broker its leader again
    cluster.create_topic("later", 1, replica_assignment={0: [0]})
    rm.sync_logs()
    assert rm.led_partitions == frozenset({("alone", 0), ("later", 0)})

    observer = ZkCluster(zk_chroot, 2, "127.0.0.1", 9402, session_timeout_ms=10000).start()
    try:
        wait_for(lambda: observer.partition_state_as_written("leaving", 0) is not None, 10, 0.05, "observer")
        cluster.stop_following_states()
        zk.set(
            paths.partition_state("leaving", 0),
            json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 1, "isr": [1]}).encode(),
        )
        wait_for(lambda: observer.partition_state_as_written("leaving", 0).leader == 1, 10, 0.05, "the new state")
        wait_for(lambda: observer.partition_state_as_written("leaving", 0).leader_epoch == 1, 1, 0.05, "settled")
        assert cluster.partition_state_as_written("leaving", 0).leader == 0
    finally:
        observer.stop()
