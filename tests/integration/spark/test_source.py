"""format("pyklog") in a real SparkSession (the suite's shared one) against real ZooKeeper and broker
processes: schema and values (chispa), compressed topics, headers, batch options, streaming with
checkpoint restart, consumer-group split and handover between two queries, lag while a query runs,
SIGTERM closing the group session on query.stop(), Trigger.AvailableNow with maxOffsetsPerTrigger,
failOnDataLoss both ways, sink round trips, bad options."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time

import pytest
from chispa import assert_df_equality
from kazoo.client import KazooClient
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.connector.client import ClusterClient
from pyklog.connector.offsets import OffsetStore
from pyklog.connector.producer import Producer
from tests.integration.spark.support import (
    group_members,
    make_topic,
    make_topic_again,
    produce,
    stream,
    wait_query,
)
from tests.support import wait_for

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers", ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))
        ),
    ]
)


# ------------------------------------------------------------------------------------------------
def test_batch_read_schema_values_compression_headers(spark, broker):
    boot = broker.bootstrap
    make_topic(boot, "mixed", 2)
    ts0 = 1_700_000_000_000
    expected = []
    offsets = [0, 0]
    for j, codec in enumerate(["gzip", "snappy", "lz4", "zstd", "none"]):
        with Producer({"bootstrap.servers": boot, "compression.type": codec, "linger.ms": 50}) as p:
            for i in range(6):
                n = j * 6 + i
                part = n % 2
                headers = [("codec", codec.encode()), ("n", None)] if i % 3 == 0 else None
                key = None if i == 5 else f"k{n}".encode()
                p.produce(
                    "mixed", f"value-{n}".encode(), key=key, partition=part, timestamp_ms=ts0 + n, headers=headers
                )
                expected.append(
                    (
                        key,
                        f"value-{n}".encode(),
                        "mixed",
                        part,
                        offsets[part],
                        dt.datetime.fromtimestamp((ts0 + n) / 1000),
                        0,
                        [(h, v) for h, v in headers] if headers else None,
                    )
                )
                offsets[part] += 1
            p.flush()
    df = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", "mixed")
        .option("includeHeaders", "true")
        .load()
    )
    assert df.schema.simpleString() == SCHEMA.simpleString()
    want = spark.createDataFrame(expected, SCHEMA)
    assert_df_equality(df, want, ignore_row_order=True, ignore_nullable=True)
    # endingOffsets / startingOffsets JSON, minPartitions, assign, without headers
    part = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("assign", '{"mixed":[1]}')
        .option("startingOffsets", '{"mixed":{"1":3}}')
        .option("endingOffsets", '{"mixed":{"1":9}}')
        .option("minPartitions", "3")
        .load()
    )
    assert part.rdd.getNumPartitions() == 3
    assert sorted(r.offset for r in part.select("offset").collect()) == list(range(3, 9))
    assert "headers" not in part.columns


def test_stream_checkpoint_restart_lag_and_sigterm(spark, broker, zk_chroot, tmp_path):
    from pyklog.connector.cli.consumer_groups import describe_group

    boot = broker.bootstrap
    make_topic(boot, "clicks", 3)
    produce(boot, "clicks", 30, 3)
    out, chk = str(tmp_path / "out"), str(tmp_path / "chk")
    opts = {
        "zookeeper.connect": zk_chroot,
        "subscribe": "clicks",
        "startingOffsets": "earliest",
        "group.id": "clicks-app",
        "zookeeper.session.timeout.ms": "30000",
        "maxOffsetsPerTrigger": "6",
    }

    def start():
        df = stream(spark, **opts).select(F.col("value").cast("string").alias("v"), "partition", "offset")
        return (
            df.writeStream.format("parquet")
            .option("path", out)
            .option("checkpointLocation", chk)
            .trigger(processingTime="1 second")
            .start()
        )

    kz = KazooClient(hosts=zk_chroot)
    kz.start(timeout=30)
    client = ClusterClient(boot)
    observed = []

    def caught_up(n):
        try:
            rows = describe_group(kz, "clicks-app", "zookeeper", client)  # what pyklog-consumer-groups shows
        except ZooKeeperError:  # the query has not registered yet
            return False
        observed.append(rows)
        return len(rows) == 3 and all(r[2] == n and r[3] == n and r[4] == 0 for r in rows)

    q = start()
    try:
        wait_query(q, lambda: caught_up(10), what="the group's offsets to reach the log end")
        # while the query worked through the backlog (6 offsets per trigger) the tool showed lag
        assert any(r[4] and r[4] > 0 and r[2] is not None for rows in observed for r in rows), observed
        assert all(r[5] and r[5] != "-" for r in observed[-1]), observed[-1]  # owned by the query's member
        assert len(group_members(zk_chroot, "clicks-app")) == 1
        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "pyklog.connector.cli.consumer_groups",
                "--zookeeper",
                zk_chroot,
                "--describe",
                "--group",
                "clicks-app",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        lines = [ln.split()[1:] for ln in cli.stdout.splitlines() if ln]
        assert lines[0][:5] == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"], cli.stdout
        assert sorted((ln[1], ln[2], ln[3], ln[4]) for ln in lines[1:]) == [
            (str(p), "10", "10", "0") for p in range(3)
        ], cli.stdout
        produce(boot, "clicks", 15, 3, start=30)
        wait_query(q, lambda: caught_up(15), what="commits")
        # reportLatestOffset: progress shows how far the log goes (how far behind the query is)
        latest = q.lastProgress["sources"][0]["latestOffset"]
        latest = json.loads(latest) if isinstance(latest, str) else latest
        # plus, for a group query, where pyklog's listener reports completed batches to the planner
        assert latest.pop("pyklog:batchEnd").endswith("/completed.json")
        assert latest == {"clicks": {"0": 15, "1": 15, "2": 15}}
    finally:
        q.stop()
    assert q.exception() is None
    # query.stop() SIGTERMs the planner: the group session closes at once, not after 30 s
    wait_for(
        lambda: group_members(zk_chroot, "clicks-app") == [],
        15,
        interval=0.3,
        message="the stopped query's group registration to disappear (before its 30 s session timeout)",
    )
    produce(boot, "clicks", 15, 3, start=45)  # while the query is down
    q = start()
    try:
        wait_query(q, lambda: caught_up(20), what="commits after restart")
    finally:
        q.stop()
        client.close()
        kz.stop()
        kz.close()
    assert q.exception() is None
    rows = spark.read.parquet(out).collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(p, o) for p in range(3) for o in range(20)], f"loss or duplicates: {got}"
    assert sorted(r.v for r in rows) == sorted(f"v{i}" for i in range(60))


def test_two_queries_share_a_group_and_hand_over(spark, broker, zk_chroot):
    boot = broker.bootstrap
    make_topic(boot, "shared", 4)
    produce(boot, "shared", 40, 4)
    opts = {
        "zookeeper.connect": zk_chroot,
        "subscribe": "shared",
        "startingOffsets": "earliest",
        "group.id": "sharing",
        "partition.assignment.strategy": "range",
    }
    store = OffsetStore.create("zookeeper", False, zk_chroot)
    tps = [("shared", p) for p in range(4)]

    def start(name):
        return (
            stream(spark, **opts)
            .select("partition", "offset")
            .writeStream.format("memory")
            .queryName(name)
            .trigger(processingTime="1 second")
            .start()
        )

    def rows(name):
        return [(r.partition, r.offset) for r in spark.sql(f"select partition, offset from {name}").collect()]

    qa = start("share_a")
    qb = None
    try:
        wait_query(qa, lambda: store.fetch("sharing", tps) == dict.fromkeys(tps, 10), what="A caught up")
        qb = start("share_b")
        # they split the partitions: two members, each owning two
        wait_query(qb, lambda: len(group_members(zk_chroot, "sharing")) == 2, what="B joined")

        def owners():
            kc = KazooClient(hosts=zk_chroot)
            kc.start(timeout=30)
            try:
                return {
                    p: kc.get(paths.partition_owner("sharing", "shared", p))[0].decode()
                    for p in range(4)
                    if kc.exists(paths.partition_owner("sharing", "shared", p))
                }
            finally:
                kc.stop()
                kc.close()

        wait_query(qb, lambda: len(owners()) == 4 and len(set(owners().values())) == 2, what="split")
        produce(boot, "shared", 40, 4, start=40)
        wait_query(qb, lambda: store.fetch("sharing", tps) == dict.fromkeys(tps, 20), what="both caught up")
        assert rows("share_a") and rows("share_b")
        qa.stop()  # B takes over A's partitions at the offsets A committed
        assert qa.exception() is None
        produce(boot, "shared", 40, 4, start=80)
        wait_query(qb, lambda: store.fetch("sharing", tps) == dict.fromkeys(tps, 30), what="B took over")
        got = rows("share_a") + rows("share_b")
        assert sorted(got) == [(p, o) for p in range(4) for o in range(30)], "every record exactly once"
    finally:
        qa.stop()
        if qb is not None:
            qb.stop()
        store.close()
    assert qb.exception() is None


def test_available_now_max_offsets_and_sink_round_trip(spark, broker, tmp_path):
    boot = broker.bootstrap
    make_topic(boot, "words", 2)
    make_topic(boot, "upper", 3)
    produce(boot, "words", 95, 2, codec="lz4")
    src = stream(
        spark,
        **{
            "kafka.bootstrap.servers": boot,
            "subscribe": "words",
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "40",
        },
    )
    out = src.select(
        F.upper(F.col("value").cast("string")).alias("value"),
        F.col("key"),
        (F.col("offset") % 3).cast("int").alias("partition"),
        F.array(F.struct(F.lit("src").alias("key"), F.col("value").alias("value"))).alias("headers"),
    )
    q = (
        out.writeStream.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("topic", "upper")
        .option("kafka.compression.type", "zstd")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(availableNow=True)
        .start()
    )
    assert q.awaitTermination(180)
    assert q.exception() is None
    sizes = [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]]
    assert sum(sizes) == 95 and max(sizes) <= 40 and len(sizes) >= 3
    back = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", "upper")
        .option("includeHeaders", "true")
        .load()
    )
    got = back.select(
        F.col("value").cast("string").alias("v"), "partition", F.col("headers")[0]["value"].alias("h")
    ).collect()
    assert sorted(r.v for r in got) == sorted(f"V{i}" for i in range(95))
    assert {r.partition for r in got} == {0, 1, 2}
    assert all(r.h.decode().upper() == r.v for r in got)
    # batch write: topic column (no topic option), string key/value
    df = spark.createDataFrame(
        [("t-col", f"k{i}", f"x{i}") for i in range(10)], "topic string, key string, value string"
    )
    make_topic(boot, "t-col", 1)
    df.write.mode("append").format("pyklog").option("kafka.bootstrap.servers", boot).save()
    back = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", boot)
        .option("subscribe", "t-col")
        .load()
        .select(F.col("key").cast("string").alias("k"), F.col("value").cast("string").alias("v"))
    )
    assert sorted((r.k, r.v) for r in back.collect()) == sorted((f"k{i}", f"x{i}") for i in range(10))


def test_fail_on_data_loss_in_spark(spark, broker):
    boot = broker.bootstrap
    make_topic(boot, "gone", 1)
    produce(boot, "gone", 10, 1)

    def start(name, fail):
        return (
            stream(
                spark,
                **{
                    "kafka.bootstrap.servers": boot,
                    "subscribe": "gone",
                    "startingOffsets": "earliest",
                    "failOnDataLoss": fail,
                },
            )
            .select("offset", F.col("value").cast("string").alias("v"))
            .writeStream.format("memory")
            .queryName(name)
            .trigger(processingTime="1 second")
            .start()
        )

    strict, lenient = start("loss_strict", "true"), start("loss_lenient", "false")
    try:
        for q, name in ((strict, "loss_strict"), (lenient, "loss_lenient")):
            wait_query(q, lambda: spark.sql(f"select count(*) c from {name}").collect()[0].c == 10, what=name)
        with ClusterClient(boot) as c:
            c.delete_topic("gone")
        make_topic_again(boot, "gone", 1)
        produce(boot, "gone", 3, 1, start=100)
        deadline = time.monotonic() + 120
        while strict.exception() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert strict.exception() is not None
        msg = str(strict.exception())
        assert "gone-0" in msg and "failOnDataLoss" in msg
        wait_query(
            lenient,
            lambda: {r.v for r in spark.sql("select v from loss_lenient").collect()} >= {"v100", "v101", "v102"},
            what="the lenient query to continue on the new topic",
        )
    finally:
        strict.stop()
        lenient.stop()
    assert lenient.exception() is None


def test_bad_options_fail_at_definition(spark, broker):
    def load(**opts):
        r = spark.read.format("pyklog")
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load().collect()

    boot = broker.bootstrap
    for opts, needle in [
        ({"subscribe": "x"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": boot, "subscribe": "x", "assign": '{"x":[0]}'}, "exactly one of the options"),
        ({"kafka.bootstrap.servers": boot, "subscribe": "x", "startingOffsets": "oldest"}, "startingOffsets"),
        ({"kafka.bootstrap.servers": boot, "subscribe": "x", "startingOffsets": "latest"}, "not valid for batch"),
        ({"kafka.bootstrap.servers": boot, "subscribe": "x", "maxOffsetsPerTrigger": "-5"}, "maxOffsetsPerTrigger"),
        (
            {"kafka.bootstrap.servers": boot, "subscribe": "x", "kafka.auto.offset.reset": "earliest"},
            "auto.offset.reset",
        ),
    ]:
        with pytest.raises(Exception) as ei:
            load(**opts)
        assert needle in str(ei.value), str(ei.value)[:2000]
    with pytest.raises(Exception) as ei:
        spark.createDataFrame([(1,)], "v int").write.mode("append").format("pyklog").option(
            "kafka.bootstrap.servers", boot
        ).save()
    assert "column 'value'" in str(ei.value) or "required column 'value'" in str(ei.value)
    # a failing task aborts the write with a clear error
    make_topic(boot, "one", 1)
    with pytest.raises(Exception) as ei:
        (
            spark.createDataFrame([("v", 7)], "value string, partition int")
            .write.mode("append")
            .format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("topic", "one")
            .save()
        )
    assert "partition 7 of topic 'one' does not exist" in str(ei.value), str(ei.value)[:3000]
    with pytest.raises(Exception) as ei:
        (
            spark.readStream.format("pyklog")
            .option("kafka.bootstrap.servers", boot)
            .option("subscribe", "x")
            .option("endingOffsets", "latest")
            .load()
            .writeStream.format("memory")
            .queryName("bad_end")
            .start()
            .awaitTermination(60)
        )
    assert "endingOffsets" in str(ei.value)


def test_examples_word_count_and_batch_export(spark, broker, tmp_path):
    """The functions examples/word_count.py and examples/batch_export.py (and the demo) are built on."""
    import collections
    import re
    import sys as _sys

    _sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3] / "examples"))
    from batch_export import export, load_range
    from word_count import read_counts, start_word_count

    boot = broker.bootstrap
    make_topic(boot, "lines", 2)
    make_topic(boot, "counts", 2)
    text = ["the quick brown fox", "jumps over the lazy dog", "The dog sleeps", "a fox, a dog; the end"] * 25
    with Producer({"bootstrap.servers": boot}) as p:
        for i, line in enumerate(text):
            p.produce("lines", line.encode(), key=str(i).encode())
        p.flush()
    q = start_word_count(
        spark,
        input_topic="lines",
        output_topic="counts",
        checkpoint=str(tmp_path / "wc"),
        bootstrap=boot,
        available_now=True,
        max_offsets_per_trigger=60,
    )
    assert q.awaitTermination(180)
    assert q.exception() is None
    expected = collections.Counter(w for line in text for w in re.findall(r"[a-z0-9']+", line.lower()))
    assert read_counts(spark, "counts", bootstrap=boot) == dict(expected)
    per = export(
        load_range(spark, "lines", bootstrap=boot, starting='{"lines":{"0":5,"1":-2}}'),
        str(tmp_path / "export"),
        "json",
    )
    on_disk = spark.read.json(str(tmp_path / "export"))
    assert sum(per.values()) == on_disk.count() == 100 - 5
    assert set(on_disk.columns) >= {"key", "value", "partition", "offset", "timestamp"}
