"""DeleteRecords, DescribeLogDirs, DeleteGroups and OffsetDelete on a real broker with stock clients.

DeleteRecords moves the log start offset (low watermark answered, reads below it fail with
OFFSET_OUT_OF_RANGE, consumers from the earliest offset read exactly the records kept) and the new
start offset survives a kill -9.  DeleteGroups and OffsetDelete follow Kafka's rules for broker
groups: NON_EMPTY_GROUP while members are there, GROUP_SUBSCRIBED_TO_TOPIC for the topics they
subscribe to, GROUP_ID_NOT_FOUND once gone; the deleted offsets are gone after a restart too.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, fetch, produce, records, wait_for


def _topic() -> str:
    return f"adm-{uuid.uuid4().hex[:8]}"


def _create(port: int, name: str, partitions: int, configs=()):
    with Wire(port) as w:
        r = w.request(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs],
                    }
                ],
                "timeout_ms": 10000,
                "validate_only": False,
            },
        )
    assert r["topics"][0]["error_code"] == 0, r


def _start_offset(port: int, topic: str, p: int) -> int:
    with Wire(port) as w:
        r = w.request(
            ApiKey.LIST_OFFSETS,
            1,
            {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": p, "timestamp": -2}]}]},
        )
    return r["topics"][0]["partitions"][0]["offset"]


def _read_values(bootstrap: str, topic: str, p: int) -> list[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex[:6]}", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING)])
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < hi - lo and time.monotonic() < deadline:
            out.extend(m.value() for m in c.consume(500, 0.5) if not m.error())
        return out
    finally:
        c.close()


def test_delete_records_moves_the_log_start_offset_and_survives_kill(broker_factory):
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KpTP
    from kafka.admin import KafkaAdminClient

    b = broker_factory(0, log_segment_bytes=2048)
    topic, compacted = _topic(), _topic()
    _create(b.port, topic, 2)
    _create(b.port, compacted, 1, [("cleanup.policy", "compact")])
    with Wire(b.port) as w:
        for p in (0, 1):
            for i in range(10):  # 10 batches of 10: several segments
                assert produce(w, topic, records(10, prefix=b"p%d-%d-" % (p, i)), partition=p)["error_code"] == 0

    # confluent-kafka: everything before offset 40 of partition 0
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = admin.delete_records([TopicPartition(topic, 0, 40)])
    got = next(iter(res.values())).result(30)
    assert got.low_watermark == 40
    assert _start_offset(b.port, topic, 0) == 40
    # kafka-python: partition 1 up to its high watermark
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        out = kp.delete_records({KpTP(topic, 1): -1})
        assert "100" in repr(out), out
    finally:
        kp.close()
    assert _start_offset(b.port, topic, 1) == 100

    # Kafka's errors: beyond the high watermark, a compacted topic, an unknown partition
    with Wire(b.port) as w:
        r = w.request(
            ApiKey.DELETE_RECORDS,
            1,
            {
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {"partition_index": 0, "offset": 101},
                            {"partition_index": 0, "offset": -7},
                            {"partition_index": 5, "offset": 1},
                        ],
                    },
                    {"name": compacted, "partitions": [{"partition_index": 0, "offset": 0}]},
                ],
                "timeout_ms": 5000,
            },
        )
        codes = [p["error_code"] for t in r["topics"] for p in t["partitions"]]
        assert codes == [1, 1, 3, 44]
        # a lower offset changes nothing: the low watermark stays
        r = w.request(
            ApiKey.DELETE_RECORDS,
            0,
            {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 10}]}], "timeout_ms": 5000},
        )
        assert r["topics"][0]["partitions"][0] == {"partition_index": 0, "low_watermark": 40, "error_code": 0}
        # a read below the new start fails (OFFSET_OUT_OF_RANGE), at it succeeds
        assert fetch(w, topic, 5)["error_code"] == 1
        assert fetch(w, topic, 40)["error_code"] == 0

    # readers from the earliest offset get exactly the 60 records kept, none of the 40 deleted
    kept = _read_values(b.bootstrap, topic, 0)
    assert kept == [b"p0-%d-%d" % (i, j) for i in range(4, 10) for j in range(10)]
    assert _read_values(b.bootstrap, topic, 1) == []

    # kill -9: the start offsets were checkpointed before the answer
    b.kill()
    b.start()
    assert _start_offset(b.port, topic, 0) == 40 and _start_offset(b.port, topic, 1) == 100
    assert _read_values(b.bootstrap, topic, 0) == kept


def test_describe_log_dirs_sizes(broker_factory):
    from kafka.admin import KafkaAdminClient

    b = broker_factory(0)
    topic = _topic()
    _create(b.port, topic, 2)
    data_dir = os.path.join(b.log_dir, "data")
    wait_for(
        lambda: all(os.path.isdir(os.path.join(data_dir, f"{topic}-{p}")) for p in (0, 1)),
        10,
        message="both logs created",
    )
    with Wire(b.port) as w:
        assert produce(w, topic, records(50), partition=0)["error_code"] == 0
        r = w.request(ApiKey.DESCRIBE_LOG_DIRS, 1, {"topics": [{"topic": topic, "partitions": [0, 1, 7]}]})
        everything = w.request(ApiKey.DESCRIBE_LOG_DIRS, 0, {"topics": None})
    [res] = r["results"]
    assert res["error_code"] == 0 and os.path.realpath(res["log_dir"]) == os.path.realpath(data_dir)
    parts = {p["partition_index"]: p for t in res["topics"] if t["name"] == topic for p in t["partitions"]}
    assert sorted(parts) == [0, 1]
    on_disk = sum(
        os.path.getsize(os.path.join(data_dir, f"{topic}-0", f))
        for f in os.listdir(os.path.join(data_dir, f"{topic}-0"))
        if f.endswith(".log")
    )
    assert parts[0]["partition_size"] == on_disk > 0 and parts[1]["partition_size"] == 0
    assert all(p["offset_lag"] == 0 and not p["is_future_key"] for p in parts.values())
    assert topic in {t["name"] for t in everything["results"][0]["topics"]}
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        text = repr(kp.describe_log_dirs())
        assert topic in text and str(on_disk) in text
    finally:
        kp.close()


def test_delete_groups_and_offset_delete(broker_factory):
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KpTP
    from kafka.admin import KafkaAdminClient

    b = broker_factory(0)
    subscribed, other = _topic(), _topic()
    _create(b.port, subscribed, 1)
    _create(b.port, other, 1)
    with Wire(b.port) as w:
        for t in (subscribed, other):
            assert produce(w, t, records(10))["error_code"] == 0
    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        c.subscribe([subscribed])
        wait_for(lambda: (c.consume(10, 0.2) is not None) and len(c.assignment()) == 1, 30, message="assigned")
        c.commit(offsets=[TopicPartition(subscribed, 0, 7), TopicPartition(other, 0, 3)], asynchronous=False)

        # a group with a member: DeleteGroups refuses (NON_EMPTY_GROUP) with both clients
        with pytest.raises(KafkaException) as e:
            admin.delete_consumer_groups([group], request_timeout=10)[group].result(30)
        assert e.value.args[0].code() == 68
        assert "NonEmptyGroup" in repr(kp.delete_groups([group]))
        # OffsetDelete: the subscribed topic is refused per partition, the other one goes
        res = kp.delete_group_offsets(group, [KpTP(subscribed, 0), KpTP(other, 0)])
        assert res[KpTP(subscribed, 0)].__name__ == "GroupSubscribedToTopicError"
        assert res[KpTP(other, 0)].__name__ == "NoError"
        committed = {
            tp.topic: tp.offset
            for tp in c.committed([TopicPartition(subscribed, 0), TopicPartition(other, 0)], timeout=10)
        }
        assert committed == {subscribed: 7, other: -1001}
        with Wire(b.port) as w:  # unknown topic and unknown group, raw
            r = w.request(
                ApiKey.OFFSET_DELETE,
                0,
                {"group_id": group, "topics": [{"name": "no-such-topic", "partitions": [{"partition_index": 0}]}]},
            )
            assert r["error_code"] == 0 and r["topics"][0]["partitions"][0]["error_code"] == 3
            r = w.request(ApiKey.OFFSET_DELETE, 0, {"group_id": "no-such-group", "topics": []})
            assert r["error_code"] == 69
    finally:
        c.close()  # LeaveGroup: the group is Empty now
    try:
        # DeleteGroups on the Empty group: its offsets go; a second delete finds nothing
        admin.delete_consumer_groups([group], request_timeout=10)[group].result(30)
        res = kp.delete_groups([group, "never-existed"])
        assert sorted(res) == sorted([group, "never-existed"]), res
        assert all("GroupIdNotFound" in str(err) for err in res.values()), res
        with Wire(b.port) as w:
            r = w.request(ApiKey.DELETE_GROUPS, 0, {"groups_names": [group, ""]})
            assert [x["error_code"] for x in r["results"]] == [69, 24]  # GROUP_ID_NOT_FOUND, INVALID_GROUP_ID
    finally:
        kp.close()
    # after a restart the tombstones hold: a new consumer of the group starts from the beginning
    b.stop()
    b.start()
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        committed = c.committed([TopicPartition(subscribed, 0), TopicPartition(other, 0)], timeout=10)
        assert [tp.offset for tp in committed] == [-1001, -1001]
    finally:
        c.close()


def test_delete_records_seen_by_the_spark_source_fail_on_data_loss(broker_factory, spark):
    """A batch read (format "pyklog") of a range below the start DeleteRecords set fails naming the
    lost offsets with failOnDataLoss=true, and with false reads exactly the records kept."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    b = broker_factory(0)
    topic = _topic()
    _create(b.port, topic, 1)
    with Wire(b.port) as w:
        for i in range(5):
            assert produce(w, topic, records(10, prefix=b"s%d-" % i))["error_code"] == 0
    admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept alive until its future completes
    res = admin.delete_records([TopicPartition(topic, 0, 25)])
    assert next(iter(res.values())).result(30).low_watermark == 25

    def read(fail_on_data_loss: str):
        return (
            spark.read.format("pyklog")
            .option("kafka.bootstrap.servers", b.bootstrap)
            .option("assign", f'{{"{topic}":[0]}}')
            .option("startingOffsets", f'{{"{topic}":{{"0":0}}}}')
            .option("endingOffsets", f'{{"{topic}":{{"0":50}}}}')
            .option("failOnDataLoss", fail_on_data_loss)
            .load()
            .select("offset", "value")
            .collect()
        )

    with pytest.raises(Exception) as ei:
        read("true")
    assert f"{topic}-0 lost offsets [0, 25)" in str(ei.value) and "failOnDataLoss" in str(ei.value)
    rows = read("false")
    assert [r.offset for r in rows] == list(range(25, 50))
    assert bytes(rows[0].value) == b"s2-5" and bytes(rows[-1].value) == b"s4-9"
