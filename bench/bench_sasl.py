"""SASL handshakes per second against a PLAINTEXT connect + ApiVersions baseline, in the same run.

    .venv/bin/python bench/bench_sasl.py [--connections 300] [--iterations 4096]

One run starts a ZooKeeper (pyspark's jars) and two broker processes under their own chroots: one
PLAINTEXT listener (the baseline) and one SASL_PLAINTEXT listener with PLAIN, SCRAM-SHA-256 and
SCRAM-SHA-512 (the SCRAM user written to ZooKeeper with ``--iterations``).  For each case it opens
``--connections`` connections one after another with pyklog's BrokerConnection (TCP connect,
ApiVersions, then SaslHandshake + SaslAuthenticate) and closes each, and prints connections per
second and the ratio to the baseline.  The client's side of SCRAM (PBKDF2 over the password,
``--iterations`` rounds) is part of what a client pays per connection and is in the figure; the
broker's side is a few HMACs.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import uuid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--connections", type=int, default=300)
    ap.add_argument("--iterations", type=int, default=4096)
    ap.add_argument("--at-once", type=int, default=1000, help="connections authenticating at the same time")
    ap.add_argument("--threads", type=int, default=50, help="client threads opening the --at-once connections")
    args = ap.parse_args()

    from kazoo.client import KazooClient

    from pyklog.broker.security.jaas import PLAIN_LOGIN_MODULE, jaas_text
    from pyklog.broker.security.scram import MECHANISMS, ScramCredential
    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.scram_credentials import ZkScramCredentials
    from pyklog.broker.zk.server import ZooKeeperServer
    from pyklog.connector.client import BrokerConnection
    from pyklog.connector.sasl_client import SaslCredentials

    password = "bench-" + uuid.uuid4().hex
    workdir = tempfile.mkdtemp(prefix="pyklog-bench-sasl-")
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    brokers = []
    try:
        roots = []
        kc = KazooClient(hosts=zk.connect_string)
        kc.start(timeout=30)

        class Session:
            def __init__(self, client):
                self.zk = client

            def retry(self, fn, *a, **kw):
                return self.zk.retry(fn, *a, **kw)

        for name in ("plaintext", "sasl"):
            root = f"/bench-{name}-{uuid.uuid4().hex[:6]}"
            kc.ensure_path(root)
            roots.append(root)
        sasl_zk = KazooClient(hosts=zk.connect_string + roots[1])
        sasl_zk.start(timeout=30)
        ZkScramCredentials(Session(sasl_zk)).alter(
            "bench",
            {m: ScramCredential.from_password(MECHANISMS[m], password, args.iterations) for m in MECHANISMS},
        )
        sasl_zk.stop()
        kc.stop()
        plain_b = BrokerProcess(zk.connect_string + roots[0], 0, log_dir=os.path.join(workdir, "b0"))
        sasl_b = BrokerProcess(zk.connect_string + roots[1], 0, log_dir=os.path.join(workdir, "b1"))
        sasl_b.props["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{sasl_b.port}"
        sasl_b.props["sasl.enabled.mechanisms"] = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
        sasl_b.props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = jaas_text(
            PLAIN_LOGIN_MODULE, {"user_bench": password}
        )
        for b in (plain_b, sasl_b):
            brokers.append(b)
            b.start()

        def run(port: int, creds) -> float:
            t0 = time.perf_counter()
            for _ in range(args.connections):
                BrokerConnection("127.0.0.1", port, sasl=creds, timeout_s=30).close()
            return args.connections / (time.perf_counter() - t0)

        run(plain_b.port, None)  # warm-up
        base = run(plain_b.port, None)
        print(f"connections: {args.connections}, SCRAM iterations: {args.iterations}")
        print(f"  {'PLAINTEXT connect + ApiVersions':<34} {base:8.0f} /s   (baseline)")
        for mech in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"):
            rate = run(sasl_b.port, SaslCredentials(mech, "bench", password))
            print(f"  {'SASL_PLAINTEXT ' + mech:<34} {rate:8.0f} /s   x{rate / base:.2f}")

        def at_once(port: int, creds) -> tuple[float, int]:
            """--at-once connections opened by --threads threads and all held open: seconds until
            every one is authenticated, and how many failed."""
            from concurrent.futures import ThreadPoolExecutor

            def open_one(_):
                try:
                    return BrokerConnection("127.0.0.1", port, sasl=creds, timeout_s=60)
                except Exception:  # noqa: BLE001 - counted
                    return None

            t0 = time.perf_counter()
            with ThreadPoolExecutor(args.threads) as pool:
                conns = list(pool.map(open_one, range(args.at_once)))
            elapsed = time.perf_counter() - t0
            for c in conns:
                if c is not None:
                    c.close()
            return elapsed, sum(c is None for c in conns)

        print(f"{args.at_once} connections at once ({args.threads} client threads), all held open:")
        base_s, failed = at_once(plain_b.port, None)
        print(f"  {'PLAINTEXT connect + ApiVersions':<34} {base_s:8.2f} s    (baseline, {failed} failed)")
        for mech in ("PLAIN", "SCRAM-SHA-512"):
            secs, failed = at_once(sasl_b.port, SaslCredentials(mech, "bench", password))
            print(f"  {'SASL_PLAINTEXT ' + mech:<34} {secs:8.2f} s    x{base_s / secs:.2f}, {failed} failed")
    finally:
        for b in brokers:
            b.stop()
        zk.stop()


if __name__ == "__main__":
    main()
