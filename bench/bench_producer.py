"""Producer throughput: pyklog's Producer against confluent-kafka (librdkafka) on the same broker.

Starts its own ZooKeeper (from pyspark's jars) and one pyklog broker process (``python -m pyklog.broker``),
creates one topic per run, and writes ``--records`` records of ``--size`` bytes (null keys) with

* pyklog ``Producer.produce()`` (no per-record future: the bulk path),
* pyklog ``Producer.send()`` (a concurrent.futures.Future per record),
* pyklog ``Producer.send_many()`` (lists of 10,000 values per call, as the Spark sink does per
  Arrow batch),
* confluent-kafka ``Producer.produce()``,

each with the same settings (acks=all, idempotence on, linger.ms, batch.size, compression) and
timed from the first record to the end of ``flush()``.  Prints records/s and MB/s for each and the
ratio pyklog / confluent-kafka (goal: >= 0.5), and for the pyklog runs the time spent queueing
(the caller's share: the loop of produce() / send() / send_many() calls, before flush()).  The broker is a Python process too, so both clients
share the same server-side ceiling.

    .venv/bin/python bench/bench_producer.py --records 200000 --size 100 [--compression lz4]
"""

from __future__ import annotations

import os
import time

from _common import bench_broker, confluent_produce, confluent_settings, producer_parser


def run_pyklog(bootstrap, topic, n, payload, args, mode: str) -> tuple[float, float]:
    from pyklog.connector.producer import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": args.linger_ms,
            "batch.size": args.batch_size,
            "compression.type": args.compression,
            "client.id": "bench-pyklog",
        }
    )
    p.partitions_for(topic)  # metadata outside the timed part, as for librdkafka below
    chunk = [payload] * 10000
    t0 = time.perf_counter()
    last = None
    if mode == "send":
        send = p.send
        for _ in range(n):
            last = send(topic, payload)
    elif mode == "send_many":
        send_many = p.send_many
        for i in range(0, n, len(chunk)):
            send_many(topic, None, None, chunk if n - i >= len(chunk) else chunk[: n - i])
    else:
        produce = p.produce
        for _ in range(n):
            produce(topic, payload)
    queued = time.perf_counter() - t0
    p.flush()
    if last is not None:
        last.result()
    dt = time.perf_counter() - t0
    failed = p.failed_records
    p.close()
    if failed:
        raise SystemExit(f"pyklog: {failed} records failed")
    return dt, queued


def run_confluent(bootstrap, topic, n, payload, args) -> float:
    from confluent_kafka import Producer as CProducer

    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    p = CProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, **confluent_settings(args, n)}
    )
    p.list_topics(topic, timeout=30)
    t0 = time.perf_counter()
    confluent_produce(p, topic, payload, n, cb)
    remaining = p.flush(120)
    dt = time.perf_counter() - t0
    if remaining or errors:
        raise SystemExit(f"confluent-kafka: {remaining} undelivered, errors: {errors[:3]}")
    return dt


def count_records(bootstrap, topic) -> int:
    from pyklog.connector.client import ClusterClient

    with ClusterClient(bootstrap) as c:
        parts = c.partitions_for(topic)
        ends = c.list_offsets({(topic, p): -1 for p in parts})
        return sum(ends.values())


def main() -> None:
    args = producer_parser(__doc__, records=200000).parse_args()
    with bench_broker() as broker:
        from pyklog.connector.client import ClusterClient

        payload = os.urandom(args.size)
        modes = {"pyklog produce()": "produce", "pyklog send() + futures": "send", "pyklog send_many()": "send_many"}
        results: dict[str, list[float]] = {
            "pyklog produce()": [],
            "pyklog send() + futures": [],
            "pyklog send_many()": [],
            "confluent-kafka produce()": [],
        }
        queued: dict[str, list[float]] = {name: [] for name in modes}
        with ClusterClient(broker.bootstrap) as admin:
            for rnd in range(args.rounds):
                for name in results:
                    topic = f"bench-{name.split()[0]}-{modes.get(name, 'ck')}-{rnd}".replace("_", "-")
                    topic = topic.replace("confluent-kafka", "ck")
                    admin.create_topic(topic, args.partitions)
                    if name.startswith("confluent"):
                        dt = run_confluent(broker.bootstrap, topic, args.records, payload, args)
                    else:
                        dt, q = run_pyklog(broker.bootstrap, topic, args.records, payload, args, modes[name])
                        queued[name].append(q)
                    got = count_records(broker.bootstrap, topic)
                    if got != args.records:
                        raise SystemExit(f"{name}: the log holds {got} records, expected {args.records}")
                    results[name].append(dt)
                    print(f"  round {rnd + 1}: {name:28s} {args.records / dt:12,.0f} records/s", flush=True)
        mb = args.records * args.size / 1e6
        print(
            f"\n{args.records} records x {args.size} B, {args.partitions} partitions, acks=all, idempotence on, "
            f"linger.ms={args.linger_ms}, batch.size={args.batch_size}, compression={args.compression}; "
            f"best of {args.rounds}"
        )
        best = {name: min(ts) for name, ts in results.items()}
        base = args.records / best["confluent-kafka produce()"]
        for name, dt in best.items():
            rate = args.records / dt
            extra = ""
            if queued.get(name):
                extra = f"   queueing {args.records / min(queued[name]):12,.0f} records/s"
            print(f"{name:28s} {rate:12,.0f} records/s {mb / dt:8.1f} MB/s   ratio {rate / base:5.2f}x{extra}")


if __name__ == "__main__":
    main()
