"""ZkCluster against the real ZooKeeper (one chroot per test) and the pure topic rules."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    ZooKeeperError,
)
from pyklog.broker.zk.cluster import split_connect_string
from pyklog.broker.zk.topics import (
    assign_replicas,
    collides,
    validate_topic_configs,
    validate_topic_name,
)
from pyklog.broker.zk.znodes import decode_broker_registration

# ---------------------------------------------------------------------------- pure rules


@pytest.mark.parametrize("name", ["t", "a.b-c_D9", "x" * 249, "__consumer_offsets", "..."])
def test_legal_topic_names(name):
    assert validate_topic_name(name) == name


@pytest.mark.parametrize("name", ["", ".", "..", "x" * 250, "a/b", "../etc", "a b", "tö", "a\x00", "a:b", 7, None])
def test_illegal_topic_names(name):
    with pytest.raises(InvalidTopicError):
        validate_topic_name(name)


def test_collision_of_dot_and_underscore():
    assert collides("a.b", ["a_b", "c"]) == ["a_b"]
    assert collides("a_b", ["a.b"]) == ["a.b"]
    assert collides("ab", ["ab"]) == []


def test_assignment_is_kafkas_round_robin():
    # Kafka's AdminUtils test case: 5 brokers, 10 partitions, 3 replicas, fixed start 0.
    got = assign_replicas([0, 1, 2, 3, 4], 10, 3, start_index=0, replica_shift=0)
    assert got == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_assignment_spreads_leaders_evenly_and_checks_inputs():
    for start in range(3):
        got = assign_replicas([7, 3, 5], 9, 2, start_index=start)
        leaders = [r[0] for r in got.values()]
        assert sorted(leaders.count(b) for b in (3, 5, 7)) == [3, 3, 3]
        assert all(len(set(r)) == 2 for r in got.values())
    with pytest.raises(InvalidReplicationFactorError, match="larger than available brokers: 2"):
        assign_replicas([0, 1], 3, 3)
    with pytest.raises(InvalidReplicationFactorError):
        assign_replicas([], 1, 1)
    with pytest.raises(InvalidPartitionsError):
        assign_replicas([0], 0, 1)


def test_topic_config_validation():
    assert validate_topic_configs(
        {"cleanup.policy": "delete, compact", "segment.bytes": 1024, "preallocate": True}
    ) == {"cleanup.policy": "compact,delete", "segment.bytes": "1024", "preallocate": "true"}
    for bad in (
        {"no.such.config": "1"},
        {"segment.bytes": "big"},
        {"retention.ms": "-5"},
        {"cleanup.policy": "shred"},
        {"min.cleanable.dirty.ratio": "2"},
    ):
        with pytest.raises(InvalidConfigError):
            validate_topic_configs(bad)


def test_connect_string_and_registration_parsing():
    assert split_connect_string("h1:1,h2:2/a/b/") == ("h1:1,h2:2", "/a/b")
    assert split_connect_string("h:1") == ("h:1", "")
    assert decode_broker_registration(b'{"endpoints":["PLAINTEXT://h:5"],"host":"x","port":1}').address() == ("h", 5)
    assert decode_broker_registration(b'{"host":"x","port":1}').address() == ("x", 1)
    with pytest.raises(ZooKeeperError, match="expected JSON"):
        decode_broker_registration(b"host:1")


# ---------------------------------------------------------------------------- against ZooKeeper
