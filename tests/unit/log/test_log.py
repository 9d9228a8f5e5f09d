"""Log: append/read, segments and indexes, timestamps, retention, idempotence, recovery.

Real files in a tmp dir; batches built with broker.record.batch.build_batch."""

import os
import struct
import threading
import time

import pytest

from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidProducerEpochError,
    InvalidRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    OutOfOrderSequenceError,
    RecordListTooLargeError,
)
from pyklog.broker.log import Log, LogConfig
from pyklog.broker.log.index import OFFSET_ENTRY
from pyklog.broker.record.batch import build_batch, decode_batch
from pyklog.broker.record.header import HEADER_SIZE, parse_header, validate_crc


def batch(i, n=3, ts=None, size=100, **kw):
    ts = 1_000_000 + i if ts is None else ts
    return build_batch([(b"k%04d-%d" % (i, j), bytes([i % 256]) * size, ts, ()) for j in range(n)], **kw)


def decode_all(buf):
    out, pos = [], 0
    while pos < len(buf):
        b = decode_batch(buf, pos)
        out.append(b)
        pos += b.header.size
    return out


def read_all(lg, start=None, max_bytes=1 << 20):
    """Every record from ``start`` to the log end offset, by repeated reads."""
    off = lg.log_start_offset if start is None else start
    recs = []
    while off < lg.log_end_offset:
        data = lg.read(off, max_bytes).read_bytes()
        assert data, f"empty read at {off}"
        for b in decode_all(data):
            recs.extend(r for r in b.records if r.offset >= off)
            off = b.header.next_offset
    return recs


def open_log(tmp_path, name="topic-0", **cfg):
    return Log(str(tmp_path / name), LogConfig(**cfg))


def test_append_assigns_offsets_and_reads_whole_batches(tmp_path):
    lg = open_log(tmp_path)
    infos = [lg.append(batch(i)) for i in range(10)]
    assert [(a.first_offset, a.last_offset) for a in infos] == [(3 * i, 3 * i + 2) for i in range(10)]
    assert infos[0].log_append_time == -1 and infos[0].record_count == 3
    assert lg.log_end_offset == lg.high_watermark == 30
    one = len(batch(0))
    s = lg.read(4, 2 * one + 10)  # offset 4 is inside the second batch: it comes first
    assert s.first_offset == 3 and s.size == 2 * one
    got = decode_all(s.read_bytes())
    assert [b.header.base_offset for b in got] == [3, 6]
    assert got[0].records[1].value == bytes([1]) * 100
    # at least one whole batch even when it is larger than the limit, unless min_one=False
    assert lg.read(0, 10).size == one
    assert lg.read(0, 10, min_one=False).size == 0
    # the log end offset gives an empty slice, beyond / below is out of range
    assert lg.read(30, 1000).size == 0
    with pytest.raises(OffsetOutOfRangeError, match=r"offset 31 is outside the log's range \[0, 30\]"):
        lg.read(31, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(-1, 1000)
    # max_offset stops before the batch holding it
    s = lg.read(0, 1 << 20, max_offset=9)
    assert [b.header.base_offset for b in decode_all(s.read_bytes())] == [0, 3, 6]
    lg.close()


def test_fetch_slice_is_sendfile_ready(tmp_path):
    lg = open_log(tmp_path)
    lg.append(batch(0))
    s = lg.read(0, 1 << 20)
    r, w = os.pipe()
    try:
        sent = os.sendfile(w, s.file.fileno(), s.position, s.size)
        assert os.read(r, sent) == s.read_bytes()
    finally:
        os.close(r)
        os.close(w)
    lg.close()


def test_append_rewrites_only_base_offset_and_epoch(tmp_path):
    lg = open_log(tmp_path)
    lg.append(batch(0))
    original = batch(1, base_offset=12345)
    buf = bytearray(original)
    lg.append(buf, leader_epoch=7)  # a bytearray is updated in place
    stored = lg.read(3, 1 << 20).read_bytes()
    assert stored == bytes(buf)
    h = parse_header(stored, 0)
    assert (h.base_offset, h.partition_leader_epoch) == (3, 7)
    validate_crc(stored, 0, h)
    assert stored[HEADER_SIZE:] == original[HEADER_SIZE:]
    lg.close()


def test_append_rejects_bad_input_and_keeps_nothing(tmp_path):
    lg = open_log(tmp_path, max_message_bytes=2000, segment_bytes=100_000)
    lg.append(batch(0))
    bad = bytearray(batch(1))
    bad[-1] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        lg.append(bad)
    with pytest.raises(CorruptRecordError, match="declares"):
        lg.append(batch(1)[:-5])
    with pytest.raises(CorruptRecordError, match="expected a 61-byte batch header"):
        lg.append(batch(1) + b"\x00" * 10)
    with pytest.raises(MessageTooLargeError, match="exceeds max.message.bytes 2000"):
        lg.append(batch(1, n=30))
    with pytest.raises(RecordListTooLargeError):
        lg.append(b"".join(batch(i) for i in range(400)))
    with pytest.raises(CorruptRecordError, match="at least one record batch"):
        lg.append(b"")
    # two idempotent batches in one append are refused (Kafka: one batch per partition)
    with pytest.raises(InvalidRecordError, match="exactly one batch"):
        lg.append(
            batch(1, producer_id=5, producer_epoch=0, base_sequence=0)
            + batch(2, producer_id=5, producer_epoch=0, base_sequence=3)
        )
    assert lg.log_end_offset == 3
    assert [r.offset for r in read_all(lg)] == [0, 1, 2]
    lg.close()


def test_multi_batch_append(tmp_path):
    lg = open_log(tmp_path)
    info = lg.append(b"".join(batch(i) for i in range(4)))
    assert (info.first_offset, info.last_offset, info.record_count) == (0, 11, 12)
    assert [r.offset for r in read_all(lg)] == list(range(12))
    lg.close()


def test_log_append_time(tmp_path):
    lg = open_log(tmp_path, message_timestamp_type="LogAppendTime")
    before = int(time.time() * 1000)
    info = lg.append(batch(0, ts=5))
    assert info.log_append_time >= before
    raw = lg.read(0, 1 << 20).read_bytes()
    h = parse_header(raw, 0)
    validate_crc(raw, 0, h)
    assert h.timestamp_type == 1 and h.max_timestamp == info.log_append_time
    lg.close()


def test_segments_roll_by_size_and_reads_cross_boundaries(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, segment_bytes=4 * one + 10, index_interval_bytes=one)
    for i in range(30):
        lg.append(batch(i))
    segs = lg.segments
    assert len(segs) == 8
    assert [s.base_offset for s in segs] == [12 * k for k in range(8)]
    names = sorted(f for f in os.listdir(lg.dir) if f.endswith(".log"))
    assert names[1] == "00000000000000000012.log"
    assert all(os.path.exists(os.path.join(lg.dir, n[:-4] + ext)) for n in names for ext in (".index", ".timeindex"))
    # one read never crosses a segment; repeated reads cover everything in order
    s = lg.read(10, 1 << 20)
    assert s.first_offset == 9 and s.size == one  # last batch of the first segment only
    recs = read_all(lg, max_bytes=3 * one)
    assert [r.offset for r in recs] == list(range(90))
    assert recs[50].value == bytes([16]) * 100
    # reading from every offset gives the batch holding it first
    for off in range(90):
        assert lg.read(off, 1).first_offset == off - off % 3
    lg.close()


def test_index_entries_map_last_offset_to_batch_position(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, index_interval_bytes=2 * one)
    for i in range(20):
        lg.append(batch(i))
    lg.close()
    raw = open(os.path.join(lg.dir, "00000000000000000000.index"), "rb").read()
    entries = list(OFFSET_ENTRY.iter_unpack(raw))
    # one entry once more than 2 batches' bytes accumulated: every 3rd batch from the 4th
    assert entries == [(3 * b + 2, b * one) for b in (3, 6, 9, 12, 15, 18)]
    tsraw = open(os.path.join(lg.dir, "00000000000000000000.timeindex"), "rb").read()
    tentries = [struct.unpack(">qi", tsraw[i : i + 12]) for i in range(0, len(tsraw), 12)]
    assert tentries[0] == (1_000_003, 11)
    assert tentries[-1] == (1_000_019, 59)  # the final entry written at close


def test_roll_by_time_and_index_full(tmp_path):
    lg = open_log(tmp_path, segment_ms=1000)
    lg.append(batch(0, ts=10_000))
    lg.append(batch(1, ts=10_500))
    lg.append(batch(2, ts=11_001))  # more than segment.ms after the segment's first batch
    assert [s.base_offset for s in lg.segments] == [0, 6]
    lg.close()
    one = len(batch(0))
    lg = open_log(tmp_path, "full-0", index_interval_bytes=0, segment_index_bytes=24)
    for i in range(10):
        lg.append(batch(i))
    # a 24-byte offset index holds 3 entries, a time index 2: the segment rolls when full
    assert len(lg.segments) > 1
    assert [r.offset for r in read_all(lg, max_bytes=one)] == list(range(30))
    lg.close()


def test_timestamp_lookup_across_segments(tmp_path):
    one = len(build_batch([(b"k", b"v", 10_000 + j, ()) for j in range(3)]))
    lg = open_log(tmp_path, segment_bytes=5 * one, index_interval_bytes=one)
    for i in range(40):
        recs = [(b"k", b"v", 10_000 + 100 * i + j, ()) for j in range(3)]
        lg.append(build_batch(recs))
    assert len(lg.segments) > 3
    assert lg.offset_for_timestamp(0) == (0, 10_000)
    assert lg.offset_for_timestamp(10_000 + 100 * 17) == (51, 11_700)
    assert lg.offset_for_timestamp(10_000 + 100 * 17 + 1) == (52, 11_701)
    assert lg.offset_for_timestamp(10_000 + 100 * 17 + 3) == (54, 11_800)
    assert lg.offset_for_timestamp(10_000 + 100 * 39 + 2) == (119, 13_902)
    assert lg.offset_for_timestamp(10_000 + 100 * 39 + 3) is None
    assert lg.offset_for_timestamp(-1) == (120, -1)
    assert lg.offset_for_timestamp(-2) == (0, -1)
    lg.close()
    # after a clean reopen the segments' largest timestamps come from the time indexes
    again = Log(lg.dir, LogConfig(segment_bytes=5 * one, index_interval_bytes=one), clean_shutdown=True)
    assert again.offset_for_timestamp(10_000 + 100 * 17) == (51, 11_700)
    again.close()


def test_offsets_before(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, segment_bytes=2 * one)
    for i in range(6):
        lg.append(batch(i))
    assert [s.base_offset for s in lg.segments] == [0, 6, 12]
    assert lg.offsets_before(-1, 10) == [18, 12, 6, 0]
    assert lg.offsets_before(-1, 2) == [18, 12]
    assert lg.offsets_before(-2, 10) == [0]
    assert lg.offsets_before(int(time.time() * 1000) + 60_000, 10) == [18, 12, 6, 0]
    assert lg.offsets_before(1000, 10) == []
    lg.close()


def test_reads_never_see_partial_appends(tmp_path):
    lg = open_log(tmp_path, segment_bytes=200_000)
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            leo = lg.log_end_offset
            if leo == 0:
                continue
            try:
                data = lg.read(max(lg.log_start_offset, leo - 30), 50_000).read_bytes()
                for b in decode_all(data):
                    assert b.header.next_offset <= lg.log_end_offset
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)
                return

    t = threading.Thread(target=reader)
    t.start()
    for i in range(600):
        lg.append(batch(i, n=5, size=200))
    stop.set()
    t.join()
    assert not errors
    assert len(read_all(lg)) == 3000
    lg.close()


def test_flush_interval_messages_advances_recovery_point(tmp_path):
    lg = open_log(tmp_path, flush_interval_messages=6)
    lg.append(batch(0))
    assert lg.recovery_point == 0 and lg.unflushed_messages == 3
    lg.append(batch(1))
    assert lg.recovery_point == 6 and lg.unflushed_messages == 0
    lg.close()


def test_retention_by_time_and_size(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, segment_bytes=2 * one, retention_ms=10_000, file_delete_delay_ms=300)
    for i in range(10):
        lg.append(batch(i, ts=100_000 + 1000 * i))
    assert len(lg.segments) == 5
    held = lg.read(0, 1 << 20)  # an in-flight fetch of the first segment
    expected = held.read_bytes()
    # at 113_500 the segments whose largest timestamp is older than 103_500 go: the first two
    assert lg.delete_old_segments(now_ms=113_500) == 2
    assert lg.log_start_offset == 12
    assert [s.base_offset for s in lg.segments] == [12, 18, 24]
    with pytest.raises(OffsetOutOfRangeError):
        lg.read(0, 100)
    deleted = sorted(f for f in os.listdir(lg.dir) if f.endswith(".deleted"))
    assert "00000000000000000000.log.deleted" in deleted and len(deleted) == 6
    assert held.read_bytes() == expected  # still readable until the delayed unlink
    deadline = time.time() + 10
    while any(f.endswith(".deleted") for f in os.listdir(lg.dir)) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(f.endswith(".deleted") for f in os.listdir(lg.dir))
    # never the active segment, even when everything is expired
    assert lg.delete_old_segments(now_ms=10**12) == 2
    assert len(lg.segments) == 1 and lg.log_start_offset == 24
    assert [r.offset for r in read_all(lg)] == list(range(24, 30))
    lg.close()

    lg = open_log(
        tmp_path, "size-0", segment_bytes=2 * one, retention_bytes=5 * one, retention_ms=-1, file_delete_delay_ms=0
    )
    for i in range(10):
        lg.append(batch(i))
    assert lg.delete_old_segments() == 2  # 10 batches, keep >= 5: drop two 2-batch segments
    assert lg.size == 6 * one and lg.log_start_offset == 12
    assert not any(f.endswith(".deleted") for f in os.listdir(lg.dir))
    lg.close()
    # the log start offset survives a reopen through its checkpointed value
    again = Log(lg.dir, LogConfig(segment_bytes=2 * one), log_start_offset=12, clean_shutdown=True)
    assert again.log_start_offset == 12 and again.log_end_offset == 30
    again.close()


def idem(i, seq, epoch=0, pid=42, n=2):
    return batch(i, n=n, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_idempotent_producer_dedup_and_errors(tmp_path):
    lg = open_log(tmp_path)
    lg.append(batch(100))  # offsets 0-2 from a plain producer
    a = lg.append(idem(0, 0))
    b = lg.append(idem(1, 2))
    assert (a.first_offset, b.first_offset) == (3, 5)
    retry = lg.append(idem(0, 0))  # the retried first batch: original offsets, nothing appended
    assert retry.duplicate and (retry.first_offset, retry.last_offset) == (3, 4)
    assert lg.log_end_offset == 7
    with pytest.raises(OutOfOrderSequenceError, match="expected sequence 4, read 6"):
        lg.append(idem(2, 6))
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(2, 3, epoch=1))  # a new epoch must start at sequence 0
    lg.append(idem(2, 0, epoch=1))
    with pytest.raises(InvalidProducerEpochError, match="epoch 0 is older than the current epoch 1"):
        lg.append(idem(3, 4, epoch=0))
    # the last five batches are remembered
    for k in range(1, 7):
        lg.append(idem(10 + k, 2 * k, epoch=1))
    assert lg.append(idem(12, 4, epoch=1)).duplicate  # 5th newest
    with pytest.raises(OutOfOrderSequenceError):
        lg.append(idem(11, 2, epoch=1))  # 6th newest: forgotten, so out of order
    lg.close()


@pytest.mark.parametrize("snapshot", [True, False])
def test_idempotent_state_survives_restart(tmp_path, snapshot):
    one = len(idem(0, 0))
    lg = open_log(tmp_path, segment_bytes=3 * one)
    for k in range(8):
        lg.append(idem(k, 2 * k))
    assert len(lg.segments) > 1
    lg.close()
    if not snapshot:
        for f in os.listdir(lg.dir):
            if f.endswith(".snapshot"):
                os.unlink(os.path.join(lg.dir, f))
    again = Log(lg.dir, LogConfig(segment_bytes=3 * one), clean_shutdown=snapshot)
    dup = again.append(idem(7, 14))
    assert dup.duplicate and dup.first_offset == 14
    with pytest.raises(OutOfOrderSequenceError):
        again.append(idem(9, 18))
    assert again.append(idem(8, 16)).first_offset == 16
    assert again.producer_state(42).last_seq == 17
    again.close()


# ---------------------------------------------------------------------------------- recovery


def build_damage_log(tmp_path, one_segment=True):
    one = len(batch(0))
    seg_bytes = 1 << 30 if one_segment else 6 * one
    lg = open_log(tmp_path, segment_bytes=seg_bytes, index_interval_bytes=one)
    for i in range(20):
        lg.append(batch(i))
    expected = [(r.offset, r.key, r.value) for r in read_all(lg)]
    lg.close()
    return lg.dir, one, expected, LogConfig(segment_bytes=seg_bytes, index_interval_bytes=one)


def reopen_unclean(d, cfg):
    lg = Log(d, cfg, recovery_point=0, clean_shutdown=False)
    return lg, [(r.offset, r.key, r.value) for r in read_all(lg)]


def test_recovery_truncates_a_torn_write(tmp_path):
    d, one, expected, cfg = build_damage_log(tmp_path)
    path = os.path.join(d, "00000000000000000000.log")
    os.truncate(path, 12 * one + 150)  # the 13th batch is cut in the middle
    lg, got = reopen_unclean(d, cfg)
    assert got == expected[:36]
    assert lg.log_end_offset == 36
    (cut,) = lg.last_recovery.cuts
    assert (cut.segment, cut.position, cut.bytes_cut) == ("00000000000000000000.log", 12 * one, 150)
    assert "torn batch" in cut.reason
    assert os.path.getsize(path) == 12 * one
    info = lg.append(batch(99))  # appends continue at the cut
    assert info.first_offset == 36
    lg.close()
    os.truncate(path, 10 * one + 20)  # cut inside a batch header
    lg, got = reopen_unclean(d, cfg)
    assert got == expected[:30]
    assert lg.last_recovery.cuts[0].reason == "partial batch header: 20 bytes at the end of the file"
    lg.close()


def test_recovery_drops_appended_garbage(tmp_path):
    d, one, expected, cfg = build_damage_log(tmp_path)
    path = os.path.join(d, "00000000000000000000.log")
    with open(path, "ab") as f:
        f.write(os.urandom(3000))
    lg, got = reopen_unclean(d, cfg)
    assert got == expected
    assert lg.last_recovery.truncated_bytes == 3000
    assert lg.last_recovery.cuts[0].position == 20 * one
    lg.close()
    # a plausible header followed by zeros (an inode grown before its blocks were written)
    fake = bytearray(batch(0))
    fake[HEADER_SIZE:] = bytes(len(fake) - HEADER_SIZE)
    with open(path, "ab") as f:
        f.write(struct.pack(">q", 60) + fake[8:])
    lg, got = reopen_unclean(d, cfg)
    assert got == expected and lg.last_recovery.cuts[0].reason == "CRC-32C mismatch"
    lg.close()


@pytest.mark.parametrize("where", ["header", "body"])
def test_recovery_cuts_only_a_flipped_batch_and_keeps_later_segments(tmp_path, where):
    d, one, expected, cfg = build_damage_log(tmp_path, one_segment=False)
    segs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    assert len(segs) == 4  # 6 batches per segment (18 offsets)
    path = os.path.join(d, segs[1])
    raw = bytearray(open(path, "rb").read())
    bad_pos = 2 * one + (30 if where == "header" else one - 7)  # inside the third batch
    raw[bad_pos] ^= 0x10
    open(path, "wb").write(raw)
    lg, got = reopen_unclean(d, cfg)
    # everything but the third batch of the second segment (offsets 24..26), at its offset
    assert got == [r for r in expected if not 24 <= r[0] <= 26]
    assert lg.log_end_offset == 60
    assert not lg.last_recovery.cuts and not lg.last_recovery.deleted_segments
    (rng,) = lg.last_recovery.skipped
    assert (rng.segment, rng.position, rng.bytes_skipped) == (segs[1], 2 * one, one)
    assert (rng.first_offset_lost, rng.last_offset_lost, rng.records_lost) == (24, 26, 3)
    assert sorted(f for f in os.listdir(d) if f.endswith(".log")) == segs
    assert os.path.getsize(path) == 5 * one
    assert lg.read(25, 100).first_offset == 27  # a fetch inside the gap gets the next batch
    lg.close()


def test_recovery_starts_at_the_recovery_point(tmp_path):
    d, _one, _expected, cfg = build_damage_log(tmp_path, one_segment=False)
    lg = Log(d, cfg, recovery_point=40, clean_shutdown=False)
    # only the segment holding offset 40 (base 36) and later ones are revalidated
    assert lg.last_recovery.recovered_segments == 2
    lg.close()


def test_clean_shutdown_skips_recovery(tmp_path):
    d, one, expected, cfg = build_damage_log(tmp_path)
    path = os.path.join(d, "00000000000000000000.log")
    raw = bytearray(open(path, "rb").read())
    raw[5 * one - 3] ^= 1  # a bit inside a record of the fifth batch
    open(path, "wb").write(raw)
    lg = Log(d, cfg, clean_shutdown=True)
    assert lg.last_recovery.recovered_segments == 0 and not lg.last_recovery.cuts
    assert lg.log_end_offset == 60  # nothing validated, nothing cut
    lg.close()
    lg, got = reopen_unclean(d, cfg)
    # the damaged fifth batch (offsets 12..14) is cut out, the 15 batches after it are kept
    assert got == [r for r in expected if not 12 <= r[0] <= 14]
    assert lg.last_recovery.skipped[0].reason == "CRC-32C mismatch"
    lg.close()


def test_deleted_or_corrupt_index_is_rebuilt(tmp_path):
    d, _one, expected, cfg = build_damage_log(tmp_path)
    idx = os.path.join(d, "00000000000000000000.index")
    tidx = os.path.join(d, "00000000000000000000.timeindex")
    before, tbefore = open(idx, "rb").read(), open(tidx, "rb").read()
    assert len(before) > 0
    os.unlink(idx)
    lg = Log(d, cfg, clean_shutdown=True)
    assert lg.last_recovery.rebuilt_indexes == ["00000000000000000000.log"]
    assert [(r.offset, r.key, r.value) for r in read_all(lg)] == expected
    lg.close()
    assert open(idx, "rb").read() == before and open(tidx, "rb").read() == tbefore
    with open(idx, "ab") as f:  # an entry pointing past the end of the segment
        f.write(OFFSET_ENTRY.pack(200, 10**6))
    lg = Log(d, cfg, clean_shutdown=True)
    assert lg.last_recovery.rebuilt_indexes and lg.log_end_offset == 60
    lg.close()
    assert open(idx, "rb").read() == before


def test_truncate_to(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, segment_bytes=3 * one)
    for i in range(10):
        lg.append(idem(i, 3 * i, n=3) if i < 5 else batch(i))
    lg.truncate_to(10)  # inside the idempotent batch 9..11: that batch goes too
    assert lg.log_end_offset == 9
    assert [r.offset for r in read_all(lg)] == list(range(9))
    # producer state rebuilt without the cut batches (snapshots above the end are dropped)
    assert lg.producer_state(42).last_seq == 8
    assert lg.append(idem(3, 9, n=3)).first_offset == 9
    lg.truncate_to(0)
    assert lg.log_end_offset == 0 and len(lg.segments) == 1
    lg.close()


def test_closed_log_refuses_appends_and_topic_dir_names(tmp_path):
    lg = open_log(tmp_path)
    lg.close()
    from pyklog.broker.errors import InvalidTopicError, KafkaStorageError

    with pytest.raises(KafkaStorageError, match="closed"):
        lg.append(batch(0))
    with pytest.raises(InvalidTopicError, match="<topic>-<partition>"):
        Log(str(tmp_path / "notapartition"))
    with pytest.raises(InvalidTopicError, match="not a legal topic name"):
        Log(str(tmp_path / "bad topic!-0"))


def test_idle_producers_expire(tmp_path):
    lg = open_log(tmp_path, producer_id_expiration_ms=1000)
    lg.append(idem(0, 0))
    ts = lg.producer_state(42).last_timestamp
    assert lg.expire_producers(now_ms=ts + 500) == 0
    assert lg.expire_producers(now_ms=ts + 1500) == 1
    assert lg.producer_state(42) is None
    assert lg.append(idem(5, 77)).first_offset == 2  # unknown again: any sequence accepted
    lg.close()


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_appends_and_reads_match_a_model(tmp_path, seed):
    import random

    rnd = random.Random(seed)
    cfg = {"segment_bytes": rnd.choice([3000, 8000]), "index_interval_bytes": rnd.choice([0, 500, 4096])}
    lg = open_log(tmp_path, **cfg)
    model = []  # (offset, value)
    for i in range(150):
        n = rnd.randint(1, 6)
        size = rnd.randint(1, 400)
        info = lg.append(build_batch([(None, bytes([i % 256]) * size, 1000 + i, ())] * n))
        model.extend((info.first_offset + j, bytes([i % 256]) * size) for j in range(n))
        if rnd.random() < 0.05:
            lg.close()
            lg = Log(lg.dir, LogConfig(**cfg), clean_shutdown=rnd.random() < 0.5)
    for _ in range(200):
        off = rnd.randrange(0, len(model))
        max_bytes = rnd.choice([1, 100, 1000, 5000])
        s = lg.read(off, max_bytes)
        data = s.read_bytes()
        assert s.size <= max_bytes or len(decode_all(data)) == 1
        recs = [r for b in decode_all(data) for r in b.records]
        assert recs[0].offset <= off <= recs[-1].offset or recs[0].offset == off
        assert [(r.offset, r.value) for r in recs] == model[recs[0].offset : recs[-1].offset + 1]
    assert [(r.offset, r.value) for r in read_all(lg, max_bytes=2000)] == model
    lg.close()


def test_append_input_kinds_give_identical_logs(tmp_path):
    """bytes (pwritev, zero copy), memoryview, bytearray (in place) and >256 batches (one copy)
    all store the same bytes; the caller's bytes/memoryview are left untouched."""
    payload = b"".join(batch(i, n=1, size=10) for i in range(300))
    frame = bytearray(b"xx" + payload)
    stored = []
    for kind in ("bytes", "memoryview", "bytearray", "many"):
        lg = open_log(tmp_path, f"{kind}-0", segment_bytes=1 << 20)
        lg.append(batch(999))
        if kind == "bytes":
            one = len(batch(0, n=1, size=10))
            for k in range(0, 300, 100):
                lg.append(payload[k * one : (k + 100) * one])
        elif kind == "memoryview":
            lg.append(memoryview(frame)[2:])
        elif kind == "bytearray":
            lg.append(bytearray(payload))
        else:
            lg.append(payload)  # 300 batches: copied once
        with open(lg.active_segment.log_path, "rb") as f:
            stored.append(f.read())
        assert [r.offset for r in read_all(lg)] == list(range(303))
        lg.close()
    assert stored[0] == stored[1] == stored[2] == stored[3]
    assert bytes(frame[2:]) == payload  # not modified


def test_concurrent_appends_get_distinct_contiguous_offsets(tmp_path):
    one = len(batch(0))
    lg = open_log(tmp_path, segment_bytes=20 * one, retention_bytes=100 * one, file_delete_delay_ms=1000)
    results, errors = [], []

    def producer(t):
        try:
            for i in range(50):
                info = lg.append(batch(t * 100 + i))
                results.append((info.first_offset, t * 100 + i))
                if i % 10 == 0:
                    lg.delete_old_segments()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=producer, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(o for o, _ in results) == list(range(0, 600, 3))
    # whatever retention left is intact and in order
    by_offset = dict(results)
    for r in read_all(lg):
        assert r.value == bytes([by_offset[r.offset - r.offset % 3] % 256]) * 100
    lg.close()


@pytest.mark.parametrize("codec", ["none", "lz4", "zstd"])
def test_compacted_log_refuses_null_keys_and_keeps_nothing_of_the_append(tmp_path, codec):
    """cleanup.policy=compact: a record without a key is refused at append (Kafka's
    LogValidator), so the cleaner never has to drop it silently; nothing of the append is
    written, not even the valid batches in front of the bad one."""
    from pyklog.broker.log.validator import RecordValidationError

    lg = open_log(tmp_path, cleanup_policy="compact")
    keyed = build_batch([(b"a", b"1", 5, ()), (b"b", None, 6, ())], compression=codec)  # + a tombstone
    keyless = build_batch([(b"c", b"2", 7, ()), (None, b"3", 8, ())], compression=codec)
    assert lg.append(keyed).last_offset == 1
    with pytest.raises(RecordValidationError) as e:
        lg.append(keyed + keyless)
    assert e.value.code == 87 and [i for i, _ in e.value.record_errors] == [1]
    assert "without key in topic partition topic-0" in e.value.record_errors[0][1]
    assert lg.log_end_offset == 2 and [r.key for r in read_all(lg)] == [b"a", b"b"]
    lg.close()
    # the same batch goes to a delete topic untouched
    lg = open_log(tmp_path, name="plain-0")
    assert lg.append(keyless).record_count == 2
    lg.close()


def test_delayed_deletes_and_sealed_flushes_run_on_the_given_scheduler(tmp_path):
    """The log's background jobs (fsync after a roll, file.delete.delay.ms) are tasks of the
    scheduler it was given; no thread of their own."""
    from pyklog.broker.common.scheduler import Scheduler

    one = len(batch(0))
    sched = Scheduler("test-log-scheduler")
    try:
        before = {t.name for t in threading.enumerate()}
        lg = Log(
            str(tmp_path / "sched-0"),
            LogConfig(segment_bytes=2 * one, retention_bytes=2 * one, retention_ms=-1, file_delete_delay_ms=60_000),
            scheduler=sched,
        )
        for i in range(6):
            lg.append(batch(i))
        # the fsyncs of the sealed segments advance the recovery point in the background
        deadline = time.time() + 10
        while lg.recovery_point < lg.segments[-1].base_offset and time.time() < deadline:
            time.sleep(0.02)
        assert lg.recovery_point == lg.segments[-1].base_offset
        assert lg.delete_old_segments() == 2
        assert sched.pending() == 1  # one delayed delete of both segments, 60 s away
        assert len([f for f in os.listdir(lg.dir) if f.endswith(".log.deleted")]) == 2
        assert {t.name for t in threading.enumerate()} - before == set()
        lg.close()  # carries the pending delete out now and cancels the task
        assert not any(f.endswith(".deleted") for f in os.listdir(lg.dir))
        assert sched.pending() == 0
    finally:
        sched.shutdown()


def test_close_carries_out_deletes_the_shut_down_scheduler_dropped(tmp_path):
    """The LogManager's order: its scheduler is shut down (dropping the delayed deletes), then
    the logs are closed; the segments are unlinked all the same, and a delete requested after
    the shutdown is kept for close()."""
    from pyklog.broker.common.scheduler import Scheduler

    one = len(batch(0))
    sched = Scheduler("test-log-scheduler")
    lg = Log(
        str(tmp_path / "drop-0"),
        LogConfig(segment_bytes=2 * one, retention_bytes=2 * one, retention_ms=-1, file_delete_delay_ms=60_000),
        scheduler=sched,
    )
    for i in range(4):
        lg.append(batch(i))
    assert lg.delete_old_segments() == 1
    sched.shutdown()
    for i in range(4, 6):
        lg.append(batch(i))  # rolls while the scheduler is down: the flush is left to close()
    assert lg.delete_old_segments() == 1
    assert len([f for f in os.listdir(lg.dir) if f.endswith(".log.deleted")]) == 2
    lg.close()
    assert not any(f.endswith(".deleted") for f in os.listdir(lg.dir))
    assert lg.recovery_point == lg.log_end_offset


@pytest.mark.parametrize("how", ["clean-restart", "roll-snapshot", "truncate"])
def test_last_five_batches_deduplicated_after_a_reload(tmp_path, how):
    """Up to 5 batches of an idempotent producer may be in flight: after any reload of the producer
    state (a clean restart's snapshot at the log end, a roll's snapshot, a follower's truncation) a
    resend of each of the last 5 batches is a duplicate answered with its original offsets, not an
    OutOfOrderSequenceError (a snapshot holds only the last batch per producer, as Kafka's; the
    loader fills in the earlier ones from the log).  Two producers interleave; the 6th newest is
    still forgotten."""
    one = len(idem(0, 0))
    seg = 8 * one if how == "roll-snapshot" else 1 << 20
    lg = open_log(tmp_path, segment_bytes=seg)
    offsets = {}
    for k in range(10):
        for pid in (42, 43):
            offsets[(pid, k)] = lg.append(idem(k, 2 * k, pid=pid)).first_offset
    if how == "truncate":  # a restarted follower appends a little, then truncates on a leader change
        lg.close()
        lg = Log(lg.dir, LogConfig(segment_bytes=seg), clean_shutdown=True)  # snapshot at the end
        kept = lg.append(idem(98, 0, pid=77)).last_offset
        lg.append(idem(99, 2, pid=77))
        lg.truncate_to(kept + 1)
        assert lg.producer_state(77).last_seq == 1
    elif how == "roll-snapshot":
        assert len(lg.segments) > 2
        lg.append(idem(50, 0, pid=88))  # a roll snapshot above producer 42's batches
        lg.close()
        for f in os.listdir(lg.dir):  # keep only the roll snapshots (no clean-shutdown one)
            if f.endswith(".snapshot") and int(f.split(".")[0]) == lg.log_end_offset:
                os.unlink(os.path.join(lg.dir, f))
        lg = Log(lg.dir, LogConfig(segment_bytes=seg), clean_shutdown=True)
    else:
        lg.close()
        lg = Log(lg.dir, LogConfig(segment_bytes=seg), clean_shutdown=True)
    end = lg.log_end_offset
    for pid in (42, 43):
        for k in range(5, 10):  # the last five, newest last
            dup = lg.append(idem(k, 2 * k, pid=pid))
            assert dup.duplicate and dup.first_offset == offsets[(pid, k)], (pid, k)
        with pytest.raises(OutOfOrderSequenceError):
            lg.append(idem(4, 8, pid=pid))  # the 6th newest: forgotten, as Kafka
    assert lg.log_end_offset == end
    assert lg.append(idem(10, 20, pid=42)).first_offset == end
    lg.close()


def test_backfill_reads_back_a_bounded_window(tmp_path):
    """The loader's read-back of earlier batches stops at ``max_bytes`` (an idle producer whose
    batches lie further back keeps only its last one) and reads nothing for a producer whose
    earliest batch is its epoch's first (sequence 0: nothing came before it)."""
    from pyklog.broker.log.loader import backfill_batches
    from pyklog.broker.log.producer_state import ProducerStateManager

    lg = open_log(tmp_path)
    for k in range(6):
        lg.append(idem(k, 2 * k, pid=42))
    filler = batch(0, n=1, size=1000)
    for _ in range(300):  # ~300 KB of other writes after producer 42's
        lg.append(filler)
    lg.append(idem(90, 0, pid=55))  # a new producer: one batch at sequence 0
    lg.close()
    lg = Log(lg.dir, LogConfig(), clean_shutdown=True)
    state = ProducerStateManager(lg.dir)
    end = state.load_latest(lg.log_end_offset)
    assert end == lg.log_end_offset and len(state.get(42).batches) == 1
    assert state.short_of_batches() == {42}  # 55 starts at 0
    scanned = backfill_batches(state, lg.segments, end, max_bytes=64 * 1024)
    assert scanned < 64 * 1024 + 4096 + 2000 and len(state.get(42).batches) == 1  # too far back: kept
    scanned = backfill_batches(state, lg.segments, end, max_bytes=1 << 20)
    assert [b.first_seq for b in state.get(42).batches] == [2, 4, 6, 8, 10]
    assert scanned < 1 << 20  # stopped once complete
    lg.close()


def test_sealed_segments_hold_no_index_descriptors_once_flushed(tmp_path):
    """One descriptor per segment (its .log) plus the active segment's indexes: a sealed segment's
    three indexes are closed once its background flush made them durable (they used to stay open,
    three descriptors per segment written since start), and stay readable from memory."""
    from pyklog.broker.common.scheduler import Scheduler

    def fds_under(d):
        out = 0
        for fd in os.listdir("/proc/self/fd"):
            try:
                out += os.readlink(f"/proc/self/fd/{fd}").startswith(d)
            except OSError:
                pass
        return out

    one = len(batch(0))
    sched = Scheduler("test-fds")
    try:
        lg = Log(str(tmp_path / "fds-0"), LogConfig(segment_bytes=2 * one, index_interval_bytes=1), scheduler=sched)
        for i in range(12):
            lg.append(batch(i))
        assert len(lg.segments) == 6
        deadline = time.time() + 10
        while lg.recovery_point < lg.segments[-1].base_offset and time.time() < deadline:
            time.sleep(0.02)
        assert lg.recovery_point == lg.segments[-1].base_offset
        # 6 .log files + the active segment's offset and time index (its txn index never opened)
        assert fds_under(lg.dir) <= 6 + 3
        assert [r.offset for r in read_all(lg)] == list(range(36))
        lg.truncate_to(5)  # a sealed segment written again opens its index lazily
        lg.append(batch(99))
        assert read_all(lg)[-1].value == bytes([99]) * 100
        lg.close()
    finally:
        sched.shutdown(wait=True, timeout_s=5)


def test_flush_racing_the_roll_flush_that_releases_a_sealed_segments_indexes(tmp_path, monkeypatch):
    """``Log.flush`` fsyncs outside the lock while a roll's background flush makes the sealed
    segment durable and then closes its index descriptors.  An index closed between the moment
    ``Log.flush`` took its descriptor and its fsync is not a storage error: the log stays online."""
    from pyklog.broker.common.scheduler import Scheduler

    stopped = Scheduler("stopped")
    stopped.shutdown()  # no background flush: the test runs it at the moment it chooses
    one = len(batch(0))
    lg = Log(str(tmp_path / "t-0"), LogConfig(segment_bytes=2 * one), scheduler=stopped)
    for i in range(3):
        lg.append(batch(i))
    sealed = lg.segments[0]
    assert len(lg.segments) == 2 and sealed.time_index._fd >= 0
    real_fsync, raced = os.fsync, []

    def fsync(fd):
        if fd == sealed.time_index._fd and not raced:
            raced.append(fd)
            lg._flush_sealed(sealed, lg.segments[1].base_offset)  # the roll's task, finishing first
            assert sealed.time_index._fd == -1  # it released the descriptor Log.flush is about to sync
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    lg.flush()
    assert raced and lg.recovery_point == lg.log_end_offset
    lg.append(batch(3))  # still online
    monkeypatch.undo()
    lg.close()
