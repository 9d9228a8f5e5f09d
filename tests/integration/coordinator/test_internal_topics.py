"""Clients cannot write Kafka's internal topics (``__consumer_offsets``, ``__transaction_state``).

Kafka's ReplicaManager refuses a client's Produce to an internal topic with INVALID_TOPIC_EXCEPTION
(error code 17): otherwise any client could forge an offset-commit record and move a group's
committed offsets.  The broker's own offset manager still writes there (through the log, not Produce).

Fault test: a group commits offset 5, a raw Produce v8, confluent-kafka and pyklog's
Producer then produce a forged commit record (offset 999999) to the group's offsets partition;
every forged send must fail with code 17, the partition's log end offset must not move, and after a
broker restart (the offsets are reloaded from the log) the group's committed offset is still 5.
On the code before this change the forged records were acknowledged and the group read 999999.
"""

from __future__ import annotations

import time
import uuid

import pytest

from tests.support import Wire, produce

FORGED = 999_999


def _log_end(port: int, topic: str, partition: int) -> int:
    with Wire(port) as w:
        r = w.request(
            2,
            1,
            {
                "replica_id": -1,
                "topics": [{"name": topic, "partitions": [{"partition_index": partition, "timestamp": -1}]}],
            },
        )
    p = r["topics"][0]["partitions"][0]
    assert p["error_code"] == 0, p
    return p["offset"]


def _committed(bootstrap: str, group: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return c.committed([TopicPartition(topic, 0)], timeout=30)[0].offset
    finally:
        c.close()


def test_forged_offset_commit_is_refused_and_offsets_survive_restart(broker_factory):
    from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

    from pyklog.broker.coordinator.offsets import (
        OffsetAndMetadata,
        encode_offset_key,
        encode_offset_value,
        partition_for_group,
    )
    from pyklog.broker.errors import InvalidTopicError
    from pyklog.broker.record.batch import build_batch
    from pyklog.connector.producer import Producer as PyklogProducer

    b = broker_factory(0)
    topic = f"it-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce(topic, b"v%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    c.close()
    assert _committed(b.bootstrap, group, topic) == 5

    opart = partition_for_group(group, int(b.props["offsets.topic.num.partitions"]))
    leo_before = _log_end(b.port, "__consumer_offsets", opart)
    key = encode_offset_key(group, topic, 0)
    value = encode_offset_value(OffsetAndMetadata(FORGED, -1, "", int(time.time() * 1000)))

    # a raw Produce v8 (what any Kafka client sends): INVALID_TOPIC_EXCEPTION (17) with the reason
    with Wire(b.port) as w:
        part = produce(
            w, "__consumer_offsets", build_batch([(key, value, int(time.time() * 1000), ())]), partition=opart
        )
    assert part["error_code"] == 17, part
    assert part["error_message"] == "Cannot append to internal topic __consumer_offsets", part

    # confluent-kafka: the delivery report carries TOPIC_EXCEPTION (17)
    reports = []
    cp = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 20000})
    cp.produce(
        "__consumer_offsets", key=key, value=value, partition=opart, on_delivery=lambda err, m: reports.append(err)
    )
    cp.flush(30)
    assert len(reports) == 1 and reports[0] is not None, reports
    assert reports[0].code() == KafkaError.TOPIC_EXCEPTION, reports[0]
    assert not reports[0].retriable()

    # pyklog's Producer: a clear, non-retriable InvalidTopicError, promptly
    pp = PyklogProducer({"bootstrap.servers": b.bootstrap, "delivery.timeout.ms": 60000})
    try:
        t0 = time.monotonic()
        with pytest.raises(InvalidTopicError) as ei:
            pp.send_sync("__consumer_offsets", value, key=key, partition=opart)
        assert not ei.value.retriable
        assert "Cannot append to internal topic __consumer_offsets" in str(ei.value)
        assert time.monotonic() - t0 < 20  # failed at the first answer, not after delivery.timeout.ms
        # __transaction_state is reserved: refused as well (and not auto-created)
        with pytest.raises(InvalidTopicError):
            pp.send_sync("__transaction_state", b"x", partition=0)
    finally:
        pp.close()

    assert _log_end(b.port, "__consumer_offsets", opart) == leo_before  # nothing appended
    b.stop()
    b.start()
    assert _committed(b.bootstrap, group, topic) == 5, "a forged record moved the committed offset"
    # the broker's own offset manager still writes the internal topic
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    c.close()
    assert _committed(b.bootstrap, group, topic) == 7
    assert _log_end(b.port, "__consumer_offsets", opart) == leo_before + 1
