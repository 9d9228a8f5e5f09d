"""Primitive wire types of Kafka's (non-flexible) protocol, and :class:`FileRegion`.

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
=========  ======================================================================
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

#: struct format character and width of each fixed-width type.
FIXED: dict[str, tuple[str, int]] = {
    INT8: ("b", 1),
    INT16: ("h", 2),
    INT32: ("i", 4),
    INT64: ("q", 8),
    BOOL: ("?", 1),
}
SCALARS = frozenset(FIXED) | {STRING, BYTES, RECORDS}

INT16_S = struct.Struct(">h")
INT32_S = struct.Struct(">i")


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
            raise EOFError(
                f"FileRegion expected {self.size} bytes at position {self.position}, read {len(data)}"
            )
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
