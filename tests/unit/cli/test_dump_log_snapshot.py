"""pyklog-dump-log of a hand-written ``leader-epoch-checkpoint`` (Kafka's checkpoint file format);
a subprocess, no broker.  The producer state ``.snapshot`` of a real broker is dumped in
tests/integration/cli/test_dump_log_snapshot.py."""

from __future__ import annotations

import os
import subprocess
import sys

BIN = os.path.dirname(sys.executable)


def dump(*args):
    return subprocess.run([os.path.join(BIN, "pyklog-dump-log"), *args], capture_output=True, text=True, timeout=60)


def test_leader_epoch_checkpoint(tmp_path):
    d = tmp_path / "t-0"
    d.mkdir()
    cp = d / "leader-epoch-checkpoint"
    cp.write_text("0\n3\n0 0\n2 150\n5 4000\n")
    r = dump("--files", str(cp))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        f"Dumping {cp}",
        "version: 0",
        "epoch: 0 startOffset: 0",
        "epoch: 2 startOffset: 150",
        "epoch: 5 startOffset: 4000",
    ]
    cp.write_text("0\n3\n0 0\n")
    r = dump("--files", str(cp))
    assert r.returncode == 1 and "the count line says 3 entries, the file has 1" in r.stderr
    r = dump("--help")
    assert r.returncode == 0 and ".snapshot" in r.stdout and "leader-epoch-checkpoint" in r.stdout
