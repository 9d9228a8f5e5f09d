"""The data and group APIs at a recent Kafka 3.x broker's versions, against a
real broker process with stock clients and raw frames.

OffsetFetch v7 (RequireStable, KIP-447) and v8 (several groups, KIP-709); FindCoordinator v4
(batched keys, KIP-699).  Each test reads the broker's DEBUG per-request log lines to check which
version each client actually used.
"""

from __future__ import annotations

import pytest

# ------------------------------------------------------------------------------ OffsetFetch / FindCoordinator


# ------------------------------------------------------------------------------ InitProducerId (KIP-360)


def test_kip360_epoch_transitions_unit():
    """TransactionMetadata.prepare_increment_producer_epoch with the producer's expected epoch, as
    Kafka's prepareIncrementProducerEpoch / prepareProducerIdRotation (no server needed)."""
    from pyklog.broker.coordinator.transaction.metadata import MAX_EPOCH, TransactionMetadata
    from pyklog.broker.coordinator.transaction.metadata import TxnState as S
    from pyklog.broker.errors import ProducerFencedError

    m = TransactionMetadata("tx", 42, 5, 60000, S.COMPLETE_COMMIT, (), 100, 100)
    t = m.prepare_increment_producer_epoch(60000, 1)  # a new instance: last forgotten
    assert (t.producer_epoch, t.last_producer_epoch) == (6, -1)
    m.complete_transition(t)
    t = m.prepare_increment_producer_epoch(60000, 2, expected_epoch=6)  # KIP-360 bump: last kept
    assert (t.producer_epoch, t.last_producer_epoch) == (7, 6)
    m.complete_transition(t)
    t = m.prepare_increment_producer_epoch(60000, 3, expected_epoch=6)  # its retry: unchanged
    assert (t.producer_id, t.producer_epoch, t.last_producer_epoch) == (42, 7, 6)
    m.complete_transition(t)
    with pytest.raises(ProducerFencedError):
        m.prepare_increment_producer_epoch(60000, 4, expected_epoch=3)
    assert m.pending_state is None  # a refusal leaves nothing pending
    m.producer_epoch = MAX_EPOCH - 1
    t = m.prepare_increment_producer_epoch(60000, 5, new_producer_id=99, expected_epoch=MAX_EPOCH - 1)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id, t.last_producer_epoch) == (99, 0, 42, MAX_EPOCH - 1)
    m.abort_transition()
    fresh = TransactionMetadata("new", 7, -1, 60000)
    t = fresh.prepare_increment_producer_epoch(60000, 6, expected_epoch=12)  # no epoch yet: accepted
    assert (t.producer_id, t.producer_epoch) == (7, 0)


# ------------------------------------------------------------------------------ TxnOffsetCommit v3 (KIP-447)


# ------------------------------------------------------------------------------ Fetch v13+ (topic ids), ListOffsets v7-8


# ------------------------------------------------------------------------------ CreateTopics 7, DeleteTopics 6, JoinGroup 9, LeaveGroup 5
