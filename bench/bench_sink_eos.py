"""Spark sink throughput: ``deliveryGuarantee=exactly-once`` against ``at-least-once`` in the same run.

Starts ZooKeeper and one broker (examples/local_cluster.py), then in ONE SparkSession (local[2]),
alternating the two guarantees round by round (the machine is shared; the best round of each is
reported, and the ratio exactly-once / at-least-once, goal >= 0.8):

1. batch: ``df.write.format("pyklog")`` of ``--records`` cached rows of ``--size`` bytes in
   ``--tasks`` tasks (exactly-once: one transaction per task, committed by the driver);
2. streaming: topic -> topic with ``Trigger.AvailableNow`` in micro-batches of
   ``--max-offsets-per-trigger`` (exactly-once adds, per micro-batch, each task's ZooKeeper
   registration and transaction set-up, and the driver's commit record and EndTxn per task).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_sink_eos.py [--records 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
warnings.filterwarnings("ignore", category=FutureWarning)

from local_cluster import LocalCluster  # noqa: E402

GUARANTEES = ("at-least-once", "exactly-once")


def _sink_options(writer, cluster, topic: str, guarantee: str):
    return (
        writer.format("pyklog")
        .option("zookeeper.connect", cluster.zookeeper)
        .option("topic", topic)
        .option("deliveryGuarantee", guarantee)
        .option("kafka.linger.ms", "50")
        .option("kafka.batch.size", str(512 << 10))
    )


def batch_round(spark, cluster, src, n: int, guarantee: str, topic: str) -> float:
    t0 = time.perf_counter()
    _sink_options(src.write.mode("append"), cluster, topic, guarantee).save()
    return n / (time.perf_counter() - t0)


def stream_round(spark, cluster, n: int, per_trigger: int, guarantee: str, topic: str) -> tuple[float, float, int]:
    df = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", cluster.bootstrap)
        .option("subscribe", "bench-src")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .load()
        .selectExpr("key", "value")
    )
    chk = tempfile.mkdtemp(prefix="pyklog-bench-eos-chk-")
    t0 = time.perf_counter()
    q = (
        _sink_options(df.writeStream, cluster, topic, guarantee)
        .option("checkpointLocation", chk)
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    wall = time.perf_counter() - t0
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    steady_ms = sum(p["durationMs"].get("triggerExecution", 0) for p in progress)
    assert rows == n, f"{guarantee}: streamed {rows} rows, expected {n}"
    return n / wall, n / (steady_ms / 1000.0), len(progress)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--partitions", type=int, default=2, help="partitions of every topic")
    ap.add_argument("--max-offsets-per-trigger", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    n = args.records
    print(
        f"pyklog sink benchmark: {n:,} rows of {args.size} B, {args.tasks} tasks, local[2], "
        f"{args.rounds} rounds per guarantee"
    )
    with LocalCluster(partitions=args.partitions) as cluster:
        from pyklog.connector.client import ClusterClient
        from pyklog.connector.producer import Producer

        with ClusterClient(cluster.bootstrap) as c:
            c.create_topic("bench-src", args.partitions)
            for g in GUARANTEES:
                for r in range(args.rounds + 1):
                    c.create_topic(f"bench-batch-{g}-{r}", args.partitions)
                    c.create_topic(f"bench-stream-{g}-{r}", args.partitions)
        value = b"v" * args.size
        with Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 20, "batch.size": 512 << 10}) as p:
            step = 10_000
            for i in range(0, n, step):
                k = min(step, n - i)
                p.send_many("bench-src", (i // step) % args.partitions, None, [value] * k, None)
            p.flush()

        from pyspark.sql import SparkSession

        spark = (
            SparkSession.builder.master("local[2]")
            .appName("pyklog-bench-sink-eos")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "4g")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        import pyklog

        pyklog.register(spark)
        src = (
            spark.range(0, n, numPartitions=args.tasks)
            .selectExpr(f"CAST(repeat('v', {args.size}) AS BINARY) AS value")
            .cache()
        )
        src.count()
        warm = src.limit(1000)
        for g in GUARANTEES:  # Python workers, imports, the transaction coordinator's partitions
            batch_round(spark, cluster, warm, 1000, g, f"bench-batch-{g}-{args.rounds}")
        best: dict = {}
        for r in range(args.rounds):
            for g in GUARANTEES if r % 2 == 0 else GUARANTEES[::-1]:
                rate = batch_round(spark, cluster, src, n, g, f"bench-batch-{g}-{r}")
                print(f"  batch  {g:14s} round {r}: {rate:,.0f} rows/s")
                best[("batch", g)] = max(best.get(("batch", g), 0), rate)
                wall, steady, batches = stream_round(
                    spark, cluster, n, args.max_offsets_per_trigger, g, f"bench-stream-{g}-{r}"
                )
                print(
                    f"  stream {g:14s} round {r}: {wall:,.0f} rows/s wall, {steady:,.0f} rows/s steady "
                    f"({batches} micro-batches)"
                )
                best[("stream", g)] = max(best.get(("stream", g), 0), wall)
                best[("stream-steady", g)] = max(best.get(("stream-steady", g), 0), steady)
        # what landed: every row once (committed view resolved from the log by a read_committed consumer)
        from pyklog.connector.consumer import SimpleConsumer

        with SimpleConsumer(cluster.bootstrap, isolation_level="read_committed") as c:
            for kind in ("batch", "stream"):
                for g in GUARANTEES:
                    for r in range(args.rounds):
                        t = f"bench-{kind}-{g}-{r}"
                        got = sum(1 for p in range(args.partitions) for _ in c.iter_records(t, p, 0))
                        ends = sum(c.latest_offset(t, p) for p in range(args.partitions))
                        print(f"  check {t}: {got:,} rows read (log end offsets sum {ends:,})")
                        assert got == n, f"{t}: {got} rows, expected {n}"
        print("best rounds, exactly-once / at-least-once (goal >= 0.8):")
        for kind in ("batch", "stream", "stream-steady"):
            a, e = best[(kind, "at-least-once")], best[(kind, "exactly-once")]
            print(f"  {kind:14s} {a:,.0f} vs {e:,.0f} rows/s: {e / a:.2f}x")
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
