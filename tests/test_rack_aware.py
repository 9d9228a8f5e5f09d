"""Rack-aware replica placement (Kafka's ``AdminUtils.assignReplicasToBrokersRackAware``): the pure
algorithm against Kafka's own expected layouts, then real brokers with ``broker.rack``."""
from __future__ import annotations

import collections
import json
import uuid

import pytest

from pyklog.broker.errors import InvalidReplicaAssignmentError
from pyklog.broker.zk import paths
from pyklog.broker.zk.topics import assign_replicas, placement_racks, rack_alternated_brokers
from support import wait_for

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_alternated_list_and_assignment_match_kafkas_expected_layout():
    # Kafka's AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert rack_alternated_brokers(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in KAFKA_RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(KAFKA_RACKS, 7, 3, start_index=0, replica_shift=0, racks=KAFKA_RACKS) == {
        0: [0, 3, 1], 1: [3, 1, 5], 2: [1, 5, 4], 3: [5, 4, 2], 4: [4, 2, 0], 5: [2, 0, 3], 6: [0, 4, 2]}


@pytest.mark.parametrize("rf", [2, 3, 4])
def test_every_partition_spans_min_rf_racks_and_leaders_and_replicas_are_even(rf):
    racks = {0: "a", 1: "b", 2: "b", 3: "c", 4: "c", 5: "a"}
    for start in range(6):
        for shift in range(6):
            a = assign_replicas(racks, 12, rf, start_index=start, replica_shift=shift, racks=racks)
            for p, replicas in a.items():
                assert len(set(replicas)) == rf
                assert len({racks[b] for b in replicas}) == min(rf, 3), (p, replicas)
            leaders = collections.Counter(r[0] for r in a.values())
            assert set(leaders.values()) == {2}
            per_broker = collections.Counter(b for r in a.values() for b in r)
            assert set(per_broker.values()) == {12 * rf // 6}, per_broker


def test_placement_racks_is_kafkas_enforced_mode():
    assert placement_racks({1: None, 2: None}) is None           # no racks: rack-unaware
    assert placement_racks({1: "a", 2: "b"}, rack_aware=False) is None
    assert placement_racks({1: "a", 2: "b"}) == {1: "a", 2: "b"}
    with pytest.raises(InvalidReplicaAssignmentError, match="Not all brokers have rack information"):
        placement_racks({1: "a", 2: None})


@pytest.mark.integration
def test_brokers_with_racks_place_replicas_across_racks(broker_factory, zk, zk_chroot, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic

    racks = {0: "r1", 1: "r1", 2: "r2", 3: "r2"}
    quick = {"controlled.shutdown.enable": "false"}  # placement only: stop at once at teardown
    brokers = {i: broker_factory(i, **{"broker.rack": r}, **quick) for i, r in racks.items()}
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == 4, message="brokers registered")
    for i, r in racks.items():  # Kafka's registration JSON carries the rack
        assert json.loads(zk.get(paths.broker_id(i))[0])["rack"] == r
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    ad = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"rack-{uuid.uuid4().hex[:6]}"
    ad.create_topics([NewTopic(topic, num_partitions=8, replication_factor=2)])[topic].result(30)
    assignment = json.loads(zk.get(paths.topic(topic))[0])["partitions"]
    for p, replicas in assignment.items():
        assert {racks[b] for b in replicas} == {"r1", "r2"}, (p, replicas)
    assert set(collections.Counter(r[0] for r in assignment.values()).values()) == {2}  # leaders even

    # a broker without broker.rack: Kafka's enforced mode refuses to place, --disable-rack-aware places
    broker_factory(4, **quick)
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == 5, message="fifth broker registered")
    t2 = f"rack-{uuid.uuid4().hex[:6]}"
    fut = ad.create_topics([NewTopic(t2, num_partitions=2, replication_factor=2)])[t2]
    with pytest.raises(Exception, match="Not all brokers have rack information"):
        fut.result(30)
    assert zk.exists(paths.topic(t2)) is None
    from pyklog.broker.cli import topics

    assert topics.main(["--zookeeper", zk_chroot, "--create", "--topic", t2, "--partitions", "2",
                        "--replication-factor", "2"]) == 1
    assert "Not all brokers have rack information" in capsys.readouterr().err
    assert topics.main(["--zookeeper", zk_chroot, "--create", "--topic", t2, "--partitions", "2",
                        "--replication-factor", "2", "--disable-rack-aware"]) == 0
    assert len(json.loads(zk.get(paths.topic(t2))[0])["partitions"]) == 2
