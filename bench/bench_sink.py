"""Spark sink throughput against the stream read of the same rows, in the same run.

Starts ZooKeeper and one broker (examples/local_cluster.py), writes ``--records`` rows of
``--size`` bytes (keys ``k<i>``) into a source topic of ``--partitions`` partitions, then in ONE
SparkSession (local[2]), round by round (the machine is shared; best and median rounds reported):

* baseline: the pyklog stream read of the source topic (Trigger.AvailableNow) into ``noop``;
* the sink: ``df.write.format("pyklog")`` of the same rows from a cached DataFrame in ``--tasks``
  tasks, keyed (``key``, ``value``) and keyless (``value``), with ``deliveryGuarantee``
  at-least-once and exactly-once.

Prints sink / read for each (goal >= 0.5, stretch 1.0).  Every output topic is read back
afterwards (read_committed): the row count must match.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_sink.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
warnings.filterwarnings("ignore", category=FutureWarning)

from local_cluster import LocalCluster  # noqa: E402

CASES = [
    ("keyed", "at-least-once"),
    ("keyless", "at-least-once"),
    ("keyed", "exactly-once"),
    ("keyless", "exactly-once"),
]


def stream_read(spark, bootstrap: str, n: int) -> float:
    df = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "bench-src")
        .option("startingOffsets", "earliest")
        .load()
    )
    t0 = time.perf_counter()
    q = df.writeStream.format("noop").trigger(availableNow=True).start()
    q.awaitTermination()
    wall = time.perf_counter() - t0
    if q.exception() is not None:
        raise RuntimeError(q.exception())
    rows = sum(p["numInputRows"] for p in q.recentProgress)
    assert rows == n, (rows, n)
    steady = sum(p["durationMs"].get("triggerExecution", 0) for p in q.recentProgress if p["numInputRows"]) / 1000
    return n / wall, n / max(steady, 1e-9)


def sink_write(df, cluster, topic: str, guarantee: str, n: int) -> float:
    t0 = time.perf_counter()
    (
        df.write.mode("append")
        .format("pyklog")
        .option("zookeeper.connect", cluster.zookeeper)
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("topic", topic)
        .option("deliveryGuarantee", guarantee)
        .option("kafka.linger.ms", "50")
        .option("kafka.batch.size", str(512 << 10))
        .save()
    )
    return n / (time.perf_counter() - t0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--cases", default="all", help="comma-separated case numbers 0-3 of " + str(CASES))
    args = ap.parse_args()
    n = args.records
    cases = CASES if args.cases == "all" else [CASES[int(i)] for i in args.cases.split(",")]
    print(
        f"pyklog sink vs stream read: {n:,} rows of {args.size} B, {args.partitions} partitions, "
        f"{args.tasks} tasks, local[2], {args.rounds} rounds"
    )
    with LocalCluster(partitions=args.partitions) as cluster:
        from pyklog.connector.client import ClusterClient
        from pyklog.connector.producer import Producer

        with ClusterClient(cluster.bootstrap) as c:
            c.create_topic("bench-src", args.partitions)
            for kind, g in cases:
                for r in range(args.rounds + 1):
                    c.create_topic(f"bench-out-{kind}-{g}-{r}", args.partitions)
        value = os.urandom(args.size)
        with Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "batch.size": 512 << 10}) as p:
            step = 10_000
            for i in range(0, n, step):
                k = min(step, n - i)
                p.send_many("bench-src", None, [b"k%d" % j for j in range(i, i + k)], [value] * k, None)
            p.flush()

        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("pyklog-bench-sink")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        import pyklog

        pyklog.register(spark)
        rows = (
            spark.read.format("pyklog")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("subscribe", "bench-src")
            .load()
            .select("key", "value")
            .repartition(args.tasks)
            .cache()
        )
        assert rows.count() == n
        frames = {"keyed": rows, "keyless": rows.select("value")}
        # warm-up: Python workers, imports, the transaction coordinator
        stream_read(spark, cluster.bootstrap, n)
        steadies = []
        for kind, g in cases:
            sink_write(frames[kind].limit(1000), cluster, f"bench-out-{kind}-{g}-{args.rounds}", g, 1000)
        reads, sinks = [], {c: [] for c in cases}
        for r in range(args.rounds):
            wall_rate, steady_rate = stream_read(spark, cluster.bootstrap, n)
            reads.append(wall_rate)
            steadies.append(steady_rate)
            print(
                f"  round {r}: stream read -> noop {wall_rate:,.0f} rows/s wall, {steady_rate:,.0f} steady "
                "(without the query's start-up)"
            )
            for kind, g in cases if r % 2 == 0 else cases[::-1]:
                rate = sink_write(frames[kind], cluster, f"bench-out-{kind}-{g}-{r}", g, n)
                sinks[(kind, g)].append(rate)
                print(
                    f"  round {r}: sink {kind:8s} {g:14s} {rate:,.0f} rows/s ({rate / reads[-1]:.2f}x this "
                    "round's read)"
                )
        from pyklog.connector.consumer import SimpleConsumer

        with SimpleConsumer(cluster.bootstrap, isolation_level="read_committed") as c:
            for kind, g in cases:
                for r in range(args.rounds):
                    t = f"bench-out-{kind}-{g}-{r}"
                    got = sum(c.latest_offset(t, p) for p in range(args.partitions))
                    if g == "at-least-once":
                        assert got == n, f"{t}: log end offsets sum {got}, expected {n}"
                    else:  # markers take offsets: count the records
                        got = sum(1 for p in range(args.partitions) for _ in c.iter_records(t, p, 0))
                        assert got == n, f"{t}: {got} rows, expected {n}"
        best_read, med_read = max(reads), statistics.median(reads)
        print(
            f"stream read: best {best_read:,.0f}, median {med_read:,.0f} rows/s wall; best "
            f"{max(steadies):,.0f} rows/s steady"
        )
        print("sink / stream read (best / median rounds; goal >= 0.5):")
        for kind, g in cases:
            s = sinks[(kind, g)]
            print(
                f"  {kind:8s} {g:14s} best {max(s):,.0f} rows/s = {max(s) / best_read:.2f}x, "
                f"median {statistics.median(s):,.0f} = {statistics.median(s) / med_read:.2f}x; "
                f"best / best read steady {max(s) / max(steadies):.2f}x"
            )
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
