"""A Spark consumer-group query and a ConsumerConnector through a ZooKeeper outage longer than the
session timeout.

One broker and a private ZooKeeper (this test SIGKILLs it; the session-wide one is never touched).
A streaming query with ``zookeeper.connect`` + ``subscribe`` + ``group.id`` (zookeeper.session.timeout.ms
6 s) writes with ``foreachBatch`` into this process, an at-least-once sink that keeps every
(partition, offset) and when each batch ran; confluent-kafka writes numbered records all along.
In the same run a ConsumerConnector (``zookeeper.connect`` only, auto-commit every second) of a
second group reads the same topic on a thread of this process.  ZooKeeper is SIGKILLed for ~15 s
(past the session timeout of both group members and of the broker) and restarted on the same data
directory and port.

Counted (printed with ``-s``): acknowledged records, rows read, read twice (must be 0: within one
query the checkpoint decides what is read, a stale group commit never moves it back), lost (must be
0), batches with rows while ZooKeeper was down (must be > 0: the broker serves, the query keeps its
last assignment), and the group's committed offsets after the outage (the query's position, not the
commit that failed during the outage).  The same counts for the ConsumerConnector's records.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

from pyklog.broker.zk.server import ZooKeeperServer, free_port
from pyklog.connector.offsets import OffsetStore
from tests.integration.spark.support import make_topic, wait_query
from tests.support import wait_for

PARTITIONS = 3
SESSION_MS = "6000"
OUTAGE_S = 11.0  # plus the restart of ZooKeeper's JVM: ~15 s without ZooKeeper
TOPIC = "zk-outage"
GROUP = "zk-outage-g"
CC_GROUP = "zk-outage-cc"


class _Producer(threading.Thread):
    """confluent-kafka writing ``<partition>:<seq>`` to every partition every 20 ms until stopped."""

    def __init__(self, bootstrap: str):
        super().__init__(name="zk-outage-producer", daemon=True)
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 0})
        self.acked: set = set()
        self.failed: list = []
        self.lock = threading.Lock()
        self.halt = threading.Event()

    def _report(self, err, msg):
        with self.lock:
            if err is None:
                self.acked.add((msg.partition(), msg.offset()))
            else:
                self.failed.append(str(err))

    def run(self):
        seq = 0
        while not self.halt.is_set():
            for p in range(PARTITIONS):
                self.p.produce(TOPIC, value=f"{p}:{seq}".encode(), partition=p, on_delivery=self._report)
            seq += 1
            self.p.poll(0.02)
        self.p.flush(30)


class _Sink:
    """foreachBatch target: every (partition, offset) read, and (monotonic time, rows) per batch."""

    def __init__(self):
        self.rows: list = []
        self.batches: list = []
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        got = [(r.partition, r.offset) for r in df.select("partition", "offset").collect()]
        with self.lock:
            self.rows.extend(got)
            self.batches.append((time.monotonic(), batch_id, len(got)))

    def distinct(self) -> set:
        with self.lock:
            return set(self.rows)


class _Connector(threading.Thread):
    """A ConsumerConnector of group CC_GROUP iterating its one stream: (partition, offset) and when."""

    def __init__(self, zk_connect: str):
        super().__init__(name="zk-outage-connector", daemon=True)
        from pyklog.connector.high_level import ConsumerConnector

        self.conn = ConsumerConnector(
            {
                "zookeeper.connect": zk_connect,
                "group.id": CC_GROUP,
                "auto.offset.reset": "smallest",
                "auto.commit.interval.ms": 1000,
                "consumer.timeout.ms": 200,
                "zookeeper.session.timeout.ms": int(SESSION_MS),
            }
        )
        [self.stream] = self.conn.create_message_streams({TOPIC: 1})[TOPIC]
        self.rows: list = []
        self.times: list = []
        self.lock = threading.Lock()
        self.halt = threading.Event()

    def run(self):
        while not self.halt.is_set():
            for r in self.stream:
                with self.lock:
                    self.rows.append((r.partition, r.offset))
                    self.times.append(time.monotonic())

    def distinct(self) -> set:
        with self.lock:
            return set(self.rows)


def _counts(rows, acked):
    seen = Counter(rows)
    return sum(n - 1 for n in seen.values() if n > 1), len(acked - set(seen))


def test_group_query_reads_through_a_zookeeper_outage_without_rereads(spark, broker_factory, tmp_path):
    port = free_port()
    zk_dir = str(tmp_path / "zk")
    zk = ZooKeeperServer(data_dir=zk_dir, port=port).start()
    producer = query = connector = None
    try:
        broker = broker_factory(0, zk_connect=zk.connect_string)
        boot = broker.bootstrap
        make_topic(boot, TOPIC, PARTITIONS)
        producer = _Producer(boot)
        producer.start()
        connector = _Connector(zk.connect_string)
        connector.start()
        sink = _Sink()
        query = (
            spark.readStream.format("pyklog")
            .option("zookeeper.connect", zk.connect_string)
            .option("subscribe", TOPIC)
            .option("group.id", GROUP)
            .option("startingOffsets", "earliest")
            .option("zookeeper.session.timeout.ms", SESSION_MS)
            .load()
            .writeStream.foreachBatch(sink)
            .trigger(processingTime="1 second")
            .start()
        )
        wait_query(query, lambda: sum(1 for _, _, n in sink.batches if n) >= 2, 90, "two batches with rows", 0.2)

        zk.proc.kill()  # SIGKILL
        zk.proc.wait()
        killed = time.monotonic()
        time.sleep(OUTAGE_S)
        zk = ZooKeeperServer(data_dir=zk_dir, port=port).start()
        back = time.monotonic()
        with sink.lock:
            during = [b for b in sink.batches if killed + 1.0 < b[0] <= back and b[2] > 0]
        with connector.lock:
            cc_during = sum(1 for t in connector.times if killed + 1.0 < t <= back)

        time.sleep(3.0)  # producing goes on after the outage (re-registration, rebalance)
        producer.halt.set()
        producer.join(60)
        with producer.lock:
            acked = set(producer.acked)
        wait_query(query, lambda: acked <= sink.distinct(), 90, "every acknowledged record read", 0.2)
        wait_for(lambda: acked <= connector.distinct(), 60, message="the connector read every acknowledged record")
        # the group's offsets reach the query's position (the commits refused during the outage retried)
        ends = {}
        for p, off in acked:
            ends[(TOPIC, p)] = max(ends.get((TOPIC, p), 0), off + 1)
        store = OffsetStore.create("zookeeper", False, zk.connect_string)
        try:
            wait_for(
                lambda: store.fetch(GROUP, sorted(ends)) == ends, 30, message="the group's commits after the outage"
            )
            wait_for(lambda: store.fetch(CC_GROUP, sorted(ends)) == ends, 30, message="the connector's commits")
        finally:
            store.close()
    finally:
        if producer is not None:
            producer.halt.set()
        if connector is not None:
            connector.halt.set()
            connector.conn.shutdown()
        if query is not None:
            query.stop()
        zk.stop()
    assert query.exception() is None
    twice, lost = _counts(sink.rows, acked)
    cc_twice, cc_lost = _counts(connector.rows, acked)
    print(
        f"\nZooKeeper outage {back - killed:.1f} s: acknowledged {len(acked)}, producer failures "
        f"{len(producer.failed)}; Spark query: read {len(sink.rows)}, read twice {twice}, lost {lost}, "
        f"batches with rows during the outage {len(during)}; ConsumerConnector: read {len(connector.rows)}, "
        f"read twice {cc_twice}, lost {cc_lost}, records during the outage {cc_during}"
    )
    assert (twice, lost) == (0, 0)
    assert len(during) > 0
    assert (cc_twice, cc_lost) == (0, 0)
    assert cc_during > 0
