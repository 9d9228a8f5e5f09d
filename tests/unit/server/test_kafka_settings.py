"""The Kafka 3.7 broker settings catalogue, server.properties acceptance and Kafka's PasswordEncoder."""

from __future__ import annotations

import logging

import pytest

from pyklog.broker.common import kafka_settings as ks
from pyklog.broker.errors import ConfigError
from pyklog.broker.security.password_encoder import PasswordEncoder
from pyklog.broker.server.config import ServerConfig

BASE = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181"}


def test_catalogue_has_kafkas_names_types_and_modes():
    assert len(ks.KAFKA_SETTINGS) >= 280
    s = ks.KAFKA_SETTINGS["sasl.kerberos.min.time.before.relogin"]
    assert (s.type, s.default, s.update_mode) == ("long", "60000", "per-broker")
    assert ks.KAFKA_SETTINGS["log.segment.bytes"].default == "1073741824"
    assert ks.KAFKA_SETTINGS["num.io.threads"].update_mode == "cluster-wide"
    assert ks.KAFKA_SETTINGS["broker.id"].update_mode == "read-only"
    assert ks.is_sensitive("ssl.keystore.key") and ks.is_sensitive("password.encoder.secret")
    assert not ks.is_sensitive("ssl.keystore.location")


def test_listener_forms():
    p = ks.parse_listener_setting("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config")
    assert p == ks.ListenerSetting("sasl_ssl", "scram-sha-512", "sasl.jaas.config")
    assert ks.parse_listener_setting("listener.name.ext.ssl.keystore.location").base == "ssl.keystore.location"
    assert ks.parse_listener_setting("listener.name.ext.log.retention.ms") is None
    assert ks.update_mode("listener.name.ext.max.connections") == "cluster-wide"
    assert ks.update_mode("listener.name.ext.ssl.keystore.location") == "per-broker"
    assert ks.is_sensitive("listener.name.ext.plain.sasl.jaas.config")


def test_values_are_checked_by_kafkas_type_and_range():
    ks.check_value("sasl.kerberos.min.time.before.relogin", "58000")
    for name, bad in (
        ("sasl.kerberos.min.time.before.relogin", "soon"),
        ("sasl.login.refresh.buffer.seconds", "99999"),  # a short
        ("background.threads", "0"),  # [1,...]
        ("ssl.client.auth", "sometimes"),
        ("zookeeper.set.acl", "yes"),
    ):
        with pytest.raises(ValueError, match=name):
            ks.check_value(name, bad)
    with pytest.raises(ValueError) as e:
        ks.check_value("ssl.keystore.password", None)  # unset: fine
        ks.check_value("ssl.key.password", "x")  # any text is a password
        raise ValueError("ok")
    assert "ok" in str(e.value)


def test_server_properties_accepts_kafka_settings_and_warns_once_without_values(caplog):
    with caplog.at_level(logging.WARNING):
        cfg = ServerConfig.from_properties(
            {
                **BASE,
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "delegation.token.secret.key": "pw-never-logged",
                "listener.name.plaintext.plain.sasl.jaas.config": "x required;",
                "background.threads": "4",
            }
        )
    assert cfg.raw["background.threads"] == "4"
    lines = [r.getMessage() for r in caplog.records if "without effect" in r.getMessage()]
    assert len(lines) == 1 and "delegation.token.secret.key" in lines[0] and "background.threads" in lines[0], lines
    assert "pw-never-logged" not in caplog.text
    with pytest.raises(ConfigError, match="no.such.thing"):
        ServerConfig.from_properties({**BASE, "no.such.thing": "1"})
    with pytest.raises(ConfigError, match="background.threads"):
        ServerConfig.from_properties({**BASE, "background.threads": "0"})
    with pytest.raises(ConfigError, match="listener.name.x.log.retention.ms"):
        ServerConfig.from_properties({**BASE, "listener.name.x.log.retention.ms": "1"})


def test_password_encoder_round_trip_and_wrong_secret():
    enc = PasswordEncoder("secret-one")
    stored = enc.encode("pässword")
    assert "pässword" not in stored and stored.startswith("keyFactoryAlgorithm:PBKDF2WithHmacSHA512,")
    assert enc.decode(stored) == "pässword"
    assert PasswordEncoder("secret-one", cipher_algorithm="AES/GCM/NoPadding").decode(stored) == "pässword"
    gcm = PasswordEncoder("secret-one", cipher_algorithm="AES/GCM/NoPadding", key_length=256).encode("x")
    assert enc.decode(gcm) == "x"
    with pytest.raises(ConfigError, match="could not be decoded") as e:
        PasswordEncoder("secret-two").decode(stored)
    assert "secret" not in str(e.value).replace("could not", "") or "secret-one" not in str(e.value)
    assert "secret-one" not in repr(enc)


def test_a_secured_kafka_server_properties_is_accepted():
    """Kafka 3.7's shipped server.properties plus what a secured ZooKeeper-mode broker adds."""
    from pyklog.broker.server.config import parse_properties

    text = """
broker.id=0
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs=/tmp/kafka-logs
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.retention.check.interval.ms=300000
zookeeper.connect=localhost:2181
zookeeper.connection.timeout.ms=18000
group.initial.rebalance.delay.ms=0
sasl.enabled.mechanisms=SCRAM-SHA-512,PLAIN
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
ssl.client.auth=required
ssl.keystore.type=PKCS12
ssl.enabled.protocols=TLSv1.3
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule \\
    required username="admin" password="admin-secret";
listener.name.sasl_ssl.max.connections=1000
zookeeper.set.acl=true
allow.everyone.if.no.acl.found=false
password.encoder.secret=enc-secret
"""
    cfg = ServerConfig.from_properties(parse_properties(text))
    assert cfg.num_io_threads == 8 and cfg.raw["sasl.enabled.mechanisms"] == "SCRAM-SHA-512,PLAIN"


def test_stored_passwords_are_decoded_with_the_brokers_secret_or_dropped(caplog):
    from pyklog.broker.server.dynamic_config import LEVEL_BROKER, DynamicBrokerConfig

    name = "listener.name.ext.ssl.keystore.password"
    stored = PasswordEncoder("right-secret").encode("ks-pw-9931")
    dyn = DynamicBrokerConfig(0, {"password.encoder.secret": "right-secret"})
    dyn.update(LEVEL_BROKER, {name: stored, "sasl.kerberos.min.time.before.relogin": "58000"}, 1)
    assert dyn.dynamic_broker_configs() == {name: "ks-pw-9931", "sasl.kerberos.min.time.before.relogin": "58000"}
    wrong = DynamicBrokerConfig(0, {"password.encoder.secret": "wrong-secret"})
    with caplog.at_level(logging.ERROR):
        wrong.update(LEVEL_BROKER, {name: stored}, 1)
    assert wrong.dynamic_broker_configs() == {}
    assert name in caplog.text and "could not be decoded" in caplog.text
    assert "ks-pw-9931" not in caplog.text and "wrong-secret" not in caplog.text and stored not in caplog.text
