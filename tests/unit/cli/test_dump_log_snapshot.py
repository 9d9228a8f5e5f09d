"""pyklog-dump-log of a real broker's producer state ``.snapshot`` (Kafka's DumpLogSegments line per
producer id) and of a ``leader-epoch-checkpoint`` (Kafka's checkpoint file format); subprocesses.

An idempotent producer (confluent-kafka) and a transactional one whose transaction is still open
write to one partition; after the broker's clean shutdown the snapshot holds both: the idempotent
one's last sequence and offset, the transactional one's currentTxnFirstOffset.  The values are
checked against the batches pyklog-dump-log reads from the .log.  A damaged snapshot is reported
(exit 1), nothing is printed for it.
"""

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
