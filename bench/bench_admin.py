"""CreateTopics / DeleteTopics of many topics on a broker that already holds many topics.

    .venv/bin/python bench/bench_admin.py [--batch 100] [--held 900] [--partitions 1]

One run starts a ZooKeeper (pyspark's jars) and one broker process, then with a confluent-kafka
AdminClient (one CreateTopics / DeleteTopics request of ``--batch`` topics, request timeout 120 s so
a slow broker is measured rather than cut off at the clients' usual 30 s):

1. baseline: the broker holds 6 topics; create ``--batch`` topics, then delete them;
2. fills the broker up to ``--held`` topics (batches of 100, timed as well);
3. the same create and delete of ``--batch`` topics on the full broker.

Prints the seconds of each step and the broker process's CPU seconds.  Clients time out admin
calls after 30 s by default (``request.timeout.ms`` / ``default.api.timeout.ms``).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def create(admin, names, partitions) -> float:
    from confluent_kafka.admin import NewTopic

    t0 = time.perf_counter()
    futures = admin.create_topics(
        [NewTopic(n, partitions, 1) for n in names], request_timeout=120, operation_timeout=120
    )
    for f in futures.values():
        f.result(180)
    return time.perf_counter() - t0


def delete(admin, names) -> float:
    t0 = time.perf_counter()
    futures = admin.delete_topics(list(names), request_timeout=120, operation_timeout=120)
    for f in futures.values():
        f.result(180)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=100, help="topics per CreateTopics / DeleteTopics request")
    ap.add_argument("--held", type=int, default=900, help="topics the broker holds for the second measurement")
    ap.add_argument("--partitions", type=int, default=1)
    args = ap.parse_args()

    from confluent_kafka.admin import AdminClient
    from kazoo.client import KazooClient

    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer

    workdir = tempfile.mkdtemp(prefix="pyklog-bench-admin-")
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    root = f"/bench-{uuid.uuid4().hex[:8]}"
    kc = KazooClient(hosts=zk.connect_string)
    kc.start(timeout=30)
    kc.ensure_path(root)
    kc.stop()
    kc.close()
    broker = BrokerProcess(
        zk.connect_string + root, 0, log_dir=os.path.join(workdir, "broker"), **{"offsets.topic.num.partitions": "1"}
    )
    try:
        broker.start()
        pid = broker.proc.pid
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        held = [f"held-{i:05d}" for i in range(6)]
        create(admin, held, args.partitions)

        def measure(label: str) -> tuple[float, float]:
            names = [f"batch-{uuid.uuid4().hex[:6]}-{i:04d}" for i in range(args.batch)]
            c0 = cpu_seconds(pid)
            tc = create(admin, names, args.partitions)
            c1 = cpu_seconds(pid)
            td = delete(admin, names)
            c2 = cpu_seconds(pid)
            print(
                f"  {label:<34} create {args.batch} topics {tc:7.2f} s (broker CPU {c1 - c0:6.2f} s)   "
                f"delete {td:7.2f} s (broker CPU {c2 - c1:6.2f} s)",
                flush=True,
            )
            return tc, td

        print(f"CreateTopics / DeleteTopics of {args.batch} topics x {args.partitions} partition(s), one request each")
        base = measure(f"broker holding {len(held)} topics")
        t0 = time.perf_counter()
        c0 = cpu_seconds(pid)
        while len(held) < args.held:
            more = [f"held-{i:05d}" for i in range(len(held), min(args.held, len(held) + 100))]
            create(admin, more, args.partitions)
            held += more
        print(
            f"  filled to {len(held)} topics in {time.perf_counter() - t0:.1f} s "
            f"(broker CPU {cpu_seconds(pid) - c0:.1f} s)",
            flush=True,
        )
        full = measure(f"broker holding {len(held)} topics")
        print(f"  ratio full/baseline: create x{full[0] / base[0]:.1f}, delete x{full[1] / base[1]:.1f}")
    finally:
        broker.stop()
        zk.stop()


if __name__ == "__main__":
    sys.path.insert(0, HERE)
    main()
