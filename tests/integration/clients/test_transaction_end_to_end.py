"""Transactions end to end with stock clients against real broker processes.

confluent-kafka's (librdkafka's) and kafka-python's transactional producers run committed and
aborted transactions over 3 partitions with ``send_offsets_to_transaction``; confluent-kafka,
kafka-python and kcat consumers read with ``read_committed`` (only committed records, in order)
and ``read_uncommitted`` (everything); the group's committed offsets are those of the committed
transactions only.
"""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

from tests.integration.transaction_support import read_confluent_to_eof
from tests.support import Wire, create_topic

PARTS = 3


def _topics(broker, *names, partitions=PARTS):
    with Wire(broker.port) as w:
        for n in names:
            assert create_topic(w, n, partitions)["error_code"] == 0


def kp_read(bootstrap, topic, isolation, expected_total, timeout=30.0) -> dict[int, list[bytes]]:
    """kafka-python: read until ``expected_total`` records arrived and the partitions are at
    their end (end offsets are the LSO for read_committed)."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        isolation_level=isolation,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
    )
    tps = [TopicPartition(topic, p) for p in range(PARTS)]
    c.assign(tps)
    c.seek_to_beginning()
    got: dict[int, list[bytes]] = {p: [] for p in range(PARTS)}
    deadline = time.monotonic() + timeout
    try:
        while True:
            for tp, recs in c.poll(timeout_ms=500).items():
                got[tp.partition].extend(r.value for r in recs)
            ends = c.end_offsets(tps)
            if sum(len(v) for v in got.values()) >= expected_total and all(c.position(tp) >= ends[tp] for tp in tps):
                # one more poll: nothing beyond what was expected may show up
                for tp, recs in c.poll(timeout_ms=300).items():
                    got[tp.partition].extend(r.value for r in recs)
                return got
            assert time.monotonic() < deadline, f"kafka-python timed out ({isolation}): {got}"
    finally:
        c.close()


def committed_offsets(bootstrap, group, topic) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        res = c.committed([TopicPartition(topic, p) for p in range(PARTS)], timeout=30)
        return {tp.partition: tp.offset for tp in res}
    finally:
        c.close()


def test_confluent_kafka_transactions_commit_and_abort(broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    out, src = f"out-{uuid.uuid4().hex[:6]}", f"src-{uuid.uuid4().hex[:6]}"
    group = f"g-{uuid.uuid4().hex[:6]}"
    _topics(broker, out, src)
    meta_consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group})
    p = Producer(
        {"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}", "linger.ms": 5}
    )
    p.init_transactions(30)
    committed: dict[int, list[bytes]] = {q: [] for q in range(PARTS)}
    everything: dict[int, list[bytes]] = {q: [] for q in range(PARTS)}

    def txn(name, n, commit, offsets):
        p.begin_transaction()
        for i in range(n):
            q = i % PARTS
            v = f"{name}-{i}".encode()
            p.produce(out, value=v, partition=q)
            everything[q].append(v)
            if commit:
                committed[q].append(v)
        p.send_offsets_to_transaction(
            [TopicPartition(src, q, o) for q, o in offsets.items()], meta_consumer.consumer_group_metadata(), 30
        )
        if commit:
            p.commit_transaction(30)
        else:
            p.flush(30)  # the aborted records reach the log first: read_uncommitted must show them
            p.abort_transaction(30)

    txn("t1", 30, True, {0: 10, 1: 11, 2: 12})
    txn("t2", 30, False, {0: 99, 1: 99, 2: 99})
    txn("t3", 15, True, {0: 20})
    meta_consumer.close()
    assert read_confluent_to_eof(broker.bootstrap, out, PARTS, "read_committed") == committed
    assert read_confluent_to_eof(broker.bootstrap, out, PARTS, "read_uncommitted") == everything
    assert kp_read(broker.bootstrap, out, "read_committed", 45) == committed
    assert kp_read(broker.bootstrap, out, "read_uncommitted", 75) == everything
    assert committed_offsets(broker.bootstrap, group, src) == {0: 20, 1: 11, 2: 12}
    kcat = shutil.which("kcat") or shutil.which("kafkacat")
    if kcat:
        res = subprocess.run(
            [
                kcat,
                "-b",
                broker.bootstrap,
                "-C",
                "-t",
                out,
                "-e",
                "-q",
                "-f",
                "%p %s\\n",
                "-X",
                "isolation.level=read_committed",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 0, res.stderr
        seen: dict[int, list[bytes]] = {q: [] for q in range(PARTS)}
        for line in res.stdout.splitlines():
            q, v = line.split(" ", 1)
            seen[int(q)].append(v.encode())
        assert seen == committed
    p.flush(10)


def test_kafka_python_transactional_producer(broker):
    from kafka import KafkaProducer
    from kafka.structs import OffsetAndMetadata, TopicPartition

    out, src = f"kout-{uuid.uuid4().hex[:6]}", f"ksrc-{uuid.uuid4().hex[:6]}"
    group = f"kg-{uuid.uuid4().hex[:6]}"
    _topics(broker, out, src)
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:6]}", max_block_ms=30000
    )
    try:
        p.init_transactions()
        committed: dict[int, list[bytes]] = {q: [] for q in range(PARTS)}
        everything: dict[int, list[bytes]] = {q: [] for q in range(PARTS)}
        for name, n, commit in (("k1", 12, True), ("k2", 9, False), ("k3", 6, True)):
            p.begin_transaction()
            for i in range(n):
                q = i % PARTS
                v = f"{name}-{i}".encode()
                p.send(out, value=v, partition=q)
                everything[q].append(v)
                if commit:
                    committed[q].append(v)
            p.send_offsets_to_transaction(
                {TopicPartition(src, 0): OffsetAndMetadata(100 if commit else 999, "", -1)}, group
            )
            if commit:
                p.commit_transaction()
            else:
                p.flush()
                p.abort_transaction()
    finally:
        p.close(timeout=10)
    assert read_confluent_to_eof(broker.bootstrap, out, PARTS, "read_committed") == committed
    assert kp_read(broker.bootstrap, out, "read_committed", 18) == committed
    assert read_confluent_to_eof(broker.bootstrap, out, PARTS, "read_uncommitted") == everything
    assert committed_offsets(broker.bootstrap, group, src)[0] == 100
