"""LogSegment: one ``<20-digit base offset>.log`` file plus its ``.index``, ``.timeindex`` and ``.txnindex``.

The .log file is a plain concatenation of v2 record batches exactly as they travel on the wire
(so a fetch is an ``os.sendfile`` of a byte range).  The indexes are sparse: after more than
``index.interval.bytes`` have been appended since the last entry, the next batch gets an offset
index entry (its last offset -> its start position) and a time index entry (the segment's
running max timestamp -> the offset that carried it).  Sealed segments also get a final time
index entry for their largest timestamp (on roll and on close), so ``max_timestamp`` is known
after a clean restart without reading the .log.  ``<base>.txnindex``
(:class:`~pyklog.broker.log.txn_index.TransactionIndex`) lists the aborted transactions whose
ABORT marker the segment holds; it follows the segment through truncation, renames
(``.deleted``/``.cleaned``/``.swap``) and deletion, and the Log appends to it.

Thread safety: ``append``/``truncate_to``/``recover``/``flush``/``close`` are called by the
owning :class:`broker.log.log.Log` under its per-log lock.  ``read``/``translate_offset``/
``find_offset_by_timestamp``/``walk`` take no lock: they use ``os.pread`` on the file and are
bounded by a ``max_position`` the caller took from an immutable snapshot, so they never see
bytes an append is still writing.
"""

from __future__ import annotations

import logging
import mmap
import os
import time
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from crc32c import crc32c

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.header import (
    ATTRIBUTES_OFFSET,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    BytesLike,
    parse_header,
)

from .index import OffsetIndex, TimeIndex
from .txn_index import TXNINDEX_SUFFIX, TransactionIndex

log = logging.getLogger(__name__)

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"

_WALK_CHUNK = 4096
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_NO_TIMESTAMP = -1


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def filename_prefix(base_offset: int) -> str:
    return f"{base_offset:020d}"


def parse_base_offset(filename: str) -> int | None:
    """Base offset of a segment file name (``00000000000000000123.log`` -> 123), or None."""
    stem = filename.split(".", 1)[0]
    if len(stem) != 20 or not stem.isdigit():
        return None
    return int(stem)


class DamagedRange(NamedTuple):
    """Bytes ``[position, end)`` of the original .log that failed validation for ``reason``.
    ``first_lost_offset`` is the offset after the last good batch before them;
    ``next_base_offset`` is the base offset of the first valid batch after them in the same
    segment (None: nothing valid follows in this segment).  ``records`` is the record count the
    damaged batch's header claims when that header is consistent with the gap, else None."""

    position: int
    end: int
    reason: str
    first_lost_offset: int
    next_base_offset: int | None
    records: int | None

    @property
    def size(self) -> int:
        return self.end - self.position


class RecoveryResult(NamedTuple):
    """What recovering one segment found: ``valid_bytes`` kept, ``truncated_bytes`` cut at
    ``position`` (of the original file) for ``reason`` (None when the segment was intact),
    ``batches`` validated, and ``damaged``: every invalid byte range, the trailing one included
    (only with ``resync=True``; otherwise just the trailing one)."""

    valid_bytes: int
    truncated_bytes: int
    position: int
    reason: str | None
    batches: int
    damaged: tuple = ()


class LogSegment:
    """One segment.  Not thread-safe for writers; see the module docstring for readers."""

    def __init__(
        self,
        dir: str,
        base_offset: int,
        *,
        index_interval_bytes: int = 4096,
        max_index_bytes: int = 10 * 1024 * 1024,
        suffix: str = "",
        create: bool = False,
        file_suffix_for_indexes: str | None = None,
    ):
        self.dir = dir
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        prefix = os.path.join(dir, filename_prefix(base_offset))
        self.log_path = prefix + LOG_SUFFIX + suffix
        isuffix = suffix if file_suffix_for_indexes is None else file_suffix_for_indexes
        self.index = OffsetIndex(prefix + INDEX_SUFFIX + isuffix, base_offset, max_index_bytes)
        self.time_index = TimeIndex(prefix + TIMEINDEX_SUFFIX + isuffix, base_offset, max_index_bytes)
        # aborted transactions whose ABORT marker is in this segment (created on first entry)
        self.txn_index = TransactionIndex(prefix + TXNINDEX_SUFFIX + isuffix, base_offset)
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        fd = os.open(self.log_path, flags, 0o644)
        # the file object handed to readers (FetchSlice.file) for os.sendfile
        self.file = os.fdopen(fd, "r+b", buffering=0)
        self.size = os.fstat(fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = _NO_TIMESTAMP
        self.offset_of_max_timestamp = base_offset
        self.rolling_based_timestamp: int | None = None
        self.created_ms = int(time.time() * 1000)
        self._bytes_since_index = 0
        self.closed = False
        #: True while the .log and its offset and time indexes hold nothing unflushed: a segment
        #: just created empty, loaded after a clean shutdown without change, or just flushed
        #: (:meth:`flush` then skips their fsyncs: a clean shutdown of N idle logs is not N fsyncs)
        self.flushed = False

    # ------------------------------------------------------------------ loading
    @classmethod
    def create(cls, dir: str, base_offset: int, **kw: Any) -> LogSegment:
        seg = cls(dir, base_offset, create=True, **kw)
        if seg.size:
            raise CorruptRecordError(f"{seg.log_path}: expected a new empty segment, found {seg.size} bytes")
        seg.index.reset()
        seg.time_index.reset()
        seg.txn_index.reset()
        seg.flushed = True
        return seg

    def load(self) -> None:
        """Load the indexes of an existing segment (no CRC walk) and find its next offset and
        largest timestamp.  Raises CorruptRecordError if an index is missing or inconsistent
        (the caller then rebuilds it with :meth:`recover`)."""
        for idx in (self.index, self.time_index):
            if not os.path.exists(idx.path) and self.size > 0:
                raise CorruptRecordError(f"{idx.path}: index file is missing")
        self.index.load()
        self.time_index.load()
        self.index.sanity_check(self.size)
        last_offset, last_pos = self.index.last_entry()
        nxt = self.base_offset
        end = last_pos
        first = True
        for pos, h in self.walk(last_pos, self.size):
            if first and len(self.index) and h.last_offset != last_offset:
                raise CorruptRecordError(
                    f"{self.index.path}: last entry maps offset {last_offset} to position "
                    f"{last_pos}, but the batch there ends at offset {h.last_offset}"
                )
            first = False
            nxt = h.next_offset
            end = pos + h.size
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp = h.max_timestamp
                self.offset_of_max_timestamp = h.last_offset
        if end != self.size:
            raise CorruptRecordError(f"{self.log_path}: batches end at position {end}, file holds {self.size} bytes")
        self.next_offset = nxt
        self.time_index.sanity_check(nxt)
        self.txn_index.load()
        self.txn_index.sanity_check(nxt)
        te = self.time_index.last_entry()
        if te is not None and te[0] > self.max_timestamp:
            self.max_timestamp, self.offset_of_max_timestamp = te
        if self.size:
            first_h = self._header_at(0)
            self.rolling_based_timestamp = first_h.max_timestamp if first_h else None
        self._bytes_since_index = self.size - self.index.last_entry()[1] if len(self.index) else self.size

    # ------------------------------------------------------------------ writes
    def append(
        self,
        data: BytesLike | list[bytes | bytearray | memoryview],
        batches: list[tuple[int, int, int, int]],
        size: int | None = None,
    ) -> None:
        """Write ``data`` (whole batches, offsets already assigned) at the end of the file.

        ``data`` is one buffer (one ``os.pwrite``) or a list of buffers of ``size`` bytes in all
        (one ``os.pwritev``); short writes are completed.  ``batches`` lists
        ``(position_in_data, size, last_offset, max_timestamp)`` for each batch, used for the
        sparse index entries.  On an I/O error the file is cut back to its previous end."""
        self.flushed = False
        start = self.size
        fd = self.fd
        try:
            if isinstance(data, list):
                n = size if size is not None else sum(len(b) for b in data)
                done = os.pwritev(fd, data, start)
                if done < n:  # rare: finish the rest from a flattened copy
                    rest = memoryview(b"".join(data))
                    while done < n:
                        done += os.pwrite(fd, rest[done:], start + done)
            else:
                mv = memoryview(data)
                n = len(mv)
                done = 0
                while done < n:
                    done += os.pwrite(fd, mv[done:], start + done)
        except OSError:
            os.ftruncate(fd, start)  # leave no partial batch behind
            raise
        interval = self.index_interval_bytes
        for bpos, bsize, last_offset, max_ts in batches:
            if max_ts > self.max_timestamp:
                self.max_timestamp = max_ts
                self.offset_of_max_timestamp = last_offset
            if self._bytes_since_index > interval:
                self.index.append(last_offset, start + bpos, start + bpos + bsize)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                self._bytes_since_index = 0
            self._bytes_since_index += bsize
        if self.rolling_based_timestamp is None and batches:
            self.rolling_based_timestamp = batches[0][3]
        self.size = start + n
        if batches:
            self.next_offset = batches[-1][2] + 1

    def flush(self) -> None:
        """fsync the .log and its indexes (the .log, offset and time indexes only if changed
        since they were last flushed, created or loaded)."""
        if not self.flushed:
            os.fsync(self.fd)
            self.index.flush()
            self.time_index.flush()
            self.flushed = True
        self.txn_index.flush()

    def close_index_files(self) -> None:
        """Close the descriptors of the three indexes (their entries stay in memory; a later
        truncation or append opens the file again).  For a sealed segment once flushed: a broker
        holds one descriptor per segment plus the active segments' indexes, not four per segment.
        Under the owning Log's lock (no write may race the close)."""
        self.index.close()
        self.time_index.close()
        self.txn_index.close()

    def on_become_inactive(self) -> None:
        """The segment is sealed (rolled): record its largest timestamp in the time index."""
        self.flushed = False
        if self.max_timestamp >= 0:
            self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)

    def truncate_to(self, offset: int) -> int:
        """Cut every batch whose last offset is >= ``offset``; return the bytes removed."""
        self.flushed = False
        found = self.translate_offset(offset, self.size)
        if found is None:
            return 0
        pos = found[0]
        removed = self.size - pos
        os.ftruncate(self.fd, pos)
        self.size = pos
        self.index.truncate_to_position(pos)
        self.time_index.truncate_to_offset(offset)
        self.txn_index.truncate_to(offset)
        self._rescan_tail()
        return removed

    def _rescan_tail(self) -> None:
        """Recompute next offset / max timestamp after a truncation (short walk from the last
        index entry; the max timestamp comes from the remaining time index + that walk)."""
        te = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = te if te else (_NO_TIMESTAMP, self.base_offset)
        _, last_pos = self.index.last_entry()
        self.next_offset = self.base_offset
        if len(self.index):
            self.next_offset = self.index.last_entry()[0] + 1
        for _pos, h in self.walk(last_pos, self.size):
            self.next_offset = h.next_offset
            if h.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = h.max_timestamp, h.last_offset
        self._bytes_since_index = self.size - last_pos if len(self.index) else self.size
        if self.size == 0:
            self.rolling_based_timestamp = None

    # ------------------------------------------------------------------ recovery
    def recover(
        self,
        on_batch: Callable[[BatchHeader], None] | None = None,
        max_batch_bytes: int | None = None,
        *,
        resync: bool = False,
        offset_limit: int | None = None,
    ) -> RecoveryResult:
        """Revalidate every batch (framing, magic, offsets increasing, CRC-32C; no record
        decode), rebuild both indexes, and cut invalid bytes.

        Without ``resync`` the file is truncated at the first invalid batch (Kafka's
        ``LogSegment.recover``).  With ``resync`` an invalid batch is only the end of the
        segment when no valid batch follows it (a torn tail, truncated as without resync);
        otherwise the damaged bytes are cut out and the batches after them kept at their
        offsets (see :meth:`_rewrite_keeping`).  Resynchronising scans forward for the next
        position holding a v2 batch header (magic 2 at its place) whose base offset is at or
        above the next expected offset, whose last offset is below ``offset_limit`` (the next
        segment's base offset) and whose CRC-32C matches; a random byte run passing all three is
        practically impossible (CRC-32C alone: 1 in 2**32).

        The file is mapped read-only (``mmap``) so CRC-32C runs over the page cache without a
        copy.  ``on_batch(header)`` is called for each valid batch (producer-state rebuild)."""
        self.flushed = False
        file_size = os.fstat(self.fd).st_size
        pos, reason, batches, prev_next, damaged = self._validate(
            file_size, on_batch, max_batch_bytes, resync, offset_limit
        )
        inner = [d for d in damaged if d.next_base_offset is not None]
        if inner:
            # keep every valid range; the trailing damage (if any) is dropped with the rest
            keep, start = [], 0
            for d in damaged:
                if d.position > start:
                    keep.append((start, d.position))
                start = d.end
            if start < file_size and damaged[-1].next_base_offset is not None:
                keep.append((start, file_size))
            self._rewrite_keeping(keep)
            new_size = os.fstat(self.fd).st_size
            # second pass over the rewritten file: positions moved, so the indexes are rebuilt
            # from scratch; the producer-state callback already saw every valid batch
            _pos, _reason, batches, prev_next, again = self._validate(
                new_size, None, max_batch_bytes, False, offset_limit
            )
            if again:  # cannot happen unless the disk changes under us: keep what validated
                os.ftruncate(self.fd, _pos)
                new_size = _pos
            self.size = new_size
            self.next_offset = prev_next
            tail = damaged[-1] if damaged[-1].next_base_offset is None else None
            if tail is None:
                return RecoveryResult(new_size, 0, file_size, None, batches, tuple(damaged))
            return RecoveryResult(new_size, tail.size, tail.position, tail.reason, batches, tuple(damaged))
        truncated = file_size - pos
        if truncated:
            os.ftruncate(self.fd, pos)
        self.size = pos
        self.next_offset = prev_next
        return RecoveryResult(pos, truncated, pos, reason if truncated else None, batches, tuple(damaged))

    def _validate(
        self,
        file_size: int,
        on_batch: Callable[[BatchHeader], None] | None,
        max_batch_bytes: int | None,
        resync: bool,
        offset_limit: int | None,
    ) -> tuple[int, str | None, int, int, list[DamagedRange]]:
        self.index.reset()
        self.time_index.reset()
        self.max_timestamp = _NO_TIMESTAMP
        self.offset_of_max_timestamp = self.base_offset
        self.rolling_based_timestamp = None
        self._bytes_since_index = 0
        self.next_offset = self.base_offset
        if not file_size:
            return 0, None, 0, self.base_offset, []
        mm = mmap.mmap(self.fd, file_size, prot=mmap.PROT_READ)
        try:
            if hasattr(mm, "madvise"):
                mm.madvise(mmap.MADV_SEQUENTIAL)
            return self._recover_mapped(mm, file_size, on_batch, max_batch_bytes, resync, offset_limit)
        finally:
            mm.close()

    def _recover_mapped(
        self,
        mm: mmap.mmap,
        file_size: int,
        on_batch: Callable[[BatchHeader], None] | None,
        max_batch_bytes: int | None,
        resync: bool = False,
        offset_limit: int | None = None,
    ) -> tuple[int, str | None, int, int, list[DamagedRange]]:
        mv = memoryview(mm)
        try:
            pos = 0
            reason = None
            batches = 0
            prev_next = self.base_offset
            interval = self.index_interval_bytes
            unpack = HEADER.unpack_from
            damaged: list[DamagedRange] = []
            # a batch's header fields: read below whenever a whole header is there, which is
            # always the case when reason stays None (the only path that uses them)
            base = last_delta = max_ts = size = 0
            fields: tuple[Any, ...] = ()
            while pos < file_size:
                reason = None
                if file_size - pos < HEADER_SIZE:
                    reason = f"partial batch header: {file_size - pos} bytes at the end of the file"
                else:
                    (base, length, _epoch, magic, crc, _attr, last_delta, _fts, max_ts, _pid, _pe, _bs, _cnt) = (
                        fields
                    ) = unpack(mm, pos)
                    size = LOG_OVERHEAD + length
                    if magic != 2:
                        reason = f"expected magic 2, read magic {magic}"
                    elif length < _MIN_BATCH_LENGTH:
                        reason = f"batchLength {length} is below the v2 minimum {_MIN_BATCH_LENGTH}"
                    elif pos + size > file_size:
                        reason = f"torn batch: header says {size} bytes, only {file_size - pos} remain"
                    elif max_batch_bytes is not None and size > max_batch_bytes:
                        reason = f"batch of {size} bytes exceeds the maximum {max_batch_bytes}"
                    elif base < prev_next or last_delta < 0:
                        reason = (
                            f"offsets do not increase: batch base offset {base} (last delta "
                            f"{last_delta}) after next offset {prev_next}"
                        )
                    elif base - self.base_offset + last_delta > 0x7FFFFFFF:
                        reason = f"offset {base + last_delta} does not fit the segment's relative offsets"
                    elif crc32c(mv[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
                        reason = "CRC-32C mismatch"
                if reason is not None:
                    if not resync:
                        break
                    nxt = self._resync(mm, mv, pos, file_size, prev_next, offset_limit)
                    if nxt is None:
                        damaged.append(DamagedRange(pos, file_size, reason, prev_next, None, None))
                        break
                    nxt_base = unpack(mm, nxt)[0]
                    damaged.append(
                        DamagedRange(
                            pos,
                            nxt,
                            reason,
                            prev_next,
                            nxt_base,
                            self._claimed_records(mm, pos, nxt, prev_next, nxt_base),
                        )
                    )
                    pos = nxt
                    continue
                last_offset = base + last_delta
                if max_ts > self.max_timestamp:
                    self.max_timestamp = max_ts
                    self.offset_of_max_timestamp = last_offset
                if self._bytes_since_index > interval:
                    self.index.append(last_offset, pos, pos + size)
                    self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                    self._bytes_since_index = 0
                self._bytes_since_index += size
                if self.rolling_based_timestamp is None:
                    self.rolling_based_timestamp = max_ts
                if on_batch is not None:
                    on_batch(BatchHeader._make(fields))
                prev_next = last_offset + 1
                pos += size
                batches += 1
            return pos, reason, batches, prev_next, damaged
        finally:
            mv.release()

    def _valid_batch_at(
        self, mm: mmap.mmap, mv: memoryview, p: int, file_size: int, min_base: int, offset_limit: int | None
    ) -> bool:
        """True when a whole valid v2 batch starts at ``p`` with base offset >= ``min_base``."""
        if p < 0 or file_size - p < HEADER_SIZE:
            return False
        (base, length, _e, magic, crc, _a, last_delta, *_rest) = HEADER.unpack_from(mm, p)
        if magic != 2 or length < _MIN_BATCH_LENGTH or p + LOG_OVERHEAD + length > file_size:
            return False
        if base < min_base or last_delta < 0 or base - self.base_offset + last_delta > 0x7FFFFFFF:
            return False
        if offset_limit is not None and base + last_delta >= offset_limit:
            return False
        return crc32c(mv[p + ATTRIBUTES_OFFSET : p + LOG_OVERHEAD + length]) == crc

    def _resync(
        self, mm: mmap.mmap, mv: memoryview, pos: int, file_size: int, min_base: int, offset_limit: int | None
    ) -> int | None:
        """Position of the first valid batch after the invalid one at ``pos`` (or None).
        Tries the end the damaged header declares first (a flipped payload byte leaves the
        framing intact), then every later position whose magic byte reads 2, up to the end of
        the segment."""
        if file_size - pos >= HEADER_SIZE:
            length = HEADER.unpack_from(mm, pos)[1]
            guess = pos + LOG_OVERHEAD + length
            if length >= _MIN_BATCH_LENGTH and self._valid_batch_at(mm, mv, guess, file_size, min_base, offset_limit):
                return guess
        q = pos + 1 + MAGIC_OFFSET
        last = file_size - HEADER_SIZE + MAGIC_OFFSET
        while q <= last:
            q = mm.find(b"\x02", q, last + 1)
            if q < 0:
                return None
            if self._valid_batch_at(mm, mv, q - MAGIC_OFFSET, file_size, min_base, offset_limit):
                return q - MAGIC_OFFSET
            q += 1
        return None

    @staticmethod
    def _claimed_records(mm: mmap.mmap, pos: int, end: int, first_lost: int, next_base: int) -> int | None:
        """Record count of the damaged batch at ``pos`` when its header is believable: it is
        the only batch in ``[pos, end)`` and covers exactly the lost offsets."""
        if end - pos < HEADER_SIZE:
            return None
        (base, length, _e, magic, _c, _a, last_delta, *_r, count) = HEADER.unpack_from(mm, pos)
        if (
            magic == 2
            and LOG_OVERHEAD + length == end - pos
            and base == first_lost
            and base + last_delta == next_base - 1
            and 0 < count <= last_delta + 1
        ):
            return count
        return None

    def _rewrite_keeping(self, keep: list[tuple[int, int]]) -> None:
        """Replace the .log by the concatenation of the byte ranges ``keep``, crash-safe.

        Two steps, as the log cleaner's swap: the kept bytes go to ``<base>.log.cleaned`` and are
        fsynced; it is renamed ``<base>.log.swap`` (the directory fsynced), then renamed over
        ``<base>.log`` (an atomic ``rename(2)``).  A crash before the ``.swap`` rename leaves the
        damaged original (the ``.cleaned`` file is removed at start-up and recovery runs again);
        a crash after it is finished by ``LogLoader.complete_swaps_and_cleanup``, which puts the
        ``.swap`` in place of the original.  The open file handle is reopened on the new file."""
        self.flushed = False
        prefix = os.path.join(self.dir, filename_prefix(self.base_offset)) + LOG_SUFFIX
        if self.log_path != prefix:
            raise CorruptRecordError(f"{self.log_path}: only a live segment can be rewritten")
        cleaned, swap = prefix + CLEANED_SUFFIX, prefix + SWAP_SUFFIX
        src = self.fd
        out = os.open(cleaned, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            dst = 0
            for start, end in keep:
                p = start
                while p < end:
                    chunk = os.pread(src, min(1 << 20, end - p), p)
                    if not chunk:
                        raise CorruptRecordError(f"{self.log_path}: short read at {p}")
                    os.pwrite(out, chunk, dst)
                    p += len(chunk)
                    dst += len(chunk)
            os.fsync(out)
        finally:
            os.close(out)
        os.rename(cleaned, swap)
        _fsync_dir(self.dir)
        os.replace(swap, self.log_path)
        _fsync_dir(self.dir)
        self.file.close()
        fd = os.open(self.log_path, os.O_RDWR)
        self.file = os.fdopen(fd, "r+b", buffering=0)
        self.size = os.fstat(fd).st_size

    # ------------------------------------------------------------------ reads
    def _header_at(self, pos: int) -> BatchHeader | None:
        raw = os.pread(self.fd, HEADER_SIZE, pos)
        if len(raw) < HEADER_SIZE:
            return None
        return parse_header(raw, 0)

    def walk(self, start: int, end: int) -> Iterator[tuple[int, BatchHeader]]:
        """Yield ``(position, header)`` of each whole batch between ``start`` and ``end``
        (headers only, no CRC check), reading the file in small ``pread`` chunks."""
        fd = self.fd
        pos = start
        buf = b""
        buf_start = start
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel + HEADER_SIZE > len(buf):
                buf = os.pread(fd, min(_WALK_CHUNK, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            h = parse_header(buf, rel)
            if pos + h.size > end:
                return
            yield pos, h
            pos += h.size

    def translate_offset(self, offset: int, max_position: int) -> tuple[int, BatchHeader] | None:
        """``(position, header)`` of the first batch whose last offset is >= ``offset``, or
        None if there is none before ``max_position``.  Index lookup + short header scan."""
        i, entry_offset, entry_pos, entry_end = self.index.lookup_entry(offset)
        if entry_pos >= max_position:
            i, entry_pos, entry_end = -1, 0, -1
        start = entry_pos
        if entry_offset < offset and 0 < entry_end <= max_position:
            start = entry_end  # skip the indexed batch: it ends before ``offset``
        for pos, h in self.walk(start, max_position):
            if i >= 0 and pos == entry_pos and entry_end < 0:
                self.index.learn_end(i, pos, pos + h.size)
            if h.last_offset >= offset:
                return pos, h
        return None

    def read(self, offset: int, max_bytes: int, max_position: int, min_one: bool = True) -> tuple[int, int, int] | None:
        """Locate ``offset`` and size a read of whole batches: ``(position, size, first_offset)``
        with ``size <= max_bytes`` (or one whole batch when ``min_one``), or None when no batch
        before ``max_position`` holds ``offset`` or later."""
        found = self.translate_offset(offset, max_position)
        if found is None:
            return None
        pos, h = found
        limit = pos + max_bytes
        if limit >= max_position:
            end = max_position
        elif pos + h.size > limit:  # the first batch alone is over the limit
            end = pos + h.size if min_one else pos
        else:
            # jump close to the limit through the index, then walk headers to it
            p = max(pos, self.index.lookup_position(limit))
            end = p  # an indexed position is a batch start: everything before it is whole
            for bpos, bh in self.walk(p, max_position):
                if bpos + bh.size > limit:
                    break
                end = bpos + bh.size
            if end == pos and min_one:
                end = pos + h.size
            elif end == pos:
                return pos, 0, h.base_offset
        return pos, end - pos, h.base_offset

    def find_offset_by_timestamp(self, timestamp: int, start_offset: int, max_position: int) -> BatchHeader | None:
        """Header of the first batch with max timestamp >= ``timestamp`` and last offset >=
        ``start_offset``, or None."""
        below = self.time_index.lookup_below(timestamp)
        start = 0
        if below is not None:
            start = self.index.lookup(below)[1]
        start = max(start, self.index.lookup(start_offset)[1])
        if start >= max_position:
            start = 0
        for _pos, h in self.walk(start, max_position):
            if h.max_timestamp >= timestamp and h.last_offset >= start_offset:
                return h
        return None

    # ------------------------------------------------------------------ files
    @property
    def fd(self) -> int:
        """The .log file descriptor; ValueError once the segment is closed (so a late reader
        fails instead of reading whatever file reused the number)."""
        return self.file.fileno()

    @property
    def last_modified_ms(self) -> int:
        try:
            return int(os.fstat(self.fd).st_mtime * 1000)
        except (OSError, ValueError):
            return 0

    @property
    def index_full(self) -> bool:
        return self.index.is_full or self.time_index.is_full

    def change_suffix(self, old: str, new: str) -> None:
        """Rename the three files (e.g. ``""`` -> ``".deleted"``); open handles stay valid."""

        def renamed(path: str) -> str:
            return path[: len(path) - len(old)] + new

        target = renamed(self.log_path)
        if os.path.exists(self.log_path):
            os.rename(self.log_path, target)
        self.log_path = target
        for idx in (self.index, self.time_index, self.txn_index):
            idx.rename(renamed(idx.path))

    def close(self) -> None:
        """Record the largest timestamp in the time index and close every file."""
        if self.closed:
            return
        self.closed = True
        try:
            self.on_become_inactive()
        except OSError:
            log.warning("could not write the final time index entry of %s", self.log_path)
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        self.file.close()

    def close_handles(self) -> None:
        """Close files without writing anything (deleted segments)."""
        if self.closed:
            return
        self.closed = True
        self.index.close()
        self.time_index.close()
        self.txn_index.close()
        self.file.close()

    def delete_files(self) -> None:
        """Close and unlink the three files."""
        self.close_handles()
        for path in (self.log_path, self.index.path, self.time_index.path, self.txn_index.path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def __repr__(self) -> str:
        return f"LogSegment(base={self.base_offset}, size={self.size}, next={self.next_offset})"


__all__ = [
    "LogSegment",
    "RecoveryResult",
    "DamagedRange",
    "filename_prefix",
    "parse_base_offset",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIMEINDEX_SUFFIX",
    "DELETED_SUFFIX",
    "CLEANED_SUFFIX",
    "SWAP_SUFFIX",
    "TXNINDEX_SUFFIX",
]
