"""pyklog.broker.record.legacy: magic 0/1 message sets, wrappers, conversion to and from v2,
cross-checked with kafka-python's legacy builder and reader."""

from __future__ import annotations

import struct
import zlib

import pytest

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.batch import (
    Record,
    build_batch,
    build_batch_from_records,
    build_control_batch,
    decode_batch,
)
from pyklog.broker.record.compression import compress, decompress, xxh32
from pyklog.broker.record.convert import batches_to_message_set, message_set_to_batches
from pyklog.broker.record.legacy import build_message_set, decode_message_set
from pyklog.broker.record.reader import iter_batches

# magic 0, offset 0, null key, value b"v"; every field by hand
GOLDEN_V0 = bytes.fromhex(
    "0000000000000000"  # offset 0
    "0000000f"  # size 15 = crc 4 + magic 1 + attributes 1 + key length 4 + value length 4 + 1
    "d20cbff5"  # crc: CRC32 (IEEE) of magic .. end (checked below)
    "00"  # magic 0
    "00"  # attributes: no compression
    "ffffffff"  # key length -1: null
    "00000001"  # value length 1
    "76"  # "v"
)
# magic 1, offset 5, key b"k", value b"v", CreateTime 1000
GOLDEN_V1 = bytes.fromhex(
    "0000000000000005"  # offset 5
    "00000018"  # size 24 = 15 + 8 (timestamp) + 1 (key)
    "e4e321bc"  # crc
    "01"  # magic 1
    "00"  # attributes: no compression, CreateTime
    "00000000000003e8"  # timestamp 1000
    "00000001"
    "6b"  # key "k"
    "00000001"
    "76"  # value "v"
)

MSGS = [
    (None if i % 4 == 0 else b"k%d" % i, None if i % 9 == 0 else b"v%d" % i * (i % 7), 1000 + i * 3) for i in range(60)
]
LEGACY_CODECS = {0: [0, 1, 2, 3], 1: [0, 1, 2, 3]}


def test_golden_messages():
    assert zlib.crc32(GOLDEN_V0[16:]) == 0xD20CBFF5
    assert zlib.crc32(GOLDEN_V1[16:]) == 0xE4E321BC
    assert build_message_set([(None, b"v", None)], 0) == GOLDEN_V0
    assert build_message_set([(b"k", b"v", 1000)], 1, base_offset=5) == GOLDEN_V1
    (m0,) = decode_message_set(GOLDEN_V0)
    assert (m0.offset, m0.magic, m0.timestamp, m0.timestamp_type, m0.key, m0.value) == (0, 0, -1, -1, None, b"v")
    (m1,) = decode_message_set(GOLDEN_V1)
    assert (m1.offset, m1.magic, m1.timestamp, m1.timestamp_type, m1.key, m1.value) == (5, 1, 1000, 0, b"k", b"v")


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS[m]])
def test_round_trip(magic, codec):
    raw = build_message_set(MSGS, magic, codec, base_offset=100)
    got = decode_message_set(raw)
    assert [(m.offset, m.key, m.value) for m in got] == [(100 + i, k, v) for i, (k, v, _) in enumerate(MSGS)]
    assert [m.timestamp for m in got] == ([t for _, _, t in MSGS] if magic else [-1] * len(MSGS))
    if codec:  # one wrapper whose offset is the last inner offset
        offset, size, _crc, wmagic, attrs = struct.unpack_from(">qiIbb", raw)
        assert (offset, 12 + size, wmagic, attrs & 7) == (159, len(raw), magic, codec)


def _wrapper_inner_offsets(raw, magic):
    key_at = 18 if magic == 0 else 26
    assert struct.unpack_from(">i", raw, key_at)[0] == -1  # wrappers have null keys
    (vlen,) = struct.unpack_from(">i", raw, key_at + 4)
    inner = decompress(raw[17] & 7, raw[key_at + 8 : key_at + 8 + vlen])
    offsets, pos = [], 0
    while pos < len(inner):
        off, size = struct.unpack_from(">qi", inner, pos)
        offsets.append(off)
        pos += 12 + size
    return offsets


def test_inner_offsets_absolute_in_v0_relative_in_v1():
    msgs = MSGS[:3]
    assert _wrapper_inner_offsets(build_message_set(msgs, 0, "gzip", base_offset=50), 0) == [50, 51, 52]
    assert _wrapper_inner_offsets(build_message_set(msgs, 1, "gzip", base_offset=50), 1) == [0, 1, 2]
    # a v1 wrapper at offset 52 whose inner relative offsets are 7, 8, 9: absolute 50, 51, 52
    inner = build_message_set(msgs, 1, base_offset=7)
    wrapper = _message(52, 1, 1, 9999, None, compress("gzip", inner))
    assert [m.offset for m in decode_message_set(wrapper)] == [50, 51, 52]


def _message(offset, magic, attributes, timestamp, key, value):
    body = struct.pack(">bb", magic, attributes)
    if magic:
        body += struct.pack(">q", timestamp)
    body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
    body += struct.pack(">i", -1) if value is None else struct.pack(">i", len(value)) + value
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def _framed(offset, body):
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def test_log_append_time_wrapper_overrides_inner_timestamps():
    raw = build_message_set(MSGS[:3], 1, "snappy", timestamp_type=1)
    assert raw[17] == 0x0A  # snappy + LogAppendTime bit
    got = decode_message_set(raw)
    assert [(m.timestamp, m.timestamp_type) for m in got] == [(1006, 1)] * 3
    assert got[0].compression == 0  # the flattened inner message's own attributes
    plain = build_message_set(MSGS[:2], 1, timestamp_type=1)
    assert [(m.timestamp, m.timestamp_type, m.attributes) for m in decode_message_set(plain)] == [
        (1000, 1, 8),
        (1003, 1, 8),
    ]


def test_lz4_in_magic_0_uses_the_broken_checksum():
    raw = build_message_set(MSGS[:5], 0, "lz4")
    (vlen,) = struct.unpack_from(">i", raw, 22)
    frame = raw[26 : 26 + vlen]
    assert frame[6] == (xxh32(frame[:6]) >> 8) & 0xFF
    assert [m.value for m in decode_message_set(raw)] == [v for _, v, _ in MSGS[:5]]
    v1 = build_message_set(MSGS[:5], 1, "lz4")
    frame1 = v1[34 : 34 + struct.unpack_from(">i", v1, 30)[0]]
    assert frame1[6] == (xxh32(frame1[4:6]) >> 8) & 0xFF


def test_zstd_has_no_legacy_form():
    with pytest.raises(ValueError, match="zstd"):
        build_message_set(MSGS, 1, "zstd")
    with pytest.raises(ValueError, match="magic 0 or 1"):
        build_message_set(MSGS, 2)


def test_partial_trailing_message_ignored_by_decode_but_rejected_by_produce_conversion():
    raw = build_message_set(MSGS[:4], 1)
    for cut in range(len(raw) - 1, len(raw) - 30, -1):
        assert len(decode_message_set(raw[:cut])) == 3
        with pytest.raises(CorruptRecordError, match="partial"):
            message_set_to_batches(raw[:cut])


def test_corrupt_messages():
    bad_crc = bytearray(GOLDEN_V1)
    bad_crc[-1] ^= 1
    with pytest.raises(CorruptRecordError, match="CRC32 mismatch, stored 0xe4e321bc"):
        decode_message_set(bad_crc)
    cases = [
        (_message(0, 1, 0x40, 0, None, b"x"), "unused attribute bits"),
        (_message(0, 0, 0x08, 0, None, b"x"), "unused attribute bits"),
        (_framed(0, struct.pack(">bbqi", 1, 0, 0, -1) + struct.pack(">i", 9) + b"vv"), "runs past"),
        (_framed(0, struct.pack(">bbqi", 1, 0, 0, -3) + struct.pack(">i", 0)), "key length >= -1"),
        (_framed(0, struct.pack(">bbqi", 1, 0, 0, -1) + struct.pack(">i", 0) + b"xx"), "fields end"),
        (_message(3, 1, 1, 0, None, compress("gzip", build_message_set(MSGS[:2], 1, "gzip"))), "uncompressed inner"),
        (_message(3, 1, 1, 0, None, compress("gzip", b"")), "at least one inner"),
        (_message(3, 1, 1, 0, None, None), "read null"),
        (_message(3, 1, 4, 0, None, b"x"), "compression 0-3"),
        (_message(3, 1, 1, 0, None, b"not gzip at all"), "gzip"),
    ]
    for raw, message in cases:
        with pytest.raises(CorruptRecordError, match=message):
            decode_message_set(raw)
            pytest.fail(f"no error for {message!r}")
    with pytest.raises(CorruptRecordError, match="read a v2 batch"):
        decode_message_set(build_batch([(b"k", b"v", 0, ())]))


# -- conversion ---------------------------------------------------------------------------------
@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in LEGACY_CODECS[m]])
def test_message_set_to_batches(magic, codec):
    raw = build_message_set(MSGS, magic, codec, base_offset=1234)
    b = decode_batch(message_set_to_batches(raw))
    assert b.compression == codec
    assert [(r.offset, r.key, r.value, r.headers) for r in b.records] == [
        (i, k, v, ()) for i, (k, v, _) in enumerate(MSGS)
    ]
    assert [r.timestamp for r in b.records] == ([t for _, _, t in MSGS] if magic else [-1] * len(MSGS))
    assert decode_batch(message_set_to_batches(raw, compression="zstd", base_offset=9)).compression == 4
    assert decode_batch(message_set_to_batches(raw, compression="zstd", base_offset=9)).base_offset == 9


def test_message_set_to_batches_several_wrappers_and_empty():
    raw = (
        build_message_set(MSGS[:3], 1, "gzip")
        + build_message_set(MSGS[3:5], 1)
        + build_message_set(MSGS[5:9], 1, "snappy")
    )
    b = decode_batch(message_set_to_batches(raw))
    assert b.compression == 1 and [r.value for r in b.records] == [v for _, v, _ in MSGS[:9]]
    assert message_set_to_batches(b"") == b""


def _log_with_gaps(codec):
    recs = [Record(o, 5000 + o, b"k%d" % o, b"v%d" % o, (("h", b"dropped"),)) for o in (40, 41, 44, 47)]
    return (
        build_batch_from_records(recs, compression=codec)
        + build_control_batch(1, 3, 0, base_offset=48, timestamp_ms=9)
        + build_batch([(None, b"last", 7000, ())], base_offset=49, compression=codec)
    )


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_batches_to_message_set(magic, codec):
    log = _log_with_gaps(codec)
    raw = batches_to_message_set(log + log[:30], magic)  # partial trailing batch ignored
    got = decode_message_set(raw)
    assert [(m.offset, m.key, m.value) for m in got] == [
        (40, b"k40", b"v40"),
        (41, b"k41", b"v41"),
        (44, b"k44", b"v44"),
        (47, b"k47", b"v47"),
        (49, None, b"last"),
    ]
    assert [m.timestamp for m in got] == ([5040, 5041, 5044, 5047, 7000] if magic else [-1] * 5)
    wrappers = list(iter_batches(raw))
    expected_codec = 0 if codec == 4 else codec
    assert {w.compression for w in wrappers} == {expected_codec}
    assert len(wrappers) == (5 if expected_codec == 0 else 2)  # one wrapper per compressed batch
    assert all(w.magic == magic for w in wrappers)


def test_down_conversion_of_log_append_time():
    log = build_batch([(b"a", b"1", 10, ()), (b"b", b"2", 20, ())], compression=1, timestamp_type=1)
    got = decode_message_set(batches_to_message_set(log, 1))
    assert [(m.timestamp, m.timestamp_type) for m in got] == [(20, 1), (20, 1)]


# -- kafka-python cross-checks ------------------------------------------------------------------
def _kp_read(raw):
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(raw)
    out = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            return out
        assert batch.validate_crc()
        out.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)


def _kp_codecs(magic):
    # kafka-python needs the xxhash module for magic-0 lz4 (not installed), so that one is ours only
    return [c for c in LEGACY_CODECS[magic] if not (magic == 0 and c == 3)]


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in _kp_codecs(m)])
def test_kafka_python_reads_what_we_write(magic, codec):
    raw = build_message_set(MSGS, magic, codec, base_offset=300)
    ts = [t for _, _, t in MSGS] if magic else [None] * len(MSGS)
    assert _kp_read(raw) == [(300 + i, ts[i], k, v) for i, (k, v, _) in enumerate(MSGS)]
    down = batches_to_message_set(_log_with_gaps(codec), magic)
    assert [o for o, *_ in _kp_read(down)] == [40, 41, 44, 47, 49]


@pytest.mark.parametrize("magic,codec", [(m, c) for m in (0, 1) for c in _kp_codecs(m)])
def test_we_read_what_kafka_python_writes(magic, codec):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic, codec, 2**30)
    for i, (k, v, t) in enumerate(MSGS):
        builder.append(i, t if magic else None, k, v)
    raw = bytes(builder.build())
    ours = [(m.offset, None if m.timestamp == -1 else m.timestamp, m.key, m.value) for m in decode_message_set(raw)]
    assert ours == _kp_read(raw)
    assert [m.value for m in decode_message_set(raw)] == [v for _, v, _ in MSGS]
    b = decode_batch(message_set_to_batches(raw))
    assert [r.value for r in b.records] == [v for _, v, _ in MSGS] and b.compression == codec
