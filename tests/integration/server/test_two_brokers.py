"""Two real broker processes (``python -m pyklog.broker``) forming one cluster in a shared ZooKeeper chroot."""

from __future__ import annotations

import json
import os
import signal
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from pyklog.broker.zk import paths
from tests.support import wait_for


class Wire(support.Wire):
    """A raw Kafka-protocol connection to one broker, with the two requests these tests repeat."""

    def metadata(self, topics=None) -> dict:
        body = {"topics": None if topics is None else [{"name": t} for t in topics], "allow_auto_topic_creation": False}
        return self.request(ApiKey.METADATA, 5, body)

    def produce(self, topic, partition, value=b"v") -> dict:
        resp = self.request(
            ApiKey.PRODUCE,
            3,
            {
                "transactional_id": None,
                "acks": 1,
                "timeout_ms": 10000,
                "topic_data": [
                    {
                        "name": topic,
                        "partition_data": [{"index": partition, "records": build_batch([(None, value, None, ())])}],
                    }
                ],
            },
        )
        return resp["responses"][0]["partition_responses"][0]


def leaders_of(md, topic) -> dict[int, int]:
    t = next(t for t in md["topics"] if t["name"] == topic)
    return {p["partition_index"]: p["leader_id"] for p in t["partitions"]}


def test_partitions_spread_metadata_and_produce_routing(broker_factory, zk):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b0, b1 = broker_factory(0), broker_factory(1)
    wires = {0: Wire(b0.port), 1: Wire(b1.port)}
    try:
        wait_for(
            lambda: all(len(w.metadata([])["brokers"]) == 2 for w in wires.values()),
            message="both brokers see each other",
        )
        topic = f"spread-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": b1.bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[topic].result(30)
        # ZooKeeper holds Kafka's layout, partitions spread over both brokers
        assignment = json.loads(zk.get(paths.topic(topic))[0])["partitions"]
        assert sorted(r[0] for r in assignment.values()) == [0, 0, 1, 1]
        expected = {int(p): r[0] for p, r in assignment.items()}
        # Metadata agrees from either broker (brokers, leaders, cluster id, controller)
        mds = {
            i: wait_for(
                lambda w=w: (m := w.metadata([topic])) and leaders_of(m, topic) == expected and m,
                message="leaders in metadata",
            )
            for i, w in wires.items()
        }
        cluster_id = json.loads(zk.get(paths.CLUSTER_ID)[0])["id"]
        for md in mds.values():
            assert sorted((b["node_id"], b["port"]) for b in md["brokers"]) == [(0, b0.port), (1, b1.port)]
            assert md["cluster_id"] == cluster_id and md["controller_id"] == 0
        # a stock client sees the same
        cm = AdminClient({"bootstrap.servers": b0.bootstrap}).list_topics(topic, timeout=30)
        assert {p: m.leader for p, m in cm.topics[topic].partitions.items()} == expected
        assert {b.id: b.port for b in cm.brokers.values()} == {0: b0.port, 1: b1.port}
        # produce to the leader works, to the other broker gives NOT_LEADER_OR_FOLLOWER (6)
        for p, leader in expected.items():
            ok = wires[leader].produce(topic, p)
            assert ok["error_code"] == 0 and ok["base_offset"] == 0
            assert wires[1 - leader].produce(topic, p)["error_code"] == 6
        # librdkafka routes every partition to its leader
        errors = []
        producer = Producer({"bootstrap.servers": b0.bootstrap, "linger.ms": 5})
        for p in range(4):
            producer.produce(topic, value=b"x", partition=p, on_delivery=lambda err, msg: err and errors.append(err))
        assert producer.flush(30) == 0 and errors == []
        # the offsets topic spreads too; FindCoordinator answers the same from both brokers, and
        # only the coordinator accepts the group's commits (NOT_COORDINATOR elsewhere)
        found = {i: w.request(ApiKey.FIND_COORDINATOR, 1, {"key": "grp", "key_type": 0}) for i, w in wires.items()}
        assert found[0]["error_code"] == 0 and found[0]["node_id"] == found[1]["node_id"]
        coord = found[0]["node_id"]
        assert found[0]["port"] == (b0.port if coord == 0 else b1.port)
        leaders = json.loads(zk.get(paths.topic("__consumer_offsets"))[0])["partitions"]
        assert {r[0] for r in leaders.values()} == {0, 1}

        def commit(w):
            return w.request(
                ApiKey.OFFSET_COMMIT,
                2,
                {
                    "group_id": "grp",
                    "generation_id": -1,
                    "member_id": "",
                    "retention_time_ms": -1,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
                },
            )

        def commit_code(w):
            return commit(w)["topics"][0]["partitions"][0]["error_code"]

        assert wait_for(lambda: commit_code(wires[coord]) == 0, message="commit at the coordinator")
        assert commit_code(wires[1 - coord]) == 16
        # stock clients find the coordinator and read/alter the group's offsets there
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions("grp", [TopicPartition(topic, 1, 42)])])[
            "grp"
        ].result(30)
        listed = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions("grp", [TopicPartition(topic, 0), TopicPartition(topic, 1)])]
        )["grp"].result(30)
        assert {tp.partition: tp.offset for tp in listed.topic_partitions} == {0: 1, 1: 42}
    finally:
        for w in wires.values():
            w.close()


def test_duplicate_broker_id_exits_with_clear_message(broker_factory, zk):
    first = broker_factory(0)
    dup = broker_factory(0, start=False).start(expect_ready=False)
    rc = dup.wait_exit(60)
    assert rc != 0
    assert "broker.id 0 is already registered" in dup.output()
    # the first broker keeps its registration
    info = json.loads(zk.get(paths.broker_id(0))[0])
    assert info["port"] == first.port and info["endpoints"] == [f"PLAINTEXT://127.0.0.1:{first.port}"]


def test_broker_registers_again_after_session_expiry(broker_factory, zk):
    b0, b1 = broker_factory(0), broker_factory(1)
    w1 = Wire(b1.port)
    try:
        topic = f"exp-{uuid.uuid4().hex[:6]}"
        created = w1.request(
            ApiKey.CREATE_TOPICS,
            2,
            {
                "topics": [{"name": topic, "num_partitions": 2, "replication_factor": 1}],
                "timeout_ms": 30000,
                "validate_only": False,
            },
        )
        assert created["topics"][0]["error_code"] == 0
        wait_for(lambda: sorted(leaders_of(w1.metadata([topic]), topic).values()) == [0, 1])
        old_owner = zk.get(paths.broker_id(0))[1].ephemeralOwner
        # Freeze broker 0 past its session timeout: ZooKeeper expires the session for real.
        os.kill(b0.proc.pid, signal.SIGSTOP)
        try:
            wait_for(lambda: zk.exists(paths.broker_id(0)) is None, timeout=40, message="session expiry")
            # meanwhile broker 1 reports broker 0's partition without a leader
            md = wait_for(lambda: (m := w1.metadata([topic])) and len(m["brokers"]) == 1 and m)
            assert sorted(leaders_of(md, topic).values()) == [-1, 1]
        finally:
            os.kill(b0.proc.pid, signal.SIGCONT)
        stat = wait_for(lambda: zk.exists(paths.broker_id(0)), timeout=40, message="re-registration")
        assert stat.ephemeralOwner != old_owner
        assert json.loads(zk.get(paths.broker_id(0))[0])["port"] == b0.port
        wait_for(
            lambda: sorted(leaders_of(w1.metadata([topic]), topic).values()) == [0, 1],
            message="broker 1 sees broker 0 again",
        )
        # broker 0 serves again, with working watches: a topic created after the expiry reaches it
        w0 = Wire(b0.port)
        try:
            w1.request(
                ApiKey.CREATE_TOPICS,
                2,
                {
                    "topics": [{"name": topic + "-late", "num_partitions": 1, "replication_factor": 1}],
                    "timeout_ms": 30000,
                    "validate_only": False,
                },
            )
            wait_for(
                lambda: (
                    (m := w0.metadata([topic + "-late"]))["topics"][0]["error_code"] == 0 and len(m["brokers"]) == 2
                ),
                message="new topic in broker 0's metadata",
            )
            p0 = next(p for p, leader in leaders_of(w0.metadata([topic]), topic).items() if leader == 0)
            assert w0.produce(topic, p0)["error_code"] == 0
        finally:
            w0.close()
        assert "registered broker 0" in b0.output()
    finally:
        w1.close()
