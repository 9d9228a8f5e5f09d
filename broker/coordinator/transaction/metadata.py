"""One transactional id's state: Kafka's ``TransactionMetadata`` / ``TransactionState`` / ``TxnTransitMetadata``.

States and Kafka's legal moves (``TransactionState.validPreviousStates``)::

    Empty              <- Empty, CompleteCommit, CompleteAbort        (InitProducerId: epoch bump)
    Ongoing            <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitionsToTxn/AddOffsetsToTxn)
    PrepareCommit      <- Ongoing                                       (EndTxn commit)
    PrepareAbort       <- Ongoing, PrepareEpochFence                    (EndTxn abort, fencing, timeout)
    CompleteCommit     <- PrepareCommit                                 (every marker written)
    CompleteAbort      <- PrepareAbort
    Dead               <- Empty, CompleteCommit, CompleteAbort          (transactional.id.expiration.ms)
    PrepareEpochFence  <- Ongoing                                       (never written: a pending state)

A change goes in two steps, as in Kafka: ``prepare_*`` (under :attr:`TransactionMetadata.lock`)
checks the move, sets :attr:`~TransactionMetadata.pending_state` and returns a
:class:`TxnTransitMetadata` (the new values, nothing changed yet); the caller writes it to
``__transaction_state``; only then :meth:`~TransactionMetadata.complete_transition` applies it in
memory (or :meth:`~TransactionMetadata.abort_transition` forgets it when the write failed).  While a
transition is pending, other requests of the id get CONCURRENT_TRANSACTIONS.

Locking: every field is read and written under :attr:`TransactionMetadata.lock` (Kafka's
``inLock(txnMetadata)``), which callers take; no network I/O is done under it.  Pure otherwise.
"""

from __future__ import annotations

import enum
import threading
from typing import NamedTuple

from pyklog.broker.common.state_machine import IllegalTransitionError, check_transition
from pyklog.broker.coordinator.transaction.log import TxnLogValue
from pyklog.broker.errors import ProducerFencedError

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Short.MaxValue: an epoch at MAX_EPOCH - 1 or beyond makes InitProducerId take a new producer id
MAX_EPOCH = 32767


class TxnState(enum.IntEnum):
    """Kafka's ``TransactionState`` with the ids written in ``TransactionLogValue.transaction_status``."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        return "".join(w.capitalize() for w in self.name.split("_"))


S = TxnState

#: state -> the states it may be entered from (Kafka's validPreviousStates)
VALID_PREVIOUS: dict[TxnState, frozenset] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_ABORT, S.COMPLETE_COMMIT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


def _kafka_name(state: TxnState) -> str:
    return state.kafka_name


PREPARE_STATES = frozenset({S.PREPARE_COMMIT, S.PREPARE_ABORT})
COMPLETE_STATES = frozenset({S.COMPLETE_COMMIT, S.COMPLETE_ABORT})
#: states in which the id holds no open transaction (may expire)
IDLE_STATES = frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT})


class TxnTransitMetadata(NamedTuple):
    """The values a transition will set (Kafka's ``TxnTransitMetadata``): written to the log first."""

    producer_id: int
    last_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TxnState
    partitions: frozenset
    txn_start_timestamp: int
    txn_last_update_timestamp: int

    def log_value(self) -> TxnLogValue:
        return TxnLogValue(
            self.producer_id,
            self.producer_epoch,
            self.txn_timeout_ms,
            int(self.state),
            tuple(sorted(self.partitions)),
            self.txn_last_update_timestamp,
            self.txn_start_timestamp,
        )


class TransactionMetadata:
    """The state of one transactional id (see the module docstring for the locking rule)."""

    __slots__ = (
        "transactional_id",
        "producer_id",
        "last_producer_id",
        "producer_epoch",
        "last_producer_epoch",
        "txn_timeout_ms",
        "state",
        "partitions",
        "txn_start_timestamp",
        "txn_last_update_timestamp",
        "pending_state",
        "lock",
    )

    def __init__(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        txn_timeout_ms: int,
        state: TxnState = S.EMPTY,
        partitions=(),
        txn_start_timestamp: int = -1,
        txn_last_update_timestamp: int = -1,
        *,
        last_producer_id: int = NO_PRODUCER_ID,
        last_producer_epoch: int = NO_PRODUCER_EPOCH,
    ):
        self.transactional_id = transactional_id
        self.producer_id = producer_id
        self.last_producer_id = last_producer_id
        self.producer_epoch = producer_epoch
        self.last_producer_epoch = last_producer_epoch
        self.txn_timeout_ms = txn_timeout_ms
        self.state = TxnState(state)
        self.partitions: set = set(partitions)
        self.txn_start_timestamp = txn_start_timestamp
        self.txn_last_update_timestamp = txn_last_update_timestamp
        self.pending_state: TxnState | None = None
        self.lock = threading.RLock()

    @classmethod
    def from_log(cls, transactional_id: str, value: TxnLogValue) -> TransactionMetadata:
        return cls(
            transactional_id,
            value.producer_id,
            value.producer_epoch,
            value.transaction_timeout_ms,
            TxnState(value.state),
            value.partitions,
            value.start_timestamp_ms,
            value.last_update_timestamp_ms,
        )

    def __repr__(self) -> str:
        return (
            f"TransactionMetadata({self.transactional_id!r}, producer_id={self.producer_id}, "
            f"epoch={self.producer_epoch}, state={self.state.kafka_name}, pending="
            f"{self.pending_state.kafka_name if self.pending_state is not None else None}, "
            f"partitions={sorted(self.partitions)}, timeout_ms={self.txn_timeout_ms})"
        )

    # ------------------------------------------------------------------ queries

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    def is_producer_epoch_exhausted(self) -> bool:
        """Kafka's ``isEpochExhausted``: no room left for one more bump plus a fencing bump."""
        return self.producer_epoch >= MAX_EPOCH - 1

    def snapshot(self) -> TxnTransitMetadata:
        return TxnTransitMetadata(
            self.producer_id,
            self.last_producer_id,
            self.producer_epoch,
            self.last_producer_epoch,
            self.txn_timeout_ms,
            self.state,
            frozenset(self.partitions),
            self.txn_start_timestamp,
            self.txn_last_update_timestamp,
        )

    # ------------------------------------------------------------------ transitions

    def _prepare(
        self,
        state: TxnState,
        *,
        producer_id=None,
        last_producer_id=None,
        producer_epoch=None,
        last_producer_epoch=None,
        txn_timeout_ms=None,
        partitions=None,
        txn_start_timestamp=None,
        now_ms: int,
    ) -> TxnTransitMetadata:
        if self.pending_state is not None:
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: preparing {state.kafka_name} while {self.pending_state.kafka_name} "
                "is pending"
            )
        check_transition(VALID_PREVIOUS, self.state, state, repr(self.transactional_id), _kafka_name)
        self.pending_state = state
        return TxnTransitMetadata(
            self.producer_id if producer_id is None else producer_id,
            self.last_producer_id if last_producer_id is None else last_producer_id,
            self.producer_epoch if producer_epoch is None else producer_epoch,
            self.last_producer_epoch if last_producer_epoch is None else last_producer_epoch,
            self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state,
            frozenset(self.partitions if partitions is None else partitions),
            self.txn_start_timestamp if txn_start_timestamp is None else txn_start_timestamp,
            now_ms,
        )

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, now_ms: int, new_producer_id=None, *, expected_epoch: int | None = None
    ) -> TxnTransitMetadata:
        """InitProducerId on an idle id: the epoch + 1 (fencing older producers), state Empty.
        ``new_producer_id`` (called when :meth:`is_producer_epoch_exhausted`): that id with epoch 0
        (Kafka's ``prepareProducerIdRotation``; with ``expected_epoch`` given the old epoch is kept as
        the last epoch, so a retry of that call is recognised).

        ``expected_epoch`` (InitProducerId v3+, KIP-360: the epoch the producer holds; None for a
        fresh producer), as Kafka's ``prepareIncrementProducerEpoch``: None bumps and forgets the
        last epoch (so no older producer can resume); the current epoch (or no epoch yet) bumps and
        keeps the current one as the last epoch; the last epoch is a retry of a bump that succeeded,
        answered with the current epoch unchanged; any other epoch raises ProducerFencedError."""
        if new_producer_id is not None:
            return self._prepare(
                S.EMPTY,
                producer_id=new_producer_id,
                last_producer_id=self.producer_id,
                producer_epoch=0,
                last_producer_epoch=self.producer_epoch if expected_epoch is not None else NO_PRODUCER_EPOCH,
                txn_timeout_ms=txn_timeout_ms,
                partitions=(),
                txn_start_timestamp=-1,
                now_ms=now_ms,
            )
        if (
            expected_epoch is not None
            and self.producer_epoch != NO_PRODUCER_EPOCH
            and expected_epoch != self.producer_epoch
        ):
            if expected_epoch == self.last_producer_epoch:  # a retry of a bump whose answer was lost
                return self._prepare(
                    S.EMPTY, txn_timeout_ms=txn_timeout_ms, partitions=(), txn_start_timestamp=-1, now_ms=now_ms
                )
            raise ProducerFencedError(
                f"{self.transactional_id!r}: producer epoch {expected_epoch} is neither the current epoch "
                f"{self.producer_epoch} nor the last one {self.last_producer_epoch}: a newer producer fenced it"
            )
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id!r}: epoch {self.producer_epoch} cannot be bumped")
        return self._prepare(
            S.EMPTY,
            producer_epoch=self.producer_epoch + 1,
            last_producer_epoch=self.producer_epoch if expected_epoch is not None else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms,
            partitions=(),
            txn_start_timestamp=-1,
            now_ms=now_ms,
        )

    def prepare_fence_producer_epoch(self, now_ms: int) -> TxnTransitMetadata:
        """An Ongoing transaction must be aborted by the coordinator (new producer, timeout): pending
        PrepareEpochFence with epoch + 1.  Never written; :meth:`prepare_abort_or_commit` follows
        with the bumped epoch (Kafka's ``prepareFenceProducerEpoch``)."""
        if self.producer_epoch >= MAX_EPOCH:
            raise IllegalTransitionError(f"{self.transactional_id!r}: epoch {self.producer_epoch} cannot be bumped")
        return self._prepare(S.PREPARE_EPOCH_FENCE, producer_epoch=self.producer_epoch + 1, now_ms=now_ms)

    def prepare_add_partitions(self, partitions, now_ms: int) -> TxnTransitMetadata:
        """AddPartitionsToTxn / AddOffsetsToTxn: state Ongoing with the union of partitions; a new
        transaction (from Empty / Complete*) starts its clock now."""
        start = now_ms if self.state in IDLE_STATES else self.txn_start_timestamp
        return self._prepare(
            S.ONGOING, partitions=set(self.partitions) | set(partitions), txn_start_timestamp=start, now_ms=now_ms
        )

    def prepare_abort_or_commit(
        self, state: TxnState, now_ms: int, *, fenced_epoch: int | None = None
    ) -> TxnTransitMetadata:
        """EndTxn: PrepareCommit or PrepareAbort.  ``fenced_epoch``: the pending PrepareEpochFence is
        replaced by PrepareAbort carrying that (bumped) epoch (Kafka clears the pending state)."""
        if fenced_epoch is not None:
            if self.pending_state != S.PREPARE_EPOCH_FENCE or state != S.PREPARE_ABORT:
                raise IllegalTransitionError(f"{self.transactional_id!r}: epoch fence without a pending fence")
            self.pending_state = None
            transit = self._prepare(
                S.PREPARE_ABORT, producer_epoch=fenced_epoch, last_producer_epoch=NO_PRODUCER_EPOCH, now_ms=now_ms
            )
            return transit
        return self._prepare(state, now_ms=now_ms)

    def prepare_complete(self, now_ms: int) -> TxnTransitMetadata:
        """Every marker is written: CompleteCommit / CompleteAbort with no partitions."""
        target = S.COMPLETE_COMMIT if self.state == S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return self._prepare(target, partitions=(), now_ms=now_ms)

    def prepare_dead(self, now_ms: int) -> TxnTransitMetadata:
        """transactional.id.expiration.ms passed: Dead (written as a tombstone)."""
        return self._prepare(S.DEAD, partitions=(), now_ms=now_ms)

    def complete_transition(self, transit: TxnTransitMetadata) -> None:
        """Apply ``transit`` once it is in the log (Kafka's ``completeTransitionTo``)."""
        if self.pending_state != transit.state:
            raise IllegalTransitionError(
                f"{self.transactional_id!r}: completing {transit.state.kafka_name} but "
                f"{self.pending_state.kafka_name if self.pending_state is not None else 'nothing'} is pending"
            )
        check_transition(VALID_PREVIOUS, self.state, transit.state, repr(self.transactional_id), _kafka_name)
        self.producer_id = transit.producer_id
        self.last_producer_id = transit.last_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.state = transit.state
        self.partitions = set(transit.partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.pending_state = None

    def abort_transition(self) -> None:
        """The write failed: forget the pending transition."""
        self.pending_state = None
