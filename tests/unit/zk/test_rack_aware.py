"""Rack-aware replica placement (Kafka's ``AdminUtils.assignReplicasToBrokersRackAware``): the pure
algorithm against Kafka's own expected layouts, then real brokers with ``broker.rack``."""

from __future__ import annotations

import collections

import pytest

from pyklog.broker.errors import InvalidReplicaAssignmentError
from pyklog.broker.zk.topics import (
    assign_replicas,
    placement_racks,
    rack_alternated_brokers,
)

KAFKA_RACKS = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}


def test_rack_alternated_list_and_assignment_match_kafkas_expected_layout():
    # Kafka's AdminRackAwareTest.testGetRackAlternatedBrokerListAndAssignReplicasToBrokers
    assert rack_alternated_brokers(KAFKA_RACKS) == [0, 3, 1, 5, 4, 2]
    assert rack_alternated_brokers({b: r for b, r in KAFKA_RACKS.items() if b != 5}) == [0, 3, 1, 4, 2]
    assert assign_replicas(KAFKA_RACKS, 7, 3, start_index=0, replica_shift=0, racks=KAFKA_RACKS) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }


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
    assert placement_racks({1: None, 2: None}) is None  # no racks: rack-unaware
    assert placement_racks({1: "a", 2: "b"}, rack_aware=False) is None
    assert placement_racks({1: "a", 2: "b"}) == {1: "a", 2: "b"}
    with pytest.raises(InvalidReplicaAssignmentError, match="Not all brokers have rack information"):
        placement_racks({1: "a", 2: None})
