"""Recovery from damaged bytes in the middle of a log (pyklog.broker.log.loader, LogSegment.recover
with resync): a damaged batch costs only its own bytes, the valid batches after it stay readable at
their offsets, a torn tail of the active segment is still truncated.  Real segment files written
by a real Log, damaged by flipping real bytes, reopened as after an unclean shutdown."""

from __future__ import annotations

import logging
import os

import pytest

from pyklog.broker.log import Log, LogConfig
from pyklog.broker.log import segment as segment_mod
from pyklog.broker.record.batch import build_batch, decode_batch

PER_BATCH = 3
BATCHES = 24  # 4 segments of 6 batches: offsets 0..71


def batch(i, **kw):
    return build_batch(
        [(b"k%04d-%d" % (i, j), bytes([i % 256]) * 100, 1_000_000 + i, ()) for j in range(PER_BATCH)], **kw
    )


ONE = len(batch(0))


def config():
    return LogConfig(segment_bytes=6 * ONE, index_interval_bytes=ONE)


def write_log(tmp_path, batches=BATCHES):
    """Appends ``batches`` idempotent batches (producer 42) and leaves the log unclosed, as a
    SIGKILL would (flushed, so the bytes are on disk; no clean-shutdown snapshot)."""
    d = str(tmp_path / "topic-0")
    lg = Log(d, config())
    for i in range(batches):
        lg.append(batch(i, producer_id=42, producer_epoch=0, base_sequence=PER_BATCH * i))
    lg.flush()
    segs = sorted(f for f in os.listdir(d) if f.endswith(".log"))
    for s in lg.segments:
        s.close_handles()
    return d, segs


def reopen(d):
    return Log(d, config(), recovery_point=0, clean_shutdown=False)


def flip(d, seg, pos):
    path = os.path.join(d, seg)
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ 0x10]))


def offsets(lg):
    """Every record offset readable from the log start, by Fetch-sized reads (each batch is
    decoded, so a returned damaged batch would fail its CRC check here)."""
    off, out = lg.log_start_offset, []
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).read_bytes()
        assert data, f"empty read at {off}"
        pos = 0
        while pos < len(data):
            b = decode_batch(data, pos)
            out.extend(r.offset for r in b.records if r.offset >= off)
            off = b.header.next_offset
            pos += b.header.size
    return out


def batch_offsets(i):
    return set(range(PER_BATCH * i, PER_BATCH * (i + 1)))


ALL = set(range(PER_BATCH * BATCHES))


def errors(caplog):
    return [
        r.getMessage() for r in caplog.records if r.levelno == logging.ERROR and r.name == "pyklog.broker.log.loader"
    ]


def test_flipped_byte_in_a_middle_batch_of_segment_2_of_4(tmp_path, caplog):
    d, segs = write_log(tmp_path)
    assert len(segs) == 4
    flip(d, segs[1], 3 * ONE + ONE // 2)  # inside the 4th batch of segment 2: batch 9, offsets 27..29
    caplog.set_level(logging.WARNING)
    lg = reopen(d)
    got = offsets(lg)
    assert len(got) == len(set(got))
    assert set(got) == ALL - batch_offsets(9)  # the gap is exactly the damaged batch
    assert lg.log_end_offset == 72
    rep = lg.last_recovery
    assert not rep.cuts and not rep.deleted_segments
    (rng,) = rep.skipped
    assert (rng.segment, rng.position, rng.bytes_skipped) == (segs[1], 3 * ONE, ONE)
    assert (rng.first_offset_lost, rng.last_offset_lost, rng.records_lost) == (27, 29, 3)
    (msg,) = errors(caplog)
    assert os.path.join(d, segs[1]) in msg and f"[{3 * ONE}, {4 * ONE})" in msg
    assert "offsets 27..29 lost" in msg and "3 records" in msg
    # producer state and indexes are consistent: the next sequence appends, a retry is a duplicate
    dup = lg.append(batch(BATCHES - 1, producer_id=42, producer_epoch=0, base_sequence=PER_BATCH * (BATCHES - 1)))
    assert dup.duplicate
    nxt = lg.append(batch(BATCHES, producer_id=42, producer_epoch=0, base_sequence=PER_BATCH * BATCHES))
    assert nxt.first_offset == 72
    # a read at any offset of the gap starts at the next batch (base offset 30)
    assert [lg.read(o, 1).first_offset for o in (26, 27, 28, 29, 30)] == [24, 30, 30, 30, 30]
    lg.close()
    # a clean restart (indexes loaded, nothing revalidated) reads the same thing
    lg = Log(d, config(), clean_shutdown=True)
    assert set(offsets(lg)) == (ALL | batch_offsets(BATCHES)) - batch_offsets(9)
    lg.close()


def test_torn_tail_of_the_active_segment_is_truncated_as_before(tmp_path, caplog):
    d, segs = write_log(tmp_path)
    flip(d, segs[3], 5 * ONE + ONE // 2)  # the last batch of the active segment
    caplog.set_level(logging.WARNING)
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(BATCHES - 1)
    assert lg.log_end_offset == 69  # truncated: the next append reuses the offsets
    (cut,) = lg.last_recovery.cuts
    assert (cut.segment, cut.position, cut.bytes_cut) == (segs[3], 5 * ONE, ONE)
    assert not lg.last_recovery.skipped and not errors(caplog)
    assert lg.append(batch(99)).first_offset == 69
    lg.close()


def test_two_damaged_ranges_in_two_segments(tmp_path, caplog):
    d, segs = write_log(tmp_path)
    flip(d, segs[1], 1 * ONE + 40)  # batch 7 (header field after the CRC)
    flip(d, segs[2], 4 * ONE + 200)  # batch 16
    flip(d, segs[2], 2 * ONE + 8)  # batch 14: its batchLength, so resync has to scan
    caplog.set_level(logging.WARNING)
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(7) - batch_offsets(14) - batch_offsets(16)
    assert [(r.segment, r.first_offset_lost, r.last_offset_lost) for r in lg.last_recovery.skipped] == [
        (segs[1], 21, 23),
        (segs[2], 42, 44),
        (segs[2], 48, 50),
    ]
    assert len(errors(caplog)) == 3
    assert lg.log_end_offset == 72
    lg.close()


def test_damaged_first_batch_of_a_segment(tmp_path):
    d, segs = write_log(tmp_path)
    flip(d, segs[2], 16)  # the magic byte of batch 12, the first of segment 3
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(12)
    (rng,) = lg.last_recovery.skipped
    assert (rng.position, rng.first_offset_lost, rng.last_offset_lost) == (0, 36, 38)
    assert "magic" in rng.reason
    assert lg.segments[2].base_offset == 36  # the file keeps its name; its first batch is 39
    lg.close()


def test_damaged_last_batch_of_a_sealed_segment_keeps_the_later_segments(tmp_path, caplog):
    d, segs = write_log(tmp_path)
    flip(d, segs[1], 5 * ONE + 100)  # batch 11, the last of segment 2
    caplog.set_level(logging.WARNING)
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(11)
    (cut,) = lg.last_recovery.cuts
    (rng,) = lg.last_recovery.skipped
    assert cut.segment == rng.segment == segs[1]
    assert (rng.first_offset_lost, rng.last_offset_lost) == (33, 35)
    assert "offsets 33..35 lost" in errors(caplog)[0]
    assert sorted(f for f in os.listdir(d) if f.endswith(".log")) == segs
    lg.close()


@pytest.mark.parametrize("crash_at", ["rename", "replace"])
def test_a_second_crash_during_the_rewrite_loses_nothing_more(tmp_path, monkeypatch, crash_at):
    """The process dies inside the rewrite: before ``.cleaned`` becomes ``.swap`` (``rename``)
    or before ``.swap`` replaces the ``.log`` (``replace``).  The next start-up finishes or
    redoes it; then a third start-up after the rewrite finds nothing left to cut."""
    d, segs = write_log(tmp_path)
    flip(d, segs[1], 2 * ONE + 77)  # batch 8

    class Crash(BaseException):
        pass

    real = getattr(os, crash_at)

    def die(src, dst, *a, **k):  # the process dies at this rename of the segment rewrite
        if str(src).endswith((".log.cleaned", ".log.swap")):
            raise Crash()
        return real(src, dst, *a, **k)

    with monkeypatch.context() as m:
        m.setattr(segment_mod.os, crash_at, die)
        with pytest.raises(Crash):
            reopen(d)
    left = sorted(f for f in os.listdir(d) if ".cleaned" in f or ".swap" in f)
    assert left == [segs[1] + (".cleaned" if crash_at == "rename" else ".swap")]
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(8)
    assert not [f for f in os.listdir(d) if ".cleaned" in f or ".swap" in f]
    for s in lg.segments:
        s.close_handles()  # and crash again, after the rewrite
    lg = reopen(d)
    assert set(offsets(lg)) == ALL - batch_offsets(8)
    assert not lg.last_recovery.skipped and not lg.last_recovery.cuts
    lg.close()
