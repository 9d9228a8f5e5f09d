"""LogValidator: the rules an append from a client must pass before the log writes it.

The broker's counterpart of Kafka's ``LogValidator`` (``validateMessagesAndAssignOffsets``),
for v2 record batches (older produce versions are converted to v2 before they reach the log):

per batch (header only, records not decoded)
    * at least one full 61-byte header with magic 2 (``parse_header``), and the declared size
      fits in the data (else CORRUPT_MESSAGE, ``CorruptRecordError``);
    * no larger than ``max.message.bytes`` (``MessageTooLargeError``); all batches
      together no larger than ``segment.bytes`` (``RecordListTooLargeError``);
    * CRC-32C over attributes .. end (``CorruptRecordError``);
    * ``recordsCount >= 1`` and ``lastOffsetDelta == recordsCount - 1`` (``InvalidRecordError``);
    * no control batches from clients (``InvalidRecordError``);
    * producer fields: an idempotent producer's append holds exactly one batch
      (``InvalidRecordError``); its sequence numbers are checked by the log under its lock
      against the producer state (``ProducerStateManager.check``).

per record (only where a rule needs it)
    * compacted topics (``cleanup.policy`` contains ``compact``) refuse records with a null
      key, as Kafka does (``LogValidator.validateKey``): the cleaner could never retain them.
      Only the records of such topics are looked at, and only as far as the key length varint
      of each record (a compressed batch is decompressed for it, as in Kafka).  A failing batch
      raises :class:`RecordValidationError` (INVALID_RECORD, 87) whose ``record_errors`` name
      each offending record's index in its batch (Produce v8+ ``RecordErrors``, KIP-467).

offset assignment and timestamps (:func:`assign_offsets`)
    * each batch's baseOffset and partitionLeaderEpoch are rewritten (neither is covered by the
      CRC, so the CRC stays valid); for ``message.timestamp.type=LogAppendTime`` topics the
      timestamp-type bit and maxTimestamp are set to the append time and the CRC recomputed.

Pure: bytes in, results out, no file I/O, no locks, thread-safe.  :func:`validate_batches`
runs on the request thread before the log's lock is taken; :func:`assign_offsets` runs under
the log's lock (it needs the log end offset) and only rewrites the caller's in-memory buffer.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    RecordListTooLargeError,
)
from pyklog.broker.record import compression as _compression
from pyklog.broker.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CRC_OFFSET,
    HEADER_SIZE,
    NO_COMPRESSION,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BytesLike,
    compute_crc,
    parse_header,
    validate_crc,
)
from pyklog.broker.record.varint import decode_varint

__all__ = [
    "ValidatedAppend",
    "RecordValidationError",
    "validate_batches",
    "validate_follower_batches",
    "assign_offsets",
    "null_key_records",
    "MAX_IOV_BATCHES",
]

_MAX_TIMESTAMP_OFFSET = struct.calcsize(">qiibIhiq")  # 35: baseOffset .. firstTimestamp
_I16 = struct.Struct(">h")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
# baseOffset, batchLength, partitionLeaderEpoch: the bytes in front of the magic byte that the
# broker rewrites (none is covered by the CRC)
_PREFIX = struct.Struct(">qii")
MAX_IOV_BATCHES = 256  # iovecs per pwritev stay well below IOV_MAX (1024)
_new_tuple = tuple.__new__
_NULL_KEY_MESSAGE = "Compacted topic cannot accept message without key in topic partition {tp}."


class RecordValidationError(InvalidRecordError):
    """A batch broke a per-record rule (Kafka's ``RecordValidationException``).

    ``record_errors`` is a list of ``(batch_index, message)``: the index of each offending
    record within its batch and why it was refused (Produce v8+ ``RecordErrors``)."""

    def __init__(self, message: str, record_errors: list[tuple[int, str]]):
        super().__init__(message)
        self.record_errors = record_errors


class ValidatedAppend(NamedTuple):
    """What :func:`validate_batches` learned: ``batches`` as ``(position, BatchHeader)``,
    the total ``records``, and ``producer`` (the header of the single batch of an idempotent
    producer, else None)."""

    batches: list[tuple[int, BatchHeader]]
    records: int
    producer: BatchHeader | None


def validate_batches(
    buf: BytesLike,
    tp: str,
    max_message_bytes: int,
    segment_bytes: int,
    from_client: bool = True,
    compacted: bool = False,
) -> ValidatedAppend:
    """Check the batches in ``buf`` (see the module docstring for the rules); ``tp`` is
    ``"<topic>-<partition>"`` for messages.  Nothing is decoded unless ``compacted``."""
    n = len(buf)
    if n == 0:
        raise CorruptRecordError(f"{tp}: expected at least one record batch, read 0 bytes")
    if n > segment_bytes:
        raise RecordListTooLargeError(f"{tp}: {n} bytes of batches exceed segment.bytes {segment_bytes}")
    batches = []
    pos = 0
    records = 0
    has_pid = False
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"{tp}: expected a {HEADER_SIZE}-byte batch header at position {pos}, read {n - pos} bytes"
            )
        h = parse_header(buf, pos)
        size = h.size
        if pos + size > n:
            raise CorruptRecordError(f"{tp}: batch at position {pos} declares {size} bytes, only {n - pos} remain")
        if size > max_message_bytes:
            raise MessageTooLargeError(f"{tp}: batch of {size} bytes exceeds max.message.bytes {max_message_bytes}")
        validate_crc(buf, pos, h)
        if h.records_count <= 0 or h.last_offset_delta != h.records_count - 1:
            raise InvalidRecordError(
                f"{tp}: batch at position {pos} has {h.records_count} records but "
                f"lastOffsetDelta {h.last_offset_delta} (expected count - 1)"
            )
        if h.is_control:
            if from_client:
                raise InvalidRecordError(
                    f"{tp}: clients may not write control batches (transaction markers are "
                    f"written by the broker, WriteTxnMarkers)"
                )
        elif compacted:
            missing = null_key_records(buf, pos, h)
            if missing:
                msg = _NULL_KEY_MESSAGE.format(tp=tp)
                errors = [(i, msg) for i in missing]
                shown = ", ".join(f"(batchIndex={i}, message='{m}')" for i, m in errors[:3])
                raise RecordValidationError(
                    f"One or more records have been rejected due to {len(errors)} record errors "
                    f"in total, and only showing the first three errors at most: [{shown}]",
                    errors,
                )
        if h.producer_id >= 0:
            has_pid = True
        batches.append((pos, h))
        records += h.records_count
        pos += size
    if has_pid and len(batches) > 1:
        raise InvalidRecordError(
            f"{tp}: an idempotent producer's append must hold exactly one batch, read {len(batches)}"
        )
    # tuple.__new__: the NamedTuple's generated __new__ costs a Python call on every append
    return _new_tuple(ValidatedAppend, (batches, records, batches[0][1] if has_pid else None))


def validate_follower_batches(
    buf: BytesLike, tp: str, segment_bytes: int, log_end_offset: int, allow_gaps: bool = True
) -> ValidatedAppend:
    """Check the batches a follower copies from its leader (Kafka's ``analyzeAndValidateRecords``
    for ``AppendOrigin.REPLICATION``): whole v2 batches (framing, magic 2, CRC-32C), offsets
    already assigned and increasing, the first batch starting at ``log_end_offset``.  No rule of a
    client append applies: ``max.message.bytes`` (the leader accepted the batch), null keys,
    ``recordsCount == lastOffsetDelta + 1`` (compaction keeps ``lastOffsetDelta`` and drops
    records), one batch per producer, control batches (the leader's markers are copied too).
    ``allow_gaps`` (Kafka's rule: only an offset below the log end offset is an error): a batch
    may start after the previous one's end and the first after ``log_end_offset``, as the
    leader's log has gaps after compaction or after recovery removed a damaged range; False
    (tests): they must be contiguous.  Raises CorruptRecordError (framing,
    CRC) and OffsetOutOfRangeError (offsets); ``producer`` is always None in the result.  Pure."""
    n = len(buf)
    if n == 0:
        raise CorruptRecordError(f"{tp}: expected at least one record batch, read 0 bytes")
    batches: list[tuple[int, BatchHeader]] = []
    pos = 0
    records = 0
    expected = log_end_offset
    while pos < n:
        if n - pos < HEADER_SIZE:
            raise CorruptRecordError(
                f"{tp}: expected a {HEADER_SIZE}-byte batch header at position {pos}, read {n - pos} bytes"
            )
        h = parse_header(buf, pos)
        size = h.size
        if pos + size > n:
            raise CorruptRecordError(f"{tp}: batch at position {pos} declares {size} bytes, only {n - pos} remain")
        if size > segment_bytes:
            raise CorruptRecordError(
                f"{tp}: batch at position {pos} of {size} bytes is larger than segment.bytes {segment_bytes}"
            )
        validate_crc(buf, pos, h)
        if h.last_offset_delta < 0 or h.records_count < 0 or h.records_count > h.last_offset_delta + 1:
            raise CorruptRecordError(
                f"{tp}: batch at position {pos} has {h.records_count} records and lastOffsetDelta "
                f"{h.last_offset_delta} (expected at most lastOffsetDelta + 1 records)"
            )
        if h.base_offset != expected and not (allow_gaps and h.base_offset > expected):
            if not batches:
                raise OffsetOutOfRangeError(
                    f"{tp}: a follower append must start at the log end offset {log_end_offset}, "
                    f"the first batch starts at {h.base_offset}"
                )
            raise OffsetOutOfRangeError(
                f"{tp}: follower batches out of order: batch at position {pos} starts at offset "
                f"{h.base_offset}, expected {expected}"
            )
        expected = h.base_offset + h.last_offset_delta + 1
        batches.append((pos, h))
        records += h.records_count
        pos += size
    return _new_tuple(ValidatedAppend, (batches, records, None))


def null_key_records(buf: BytesLike, pos: int, h: BatchHeader) -> list[int]:
    """Indexes (within the batch) of the records with a null key in the v2 batch at ``pos``.

    Reads each record's length, skips attributes, timestampDelta and offsetDelta, and reads the
    keyLength varint; nothing else is decoded.  A compressed batch is decompressed first.
    Raises CorruptRecordError when a record does not fit in the batch."""
    start = pos + HEADER_SIZE
    end = pos + h.size
    codec = h.attributes & COMPRESSION_MASK
    if codec == NO_COMPRESSION:
        data = buf
    else:
        try:
            data = _compression.decompress(codec, memoryview(buf)[start:end])
        except CorruptRecordError:
            raise
        except Exception as e:  # noqa: BLE001 - a codec library's own error
            raise CorruptRecordError(
                f"batch at position {pos}: could not decompress its records with codec {codec}: {e}"
            ) from e
        start, end = 0, len(data)
    out = []
    p = start
    for i in range(h.records_count):
        length, p = decode_varint(data, p)
        rec_end = p + length
        if length < 6 or rec_end > end:
            raise CorruptRecordError(
                f"batch at position {pos}: record {i}: expected a length of 6 .. {end - p} bytes, read {length}"
            )
        q = p + 1  # attributes (int8, unused)
        _, q = decode_varint(data, q)  # timestampDelta
        _, q = decode_varint(data, q)  # offsetDelta
        key_length, _ = decode_varint(data, q)
        if key_length < 0:
            out.append(i)
        p = rec_end
    if p != end:
        raise CorruptRecordError(
            f"batch at position {pos}: expected its {h.records_count} records to end at byte "
            f"{end - start} of the records, they end at {p - start}"
        )
    return out


def assign_offsets(
    buf: bytearray | memoryview,
    batches: list[tuple[int, BatchHeader]],
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None,
) -> tuple[bytearray | memoryview | list[bytes | bytearray | memoryview], list[tuple[int, int, int, int]], int, int]:
    """Give the validated ``batches`` of ``buf`` consecutive offsets from ``first_offset``.

    ``buf`` is a bytearray (rewritten in place) or a memoryview of the caller's bytes (left
    untouched: the rewritten 16-byte prefixes are returned as an iovec list with the rest of
    each batch, for one ``pwritev``; more than :data:`MAX_IOV_BATCHES` batches are copied into a
    bytearray instead).  With ``log_append_time_ms`` set, ``buf`` must be a bytearray.

    Returns ``(data, metas, next_offset, max_timestamp)``: ``data`` the bytearray or iovec
    list to write, ``metas`` ``(position, size, last_offset, max_timestamp)`` per batch for the
    segment's indexes."""
    if isinstance(buf, memoryview) and len(batches) > MAX_IOV_BATCHES:
        buf = bytearray(buf)  # many small batches: one copy beats a huge iovec list
    iov: list[bytes | bytearray | memoryview] | None = [] if isinstance(buf, memoryview) else None
    next_offset = first_offset
    metas = []
    max_ts_all = -1
    for bpos, h in batches:
        if iov is not None:
            iov.append(_PREFIX.pack(next_offset, h.batch_length, leader_epoch))
            iov.append(buf[bpos + _PREFIX.size : bpos + h.size])
        else:
            _PREFIX.pack_into(buf, bpos, next_offset, h.batch_length, leader_epoch)
        max_ts = h.max_timestamp
        if log_append_time_ms is not None:
            _I16.pack_into(buf, bpos + ATTRIBUTES_OFFSET, h.attributes | TIMESTAMP_TYPE_MASK)
            _I64.pack_into(buf, bpos + _MAX_TIMESTAMP_OFFSET, log_append_time_ms)
            _U32.pack_into(buf, bpos + CRC_OFFSET, compute_crc(buf, bpos, h.size))
            max_ts = log_append_time_ms
        last = next_offset + h.last_offset_delta
        metas.append((bpos, h.size, last, max_ts))
        if max_ts > max_ts_all:
            max_ts_all = max_ts
        next_offset = last + 1
    return (buf if iov is None else iov), metas, next_offset, max_ts_all
