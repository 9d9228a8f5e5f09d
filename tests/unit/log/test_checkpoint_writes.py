"""Checkpoint files are rewritten only when an entry changed (an idle broker holding thousands of
partitions rewrote and fsynced its high watermarks every 5 s), and a clean shutdown that closes
its logs without an fsync each still leaves every record and checkpoint readable."""

from __future__ import annotations

import os

from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.log.checkpoint import OffsetCheckpointFile
from pyklog.broker.log.manager import CLEAN_SHUTDOWN_FILE
from pyklog.broker.record.batch import build_batch


def batch(i, n=2):
    return build_batch([(b"k%04d" % i, b"x" * 100, 1_000_000 + i, ())] * n)


def test_unchanged_checkpoints_are_not_rewritten(tmp_path):
    d = str(tmp_path / "d")
    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    lg = m.get_or_create_log("t", 0)
    lg.append(batch(0))
    lg.update_high_watermark(2)
    hw = os.path.join(d, "replication-offset-checkpoint")
    rp = os.path.join(d, "recovery-point-offset-checkpoint")
    m.checkpoint()
    first = (os.stat(hw).st_ino, os.stat(rp).st_ino)
    m.checkpoint()
    m.checkpoint_high_watermarks()
    assert (os.stat(hw).st_ino, os.stat(rp).st_ino) == first  # nothing changed: nothing written

    lg.append(batch(1))
    lg.update_high_watermark(4)
    m.checkpoint_high_watermarks()
    assert os.stat(hw).st_ino != first[0]  # replaced (tmp + rename) with the new entry
    assert OffsetCheckpointFile(hw).read() == {("t", 0): 4}

    os.unlink(hw)  # gone from the disk: written again, whatever this process wrote before
    m.checkpoint_high_watermarks()
    assert OffsetCheckpointFile(hw).read() == {("t", 0): 4}
    m.shutdown()


def test_clean_shutdown_without_an_fsync_per_log_reloads_everything(tmp_path):
    d = str(tmp_path / "d")
    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    for p in range(20):
        lg = m.get_or_create_log("t", p)
        for i in range(p % 3 + 1):
            lg.append(batch(i))
    m.shutdown()
    assert os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    rp = OffsetCheckpointFile(os.path.join(d, "recovery-point-offset-checkpoint")).read()
    assert rp == {("t", p): 2 * (p % 3 + 1) for p in range(20)}

    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    assert all(lg.last_recovery.clean_shutdown for lg in m.logs().values())
    assert {k: lg.log_end_offset for k, lg in m.logs().items()} == rp
    m.shutdown()
