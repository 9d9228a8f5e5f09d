"""Record batch v2 header (the 61 bytes in front of every batch's records).

Layout (big-endian), as in the design's "Record Batch" section::

    baseOffset            int64   first offset of the batch (the only field the broker rewrites)
    batchLength           int32   bytes after this field to the end of the batch
    partitionLeaderEpoch  int32   not covered by the CRC
    magic                 int8    2
    crc                   uint32  CRC-32C of attributes .. end of batch
    attributes            int16   bits 0-2 compression, 3 timestampType, 4 transactional, 5 control
    lastOffsetDelta       int32
    firstTimestamp        int64
    maxTimestamp          int64
    producerId            int64
    producerEpoch         int16
    baseSequence          int32
    recordsCount          int32   (the records array's length prefix)

The first 17 bytes (baseOffset, batchLength, partitionLeaderEpoch, magic) are common to every
message format, so a reader can tell a v2 batch from a legacy v0/v1 message by ``magic`` (byte 16).

Pure code: bytes in, objects out.
"""

from __future__ import annotations

import mmap
import struct
from typing import NamedTuple, TypeAlias

from crc32c import crc32c

from pyklog.broker.errors import CorruptRecordError

#: What the codecs read: bytes, a bytearray, a memoryview or a mapped segment file.
BytesLike: TypeAlias = bytes | bytearray | memoryview | mmap.mmap

HEADER = struct.Struct(">qiibIhiqqqhii")
HEADER_SIZE = HEADER.size  # 61
# offset of each field, derived from the struct rather than literals
BASE_OFFSET_OFFSET = 0
LENGTH_OFFSET = struct.calcsize(">q")  # 8
LOG_OVERHEAD = struct.calcsize(">qi")  # 12: baseOffset + batchLength
PARTITION_LEADER_EPOCH_OFFSET = LOG_OVERHEAD  # 12
MAGIC_OFFSET = struct.calcsize(">qii")  # 16
CRC_OFFSET = MAGIC_OFFSET + 1  # 17
ATTRIBUTES_OFFSET = CRC_OFFSET + 4  # 21: the CRC covers from here to the end of the batch
RECORDS_COUNT_OFFSET = HEADER_SIZE - 4  # 57

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20

NO_COMPRESSION, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CREATE_TIME, LOG_APPEND_TIME = 0, 1
NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
# the prefix a v2 batch shares with a legacy v0/v1 entry (reader.py tells them apart by it)
ENTRY_PREFIX = struct.Struct(">qiib")  # baseOffset, length, leaderEpoch, magic


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the whole batch takes in a log (12 + batchLength)."""
        return LOG_OVERHEAD + self.batch_length

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def last_sequence(self) -> int:
        if self.base_sequence < 0:
            return NO_SEQUENCE
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


def peek_size_and_magic(buf: BytesLike, pos: int = 0) -> tuple[int, int, int] | None:
    """Return ``(base_offset, total_size, magic)`` of the entry at ``pos``, or None when fewer
    than 17 bytes remain (a partial trailing entry).  Works for v0/v1 messages and v2 batches:
    for legacy messages ``base_offset`` is the message offset and the size is 12 + message_size.
    """
    if len(buf) - pos < MAGIC_OFFSET + 1:
        return None
    base_offset, length, _epoch, magic = ENTRY_PREFIX.unpack_from(buf, pos)
    return base_offset, LOG_OVERHEAD + length, magic


def parse_header(buf: BytesLike, pos: int = 0) -> BatchHeader:
    """Parse a v2 batch header at ``pos`` (no CRC check).  The caller ensures 61 bytes exist."""
    h = BatchHeader._make(HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise CorruptRecordError(f"expected magic 2 at position {pos}, read magic {h.magic}")
    if h.batch_length < HEADER_SIZE - LOG_OVERHEAD:
        raise CorruptRecordError(
            f"batch at position {pos}: batchLength {h.batch_length} is shorter than the "
            f"{HEADER_SIZE - LOG_OVERHEAD}-byte minimum of a v2 batch"
        )
    return h


def compute_crc(buf: BytesLike, pos: int, size: int) -> int:
    """CRC-32C of a v2 batch at ``pos`` spanning ``size`` bytes (attributes .. end)."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET : pos + size])


def validate_crc(buf: BytesLike, pos: int, header: BatchHeader) -> None:
    """Raise CorruptRecordError unless the stored CRC matches the batch bytes."""
    actual = compute_crc(buf, pos, header.size)
    if actual != header.crc:
        raise CorruptRecordError(
            f"batch at offset {header.base_offset} (position {pos}): CRC-32C mismatch, "
            f"stored {header.crc:#010x}, computed {actual:#010x}"
        )


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Rewrite baseOffset in place (the CRC does not cover it)."""
    _I64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Rewrite partitionLeaderEpoch in place (not covered by the CRC)."""
    _I32.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)
