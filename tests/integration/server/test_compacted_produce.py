"""End to end: a compacted topic (cleanup.policy=compact) refuses records without a key at
produce time, as Kafka does (LogValidator.validateKey, KIP-467): Produce v8+ gets
INVALID_RECORD (87) with RecordErrors naming the record's index in its batch, older versions
CORRUPT_MESSAGE (2).  A real broker process over a real ZooKeeper; requests on a raw socket and
from stock clients (kafka-python, confluent-kafka); the segment files are read afterwards to
check that nothing keyless reached the log."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.legacy import build_message_set
from pyklog.broker.record.reader import iter_batches
from tests.support import Wire, create_topic, fetch, produce, running_broker

COMPACT = [{"name": "cleanup.policy", "value": "compact"}]


def _topic() -> str:
    return f"compacted-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory):
    with running_broker(zookeeper, str(tmp_path_factory.mktemp("compacted-broker"))) as b:
        yield b


@pytest.fixture
def wire(broker):
    w = Wire(broker.port)
    yield w
    w.close()


def logged_keys(broker, topic: str) -> list:
    """Every record key in the partition's segment files, read from disk."""
    d = os.path.join(broker.props["log.dirs"], f"{topic}-0")
    keys = []
    for name in sorted(os.listdir(d)):
        if name.endswith(".log"):
            with open(os.path.join(d, name), "rb") as f:
                keys.extend(r.key for b in iter_batches(f.read()) for r in b.records)
    return keys


def _batch(keys) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(k, b"value-%d" % i, now, ()) for i, k in enumerate(keys)])


def test_produce_versions_get_invalid_record_or_corrupt_message(broker, wire):
    name = _topic()
    assert create_topic(wire, name, configs=COMPACT)["error_code"] == 0
    tp = f"{name}-0"
    p = produce(wire, name, _batch([b"a", None, b"c", None]), version=8)
    assert p["error_code"] == 87 and p["base_offset"] == -1
    msg = f"Compacted topic cannot accept message without key in topic partition {tp}."
    assert p["record_errors"] == [
        {"batch_index": 1, "batch_index_error_message": msg},
        {"batch_index": 3, "batch_index_error_message": msg},
    ]
    assert "2 record errors" in p["error_message"]
    for version in (3, 7):  # INVALID_RECORD is unknown to these clients
        assert produce(wire, name, _batch([None]), version=version)["error_code"] == 2
    legacy = build_message_set([(b"k", b"x", None), (None, b"y", None)], magic=1)  # up-converted
    assert produce(wire, name, legacy, version=2)["error_code"] == 2
    ok = produce(wire, name, _batch([b"a", b"b"]), version=8)
    assert (ok["error_code"], ok["base_offset"], ok["record_errors"]) == (0, 0, [])
    assert produce(wire, name, build_message_set([(b"k", b"x", None)], magic=1), version=2)["base_offset"] == 2
    part = fetch(wire, name, 0)
    assert part["high_watermark"] == 3
    assert [r.key for b in iter_batches(part["records"]) for r in b.records] == [b"a", b"b", b"k"]
    assert logged_keys(broker, name) == [b"a", b"b", b"k"]


def test_delete_topic_still_takes_keyless_records(wire):
    name = _topic()
    create_topic(wire, name)
    assert produce(wire, name, _batch([None, None]))["error_code"] == 0


def test_kafka_python_keyless_send_to_compacted_topic_fails(broker):
    from kafka import KafkaProducer
    from kafka.errors import InvalidRecordError

    name = _topic()
    w = Wire(broker.port)
    try:
        create_topic(w, name, configs=COMPACT)
    finally:
        w.close()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, enable_idempotence=False, acks=1)
    try:
        keyless = p.send(name, value=b"no key")
        with pytest.raises(InvalidRecordError):
            keyless.get(timeout=30)
        keyed = p.send(name, key=b"k1", value=b"with key").get(timeout=30)
        assert keyed.offset == 0
    finally:
        p.close()
    assert logged_keys(broker, name) == [b"k1"]


def test_confluent_kafka_keyless_produce_to_compacted_topic_fails(broker):
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    name = _topic()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=1, config={"cleanup.policy": "compact"})])[
        name
    ].result(30)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    reports = []
    p.produce(name, value=b"no key", on_delivery=lambda err, m: reports.append(("keyless", err, m.offset())))
    assert p.flush(30) == 0
    p.produce(name, key=b"k", value=b"keyed", on_delivery=lambda err, m: reports.append(("keyed", err, m.offset())))
    assert p.flush(30) == 0
    (_, err, _), (_, ok, offset) = reports
    assert err is not None and err.code() == KafkaError.INVALID_RECORD, err
    assert ok is None and offset == 0
    assert logged_keys(broker, name) == [b"k"]
