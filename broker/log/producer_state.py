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
  sequence.

Snapshots: ``<20-digit offset>.snapshot`` in the partition directory, Kafka's producer snapshot
layout (version 1)::

    version                int16   1
    crc                    uint32  CRC-32C of everything after this field
    entry count            int32
    entries: producerId int64, epoch int16, lastSequence int32, lastOffset int64,
             offsetDelta int32 (lastOffset - firstOffset of the last batch), timestamp int64,
             coordinatorEpoch int32 (-1), currentTxnFirstOffset int64 (-1)

The file name's offset is the log end offset the state covers; on load the state is read from
the newest snapshot at or below the log end offset and the batches after it are replayed from
the log (headers only).  Like Kafka's, a snapshot keeps only the last batch per producer.

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
    OutOfOrderSequenceError,
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


class ProducerEntry:
    """State of one producer id: ``epoch`` and ``batches`` (the last 5, oldest first)."""

    __slots__ = ("producer_id", "epoch", "batches")

    def __init__(self, producer_id: int, epoch: int):
        self.producer_id = producer_id
        self.epoch = epoch
        self.batches: deque[BatchMetadata] = deque(maxlen=MAX_BATCHES_PER_PRODUCER)

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else -1

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    @property
    def last_timestamp(self) -> int:
        return self.batches[-1].timestamp if self.batches else -1

    def find_duplicate(self, first_seq: int, last_seq: int) -> BatchMetadata | None:
        for b in self.batches:
            if b.first_seq == first_seq and b.last_seq == last_seq:
                return b
        return None

    def __repr__(self) -> str:
        return f"ProducerEntry(pid={self.producer_id}, epoch={self.epoch}, batches={list(self.batches)})"


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == _INT32_MAX)


def snapshot_path(dir: str, offset: int) -> str:
    return os.path.join(dir, f"{offset:020d}{SNAPSHOT_SUFFIX}")


class ProducerStateManager:
    """Producer entries of one partition plus their snapshot files.  Not thread-safe."""

    def __init__(self, dir: str):
        self.dir = dir
        self.producers: dict[int, ProducerEntry] = {}

    # ------------------------------------------------------------ validation
    def check(self, h: BatchHeader) -> BatchMetadata | None:
        """Validate an incoming batch against the state; return the original batch's metadata
        when ``h`` is a retried duplicate, else None.  Raises InvalidProducerEpochError,
        OutOfOrderSequenceError, InvalidRecordError.  Does not change the state."""
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
        if h.base_sequence < 0:
            raise InvalidRecordError(
                f"producer {pid}: a batch with a producer id needs a base sequence >= 0, "
                f"read {h.base_sequence}"
            )
        if entry is None:
            return None
        if h.producer_epoch < entry.epoch:
            raise InvalidProducerEpochError(
                f"producer {pid}: epoch {h.producer_epoch} is older than the current epoch "
                f"{entry.epoch}"
            )
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
                f"producer {pid}: a new epoch {h.producer_epoch} must start at sequence 0, "
                f"read {h.base_sequence}"
            )
        return None

    def update(self, h: BatchHeader, first_offset: int, last_offset: int, timestamp: int) -> None:
        """Record an appended batch (or one replayed from the log)."""
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
        if h.is_control or h.base_sequence < 0:
            return
        entry.batches.append(
            BatchMetadata(h.base_sequence, h.last_sequence, first_offset, last_offset, timestamp)
        )

    def replay(self, h: BatchHeader) -> None:
        """Update from a batch read back from the log (its offsets are final)."""
        self.update(h, h.base_offset, h.last_offset, h.max_timestamp)

    def get(self, producer_id: int) -> ProducerEntry | None:
        return self.producers.get(producer_id)

    def clear(self) -> None:
        self.producers.clear()

    def expire(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for longer than ``expiration_ms``; return how many."""
        dead = [pid for pid, e in self.producers.items()
                if e.batches and now_ms - e.last_timestamp > expiration_ms]
        for pid in dead:
            del self.producers[pid]
        return len(dead)

    # ------------------------------------------------------------ snapshots
    def snapshot_offsets(self) -> list[int]:
        out = []
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
                body += _ENTRY.pack(pid, e.epoch, b.last_seq, b.last_offset,
                                    b.last_offset - b.first_offset, b.timestamp, -1, -1)
            else:
                body += _ENTRY.pack(pid, e.epoch, -1, -1, 0, -1, -1, -1)
        return _HEAD.pack(SNAPSHOT_VERSION, crc32c(body)) + bytes(body)

    def decode(self, raw: bytes, path: str = "snapshot") -> dict[int, ProducerEntry]:
        if len(raw) < _HEAD.size + _COUNT.size:
            raise CorruptRecordError(f"{path}: expected at least 10 bytes, read {len(raw)}")
        version, crc = _HEAD.unpack_from(raw, 0)
        if version != SNAPSHOT_VERSION:
            raise CorruptRecordError(f"{path}: expected snapshot version 1, read {version}")
        body = memoryview(raw)[_HEAD.size:]
        if crc32c(body) != crc:
            raise CorruptRecordError(f"{path}: CRC-32C mismatch")
        (count,) = _COUNT.unpack_from(body, 0)
        if count < 0 or len(body) != _COUNT.size + count * _ENTRY.size:
            raise CorruptRecordError(
                f"{path}: {count} entries need {_COUNT.size + count * _ENTRY.size} bytes, "
                f"read {len(body)}"
            )
        out: dict[int, ProducerEntry] = {}
        for pid, epoch, last_seq, last_off, delta, ts, _ce, _txn in _ENTRY.iter_unpack(body[_COUNT.size:]):
            e = ProducerEntry(pid, epoch)
            if last_seq >= 0:
                first_seq = (last_seq - delta) & _INT32_MAX
                e.batches.append(BatchMetadata(first_seq, last_seq, last_off - delta, last_off, ts))
            out[pid] = e
        return out

    def take_snapshot(self, offset: int) -> str:
        """Write ``<offset>.snapshot`` atomically (tmp + fsync + rename) and return its path."""
        path = snapshot_path(self.dir, offset)
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            f.write(self.encode())
            f.flush()
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
                return off
            except (OSError, CorruptRecordError) as e:
                log.warning("ignoring unreadable producer snapshot %s: %s", path, e)
        self.producers = {}
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
