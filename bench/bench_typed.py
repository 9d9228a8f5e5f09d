"""Typed Avro reads of the Spark source against raw-bytes reads of the same records, same run.

Starts ZooKeeper and one broker, produces ``--records`` Avro records (a 6-field record, ~60 bytes
each, Confluent's wire format through pyklog's schema registry) into ``--partitions`` partitions,
then in ONE SparkSession (local[2]) reads the topic ``--runs`` times each way, alternating:

* raw: ``format("pyklog")`` as Spark's Kafka schema, summing ``length(value)`` (every value read);
* typed: ``valueFormat=avro-confluent``, summing a field of the struct (every record decoded).

Prints each run's seconds and records/s, best of runs, and typed / raw (the issue's goal: >= 0.5x).
Then, without Spark, the decode step alone (``convert_batch`` on 20,000 of the same records, CPU time
per record, best of 5): the bulk decoder against fastavro's reader called once per record (what
every record went through before the bulk decoder, and what records it cannot decode still do).

    .venv/bin/python bench/bench_typed.py [--records 1000000] [--partitions 4] [--runs 3]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from _common import bench_broker  # noqa: E402

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "site", "type": "int"},
        {"name": "celsius", "type": "double"},
        {"name": "ok", "type": "boolean"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}


def produce(bootstrap: str, registry_url: str, topic: str, n: int, partitions: int) -> None:
    from fastavro import parse_schema, schemaless_writer

    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer
    from pyklog.connector.schema_registry.client import SchemaRegistryClient
    from pyklog.connector.schema_registry.wire import encode

    with ClusterClient(bootstrap) as c:
        c.create_topic(topic, partitions)
    schema_id = SchemaRegistryClient(registry_url).register(f"{topic}-value", json.dumps(SCHEMA))
    parsed = parse_schema(SCHEMA)
    with Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20}) as p:
        for i in range(n):
            buf = io.BytesIO()
            rec = {"sensor": f"s-{i % 1000}", "site": i % 97, "celsius": i * 0.01, "ok": i % 2 == 0}
            rec.update(at=1_700_000_000_000 + i, note=None if i % 3 else "checked")
            schemaless_writer(buf, parsed, rec)
            p.produce(topic, encode(schema_id, buf.getvalue()), partition=i % partitions)
        p.flush()
        assert p.failed_records == 0


def decode_alone(n: int = 20_000, repeat: int = 5) -> dict[str, float]:
    """CPU microseconds per record of ``convert_batch`` on ``n`` bench records: bulk and per record."""
    import pyarrow as pa
    from fastavro import parse_schema, schemaless_writer

    from pyklog.connector.spark import typed

    parsed = parse_schema(SCHEMA)
    values = []
    for i in range(n):
        buf = io.BytesIO()
        rec = {"sensor": f"s-{i % 1000}", "site": i % 97, "celsius": i * 0.01, "ok": i % 2 == 0}
        rec.update(at=1_700_000_000_000 + i, note=None if i % 3 else "checked")
        schemaless_writer(buf, parsed, rec)
        values.append(b"\0\0\0\0\1" + buf.getvalue())  # schema id 1
    batch = pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(n), pa.int64()),
        }
    )
    text = json.dumps(SCHEMA, sort_keys=True)
    fmt = typed.ColumnFormat("value", "avro-confluent", text, False, "http://unused")
    writer, bulk = typed._writer_schema, typed._bulk_decode
    typed._writer_schema = lambda url, schema_id: typed._parsed_schema(text)  # no registry here
    out = {}
    try:
        for name in ("bulk", "per record"):
            if name == "per record":
                typed._bulk_decode = lambda *a: None
            typed.convert_batch(batch, (fmt,))
            best = float("inf")
            for _ in range(repeat):
                t = time.process_time()
                typed.convert_batch(batch, (fmt,))
                best = min(best, time.process_time() - t)
            out[name] = best / n * 1e6
    finally:
        typed._writer_schema, typed._bulk_decode = writer, bulk
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()

    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import pyklog
    from pyklog.connector.schema_registry.process import RegistryProcess

    with bench_broker() as broker:
        registry = RegistryProcess(broker.bootstrap, tempfile.mkdtemp(prefix="pyklog-bench-sr-")).start()
        try:
            topic = "typed-bench"
            t0 = time.monotonic()
            produce(broker.bootstrap, registry.url, topic, args.records, args.partitions)
            print(f"produced {args.records:,} Avro records in {time.monotonic() - t0:.1f}s")
            spark = (
                SparkSession.builder.master("local[2]")
                .config("spark.ui.enabled", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("WARN")
            pyklog.register(spark)

            def base():  # a fresh reader each time: DataFrameReader.option changes the reader itself
                return (
                    spark.read.format("pyklog")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic)
                )

            # a fresh DataFrame per run: running one DataFrame again would skip its computed
            # shuffle map stage (the read) and time only the final aggregation
            def raw():
                return base().load().agg(F.sum(F.length("value")).alias("n"))

            def typed():
                typed_reader = (
                    base().option("valueFormat", "avro-confluent").option("schema.registry.url", registry.url)
                )
                return typed_reader.load().agg(F.sum("value.site").alias("n"))

            times: dict[str, list[float]] = {"raw": [], "typed": []}
            results: dict = {}
            raw().collect()  # warm-up: Python workers, connections
            for _ in range(args.runs):
                for name, make in (("raw", raw), ("typed", typed)):
                    df = make()
                    t = time.monotonic()
                    [row] = df.collect()
                    times[name].append(time.monotonic() - t)
                    results.setdefault(name, row.n)
            for name, ts in times.items():
                best = min(ts)
                print(
                    f"{name:6s} runs {' '.join(f'{x:.2f}s' for x in ts)}; best {best:.2f}s = "
                    f"{args.records / best:,.0f} records/s"
                )
            want = sum(i % 97 for i in range(args.records))
            assert results["typed"] == want, f"typed read summed {results['typed']}, expected {want}"
            ratio = min(times["raw"]) / min(times["typed"])
            print(f"typed / raw throughput: {ratio:.2f}x (same run, best of {args.runs})")
            spark.stop()
            us = decode_alone()
            print(
                f"decode alone (no Spark, CPU per record): bulk {us['bulk']:.2f} us, fastavro per record "
                f"{us['per record']:.2f} us ({us['per record'] / us['bulk']:.0f}x)"
            )
        finally:
            registry.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
