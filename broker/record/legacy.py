"""Legacy message sets (magic 0 and 1) and their conversion to and from v2 record batches.

A message set is messages back to back, with no count in front.  Each entry::

    offset  field       type    notes
     0      offset      int64   the message's offset (a wrapper: its LAST inner message's offset)
     8      size        int32   bytes that follow this field
    12      crc         uint32  CRC32 (zlib/IEEE, not CRC-32C) of magic .. end of value
    16      magic       int8    0 or 1
    17      attributes  int8    bits 0-2 compression (0 none, 1 gzip, 2 snappy, 3 lz4),
                                bit 3 (magic 1 only) timestampType (0 CreateTime, 1 LogAppendTime),
                                bits 4-7 unused (0)
    18      timestamp   int64   magic 1 only (ms; -1 = none)
  18/26     keyLength   int32   -1 for a null key
            key         bytes
            valueLength int32   -1 for a null value
            value       bytes

Compression nests: a *wrapper* message has a compression codec in its attributes, a null key,
and as value the compressed bytes of an inner message set of uncompressed messages.

* magic 0 wrappers: inner messages carry absolute offsets; the wrapper's offset is the last one.
* magic 1 wrappers: inner offsets are relative (0, 1, ...); the absolute offset of an inner
  message is ``wrapper_offset - last_inner_relative + inner_relative`` (when that base would be
  negative, a wrapper never given an offset, the inner offsets are used as they are, as Kafka).  A LogAppendTime wrapper
  gives its own timestamp to every inner message; CreateTime wrappers carry the largest inner
  timestamp.
* lz4 in magic 0 uses Kafka 0.8's broken frame checksum (see ``compression.py``); zstd has no
  legacy form (Kafka refuses to down-convert it compressed, so it is written uncompressed).

The conversions to and from v2 (Produce v0-2 in, Fetch v0-3 out) live in
:mod:`pyklog.broker.record.convert`, which depends on this module and on the reader; this module
depends on neither, so the reader can hand legacy entries here without an import cycle.

Pure functions, thread-safe.  Bad input raises :class:`broker.errors.CorruptRecordError`.
"""

from __future__ import annotations

import struct
import time
import zlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record import compression as _compression
from pyklog.broker.record.batch import Record, RecordBatch
from pyklog.broker.record.header import (
    COMPRESSION_MASK,
    GZIP,
    LOG_OVERHEAD,
    LZ4,
    NO_COMPRESSION,
    SNAPPY,
    TIMESTAMP_TYPE_MASK,
    BatchHeader,
    BytesLike,
)

__all__ = [
    "LegacyMessage",
    "build_message_set",
    "decode_message_set",
    "legacy_entry_to_batch",
    "SetInfo",
    "scan_message_set",
    "encode_message",
    "wrap_message_set",
    "check_magic",
    "LEGACY_CODECS",
    "NO_TIMESTAMP",
    "NO_TIMESTAMP_TYPE",
]

NO_TIMESTAMP = -1
NO_TIMESTAMP_TYPE = -1  # Kafka's TimestampType.NO_TIMESTAMP_TYPE (magic 0 messages)

# offset, size, crc, magic, attributes: the part every legacy entry starts with
ENTRY_V0 = struct.Struct(">qiIbb")
ENTRY_V1 = struct.Struct(">qiIbbq")  # + timestamp
CRC_START = struct.calcsize(">qiI")  # 16: the CRC covers magic .. end
TIMESTAMP_OFFSET = ENTRY_V0.size  # 18: magic 1's timestamp follows the attributes
KEY_OFFSET_V0 = ENTRY_V0.size  # 18
KEY_OFFSET_V1 = ENTRY_V1.size  # 26
_PREFIX = struct.Struct(">qiI")  # offset, size, crc
_BODY_V0 = struct.Struct(">bbi")  # magic, attributes, keyLength
_BODY_V1 = struct.Struct(">bbqi")  # magic, attributes, timestamp, keyLength
_I32 = struct.Struct(">i")
_NULL_LEN = _I32.pack(-1)

LEGACY_CODECS = {0: (NO_COMPRESSION, GZIP, SNAPPY, LZ4), 1: (NO_COMPRESSION, GZIP, SNAPPY, LZ4)}


class LegacyMessage(NamedTuple):
    """One (inner, if it was wrapped) legacy message with its absolute offset."""

    offset: int
    magic: int
    attributes: int
    timestamp: int  # -1 for magic 0
    timestamp_type: int  # 0 CreateTime, 1 LogAppendTime, -1 for magic 0
    key: bytes | None
    value: bytes | None

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK


# ---------------------------------------------------------------------------------------------
# decoding
# ---------------------------------------------------------------------------------------------
_MIN_LENGTH = {0: 4 + 1 + 1 + 4 + 4, 1: 4 + 1 + 1 + 8 + 4 + 4}  # crc .. value length
_I64 = struct.Struct(">q")


class SetInfo:
    """What a walk over a message set learned besides the messages."""

    __slots__ = ("first_codec", "log_append_time", "crc", "attributes", "magic")

    def __init__(self) -> None:
        self.first_codec = NO_COMPRESSION
        self.log_append_time = False
        self.crc = 0
        self.attributes = 0
        self.magic = 0


def scan_message_set(
    buf: BytesLike,
    out: list[Any],
    *,
    strict: bool,
    validate_crc: bool,
    info: SetInfo | None = None,
    where: str = "message set",
    nested: bool = False,
) -> None:
    """Append ``(offset, magic, attributes, timestamp, timestamp_type, key, value)`` for every
    message of the set in ``buf`` to ``out``, wrappers flattened with absolute offsets.

    A partial trailing message stops the walk quietly, or raises when ``strict``.
    """
    if type(buf) is not bytes:
        buf = bytes(buf)
    mv = memoryview(buf)
    n = len(buf)
    pos = 0
    head = ENTRY_V0.unpack_from
    i32 = _I32.unpack_from
    i64 = _I64.unpack_from
    crc32 = zlib.crc32
    append = out.append
    first_codec = NO_COMPRESSION
    log_append_time = False
    crc = magic = attributes = 0
    while pos < n:
        if n - pos < ENTRY_V0.size:
            if strict:
                raise CorruptRecordError(
                    f"{where}: expected a complete message at position {pos}, read {n - pos} "
                    "trailing bytes of a partial one"
                )
            break
        offset, length, crc, magic, attributes = head(buf, pos)
        if magic == 1:
            timestamp = i64(buf, pos + TIMESTAMP_OFFSET)[0] if n - pos >= KEY_OFFSET_V1 else NO_TIMESTAMP
            p = pos + KEY_OFFSET_V1
        elif magic == 0:
            timestamp = NO_TIMESTAMP
            p = pos + KEY_OFFSET_V0
        elif magic == 2:
            raise CorruptRecordError(f"{where}: expected a magic 0/1 message at position {pos}, read a v2 batch")
        else:
            raise CorruptRecordError(
                f"entry at offset {offset} (position {pos}): expected magic 0, 1 or 2, read {magic}"
            )
        if length < _MIN_LENGTH[magic]:
            raise CorruptRecordError(
                f"entry at offset {offset} (position {pos}): expected a length of at least "
                f"{_MIN_LENGTH[magic]} for magic {magic}, read {length}"
            )
        end = pos + LOG_OVERHEAD + length
        if end > n:
            if strict:
                raise CorruptRecordError(
                    f"{where}: expected a complete message at position {pos} ({LOG_OVERHEAD + length} bytes), "
                    f"read {n - pos} trailing bytes of a partial one"
                )
            break
        if validate_crc:
            actual = crc32(mv[pos + CRC_START : end])
            if actual != crc:
                raise CorruptRecordError(
                    f"message at offset {offset} (position {pos}): CRC32 mismatch, stored "
                    f"{crc:#010x}, computed {actual:#010x}"
                )
        if attributes & 0xF0 or (magic == 0 and attributes & TIMESTAMP_TYPE_MASK):
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos}): expected unused attribute bits to "
                f"be 0 for magic {magic}, read attributes {attributes:#04x}"
            )
        (kl,) = i32(buf, p)
        p += 4
        if kl >= 0:
            key = buf[p : p + kl]
            p += kl
        elif kl == -1:
            key = None
        else:
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos}): expected key length >= -1, read {kl}"
            )
        if p + 4 > end:
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos}): key length {kl} runs past the "
                f"message end ({end - p + kl} bytes left for key and value)"
            )
        (vl,) = i32(buf, p)
        p += 4
        if vl >= 0:
            value = buf[p : p + vl]
            p += vl
        elif vl == -1:
            value = None
        else:
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos}): expected value length >= -1, read {vl}"
            )
        if p != end:
            if p > end:
                raise CorruptRecordError(
                    f"message at offset {offset} (position {pos}): value length {vl} runs past "
                    f"the message end ({end - p + vl} bytes left)"
                )
            raise CorruptRecordError(
                f"message at offset {offset} (position {pos}): expected it to end at {end} "
                f"(size {length}), its fields end at {p}"
            )
        codec = attributes & COMPRESSION_MASK
        ts_type = NO_TIMESTAMP_TYPE if magic == 0 else (1 if attributes & TIMESTAMP_TYPE_MASK else 0)
        if codec == NO_COMPRESSION:
            append((offset, magic, attributes, timestamp, ts_type, key, value))
        elif nested:
            raise CorruptRecordError(
                f"{where}: expected uncompressed inner messages, read an inner message at "
                f"offset {offset} compressed with codec {codec}"
            )
        else:
            _expand_wrapper(out, pos, offset, magic, codec, timestamp, ts_type, value, validate_crc)
            if first_codec == NO_COMPRESSION:
                first_codec = codec
        if ts_type == 1:
            log_append_time = True
        pos = end
    if info is not None:
        info.first_codec = first_codec
        info.log_append_time = log_append_time
        info.crc, info.magic, info.attributes = crc, magic, attributes


def _expand_wrapper(
    out: list,
    pos: int,
    offset: int,
    magic: int,
    codec: int,
    timestamp: int,
    ts_type: int,
    value: BytesLike | None,
    validate_crc: bool,
) -> None:
    if codec not in LEGACY_CODECS[magic]:
        raise CorruptRecordError(
            f"message at offset {offset} (position {pos}): expected compression 0-3 for magic {magic}, read {codec}"
        )
    if value is None:
        raise CorruptRecordError(
            f"wrapper message at offset {offset} (position {pos}): expected a compressed message "
            "set as value, read null"
        )
    inner: list = []
    scan_message_set(
        _compression.decompress(codec, value),
        inner,
        strict=True,
        validate_crc=validate_crc,
        where=f"wrapper message at offset {offset}",
        nested=True,
    )
    if not inner:
        raise CorruptRecordError(
            f"wrapper message at offset {offset} (position {pos}): expected at least one inner "
            "message, read an empty message set"
        )
    if magic == 0:
        out.extend(inner)
        return
    shift = offset - inner[-1][0]
    if shift < 0:
        # A wrapper whose offset was never assigned (offset 0 in a produce request, as
        # kafka-python writes it): the relative offsets are the only offsets there are.
        # Kafka's DeepRecordsIterator does the same (absoluteBaseOffset < 0).
        shift = 0
    if ts_type == 1:
        out.extend(
            (o + shift, m, a, timestamp if m else NO_TIMESTAMP, 1 if m else NO_TIMESTAMP_TYPE, k, v)
            for o, m, a, _ts, _tt, k, v in inner
        )
    elif shift:
        out.extend((o + shift, m, a, ts, tt, k, v) for o, m, a, ts, tt, k, v in inner)
    else:
        out.extend(inner)


def decode_message_set(buf: BytesLike, validate_crc: bool = True) -> list[LegacyMessage]:
    """Decode a magic 0/1 message set, wrappers flattened, offsets absolute.

    A partial trailing message (a fetch cut at max_bytes) is ignored; a v2 batch in the set is
    an error.
    """
    out: list = []
    scan_message_set(buf, out, strict=False, validate_crc=validate_crc)
    make = LegacyMessage._make
    return [make(m) for m in out]


def legacy_entry_to_batch(buf: BytesLike, pos: int, size: int, validate_crc: bool = True) -> RecordBatch:
    """The legacy entry at ``pos`` as a RecordBatch (header magic 0/1, see reader.iter_batches)."""
    msgs: list = []
    info = SetInfo()
    scan_message_set(memoryview(buf)[pos : pos + size], msgs, strict=True, validate_crc=validate_crc, info=info)
    first, last = msgs[0], msgs[-1]
    records = [Record(m[0], m[3], m[5], m[6], ()) for m in msgs]
    header = BatchHeader(
        first[0],
        size - LOG_OVERHEAD,
        -1,
        info.magic,
        info.crc,
        info.attributes & (COMPRESSION_MASK | TIMESTAMP_TYPE_MASK),
        last[0] - first[0],
        first[3],
        max(m[3] for m in msgs),
        -1,
        -1,
        -1,
        len(records),
    )
    return RecordBatch(header, records)


# ---------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------
def encode_message(
    parts: list[Any],
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: BytesLike | None,
    value: BytesLike | None,
) -> None:
    if magic == 1:
        head = _BODY_V1.pack(1, attributes, timestamp, -1 if key is None else len(key))
    else:
        head = _BODY_V0.pack(0, attributes, -1 if key is None else len(key))
    if value is None:
        body = b"".join((head, key or b"", _NULL_LEN))
    else:
        body = b"".join((head, key or b"", _I32.pack(len(value)), value))
    parts.append(_PREFIX.pack(offset, 4 + len(body), zlib.crc32(body)))
    parts.append(body)


def check_magic(magic: int) -> None:
    if magic not in (0, 1):
        raise ValueError(f"legacy message sets have magic 0 or 1, got {magic}")


def _legacy_codec(codec: int, magic: int) -> int:
    if codec not in LEGACY_CODECS[magic]:
        raise ValueError(f"compression {_compression.codec_name(codec)} has no magic-{magic} form (zstd needs magic 2)")
    return codec


def wrap_message_set(
    parts: list, inner: bytes, magic: int, codec: int, wrapper_offset: int, wrapper_ts: int, log_append_time: bool
) -> None:
    payload = _compression.compress(codec, inner, legacy_lz4=(codec == LZ4 and magic == 0))
    attributes = codec | (TIMESTAMP_TYPE_MASK if (magic == 1 and log_append_time) else 0)
    encode_message(parts, wrapper_offset, magic, attributes, wrapper_ts, None, payload)


def build_message_set(
    messages: Iterable[tuple[Any, Any, Any]],
    magic: int,
    compression: int | str = 0,
    base_offset: int = 0,
    *,
    timestamp_type: int = 0,
) -> bytes:
    """Build a magic 0/1 message set from ``(key, value, timestamp_ms)`` tuples.

    Offsets are ``base_offset`` + 0..n-1.  With compression, the set is one wrapper whose inner
    offsets follow the magic's rule (absolute for 0, relative for 1).  ``timestamp_ms`` None is
    "now" (magic 1; magic 0 has no timestamps).  ``timestamp_type`` 1 sets the LogAppendTime
    attribute bit (magic 1): on the wrapper when compressed, else on every message.
    """
    check_magic(magic)
    codec = _legacy_codec(_compression.codec_id(compression), magic)
    messages = list(messages)
    if magic == 1:
        now = None
        fixed = []
        for k, v, ts in messages:
            if ts is None:
                now = now or int(time.time() * 1000)
                ts = now
            fixed.append((k, v, ts))
        messages = fixed
    parts: list = []
    if codec == NO_COMPRESSION:
        attributes = TIMESTAMP_TYPE_MASK if (magic == 1 and timestamp_type == 1) else 0
        for i, (k, v, ts) in enumerate(messages):
            encode_message(parts, base_offset + i, magic, attributes, ts if magic else NO_TIMESTAMP, k, v)
        return b"".join(parts)
    if not messages:
        return b""
    inner: list = []
    first = base_offset if magic == 0 else 0
    for i, (k, v, ts) in enumerate(messages):
        encode_message(inner, first + i, magic, 0, ts if magic else NO_TIMESTAMP, k, v)
    max_ts = max(ts for _, _, ts in messages) if magic == 1 else NO_TIMESTAMP
    wrap_message_set(parts, b"".join(inner), magic, codec, base_offset + len(messages) - 1, max_ts, timestamp_type == 1)
    return b"".join(parts)
