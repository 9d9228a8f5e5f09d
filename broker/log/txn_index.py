"""TransactionIndex: a segment's ``<20-digit base offset>.txnindex`` of aborted transactions.

Kafka's ``TransactionIndex`` / ``AbortedTxn`` (storage/.../log/).  One fixed 34-byte big-endian
entry per transaction whose ABORT marker was written into the segment::

    version           int16   0
    producerId        int64   the transaction's producer
    firstOffset       int64   offset of the transaction's first batch (possibly in an earlier segment)
    lastOffset        int64   offset of the ABORT marker (in this segment)
    lastStableOffset  int64   the partition's last stable offset once the marker was written

Entries are in marker order, so ``lastOffset`` increases.  A READ_COMMITTED Fetch asks for
the aborted transactions that overlap the range it returns (:meth:`collect`, Kafka's
``collectAbortedTxns``): the scan starts at the segment holding the fetch offset and goes on to
later segments until an entry's ``lastStableOffset`` reaches the upper bound (every aborted
transaction that could overlap the range has been seen by then).

The file is created on the first entry (most segments never see an abort) and holds exactly
its entries; the entries are also kept in memory.  The index can always be rebuilt from the
segment's batches and the producer state at the segment's start (the loader does so for the
segments it recovers).

Thread safety: :meth:`append`, :meth:`truncate_to`, :meth:`reset`, renames and close come from
the owning Log under its lock (or from the loader / cleaner that own the segment).  Readers
(:meth:`collect`, :attr:`entries`) take no lock: the entry list only grows at its end and is
replaced, never shrunk in place, by a truncation.
"""

from __future__ import annotations

import itertools
import logging
import os
import struct
from bisect import bisect_left
from operator import attrgetter
from typing import NamedTuple

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.log.index import IndexFile

log = logging.getLogger(__name__)

TXNINDEX_SUFFIX = ".txnindex"
ABORTED_TXN_VERSION = 0
#: version int16, producerId int64, firstOffset int64, lastOffset int64, lastStableOffset int64
ABORTED_TXN = struct.Struct(">hqqqq")
assert ABORTED_TXN.size == 34  # Kafka's AbortedTxn.TOTAL_SIZE


class AbortedTxn(NamedTuple):
    """One aborted transaction (Kafka's ``AbortedTxn``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int

    def encode(self) -> bytes:
        return ABORTED_TXN.pack(
            ABORTED_TXN_VERSION, self.producer_id, self.first_offset, self.last_offset, self.last_stable_offset
        )


def decode_entries(raw: bytes, path: str = "txnindex") -> list[AbortedTxn]:
    """The entries of a whole ``.txnindex`` file.  Raises CorruptRecordError when the size is
    not a multiple of 34 or an entry has a version other than 0."""
    if len(raw) % ABORTED_TXN.size:
        raise CorruptRecordError(f"{path}: expected a multiple of {ABORTED_TXN.size} bytes, read {len(raw)}")
    out: list[AbortedTxn] = []
    for version, pid, first, last, lso in ABORTED_TXN.iter_unpack(raw):
        if version != ABORTED_TXN_VERSION:
            raise CorruptRecordError(
                f"{path}: entry {len(out)}: expected aborted-transaction version 0, read {version}"
            )
        out.append(AbortedTxn(pid, first, last, lso))
    return out


_last_offset = attrgetter("last_offset")


class TransactionIndex(IndexFile):
    """The aborted transactions of one segment (see the module docstring); the file handling
    (flush, close, rename, delete) is :class:`~pyklog.broker.log.index.IndexFile`'s."""

    def __init__(self, path: str, base_offset: int):
        super().__init__(path, base_offset)
        self.entries: list[AbortedTxn] = []

    def __len__(self) -> int:
        return len(self.entries)

    # -------------------------------------------------------------- file
    def load(self) -> None:
        """Read the file (absent: no entries).  Raises CorruptRecordError (the caller rebuilds)."""
        entries = decode_entries(self._load_raw(), self.path)
        for a, b in itertools.pairwise(entries):
            if b.last_offset <= a.last_offset:
                raise CorruptRecordError(
                    f"{self.path}: last offsets must increase, read {a.last_offset} then {b.last_offset}"
                )
        self.entries = entries

    def sanity_check(self, next_offset: int) -> None:
        """Every marker lies in the segment ``[base_offset, next_offset)``."""
        for e in self.entries:
            if not self.base_offset <= e.last_offset < max(next_offset, self.base_offset + 1):
                raise CorruptRecordError(
                    f"{self.path}: aborted transaction of producer {e.producer_id} ends at offset "
                    f"{e.last_offset}, outside the segment [{self.base_offset}, {next_offset})"
                )

    def append(self, txn: AbortedTxn) -> None:
        """Add an entry (one ``os.write`` of 34 bytes).  Raises ValueError when its last offset
        does not follow the previous entry's (Kafka: "last offset of appended transactions must
        increase sequentially")."""
        if self.entries and txn.last_offset <= self.entries[-1].last_offset:
            raise ValueError(
                f"{self.path}: aborted transaction ending at {txn.last_offset} does not follow the "
                f"last one, ending at {self.entries[-1].last_offset}"
            )
        raw = txn.encode()
        fd = self._open_fd()
        n = os.write(fd, raw)
        if n != len(raw):  # a short write of 34 bytes: put the file back and report it
            os.ftruncate(fd, len(self.entries) * ABORTED_TXN.size)
            raise OSError(f"{self.path}: short write of an aborted-transaction entry ({n} of {len(raw)})")
        self.entries.append(txn)

    def _rewrite_entries(self, entries: list[AbortedTxn]) -> None:
        """The file holds exactly ``entries``: none, no file."""
        if entries:
            self._rewrite(b"".join(e.encode() for e in entries))
        else:
            self.delete()
        self.entries = list(entries)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose marker is at or above ``offset`` (Kafka's ``truncateTo``)."""
        keep = [e for e in self.entries if e.last_offset < offset]
        if len(keep) != len(self.entries):
            self._rewrite_entries(keep)

    def reset(self) -> None:
        """Remove every entry and the file (rebuild)."""
        self._rewrite_entries([])

    # -------------------------------------------------------------- reads
    def collect(self, fetch_offset: int, upper_bound_offset: int) -> tuple[list[AbortedTxn], bool]:
        """Entries overlapping ``[fetch_offset, upper_bound_offset)`` and whether the search is
        complete (an entry's last stable offset reached the upper bound, so no later segment
        can hold an overlapping one).  Kafka's ``collectAbortedTxns``.  Lock-free."""
        out = []
        entries = self.entries  # one list: appends only add at its end, truncation replaces it
        # entries ending before the fetch offset can neither overlap nor end the search (their
        # last stable offset is at most their last offset + 1 <= fetch offset < upper bound
        # when they are skipped): binary search past them (Kafka scans the file from the start)
        start = bisect_left(entries, fetch_offset, key=_last_offset) if fetch_offset < upper_bound_offset else 0
        for i in range(start, len(entries)):
            e = entries[i]
            if e.last_offset >= fetch_offset and e.first_offset < upper_bound_offset:
                out.append(e)
            if e.last_stable_offset >= upper_bound_offset:
                return out, True
        return out, False


__all__ = ["TransactionIndex", "AbortedTxn", "TXNINDEX_SUFFIX", "ABORTED_TXN", "decode_entries"]
