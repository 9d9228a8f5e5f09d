"""pyklog.broker.record.batch: golden bytes, round trips for every codec, kafka-python cross-checks,
control batches, corruption detection."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record import header as H
from pyklog.broker.record.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    build_batch,
    build_batch_from_records,
    build_control_batch,
    decode_batch,
    decode_control_record,
)

CODECS = [0, 1, 2, 3, 4]

# One record, key b"k", value b"v", timestamp 1000, offset 0, no producer: every field by hand.
GOLDEN_ONE = bytes.fromhex(
    "0000000000000000"  # baseOffset 0
    "0000003a"  # batchLength 58 = 49 header bytes after this field + 9 record bytes
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic 2
    "716a6189"  # crc: CRC-32C of everything from attributes on (checked below)
    "0000"  # attributes: no compression, CreateTime, not transactional, not control
    "00000000"  # lastOffsetDelta 0
    "00000000000003e8"  # firstTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000
    "ffffffffffffffff"  # producerId -1
    "ffff"  # producerEpoch -1
    "ffffffff"  # baseSequence -1
    "00000001"  # recordsCount 1
    # record
    "10"  # length: varint zigzag(8) = 16, the 8 bytes that follow
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "02"  # keyLength 1 (zigzag 2)
    "6b"  # key "k"
    "02"  # valueLength 1
    "76"  # value "v"
    "00"  # headers count 0
)

# Two records from producer 7 (epoch 1, sequence 0) at base offset 5: a null key with a header,
# then a null value whose timestamp is 2 ms *before* the first (negative delta).
GOLDEN_TWO = bytes.fromhex(
    "0000000000000005"  # baseOffset 5
    "00000045"  # batchLength 69 = 49 + 23 + 8 (record bytes incl. length varints)
    "ffffffff"  # partitionLeaderEpoch -1
    "02"  # magic
    "28c7098b"  # crc
    "0000"  # attributes
    "00000001"  # lastOffsetDelta 1
    "00000000000003e8"  # firstTimestamp 1000
    "00000000000003e8"  # maxTimestamp 1000 (the second record is older)
    "0000000000000007"  # producerId 7
    "0001"  # producerEpoch 1
    "00000000"  # baseSequence 0
    "00000002"  # recordsCount 2
    # record 0
    "16"  # length 11
    "00"  # attributes
    "00"  # timestampDelta 0
    "00"  # offsetDelta 0
    "01"  # keyLength -1: null key
    "02"
    "76"  # value "v"
    "02"  # headers count 1
    "02"
    "68"  # header key "h"
    "02"
    "78"  # header value "x"
    # record 1
    "0e"  # length 7
    "00"  # attributes
    "03"  # timestampDelta -2 (zigzag 3)
    "02"  # offsetDelta 1
    "02"
    "6b"  # key "k"
    "01"  # valueLength -1: null value
    "00"  # headers count 0
)


def test_golden_single_record_batch():
    assert crc32c(GOLDEN_ONE[21:]) == 0x716A6189  # the CRC covers attributes .. end
    assert build_batch([(b"k", b"v", 1000, ())]) == GOLDEN_ONE
    b = decode_batch(GOLDEN_ONE)
    assert b.records == [Record(0, 1000, b"k", b"v", ())]
    assert (b.base_offset, b.last_offset, b.next_offset, b.size) == (0, 0, 1, len(GOLDEN_ONE))
    assert (b.magic, b.compression, b.timestamp_type, b.is_control, b.control_type) == (2, 0, 0, False, None)


def test_golden_two_records_with_header_and_nulls():
    assert crc32c(GOLDEN_TWO[21:]) == 0x28C7098B
    built = build_batch(
        [(None, b"v", 1000, [("h", b"x")]), (b"k", None, 998, ())],
        base_offset=5,
        producer_id=7,
        producer_epoch=1,
        base_sequence=0,
    )
    assert built == GOLDEN_TWO
    b = decode_batch(GOLDEN_TWO)
    assert b.records == [Record(5, 1000, None, b"v", (("h", b"x"),)), Record(6, 998, b"k", None, ())]
    assert (b.producer_id, b.producer_epoch, b.base_sequence, b.last_sequence) == (7, 1, 0, 1)
    assert b.max_timestamp == 1000 and b.first_timestamp == 1000


def _sample(n=200):
    return [
        (
            None if i % 7 == 0 else b"key-%d" % i,
            None if i % 11 == 0 else b"value-%d-" % i * (i % 13),
            1_700_000_000_000 + (i * 37) % 1000 - 500,
            [("trace", b"%d" % i), ("empty", None), ("ünï", b"")] if i % 5 == 0 else (),
        )
        for i in range(n)
    ]


def _as_tuples(records):
    return [(r.key, r.value, r.timestamp, list(r.headers)) for r in records]


def _expected(recs):
    return [(k, v, t, list(h)) for k, v, t, h in recs]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip_every_codec(codec):
    recs = _sample()
    raw = build_batch(
        recs,
        base_offset=1000,
        compression=codec,
        producer_id=3,
        producer_epoch=2,
        base_sequence=40,
        is_transactional=True,
        partition_leader_epoch=9,
    )
    b = decode_batch(bytearray(raw))
    assert _as_tuples(b.records) == _expected(recs)
    assert [r.offset for r in b.records] == list(range(1000, 1200))
    h = b.header
    assert (h.compression, h.is_transactional, h.partition_leader_epoch) == (codec, True, 9)
    assert (h.last_offset_delta, h.records_count, h.base_sequence) == (199, 200, 40)
    assert h.first_timestamp == recs[0][2]
    assert h.max_timestamp == max(r[2] for r in recs)
    # decoding from the middle of a larger buffer and from a memoryview
    assert decode_batch(memoryview(b"\x00" * 7 + raw), 7).records == b.records


def test_log_append_time_gives_every_record_the_max_timestamp():
    raw = build_batch([(b"a", b"1", 10, ()), (b"b", b"2", 30, ()), (b"c", b"3", 20, ())], timestamp_type=1)
    b = decode_batch(raw)
    assert b.timestamp_type == 1 and b.max_timestamp == 30
    assert [r.timestamp for r in b.records] == [30, 30, 30]


def test_none_timestamp_means_now_and_names_are_accepted():
    raw = build_batch([(b"a", b"1", None, None)], compression="lz4")
    b = decode_batch(raw)
    assert b.compression == 3 and b.records[0].timestamp > 1_600_000_000_000


def test_large_values_and_big_deltas():
    big = b"x" * 300_000
    recs = [(b"k", big, 0, ()), (None, b"", 2**40, [("k" * 200, b"v" * 70_000)])]
    for codec in CODECS:
        b = decode_batch(build_batch(recs, compression=codec))
        assert _as_tuples(b.records) == _expected(recs)


def test_build_rejects_bad_arguments():
    with pytest.raises(ValueError, match="at least one record"):
        build_batch([])
    with pytest.raises(ValueError, match="codec"):
        build_batch([(b"k", b"v", 0, ())], compression=9)
    with pytest.raises(ValueError, match="timestamp_type"):
        build_batch([(b"k", b"v", 0, ())], timestamp_type=2)


def test_control_batches():
    for ctype in (CONTROL_ABORT, CONTROL_COMMIT):
        raw = build_control_batch(ctype, 42, 3, base_offset=77, timestamp_ms=5000, coordinator_epoch=6)
        b = decode_batch(raw)
        assert b.is_control and b.is_transactional and b.control_type == ctype
        assert (b.producer_id, b.producer_epoch, b.base_offset, b.records_count) == (42, 3, 77, 1)
        assert b.header.attributes == 0x30  # bits 4 (transactional) and 5 (control)
        rec = b.records[0]
        assert rec.key == struct.pack(">hh", 0, ctype)  # key: version 0, type
        assert rec.value == struct.pack(">hi", 0, 6)  # EndTransactionMarker: version 0, epoch
        assert decode_control_record(rec) == (ctype, 6)
    with pytest.raises(ValueError):
        build_control_batch(2, 1, 0)
    with pytest.raises(CorruptRecordError, match="version 0"):
        decode_control_record(Record(0, 0, struct.pack(">hh", 1, 0), None, ()))


def test_build_from_records_keeps_offsets_and_allows_empty_batches():
    recs = [Record(10, 100, b"a", b"1", ()), Record(13, 90, b"b", None, (("h", b"v"),))]
    raw = build_batch_from_records(
        recs, base_offset=9, last_offset_delta=6, compression=2, producer_id=5, producer_epoch=0, base_sequence=100
    )
    b = decode_batch(raw)
    assert b.records == recs
    assert (b.base_offset, b.last_offset, b.last_sequence, b.max_timestamp) == (9, 15, 106, 100)
    empty = decode_batch(
        build_batch_from_records(
            [], base_offset=20, last_offset_delta=4, producer_id=5, producer_epoch=0, base_sequence=7
        )
    )
    assert empty.records == [] and empty.next_offset == 25 and empty.last_sequence == 11
    with pytest.raises(ValueError, match="increase"):
        build_batch_from_records([recs[1], recs[0]])


# -- corruption ---------------------------------------------------------------------------------
def test_bad_crc_names_stored_and_computed():
    raw = bytearray(GOLDEN_ONE)
    raw[-2] ^= 0xFF  # flip a byte of the value
    with pytest.raises(CorruptRecordError, match=r"CRC-32C mismatch, stored 0x716a6189, computed 0x"):
        decode_batch(raw)
    # without validation the framing is still checked but the changed value decodes
    assert decode_batch(raw, validate_crc=False).records[0].value == bytes([0x76 ^ 0xFF])


def test_partition_leader_epoch_is_outside_the_crc():
    raw = bytearray(GOLDEN_ONE)
    H.set_partition_leader_epoch(raw, 0, 12)
    H.set_base_offset(raw, 0, 99)
    b = decode_batch(raw)
    assert (b.partition_leader_epoch, b.base_offset, b.records[0].offset) == (12, 99, 99)


def _recrc(raw: bytearray) -> bytearray:
    struct.pack_into(">I", raw, 17, crc32c(bytes(raw[21:])))
    return raw


def test_structural_corruption_is_detected_even_with_a_valid_crc():
    cases = {
        "truncated batch": (bytes(GOLDEN_ONE[:-1]), "expected 70 bytes"),
        "short header": (bytes(GOLDEN_ONE[:40]), "61-byte v2 header"),
    }
    bad_magic = bytearray(GOLDEN_ONE)
    bad_magic[16] = 1
    cases["magic"] = (bytes(bad_magic), "expected magic 2")
    more = _recrc(bytearray(GOLDEN_ONE))
    struct.pack_into(">i", more, 57, 2)  # recordsCount 2 but one record
    cases["count too high"] = (bytes(_recrc(more)), "ends inside record 1")
    fewer = bytearray(GOLDEN_TWO)
    struct.pack_into(">i", fewer, 57, 1)
    cases["count too low"] = (bytes(_recrc(fewer)), "trailing bytes")
    neg = bytearray(GOLDEN_ONE)
    struct.pack_into(">i", neg, 57, -1)
    cases["negative count"] = (bytes(_recrc(neg)), "record count >= 0")
    reclen = bytearray(GOLDEN_ONE)
    reclen[61] = 0x12  # record length 9 instead of 8
    cases["record length"] = (bytes(_recrc(reclen)), "expected a length of")
    codec = bytearray(GOLDEN_ONE)
    codec[22] = 7
    cases["codec"] = (bytes(_recrc(codec)), "compression codec 0-4")
    garbage = bytearray(build_batch([(b"k", b"v" * 100, 0, ())], compression=1))
    garbage[75] ^= 0xFF  # inside the deflate stream
    cases["gzip payload"] = (bytes(_recrc(garbage)), "gzip")
    for name, (raw, message) in cases.items():
        with pytest.raises(CorruptRecordError, match=message):
            decode_batch(raw)
            pytest.fail(f"{name}: no error")


# -- kafka-python cross-checks ------------------------------------------------------------------
def _kp_build(recs, codec, **kw):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=kw.get("txn", False),
        producer_id=kw.get("pid", -1),
        producer_epoch=kw.get("epoch", -1),
        base_sequence=kw.get("seq", -1),
        batch_size=2**30,
    )
    for i, (k, v, ts, hs) in enumerate(recs):
        b.append(i, ts, k, v, list(hs))
    return bytes(b.build())


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_builds_we_decode(codec):
    recs = _sample(300)
    raw = _kp_build(recs, codec, pid=11, epoch=2, seq=5, txn=True)
    b = decode_batch(raw)
    assert _as_tuples(b.records) == _expected(recs)
    assert (b.compression, b.producer_id, b.base_sequence, b.is_transactional) == (codec, 11, 5, True)
    if codec == 0:  # uncompressed: the same bytes, byte for byte (kafka-python writes epoch 0)
        assert (
            build_batch(
                recs, producer_id=11, producer_epoch=2, base_sequence=5, is_transactional=True, partition_leader_epoch=0
            )
            == raw
        )


@pytest.mark.parametrize("codec", CODECS)
def test_we_build_kafka_python_decodes(codec):
    from kafka.record.memory_records import MemoryRecords

    recs = _sample(300)
    raw = build_batch(
        recs, base_offset=500, compression=codec, producer_id=4, producer_epoch=0, base_sequence=9
    ) + build_control_batch(CONTROL_COMMIT, 4, 0, base_offset=800)
    mr = MemoryRecords(raw)
    batch = mr.next_batch()
    assert batch.validate_crc()
    assert batch.compression_type == codec
    got = [(r.offset, r.key, r.value, r.timestamp, list(r.headers)) for r in batch]
    assert got == [(500 + i, k, v, t, list(h)) for i, (k, v, t, h) in enumerate(recs)]
    control = mr.next_batch()
    assert control.is_control_batch and control.validate_crc()
    assert mr.next_batch() is None


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=200),
            st.none() | st.binary(max_size=300),
            st.integers(min_value=0, max_value=2**50),
            st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=20)), max_size=3),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(CODECS),
)
def test_random_batches_round_trip(recs, codec):
    b = decode_batch(build_batch(recs, compression=codec))
    assert _as_tuples(b.records) == _expected(recs)


def test_wrong_types_get_a_clear_error():
    with pytest.raises(TypeError, match="bytes-like or None"):
        build_batch([("a str key", b"v", 0, ())])
