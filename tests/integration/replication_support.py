"""Shared helpers of the replicated-cluster tests: a 3-broker cluster with a
replication factor 3 topic, leader bounces (SIGKILL or SIGTERM = controlled shutdown, then a restart
and a wait until the broker is back in every ISR), and the one counting rule every test applies
(acknowledged, read, lost, duplicated, out of order, read but never acknowledged); for the
fixed-leader tests, brokers started with REPL_PROPS, topics placed by hand, and single wire requests
(ListOffsets, Produce) to one broker.

Runs in the pytest process; the brokers are real processes from ``broker_factory``.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import signal
import struct
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from tests.support import wait_for

#: broker properties of a cluster whose partitions survive one broker down (acks=all, min ISR 2)
CLUSTER_PROPS = {
    "min_insync_replicas": "2",
    "default_replication_factor": "3",
    "replica_lag_time_max_ms": "10000",
    "replica_fetch_wait_max_ms": "200",
    "offsets_topic_replication_factor": "1",
}


def state(zk, topic: str, p: int) -> dict:
    """The partition state znode (leader, leader_epoch, isr) of ``topic``-``p``."""
    return json.loads(zk.get(paths.partition_state(topic, p))[0])


def start_cluster(broker_factory, zk, n: int = 3, **props) -> dict:
    """``n`` brokers (ids 0..n-1) registered in ZooKeeper: ``{broker id: BrokerProcess}``."""
    brokers = {i: broker_factory(i, **dict(CLUSTER_PROPS, **props)) for i in range(n)}
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == n, timeout=60, message=f"{n} brokers registered")
    return brokers


def create_rf3_topic(zk, zk_chroot: str, topic: str, partitions: int, configs: dict | None = None) -> None:
    """``topic`` with replication factor 3, leaders spread (partition p led by broker p % 3 first);
    returns once every partition's ISR holds all three replicas."""
    admin = ZkCluster(zk_chroot, None).start()
    try:
        admin.create_topic(
            topic,
            partitions,
            3,
            replica_assignment={p: [(p + i) % 3 for i in range(3)] for p in range(partitions)},
            configs=configs or {},
        )
    finally:
        admin.stop()
    wait_full_isr(zk, topic, partitions)


def wait_full_isr(zk, topic: str, partitions: int, timeout: float = 90) -> None:
    wait_for(
        lambda: all(len(state(zk, topic, p)["isr"]) == 3 for p in range(partitions)),
        timeout=timeout,
        message=f"full ISRs of {topic}",
    )


def bounce(brokers: dict, zk, topics: dict, victim: int, sig=signal.SIGKILL, timeout: float = 90) -> dict:
    """Stop broker ``victim`` with ``sig`` (SIGKILL: a crash; SIGTERM: a controlled shutdown), wait
    until no partition of ``topics`` (``{topic: partitions}``) is led by it, restart it and wait until
    it is back in every ISR.  Returns timings."""
    t0 = time.monotonic()
    brokers[victim].stop(sig)
    wait_for(
        lambda: all(state(zk, t, p)["leader"] not in (victim, -1) for t, n in topics.items() for p in range(n)),
        timeout=timeout,
        message=f"partitions led away from broker {victim}",
    )
    elected = time.monotonic() - t0
    brokers[victim].start()
    wait_for(
        lambda: all(victim in state(zk, t, p)["isr"] for t, n in topics.items() for p in range(n)),
        timeout=timeout,
        message=f"broker {victim} back in every ISR",
    )
    return {
        "victim": victim,
        "signal": signal.Signals(sig).name,
        "elected_s": round(elected, 2),
        "back_in_isr_s": round(time.monotonic() - t0, 2),
    }


def count(acked: dict, read: dict) -> dict:
    """The counts of one run.  ``acked``: ``{partition: [seq, ...]}`` acknowledged per partition (a
    seq is the producer's number of the record within its partition); ``read``: ``{partition: [seq,
    ...]}`` in the order read.  lost = acknowledged but never read; duplicated = read more than once;
    out_of_order = a seq read after a larger one; phantom = read but never acknowledged (beyond the
    high watermark, or a record the producer saw fail)."""
    out = {"acknowledged": 0, "read": 0, "lost": 0, "duplicated": 0, "out_of_order": 0, "phantom": 0}
    for p in set(acked) | set(read):
        a = set(acked.get(p, ()))
        r = list(read.get(p, ()))
        out["acknowledged"] += len(a)
        out["read"] += len(r)
        out["lost"] += len(a - set(r))
        out["duplicated"] += len(r) - len(set(r))
        out["out_of_order"] += sum(1 for x, y in itertools.pairwise(r) if y <= x)
        out["phantom"] += len(set(r) - a)
    return out


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 120, **client_settings) -> dict:
    """Every record of ``topic`` (values ``b"<partition>:<seq>"``) as ``{partition: [seq, ...]}`` in
    offset order, read with confluent-kafka (a reader independent of pyklog's clients; librdkafka
    reads ``read_committed``) up to the high watermark each partition has when the call starts.
    ``client_settings``: librdkafka's, e.g. its security settings."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rb-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "log_level": 0,
            **client_settings,
        }
    )
    read = {p: [] for p in range(partitions)}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = dict.fromkeys(range(partitions), 0)
        deadline = time.monotonic() + timeout
        while any(got[p] < ends[p] for p in range(partitions)) and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is None or m.error():
                # the last offsets may be transaction markers, never delivered: the position passes them
                for tp in consumer.position([TopicPartition(topic, p) for p in range(partitions)]):
                    got[tp.partition] = max(got[tp.partition], tp.offset)
                continue
            got[m.partition()] = m.offset() + 1
            read[m.partition()].append(int(m.value().decode().split(":")[1]))
    finally:
        consumer.close()
    return read


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    """The sum of ``topic``'s high watermarks (confluent-kafka)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "hw", "log_level": 0})
    try:
        return sum(c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions))
    finally:
        c.close()


LAG_MS = 2000


REPL_PROPS = {
    "replica.lag.time.max.ms": str(LAG_MS),
    "replica.fetch.wait.max.ms": "200",
    "replica.fetch.backoff.ms": "200",
    "min.insync.replicas": "2",
}


def create_topic(zk, brokers, topic, partitions=1, rf=3, **configs):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    admin.create_topics(
        [
            NewTopic(
                topic, num_partitions=partitions, replication_factor=rf, config={k: str(v) for k, v in configs.items()}
            )
        ]
    )[topic].result(30)
    return {int(p): r for p, r in json.loads(zk.get(paths.topic(topic))[0])["partitions"].items()}


def partition_dir(broker, topic, p) -> str:
    return os.path.join(broker.props["log.dirs"], f"{topic}-{p}")


def batches_on_disk(broker, topic, p) -> list[tuple[int, int, bytes]]:
    """(base offset, last offset, batch bytes) of every complete batch in the replica's segments."""
    out = []
    for seg in sorted(glob.glob(os.path.join(partition_dir(broker, topic, p), "*.log"))):
        with open(seg, "rb") as f:
            buf = f.read()
        pos = 0
        while pos + 61 <= len(buf):
            base, length = struct.unpack_from(">qi", buf, pos)
            if length <= 0 or pos + 12 + length > len(buf):
                break
            (delta,) = struct.unpack_from(">i", buf, pos + 23)
            out.append((base, base + delta, buf[pos : pos + 12 + length]))
            pos += 12 + length
    return out


def log_end_offset(broker, topic, p) -> int:
    b = batches_on_disk(broker, topic, p)
    return b[-1][1] + 1 if b else 0


def produce_acks_all(bootstrap, topic, values, partition=None, timeout=60.0):
    """confluent-kafka, acks=all + idempotence; returns (acknowledged [(partition, offset, value)], errors)."""
    from confluent_kafka import Producer

    acked, errors = [], []

    def on_delivery(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            errors.append(err)

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "message.timeout.ms": int(timeout * 1000),
        }
    )
    for v in values:
        kw = {} if partition is None else {"partition": partition}
        while True:
            try:
                p.produce(topic, value=v, on_delivery=on_delivery, **kw)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(timeout + 30) == 0
    return acked, errors


def consume_all(bootstrap, topic, partitions, expected, timeout=60.0) -> list[tuple[int, int, bytes]]:
    """Read every partition from the start with confluent-kafka until ``expected`` records came."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while len(out) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            out.append((m.partition(), m.offset(), m.value()))
    finally:
        c.close()
    return out


def assert_replicas_identical(brokers, topic, p):
    logs = {b.broker_id: batches_on_disk(b, topic, p) for b in brokers}
    first = logs[brokers[0].broker_id]
    for bid, bl in logs.items():
        assert [x[0] for x in bl] == [x[0] for x in first], f"broker {bid} has other batches"
        assert bl == first, f"broker {bid}'s batches differ in their bytes"
    return first


def start_brokers(broker_factory, n=3, **props) -> list:
    """``n`` brokers (ids 0..n-1) with REPL_PROPS, returned once broker 0's metadata lists them all."""
    brokers = [broker_factory(i, **dict(REPL_PROPS, **props)) for i in range(n)]
    with support.Wire(brokers[0].port) as w:
        wait_for(
            lambda: (
                len(w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})["brokers"]) == n
            ),
            message="all brokers registered",
        )
    return brokers


def list_latest(port, topic, p=0) -> int:
    """The log end offset of ``topic``-``p`` as the broker on ``port`` answers ListOffsets (latest)."""
    with support.Wire(port) as w:
        resp = w.request(
            ApiKey.LIST_OFFSETS,
            2,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [{"name": topic, "partitions": [{"partition_index": p, "timestamp": -1}]}],
            },
        )
    part = resp["topics"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    return part["offset"]


def produce_raw(port, topic, p, value: bytes, acks=-1, timeout_ms=5000) -> dict:
    """One record produced to the broker on ``port`` over the wire; returns the partition response."""
    with support.Wire(port) as w:
        resp = w.request(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": None,
                "acks": acks,
                "timeout_ms": timeout_ms,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": p, "records": support.records(1, prefix=value)}]}
                ],
            },
        )
    return resp["responses"][0]["partition_responses"][0]


def ride_out_producer_config(bootstrap: str, **extra) -> dict:
    """confluent-kafka settings of a producer meant to ride out leader changes: acks=all with
    idempotence, two minutes to deliver a record, 10 s per request, metadata refreshed every second;
    ``extra`` (dotted names as keyword arguments through ``**{...}``) on top."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
        "request.timeout.ms": 10000,
        "topic.metadata.refresh.interval.ms": 1000,
        **extra,
    }
