"""OffsetManager over a real LogManager (tmp_path) and a real ZkCluster (zk_chroot), plus its pure parts."""

from __future__ import annotations

import pytest

from pyklog.broker.coordinator.offsets import (
    OffsetAndMetadata,
    decode_offset_key,
    decode_offset_value,
    encode_offset_key,
    encode_offset_value,
    java_string_hash,
    kafka_abs,
    partition_for_group,
)

# ---------------------------------------------------------------------------- pure


def test_java_string_hash_parity():
    # values printed by Java 17's String.hashCode()
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("Aa") == java_string_hash("BB") == 2112
    assert java_string_hash("polygenelubricants") == -(2**31)
    assert java_string_hash("GydZG_") == -(2**31)
    assert java_string_hash("\U0001f600") == 1772899  # a surrogate pair: two UTF-16 units
    assert java_string_hash("pyklog-group-\u00e9") == 2082783952
    assert java_string_hash("console-consumer-12345") == 158455506
    assert kafka_abs(-(2**31)) == 0 and kafka_abs(-5) == 5 and kafka_abs(7) == 7
    assert partition_for_group("polygenelubricants", 50) == 0
    assert partition_for_group("hello", 50) == 99162322 % 50


def test_record_codec_golden_bytes_and_round_trip():
    key = encode_offset_key("g", "t", 1)
    assert key == bytes.fromhex("000100016700017400000001")
    value = encode_offset_value(OffsetAndMetadata(5, 2, "m", 1000))
    assert value == bytes.fromhex("000300000000000000050000000200016d00000000000003e8")
    assert decode_offset_key(key) == ("g", "t", 1)
    assert decode_offset_value(value) == OffsetAndMetadata(5, 2, "m", 1000)
    # older value versions (v1 has an expire timestamp after the commit timestamp)
    v1 = bytes.fromhex("0001000000000000000900000000000000000007ffffffffffffffff")
    assert decode_offset_value(v1) == OffsetAndMetadata(9, -1, "", 7)
    assert decode_offset_key(bytes.fromhex("0002000167")) is None  # group metadata key
    for bad in (b"\x00", bytes.fromhex("0009"), bytes.fromhex("0001000567")):
        with pytest.raises(ValueError):
            decode_offset_key(bad)
    with pytest.raises(ValueError, match="expected version 0-3"):
        decode_offset_value(bytes.fromhex("000700"))


# ---------------------------------------------------------------------------- over real logs
