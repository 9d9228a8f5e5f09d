"""Unit checks of the coordinators' acks=all path (no processes): Kafka's error mapping and the
cache rule for commits that finish replicating out of order."""

from __future__ import annotations

from pyklog.broker.coordinator.offsets import OffsetAndMetadata, _GroupOffsets
from pyklog.broker.coordinator.partition_writer import ReplicaWait, coordinator_error_for
from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    InvalidProducerEpochError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.server.coordinator_appends import CoordinatorAppends


def test_kafka_error_mapping_of_coordinator_appends():
    for e in (
        NotEnoughReplicasError("x"),
        NotEnoughReplicasAfterAppendError("x"),
        RequestTimedOutError("x"),
        UnknownTopicOrPartitionError("x"),
    ):
        assert isinstance(coordinator_error_for(e, "commit"), CoordinatorNotAvailableError), e
    for e in (NotLeaderOrFollowerError("x"), KafkaStorageError("x")):
        assert isinstance(coordinator_error_for(e, "commit"), NotCoordinatorError), e
    fenced = InvalidProducerEpochError("x")
    assert coordinator_error_for(fenced, "commit") is fenced


def test_a_later_record_wins_whatever_order_replication_finishes():
    offs = _GroupOffsets()
    newer = OffsetAndMetadata(20, -1, "", 0)
    older = OffsetAndMetadata(10, -1, "", 0)
    offs.put_if_newer("g", ("t", 0), newer, 7)
    offs.put_if_newer("g", ("t", 0), older, 5)  # replicated after the later commit
    assert offs.cache["g"][("t", 0)].offset == 20


class _FakeReplicaManager:
    """Only what CoordinatorAppends reads: produce_status and partition (a test double of the
    replica manager's acks=all status; the real one is exercised by tests/faults/test_coordinator_replication.py)."""

    def __init__(self):
        self.status = None

    def produce_status(self, topic, partition, required, epoch):
        return self.status

    def partition(self, topic, partition):
        return None


def test_await_replicated_calls_back_once_with_the_outcome():
    rm = _FakeReplicaManager()
    appends = CoordinatorAppends(rm, timeout_ms=200)
    try:
        got = []
        appends.await_replicated(None, got.append)
        assert got == [None]  # nothing to wait for: a single replica
        w = ReplicaWait("__consumer_offsets", 0, 5, 1)
        appends.await_replicated(w, got.append)
        assert got == [None] and len(appends.purgatory) == 1
        rm.status = 0
        appends.check("__consumer_offsets", 0)
        assert got == [None, None] and len(appends.purgatory) == 0
        rm.status = None
        err = appends.wait_replicated(w, timeout_ms=100)  # never replicated: REQUEST_TIMED_OUT
        assert isinstance(err, RequestTimedOutError)
        rm.status = NotLeaderOrFollowerError("moved")
        assert isinstance(appends.wait_replicated(w), NotLeaderOrFollowerError)
    finally:
        appends.shutdown()
