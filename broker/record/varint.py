"""Protobuf-style variable-length integers, as Kafka's record format uses them.

Wire format
-----------
An unsigned varint stores an integer 7 bits per byte, least significant group first; the high bit
of each byte (0x80) says "another byte follows".  300 = 0b10_0101100 is ``AC 02``.

Signed values (every varint inside a v2 record: length, timestampDelta, offsetDelta, key/value
lengths, header counts and lengths) are first *zigzag* mapped so small negative numbers stay
short: ``0 -> 0, -1 -> 1, 1 -> 2, -2 -> 3 ...``, i.e. ``(n << 1) ^ (n >> 63)``; decoding is
``(u >> 1) ^ -(u & 1)``.  Kafka's ``ByteUtils.writeVarint`` (int32) and ``writeVarlong`` (int64)
produce identical bytes for any value that fits in an int32, so one pair of functions serves
both: an int64 takes at most 10 bytes, an int32 at most 5.

The unsigned form (no zigzag) is what the flexible versions of the wire protocol use for compact
arrays, strings and tagged fields.

Pure functions, thread-safe.  Malformed input raises
:class:`broker.errors.CorruptRecordError` saying what was expected and what was read.
"""

from __future__ import annotations

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.header import BytesLike

INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
UINT64_MAX = (1 << 64) - 1
MAX_VARLONG_BYTES = 10

__all__ = [
    "encode_varint",
    "decode_varint",
    "size_of_varint",
    "encode_unsigned_varint",
    "decode_unsigned_varint",
    "size_of_unsigned_varint",
    "zigzag_encode",
    "zigzag_decode",
]


def zigzag_encode(n: int) -> int:
    """Map a signed int64 to the unsigned value zigzag encoding stores."""
    return (n << 1) ^ (n >> 63)


def zigzag_decode(u: int) -> int:
    """Inverse of :func:`zigzag_encode`."""
    return (u >> 1) ^ -(u & 1)


def _encode_unsigned(u: int) -> bytes:
    out = bytearray()
    while u > 0x7F:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def encode_unsigned_varint(u: int) -> bytes:
    """Unsigned varint (no zigzag) of ``0 <= u < 2**64``."""
    if u < 0 or u > UINT64_MAX:
        raise ValueError(f"unsigned varint must be in [0, 2**64), got {u}")
    if u < 0x80:
        return _ONE_BYTE[u]
    return _encode_unsigned(u)


def encode_varint_uncached(n: int) -> bytes:
    """:func:`encode_varint` without the :data:`SMALL_VARINTS` lookup (the record encoder's hot
    loop looks up the cache itself and calls this for the values outside it)."""
    if n < INT64_MIN or n > INT64_MAX:
        raise ValueError(f"varint must fit in an int64, got {n}")
    return _encode_unsigned((n << 1) ^ (n >> 63))


# Encodings of every value whose zigzag form takes one or two bytes (-8192 .. 8191): record
# lengths, deltas and key/value sizes of small records are all in this range, and a dict lookup
# is several times cheaper than running the encoder.
_ONE_BYTE = [bytes((i,)) for i in range(128)]
SMALL_VARINTS: dict[int, bytes] = {}
for _n in range(-8192, 8192):
    SMALL_VARINTS[_n] = _encode_unsigned((_n << 1) ^ (_n >> 63))
del _n


def encode_varint(n: int) -> bytes:
    """Zigzag varint of a signed int64 ``n`` (Kafka's writeVarint / writeVarlong)."""
    b = SMALL_VARINTS.get(n)
    if b is None:
        return encode_varint_uncached(n)
    return b


def size_of_varint(n: int) -> int:
    """Bytes :func:`encode_varint` would produce for ``n``."""
    u = (n << 1) ^ (n >> 63)
    return (max(u.bit_length(), 1) + 6) // 7


def size_of_unsigned_varint(u: int) -> int:
    """Bytes :func:`encode_unsigned_varint` would produce for ``u``."""
    return (max(u.bit_length(), 1) + 6) // 7


def decode_unsigned_varint(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read an unsigned varint at ``pos``; return ``(value, position after it)``."""
    try:
        b = buf[pos]
        if b < 0x80:
            return b, pos + 1
        result = b & 0x7F
        shift = 7
        start = pos
        pos += 1
        while True:
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if b < 0x80:
                return result, pos
            shift += 7
            if shift >= 7 * MAX_VARLONG_BYTES:
                raise CorruptRecordError(
                    f"varint at position {start}: expected at most {MAX_VARLONG_BYTES} bytes, "
                    f"read {MAX_VARLONG_BYTES} bytes that all have the continuation bit set"
                )
    except IndexError:
        raise CorruptRecordError(
            f"varint at position {pos}: expected another byte, read the end of the buffer (buffer is {len(buf)} bytes)"
        ) from None


def decode_varint(buf: BytesLike, pos: int = 0) -> tuple[int, int]:
    """Read a zigzag varint at ``pos``; return ``(value, position after it)``."""
    try:
        b = buf[pos]
    except IndexError:
        raise CorruptRecordError(
            f"varint at position {pos}: expected a byte, read the end of the buffer (buffer is {len(buf)} bytes)"
        ) from None
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    u, pos = decode_unsigned_varint(buf, pos)
    if u > UINT64_MAX:
        raise CorruptRecordError(f"varint ending at position {pos}: value {u} exceeds 64 bits")
    return (u >> 1) ^ -(u & 1), pos
