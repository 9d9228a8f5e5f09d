"""Produce and fetch throughput over SSL and SASL_SSL against PLAINTEXT, on the same broker in the
same run.

    .venv/bin/python bench/bench_tls.py [--records 300000] [--size 100] [--rounds 2]

One run makes a CA and a broker certificate (``cryptography``), starts a ZooKeeper (pyspark's jars)
and one broker process with three listeners, ``PLAINTEXT``, ``SSL`` (PKCS12 keystore) and
``SASL_SSL`` (the same keystore, clients logged in with SCRAM-SHA-512), then for each listener,
alternating, ``--rounds`` times:

1. produce: a confluent-kafka Producer (linger.ms=20, batch.size=1000000, acks=1, no compression)
   sends ``--records`` records of ``--size`` bytes to a one-partition topic of that listener; timed
   from the first produce() to the end of flush();
2. fetch: a confluent-kafka Consumer (assign at offset 0, fetch.max.bytes 64 MiB,
   max.partition.fetch.bytes 4 MiB) reads them all back.

Prints the best records/s and MB/s of each over the rounds, the SSL / PLAINTEXT and SASL_SSL /
PLAINTEXT ratios (goal: at least 0.5x) and the broker's CPU seconds in each phase.  Over PLAINTEXT the broker sends fetched
records with ``sendfile``; over SSL it reads them with ``pread`` and encrypts them (Kafka loses
zero-copy over TLS too), so the fetch ratio is the one to watch.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # the repository root: tests.tls_support makes the certificates


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def produce(bootstrap: str, settings: dict, topic: str, records: int, size: int) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 20,
            "batch.size": 1_000_000,
            "acks": 1,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            **settings,
        }
    )
    value = b"x" * size
    p.list_topics(timeout=30)  # connect (and handshake) outside the timed part
    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, value)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(120) == 0, "records left unsent"
    return time.perf_counter() - start


def fetch(bootstrap: str, settings: dict, topic: str, records: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 1,
            **settings,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    start = time.perf_counter()
    deadline = time.monotonic() + 300
    while got < records and time.monotonic() < deadline:
        got += sum(1 for m in c.consume(1000, 1.0) if not m.error())
    elapsed = time.perf_counter() - start
    c.close()
    assert got >= records, f"read {got} of {records}"
    return elapsed


def _add_scram_user(zk_connect: str, user: str, password: str) -> None:
    """The bench user's SCRAM-SHA-512 credential in ZooKeeper, as pyklog-configs --zookeeper writes it."""
    from kazoo.client import KazooClient

    from pyklog.broker.security.scram import MECHANISMS, ScramCredential
    from pyklog.broker.zk.scram_credentials import ZkScramCredentials

    class Session:  # what the credential store needs of a broker's ZooKeeper session
        stopping = False

        def __init__(self, zk):
            self.zk = zk

        def retry(self, fn, *args, **kw):
            return self.zk.retry(fn, *args, **kw)

    zk = KazooClient(hosts=zk_connect)
    zk.start(30)
    try:
        cred = ScramCredential.from_password(MECHANISMS["SCRAM-SHA-512"], password, 4096)
        ZkScramCredentials(Session(zk)).alter(user, {"SCRAM-SHA-512": cred})
    finally:
        zk.stop()
        zk.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--size", type=int, default=100, help="value bytes per record")
    ap.add_argument("--rounds", type=int, default=2, help="runs per listener (best is reported)")
    ap.add_argument("--dir", default=None, help="work directory (default: a temporary one)")
    a = ap.parse_args()

    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer, free_port
    from pyklog.connector.client import ClusterClient
    from tests.tls_support import KEYSTORE_PASSWORD, make_certificates

    workdir = a.dir or tempfile.mkdtemp(prefix="pyklog-bench-tls-")
    certs = make_certificates(os.path.join(workdir, "certs"))
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    plain_port, ssl_port, sasl_ssl_port = free_port(), free_port(), free_port()
    broker = BrokerProcess(zk.connect_string, 0, log_dir=os.path.join(workdir, "broker"), port=plain_port)
    broker.props.update(
        {
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port},SASL_SSL://127.0.0.1:{sasl_ssl_port}"
            ),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": certs.broker_p12,
            "ssl.keystore.password": KEYSTORE_PASSWORD,
            "offsets.topic.num.partitions": "1",
            "message.max.bytes": str(2 * 1024 * 1024),
            "log.segment.bytes": str(1024 * 1024 * 1024),
        }
    )
    listeners = {
        "PLAINTEXT": (f"127.0.0.1:{plain_port}", {}),
        "SSL": (f"127.0.0.1:{ssl_port}", {"security.protocol": "SSL", "ssl.ca.location": certs.ca_pem}),
        "SASL_SSL": (
            f"127.0.0.1:{sasl_ssl_port}",
            {
                "security.protocol": "SASL_SSL",
                "ssl.ca.location": certs.ca_pem,
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "bench",
                "sasl.password": "bench-secret",
            },
        ),
    }
    best: dict[tuple[str, str], float] = {}
    cpu: dict[tuple[str, str], float] = {}
    try:
        _add_scram_user(zk.connect_string, "bench", "bench-secret")
        broker.start()
        pid = broker.proc.pid
        with ClusterClient(broker.bootstrap) as admin:
            for rnd in range(a.rounds):
                for name, (bootstrap, settings) in listeners.items():
                    topic = f"bench-tls-{name.lower()}-{rnd}"
                    admin.create_topic(topic, 1)
                    for phase, fn in (
                        ("produce", lambda: produce(bootstrap, settings, topic, a.records, a.size)),
                        ("fetch", lambda: fetch(bootstrap, settings, topic, a.records)),
                    ):
                        before = cpu_seconds(pid)
                        elapsed = fn()
                        key = (name, phase)
                        if key not in best or elapsed < best[key]:
                            best[key] = elapsed
                            cpu[key] = cpu_seconds(pid) - before
        mb = a.records * a.size / 1e6
        print(f"{a.records} records of {a.size} B, best of {a.rounds} rounds, load {os.getloadavg()[0]:.1f}")
        for phase in ("produce", "fetch"):
            rates = {}
            for name in listeners:
                t = best[(name, phase)]
                rates[name] = a.records / t
                print(
                    f"{phase:8s} {name:10s} {rates[name] / 1e6:6.2f} M records/s  {mb / t:7.1f} MB/s  "
                    f"broker CPU {cpu[(name, phase)]:.2f} s"
                )
            for name in ("SSL", "SASL_SSL"):
                print(f"{phase:8s} {name} / PLAINTEXT = {rates[name] / rates['PLAINTEXT']:.2f}x (goal >= 0.5x)")
    finally:
        broker.stop()
        zk.stop()


if __name__ == "__main__":
    main()
