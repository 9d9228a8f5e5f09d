"""A Spark Connect client script as users write them: it registers pyklog, reads and writes through
``format("pyklog")``, runs a consumer-group streaming query to its end, prints what it saw as one
JSON line and ends WITHOUT ``spark.stop()``.  Run by test_spark_connect.py as a subprocess, which
requires it to exit on its own.

argv: connect url, bootstrap servers, ZooKeeper connect string, input topic, output topic, group id,
checkpoint directory.
"""

from __future__ import annotations

import json
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import pyklog

url, bootstrap, zk_connect, source, target, group, checkpoint = sys.argv[1:8]
spark = SparkSession.builder.remote(url).getOrCreate()
pyklog.register(spark)

rows = spark.read.format("pyklog").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source).load()
read = rows.count()

out = rows.limit(1000).select(F.col("key"), F.col("value"))
out.write.mode("append").format("pyklog").option("kafka.bootstrap.servers", bootstrap).option("topic", target).save()

query = (
    spark.readStream.format("pyklog")
    .option("zookeeper.connect", zk_connect)
    .option("subscribe", source)
    .option("group.id", group)
    .option("startingOffsets", "earliest")
    .load()
    .writeStream.format("noop")
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination()
progress = query.recentProgress
streamed = sum(p.numInputRows for p in progress)
print(json.dumps({"read": read, "streamed": streamed}), flush=True)
# no spark.stop(): the interpreter must exit by itself
