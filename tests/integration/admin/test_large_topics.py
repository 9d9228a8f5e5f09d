"""Topics whose ZooKeeper nodes do not fit in one multi-op, with stock clients on a real broker.

One ZooKeeper request must stay under ``jute.maxbuffer`` (1 MiB by default).  A topic name of 180
characters makes every node path long, so 2,600 partitions' nodes are over 1 MiB in one multi-op
(as about 7,500 partitions are with a short name) while the broker creates only 2,600 logs: growing
the topic (CreatePartitions) and deleting it (DeleteTopics, completed by the controller) must
write it in parts, and the name must be usable again afterwards.
"""

from __future__ import annotations

import time
import uuid

from pyklog.broker.zk import paths
from tests.support import wait_for

PARTITIONS = 2600


def _zk_nodes_of(zk, topic: str) -> list[str]:
    return [
        p
        for p in (
            paths.topic(topic),
            paths.topic_config(topic),
            paths.delete_topic_request(topic),
            paths.replica_deletion(topic),
        )
        if zk.exists(p)
    ]


def test_a_topic_too_large_for_one_multi_op_grows_and_is_deleted_in_parts(broker, zk):
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

    topic = ("large-" + uuid.uuid4().hex) * 5  # 190 characters
    topic = topic[:180]
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)

    # CreatePartitions: 2,599 new partitions' nodes in parts, the assignment last
    started = time.monotonic()
    admin.create_partitions([NewPartitions(topic, PARTITIONS)], operation_timeout=60)[topic].result(90)
    grown = time.monotonic() - started
    assert len(zk.get_children(paths.topic_partitions(topic))) == PARTITIONS
    assert all(zk.exists(paths.partition_state(topic, p)) for p in (1, PARTITIONS // 2, PARTITIONS - 1))

    def leaders():
        md = admin.list_topics(topic, timeout=10).topics[topic]
        return len(md.partitions) == PARTITIONS and all(p.leader == broker.broker_id for p in md.partitions.values())

    wait_for(leaders, 60, interval=0.5, message=f"{PARTITIONS} partitions with a leader")
    last = PARTITIONS - 1
    producer = Producer({"bootstrap.servers": broker.bootstrap, "log_level": 0})
    acked = []
    producer.produce(topic, value=b"to the last partition", partition=last, on_delivery=lambda e, m: acked.append(e))
    producer.flush(30)
    assert acked == [None]
    del producer  # no reconnect attempts once the broker stops
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "large", "log_level": 0})
    try:
        consumer.assign([TopicPartition(topic, last, 0)])
        msg = None
        deadline = time.monotonic() + 30
        while msg is None and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
        assert msg is not None and msg.error() is None, msg and msg.error()
        assert msg.value() == b"to the last partition" and msg.partition() == last
    finally:
        consumer.close()

    # DeleteTopics: the controller removes the partition nodes in parts, the topic node and mark last
    started = time.monotonic()
    admin.delete_topics([topic], operation_timeout=60)[topic].result(90)
    wait_for(lambda: _zk_nodes_of(zk, topic) == [], 60, interval=0.2, message="every node of the topic gone")
    deleted = time.monotonic() - started
    assert zk.exists(paths.deleted_topic_record(topic))
    assert broker.proc.poll() is None  # the broker never lost its session in a loop

    # the name is usable again: a new topic, empty
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    wait_for(lambda: topic in admin.list_topics(timeout=10).topics, 20, message="re-created")
    assert sorted(zk.get_children(paths.topic_partitions(topic))) == ["0"]
    print(f"\ngrew to {PARTITIONS} partitions in {grown:.1f} s, deleted in {deleted:.1f} s")
