"""Pre-built records sections: a v2 batch whose records were encoded in bulk, header added later.

A bulk encoder (the Spark sink's, :mod:`pyklog.connector.spark.arrow_encode`) writes the records
of a batch (the bytes after the 61-byte header, see ``batch.py`` for the record layout) without a
Python object per record and hands them over as a :class:`RecordsSection`: the records bytes plus
what the header needs from them (record count, lastOffsetDelta, firstTimestamp, maxTimestamp).
The producer's sender numbers the batch (producer id, epoch, base sequence, transactional bit)
only when it sends it, so the header, the CRC-32C (over attributes .. end, which covers the
producer fields) and any compression are done then, by :meth:`RecordsSection.to_batch`, exactly
as :func:`batch.build_batch` lays them out.

Pure code, immutable; thread-safe.
"""

from __future__ import annotations

from crc32c import crc32c as _crc32c

from pyklog.broker.record import compression as _compression
from pyklog.broker.record.batch import BATCH_HEAD, BATCH_LENGTH_BASE, BATCH_TAIL, MAGIC
from pyklog.broker.record.header import NO_COMPRESSION, TRANSACTIONAL_MASK, BytesLike

__all__ = ["RecordsSection"]


class RecordsSection:
    """The uncompressed records of one v2 batch with offset deltas ``0..count-1`` (CreateTime).

    ``records``: bytes-like (bytes, memoryview, an Arrow buffer slice); ``len()`` is the record
    count, so a producer batch holding a section counts its records as one holding tuples does.
    """

    __slots__ = ("records", "count", "first_timestamp", "max_timestamp")

    def __init__(self, records: BytesLike, count: int, first_timestamp: int, max_timestamp: int | None = None):
        if count <= 0:
            raise ValueError(f"a records section needs at least one record, got count={count}")
        self.records = records
        self.count = count
        self.first_timestamp = first_timestamp
        self.max_timestamp = first_timestamp if max_timestamp is None else max_timestamp

    def __len__(self) -> int:
        return self.count

    @property
    def nbytes(self) -> int:
        """Size of the batch without compression (header + records)."""
        return BATCH_HEAD.size + BATCH_TAIL.size + len(memoryview(self.records))

    def to_batch(
        self,
        *,
        compression: int = NO_COMPRESSION,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        base_offset: int = 0,
        partition_leader_epoch: int = -1,
    ) -> bytes:
        """The whole v2 batch (header, CRC-32C, records compressed with ``compression``)."""
        body = self.records
        attributes = compression
        if is_transactional:
            attributes |= TRANSACTIONAL_MASK
        if compression != NO_COMPRESSION:
            body = _compression.compress(compression, bytes(body))
        tail = BATCH_TAIL.pack(
            attributes,
            self.count - 1,
            self.first_timestamp,
            self.max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            self.count,
        )
        crc = _crc32c(body, _crc32c(tail))
        head = BATCH_HEAD.pack(
            base_offset, BATCH_LENGTH_BASE + len(memoryview(body)), partition_leader_epoch, MAGIC, crc
        )
        return b"".join((head, tail, body))
