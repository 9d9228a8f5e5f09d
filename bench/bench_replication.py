"""acks=all with replication factor 3 against acks=1 with replication factor 1, same run, same machine.

    .venv/bin/python bench/bench_replication.py [--records 50000] [--size 100] [--dir /tmp]

One run starts a ZooKeeper and three broker processes (``python -m pyklog.broker``), creates one
topic of one partition with replication factor 1 and one with replication factor 3
(``min.insync.replicas=2``), all led by broker 0, then for each: a confluent-kafka Producer
(linger.ms=5, idempotence on for acks=all) sends ``--records`` records of ``--size`` bytes, timed
from the first produce() to the end of flush(); then 300 records one at a time (produce, flush)
give the produce latency from produce() to the delivery report.  Prints records/s, p50 and p99 produce latency of both, and their ratio.
Then fail-over: a confluent-kafka acks=all producer sends one record every 10 ms to the RF 3 topic
while its leader is SIGKILLed (``--failovers`` times, the broker restarted and back in the ISR in
between); printed per kill: SIGKILL -> new leader in ZooKeeper, SIGKILL -> first record acknowledged
by the new leader, against the ZooKeeper session timeout (the same-run bound: a dead broker is only
noticed when its session expires).
The followers fetch with Kafka's defaults (replica.fetch.wait.max.ms 500, min bytes 1): a follower
waiting in the leader's purgatory is woken by each append, so acks=all costs about two follower
round trips per batch.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def run(bootstrap: str, topic: str, acks: str, records: int, size: int, probes: int = 300) -> dict:
    """Throughput: ``records`` produced as fast as the client takes them, timed to the end of
    flush().  Latency: ``probes`` records one at a time (produce, flush), from produce() to the
    delivery report -- so the figure is the broker's (and replication's), not the client's queue."""
    from confluent_kafka import Producer

    errors: list = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "enable.idempotence": acks == "all",
            "queue.buffering.max.messages": 200000,
        }
    )
    payload = b"x" * size

    def done(err, msg):
        if err is not None:
            errors.append(err)

    start = time.perf_counter()
    for _ in range(records):
        while True:
            try:
                p.produce(topic, payload, partition=0, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - start
    lat = []
    for _ in range(probes):
        t0 = time.perf_counter()
        p.produce(topic, payload, partition=0, on_delivery=done)
        p.flush(30)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return {
        "records_s": records / elapsed,
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000,
        "errors": len(errors),
    }


def failover(zk_connect: str, brokers: list, topic: str, kills: int, session_ms: int) -> list[dict]:
    """SIGKILL the leader of ``topic``-0 ``kills`` times under an acks=all producer sending a record
    every 10 ms; for each kill the seconds to the new leader in ZooKeeper and to the first record
    the new leader acknowledged (a delivery report with its offset after the kill)."""
    import json
    import threading

    from confluent_kafka import Producer
    from kazoo.client import KazooClient

    from pyklog.broker.zk import paths

    kz = KazooClient(hosts=zk_connect)
    kz.start(timeout=30)
    acks: list = []  # (monotonic time, offset)
    stop = threading.Event()

    def produce():
        p = Producer(
            {
                "bootstrap.servers": ",".join(b.bootstrap for b in brokers),
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 0,
                "message.timeout.ms": 120000,
                "topic.metadata.refresh.interval.ms": 1000,
                "retry.backoff.ms": 50,
            }
        )
        while not stop.is_set():
            p.produce(
                topic,
                b"f",
                partition=0,
                on_delivery=lambda err, msg: err is None and acks.append((time.monotonic(), msg.offset())),
            )
            p.poll(0.01)
        p.flush(60)

    def st():
        return json.loads(kz.get(paths.partition_state(topic, 0))[0])

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    out = []
    try:
        for _ in range(kills):
            time.sleep(2.0)
            s0 = st()
            victim = next(b for b in brokers if b.broker_id == s0["leader"])
            killed = time.monotonic()
            victim.kill()
            elected = None
            while time.monotonic() - killed < 60:
                s1 = st()
                if s1["leader"] not in (-1, victim.broker_id):
                    elected = time.monotonic()
                    break
                time.sleep(0.05)
            first = None
            while elected is not None and time.monotonic() - killed < 90:
                later = [a for a in list(acks) if a[0] > elected]
                if later:
                    first = later[0][0]
                    break
                time.sleep(0.02)
            out.append(
                {
                    "elected_s": None if elected is None else elected - killed,
                    "first_ack_s": None if first is None else first - killed,
                }
            )
            victim.start()
            deadline = time.monotonic() + 90
            while len(st()["isr"]) < 3 and time.monotonic() < deadline:
                time.sleep(0.2)
    finally:
        stop.set()
        t.join(90)
        kz.stop()
        kz.close()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--failovers", type=int, default=3, help="leader SIGKILLs timed (0: none)")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import support

    from pyklog.broker.protocol import ApiKey
    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer

    workdir = tempfile.mkdtemp(prefix="pyklog-bench-repl-", dir=args.dir)
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    brokers = []
    try:
        for i in range(3):
            brokers.append(BrokerProcess(zk.connect_string, i, log_dir=os.path.join(workdir, f"b{i}")).start())
        with support.Wire(brokers[0].port) as w:
            support.wait_for(
                lambda: (
                    len(w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})["brokers"])
                    == 3
                )
            )
            for name, replicas in (("rf1", [0]), ("rf3", [0, 1, 2])):
                r = support.create_topic(
                    w,
                    name,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[{"partition_index": 0, "broker_ids": replicas}],
                    configs=[{"name": "min.insync.replicas", "value": "2"}] if len(replicas) > 1 else [],
                )
                assert r["error_code"] == 0, r
        time.sleep(1.0)
        results = {}
        for label, topic, acks in (("acks=1, RF 1", "rf1", "1"), ("acks=all, RF 3", "rf3", "all")):
            run(brokers[0].bootstrap, topic, acks, min(2000, args.records), args.size)  # warm-up
            results[label] = r = run(brokers[0].bootstrap, topic, acks, args.records, args.size)
            print(
                f"{label:16s} {r['records_s']:10.0f} records/s   p50 {r['p50_ms']:7.1f} ms   "
                f"p99 {r['p99_ms']:7.1f} ms   errors {r['errors']}"
            )
        a, b = results["acks=1, RF 1"], results["acks=all, RF 3"]
        print(
            f"acks=all RF 3 / acks=1 RF 1: throughput x{b['records_s'] / a['records_s']:.2f}, "
            f"p99 x{b['p99_ms'] / a['p99_ms']:.2f}"
        )
        if args.failovers:
            session_ms = int(brokers[0].props.get("zookeeper.session.timeout.ms", 6000))
            for i, f in enumerate(failover(zk.connect_string, brokers, "rf3", args.failovers, session_ms)):
                elected, first = f["elected_s"], f["first_ack_s"]
                ratio = "-" if first is None else f"{first * 1000 / session_ms:.2f}x"
                print(
                    f"leader SIGKILL {i + 1}: new leader in ZooKeeper after "
                    f"{'-' if elected is None else f'{elected:.2f} s'}, first acknowledged write on it after "
                    f"{'-' if first is None else f'{first:.2f} s'} ({ratio} the ZooKeeper session of "
                    f"{session_ms / 1000:.0f} s)"
                )
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
