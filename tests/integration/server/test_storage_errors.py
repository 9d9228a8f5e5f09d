"""A full disk takes its log directory offline, as Kafka: with no directory left the broker halts.

Fault: the broker's only log directory is a real 2 MiB tmpfs (needs root to mount; skipped
otherwise), filled by a file of ours until little space is left.  Produce (acks=1) until the
broker answers KAFKA_STORAGE_ERROR (or, halted, answers nothing): the broker logs exactly ONE
ERROR line for the directory and cause (naming the directory, the file and ENOSPC) and one
CRITICAL line "Shutdown broker because all log dirs in ... have failed", then exits with status 1
(Kafka's ``Exit.halt(1)``: another replica leads through the lost ZooKeeper session).  Space
returns, the broker restarts: every acknowledged record is read back exactly once, in order, and
nothing that was refused slipped in.  The earlier behaviour (the broker kept running, answering
KAFKA_STORAGE_ERROR, and writes resumed when space returned) fails the exit-status check.
"""

from __future__ import annotations

import os
import subprocess
import uuid

import pytest

from tests.support import Wire, fetch, produce, records, values, wait_for

_ERROR_LINE = "storage error in log directory"
_HALT_LINE = "Shutdown broker because all log dirs in"


@pytest.fixture
def tiny_disk(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "disk"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
    try:
        yield str(mnt)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def _read_all(port: int, topic: str) -> list[bytes]:
    got: list[bytes] = []
    with Wire(port) as w:
        while True:
            p = fetch(w, topic, len(got))
            assert p["error_code"] == 0, p
            batch = values(p["records"])
            if not batch:
                return got
            got.extend(batch)


def test_full_disk_takes_the_only_log_dir_offline_and_halts_the_broker(broker_factory, tiny_disk):
    b = broker_factory(0, log_dirs=tiny_disk)
    topic = f"full-{uuid.uuid4().hex[:8]}"
    filler = os.path.join(tiny_disk, "filler")
    with open(filler, "wb") as f:  # leave ~300 KiB free
        st = os.statvfs(tiny_disk)
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - 300 * 1024))
    acked: list[bytes] = []
    errors = 0
    n_batches = 0

    def send(w) -> bool:
        nonlocal errors, n_batches
        prefix = b"b%05d-" % n_batches
        n_batches += 1
        p = produce(w, topic, records(20, prefix=prefix + b"x" * 1000))
        if p["error_code"] == 0:
            acked.extend(prefix + b"x" * 1000 + b"%d" % i for i in range(20))
            return True
        assert p["error_code"] == 56, p  # KAFKA_STORAGE_ERROR, retriable
        errors += 1
        return False

    with Wire(b.port) as w:
        assert send(w)  # creates the topic
        try:
            for _ in range(100):
                if not send(w):
                    break
        except (OSError, ConnectionError, EOFError):
            pass  # halted before answering
    assert b.wait_exit(timeout=20) == 1  # Kafka's Exit.halt(1)
    out = b.output()
    assert out.count(_ERROR_LINE) == 1, out[-5000:]  # once per directory and cause
    line = next(ln for ln in out.splitlines() if _ERROR_LINE in ln)
    assert " ERROR " in line and tiny_disk in line and "ENOSPC" in line, line
    halt = [ln for ln in out.splitlines() if _HALT_LINE in ln]
    assert len(halt) == 1 and " CRITICAL " in halt[0] and tiny_disk in halt[0], halt
    assert len(acked) >= 20

    os.unlink(filler)  # space returns; the broker restarts and recovers the directory
    b.start()
    wait_for(lambda: _readable(b.port, topic), timeout=30, message="the partition led again")
    got = _read_all(b.port, topic)
    lost = len(set(acked) - set(got))
    duplicated = len(got) - len(set(got))
    assert (lost, duplicated) == (0, 0), (len(acked), lost, duplicated)
    assert got == acked  # in order, and nothing that was refused slipped in
    b.stop()  # before the tmpfs is unmounted


def _readable(port: int, topic: str) -> bool:
    with Wire(port) as w:
        return fetch(w, topic, 0)["error_code"] == 0
