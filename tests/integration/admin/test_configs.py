"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs on a real broker with stock clients.

DescribeConfigs reports each topic config's value, source and synonyms as Kafka does
(DYNAMIC_TOPIC_CONFIG <- STATIC_BROKER_CONFIG <- DEFAULT_CONFIG), and the broker's settings; the
flow of confluent-kafka-based stream libraries (create topics, then DescribeConfigs at once) works.
Config changes reach ZooKeeper (``/config/topics/<t>`` plus a ``/config/changes`` notification)
and the live log: max.message.bytes refuses what it used to accept, segment.bytes rolls segments,
retention.ms deletes them (the log start offset moves), cleanup.policy=compact refuses null keys;
they survive a restart.  Bad names and values are refused naming the key; validate_only writes nothing.
"""

from __future__ import annotations

import json
import os
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.support import Wire, create_topic, kazoo_client, log_start_and_end_offsets, wait_for


def _topic() -> str:
    return f"cfg-{uuid.uuid4().hex[:8]}"


def _describe(admin, rtype, name, **kw) -> dict:
    from confluent_kafka.admin import ConfigResource

    res = ConfigResource(rtype, name)
    return admin.describe_configs([res], **kw)[res].result(30)


def test_describe_configs_right_after_create_topics_sources_and_synonyms(broker_factory):
    from confluent_kafka.admin import AdminClient, ConfigSource, NewTopic, ResourceType
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    b = broker_factory(0, log_retention_hours=1)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    names = [_topic(), _topic()]
    # a stream library's start-up: create its topics, then describe them at once
    fs = admin.create_topics(
        [NewTopic(n, num_partitions=2, replication_factor=1, config={"retention.bytes": "1000000"}) for n in names],
        operation_timeout=10,
    )
    for f in fs.values():
        f.result(30)
    for n in names:
        cfg = _describe(admin, ResourceType.TOPIC, n)
        assert cfg["retention.bytes"].value == "1000000"
        assert cfg["retention.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        assert not cfg["retention.bytes"].is_read_only and not cfg["retention.bytes"].is_default
        # retention.ms <- log.retention.ms <- log.retention.minutes <- log.retention.hours (set to 1)
        rm = cfg["retention.ms"]
        assert rm.value == "3600000" and rm.source == ConfigSource.STATIC_BROKER_CONFIG.value
        # librdkafka keeps one synonym per name (the last: Kafka's default); the raw answer below has both
        assert list(rm.synonyms) == ["log.retention.hours"]
        assert cfg["segment.bytes"].value == "1073741824" and cfg["segment.bytes"].is_default
        assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        assert cfg["cleanup.policy"].value == "delete" and cfg["max.message.bytes"].value == "1048588"
        assert cfg["min.insync.replicas"].value == "1"
    # the raw answer with every synonym (v3: types too)
    with Wire(b.port) as w:
        r = w.request(
            ApiKey.DESCRIBE_CONFIGS,
            3,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": names[0],
                        "configuration_keys": ["retention.ms", "compression.type"],
                    },
                    {"resource_type": 2, "resource_name": "no-such-topic", "configuration_keys": None},
                    {"resource_type": 4, "resource_name": "7", "configuration_keys": None},
                    {"resource_type": 9, "resource_name": "x", "configuration_keys": None},
                ],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )
        res = r["results"]
        by_name = {c["name"]: c for c in res[0]["configs"]}
        assert sorted(by_name) == ["compression.type", "retention.ms"]
        assert [(s["name"], s["value"], s["source"]) for s in by_name["retention.ms"]["synonyms"]] == [
            ("log.retention.hours", "1", 4),
            ("log.retention.hours", "168", 5),
        ]
        assert by_name["retention.ms"]["config_type"] == 5  # LONG
        assert by_name["compression.type"]["value"] == "producer" and by_name["compression.type"]["config_source"] == 5
        assert res[1]["error_code"] == 3 and "no-such-topic" in res[1]["error_message"]
        assert res[2]["error_code"] == 42 and "expected 0" in res[2]["error_message"]
        assert res[3]["error_code"] == 42
        # v0: is_default instead of a source
        r0 = w.request(
            ApiKey.DESCRIBE_CONFIGS,
            0,
            {
                "resources": [
                    {
                        "resource_type": 2,
                        "resource_name": names[0],
                        "configuration_keys": ["segment.bytes", "retention.bytes"],
                    }
                ]
            },
        )
        assert {c["name"]: c["is_default"] for c in r0["results"][0]["configs"]} == {
            "segment.bytes": True,
            "retention.bytes": False,
        }

    # the broker's settings: static ones from server.properties, the others defaults; only the
    # dynamic broker configs (KIP-226) are not read-only
    bc = _describe(admin, ResourceType.BROKER, "0")
    assert bc["log.retention.hours"].value == "1"
    assert bc["log.retention.hours"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert not bc["log.retention.hours"].is_read_only
    assert bc["num.partitions"].is_read_only
    assert bc["num.partitions"].value == "1" and bc["auto.create.topics.enable"].value == "true"
    assert bc["message.max.bytes"].value == "1048588" and bc["message.max.bytes"].is_default
    assert bc["default.replication.factor"].source == ConfigSource.DEFAULT_CONFIG.value

    # kafka-python's KafkaAdminClient reads the same
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got = kp.describe_configs(
            [KpResource(ConfigResourceType.TOPIC, names[1])], include_synonyms=True, config_filter="all"
        )["topic"][names[1]]
        assert got["retention.bytes"]["value"] == "1000000"
        assert got["retention.bytes"]["config_source"] == "DYNAMIC_TOPIC_CONFIG"
        assert got["retention.ms"]["value"] == "3600000"
        assert got["retention.ms"]["config_source"] == "STATIC_BROKER_CONFIG"
        assert [s["name"] for s in got["retention.ms"]["synonyms"]] == ["log.retention.hours"] * 2
        # its default filter ("modified") keeps only the topic's own overrides
        modified = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, names[1])])["topic"][names[1]]
        assert set(modified) == {"retention.bytes"}
        got = kp.describe_configs([KpResource(ConfigResourceType.BROKER, "0")], config_filter="all")["broker"]["0"]
        assert got["log.retention.hours"]["value"] == "1" and not got["log.retention.hours"]["read_only"]
        assert got["num.partitions"]["read_only"]
    finally:
        kp.close()


def test_config_changes_take_effect_on_the_live_log_and_survive_restart(broker_factory, zk_chroot):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka import Producer as CkProducer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ConfigSource,
        NewTopic,
        ResourceType,
    )
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    b = broker_factory(0, log_retention_check_interval_ms=200, log_segment_delete_delay_ms=0)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    topic = _topic()
    admin.create_topics([NewTopic(topic, 1, 1)], operation_timeout=10)[topic].result(30)
    producer = CkProducer(
        {"bootstrap.servers": b.bootstrap, "linger.ms": 0, "enable.idempotence": False, "message.max.bytes": 100000}
    )
    delivered, failed = [], []

    def send(value: bytes, key=b"k"):
        producer.produce(
            topic,
            key=key,
            value=value,
            partition=0,
            on_delivery=lambda err, m: (failed if err else delivered).append(err or m.offset()),
        )
        producer.flush(30)

    def incremental(*entries, validate_only=False):
        res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=list(entries))
        return admin.incremental_alter_configs([res], validate_only=validate_only)[res].result(30)

    # max.message.bytes: 3000-byte records pass, then 1000 refuses them (MESSAGE_TOO_LARGE), 500 still pass
    send(b"x" * 3000)
    assert len(delivered) == 1 and not failed
    incremental(ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET))
    send(b"x" * 3000)
    assert len(failed) == 1 and failed[0].code() == KafkaError.MSG_SIZE_TOO_LARGE, failed
    send(b"y" * 200)
    assert len(delivered) == 2
    assert log_start_and_end_offsets(b.port, topic) == (0, 2)  # the refused record was not written
    # ZooKeeper: the override and a change notification, as Kafka's kafka-configs writes them
    zk = kazoo_client(zk_chroot)
    try:
        assert json.loads(zk.get(paths.topic_config(topic))[0])["config"] == {"max.message.bytes": "1000"}
        changes = [json.loads(zk.get(f"{paths.CONFIG_CHANGES}/{c}")[0]) for c in zk.get_children(paths.CONFIG_CHANGES)]
        assert {"version": 2, "entity_path": f"topics/{topic}"} in changes
    finally:
        zk.stop()
        zk.close()

    # bad names and values: INVALID_CONFIG naming the key; nothing changes
    for entry in (
        ConfigEntry("retention.ms", "-5", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("no.such.config", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("retention.ms", "soon", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("segment.bytes", "compact", incremental_operation=AlterConfigOpType.APPEND),
    ):
        with pytest.raises(KafkaException) as e:
            incremental(entry)
        assert e.value.args[0].code() == 40 and entry.name in str(e.value), str(e.value)
    # validate_only: accepted, nothing written
    incremental(ConfigEntry("retention.ms", "1000", incremental_operation=AlterConfigOpType.SET), validate_only=True)
    assert "retention.ms" not in {
        k
        for k, v in _describe(admin, ResourceType.TOPIC, topic).items()
        if v.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    }

    # segment.bytes: small segments roll on the live log
    incremental(
        ConfigEntry("segment.bytes", "1024", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", None, incremental_operation=AlterConfigOpType.DELETE),
    )
    for i in range(20):
        send(b"z%d" % i * 100)
    assert not failed[1:] and log_start_and_end_offsets(b.port, topic) == (0, 22)
    logdir = os.path.join(b.log_dir, "data", f"{topic}-0")
    segments = lambda: sorted(f for f in os.listdir(logdir) if f.endswith(".log"))  # noqa: E731
    assert len(segments()) >= 5, segments()

    # retention.ms: old segments are deleted on the live log, the log start offset moves
    incremental(ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET))
    wait_for(lambda: log_start_and_end_offsets(b.port, topic)[0] > 0, 20, message="retention deleted old segments")
    _start, end = log_start_and_end_offsets(b.port, topic)
    assert end == 22 and len(segments()) < 5

    # cleanup.policy: APPEND compact (kafka-python's incremental alter), null keys are refused
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        kp.alter_configs(
            [
                KpResource(
                    ConfigResourceType.TOPIC,
                    topic,
                    configs={"cleanup.policy": "compact"},
                )
            ],
            incremental=False,
        )
        # kafka-python adds the current overrides itself (AlterConfigs replaces the whole set)
        cfg = _describe(admin, ResourceType.TOPIC, topic)
        assert cfg["cleanup.policy"].value == "compact" and cfg["retention.ms"].value == "1"
        # AlterConfigs v1 as sent: the overrides not named are dropped (retention.ms, segment.bytes)
        with Wire(b.port) as w:
            r = w.request(
                ApiKey.ALTER_CONFIGS,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [{"name": "cleanup.policy", "value": "compact"}],
                        }
                    ],
                    "validate_only": False,
                },
            )
        assert r["responses"][0]["error_code"] == 0
        cfg = _describe(admin, ResourceType.TOPIC, topic)
        assert cfg["cleanup.policy"].value == "compact" and cfg["retention.ms"].value == "604800000"
        assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
        got = kp.alter_configs(
            [KpResource(ConfigResourceType.TOPIC, topic, configs={"min.insync.replicas": "0"})], incremental=False
        )["topic"][topic]
        assert "InvalidConfigurationError" in got and "min.insync.replicas" in got, got
    finally:
        kp.close()
    send(b"no key", key=None)
    assert len(failed) == 2  # INVALID_RECORD: compacted topics need keys
    incremental(
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.APPEND),
        ConfigEntry("min.insync.replicas", "1", incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("max.message.bytes", "1000", incremental_operation=AlterConfigOpType.SET),
    )
    assert _describe(admin, ResourceType.TOPIC, topic)["cleanup.policy"].value == "compact,delete"
    # a read-only broker setting cannot be altered (dynamic broker configs: tests/integration/server/test_dynamic_config.py)
    res = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[ConfigEntry("num.partitions", "2", incremental_operation=AlterConfigOpType.SET)],
    )
    with pytest.raises(KafkaException) as e:
        admin.incremental_alter_configs([res])[res].result(30)
    assert e.value.args[0].code() == 42

    # restart: the overrides are read back from ZooKeeper and govern the log again
    producer.flush(10)
    b.stop()
    b.start()
    cfg = _describe(admin, ResourceType.TOPIC, topic)
    assert cfg["max.message.bytes"].value == "1000"
    assert cfg["max.message.bytes"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    n_failed = len(failed)
    send(b"x" * 3000)
    assert len(failed) == n_failed + 1
    send(b"small")
    assert log_start_and_end_offsets(b.port, topic)[1] == 23


def test_config_change_reaches_the_logs_of_every_broker(broker_factory):
    """IncrementalAlterConfigs sent to broker 0 governs the partition broker 1 leads (the change
    notification in /config/changes), and validate_only on AlterConfigs writes nothing."""
    from tests.support import produce, records

    b0 = broker_factory(0)
    b1 = broker_factory(1)
    topic = _topic()
    with Wire(b0.port) as w:
        created = create_topic(
            w, topic, partitions=-1, replication_factor=-1, assignments=[{"partition_index": 0, "broker_ids": [1]}]
        )
        assert created["error_code"] == 0
    big = records(1, prefix=b"x" * 3000)
    with Wire(b1.port) as w1:
        wait_for(lambda: produce(w1, topic, big)["error_code"] == 0, 10, message="broker 1 leads partition 0")
        with Wire(b0.port) as w0:
            r = w0.request(
                ApiKey.ALTER_CONFIGS,
                0,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [{"name": "max.message.bytes", "value": "1000"}],
                        }
                    ],
                    "validate_only": True,
                },
            )
            assert r["responses"][0]["error_code"] == 0
            assert produce(w1, topic, big)["error_code"] == 0  # validate_only changed nothing
            r = w0.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                0,
                {
                    "resources": [
                        {
                            "resource_type": 2,
                            "resource_name": topic,
                            "configs": [{"name": "max.message.bytes", "config_operation": 0, "value": "1000"}],
                        }
                    ],
                    "validate_only": False,
                },
            )
            assert r["responses"][0]["error_code"] == 0
            # broker 1 applies it to its live log: MESSAGE_TOO_LARGE (10), nothing appended
            codes: list[int] = []  # until broker 1 has applied the change a big record may still pass
            wait_for(
                lambda: codes.append(produce(w1, topic, big)["error_code"]) or codes[-1] == 10,
                10,
                message="limit on broker 1",
            )
            assert set(codes) <= {0, 10}
            assert produce(w1, topic, records(1, prefix=b"y" * 100))["error_code"] == 0
            r = w0.request(
                ApiKey.LIST_OFFSETS,
                1,
                {
                    "replica_id": -1,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
                },
            )
            assert r["topics"][0]["partitions"][0]["error_code"] == 6  # broker 0 does not lead it
        r = w1.request(
            ApiKey.LIST_OFFSETS,
            1,
            {"replica_id": -1, "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        )
        # two big records before the change, those accepted while it propagated, one small after
        assert r["topics"][0]["partitions"][0]["offset"] == 3 + codes.count(0)
