"""Topic deletion driven by the controller, as Kafka's ZooKeeper mode does it: a deletion waits for
every replica, a broker that is down holds it until it returns, the name cannot be created again
meanwhile, and ``delete.topic.enable=false`` removes deletion marks."""

from __future__ import annotations

import glob
import os
import time

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.integration.controller.support import controller_of, start_cluster
from tests.integration.replication_support import log_end_offset
from tests.support import wait_for

PARTITIONS = 3


def _log_dirs(broker, topic) -> list[str]:
    return sorted(glob.glob(os.path.join(broker.log_dir, "data", f"{topic}-*")))


def _metadata(port, topic, auto_create):
    with support.Wire(port) as w:
        resp = w.request(ApiKey.METADATA, 5, {"topics": [{"name": topic}], "allow_auto_topic_creation": auto_create})
    return next(t for t in resp["topics"] if t["name"] == topic)


def test_a_deletion_waits_for_a_broker_that_is_down_and_completes_when_it_returns(broker_factory, zk):
    from confluent_kafka import KafkaError, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_cluster(broker_factory, zk)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    topic = "doomed"
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(30)
    producer = Producer({"bootstrap.servers": brokers[0].bootstrap, "acks": "all", "log_level": 0})
    acked = []
    for i in range(30):
        producer.produce(topic, value=b"old-%d" % i, partition=i % PARTITIONS, on_delivery=lambda e, m: acked.append(e))
    producer.flush(30)
    assert acked == [None] * 30
    for b in brokers.values():
        wait_for(lambda b=b: len(_log_dirs(b, topic)) == PARTITIONS, 30, message=f"broker {b.broker_id}'s replicas")
    down = next(i for i in (2, 1) if controller_of(zk)[0] != i)  # never the controller, never broker 0
    brokers[down].stop()
    assert len(_log_dirs(brokers[down], topic)) == PARTITIONS

    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    # hidden from Metadata at once; the live brokers deleted their replicas
    assert topic not in admin.list_topics(timeout=10).topics
    for i, b in brokers.items():
        if i != down:
            wait_for(lambda b=b: _log_dirs(b, topic) == [], 20, message=f"broker {i} deleted its replicas")
    # pending while the broker is down: the name cannot be created, not even by auto-creation
    wait_for(lambda: zk.exists(paths.replica_deletion(topic)), 10, message="the deletion started")
    refused = admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=2)])[topic]
    try:
        refused.result(30)
        raise AssertionError("created again while its deletion waits for a broker")
    except KafkaException as e:
        err = e.args[0]
        assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
        assert f"Topic '{topic}' is marked for deletion." in err.str(), err
    md = _metadata(brokers[0].port, topic, auto_create=True)
    assert md["error_code"] == 5 and md["partitions"] == [], md  # LEADER_NOT_AVAILABLE, as Kafka answers
    assert zk.exists(paths.delete_topic_request(topic)) and zk.exists(paths.topic(topic))
    answered = sorted(str(i) for i in brokers if i != down)  # the live brokers answered, the other not
    wait_for(lambda: sorted(zk.get_children(paths.replica_deletion(topic))) == answered, 10, message="answers")
    assert len(_log_dirs(brokers[down], topic)) == PARTITIONS  # its old logs are still there

    brokers[down].restart()  # it deletes its replicas, answers, and the controller completes
    ready = time.monotonic()
    wait_for(lambda: not zk.exists(paths.delete_topic_request(topic)), 30, message="the deletion completed")
    print(f"\ndeletion completed {1000 * (time.monotonic() - ready):.0f} ms after broker {down} was serving again")
    assert not zk.exists(paths.topic(topic)) and not zk.exists(paths.replica_deletion(topic))
    assert _log_dirs(brokers[down], topic) == []
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=3)])[topic].result(30)
    consumer_md = admin.list_topics(topic, timeout=10).topics[topic]
    assert len(consumer_md.partitions) == PARTITIONS
    # the new topic starts empty on every replica
    for b in brokers.values():
        for p in range(PARTITIONS):
            wait_for(
                lambda b=b, p=p: len(_log_dirs(b, topic)) == PARTITIONS and log_end_offset(b, topic, p) == 0,
                30,
                message=f"broker {b.broker_id}: a new, empty {topic}-{p}",
            )


def test_marks_are_removed_when_topic_deletion_is_disabled(broker_factory, zk):
    b = broker_factory(0, delete_topic_enable="false")
    topic = "kept"
    with support.Wire(b.port) as w:
        assert support.create_topic(w, topic)["error_code"] == 0
        resp = w.request(ApiKey.DELETE_TOPICS, 4, {"topic_names": [topic], "timeout_ms": 5000})
        assert resp["responses"][0]["error_code"] == 73  # TOPIC_DELETION_DISABLED
    zk.create(paths.delete_topic_request(topic), b"")  # as Kafka's old tools write it
    wait_for(lambda: not zk.exists(paths.delete_topic_request(topic)), 10, message="the mark removed")
    assert zk.exists(paths.topic(topic)) and _metadata(b.port, topic, auto_create=False)["error_code"] == 0
