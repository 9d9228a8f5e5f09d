"""Log: one partition's log, a directory ``<log.dir>/<topic>-<partition>/`` of segments.

The local log of Kafka's storage layer (``LocalLog`` with the append path of ``UnifiedLog``):
the segment list, append, read, roll, flush, retention, truncation and segment swaps.  The two
other parts of Kafka's storage layer are their own modules:

- :mod:`~pyklog.broker.log.loader` (``LogLoader``): loading the directory at start-up,
  leftover ``.swap``/``.cleaned``/``.deleted`` files, recovery from the recovery point,
  index and producer-state rebuild;
- :mod:`~pyklog.broker.log.validator` (``LogValidator``): the per-batch and per-record rules of
  an append and the offset assignment.

Writes go to the last (active) segment; it rolls at ``segment.bytes``, after ``segment.ms``,
when an index is full or when relative offsets would overflow int32.  Appends validate the
batches' framing and CRC-32C and rewrite only the 8-byte baseOffset (plus the leader epoch,
neither covered by the CRC), so records are never decoded on the write path, except that a
compacted topic's records are read up to their key length (null keys are refused).

Transactions (KIP-98; Kafka's ``UnifiedLog`` with ``ProducerStateManager`` and
``TransactionIndex``): a batch with the transactional attribute opens (or continues) its
producer's transaction; :meth:`Log.append_control_marker` writes the COMMIT/ABORT marker that
ends it (WriteTxnMarkers calls it).  The *last stable offset* (:attr:`Log.last_stable_offset`)
is the first offset of the oldest open transaction, else the high watermark; READ_COMMITTED
fetches read up to it.  Each ABORT of a transaction with data adds an entry to the
``.txnindex`` of the segment holding the marker; :meth:`Log.aborted_transactions` reads them
for Fetch.  The producer snapshots carry the open transactions, so the LSO survives restarts;
recovery rebuilds the ``.txnindex`` of the segments it revalidates.

Replication (Kafka's ``UnifiedLog`` with ``LeaderEpochFileCache``, KIP-101/279):

- every batch carries the leader epoch it was written in (``partitionLeaderEpoch``); the
  :attr:`Log.leader_epoch_cache` (:mod:`~pyklog.broker.log.leader_epoch`) maps each epoch to its first
  offset and answers :meth:`Log.end_offset_for_epoch` (OffsetsForLeaderEpoch); it is persisted in
  ``leader-epoch-checkpoint``, checked against the batches at load and rebuilt from them if needed;
- :meth:`Log.append_as_follower` copies the leader's batches keeping their offsets and epochs;
  :meth:`Log.truncate_to` / :meth:`Log.truncate_fully_and_start_at` cut a follower back to the
  leader (epoch cache, indexes, ``.txnindex``, producer state and snapshots follow);
- the high watermark (:attr:`Log.high_watermark`) is the log end offset unless the log is
  :attr:`Log.replicated`; then only :meth:`Log.update_high_watermark` (and truncation) moves it; the
  LogManager checkpoints it in ``replication-offset-checkpoint``.

Concurrency (the design's "copy-on-write segment list"):

- one ``threading.RLock`` per log serialises appends, rolls, flushes' bookkeeping, retention,
  truncation and segment swaps;
- every mutation ends by publishing a new immutable :class:`LogView` (segments tuple, their
  base offsets, log start/end offset and the byte position of the end of the active segment);
- readers (:meth:`read`, :meth:`offset_for_timestamp`, :meth:`offsets_before`,
  :attr:`last_stable_offset`, :meth:`aborted_transactions`) take no lock:
  they read ``self._view`` once, binary-search its base offsets and ``pread`` the files up to the
  view's end position, so they never wait for an append and never see half-written bytes;
- deleted segments are renamed ``.deleted`` and unlinked only after ``file.delete.delay.ms``, and
  their file objects stay open until then, so an in-flight ``sendfile`` stays valid.

Background work (Kafka's ``UnifiedLog`` takes the broker's ``KafkaScheduler`` for the same two
jobs): the fsync of a segment sealed by a roll ("flush-log") and the delayed unlink of deleted
segments ("delete-file") run on a :class:`~pyklog.broker.common.scheduler.Scheduler`.  The
LogManager passes its own; a Log opened alone (tools, unit tests) uses one module-level fallback
scheduler (daemon thread ``log-scheduler-standalone``, started on first use, shared by every such
Log, never shut down).  :meth:`Log.close` cancels the log's pending deletes and carries them out
at once, and flushes everything, so nothing depends on the scheduler still running at close: a
scheduler shut down first (the LogManager's order) drops tasks, never files or data.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import sys
import threading
import time
import uuid
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import IO, TYPE_CHECKING, Any, NamedTuple, NoReturn

from pyklog.broker.common.scheduler import ScheduledTask, Scheduler
from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
)
from pyklog.broker.record.batch import CONTROL_ABORT, CONTROL_COMMIT, build_control_batch
from pyklog.broker.record.header import BatchHeader

from .config import LogConfig
from .dir_failure import LogDirFailureChannel
from .leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochFileCache
from .loader import LogLoader, RecoveryReport, SegmentCut, rebuild_producer_state, segment_kwargs
from .producer_state import SNAPSHOT_SUFFIX, CompletedTxn, ProducerEntry, ProducerStateManager, read_marker
from .segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX, LogSegment
from .txn_index import AbortedTxn
from .validator import assign_offsets, validate_batches, validate_follower_batches

if TYPE_CHECKING:  # the cleaner imports this module
    from .cleaner import CleanerStats

log = logging.getLogger(__name__)

_standalone_scheduler: Scheduler | None = None
_standalone_lock = threading.Lock()


def _standalone() -> Scheduler:
    """The fallback scheduler of Logs opened without one (started on first use)."""
    global _standalone_scheduler
    with _standalone_lock:
        if _standalone_scheduler is None or not _standalone_scheduler.running:
            _standalone_scheduler = Scheduler("log-scheduler-standalone")
        return _standalone_scheduler


EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
_INT32_MAX = 0x7FFFFFFF
_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")
DELETE_DIR_SUFFIX = "-delete"


def _now_ms() -> int:
    return int(time.time() * 1000)


def parse_topic_partition(dirname: str) -> tuple[str, int]:
    """``"my-topic-3"`` -> ``("my-topic", 3)``.  Raises InvalidTopicError naming what was read."""
    name = os.path.basename(os.path.normpath(dirname))
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit():
        raise InvalidTopicError(f"expected a log directory named <topic>-<partition>, read {name!r}")
    if not _LEGAL_TOPIC.match(topic) or topic in (".", ".."):
        raise InvalidTopicError(
            f"log directory {name!r}: topic {topic!r} is not a legal topic name (1-249 of [a-zA-Z0-9._-])"
        )
    return topic, int(part)


class AppendInfo(NamedTuple):
    first_offset: int
    last_offset: int
    log_append_time: int
    log_start_offset: int
    record_count: int
    duplicate: bool


class FetchSlice(NamedTuple):
    """Whole batches of one segment: ``os.sendfile(sock, file.fileno(), position, size)``."""

    file: IO[bytes]
    position: int
    size: int
    first_offset: int

    def read_bytes(self) -> bytes:
        if not self.size:
            return b""
        return os.pread(self.file.fileno(), self.size, self.position)


class LogView(NamedTuple):
    """Immutable snapshot of the segment list published after every change."""

    segments: tuple
    bases: tuple
    log_start_offset: int
    log_end_offset: int
    end_position: int  # bytes of the active segment that are visible to readers
    first_unstable_offset: int | None = None  # first offset of the oldest open transaction


class Log:
    """One partition's log.  Thread-safe: writers serialise on a per-log lock, readers are
    lock-free against an immutable segment-list snapshot (see the module docstring)."""

    def __init__(
        self,
        dir: str,
        config: LogConfig | None = None,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
        scheduler: Scheduler | None = None,
        high_watermark: int | None = None,
        replicated: bool = False,
        failure_channel: LogDirFailureChannel | None = None,
    ):
        """``scheduler`` runs the sealed-segment flushes and the delayed deletes (the
        LogManager's; None: the module's fallback scheduler, see the module docstring).
        ``high_watermark``: the value read from ``replication-offset-checkpoint`` (None: no
        entry); ``replicated``: see :attr:`replicated`.  ``failure_channel``: where I/O errors
        turn the log dir offline (the LogManager's; None: one of this log's own)."""
        self.dir = os.path.abspath(dir)
        #: the log directory holding this log (``log.dirs`` entry)
        self.log_dir = os.path.dirname(self.dir)
        self._failures = failure_channel if failure_channel is not None else LogDirFailureChannel()
        self.topic, self.partition = parse_topic_partition(self.dir)
        self._tp = f"{self.topic}-{self.partition}"  # for the validator's messages
        self.config = config or LogConfig()
        self._lock = threading.RLock()
        self._seal_flush_lock = threading.Lock()
        self._closed = False
        self._scheduler = scheduler
        # deletes waiting for file.delete.delay.ms: (task, or None if it could not be scheduled; segments)
        self._pending_deletes: list[tuple[ScheduledTask | None, list[LogSegment]]] = []
        self._producers = ProducerStateManager(self.dir)
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()
        self.recovery_point = recovery_point
        self.cleaner_checkpoint = 0  # offset up to which the log has been compacted
        self._replicated = bool(replicated)
        os.makedirs(self.dir, exist_ok=True)
        self.last_recovery = self._load(recovery_point, log_start_offset, clean_shutdown)
        # Kafka: HW on load = the checkpointed value clamped to [log start, LEO]; no entry -> 0
        hw = 0 if high_watermark is None else high_watermark
        self._hw = min(max(hw, self._log_start_offset), self._leo)

    @classmethod
    def open(cls, dir: str, config: LogConfig | None = None, **kw: Any) -> Log:
        """Create the directory if needed, load the segments and recover unless the previous
        shutdown was clean."""
        os.makedirs(dir, exist_ok=True)
        return cls(dir, config, **kw)

    # ================================================================== loading
    def _seg_kwargs(self) -> dict:
        return segment_kwargs(self.config)

    def _load(self, recovery_point: int, log_start_offset: int, clean: bool) -> RecoveryReport:
        """Load the directory through :class:`~pyklog.broker.log.loader.LogLoader` (swap and
        delete leftovers, recovery from the recovery point, index and producer-state rebuild)
        and publish the first view."""
        loaded = LogLoader(
            self.dir,
            self.config,
            self._producers,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            clean_shutdown=clean,
        ).load()
        self.recovery_point = loaded.recovery_point
        self._segments = loaded.segments
        self._leo = loaded.log_end_offset
        self._log_start_offset = loaded.log_start_offset
        self._publish()
        self.leader_epoch_cache = load_leader_epoch_cache(
            self.dir, self._segments, self._log_start_offset, self._leo, lambda: self._view.log_end_offset
        )
        return loaded.report

    # ================================================================== views
    def _publish(self) -> None:
        segs = tuple(self._segments)
        self._view = LogView(
            segs,
            tuple(s.base_offset for s in segs),
            self._log_start_offset,
            self._leo,
            segs[-1].size,
            self._producers.first_unstable_offset,
        )

    @property
    def view(self) -> LogView:
        return self._view

    @property
    def log_start_offset(self) -> int:
        return self._view.log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._view.log_end_offset

    # ================================================================== high watermark
    @property
    def high_watermark(self) -> int:
        """The high watermark (Kafka's ``highWatermark``): offsets below it are on every in-sync
        replica and may be read by consumers.  Not :attr:`replicated`: the log end offset.
        Lock-free."""
        if not self._replicated:
            return self._view.log_end_offset
        return self._hw

    @property
    def replicated(self) -> bool:
        """False (default, replication factor 1): the high watermark follows the log end offset,
        as before replication existed.  True (set by the ReplicaManager on becoming leader or
        follower): it moves only through :meth:`update_high_watermark` (and truncation).  Turning
        it on keeps the value loaded from ``replication-offset-checkpoint`` (0, i.e. the log start
        offset, without an entry) unless the log was appended to meanwhile (then the log end
        offset at that append).  Takes the lock."""
        return self._replicated

    @replicated.setter
    def replicated(self, value: bool) -> None:
        with self._lock:
            value = bool(value)
            if value and not self._replicated:
                self._hw = min(max(self._hw, self._log_start_offset), self._leo)
            elif not value and self._replicated:
                self._hw = self._leo
            self._replicated = value

    def update_high_watermark(self, offset: int) -> bool:
        """Move the high watermark forward to ``offset`` clamped to [log start offset, log end
        offset] (Kafka's ``maybeIncrementHighWatermark``/follower ``updateHighWatermark``: a
        leader's minimum ISR end offset, a follower's min(leader HW, own LEO)).  Never moves it
        backwards (only truncation does).  Returns whether it moved.  Takes the lock."""
        with self._lock:
            new = min(max(offset, self._log_start_offset), self._leo)
            if new <= self._hw:
                return False
            self._hw = new
            return True

    # ================================================================== leader epochs
    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int]:
        """``(epoch, end_offset)`` for OffsetsForLeaderEpoch (Kafka's ``endOffsetForEpoch``,
        :meth:`LeaderEpochFileCache.end_offset_for` against the current log end offset);
        ``(-1, -1)`` when undefined.  Lock-free."""
        found_epoch, end = self.leader_epoch_cache.end_offset_for(epoch, self._view.log_end_offset)
        if end == UNDEFINED_EPOCH_OFFSET:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        return found_epoch, end

    def truncation_offset(self, leader_epoch: int, leader_end_offset: int) -> tuple[int, bool]:
        """Where a follower truncates given the leader's OffsetsForLeaderEpoch answer
        ``(leader_epoch, leader_end_offset)`` for the follower's latest epoch (Kafka's
        ``AbstractFetcherThread.getOffsetTruncationState``, KIP-101 with KIP-279).  Returns
        ``(offset, completed)``; the caller truncates to ``offset`` and, when not ``completed``,
        asks the leader again for its (new) latest epoch:

        - the leader's answer is undefined (-1): the high watermark (bounded by the log end offset);
        - the follower has no epoch at or below ``leader_epoch``: the leader's end offset;
        - the follower's largest epoch at or below it is another one (the leader answered an
          epoch the follower never had): the follower's end offset of that epoch, not completed;
        - the same epoch: the smaller of both end offsets.

        Never above the log end offset.  Lock-free (read-only)."""
        leo = self._view.log_end_offset
        if leader_end_offset == UNDEFINED_EPOCH_OFFSET or leader_epoch == UNDEFINED_EPOCH:
            return min(self.high_watermark, leo), True
        f_epoch, f_end = self.end_offset_for_epoch(leader_epoch)
        if f_end == UNDEFINED_EPOCH_OFFSET:
            return min(leader_end_offset, leo), True
        if f_epoch != leader_epoch:
            return min(f_end, leo), False
        return min(f_end, leader_end_offset, leo), True

    @property
    def latest_epoch(self) -> int:
        """The latest leader epoch in the cache (-1: none).  Lock-free."""
        return self.leader_epoch_cache.latest_epoch

    def assign_epoch_start_offset(self, epoch: int, start_offset: int | None = None) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (default: the log end offset), as the
        ReplicaManager does when this broker becomes leader (Kafka's
        ``maybeAssignEpochStartOffset``).  Returns whether the cache changed.  Takes the lock."""
        with self._lock:
            try:
                return self.leader_epoch_cache.assign(epoch, self._leo if start_offset is None else start_offset)
            except OSError as e:
                self._epoch_write_failed(e)

    def _storage_error(self, path: str, what: str, e: OSError) -> None:
        """An I/O error of this log: its log dir goes offline (reported once per dir and cause)."""
        self._failures.maybe_add_offline_log_dir(self.log_dir, path, what, e)

    @property
    def offline(self) -> bool:
        """True once this log's directory is offline: every write fails with KAFKA_STORAGE_ERROR."""
        return self._failures.has_offline_log_dir(self.log_dir)

    def _epoch_write_failed(self, e: OSError) -> NoReturn:
        path = self.leader_epoch_cache.file.path
        self._storage_error(e.filename or path, "write", e)
        raise KafkaStorageError(f"{self.topic}-{self.partition}: write of {path} failed: {e}") from e

    @property
    def segments(self) -> tuple:
        return self._view.segments

    @property
    def size(self) -> int:
        """Total bytes of the segments (lock-free)."""
        v = self._view
        return sum(s.size for s in v.segments[:-1]) + v.end_position

    @property
    def active_segment(self) -> LogSegment:
        return self._view.segments[-1]

    @property
    def closed(self) -> bool:
        return self._closed

    def __repr__(self) -> str:
        v = self._view
        return (
            f"Log({self.topic}-{self.partition}, start={v.log_start_offset}, "
            f"end={v.log_end_offset}, segments={len(v.segments)})"
        )

    # ================================================================== append
    def append(
        self, data: bytes | bytearray | memoryview, *, leader_epoch: int | None = None, from_client: bool = True
    ) -> AppendInfo:
        """Append one or more v2 record batches and assign their offsets.

        ``data`` may be bytes, a memoryview or a bytearray.  A bytearray is modified in place (the
        caller hands it over); bytes/memoryview are not copied: each batch's rewritten 16-byte
        prefix and the caller's remaining bytes go to disk in one ``os.pwritev`` (a copy is made
        only for LogAppendTime topics and appends of more than 256 batches).  Validation
        (:func:`~pyklog.broker.log.validator.validate_batches`: framing, magic, size, CRC-32C,
        and null keys on compacted topics) happens outside the lock; offsets, producer sequences
        and the write happen under the per-log lock.  Nothing of a failing append is written.
        Raises CorruptRecordError, MessageTooLargeError (one batch over ``max.message.bytes``),
        RecordListTooLargeError (more than a segment), InvalidRecordError
        (RecordValidationError with ``record_errors`` for a per-record rule),
        OutOfOrderSequenceError, InvalidProducerEpochError, KafkaStorageError (log closed / I/O),
        InvalidTxnStateError (a non-transactional batch of a producer whose transaction is open).
        A retried duplicate batch returns its original offsets with ``duplicate=True``.

        ``leader_epoch`` is stamped into every batch (``partitionLeaderEpoch``) and, when new, recorded
        in the leader epoch cache at the first batch's offset; None (the coordinators' appends): the
        cache's latest epoch, 0 when it has none, so an append that names no epoch never goes back.

        ``from_client=False`` is the broker's own coordinators (Kafka's
        ``AppendOrigin.COORDINATOR``): producer sequences are not checked (epochs are), and a
        control batch is accepted and handled as :meth:`append_control_marker` (then
        TransactionCoordinatorFencedError too).  Clients may not write control batches.
        """
        cfg = self.config
        buf: bytearray | memoryview
        if isinstance(data, bytearray):
            buf = data  # handed over: offsets are rewritten in place
        elif cfg.log_append_time:
            buf = bytearray(data)  # attributes, max timestamp and CRC change: one copy
        else:
            # zero copy: the rewritten 16-byte prefix of each batch and the caller's bytes are
            # written together with one pwritev
            buf = memoryview(data)
            if buf.format != "B" or buf.ndim != 1:
                buf = buf.cast("B")
        n = len(buf)
        # positional arguments: this runs on every produce request
        checked = validate_batches(
            buf, self._tp, cfg.max_message_bytes, cfg.segment_bytes, from_client, "compact" in cfg.cleanup_policy
        )
        producer = checked.producer
        records = checked.records
        log_append = cfg.log_append_time
        marker = None
        if producer is not None and producer.is_control:  # only from the broker (validated)
            pos = checked.batches[0][0]
            try:
                marker = read_marker(bytes(buf[pos : pos + producer.size]))
            except CorruptRecordError as e:
                raise InvalidRecordError(f"{self._tp}: unreadable transaction marker: {e}") from e
            if marker[0] not in (CONTROL_ABORT, CONTROL_COMMIT):
                raise InvalidRecordError(f"{self._tp}: unknown control record type {marker[0]} (0 ABORT, 1 COMMIT)")
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
            self._failures.check_online(self.log_dir, self._tp)
            if leader_epoch is None:
                leader_epoch = max(self.leader_epoch_cache.latest_epoch, 0)
            now = _now_ms()
            if marker is not None and producer is not None:  # a marker always comes with its batch's header
                self._producers.check_marker(producer.producer_id, producer.producer_epoch, marker[1])
            elif producer is not None:
                dup = self._producers.check(producer, from_client)
                if dup is not None:
                    log.debug(
                        "%s-%d: duplicate batch of producer %d seq %d..%d at offset %d",
                        self.topic,
                        self.partition,
                        producer.producer_id,
                        dup.first_seq,
                        dup.last_seq,
                        dup.first_offset,
                    )
                    return AppendInfo(
                        dup.first_offset, dup.last_offset, -1, self._log_start_offset, producer.records_count, True
                    )
            first_offset = self._leo
            out, metas, next_offset, max_ts_all = assign_offsets(
                buf, checked.batches, first_offset, leader_epoch, now if log_append else None
            )
            if leader_epoch >= 0 and leader_epoch != self.leader_epoch_cache.latest_epoch:
                # before the write, as Kafka: a crash in between leaves an epoch starting at the
                # log end offset, which loading drops (truncate_from_end)
                try:
                    self.leader_epoch_cache.assign(leader_epoch, first_offset)
                except OSError as e:
                    self._epoch_write_failed(e)
            seg = None
            try:
                seg = self._maybe_roll(n, first_offset, next_offset - 1, max_ts_all, now)
                seg.append(out, metas, n)
            except OSError as e:
                what, path = ("write", seg.log_path) if seg is not None else ("segment roll", self.dir)
                self._storage_error(e.filename or path, what, e)
                raise KafkaStorageError(f"{self.topic}-{self.partition}: {what} of {path} failed: {e}") from e
            if marker is not None and producer is not None:
                done = self._producers.end_txn(
                    producer.producer_id,
                    producer.producer_epoch,
                    marker[1],
                    marker[0] == CONTROL_COMMIT,
                    first_offset,
                    metas[0][3],
                )
                if done is not None and done.is_aborted:
                    self._index_aborted(seg, done)
            elif producer is not None:
                self._producers.update(producer, first_offset, next_offset - 1, metas[0][3])
            self._leo = next_offset
            if not self._replicated:
                self._hw = next_offset
            self._publish()
            self._unflushed_messages += records
            if self._unflushed_messages >= cfg.flush_interval_messages or (
                cfg.flush_interval_ms is not None and now - self._last_flush_ms >= cfg.flush_interval_ms
            ):
                try:
                    self._flush_locked()
                except OSError as e:  # appended but not durable: the producer is told to retry
                    self._storage_error(e.filename or self.dir, "flush", e)
                    raise KafkaStorageError(f"{self.topic}-{self.partition}: flush failed: {e}") from e
            return AppendInfo(
                first_offset, next_offset - 1, now if log_append else -1, self._log_start_offset, records, False
            )

    def _index_aborted(self, seg: LogSegment, done: CompletedTxn) -> None:
        """Under the lock: add an aborted transaction to the index of ``seg`` (the segment that
        holds its marker).  The marker is written already; an index entry that cannot be
        written is rebuilt by recovery, so the failure is logged, not raised."""
        entry = AbortedTxn(
            done.producer_id, done.first_offset, done.last_offset, self._producers.last_stable_offset_after(done)
        )
        try:
            seg.txn_index.append(entry)
        except (OSError, ValueError) as e:
            if isinstance(e, OSError):
                self._storage_error(seg.txn_index.path, "write", e)
            log.error(
                "%s: could not index aborted transaction %s: %s (a restart without a clean shutdown rebuilds it)",
                self.dir,
                entry,
                e,
            )

    def append_control_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        *,
        leader_epoch: int | None = None,
    ) -> AppendInfo:
        """Write a transaction marker (Kafka's ``EndTransactionMarker``, appended by
        WriteTxnMarkers) for ``producer_id`` and end its open transaction.

        One control batch: attributes control + transactional, the producer id/epoch, base
        sequence -1, one record with key (version 0, type 0 ABORT / 1 COMMIT) and value (version
        0, ``coordinator_epoch``).  The last stable offset moves past the transaction; an ABORT
        of a transaction that had data adds an entry to the segment's ``.txnindex``.  A marker
        for a producer with no open transaction is still written and changes no index (retried
        markers).  Raises InvalidProducerEpochError (``producer_epoch`` older than the
        producer's), TransactionCoordinatorFencedError (``coordinator_epoch`` older than the one
        stored for the producer), KafkaStorageError.  Thread-safe (the append lock); the caller
        notifies the fetch purgatory."""
        # the wire types (int64, int16, int32); an epoch older than the producer's (-1 too) is
        # the producer state's INVALID_PRODUCER_EPOCH below, as in Kafka
        if (
            not 0 <= producer_id < 1 << 63
            or not -(1 << 15) <= producer_epoch < 1 << 15
            or not -(1 << 31) <= coordinator_epoch < 1 << 31
        ):
            raise InvalidRecordError(
                f"{self._tp}: a transaction marker needs a producer id >= 0 (int64), an int16 "
                f"producer epoch and an int32 coordinator epoch, got {producer_id}, "
                f"{producer_epoch}, {coordinator_epoch}"
            )
        raw = build_control_batch(
            CONTROL_COMMIT if commit else CONTROL_ABORT,
            producer_id,
            producer_epoch,
            coordinator_epoch=coordinator_epoch,
        )
        return self.append(bytearray(raw), leader_epoch=leader_epoch, from_client=False)

    def append_as_follower(self, data: bytes | bytearray | memoryview) -> AppendInfo:
        """Append batches copied from the leader (Kafka's ``appendAsFollower``,
        ``AppendOrigin.REPLICATION``): offsets and ``partitionLeaderEpoch`` are the leader's and
        are kept as they are.

        The first batch must start at the log end offset or later and each batch after the previous
        one (Kafka's rule; a gap means the leader's cleaner removed batches, or its recovery a damaged
        range: logged at WARNING on a log that is not compacted); an offset below the log end offset
        raises OffsetOutOfRangeError and nothing is written.  Framing and CRC-32C are checked
        (CorruptRecordError, nothing written); ``max.message.bytes`` and the per-record rules of
        client appends are not (the leader applied them).  Under the lock, per batch: the leader
        epoch cache gets (partitionLeaderEpoch, base offset) when the epoch is new (before the
        write), the producer state is updated without sequence-duplicate checks, a transaction
        marker ends its transaction and an ABORT indexes it in the ``.txnindex``.  Data larger
        than ``segment.bytes`` is written as several appends, each to one segment (rolling as
        needed).  The high watermark does not move (the ReplicaManager sets it from the
        leader's); on a log that is not :attr:`replicated` it follows the end offset.  Returns
        the first/last offsets; raises KafkaStorageError on I/O errors or a closed log."""
        buf = memoryview(data)
        if buf.format != "B" or buf.ndim != 1:
            buf = buf.cast("B")
        cfg = self.config
        # framing and CRC outside the lock, against the end offset as it is now (one fetcher
        # thread per partition appends, so it rarely changes meanwhile: then it is done again)
        leo = self._view.log_end_offset
        checked = validate_follower_batches(buf, self._tp, cfg.segment_bytes, leo)
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
            self._failures.check_online(self.log_dir, self._tp)
            if self._leo != leo:
                leo = self._leo
                checked = validate_follower_batches(buf, self._tp, cfg.segment_bytes, leo)
            if checked.batches[0][1].base_offset > leo and not cfg.compact:
                log.warning(
                    "%s: the leader's batches continue at offset %d, the log ends at %d: an offset "
                    "gap in the leader's log (recovery removed a damaged range there)",
                    self.dir,
                    checked.batches[0][1].base_offset,
                    leo,
                )
            markers = {}
            for pos, h in checked.batches:
                if h.is_control and h.producer_id >= 0:
                    try:
                        markers[pos] = read_marker(bytes(buf[pos : pos + h.size]))
                    except CorruptRecordError as e:
                        log.warning(
                            "%s: unreadable transaction marker at offset %d copied as is: %s",
                            self.dir,
                            h.base_offset,
                            e,
                        )
            first_offset = checked.batches[0][1].base_offset
            groups: list[list[tuple[int, BatchHeader]]] = []
            cur: list[tuple[int, BatchHeader]] = []
            cur_size = 0
            for pos, h in checked.batches:
                if cur and cur_size + h.size > cfg.segment_bytes:
                    groups.append(cur)
                    cur, cur_size = [], 0
                cur.append((pos, h))
                cur_size += h.size
            groups.append(cur)
            now = _now_ms()
            last_offset = first_offset - 1
            for group in groups:
                start = group[0][0]
                end = group[-1][0] + group[-1][1].size
                g_first = group[0][1].base_offset
                g_last = group[-1][1].last_offset
                metas = [(pos - start, h.size, h.last_offset, h.max_timestamp) for pos, h in group]
                max_ts = max(m[3] for m in metas)
                for _pos, h in group:
                    if (
                        h.partition_leader_epoch >= 0
                        and h.partition_leader_epoch != self.leader_epoch_cache.latest_epoch
                    ):
                        try:
                            self.leader_epoch_cache.assign(h.partition_leader_epoch, h.base_offset)
                        except OSError as e:
                            self._epoch_write_failed(e)
                seg = None
                try:
                    seg = self._maybe_roll(end - start, g_first, g_last, max_ts, now)
                    seg.append(buf[start:end], metas, end - start)
                except OSError as e:
                    what, path = ("write", seg.log_path) if seg is not None else ("segment roll", self.dir)
                    self._storage_error(e.filename or path, what, e)
                    raise KafkaStorageError(f"{self.topic}-{self.partition}: {what} of {path} failed: {e}") from e
                for pos, h in group:
                    done = self._producers.replay(h, markers.get(pos))
                    if done is not None and done.is_aborted:
                        self._index_aborted(seg, done)
                self._leo = g_last + 1
                last_offset = g_last
                if not self._replicated:
                    self._hw = self._leo
                self._publish()
            self._unflushed_messages += checked.records
            if self._unflushed_messages >= cfg.flush_interval_messages or (
                cfg.flush_interval_ms is not None and now - self._last_flush_ms >= cfg.flush_interval_ms
            ):
                try:
                    self._flush_locked()
                except OSError as e:
                    self._storage_error(e.filename or self.dir, "flush", e)
                    raise KafkaStorageError(f"{self.topic}-{self.partition}: flush failed: {e}") from e
            return AppendInfo(first_offset, last_offset, -1, self._log_start_offset, checked.records, False)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest open transaction, else the high watermark (Kafka's
        ``lastStableOffset``; never below the log start offset).  Lock-free."""
        v = self._view
        hw = v.log_end_offset if not self._replicated else self._hw
        fu = v.first_unstable_offset
        if fu is None:
            return hw
        return min(max(fu, v.log_start_offset), hw)

    def aborted_transactions(self, start_offset: int, upper_bound_offset: int) -> list[tuple[int, int]]:
        """``(producer_id, first_offset)`` of every aborted transaction overlapping
        ``[start_offset, upper_bound_offset)``: what a READ_COMMITTED Fetch returns (Kafka's
        ``collectAbortedTransactions``: the ``.txnindex`` of the segment holding
        ``start_offset`` and of later segments until the search is complete).  Lock-free."""
        return [(t.producer_id, t.first_offset) for t in self.collect_aborted_txns(start_offset, upper_bound_offset)]

    def collect_aborted_txns(self, start_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """Like :meth:`aborted_transactions`, whole :class:`AbortedTxn` entries.  Lock-free."""
        v = self._view
        out: list[AbortedTxn] = []
        i = max(0, bisect_right(v.bases, start_offset) - 1)
        for seg in v.segments[i:]:
            found, complete = seg.txn_index.collect(start_offset, upper_bound_offset)
            out.extend(found)
            if complete:
                break
        return out

    def fetch_upper_bound(self, offset: int) -> int:
        """The upper bound of the aborted transactions a Fetch reports when the first batch it
        returns starts at ``offset``: the base offset of the segment after the one holding
        ``offset``, else the log end offset (a fetch returns batches of one segment; Kafka's
        fallback in ``addAbortedTransactions``).  Lock-free."""
        v = self._view
        i = bisect_right(v.bases, offset)
        return v.bases[i] if i < len(v.bases) else v.log_end_offset

    def open_transactions(self) -> dict[int, int]:
        """Producer id -> first offset of every open transaction (Kafka's ongoing
        transactions; DescribeProducers' ``currentTxnStartOffset``).  Takes the lock."""
        with self._lock:
            return dict(self._producers.ongoing)

    def _maybe_roll(self, size: int, first_offset: int, last_offset: int, max_ts: int, now: int) -> LogSegment:
        """Under the lock: the segment to append to, rolling first when needed."""
        seg = self._segments[-1]
        if seg.size == 0:
            return seg
        cfg = self.config
        reason = None
        if seg.size + size > cfg.segment_bytes:
            reason = "segment.bytes"
        elif seg.index_full:
            reason = "index full"
        elif last_offset - seg.base_offset > _INT32_MAX:
            reason = "relative offset overflow"
        else:
            if seg.rolling_based_timestamp is not None and seg.rolling_based_timestamp >= 0 and max_ts >= 0:
                waited = max_ts - seg.rolling_based_timestamp
            else:
                waited = now - seg.created_ms
            if waited > cfg.segment_ms:
                reason = "segment.ms"
        if reason is None:
            return seg
        return self._roll_locked(first_offset, reason)

    def roll(self) -> LogSegment:
        """Seal the active segment and start a new one at the log end offset (if the active
        segment holds anything).  Takes the lock."""
        with self._lock:
            if self._segments[-1].size == 0:
                return self._segments[-1]
            return self._roll_locked(self._leo, "requested")

    def _roll_locked(self, new_base: int, reason: str) -> LogSegment:
        old = self._segments[-1]
        old.on_become_inactive()
        new = LogSegment.create(self.dir, new_base, **self._seg_kwargs())
        self._segments = self._segments + [new]
        try:
            self._producers.take_snapshot(new_base)
            self._producers.retain_latest(2)
        except OSError as e:
            self._storage_error(e.filename or self.dir, "producer snapshot", e)
        log.info("%s: rolled segment %d -> %d (%s)", self.dir, old.base_offset, new_base, reason)
        self._publish()
        # Kafka flushes the sealed segment asynchronously ("flush-log" on the scheduler) and then
        # advances the recovery point; a scheduler already shut down leaves it to close()'s flush
        try:
            self._background().schedule(
                0, self._flush_sealed, old, new_base, name=f"flush-log-{self.topic}-{self.partition}"
            )
        except RuntimeError as e:
            log.info("%s: sealed segment %d not flushed in the background: %s", self.dir, old.base_offset, e)
        return new

    def _background(self) -> Scheduler:
        return self._scheduler if self._scheduler is not None else _standalone()

    def _flush_sealed(self, seg: LogSegment, upto: int) -> None:
        """Scheduler task after a roll: fsync every segment below ``upto`` that is not yet
        known durable (not just ``seg``: flush threads of consecutive rolls may run in any
        order), then advance the recovery point to ``upto``."""
        with self._seal_flush_lock:
            with self._lock:
                if self._closed:
                    return
                segs = [s for s in self._segments if s.base_offset < upto and s.next_offset > self.recovery_point]
            for s in segs:
                try:
                    s.flush()
                except (OSError, ValueError):
                    if s.closed:  # deleted or closed meanwhile: nothing left to make durable
                        continue
                    e = sys.exc_info()[1]
                    if isinstance(e, OSError):
                        self._storage_error(s.log_path, "flush", e)
                    else:
                        log.warning("%s: fsync of %s failed", self.dir, s.log_path, exc_info=True)
                    return
            with self._lock:
                if upto > self.recovery_point and not self._closed:
                    self.recovery_point = min(upto, self._leo)
                active = self._segments[-1]
                for s in segs:
                    if s is not active and s.flushed and not s.closed:
                        s.close_index_files()  # sealed and durable: no descriptor held for it

    # ================================================================== flush
    def flush(self) -> None:
        """fsync every segment from the recovery point to the end and advance the recovery
        point.  The fsyncs run outside the lock (appends continue meanwhile)."""
        with self._lock:
            if self._closed:
                return
            self._failures.check_online(self.log_dir, self._tp)
            upto = self._leo
            segs = [s for s in self._segments if s.next_offset > self.recovery_point or s is self._segments[-1]]
            self._unflushed_messages = 0
            self._last_flush_ms = _now_ms()
        for s in segs:
            try:
                s.flush()
            except (OSError, ValueError) as e:
                if s.closed:
                    continue
                if isinstance(e, OSError):
                    self._storage_error(e.filename or s.log_path, "flush", e)
                raise
        try:
            self.leader_epoch_cache.flush()
        except OSError as e:
            self._storage_error(e.filename or self.dir, "flush", e)
            raise
        with self._lock:
            if upto > self.recovery_point:
                self.recovery_point = upto

    def _flush_locked(self, *, sync_epochs: bool = True, sync_segments: bool = True) -> None:
        upto = self._leo
        if sync_segments:
            for s in self._segments:
                if s.next_offset > self.recovery_point or s is self._segments[-1]:
                    s.flush()
        self.leader_epoch_cache.flush(sync=sync_epochs)
        self.recovery_point = max(self.recovery_point, upto)
        self._unflushed_messages = 0
        self._last_flush_ms = _now_ms()

    def maybe_flush(self, now_ms: int | None = None) -> bool:
        """Flush if ``flush.ms`` has passed since the last flush and anything is unflushed
        (called by the LogManager's flusher).  Returns whether it flushed.  Lock as flush()."""
        ms = self.config.flush_interval_ms
        if ms is None:
            return False
        now = _now_ms() if now_ms is None else now_ms
        if self._unflushed_messages and now - self._last_flush_ms >= ms:
            self.flush()
            return True
        return False

    @property
    def unflushed_messages(self) -> int:
        return self._unflushed_messages

    # ================================================================== reads
    def read(self, offset: int, max_bytes: int, *, min_one: bool = True, max_offset: int | None = None) -> FetchSlice:
        """Whole batches from ``offset`` (the batch holding it first), at most ``max_bytes``
        unless ``min_one`` and the first batch alone is larger; stops before ``max_offset``.

        Lock-free (immutable view).  Raises OffsetOutOfRangeError when ``offset`` is below the
        log start offset or above the log end offset; returns an empty slice at the end."""
        v = self._view
        if offset < v.log_start_offset or offset > v.log_end_offset:
            raise OffsetOutOfRangeError(
                f"{self.topic}-{self.partition}: offset {offset} is outside the log's range "
                f"[{v.log_start_offset}, {v.log_end_offset}]"
            )
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        segs = v.segments
        last = len(segs) - 1
        end_seg, end_pos = last, v.end_position
        if max_offset is not None and max_offset < v.log_end_offset:
            if offset >= max_offset:
                return FetchSlice(segs[last].file, v.end_position, 0, offset)
            end_seg = max(0, bisect_right(v.bases, max_offset) - 1)
            seg = segs[end_seg]
            seg_max = v.end_position if end_seg == last else seg.size
            found = seg.translate_offset(max_offset, seg_max)
            end_pos = found[0] if found is not None else seg_max
        if offset == v.log_end_offset:
            return FetchSlice(segs[last].file, v.end_position, 0, offset)
        i = max(0, bisect_right(v.bases, offset) - 1)
        while i <= end_seg:
            seg = segs[i]
            max_pos = end_pos if i == end_seg else (v.end_position if i == last else seg.size)
            try:
                r = seg.read(offset, max_bytes, max_pos, min_one)
            except (ValueError, OSError) as e:
                if seg.closed:
                    raise OffsetOutOfRangeError(
                        f"{self.topic}-{self.partition}: segment {seg.base_offset} was deleted "
                        f"while reading offset {offset}"
                    ) from e
                raise
            if r is not None:
                return FetchSlice(seg.file, r[0], r[1], r[2])
            i += 1
        return FetchSlice(segs[last].file, v.end_position, 0, offset)

    def read_bytes(self, offset: int, max_bytes: int, **kw: Any) -> bytes:
        """Convenience: :meth:`read` and return the bytes."""
        return self.read(offset, max_bytes, **kw).read_bytes()

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """``(offset, timestamp)`` of the first record whose timestamp is >= ``timestamp``
        (ListOffsets v1+), or None if there is none.  ``-1`` (latest) gives the log end
        offset and ``-2`` (earliest) the log start offset, both with timestamp -1.  Lock-free:
        time index + offset index + header scan; only the one matching batch is decoded to find
        the record (no decode when its timestamps are LogAppendTime)."""
        v = self._view
        if timestamp == LATEST_TIMESTAMP:
            return v.log_end_offset, -1
        if timestamp == EARLIEST_TIMESTAMP:
            return v.log_start_offset, -1
        last = len(v.segments) - 1
        for i, seg in enumerate(v.segments):
            if seg.max_timestamp < timestamp:
                continue
            max_pos = v.end_position if i == last else seg.size
            h = seg.find_offset_by_timestamp(timestamp, v.log_start_offset, max_pos)
            if h is None:
                continue
            return self._record_for_timestamp(seg, h, timestamp, v.log_start_offset)
        return None

    def _record_for_timestamp(
        self, seg: LogSegment, h: BatchHeader, timestamp: int, start_offset: int
    ) -> tuple[int, int]:
        if h.timestamp_type == 1:
            return max(h.base_offset, start_offset), h.max_timestamp
        found = seg.translate_offset(h.base_offset, seg.size)
        assert found is not None, "h was read from this segment"
        from pyklog.broker.record.batch import decode_batch  # pure codec, imported on first use

        raw = os.pread(seg.fd, h.size, found[0])
        batch = decode_batch(raw, 0, validate_crc=False)
        for rec in batch.records:
            if rec.timestamp >= timestamp and rec.offset >= start_offset:
                return rec.offset, rec.timestamp
        return max(h.last_offset, start_offset), h.max_timestamp

    def offsets_before(self, timestamp: int, max_num_offsets: int) -> list[int]:
        """ListOffsets v0: base offsets of segments last modified at or before ``timestamp``
        (the first counted as the log start offset), plus the log end offset for ``-1``
        (latest, with the LEO first) or the log start offset for ``-2`` (earliest); descending,
        at most ``max_num_offsets``.  Lock-free."""
        v = self._view
        pairs = [(s.base_offset, s.last_modified_ms) for s in v.segments]
        if pairs:
            pairs[0] = (max(pairs[0][0], v.log_start_offset), pairs[0][1])
        if v.end_position > 0:
            pairs.append((v.log_end_offset, _now_ms()))
        else:
            # an empty active segment's base offset is the log end offset
            pairs[-1] = (v.log_end_offset, _now_ms())
        if timestamp == LATEST_TIMESTAMP:
            start = len(pairs) - 1
        elif timestamp == EARLIEST_TIMESTAMP:
            start = 0
        else:
            start = -1
            for i in range(len(pairs) - 1, -1, -1):
                if pairs[i][1] <= timestamp:
                    start = i
                    break
            if start < 0:
                return []
        n = min(max_num_offsets, start + 1)
        out: list[int] = []
        for i in range(start, start - n, -1):
            off = pairs[i][0]
            if not out or off != out[-1]:
                out.append(off)
        return out

    def producer_state(self, producer_id: int) -> ProducerEntry | None:
        """The idempotent producer's state (epoch, last 5 batches) or None.  Takes the lock."""
        with self._lock:
            return self._producers.get(producer_id)

    def active_producers(self) -> list[tuple[int, int, int, int, int, int]]:
        """Every producer id this partition keeps state for, as Kafka's ``UnifiedLog.activeProducers``
        (DescribeProducers): ``(producer_id, epoch, last_sequence, last_timestamp, coordinator_epoch,
        current_txn_start_offset)``, -1 for "none", sorted by producer id.  A copy taken under the
        lock (any thread)."""
        with self._lock:
            return sorted(
                (e.producer_id, e.epoch, e.last_seq, e.last_timestamp, e.coordinator_epoch, e.current_txn_first_offset)
                for e in self._producers.producers.values()
            )

    def producer_last_offsets(self) -> dict[int, int]:
        """Producer id -> offset of its last batch, for every producer this partition keeps state
        for (compaction keeps each producer's last batch, even emptied, so that its sequence
        survives).  A copy taken under the lock (any thread)."""
        with self._lock:
            return {pid: e.last_offset for pid, e in self._producers.producers.items()}

    def expire_producers(self, now_ms: int | None = None) -> int:
        """Forget producers whose last batch is older than ``producer.id.expiration.ms``
        (run by the LogManager with retention).  Takes the lock."""
        now = _now_ms() if now_ms is None else now_ms
        with self._lock:
            n = self._producers.expire(now, self.config.producer_id_expiration_ms)
        if n:
            log.info("%s: expired %d idle producer id(s)", self.dir, n)
        return n

    # ================================================================== retention
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """Retention (``cleanup.policy`` containing ``delete``): remove leading segments whose
        largest timestamp is older than ``retention.ms``, or that bring the log over
        ``retention.bytes``, or that lie wholly below the log start offset; never the active
        segment.  Two-step delete (``.deleted`` now, unlink after ``file.delete.delay.ms``).
        Returns the number of segments removed.  Takes the lock (briefly; no I/O but renames)."""
        now = _now_ms() if now_ms is None else now_ms
        cfg = self.config
        with self._lock:
            if self._closed:
                return 0
            segs = self._segments
            candidates = segs[:-1]
            k_lso = 0
            for s in candidates:
                if s.next_offset <= self._log_start_offset:
                    k_lso += 1
                else:
                    break
            k_time = k_size = 0
            if cfg.delete:
                if cfg.retention_ms >= 0:
                    for s in candidates:
                        ts = s.max_timestamp if s.max_timestamp >= 0 else s.last_modified_ms
                        if now - ts > cfg.retention_ms:
                            k_time += 1
                        else:
                            break
                if cfg.retention_bytes >= 0:
                    diff = sum(s.size for s in segs) - cfg.retention_bytes
                    for s in candidates:
                        if diff - s.size >= 0:
                            diff -= s.size
                            k_size += 1
                        else:
                            break
            k = max(k_lso, k_time, k_size)
            if k == 0:
                return 0
            doomed = segs[:k]
            self._segments = segs[k:]
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            self._publish()
            self._log_start_moved()
            self._schedule_delete(doomed)
            log.info(
                "%s: retention deleted %d segment(s) (time %d, size %d), log start offset %d",
                self.dir,
                k,
                k_time,
                k_size,
                self._log_start_offset,
            )
            return k

    def _schedule_delete(self, doomed: list[LogSegment]) -> None:
        """Under the lock: rename to ``.deleted`` now; close and unlink after the delay."""
        for s in doomed:
            try:
                s.change_suffix("", DELETED_SUFFIX)
            except OSError as e:
                log.warning("%s: could not rename %s for deletion: %s", self.dir, s.log_path, e)
        self._delete_later(doomed)

    def _delete_later(self, doomed: list[LogSegment]) -> None:
        """Under the lock: close and unlink ``doomed`` (already renamed) after
        ``file.delete.delay.ms`` on the scheduler, or now if the delay is 0.  A scheduler that is
        shut down leaves the delete pending for :meth:`close`."""
        delay = self.config.file_delete_delay_ms / 1000.0
        if delay <= 0:
            for s in doomed:
                s.delete_files()
            return
        try:
            task = self._background().schedule(
                delay, self._delete_now, doomed, name=f"delete-file-{self.topic}-{self.partition}"
            )
        except RuntimeError as e:
            log.info("%s: delete of %d segment(s) left to close(): %s", self.dir, len(doomed), e)
            task = None
        self._pending_deletes.append((task, doomed))

    def _delete_now(self, doomed: list[LogSegment]) -> None:
        with self._lock:
            self._pending_deletes = [(t, d) for t, d in self._pending_deletes if d is not doomed]
        for s in doomed:
            s.delete_files()

    def increment_log_start_offset(self, offset: int) -> None:
        """Advance the log start offset (DeleteRecords); whole segments below it go with the
        next retention pass.  Takes the lock."""
        with self._lock:
            if offset > self._leo:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: cannot move the log start offset to {offset}, "
                    f"beyond the log end offset {self._leo}"
                )
            if self._replicated and offset > self._hw:
                raise OffsetOutOfRangeError(
                    f"{self.topic}-{self.partition}: cannot move the log start offset to {offset}, "
                    f"beyond the high watermark {self._hw}"
                )
            if offset > self._log_start_offset:
                self._log_start_offset = offset
                self._publish()
                self._log_start_moved()

    # ================================================================== truncation
    def truncate_to(self, offset: int) -> None:
        """Remove every batch from the one holding ``offset`` on (log end offset becomes that
        batch's base offset).  Takes the lock; readers holding an older view still read the
        old bytes of untouched segments."""
        with self._lock:
            if offset >= self._leo:
                return
            if offset <= self._log_start_offset:
                keep, doomed = [], list(self._segments)
            else:
                keep = [s for s in self._segments if s.base_offset < offset]
                doomed = [s for s in self._segments if s.base_offset >= offset]
            self._schedule_delete(doomed)  # renamed .deleted now, unlinked after the delay
            if keep:
                keep[-1].truncate_to(offset)
            else:  # everything goes: start afresh at ``offset`` (Kafka's truncateFullyAndStartAt)
                keep = [LogSegment.create(self.dir, offset, **self._seg_kwargs())]
                self._log_start_offset = offset
            self._segments = keep
            self._leo = keep[-1].next_offset
            self.recovery_point = min(self.recovery_point, self._leo)
            self._hw = min(max(self._hw, self._log_start_offset), self._leo)
            rebuild_producer_state(self._producers, self._segments, self._leo, unclean=True)
            self._publish()
            try:
                self.leader_epoch_cache.truncate_from_end(self._leo)
                self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
            except OSError as e:
                self._epoch_write_failed(e)
            log.info("%s: truncated to offset %d (log end offset now %d)", self.dir, offset, self._leo)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Remove every segment and start an empty log at ``offset`` (Kafka's
        ``truncateFullyAndStartAt``: a follower whose fetch offset is out of the leader's range).
        Log start, log end, high watermark and recovery point become ``offset``; the leader
        epoch cache, producer state and producer snapshots are cleared.  Takes the lock."""
        if offset < 0:
            raise OffsetOutOfRangeError(f"{self.topic}-{self.partition}: cannot start a log at offset {offset}")
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
            self._schedule_delete(list(self._segments))
            self._segments = [LogSegment.create(self.dir, offset, **self._seg_kwargs())]
            self._log_start_offset = self._leo = self._hw = offset
            self.recovery_point = offset
            self._producers.delete_snapshots_above(-1)
            self._producers.clear()
            self._publish()
            try:
                self.leader_epoch_cache.clear()
            except OSError as e:
                self._epoch_write_failed(e)
            log.info("%s: truncated fully, the log now starts at offset %d", self.dir, offset)

    def _log_start_moved(self) -> None:
        """Under the lock, after the log start offset moved up (DeleteRecords, retention): the
        high watermark and the leader epoch cache follow (Kafka's ``truncateFromStart``).  An
        epoch checkpoint that cannot be written is logged: the cache is right in memory and the
        next load trims it again."""
        if self._hw < self._log_start_offset:
            self._hw = self._log_start_offset
        try:
            self.leader_epoch_cache.truncate_from_start(self._log_start_offset)
        except OSError as e:
            self._storage_error(e.filename or self.dir, "write", e)

    # ================================================================== compaction
    def compact(self, now_ms: int | None = None, *, force: bool = False) -> CleanerStats:
        """Compact the sealed segments (``cleanup.policy`` containing ``compact``); see
        :mod:`pyklog.broker.log.cleaner`.  Returns CleanerStats.  Reads run lock-free in the cleaner;
        the swap takes the lock."""
        from .cleaner import clean_log

        return clean_log(self, now_ms=now_ms, force=force)

    def replace_segments(self, old: list[LogSegment], new: LogSegment | None) -> None:
        """Swap ``new`` in for the contiguous ``old`` segments (the cleaner's last step), or just
        drop ``old`` when ``new`` is None.  Takes the lock; any thread.  KafkaStorageError when the
        log is closed or ``old`` is no longer a run of its segment list (nothing is renamed then).

        Crash-safe order, as Kafka's: the cleaned files are already ``.cleaned``; rename them
        ``.swap``; rename the old ones ``.deleted``; rename the swap files to their final name.
        A crash at any step is finished by ``LogLoader.complete_swaps_and_cleanup`` at start-up."""
        with self._lock:
            if self._closed:
                raise KafkaStorageError(f"log {self.topic}-{self.partition} is closed")
            idx = self._segments.index(old[0])
            if self._segments[idx : idx + len(old)] != old:
                raise KafkaStorageError(f"{self.topic}-{self.partition}: segment list changed during cleaning")
            if new is not None:
                new.flush()
                new.change_suffix(CLEANED_SUFFIX, SWAP_SUFFIX)
            for s in old:
                s.change_suffix("", DELETED_SUFFIX)
            if new is not None:
                new.change_suffix(SWAP_SUFFIX, "")
            self._segments = (
                self._segments[:idx] + ([new] if new is not None else []) + self._segments[idx + len(old) :]
            )
            self._publish()
            self._delete_later(old)

    # ================================================================== lifecycle
    def close(self, *, sync: bool = True) -> None:
        """Flush, write a producer snapshot, finish pending deletes and close every file.
        Takes the lock; later appends raise KafkaStorageError.  ``sync`` False: everything is
        written but nothing fsynced (the caller makes the whole log dir durable at once:
        :meth:`LogManager.shutdown`)."""
        with self._lock:
            if self._closed:
                return
            try:
                # the leader epoch checkpoint is written but not fsynced here: the loader checks it
                # against the batches, and a shutdown of N logs is not N more fsyncs
                self._flush_locked(sync_epochs=False, sync_segments=sync)
            except OSError as e:
                log.warning("%s: flush at close failed: %s", self.dir, e)
            try:
                # as Kafka's takeSnapshot: only when the log moved past the newest snapshot (an
                # empty log, or one unchanged since, has nothing to replay at the next start)
                if self._leo > max(self._producers.snapshot_offsets(), default=0):
                    self._producers.take_snapshot(self._leo, sync=sync)
                    self._producers.retain_latest(2)
            except OSError as e:
                log.warning("%s: could not write a producer snapshot: %s", self.dir, e)
            self._closed = True
            for s in self._cancel_pending_deletes():
                s.delete_files()
            for s in self._segments:
                s.close()

    def _cancel_pending_deletes(self) -> list:
        """Under the lock, at close: cancel the scheduled deletions of old segments; their segments."""
        pending, self._pending_deletes = self._pending_deletes, []
        doomed = []
        for task, segments in pending:
            if task is not None:
                task.cancel()
            doomed.extend(segments)
        return doomed

    def close_handlers(self) -> None:
        """Close every file without writing anything (Kafka's ``closeHandlers``): the log's directory
        went offline.  Pending deletes are dropped (their files stay).  Later operations raise
        KafkaStorageError.  Takes the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            for s in self._cancel_pending_deletes():
                s.close_handles()
            for s in self._segments:
                s.close_handles()

    def delete(self) -> None:
        """Close the log and remove its directory (topic deletion): the directory is renamed
        ``<dir>.<uuid>-delete`` first, so a crash midway leaves nothing that loads as a log."""
        with self._lock:
            if not self._closed:
                self._closed = True
                for task, doomed in self._pending_deletes:
                    if task is not None:
                        task.cancel()
                    for s in doomed:
                        s.close_handles()
                self._pending_deletes = []
                for s in self._segments:
                    s.close_handles()
            target = f"{self.dir}.{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}"
            try:
                os.rename(self.dir, target)
            except FileNotFoundError:
                return
            shutil.rmtree(target, ignore_errors=True)


def load_leader_epoch_cache(
    dir: str, segments: Sequence[LogSegment], log_start_offset: int, log_end_offset: int, leo_fn: Callable[[], int]
) -> LeaderEpochFileCache:
    """Load a partition's leader epoch cache at start-up (no lock: the Log is not published yet).

    The ``leader-epoch-checkpoint`` is read and checked against the batches (each entry's start
    offset must be where its epoch's first batch is, see :func:`_epoch_entries_match`); when the
    file is missing, unreadable or does not match, the cache is rebuilt from the batches'
    ``partitionLeaderEpoch`` (logged at ERROR with what was rebuilt; data is never deleted
    because of it) and written.  Then, as Kafka's loader, entries at or beyond the log end offset
    are dropped (epochs whose batches a crash cut off) and the first entry follows the log start
    offset."""
    cache = LeaderEpochFileCache(dir, leo_fn)
    problem = None
    entries: list[EpochEntry] | list[tuple[int, int]] | None
    try:
        entries = cache.file.read()
    except (CorruptRecordError, OSError) as e:
        entries, problem = None, f"unreadable: {e}"
    has_data = any(s.size for s in segments)
    if entries is not None:
        bad = _epoch_entries_match(segments, entries, log_start_offset, log_end_offset)
        if bad is not None:
            entries, problem = None, f"does not match the log: {bad}"
    if entries is None:
        entries = rebuild_epoch_entries(segments)
        if problem is None:
            problem = "missing"
        if has_data or problem != "missing":
            log.error(
                "%s: leader-epoch-checkpoint %s; rebuilt %d entries from the batches' partitionLeaderEpoch: %s",
                dir,
                problem,
                len(entries),
                [tuple(e) for e in entries],
            )
            cache = LeaderEpochFileCache(dir, leo_fn, entries, write=True)
        else:
            cache = LeaderEpochFileCache(dir, leo_fn, entries)
    else:
        cache = LeaderEpochFileCache(dir, leo_fn, entries)
        cache.loaded_from_file()
    # in memory only: the next change writes the file (a restart of N partitions does not
    # rewrite N files to drop an entry that becoming leader adds back at once); a load without
    # a change in between truncates the same way again
    cache.defer_writes = True
    try:
        cache.truncate_from_end(log_end_offset)
        cache.truncate_from_start(log_start_offset)
    finally:
        cache.defer_writes = False
    return cache


def rebuild_epoch_entries(segments: Iterable[LogSegment]) -> list[tuple[int, int]]:
    """The (epoch, start offset) entries the batches' ``partitionLeaderEpoch`` imply, with
    :meth:`LeaderEpochFileCache.assign`'s rules (epochs below the latest ignored)."""
    out: list[tuple[int, int]] = []
    for seg in segments:
        for _pos, h in seg.walk(0, seg.size):
            e = h.partition_leader_epoch
            if e < 0 or (out and e <= out[-1][0]):
                continue
            out.append((e, h.base_offset))
    return out


def _batch_from(segments: Sequence[LogSegment], offset: int) -> BatchHeader | None:
    """Header of the first batch whose last offset is >= ``offset`` (None: none)."""
    bases = [s.base_offset for s in segments]
    i = max(0, bisect_right(bases, offset) - 1)
    for seg in segments[i:]:
        found = seg.translate_offset(offset, seg.size)
        if found is not None:
            return found[1]
    return None


def _epoch_entries_match(
    segments: Sequence[LogSegment], entries: Sequence[EpochEntry], log_start_offset: int, log_end_offset: int
) -> str | None:
    """Check the checkpoint entries below the log end offset against the batches (a few index
    lookups and header reads per entry, no full scan).  For each entry (E, S): the first batch
    holding S or later was written in E (in E or later when compaction removed E's first
    batches, i.e. that batch starts after S); S is a batch's base offset unless it is at or below
    the log start offset (Kafka's ``truncateFromStart`` moves the first entry there); the last
    batch before S was written in the previous entry's epoch or earlier (in an earlier epoch than
    E for the first entry).  The last batch of the log was written in the last entry's epoch or
    earlier.  Returns what does not match, or None."""
    entries = [e for e in entries if e.start_offset < log_end_offset]
    prev_epoch = None
    for e in entries:
        h = _batch_from(segments, e.start_offset)
        if h is not None and h.partition_leader_epoch >= 0:
            if h.base_offset <= e.start_offset and h.partition_leader_epoch != e.epoch:
                return (
                    f"entry {e.epoch} {e.start_offset}: the batch at offset {h.base_offset} has "
                    f"leader epoch {h.partition_leader_epoch}"
                )
            if h.partition_leader_epoch < e.epoch:
                return (
                    f"entry {e.epoch} {e.start_offset}: the next batch, at offset {h.base_offset}, "
                    f"has the earlier leader epoch {h.partition_leader_epoch}"
                )
            if h.base_offset < e.start_offset and e.start_offset > log_start_offset:
                return (
                    f"entry {e.epoch} {e.start_offset}: the offset is inside the batch {h.base_offset}..{h.last_offset}"
                )
        if e.start_offset > log_start_offset and e.start_offset > 0:
            prev = _batch_from(segments, e.start_offset - 1)
            if prev is not None and prev.last_offset < e.start_offset and prev.partition_leader_epoch >= 0:
                limit = e.epoch - 1 if prev_epoch is None else prev_epoch
                if prev.partition_leader_epoch > limit:
                    return (
                        f"entry {e.epoch} {e.start_offset}: the batch at offset {prev.base_offset} "
                        f"before it has leader epoch {prev.partition_leader_epoch}"
                    )
        prev_epoch = e.epoch
    if log_end_offset > 0:
        last = _batch_from(segments, log_end_offset - 1)
        if (
            last is not None
            and last.partition_leader_epoch >= 0
            and (not entries or last.partition_leader_epoch > entries[-1].epoch)
        ):
            return (
                f"the last batch, at offset {last.base_offset}, has leader epoch "
                f"{last.partition_leader_epoch}, above every entry"
            )
    return None


__all__ = [
    "Log",
    "LogView",
    "AppendInfo",
    "FetchSlice",
    "RecoveryReport",
    "SegmentCut",
    "parse_topic_partition",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "SNAPSHOT_SUFFIX",
]
