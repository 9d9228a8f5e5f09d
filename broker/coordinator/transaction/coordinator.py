"""The transaction coordinator: Kafka's ``TransactionCoordinator`` (KIP-98).

Handles, for the transactional ids whose ``__transaction_state`` partition this broker leads:

* ``init_producer_id(transactional_id, timeout_ms)`` (InitProducerId with a transactional id): a new
  id gets a producer id from the block allocator with epoch 0; an idle id gets its epoch bumped
  (fencing any older producer: its next request gets PRODUCER_FENCED / INVALID_PRODUCER_EPOCH);
  epoch exhaustion takes a new producer id.  An Ongoing transaction is aborted first (epoch fenced,
  PrepareAbort written, markers sent) and the answer is CONCURRENT_TRANSACTIONS, so the client
  retries; Prepare* also answers CONCURRENT_TRANSACTIONS.
* ``add_partitions_to_txn`` / ``add_offsets_to_txn``: state Ongoing with the partitions added.
* ``end_txn(commit)``: PrepareCommit / PrepareAbort written, the client answered, then the markers
  go to every partition's leader (:mod:`.marker_channel`) and CompleteCommit / CompleteAbort is
  written once they are all in.  A retried EndTxn of the same result after completion succeeds.
* Every ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` Ongoing transactions older
  than their timeout are aborted with an epoch bump (the producer is fenced); every
  ``transaction.remove.expired.transaction.cleanup.interval.ms`` ids idle for
  ``transactional.id.expiration.ms`` are removed (a tombstone).

Every change is written to ``__transaction_state`` before it takes effect in memory and before the
client is answered (:mod:`.metadata` explains the two steps).

Errors per request version as Kafka's ``KafkaApis``: PRODUCER_FENCED (90) for AddPartitionsToTxn /
AddOffsetsToTxn / EndTxn v2+, INVALID_PRODUCER_EPOCH (47) before.  The methods here raise
:class:`broker.errors.PyklogError` subclasses and return what succeeded; the caller (KafkaApis)
maps them to codes.

Thread-safety: thread-safe.  Methods run on request handler threads (and on the scheduler and
marker sender threads); each takes the metadata's lock (Kafka's ``inLock(txnMetadata)``) around
its checks, the local log write and the in-memory change; no network I/O happens under it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import NamedTuple

from pyklog.broker.common.scheduler import Scheduler
from pyklog.broker.coordinator.partition_writer import CoordinatorPartitionWriter
from pyklog.broker.coordinator.transaction.marker_channel import PendingCompletion, TransactionMarkerChannelManager
from pyklog.broker.coordinator.transaction.metadata import (
    IDLE_STATES,
    MAX_EPOCH,
    NO_PRODUCER_EPOCH,
    IllegalTransitionError,
    TransactionMetadata,
    TxnState,
)
from pyklog.broker.coordinator.transaction.state_manager import TransactionStateManager
from pyklog.broker.errors import (
    ConcurrentTransactionsError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidRequestError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    NotCoordinatorError,
    ProducerFencedError,
    PyklogError,
    TransactionalIdNotFoundError,
)

log = logging.getLogger(__name__)

S = TxnState


class TransactionDescription(NamedTuple):
    """One transactional id as DescribeTransactions reports it (Kafka's ``TransactionDescription``)."""

    state: str  # Kafka's state name: "Ongoing", "PrepareCommit", "CompleteAbort", ...
    timeout_ms: int
    start_time_ms: int  # -1 when no transaction was started
    producer_id: int
    producer_epoch: int
    partitions: tuple  # sorted (topic, partition) pairs


def _now_ms() -> int:
    return int(time.time() * 1000)


class TransactionCoordinator:
    """See the module docstring.

    ``producer_id_allocator()`` returns a new cluster-unique producer id (KafkaApis' ZooKeeper block
    allocator); ``offsets_partition_for(group) -> (topic, partition)`` names a group's
    ``__consumer_offsets`` partition (AddOffsetsToTxn); ``replication`` is the acks=all path of the
    state log (the replica manager's coordinator appends; None: local appends only).  Settings have
    Kafka's names and defaults.
    """

    def __init__(
        self,
        log_manager,
        cluster,
        broker_id: int,
        *,
        producer_id_allocator: Callable[[], int],
        offsets_partition_for: Callable[[str], tuple[str, int]] | None = None,
        num_partitions: int = 50,
        replication_factor: int = 1,
        segment_bytes: int = 100 * 1024 * 1024,
        transaction_max_timeout_ms: int = 900000,
        transactional_id_expiration_ms: int = 604800000,
        abort_timed_out_interval_ms: int = 10000,
        remove_expired_interval_ms: int = 3600000,
        load_buffer_bytes: int = 5 * 1024 * 1024,
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        state_log_min_isr: int | None = None,
        replication: CoordinatorPartitionWriter | None = None,
        inter_broker_sasl=None,
    ):
        self.broker_id = int(broker_id)
        self.cluster = cluster
        self.producer_id_allocator = producer_id_allocator
        self.offsets_partition_for = offsets_partition_for
        self.transaction_max_timeout_ms = int(transaction_max_timeout_ms)
        self.transactional_id_expiration_ms = int(transactional_id_expiration_ms)
        self.abort_timed_out_interval_s = abort_timed_out_interval_ms / 1000.0
        self.remove_expired_interval_s = remove_expired_interval_ms / 1000.0
        self.state_manager = TransactionStateManager(
            log_manager,
            cluster,
            broker_id,
            num_partitions=num_partitions,
            replication_factor=replication_factor,
            segment_bytes=segment_bytes,
            load_buffer_bytes=load_buffer_bytes,
            on_loaded=self._on_partition_loaded,
            on_unloaded=self._on_partition_unloaded,
            min_isr=state_log_min_isr,
            replication=replication,
        )
        self.marker_channel = TransactionMarkerChannelManager(
            cluster,
            broker_id,
            self._on_markers_written,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            sasl=inter_broker_sasl,
        )
        self.scheduler: Scheduler | None = None

    @classmethod
    def from_config(
        cls,
        config,
        log_manager,
        cluster,
        *,
        producer_id_allocator,
        offsets_partition_for=None,
        replication: CoordinatorPartitionWriter | None = None,
        inter_broker_sasl=None,
    ):
        """Build from a :class:`broker.server.config.ServerConfig`: its ``broker_id``,
        ``transaction_settings()`` and ``setting(key)`` (a validated typed value) are all it reads."""
        t = config.transaction_settings()
        # transaction.state.log.min.isr: __transaction_state's min.insync.replicas (Kafka's
        # TransactionLog topic config); unset: the broker's min.insync.replicas applies
        t["state_log_min_isr"] = config.setting("transaction.state.log.min.isr")
        return cls(
            log_manager,
            cluster,
            config.broker_id,
            producer_id_allocator=producer_id_allocator,
            offsets_partition_for=offsets_partition_for,
            replication=replication,
            inter_broker_sasl=inter_broker_sasl,
            **t,
        )

    # ------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        self.marker_channel.startup()
        self.state_manager.startup()
        self.scheduler = Scheduler(f"txn-coordinator-{self.broker_id}")
        self.scheduler.schedule_periodic(
            "transaction-abort", self.abort_timed_out_interval_s, self.abort_timed_out_transactions
        )
        self.scheduler.schedule_periodic(
            "transactionalId-expiration", self.remove_expired_interval_s, self.remove_expired_transactional_ids
        )

    def shutdown(self) -> None:
        if self.scheduler is not None:
            self.scheduler.shutdown()
            self.scheduler = None
        self.state_manager.shutdown()
        self.marker_channel.shutdown()

    # ------------------------------------------------------------------ FindCoordinator

    def coordinator_for(self, transactional_id: str) -> int | None:
        """The broker id coordinating ``transactional_id`` (None: COORDINATOR_NOT_AVAILABLE)."""
        if not transactional_id:
            raise InvalidRequestError("transactional id must be a non-empty string")
        return self.state_manager.coordinator_for(transactional_id)

    # ------------------------------------------------------------------ DescribeTransactions / ListTransactions

    def describe_transaction(self, transactional_id: str) -> TransactionDescription:
        """DescribeTransactions of one id (Kafka's ``TransactionCoordinator.handleDescribeTransactions``):
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / COORDINATOR_NOT_AVAILABLE as for any
        coordinator request, TRANSACTIONAL_ID_NOT_FOUND for an id without state or being expired
        (Dead).  The partitions are those of the open transaction (while completing: those still
        waiting for their marker, as the coordinator keeps them).  Any thread (takes the metadata's lock)."""
        if not transactional_id:
            raise TransactionalIdNotFoundError("the transactional id is empty")
        _, md = self.state_manager.get_transaction_state(transactional_id)
        if md is None:
            raise TransactionalIdNotFoundError(
                f"no transaction state for {transactional_id!r} on broker {self.broker_id}"
            )
        with md.lock:
            if md.state == S.DEAD:
                raise TransactionalIdNotFoundError(f"{transactional_id!r} is being expired")
            state, partitions = md.state, set(md.partitions)
            desc = (md.state.kafka_name, md.txn_timeout_ms, md.txn_start_timestamp, md.producer_id, md.producer_epoch)
        if state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
            # Kafka drops each partition from the metadata as its marker is written; pyklog keeps them
            # in the marker channel's pending completion
            remaining = self.marker_channel.remaining_partitions(transactional_id)
            if remaining is not None:
                partitions &= remaining
        return TransactionDescription(*desc, tuple(sorted(partitions)))

    def list_transactions(self, state_filters=(), producer_id_filters=(), duration_filter_ms: int = -1):
        """ListTransactions: see :meth:`TransactionStateManager.list_transaction_states`."""
        return self.state_manager.list_transaction_states(
            list(state_filters), list(producer_id_filters), duration_filter_ms
        )

    # ------------------------------------------------------------------ InitProducerId

    def _valid_timeout(self, timeout_ms: int) -> bool:
        return 0 < timeout_ms <= self.transaction_max_timeout_ms

    def init_producer_id(
        self, transactional_id: str, transaction_timeout_ms: int, expected: tuple[int, int] | None = None
    ) -> tuple[int, int]:
        """``(producer_id, producer_epoch)`` for a transactional producer (see the module docstring).
        Raises CONCURRENT_TRANSACTIONS after starting the abort of an Ongoing transaction.

        ``expected`` (InitProducerId v3+, KIP-360): the ``(producer id, epoch)`` the producer holds
        when it asks for an epoch bump to recover from an abortable error (None, or an id of -1:
        a fresh producer).  As Kafka's ``prepareInitProducerIdTransit``: it is accepted when the id
        has no epoch yet, when its producer id is the current one (the epoch is then checked by
        :meth:`TransactionMetadata.prepare_increment_producer_epoch`), or when it is the previous
        producer id with an exhausted epoch (a retry after a rotation); otherwise
        ProducerFencedError.  The caller maps PRODUCER_FENCED to INVALID_PRODUCER_EPOCH below v4."""
        if transactional_id == "":
            raise InvalidRequestError("transactional id must not be empty")
        if expected is not None and expected[0] < 0:
            expected = None
        if not self._valid_timeout(transaction_timeout_ms):
            raise InvalidTransactionTimeoutError(
                f"transaction.timeout.ms {transaction_timeout_ms} is not in 1..{self.transaction_max_timeout_ms} "
                "(transaction.max.timeout.ms)"
            )
        self.state_manager.ensure_topic()
        coordinator_epoch, md = self.state_manager.get_transaction_state(transactional_id)
        if md is None:
            pid = self.producer_id_allocator()
            fresh = TransactionMetadata(
                transactional_id, pid, NO_PRODUCER_EPOCH, transaction_timeout_ms, S.EMPTY, (), -1, _now_ms()
            )
            coordinator_epoch, md = self.state_manager.put_transaction_state_if_not_exists(fresh)
        # a new producer id when the epoch is exhausted, taken before the lock (the allocator may
        # go to ZooKeeper); read without the lock, so re-checked under it
        spare_pid = self.producer_id_allocator() if md.is_producer_epoch_exhausted() else None
        fence = None
        with md.lock:
            self._check_cached(md)
            if md.pending_transition_in_progress:
                raise ConcurrentTransactionsError(f"{transactional_id!r}: a transition is in progress")
            if expected is not None and not (
                md.producer_epoch == NO_PRODUCER_EPOCH
                or expected[0] == md.producer_id
                or (expected[0] == md.last_producer_id and expected[1] >= MAX_EPOCH - 1)
            ):
                raise ProducerFencedError(
                    f"{transactional_id!r}: producer id {expected[0]} (epoch {expected[1]}) is not the current "
                    f"producer id {md.producer_id}: a newer producer fenced it"
                )
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"{transactional_id!r}: the previous transaction is completing ({md.state.kafka_name})"
                )
            now = _now_ms()
            if md.state == S.ONGOING:
                fence = md.prepare_fence_producer_epoch(now)
            elif md.state in IDLE_STATES:
                new_pid = None
                if md.is_producer_epoch_exhausted() and (expected is None or expected[1] == md.producer_epoch):
                    new_pid = spare_pid if spare_pid is not None else self.producer_id_allocator()
                transit = md.prepare_increment_producer_epoch(
                    transaction_timeout_ms, now, new_pid, expected_epoch=None if expected is None else expected[1]
                )
                self._write(md, coordinator_epoch, transit)
                log.debug(
                    "InitProducerId %r: producer id %d epoch %d", transactional_id, md.producer_id, md.producer_epoch
                )
                return md.producer_id, md.producer_epoch
            else:
                raise InvalidTxnStateError(f"{transactional_id!r} is {md.state.kafka_name}")
        # Ongoing: abort it with the bumped epoch (fencing the current producer), answer CONCURRENT_TRANSACTIONS
        log.info(
            "InitProducerId %r: aborting its ongoing transaction first (epoch %d -> %d)",
            transactional_id,
            md.producer_epoch,
            fence.producer_epoch,
        )
        try:
            self._end_transaction(
                transactional_id, md.producer_id, fence.producer_epoch, False, from_client=False, version=2
            )
        except BaseException:
            with md.lock:
                if md.pending_state == S.PREPARE_EPOCH_FENCE:
                    md.abort_transition()
            raise
        raise ConcurrentTransactionsError(f"{transactional_id!r}: its ongoing transaction is being aborted; retry")

    # ------------------------------------------------------------------ AddPartitionsToTxn / AddOffsetsToTxn

    def add_partitions_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, partitions, *, version: int = 2
    ) -> None:
        """Add ``partitions`` [(topic, partition)] to the transaction; raises the request's error."""
        if not transactional_id:
            raise InvalidRequestError("transactional id must be a non-empty string")
        coordinator_epoch, md = self.state_manager.get_transaction_state(transactional_id)
        if md is None:
            raise InvalidProducerIdMappingError(f"no producer id is mapped to {transactional_id!r}")
        partitions = set(partitions)
        with md.lock:
            self._check_cached(md)
            self._check_producer(md, producer_id, producer_epoch, version)
            if md.pending_transition_in_progress:
                raise ConcurrentTransactionsError(f"{transactional_id!r}: a transition is in progress")
            if md.state in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                raise ConcurrentTransactionsError(
                    f"{transactional_id!r}: the previous transaction is completing ({md.state.kafka_name})"
                )
            if md.state == S.ONGOING and partitions <= md.partitions:
                return
            if md.state not in (S.ONGOING,) + tuple(IDLE_STATES):
                raise InvalidTxnStateError(f"{transactional_id!r} is {md.state.kafka_name}")
            self._write(md, coordinator_epoch, md.prepare_add_partitions(partitions, _now_ms()))

    def add_offsets_to_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, group_id: str, *, version: int = 2
    ) -> None:
        """Add the ``__consumer_offsets`` partition of ``group_id`` to the transaction."""
        if self.offsets_partition_for is None:
            raise InvalidRequestError("this broker has no offset manager")
        self.add_partitions_to_txn(
            transactional_id, producer_id, producer_epoch, [self.offsets_partition_for(group_id)], version=version
        )

    # ------------------------------------------------------------------ EndTxn

    def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool, *, version: int = 2
    ) -> None:
        """EndTxn from a client (any connection presenting the id's producer id and epoch)."""
        self._end_transaction(transactional_id, producer_id, producer_epoch, commit, from_client=True, version=version)

    def _end_transaction(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        *,
        from_client: bool,
        version: int,
    ) -> None:
        if not transactional_id:
            raise InvalidRequestError("transactional id must be a non-empty string")
        coordinator_epoch, md = self.state_manager.get_transaction_state(transactional_id)
        if md is None:
            raise InvalidProducerIdMappingError(f"no producer id is mapped to {transactional_id!r}")
        result = "commit" if commit else "abort"
        with md.lock:
            self._check_cached(md)
            fencing = False
            if md.producer_id != producer_id:
                raise InvalidProducerIdMappingError(
                    f"{transactional_id!r} has producer id {md.producer_id}, the request {producer_id}"
                )
            if (from_client and producer_epoch != md.producer_epoch) or producer_epoch < md.producer_epoch:
                raise self._fenced(md, producer_epoch, version)
            if md.pending_transition_in_progress:
                if md.pending_state == S.PREPARE_EPOCH_FENCE and not from_client:
                    fencing = True
                else:
                    raise ConcurrentTransactionsError(f"{transactional_id!r}: a transition is in progress")
            state = md.state
            if fencing and state != S.ONGOING:  # cannot happen: a pending fence blocks every other move
                md.abort_transition()
                raise InvalidTxnStateError(f"{transactional_id!r}: fencing in state {state.kafka_name}")
            if state == S.ONGOING:
                target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
                if fencing:
                    transit = md.prepare_abort_or_commit(target, _now_ms(), fenced_epoch=producer_epoch)
                else:
                    transit = md.prepare_abort_or_commit(target, _now_ms())
                self._write(md, coordinator_epoch, transit)  # a failure drops the fence too
                pending = PendingCompletion(
                    transactional_id,
                    self.state_manager.partition_for(transactional_id),
                    coordinator_epoch,
                    md.producer_id,
                    md.producer_epoch,
                    commit,
                    set(md.partitions),
                )
            elif state == S.COMPLETE_COMMIT:
                if commit:
                    return  # a retry of a completed commit
                raise InvalidTxnStateError(f"{transactional_id!r}: abort requested after the commit completed")
            elif state == S.COMPLETE_ABORT:
                if not commit:
                    return
                raise InvalidTxnStateError(f"{transactional_id!r}: commit requested after the abort completed")
            elif state == S.PREPARE_COMMIT:
                if commit:
                    raise ConcurrentTransactionsError(f"{transactional_id!r}: the commit is being completed")
                raise InvalidTxnStateError(f"{transactional_id!r}: abort requested while committing")
            elif state == S.PREPARE_ABORT:
                if not commit:
                    raise ConcurrentTransactionsError(f"{transactional_id!r}: the abort is being completed")
                raise InvalidTxnStateError(f"{transactional_id!r}: commit requested while aborting")
            else:  # Empty (no transaction), Dead
                raise InvalidTxnStateError(f"{transactional_id!r}: {result} requested in state {state.kafka_name}")
        log.debug(
            "EndTxn %r (%s, producer id %d epoch %d): %s written, %d markers to send",
            transactional_id,
            result,
            pending.producer_id,
            pending.producer_epoch,
            transit.state.kafka_name,
            len(pending.remaining),
        )
        self.marker_channel.add_txn_markers_to_send(pending)

    def _on_markers_written(self, pending: PendingCompletion) -> bool:
        """Sender thread: every marker is in; write CompleteCommit / CompleteAbort.  True when done
        (or when there is nothing left to do here), False to try again later."""
        tid = pending.transactional_id
        try:
            coordinator_epoch, md = self.state_manager.get_transaction_state(tid)
        except NotCoordinatorError:
            log.info("transaction %r: no longer its coordinator; the new one completes it", tid)
            return True
        except PyklogError as e:
            log.info("transaction %r: cannot complete yet (%s)", tid, e)
            return False
        if md is None or coordinator_epoch != pending.coordinator_epoch:
            return True
        with md.lock:
            expected = S.PREPARE_COMMIT if pending.commit else S.PREPARE_ABORT
            if (
                md.state != expected
                or md.producer_id != pending.producer_id
                or md.producer_epoch != pending.producer_epoch
            ):
                log.warning("transaction %r: expected %s, found %r; not completing", tid, expected.kafka_name, md)
                return True
            if md.pending_transition_in_progress:
                return False
            try:
                self._write(md, coordinator_epoch, md.prepare_complete(_now_ms()))
            except NotCoordinatorError:
                return True
            except PyklogError as e:
                log.warning(
                    "transaction %r: writing %s failed (%s); retrying",
                    tid,
                    "CompleteCommit" if pending.commit else "CompleteAbort",
                    e,
                )
                return False
        log.debug(
            "transaction %r (producer id %d epoch %d) %s",
            tid,
            pending.producer_id,
            pending.producer_epoch,
            "committed" if pending.commit else "aborted",
        )
        return True

    # ------------------------------------------------------------------ loading

    def _on_partition_loaded(self, txn_partition: int, coordinator_epoch: int, pending: list) -> None:
        """A led ``__transaction_state`` partition is loaded: resend the markers of transactions left
        in PrepareCommit / PrepareAbort (the previous coordinator, or this broker before a crash)."""
        for md in pending:
            with md.lock:
                if md.state not in (S.PREPARE_COMMIT, S.PREPARE_ABORT):
                    continue
                p = PendingCompletion(
                    md.transactional_id,
                    txn_partition,
                    coordinator_epoch,
                    md.producer_id,
                    md.producer_epoch,
                    md.state == S.PREPARE_COMMIT,
                    set(md.partitions),
                )
            log.info(
                "transaction %r left in %s: sending its %d markers again",
                md.transactional_id,
                md.state.kafka_name,
                len(p.remaining),
            )
            self.marker_channel.add_txn_markers_to_send(p)

    def _on_partition_unloaded(self, txn_partition: int) -> None:
        self.marker_channel.remove_markers_for_txn_partition(txn_partition)

    # ------------------------------------------------------------------ timeouts and expiration

    def abort_timed_out_transactions(self) -> int:
        """Scheduler thread: abort Ongoing transactions older than their timeout, bumping the epoch
        (Kafka's ``abortTimedOutTransactions``).  Returns how many were started."""
        now = _now_ms()
        started = 0
        for md in self.state_manager.all_transactions():
            with md.lock:
                if (
                    md.state != S.ONGOING
                    or md.pending_transition_in_progress
                    or md.txn_start_timestamp + md.txn_timeout_ms >= now
                ):
                    continue
                if md.producer_epoch >= MAX_EPOCH:
                    log.warning(
                        "transaction %r timed out but its epoch %d cannot be bumped; left to the next InitProducerId",
                        md.transactional_id,
                        md.producer_epoch,
                    )
                    continue
                fence = md.prepare_fence_producer_epoch(now)
                pid = md.producer_id
            log.info(
                "transaction %r (producer id %d) timed out after %d ms: aborting it, epoch %d -> %d",
                md.transactional_id,
                pid,
                md.txn_timeout_ms,
                fence.producer_epoch - 1,
                fence.producer_epoch,
            )
            try:
                self._end_transaction(
                    md.transactional_id, pid, fence.producer_epoch, False, from_client=False, version=2
                )
                started += 1
            except PyklogError as e:
                log.info("aborting timed-out transaction %r failed: %s", md.transactional_id, e)
                with md.lock:
                    if md.pending_state == S.PREPARE_EPOCH_FENCE:
                        md.abort_transition()
        return started

    def remove_expired_transactional_ids(self) -> int:
        """Scheduler thread: tombstone ids idle (Empty/Complete*) for transactional.id.expiration.ms."""
        now = _now_ms()
        removed = 0
        for md in self.state_manager.all_transactions():
            with md.lock:
                if (
                    md.state not in IDLE_STATES
                    or md.pending_transition_in_progress
                    or md.txn_last_update_timestamp + self.transactional_id_expiration_ms > now
                ):
                    continue
                coordinator_epoch = self.state_manager.coordinator_epoch_of(md.transactional_id)
                if coordinator_epoch is None:
                    continue
                try:
                    self._write(md, coordinator_epoch, md.prepare_dead(now))
                except PyklogError as e:
                    log.info("expiring transactional id %r failed: %s", md.transactional_id, e)
                    continue
                self.state_manager.remove_if_dead(md)
                removed += 1
            log.info(
                "transactional id %r expired (idle for more than %d ms): removed",
                md.transactional_id,
                self.transactional_id_expiration_ms,
            )
        return removed

    # ------------------------------------------------------------------ helpers (caller holds md.lock)

    def _write(self, md: TransactionMetadata, coordinator_epoch: int, transit) -> None:
        """Write ``transit`` to the log, then apply it; on failure forget it and re-raise."""
        try:
            self.state_manager.append_transaction_to_log(md.transactional_id, coordinator_epoch, transit)
        except BaseException:
            md.abort_transition()
            raise
        md.complete_transition(transit)

    def _check_cached(self, md: TransactionMetadata) -> None:
        """``md`` may have been removed (expired) or replaced (reload) since it was looked up."""
        try:
            _, current = self.state_manager.get_transaction_state(md.transactional_id)
        except PyklogError:
            raise
        if current is not md:
            if md.state == S.DEAD or current is None:
                raise InvalidProducerIdMappingError(f"{md.transactional_id!r} has expired")
            raise NotCoordinatorError(f"the state of {md.transactional_id!r} was reloaded; retry")

    @staticmethod
    def _fenced(md: TransactionMetadata, producer_epoch: int, version: int) -> PyklogError:
        msg = (
            f"{md.transactional_id!r}: producer epoch {producer_epoch} is not the current epoch "
            f"{md.producer_epoch}: a newer producer with the same transactional.id fenced this one"
        )
        return ProducerFencedError(msg) if version >= 2 else InvalidProducerEpochError(msg)

    @classmethod
    def _check_producer(cls, md: TransactionMetadata, producer_id: int, producer_epoch: int, version: int) -> None:
        if md.producer_id != producer_id:
            raise InvalidProducerIdMappingError(
                f"{md.transactional_id!r} has producer id {md.producer_id}, the request {producer_id}"
            )
        if producer_epoch != md.producer_epoch:
            raise cls._fenced(md, producer_epoch, version)


__all__ = ["TransactionCoordinator", "IllegalTransitionError"]
