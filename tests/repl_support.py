"""Shared helpers of the replicated-cluster client tests (issue 12): a 3-broker cluster with a
replication factor 3 topic, leader bounces (SIGKILL or SIGTERM = controlled shutdown, then a restart
and a wait until the broker is back in every ISR), and the one counting rule every test applies
(acknowledged, read, lost, duplicated, out of order, read but never acknowledged).

Runs in the pytest process; the brokers are real processes from ``broker_factory``.
"""
from __future__ import annotations

import json
import signal
import time
import uuid

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from support import wait_for

#: broker properties of a cluster whose partitions survive one broker down (acks=all, min ISR 2)
CLUSTER_PROPS = dict(min_insync_replicas="2", default_replication_factor="3", replica_lag_time_max_ms="10000",
                     replica_fetch_wait_max_ms="200", offsets_topic_replication_factor="1")


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
        admin.create_topic(topic, partitions, 3, replica_assignment={
            p: [(p + i) % 3 for i in range(3)] for p in range(partitions)}, configs=configs or {})
    finally:
        admin.stop()
    wait_full_isr(zk, topic, partitions)


def wait_full_isr(zk, topic: str, partitions: int, timeout: float = 90) -> None:
    wait_for(lambda: all(len(state(zk, topic, p)["isr"]) == 3 for p in range(partitions)), timeout=timeout,
             message=f"full ISRs of {topic}")


def bounce(brokers: dict, zk, topics: dict, victim: int, sig=signal.SIGKILL, timeout: float = 90) -> dict:
    """Stop broker ``victim`` with ``sig`` (SIGKILL: a crash; SIGTERM: a controlled shutdown), wait
    until no partition of ``topics`` (``{topic: partitions}``) is led by it, restart it and wait until
    it is back in every ISR.  Returns timings."""
    t0 = time.monotonic()
    brokers[victim].stop(sig)
    wait_for(lambda: all(state(zk, t, p)["leader"] not in (victim, -1)
                         for t, n in topics.items() for p in range(n)),
             timeout=timeout, message=f"partitions led away from broker {victim}")
    elected = time.monotonic() - t0
    brokers[victim].start()
    wait_for(lambda: all(victim in state(zk, t, p)["isr"] for t, n in topics.items() for p in range(n)),
             timeout=timeout, message=f"broker {victim} back in every ISR")
    return {"victim": victim, "signal": signal.Signals(sig).name, "elected_s": round(elected, 2),
            "back_in_isr_s": round(time.monotonic() - t0, 2)}


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
        out["out_of_order"] += sum(1 for x, y in zip(r, r[1:]) if y <= x)
        out["phantom"] += len(set(r) - a)
    return out


def read_back(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> dict:
    """Every record of ``topic`` (values ``b"<partition>:<seq>"``) as ``{partition: [seq, ...]}`` in
    offset order, read with confluent-kafka (a reader independent of pyklog's clients; librdkafka
    reads ``read_committed``) up to the high watermark each partition has when the call starts."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"rb-{uuid.uuid4().hex[:6]}",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest", "log_level": 0})
    read = {p: [] for p in range(partitions)}
    try:
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in range(partitions)}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got = {p: 0 for p in range(partitions)}
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
