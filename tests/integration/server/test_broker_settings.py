"""Every Kafka 3.7 broker setting on a real broker: server.properties, DescribeConfigs, AlterConfigs and
IncrementalAlterConfigs with Kafka's dynamic-update rules (read-only, per-broker, cluster-wide; the
``ssl.*`` stores only per listener; passwords encoded with ``password.encoder.secret``), through
confluent-kafka, kafka-python and raw requests."""

from __future__ import annotations

from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.support import Wire, kazoo_client

SECRET_PASSWORD = "keystore-pw-Zq81xv"
ENCODER_SECRET = "encoder-secret-Pm47"


def _describe(port: int, name: str, keys=None, documentation: bool = False) -> dict:
    with Wire(port) as w:
        r = w.request(
            ApiKey.DESCRIBE_CONFIGS,
            4,
            {
                "resources": [{"resource_type": 4, "resource_name": name, "configuration_keys": keys}],
                "include_synonyms": True,
                "include_documentation": documentation,
            },
        )
    res = r["results"][0]
    assert res["error_code"] == 0, res
    return {c["name"]: c for c in res["configs"]}


def _alter(port: int, name: str, configs: dict, incremental: bool = True) -> dict:
    with Wire(port) as w:
        if incremental:
            body = {
                "resources": [
                    {
                        "resource_type": 4,
                        "resource_name": name,
                        "configs": [{"name": k, "config_operation": 0, "value": v} for k, v in configs.items()],
                    }
                ],
                "validate_only": False,
            }
            return w.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)["responses"][0]
        body = {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": name,
                    "configs": [{"name": k, "value": v} for k, v in configs.items()],
                }
            ],
            "validate_only": False,
        }
        return w.request(ApiKey.ALTER_CONFIGS, 1, body)["responses"][0]


def test_kerberos_relogin_setting_alters_with_stock_clients_as_on_kafka(broker_factory):
    """librdkafka's admin test alters sasl.kerberos.min.time.before.relogin on a broker and expects
    success (a per-broker dynamic setting in Kafka 3.7)."""
    from confluent_kafka.admin import AdminClient, ConfigResource, ResourceType

    b = broker_factory(0)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    res = ConfigResource(ResourceType.BROKER, "0", set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([res])[res].result(30)
    described = admin.describe_configs([ConfigResource(ResourceType.BROKER, "0")])
    entries = next(iter(described.values())).result(30)
    entry = entries["sasl.kerberos.min.time.before.relogin"]
    assert entry.value == "58000" and entry.source == 2 and not entry.is_read_only, entry
    # IncrementalAlterConfigs: SET, and APPEND to a list setting starting from Kafka's default
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry

    res = ConfigResource(
        ResourceType.BROKER,
        "0",
        incremental_configs=[
            ConfigEntry("sasl.kerberos.min.time.before.relogin", "58000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("sasl.enabled.mechanisms", "PLAIN", incremental_operation=AlterConfigOpType.APPEND),
        ],
    )
    admin.incremental_alter_configs([res])[res].result(30)
    cfg = _describe(b.port, "0", ["sasl.enabled.mechanisms"])
    assert cfg["sasl.enabled.mechanisms"]["value"] == "GSSAPI,PLAIN", cfg
    # kafka-python adds a third per-broker setting beside them
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        r = kp.alter_configs(
            [KpResource(ConfigResourceType.BROKER, "0", configs={"sasl.kerberos.ticket.renew.jitter": "0.1"})]
        )
        assert r == {"broker": {"0": "OK"}}, r
    finally:
        kp.close()
    cfg = _describe(b.port, "0", ["sasl.kerberos.min.time.before.relogin", "sasl.kerberos.ticket.renew.jitter"])
    relogin = cfg["sasl.kerberos.min.time.before.relogin"]
    assert (relogin["value"], relogin["config_source"]) == ("58000", 2), cfg
    assert relogin["synonyms"][-1] == {"name": relogin["name"], "value": "60000", "source": 5}, relogin
    assert cfg["sasl.kerberos.ticket.renew.jitter"]["value"] == "0.1"


def test_describe_lists_every_kafka_setting_with_types_modes_and_documentation(broker_factory):
    from pyklog.broker.common.kafka_settings import KAFKA_SETTINGS

    b = broker_factory(0, **{"sasl.enabled.mechanisms": "PLAIN", "ssl.keystore.password": SECRET_PASSWORD})
    cfg = _describe(b.port, "0", documentation=True)
    missing = sorted(set(KAFKA_SETTINGS) - set(cfg))
    assert not missing, missing
    assert (cfg["sasl.enabled.mechanisms"]["value"], cfg["sasl.enabled.mechanisms"]["config_source"]) == ("PLAIN", 4)
    assert cfg["sasl.enabled.mechanisms"]["config_type"] == 7  # LIST
    pw = cfg["ssl.keystore.password"]
    assert pw["value"] is None and pw["is_sensitive"] and pw["config_type"] == 9, pw
    assert all(s["value"] is None for s in pw["synonyms"]), pw
    assert cfg["broker.id"]["read_only"] and not cfg["num.io.threads"]["read_only"]
    assert not cfg["sasl.kerberos.min.time.before.relogin"]["read_only"]
    assert (
        cfg["sasl.kerberos.min.time.before.relogin"]["documentation"]
        == "Login thread sleep time between refresh attempts."
    )
    assert SECRET_PASSWORD not in b.output()


def test_dynamic_update_rules_are_kafkas(broker_factory, zk_chroot):
    b = broker_factory(0)
    r = _alter(b.port, "0", {"auto.create.topics.enable": "false"})
    assert (
        r["error_code"] == 42
        and "Cannot update these configs dynamically: Set(auto.create.topics.enable)" in (r["error_message"])
    ), r
    r = _alter(b.port, "", {"sasl.kerberos.min.time.before.relogin": "58000"})
    assert r["error_code"] == 42 and "broker id must be specified" in r["error_message"], r
    r = _alter(b.port, "0", {"ssl.keystore.location": "/tmp/ks.p12"})
    assert r["error_code"] == 42 and "only per-listener using the listener prefix" in r["error_message"], r
    r = _alter(b.port, "0", {"sasl.kerberos.min.time.before.relogin": "soon"})
    assert r["error_code"] == 42 and "expected a long" in r["error_message"], r
    r = _alter(b.port, "0", {"no.such.setting": "1"})
    assert r["error_code"] == 40, r
    # a password without password.encoder.secret: refused, as Kafka refuses it
    r = _alter(b.port, "0", {"listener.name.plaintext.ssl.keystore.password": SECRET_PASSWORD})
    assert r["error_code"] == 42 and "Password encoder secret not configured" in r["error_message"], r
    assert SECRET_PASSWORD not in r["error_message"]
    zk = kazoo_client(zk_chroot)
    try:
        assert not zk.exists(f"{paths.CONFIG}/brokers/0") or b"ssl" not in zk.get(f"{paths.CONFIG}/brokers/0")[0]
    finally:
        zk.stop()
        zk.close()
    # cluster-wide settings go to the default level; per-listener ones to the broker
    assert _alter(b.port, "", {"num.io.threads": "16", "background.threads": "5"})["error_code"] == 0
    assert _alter(b.port, "0", {"listener.name.plaintext.ssl.keystore.location": "/tmp/ks.p12"})["error_code"] == 0
    cfg = _describe(b.port, "0", ["num.io.threads", "listener.name.plaintext.ssl.keystore.location"])
    assert (cfg["num.io.threads"]["value"], cfg["num.io.threads"]["config_source"]) == ("16", 3), cfg
    assert cfg["listener.name.plaintext.ssl.keystore.location"]["value"] == "/tmp/ks.p12", cfg


def test_password_settings_are_stored_encoded_and_never_shown(broker_factory, zk_chroot):
    from pyklog.broker.security.password_encoder import PasswordEncoder

    b = broker_factory(0, **{"password.encoder.secret": ENCODER_SECRET})
    name = "listener.name.plaintext.ssl.keystore.password"
    r = _alter(b.port, "0", {name: SECRET_PASSWORD})
    assert r["error_code"] == 0, r
    r = _alter(b.port, "", {name: SECRET_PASSWORD})
    assert r["error_code"] == 42 and SECRET_PASSWORD not in r["error_message"], r
    zk = kazoo_client(zk_chroot)
    try:
        import json

        stored = json.loads(zk.get(f"{paths.CONFIG}/brokers/0")[0])["config"][name]
    finally:
        zk.stop()
        zk.close()
    assert SECRET_PASSWORD not in stored and "cipherAlgorithm:AES/CBC/PKCS5Padding" in stored, stored
    assert PasswordEncoder(ENCODER_SECRET).decode(stored) == SECRET_PASSWORD
    cfg = _describe(b.port, "0", [name])
    assert cfg[name]["value"] is None and cfg[name]["is_sensitive"] and cfg[name]["config_source"] == 2, cfg
    out = b.output()
    assert SECRET_PASSWORD not in out and ENCODER_SECRET not in out


def test_configs_cli_zookeeper_mode_encodes_passwords_with_the_given_secret(broker_factory, zk_chroot):
    """Kafka's ConfigCommand in ZooKeeper mode: a password needs password.encoder.secret on the command
    line, which encodes it and is not stored; the live broker describes it as sensitive."""
    import json
    import subprocess
    import sys

    from pyklog.broker.security.password_encoder import PasswordEncoder
    from tests.support import wait_for

    b = broker_factory(0, **{"password.encoder.secret": ENCODER_SECRET})
    name = "listener.name.plaintext.ssl.key.password"

    def cli(*args):
        return subprocess.run(
            [sys.executable, "-m", "pyklog.connector.cli.configs", "--zookeeper", zk_chroot, *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    p = cli("--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config", f"{name}={SECRET_PASSWORD}")
    assert p.returncode == 1 and "password.encoder.secret must be specified" in p.stderr, p.stderr
    assert SECRET_PASSWORD not in p.stderr + p.stdout
    p = cli(
        "--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config",
        f"{name}={SECRET_PASSWORD},password.encoder.secret={ENCODER_SECRET}",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    zk = kazoo_client(zk_chroot)
    try:
        stored = json.loads(zk.get(f"{paths.CONFIG}/brokers/0")[0])["config"]
    finally:
        zk.stop()
        zk.close()
    assert set(stored) == {name} and PasswordEncoder(ENCODER_SECRET).decode(stored[name]) == SECRET_PASSWORD
    p = cli("--entity-type", "brokers", "--entity-name", "0", "--describe")
    assert f"{name}=null sensitive=true" in p.stdout and SECRET_PASSWORD not in p.stdout, p.stdout
    cfg = wait_for(lambda: _describe(b.port, "0", [name]).get(name), 30)
    assert cfg["value"] is None and cfg["is_sensitive"] and cfg["config_source"] == 2, cfg
    assert SECRET_PASSWORD not in b.output() and ENCODER_SECRET not in b.output()
