"""acks=all as the partition count grows: 3 brokers, replication factor 3, min.insync.replicas 2.

    .venv/bin/python bench/bench_acks_all.py [--partitions 100,1000,2000] [--idle-s 20] [--dir /tmp]

One run starts a ZooKeeper and three broker processes (``python -m pyklog.broker``).  For each N of
``--partitions`` (growing; the topics of the earlier steps stay, so the cluster holds their sum) it
creates a topic of N partitions (replication factor 3, ``min.insync.replicas=2``), waits until every
partition has its full ISR and the brokers are quiet again (each under 15% of a core: creating
the partitions is not what is measured), then:

* **one request per broker**: pyklog's Producer (acks=all, linger.ms 5) sends one record to every
  partition, timed to the last acknowledgement, twice (the first pass on a new topic: the first
  record of a leader epoch costs each follower a durable ``leader-epoch-checkpoint`` write, as in
  Kafka).  It puts every partition a broker leads in one Produce request, as Kafka's Java client
  does: each pass is one acks=all wait per broker, released by one follower fetch round;
* **all acknowledged**: one confluent-kafka producer (acks=all, linger.ms 5) sends one record to
  every partition; seconds from the first produce() to the last delivery report; then **again**
  (the first record of a leader epoch costs each follower a durable ``leader-epoch-checkpoint``
  write, as in Kafka; the second pass is replication alone).  librdkafka sends one Produce request
  per partition and a broker answers one request per connection at a time, so this is N/3
  acks=all round trips in a row on each connection;
* **latency**: ``--probes`` records one at a time to partition 0 (produce, flush): p50 / p99 of the
  acks=all round trip, printed against the figure at the first N;
* **idle CPU**: nothing is sent for ``--idle-s`` seconds; each broker's CPU seconds (user + system,
  from /proc) over that time, as CPU-s per minute per broker.

With ``--shutdown``, after the last step: **controlled shutdown** of broker 1 (SIGTERM until the
process exited), with another broker's Metadata polled every 0.2 s meanwhile and until every
partition has a live leader again (the most partitions seen without a leader, and seconds until none
was led by the stopped broker); then **rejoin**: broker 1 started again, seconds until it is back in
the ISR of every partition of the cluster (start included).

Then, same run, throughput: acks=all on a one-partition RF 3 topic against acks=1 on a one-partition
RF 1 topic (``--records`` records of 100 bytes, as bench_replication.py; a million by default: a
short run measures the connection and metadata start-up more than the replication), and their ratio.
Each figure is printed with its growth per 1,000 partitions from the first step.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_replication import run as throughput  # noqa: E402


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its threads (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_full_isr(w, topic: str, partitions: int, timeout_s: float) -> float:
    """Seconds until every partition of ``topic`` has a leader and 3 in-sync replicas."""
    from pyklog.broker.protocol import ApiKey

    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        md = w.request(ApiKey.METADATA, 5, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
        parts = md["topics"][0]["partitions"] if md["topics"] else []
        if len(parts) == partitions and all(p["leader_id"] >= 0 and len(p["isr_nodes"]) == 3 for p in parts):
            return time.monotonic() - start
        time.sleep(0.5)
    raise TimeoutError(f"{topic}: not every partition has 3 in-sync replicas after {timeout_s:.0f} s")


def settle(pids: list, timeout_s: float, busy: float = 0.15) -> float:
    """Seconds until every broker uses less than ``busy`` of a core over 2 s (the creation's work
    -- logs, partition-state events -- is done), at most ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        before = [cpu_seconds(p) for p in pids]
        time.sleep(2.0)
        if all(cpu_seconds(p) - b < busy * 2.0 for p, b in zip(pids, before)):
            break
    return time.monotonic() - start


def leaderless(w, exclude: int | None = None) -> tuple[int, int, int]:
    """(partitions without a live leader, partitions led by ``exclude``, partitions whose ISR lacks
    ``exclude``) over every topic, from one Metadata request on ``w``."""
    from pyklog.broker.protocol import ApiKey

    md = w.request(ApiKey.METADATA, 5, {"topics": None, "allow_auto_topic_creation": False})
    live = {b["node_id"] for b in md["brokers"]}
    none = led = out = 0
    for t in md["topics"]:
        for p in t["partitions"]:
            if p["leader_id"] < 0 or p["leader_id"] not in live:
                none += 1
            elif p["leader_id"] == exclude:
                led += 1
            if exclude is not None and exclude in p["replica_nodes"] and exclude not in p["isr_nodes"]:
                out += 1
    return none, led, out


def shutdown_and_rejoin(brokers, victim: int, watcher: int, timeout_s: float = 600.0) -> dict:
    """SIGTERM broker ``victim`` (a controlled shutdown) while broker ``watcher``'s Metadata is polled;
    then start it again and wait until it is in every ISR it belongs to."""
    import signal
    import threading

    import support

    b = brokers[victim]
    seen = {"max_leaderless": 0, "polls": 0}
    stop = threading.Event()
    moved_at: list = []

    def poll():
        with support.Wire(brokers[watcher].port) as w:
            while not stop.is_set():
                try:
                    none, led, _ = leaderless(w, b.broker_id)
                except Exception:  # noqa: BLE001 - a slow answer under load: poll again
                    continue
                seen["polls"] += 1
                seen["max_leaderless"] = max(seen["max_leaderless"], none)
                if not moved_at and led == 0 and none == 0:
                    moved_at.append(time.monotonic())
                stop.wait(0.2)

    t0 = time.monotonic()
    b.proc.send_signal(signal.SIGTERM)
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    b.proc.wait(timeout_s)
    exited = time.monotonic() - t0
    b.stop()  # closes its output file
    deadline = time.monotonic() + 60
    while not moved_at and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # a leaderless partition right after the exit would show now
    stop.set()
    poller.join(10)
    out = {
        "shutdown_s": exited,
        "leaders_moved_s": (moved_at[0] - t0) if moved_at else float("nan"),
        "max_leaderless": seen["max_leaderless"],
        "polls": seen["polls"],
    }
    t1 = time.monotonic()
    b.start(timeout=timeout_s)
    out["started_s"] = time.monotonic() - t1
    with support.Wire(brokers[watcher].port) as w:
        while time.monotonic() - t1 < timeout_s:
            none, _, missing = leaderless(w, b.broker_id)
            if missing == 0 and none == 0:
                break
            time.sleep(0.2)
    out["rejoin_s"] = time.monotonic() - t1
    return out


def one_to_each_batched(bootstrap: str, topics: dict) -> list:
    """pyklog's Producer, acks=all: one record to every partition of ``topics`` ({name: partitions}),
    twice; (seconds of each pass until every record is acknowledged or failed, records failed)."""
    from pyklog.connector.producer import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "request.timeout.ms": 300000,
            "delivery.timeout.ms": 900000,
            "client.id": "bench-acks-all",
        }
    )
    try:
        for t in topics:
            p.partitions_for(t)
        passes = []
        for _ in range(2):
            failed: list = []

            def done(md, exc, failed=failed):
                if exc is not None:
                    failed.append(exc)

            start = time.perf_counter()
            for t, n in topics.items():
                for i in range(n):
                    p.produce(t, b"z" * 100, partition=i, on_delivery=done)
            p.flush(600)
            passes.append((time.perf_counter() - start, len(failed)))
        return passes
    finally:
        p.close(10)


def one_to_each(bootstrap: str, topic: str, partitions: int, probes: int) -> dict:
    from confluent_kafka import Producer

    errors: list = []
    acked = [0]

    def done(err, msg):
        if err is not None:
            errors.append(err)
        else:
            acked[0] += 1

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "queue.buffering.max.messages": 200000,
            "message.timeout.ms": 600000,
            "request.timeout.ms": 600000,
        }
    )
    p.list_topics(topic, timeout=30)
    passes = []
    for _ in range(2):
        start = time.perf_counter()
        for i in range(partitions):
            p.produce(topic, b"x" * 100, partition=i, on_delivery=done)
            p.poll(0)
        p.flush(900)
        passes.append(time.perf_counter() - start)
    lat = []
    for _ in range(probes):
        t0 = time.perf_counter()
        p.produce(topic, b"y" * 100, partition=0, on_delivery=done)
        p.flush(60)
        lat.append(time.perf_counter() - t0)
    lat.sort()
    return {
        "all_acked_s": passes[0],
        "second_pass_s": passes[1],
        "acked": acked[0] - probes - partitions,
        "errors": len(errors),
        "p50_ms": lat[len(lat) // 2] * 1000,
        "p99_ms": lat[min(len(lat) - 1, int(0.99 * len(lat)))] * 1000,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", default="100,1000,2000")
    ap.add_argument("--idle-s", type=float, default=20.0)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--records", type=int, default=1000000)
    ap.add_argument("--dir", default=None)
    ap.add_argument(
        "--max-topic-partitions",
        type=int,
        default=0,
        help="split each step into topics of at most this many partitions (0: one topic per step)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the brokers' directories and logs (printed at the end)")
    ap.add_argument(
        "--shutdown", action="store_true", help="after the last step: controlled shutdown of a broker, then its rejoin"
    )
    args = ap.parse_args()
    steps = [int(x) for x in args.partitions.split(",")]
    sys.path.insert(0, os.path.join(HERE, "..", "tests"))
    import support

    from pyklog.broker.protocol import ApiKey
    from pyklog.broker.server.process import BrokerProcess
    from pyklog.broker.zk.server import ZooKeeperServer

    workdir = tempfile.mkdtemp(prefix="pyklog-bench-acks-all-", dir=args.dir)
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    brokers = []
    print(f"load average at start: {os.getloadavg()[0]:.1f} (cores: {os.cpu_count()})", flush=True)
    try:
        for i in range(3):
            brokers.append(BrokerProcess(zk.connect_string, i, log_dir=os.path.join(workdir, f"b{i}")).start())
        bootstrap = ",".join(b.bootstrap for b in brokers)
        rows = []
        total = 0
        with support.Wire(brokers[0].port) as w:
            support.wait_for(
                lambda: (
                    len(w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})["brokers"])
                    == 3
                )
            )
            for n in steps:
                size = args.max_topic_partitions or n
                topics = {
                    f"acks-all-{n}-{i}" if size < n else f"acks-all-{n}": min(size, n - i * size)
                    for i in range((n + size - 1) // size)
                }
                t0 = time.monotonic()
                for topic, k in topics.items():
                    r = support.create_topic(
                        w, topic, k, replication_factor=3, configs=[{"name": "min.insync.replicas", "value": "2"}]
                    )
                    assert r["error_code"] == 0, r
                for topic, k in topics.items():
                    wait_full_isr(w, topic, k, 900)
                total += n
                created = time.monotonic() - t0
                settled = settle([b.proc.pid for b in brokers], 600)
                batched = one_to_each_batched(bootstrap, topics)
                res = {"all_acked_s": 0.0, "second_pass_s": 0.0, "acked": 0, "errors": 0}
                for topic, k in topics.items():  # librdkafka: one Produce per partition
                    one = one_to_each(bootstrap, topic, k, args.probes if topic == next(iter(topics)) else 1)
                    res["all_acked_s"] += one["all_acked_s"]
                    res["second_pass_s"] += one["second_pass_s"]
                    res["acked"] += one["acked"]
                    res["errors"] += one["errors"]
                    res.setdefault("p50_ms", one["p50_ms"])
                    res.setdefault("p99_ms", one["p99_ms"])
                (res["batched_s"], res["batched_failed"]), (res["batched_again_s"], res["batched_again_failed"]) = (
                    batched
                )
                time.sleep(2.0)
                before = [cpu_seconds(b.proc.pid) for b in brokers]
                time.sleep(args.idle_s)
                after = [cpu_seconds(b.proc.pid) for b in brokers]
                idle = [(a - b) * 60.0 / args.idle_s for a, b in zip(after, before)]
                res.update(n=n, total=total, created_s=created, idle=idle, load=os.getloadavg()[0])
                rows.append(res)
                print(
                    f"N={n:5d} (cluster {total:5d}): created+ISR {created:6.1f} s, settled {settled:5.1f} s  "
                    f"one request per broker: all acknowledged {res['batched_s']:6.2f} s, again "
                    f"{res['batched_again_s']:6.2f} s ({res['batched_failed']}, {res['batched_again_failed']} failed)  "
                    "librdkafka: all acknowledged "
                    f"{res['all_acked_s']:7.2f} s, again {res['second_pass_s']:6.2f} s "
                    f"({res['acked']} acked, {res['errors']} errors)  "
                    f"p50 {res['p50_ms']:6.1f} ms  p99 {res['p99_ms']:6.1f} ms  idle CPU-s/min per broker "
                    f"{' '.join(f'{x:.2f}' for x in idle)}  load {res['load']:.1f}",
                    flush=True,
                )
        if args.shutdown:
            res = shutdown_and_rejoin(brokers, 1, 0)
            print(
                f"controlled shutdown of broker 1 with {total} partitions in the cluster: exited after "
                f"{res['shutdown_s']:.1f} s, every partition led by another broker after {res['leaders_moved_s']:.1f} s, "
                f"at most {res['max_leaderless']} partition(s) without a leader ({res['polls']} polls); started again "
                f"in {res['started_s']:.1f} s, back in every ISR after {res['rejoin_s']:.1f} s; "
                f"load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        with support.Wire(brokers[0].port) as w:  # a new connection: the first may have idled out
            for name, replicas, mis in (("tp-rf1", [0], []), ("tp-rf3", [0, 1, 2], [2])):
                r = support.create_topic(
                    w,
                    name,
                    -1,
                    replication_factor=-1,
                    assignments=[{"partition_index": 0, "broker_ids": replicas}],
                    configs=[{"name": "min.insync.replicas", "value": "2"}] if mis else [],
                )
                assert r["error_code"] == 0, r
                wait_full_isr(w, name, 1, 60) if mis else time.sleep(1.0)
        base = rows[0]
        for r in rows[1:]:
            k = (r["n"] - base["n"]) / 1000.0
            print(
                f"N={r['n']} against N={base['n']}: one request per broker x{r['batched_s'] / base['batched_s']:.2f} "
                f"(+{(r['batched_s'] - base['batched_s']) / k:.2f} s per 1,000), again "
                f"x{r['batched_again_s'] / base['batched_again_s']:.2f}; librdkafka: "
                f"all acknowledged x{r['all_acked_s'] / base['all_acked_s']:.2f} "
                f"(+{(r['all_acked_s'] - base['all_acked_s']) / k:.2f} s per 1,000), again "
                f"x{r['second_pass_s'] / base['second_pass_s']:.2f} "
                f"(+{(r['second_pass_s'] - base['second_pass_s']) / k:.2f} s per 1,000), "
                f"p50 x{r['p50_ms'] / base['p50_ms']:.2f}, p99 x{r['p99_ms'] / base['p99_ms']:.2f}, idle CPU "
                f"+{(max(r['idle']) - max(base['idle'])) / ((r['total'] - base['total']) / 1000.0):.2f} "
                f"CPU-s/min per broker per 1,000 partitions hosted"
            )
        a = throughput(brokers[0].bootstrap, "tp-rf1", "1", args.records, 100, probes=100)
        b = throughput(brokers[0].bootstrap, "tp-rf3", "all", args.records, 100, probes=100)
        print(
            f"throughput with {total} partitions in the cluster: acks=1 RF 1 {a['records_s']:.0f} records/s, "
            f"acks=all RF 3 {b['records_s']:.0f} records/s: x{b['records_s'] / a['records_s']:.2f}; "
            f"load {os.getloadavg()[0]:.1f}"
        )
    finally:
        for b in brokers:
            b.stop()
        zk.stop()
        if args.keep:
            print(f"kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
