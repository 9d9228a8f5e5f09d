"""What the benchmark scripts share: a ZooKeeper and one pyklog broker process to measure against,
and the producer settings every producer benchmark takes.

Runs in the benchmark's process (one thread).  Imported by the scripts as ``from _common import ...``:
``python bench/bench_X.py`` puts ``bench/`` first on ``sys.path``.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import uuid
from collections.abc import Iterator


def producer_parser(doc: str, records: int) -> argparse.ArgumentParser:
    """The options of a producer benchmark (``--records`` default ``records``, ``--size``,
    ``--partitions``, ``--linger-ms``, ``--batch-size``, ``--compression``, ``--rounds``),
    ``--help`` showing the script's docstring ``doc``."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=records)
    ap.add_argument("--size", type=int, default=100, help="value bytes per record")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--linger-ms", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=262144)
    ap.add_argument("--compression", default="none")
    ap.add_argument("--rounds", type=int, default=2, help="runs per client (best is reported)")
    return ap


def make_chroot(connect_string: str) -> str:
    """A fresh ``/bench-<uuid>`` chroot in the ZooKeeper at ``connect_string``; returns
    ``connect_string`` with it appended (what a broker's ``zookeeper.connect`` takes)."""
    from kazoo.client import KazooClient

    root = f"/bench-{uuid.uuid4().hex[:8]}"
    kc = KazooClient(hosts=connect_string)
    kc.start(timeout=30)
    try:
        kc.ensure_path(root)
    finally:
        kc.stop()
        kc.close()
    return connect_string + root


@contextlib.contextmanager
def bench_broker(**props: str) -> Iterator:
    """A ZooKeeper (from pyspark's jars) and one pyklog broker process (``python -m pyklog.broker``,
    broker id 0, its log in a fresh temporary directory, 1 GiB segments, ``props`` on top) under a
    fresh chroot; yields the started BrokerProcess and stops both on the way out."""
    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer

    zk = ZooKeeperServer()
    zk.start()
    try:
        broker = BrokerProcess(
            make_chroot(zk.connect_string),
            0,
            log_dir=tempfile.mkdtemp(prefix="pyklog-bench-"),
            **{"log.segment.bytes": str(1 << 30), **props},
        )
        try:
            broker.start()
            yield broker
        finally:
            broker.stop()
    finally:
        zk.stop()


def confluent_settings(args: argparse.Namespace, queued_records: int) -> dict:
    """confluent-kafka producer settings of ``producer_parser``'s options (``linger.ms``,
    ``batch.size``, ``compression.type``), its local queue sized for ``queued_records``."""
    return {
        "linger.ms": args.linger_ms,
        "batch.size": args.batch_size,
        "compression.type": args.compression,
        "client.id": "bench-confluent",
        "queue.buffering.max.messages": max(100000, queued_records + 1),
        "queue.buffering.max.kbytes": 1048576,
    }


def confluent_produce(producer, topic: str, payload: bytes, n: int, on_delivery) -> None:
    """``n`` records of ``payload`` through confluent-kafka's ``produce()`` (a full local queue:
    poll, then again), serving delivery callbacks every 4096 records; the caller flushes."""
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        try:
            produce(topic, payload, on_delivery=on_delivery)
        except BufferError:
            poll(0.01)
            produce(topic, payload, on_delivery=on_delivery)
        if (i & 0xFFF) == 0:
            poll(0)
