"""Typed Avro writes of the Spark sink against its bytes writes of the same rows, same run.

Starts ZooKeeper, one broker and pyklog's schema registry; builds ``--records`` rows of a 6-field
record (string, int, double, boolean, timestamp, optional string; the record of bench_typed.py) in
``--tasks`` Spark partitions, cached; then in ONE SparkSession (local[2]) writes them ``--runs``
times each way, alternating, each run to a fresh topic of ``--partitions`` partitions:

* bytes: ``value`` is the row as a binary column (its fields joined by commas, about the Avro
  record's size), written as is;
* typed: ``value`` is the struct, written with ``valueFormat=avro-confluent`` (the schema derived
  from the struct and registered once per write; every row encoded with fastavro's C writer).

Prints each run's seconds and rows/s, best of runs, and typed / bytes.  Every topic is counted.

    .venv/bin/python bench/bench_typed_write.py [--records 1000000] [--partitions 4] [--tasks 2] [--runs 3]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from _common import bench_broker  # noqa: E402

STRUCT = (
    "struct(sensor, site, celsius, ok, at, note) AS value",
    "CAST(concat_ws(',', sensor, site, celsius, ok, CAST(at AS LONG), note) AS BINARY) AS value",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from pyspark.sql import SparkSession

    import pyklog
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.consumer import SimpleConsumer
    from pyklog.connector.schema_registry.process import RegistryProcess

    with bench_broker() as broker:
        registry = RegistryProcess(broker.bootstrap, tempfile.mkdtemp(prefix="pyklog-bench-sr-")).start()
        try:
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("WARN")
            pyklog.register(spark)
            rows = spark.range(0, args.records, 1, args.tasks).selectExpr(
                "concat('s-', CAST(id % 1000 AS STRING)) AS sensor",
                "CAST(id % 97 AS INT) AS site",
                "CAST(id AS DOUBLE) * 0.01 AS celsius",
                "id % 2 = 0 AS ok",
                "timestamp_millis(1700000000000 + id) AS at",
                "CASE WHEN id % 3 = 0 THEN 'checked' END AS note",
            )
            frames = {
                "typed": rows.selectExpr(STRUCT[0]).cache(),
                "bytes": rows.selectExpr(STRUCT[1]).cache(),
            }
            for df in frames.values():
                df.count()  # built and cached outside the timing

            seq = [0]

            def write(name: str) -> str:
                seq[0] += 1
                topic = f"typed-write-{name}-{seq[0]}"
                with ClusterClient(broker.bootstrap) as c:
                    c.create_topic(topic, args.partitions)
                w = (
                    frames[name]
                    .write.mode("append")
                    .format("pyklog")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("topic", topic)
                    .option("kafka.linger.ms", "20")
                )
                if name == "typed":
                    w = w.option("valueFormat", "avro-confluent").option("schema.registry.url", registry.url)
                w.save()
                return topic

            write("bytes")  # warm-up: Python workers, producers
            times: dict[str, list[float]] = {"bytes": [], "typed": []}
            topics = []
            for _ in range(args.runs):
                for name in ("bytes", "typed"):
                    t = time.monotonic()
                    topics.append(write(name))
                    times[name].append(time.monotonic() - t)
            for name, ts in times.items():
                best = min(ts)
                print(
                    f"{name:6s} runs {' '.join(f'{x:.2f}s' for x in ts)}; best {best:.2f}s = "
                    f"{args.records / best:,.0f} rows/s"
                )
            with SimpleConsumer(broker.bootstrap) as c:
                for topic in topics:
                    n = sum(c.latest_offset(topic, p) for p in range(args.partitions))
                    assert n == args.records, f"{topic} holds {n} records, expected {args.records}"
            ratio = min(times["bytes"]) / min(times["typed"])
            print(f"typed / bytes write throughput: {ratio:.2f}x (same run, best of {args.runs})")
            spark.stop()
        finally:
            registry.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
