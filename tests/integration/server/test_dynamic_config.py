"""Dynamic broker configs (KIP-226, Kafka's ZooKeeper mode) on real brokers with stock clients.

A cluster-wide default ``log.retention.ms`` set with confluent-kafka reaches a live broker that did not
handle the request: a topic without override loses its old segments at once (counted: only whole
old segments go, nothing of a topic with its own retention.ms), a topic with an override keeps all.
The stored form is Kafka's (``/config/brokers/<default>`` plus a ``brokers/<default>`` change
notification).  DescribeConfigs reports DYNAMIC_DEFAULT_BROKER_CONFIG / DYNAMIC_BROKER_CONFIG in
Kafka's order.  A per-broker value set with kafka-python wins over the default.  The settings survive
a SIGKILL and restart (set while the broker is down, applied at start-up).  Bad names and values are
refused with Kafka's errors and nothing is stored.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.support import Wire, create_topic, kazoo_client, log_start_and_end_offsets, wait_for

HOUR_MS = 3_600_000


def _topic() -> str:
    return f"dyn-{uuid.uuid4().hex[:8]}"


def _produce_old(bootstrap: str, topic: str, n: int, age_ms: int = 2 * HOUR_MS) -> int:
    """Produce ``n`` records of 100 bytes stamped ``age_ms`` in the past; returns how many were acked."""
    from confluent_kafka import Producer

    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1})
    ts = int(time.time() * 1000) - age_ms
    for i in range(n):
        p.produce(
            topic,
            value=b"%05d" % i + b"x" * 95,
            timestamp=ts,
            on_delivery=lambda err, msg: err is None and acked.append(msg.offset()),
        )
        p.poll(0)
    assert p.flush(30) == 0
    return len(acked)


def _raw_describe(port: int, rtype: int, name: str, keys=None) -> dict:
    with Wire(port) as w:
        r = w.request(
            ApiKey.DESCRIBE_CONFIGS,
            3,
            {
                "resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": keys}],
                "include_synonyms": True,
                "include_documentation": False,
            },
        )
    res = r["results"][0]
    assert res["error_code"] == 0, res
    return {c["name"]: c for c in res["configs"]}


def _changes(zk) -> list[str]:
    out = []
    for c in sorted(zk.get_children(paths.CONFIG_CHANGES)):
        out.append(json.loads(zk.get(f"{paths.CONFIG_CHANGES}/{c}")[0])["entity_path"])
    return out


def test_default_retention_reaches_a_live_broker_and_survives_sigkill(broker_factory, zk_chroot):
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    static = {"log_retention_check_interval_ms": 200, "log_segment_bytes": 1200, "log_segment_delete_delay_ms": 0}
    b0 = broker_factory(0, **static)
    b1 = broker_factory(1, **static)
    admin = AdminClient({"bootstrap.servers": b0.bootstrap})
    plain, kept = _topic(), _topic()
    with Wire(b0.port) as w:  # both led by broker 1, which never sees the AlterConfigs requests
        for name, configs in ((plain, []), (kept, [{"name": "retention.ms", "value": str(7 * 24 * HOUR_MS)}])):
            r = create_topic(
                w,
                name,
                -1,
                replication_factor=-1,
                configs=configs,
                assignments=[{"partition_index": 0, "broker_ids": [1]}],
            )
            assert r["error_code"] == 0, r
    n = 40
    assert _produce_old(b1.bootstrap, plain, n) == n
    assert _produce_old(b1.bootstrap, kept, n) == n
    assert log_start_and_end_offsets(b1.port, plain) == (0, n) and log_start_and_end_offsets(b1.port, kept) == (0, n)

    zk = kazoo_client(zk_chroot)
    try:
        # the cluster-wide default (resource name "", what kafka-configs --entity-default sends; the stock
        # Python clients cannot name it) through broker 0: broker 1 learns it from ZooKeeper
        with Wire(b0.port) as w:
            r = w.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                0,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": "",
                            "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": str(HOUR_MS)}],
                        }
                    ],
                    "validate_only": False,
                },
            )
        assert r["responses"][0]["error_code"] == 0, r
        stored = json.loads(zk.get(paths.broker_config(""))[0])
        assert stored == {"version": 1, "config": {"log.retention.ms": str(HOUR_MS)}}
        assert "brokers/<default>" in _changes(zk)

        # broker 1 applies it live: the old closed segments of the topic without override go
        wait_for(
            lambda: log_start_and_end_offsets(b1.port, plain)[0] > 0,
            30,
            message="old segments deleted by the dynamic default",
        )
        start, end = log_start_and_end_offsets(b1.port, plain)
        assert end == n and 0 < start < n  # the active segment stays; nothing but whole old segments
        assert log_start_and_end_offsets(b1.port, kept) == (0, n)  # its own retention.ms wins: nothing lost

        cfg = _raw_describe(b1.port, 2, plain, ["retention.ms"])["retention.ms"]
        assert (cfg["value"], cfg["config_source"]) == (str(HOUR_MS), 3)
        assert [(s["name"], s["value"], s["source"]) for s in cfg["synonyms"]] == [
            ("log.retention.ms", str(HOUR_MS), 3),
            ("log.retention.hours", "168", 5),
        ]
        bc = _raw_describe(b1.port, 4, "1", ["log.retention.ms", "num.partitions"])
        assert (bc["log.retention.ms"]["value"], bc["log.retention.ms"]["config_source"]) == (str(HOUR_MS), 3)
        assert not bc["log.retention.ms"]["read_only"] and bc["num.partitions"]["read_only"]
        dflt = _raw_describe(b0.port, 4, "")
        assert {k: (v["value"], v["config_source"]) for k, v in dflt.items()} == {"log.retention.ms": (str(HOUR_MS), 3)}

        # kafka-python then confluent-kafka: a per-broker value on broker 1 wins over the default
        kp = KafkaAdminClient(bootstrap_servers=b0.bootstrap)
        try:
            r = kp.alter_configs([KpResource(ConfigResourceType.BROKER, "1", {"log.retention.ms": str(2 * HOUR_MS)})])
            assert r == {"broker": {"1": "OK"}}, r
        finally:
            kp.close()
        assert json.loads(zk.get(paths.broker_config(1))[0])["config"] == {"log.retention.ms": str(2 * HOUR_MS)}
        res = ConfigResource(
            ResourceType.BROKER,
            "1",
            incremental_configs=[
                ConfigEntry("log.retention.ms", str(3 * HOUR_MS), incremental_operation=AlterConfigOpType.SET),
                ConfigEntry("log.cleaner.delete.retention.ms", "1234", incremental_operation=AlterConfigOpType.SET),
            ],
        )
        admin.incremental_alter_configs([res])[res].result(30)
        assert json.loads(zk.get(paths.broker_config(1))[0])["config"] == {
            "log.retention.ms": str(3 * HOUR_MS),
            "log.cleaner.delete.retention.ms": "1234",
        }
        cfg = _raw_describe(b1.port, 2, plain, ["retention.ms"])["retention.ms"]
        assert [(s["value"], s["source"]) for s in cfg["synonyms"]][:2] == [(str(3 * HOUR_MS), 2), (str(HOUR_MS), 3)]
        assert cfg["value"] == str(3 * HOUR_MS)

        # SIGKILL broker 1; its per-broker log.retention.ms is removed by hand while it is down (no
        # notification): at restart the default (1 hour) applies, read from ZooKeeper before the logs
        # open, and its other per-broker value is still there
        b1.kill()
        zk.set(
            paths.broker_config(1),
            json.dumps({"version": 1, "config": {"log.cleaner.delete.retention.ms": "1234"}}).encode(),
        )
        b1.start()
        before = log_start_and_end_offsets(b1.port, plain)
        # 2-hour-old records: kept under the 3 h per-broker value, deleted under the 1 h default
        assert _produce_old(b1.bootstrap, plain, n) == n
        assert _produce_old(b1.bootstrap, kept, n) == n
        wait_for(
            lambda: log_start_and_end_offsets(b1.port, plain)[0] > before[1], 30, message="retention after restart"
        )
        assert log_start_and_end_offsets(b1.port, plain)[1] == 2 * n
        assert log_start_and_end_offsets(b1.port, kept) == (0, 2 * n)  # acknowledged 80, all 80 still there
        cfg = _raw_describe(b1.port, 2, plain, ["retention.ms", "delete.retention.ms"])
        assert (cfg["retention.ms"]["value"], cfg["retention.ms"]["config_source"]) == (str(HOUR_MS), 3)
        # the per-broker value kept across the SIGKILL
        assert (cfg["delete.retention.ms"]["value"], cfg["delete.retention.ms"]["config_source"]) == ("1234", 2)
    finally:
        zk.stop()
        zk.close()


def test_bad_dynamic_configs_are_refused_and_nothing_is_stored(broker_factory, zk_chroot):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    b = broker_factory(0)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    zk = kazoo_client(zk_chroot)
    try:
        changes_before = _changes(zk)

        def refused(name, entries, code):
            res = ConfigResource(
                ResourceType.BROKER,
                name,
                incremental_configs=[
                    ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries.items()
                ],
            )
            with pytest.raises(KafkaException) as e:
                admin.incremental_alter_configs([res])[res].result(30)
            assert e.value.args[0].code() == code, e.value
            return str(e.value)

        msg = refused("0", {"broker.id": "3"}, 42)
        assert "Cannot update these configs dynamically: Set(broker.id)" in msg, msg
        msg = refused("0", {"log.retention.ms": "abc"}, 42)
        assert "Invalid config value for resource ConfigResource(type=BROKER, name='0')" in msg and "abc" in msg, msg
        with Wire(b.port) as w:  # the cluster default, as kafka-configs --entity-default sends it
            r = w.request(
                ApiKey.INCREMENTAL_ALTER_CONFIGS,
                0,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": "",
                            "configs": [
                                {"name": "log.segment.bytes", "config_operation": 0, "value": "-5"},
                                {"name": "log.retention.ms", "config_operation": 0, "value": "1"},
                            ],
                        }
                    ],
                    "validate_only": False,
                },
            )
        res = r["responses"][0]
        assert res["error_code"] == 42 and "ConfigResource(type=BROKER, name='')" in res["error_message"], res
        msg = refused("0", {"no.such.setting": "1"}, 40)
        assert "no.such.setting" in msg
        refused("0", {"log.cleanup.policy": "shred"}, 42)
        refused("0", {"log.retention.ms": "3600000", "zookeeper.connect": "x:1"}, 42)  # all or nothing
        # AlterConfigs (non incremental) through the raw protocol, with validate_only
        with Wire(b.port) as w:
            r = w.request(
                ApiKey.ALTER_CONFIGS,
                1,
                {
                    "resources": [
                        {
                            "resource_type": 4,
                            "resource_name": "0",
                            "configs": [{"name": "log.retention.ms", "value": "7"}],
                        },
                        {
                            "resource_type": 4,
                            "resource_name": "5",
                            "configs": [{"name": "log.retention.ms", "value": "7"}],
                        },
                    ],
                    "validate_only": True,
                },
            )
        assert [x["error_code"] for x in r["responses"]] == [0, 42]
        assert zk.exists(paths.broker_config(0)) is None and zk.exists(paths.broker_config("")) is None
        assert _changes(zk) == changes_before
        assert _raw_describe(b.port, 4, "") == {}
        assert _raw_describe(b.port, 4, "0", ["log.retention.ms"])["log.retention.ms"]["value"] is None
    finally:
        zk.stop()
        zk.close()


def test_configs_cli_alters_and_describes_broker_configs(broker_factory):
    b = broker_factory(0)

    def cli(*args, check=True):
        p = subprocess.run(
            [sys.executable, "-m", "pyklog.connector.cli.configs", "--bootstrap-server", b.bootstrap, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check:
            assert p.returncode == 0, p.stderr
        return p

    p = cli(
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.ms=7200000,log.segment.bytes=2000000",
    )
    assert "Completed updating default config for brokers in the cluster." in p.stdout, p.stdout
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config", "log.retention.bytes=999999")
    assert "Completed updating config for broker 0." in p.stdout, p.stdout
    p = cli("--entity-type", "brokers", "--entity-default", "--describe")
    assert "Default configs for brokers in the cluster are:" in p.stdout
    assert (
        "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000}"
        in p.stdout
    ), p.stdout
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert "Dynamic configs for broker 0 are:" in p.stdout
    assert (
        "log.retention.bytes=999999 sensitive=false synonyms={DYNAMIC_BROKER_CONFIG:log.retention.bytes=999999, "
        "DEFAULT_CONFIG:log.retention.bytes=-1}" in p.stdout
    ), p.stdout
    assert "log.retention.ms" not in p.stdout  # --describe of one broker lists its own dynamic configs
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--describe", "--all")
    assert "All configs for broker 0 are:" in p.stdout
    assert (
        "log.retention.ms=7200000 sensitive=false synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=7200000"
        in p.stdout
    ), p.stdout
    p = cli("--entity-type", "brokers", "--entity-default", "--alter", "--delete-config", "log.segment.bytes")
    assert p.returncode == 0
    p = cli("--entity-type", "brokers", "--entity-default", "--describe")
    assert "log.segment.bytes" not in p.stdout and "log.retention.ms=7200000" in p.stdout
    p = cli(
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--alter",
        "--add-config",
        "auto.create.topics.enable=false",
        check=False,
    )
    assert (
        p.returncode == 1 and "Cannot update these configs dynamically: Set(auto.create.topics.enable)" in p.stderr
    ), p.stderr


def test_max_connections_per_ip_changes_live(broker_factory):
    """Kafka's DynamicConnectionQuota: a per-broker max.connections.per.ip applies to the next
    connection (open ones are kept); deleting it restores server.properties' value."""
    b = broker_factory(0)

    def alter(op, value):
        def attempt():
            try:
                with Wire(b.port) as w:
                    return w.request(
                        ApiKey.INCREMENTAL_ALTER_CONFIGS,
                        0,
                        {
                            "resources": [
                                {
                                    "resource_type": 4,
                                    "resource_name": "0",
                                    "configs": [
                                        {"name": "max.connections.per.ip", "config_operation": op, "value": value}
                                    ],
                                }
                            ],
                            "validate_only": False,
                        },
                    )
            except ConnectionError:
                # refused at the limit: the broker counts connections closed by the client only
                # once its network thread has seen them close (Kafka's ConnectionQuotas.dec)
                return None

        r = wait_for(attempt, timeout=15, message="a connection under max.connections.per.ip")
        assert r["responses"][0]["error_code"] == 0, r

    def served(w) -> bool:
        try:
            return w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        except Exception:  # noqa: BLE001 - closed by the broker
            return False

    open_before = [Wire(b.port) for _ in range(3)]
    assert all(served(w) for w in open_before)
    alter(0, "2")
    extra = [Wire(b.port, timeout=10) for _ in range(2)]
    refused = sum(1 for w in extra if w.is_closed(timeout=5))
    kept = sum(1 for w in open_before if served(w))
    assert (refused, kept) == (2, 3)  # new ones refused, the 3 open ones kept
    for w in open_before + extra:
        w.close()
    alter(1, None)  # back to the default (no limit)
    conns = [Wire(b.port) for _ in range(4)]
    try:
        assert all(served(w) for w in conns)
    finally:
        for w in conns:
            w.close()
    with Wire(b.port) as w:  # a bad value is refused, nothing applied
        r = w.request(
            ApiKey.INCREMENTAL_ALTER_CONFIGS,
            0,
            {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": "0",
                        "configs": [
                            {
                                "name": "max.connections.per.ip.overrides",
                                "config_operation": 0,
                                "value": "host-without-count",
                            }
                        ],
                    }
                ],
                "validate_only": False,
            },
        )
    assert r["responses"][0]["error_code"] == 42


def test_configs_cli_zookeeper_mode_reaches_a_live_broker(broker_factory, zk_chroot):
    """pyklog-configs --zookeeper writes /config/brokers/<default> with a notification; the live
    broker applies it (DescribeConfigs through the broker shows it), bad input is refused."""
    b = broker_factory(0)

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "pyklog.connector.cli.configs", "--zookeeper", zk_chroot, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    p = cli("--entity-type", "brokers", "--entity-default", "--alter", "--add-config", "log.segment.bytes=5000000")
    assert p.returncode == 0 and "Completed updating default config for brokers in the cluster." in p.stdout, p.stderr
    from tests.support import wait_for as _wait

    _wait(
        lambda: _raw_describe(b.port, 4, "0", ["log.segment.bytes"])["log.segment.bytes"]["value"] == "5000000",
        30,
        message="the live broker applies the ZooKeeper change",
    )
    # a bad value written by hand (not through a validating tool): logged at ERROR, ignored, the last
    # good value stays and the broker keeps serving
    zk = kazoo_client(zk_chroot)
    try:
        good = zk.get(paths.broker_config(""))[0]
        zk.set(paths.broker_config(""), b'{"version":1,"config":{"log.segment.bytes":"garbage"}}')
        _wait(
            lambda: "cluster default dynamic broker configs could not be applied" in b.output(),
            30,
            message="the bad value reported",
        )
        assert _raw_describe(b.port, 4, "0", ["log.segment.bytes"])["log.segment.bytes"]["value"] == "5000000"
        zk.set(paths.broker_config(""), good)
    finally:
        zk.stop()
        zk.close()
    p = cli("--entity-type", "brokers", "--entity-default", "--describe")
    assert p.stdout.splitlines() == [
        "Default configs for brokers in the cluster are:",
        "  log.segment.bytes=5000000 sensitive=false "
        "synonyms={DYNAMIC_DEFAULT_BROKER_CONFIG:log.segment.bytes=5000000}",
    ]
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config", "log.segment.bytes=x")
    assert p.returncode == 1 and "Invalid config value for resource ConfigResource(type=BROKER, name='0')" in p.stderr
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--alter", "--delete-config", "broker.id")
    assert p.returncode == 1 and "Cannot update these configs dynamically: Set(broker.id)" in p.stderr
    p = cli("--entity-type", "brokers", "--entity-default", "--alter", "--delete-config", "log.segment.bytes")
    assert p.returncode == 0, p.stderr
    _wait(
        lambda: _raw_describe(b.port, 4, "0", ["log.segment.bytes"])["log.segment.bytes"]["config_source"] == 5,
        30,
        message="the live broker drops the deleted default",
    )
