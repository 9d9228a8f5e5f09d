"""pyklog.broker.record.varint: golden vectors (hand-derived), round trips, malformed input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.varint import (
    decode_unsigned_varint,
    decode_varint,
    encode_unsigned_varint,
    encode_varint,
    size_of_unsigned_varint,
    size_of_varint,
    zigzag_decode,
    zigzag_encode,
)

# (value, bytes): zigzag maps n >= 0 to 2n and n < 0 to -2n-1, then 7 bits per byte, low first,
# 0x80 = "more bytes follow".
GOLDEN_SIGNED = [
    (0, "00"),  # zigzag 0
    (-1, "01"),  # zigzag 1
    (1, "02"),  # zigzag 2
    (-2, "03"),  # zigzag 3
    (63, "7e"),  # zigzag 126: largest one-byte positive
    (-64, "7f"),  # zigzag 127: largest one-byte negative
    (64, "8001"),  # zigzag 128 = 0b1_0000000 -> 0x80 (low 7 bits 0, more), 0x01
    (150, "ac02"),  # zigzag 300 = 0b10_0101100 -> 0xAC, 0x02 (protobuf's own example)
    (8191, "fe7f"),  # zigzag 16382: largest two-byte value
    (8192, "808001"),  # zigzag 16384 = 2**14 -> three bytes
    (2**31 - 1, "feffffff0f"),  # int32 max: zigzag 2**32-2, five bytes
    (-(2**31), "ffffffff0f"),  # int32 min: zigzag 2**32-1
    (2**63 - 1, "feffffffffffffffff01"),  # int64 max: ten bytes
    (-(2**63), "ffffffffffffffffff01"),  # int64 min
]

GOLDEN_UNSIGNED = [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (2**64 - 1, "ffffffffffffffffff01")]


@pytest.mark.parametrize("value,hexbytes", GOLDEN_SIGNED)
def test_signed_golden(value, hexbytes):
    raw = bytes.fromhex(hexbytes)
    assert encode_varint(value) == raw
    assert decode_varint(raw, 0) == (value, len(raw))
    assert size_of_varint(value) == len(raw)
    # decoding in the middle of a buffer returns the position after the varint
    assert decode_varint(b"\xaa" + raw + b"\xbb", 1) == (value, 1 + len(raw))


@pytest.mark.parametrize("value,hexbytes", GOLDEN_UNSIGNED)
def test_unsigned_golden(value, hexbytes):
    raw = bytes.fromhex(hexbytes)
    assert encode_unsigned_varint(value) == raw
    assert decode_unsigned_varint(raw, 0) == (value, len(raw))
    assert size_of_unsigned_varint(value) == len(raw)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_signed_round_trip(n):
    raw = encode_varint(n)
    assert decode_varint(raw) == (n, len(raw))
    assert size_of_varint(n) == len(raw)
    assert zigzag_decode(zigzag_encode(n)) == n


def test_matches_kafka_python_encoder():
    from kafka.record.util import decode_varint as kp_decode
    from kafka.record.util import encode_varint as kp_encode

    for n in [0, 1, -1, 63, -64, 64, 300, -300, 8191, 8192, 2**31 - 1, -(2**31), 2**40, -(2**40)]:
        out = bytearray()
        kp_encode(n, out.append)
        assert encode_varint(n) == bytes(out)
        assert kp_decode(bytearray(encode_varint(n)), 0)[0] == n


def test_out_of_range_values_rejected():
    with pytest.raises(ValueError, match="int64"):
        encode_varint(2**63)
    with pytest.raises(ValueError, match="int64"):
        encode_varint(-(2**63) - 1)
    with pytest.raises(ValueError):
        encode_unsigned_varint(-1)


def test_truncated_varint_is_corrupt():
    with pytest.raises(CorruptRecordError, match="end of the buffer"):
        decode_varint(b"\x80\x80", 0)
    with pytest.raises(CorruptRecordError, match="end of the buffer"):
        decode_varint(b"", 0)


def test_overlong_varint_is_corrupt():
    with pytest.raises(CorruptRecordError, match="at most 10 bytes"):
        decode_varint(b"\xff" * 11 + b"\x01", 0)
