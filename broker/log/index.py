"""Sparse segment indexes in Kafka's on-disk format.

``<base>.index`` (OffsetIndex), 8-byte big-endian entries::

    relativeOffset  int32   a batch's LAST offset minus the segment's base offset
    position        int32   the batch's start position in the .log file

``<base>.timeindex`` (TimeIndex), 12-byte big-endian entries::

    timestamp       int64   the largest timestamp seen in the segment so far
    relativeOffset  int32   relative last offset of the batch that carried it

Kafka preallocates and mmaps these files; pyklog keeps the entries in memory (two ``array``s
per index, binary-searched with ``bisect``) and appends each new entry to the file with one
``os.write``, so the file always holds exactly its entries (no preallocation to trim).  Both
indexes are strictly increasing in both columns and can always be rebuilt from the .log.

Thread safety: appends/truncations come from the owning Log under its lock; lookups run
lock-free from readers.  A lookup that races an append sees either the old or the new entry
count (arrays only grow at the end, and readers bound their search by a length read once).
"""

from __future__ import annotations

import errno
import os
import struct
from array import array
from bisect import bisect_right

from pyklog.broker.errors import CorruptRecordError

OFFSET_ENTRY = struct.Struct(">ii")
TIME_ENTRY = struct.Struct(">qi")


class IndexFile:
    """The file under one of a segment's indexes (offset, time, transaction index): opened for
    appends on the first write, fsynced by :meth:`flush`, replaced whole (tmp + rename) by a
    truncation or rebuild, renamed with its segment (``.deleted``, ``.swap``), deleted.  The file
    side of Kafka's ``AbstractIndex`` / ``TransactionIndex``.  Callers hold the owning Log's lock
    (or own the segment, as the loader and the cleaner do)."""

    def __init__(self, path: str, base_offset: int):
        self.path = path
        self.base_offset = base_offset
        self._fd = -1

    # -------------------------------------------------------------- file
    def _open_fd(self) -> int:
        if self._fd < 0:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        return self._fd

    def _load_raw(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def flush(self) -> None:
        """fsync the file if it is open.  Runs outside the owning Log's lock (``Log.flush``), so the
        descriptor may be closed meanwhile by a holder of the lock (a sealed segment releasing its
        indexes after its own flush, a truncation rewriting the file): the descriptor is read once,
        and a close that beat the fsync is not an I/O error (whoever closed it made it durable or
        replaced the file)."""
        fd = self._fd
        if fd < 0:
            return
        try:
            os.fsync(fd)
        except OSError as e:
            if e.errno == errno.EBADF and self._fd != fd:
                return
            raise

    def close(self) -> None:
        fd, self._fd = self._fd, -1  # taken before closing: no second close of a reused number
        if fd >= 0:
            os.close(fd)

    def rename(self, new_path: str) -> None:
        if os.path.exists(self.path):
            os.rename(self.path, new_path)
        self.path = new_path

    def _rewrite(self, raw: bytes) -> None:
        """Replace the file's contents (truncation / rebuild): tmp + rename.  Emptied: truncated in
        place (an empty index is always valid, so no crash can leave a wrong one; a new segment's
        three indexes cost three creations, not six files and three renames)."""
        self.close()
        if not raw:
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644))
            return
        tmp = self.path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(raw)
        os.replace(tmp, self.path)

    def delete(self) -> None:
        """Close and remove the file (absent already: nothing to do)."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class _IndexFile(IndexFile):
    """An index of fixed-size entries with a maximum size (``segment.index.bytes``)."""

    entry: struct.Struct

    def __init__(self, path: str, base_offset: int, max_index_bytes: int):
        super().__init__(path, base_offset)
        self.max_entries = max(1, max_index_bytes // self.entry.size)

    def __len__(self) -> int:
        """The number of entries (each subclass counts its own)."""
        raise NotImplementedError

    @property
    def is_full(self) -> bool:
        return len(self) >= self.max_entries


class OffsetIndex(_IndexFile):
    """Maps a batch's last offset (relative) to its start position.  See module docstring."""

    entry = OFFSET_ENTRY

    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_bytes)
        self._offsets = array("q")  # relative offsets
        self._positions = array("q")
        # in memory only: where the indexed batch ends (-1 = not known yet).  A lookup for an
        # offset after the indexed batch's last offset can start scanning there at once.
        self._ends = array("q")

    def __len__(self) -> int:
        return len(self._positions)

    def load(self) -> None:
        """Read the file's entries; raise CorruptRecordError if it is not a valid index
        (size not a multiple of 8, or entries not strictly increasing)."""
        raw = self._load_raw()
        if len(raw) % OFFSET_ENTRY.size:
            raise CorruptRecordError(f"{self.path}: expected a multiple of {OFFSET_ENTRY.size} bytes, read {len(raw)}")
        offs, poss = array("q"), array("q")
        last_o = last_p = -1
        for rel, pos in OFFSET_ENTRY.iter_unpack(raw):
            if rel <= last_o or (pos <= last_p and last_p >= 0) or rel < 0 or pos < 0:
                raise CorruptRecordError(
                    f"{self.path}: entry {len(offs)} ({rel}, {pos}) does not increase on ({last_o}, {last_p})"
                )
            offs.append(rel)
            poss.append(pos)
            last_o, last_p = rel, pos
        self._offsets, self._positions = offs, poss
        self._ends = array("q", [-1]) * len(poss)

    def sanity_check(self, segment_size: int) -> None:
        """Raise CorruptRecordError if an entry points past the end of the segment."""
        if len(self._positions) and self._positions[-1] >= segment_size:
            raise CorruptRecordError(
                f"{self.path}: last entry points at position {self._positions[-1]}, "
                f"but the segment holds {segment_size} bytes"
            )

    def append(self, offset: int, position: int, end: int = -1) -> None:
        """Add an entry for absolute ``offset`` (a batch's last offset) at ``position``;
        ``end`` is where that batch ends, if known (kept in memory only)."""
        rel = offset - self.base_offset
        if len(self._offsets) and (rel <= self._offsets[-1] or position <= self._positions[-1]):
            return  # Kafka ignores non-increasing entries too
        self._open_fd()
        os.write(self._fd, OFFSET_ENTRY.pack(rel, position))
        self._ends.append(end)
        self._offsets.append(rel)
        self._positions.append(position)

    def lookup_entry(self, offset: int) -> tuple[int, int, int, int]:
        """``(i, absolute_offset, position, end)`` of the largest entry with offset <=
        ``offset`` (``end`` -1 when unknown), or ``(-1, base_offset, 0, -1)`` when none."""
        n = len(self._positions)
        i = bisect_right(self._offsets, offset - self.base_offset, 0, n) - 1
        if i < 0:
            return -1, self.base_offset, 0, -1
        try:
            return i, self.base_offset + self._offsets[i], self._positions[i], self._ends[i]
        except IndexError:  # a concurrent truncation shrank the arrays
            return -1, self.base_offset, 0, -1

    def learn_end(self, i: int, position: int, end: int) -> None:
        """Remember where the batch of entry ``i`` (at ``position``) ends (lock-free: benign
        race, checked against the entry's position)."""
        try:
            if self._positions[i] == position:
                self._ends[i] = end
        except IndexError:
            pass

    def lookup(self, offset: int) -> tuple[int, int]:
        """``(absolute_offset, position)`` of the largest entry with offset <= ``offset``, or
        ``(base_offset, 0)`` when none.  Scanning batches from that position finds ``offset``."""
        n = len(self._positions)
        i = bisect_right(self._offsets, offset - self.base_offset, 0, n) - 1
        if i < 0:
            return self.base_offset, 0
        return self.base_offset + self._offsets[i], self._positions[i]

    def lookup_position(self, position: int) -> int:
        """The largest indexed position <= ``position`` (0 when none): a batch start."""
        n = len(self._positions)
        i = bisect_right(self._positions, position, 0, n) - 1
        return self._positions[i] if i >= 0 else 0

    def last_entry(self) -> tuple[int, int]:
        if not len(self._positions):
            return self.base_offset, 0
        return self.base_offset + self._offsets[-1], self._positions[-1]

    def truncate_to_position(self, position: int) -> None:
        """Drop entries whose position is >= ``position`` (the segment is cut there)."""
        i = bisect_right(self._positions, position - 1)
        if i == len(self._positions):
            return
        del self._ends[i:]
        del self._offsets[i:]
        del self._positions[i:]
        self._rewrite(b"".join(OFFSET_ENTRY.pack(o, p) for o, p in zip(self._offsets, self._positions)))

    def reset(self) -> None:
        self._offsets, self._positions, self._ends = array("q"), array("q"), array("q")
        self._rewrite(b"")


class TimeIndex(_IndexFile):
    """Maps the segment's running maximum timestamp to the relative offset that carried it."""

    entry = TIME_ENTRY

    def __init__(self, path: str, base_offset: int, max_index_bytes: int = 10 * 1024 * 1024):
        super().__init__(path, base_offset, max_index_bytes)
        self._timestamps = array("q")
        self._offsets = array("q")

    def __len__(self) -> int:
        return len(self._offsets)

    def load(self) -> None:
        raw = self._load_raw()
        if len(raw) % TIME_ENTRY.size:
            raise CorruptRecordError(f"{self.path}: expected a multiple of {TIME_ENTRY.size} bytes, read {len(raw)}")
        tss, offs = array("q"), array("q")
        for ts, rel in TIME_ENTRY.iter_unpack(raw):
            if (len(tss) and (ts <= tss[-1] or rel < offs[-1])) or rel < 0:
                raise CorruptRecordError(f"{self.path}: entry {len(tss)} ({ts}, {rel}) does not increase")
            tss.append(ts)
            offs.append(rel)
        self._timestamps, self._offsets = tss, offs

    def sanity_check(self, next_offset: int) -> None:
        if len(self._offsets) and self.base_offset + self._offsets[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptRecordError(
                f"{self.path}: last entry offset {self.base_offset + self._offsets[-1]} is not "
                f"below the segment's next offset {next_offset}"
            )

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Add ``(timestamp, offset)`` if ``timestamp`` is larger than the last entry's."""
        if len(self._timestamps) and timestamp <= self._timestamps[-1]:
            return
        rel = offset - self.base_offset
        if len(self._offsets) and rel < self._offsets[-1]:
            return
        self._open_fd()
        os.write(self._fd, TIME_ENTRY.pack(timestamp, rel))
        self._timestamps.append(timestamp)
        self._offsets.append(rel)

    def lookup_below(self, timestamp: int) -> int | None:
        """Absolute offset of the last entry with timestamp < ``timestamp`` (every batch up to
        and including that offset has a max timestamp below ``timestamp``), or None."""
        n = len(self._offsets)
        i = bisect_right(self._timestamps, timestamp - 1, 0, n) - 1
        if i < 0:
            return None
        return self.base_offset + self._offsets[i]

    def last_entry(self) -> tuple[int, int] | None:
        if not len(self._offsets):
            return None
        return self._timestamps[-1], self.base_offset + self._offsets[-1]

    def truncate_to_offset(self, offset: int) -> None:
        """Drop entries whose offset is >= ``offset``."""
        i = bisect_right(self._offsets, offset - self.base_offset - 1)
        if i == len(self._offsets):
            return
        del self._timestamps[i:]
        del self._offsets[i:]
        self._rewrite(b"".join(TIME_ENTRY.pack(t, o) for t, o in zip(self._timestamps, self._offsets)))

    def reset(self) -> None:
        self._timestamps, self._offsets = array("q"), array("q")
        self._rewrite(b"")
