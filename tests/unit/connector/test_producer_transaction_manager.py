"""TransactionManager: the producer's state machine and idempotent numbering (pure, no server).

The expected transitions are written out here from Kafka's ``TransactionManager.State``
(``isTransitionValid``), independently of the table in the module, so a wrong entry there fails.
"""

from __future__ import annotations

import collections
import itertools

import pytest

from pyklog.broker.errors import (
    OutOfOrderSequenceError,
    PyklogError,
    UnknownProducerIdError,
)
from pyklog.connector.producer.accumulator import ProducerBatch
from pyklog.connector.producer.transaction_manager import (
    IllegalStateError,
    TransactionManager,
    TransactionState,
)

S = TransactionState
ALL = list(TransactionState)

# (source, target) pairs Kafka allows; FATAL_ERROR may be entered from anywhere
KAFKA_VALID = {
    (S.READY, S.UNINITIALIZED),
    (S.ABORTABLE_ERROR, S.UNINITIALIZED),
    (S.UNINITIALIZED, S.INITIALIZING),
    (S.ABORTING_TRANSACTION, S.INITIALIZING),
    (S.INITIALIZING, S.READY),
    (S.COMMITTING_TRANSACTION, S.READY),
    (S.ABORTING_TRANSACTION, S.READY),
    (S.READY, S.IN_TRANSACTION),
    (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTING_TRANSACTION),
    (S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION),
    (S.IN_TRANSACTION, S.ABORTABLE_ERROR),
    (S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR),
    (S.ABORTABLE_ERROR, S.ABORTABLE_ERROR),
    (S.INITIALIZING, S.ABORTABLE_ERROR),
} | {(s, S.FATAL_ERROR) for s in ALL}
# pyklog's additions: a failed InitProducerId leaves the producer uninitialized; KIP-939's prepared
# state, entered from IN_TRANSACTION, left only when a record fails during its flush (or fatally)
PYKLOG_VALID = KAFKA_VALID | {
    (S.INITIALIZING, S.UNINITIALIZED),
    (S.IN_TRANSACTION, S.PREPARED_TRANSACTION),
    (S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR),
}


def _in_state(state: TransactionState) -> TransactionManager:
    tm = TransactionManager(idempotent=True)
    tm.state = state  # set directly: the test is about the transition out of it
    return tm


def test_starts_uninitialized_without_producer_id():
    tm = TransactionManager(idempotent=True)
    assert tm.state is S.UNINITIALIZED
    assert not tm.has_producer_id() and tm.producer_epoch == -1 and not tm.reset_pending


@pytest.mark.parametrize("source,target", list(itertools.product(ALL, ALL)), ids=lambda s: s.name)
def test_every_transition_is_checked(source, target):
    tm = _in_state(source)
    if (source, target) in PYKLOG_VALID:
        tm.transition_to(target)
        assert tm.state is target
    else:
        with pytest.raises(IllegalStateError) as ei:
            tm.transition_to(target)
        msg = str(ei.value)
        assert f"from {source.name} to {target.name}" in msg, msg
        assert tm.state is source  # unchanged


def test_illegal_state_error_is_a_pyklog_error():
    tm = TransactionManager(idempotent=True)
    with pytest.raises(PyklogError):
        tm.transition_to(S.COMMITTING_TRANSACTION)


def test_idempotent_lifecycle_and_transaction_paths():
    tm = TransactionManager(idempotent=True)
    for s in (
        S.INITIALIZING,
        S.READY,
        S.UNINITIALIZED,
        S.INITIALIZING,
        S.READY,  # new producer id
        S.IN_TRANSACTION,
        S.COMMITTING_TRANSACTION,
        S.READY,
        S.IN_TRANSACTION,
        S.ABORTABLE_ERROR,
        S.ABORTING_TRANSACTION,
        S.READY,
        S.FATAL_ERROR,
    ):
        tm.transition_to(s)
    assert tm.state is S.FATAL_ERROR
    with pytest.raises(IllegalStateError, match="FATAL_ERROR to READY"):
        tm.transition_to(S.READY)


def _batch(tp, n, bid):
    b = ProducerBatch(tp[0], tp[1], 0.0)
    b.records = [(None, b"v", 0, ())] * n
    b.bid = bid
    return b


def _ready(pid=7, epoch=0) -> TransactionManager:
    tm = TransactionManager(idempotent=True)
    tm.transition_to(S.INITIALIZING)
    tm.producer_id, tm.producer_epoch = pid, epoch
    tm.transition_to(S.READY)
    return tm


def test_sequences_per_partition_and_wraparound():
    tm = _ready()
    a, b = ("t", 0), ("t", 1)
    for tp, n, want in ((a, 3, 0), (a, 2, 3), (b, 4, 0), (a, 1, 5)):
        batch = _batch(tp, n, 0)
        seq = tm.sequence_number(tp)
        assert seq == want
        tm.assign_sequences(batch, tp, seq)
        assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 0, want)
    assert tm.sequence_number(a) == 6 and tm.sequence_number(b) == 4
    tm._next_seq[a] = 0x7FFFFFFF - 1  # Kafka's sequence wraps from Integer.MAX_VALUE to 0
    batch = _batch(a, 3, 0)
    tm.assign_sequences(batch, a, tm.sequence_number(a))
    assert tm.sequence_number(a) == 1


def test_failed_numbered_batch_resets_producer_id_once_nothing_is_unresolved():
    tm = _ready(pid=7)
    tp = ("t", 0)
    sent = []
    for i, n in enumerate((2, 2, 2)):
        b = _batch(tp, n, i + 1)
        tm.assign_sequences(b, tp, tm.sequence_number(tp))
        b.data, b.attempts = b"x", 1
        sent.append(b)
    unsent = _batch(tp, 1, 4)  # queued, never built
    tm.batch_failed(_batch(tp, 1, 0))  # never numbered: no gap, no reset
    assert not tm.reset_pending
    tm.batch_failed(sent[0])  # numbered under pid 7 and failed for good: a gap
    assert tm.reset_pending and tm.state is S.READY
    # the later two were sent under pid 7 and are unresolved: they may be in the log
    queue = collections.deque([sent[1], sent[2], unsent])
    assert tm.maybe_reset_producer_id(False, [queue]) is True
    assert tm.maybe_reset_producer_id(True, []) is True  # a request in flight
    # the broker rejects both as out of order behind the gap: not in the log
    assert tm.batch_rejected(sent[1], OutOfOrderSequenceError("x")) is True
    assert tm.batch_rejected(sent[2], OutOfOrderSequenceError("x")) is True
    assert sent[1].data is None and sent[1].base_sequence == -1 and sent[1].producer_id == -1
    assert tm.maybe_reset_producer_id(False, [queue]) is False
    assert not tm.reset_pending and tm.state is S.UNINITIALIZED
    assert tm.producer_id == -1 and tm.producer_epoch == -1 and tm.sequence_number(tp) == 0
    assert all(b.base_sequence == -1 and b.data is None for b in queue)


def test_out_of_order_behind_a_live_batch_is_not_a_rejection():
    tm = _ready(pid=7)
    tp = ("t", 0)
    b = _batch(tp, 1, 1)
    tm.assign_sequences(b, tp, 0)
    b.data = b"x"
    # same producer id, no reset pending: an earlier batch is being retried; keep the numbering
    assert tm.batch_rejected(b, OutOfOrderSequenceError("x")) is False
    assert b.base_sequence == 0 and b.data == b"x" and not tm.reset_pending
    # the broker forgot the producer id: not in the log, renumber under a new id
    assert tm.batch_rejected(b, UnknownProducerIdError("x")) is True
    assert tm.reset_pending and b.base_sequence == -1


def test_batch_of_an_older_producer_id_does_not_request_another_reset():
    tm = _ready(pid=8)
    tp = ("t", 0)
    old = _batch(tp, 1, 1)
    old.producer_id, old.base_sequence, old.data = 7, 0, b"x"
    assert tm.batch_rejected(old, OutOfOrderSequenceError("x")) is True
    assert not tm.reset_pending and old.base_sequence == -1
    tm.batch_failed(old)
    assert not tm.reset_pending


# ------------------------------------------------------------------ transactional error handling


def _txn_in(state):
    from pyklog.connector.producer.transaction_manager import TransactionManager as TM

    tm = TM(idempotent=True, transactional_id="tx", transaction_timeout_ms=1000)
    tm.state = state
    tm.producer_id, tm.producer_epoch = 3, 1
    return tm


@pytest.mark.parametrize("state", [S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.PREPARED_TRANSACTION])
def test_a_failed_record_makes_the_transaction_abortable_and_fencing_fatal(state):
    from pyklog.broker.errors import (
        InvalidProducerEpochError,
        MessageTooLargeError,
        ProducerFencedError,
    )

    tm = _txn_in(state)
    b = _batch(("t", 0), 2, 5)
    tm.assign_sequences(b, ("t", 0), 0)
    tm.batch_failed(b, MessageTooLargeError("too large"))
    assert tm.state is S.ABORTABLE_ERROR and tm.reset_pending  # the gap needs a new epoch after the abort
    assert tm.unsent_failure()[0] == float("inf")
    with pytest.raises(PyklogError, match="abort_transaction"):
        tm.check_can_send()
    # INVALID_PRODUCER_EPOCH from a Produce is a fencing: fatal, named so
    err = tm.record_error(InvalidProducerEpochError("old epoch"), "Produce")
    assert isinstance(err, ProducerFencedError) and tm.state is S.FATAL_ERROR
    assert "newer epoch" in str(err)


def test_fenced_after_the_timeout_is_named_a_timeout():
    import time as _time

    from pyklog.broker.errors import ProducerFencedError
    from pyklog.connector.producer.transaction_manager import TransactionTimedOutError

    tm = _txn_in(S.IN_TRANSACTION)
    tm.txn_began_at = _time.monotonic() - 2.5
    err = tm.record_error(ProducerFencedError("fenced"), "EndTxn")
    assert isinstance(err, TransactionTimedOutError) and isinstance(err, ProducerFencedError)
    assert "transaction.timeout.ms=1000" in str(err) and "open for 2.5s" in str(err)
    tm2 = _txn_in(S.IN_TRANSACTION)
    tm2.txn_began_at = _time.monotonic()
    assert type(tm2.record_error(ProducerFencedError("fenced"), "EndTxn")) is ProducerFencedError


def test_abort_fails_only_batches_of_the_aborted_transaction():
    tm = _txn_in(S.IN_TRANSACTION)
    tm.begin_abort(last_batch_id=7)
    bound, err = tm.unsent_failure()
    assert bound == 7 and "aborted" in str(err) and tm.state is S.ABORTING_TRANSACTION
    assert not tm.may_send()
