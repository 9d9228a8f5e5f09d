"""CreatePartitions (API 37) on real brokers with stock clients.

The topic grows in ZooKeeper and on its leaders (two brokers: the new leaders are spread as at
creation and each leader creates its logs); Metadata from every broker shows the new partitions;
pyklog's Producer, confluent-kafka's producer, a ZooKeeper consumer group (a rebalance) and a
broker-side group (confluent-kafka consumer) all pick them up; every record written is read back
exactly once, also after the brokers restart.  Kafka's errors (INVALID_PARTITIONS,
INVALID_REPLICA_ASSIGNMENT, UNKNOWN_TOPIC_OR_PARTITION, INVALID_REQUEST) with validate_only
honoured.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, wait_for


def _topic() -> str:
    return f"parts-{uuid.uuid4().hex[:8]}"


def _metadata(port: int, topic: str) -> dict:
    with Wire(port) as w:
        resp = w.request(
            ApiKey.METADATA,
            8,
            {
                "topics": [{"name": topic}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
    t = resp["topics"][0]
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def _create_partitions(port: int, topics: list, version: int = 1, validate_only: bool = False) -> list:
    with Wire(port) as w:
        resp = w.request(
            ApiKey.CREATE_PARTITIONS, version, {"topics": topics, "timeout_ms": 10000, "validate_only": validate_only}
        )
    return resp["results"]


def _end_offsets(bootstrap: str, topic: str, n: int) -> dict[int, int]:
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(n)]
        return {tp.partition: off for tp, off in c.end_offsets(tps).items()}
    finally:
        c.close()


def _read_all(bootstrap: str, topic: str, n: int, expected: int) -> list[bytes]:
    """Every record of partitions 0..n-1, read with kafka-python from the start."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=3000
    )
    try:
        c.assign([TopicPartition(topic, p) for p in range(n)])
        out = []
        deadline = time.monotonic() + 30
        while len(out) < expected and time.monotonic() < deadline:
            for batch in c.poll(timeout_ms=500).values():
                out.extend(r.value for r in batch)
        return out
    finally:
        c.close()


def test_create_partitions_grows_topic_for_producers_and_both_kinds_of_groups(broker_factory, zk_chroot):
    from confluent_kafka import Consumer
    from confluent_kafka import Producer as CkProducer
    from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions

    from pyklog.connector.group import GroupMember
    from pyklog.connector.producer import Producer

    b0 = broker_factory(0)
    b1 = broker_factory(1)
    bootstrap = f"{b0.bootstrap},{b1.bootstrap}"
    topic = _topic()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    wait_for(lambda: len(_metadata(b1.port, topic)) == 2, 10, message="topic on broker 1")

    # consumers that are running before the topic grows
    zk_members = [
        GroupMember(
            zk_chroot, "zkgroup", topics={topic: 1}, consumer_id=c, session_timeout_s=4.0, rebalance_backoff_ms=200
        ).start()
        for c in ("a", "b")
    ]
    ck_consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "topic.metadata.refresh.interval.ms": 500,
            "enable.auto.commit": False,
        }
    )
    ck_consumer.subscribe([topic])
    ck_producer = CkProducer(
        {"bootstrap.servers": bootstrap, "topic.metadata.refresh.interval.ms": 500, "linger.ms": 5}
    )
    py_producer = Producer({"bootstrap.servers": bootstrap, "metadata.max.age.ms": 500, "linger.ms": 5})
    try:
        wait_for(
            lambda: (
                all(m.is_stable() for m in zk_members)
                and sorted(p for m in zk_members for _, p in m.assignment()) == [0, 1]
            ),
            30,
            message="ZooKeeper group owns partitions 0-1",
        )
        got: list[bytes] = []
        # the broker-side group joins while the topic has 2 partitions
        wait_for(
            lambda: (
                got.extend(m.value() for m in ck_consumer.consume(100, 0.2) if not m.error())
                or len(ck_consumer.assignment()) == 2
            ),
            30,
            message="confluent consumer assigned 2",
        )

        import json

        from pyklog.broker.zk import paths
        from tests.support import kazoo_client

        zk = kazoo_client(zk_chroot)
        topic_id = json.loads(zk.get(paths.topic(topic))[0]).get("topic_id")
        # confluent-kafka's AdminClient: 2 -> 4 (placed by the broker); kafka-python's: 4 -> 6
        admin.create_partitions([NewPartitions(topic, 4)], operation_timeout=10)[topic].result(30)
        kp_admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            kp_admin.create_partitions({topic: KpNewPartitions(6)})  # raises on an error code
        finally:
            kp_admin.close()

        # ZooKeeper: the assignment and the new partitions' state nodes; the topic keeps its id (KIP-516)
        try:
            node = json.loads(zk.get(paths.topic(topic))[0])
            assert topic_id is not None and node["topic_id"] == topic_id
            assignment = node["partitions"]
            assert sorted(assignment, key=int) == [str(p) for p in range(6)]
            for p in range(6):
                state = json.loads(zk.get(paths.partition_state(topic, p))[0])
                assert state["leader"] == assignment[str(p)][0]
        finally:
            zk.stop()
            zk.close()
        # every broker's metadata shows six partitions, the new leaders on both brokers, as at creation
        for b in (b0, b1):
            wait_for(
                lambda b=b: len(_metadata(b.port, topic)) == 6, 10, message=f"6 partitions on broker {b.broker_id}"
            )
        leaders = _metadata(b0.port, topic)
        assert set(leaders.values()) == {0, 1}
        assert all(leaders[p] != leaders[p + 1] for p in range(5)), leaders  # round robin, continuing the layout
        # each leader created the logs of the partitions it leads
        for b in (b0, b1):
            led = sorted(p for p, lead in leaders.items() if lead == b.broker_id)
            wait_for(
                lambda b=b, led=led: all(os.path.isdir(os.path.join(b.log_dir, "data", f"{topic}-{p}")) for p in led),
                10,
                message="logs of the new partitions",
            )

        # producers pick the new partitions up after their metadata refresh: keyed records spread
        # over all six (murmur2 on the key, like Kafka's default partitioner)
        n_each = 300
        time.sleep(0.6)  # let both producers' metadata age past 500 ms
        for i in range(n_each):
            ck_producer.produce(topic, key=b"ck-%d" % i, value=b"ck-%d" % i)
            ck_producer.poll(0)
        assert ck_producer.flush(30) == 0
        for i in range(n_each):
            py_producer.send(topic, value=b"py-%d" % i, key=b"py-%d" % i)
        py_producer.flush(30)
        ends = _end_offsets(bootstrap, topic, 6)
        assert sum(ends.values()) == 2 * n_each
        assert all(ends[p] > 0 for p in range(2, 6)), f"new partitions got no records: {ends}"

        # ZooKeeper group: rebalanced onto 6 partitions, 3 each
        wait_for(
            lambda: (
                all(m.is_stable() for m in zk_members)
                and sorted(p for m in zk_members for _, p in m.assignment()) == list(range(6))
                and all(len(m.assignment()) == 3 for m in zk_members)
            ),
            30,
            message="ZooKeeper group rebalanced onto 6 partitions",
        )
        # broker-side group: the confluent consumer is assigned all six and reads every record once
        deadline = time.monotonic() + 60
        while len(got) < 2 * n_each and time.monotonic() < deadline:
            got.extend(m.value() for m in ck_consumer.consume(500, 0.5) if not m.error())
        assert len(ck_consumer.assignment()) == 6
        assert sorted(got) == sorted([b"ck-%d" % i for i in range(n_each)] + [b"py-%d" % i for i in range(n_each)])
    finally:
        ck_consumer.close()
        py_producer.close(10)
        for m in zk_members:
            m.stop()

    # restart both brokers: six partitions, every record exactly once (nothing lost, nothing duplicated)
    for b in (b0, b1):
        b.stop()
    for b in (b0, b1):
        b.start()
    for b in (b0, b1):
        wait_for(
            lambda b=b: len(_metadata(b.port, topic)) == 6 and -1 not in _metadata(b.port, topic).values(),
            20,
            message="six led partitions after restart",
        )
    values = _read_all(bootstrap, topic, 6, 2 * n_each)
    assert len(values) == 2 * n_each and len(set(values)) == 2 * n_each


def test_create_partitions_errors_and_validate_only(broker_factory):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewPartitions
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewPartitions as KpNewPartitions
    from kafka.errors import InvalidPartitionsError

    b0 = broker_factory(0)
    b1 = broker_factory(1)
    topic = _topic()
    with Wire(b0.port) as w:
        w.request(
            ApiKey.CREATE_TOPICS,
            4,
            {
                "topics": [
                    {"name": topic, "num_partitions": 3, "replication_factor": 1, "assignments": [], "configs": []}
                ],
                "timeout_ms": 10000,
                "validate_only": False,
            },
        )

    def res(topics, **kw):
        return {r["name"]: (r["error_code"], r["error_message"]) for r in _create_partitions(b0.port, topics, **kw)}

    # only an increase: fewer or the same count is INVALID_PARTITIONS (37) naming both counts
    code, msg = res([{"name": topic, "count": 2, "assignments": None}])[topic]
    assert code == 37 and "3" in msg and "2" in msg
    code, msg = res([{"name": topic, "count": 3, "assignments": None}])[topic]
    assert code == 37 and "already has 3" in msg
    # unknown topic; a topic named twice (INVALID_REQUEST, 42)
    assert res([{"name": "no-such-topic", "count": 4, "assignments": None}])["no-such-topic"][0] == 3
    code, msg = res([{"name": "__consumer_offsets", "count": 99, "assignments": None}])["__consumer_offsets"]
    assert code == 42 and "internal" in msg
    dup = _create_partitions(b0.port, [{"name": topic, "count": 4, "assignments": None}] * 2)
    assert [r["error_code"] for r in dup] == [42, 42]
    # manual assignments: wrong number, wrong replication factor, unknown broker, duplicates (39)
    for bad in ([[0]], [[0, 1], [1, 0]], [[7], [0]], [[0, 0], [1, 1]]):
        code, msg = res([{"name": topic, "count": 5, "assignments": [{"broker_ids": b} for b in bad]}])[topic]
        assert code == 39, (bad, code, msg)
    # validate_only: answered as success, nothing changes
    assert res([{"name": topic, "count": 8, "assignments": None}], validate_only=True)[topic][0] == 0
    assert len(_metadata(b0.port, topic)) == 3
    # v0 and a manual assignment: partitions 3 and 4 both on broker 1, which creates their logs
    assert (
        res([{"name": topic, "count": 5, "assignments": [{"broker_ids": [1]}, {"broker_ids": [1]}]}], version=0)[topic][
            0
        ]
        == 0
    )
    leaders = wait_for(lambda: (lambda m: m if len(m) == 5 else None)(_metadata(b1.port, topic)), 10)
    assert leaders[3] == leaders[4] == 1
    wait_for(
        lambda: all(os.path.isdir(os.path.join(b1.log_dir, "data", f"{topic}-{p}")) for p in (3, 4)),
        10,
        message="broker 1 created the logs",
    )

    # stock clients see Kafka's errors
    admin = AdminClient({"bootstrap.servers": b0.bootstrap})
    with pytest.raises(KafkaException) as e:
        admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=10)[topic].result(30)
    assert "INVALID_PARTITIONS" in str(e.value).upper() or e.value.args[0].code() == 37
    fut = admin.create_partitions([NewPartitions(topic, 9)], validate_only=True, operation_timeout=10)[topic]
    assert fut.result(30) is None and len(_metadata(b0.port, topic)) == 5
    kp_admin = KafkaAdminClient(bootstrap_servers=b0.bootstrap)
    try:
        with pytest.raises(InvalidPartitionsError):
            kp_admin.create_partitions({topic: KpNewPartitions(1)})
    finally:
        kp_admin.close()


def test_describe_cluster(broker_factory):
    from confluent_kafka.admin import AdminClient
    from kafka.admin import KafkaAdminClient

    b0 = broker_factory(0)
    b1 = broker_factory(1)
    wait_for(
        lambda: len(AdminClient({"bootstrap.servers": b0.bootstrap}).list_topics(timeout=10).brokers) == 2,
        20,
        message="both brokers registered",
    )
    admin = AdminClient({"bootstrap.servers": b1.bootstrap})
    desc = admin.describe_cluster(include_authorized_operations=True, request_timeout=10).result(30)
    assert sorted((n.id, n.port) for n in desc.nodes) == [(0, b0.port), (1, b1.port)]
    assert desc.controller.id == 0 and desc.cluster_id
    # (librdkafka answers describe_cluster from a Metadata request; its authorized operations are Metadata's)
    kp = KafkaAdminClient(bootstrap_servers=b0.bootstrap)
    try:
        got = kp.describe_cluster()
        assert got["cluster_id"] == desc.cluster_id and got["controller_id"] == 0
        assert sorted(n["node_id"] if "node_id" in n else n["broker_id"] for n in got["brokers"]) == [0, 1]
    finally:
        kp.close()
    with Wire(b0.port) as w:
        r0 = w.request(ApiKey.DESCRIBE_CLUSTER, 0, {"include_cluster_authorized_operations": False})
        assert r0["error_code"] == 0 and r0["cluster_authorized_operations"] == -2147483648
        assert [x["broker_id"] for x in r0["brokers"]] == [0, 1] and r0["cluster_id"] == desc.cluster_id
        ops = w.request(
            ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": True, "endpoint_type": 1}
        )["cluster_authorized_operations"]
        assert ops == sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))  # every cluster operation: no ACLs
        r1 = w.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 2})
        assert r1["error_code"] == 114 and r1["brokers"] == []
        r1 = w.request(ApiKey.DESCRIBE_CLUSTER, 1, {"include_cluster_authorized_operations": False, "endpoint_type": 9})
        assert r1["error_code"] == 115
