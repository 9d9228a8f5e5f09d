"""Spark through a rolling restart: a streaming query ``format("pyklog")`` -> ``format("pyklog")`` runs through a
rolling restart of all three brokers of a replicated cluster, and one SIGKILL, with no loss, no
duplicate and no query failure.

Set-up: 3 brokers; source and sink topics with replication factor 3 and ``min.insync.replicas=2``;
the internal topics with replication factor 3.  confluent-kafka (``acks=all``, idempotence) writes
numbered records (value ``"<partition>:<seq>"``, keyed) to the source; the query copies key, value and
partition to the sink, once with the at-least-once sink (pyklog's idempotent producer, ``acks=all``:
no duplicate as long as no task is retried) and once with the exactly-once sink (one transaction per
task, committed by the driver; the sink is read ``read_committed``).  Each broker in turn is stopped with SIGTERM (a controlled shutdown: its leaderships
move first), restarted and waited for until it is back in every ISR; then the leader of partition 0
is SIGKILLed and restarted.  Producing then stops, the query drains and is stopped.

Counted (printed with ``-s``): acknowledged source records, sink records, lost (acknowledged, not in
the sink), duplicated (in the sink more than once: a replayed batch or a retried task), out of order
within a partition, phantom (in the sink, never acknowledged), and the query's exception (None).
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

import pytest

from tests.integration.replication_support import (
    bounce,
    count,
    create_rf3_topic,
    high_watermarks,
    read_back,
    ride_out_producer_config,
    start_cluster,
    state,
)
from tests.support import wait_for

PARTITIONS = 3


class _SourceProducer(threading.Thread):
    """confluent-kafka, acks=all with idempotence: numbered records per partition until stopped."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(name="rolling-restart-producer", daemon=True)
        from confluent_kafka import Producer

        self.p = Producer(ride_out_producer_config(bootstrap, log_level=0))
        self.topic = topic
        self.acked = {p: [] for p in range(PARTITIONS)}
        self.failed: list = []
        self.lock = threading.Lock()
        self.halt = threading.Event()
        self.fatal: BaseException | None = None  # librdkafka's fatal error, if the producer died of one

    def _report(self, err, msg):
        p, seq = (int(x) for x in msg.value().decode().split(":"))
        with self.lock:
            (self.failed.append((p, seq, str(err))) if err is not None else self.acked[p].append(seq))

    def run(self):
        try:
            self._run()
        except Exception as e:  # noqa: BLE001 - counted and asserted by the test
            self.fatal = e

    def _run(self):
        n = dict.fromkeys(range(PARTITIONS), 0)
        while not self.halt.is_set():
            for p in range(PARTITIONS):
                try:
                    self.p.produce(
                        self.topic,
                        value=f"{p}:{n[p]}".encode(),
                        key=f"k{n[p] % 17}".encode(),
                        partition=p,
                        on_delivery=self._report,
                    )
                    n[p] += 1
                except BufferError:
                    pass
            self.p.poll(0.01)  # about 300 records/s: a steady flow through every micro-batch
        self.p.flush(150)

    def n_acked(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())


def _check_alive(query, events) -> None:
    if not query.isActive:
        exc = query.exception()
        print(f"\nQUERY FAILED after bounces {events}:\n{exc}")  # the whole worker traceback
        pytest.fail(f"the query failed after {len(events)} bounces: {str(exc)[:2000]}")


@pytest.mark.parametrize("guarantee", ["at-least-once", "exactly-once"])
def test_streaming_query_through_rolling_restart(spark, broker_factory, zk, zk_chroot, tmp_path, guarantee):
    brokers = start_cluster(
        broker_factory, zk, offsets_topic_replication_factor="3", transaction_state_log_replication_factor="3"
    )
    source, sink = f"rr-src-{uuid.uuid4().hex[:6]}", f"rr-sink-{uuid.uuid4().hex[:6]}"
    create_rf3_topic(zk, zk_chroot, source, PARTITIONS)
    create_rf3_topic(zk, zk_chroot, sink, PARTITIONS)
    topics = {source: PARTITIONS, sink: PARTITIONS}
    bootstrap = ",".join(b.bootstrap for b in brokers.values())

    prod = _SourceProducer(bootstrap, source)
    query = (
        spark.readStream.format("pyklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "partition")
        .writeStream.format("pyklog")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("zookeeper.connect", zk_chroot)
        .option("deliveryGuarantee", guarantee)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(processingTime="0.5 seconds")
        .start()
    )
    events = []
    try:
        prod.start()
        wait_for(
            lambda: high_watermarks(bootstrap, sink, PARTITIONS) >= 300 or not query.isActive,
            timeout=120,
            message="the query writing to the sink",
        )
        _check_alive(query, events)
        # the rolling restart: every broker once, a controlled shutdown each time
        for victim in sorted(brokers):
            events.append(bounce(brokers, zk, topics, victim, signal.SIGTERM))
            _check_alive(query, events)
        # and one crash: the leader of partition 0 of the source
        events.append(bounce(brokers, zk, topics, state(zk, source, 0)["leader"], signal.SIGKILL))
        _check_alive(query, events)
        time.sleep(2)  # records keep flowing after the last restart
        prod.halt.set()
        prod.join(180)
        n_acked = prod.n_acked()
        try:
            # counted as a read_committed reader sees the sink (its high watermark also counts
            # transaction markers and aborted records)
            wait_for(
                lambda: (
                    not query.isActive
                    or sum(len(v) for v in read_back(bootstrap, sink, PARTITIONS, timeout=30).values()) >= n_acked
                ),
                timeout=120,
                interval=1.0,
                message=f"the sink holding the {n_acked} acknowledged records",
            )
        except AssertionError as e:  # the counts below say what is missing
            print(f"\nDRAIN TIMED OUT: {e}\nstatus {query.status}\nlast progress {query.lastProgress}")
        time.sleep(1.5)  # a late duplicate (a replayed micro-batch) is counted too
    finally:
        prod.halt.set()
        exc = query.exception()
        active = query.isActive
        query.stop()

    counts = count(prod.acked, read_back(bootstrap, sink, PARTITIONS))
    counts.update(
        guarantee=guarantee,
        failed_sends=len(prod.failed),
        query_exception=str(exc) if exc else None,
        query_active_until_stopped=active,
        bounces=events,
    )
    print("\nSPARK ROLLING RESTART COUNTS " + json.dumps(counts))
    assert exc is None and active, counts
    assert counts["failed_sends"] == 0 and counts["acknowledged"] > 0, counts
    # Spark's guarantee, whatever became of the source producer: the sink holds exactly the source
    # topic's records (as a read_committed reader sees both), each once, in order per partition
    src = read_back(bootstrap, source, PARTITIONS)
    snk = read_back(bootstrap, sink, PARTITIONS)
    mismatch = {p: (len(src[p]), len(snk[p])) for p in range(PARTITIONS) if sorted(src[p]) != sorted(snk[p])}
    assert not mismatch, f"sink differs from source (source, sink records per partition): {mismatch} {counts}"
    assert (counts["lost"], counts["duplicated"], counts["out_of_order"]) == (0, 0, 0), counts
    assert prod.fatal is None, f"the source producer died: {prod.fatal!r} {counts}"
    assert counts["phantom"] == 0, counts
