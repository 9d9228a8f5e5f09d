"""A Spark driver for the exactly-once sink's fault tests (tests/integration/spark/test_sink_exactly_once.py):
``python tests/integration/spark/sink_exactly_once_driver.py --bootstrap HOST:PORT --source A --sink B
--checkpoint DIR [--zookeeper ZK] [--available-now]``.

It streams topic A into topic B with ``deliveryGuarantee=exactly-once`` (local[2] Spark, its own
JVM), restarting from ``--checkpoint``.  The sink keeps its commit records in ZooKeeper when given
``--zookeeper`` (its ``zookeeper.connect``), else in the cluster's ``__pyklog_spark_sinks`` topic.  Without ``--available-now`` it runs until it is killed
(the test SIGKILLs its whole process group: this Python driver, the JVM and Spark's Python workers);
with it, it processes what A holds now and exits 0.  The sink's test hook
``PYKLOG_TEST_SINK_COMMIT_PAUSE_FILE`` (inherited through the environment by the driver worker that
runs ``commit``) makes a commit pause between two transaction completions.
"""

from __future__ import annotations

import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from tests.integration.transaction_support import child_parser  # noqa: E402  (run as a script: the repository root first)


def main(argv=None) -> int:
    ap = child_parser("--bootstrap", "--source", "--sink", "--checkpoint")
    ap.add_argument("--zookeeper", default=None)
    ap.add_argument("--max-offsets-per-trigger", type=int, default=300)
    ap.add_argument("--transaction-timeout-ms", type=int, default=120000)
    ap.add_argument("--available-now", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    from pyspark.sql import SparkSession

    import pyklog  # sets PYSPARK_PYTHON for the workers

    local = os.path.join(args.checkpoint + ".local")
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("pyklog-eos-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", local)
        .config("spark.sql.warehouse.dir", os.path.join(local, "warehouse"))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    pyklog.register(spark)
    src = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_offsets_per_trigger))
        .load()
    )
    writer = src.selectExpr("key", "value").writeStream.format("pyklog")
    if args.zookeeper:
        writer = writer.option("zookeeper.connect", args.zookeeper)
    else:
        writer = writer.option("kafka.bootstrap.servers", args.bootstrap)
    writer = (
        writer.option("topic", args.sink)
        .option("deliveryGuarantee", "exactly-once")
        .option("kafka.transaction.timeout.ms", str(args.transaction_timeout_ms))
        .option("checkpointLocation", args.checkpoint)
    )
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    query = writer.start()
    print(f"STARTED {query.id}", flush=True)
    query.awaitTermination()
    print("DONE", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
