"""Transactional producer throughput: pyklog's Producer against confluent-kafka (librdkafka) on the same broker.

Starts its own ZooKeeper (from pyspark's jars) and one pyklog broker process (``python -m pyklog.broker``,
with the transaction coordinator), creates one topic per run, and writes ``--records`` records of
``--size`` bytes (null keys) in transactions of ``--txn-size`` records with

* pyklog ``Producer`` (transactional.id set): ``begin_transaction()``, ``produce()`` per record,
  ``commit_transaction()``;
* pyklog with ``send_many()`` (one call per transaction) instead of ``produce()``;
* confluent-kafka ``Producer`` (transactional.id set): ``begin_transaction()``, ``produce()``,
  ``commit_transaction()``;

each with the same settings (acks=all, idempotence, linger.ms, batch.size, compression), timed from
the first ``begin_transaction()`` to the return of the last ``commit_transaction()`` (init_transactions
and metadata outside the timed part).  Afterwards every run is read back with read_committed and must
hold exactly ``--records`` records.  Prints records/s and transactions/s for each and the ratio
pyklog / confluent-kafka.  The broker is a Python process too, so both clients share the same
server-side ceiling (a commit costs an EndTxn round trip and the coordinator's markers).

    .venv/bin/python bench/bench_txn_producer.py --records 100000 --size 100 --txn-size 1000
"""

from __future__ import annotations

import os
import time
import uuid

from _common import bench_broker, confluent_produce, confluent_settings, producer_parser


def run_pyklog(bootstrap, topic, args, payload, bulk: bool) -> float:
    from pyklog.connector.producer import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}",
            "linger.ms": args.linger_ms,
            "batch.size": args.batch_size,
            "compression.type": args.compression,
            "client.id": "bench-pyklog",
        }
    )
    p.init_transactions(60)
    p.partitions_for(topic)
    chunk = [payload] * args.txn_size
    t0 = time.perf_counter()
    left = args.records
    while left > 0:
        k = min(args.txn_size, left)
        p.begin_transaction()
        if bulk:
            p.send_many(topic, None, None, chunk if k == len(chunk) else chunk[:k])
        else:
            produce = p.produce
            for _ in range(k):
                produce(topic, payload)
        p.commit_transaction(120)
        left -= k
    dt = time.perf_counter() - t0
    failed = p.failed_records
    p.close()
    if failed:
        raise SystemExit(f"pyklog: {failed} records failed")
    return dt


def run_confluent(bootstrap, topic, args, payload) -> float:
    from confluent_kafka import Producer as CProducer

    errors = []

    def cb(err, msg):
        if err is not None:
            errors.append(err)

    p = CProducer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-ck-{uuid.uuid4().hex[:8]}",
            **confluent_settings(args, args.txn_size),
        }
    )
    p.init_transactions(60)
    p.list_topics(topic, timeout=30)
    t0 = time.perf_counter()
    left = args.records
    while left > 0:
        k = min(args.txn_size, left)
        p.begin_transaction()
        confluent_produce(p, topic, payload, k, cb)
        p.commit_transaction(120)  # flushes first
        left -= k
    dt = time.perf_counter() - t0
    if errors:
        raise SystemExit(f"confluent-kafka: errors: {errors[:3]}")
    return dt


def count_committed(bootstrap, topic) -> int:
    from pyklog.connector.consumer import SimpleConsumer

    n = 0
    with SimpleConsumer(bootstrap, isolation_level="read_committed") as c:
        for p in c.partitions_for(topic):
            end = c.latest_offset(topic, p)
            off = 0
            while off < end:
                r = c.fetch(topic, p, off)
                n += len(r.records)
                off = r.next_offset
    return n


def main() -> None:
    ap = producer_parser(__doc__, records=100000)
    ap.add_argument("--txn-size", type=int, default=1000, help="records per transaction")
    args = ap.parse_args()
    with bench_broker(**{"transaction.state.log.num.partitions": "4"}) as broker:
        from pyklog.connector.client import ClusterClient

        payload = os.urandom(args.size)
        names = ["pyklog produce()", "pyklog send_many()", "confluent-kafka produce()"]
        results: dict[str, list[float]] = {name: [] for name in names}
        with ClusterClient(broker.bootstrap) as admin:
            for rnd in range(args.rounds):
                for name in names:
                    topic = f"bench-txn-{names.index(name)}-{rnd}"
                    admin.create_topic(topic, args.partitions)
                    if name.startswith("confluent"):
                        dt = run_confluent(broker.bootstrap, topic, args, payload)
                    else:
                        dt = run_pyklog(broker.bootstrap, topic, args, payload, bulk="send_many" in name)
                    got = count_committed(broker.bootstrap, topic)
                    if got != args.records:
                        raise SystemExit(f"{name}: read_committed sees {got} records, expected {args.records}")
                    results[name].append(dt)
                    print(f"  round {rnd + 1}: {name:28s} {args.records / dt:12,.0f} records/s", flush=True)
        txns = -(-args.records // args.txn_size)
        print(
            f"\n{args.records} records x {args.size} B in {txns} transactions of {args.txn_size}, "
            f"{args.partitions} partitions, acks=all, linger.ms={args.linger_ms}, batch.size={args.batch_size}, "
            f"compression={args.compression}; best of {args.rounds}"
        )
        best = {name: min(ts) for name, ts in results.items()}
        base = args.records / best["confluent-kafka produce()"]
        for name, dt in best.items():
            rate = args.records / dt
            print(f"{name:28s} {rate:12,.0f} records/s {txns / dt:8.1f} txn/s   ratio {rate / base:5.2f}x")


if __name__ == "__main__":
    main()
