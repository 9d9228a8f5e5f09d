"""LogManager: start-up over several log dirs, checkpoints, clean-shutdown marker, background."""

import os
import time

import pytest

from pyklog.broker.errors import KafkaStorageError
from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.log.checkpoint import OffsetCheckpointFile
from pyklog.broker.log.manager import CLEAN_SHUTDOWN_FILE
from pyklog.broker.record.batch import build_batch


def batch(i, n=2):
    return build_batch([(b"k%04d" % i, b"x" * 100, 1_000_000 + i, ())] * n)


def test_startup_create_shutdown_and_restart(tmp_path):
    dirs = [str(tmp_path / "d1"), str(tmp_path / "d2")]
    m = LogManager(dirs, LogConfig(), background=False)
    m.startup()
    for p in range(4):
        lg = m.get_or_create_log("orders", p)
        for i in range(p + 1):
            lg.append(batch(i))
    # logs are spread over the dirs (fewest logs first)
    assert sorted(len(os.listdir(d)) for d in dirs)  # both used
    assert {os.path.dirname(lg.dir) for lg in m.logs().values()} == set(dirs)
    os.makedirs(os.path.join(dirs[0], "not a partition"))
    os.makedirs(os.path.join(dirs[1], "orders-x"))
    m.shutdown()
    for d in dirs:
        assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
        rp = OffsetCheckpointFile(os.path.join(d, "recovery-point-offset-checkpoint")).read()
        assert all(v == 2 * (p + 1) for (t, p), v in rp.items())
        assert open(os.path.join(d, "log-start-offset-checkpoint")).readline() == "0\n"

    m = LogManager(dirs, LogConfig(), background=False)
    m.startup()
    assert sorted(m.logs()) == [("orders", p) for p in range(4)]
    assert all(lg.last_recovery.clean_shutdown for lg in m.logs().values())
    assert all(lg.last_recovery.recovered_segments == 0 for lg in m.logs().values())
    assert m.get_log("orders", 3).log_end_offset == 8
    assert len(m.stray_dirs) == 2  # complained about, not loaded, no crash
    for d in dirs:
        assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # removed once loaded
    assert m.delete_log("orders", 0) and m.get_log("orders", 0) is None
    assert not any(n.startswith("orders-0") for d in dirs for n in os.listdir(d))
    m.shutdown()


def test_unclean_restart_recovers_from_checkpoint(tmp_path):
    d = str(tmp_path / "data")
    m = LogManager([d], LogConfig(segment_bytes=len(batch(0)) * 3), background=False)
    m.startup()
    lg = m.get_or_create_log("t", 0)
    for i in range(10):
        lg.append(batch(i))
    m.shutdown()
    os.unlink(os.path.join(d, CLEAN_SHUTDOWN_FILE))  # as if the broker had crashed
    path = os.path.join(d, "t-0", "00000000000000000018.log")
    with open(path, "ab") as f:
        f.write(b"\xff" * 100)
    m = LogManager([d], LogConfig(segment_bytes=len(batch(0)) * 3), background=False)
    m.startup()
    lg = m.get_log("t", 0)
    rep = lg.last_recovery
    assert not rep.clean_shutdown
    assert rep.recovered_segments == 1  # only the segment holding the recovery point (20)
    assert rep.cuts[0].bytes_cut == 100 and lg.log_end_offset == 20
    m.shutdown()


def test_second_manager_cannot_use_a_locked_dir(tmp_path):
    m = LogManager([str(tmp_path / "d")], background=False)
    m.startup()
    try:
        with pytest.raises(KafkaStorageError, match="locked by another process"):
            LogManager([str(tmp_path / "d")], background=False).startup()
    finally:
        m.shutdown()


def test_background_retention_and_flush(tmp_path):
    one = len(batch(0))
    cfg = LogConfig(
        segment_bytes=2 * one,
        retention_bytes=2 * one,
        retention_ms=-1,
        retention_check_interval_ms=50,
        flush_scheduler_interval_ms=20,
        flush_interval_ms=50,
        file_delete_delay_ms=0,
    )
    m = LogManager([str(tmp_path / "d")], cfg, background=True)
    m.startup()
    try:
        lg = m.get_or_create_log("t", 0)
        for i in range(10):
            lg.append(batch(i))
        deadline = time.time() + 10
        while (lg.log_start_offset != 16 or lg.recovery_point < 20) and time.time() < deadline:
            time.sleep(0.02)
        assert lg.log_start_offset == 16 and len(lg.segments) == 1  # the active one holds 2 batches
        assert lg.recovery_point == 20  # flushed by the time-based flusher
    finally:
        m.shutdown()


def test_background_cleaner_compacts_compacted_topics(tmp_path):
    # replaced segments stay readable until shutdown: the test reads while the cleaner runs
    cfg = LogConfig(cleaner_backoff_ms=50, file_delete_delay_ms=60_000)
    topic_cfg = {"state": {"cleanup.policy": "compact", "segment.bytes": "300", "min.cleanable.dirty.ratio": "0.01"}}
    m = LogManager([str(tmp_path / "d")], cfg, topic_config=topic_cfg.get)
    m.startup()
    try:
        lg = m.get_or_create_log("state", 0)
        other = m.get_or_create_log("events", 0)
        assert lg.config.compact and not other.config.compact
        for i in range(20):
            data = build_batch([(b"key%d" % (i % 3), b"v%d" % i, 1000 + i, ())])
            lg.append(data)
            other.append(data)
        deadline = time.time() + 15
        while lg.size > 3 * 300 and time.time() < deadline:
            time.sleep(0.05)
        from pyklog.broker.record.batch import decode_batch

        keys = {}
        off = lg.log_start_offset
        while off < lg.log_end_offset:
            raw = lg.read(off, 1 << 20).read_bytes()
            pos = 0
            while pos < len(raw):
                b = decode_batch(raw, pos)
                for r in b.records:
                    keys.setdefault(r.key, []).append(r.offset)
                pos += b.header.size
                off = b.header.next_offset
        # sealed segments hold each key once; the active one may still hold a duplicate
        assert sum(len(v) for v in keys.values()) < 20
        assert max(max(v) for v in keys.values()) == 19
        assert other.size == sum(len(build_batch([(b"key0", b"v%d" % i, 1000 + i, ())])) for i in range(20))
    finally:
        m.shutdown()
    cp = OffsetCheckpointFile(str(tmp_path / "d" / "cleaner-offset-checkpoint")).read()
    assert cp[("state", 0)] > 0 and ("events", 0) not in cp


def test_a_log_that_cannot_load_does_not_stop_startup(tmp_path):
    d = tmp_path / "d"
    (d / "good-0").mkdir(parents=True)
    (d / "broken-0" / "00000000000000000000.log").mkdir(parents=True)  # not a file
    m = LogManager([str(d)], background=False)
    m.startup()
    try:
        assert list(m.logs()) == [("good", 0)]
        assert list(m.load_errors) == [str(d / "broken-0")]
    finally:
        m.shutdown()


def test_background_checkpoints_and_one_scheduler_thread(tmp_path):
    import threading

    cfg = LogConfig(flush_offset_checkpoint_interval_ms=50, flush_interval_ms=20, flush_scheduler_interval_ms=20)
    d = tmp_path / "d"
    m = LogManager([str(d)], cfg, background=True)
    m.startup()
    try:
        lg = m.get_or_create_log("t", 0)
        for i in range(3):
            lg.append(batch(i))
        deadline = time.time() + 10
        cp = {}
        while cp.get(("t", 0)) != 6 and time.time() < deadline:  # written while running, not at shutdown
            time.sleep(0.02)
            if (d / "recovery-point-offset-checkpoint").exists():
                cp = OffsetCheckpointFile(str(d / "recovery-point-offset-checkpoint")).read()
        assert cp.get(("t", 0)) == 6
        assert [t.name for t in threading.enumerate()].count("log-scheduler") == 1
    finally:
        m.shutdown()
    assert "log-scheduler" not in [t.name for t in threading.enumerate()]


def test_logs_delete_on_the_managers_scheduler_and_shutdown_loses_no_delete(tmp_path):
    """Every log (loaded or created) takes the manager's one scheduler for its delayed deletes
    and sealed-segment flushes; shutdown stops the scheduler first and the logs' close() still
    unlinks the segments whose delete was pending."""
    import threading

    one = len(batch(0))
    cfg = LogConfig(
        segment_bytes=2 * one,
        retention_bytes=2 * one,
        retention_ms=-1,
        file_delete_delay_ms=60_000,
        retention_check_interval_ms=3_600_000,
        flush_scheduler_interval_ms=3_600_000,
        flush_offset_checkpoint_interval_ms=3_600_000,
        cleaner_backoff_ms=3_600_000,
    )  # no periodic run in between: pending() stays exact
    d = tmp_path / "d"
    m = LogManager([str(d)], cfg, background=True, high_watermark_checkpoint_interval_ms=3_600_000)
    m.startup()
    try:
        lg = m.get_or_create_log("t", 0)
        for i in range(6):
            lg.append(batch(i))
        deadline = time.time() + 10  # the sealed-segment flushes ran on the manager's scheduler
        while lg.recovery_point < lg.segments[-1].base_offset and time.time() < deadline:
            time.sleep(0.02)
        pending = m.scheduler.pending()  # the five periodic tasks (with highwatermark-checkpoint)
        assert pending == 5
        assert lg.delete_old_segments() == 2
        assert m.scheduler.pending() == pending + 1  # the delayed delete, 60 s away
        assert len([f for f in os.listdir(lg.dir) if f.endswith(".log.deleted")]) == 2
        assert [t.name for t in threading.enumerate()].count("log-scheduler") == 1
    finally:
        m.shutdown()
    assert not any(f.endswith(".deleted") for f in os.listdir(d / "t-0"))
    # the reopened manager's loaded log uses its scheduler too
    m = LogManager([str(d)], cfg, background=True)
    m.startup()
    try:
        lg = m.get_log("t", 0)
        for i in range(6, 10):
            lg.append(batch(i))
        deadline = time.time() + 10  # the sealed-segment flushes ran on the manager's scheduler
        while lg.recovery_point < lg.segments[-1].base_offset and time.time() < deadline:
            time.sleep(0.02)
        pending = m.scheduler.pending()
        assert lg.delete_old_segments() >= 1
        assert m.scheduler.pending() == pending + 1
    finally:
        m.shutdown()
    assert not any(f.endswith(".deleted") for f in os.listdir(d / "t-0"))
