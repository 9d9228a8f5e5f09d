"""LogLoader (pyklog.broker.log.loader) on its own: what loading a partition directory returns
to the Log.  Real segment files in a tmp dir, written by a real Log."""

from __future__ import annotations

import os

from pyklog.broker.log import Log, LogConfig
from pyklog.broker.log.loader import LoadedLog, LogLoader
from pyklog.broker.log.producer_state import ProducerStateManager
from pyklog.broker.record.batch import build_batch


def batch(i, n=2, **kw):
    return build_batch([(b"k%d" % j, b"v%d-%d" % (i, j), 1_000 + i, ()) for j in range(n)], **kw)


def write_log(d, cfg, batches=6):
    lg = Log(d, cfg)
    for i in range(batches):
        lg.append(batch(i, producer_id=42, producer_epoch=0, base_sequence=2 * i))
    lg.flush()
    return lg


def load(d, cfg, **kw) -> LoadedLog:
    return LogLoader(d, cfg, ProducerStateManager(d), **kw).load()


def test_load_returns_segments_offsets_and_report(tmp_path):
    d = str(tmp_path / "t-0")
    one = len(batch(0))
    cfg = LogConfig(segment_bytes=2 * one)
    lg = write_log(d, cfg)
    lg.close()
    got = load(d, cfg, recovery_point=0, log_start_offset=2, clean_shutdown=False)
    assert [s.base_offset for s in got.segments] == [0, 4, 8]  # 2 batches (4 offsets) per segment
    assert (got.log_start_offset, got.log_end_offset, got.recovery_point) == (2, 12, 12)
    assert got.report.recovered_segments == 3 and not got.report.cuts
    for s in got.segments:
        s.close()


def test_load_removes_leftovers_and_cuts_a_torn_tail(tmp_path):
    d = str(tmp_path / "t-0")
    cfg = LogConfig()
    lg = write_log(d, cfg, batches=3)
    lg.close()
    for name in (
        "00000000000000000000.log.deleted",
        "00000000000000000002.log.cleaned",
        "x.tmp",
        "00000000000000000009.index",
    ):
        open(os.path.join(d, name), "wb").write(b"junk")
    seg = os.path.join(d, "00000000000000000000.log")
    os.truncate(seg, os.path.getsize(seg) - 5)
    got = load(d, cfg, clean_shutdown=False)
    names = os.listdir(d)
    assert not [n for n in names if n.endswith((".deleted", ".cleaned", ".tmp"))]
    assert "00000000000000000009.index" not in names and "00000000000000000000.index" in names
    (cut,) = got.report.cuts
    assert cut.segment == "00000000000000000000.log" and cut.bytes_cut == len(batch(2)) - 5
    assert got.log_end_offset == 4
    for s in got.segments:
        s.close()


def test_load_rebuilds_producer_state(tmp_path):
    d = str(tmp_path / "t-0")
    cfg = LogConfig()
    lg = write_log(d, cfg, batches=3)  # not closed: no snapshot at the end
    producers = ProducerStateManager(d)
    got = LogLoader(d, cfg, producers, clean_shutdown=False).load()
    entry = producers.get(42)
    assert entry is not None and entry.last_seq == 5 and entry.batches[-1].last_offset == 5
    assert got.log_end_offset == 6
    lg.close()
    for s in got.segments:
        s.close()


def test_empty_directory_starts_at_the_log_start_offset(tmp_path):
    d = str(tmp_path / "t-0")
    os.makedirs(d)
    got = load(d, LogConfig(), log_start_offset=17, clean_shutdown=True)
    assert [s.base_offset for s in got.segments] == [17]
    assert (got.log_start_offset, got.log_end_offset) == (17, 17) and got.report.clean_shutdown
    got.segments[0].close()
