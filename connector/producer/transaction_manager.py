"""The producer's idempotence and transaction state: Kafka's TransactionManager.

Kafka's producer keeps its producer id, epoch, per-partition sequence numbers and transactions in
``org.apache.kafka.clients.producer.internals.TransactionManager`` (KIP-98, "Exactly Once Delivery
and Transactional Messaging"; KIP-360 for the idempotent producer's epoch bump).  This is the same
cut: :class:`TransactionManager` owns

* the state, one of :class:`TransactionState` (Kafka's ``TransactionManager.State``, plus
  PREPARED_TRANSACTION in the spirit of KIP-939), changed only by
  :meth:`TransactionManager.transition_to`, which checks the transition against
  :data:`VALID_PREVIOUS` (each state with the states it may be entered from) and raises
  :class:`IllegalStateTransitionError` (an :class:`IllegalStateError`) naming both states;
* the producer id and epoch (InitProducerId), and the next sequence number of each partition;
* the rule that a numbered batch which fails for good leaves a gap the broker would answer with
  OUT_OF_ORDER_SEQUENCE_NUMBER forever: the idempotent producer then stops numbering new batches,
  waits until nothing sent under the old id is unresolved, drops the id and every sequence, and
  takes a new id (:attr:`TransactionManager.reset_pending`, Kafka's ``epochBumpRequired``); a
  transactional producer instead aborts the transaction and takes a new epoch with InitProducerId;
* with ``transactional.id``: the transaction coordinator (FindCoordinator key_type 1), the
  partitions added to the open transaction (AddPartitionsToTxn, sent by the sender thread before a
  partition's first batch), the requests that end it (AddOffsetsToTxn, TxnOffsetCommit, EndTxn),
  and the last error of the ABORTABLE_ERROR and FATAL_ERROR states.

Transactional state machine (Kafka's)::

    UNINITIALIZED -init_transactions-> INITIALIZING -> READY -begin-> IN_TRANSACTION
    IN_TRANSACTION -commit-> COMMITTING_TRANSACTION -> READY
    IN_TRANSACTION | ABORTABLE_ERROR -abort-> ABORTING_TRANSACTION -> READY (or INITIALIZING: new epoch)
    IN_TRANSACTION | COMMITTING | PREPARED -a record failed-> ABORTABLE_ERROR
    IN_TRANSACTION -prepare-> PREPARED_TRANSACTION (final for this producer: complete_transaction())
    any -fenced, unsupported, ...-> FATAL_ERROR (final: close the producer)

Where it runs: numbering, AddPartitionsToTxn and batch failures on the producer's sender thread;
InitProducerId, AddOffsetsToTxn, TxnOffsetCommit and EndTxn on the user thread that calls
``init_transactions`` / ``send_offsets_to_transaction`` / ``commit_transaction`` /
``abort_transaction``.  Locking: ``_lock`` guards ``state``, ``last_error`` and ``fail_bound`` (a
check-and-set in :meth:`transition_to`); the producer id and epoch are written by the user thread
only while no batch can be sent (INITIALIZING) and by the sender thread only for the idempotent
producer; ``partitions_in_txn`` and ``transaction_started`` are written by the sender thread
(AddPartitionsToTxn) and by the user thread (AddOffsetsToTxn, the end of a transaction) at
moments the other does not touch them (the user thread ends a transaction only after a flush).
"""

from __future__ import annotations

import collections
import enum
import logging
import math
import threading
import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from pyklog.broker.common import state_machine
from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    InvalidProducerEpochError,
    InvalidTxnStateError,
    ProducerFencedError,
    PyklogError,
    RequestTimedOutError,
    TransactionalIdAuthorizationFailedError,
    UnknownProducerIdError,
    UnsupportedVersionError,
    error_for_code,
)
from pyklog.broker.protocol import ApiKey

log = logging.getLogger(__name__)

__all__ = [
    "TransactionState",
    "TransactionManager",
    "IllegalStateError",
    "IllegalStateTransitionError",
    "VALID_PREVIOUS",
    "PreparedTransaction",
    "TransactionAbortedError",
    "TransactionAbortableError",
    "TransactionTimedOutError",
    "end_txn",
]


class TransactionState(enum.Enum):
    """Kafka's ``TransactionManager.State`` (and KIP-939's PREPARED_TRANSACTION)."""

    UNINITIALIZED = "UNINITIALIZED"  # no producer id
    INITIALIZING = "INITIALIZING"  # InitProducerId under way
    READY = "READY"  # a producer id; idempotent batches are numbered under it
    IN_TRANSACTION = "IN_TRANSACTION"
    COMMITTING_TRANSACTION = "COMMITTING_TRANSACTION"
    ABORTING_TRANSACTION = "ABORTING_TRANSACTION"
    ABORTABLE_ERROR = "ABORTABLE_ERROR"
    FATAL_ERROR = "FATAL_ERROR"
    PREPARED_TRANSACTION = "PREPARED_TRANSACTION"  # flushed, left open for complete_transaction()


S = TransactionState

# target state -> the states it may be entered from (Kafka's State.isTransitionValid).  FATAL_ERROR
# may be entered from any state.  pyklog's additions: INITIALIZING -> UNINITIALIZED, taken when
# InitProducerId fails (the next batch asks again, or idempotence is off on a broker without it);
# and PREPARED_TRANSACTION (entered from IN_TRANSACTION by prepare_transaction(); a record that
# fails while it flushes leads to ABORTABLE_ERROR; nothing else leaves it but FATAL_ERROR).
VALID_PREVIOUS: Mapping[TransactionState, frozenset] = MappingProxyType(
    {
        S.UNINITIALIZED: frozenset({S.READY, S.ABORTABLE_ERROR, S.INITIALIZING}),
        S.INITIALIZING: frozenset({S.UNINITIALIZED, S.ABORTING_TRANSACTION}),
        S.READY: frozenset({S.INITIALIZING, S.COMMITTING_TRANSACTION, S.ABORTING_TRANSACTION}),
        S.IN_TRANSACTION: frozenset({S.READY}),
        S.COMMITTING_TRANSACTION: frozenset({S.IN_TRANSACTION}),
        S.ABORTING_TRANSACTION: frozenset({S.IN_TRANSACTION, S.ABORTABLE_ERROR}),
        S.ABORTABLE_ERROR: frozenset(
            {S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.ABORTABLE_ERROR, S.INITIALIZING, S.PREPARED_TRANSACTION}
        ),
        S.FATAL_ERROR: frozenset(TransactionState),
        S.PREPARED_TRANSACTION: frozenset({S.IN_TRANSACTION}),
    }
)


class IllegalStateError(PyklogError):
    """An operation or transition the producer's current state does not allow (Kafka's
    IllegalStateException)."""


class IllegalStateTransitionError(IllegalStateError, state_machine.IllegalTransitionError):
    """A transition :data:`VALID_PREVIOUS` does not allow: an :class:`IllegalStateError` as before,
    and the project's one :class:`pyklog.broker.common.state_machine.IllegalTransitionError`."""

    @classmethod
    def between(cls, source: TransactionState, target: TransactionState) -> IllegalStateTransitionError:
        """The error for ``source -> target``, naming both states."""
        return cls(f"producer state: invalid transition from {source.name} to {target.name}")


class TransactionAbortedError(PyklogError):
    """A record was not sent because its transaction was aborted, or is to be aborted after
    another record failed (Kafka's TransactionAbortedException)."""


class TransactionAbortableError(PyklogError):
    """The open transaction cannot commit: a record or request of it failed (the error is the
    ``__cause__``).  The producer is in ABORTABLE_ERROR: call ``abort_transaction()``, then begin
    a new transaction."""


class TransactionTimedOutError(ProducerFencedError):
    """The transaction coordinator aborted the transaction because it stayed open longer than
    ``transaction.timeout.ms`` (it bumped the producer epoch, so this producer is fenced: fatal,
    close it and create a new producer with the same transactional.id)."""


class PreparedTransaction(NamedTuple):
    """A transaction flushed by ``Producer.prepare_transaction()`` and left open, to be ended by
    :func:`~pyklog.connector.producer.complete_transaction` from any process.  Picklable.
    ``producer_id`` -1: the transaction had no records and no offsets (nothing to complete)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int


# Errors a transactional request is retried after (with backoff, within the caller's timeout).
# NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE / network errors also drop the cached coordinator
# (ClusterClient.coordinator_attempt).
_FENCED_CODES = frozenset({InvalidProducerEpochError.code, ProducerFencedError.code})


def _fenced(what: str, transactional_id: str, detail: str = "") -> ProducerFencedError:
    return ProducerFencedError(
        f"PRODUCER_FENCED: {what}: the coordinator holds a newer epoch of transactional.id={transactional_id!r}: "
        f"another producer with this transactional.id initialised, or the coordinator aborted the transaction "
        f"because it stayed open longer than transaction.timeout.ms; the transaction is aborted and this "
        f"producer is fenced (close it){detail}"
    )


def _error(code: int, what: str, transactional_id: str, message: str = "") -> PyklogError:
    """The exception for a transactional request's error ``code``, with a message that says what
    happened."""
    if code in _FENCED_CODES:
        return _fenced(what, transactional_id)
    if code == TransactionalIdAuthorizationFailedError.code:
        return TransactionalIdAuthorizationFailedError(
            f"TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53): {what} for transactional.id={transactional_id!r}: "
            f"{message or 'not authorized'} (a broker without a transaction coordinator answers so)"
        )
    name = error_for_code(code).name
    return error_for_code(
        code, f"{name} ({code}): {what} for transactional.id={transactional_id!r}" + (f": {message}" if message else "")
    )


def _unsupported(e: UnsupportedVersionError, what: str) -> UnsupportedVersionError:
    return UnsupportedVersionError(
        f"UNSUPPORTED_VERSION: {what}: the broker does not support transactions (KIP-98 requests): {e}"
    )


def coordinator_request(
    client,
    transactional_id: str,
    api_key: int,
    body: dict,
    what: str,
    check,
    deadline: Deadline,
    backoff_s: float,
    *,
    key: str | None = None,
    key_type: int = 1,
):
    """Send ``body`` (``api_key``) to the coordinator of ``key`` (default: the transaction
    coordinator of ``transactional_id``), retrying retriable errors (CONCURRENT_TRANSACTIONS,
    COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, network errors)
    with backoff until ``deadline``; ``check(resp)`` raises the response's error, if any.
    A broker without the API raises UnsupportedVersionError at once.  Runs in the caller's thread."""
    k = transactional_id if key is None else key

    def call(node, conn):
        try:
            version = conn.version_for(api_key)
        except UnsupportedVersionError as e:
            raise _unsupported(e, what) from None
        return check(conn.request(api_key, body, version))

    def attempt():
        try:
            return client.coordinator_attempt(k, call, key_type)
        except UnsupportedVersionError as e:
            if "does not support transactions" in str(e):
                raise
            raise _unsupported(e, what) from None

    backoff = Backoff(backoff_s, multiplier=2.0, max_s=max(1.0, backoff_s), jitter=0.2)
    try:
        return retry(
            attempt,
            deadline=deadline,
            backoff=backoff,
            what=what,
            raise_last=True,
            on_retry=lambda e, n, d: log.debug("%s: retrying in %.3fs after %s", what, d, e),
        )
    except PyklogError as e:
        if e.retriable:
            raise RequestTimedOutError(
                f"REQUEST_TIMED_OUT: {what} did not complete within the timeout "
                f"({deadline.elapsed():.1f}s); last error: {e}"
            ) from e
        raise


# --------------------------------------------------------------------------- request bodies
def init_producer_id_body(transactional_id: str, transaction_timeout_ms: int) -> dict:
    """InitProducerId v0-1 with a transactional id (fences older producers of the id)."""
    return {
        "transactional_id": transactional_id,
        "transaction_timeout_ms": int(transaction_timeout_ms),
        "producer_id": -1,
        "producer_epoch": -1,
    }


def add_partitions_body(transactional_id: str, pid: int, epoch: int, tps) -> dict:
    """AddPartitionsToTxn v0-2: every partition of one drain in one request, grouped by topic."""
    topics: dict = {}
    for t, p in sorted(tps):
        topics.setdefault(t, []).append(int(p))
    return {
        "v3_and_below_transactional_id": transactional_id,
        "v3_and_below_producer_id": pid,
        "v3_and_below_producer_epoch": epoch,
        "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def add_partitions_errors(resp: dict) -> dict:
    """AddPartitionsToTxn response -> ``{(topic, partition): error code}``."""
    out = {}
    for t in resp.get("results_by_topic_v3_and_below") or []:
        for p in t.get("results_by_partition") or []:
            out[(t["name"], int(p["partition_index"]))] = int(p.get("partition_error_code", 0))
    return out


def add_offsets_body(transactional_id: str, pid: int, epoch: int, group_id: str) -> dict:
    return {"transactional_id": transactional_id, "producer_id": pid, "producer_epoch": epoch, "group_id": group_id}


def txn_offset_commit_body(transactional_id: str, group_id: str, pid: int, epoch: int, offsets: dict) -> dict:
    """TxnOffsetCommit v0-2: ``offsets`` ``{(topic, partition): offset}``."""
    topics: dict = {}
    for (t, p), off in sorted(offsets.items()):
        topics.setdefault(t, []).append(
            {
                "partition_index": int(p),
                "committed_offset": int(off),
                "committed_leader_epoch": -1,
                "committed_metadata": "",
            }
        )
    return {
        "transactional_id": transactional_id,
        "group_id": group_id,
        "producer_id": pid,
        "producer_epoch": epoch,
        "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
    }


def end_txn_body(transactional_id: str, pid: int, epoch: int, commit: bool) -> dict:
    return {
        "transactional_id": transactional_id,
        "producer_id": pid,
        "producer_epoch": epoch,
        "committed": bool(commit),
    }


def end_txn(
    client, transactional_id: str, pid: int, epoch: int, commit: bool, deadline: Deadline, backoff_s: float = 0.1
) -> None:
    """EndTxn(commit or abort) to the transaction coordinator, retried while retriable.  Kafka's
    coordinator answers a retried EndTxn of a transaction already completed with the same result
    with NONE; PRODUCER_FENCED / INVALID_PRODUCER_EPOCH (a newer epoch: another producer
    initialised, or the coordinator aborted the transaction after transaction.timeout.ms) raise
    ProducerFencedError; INVALID_TXN_STATE (nothing to end, or it ended the other way) raises
    InvalidTxnStateError.  Caller's thread."""
    result = "commit" if commit else "abort"
    what = f"EndTxn({result}) producer id {pid} epoch {epoch}"

    def check(resp):
        code = int(resp.get("error_code", 0))
        if code == InvalidTxnStateError.code:
            raise InvalidTxnStateError(
                f"INVALID_TXN_STATE (48): {what} for transactional.id={transactional_id!r}: the coordinator has "
                f"no open transaction of this producer to {result} (it was never started, or already completed "
                f"the other way, e.g. aborted by a timeout)"
            )
        if code:
            raise _error(code, what, transactional_id)
        return resp

    coordinator_request(
        client,
        transactional_id,
        ApiKey.END_TXN,
        end_txn_body(transactional_id, pid, epoch, commit),
        what,
        check,
        deadline,
        backoff_s,
    )


class TransactionManager:
    """Producer id, epoch, sequences, state and transaction of one producer (see the module
    docstring).

    ``idempotent``: enable.idempotence after the config rules; ``explicit``: the caller set it (a
    broker without InitProducerId is then an error instead of a quiet fallback).
    ``transactional_id``: the producer's transactional.id (None: not transactional),
    ``transaction_timeout_ms``: transaction.timeout.ms sent with InitProducerId.
    Thread rules: see the module docstring; ``transition_to`` and the ``check_*`` methods are safe
    from any thread."""

    def __init__(
        self,
        idempotent: bool,
        explicit: bool = False,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        retry_backoff_s: float = 0.1,
    ):
        self.idempotent = idempotent or transactional_id is not None
        self._explicit = explicit or transactional_id is not None
        self.transactional_id = transactional_id
        self.transactional = transactional_id is not None
        self.transaction_timeout_ms = int(transaction_timeout_ms)
        self.retry_backoff_s = retry_backoff_s
        self._lock = threading.Lock()  # guards state, last_error, fail_bound
        self.state = TransactionState.UNINITIALIZED
        self.last_error: PyklogError | None = None  # why ABORTABLE_ERROR / FATAL_ERROR
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_seq: dict[tuple, int] = collections.defaultdict(int)
        # a batch numbered under the current producer id failed for good: its sequences are a gap
        # the broker will never fill, so once nothing is in flight the producer takes a new id
        self.reset_pending = False
        # the open transaction (transactional producers only)
        self.partitions_in_txn: set = set()  # added with AddPartitionsToTxn (sender thread)
        self.transaction_started = False  # a partition or offsets were added: EndTxn is needed
        self.txn_began_at = 0.0  # time.monotonic() at begin_transaction
        self.add_partitions_retry_at = 0.0  # sender thread: backoff of AddPartitionsToTxn
        # batches with an id <= fail_bound that are not yet sent are failed by the sender (abort,
        # abortable and fatal errors): batches of a later transaction have larger ids
        self.fail_bound = -1
        self.prepared: PreparedTransaction | None = None

    # --------------------------------------------------------------------------- state
    def transition_to(self, target: TransactionState) -> None:
        """Enter ``target``; IllegalStateError (naming both states) if Kafka's state machine has
        no transition from the current state to it."""
        with self._lock:
            source = self.state
            state_machine.check_transition(
                VALID_PREVIOUS, source, target, "producer state", error=IllegalStateTransitionError.between
            )
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
        if not self.idempotent or self.producer_id >= 0 or self.transactional:
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

    def batch_failed(self, b, exc: Exception | None = None) -> None:
        """Batch ``b`` fails for good with ``exc``.  If it was numbered under the current producer
        id its sequences are a gap: a new producer id (or epoch) is needed (:attr:`reset_pending`).
        In a transaction a failed record makes the transaction abortable (ABORTABLE_ERROR), a
        fenced producer is fatal (FATAL_ERROR).  Sender thread."""
        if self.transactional:
            if b.base_sequence >= 0 and b.producer_id == self.producer_id and b.producer_epoch == self.producer_epoch:
                self.reset_pending = True
            if exc is not None and not isinstance(exc, TransactionAbortedError):
                self.record_error(exc, f"a record batch of {b.topic}-{b.partition} failed")
            return
        if b.base_sequence >= 0 and b.producer_id >= 0 and b.producer_id == self.producer_id and not self.reset_pending:
            log.info(
                "idempotent batch %s-%d (sequences %d..) failed: new producer id once the requests "
                "in flight are answered",
                b.topic,
                b.partition,
                b.base_sequence,
            )
            self.reset_pending = True

    def batch_rejected(self, b, exc: PyklogError) -> bool:
        """The broker answered numbered batch ``b`` with OUT_OF_ORDER_SEQUENCE_NUMBER or
        UNKNOWN_PRODUCER_ID.  True if it is known not to be in the log (the broker forgot the id,
        or an earlier batch of this id failed for good): its numbering is dropped and it is sent
        again under the next producer id (idempotent producers only: in a transaction the batch
        fails and the transaction must be aborted)."""
        if self.transactional:
            return False
        if isinstance(exc, UnknownProducerIdError) or self.reset_pending or b.producer_id != self.producer_id:
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
        if not self.reset_pending or self.transactional:
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
        log.info(
            "idempotent producer: dropping producer id %d after a failed batch; sequences restart at 0 under a new id",
            self.producer_id,
        )
        if self.state is TransactionState.READY:
            self.transition_to(TransactionState.UNINITIALIZED)
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_seq.clear()
        self.reset_pending = False
        return False

    # =========================================================================== transactions
    # --------------------------------------------------------------------------- errors
    def _timed_out_or(self, exc: PyklogError) -> PyklogError:
        """A fenced error while a transaction has been open longer than transaction.timeout.ms
        is the coordinator's timeout abort: say so."""
        if isinstance(exc, ProducerFencedError) and not isinstance(exc, TransactionTimedOutError) and self.txn_began_at:
            open_ms = (time.monotonic() - self.txn_began_at) * 1000
            if open_ms > self.transaction_timeout_ms:
                e = TransactionTimedOutError(
                    f"TRANSACTION_TIMED_OUT: the transaction of transactional.id={self.transactional_id!r} "
                    f"was open for {open_ms / 1000:.1f}s, longer than transaction.timeout.ms="
                    f"{self.transaction_timeout_ms}: the transaction coordinator aborted it and fenced this "
                    f"producer (epoch {self.producer_epoch}); close it and start again with a new producer "
                    f"({exc})"
                )
                e.__cause__ = exc
                return e
        return exc

    @staticmethod
    def is_fatal(exc: Exception) -> bool:
        """Errors after which the producer can do nothing but close (Kafka's fatal errors)."""
        return isinstance(
            exc,
            (
                ProducerFencedError,
                TransactionalIdAuthorizationFailedError,
                UnsupportedVersionError,
                InvalidTxnStateError,
            ),
        ) or getattr(exc, "code", None) in (49, 50)  # INVALID_PRODUCER_ID_MAPPING, INVALID_TRANSACTION_TIMEOUT

    def record_error(self, exc: Exception, what: str) -> PyklogError:
        """A transactional request or record failed with ``exc``: enter FATAL_ERROR (fenced,
        unsupported, ...) or, with a transaction open, ABORTABLE_ERROR; unsent batches are then
        failed by the sender.  Returns the error to raise.  Any thread."""
        if not isinstance(exc, PyklogError):
            exc = PyklogError(f"{what}: {type(exc).__name__}: {exc}")
        if exc.code in _FENCED_CODES and not isinstance(exc, ProducerFencedError):
            exc = _fenced(what, self.transactional_id, f" ({exc})")  # INVALID_PRODUCER_EPOCH from a Produce
        exc = self._timed_out_or(exc)
        with self._lock:
            source = self.state
            if self.is_fatal(exc):
                target = S.FATAL_ERROR
            elif source in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.PREPARED_TRANSACTION, S.ABORTABLE_ERROR):
                target = S.ABORTABLE_ERROR
            else:
                return exc
            if source is S.FATAL_ERROR:
                return exc
            self.state = target
            if self.last_error is None or target is S.FATAL_ERROR or source is not S.ABORTABLE_ERROR:
                self.last_error = exc
            self.fail_bound = math.inf
        if source is not target:
            log.warning("producer %r: %s -> %s: %s: %s", self.transactional_id, source.name, target.name, what, exc)
        return exc

    def _state_error(self, op: str) -> PyklogError:
        """The error for ``op`` in the current state (FATAL_ERROR, ABORTABLE_ERROR or a wrong state)."""
        st = self.state
        if st is S.FATAL_ERROR:
            e = self.last_error
            if isinstance(e, (ProducerFencedError, UnsupportedVersionError, TransactionalIdAuthorizationFailedError)):
                return type(e)(f"{op}: the producer is in FATAL_ERROR and must be closed: {e}")
            err = IllegalStateError(f"{op}: the producer is in FATAL_ERROR and must be closed: {e}")
            err.__cause__ = e
            return err
        if st is S.ABORTABLE_ERROR:
            err = TransactionAbortableError(
                f"{op}: the transaction cannot commit, call abort_transaction() (ABORTABLE_ERROR after: "
                f"{self.last_error})"
            )
            err.__cause__ = self.last_error
            return err
        hint = {
            S.UNINITIALIZED: "call init_transactions() first",
            S.INITIALIZING: "init_transactions() did not complete; call it again",
            S.READY: "no transaction is open: call begin_transaction() first",
            S.PREPARED_TRANSACTION: "the transaction is prepared: end it with complete_transaction() "
            "(the producer may only be closed)",
        }.get(st, "")
        return IllegalStateError(f"{op}: not allowed in state {st.name}" + (f" ({hint})" if hint else ""))

    def check_can_send(self) -> None:
        """Raise unless records may be sent now (IN_TRANSACTION).  Any thread."""
        if self.state is not S.IN_TRANSACTION:
            raise self._state_error("send")

    def _require(self, op: str, *states) -> TransactionState:
        if not self.transactional:
            raise IllegalStateError(f"{op}: the producer has no transactional.id")
        st = self.state
        if st not in states:
            raise self._state_error(op)
        return st

    # --------------------------------------------------------------------------- user thread
    def init_transactions(self, client, deadline: Deadline) -> None:
        """FindCoordinator(key_type 1) + InitProducerId(transactional.id, transaction.timeout.ms),
        retried (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR,
        COORDINATOR_NOT_AVAILABLE) until ``deadline``.  Fences older producers of the id and
        makes the coordinator abort their open transaction.  A call after a timeout resumes
        (INITIALIZING).  User thread."""
        st = self._require("init_transactions", S.UNINITIALIZED, S.INITIALIZING)
        if st is S.UNINITIALIZED:
            self.transition_to(S.INITIALIZING)
        self._init_producer_id(client, deadline)
        self.transition_to(S.READY)

    def _init_producer_id(self, client, deadline: Deadline) -> None:
        tid = self.transactional_id
        what = f"InitProducerId(transactional.id={tid!r}, transaction.timeout.ms={self.transaction_timeout_ms})"

        def check(resp):
            code = int(resp.get("error_code", 0))
            if code == 50:
                raise error_for_code(
                    50,
                    f"INVALID_TRANSACTION_TIMEOUT (50): transaction.timeout.ms="
                    f"{self.transaction_timeout_ms} is above the broker's "
                    f"transaction.max.timeout.ms (or not positive)",
                )
            if code:
                raise _error(code, "InitProducerId", tid)
            return int(resp["producer_id"]), int(resp["producer_epoch"])

        try:
            pid, epoch = coordinator_request(
                client,
                tid,
                ApiKey.INIT_PRODUCER_ID,
                init_producer_id_body(tid, self.transaction_timeout_ms),
                what,
                check,
                deadline,
                self.retry_backoff_s,
            )
        except PyklogError as e:
            if self.is_fatal(e):
                self.last_error = e
                self.transition_to(S.FATAL_ERROR)
            raise
        self.producer_id, self.producer_epoch = pid, epoch
        self._next_seq.clear()
        self.reset_pending = False
        log.info("transactional.id %r: producer id %d epoch %d", tid, pid, epoch)

    def begin(self) -> None:
        """READY -> IN_TRANSACTION (no request: partitions are added as records go to them)."""
        self._require("begin_transaction", S.READY)
        self.partitions_in_txn = set()
        self.transaction_started = False
        self.add_partitions_retry_at = 0.0
        self.txn_began_at = time.monotonic()
        self.transition_to(S.IN_TRANSACTION)

    def add_offsets(self, client, offsets: dict, group_id: str, deadline: Deadline) -> None:
        """AddOffsetsToTxn(group) to the transaction coordinator, then TxnOffsetCommit to the
        group coordinator: the offsets become the group's committed offsets when the transaction
        commits.  A non-retriable failure makes the transaction abortable.  User thread."""
        self._require("send_offsets_to_transaction", S.IN_TRANSACTION)
        tid, pid, epoch = self.transactional_id, self.producer_id, self.producer_epoch

        def check_add(resp):
            code = int(resp.get("error_code", 0))
            if code:
                raise _error(code, f"AddOffsetsToTxn(group {group_id!r})", tid)

        def check_commit(resp):
            first = None
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    code = int(p.get("error_code", 0))
                    if code:
                        e = _error(code, f"TxnOffsetCommit(group {group_id!r}) {t['name']}-{p['partition_index']}", tid)
                        if first is None or (e.retriable and not first.retriable):
                            first = e
            if first is not None:
                raise first

        try:
            coordinator_request(
                client,
                tid,
                ApiKey.ADD_OFFSETS_TO_TXN,
                add_offsets_body(tid, pid, epoch, group_id),
                f"AddOffsetsToTxn(group {group_id!r})",
                check_add,
                deadline,
                self.retry_backoff_s,
            )
            self.transaction_started = True
            coordinator_request(
                client,
                tid,
                ApiKey.TXN_OFFSET_COMMIT,
                txn_offset_commit_body(tid, group_id, pid, epoch, offsets),
                f"TxnOffsetCommit(group {group_id!r})",
                check_commit,
                deadline,
                self.retry_backoff_s,
                key=group_id,
                key_type=0,
            )
        except RequestTimedOutError:
            raise  # may be retried by the caller
        except PyklogError as e:
            raise self.record_error(e, "send_offsets_to_transaction") from None

    def begin_commit(self) -> None:
        """IN_TRANSACTION -> COMMITTING_TRANSACTION (a commit that timed out may be called again)."""
        if self._require("commit_transaction", S.IN_TRANSACTION, S.COMMITTING_TRANSACTION) is S.IN_TRANSACTION:
            self.transition_to(S.COMMITTING_TRANSACTION)

    def begin_abort(self, last_batch_id: int) -> None:
        """IN_TRANSACTION | ABORTABLE_ERROR -> ABORTING_TRANSACTION; the sender fails every batch
        up to ``last_batch_id`` that is not yet sent."""
        st = self._require("abort_transaction", S.IN_TRANSACTION, S.ABORTABLE_ERROR, S.ABORTING_TRANSACTION)
        with self._lock:
            self.fail_bound = max(last_batch_id, self.fail_bound) if self.fail_bound != math.inf else math.inf
        if st is not S.ABORTING_TRANSACTION:
            self.transition_to(S.ABORTING_TRANSACTION)

    def begin_prepare(self) -> None:
        """IN_TRANSACTION -> PREPARED_TRANSACTION (again: a prepare that timed out continues)."""
        if self._require("prepare_transaction", S.IN_TRANSACTION, S.PREPARED_TRANSACTION) is S.IN_TRANSACTION:
            self.transition_to(S.PREPARED_TRANSACTION)

    def prepared_transaction(self) -> PreparedTransaction:
        """After the prepare's flush: the PreparedTransaction (producer id -1 when the transaction
        added no partition and no offsets: there is nothing to complete)."""
        if self.state is not S.PREPARED_TRANSACTION:
            raise self._state_error("prepare_transaction")
        if self.transaction_started:
            self.prepared = PreparedTransaction(self.transactional_id, self.producer_id, self.producer_epoch)
        else:
            self.prepared = PreparedTransaction(self.transactional_id, -1, -1)
        return self.prepared

    def end_transaction(self, client, commit: bool, deadline: Deadline) -> None:
        """After the flush: EndTxn(commit/abort) if the transaction reached the coordinator, then
        READY (after an abort that left a sequence gap: a new epoch with InitProducerId first).
        Errors: fenced / timed out -> FATAL_ERROR; a record failed during a commit's flush ->
        TransactionAbortableError; a timeout -> RequestTimedOutError (call again).  User thread."""
        op = "commit_transaction" if commit else "abort_transaction"
        st = self.state
        if st is not (S.COMMITTING_TRANSACTION if commit else S.ABORTING_TRANSACTION):
            raise self._state_error(op)
        if self.transaction_started:
            try:
                end_txn(
                    client,
                    self.transactional_id,
                    self.producer_id,
                    self.producer_epoch,
                    commit,
                    deadline,
                    self.retry_backoff_s,
                )
            except RequestTimedOutError:
                raise
            except PyklogError as e:
                raise self.record_error(e, op) from None
        self.partitions_in_txn = set()
        self.transaction_started = False
        self.txn_began_at = 0.0
        if not commit and self.reset_pending:
            # a failed batch left a sequence gap under this epoch: take a new epoch (sequences restart)
            log.info(
                "transactional.id %r: new epoch after an aborted transaction with a failed batch", self.transactional_id
            )
            self.transition_to(S.INITIALIZING)
            self._init_producer_id(client, deadline)
        with self._lock:
            self.last_error = None
            self.fail_bound = -1
        self.transition_to(S.READY)

    # --------------------------------------------------------------------------- sender thread
    def add_partitions_once(self, client, tps) -> None:
        """ONE AddPartitionsToTxn for the partitions ``tps`` (all of one drain).  On success they
        join :attr:`partitions_in_txn`; a retriable error is raised for the sender to retry after
        a backoff; other errors make the transaction abortable (or the producer fatal) and are
        raised.  Sender thread."""
        tid = self.transactional_id
        body = add_partitions_body(tid, self.producer_id, self.producer_epoch, tps)
        what = f"AddPartitionsToTxn({', '.join(f'{t}-{p}' for t, p in sorted(tps))})"

        def call(node, conn):
            try:
                version = conn.version_for(ApiKey.ADD_PARTITIONS_TO_TXN)
            except UnsupportedVersionError as e:
                raise _unsupported(e, what) from None
            errors = add_partitions_errors(conn.request(ApiKey.ADD_PARTITIONS_TO_TXN, body, version))
            bad = {tp: c for tp, c in errors.items() if c and c != 55}  # 55 OPERATION_NOT_ATTEMPTED
            if bad:
                # the most telling error: fenced/fatal first, then non-retriable, then retriable
                excs = [_error(c, f"{what}: {tp[0]}-{tp[1]}", tid) for tp, c in sorted(bad.items())]
                excs.sort(key=lambda e: (not self.is_fatal(e), e.retriable))
                raise excs[0]
            missing = [tp for tp in tps if tp not in errors]
            if missing:
                raise PyklogError(f"{what}: no answer for {missing}")
            return errors

        try:
            client.coordinator_attempt(tid, call, 1)
        except PyklogError as e:
            if e.retriable:
                raise
            raise self.record_error(e, "AddPartitionsToTxn") from None
        self.partitions_in_txn.update(tps)
        self.transaction_started = True
        log.debug("transactional.id %r: added %s to the transaction", tid, sorted(tps))

    def may_send(self) -> bool:
        """True while batches of the open transaction may go out (sender thread)."""
        return self.state in (S.IN_TRANSACTION, S.COMMITTING_TRANSACTION, S.PREPARED_TRANSACTION)

    def unsent_failure(self):
        """``(bound, error)`` when unsent batches with an id <= bound must be failed (abort,
        ABORTABLE_ERROR, FATAL_ERROR), else None.  Sender thread."""
        st = self.state
        if st is S.ABORTING_TRANSACTION:
            return self.fail_bound, TransactionAbortedError(
                f"TRANSACTION_ABORTED: the transaction of transactional.id={self.transactional_id!r} was "
                f"aborted before this record was sent"
            )
        if st is S.ABORTABLE_ERROR or st is S.FATAL_ERROR:
            return math.inf, TransactionAbortedError(
                f"TRANSACTION_ABORTED: not sent: the transaction of transactional.id="
                f"{self.transactional_id!r} is in {st.name} after: {self.last_error}"
            )
        return None
