"""Idempotent producer state of one partition: per producer id, the epoch and the metadata of
its last 5 batches (first/last sequence, first/last offset, timestamp), as Kafka keeps it.

Rules applied to an incoming batch with a producer id (Kafka's ProducerAppendInfo):

- epoch older than the producer's current epoch -> InvalidProducerEpochError;
- same epoch and the same first and last sequence as one of the last 5 batches -> a duplicate
  (the log returns that batch's original offsets and appends nothing);
- same epoch, otherwise the first sequence must follow the last one (``last + 1``, wrapping
  from 2**31-1 to 0) -> else OutOfOrderSequenceError;
- a newer epoch must start at sequence 0 -> else OutOfOrderSequenceError;
- an unknown producer id (never seen, or its state went with retention) is accepted at any
  sequence;
- appends of the broker's own coordinators (``from_client=False``, Kafka's
  ``AppendOrigin.COORDINATOR``) skip the sequence rules (the offset manager writes transactional
  offset commits with base sequence 0 or -1 every time) but not the epoch rule.

Transactions (KIP-98, Kafka's ``ProducerAppendInfo`` / ``ProducerStateEntry``): a data batch
with the transactional attribute starts the producer's open transaction if none is open
(``current_txn_first_offset`` = its first offset) or continues it; a non-transactional batch
while one is open -> InvalidTxnStateError.  A control batch (an ``EndTransactionMarker``, written
by :meth:`Log.append_control_marker`) is checked by :meth:`check_marker` (epoch older than the
producer's -> InvalidProducerEpochError; coordinator epoch older than the one stored ->
TransactionCoordinatorFencedError) and :meth:`end_txn` closes the transaction and returns a
:class:`CompletedTxn` when the transaction had data.  The oldest open transaction's first
offset is the partition's *first unstable offset*; the last stable offset is that (or the high
watermark when no transaction is open).  Producers with an open transaction never expire.

Snapshots: ``<20-digit offset>.snapshot`` in the partition directory, Kafka's producer snapshot
layout (version 1)::

    version                int16   1
    crc                    uint32  CRC-32C of everything after this field
    entry count            int32
    entries: producerId int64, epoch int16, lastSequence int32, lastOffset int64,
             offsetDelta int32 (lastOffset - firstOffset of the last batch), timestamp int64,
             coordinatorEpoch int32 (-1: none yet), currentTxnFirstOffset int64 (-1: no open
             transaction)

The file name's offset is the log end offset the state covers; on load the state is read from
the newest snapshot at or below the log end offset and the batches after it are replayed from
the log (headers only, plus the one control record of each marker).  Like Kafka's, a snapshot
keeps only the last batch per producer; the loader then reads the log backwards from the
snapshot's offset (a bounded window, :meth:`prepend_earlier`) to restore each producer's last 5
batches, so a resend of any batch that was in flight when the broker stopped is still recognised
as a duplicate after a restart or a truncation (Kafka's state after a clean restart only
recognises the last one).  It restores open transactions, so the last stable offset is right
after a restart.

Thread safety: not thread-safe; the owning Log calls it under its lock.
"""

from __future__ import annotations

import logging
import os
import struct
from collections import deque
from typing import NamedTuple

from crc32c import crc32c

from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    InvalidTxnStateError,
    OutOfOrderSequenceError,
    TransactionCoordinatorFencedError,
)
from pyklog.broker.record.header import BatchHeader

log = logging.getLogger(__name__)

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1
MAX_BATCHES_PER_PRODUCER = 5
_HEAD = struct.Struct(">hI")
_COUNT = struct.Struct(">i")
_ENTRY = struct.Struct(">qhiqiqiq")
_INT32_MAX = 0x7FFFFFFF


class BatchMetadata(NamedTuple):
    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp: int


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker (Kafka's ``CompletedTxn``): its first data offset and
    the marker's offset (``last_offset``)."""

    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerEntry:
    """State of one producer id (Kafka's ``ProducerStateEntry``): ``epoch``, ``batches`` (the
    last 5, oldest first), ``coordinator_epoch`` of its last marker (-1: none),
    ``current_txn_first_offset`` (-1: no open transaction) and ``timestamp`` of its last batch
    or marker."""

    __slots__ = ("producer_id", "epoch", "batches", "coordinator_epoch", "current_txn_first_offset", "timestamp")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=MAX_BATCHES_PER_PRODUCER)
        self.coordinator_epoch = -1
        self.current_txn_first_offset = -1
        self.timestamp = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.timestamp

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def __repr__(self) -> str:
        return (
            f"ProducerEntry(pid={self.producer_id}, epoch={self.epoch}, "
            f"coordinator_epoch={self.coordinator_epoch}, "
            f"txn_first_offset={self.current_txn_first_offset}, batches={list(self.batches)})"
        )


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def snapshot_path(dir: str, offset: int) -> str:
    return os.path.join(dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")


class ProducerStateManager:
    """Producer entries of one partition plus their snapshot files.  Not thread-safe.

    ``ongoing`` maps the producer id of every open transaction to its first offset (Kafka's
    ``ongoingTxns``); :attr:`first_unstable_offset` is the smallest of them."""

    def __init__(self, dir: str):
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}
        self.ongoing: dict[int, int] = {}
        self.first_unstable_offset: int | None = None

    def _txn_started(self, pid: int, first_offset: int) -> None:
        self.ongoing[pid] = first_offset
        if self.first_unstable_offset is None or first_offset < self.first_unstable_offset:
            self.first_unstable_offset = first_offset

    def _txn_ended(self, pid: int) -> None:
        first = self.ongoing.pop(pid, None)
        if first is not None and first == self.first_unstable_offset:
            self.first_unstable_offset = min(self.ongoing.values()) if self.ongoing else None

    def _reindex(self) -> None:
        self.ongoing = {
            pid: e.current_txn_first_offset for pid, e in self.producers.items() if e.current_txn_first_offset >= 0
        }
        self.first_unstable_offset = min(self.ongoing.values()) if self.ongoing else None

    # ------------------------------------------------------------ validation
    def check(self, h: BatchHeader, from_client: bool = True) -> BatchMetadata | None:
        """Validate an incoming data batch against the state; return the original batch's
        metadata when ``h`` is a retried duplicate, else None.  ``from_client=False`` (the
        broker's coordinators) skips the sequence rules.  Raises InvalidProducerEpochError,
        OutOfOrderSequenceError, InvalidRecordError, InvalidTxnStateError.  Does not change
        the state.  (Control batches go through :meth:`check_marker`.)"""
        pid = h.producer_id
        if pid < 0:
            return None
        entry = self.producers.get(pid)
        if h.is_control:
            if entry is not None and h.producer_epoch < entry.epoch:
                raise InvalidProducerEpochError(
                    f"producer {pid}: control batch epoch {h.producer_epoch} is older than the "
                    f"current epoch {entry.epoch}"
                )
            return None
        if from_client and h.base_sequence < 0:
            raise InvalidRecordError(
                f"producer {pid}: a batch with a producer id needs a base sequence >= 0, read {h.base_sequence}"
            )
        if entry is None:
            return None
        if h.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid}: epoch {h.producer_epoch} is older than the current epoch {entry.epoch}"
            )
        if entry.current_txn_first_offset >= 0 and not h.is_transactional:
            # Kafka's ProducerAppendInfo.appendDataBatch
            raise InvalidTxnStateError(
                f"producer {pid}: expected a transactional write, the producer's transaction "
                f"opened at offset {entry.current_txn_first_offset} is not ended yet"
            )
        if not from_client:
            return None
        if h.producer_epoch == entry.epoch:
            dup = entry.find_duplicate(h.base_sequence, h.last_sequence)
            if dup is not None:
                return dup
            if entry.batches and not _in_sequence(entry.last_seq, h.base_sequence):
                raise OutOfOrderSequenceError(
                    f"producer {pid} epoch {h.producer_epoch}: expected sequence "
                    f"{(entry.last_seq + 1) & _INT32_MAX}, read {h.base_sequence} "
                    f"(batch of sequences {h.base_sequence}..{h.last_sequence})"
                )
        elif h.base_sequence != 0:
            raise OutOfOrderSequenceError(
                f"producer {pid}: a new epoch {h.producer_epoch} must start at sequence 0, read {h.base_sequence}"
            )
        return None

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Validate a transaction marker (Kafka's ``appendEndTxnMarker`` checks): raises
        InvalidProducerEpochError when ``producer_epoch`` is older than the producer's, and
        TransactionCoordinatorFencedError when ``coordinator_epoch`` is older than the one
        stored for the producer.  Does not change the state."""
        entry = self.producers.get(producer_id)
        if entry is None:
            return
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {producer_id}: transaction marker epoch {producer_epoch} is older than "
                f"the current epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFencedError(
                f"producer {producer_id}: transaction marker from coordinator epoch "
                f"{coordinator_epoch}, older than the coordinator epoch {entry.coordinator_epoch} "
                f"already seen"
            )

    def update(self, h: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended data batch (or one replayed from the log).  Markers: :meth:`end_txn`."""
        pid = h.producer_id
        if pid < 0:
            return
        entry = self.producers.get(pid)
        if entry is None:
            entry = self.producers[pid] = ProducerEntry(pid, h.producer_epoch)
        elif h.producer_epoch != entry.epoch:
            if h.producer_epoch < entry.epoch:
                return  # a replayed stale batch cannot roll the epoch back
            entry.epoch = h.producer_epoch
            entry.batches.clear()
        entry.timestamp = timestamp
        if h.is_control:
            return
        if h.is_transactional and entry.current_txn_first_offset < 0:
            entry.current_txn_first_offset = first_offset
            self._txn_started(pid, first_offset)
        if h.base_sequence < 0:
            return
        entry.batches.append(BatchMetadata(h.base_sequence, h.last_sequence, first_offset, last_offset, timestamp))

    def end_txn(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        marker_offset: int,
        timestamp: int,
    ) -> CompletedTxn | None:
        """Record a marker written at ``marker_offset``: the producer's open transaction ends.
        Returns the :class:`CompletedTxn` when a transaction with data was open, else None (a
        marker without data changes neither the last stable offset nor the index)."""
        entry = self.producers.get(producer_id)
        if entry is None:
            entry = self.producers[producer_id] = ProducerEntry(producer_id, producer_epoch)
        elif producer_epoch > entry.epoch:
            entry.epoch = producer_epoch
            entry.batches.clear()
        completed = None
        if entry.current_txn_first_offset >= 0:
            completed = CompletedTxn(producer_id, entry.current_txn_first_offset, marker_offset, not commit)
            entry.current_txn_first_offset = -1
            self._txn_ended(producer_id)
        entry.coordinator_epoch = max(entry.coordinator_epoch, coordinator_epoch)
        entry.timestamp = timestamp
        return completed

    def last_stable_offset_after(self, txn: CompletedTxn) -> int:
        """The last stable offset once ``txn`` is complete (Kafka's
        ``ProducerStateManager.lastStableOffset(completedTxn)``): the first offset of the oldest
        other open transaction, else the offset after the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != txn.producer_id]
        return min(others) if others else txn.last_offset + 1

    def replay(self, h: BatchHeader, control: tuple[int, int] | None = None) -> CompletedTxn | None:
        """Update from a batch read back from the log (its offsets are final).  ``control`` is
        ``(control_type, coordinator_epoch)`` of a marker batch (see :func:`read_marker`)."""
        if h.is_control:
            if control is None or control[0] not in (0, 1):
                return None  # an unknown control type (none exists yet) changes nothing
            return self.end_txn(
                h.producer_id, h.producer_epoch, control[1], control[0] == 1, h.base_offset, h.max_timestamp
            )
        self.update(h, h.base_offset, h.last_offset, h.max_timestamp)
        return None

    def short_of_batches(self) -> set[int]:
        """Producer ids whose entry holds at least one but fewer than the last 5 batches (a
        snapshot keeps only each producer's last batch) and whose earliest one does not start
        its epoch at sequence 0 (then nothing came before it): the ones :meth:`prepend_earlier`
        can complete from the log before the snapshot's offset."""
        return {
            pid
            for pid, e in self.producers.items()
            if 0 < len(e.batches) < MAX_BATCHES_PER_PRODUCER and e.batches[0].first_seq != 0
        }

    def prepend_earlier(self, h: BatchHeader, wanted: set[int]) -> None:
        """Offer the batch ``h`` read from the log *before* the entries' earliest batches, newest
        first: a data batch of a producer in ``wanted`` at the same epoch whose sequences end
        right before the entry's earliest batch is put in front of it.  A batch that does not
        chain (another epoch, a sequence gap) ends the search for that producer, as does a full
        entry or a batch at sequence 0 (the epoch's first): its id leaves ``wanted``.  Markers and other producers' batches are skipped."""
        pid = h.producer_id
        if pid not in wanted or h.is_control:
            return
        entry = self.producers[pid]
        oldest = entry.batches[0]
        if h.base_offset >= oldest.first_offset:
            return  # the entry's own batch (or a later one): not earlier
        if h.producer_epoch == entry.epoch and h.base_sequence >= 0 and _in_sequence(h.last_sequence, oldest.first_seq):
            entry.batches.appendleft(
                BatchMetadata(h.base_sequence, h.last_sequence, h.base_offset, h.last_offset, h.max_timestamp)
            )
            if len(entry.batches) < MAX_BATCHES_PER_PRODUCER and h.base_sequence != 0:
                return
        wanted.discard(pid)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def clear(self) -> None:
        self.producers.clear()
        self._reindex()

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for longer than ``expiration_ms``, except those with an open
        transaction (Kafka's ``isProducerExpired``); return how many."""
        dead = [
            pid
            for pid, e in self.producers.items()
            if e.timestamp >= 0 and e.current_txn_first_offset < 0 and now_ms - e.timestamp > expiration_ms
        ]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    # ------------------------------------------------------------ snapshots
    def snapshot_offsets(self) -> list[int]:
        out: list[int] = []
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return out
        for name in names:
            if name.endswith(SNAPSHOT_SUFFIX):
                stem = name[: -len(SNAPSHOT_SUFFIX)]
                if len(stem) == 20 and stem.isdigit():
                    out.append(int(stem))
        return sorted(out)

    def encode(self) -> bytes:
        body = bytearray(_COUNT.pack(len(self.producers)))
        for pid in sorted(self.producers):
            e = self.producers[pid]
            if e.batches:
                b = e.batches[-1]
                body += _ENTRY.pack(
                    pid,
                    e.epoch,
                    b.last_seq,
                    b.last_offset,
                    b.last_offset - b.first_offset,
                    e.timestamp,
                    e.coordinator_epoch,
                    e.current_txn_first_offset,
                )
            else:
                body += _ENTRY.pack(
                    pid, e.epoch, -1, -1, 0, e.timestamp, e.coordinator_epoch, e.current_txn_first_offset
                )
        return _HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    @staticmethod
    def decode(raw: bytes, path: str = "snapshot") -> dict[int, ProducerEntry]:
        """The producer entries of a snapshot file's bytes, by producer id.  Pure."""
        if len(raw) < _HEAD.size + _COUNT.size:
            raise CorruptRecordError(f"{path}: expected at least 10 bytes, read {len(raw)}")
        version, crc = _HEAD.unpack_from(raw, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptRecordError(f"{path}: expected snapshot version 1, read {version}")
        body = memoryview(raw)[_HEAD.size :]
        if crc32c(body) != crc:
            raise CorruptRecordError(f"{path}: CRC-32C mismatch")
        (count,) = _COUNT.unpack_from(body, 0)
        if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
            raise CorruptRecordError(
                f"{path}: {count} entries need {_COUNT.size + count * _ENTRY.size} bytes, read {len(body)}"
            )
        out: dict[int, ProducerEntry] = {}
        for pid, epoch, last_seq, last_off, delta, ts, ce, txn in _ENTRY.iter_unpack(body[_COUNT.size :]):
            e = ProducerEntry(pid, epoch)
            e.timestamp = ts
            e.coordinator_epoch = ce
            e.current_txn_first_offset = txn if txn >= 0 else -1
            if last_seq >= 0:
                first_seq = (last_seq - delta) & _INT32_MAX
                e.batches.append(BatchMetadata(first_seq, last_seq, last_off - delta, last_off, ts))
            out[pid] = e
        return out

    def take_snapshot(self, offset: int, *, sync: bool = True) -> str:
        """Write ``<offset>.snapshot`` atomically (tmp + fsync + rename) and return its path
        (``sync`` False: no fsync; the caller makes the file system durable afterwards)."""
        path = snapshot_path(self.dir, offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.encode())
            f.flush()
            if sync:
                os.fsync(f.fileno())
        os.replace(tmp, path)
        return path

    def load_latest(self, max_offset: int) -> int | None:
        """Load the newest valid snapshot at or below ``max_offset``; return its offset (the
        log offset from which batches must be replayed), or None when there is none."""
        for off in reversed(self.snapshot_offsets()):
            if off > max_offset:
                continue
            path = snapshot_path(self.dir, off)
            try:
                with open(path, "rb") as f:
                    self.producers = self.decode(f.read(), path)
                self._reindex()
                return off
            except (OSError, CorruptRecordError) as e:
                log.warning("ignoring unreadable producer snapshot %s: %s", path, e)
        self.producers = {}
        self._reindex()
        return None

    def delete_snapshots_above(self, offset: int) -> None:
        for off in self.snapshot_offsets():
            if off > offset:
                _unlink(snapshot_path(self.dir, off))

    def retain_latest(self, keep: int = 2) -> None:
        offs = self.snapshot_offsets()
        for off in offs[:-keep] if keep else offs:
            _unlink(snapshot_path(self.dir, off))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def read_marker(raw: bytes) -> tuple[int, int]:
    """``(control_type, coordinator_epoch)`` of the control batch ``raw`` (its whole bytes):
    Kafka's ``EndTransactionMarker`` key (version, type: 0 ABORT, 1 COMMIT) and value (version,
    coordinatorEpoch; -1 when absent).  Raises CorruptRecordError."""
    from pyklog.broker.record.batch import decode_batch, decode_control_record  # pure codec

    batch = decode_batch(raw, 0, validate_crc=False)
    if not batch.records:
        raise CorruptRecordError(f"control batch at offset {batch.header.base_offset} has no record")
    ctype, epoch = decode_control_record(batch.records[0])
    return ctype, -1 if epoch is None else epoch


def read_snapshot(raw: bytes, path: str = "snapshot") -> list[ProducerEntry]:
    """The producer entries of a ``.snapshot`` file's bytes, by producer id (Kafka's
    ``ProducerStateManager.readSnapshot``, for offline tools such as ``pyklog-dump-log``).
    CorruptRecordError for a bad version, CRC or length.  Pure; thread-safe."""
    entries = ProducerStateManager.decode(raw, path)
    return [entries[pid] for pid in sorted(entries)]
