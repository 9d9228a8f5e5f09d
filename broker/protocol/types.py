"""Primitive wire types of Kafka's protocol (KIP-482 flexible versions included), and :class:`FileRegion`.

Every integer is big-endian two's complement.  The types pyklog's schemas use:

=========  ======================================================================
int8/16/   fixed width signed integers (1, 2, 4, 8 bytes)
int32/64
bool       one byte, 0 = false, anything else = true (written as 0 or 1)
string     int16 length N then N bytes of UTF-8; N = -1 means null (nullable
           versions only)
bytes      int32 length N then N raw bytes; N = -1 means null
records    same layout as ``bytes``; holds record batches / message sets.  Decoded
           as a zero-copy ``memoryview`` slice of the frame; when encoding, the
           value may also be a :class:`FileRegion` (a slice of a segment file)
[]T        int32 count N then N elements of T; N = -1 means null
uuid       16 raw bytes (Kafka's Uuid, e.g. a topic id); decoded as ``uuid.UUID``, the
           all-zero Uuid (Kafka's ``Uuid.ZERO_UUID``) is the default
=========  ======================================================================

In a *flexible* version (KIP-482, the message's ``flexibleVersions``) strings, bytes, records
and arrays are *compact*: their length is an unsigned varint holding N + 1, 0 meaning null
(the int16 client_id of request header v2 is the one exception).  Every struct (the body too)
then ends with a *tagged field section*: an unsigned varint count, then per field its tag
(uvarint), its size in bytes (uvarint) and the value.  Unknown tags are skipped.  Unsigned
varints are 7 bits a byte, least significant group first, high bit set on every byte but the
last (at most 5 bytes for the 32-bit values used here).
"""

from __future__ import annotations

import os
import struct
from typing import Any, NamedTuple

INT8 = "int8"
INT16 = "int16"
INT32 = "int32"
INT64 = "int64"
BOOL = "bool"
STRING = "string"
BYTES = "bytes"
RECORDS = "records"
UUID = "uuid"

#: struct format character and width of each fixed-width type.
FIXED: dict[str, tuple[str, int]] = {
    INT8: ("b", 1),
    INT16: ("h", 2),
    INT32: ("i", 4),
    INT64: ("q", 8),
    BOOL: ("?", 1),
}
SCALARS = frozenset(FIXED) | {STRING, BYTES, RECORDS, UUID}

INT16_S = struct.Struct(">h")
INT32_S = struct.Struct(">i")


#: the longest unsigned varint accepted (32-bit values)
UVARINT_MAX_BYTES = 5

_UV_SMALL = [bytes([n]) for n in range(128)]


def uvarint_bytes(n: int) -> bytes:
    """The unsigned varint encoding of ``0 <= n < 2**32``."""
    if n < 128:
        return _UV_SMALL[n]
    if n < 0 or n >= 1 << 32:
        raise ValueError(f"unsigned varint out of range: {n}")
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def read_uvarint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Read an unsigned varint from ``buf[pos:end]``: ``(value, new pos)``.

    Raises ValueError naming the problem when the varint runs past ``end`` or is longer than
    :data:`UVARINT_MAX_BYTES` bytes (callers turn it into InvalidRequestError)."""
    value = 0
    shift = 0
    for i in range(UVARINT_MAX_BYTES):
        if pos >= end:
            raise ValueError(f"unsigned varint truncated after {i} bytes")
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7
    raise ValueError(f"unsigned varint longer than {UVARINT_MAX_BYTES} bytes")


class FileRegion(NamedTuple):
    """``size`` bytes of an open binary ``file`` starting at ``position``.

    Allowed as the value of a ``records`` field when encoding a response: the frame is
    emitted around it so the server can ``os.sendfile(sock, file.fileno(), position, size)``
    without copying the records into Python memory.  The protocol codec never reads it.
    """

    file: Any
    position: int
    size: int

    def read_bytes(self) -> bytes:
        """Read the region (for tests and for transports that cannot use sendfile)."""
        data = _pread(self.file, self.size, self.position)
        if len(data) != self.size:
            raise EOFError(f"FileRegion expected {self.size} bytes at position {self.position}, read {len(data)}")
        return data


def _pread(file: Any, size: int, position: int) -> bytes:
    chunks = []
    got = 0
    while got < size:
        data = os.pread(file.fileno(), size - got, position + got)
        if not data:
            break
        chunks.append(data)
        got += len(data)
    return b"".join(chunks)
