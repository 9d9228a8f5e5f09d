"""``deliveryGuarantee=exactly-once`` streaming A -> B against real brokers while the Spark driver is SIGKILLed.

The driver (tests/integration/spark/sink_exactly_once_driver.py, its own Spark in its own process group) is
SIGKILLed three times, once at a random moment, once inside the sink's commit between two transaction
completions (the sink's test hook pauses there), once more at a random moment; each time it restarts from
its checkpoint, the last run with Trigger.AvailableNow.  B read with read_committed must equal A: no
duplicate, no loss; no transaction of B may stay open.  The query is given ``kafka.bootstrap.servers``
alone, as on a managed cluster: the sink keeps its commit records in the cluster's
``__pyklog_spark_sinks`` topic (the ZooKeeper store is checked against the same decisions in
tests/integration/spark/test_sink_recovery.py).

The batch write and the abandoned transaction against real brokers are in
tests/integration/spark/test_sink_exactly_once.py (whose support module holds the committed-view helpers
used here); the driver's recovery decisions are in tests/integration/spark/test_sink_recovery.py.
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

from pyklog.connector.client import ClusterClient
from pyklog.connector.producer import Producer
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink_log import KafkaSinkTransactionLog
from tests.integration.spark.support import (
    check_broker_read_committed,
    count_duplicates_and_lost,
    log_view,
)
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


def _paused_commit(bootstrap: str, driver_output: str, batch: str) -> dict:
    """The sink's commit record (in ``__pyklog_spark_sinks``) of the micro-batch whose commit is paused."""
    query_id = driver_output.split("STARTED ", 1)[1].split()[0]
    cluster = parse_sink_options({"kafka.bootstrap.servers": bootstrap, "topic": "t"}).cluster
    with KafkaSinkTransactionLog(cluster, {"bootstrap.servers": bootstrap}, "unused") as tlog:
        record, _ = tlog.read(query_id, int(batch))
    assert record is not None, f"no commit record for batch {batch} of query {query_id}"
    return json.loads(record.encode())


def _committed_batches(chk: str) -> int:
    d = os.path.join(chk, "commits")
    return len([f for f in os.listdir(d) if f.isdigit()]) if os.path.isdir(d) else 0


def test_stream_survives_three_driver_sigkills_exactly_once(broker, tmp_path):
    seed = int(os.environ.get("PYKLOG_TEST_SEED", time.time_ns() % 100000))
    rng = random.Random(seed)
    print(f"seed {seed}")
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("eos-a", 3)
        c.create_topic("eos-b", 3)
    expected = _produce(broker.bootstrap, "eos-a", 3, 900)
    chk = str(tmp_path / "chk")
    args = [
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
                paused = _paused_commit(broker.bootstrap, d.output(), open(pause).read())
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
    view = lambda: log_view(broker.bootstrap, "eos-b", 3)  # noqa: E731
    try:
        committed, raw, still_open = wait_for(lambda: (v := view())[2] == 0 and v, 20, 0.2, "no open transaction")
    except AssertionError:
        committed, raw, still_open = view()
    dups, lost = count_duplicates_and_lost(expected, committed)
    raw_dups, _ = count_duplicates_and_lost(expected, raw)
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
    check_broker_read_committed(broker.bootstrap, "eos-b", 3, committed, raw)
