"""The Spark source when a partition's high watermark is behind what the query already planned:
after a leader change the new leader's high watermark lags the old leader's until the
followers fetch from it, so the planner's last end offset, or a task's planned range, may lie beyond
the high watermark for a moment although no record is lost.  The source must wait (plan no rows for
the partition, or keep fetching), not report data loss (which fails the query with failOnDataLoss=true
and re-reads the partition from its earliest offset with false).

The state is made deterministic without racing an election: a follower in the ISR is SIGSTOPped and
records are written with acks=1, so the leader's log end offset runs ahead of its high watermark
(the stopped follower stays in the ISR for replica.lag.time.max.ms); a range planned up to the log
end offset (as from an old leader) is then read while the high watermark lags, and the follower is
resumed a moment later.  A truly truncated partition (its log end offset below the plan) is still
reported at once (tests/integration/spark/test_reader.py: the topic recreated).

Counted: rows read (each offset once, all of them), DataLossError raised (0).
"""

from __future__ import annotations

import signal
import threading
import time
import uuid

from pyklog.connector.client import LATEST, ClusterClient
from pyklog.connector.producer import Producer
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.source import (
    PyklogInputPartition,
    PyklogStreamReader,
    read_range,
)
from tests.integration.replication_support import create_rf3_topic, start_cluster, state
from tests.support import wait_for


def _hw(client, topic):
    return client.list_offsets({(topic, 0): LATEST})[(topic, 0)]


def test_source_waits_for_a_lagging_high_watermark(broker_factory, zk, zk_chroot):
    # the stopped follower must stay in the ISR: neither its lag nor its ZooKeeper session may expire
    brokers = start_cluster(broker_factory, zk, replica_lag_time_max_ms="60000", zookeeper_session_timeout_ms="60000")
    topic = f"lag-{uuid.uuid4().hex[:6]}"
    create_rf3_topic(zk, zk_chroot, topic, 1)
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    st = state(zk, topic, 0)
    follower = brokers[next(r for r in st["isr"] if r != st["leader"])]
    with Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5}) as p:
        for i in range(50):
            p.produce(topic, f"0:{i}".encode(), partition=0)
        p.flush()
    # the clients under test know the two live brokers only: a SIGSTOPped broker accepts connections
    # and never answers, which costs a connection attempt request.timeout.ms (not what is tested here)
    live = ",".join(b.bootstrap for b in brokers.values() if b is not follower)
    leader = brokers[st["leader"]]
    client = ClusterClient(live)
    opts = {
        "kafka.bootstrap.servers": live,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "kafkaConsumer.pollTimeoutMs": "30000",
    }
    r = PyklogStreamReader(parse_source_options(opts, streaming=True))
    resumed = threading.Event()
    try:
        assert r.latestOffset(r.initialOffset(), None) == {topic: {"0": 50}}
        follower.proc.send_signal(signal.SIGSTOP)
        try:
            with Producer(
                {"bootstrap.servers": bootstrap, "acks": 1, "enable.idempotence": False, "linger.ms": 5}
            ) as p:
                for i in range(50, 100):
                    p.produce(topic, f"0:{i}".encode(), partition=0)
                p.flush()
            assert _hw(client, topic) == 50  # the stopped follower holds the high watermark back
            # 1. the planner's previous end (100, from the "old leader") is beyond the high watermark
            end = r.latestOffset({topic: {"0": 100}}, None)
            assert end == {topic: {"0": 100}}, end  # no rows planned yet, no loss reported
            # 2. a task's planned range beyond the high watermark: it waits until the follower is back
            timer = threading.Timer(1.5, lambda: (follower.proc.send_signal(signal.SIGCONT), resumed.set()))
            timer.start()
            t0 = time.monotonic()
            rows = []
            for batch in read_range(r.opts, PyklogInputPartition(topic, 0, 40, 100, leader.bootstrap, st["leader"])):
                rows.extend(batch.column("offset").to_pylist())
            waited = time.monotonic() - t0
        finally:
            follower.proc.send_signal(signal.SIGCONT)
        assert rows == list(range(40, 100)), rows
        assert resumed.is_set() and waited >= 1.0, waited
        wait_for(lambda: _hw(client, topic) == 100, message="high watermark caught up")
        assert r.latestOffset({topic: {"0": 100}}, None) == {topic: {"0": 100}}
    finally:
        r.stop()
        client.close()
