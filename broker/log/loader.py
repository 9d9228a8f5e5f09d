"""LogLoader: turn a partition directory back into a consistent log at start-up.

The broker's counterpart of Kafka's ``LogLoader`` (with the producer-state rebuild of
``UnifiedLog.rebuildProducerState``).  :meth:`LogLoader.load` runs once, in the thread that
opens the :class:`~pyklog.broker.log.log.Log`, before the log is visible to anyone:

1. finish what a crash interrupted (Kafka's rules): ``.deleted``, ``.cleaned`` and ``.tmp``
   files are removed; a ``.swap`` segment (a finished cleaning) replaces the segments it covers
   and is renamed to its final name; index files without a ``.log`` are removed;
2. open every ``<20-digit base offset>.log`` in base-offset order;
3. after an unclean shutdown, revalidate from the segment holding the recovery point on, batch
   by batch (framing and CRC-32C, ``LogSegment.recover``), rebuilding each segment's offset and
   time indexes.  Segments before the recovery point (or all after a clean shutdown) only load
   their indexes, which are rebuilt when they are unreadable.  What an invalid batch costs:

   * a torn tail of the active (last) segment, i.e. invalid bytes after which nothing valid
     follows, is truncated as in Kafka (a :class:`SegmentCut`, logged at WARNING);
   * damaged bytes anywhere else cost only those bytes (a :class:`SkippedRange`, logged at
     ERROR once per range with the file, byte range, offsets and records lost).  Recovery
     resynchronises on the next valid batch (``LogSegment.recover(resync=True)``) and the
     segment is rewritten without the damaged range; a damaged tail of a sealed segment is
     truncated and the later segments are kept.  The batches after the damage keep their
     offsets: the log has an offset gap, which Kafka consumers step over as they do after
     compaction.

   Kafka itself truncates at the first invalid batch and deletes every later segment: a
   follower then refetches them from the leader (``UnifiedLog``/``LogLoader``).  pyklog has no
   replica to refetch from, so deleting intact acknowledged batches would lose them for good.
   Why a rewrite rather than keeping the bytes and teaching reads to skip them: after the
   rewrite the segment is an ordinary segment again, so the offset index, ``walk``, Fetch,
   retention, the cleaner and a later clean-shutdown load (which does not revalidate) need no
   notion of a hole, and nothing has to remember where the hole is.  The rewrite is the
   cleaner's crash-safe two-step swap (``.cleaned`` -> ``.swap`` -> final name, with fsyncs),
   whose leftovers step 1 already finishes; a second crash anywhere in it loses nothing more
   (before the ``.swap`` rename the damaged original is still there and is recovered again);
4. rebuild the transaction indexes (``.txnindex``) of every segment from the first one step 3
   revalidated (or whose indexes it rebuilt) on: the producer state at that segment's base
   offset is loaded (snapshot + replay), then each later segment's batches are replayed and
   every ABORT marker that ends a transaction with data adds its entry (Kafka's
   ``LogSegment.recover`` with ``updateTxnIndex``);
5. rebuild the producer state (idempotent producers' last sequences, open transactions) from
   the latest snapshot at or below the log end offset plus a replay of the batches after it.

It returns a :class:`LoadedLog`: the segments, log start / end offsets, the new recovery point
and a :class:`RecoveryReport`.

Not thread-safe and holds no lock: it owns the directory while it runs (the Log is not yet
published).  :func:`rebuild_producer_state` is also called by ``Log.truncate_to`` under the
log's lock.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.header import BatchHeader

from .config import LogConfig
from .producer_state import CompletedTxn, ProducerStateManager, read_marker
from .segment import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TIMEINDEX_SUFFIX,
    TXNINDEX_SUFFIX,
    LogSegment,
    parse_base_offset,
)
from .txn_index import AbortedTxn

_INDEX_SUFFIXES = (INDEX_SUFFIX, TIMEINDEX_SUFFIX, TXNINDEX_SUFFIX)

log = logging.getLogger(__name__)

__all__ = [
    "LogLoader",
    "LoadedLog",
    "RecoveryReport",
    "SegmentCut",
    "SkippedRange",
    "rebuild_producer_state",
    "load_producer_state",
    "backfill_batches",
    "rebuild_txn_indexes",
    "replay_batch",
    "segment_kwargs",
]


@dataclass
class SegmentCut:
    segment: str
    position: int
    bytes_cut: int
    reason: str


@dataclass
class SkippedRange:
    """Damaged bytes ``[position, position + bytes_skipped)`` of ``segment`` (positions in the
    file as it was before recovery) that recovery removed while keeping the valid batches after
    them.  Offsets ``first_offset_lost .. last_offset_lost`` are gone (``last_offset_lost`` is
    None when nothing valid follows anywhere); ``records_lost`` is the damaged batch's record
    count when its header was still believable, else None."""

    segment: str
    position: int
    bytes_skipped: int
    reason: str
    first_offset_lost: int
    last_offset_lost: int | None
    records_lost: int | None = None

    @property
    def offsets_lost(self) -> int | None:
        if self.last_offset_lost is None:
            return None
        return self.last_offset_lost - self.first_offset_lost + 1


@dataclass
class RecoveryReport:
    """What loading the log did: ``clean_shutdown`` (recovery skipped), ``recovered_segments``
    (revalidated), ``cuts`` (truncations at the end of a segment), ``skipped`` (damaged ranges
    removed with valid data after them, each a :class:`SkippedRange`; a damaged tail of a sealed
    segment is both a cut and a skipped range), ``deleted_segments`` (segments dropped; since
    recovery keeps the segments after a damaged one, always empty unless a later version
    needs it), ``rebuilt_indexes`` (segments whose index had to be rebuilt)."""

    clean_shutdown: bool
    recovered_segments: int = 0
    recovered_bytes: int = 0
    cuts: list = field(default_factory=list)
    skipped: list = field(default_factory=list)
    deleted_segments: list = field(default_factory=list)
    rebuilt_indexes: list = field(default_factory=list)

    @property
    def truncated_bytes(self) -> int:
        return sum(c.bytes_cut for c in self.cuts)

    @property
    def skipped_bytes(self) -> int:
        return sum(r.bytes_skipped for r in self.skipped)


class LoadedLog(NamedTuple):
    """What the Log needs from loading: ``segments`` (list, at least one), offsets, the
    recovery point (everything below it is known consistent) and the report."""

    segments: list
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    report: RecoveryReport


def segment_kwargs(config: LogConfig) -> dict:
    """The LogSegment options a log's config implies (index interval and size)."""
    return {"index_interval_bytes": config.index_interval_bytes, "max_index_bytes": config.segment_index_bytes}


class LogLoader:
    """Loads one partition directory (see the module docstring).  Single use, not
    thread-safe, no lock: call :meth:`load` once before the log is shared."""

    def __init__(
        self,
        dir: str,
        config: LogConfig,
        producers: ProducerStateManager,
        *,
        recovery_point: int = 0,
        log_start_offset: int = 0,
        clean_shutdown: bool = False,
    ):
        self.dir = dir
        self.config = config
        self.producers = producers
        self.recovery_point = recovery_point
        self.log_start_offset = log_start_offset
        self.clean_shutdown = clean_shutdown
        self._seg_kwargs = segment_kwargs(config)

    def load(self) -> LoadedLog:
        clean = self.clean_shutdown
        report = RecoveryReport(clean_shutdown=clean)
        self.complete_swaps_and_cleanup()
        segments = self._open_segments()
        segments, first_recovered = self._recover(segments, report)
        if first_recovered is not None:
            rebuild_txn_indexes(self.producers, segments, first_recovered)
        if not segments:
            segments = [LogSegment.create(self.dir, max(self.log_start_offset, 0), **self._seg_kwargs)]
        # an empty trailing segment older than its predecessor's end cannot happen; still guard
        leo = segments[-1].next_offset
        if segments[-1].size == 0 and len(segments) > 1:
            leo = max(leo, segments[-2].next_offset)
        lso = max(self.log_start_offset, segments[0].base_offset)
        if lso > leo:
            lso = leo
        rebuild_producer_state(
            self.producers, segments, leo, unclean=not clean or bool(report.cuts) or bool(report.skipped)
        )
        if report.cuts or report.skipped or report.recovered_segments:
            log.info(
                "%s: recovered %d segment(s), %d bytes valid, log end offset %d",
                self.dir,
                report.recovered_segments,
                report.recovered_bytes,
                leo,
            )
        # clean: everything was flushed at shutdown; unclean: everything from the recovery
        # point on has just been revalidated.  Either way the log is consistent up to its end.
        return LoadedLog(segments, lso, leo, leo, report)

    # ------------------------------------------------------------------ steps
    def _open_segments(self) -> list[LogSegment]:
        bases = []
        for name in os.listdir(self.dir):
            if name.endswith(LOG_SUFFIX):
                base = parse_base_offset(name)
                if base is None:
                    log.warning("%s: ignoring a file that is not a segment: %s", self.dir, name)
                    continue
                bases.append(base)
        bases.sort()
        return [LogSegment(self.dir, base, **self._seg_kwargs) for base in bases]

    def _recover(self, segments: list[LogSegment], report: RecoveryReport) -> tuple[list[LogSegment], int | None]:
        """Revalidate the segments from the one containing the recovery point on (all of them
        load their indexes).  A torn tail of the last segment is truncated; any other damaged
        range is cut out and the valid batches after it, in its segment and in later segments,
        are kept (module docstring).  Returns the segments and the position of the first one
        revalidated (None: none was), from which the transaction indexes are rebuilt."""
        clean = self.clean_shutdown
        first_recovered = None
        first_unflushed = 0
        for i, seg in enumerate(segments):
            if seg.base_offset <= self.recovery_point:
                first_unflushed = i
        pending_tail: list[tuple[int, SkippedRange]] = []  # sealed tails: next offset unknown yet
        last = len(segments) - 1
        for i, seg in enumerate(segments):
            needs_recovery = (not clean) and i >= first_unflushed
            if not needs_recovery:
                try:
                    seg.load()
                    seg.flushed = True  # below the recovery point, or after a clean shutdown
                    continue
                except (CorruptRecordError, OSError) as e:
                    log.warning("%s: rebuilding the indexes of %s: %s", self.dir, os.path.basename(seg.log_path), e)
                    report.rebuilt_indexes.append(os.path.basename(seg.log_path))
            limit = segments[i + 1].base_offset if i < last else None
            res = seg.recover(max_batch_bytes=None, resync=True, offset_limit=limit)
            if i < last:
                seg.close_index_files()  # rebuilt; a sealed segment holds no index descriptor
            if first_recovered is None:
                first_recovered = i
            report.recovered_segments += 1
            report.recovered_bytes += res.valid_bytes
            name = os.path.basename(seg.log_path)
            for d in res.damaged:
                if d.next_base_offset is None and i == last:
                    continue  # the torn tail of the active segment: a cut, below
                rng = SkippedRange(
                    name,
                    d.position,
                    d.size,
                    d.reason,
                    d.first_lost_offset,
                    None if d.next_base_offset is None else d.next_base_offset - 1,
                    d.records,
                )
                report.skipped.append(rng)
                if d.next_base_offset is None:
                    pending_tail.append((i, rng))
                else:
                    self._log_skipped(rng)
            if res.truncated_bytes:
                cut = SegmentCut(name, res.position, res.truncated_bytes, res.reason or "invalid data")
                report.cuts.append(cut)
                if i == last:
                    log.warning(
                        "%s: recovery truncated segment %s at position %d, cutting %d bytes: %s",
                        self.dir,
                        cut.segment,
                        cut.position,
                        cut.bytes_cut,
                        cut.reason,
                    )
        for i, rng in pending_tail:
            nxt = next((s for s in segments[i + 1 :] if s.size), None)
            if nxt is not None:
                first = next(nxt.walk(0, nxt.size), None)
                rng.last_offset_lost = (first[1].base_offset if first is not None else nxt.base_offset) - 1
            self._log_skipped(rng)
        return segments, first_recovered

    def _log_skipped(self, rng: SkippedRange) -> None:
        if rng.last_offset_lost is None:
            offsets = f"offsets from {rng.first_offset_lost} on lost (nothing valid follows)"
        elif rng.last_offset_lost < rng.first_offset_lost:
            offsets = "no offsets lost"
        else:
            offsets = f"offsets {rng.first_offset_lost}..{rng.last_offset_lost} lost ({rng.offsets_lost} offsets, " + (
                f"{rng.records_lost} records)" if rng.records_lost is not None else "record count unknown)"
            )
        log.error(
            "%s: recovery removed damaged bytes [%d, %d) (%d bytes) of segment %s and kept the "
            "valid batches after them: %s; reason: %s",
            self.dir,
            rng.position,
            rng.position + rng.bytes_skipped,
            rng.bytes_skipped,
            os.path.join(self.dir, rng.segment),
            offsets,
            rng.reason,
        )

    def complete_swaps_and_cleanup(self) -> None:
        """Start-up cleanup of an interrupted delete / clean / swap (Kafka's rules):
        ``.deleted`` and ``.cleaned`` files are removed, orphan ``.tmp`` files too; a ``.swap``
        segment (a finished cleaning) replaces the segments it covers and is renamed in place."""
        names = os.listdir(self.dir)
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith((DELETED_SUFFIX, CLEANED_SUFFIX, ".tmp")):
                log.info("%s: removing leftover %s", self.dir, name)
                _unlink(path)
        swaps = sorted(n for n in names if n.endswith(LOG_SUFFIX + SWAP_SUFFIX))
        for name in swaps:
            base = parse_base_offset(name)
            if base is None:
                continue
            swap = LogSegment(self.dir, base, suffix=SWAP_SUFFIX, **self._seg_kwargs)
            res = swap.recover()
            end = swap.next_offset
            swap.close_handles()
            # delete the originals covered by [base, end)
            for other in os.listdir(self.dir):
                if other.endswith(LOG_SUFFIX):
                    ob = parse_base_offset(other)
                    if ob is not None and base <= ob < max(end, base + 1):
                        for suf in (LOG_SUFFIX,) + _INDEX_SUFFIXES:
                            _unlink(os.path.join(self.dir, f"{ob:020d}{suf}"))
            for suf in (LOG_SUFFIX,) + _INDEX_SUFFIXES:
                src = os.path.join(self.dir, f"{base:020d}{suf}{SWAP_SUFFIX}")
                if os.path.exists(src):
                    os.replace(src, os.path.join(self.dir, f"{base:020d}{suf}"))
            log.info(
                "%s: completed an interrupted segment swap at base offset %d (%d batches)", self.dir, base, res.batches
            )
        # index files without a .log
        left = set(os.listdir(self.dir))
        for name in left:
            for suf in _INDEX_SUFFIXES:
                if name.endswith(suf):
                    stem = name[: -len(suf)]
                    if stem + LOG_SUFFIX not in left:
                        _unlink(os.path.join(self.dir, name))


def rebuild_producer_state(
    producers: ProducerStateManager, segments: Sequence[LogSegment], log_end_offset: int, *, unclean: bool
) -> None:
    """Reload the producers' state for a log ending at ``log_end_offset``: drop snapshots above
    it when the log may have lost data (``unclean``), load the latest snapshot at or below it
    and replay the batches from there (Kafka's ``rebuildProducerState``; headers, plus the
    control record of each transaction marker).  The caller holds whatever lock guards
    ``producers`` and ``segments``."""
    if unclean:
        producers.delete_snapshots_above(log_end_offset)
    load_producer_state(producers, segments, log_end_offset)


#: how far back from a snapshot's offset the loader looks for producers' earlier batches: the
#: first window, doubled each time, and the total (bytes of the log's segments; 16 MiB of the
#: smallest batches, ~150 k headers, take ~0.13 s to walk)
BACKFILL_FIRST_WINDOW = 1 << 20
BACKFILL_MAX_BYTES = 16 << 20


def load_producer_state(producers: ProducerStateManager, segments: Sequence[LogSegment], upto: int) -> None:
    """The producer state as of offset ``upto``: the latest snapshot at or below it, the
    earlier batches of its producers read back from the log before it (:func:`backfill_batches`),
    and a replay of the batches from the snapshot's offset to ``upto``."""
    snap = producers.load_latest(upto)
    first = segments[0].base_offset
    start = first if snap is None else max(snap, first)
    if start > first:
        backfill_batches(producers, segments, start)
    if start >= upto:
        return
    for seg in segments:
        if seg.next_offset <= start:
            continue
        if seg.base_offset >= upto:
            break
        found = seg.translate_offset(start, seg.size)
        if found is None:
            continue
        for pos, h in seg.walk(found[0], seg.size):
            if h.base_offset >= upto:
                break
            replay_batch(producers, seg, pos, h)


def backfill_batches(
    producers: ProducerStateManager, segments: Sequence[LogSegment], before: int, max_bytes: int = BACKFILL_MAX_BYTES
) -> int:
    """Complete the producers' last 5 batches from the log before offset ``before`` (a snapshot
    holds only each producer's last batch; an idempotent producer may have 5 in flight, and a
    resend of any of them after a restart or a truncation must be answered as a duplicate, not
    OUT_OF_ORDER_SEQUENCE_NUMBER).  Reads batch headers backwards in windows that double from
    :data:`BACKFILL_FIRST_WINDOW` (each window walked forwards from an offset-index entry, so it
    starts on a batch), segment by segment, until every producer short of batches has 5 or its
    chain breaks, or about ``max_bytes`` were read (windows start at offset-index entries, one
    index interval apart): a producer idle for longer than that keeps what it
    has (a resend so old is past any delivery timeout).  Returns the bytes read.  The caller
    holds whatever lock guards ``producers`` and ``segments``."""
    wanted = producers.short_of_batches()
    scanned = 0
    window = BACKFILL_FIRST_WINDOW
    for seg in reversed(segments):
        if not wanted or scanned >= max_bytes:
            break
        if seg.base_offset >= before:
            continue
        found = seg.translate_offset(before, seg.size)
        end = found[0] if found is not None else seg.size
        while end > 0 and wanted and scanned < max_bytes:
            start = seg.index.lookup_position(max(0, end - min(window, max_bytes - scanned)))
            headers = [h for _pos, h in seg.walk(start, end) if h.producer_id in wanted]
            for h in reversed(headers):
                producers.prepend_earlier(h, wanted)
            scanned += end - start
            end = start
            window *= 2
    return scanned


def replay_batch(producers: ProducerStateManager, seg: LogSegment, pos: int, h: BatchHeader) -> CompletedTxn | None:
    """Replay one batch of ``seg`` at ``pos`` into ``producers``; returns the CompletedTxn a
    marker ends, if any.  A marker whose control record cannot be read is logged and skipped."""
    if h.producer_id < 0:
        return None
    control = None
    if h.is_control:
        try:
            control = read_marker(os.pread(seg.fd, h.size, pos))
        except CorruptRecordError as e:
            log.warning("%s: unreadable transaction marker at offset %d skipped: %s", seg.log_path, h.base_offset, e)
            return None
    return producers.replay(h, control)


def rebuild_txn_indexes(producers: ProducerStateManager, segments: Sequence[LogSegment], first: int) -> int:
    """Rebuild the ``.txnindex`` of ``segments[first:]``: load the producer state as of
    ``segments[first].base_offset``, then replay every later batch; each ABORT marker that ends
    a transaction with data appends its :class:`AbortedTxn` to its segment's index, with the
    last stable offset computed as at append time.  Leaves ``producers`` at the log end (the
    caller reloads it anyway).  Returns the number of entries written."""
    load_producer_state(producers, segments, segments[first].base_offset)
    n = 0
    for seg in segments[first:]:
        seg.txn_index.reset()
        for pos, h in seg.walk(0, seg.size):
            done = replay_batch(producers, seg, pos, h)
            if done is not None and done.is_aborted:
                lso = producers.last_stable_offset_after(done)
                seg.txn_index.append(AbortedTxn(done.producer_id, done.first_offset, done.last_offset, lso))
                n += 1
    if n:
        log.info(
            "%s: rebuilt %d aborted-transaction index entries from segment %d on",
            segments[first].dir,
            n,
            segments[first].base_offset,
        )
    return n


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
