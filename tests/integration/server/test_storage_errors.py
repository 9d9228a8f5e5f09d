"""A full disk is reported, once, and writes resume when space returns (nothing acknowledged lost).

Fault: the broker's log directory is a real 2 MiB tmpfs (needs root to mount; skipped otherwise),
filled by a file of ours until little space is left.  Produce (acks=1) until the broker answers
KAFKA_STORAGE_ERROR and keep producing; the broker must log exactly ONE ERROR line for the
condition (log directory + ENOSPC), naming the directory, the file and the cause.  Then free the
space: produce succeeds again, one "recovered" line is logged, and after a broker restart every
acknowledged record is read back exactly once, in order.  On the code before this change the
broker logged nothing above INFO (zero ERROR lines: the test fails on the count).
"""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from tests.support import Wire, fetch, produce, records, values

_ERROR_LINE = "storage error in log directory"
_RECOVERED_LINE = "recovered: writes succeed again"


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


def test_full_disk_is_logged_once_and_writes_resume(broker_factory, tiny_disk):
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
        for _ in range(100):
            send(w)
            if errors >= 15:  # well past the first failure: many failed requests
                break
        assert errors >= 15, f"the disk never filled ({len(acked)} records acknowledged)"
        time.sleep(0.5)
        out = b.output()
        assert out.count(_ERROR_LINE) == 1, out[-5000:]  # once per condition, not per request
        line = next(ln for ln in out.splitlines() if _ERROR_LINE in ln)
        assert " ERROR " in line and tiny_disk in line and "ENOSPC" in line, line
        assert _RECOVERED_LINE not in out

        os.unlink(filler)  # space returns
        for _ in range(10):
            assert send(w), "produce still fails after space returned"
    wait = time.monotonic() + 10
    while _RECOVERED_LINE not in b.output() and time.monotonic() < wait:
        time.sleep(0.1)
    out = b.output()
    assert out.count(_RECOVERED_LINE) == 1, out[-5000:]
    assert out.count(_ERROR_LINE) == 1

    b.stop()
    b.start()
    got = _read_all(b.port, topic)
    lost = len(set(acked) - set(got))
    duplicated = len(got) - len(set(got))
    assert (lost, duplicated) == (0, 0), (len(acked), lost, duplicated)
    assert got == acked  # in order, and nothing that was refused slipped in
