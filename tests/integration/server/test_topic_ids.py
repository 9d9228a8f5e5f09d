"""Topic ids (KIP-516): the ``topic_id`` of ``/brokers/topics/<t>`` (Kafka's ZooKeeper form),
written at creation and given to older topics on first sight, served in Metadata v10+ (and a topic
asked for by id in v12); a topic deleted and re-created with fewer partitions gets a new id, and a
stock client (confluent-kafka) carries on with the new topic.  The string form and the znode codec
alone are in tests/unit/protocol/test_topic_ids.py."""

from __future__ import annotations

import base64
import json
import logging
import time
import uuid

from pyklog.broker.protocol import ApiKey
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.zk.znodes import (
    decode_topic_id,
    encode_topic_assignment,
    topic_id_str,
)
from tests.support import Wire, create_topic, wait_for

# ------------------------------------------------------------------------------ codecs (no server)


# ------------------------------------------------------------------------------ a live broker


def _metadata(w, names, version=12):
    topics = (
        None
        if names is None
        else [
            {"name": n, "topic_id": ZERO_UUID} if isinstance(n, str) else {"name": None, "topic_id": n} for n in names
        ]
    )
    return w.request(
        ApiKey.METADATA,
        version,
        {"topics": topics, "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
    )


def test_metadata_topic_ids_by_name_and_by_id_and_old_topics_get_one(broker, zk):
    with Wire(broker.port) as w:
        assert create_topic(w, "ids-a", partitions=2, version=5)["error_code"] == 0
        resp = _metadata(w, ["ids-a", "ids-missing"])
        by_name = {t["name"]: t for t in resp["topics"]}
        tid = by_name["ids-a"]["topic_id"]
        assert tid != ZERO_UUID and by_name["ids-a"]["error_code"] == 0
        assert by_name["ids-missing"]["error_code"] == 3 and by_name["ids-missing"]["topic_id"] == ZERO_UUID
        # the id is Kafka's ZooKeeper form of it
        data, _ = zk.get("/brokers/topics/ids-a")
        assert json.loads(data)["topic_id"] == topic_id_str(tid)
        # v10 and v11 carry the same id; v9 has none
        assert _metadata(w, ["ids-a"], 10)["topics"][0]["topic_id"] == tid
        assert "topic_id" not in _metadata(w, ["ids-a"], 9)["topics"][0]
        # v12: asked for by id
        unknown = uuid.uuid4()
        resp = _metadata(w, [tid, unknown])
        got = {(t["name"], t["error_code"]) for t in resp["topics"]}
        assert got == {("ids-a", 0), (None, 100)}  # UNKNOWN_TOPIC_ID
        assert {t["topic_id"] for t in resp["topics"]} == {tid, unknown}

        # a topic written without an id (an older pyklog, Kafka before 2.8) is given one
        zk.create("/brokers/topics/ids-old", encode_topic_assignment({0: [0]}), makepath=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            t = _metadata(w, ["ids-old"])["topics"][0]
            if t["error_code"] == 0 and t["topic_id"] != ZERO_UUID:
                break
            time.sleep(0.05)
        assert t["error_code"] == 0 and t["topic_id"] != ZERO_UUID
        assert decode_topic_id(zk.get("/brokers/topics/ids-old")[0], "/p") == t["topic_id"]


class _Lines(logging.Handler):
    """Collects librdkafka's log lines (confluent-kafka forwards them to a logging.Logger)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_recreated_topic_with_fewer_partitions_gets_a_new_id_and_confluent_clients_follow(broker):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = "ids-recreated"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    with Wire(broker.port) as w:
        first = _metadata(w, [topic])["topics"][0]
    assert len(first["partitions"]) == 3
    lines = _Lines()
    rd_log = logging.getLogger(f"rdkafka.{topic}")
    rd_log.addHandler(lines)
    rd_log.setLevel(logging.DEBUG)
    watcher = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "ids-watcher", "debug": "metadata", "logger": rd_log}
    )
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    try:
        assert len(watcher.list_topics(topic, timeout=10).topics[topic].partitions) == 3
        for i in range(3):
            p.produce(topic, value=b"old-%d" % i, partition=i)
        assert p.flush(30) == 0

        admin.delete_topics([topic])[topic].result(30)

        def recreated():  # refused ("marked for deletion") until the controller completed the deletion
            try:
                admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
                return True
            except KafkaException as e:
                assert "is marked for deletion" in e.args[0].str(), e
                return False

        wait_for(recreated, 30, interval=0.05, message="the topic created again")
        with Wire(broker.port) as w:
            second = _metadata(w, [topic])["topics"][0]
        assert len(second["partitions"]) == 1 and second["topic_id"] not in (ZERO_UUID, first["topic_id"])

        # librdkafka notices the re-creation by the topic id (KIP-516), in Kafka's string form
        # (librdkafka prints ids in standard base64, Kafka and ZooKeeper in the URL-safe alphabet)
        def b64(u):
            return base64.b64encode(u.bytes).decode().rstrip("=")

        changed = f"Topic {topic} changed id from {b64(first['topic_id'])} to {b64(second['topic_id'])}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(changed in x for x in lines.lines):
            watcher.list_topics(topic, timeout=10)
            watcher.poll(0.1)  # delivers the queued log lines
        assert any(changed in x for x in lines.lines), "\n".join(x for x in lines.lines if topic in x)

        # the producer learns the new layout (one partition) and its messages land in the new topic
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            md = p.list_topics(topic, timeout=10).topics[topic]
            if md.error is None and len(md.partitions) == 1:
                break
            time.sleep(0.1)
        assert len(md.partitions) == 1
        for i in range(2):
            p.produce(topic, value=b"new-%d" % i)
        assert p.flush(30) == 0
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "ids-reader", "enable.auto.commit": False})
        try:
            c.assign([TopicPartition(topic, 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 2 and time.monotonic() < deadline:
                got += [m.value() for m in c.consume(10, 0.5) if m.error() is None]
            assert got == [b"new-0", b"new-1"]
        finally:
            c.close()
    finally:
        watcher.close()
        rd_log.removeHandler(lines)
