"""OffsetManager over a real LogManager (tmp_path) and a real ZkCluster (zk_chroot), plus its pure parts."""

from __future__ import annotations

import pytest

from pyklog.broker.coordinator.offsets import (
    OFFSETS_TOPIC,
    decode_offset_key,
    decode_offset_value,
)
from pyklog.broker.errors import (
    CoordinatorLoadInProgressError,
    InvalidGroupIdError,
    NotCoordinatorError,
)
from pyklog.broker.record.reader import iter_batches
from tests.integration.coordinator.support import group_on
from tests.support import wait_for

# ---------------------------------------------------------------------------- pure


# ---------------------------------------------------------------------------- over real logs


def test_commit_and_fetch(nodes):
    node = nodes(0)
    om, cluster = node.om, node.cluster
    cluster.create_topic("events", 3)
    assert om.coordinator_for("grp") == 0
    # the offsets topic was created on first use, compacted, with the configured partitions
    assert len(cluster.topics()[OFFSETS_TOPIC]) == 4
    assert cluster.topic_config(OFFSETS_TOPIC) == {
        "cleanup.policy": "compact",
        "segment.bytes": "104857600",
        "compression.type": "producer",
    }
    res = om.commit(
        "grp",
        {
            ("events", 0): (10, 3, "meta"),
            ("events", 1): (20, -1, None),
            ("events", 9): (1, -1, ""),
            ("nope", 0): (1, -1, ""),
            ("../x", 0): (1, -1, ""),
            ("events", 2): (5, -1, "x" * 5000),
        },
    )
    assert res == {
        ("events", 0): 0,
        ("events", 1): 0,
        ("events", 9): 3,
        ("nope", 0): 3,
        ("../x", 0): 3,
        ("events", 2): 12,
    }
    assert om.fetch("grp") == {("events", 0): (10, 3, "meta"), ("events", 1): (20, -1, "")}
    assert om.fetch("grp", [("events", 1), ("events", 2)]) == {("events", 1): (20, -1, ""), ("events", 2): (-1, -1, "")}
    assert om.fetch("other", [("events", 0)]) == {("events", 0): (-1, -1, "")}
    om.commit("grp", {("events", 0): (11, 3, "")})
    assert om.fetch("grp")[("events", 0)] == (11, 3, "")
    assert "grp" in om.groups()
    with pytest.raises(InvalidGroupIdError):
        om.commit(None, {})
    # on disk: Kafka's record format, one batch per commit
    lg = node.lm.get_log(OFFSETS_TOPIC, om.partition_for("grp"))
    batches = list(iter_batches(lg.read(0, 1 << 20).read_bytes()))
    assert [len(b.records) for b in batches] == [2, 1]
    first = batches[0].records[0]
    assert decode_offset_key(first.key) == ("grp", "events", 0)
    value = decode_offset_value(first.value)
    assert (value.offset, value.leader_epoch, value.metadata) == (10, 3, "meta")
    assert first.value[:2] == b"\x00\x03" and first.key[:2] == b"\x00\x01"
    assert lg.config.compact


def test_offsets_survive_restart_and_tombstones(nodes):
    node = nodes(0)
    node.cluster.create_topic("t", 2)
    node.om.ensure_topic()
    node.om.commit("a", {("t", 0): (1, -1, ""), ("t", 1): (2, -1, "")})
    node.om.commit("b", {("t", 0): (7, 1, "bm")})
    node.om.commit("a", {("t", 0): (3, -1, "latest")})
    node.om.delete_offsets("b", [("t", 0)])
    node.restart()
    assert node.om.wait_loaded(30)
    assert node.om.fetch("a") == {("t", 0): (3, -1, "latest"), ("t", 1): (2, -1, "")}
    assert node.om.fetch("b") == {}
    assert node.lm.get_log(OFFSETS_TOPIC, 0).config.compact


def test_compaction_keeps_latest_commit(nodes):
    node = nodes(0, num_partitions=1, segment_bytes=2048)
    node.cluster.create_topic("t", 1)
    node.om.ensure_topic()
    for i in range(200):
        node.om.commit("g", {("t", 0): (i, -1, f"m{i}")})
    lg = node.lm.get_log(OFFSETS_TOPIC, 0)
    assert len(lg.segments) > 2
    before = lg.size
    lg.compact(force=True)
    assert lg.size < before
    node.restart()
    assert node.om.wait_loaded(30)
    assert node.om.fetch("g") == {("t", 0): (199, -1, "m199")}


def test_load_in_progress_after_restart(nodes):
    node = nodes(0, num_partitions=1)
    node.cluster.create_topic("big", 100)
    node.om.ensure_topic()
    for i in range(150):
        assert set(node.om.commit("g", {("big", p): (i, -1, "") for p in range(100)}).values()) == {0}
    node.om.shutdown()
    node.lm.shutdown()
    node.open()  # loading 15000 records starts in the background
    with pytest.raises(CoordinatorLoadInProgressError):
        node.om.fetch("g")
    with pytest.raises(CoordinatorLoadInProgressError):
        node.om.commit("g", {("big", 0): (1, -1, "")})
    assert node.om.is_loading("g")
    assert node.om.wait_loaded(60)
    assert node.om.fetch("g", [("big", 99)]) == {("big", 99): (149, -1, "")}


def test_not_coordinator_and_two_brokers_agree(nodes):
    n0, n1 = nodes(0), nodes(1)
    wait_for(lambda: len(n0.cluster.live_brokers()) == 2 and len(n1.cluster.live_brokers()) == 2)
    n0.cluster.create_topic("t", 1)
    n0.om.ensure_topic()
    wait_for(lambda: OFFSETS_TOPIC in n1.cluster.topics())
    leaders = {p: s.leader for p, s in n0.cluster.topics()[OFFSETS_TOPIC].items()}
    assert sorted(leaders.values()) == [0, 0, 1, 1]
    g1 = group_on(n0.om, next(p for p, b in leaders.items() if b == 1))
    assert n0.om.coordinator_for(g1) == n1.om.coordinator_for(g1) == 1
    with pytest.raises(NotCoordinatorError):
        n0.om.commit(g1, {("t", 0): (1, -1, "")})
    with pytest.raises(NotCoordinatorError):
        n0.om.fetch(g1)
    wait_for(lambda: not n1.om.is_loading(), message="broker 1 loaded its offsets partitions")
    assert n1.om.commit(g1, {("t", 0): (4, -1, "")}) == {("t", 0): 0}
    assert n1.om.fetch(g1) == {("t", 0): (4, -1, "")}
