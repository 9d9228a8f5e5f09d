"""Stock Kafka clients against a real pyklog broker process: kcat (librdkafka) with every
compression codec, confluent-kafka Producer/Consumer with committed offsets, kafka-python 3
with its defaults (idempotence on) and as a legacy 0.10 client (Produce v2 / Fetch v3)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest

from tests.support import running_broker, stable_port

KCAT = shutil.which("kcat") or shutil.which("kafkacat")


def _topic() -> str:
    return f"stock-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def shared_broker(zookeeper, tmp_path_factory):
    with running_broker(zookeeper, str(tmp_path_factory.mktemp("stock-broker"))) as b:
        yield b


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kcat_produce_consume_each_codec(shared_broker, codec):
    topic = _topic()
    lines = [f"{codec}-{i}-" + "x" * (i % 50) for i in range(500)]
    p = subprocess.run(
        [KCAT, "-P", "-b", shared_broker.bootstrap, "-t", topic, "-z", codec],
        input="\n".join(lines) + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "does not support compression" not in p.stderr, p.stderr
    c = subprocess.run(
        [KCAT, "-C", "-b", shared_broker.bootstrap, "-t", topic, "-e", "-o", "beginning", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert c.returncode == 0, c.stderr
    assert c.stdout.splitlines() == lines
    # the batches on disk carry the codec librdkafka chose: it compressed (the advertised Produce
    # range reaches v0, which librdkafka requires for gzip/snappy/lz4) and the broker kept the bytes
    from pyklog.broker.record.compression import CODECS
    from pyklog.broker.record.reader import iter_headers

    seg = os.path.join(shared_broker.props["log.dirs"], f"{topic}-0", "00000000000000000000.log")
    with open(seg, "rb") as f:
        codecs = [h.compression for _, h in iter_headers(f.read())]
    # librdkafka sends a batch uncompressed when compressing would not make it smaller
    assert CODECS[codec] in codecs and set(codecs) <= {CODECS[codec], 0}, codecs


def test_confluent_kafka_produce_consume_commit(shared_broker):
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = _topic()
    p = Producer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "linger.ms": 5,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    delivered = []
    for i in range(2000):
        p.produce(
            topic,
            key=b"k%d" % (i % 7),
            value=b"value-%d" % i,
            headers=[("h", b"%d" % i)],
            on_delivery=lambda err, m: delivered.append((err, m.offset())),
        )
        if i % 500 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert all(err is None for err, _ in delivered) and sorted(o for _, o in delivered) == list(range(2000))

    group = "cg-" + uuid.uuid4().hex[:8]
    c = Consumer(
        {
            "bootstrap.servers": shared_broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 2000 and time.monotonic() < deadline:
            for m in c.consume(500, 1.0):
                assert m.error() is None, m.error()
                got.append(m)
        assert [m.value() for m in got] == [b"value-%d" % i for i in range(2000)]
        assert got[5].headers() == [("h", b"5")] and got[5].key() == b"k5"
        c.commit(offsets=[TopicPartition(topic, 0, 1234)], asynchronous=False)
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert tp.offset == 1234 and tp.error is None
        lo, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        assert (lo, hi) == (0, 2000)
        (ts,) = c.offsets_for_times([TopicPartition(topic, 0, 0)], timeout=10)
        assert ts.offset == 0
    finally:
        c.close()


def test_kafka_python_defaults_idempotent(shared_broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic()
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap)  # kafka-python 3: idempotence on
    futures = [p.send(topic, key=b"k", value=b"kp-%d" % i) for i in range(300)]
    p.flush(30)
    offsets = [f.get(timeout=30).offset for f in futures]
    assert offsets == list(range(300))
    p.close()
    c = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        group_id=None,
    )
    c.assign([TopicPartition(topic, 0)])
    vals = [m.value for m in c]
    c.close()
    assert vals == [b"kp-%d" % i for i in range(300)]


def test_kafka_python_as_legacy_0_10_client(shared_broker):
    """api_version=(0, 10): message format v1 with Produce v2 / Fetch v3 (up- and down-conversion)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    topic = _topic()
    p = KafkaProducer(bootstrap_servers=shared_broker.bootstrap, api_version=(0, 10), compression_type="gzip")
    for i in range(100):
        p.send(topic, value=b"legacy-%d" % i, timestamp_ms=1_600_000_000_000 + i)
    p.flush(30)
    p.close()
    c = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap,
        api_version=(0, 10),
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
        group_id=None,
    )
    c.assign([TopicPartition(topic, 0)])
    msgs = list(c)
    c.close()
    assert [m.value for m in msgs] == [b"legacy-%d" % i for i in range(100)]
    assert [m.offset for m in msgs] == list(range(100))
    assert msgs[3].timestamp == 1_600_000_000_003
    # and a modern client reads the same records in format v2
    c2 = KafkaConsumer(
        bootstrap_servers=shared_broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000, group_id=None
    )
    c2.assign([TopicPartition(topic, 0)])
    assert [m.value for m in c2] == [b"legacy-%d" % i for i in range(100)]
    c2.close()


def test_committed_offsets_survive_restart(broker_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    b = broker_factory(0, port=stable_port())
    topic = _topic()
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce(topic, value=b"%d" % i)
    assert p.flush(30) == 0
    group = "restart-" + uuid.uuid4().hex[:8]
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)
    c.close()
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group + "-kp", enable_auto_commit=False)
    kc.assign([KTP(topic, 0)])
    from kafka.structs import OffsetAndMetadata

    kc.commit({KTP(topic, 0): OffsetAndMetadata(3, "", -1)})
    kc.close()

    assert b.stop() == 0
    assert os.path.exists(os.path.join(b.props["log.dirs"], ".kafka_cleanshutdown"))
    b.start()

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 30
        while True:  # the offsets partition loads in the background after start-up
            (tp,) = c.committed([TopicPartition(topic, 0)], timeout=10)
            if tp.offset == 7 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert tp.offset == 7
        # resume from the committed offset
        c.assign([TopicPartition(topic, 0, tp.offset)])
        got = []
        while len(got) < 3 and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(10, 1.0) if m.error() is None]
        assert got == [b"7", b"8", b"9"]
    finally:
        c.close()
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group + "-kp", enable_auto_commit=False)
    try:
        assert kc.committed(KTP(topic, 0)) == 3
    finally:
        kc.close()


def test_confluent_admin_client_create_list_delete(shared_broker):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    name = _topic()
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=3, replication_factor=1, config={"retention.ms": "3600000"})],
        operation_timeout=10,
    )
    futures[name].result(30)
    bad = admin.create_topics([NewTopic("bad/name", num_partitions=1, replication_factor=1)])
    with pytest.raises(Exception) as e:
        bad["bad/name"].result(30)
    assert "INVALID_TOPIC" in str(e.value).upper() or "illegal" in str(e.value).lower()
    md = admin.list_topics(timeout=10)
    assert sorted(md.topics[name].partitions) == [0, 1, 2]
    assert md.controller_id == 0 and md.cluster_id
    admin.delete_topics([name], operation_timeout=10)[name].result(30)
    deadline = time.monotonic() + 10
    while name in admin.list_topics(timeout=10).topics and time.monotonic() < deadline:
        time.sleep(0.1)
    assert name not in admin.list_topics(timeout=10).topics
