"""The producer's idempotence (and, to come, transaction) state: Kafka's TransactionManager.

Kafka's producer keeps its producer id, epoch and per-partition sequence numbers in
``org.apache.kafka.clients.producer.internals.TransactionManager`` (KIP-98, "Exactly Once Delivery
and Transactional Messaging"; KIP-360 for the idempotent producer's epoch bump).  This is the same
cut: :class:`TransactionManager` owns

* the state, one of :class:`TransactionState` (Kafka's ``TransactionManager.State``), changed only
  by :meth:`TransactionManager.transition_to`, which checks the transition against
  :data:`VALID_TRANSITIONS` and raises :class:`IllegalStateError` naming both states;
* the producer id and epoch (InitProducerId), and the next sequence number of each partition;
* the rule that a numbered batch which fails for good leaves a gap the broker would answer with
  OUT_OF_ORDER_SEQUENCE_NUMBER forever: the producer then stops numbering new batches, waits until
  nothing sent under the old id is unresolved, drops the id and every sequence, and takes a new id
  (:attr:`TransactionManager.reset_pending`, Kafka's ``epochBumpRequired``).

Only the idempotent subset is used today: UNINITIALIZED -> INITIALIZING -> READY, and back to
UNINITIALIZED for a new producer id.  IN_TRANSACTION, COMMITTING_TRANSACTION, ABORTING_TRANSACTION,
ABORTABLE_ERROR and FATAL_ERROR are here, with Kafka's transitions, for KIP-98's
``init_transactions`` / ``begin`` / ``commit`` / ``abort``.

Where it runs: on the producer's sender thread (numbering, InitProducerId, resets).  Locking:
``_lock`` guards only ``state`` (a check-and-set in :meth:`transition_to`), so that user threads may
later drive transactions while the sender reads the state; producer id, epoch, sequences and
``reset_pending`` are read and written by the sender thread alone.
"""
from __future__ import annotations

import collections
import enum
import logging
import threading

from pyklog.broker.errors import PyklogError, UnknownProducerIdError, UnsupportedVersionError

log = logging.getLogger(__name__)

__all__ = ["TransactionState", "TransactionManager", "IllegalStateError", "VALID_TRANSITIONS"]


class TransactionState(enum.Enum):
    """Kafka's ``TransactionManager.State``."""

    UNINITIALIZED = "UNINITIALIZED"  # no producer id
    INITIALIZING = "INITIALIZING"  # InitProducerId under way
    READY = "READY"  # a producer id; idempotent batches are numbered under it
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"


S = TransactionState

# target state -> the states it may be entered from (Kafka's State.isTransitionValid).  FATAL_ERROR
# may be entered from any state.  One pyklog addition: INITIALIZING -> UNINITIALIZED, taken when
# InitProducerId fails (the next batch asks again, or idempotence is off on a broker without it).
VALID_TRANSITIONS: dict[TransactionState, frozenset] = {
    S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR, S.INITIALIZING}),
    S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
    S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
    S.IN_TRANSACTION: frozenset({S.READY}),
    S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
    S.ABORTABLE_ERROR: frozenset({S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR,
                                  S.INITIALIZING}),
    S.FATAL_ERROR: frozenset(TransactionState),
}


class IllegalStateError(PyklogError):
    """An operation or transition the producer's current state does not allow (Kafka's
    IllegalStateException)."""


class TransactionManager:
    """Producer id, epoch, sequences and state of one producer (see the module docstring).

    ``idempotent``: enable.idempotence after the config rules; ``explicit``: the caller set it (a
    broker without InitProducerId is then an error instead of a quiet fallback).
    Runs on the sender thread; ``transition_to`` is the only method safe from other threads."""

    def __init__(self, idempotent: bool, explicit: bool = False):
        self.idempotent = idempotent
        self._explicit = explicit
        self._lock = threading.Lock()  # guards state
        self.state = TransactionState.UNINITIALIZED
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_seq: dict[tuple, int] = collections.defaultdict(int)
        # a batch numbered under the current producer id failed for good: its sequences are a gap
        # the broker will never fill, so once nothing is in flight the producer takes a new id
        self.reset_pending = False

    # --------------------------------------------------------------------------- state
    def transition_to(self, target: TransactionState) -> None:
        """Enter ``target``; IllegalStateError (naming both states) if Kafka's state machine has
        no transition from the current state to it."""
        with self._lock:
            source = self.state
            if source not in VALID_TRANSITIONS[target]:
                raise IllegalStateError(f"producer state: invalid transition from {source.name} to "
                                        f"{target.name}")
            self.state = target
        log.debug("producer state %s -> %s", source.name, target.name)

    def has_producer_id(self) -> bool:
        return self.producer_id >= 0

    # --------------------------------------------------------------------------- producer id
    def ensure_producer_id(self, client) -> None:
        """Take a producer id with InitProducerId (``client.init_producer_id()``) unless there is
        one or idempotence is off.  A broker without InitProducerId turns idempotence off unless
        the caller asked for it; other errors propagate (the state goes back to UNINITIALIZED, so
        the next call asks again)."""
        if not self.idempotent or self.producer_id >= 0:
            return
        if self.state is not TransactionState.INITIALIZING:
            self.transition_to(TransactionState.INITIALIZING)
        try:
            pid, epoch = client.init_producer_id()
        except UnsupportedVersionError:
            self.transition_to(TransactionState.UNINITIALIZED)
            if self._explicit:
                raise
            log.info("broker has no InitProducerId: idempotence off")
            self.idempotent = False
            return
        except PyklogError as e:
            if not e.retriable:
                self.transition_to(TransactionState.UNINITIALIZED)
            raise
        self.producer_id, self.producer_epoch = pid, epoch
        self.transition_to(TransactionState.READY)
        log.debug("idempotent producer id %d epoch %d", pid, epoch)

    # --------------------------------------------------------------------------- sequences
    def sequence_number(self, tp: tuple) -> int:
        """The base sequence the next batch of partition ``tp`` gets."""
        return self._next_seq[tp]

    def assign_sequences(self, b, tp: tuple, seq: int) -> None:
        """Record that batch ``b`` of ``tp`` was encoded with base sequence ``seq`` under the
        current producer id (numbered only once encoded: a batch that cannot be encoded leaves no
        gap)."""
        b.producer_id, b.producer_epoch, b.base_sequence = self.producer_id, self.producer_epoch, seq
        self._next_seq[tp] = (seq + len(b.records)) & 0x7FFFFFFF

    def batch_failed(self, b) -> None:
        """Batch ``b`` fails for good.  If it was numbered under the current producer id its
        sequences are a gap: a new producer id is needed (:attr:`reset_pending`)."""
        if b.base_sequence >= 0 and b.producer_id >= 0 and b.producer_id == self.producer_id \
                and not self.reset_pending:
            log.info("idempotent batch %s-%d (sequences %d..) failed: new producer id once the requests "
                     "in flight are answered", b.topic, b.partition, b.base_sequence)
            self.reset_pending = True

    def batch_rejected(self, b, exc: PyklogError) -> bool:
        """The broker answered numbered batch ``b`` with OUT_OF_ORDER_SEQUENCE_NUMBER or
        UNKNOWN_PRODUCER_ID.  True if it is known not to be in the log (the broker forgot the id,
        or an earlier batch of this id failed for good): its numbering is dropped and it is sent
        again under the next producer id."""
        if isinstance(exc, UnknownProducerIdError) or self.reset_pending \
                or b.producer_id != self.producer_id:
            if b.producer_id == self.producer_id:
                self.reset_pending = True
            b.reset_numbering()
            return True
        return False

    def maybe_reset_producer_id(self, in_flight: bool, queues) -> bool:
        """After a numbered batch failed (:attr:`reset_pending`): once no request is in flight
        (``in_flight`` False) and no queued batch (``queues``: per-partition deques in sequence
        order) still needs resending under the old producer id, drop the id and every partition's
        sequence (Kafka's epoch bump); the queued batches are numbered again under the new id, in
        order.  Returns True while the reset is still pending."""
        if not self.reset_pending:
            return False
        if in_flight:
            return True
        for q in queues:
            for b in q:  # in sequence order
                if b.data is None:
                    break  # rejected (or never sent): the broker cannot have appended what follows
                if b.attempts > 0 and b.producer_id == self.producer_id:
                    return True  # sent and unresolved: may be in the log, resend it as it was
        for q in queues:
            for b in q:
                b.reset_numbering()
        log.info("idempotent producer: dropping producer id %d after a failed batch; sequences restart "
                 "at 0 under a new id", self.producer_id)
        if self.state is TransactionState.READY:
            self.transition_to(TransactionState.UNINITIALIZED)
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_seq.clear()
        self.reset_pending = False
        return False
