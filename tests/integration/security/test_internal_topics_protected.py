"""Internal topics stay whatever a client asks: DeleteTopics, DeleteRecords and config changes that
would let retention delete ``__consumer_offsets`` / ``__transaction_state`` are refused, through
pyklog-topics, confluent-kafka and raw requests; a group's committed offsets are counted before and
after each attempt."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, create_topic

OFFSETS_PARTITIONS = 4  # offsets.topic.num.partitions of the test brokers (BrokerProcess)


def _commit(bootstrap: str, topic: str, group: str) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 7), TopicPartition(topic, 1, 11)], asynchronous=False)
    finally:
        c.close()


def _committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=30)
        return {tp.partition: tp.offset for tp in got if tp.offset >= 0}
    finally:
        c.close()


def _tool(module: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", f"pyklog.connector.cli.{module}", *args], capture_output=True, text=True, timeout=120
    )


def test_internal_topics_cannot_be_deleted_emptied_or_set_to_expire(broker, zk_chroot, tmp_path):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    topic, group = f"it-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:8]}"
    with Wire(broker.port) as w:
        create_topic(w, topic, partitions=2)
    _commit(broker.bootstrap, topic, group)
    assert _committed(broker.bootstrap, topic, group) == {0: 7, 1: 11}

    # the tool refuses, as Kafka's TopicCommand
    p = subprocess.run(
        [sys.executable, "-m", "pyklog.connector.cli.topics", "--bootstrap-server", broker.bootstrap]
        + ["--delete", "--topic", "__consumer_offsets"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode != 0, p.stdout
    assert "is a kafka internal topic and is not allowed to be marked for deletion" in p.stderr, p.stderr

    # pyklog-delete-records: the broker's refusal on each partition's line
    offsets = tmp_path / "offsets.json"
    offsets.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": "__consumer_offsets", "partition": p, "offset": -1} for p in range(OFFSETS_PARTITIONS)
                ],
            }
        )
    )
    p = _tool("delete_records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(offsets))
    assert p.stdout.count("\terror: ") == OFFSETS_PARTITIONS and "low_watermark" not in p.stdout, p.stdout

    # pyklog-configs, through the broker and straight in ZooKeeper
    for where in (("--bootstrap-server", broker.bootstrap), ("--zookeeper", zk_chroot)):
        p = _tool(
            "configs", *where, "--entity-type", "topics", "--entity-name", "__consumer_offsets",
            "--alter", "--add-config", "cleanup.policy=delete,retention.ms=1",
        )  # fmt: skip
        assert p.returncode == 1 and "cleanup.policy must stay compact" in p.stderr, (where, p.stderr)
    assert _committed(broker.bootstrap, topic, group) == {0: 7, 1: 11}

    # the broker refuses whoever asks
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for internal in ("__consumer_offsets", "__transaction_state"):
        with pytest.raises(KafkaException) as e:
            admin.delete_topics([internal], operation_timeout=30)[internal].result(30)
        assert e.value.args[0].code() == 17, e.value
    with Wire(broker.port) as w:
        r = w.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["__consumer_offsets"], "timeout_ms": 10000})
        res = r["responses"][0]
        assert res["error_code"] == 17 and "not allowed to be marked for deletion" in res["error_message"], res
        r = w.request(
            ApiKey.DELETE_RECORDS,
            2,
            {
                "topics": [
                    {
                        "name": "__consumer_offsets",
                        "partitions": [{"partition_index": p, "offset": -1} for p in range(OFFSETS_PARTITIONS)],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
        assert {p["error_code"] for p in r["topics"][0]["partitions"]} == {17}, r
        # AlterConfigs replacing the overrides with none would fall back to the broker's delete policy
        r = w.request(
            ApiKey.ALTER_CONFIGS,
            1,
            {
                "resources": [{"resource_type": 2, "resource_name": "__consumer_offsets", "configs": []}],
                "validate_only": False,
            },
        )
        assert r["responses"][0]["error_code"] == 40, r

    for entries in (
        {"cleanup.policy": "delete", "retention.ms": "1"},
        {"cleanup.policy": "compact,delete", "retention.ms": "1"},
    ):
        res = ConfigResource(
            ResourceType.TOPIC,
            "__consumer_offsets",
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()
            ],
        )
        with pytest.raises(KafkaException) as e:
            admin.incremental_alter_configs([res])[res].result(30)
        assert e.value.args[0].code() == 40 and "cleanup.policy must stay compact" in str(e.value), e.value
    res = ConfigResource(
        ResourceType.TOPIC,
        "__consumer_offsets",
        incremental_configs=[ConfigEntry("segment.bytes", "104857600", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([res])[res].result(30)  # what keeps the state live is allowed

    assert _committed(broker.bootstrap, topic, group) == {0: 7, 1: 11}
    # an ordinary topic is still deleted as before
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)


def test_open_plaintext_listener_without_authorizer_warns_at_start(broker_factory):
    from pyklog.broker.zk.server import free_port
    from tests.support import wait_for

    port = free_port()
    b = broker_factory(
        0,
        port=port,
        listeners=f"PLAINTEXT://0.0.0.0:{port}",
        **{"advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}"},
    )
    wait_for(lambda: "pyklog broker started" in b.output(), 30)
    line = [x for x in b.output().splitlines() if "is PLAINTEXT on every interface with no authorizer" in x]
    assert len(line) == 1 and "WARNING" in line[0], b.output()[-3000:]
    quiet = broker_factory(1)  # loopback: no warning
    wait_for(lambda: "pyklog broker started" in quiet.output(), 30)
    assert "with no authorizer" not in quiet.output()


def test_spark_sink_commit_records_cannot_be_deleted_emptied_or_repartitioned(broker):
    """The exactly-once Spark sinks' ``__pyklog_spark_sinks`` is protected as the internal topics are:
    a micro-batch's commit record written through the sink's store survives every attempt."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions
    from confluent_kafka.admin import ResourceType as CResourceType

    from pyklog.connector.spark.options import parse_sink_options
    from pyklog.connector.spark.sink_log import SINK_LOG_PARTITIONS, SINK_LOG_TOPIC, CommitRecord, open_sink_log

    query = str(uuid.uuid4())
    opts = parse_sink_options({"kafka.bootstrap.servers": broker.bootstrap, "topic": "t"})
    config = {"bootstrap.servers": broker.bootstrap}
    record = CommitRecord(query, 3, (("tid-a", 1000, 0),), "prepared", None)
    with open_sink_log(opts.cluster, config, f"pyklog-spark-{query}-sink-log") as tlog:
        assert tlog.decide(record)[2]

    p = _tool("topics", "--bootstrap-server", broker.bootstrap, "--delete", "--topic", SINK_LOG_TOPIC)
    assert p.returncode != 0 and "not allowed to be marked for deletion" in p.stderr, p.stderr
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    with pytest.raises(KafkaException) as e:
        admin.delete_topics([SINK_LOG_TOPIC], operation_timeout=30)[SINK_LOG_TOPIC].result(30)
    assert e.value.args[0].code() == 17, e.value
    with pytest.raises(KafkaException) as e:  # the sinks hash query ids over the partition count
        admin.create_partitions([NewPartitions(SINK_LOG_TOPIC, SINK_LOG_PARTITIONS + 4)])[SINK_LOG_TOPIC].result(30)
    assert e.value.args[0].code() == 42, e.value
    res = ConfigResource(
        CResourceType.TOPIC,
        SINK_LOG_TOPIC,
        incremental_configs=[ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(30)
    assert e.value.args[0].code() == 40 and "commit records" in str(e.value), e.value
    with Wire(broker.port) as w:
        r = w.request(
            ApiKey.DELETE_RECORDS,
            2,
            {
                "topics": [
                    {
                        "name": SINK_LOG_TOPIC,
                        "partitions": [{"partition_index": p, "offset": -1} for p in range(SINK_LOG_PARTITIONS)],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
        assert {p["error_code"] for p in r["topics"][0]["partitions"]} == {17}, r

    with open_sink_log(opts.cluster, config, f"pyklog-spark-{query}-sink-log") as tlog:
        assert tlog.read(query, 3)[0] == record
