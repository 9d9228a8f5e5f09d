"""``make demo``: pyklog end to end on this machine, then everything is shut down.

1. starts ZooKeeper (from pyspark's jars) and a pyklog broker process on a temporary directory, and
   the schema registry (``pyklog-schema-registry``, its schemas in the topic ``_schemas``), where
   it registers the Avro schema of the word counts;
2. produces lines of text to the topic ``lines`` (3 partitions);
3. runs the streaming word count (examples/word_count.py) through ``format("pyklog")`` as a member
   of consumer group ``demo-word-count``: it reads ``lines``, counts words, writes the counts to
   ``word-counts``; while it runs the demo prints the group's lag per partition (the committed
   offsets pyklog records in ZooKeeper against each partition's log end), produces a second wave of
   lines and watches the query catch up;
4. reads the counts back with a batch query, checks them against a count done in plain Python and
   prints the top words;
5. writes the counts as Avro records in Confluent's wire format (the registered schema's id, then
   the Avro bytes) to ``word-counts-avro`` and reads them back as typed columns
   (``valueFormat=avro-confluent``: ``value.word``, ``value.count``, the writer's schema looked up in
   the registry).
"""

from __future__ import annotations

import collections
import os
import random
import re
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
warnings.filterwarnings("ignore", category=FutureWarning)  # pyspark's note about pandas 3

from local_cluster import LocalCluster  # noqa: E402
from word_count import read_counts, start_word_count  # noqa: E402

WORDS = [
    "the",
    "log",
    "is",
    "the",
    "source",
    "of",
    "truth",
    "every",
    "consumer",
    "keeps",
    "its",
    "own",
    "offset",
    "a",
    "partition",
    "is",
    "an",
    "ordered",
    "sequence",
    "of",
    "records",
    "brokers",
    "append",
    "batches",
    "and",
    "consumers",
    "fetch",
    "them",
    "in",
    "order",
    "the",
    "group",
    "shares",
    "the",
    "partitions",
    "among",
    "its",
    "members",
    "spark",
    "reads",
    "each",
    "partition",
    "as",
    "a",
    "task",
    "offsets",
    "commit",
    "after",
    "every",
    "batch",
    "so",
    "lag",
    "shows",
    "how",
    "far",
    "behind",
    "the",
    "query",
    "is",
]


def make_lines(n: int, seed: int) -> list[str]:
    rnd = random.Random(seed)
    return [" ".join(rnd.choice(WORDS) for _ in range(rnd.randint(4, 14))) for _ in range(n)]


#: the Avro schema of a word count (registered in the schema registry as word-counts-value)
WORD_COUNT_SCHEMA = (
    '{"type": "record", "name": "WordCount", "namespace": "pyklog.demo", "fields": '
    '[{"name": "word", "type": "string"}, {"name": "count", "type": "long"}]}'
)


def produce(bootstrap: str, topic: str, lines: list[str]) -> None:
    from pyklog.connector.producer import Producer

    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 10, "compression.type": "lz4"}) as p:
        for i, line in enumerate(lines):
            p.produce(topic, line.encode(), key=str(i).encode())
        p.flush()


def lag_table(client, store, group: str, topic: str) -> tuple[str, int]:
    parts = client.partitions_for(topic)
    tps = [(topic, p) for p in parts]
    ends = client.list_offsets(dict.fromkeys(tps, -1))
    committed = store.fetch(group, tps)
    cells, total = [], 0
    for tp in tps:
        c = committed.get(tp)
        lag = ends[tp] - (c or 0)
        total += lag
        cells.append(f"p{tp[1]} {c if c is not None else '-'}/{ends[tp]} lag {lag}")
    return " | ".join(cells), total


def typed_counts(spark, bootstrap: str, registry_url: str, schema_id: int, counts: dict) -> dict:
    """Write ``counts`` as Confluent-framed Avro to ``word-counts-avro``, read them back typed."""
    import io
    import json

    from fastavro import parse_schema, schemaless_writer

    from pyklog.connector.producer import Producer
    from pyklog.connector.schema_registry.wire import encode

    schema = parse_schema(json.loads(WORD_COUNT_SCHEMA))
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 10}) as p:
        for word, n in counts.items():
            buf = io.BytesIO()
            schemaless_writer(buf, schema, {"word": word, "count": n})
            p.produce("word-counts-avro", encode(schema_id, buf.getvalue()), key=word.encode())
        p.flush()
    df = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", "word-counts-avro")
        .option("valueFormat", "avro-confluent")
        .option("valueSubject", "word-counts-value")
        .option("schema.registry.url", registry_url)
        .load()
        .select("value.word", "value.count")
    )
    print(f"== typed Avro columns from 'word-counts-avro' ({df.schema.simpleString()}):")
    for row in df.orderBy("count", ascending=False).limit(3).collect():
        print(f"   {row['count']:6d}  {row['word']}")
    return {row["word"]: row["count"] for row in df.collect()}


def main() -> int:
    t0 = time.monotonic()
    print("== starting ZooKeeper and a pyklog broker")
    with LocalCluster(partitions=3) as cluster:
        print(f"   ZooKeeper {cluster.zookeeper}, broker {cluster.bootstrap}")
        from pyklog.connector.client import ClusterClient
        from pyklog.connector.offsets import OffsetStore
        from pyklog.connector.schema_registry.client import SchemaRegistryClient
        from pyklog.connector.schema_registry.process import RegistryProcess

        registry = RegistryProcess(cluster.bootstrap, cluster.dir, "schema-registry").start()
        client = ClusterClient(cluster.bootstrap)
        store = OffsetStore.create("zookeeper", False, cluster.zookeeper)
        try:
            schema_id = SchemaRegistryClient(registry.url).register("word-counts-value", WORD_COUNT_SCHEMA)
            print(f"== schema registry {registry.url}: 'word-counts-value' registered with id {schema_id}")
            client.create_topic("lines", 3)
            client.create_topic("word-counts", 3)
            client.create_topic("word-counts-avro", 1)
            wave1, wave2 = make_lines(3000, 1), make_lines(2000, 2)
            produce(cluster.bootstrap, "lines", wave1)
            print(f"== produced {len(wave1)} lines to topic 'lines'")

            print("== starting Spark (local[2]) and the streaming word count through format('pyklog')")
            from pyspark.sql import SparkSession

            spark = (
                SparkSession.builder.master("local[2]")
                .appName("pyklog-demo")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.ui.showConsoleProgress", "false")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            import tempfile

            import pyklog

            pyklog.register(spark)
            checkpoint = tempfile.mkdtemp(prefix="pyklog-demo-chk-")
            q = start_word_count(
                spark,
                input_topic="lines",
                output_topic="word-counts",
                checkpoint=checkpoint,
                zookeeper=cluster.zookeeper,
                group="demo-word-count",
                interval_s=2,
                max_offsets_per_trigger=1500,
            )
            try:
                produced_second = False
                deadline = time.monotonic() + 300
                last = None
                while time.monotonic() < deadline:
                    if q.exception() is not None:
                        raise RuntimeError(f"the query failed: {q.exception()}")
                    table, total = lag_table(client, store, "demo-word-count", "lines")
                    if table != last:
                        print(f"   group demo-word-count: {table}")
                        last = table
                    if total == 0 and q.lastProgress is not None:
                        if produced_second:
                            break
                        produce(cluster.bootstrap, "lines", wave2)
                        produced_second = True
                        print(f"== produced {len(wave2)} more lines while the query runs")
                    time.sleep(1)
                else:
                    raise RuntimeError("the query did not catch up within 5 minutes")
                batches = [p for p in q.recentProgress if p["numInputRows"]]
                print(
                    f"== caught up: {len(batches)} micro-batches with data, "
                    f"{sum(p['numInputRows'] for p in batches)} lines read"
                )
            finally:
                q.stop()
            counts = read_counts(spark, "word-counts", zookeeper=cluster.zookeeper)
            expected = collections.Counter(w for line in wave1 + wave2 for w in re.findall(r"[a-z0-9']+", line))
            print("== word counts read back from topic 'word-counts' (batch read through pyklog):")
            for word, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:10]:
                print(f"   {n:6d}  {word}")
            if counts != dict(expected):
                wrong = {
                    w: (counts.get(w), expected.get(w))
                    for w in set(counts) | set(expected)
                    if counts.get(w) != expected.get(w)
                }
                print(f"!! counts differ from a plain Python count: {dict(list(wrong.items())[:10])}")
                return 1
            typed = typed_counts(spark, cluster.bootstrap, registry.url, schema_id, counts)
            if typed != counts:
                print("!! the typed read of word-counts-avro differs from the counts written")
                return 1
            print(
                f"== OK: all {len(counts)} word counts match a plain Python count "
                f"({sum(counts.values())} words), also as typed Avro columns, in {time.monotonic() - t0:.0f}s"
            )
            spark.stop()
        finally:
            store.close()
            client.close()
            registry.stop()
        print("== shutting down the schema registry, the broker and ZooKeeper")
    return 0


if __name__ == "__main__":
    sys.exit(main())
