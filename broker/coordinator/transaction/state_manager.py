"""The ``__transaction_state`` partitions this broker leads: Kafka's ``TransactionStateManager``.

A transactional id lives in partition ``abs(javaStringHashCode(id)) % transaction.state.log.num.partitions``
of the compacted topic ``__transaction_state``; the leader of that partition is the id's
transaction coordinator, and the partition's leader epoch (from ZooKeeper) is the *coordinator
epoch* carried by its WriteTxnMarkers.  The topic is created on first use (FindCoordinator or
InitProducerId with a transactional id), ``cleanup.policy=compact`` and
``segment.bytes=transaction.state.log.segment.bytes``, spread over the live brokers like
``__consumer_offsets`` (:mod:`pyklog.broker.coordinator.offsets`, the model followed here).

* Becoming the leader of a partition (start-up, topic creation, registry change, a new leader
  epoch): its log is read
  into a fresh cache of :class:`TransactionMetadata` in a background thread (CoordinatorLoadInProgress
  meanwhile; an empty log loads inline).  When the load ends, ``on_loaded(partition,
  coordinator_epoch, [metadata in PrepareCommit/PrepareAbort])`` is called so their markers are sent
  again (Kafka's ``transactionsPendingForCompletion``).
* Ceasing to lead it, or leading it at another epoch: the cache is dropped and
  ``on_unloaded(partition)`` is called (then, at a new epoch, it loads again).
* :meth:`append_transaction_to_log` writes one transition (a tombstone for Dead) with acks=all and
  returns only once the ISR of the partition holds it (Kafka's ``TransactionLog.EnforcedRequiredAcks``;
  a blocking wait of at most 5 s on the caller's thread, see
  :class:`pyklog.broker.coordinator.partition_writer.CoordinatorPartitionWriter`); the caller then
  applies it in memory.

Leadership, loading and the per-request NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
COORDINATOR_NOT_AVAILABLE checks are :class:`pyklog.broker.coordinator.runtime.CoordinatorPartitions`
(shared with the offset manager).

Thread-safety: thread-safe.  ``_lock`` (the runtime's lock) guards the partition table; each
partition's cache is a dict replaced whole at load and mutated under ``_lock``; a metadata's own
fields are guarded by its lock (:mod:`.metadata`).  Appends to one partition are serialised by the
log.  Loading runs on one daemon thread; the cluster listener runs on kazoo's callback thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pyklog.broker.coordinator.partition_writer import CoordinatorPartitionWriter
from pyklog.broker.coordinator.runtime import (
    FAILED,  # noqa: F401 - re-exported
    LOADED,
    LOADING,
    CoordinatorPartition,
    CoordinatorPartitions,
    CoordinatorStateManager,
    partition_for_key,
)
from pyklog.broker.coordinator.transaction.log import (
    TRANSACTION_STATE_TOPIC,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from pyklog.broker.coordinator.transaction.metadata import (
    PREPARE_STATES,
    TransactionMetadata,
    TxnState,
    TxnTransitMetadata,
)
from pyklog.broker.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    KafkaStorageError,
    MessageTooLargeError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    PyklogError,
    RecordListTooLargeError,
    UnknownServerError,
)
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.reader import iter_batches

log = logging.getLogger(__name__)

DEFAULT_SEGMENT_BYTES = 100 * 1024 * 1024


def partition_for_transactional_id(transactional_id: str, num_partitions: int) -> int:
    """The ``__transaction_state`` partition of ``transactional_id`` (Kafka's ``partitionFor``)."""
    return partition_for_key(transactional_id, num_partitions)


class _TxnPartition(CoordinatorPartition):
    """One led ``__transaction_state`` partition: load state, coordinator epoch
    (:class:`CoordinatorPartition`) and the metadata cache."""

    __slots__ = ("cache",)

    def __init__(self, partition: int, coordinator_epoch: int):
        super().__init__(partition, coordinator_epoch)
        self.cache: dict[str, TransactionMetadata] = {}


class TransactionStateManager(CoordinatorStateManager["_TxnPartition"]):
    """See the module docstring.  ``log_manager`` is a :class:`broker.log.LogManager`, ``cluster`` a
    started :class:`broker.zk.cluster.ZkCluster`."""

    def __init__(
        self,
        log_manager,
        cluster,
        broker_id: int,
        *,
        num_partitions: int = 50,
        replication_factor: int = 1,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        load_buffer_bytes: int = 5 * 1024 * 1024,
        on_loaded: Callable[[int, int, list], None] | None = None,
        on_unloaded: Callable[[int], None] | None = None,
        min_isr: int | None = None,
        replication: CoordinatorPartitionWriter | None = None,
    ):
        if num_partitions <= 0:
            raise ValueError(f"transaction.state.log.num.partitions must be positive, got {num_partitions}")
        self.log_manager = log_manager
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.replication_factor = int(replication_factor)
        self.segment_bytes = int(segment_bytes)
        self.load_buffer_bytes = int(load_buffer_bytes)
        self.on_loaded = on_loaded
        self.on_unloaded = on_unloaded
        #: leadership, loading and the per-request checks (shared with the offset manager)
        self.runtime: CoordinatorPartitions[_TxnPartition] = CoordinatorPartitions(
            TRANSACTION_STATE_TOPIC,
            log_manager,
            cluster,
            self.broker_id,
            num_partitions=num_partitions,
            replication_factor=self.replication_factor,
            topic_configs=dict(
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": str(self.segment_bytes),
                    "compression.type": "uncompressed",
                },
                **({"min.insync.replicas": str(int(min_isr))} if min_isr else {}),
            ),
            new_partition=_TxnPartition,
            load=self._load,
            on_unloaded=self._unloaded,
            loader_name=f"txn-state-loader-{self.broker_id}",
            coordinator_name="transaction coordinator",
        )
        self._lock = self.runtime.lock
        self._partitions = self.runtime.partitions
        #: the acks=all path (the server's CoordinatorAppends, built with the replica manager);
        #: None (unit tests): an append returns once it is in the local log
        self.replication: CoordinatorPartitionWriter | None = replication

    # ------------------------------------------------------------------ lookups
    # (lifecycle, partition_for, coordinator_for, wait_loaded: CoordinatorStateManager)

    def is_loading(self) -> bool:
        return self.runtime.is_loading()

    def _partition_of(self, transactional_id: str) -> _TxnPartition:
        return self.runtime.partition_for_request(transactional_id, repr(transactional_id))

    def get_transaction_state(self, transactional_id: str) -> tuple[int, TransactionMetadata | None]:
        """``(coordinator_epoch, metadata or None)``; NotCoordinator / CoordinatorLoadInProgress /
        CoordinatorNotAvailable for the whole request (Kafka's ``getTransactionState``)."""
        part = self._partition_of(transactional_id)
        with self._lock:
            return part.coordinator_epoch, part.cache.get(transactional_id)

    def put_transaction_state_if_not_exists(self, metadata: TransactionMetadata) -> tuple[int, TransactionMetadata]:
        """Cache ``metadata`` unless the id already has one; returns what the cache holds."""
        part = self._partition_of(metadata.transactional_id)
        with self._lock:
            return part.coordinator_epoch, part.cache.setdefault(metadata.transactional_id, metadata)

    def coordinator_epoch_of(self, transactional_id: str) -> int | None:
        """The current coordinator epoch of the id's partition if led and loaded here, else None."""
        part = self.runtime.get_loaded(self.partition_for(transactional_id))
        return None if part is None else part.coordinator_epoch

    def all_transactions(self) -> list[TransactionMetadata]:
        """Every cached metadata of the loaded partitions (for the timeout and expiration tasks)."""
        with self._lock:
            return [md for p in self._partitions.values() if p.state == LOADED for md in p.cache.values()]

    def list_transaction_states(
        self, state_filters, producer_id_filters, duration_filter_ms: int = -1, now_ms: int | None = None
    ) -> tuple[int, list[str], list[tuple[str, int, str]]]:
        """ListTransactions (Kafka's ``TransactionStateManager.listTransactionStates``):
        ``(error code, unknown state filters, [(transactional id, producer id, state name)])`` over
        every id of the partitions loaded here.  COORDINATOR_LOAD_IN_PROGRESS while any led
        partition loads; Dead ids (being expired) are never listed; a state filter that names no
        state matches nothing and comes back in the unknown list; ``duration_filter_ms >= 0`` keeps
        only transactions started more than that long ago (KIP-994).  Any thread (takes ``_lock``,
        then each metadata's lock)."""
        by_name = {s.kafka_name: s for s in TxnState}
        unknown = [n for n in state_filters if n not in by_name]
        states = {by_name[n] for n in state_filters if n in by_name}
        pids = set(producer_id_filters)
        now = int(time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            if any(p.state == LOADING for p in self._partitions.values()):
                return CoordinatorLoadInProgressError.code, [], []
            cached = [md for p in self._partitions.values() if p.state == LOADED for md in p.cache.values()]
        out = []
        for md in cached:
            with md.lock:
                state, pid, started = md.state, md.producer_id, md.txn_start_timestamp
            if state == TxnState.DEAD or (pids and pid not in pids) or (state_filters and state not in states):
                continue
            if duration_filter_ms >= 0 and now - started <= duration_filter_ms:
                continue
            out.append((md.transactional_id, pid, state.kafka_name))
        return 0, unknown, sorted(out)

    def remove_if_dead(self, metadata: TransactionMetadata) -> None:
        """Drop an expired id from the cache (after its tombstone was written)."""
        with self._lock:
            part = self._partitions.get(self.partition_for(metadata.transactional_id))
            if part is not None and part.cache.get(metadata.transactional_id) is metadata:
                del part.cache[metadata.transactional_id]

    # ------------------------------------------------------------------ appends

    def append_transaction_to_log(
        self, transactional_id: str, coordinator_epoch: int, transit: TxnTransitMetadata
    ) -> None:
        """Write ``transit`` (Dead: a tombstone) to the id's partition; return once the log holds it.

        Raises NotCoordinatorError when the partition is no longer led here with
        ``coordinator_epoch``, CoordinatorNotAvailableError for storage errors (Kafka maps the
        append's errors the same way), UnknownServerError for a record too large.  Runs on the
        caller's thread, which holds the metadata's lock.
        """
        now = int(time.time() * 1000)
        value = (
            None
            if transit.state == TxnState.DEAD
            else encode_value(transit.log_value(), null_partitions=transit.state == TxnState.EMPTY)
        )
        batch = build_batch([(encode_key(transactional_id), value, now, ())])
        p = self.partition_for(transactional_id)
        with self._lock:
            part = self._partitions.get(p)
            if part is None or part.state != LOADED or part.coordinator_epoch != coordinator_epoch:
                raise NotCoordinatorError(
                    f"broker {self.broker_id} is no longer the coordinator of {transactional_id!r} "
                    f"at coordinator epoch {coordinator_epoch}"
                )
        repl = self.replication
        try:
            if repl is None:
                self.runtime.log(p).append(batch, leader_epoch=max(coordinator_epoch, 0))
            else:
                # acks=all (Kafka's TransactionLog.EnforcedRequiredAcks): return only once the ISR has
                # it, so the state an election leaves is the state the coordinator acted on.  Blocks
                # this thread up to the replication timeout (the caller holds the metadata's lock,
                # as Kafka's appendTransactionToLog callback chain serialises the id's transitions)
                _, wait = repl.append(
                    TRANSACTION_STATE_TOPIC, p, batch, leader_epoch=coordinator_epoch, from_client=False
                )
                error = repl.wait_replicated(wait)
                if error is not None:
                    raise error
        except (MessageTooLargeError, RecordListTooLargeError) as e:
            raise UnknownServerError(f"transaction state of {transactional_id!r} too large: {e}") from e
        except NotLeaderOrFollowerError as e:  # leadership moved since the coordinator's check
            raise NotCoordinatorError(f"cannot write {TRANSACTION_STATE_TOPIC}-{p}: {e}") from e
        except KafkaStorageError as e:  # pyklog keeps its earlier answer here (Kafka: NOT_COORDINATOR)
            raise CoordinatorNotAvailableError(f"cannot write {TRANSACTION_STATE_TOPIC}-{p}: {e}") from e
        except PyklogError as e:
            # UNKNOWN_TOPIC_OR_PARTITION, NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT & co.
            raise CoordinatorNotAvailableError(f"cannot write {TRANSACTION_STATE_TOPIC}-{p}: {e}") from e
        with self._lock:
            if self._partitions.get(p) is not part:
                # the write is in the log; the new leader (if any) reads it when it loads
                raise NotCoordinatorError(
                    f"broker {self.broker_id} lost {TRANSACTION_STATE_TOPIC}-{p} while writing {transactional_id!r}"
                )

    # ------------------------------------------------------------------ leadership and loading

    def _unloaded(self, part: _TxnPartition) -> None:
        """The runtime's ``on_unloaded`` hook (listener thread, no lock held)."""
        if self.on_unloaded is not None:
            self.on_unloaded(part.partition)

    def _load(self, part: _TxnPartition) -> None:
        """Read the partition's log into a fresh cache (the latest value per id wins; a tombstone
        removes it), then hand the transactions left in Prepare* to ``on_loaded``.  The runtime's
        ``load`` hook (loader thread, or the caller's for an empty log): an exception marks the
        partition FAILED (COORDINATOR_NOT_AVAILABLE for its ids)."""
        started = time.monotonic()
        cache: dict[str, TransactionMetadata] = {}
        records = 0
        lg = self.runtime.log(part.partition, apply_config=True)
        offset, end = lg.log_start_offset, lg.log_end_offset
        while offset < end:
            if not self.runtime.owns(part):
                return
            buf = lg.read(offset, self.load_buffer_bytes).read_bytes()
            next_offset = offset
            for batch in iter_batches(buf):
                next_offset = batch.next_offset
                if batch.is_control:
                    continue
                for rec in batch.records:
                    records += 1
                    try:
                        tid = decode_key(rec.key)
                        if rec.value is None:
                            cache.pop(tid, None)
                        else:
                            cache[tid] = TransactionMetadata.from_log(tid, decode_value(rec.value))
                    except (ValueError, UnicodeDecodeError) as e:
                        log.warning(
                            "%s-%d offset %d: skipping an unreadable record: %s",
                            TRANSACTION_STATE_TOPIC,
                            part.partition,
                            rec.offset,
                            e,
                        )
            if next_offset <= offset:
                break
            offset = next_offset
        if not self.runtime.mark_loaded(part, lambda: setattr(part, "cache", cache)):
            return
        pending = [md for md in cache.values() if md.state in PREPARE_STATES]
        log.info(
            "loaded %s-%d (coordinator epoch %d): %d transactional ids from %d records in %.3fs, "
            "%d transactions to complete",
            TRANSACTION_STATE_TOPIC,
            part.partition,
            part.coordinator_epoch,
            len(cache),
            records,
            time.monotonic() - started,
            len(pending),
        )
        if self.on_loaded is not None:
            try:
                self.on_loaded(part.partition, part.coordinator_epoch, pending)
            except Exception:  # noqa: BLE001
                log.exception(
                    "completing the pending transactions of %s-%d failed", TRANSACTION_STATE_TOPIC, part.partition
                )
