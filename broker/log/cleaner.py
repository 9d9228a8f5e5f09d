"""Log compaction (``cleanup.policy=compact``): keep the last record of every key.

One pass over a log (:func:`clean_log`):

1. The cleanable range is every sealed segment (never the active one), minus trailing segments
   younger than ``min.compaction.lag.ms``.  Its dirty part starts at the cleaner checkpoint
   (``Log.cleaner_checkpoint``, persisted by the LogManager in ``cleaner-offset-checkpoint``);
   the pass runs when dirty bytes / cleanable bytes >= ``min.cleanable.dirty.ratio`` (or forced).
2. An offset map ``key -> last offset`` is built over the dirty part (records are decoded here,
   unlike on the append path).
3. Consecutive segments are grouped (output within ``segment.bytes``) and each group is
   rewritten to ``<base>.log.cleaned`` (+ indexes): a record survives if its key's last offset
   is its own offset (or its key is not in the map); records without a key are dropped (Kafka
   rejects them on compacted topics); tombstones (null value) are dropped once their segment was
   last modified more than ``delete.retention.ms`` ago.  A batch whose records all survive is
   copied byte for byte; otherwise it is rebuilt keeping its base offset, last offset delta,
   producer id/epoch, base sequence, attributes and leader epoch, so first/last offsets and the
   producer's sequence numbers are preserved.  A batch that loses every record is kept *empty*
   when it is its producer's last batch (the producer's sequence must survive, as the design
   says).
   Transactions (Kafka's ``LogCleaner`` with ``CleanedTransactionMetadata``): the cleanable range
   ends at the segment holding the last stable offset (an open transaction's data is never
   cleaned); records of aborted transactions are never put in the offset map (an aborted value
   must not shadow a committed one) and are removed; a transaction marker is kept while any
   batch of its transaction was met earlier in this pass, and otherwise removed once its
   segment is older than ``delete.retention.ms`` (a consumer that read the data before the
   marker must still find the marker, as for tombstones).  Every pass reads the log from its
   start, so "met earlier in this pass" means "still in the log": a transactional batch is never
   left without its marker.  A kept ABORT marker keeps its ``.txnindex`` entry in the cleaned
   segment; a removed one takes it along.
4. The group is swapped in: ``.cleaned`` -> ``.swap``, old segments -> ``.deleted`` (unlinked after
   ``file.delete.delay.ms``), ``.swap`` -> final name, all under the log's lock; a crash at any
   point is completed at start-up by the Log loader.

Thread safety: reads of sealed segments are lock-free; only the swap takes the log's lock.  One
cleaner per log at a time (a per-log lock held for the pass).  The cleaner uses the Log's public
surface only: ``view``, ``config``, ``last_stable_offset``, ``cleaner_checkpoint``,
``collect_aborted_txns``, ``producer_last_offsets`` (under the log's lock, taken there) and
``replace_segments`` (the swap, under the log's lock, taken there).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.header import parse_header

from .producer_state import read_marker
from .segment import CLEANED_SUFFIX, LogSegment
from .txn_index import AbortedTxn

if TYPE_CHECKING:  # the log imports this module (Log.compact)
    from pyklog.broker.record.batch import RecordBatch
    from pyklog.broker.record.header import BatchHeader

    from .log import Log

log = logging.getLogger(__name__)

_cleaning_locks: weakref.WeakKeyDictionary[Log, threading.Lock] = weakref.WeakKeyDictionary()
_registry_lock = threading.Lock()


@dataclass
class CleanerStats:
    segments_cleaned: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    records_retained: int = 0
    tombstones_dropped: int = 0
    batches_emptied: int = 0
    aborted_batches_removed: int = 0
    markers_removed: int = 0
    dirty_ratio: float = 0.0
    duration_s: float = 0.0
    skipped: str | None = None


def _log_lock(lg: Log) -> threading.Lock:
    with _registry_lock:
        lk = _cleaning_locks.get(lg)
        if lk is None:
            lk = _cleaning_locks[lg] = threading.Lock()
        return lk


def clean_log(lg: Log, now_ms: int | None = None, force: bool = False) -> CleanerStats:
    """Compact ``lg`` once (see the module docstring).  Returns CleanerStats; ``skipped`` says
    why nothing was done."""
    stats = CleanerStats()
    if not lg.config.compact and not force:
        stats.skipped = "cleanup.policy does not include compact"
        return stats
    lock = _log_lock(lg)
    if not lock.acquire(blocking=False):
        stats.skipped = "another cleaner pass is running"
        return stats
    try:
        return _clean(lg, stats, int(time.time() * 1000) if now_ms is None else now_ms, force)
    finally:
        lock.release()


def _clean(lg: Log, stats: CleanerStats, now: int, force: bool) -> CleanerStats:
    from pyklog.broker.record.batch import decode_batch  # pure codec

    t0 = time.monotonic()
    cfg = lg.config
    view = lg.view
    sealed = list(view.segments[:-1])
    lag = cfg.min_compaction_lag_ms
    if lag > 0:
        while sealed and sealed[-1].max_timestamp > now - lag:
            sealed.pop()
    # never clean at or beyond the last stable offset (Kafka's firstUncleanableDirtyOffset)
    lso = lg.last_stable_offset
    while sealed and sealed[-1].next_offset > lso:
        sealed.pop()
    if not sealed:
        stats.skipped = "no sealed segment to clean"
        return stats
    end_offset = sealed[-1].next_offset
    first_dirty = max(lg.cleaner_checkpoint, view.log_start_offset)
    total = sum(s.size for s in sealed)
    dirty = sum(s.size for s in sealed if s.next_offset > first_dirty)
    stats.dirty_ratio = dirty / total if total else 0.0
    if not dirty or (not force and stats.dirty_ratio < cfg.min_cleanable_dirty_ratio):
        stats.skipped = f"dirty ratio {stats.dirty_ratio:.2f} below {cfg.min_cleanable_dirty_ratio}"
        return stats

    def batches(seg: LogSegment) -> Iterator[tuple[int, BatchHeader]]:
        yield from seg.walk(0, seg.size)

    # aborted transactions overlapping the cleanable range, oldest first
    aborted = sorted(lg.collect_aborted_txns(sealed[0].base_offset, end_offset), key=lambda t: t.first_offset)

    # 1. offset map over the dirty part (records of aborted transactions left out)
    offset_map: dict[bytes, int] = {}
    txns = _TxnTracker(aborted)
    for seg in sealed:
        if seg.next_offset <= first_dirty:
            continue
        for pos, h in batches(seg):
            if h.last_offset < first_dirty:
                continue
            if h.is_control:
                txns.marker(h, _control_type(seg, pos, h))
                continue
            if txns.data(h):  # aborted
                continue
            raw = os.pread(seg.fd, h.size, pos)
            for rec in decode_batch(raw, 0, validate_crc=False).records:
                if rec.key is not None and rec.offset >= first_dirty:
                    offset_map[rec.key] = rec.offset
    # last batch of each producer (its sequence must survive)
    producer_last = lg.producer_last_offsets()

    # 2. group consecutive segments
    groups: list[list[LogSegment]] = []
    cur: list[LogSegment] = []
    cur_size = 0
    for seg in sealed:
        if cur and (cur_size + seg.size > cfg.segment_bytes or seg.next_offset - 1 - cur[0].base_offset > 0x7FFFFFFF):
            groups.append(cur)
            cur, cur_size = [], 0
        cur.append(seg)
        cur_size += seg.size
    if cur:
        groups.append(cur)

    # 3. rewrite and swap each group (one transaction tracker for the whole pass, in offset order)
    txns = _TxnTracker(aborted)
    for group in groups:
        out = LogSegment(
            lg.dir,
            group[0].base_offset,
            suffix=CLEANED_SUFFIX,
            create=True,
            index_interval_bytes=cfg.index_interval_bytes,
            max_index_bytes=cfg.segment_index_bytes,
        )
        try:
            os.ftruncate(out.fd, 0)
            out.size = 0
            out.index.reset()
            out.time_index.reset()
            out.txn_index.reset()
            for seg in group:
                horizon_passed = seg.last_modified_ms < now - cfg.delete_retention_ms
                for pos, h in batches(seg):
                    raw = os.pread(seg.fd, h.size, pos)
                    stats.bytes_read += h.size
                    new_raw: bytes | None
                    if h.is_control:
                        discardable, entry = txns.marker(h, _control_type(seg, pos, h))
                        if discardable and horizon_passed:
                            stats.markers_removed += 1
                            continue
                        new_raw = raw
                        if entry is not None:
                            out.txn_index.append(entry)
                    else:
                        new_raw = _filter_batch(
                            raw, h, offset_map, horizon_passed, producer_last, stats, decode_batch, txns.data(h)
                        )
                    if new_raw is None:
                        continue
                    nh = parse_header(new_raw, 0)
                    out.append(new_raw, [(0, len(new_raw), nh.last_offset, nh.max_timestamp)])
                    stats.bytes_written += len(new_raw)
            out.on_become_inactive()
            # the cleaned segment keeps its sources' age (Kafka: cleaned.lastModified = modified),
            # so tombstones and markers still pass delete.retention.ms after repeated cleanings
            modified = max(s.last_modified_ms for s in group) / 1000.0
            os.utime(out.fd, (modified, modified))
            lg.replace_segments(group, out)
        except BaseException:
            out.delete_files()
            raise
        stats.segments_cleaned += len(group)
    lg.cleaner_checkpoint = max(lg.cleaner_checkpoint, end_offset)
    stats.duration_s = time.monotonic() - t0
    log.info(
        "%s: compacted %d segment(s): %d -> %d bytes, %d of %d records kept, %d tombstones dropped in %.2fs",
        lg.dir,
        stats.segments_cleaned,
        stats.bytes_read,
        stats.bytes_written,
        stats.records_retained,
        stats.records_read,
        stats.tombstones_dropped,
        stats.duration_s,
    )
    return stats


class _TxnTracker:
    """Which batches belong to aborted transactions and which markers may go, in one walk in
    offset order (Kafka's ``CleanedTransactionMetadata``).  ``aborted``: AbortedTxn entries
    sorted by first offset.  Single-threaded (one cleaner pass)."""

    def __init__(self, aborted: list[AbortedTxn]):
        self._pending = list(reversed(aborted))  # pop() gives the oldest
        self._aborted: dict[int, list[Any]] = {}  # pid -> [AbortedTxn, batch met?]
        self._committed: set[int] = set()  # pids whose open (not aborted) txn had a batch met

    def _consume(self, offset: int) -> None:
        while self._pending and self._pending[-1].first_offset <= offset:
            t = self._pending.pop()
            self._aborted.setdefault(t.producer_id, [t, False])

    def data(self, h: BatchHeader) -> bool:
        """A data batch was met; True when it belongs to an aborted transaction."""
        self._consume(h.last_offset)
        if not h.is_transactional:
            return False
        cur = self._aborted.get(h.producer_id)
        if cur is not None:
            cur[1] = True
            return True
        self._committed.add(h.producer_id)
        return False

    def marker(self, h: BatchHeader, control_type: int | None) -> tuple[bool, AbortedTxn | None]:
        """A marker was met: ``(discardable, AbortedTxn to keep indexed or None)``.  A marker
        is discardable when no batch of its transaction was met in this pass (it is then
        removed once past the delete horizon)."""
        self._consume(h.last_offset)
        pid = h.producer_id
        if control_type == 0:  # ABORT
            cur = self._aborted.pop(pid, None)
            unindexed = pid in self._committed  # data of it met but not indexed: keep the marker
            self._committed.discard(pid)
            if cur is None:
                return (not unindexed), None
            return (not cur[1] and not unindexed), cur[0]
        if control_type == 1:  # COMMIT
            met = pid in self._committed
            self._committed.discard(pid)
            return (not met), None
        return False, None  # unreadable / unknown: keep it


def _control_type(seg: LogSegment, pos: int, h: BatchHeader) -> int | None:
    try:
        return read_marker(os.pread(seg.fd, h.size, pos))[0]
    except CorruptRecordError as e:
        log.warning("%s: unreadable control batch at offset %d kept as it is: %s", seg.log_path, h.base_offset, e)
        return None


def _filter_batch(
    raw: bytes,
    h: BatchHeader,
    offset_map: dict[bytes, int],
    horizon_passed: bool,
    producer_last: dict[int, int],
    stats: CleanerStats,
    decode_batch: Callable[..., RecordBatch],
    aborted: bool = False,
) -> bytes | None:
    """The data batch's bytes to keep (original, rebuilt or empty), or None to drop it.
    ``aborted``: the batch belongs to an aborted transaction (every record goes)."""
    from pyklog.broker.record.batch import build_batch_from_records

    batch = decode_batch(raw, 0, validate_crc=False)
    kept = []
    if aborted:
        stats.records_read += len(batch.records)
        stats.aborted_batches_removed += 1
    for rec in batch.records if not aborted else ():
        stats.records_read += 1
        if rec.key is None:
            continue
        latest = offset_map.get(rec.key)
        if latest is not None and latest > rec.offset:
            continue
        if rec.value is None and horizon_passed:
            stats.tombstones_dropped += 1
            continue
        kept.append(rec)
    stats.records_retained += len(kept)
    if len(kept) == len(batch.records) and kept:
        return raw
    if not kept:
        if h.producer_id >= 0 and producer_last.get(h.producer_id) == h.last_offset:
            stats.batches_emptied += 1
        else:
            return None
    return build_batch_from_records(
        kept,
        base_offset=h.base_offset,
        last_offset_delta=h.last_offset_delta,
        compression=h.compression,
        timestamp_type=h.timestamp_type,
        producer_id=h.producer_id,
        producer_epoch=h.producer_epoch,
        base_sequence=h.base_sequence,
        is_transactional=h.is_transactional,
        is_control=False,
        partition_leader_epoch=h.partition_leader_epoch,
        first_timestamp=(kept[0].timestamp if kept else h.first_timestamp),
        max_timestamp=(h.max_timestamp if (h.timestamp_type == 1 or not kept) else None),
    )


__all__ = ["CleanerStats", "clean_log"]
