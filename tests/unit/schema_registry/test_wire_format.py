"""Confluent's wire format: golden bytes, round trips, malformed records (what confluent-kafka's
serializers write is checked against the codec in tests/integration/schema_registry)."""

from __future__ import annotations

import pytest

from pyklog.connector.schema_registry import wire


def test_golden_bytes():
    assert wire.encode(7, b"\x02a") == b"\x00\x00\x00\x00\x07\x02a"
    assert wire.encode(258, b"", [0]) == b"\x00\x00\x00\x01\x02\x00"
    assert wire.encode(1, b"P", [1, 0]) == b"\x00\x00\x00\x00\x01\x04\x02\x00P"  # count 2, indexes 1 and 0
    assert wire.decode_header(b"\x00\x00\x00\x00\x07\x02a") == (7, None, 5)
    assert wire.decode_header(b"\x00\x00\x00\x01\x02\x00", protobuf=True) == (258, [0], 6)
    assert wire.decode_header(b"\x00\x00\x00\x00\x01\x04\x02\x00P", protobuf=True) == (1, [1, 0], 8)


@pytest.mark.parametrize("indexes", [[0], [3], [0, 1], [70, 2, 9000]])
def test_round_trip(indexes):
    data = wire.encode(99, b"payload", indexes)
    schema_id, back, start = wire.decode_header(data, protobuf=True)
    assert (schema_id, back, data[start:]) == (99, indexes, b"payload")


@pytest.mark.parametrize(
    ("data", "protobuf", "what"),
    [
        (None, False, "got null"),
        (b"\x00\x00\x01", False, "got 3 bytes"),
        (b"\x01\x00\x00\x00\x01x", False, "magic byte 0, got 1"),
        (b"\x00\x00\x00\x00\x01", True, "truncated varint"),
        (b"\x00\x00\x00\x00\x01\x06\x02", True, "truncated varint"),
    ],
)
def test_bad_records(data, protobuf, what):
    with pytest.raises(wire.WireFormatError, match=what):
        wire.decode_header(data, protobuf=protobuf)
