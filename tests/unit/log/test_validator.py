"""LogValidator (pyklog.broker.log.validator): per-batch and per-record rules of an append, and
offset assignment.  Pure functions: no server, no files."""

from __future__ import annotations

import struct

import pytest

from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidRecordError,
    MessageTooLargeError,
    RecordListTooLargeError,
)
from pyklog.broker.log.validator import (
    MAX_IOV_BATCHES,
    RecordValidationError,
    assign_offsets,
    null_key_records,
    validate_batches,
)
from pyklog.broker.record.batch import build_batch, build_control_batch, decode_batch
from pyklog.broker.record.header import (
    HEADER_SIZE,
    compute_crc,
    parse_header,
    validate_crc,
)

TP = "events-3"
LIMITS = {"max_message_bytes": 1 << 20, "segment_bytes": 1 << 24}
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def batch(keys, compression=0, ts=1_700_000_000_000, **kw) -> bytes:
    # timestamps far apart and long values: multi-byte varints in front of every key length
    return build_batch(
        [(k, b"v" * (300 * i), ts + 1_000_000 * i, [("h", b"x")]) for i, k in enumerate(keys)],
        compression=compression,
        **kw,
    )


@pytest.mark.parametrize("codec", CODECS)
def test_null_key_records_matches_a_full_decode(codec):
    keys = [b"a", None, b"", None, b"k" * 200, None]
    raw = batch(keys, codec)
    h = parse_header(raw, 0)
    got = null_key_records(raw, 0, h)
    assert got == [i for i, r in enumerate(decode_batch(raw).records) if r.key is None] == [1, 3, 5]
    # at a position inside a larger buffer, and through a memoryview
    buf = memoryview(batch([b"x"]) + raw)
    pos = len(batch([b"x"]))
    assert null_key_records(buf, pos, parse_header(buf, pos)) == [1, 3, 5]


def test_null_key_records_of_a_batch_built_by_kafka_python():
    """An independent encoder: kafka-python's DefaultRecordBatchBuilder."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, key in enumerate([None, b"key", None]):
        b.append(i, timestamp=1_000 + i, key=key, value=b"value", headers=[])
    raw = bytes(b.build())
    assert null_key_records(raw, 0, parse_header(raw, 0)) == [0, 2]


def test_compacted_topic_refuses_null_keys_with_record_errors():
    raw = batch([b"a", None, b"b", None])
    with pytest.raises(RecordValidationError) as e:
        validate_batches(raw, TP, compacted=True, **LIMITS)
    err = e.value
    assert isinstance(err, InvalidRecordError) and err.code == 87
    msg = "Compacted topic cannot accept message without key in topic partition events-3."
    assert err.record_errors == [(1, msg), (3, msg)]
    assert "2 record errors" in str(err) and "batchIndex=1" in str(err)
    # a delete topic takes the same batch; so does a compacted one when every record has a key
    assert validate_batches(raw, TP, compacted=False, **LIMITS).records == 4
    keyed = batch([b"a", b"", b"c"])
    assert validate_batches(keyed, TP, compacted=True, **LIMITS).records == 3


def test_tombstones_have_keys_and_pass():
    raw = build_batch([(b"gone", None, 1, ())])
    assert validate_batches(raw, TP, compacted=True, **LIMITS).records == 1


def test_record_errors_name_indexes_within_the_failing_batch():
    raw = batch([b"a", b"b"]) + batch([b"c", b"d", None])
    with pytest.raises(RecordValidationError) as e:
        validate_batches(raw, TP, compacted=True, **LIMITS)
    assert [i for i, _ in e.value.record_errors] == [2]


def test_control_batches_are_not_key_checked_but_refused_from_clients():
    ctl = build_control_batch(1, producer_id=7, producer_epoch=0)
    with pytest.raises(InvalidRecordError, match="control batches"):
        validate_batches(ctl, TP, compacted=True, **LIMITS)
    assert validate_batches(ctl, TP, compacted=True, from_client=False, **LIMITS).records == 1


def _with_crc(raw: bytearray) -> bytes:
    h = parse_header(raw, 0)
    struct.pack_into(">I", raw, 17, compute_crc(raw, 0, h.size))
    return bytes(raw)


def test_records_that_do_not_fill_their_batch_are_corrupt_on_compacted_topics():
    raw = bytearray(batch([b"a"]))
    raw[HEADER_SIZE] = 0x7E  # the record's length varint: 63, past the batch's end
    raw = _with_crc(raw)
    validate_crc(raw, 0, parse_header(raw, 0))
    with pytest.raises(CorruptRecordError, match="record 0: expected a length"):
        validate_batches(raw, TP, compacted=True, **LIMITS)
    validate_batches(raw, TP, compacted=False, **LIMITS)  # not decoded: only the CRC is checked
    short = bytearray(batch([b"a"]))
    short[HEADER_SIZE] -= 2  # one byte shorter (zigzag): a byte is left over after the record
    with pytest.raises(CorruptRecordError, match="to end at byte"):
        validate_batches(_with_crc(short), TP, compacted=True, **LIMITS)


def test_per_batch_rules():
    one = batch([b"a"])
    with pytest.raises(CorruptRecordError, match="at least one record batch"):
        validate_batches(b"", TP, **LIMITS)
    with pytest.raises(RecordListTooLargeError, match="segment.bytes 10"):
        validate_batches(one, TP, max_message_bytes=1 << 20, segment_bytes=10)
    with pytest.raises(MessageTooLargeError, match="max.message.bytes 70"):
        validate_batches(one, TP, max_message_bytes=70, segment_bytes=1 << 20)
    with pytest.raises(CorruptRecordError, match="expected a 61-byte batch header"):
        validate_batches(one + b"\0" * 20, TP, **LIMITS)
    with pytest.raises(CorruptRecordError, match="declares"):
        validate_batches(one[:-1], TP, **LIMITS)
    bad = bytearray(one)
    bad[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC-32C"):
        validate_batches(bytes(bad), TP, **LIMITS)
    legacy = bytearray(one)
    legacy[16] = 1
    with pytest.raises(CorruptRecordError, match="magic"):
        validate_batches(bytes(legacy), TP, **LIMITS)
    wrong_count = bytearray(one)
    struct.pack_into(">i", wrong_count, 57, 2)
    with pytest.raises(InvalidRecordError, match="lastOffsetDelta"):
        validate_batches(_with_crc(wrong_count), TP, **LIMITS)
    pid = batch([b"a"], producer_id=3, producer_epoch=0, base_sequence=0)
    with pytest.raises(InvalidRecordError, match="exactly one batch"):
        validate_batches(pid + pid, TP, **LIMITS)
    checked = validate_batches(pid, TP, **LIMITS)
    assert checked.producer.producer_id == 3 and checked.batches == [(0, parse_header(pid, 0))]
    assert validate_batches(one + one, TP, **LIMITS).producer is None


def test_validation_leaves_the_input_untouched():
    raw = bytearray(batch([b"a", b"b"], "gzip") + batch([b"c"]))
    before = bytes(raw)
    validate_batches(raw, TP, compacted=True, **LIMITS)
    assert bytes(raw) == before


@pytest.mark.parametrize("n", [3, MAX_IOV_BATCHES + 1])
def test_assign_offsets_iovec_and_in_place_give_the_same_bytes(n):
    raw = b"".join(batch([b"k%d" % i, b"x"], base_offset=999) for i in range(n))
    checked = validate_batches(raw, TP, **LIMITS)
    out, metas, next_offset, max_ts = assign_offsets(memoryview(raw), checked.batches, 100, 9, None)
    view_bytes = bytes(out) if isinstance(out, bytearray) else b"".join(bytes(p) for p in out)
    assert raw[:8] == struct.pack(">q", 999)  # the caller's bytes are not modified
    inplace = bytearray(raw)
    out2, metas2, next2, _ = assign_offsets(inplace, checked.batches, 100, 9, None)
    assert out2 is inplace and bytes(inplace) == view_bytes
    assert (next_offset, next2) == (100 + 2 * n, 100 + 2 * n) and metas == metas2
    pos = 0
    for i in range(n):
        h = parse_header(view_bytes, pos)
        validate_crc(view_bytes, pos, h)  # baseOffset and epoch are outside the CRC
        assert (h.base_offset, h.partition_leader_epoch) == (100 + 2 * i, 9)
        assert metas[i] == (pos, h.size, 101 + 2 * i, h.max_timestamp)
        pos += h.size
    assert max_ts == max(m[3] for m in metas)


def test_assign_offsets_log_append_time_rewrites_timestamps_and_crc():
    raw = bytearray(batch([b"a", b"b"], ts=5))
    checked = validate_batches(raw, TP, **LIMITS)
    _, metas, _, max_ts = assign_offsets(raw, checked.batches, 0, 0, 1_234_567)
    h = parse_header(raw, 0)
    validate_crc(raw, 0, h)
    assert h.timestamp_type == 1 and h.max_timestamp == max_ts == metas[0][3] == 1_234_567
    assert [r.timestamp for r in decode_batch(bytes(raw)).records] == [1_234_567, 1_234_567]
