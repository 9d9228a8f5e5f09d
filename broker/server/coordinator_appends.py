"""The coordinators' own appends with acks=all: offsets, transaction state, transaction markers.

Kafka appends every coordinator record through ``ReplicaManager.appendRecords`` with
``requiredAcks = -1``: ``GroupMetadataManager.storeOffsets`` (``offsets.commit.required.acks``,
default -1), ``TransactionStateManager.appendTransactionToLog`` (``TransactionLog.EnforcedRequiredAcks``)
and ``KafkaApis.handleWriteTxnMarkersRequest``.  The write is answered (and the coordinator's cache
changed) only once the high watermark passed it, so an election cannot undo what a client saw
acknowledged.  :class:`CoordinatorAppends` is that path for pyklog's coordinators:

* :meth:`CoordinatorAppends.append` appends to the leader log of a partition this broker leads, at
  the leader epoch the caller expects (the coordinator epoch; another epoch is NOT_LEADER_OR_FOLLOWER),
  under the replica manager's partition lock after :meth:`ReplicaManager.check_enough_replicas`
  (NOT_ENOUGH_REPLICAS: nothing appended), as a Produce with acks=all does.  It returns the
  :class:`ReplicaWait` to wait on, or None when the partition has a single replica (the append is
  then already "replicated", pyklog's single-broker behaviour).
* :meth:`CoordinatorAppends.await_replicated` calls ``callback(error)`` once the ISR has the
  append (``error`` None), or with the PyklogError that ended the wait: NOT_LEADER_OR_FOLLOWER
  (leadership moved), NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR fell below min.insync.replicas),
  REQUEST_TIMED_OUT (not replicated in time).  The wait holds no thread: it is a
  :class:`~pyklog.broker.server.purgatory.DelayedOperation` in this object's own purgatory (Kafka's
  ``DelayedProduce``), completed by a high-watermark move, a role change, its timer or shutdown.
  The callback runs on that thread (a follower's Fetch handler, the ISR task, the timer, or the
  caller's when already done) and must be quick and must not block.
* :meth:`CoordinatorAppends.wait_replicated` is the blocking form for callers that hold a lock
  across the write (the transaction coordinator; bounded by the timeout).

It implements :class:`pyklog.broker.coordinator.partition_writer.CoordinatorPartitionWriter`, the
path the coordinator package declares (the coordinators never import the server); :class:`ReplicaWait`
is declared there too.  Each coordinator maps the errors the Kafka way (offsets:
``GroupMetadataManager.storeOffsets``; transaction state: ``TransactionStateManager.appendTransactionToLog``),
see :func:`pyklog.broker.coordinator.partition_writer.coordinator_error_for`.

Thread-safety: thread-safe; no lock of its own beyond the purgatory's and the partition's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from pyklog.broker.coordinator.partition_writer import ReplicaWait
from pyklog.broker.errors import NotLeaderOrFollowerError, PyklogError, RequestTimedOutError
from pyklog.broker.server.purgatory import DelayedOperation, Purgatory

log = logging.getLogger(__name__)

#: Kafka's default ``offsets.commit.timeout.ms`` / the transaction coordinator's request timeout
DEFAULT_REPLICATION_TIMEOUT_MS = 5000


class CoordinatorAppends:
    """acks=all appends of the coordinators (see the module docstring).  ``replica_manager`` is the
    broker's :class:`~pyklog.broker.server.replica_manager.ReplicaManager`, which builds it and calls
    :meth:`check` when a partition's high watermark, leadership or ISR changed."""

    def __init__(
        self,
        replica_manager,
        timeout_ms: int = DEFAULT_REPLICATION_TIMEOUT_MS,
        *,
        on_append: Callable[[str, int, int], None] | None = None,
    ):
        self.replica_manager = replica_manager
        self.timeout_ms = int(timeout_ms)
        self.purgatory = Purgatory(self._complete, name="coordinator-append")
        #: ``on_append(topic, partition, nbytes)``: wakes the long-polling Fetches of the partition
        #: (the followers': without it a follower would see the write only after its
        #: replica.fetch.wait.max.ms, and the write would wait that long for the ISR)
        self.on_append = on_append

    # ------------------------------------------------------------------ append

    def append(self, topic: str, partition: int, batch, *, leader_epoch: int | None = None, from_client: bool = False):
        """Append ``batch`` as the leader of ``topic``-``partition``; returns ``(AppendInfo, ReplicaWait
        | None)``.  ``leader_epoch`` (the coordinator epoch) must be the partition's current leader
        epoch, else NOT_LEADER_OR_FOLLOWER and nothing is appended.  Raises the log's errors and
        NOT_ENOUGH_REPLICAS (ISR below min.insync.replicas, nothing appended).  Caller's thread."""
        rm = self.replica_manager
        lg = rm.leader_log(topic, partition)  # UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER
        part = rm.partition(topic, partition)
        if part is None or not part.replicated:
            epoch = rm.leader_epoch(topic, partition)
            if leader_epoch is not None and leader_epoch >= 0 and epoch != leader_epoch and part is not None:
                raise NotLeaderOrFollowerError(
                    f"{topic}-{partition} is at leader epoch {epoch}, the coordinator at {leader_epoch}"
                )
            return lg.append(batch, leader_epoch=max(epoch, 0), from_client=from_client), None
        with part.lock:
            if not part.is_leader or (
                leader_epoch is not None and leader_epoch >= 0 and part.leader_epoch != leader_epoch
            ):
                raise NotLeaderOrFollowerError(
                    f"broker {rm.broker_id} does not lead {topic}-{partition} at epoch {leader_epoch} "
                    f"(leader {part.leader}, epoch {part.leader_epoch})"
                )
            rm.check_enough_replicas(topic, partition)
            epoch = part.leader_epoch
            info = lg.append(batch, leader_epoch=epoch, from_client=from_client)
        # the followers are woken and the high watermark moves in await_replicated, outside the
        # caller's locks: a follower's Fetch completed there may move the high watermark, whose
        # completions take the offsets partition's lock
        nbytes = 0 if getattr(info, "duplicate", False) else len(batch)
        return info, ReplicaWait(topic, partition, info.last_offset + 1, epoch, nbytes)

    # ------------------------------------------------------------------ wait

    def status(self, wait: ReplicaWait):
        """None (keep waiting), 0 (replicated) or the PyklogError that ends the wait."""
        return self.replica_manager.produce_status(wait.topic, wait.partition, wait.required_offset, wait.leader_epoch)

    def await_replicated(
        self, waits, callback: Callable[[PyklogError | None], None], timeout_ms: int | None = None
    ) -> None:
        """``callback(None)`` once every wait in ``waits`` (a :class:`ReplicaWait`, a list of them,
        or None) is replicated, else ``callback(first error)``; never blocks.  Call it holding
        no lock a completion may take (the callback may run on this thread)."""
        if waits is None:
            waits = []
        elif isinstance(waits, ReplicaWait):
            waits = [waits]
        else:
            waits = [w for w in waits if w is not None]
        if not waits:
            callback(None)
            return
        for w in waits:
            if w.nbytes and self.on_append is not None:  # the followers' long polls see the write now
                try:
                    self.on_append(w.topic, w.partition, w.nbytes)
                except Exception:  # noqa: BLE001 - a wake-up failing never fails the write
                    log.exception("waking the fetches of %s-%d failed", w.topic, w.partition)
            # an ISR of the leader alone: replicated by the append itself
            part = self.replica_manager.partition(w.topic, w.partition)
            if part is not None and part.is_leader:
                self.replica_manager.maybe_increment_high_watermark(part)
        payload = (waits, callback)
        self.purgatory.watch(
            DelayedOperation(
                [(w.topic, w.partition) for w in waits],
                self.timeout_ms if timeout_ms is None else timeout_ms,
                0,
                0,
                payload,
                ready=lambda: all(self.status(w) is not None for w in waits),
            )
        )

    def wait_replicated(self, waits, timeout_ms: int | None = None) -> PyklogError | None:
        """Blocking form of :meth:`await_replicated`: the error, or None once replicated."""
        done = threading.Event()
        result: list = []

        def _cb(err):
            result.append(err)
            done.set()

        self.await_replicated(waits, _cb, timeout_ms)
        limit = (self.timeout_ms if timeout_ms is None else timeout_ms) / 1000.0 + 5.0
        if not done.wait(limit):
            return RequestTimedOutError("the coordinator append was not answered in time")
        return result[0]

    def _complete(self, op: DelayedOperation) -> None:
        """The purgatory's completion: compute each wait's outcome and call back once."""
        waits, callback = op.payload
        error = None
        for w in waits:
            try:
                status = self.status(w)
            except PyklogError as e:
                status = e
            if status is None:
                status = RequestTimedOutError(
                    f"{w.topic}-{w.partition}: not replicated to the ISR up to offset {w.required_offset} in time"
                )
            if status != 0:
                error = status
                break
        try:
            callback(error)
        except Exception:  # noqa: BLE001
            log.exception("a coordinator append's completion failed")

    def check(self, topic: str, partition: int) -> None:
        """A high watermark, the leadership or the ISR of the partition changed (no lock held)."""
        self.purgatory.check((topic, partition))

    def shutdown(self) -> None:
        """Complete every waiting append now (REQUEST_TIMED_OUT or its outcome)."""
        self.purgatory.complete_all()


__all__ = ["CoordinatorAppends", "DEFAULT_REPLICATION_TIMEOUT_MS"]
