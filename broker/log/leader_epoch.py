"""Leader-epoch cache and its ``leader-epoch-checkpoint`` file (KIP-101, KIP-279).

Kafka's ``LeaderEpochFileCache`` and ``LeaderEpochCheckpointFile``.  Each partition directory
holds one file ``leader-epoch-checkpoint`` in Kafka's text format::

    0                       version
    3                       number of entries
    0 0                     epoch, start offset: the first offset written in that epoch
    2 150
    5 151

Entries increase strictly in both epoch and start offset.  The cache answers "where did epoch E
end?" (:meth:`LeaderEpochFileCache.end_offset_for`), which is how a returning follower learns
where its log diverged from the leader's (OffsetsForLeaderEpoch) and how a KIP-320 consumer
validates its position after a leader change.

Who changes it (always under the owning Log's lock, see ``Log``):

- appends: every batch carries ``partitionLeaderEpoch``; a leader's append stamps the current
  epoch, a follower's append keeps the leader's, and each batch's (epoch, base offset) is
  offered to :meth:`assign`;
- the ReplicaManager on becoming leader: (new epoch, log end offset), through
  ``Log.assign_epoch_start_offset``;
- truncation: :meth:`truncate_from_end` (a follower cut back to the leader, recovery),
  :meth:`truncate_from_start` (log start offset moved: DeleteRecords, retention);
- loading: the file is read; when it is missing or unreadable the Log rebuilds the cache from
  the batches' ``partitionLeaderEpoch`` and writes the file again.

Every change is written at once, atomically (``<file>.tmp`` and a rename) but without an fsync
(as Kafka does since KAFKA-15046: an fsync per new leader epoch made every leadership change and
every partition creation wait for the disk); :meth:`LeaderEpochFileCache.flush` makes it durable
and the Log calls it when it flushes its segments and at close.  A crash may leave an older or an
empty file: the loader checks the entries against the batches' ``partitionLeaderEpoch`` and
rebuilds them from the batches when they do not match (entries at or past the log end offset are
dropped), so what the log holds always describes it.

Thread safety: writers serialise on the cache's lock (in practice the Log's lock is already
held); readers (:meth:`end_offset_for`, :attr:`latest_epoch`, :meth:`epoch_entries`) take no
lock: they read one immutable tuple that writers replace whole.
"""

from __future__ import annotations

import logging
import os
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import NamedTuple

from pyklog.broker.errors import CorruptRecordError

from .checkpoint import replace_file, replace_file_durably

log = logging.getLogger(__name__)

LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
LEADER_EPOCH_CHECKPOINT_VERSION = 0
#: Kafka's ``UNDEFINED_EPOCH`` and ``UNDEFINED_EPOCH_OFFSET`` (OffsetsForLeaderEpoch answers)
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1

__all__ = [
    "EpochEntry",
    "LeaderEpochFileCache",
    "LeaderEpochCheckpointFile",
    "LEADER_EPOCH_CHECKPOINT",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
]


class EpochEntry(NamedTuple):
    """Kafka's ``EpochEntry``: ``start_offset`` is the first offset written in ``epoch``."""

    epoch: int
    start_offset: int


class LeaderEpochCheckpointFile:
    """The ``leader-epoch-checkpoint`` file (Kafka's ``LeaderEpochCheckpointFile``).  Writes
    are atomic (tmp + rename; ``sync``: with fsyncs of the file and the directory); no lock of its
    own (the cache's)."""

    def __init__(self, path: str):
        self.path = path

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def write(self, entries: Sequence[EpochEntry], *, sync: bool = True) -> None:
        lines = [str(LEADER_EPOCH_CHECKPOINT_VERSION), str(len(entries))]
        lines.extend(f"{e.epoch} {e.start_offset}" for e in entries)
        data = ("\n".join(lines) + "\n").encode()
        if sync:
            replace_file_durably(self.path, data)
        else:
            replace_file(self.path, data)

    def read(self) -> list[EpochEntry] | None:
        """The entries, or None when the file does not exist.  Raises CorruptRecordError naming
        the line and what was expected when the file is malformed (bad version, count, line,
        or entries that do not increase in both epoch and start offset)."""
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return None
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            raise CorruptRecordError(f"{self.path}: expected ASCII text, read non-ASCII bytes") from None
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        if not lines or lines[0] != str(LEADER_EPOCH_CHECKPOINT_VERSION):
            raise CorruptRecordError(
                f"{self.path}: line 1: expected version {LEADER_EPOCH_CHECKPOINT_VERSION}, "
                f"read {lines[0] if lines else 'end of file'!r}"
            )
        if len(lines) < 2 or not lines[1].isdigit():
            raise CorruptRecordError(
                f"{self.path}: line 2: expected the entry count, read {lines[1] if len(lines) > 1 else 'end of file'!r}"
            )
        count = int(lines[1])
        if len(lines) - 2 != count:
            raise CorruptRecordError(f"{self.path}: expected {count} entries, read {len(lines) - 2}")
        out: list[EpochEntry] = []
        for i, ln in enumerate(lines[2:], start=3):
            parts = ln.split(" ")
            if len(parts) != 2 or not all(p.isdigit() for p in parts):
                raise CorruptRecordError(
                    f"{self.path}: line {i}: expected 'epoch startOffset' (two integers >= 0), read {ln!r}"
                )
            e = EpochEntry(int(parts[0]), int(parts[1]))
            if out and (e.epoch <= out[-1].epoch or e.start_offset <= out[-1].start_offset):
                raise CorruptRecordError(
                    f"{self.path}: line {i}: entry {e.epoch} {e.start_offset} does not increase "
                    f"on the previous {out[-1].epoch} {out[-1].start_offset}"
                )
            out.append(e)
        return out


class LeaderEpochFileCache:
    """Epoch -> start offset of one partition (Kafka's ``LeaderEpochFileCache``), backed by the
    partition's ``leader-epoch-checkpoint``.  See the module docstring for who calls what and
    the locking rule.  ``log_end_offset`` is a callable giving the log's current end offset
    (what :meth:`end_offset_for` answers for the latest epoch)."""

    def __init__(
        self,
        dir: str,
        log_end_offset: Callable[[], int],
        entries: Iterable[tuple[int, int]] = (),
        *,
        write: bool = False,
    ):
        self.dir = dir
        self.file = LeaderEpochCheckpointFile(os.path.join(dir, LEADER_EPOCH_CHECKPOINT))
        self._log_end_offset = log_end_offset
        self._lock = threading.RLock()
        self._entries: tuple[EpochEntry, ...] = tuple(EpochEntry(*e) for e in entries)
        self._epochs: tuple[int, ...] = tuple(e.epoch for e in self._entries)
        self._unsynced = False
        #: the entries the file holds as far as this cache knows (None: unknown): a change that
        #: ends where the file already is writes nothing (a restarted leader at the epoch it had)
        self._written: tuple[EpochEntry, ...] | None = None
        #: while the log loads: changes stay in memory (the file is written at the next change)
        self.defer_writes = False
        if write:
            self.file.write(self._entries)
            self._written = self._entries

    # ------------------------------------------------------------ reads (lock-free)
    def epoch_entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest epoch, or UNDEFINED_EPOCH (-1) when the cache is empty."""
        entries = self._entries
        return entries[-1].epoch if entries else UNDEFINED_EPOCH

    @property
    def latest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[-1] if entries else None

    @property
    def earliest_entry(self) -> EpochEntry | None:
        entries = self._entries
        return entries[0] if entries else None

    def epoch_for_offset(self, offset: int) -> int:
        """The epoch in which ``offset`` was written (the latest entry starting at or below it),
        or UNDEFINED_EPOCH."""
        entries = self._entries
        i = bisect_right([e.start_offset for e in entries], offset)
        return entries[i - 1].epoch if i else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int | None = None) -> tuple[int, int]:
        """``(epoch, end_offset)`` as Kafka's ``LeaderEpochFileCache.endOffsetFor``:

        - ``requested_epoch`` UNDEFINED (-1): ``(-1, -1)``;
        - the latest epoch: ``(latest, log end offset)``;
        - above the latest (or the cache is empty): ``(-1, -1)``;
        - below the first epoch: ``(requested_epoch, start offset of the first epoch)``;
        - otherwise: ``(largest epoch <= requested, start offset of the first epoch above it)``.

        ``end_offset`` is exclusive: the first offset *not* written in the answered epoch."""
        entries, epochs = self._entries, self._epochs
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if entries and entries[-1].epoch == requested_epoch:
            leo = self._log_end_offset() if log_end_offset is None else log_end_offset
            return requested_epoch, leo
        hi = bisect_right(epochs, requested_epoch)  # first entry with epoch > requested
        if hi >= len(entries):
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if hi == 0:
            return requested_epoch, entries[0].start_offset
        return entries[hi - 1].epoch, entries[hi].start_offset

    # ------------------------------------------------------------ writes
    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that ``epoch`` starts at ``start_offset`` (Kafka's ``assign``).  Returns whether
        the cache changed (then the file has been rewritten).

        The rules keep the entries increasing in both fields: a negative epoch or offset, the
        latest epoch again, an epoch below the latest, or an offset below the latest entry's
        start offset are ignored (the last three logged at WARNING: they mean batches arrived
        out of order).  An epoch above the latest whose start offset equals the latest entry's
        start offset replaces that entry (nothing was written in it: a leader elected twice
        before any append)."""
        if epoch < 0 or start_offset < 0:
            return False
        entries = self._entries
        if entries:
            last = entries[-1]
            if epoch == last.epoch:
                return False  # the common case: this epoch is known already
        with self._lock:
            entries = self._entries
            if entries:
                last = entries[-1]
                if epoch == last.epoch:
                    return False
                if epoch < last.epoch:
                    log.warning(
                        "%s: ignoring leader epoch %d at offset %d: it is below the latest epoch %d (starting at %d)",
                        self.dir,
                        epoch,
                        start_offset,
                        last.epoch,
                        last.start_offset,
                    )
                    return False
                if start_offset < last.start_offset:
                    log.warning(
                        "%s: ignoring leader epoch %d at offset %d: the offset is below the "
                        "latest epoch %d's start offset %d",
                        self.dir,
                        epoch,
                        start_offset,
                        last.epoch,
                        last.start_offset,
                    )
                    return False
                if start_offset == last.start_offset:
                    entries = entries[:-1]
            self._set(entries + (EpochEntry(epoch, start_offset),))
            log.debug("%s: leader epoch %d starts at offset %d", self.dir, epoch, start_offset)
            return True

    def truncate_from_end(self, end_offset: int) -> list[EpochEntry]:
        """Remove the entries starting at or after ``end_offset`` (the log was truncated to
        ``end_offset``; Kafka's ``truncateFromEnd``).  Returns the removed entries."""
        with self._lock:
            entries = self._entries
            if end_offset < 0 or not entries or entries[-1].start_offset < end_offset:
                return []
            k = bisect_left([e.start_offset for e in entries], end_offset)
            removed = list(entries[k:])
            self._set(entries[:k])
            log.info(
                "%s: leader epoch cache truncated to end offset %d, removed %s",
                self.dir,
                end_offset,
                [tuple(e) for e in removed],
            )
            return removed

    def truncate_from_start(self, start_offset: int) -> bool:
        """The log start offset moved to ``start_offset``: entries starting at or below it are
        removed and the last of them is kept with ``start_offset`` as its start (Kafka's
        ``truncateFromStart``).  Returns whether the cache changed."""
        with self._lock:
            entries = self._entries
            if not entries or entries[0].start_offset >= start_offset:
                return False
            k = bisect_right([e.start_offset for e in entries], start_offset)
            first = EpochEntry(entries[k - 1].epoch, start_offset)
            self._set((first,) + entries[k:])
            return True

    def clear(self) -> None:
        """Remove every entry (Kafka's ``clearAndFlush``: the log was emptied)."""
        with self._lock:
            if self._entries:
                self._set(())

    def _set(self, entries: tuple) -> None:
        """Under the lock: replace the entries and rewrite the file.  On an I/O error the
        in-memory cache still changes (it describes the log), the error propagates and the next
        change or the next load writes the file again."""
        self._entries = entries
        self._epochs = tuple(e.epoch for e in entries)
        self._flush()

    def _flush(self) -> None:
        if self.defer_writes or self._entries == self._written:
            return
        self._unsynced = True
        self._written = None  # a failed write leaves the file unknown
        self.file.write(self._entries, sync=False)
        self._written = self._entries

    def loaded_from_file(self) -> None:
        """The entries given at construction are what the file holds."""
        with self._lock:
            self._written = self._entries

    def flush(self, *, sync: bool = True) -> None:
        """Write the file if it differs from the entries; ``sync``: and make it durable (rewritten
        with fsyncs) if a change since the last durable flush was written without."""
        with self._lock:
            if self._entries != self._written:
                self._unsynced = True
                if not sync:
                    self.file.write(self._entries, sync=False)
                    self._written = self._entries
                    return
            if sync and self._unsynced:
                self._written = None
                self.file.write(self._entries)
                self._written = self._entries
                self._unsynced = False

    def __repr__(self) -> str:
        return f"LeaderEpochFileCache({self.dir}, {[tuple(e) for e in self._entries]})"
