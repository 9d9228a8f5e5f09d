"""Confluent's wire format of a record key or value written with a registered schema.

Layout (all serializers of Confluent's clients)::

    offset  size  field
    0       1     magic byte, 0
    1       4     schema id, big-endian signed int32
    5       ...   Protobuf only: the message indexes, the path of the message type in the file
                  (a zigzag varint count, then each index as a zigzag varint; the common ``[0]``,
                  the first message, is written as the single byte 0)
    ...           the payload: Avro binary, JSON text, or the Protobuf message

:func:`encode` builds the header plus payload; :func:`decode_header` reads a header and says where
the payload starts.  Pure: bytes in, values out; a short or foreign record raises
:class:`WireFormatError` saying what was expected and what was read.
"""

from __future__ import annotations

import struct

MAGIC = 0
_HEADER = struct.Struct(">bi")  # magic byte, schema id
HEADER_SIZE = _HEADER.size


class WireFormatError(ValueError):
    """The bytes are not in Confluent's wire format."""


def _zigzag_varint(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _read_zigzag_varint(data, pos: int) -> tuple[int, int]:
    shift = n = 0
    while True:
        if pos >= len(data):
            raise WireFormatError(f"a truncated varint in the message indexes at byte {pos}")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift > 63:
            raise WireFormatError(f"a varint longer than 10 bytes in the message indexes at byte {pos}")


def encode_message_indexes(indexes: list[int]) -> bytes:
    if list(indexes) == [0]:
        return b"\x00"
    return _zigzag_varint(len(indexes)) + b"".join(_zigzag_varint(i) for i in indexes)


def encode(schema_id: int, payload: bytes, message_indexes: list[int] | None = None) -> bytes:
    """The record: header, the Protobuf message indexes when given, then the payload."""
    head = _HEADER.pack(MAGIC, schema_id)
    if message_indexes is not None:
        head += encode_message_indexes(message_indexes)
    return head + bytes(payload)


def decode_header(data, protobuf: bool = False) -> tuple[int, list[int] | None, int]:
    """``(schema id, message indexes or None, offset of the payload)``."""
    if data is None or len(data) < HEADER_SIZE:
        got = "null" if data is None else f"{len(data)} bytes"
        raise WireFormatError(f"expected at least {HEADER_SIZE} bytes (magic byte and schema id), got {got}")
    magic, schema_id = _HEADER.unpack_from(data, 0)
    if magic != MAGIC:
        raise WireFormatError(f"expected the magic byte 0, got {magic}: not written with a schema registry")
    if not protobuf:
        return schema_id, None, HEADER_SIZE
    count, pos = _read_zigzag_varint(data, HEADER_SIZE)
    if count == 0:
        return schema_id, [0], pos
    if count < 0 or count > len(data):
        raise WireFormatError(f"a message index count of {count} at byte {HEADER_SIZE}")
    indexes = []
    for _ in range(count):
        i, pos = _read_zigzag_varint(data, pos)
        indexes.append(i)
    return schema_id, indexes, pos
