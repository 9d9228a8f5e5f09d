"""``__transaction_state`` record codecs (Kafka's TransactionLogKey / TransactionLogValue v0) and the
transactional id -> partition mapping.  Pure: no server."""

from __future__ import annotations

import pytest

from pyklog.broker.coordinator.transaction.log import (
    TxnLogValue,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
)
from pyklog.broker.coordinator.transaction.state_manager import partition_for_transactional_id


def test_key_golden_bytes():
    # version int16 0, then the transactional id as int16 length + UTF-8
    assert encode_key("tx") == bytes.fromhex("000000027478")
    assert decode_key(bytes.fromhex("000000027478")) == "tx"
    assert encode_key("é") == bytes.fromhex("00000002c3a9")


def test_value_golden_bytes():
    v = TxnLogValue(
        producer_id=1000,
        producer_epoch=5,
        transaction_timeout_ms=60000,
        state=1,
        partitions=(("t", 0), ("t", 1), ("u", 7)),
        last_update_timestamp_ms=1700000000123,
        start_timestamp_ms=1700000000000,
    )
    golden = bytes.fromhex(
        "0000"  # version 0
        "00000000000003e8"  # producer_id 1000
        "0005"  # producer_epoch 5
        "0000ea60"  # transaction_timeout_ms 60000
        "01"  # transaction_status Ongoing
        "00000002"  # 2 topics
        "0001"
        "74"
        "00000002"
        "00000000"
        "00000001"  # "t" [0, 1]
        "0001"
        "75"
        "00000001"
        "00000007"  # "u" [7]
        "0000018bcfe5687b"  # transaction_last_update_timestamp_ms 1700000000123
        "0000018bcfe56800"
    )  # transaction_start_timestamp_ms 1700000000000
    assert encode_value(v) == golden
    assert decode_value(golden) == v


def test_empty_state_writes_null_partitions():
    v = TxnLogValue(7, 0, 60000, 0, (), 5, -1)
    raw = encode_value(v, null_partitions=True)
    assert raw == bytes.fromhex("0000000000000000000700000000ea6000ffffffff0000000000000005ffffffffffffffff")
    assert decode_value(raw) == v
    assert decode_value(encode_value(v)) == v  # an empty (not null) array reads the same


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"", "2-byte version"),
        (bytes.fromhex("000100027478"), "expected version 0, read 1"),
        (bytes.fromhex("000000097478"), "runs past"),
        (bytes.fromhex("00000002747878"), "trailing"),
    ],
)
def test_bad_keys_are_named(raw, message):
    with pytest.raises(ValueError, match=message):
        decode_key(raw)


def test_bad_values_are_named():
    good = encode_value(TxnLogValue(1, 0, 1000, 2, (("t", 0),), 1, 1))
    with pytest.raises(ValueError, match="expected version 0, read 1"):
        decode_value(b"\x00\x01" + good[2:])
    with pytest.raises(ValueError, match="two int64 timestamps"):
        decode_value(good[:-3])
    with pytest.raises(ValueError, match="cannot fit"):
        decode_value(good[:19] + b"\x7f\xff\xff\xff" + good[23:])
    bad_status = bytearray(good)
    bad_status[16] = 9
    with pytest.raises(ValueError, match="unknown transaction status 9"):
        decode_value(bytes(bad_status))
    with pytest.raises(ValueError, match="tombstone"):
        decode_value(None)


def test_partition_for_transactional_id_is_kafkas():
    # Java: Math.abs("my-txn".hashCode()) % 50 with "my-txn".hashCode() == -1061187895
    assert partition_for_transactional_id("my-txn", 50) == 1061187895 % 50 == 45
    # Utils.abs(Integer.MIN_VALUE) == 0: "polygenelubricants".hashCode() == Integer.MIN_VALUE
    assert partition_for_transactional_id("polygenelubricants", 50) == 0
