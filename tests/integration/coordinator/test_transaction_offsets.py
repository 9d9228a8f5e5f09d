"""Transactional offset commits (KIP-98) in the OffsetManager, over real logs and a real ZkCluster.

TxnOffsetCommit appends a transactional batch to the group's ``__consumer_offsets`` partition and
keeps the offsets pending; the COMMIT marker (``Log.append_control_marker``, then
``complete_transaction``) makes them committed, ABORT drops them.  Each test checks the in-memory
answer and the answer after a restart that reloads the partition from its log, and counts what
was committed, lost or wrongly exposed.
"""

from __future__ import annotations

import pytest

from pyklog.broker.coordinator.offsets import OFFSETS_TOPIC
from pyklog.broker.errors import InvalidGroupIdError, NotCoordinatorError
from pyklog.broker.record.reader import iter_batches
from tests.integration.coordinator.support import group_on
from tests.support import wait_for

PID = 4242


def node_with_topic(nodes, topic: str, partitions: int, offsets_partitions: int = 1, **kw):
    """Broker node 0 (``offsets_partitions`` partitions of __consumer_offsets, created; ``kw`` as
    :class:`tests.integration.coordinator.support.Node` takes them) with ``topic`` of ``partitions`` partitions in its
    ZooKeeper."""
    node = nodes(0, num_partitions=offsets_partitions, **kw)
    node.cluster.create_topic(topic, partitions)
    node.om.ensure_topic()
    return node


def marker(node, group, producer_id, commit, epoch=0, coordinator_epoch=0):
    """What the WriteTxnMarkers handler does: the marker into the log, then the completion."""
    p = node.om.partition_for(group)
    node.lm.get_log(OFFSETS_TOPIC, p).append_control_marker(producer_id, epoch, commit, coordinator_epoch)
    return node.om.complete_transaction(p, producer_id, commit)


def offsets_of(node, group):
    return {tp: off for tp, (off, _, _) in node.om.fetch(group).items()}


def reload(node):
    node.restart()
    assert node.om.wait_loaded(30)


def test_pending_until_commit_marker_then_abort_drops(nodes):
    node = node_with_topic(nodes, "t", 3, offsets_partitions=2)
    om = node.om
    assert om.commit("g", {("t", 0): (5, -1, "plain")}) == {("t", 0): 0}
    res = om.commit_transactional(
        "g",
        PID,
        0,
        {("t", 0): (10, 2, "tx"), ("t", 1): (20, -1, None), ("t", 7): (1, -1, ""), ("t", 2): (3, -1, "x" * 5000)},
    )
    assert res == {("t", 0): 0, ("t", 1): 0, ("t", 7): 3, ("t", 2): 12}
    # pending: invisible to OffsetFetch
    assert offsets_of(node, "g") == {("t", 0): 5}
    assert set(om.pending_offsets("g", PID)) == {("t", 0), ("t", 1)}
    # on disk: one transactional batch with the producer's id and epoch
    lg = node.lm.get_log(OFFSETS_TOPIC, om.partition_for("g"))
    batches = list(iter_batches(lg.read(0, 1 << 20).read_bytes()))
    assert [(b.is_transactional, b.producer_id, b.producer_epoch, len(b.records)) for b in batches] == [
        (False, -1, -1, 1),
        (True, PID, 0, 2),
    ]
    assert marker(node, "g", PID, commit=True) == 2
    assert om.fetch("g") == {("t", 0): (10, 2, "tx"), ("t", 1): (20, -1, "")}
    assert om.pending_offsets("g", PID) == {}
    # a second transaction of the same producer, aborted: nothing changes
    assert set(om.commit_transactional("g", PID, 0, {("t", 0): (99, -1, ""), ("t", 2): (99, -1, "")}).values()) == {0}
    assert marker(node, "g", PID, commit=False) == 0
    expected = {("t", 0): 10, ("t", 1): 20}
    assert offsets_of(node, "g") == expected
    reload(node)
    assert offsets_of(node, "g") == expected
    assert node.om.pending_offsets("g", PID) == {}


def test_plain_commit_written_after_the_txn_commit_wins(nodes):
    """Kafka's olderThan rule: a pending offset replaces a committed one only if it is later in the log."""
    node = node_with_topic(nodes, "t", 2)
    om = node.om
    om.commit_transactional("g", PID, 0, {("t", 0): (100, -1, "tx"), ("t", 1): (200, -1, "tx")})
    om.commit("g", {("t", 0): (7, -1, "plain-later")})
    assert marker(node, "g", PID, commit=True) == 1
    expected = {("t", 0): (7, -1, "plain-later"), ("t", 1): (200, -1, "tx")}
    assert om.fetch("g") == expected
    reload(node)
    assert node.om.fetch("g") == expected


def test_restart_between_txn_offset_commit_and_marker(nodes):
    """The broker restarts after TxnOffsetCommit, before the marker: the offsets reload as pending
    (still invisible); the marker after the restart commits (or aborts) them."""
    node = node_with_topic(nodes, "t", 2)
    node.om.commit("a", {("t", 0): (1, -1, "")})
    node.om.commit_transactional("a", PID, 3, {("t", 0): (50, -1, "m"), ("t", 1): (60, -1, "")})
    node.om.commit_transactional("b", PID + 1, 0, {("t", 0): (70, -1, "")})
    reload(node)
    assert offsets_of(node, "a") == {("t", 0): 1}
    assert offsets_of(node, "b") == {}
    pending = node.om.pending_offsets("a", PID)
    assert {tp: v.offset for tp, v in pending.items()} == {("t", 0): 50, ("t", 1): 60}
    assert marker(node, "a", PID, commit=True, epoch=3) == 2
    assert marker(node, "b", PID + 1, commit=False) == 0
    assert offsets_of(node, "a") == {("t", 0): 50, ("t", 1): 60}
    assert offsets_of(node, "b") == {}
    reload(node)  # after the markers: the same answer from the log
    assert offsets_of(node, "a") == {("t", 0): 50, ("t", 1): 60}
    assert node.om.fetch("a")[("t", 0)] == (50, -1, "m")
    assert offsets_of(node, "b") == {}
    assert node.om.pending_offsets("a", PID) == {} and node.om.pending_offsets("b", PID + 1) == {}


def test_marker_appended_while_the_partition_loads(nodes):
    """A marker that arrives while the offsets partition is loading is applied exactly once: by the
    loader (it reads the log up to the end under the partition's lock) or by complete_transaction."""
    node = node_with_topic(nodes, "big", 100)
    for i in range(150):
        node.om.commit("g", {("big", p): (i, -1, "") for p in range(100)})
    node.om.commit_transactional("g", PID, 0, {("big", 0): (1000, -1, ""), ("big", 1): (1001, -1, "")})
    node.om.shutdown()
    node.lm.shutdown()
    node.open()  # loading 15000 records starts in the background
    was_loading = node.om.is_loading("g")
    marker(node, "g", PID, commit=True)
    assert node.om.wait_loaded(60)
    got = node.om.fetch("g", [("big", 0), ("big", 1), ("big", 2)])
    assert {tp: v[0] for tp, v in got.items()} == {("big", 0): 1000, ("big", 1): 1001, ("big", 2): 149}, was_loading
    assert node.om.pending_offsets("g", PID) == {}


def test_fenced_producer_epoch_and_request_errors(nodes):
    node = node_with_topic(nodes, "t", 1)
    om = node.om
    assert om.commit_transactional("g", PID, 0, {("t", 0): (1, -1, "")}) == {("t", 0): 0}
    # InitProducerId bumped the epoch: the coordinator aborted the old transaction with epoch 1
    assert marker(node, "g", PID, commit=False, epoch=1) == 0
    # the zombie (epoch 0) is fenced by the log: INVALID_PRODUCER_EPOCH, nothing pending
    assert om.commit_transactional("g", PID, 0, {("t", 0): (2, -1, "")}) == {("t", 0): 47}
    assert om.pending_offsets("g", PID) == {}
    assert om.commit_transactional("g", PID, 1, {("t", 0): (3, -1, "")}) == {("t", 0): 0}
    assert marker(node, "g", PID, commit=True, epoch=1) == 1
    assert offsets_of(node, "g") == {("t", 0): 3}
    with pytest.raises(InvalidGroupIdError):
        om.commit_transactional("", PID, 1, {("t", 0): (1, -1, "")})
    # only unknown / too-large partitions: nothing appended
    end = node.lm.get_log(OFFSETS_TOPIC, 0).log_end_offset
    assert om.commit_transactional("g", PID, 1, {("zz", 0): (1, -1, "")}) == {("zz", 0): 3}
    assert node.lm.get_log(OFFSETS_TOPIC, 0).log_end_offset == end
    # a marker for a partition this broker does not lead changes nothing
    assert om.complete_transaction(57, PID, True) == 0


def test_not_coordinator_on_the_other_broker(nodes):
    n0, n1 = nodes(0, num_partitions=4), nodes(1, num_partitions=4)
    wait_for(lambda: len(n0.cluster.live_brokers()) == 2 and len(n1.cluster.live_brokers()) == 2)
    n0.cluster.create_topic("t", 1)
    n0.om.ensure_topic()
    wait_for(lambda: n1.om._synced and not n1.om.is_loading(), message="broker 1 follows the offsets topic")
    for g in ("g0", "g1", "g2", "g3", "g4", "g5"):
        leader = n0.om.coordinator_for(g)
        other = n1 if leader == 0 else n0
        with pytest.raises(NotCoordinatorError):
            other.om.commit_transactional(g, PID, 0, {("t", 0): (1, -1, "")})


def _fill(node, g, start=0, n=200):
    for i in range(start, start + n):  # plain commits of another partition fill segments
        node.om.commit(g, {("t", 2): (i, -1, f"m{i}")})


def _compact_shrinks(node):
    lg = node.lm.get_log(OFFSETS_TOPIC, 0)
    assert len(lg.segments) > 2
    before = lg.size
    lg.compact(force=True)
    assert lg.size < before


def test_compaction_keeps_committed_txn_offsets_and_open_transactions(nodes):
    """__consumer_offsets is compacted (the log's cleaner): committed transactional offsets
    survive it, and a transaction still open at the cleaning stays pending (then commits)."""
    node = node_with_topic(nodes, "t", 3, segment_bytes=2048)
    om = node.om
    g = group_on(om, 0)
    om.commit_transactional(g, PID, 0, {("t", 0): (10, -1, "committed")})
    marker(node, g, PID, commit=True)
    _fill(node, g)
    # a transaction opened now: the cleaner stops before the segment holding the LSO
    om.commit_transactional(g, PID + 1, 0, {("t", 1): (77, -1, "open")})
    _fill(node, g, 200, 50)
    _compact_shrinks(node)
    expected = {("t", 0): (10, -1, "committed"), ("t", 2): (249, -1, "m249")}
    assert om.fetch(g) == expected
    reload(node)
    assert node.om.fetch(g) == expected, "compaction changed the committed offsets"
    assert {tp: v.offset for tp, v in node.om.pending_offsets(g, PID + 1).items()} == {("t", 1): 77}
    assert marker(node, g, PID + 1, commit=True) == 1
    expected[("t", 1)] = (77, -1, "open")
    assert node.om.fetch(g) == expected
    node.lm.get_log(OFFSETS_TOPIC, 0).compact(force=True)
    reload(node)
    assert node.om.fetch(g) == expected


def test_compaction_does_not_let_an_aborted_offset_replace_a_committed_one(nodes):
    """The cleaner discards aborted transactional records (Kafka's LogCleaner): a later aborted
    offset must not replace an older committed one in the compacted log (the reload would then
    drop it as aborted and the group would lose its committed offset)."""
    node = node_with_topic(nodes, "t", 3, segment_bytes=2048)
    om = node.om
    g = group_on(om, 0)
    om.commit_transactional(g, PID, 0, {("t", 0): (10, -1, "committed")})
    marker(node, g, PID, commit=True)
    om.commit_transactional(g, PID, 0, {("t", 0): (666, -1, "aborted"), ("t", 1): (666, -1, "aborted")})
    marker(node, g, PID, commit=False)
    _fill(node, g)
    _compact_shrinks(node)
    expected = {("t", 0): (10, -1, "committed"), ("t", 2): (199, -1, "m199")}
    assert om.fetch(g) == expected
    reload(node)
    assert node.om.fetch(g) == expected, "compaction changed the committed offsets"
