"""The transaction state machine (Kafka's TransactionMetadata / TransactionState): legal moves, the
two-step transition (prepare -> written -> complete), epoch bumps and exhaustion.  Pure."""

from __future__ import annotations

import itertools

import pytest

from pyklog.broker.coordinator.transaction.log import decode_value, encode_value
from pyklog.broker.coordinator.transaction.metadata import (
    MAX_EPOCH,
    VALID_PREVIOUS,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
)

S = TxnState

# Kafka's TransactionState.validPreviousStates, written out once more by hand
KAFKA_LEGAL = {
    (S.EMPTY, S.EMPTY),
    (S.COMPLETE_COMMIT, S.EMPTY),
    (S.COMPLETE_ABORT, S.EMPTY),
    (S.ONGOING, S.ONGOING),
    (S.EMPTY, S.ONGOING),
    (S.COMPLETE_COMMIT, S.ONGOING),
    (S.COMPLETE_ABORT, S.ONGOING),
    (S.ONGOING, S.PREPARE_COMMIT),
    (S.ONGOING, S.PREPARE_ABORT),
    (S.PREPARE_EPOCH_FENCE, S.PREPARE_ABORT),
    (S.PREPARE_COMMIT, S.COMPLETE_COMMIT),
    (S.PREPARE_ABORT, S.COMPLETE_ABORT),
    (S.EMPTY, S.DEAD),
    (S.COMPLETE_COMMIT, S.DEAD),
    (S.COMPLETE_ABORT, S.DEAD),
    (S.ONGOING, S.PREPARE_EPOCH_FENCE),
}


def md(state=S.EMPTY, epoch=0, partitions=()):
    return TransactionMetadata("tx", 42, epoch, 60000, state, partitions, 100, 100)


def test_transition_table_is_kafkas():
    table = {(prev, nxt) for nxt, prevs in VALID_PREVIOUS.items() for prev in prevs}
    assert table == KAFKA_LEGAL
    assert [s.value for s in S] == list(range(8))  # ids written in transaction_status


@pytest.mark.parametrize("prev, nxt", list(itertools.product(S, S)))
def test_complete_transition_refuses_illegal_moves(prev, nxt):
    m = md(prev)
    transit = m.snapshot()._replace(state=nxt)
    m.pending_state = nxt
    if (prev, nxt) in KAFKA_LEGAL:
        m.complete_transition(transit)
        assert m.state == nxt and m.pending_state is None
    else:
        with pytest.raises(IllegalTransitionError, match="not a legal move"):
            m.complete_transition(transit)
        assert m.state == prev


def test_prepare_changes_nothing_until_completed():
    m = md(S.EMPTY, epoch=3)
    t = m.prepare_add_partitions({("t", 0)}, now_ms=500)
    assert (m.state, m.partitions, m.pending_state) == (S.EMPTY, set(), S.ONGOING)
    assert t.state == S.ONGOING and t.partitions == {("t", 0)} and t.txn_start_timestamp == 500
    with pytest.raises(IllegalTransitionError, match="pending"):
        m.prepare_add_partitions({("t", 1)}, now_ms=501)  # one transition at a time
    m.abort_transition()  # the write failed
    assert m.pending_state is None and m.state == S.EMPTY
    m.complete_transition(m.prepare_add_partitions({("t", 0)}, now_ms=600))
    assert m.state == S.ONGOING and m.txn_start_timestamp == 600
    m.complete_transition(m.prepare_add_partitions({("u", 1)}, now_ms=700))
    assert m.partitions == {("t", 0), ("u", 1)} and m.txn_start_timestamp == 600  # same transaction


def test_commit_path_and_log_value_round_trip():
    m = md(S.EMPTY, epoch=1)
    for step in (
        lambda: m.prepare_add_partitions({("t", 0), ("t", 1)}, 10),
        lambda: m.prepare_abort_or_commit(S.PREPARE_COMMIT, 20),
    ):
        t = step()
        value = t.log_value()
        assert decode_value(encode_value(value)) == value
        m.complete_transition(t)
    assert m.state == S.PREPARE_COMMIT and m.partitions == {("t", 0), ("t", 1)}
    done = m.prepare_complete(30)
    assert done.state == S.COMPLETE_COMMIT and done.partitions == frozenset()
    m.complete_transition(done)
    assert m.state == S.COMPLETE_COMMIT and m.producer_epoch == 1 and m.txn_last_update_timestamp == 30


def test_epoch_fence_then_abort_carries_the_bumped_epoch():
    m = md(S.ONGOING, epoch=4, partitions={("t", 0)})
    fence = m.prepare_fence_producer_epoch(50)
    assert fence.producer_epoch == 5 and m.pending_state == S.PREPARE_EPOCH_FENCE and m.producer_epoch == 4
    with pytest.raises(IllegalTransitionError):
        m.prepare_abort_or_commit(S.PREPARE_COMMIT, 51, fenced_epoch=5)
    abort = m.prepare_abort_or_commit(S.PREPARE_ABORT, 51, fenced_epoch=5)
    assert abort.state == S.PREPARE_ABORT and abort.producer_epoch == 5 and abort.partitions == {("t", 0)}
    m.complete_transition(abort)
    assert (m.state, m.producer_epoch) == (S.PREPARE_ABORT, 5)


def test_init_producer_id_bumps_epoch_and_rotates_when_exhausted():
    m = md(S.COMPLETE_ABORT, epoch=7)
    t = m.prepare_increment_producer_epoch(30000, 60)
    assert (t.state, t.producer_id, t.producer_epoch, t.txn_timeout_ms, t.partitions) == (
        S.EMPTY,
        42,
        8,
        30000,
        frozenset(),
    )
    m.complete_transition(t)
    m.producer_epoch = MAX_EPOCH - 1
    assert m.is_producer_epoch_exhausted()
    t = m.prepare_increment_producer_epoch(30000, 70, new_producer_id=99)
    assert (t.producer_id, t.producer_epoch, t.last_producer_id) == (99, 0, 42)
    m.complete_transition(t)
    assert (m.producer_id, m.producer_epoch) == (99, 0)
    m.producer_epoch = MAX_EPOCH
    with pytest.raises(IllegalTransitionError, match="cannot be bumped"):
        m.prepare_increment_producer_epoch(30000, 80)


def test_new_id_starts_at_epoch_zero():
    m = TransactionMetadata("fresh", 5, -1, 60000)
    m.complete_transition(m.prepare_increment_producer_epoch(60000, 1))
    assert (m.producer_id, m.producer_epoch, m.state) == (5, 0, S.EMPTY)


def test_dead_only_from_idle_states():
    for state in S:
        m = md(state)
        if state in (S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT):
            assert m.prepare_dead(1).state == S.DEAD
        else:
            with pytest.raises(IllegalTransitionError):
                m.prepare_dead(1)
