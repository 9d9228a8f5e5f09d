"""Record batch v2 (magic 2): building and decoding batches, records, headers, control batches.

Batch layout (big-endian; the 61-byte header is ``header.HEADER``, offsets from struct.calcsize)::

    offset  field                 type    notes
     0      baseOffset            int64   offset of the first record; the broker assigns it
     8      batchLength           int32   bytes from partitionLeaderEpoch to the end of the batch
    12      partitionLeaderEpoch  int32   set by the broker, NOT covered by the CRC
    16      magic                 int8    2
    17      crc                   uint32  CRC-32C (Castagnoli) of bytes 21 .. end of batch
    21      attributes            int16   bits 0-2 compression (0 none, 1 gzip, 2 snappy,
                                          3 lz4, 4 zstd), bit 3 timestampType (0 CreateTime,
                                          1 LogAppendTime), bit 4 isTransactional,
                                          bit 5 isControlBatch, bits 6-15 unused (0)
    23      lastOffsetDelta       int32   offset of the last record minus baseOffset
    27      firstTimestamp        int64   timestamp of the first record
    35      maxTimestamp          int64   largest record timestamp (LogAppendTime: the append time)
    43      producerId            int64   -1 unless idempotent / transactional
    51      producerEpoch         int16   -1 unless idempotent / transactional
    53      baseSequence          int32   -1 unless idempotent / transactional
    57      recordsCount          int32   number of records
    61      records                       the records, back to back; when compressed, the whole
                                          records section is one compressed payload

Record layout (varints are zigzag, see ``varint.py``)::

    length          varint  bytes of the record after this field
    attributes      int8    unused (0)
    timestampDelta  varlong record timestamp minus firstTimestamp
    offsetDelta     varint  record offset minus baseOffset
    keyLength       varint  -1 for a null key
    key             bytes
    valueLength     varint  -1 for a null value
    value           bytes
    headersCount    varint
    headers         [headerKeyLength varint, headerKey UTF-8, headerValueLength varint
                     (-1 = null), headerValue bytes]

When the batch's timestampType is LogAppendTime every record's timestamp *is* maxTimestamp
(the deltas are ignored), as Kafka reads it.

Control batches (isControlBatch and isTransactional set) hold one record whose key is
``version int16 (0), type int16 (0 abort, 1 commit)`` and whose value is Kafka's
EndTransactionMarker ``version int16 (0), coordinatorEpoch int32``.

Pure code: bytes in, objects out; thread-safe.  Malformed input raises
:class:`broker.errors.CorruptRecordError` saying what was expected and what was read.
"""

from __future__ import annotations

import itertools
import struct
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from crc32c import crc32c as _crc32c

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record import compression as _compression
from pyklog.broker.record.header import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    CREATE_TIME,
    HEADER_SIZE,
    LOG_APPEND_TIME,
    LOG_OVERHEAD,
    NO_COMPRESSION,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    ZSTD,
    BatchHeader,
    BytesLike,
    parse_header,
)
from pyklog.broker.record.header import validate_crc as _check_crc  # decode_batch's flag is named validate_crc
from pyklog.broker.record.varint import SMALL_VARINTS, decode_varint, encode_varint_uncached

__all__ = [
    "Record",
    "RecordBatch",
    "build_batch",
    "build_batch_from_records",
    "build_control_batch",
    "decode_batch",
    "decode_control_record",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "MAGIC",
]

MAGIC = 2
CONTROL_ABORT = 0
CONTROL_COMMIT = 1

# Header split at the CRC: the CRC covers BATCH_TAIL and the records, BATCH_HEAD holds what precedes it.
BATCH_HEAD = struct.Struct(">qiibI")  # baseOffset, batchLength, partitionLeaderEpoch, magic, crc
BATCH_TAIL = struct.Struct(">hiqqqhii")  # attributes .. recordsCount
assert BATCH_HEAD.size == ATTRIBUTES_OFFSET and BATCH_HEAD.size + BATCH_TAIL.size == HEADER_SIZE
# batchLength counts everything after the batchLength field itself
BATCH_LENGTH_BASE = HEADER_SIZE - LOG_OVERHEAD  # 49

CONTROL_KEY = struct.Struct(">hh")  # version, type
CONTROL_VALUE = struct.Struct(">hi")  # EndTransactionMarker: version, coordinatorEpoch
CONTROL_KEY_VERSION = 0
END_TXN_MARKER_VERSION = 0


@dataclass(slots=True)
class Record:
    """One record with absolute ``offset`` and ``timestamp`` (ms)."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: tuple = ()


class RecordBatch:
    """A decoded batch: its :class:`BatchHeader` and its records (absolute offsets/timestamps).

    Also produced by ``reader.iter_batches`` for legacy v0/v1 entries, whose header then says
    ``magic`` 0 or 1 (``size`` is the entry's bytes, producer fields are -1).  Immutable by
    convention; safe to share between threads.
    """

    __slots__ = ("header", "records")

    def __init__(self, header: BatchHeader, records: list[Record]):
        self.header = header
        self.records = records

    # mirrors of the header
    base_offset = property(lambda self: self.header.base_offset)
    batch_length = property(lambda self: self.header.batch_length)
    partition_leader_epoch = property(lambda self: self.header.partition_leader_epoch)
    magic = property(lambda self: self.header.magic)
    crc = property(lambda self: self.header.crc)
    attributes = property(lambda self: self.header.attributes)
    last_offset_delta = property(lambda self: self.header.last_offset_delta)
    first_timestamp = property(lambda self: self.header.first_timestamp)
    max_timestamp = property(lambda self: self.header.max_timestamp)
    producer_id = property(lambda self: self.header.producer_id)
    producer_epoch = property(lambda self: self.header.producer_epoch)
    base_sequence = property(lambda self: self.header.base_sequence)
    records_count = property(lambda self: self.header.records_count)
    size = property(lambda self: self.header.size)
    last_offset = property(lambda self: self.header.last_offset)
    next_offset = property(lambda self: self.header.next_offset)
    compression = property(lambda self: self.header.compression)
    timestamp_type = property(lambda self: self.header.timestamp_type)
    is_transactional = property(lambda self: self.header.is_transactional)
    is_control = property(lambda self: self.header.is_control)
    last_sequence = property(lambda self: self.header.last_sequence)

    @property
    def control_type(self) -> int | None:
        """0 (abort) or 1 (commit) for a control batch, None for a data batch."""
        if not self.header.is_control or not self.records:
            return None
        return decode_control_record(self.records[0])[0]

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)

    def __repr__(self) -> str:
        h = self.header
        return (
            f"RecordBatch(base_offset={h.base_offset}, last_offset={h.last_offset}, "
            f"magic={h.magic}, records={len(self.records)}, "
            f"compression={_compression.codec_name(h.compression)}, "
            f"control={h.is_control}, transactional={h.is_transactional})"
        )


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------
_vget = SMALL_VARINTS.get
_NULL = SMALL_VARINTS[-1]
_ZERO = SMALL_VARINTS[0]
_ATTR0 = b"\x00"


def _v(n: int) -> bytes:
    b = _vget(n)
    return encode_varint_uncached(n) if b is None else b


def _encode_headers(headers: Sequence[tuple[Any, Any]]) -> list[Any]:
    parts = [_v(len(headers))]
    for hk, hv in headers:
        if type(hk) is str:
            hk = hk.encode("utf-8")
        elif hk is None:
            raise ValueError("record header keys must be strings, got None")
        parts.append(_v(len(hk)))
        parts.append(hk)
        if hv is None:
            parts.append(_NULL)
        else:
            parts.append(_v(len(hv)))
            parts.append(hv)
    return parts


def _encode_records(
    records: Sequence[Any], first_ts: int, offset_deltas: Sequence[int] | None = None
) -> tuple[bytes, int, int]:
    """Encode ``(key, value, timestamp, headers)`` tuples; returns (bytes, max_ts, last_delta).

    ``offset_deltas`` (a sequence aligned with ``records``) defaults to 0..n-1.
    """
    parts: list[Any] = []  # bytes-like, unless the caller passed something else (see the TypeError below)
    extend = parts.extend
    vget = _vget
    slow = encode_varint_uncached
    max_ts = first_ts
    i = -1
    for key, value, ts, headers in records:
        i += 1
        if ts > max_ts:
            max_ts = ts
        tsd = ts - first_ts
        od = i if offset_deltas is None else offset_deltas[i]
        tv = vget(tsd) or slow(tsd)
        ov = vget(od) or slow(od)
        if key is None:
            kv = _NULL
            key = b""
        else:
            kl = len(key)
            kv = vget(kl) or slow(kl)
        if value is None:
            vv = _NULL
            value = b""
        else:
            vl = len(value)
            vv = vget(vl) or slow(vl)
        if headers:
            hparts = _encode_headers(headers)
            hsize = 0
            for p in hparts:
                hsize += len(p)
            size = 1 + len(tv) + len(ov) + len(kv) + len(key) + len(vv) + len(value) + hsize
            extend((vget(size) or slow(size), _ATTR0, tv, ov, kv, key, vv, value))
            extend(hparts)
        else:
            size = 2 + len(tv) + len(ov) + len(kv) + len(key) + len(vv) + len(value)
            extend((vget(size) or slow(size), _ATTR0, tv, ov, kv, key, vv, value, _ZERO))
    try:
        return b"".join(parts), max_ts, i
    except TypeError:
        raise TypeError(
            "record keys, values and header values must be bytes-like or None "
            f"(header keys str); got {[type(p).__name__ for p in parts if not isinstance(p, (bytes, bytearray, memoryview))][:3]}"
        ) from None


def _assemble(
    body: bytes,
    count: int,
    *,
    base_offset: int,
    last_offset_delta: int,
    first_timestamp: int,
    max_timestamp: int,
    compression: int,
    timestamp_type: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    is_transactional: bool,
    is_control: bool,
    partition_leader_epoch: int,
) -> bytes:
    attributes = compression
    if timestamp_type == LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    elif timestamp_type != CREATE_TIME:
        raise ValueError(f"timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime), got {timestamp_type}")
    if is_transactional:
        attributes |= TRANSACTIONAL_MASK
    if is_control:
        attributes |= CONTROL_MASK
    if compression != NO_COMPRESSION and body:
        body = _compression.compress(compression, body)
    tail = BATCH_TAIL.pack(
        attributes,
        last_offset_delta,
        first_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = _crc32c(body, _crc32c(tail))
    head = BATCH_HEAD.pack(base_offset, BATCH_LENGTH_BASE + len(body), partition_leader_epoch, MAGIC, crc)
    return b"".join((head, tail, body))


def _now_ms() -> int:
    return int(time.time() * 1000)


def build_batch(
    records: Iterable[Any],
    *,
    base_offset: int = 0,
    compression: int | str = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build one v2 batch from ``(key, value, timestamp_ms, headers)`` tuples.

    Offset deltas are 0..n-1.  ``timestamp_ms`` None means "now".  ``headers`` is a sequence of
    ``(str, bytes | None)`` (or empty / None).  ``compression`` is a codec id or name.
    """
    if not isinstance(records, (list, tuple)):
        records = list(records)
    codec = compression if type(compression) is int else _compression.codec_id(compression)
    if codec not in _compression.CODEC_NAMES:
        raise ValueError(f"expected a compression codec id 0-4, got {compression!r}")
    if not records:
        raise ValueError("a record batch needs at least one record (got none)")
    first_ts = records[0][2]
    if first_ts is None or any(r[2] is None for r in records):
        now = _now_ms()
        records = [(k, v, now if ts is None else ts, h) for k, v, ts, h in records]
        first_ts = records[0][2]
    body, max_ts, last_delta = _encode_records(records, first_ts)
    return _assemble(
        body,
        len(records),
        base_offset=base_offset,
        last_offset_delta=last_delta,
        first_timestamp=first_ts,
        max_timestamp=max_ts,
        compression=codec,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=False,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_batch_from_records(
    records: Sequence[Record],
    *,
    base_offset: int | None = None,
    last_offset_delta: int | None = None,
    compression: int | str = 0,
    timestamp_type: int = CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    is_control: bool = False,
    partition_leader_epoch: int = -1,
    first_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> bytes:
    """Build a v2 batch from :class:`Record` objects, keeping their absolute offsets.

    For the log cleaner and format conversion: offsets may have gaps; ``base_offset`` and
    ``last_offset_delta`` default to the first / last record's offsets but can be given to keep
    the original batch's range (Kafka keeps it on compaction, and may keep an *empty* batch to
    preserve a producer's last sequence: pass ``records=[]`` with both set).
    ``max_timestamp`` defaults to the largest record timestamp (give the append time for a
    LogAppendTime batch).
    """
    if not isinstance(records, (list, tuple)):
        records = list(records)
    codec = compression if type(compression) is int else _compression.codec_id(compression)
    if records:
        if base_offset is None:
            base_offset = records[0].offset
        if first_timestamp is None:
            first_timestamp = records[0].timestamp
        deltas = [r.offset - base_offset for r in records]
        if deltas[0] < 0:
            raise ValueError(f"record offset {records[0].offset} is below the batch base offset {base_offset}")
        for a, b in itertools.pairwise(deltas):
            if b <= a:
                raise ValueError(f"record offsets must increase, got delta {a} then {b}")
        body, max_ts, _ = _encode_records(
            [(r.key, r.value, r.timestamp, r.headers) for r in records], first_timestamp, deltas
        )
        if last_offset_delta is None:
            last_offset_delta = deltas[-1]
        elif last_offset_delta < deltas[-1]:
            raise ValueError(f"last_offset_delta {last_offset_delta} is below the last record's delta {deltas[-1]}")
    else:
        if base_offset is None or last_offset_delta is None:
            raise ValueError("an empty batch needs base_offset and last_offset_delta")
        if first_timestamp is None:
            first_timestamp = -1
        body, max_ts = b"", first_timestamp
    if max_timestamp is None:
        max_timestamp = max_ts
    return _assemble(
        body,
        len(records),
        base_offset=base_offset,
        last_offset_delta=last_offset_delta,
        first_timestamp=first_timestamp,
        max_timestamp=max_timestamp,
        compression=codec,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        is_transactional=is_transactional,
        is_control=is_control,
        partition_leader_epoch=partition_leader_epoch,
    )


def build_control_batch(
    control_type: int,
    producer_id: int,
    producer_epoch: int,
    *,
    base_offset: int = 0,
    timestamp_ms: int | None = None,
    coordinator_epoch: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """Build a transaction marker batch: ``control_type`` 0 = ABORT, 1 = COMMIT."""
    if control_type not in (CONTROL_ABORT, CONTROL_COMMIT):
        raise ValueError(f"control_type must be 0 (abort) or 1 (commit), got {control_type}")
    if producer_id < 0:
        raise ValueError(f"a control batch needs a producer id >= 0, got {producer_id}")
    ts = _now_ms() if timestamp_ms is None else timestamp_ms
    key = CONTROL_KEY.pack(CONTROL_KEY_VERSION, control_type)
    value = CONTROL_VALUE.pack(END_TXN_MARKER_VERSION, coordinator_epoch)
    body, _, _ = _encode_records(((key, value, ts, ()),), ts)
    return _assemble(
        body,
        1,
        base_offset=base_offset,
        last_offset_delta=0,
        first_timestamp=ts,
        max_timestamp=ts,
        compression=NO_COMPRESSION,
        timestamp_type=CREATE_TIME,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        is_transactional=True,
        is_control=True,
        partition_leader_epoch=partition_leader_epoch,
    )


def decode_control_record(record: Record) -> tuple[int, int | None]:
    """``(control_type, coordinator_epoch)`` of a control record (epoch None if no value)."""
    key = record.key
    if key is None or len(key) < CONTROL_KEY.size:
        raise CorruptRecordError(
            f"control record at offset {record.offset}: expected a {CONTROL_KEY.size}-byte key "
            f"(version, type), read {None if key is None else len(key)} bytes"
        )
    version, ctype = CONTROL_KEY.unpack_from(key)
    if version != CONTROL_KEY_VERSION:
        raise CorruptRecordError(f"control record at offset {record.offset}: expected key version 0, read {version}")
    epoch = None
    value = record.value
    if value is not None and len(value) >= CONTROL_VALUE.size:
        epoch = CONTROL_VALUE.unpack_from(value)[1]
    return ctype, epoch


# ---------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------
# zigzag value of every one-byte varint (bytes 0x00-0x7f), indexed by the byte
_ZZ1 = tuple((b >> 1) ^ -(b & 1) for b in range(128))


def _decode_headers(data: bytes, pos: int, count: int) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    if count < 0:
        raise CorruptRecordError(f"expected a header count >= 0, read {count}")
    out: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        kl, pos = decode_varint(data, pos)
        if kl < 0:
            raise CorruptRecordError(f"expected a header key length >= 0, read {kl}")
        try:
            hk = data[pos : pos + kl].decode("utf-8")
        except UnicodeDecodeError as e:
            raise CorruptRecordError(f"expected a UTF-8 header key, read invalid bytes ({e})") from None
        pos += kl
        vl, pos = decode_varint(data, pos)
        if vl < 0:
            hv = None
        else:
            hv = data[pos : pos + vl]
            pos += vl
        out.append((hk, hv))
    return tuple(out), pos


def _decode_records(
    data: bytes, pos: int, end: int, count: int, base_offset: int, first_ts: int, lat_ts: int | None, where: str
) -> list[Record]:
    """Decode ``count`` records from ``data[pos:end]`` (``data`` must be bytes).

    The hot loop of every consumer: each varint has its one- and two-byte forms inlined (a
    two-byte varint is (b0 & 0x7f) | (b1 << 7), then zigzag), longer ones call decode_varint.
    """
    records: list[Record] = []
    append = records.append
    R = Record
    Z = _ZZ1
    dv = decode_varint
    try:
        for _ in range(count):
            b = data[pos]
            if b < 128:
                length = Z[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 128:
                    u = (b & 127) | (c << 7)
                    length = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    length, pos = dv(data, pos)
            rec_end = pos + length
            if length < 6 or rec_end > end:
                raise CorruptRecordError(
                    f"{where}: record {len(records)} at position {pos}: expected a length of "
                    f"6 .. {end - pos} bytes, read {length}"
                )
            # attributes (unused) at pos, timestampDelta after it
            b = data[pos + 1]
            if b < 128:
                tsd = Z[b]
                pos += 2
            else:
                c = data[pos + 2]
                if c < 128:
                    u = (b & 127) | (c << 7)
                    tsd = (u >> 1) ^ -(u & 1)
                    pos += 3
                else:
                    tsd, pos = dv(data, pos + 1)
            b = data[pos]
            if b < 128:
                od = Z[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 128:
                    u = (b & 127) | (c << 7)
                    od = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    od, pos = dv(data, pos)
            b = data[pos]
            if b < 128:
                kl = Z[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 128:
                    u = (b & 127) | (c << 7)
                    kl = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    kl, pos = dv(data, pos)
            if kl >= 0:
                key = data[pos : pos + kl]
                pos += kl
            else:
                key = None
            b = data[pos]
            if b < 128:
                vl = Z[b]
                pos += 1
            else:
                c = data[pos + 1]
                if c < 128:
                    u = (b & 127) | (c << 7)
                    vl = (u >> 1) ^ -(u & 1)
                    pos += 2
                else:
                    vl, pos = dv(data, pos)
            if vl >= 0:
                value = data[pos : pos + vl]
                pos += vl
            else:
                value = None
            if data[pos] == 0:
                headers: tuple[tuple[str, bytes | None], ...] = ()
                pos += 1
            else:
                hc, pos = dv(data, pos)
                headers, pos = _decode_headers(data, pos, hc)
            if pos != rec_end:
                raise CorruptRecordError(
                    f"{where}: record {len(records)}: expected it to end at position {rec_end} "
                    f"(length {length}), its fields end at {pos}"
                )
            append(R(base_offset + od, first_ts + tsd if lat_ts is None else lat_ts, key, value, headers))
    except IndexError:
        raise CorruptRecordError(
            f"{where}: expected {count} records, the records section ({end} bytes) ends inside record {len(records)}"
        ) from None
    if pos != end:
        raise CorruptRecordError(
            f"{where}: expected the records section to end after {count} records at position "
            f"{end}, read {end - pos} trailing bytes"
        )
    return records


def decode_batch(buf: BytesLike, pos: int = 0, validate_crc: bool = True) -> RecordBatch:
    """Decode the v2 batch at ``pos`` of ``buf`` (bytes, bytearray or memoryview).

    The whole batch must be present (a reader that may see partial batches checks the size
    first, see ``reader.py``).  Raises CorruptRecordError on a bad magic, length, CRC, codec,
    record framing, or a record count that does not match the records.
    """
    avail = len(buf) - pos
    if avail < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch at position {pos}: expected a {HEADER_SIZE}-byte v2 header, read {avail} bytes"
        )
    h = parse_header(buf, pos)
    size = h.size
    if size > avail:
        raise CorruptRecordError(
            f"batch at offset {h.base_offset} (position {pos}): expected {size} bytes "
            f"(batchLength {h.batch_length}), read {avail}"
        )
    if validate_crc:
        _check_crc(buf, pos, h)
    return RecordBatch(h, decode_batch_records(buf, pos, h))


def decode_batch_records(buf: BytesLike, pos: int, h: BatchHeader) -> list[Record]:
    """The records of the v2 batch at ``pos`` whose header ``h`` the caller parsed (and whose CRC
    it checked, if it wanted to): :func:`decode_batch` without the header work."""
    count = h.records_count
    where = f"batch at offset {h.base_offset}"
    if count < 0:
        raise CorruptRecordError(f"{where}: expected a record count >= 0, read {count}")
    codec = h.attributes & COMPRESSION_MASK
    start = pos + HEADER_SIZE
    end = pos + h.size
    if codec == NO_COMPRESSION:
        if type(buf) is bytes:
            data = buf
        else:
            data = bytes(memoryview(buf)[start:end])
            start, end = 0, len(data)
    else:
        if codec > ZSTD:
            raise CorruptRecordError(f"{where}: expected compression codec 0-4 in attributes, read {codec}")
        data = _compression.decompress(codec, memoryview(buf)[start:end])
        start, end = 0, len(data)
    if count == 0:
        if end != start:
            raise CorruptRecordError(f"{where}: expected no record bytes for recordsCount 0, read {end - start}")
        return []
    if count > end - start:
        raise CorruptRecordError(f"{where}: recordsCount {count} cannot fit in {end - start} bytes of records")
    lat_ts = h.max_timestamp if h.attributes & TIMESTAMP_TYPE_MASK else None
    return _decode_records(data, start, end, count, h.base_offset, h.first_timestamp, lat_ts, where)
