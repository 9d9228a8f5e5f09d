"""A broker as its partition count grows: creation, restarts, threads, descriptors, memory, idle CPU.

    .venv/bin/python bench/bench_partitions.py [--sizes 1000,2500,5000,10000] [--idle-s 20]
                                               [--recovery-threads 1]

One run starts a ZooKeeper (pyspark's jars) and one broker process (replication factor 1), then
grows the broker to each size in ``--sizes`` with topics of 1,000 partitions (CreateTopics through
confluent-kafka's AdminClient) and, at each size, measures:

* ``create s``: the last 1,000 partitions, from CreateTopics sent until the broker leads every one
  of them (its "leader at epoch" log line per partition);
* ``clean s``: SIGTERM, exit, start again, until it leads every partition (``stop s`` is the part
  until the old process exited);
* ``unclean s``: SIGKILL, start again (log recovery), until it leads every partition;
* ``threads``: the most threads the broker process had while creating and restarting
  (/proc/<pid>/status, sampled every 10 ms); ``fds``: open descriptors once idle; ``rss MiB``;
* ``idle cpu-s/min``: CPU seconds the broker burns per minute with nothing to do (over ``--idle-s``).

The last rows give each figure's growth per 1,000 partitions between consecutive sizes: a cost that
does not depend on what the broker holds grows by ~0.  Baseline: the same figures at the first size.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import make_chroot  # noqa: E402

PER_TOPIC = 1000
LEADER_LINE = b": leader at epoch "


def _status(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ThreadSampler:
    """The most threads the broker process (whichever pid it has now) had, sampled every 10 ms."""

    def __init__(self, broker):
        self.broker = broker
        self.max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                self.max = max(self.max, _status(self.broker.proc.pid, "Threads"))
            except (OSError, AttributeError):
                pass
            self._stop.wait(0.01)

    def take(self) -> int:
        most, self.max = self.max, 0
        return most

    def stop(self):
        self._stop.set()
        self._thread.join()


def leaders_since_start(broker) -> int:
    """Partitions the broker process became leader of since it was (re)started."""
    with open(broker.stdout_path, "rb") as f:
        f.seek(broker._mark)
        return f.read().count(LEADER_LINE)


def wait_leading(broker, total: int, timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    while leaders_since_start(broker) < total:
        if time.monotonic() > deadline:
            raise SystemExit(f"the broker leads {leaders_since_start(broker)} of {total} partitions after {timeout}s")
        if broker.proc.poll() is not None:
            raise SystemExit(f"the broker exited:\n{broker.output()[-4000:]}")
        time.sleep(0.1)


def create_topic(bootstrap: str, name: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fut = admin.create_topics([NewTopic(name, PER_TOPIC, 1)], request_timeout=300, operation_timeout=300)
    fut[name].result(600)


def measure(broker, sampler, size: int, idle_s: float) -> dict:
    row: dict = {"size": size}
    # creation of the last 1,000 (the broker already leads size - 1,000)
    sampler.take()
    t0 = time.monotonic()
    create_topic(broker.bootstrap, f"grow-{size // PER_TOPIC - 1}")
    wait_leading(broker, size)
    row["create s"] = time.monotonic() - t0
    time.sleep(2)
    row["fds"] = len(os.listdir(f"/proc/{broker.proc.pid}/fd"))
    row["rss MiB"] = _status(broker.proc.pid, "VmRSS") / 1024
    pid = broker.proc.pid
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(idle_s)
    row["idle cpu-s/min"] = (cpu_seconds(pid) - c0) / (time.monotonic() - t0) * 60
    # clean restart
    t0 = time.monotonic()
    broker.stop(signal.SIGTERM, timeout=600)
    row["stop s"] = time.monotonic() - t0
    broker.start(timeout=900)
    wait_leading(broker, size)
    row["clean s"] = time.monotonic() - t0
    # unclean restart
    broker.stop(signal.SIGKILL)
    t0 = time.monotonic()
    broker.start(timeout=900)
    wait_leading(broker, size)
    row["unclean s"] = time.monotonic() - t0
    row["threads"] = sampler.take()
    return row


COLUMNS = ["size", "create s", "stop s", "clean s", "unclean s", "threads", "fds", "rss MiB", "idle cpu-s/min"]


def print_table(rows: list[dict]) -> None:
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for r in rows:
        print("| " + " | ".join(_fmt(r[c]) for c in COLUMNS) + " |")
    for a, b in itertools.pairwise(rows):
        per = (b["size"] - a["size"]) / 1000
        growth = {c: (b[c] - a[c]) / per for c in COLUMNS[1:]}
        print(f"| +/1000 ({a['size']}->{b['size']}) | " + " | ".join(_fmt(growth[c]) for c in COLUMNS[1:]) + " |")


def _fmt(v) -> str:
    return f"{v:,}" if isinstance(v, int) else f"{v:.1f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,2500,5000,10000", help="partition counts (multiples of 1,000)")
    ap.add_argument("--idle-s", type=float, default=20.0, help="seconds of idle CPU measurement per size")
    ap.add_argument("--recovery-threads", type=int, default=1, help="num.recovery.threads.per.data.dir")
    args = ap.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})
    if any(s % PER_TOPIC or s <= 0 for s in sizes):
        raise SystemExit(f"--sizes: expected positive multiples of {PER_TOPIC}, read {args.sizes}")

    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer

    zk = ZooKeeperServer()
    zk.start()
    rows = []
    try:
        broker = BrokerProcess(
            make_chroot(zk.connect_string),
            0,
            log_dir=tempfile.mkdtemp(prefix="pyklog-bench-partitions-"),
            **{"num.recovery.threads.per.data.dir": str(args.recovery_threads)},
        ).start()
        sampler = ThreadSampler(broker)
        held = 0
        try:
            for size in sizes:
                while held < size - PER_TOPIC:  # grow to one topic short of the size, untimed
                    create_topic(broker.bootstrap, f"grow-{held // PER_TOPIC}")
                    held += PER_TOPIC
                    wait_leading(broker, held)
                rows.append(measure(broker, sampler, size, args.idle_s))
                held = size
                print(f"  {rows[-1]}", file=sys.stderr, flush=True)
        finally:
            sampler.stop()
            broker.stop(timeout=600)
    finally:
        zk.stop()
    print(f"one broker, RF 1, num.recovery.threads.per.data.dir={args.recovery_threads}, load {os.getloadavg()[0]:.1f}")
    print_table(rows)


if __name__ == "__main__":
    main()
