"""A streaming ``format("pyklog")`` query survives a broker SIGKILL and restart (real broker
process, the suite's SparkSession, a stock producer with acks=all): every acknowledged record
reaches the sink, the query never fails, and only an outage longer than
``kafka.default.api.timeout.ms`` fails it, with a message naming what was unreachable.

Figures counted: acknowledged (delivery reports without error), distinct (partition, offset)
rows seen by an idempotent foreachBatch sink, lost (acknowledged values never seen) and
re-delivered (rows seen more than once, e.g. a micro-batch replayed)."""

from __future__ import annotations

import threading
import time

import pytest

from pyklog.connector.client import ClusterClient

PARTITIONS = 2


def _make_topic(bootstrap, name):
    with ClusterClient(bootstrap) as c:
        c.create_topic(name, PARTITIONS)


class _ProducerThread(threading.Thread):
    """confluent-kafka with acks=all, producing numbered values until stopped; ``acked`` holds
    the values whose delivery report had no error."""

    def __init__(self, bootstrap, topic):
        super().__init__(daemon=True)
        from confluent_kafka import Producer

        self.p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "reconnect.backoff.max.ms": 500,
                "log_level": 0,
            }
        )
        self.topic = topic
        self.acked: set[str] = set()
        self.failed = 0
        self.sent = 0
        self._halt = threading.Event()

    def _report(self, err, msg):
        if err is None:
            self.acked.add(msg.value().decode())
        else:
            self.failed += 1

    def run(self):
        i = 0
        self.flush_s = 90
        while not self._halt.is_set():
            try:
                self.p.produce(self.topic, f"v{i}".encode(), partition=i % PARTITIONS, on_delivery=self._report)
                i += 1
                self.sent = i
            except BufferError:
                pass
            self.p.poll(0.01)
        self.p.flush(self.flush_s)

    def stop(self, flush_s: float = 90):
        self.flush_s = flush_s
        self._halt.set()
        self.join(flush_s + 30)


class _Sink:
    """foreachBatch target (runs in this driver process): rows keyed by (partition, offset)."""

    def __init__(self):
        self.rows: dict = {}
        self.seen = 0
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [
            (r.partition, r.offset, r.v)
            for r in df.select("partition", "offset", df.value.cast("string").alias("v")).collect()
        ]
        with self.lock:
            self.seen += len(got)
            for p, o, v in got:
                self.rows[(p, o)] = v

    def values(self):
        with self.lock:
            return set(self.rows.values())


def _start(spark, opts, sink, chk):
    r = spark.readStream.format("pyklog")
    for k, v in opts.items():
        r = r.option(k, v)
    return (
        r.load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", chk)
        .trigger(processingTime="0.5 seconds")
        .start()
    )


def _restart_scenario(spark, broker, opts, tmp_path, topic):
    _make_topic(broker.bootstrap, topic)
    sink = _Sink()
    prod = _ProducerThread(broker.bootstrap, topic)
    q = _start(spark, dict(opts, subscribe=topic, startingOffsets="earliest"), sink, str(tmp_path / "chk"))
    try:
        prod.start()
        deadline = time.monotonic() + 60
        while len(sink.rows) < 200 and time.monotonic() < deadline:
            assert q.exception() is None, q.exception()
            time.sleep(0.2)
        assert len(sink.rows) >= 200, f"the query read only {len(sink.rows)} rows before the fault"
        broker.kill()
        t_kill = time.monotonic()
        while time.monotonic() - t_kill < 8:
            assert q.isActive and q.exception() is None, f"query died during the outage: {q.exception()}"
            time.sleep(0.2)
        broker.start()
        time.sleep(3)  # keep producing after the restart
        prod.stop()
        acked = set(prod.acked)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert q.exception() is None, f"query failed after the restart: {q.exception()}"
            if acked <= sink.values():
                break
            time.sleep(0.5)
        with ClusterClient(broker.bootstrap) as c:
            log_end = c.list_offsets({(topic, p): -1 for p in range(PARTITIONS)})
        in_log = sum(log_end.values())
        deadline = time.monotonic() + 30
        while len(sink.rows) < in_log and time.monotonic() < deadline:
            time.sleep(0.5)
        seen = sink.values()
        lost = acked - seen
        distinct = len(sink.rows)
        redelivered = sink.seen - distinct
        # a producer without idempotence may write a batch twice when its ack died with the broker:
        # two offsets with one value are the producer's duplicates, which the source reads as they are
        producer_dups = distinct - len(seen)
        print(
            f"\nbroker restart ({'zookeeper' if 'zookeeper.connect' in opts else 'bootstrap'} mode): "
            f"sent={prod.sent} acknowledged={len(acked)} producer-failed={prod.failed} records-in-log={in_log} "
            f"distinct-read={distinct} lost={len(lost)} re-delivered={redelivered} "
            f"producer-duplicates-in-log={producer_dups}"
        )
        assert q.exception() is None
        assert not lost, f"{len(lost)} acknowledged records never reached the sink, e.g. {sorted(lost)[:5]}"
        assert distinct == in_log, f"the query read {distinct} distinct offsets of the {in_log} in the log"
        assert set(sink.rows) == {(p, o) for p in range(PARTITIONS) for o in range(log_end[(topic, p)])}
    finally:
        if prod.is_alive():
            prod.stop(flush_s=1)  # the test failed: do not wait for a broker that may be down
        q.stop()


def test_bootstrap_mode_survives_broker_sigkill_and_restart(spark, broker, tmp_path):
    _restart_scenario(spark, broker, {"kafka.bootstrap.servers": broker.bootstrap}, tmp_path, "restart-boot")


def test_zookeeper_group_mode_survives_broker_sigkill_and_restart(spark, broker, zk_chroot, tmp_path):
    _restart_scenario(spark, broker, {"zookeeper.connect": zk_chroot, "group.id": "restart-zk"}, tmp_path, "restart-zk")


def test_outage_longer_than_the_bound_fails_the_query_naming_the_broker(spark, broker, tmp_path):
    topic = "restart-bound"
    _make_topic(broker.bootstrap, topic)
    sink = _Sink()
    q = _start(
        spark,
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "kafka.default.api.timeout.ms": "5000",
        },
        sink,
        str(tmp_path / "chk"),
    )
    try:
        deadline = time.monotonic() + 60
        while q.lastProgress is None and time.monotonic() < deadline:
            time.sleep(0.2)
        broker.kill()
        t_kill = time.monotonic()
        while q.exception() is None and time.monotonic() - t_kill < 45:
            time.sleep(0.2)
        took = time.monotonic() - t_kill
        err = q.exception()
        assert err is not None, "the query survived an outage longer than its bound"
        msg = str(err)
        print(f"\nquery failed {took:.1f}s after the broker was killed: ...{msg[-600:]}")
        assert took >= 4.0, f"the query failed {took:.1f}s into an outage bounded at 5 s"
        assert broker.bootstrap in msg and "unreachable" in msg and "kafka.default.api.timeout.ms" in msg, msg
    finally:
        q.stop()


def _produce_numbered(bootstrap, topic, n):
    from confluent_kafka import Producer

    acked = set()
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "log_level": 0})
    for i in range(n):
        p.produce(
            topic,
            f"v{i}".encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda err, msg: err is None and acked.add(msg.value().decode()),
        )
    p.flush(30)
    return acked


def test_batch_read_waits_for_a_restarting_broker(spark, broker):
    topic = "restart-batch"
    _make_topic(broker.bootstrap, topic)
    acked = _produce_numbered(broker.bootstrap, topic, 500)
    assert len(acked) == 500
    df = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
    )
    broker.kill()
    out: dict = {}

    def run():
        try:
            out["rows"] = [
                (r.partition, r.offset, r.v)
                for r in df.select("partition", "offset", df.value.cast("string").alias("v")).collect()
            ]
        except Exception as e:  # noqa: BLE001 - reported below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    time.sleep(5)
    assert "error" not in out, f"the batch read failed during a 5 s outage: {out['error']}"
    broker.start()
    t.join(60)
    assert "error" not in out, f"the batch read failed: {out.get('error')}"
    rows = out["rows"]
    seen = {v for _, _, v in rows}
    print(
        f"\nbatch read across a restart: acknowledged={len(acked)} rows={len(rows)} "
        f"distinct={len({(p, o) for p, o, _ in rows})} lost={len(acked - seen)}"
    )
    assert acked <= seen and len(rows) == len({(p, o) for p, o, _ in rows})


def test_sink_outage_longer_than_its_bound_names_the_brokers(spark, broker):
    topic = "restart-sink"
    _make_topic(broker.bootstrap, topic)
    broker.kill()
    df = spark.createDataFrame([(f"v{i}",) for i in range(50)], "value string")
    t0 = time.monotonic()
    with pytest.raises(Exception) as info:
        (
            df.write.format("pyklog")
            .mode("append")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .option("kafka.delivery.timeout.ms", "3000")
            .option("kafka.request.timeout.ms", "1000")
            .option("kafka.max.block.ms", "3000")
            .option("kafka.linger.ms", "0")
            .save()
        )
    msg = str(info.value)
    print(f"\nsink failed after {time.monotonic() - t0:.1f}s: ...{msg[:1500]}")
    assert time.monotonic() - t0 < 40, "the sink did not honour kafka.max.block.ms / kafka.delivery.timeout.ms"
    assert broker.bootstrap in msg and ("delivery.timeout.ms" in msg or "max.block.ms" in msg), msg[:3000]
