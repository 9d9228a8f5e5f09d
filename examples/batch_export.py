"""Batch export of a topic (or an offset/time range of it) to Parquet, CSV or JSON with pyklog.

    python examples/batch_export.py --bootstrap 127.0.0.1:9092 --topic events --out /tmp/events.parquet \\
        [--format parquet|csv|json] [--starting '{"events":{"0":100}}'] [--ending latest] \\
        [--starting-timestamp 1700000000000] [--min-partitions 8]

Keys and values are exported as UTF-8 strings (binary content that is not text is replaced), with
the record's partition, offset, timestamp and timestampType.  Prints how many records each
partition contributed.  Set PYSPARK_PYTHON to the Python that has pyklog installed.
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def load_range(
    spark: SparkSession,
    topic: str,
    *,
    bootstrap: str | None = None,
    zookeeper: str | None = None,
    starting: str = "earliest",
    ending: str = "latest",
    starting_timestamp: int | None = None,
    min_partitions: int | None = None,
) -> DataFrame:
    r = (
        spark.read.format("pyklog")
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
    )
    r = r.option("kafka.bootstrap.servers", bootstrap) if bootstrap else r.option("zookeeper.connect", zookeeper)
    if starting_timestamp is not None:
        r = r.option("startingTimestamp", str(starting_timestamp))
    if min_partitions:
        r = r.option("minPartitions", str(min_partitions))
    return r.load().select(
        F.col("key").cast("string").alias("key"),
        F.col("value").cast("string").alias("value"),
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
    )


def export(df: DataFrame, out: str, fmt: str = "parquet") -> dict[int, int]:
    """Write ``df`` to ``out``; return {partition: records}."""
    df = df.cache()
    df.write.mode("overwrite").format(fmt).option("header", "true").save(out)
    per = {r.partition: r["count"] for r in df.groupBy("partition").count().collect()}
    df.unpersist()
    return per


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap")
    ap.add_argument("--zookeeper")
    ap.add_argument("--topic", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--format", default="parquet", choices=["parquet", "csv", "json"])
    ap.add_argument("--starting", default="earliest", help="startingOffsets: earliest or JSON")
    ap.add_argument("--ending", default="latest", help="endingOffsets: latest or JSON")
    ap.add_argument("--starting-timestamp", type=int, help="startingTimestamp (ms since the epoch)")
    ap.add_argument("--min-partitions", type=int)
    args = ap.parse_args(argv)
    if not args.bootstrap and not args.zookeeper:
        ap.error("give --bootstrap or --zookeeper")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("pyklog-batch-export").getOrCreate()
    import pyklog

    pyklog.register(spark)
    df = load_range(
        spark,
        args.topic,
        bootstrap=args.bootstrap,
        zookeeper=args.zookeeper,
        starting=args.starting,
        ending=args.ending,
        starting_timestamp=args.starting_timestamp,
        min_partitions=args.min_partitions,
    )
    per = export(df, args.out, args.format)
    for p in sorted(per):
        print(f"partition {p}: {per[p]} records")
    print(f"exported {sum(per.values())} records of {args.topic} to {args.out} ({args.format})")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
