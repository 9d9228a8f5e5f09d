"""Streaming word count through pyklog: read lines from a topic, count words, write the counts back to
another topic (key = word, value = count).  The query runs in "complete" output mode (PySpark's
Python sinks accept append and complete, not update): every micro-batch with new lines writes the
whole table, so the latest record per key is the current count, as on a compacted topic.

    python examples/word_count.py --bootstrap 127.0.0.1:9092 --input lines --output word-counts \\
        --checkpoint /tmp/wc-checkpoint [--zookeeper 127.0.0.1:2181/pyklog --group word-count] \\
        [--available-now | --interval 5]

With ``--zookeeper`` and ``--group`` the query reads as a member of that consumer group, so
``pyklog-consumer-groups --describe --group word-count`` shows its lag while it runs, and a second
copy of the job with the same group splits the partitions with it.
Set PYSPARK_PYTHON to the Python that has pyklog installed (the Makefile does).
"""

from __future__ import annotations

import argparse
import os
import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F


def word_counts(lines: DataFrame) -> DataFrame:
    """Lines (a pyklog source DataFrame) -> (word, count) over the whole stream."""
    words = lines.select(F.explode(F.split(F.lower(F.col("value").cast("string")), r"[^a-z0-9']+")).alias("word"))
    return words.where(F.length("word") > 0).groupBy("word").count()


def start_word_count(
    spark: SparkSession,
    *,
    input_topic: str,
    output_topic: str,
    checkpoint: str,
    bootstrap: str | None = None,
    zookeeper: str | None = None,
    group: str | None = None,
    available_now: bool = False,
    interval_s: float = 5.0,
    starting_offsets: str = "earliest",
    max_offsets_per_trigger: int | None = None,
):
    """Start the streaming query; returns the StreamingQuery."""
    reader = (
        spark.readStream.format("pyklog").option("subscribe", input_topic).option("startingOffsets", starting_offsets)
    )
    if bootstrap:
        reader = reader.option("kafka.bootstrap.servers", bootstrap)
    if zookeeper:
        reader = reader.option("zookeeper.connect", zookeeper)
    if group:
        reader = reader.option("group.id", group)
    if max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
    counts = word_counts(reader.load())
    out = counts.select(F.col("word").alias("key"), F.col("count").cast("string").alias("value"))
    writer = (
        out.writeStream.format("pyklog")
        .outputMode("complete")
        .option("topic", output_topic)
        .option("checkpointLocation", checkpoint)
    )
    writer = (
        writer.option("kafka.bootstrap.servers", bootstrap)
        if bootstrap
        else writer.option("zookeeper.connect", zookeeper)
    )
    writer = (
        writer.trigger(availableNow=True) if available_now else writer.trigger(processingTime=f"{interval_s} seconds")
    )
    return writer.queryName(f"word_count_{input_topic}".replace("-", "_")).start()


def read_counts(
    spark: SparkSession, topic: str, *, bootstrap: str | None = None, zookeeper: str | None = None
) -> dict[str, int]:
    """The current count of every word: the latest record per key of the output topic (batch read)."""
    r = spark.read.format("pyklog").option("subscribe", topic)
    r = r.option("kafka.bootstrap.servers", bootstrap) if bootstrap else r.option("zookeeper.connect", zookeeper)
    df = r.load().select(
        F.col("key").cast("string").alias("word"),
        F.col("value").cast("string").cast("long").alias("n"),
        "partition",
        "offset",
    )
    latest = df.groupBy("word").agg(F.max(F.struct("partition", "offset", "n")).alias("last"))
    return {row.word: row.last.n for row in latest.collect()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bootstrap", help="kafka.bootstrap.servers")
    ap.add_argument("--zookeeper", help="zookeeper.connect (brokers found in the ZooKeeper registry)")
    ap.add_argument("--group", help="group.id (default: a fresh group per query)")
    ap.add_argument("--input", default="lines")
    ap.add_argument("--output", default="word-counts")
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    ap.add_argument("--interval", type=float, default=5.0, help="trigger interval in seconds")
    args = ap.parse_args(argv)
    if not args.bootstrap and not args.zookeeper:
        ap.error("give --bootstrap or --zookeeper")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    spark = SparkSession.builder.appName("pyklog-word-count").config("spark.sql.shuffle.partitions", "2").getOrCreate()
    import pyklog

    pyklog.register(spark)
    q = start_word_count(
        spark,
        input_topic=args.input,
        output_topic=args.output,
        checkpoint=args.checkpoint,
        bootstrap=args.bootstrap,
        zookeeper=args.zookeeper,
        group=args.group,
        available_now=args.available_now,
        interval_s=args.interval,
    )
    try:
        q.awaitTermination()
    except KeyboardInterrupt:
        q.stop()
    counts = read_counts(spark, args.output, bootstrap=args.bootstrap, zookeeper=args.zookeeper)
    for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:20]:
        print(f"{n:8d}  {word}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
