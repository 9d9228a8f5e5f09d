"""pyklog.broker.server.config: server.properties parsing and validation (pure, no server)."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.broker.server.config import ServerConfig, parse_properties

BASE = {"broker.id": "3", "zookeeper.connect": "127.0.0.1:2181/pyklog", "log.dirs": "/tmp/a,/tmp/b"}


def test_parse_properties_java_syntax():
    text = (
        "# comment\n! other comment\n\n"
        "broker.id=1\n"
        "listeners : PLAINTEXT://127.0.0.1:9093\n"
        "log.dirs /data/a,\\\n    /data/b\n"
        "  spaced.key   =   value with spaces  \n"
        "escaped\\=key=x\\ty\n"
        "broker.id=2\n"
    )
    props = parse_properties(text)
    assert props["broker.id"] == "2"  # later wins
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:9093"
    assert props["log.dirs"] == "/data/a,/data/b"
    assert props["spaced.key"] == "value with spaces  "
    assert props["escaped=key"] == "x\ty"


def test_defaults_and_types():
    cfg = ServerConfig.from_properties(BASE)
    assert cfg.broker_id == 3
    assert cfg.listener.host == "127.0.0.1" and cfg.listener.port == 9092
    assert cfg.advertised_listener == cfg.listener
    assert cfg.log_dirs == ("/tmp/a", "/tmp/b")
    assert cfg.message_max_bytes == 1048588
    assert cfg.socket_request_max_bytes == 100 * 1024 * 1024
    assert cfg.num_partitions == 1 and cfg.auto_create_topics_enable
    assert cfg.offsets_topic_num_partitions == 50
    assert cfg.num_network_threads == 3 and cfg.num_io_threads == 8


def test_listeners_and_log_settings():
    cfg = ServerConfig.from_properties(
        dict(
            BASE,
            listeners="PLAINTEXT://:0",
            **{
                "advertised.listeners": "PLAINTEXT://broker-3.example:9092",
                "log.segment.bytes": "1048576",
                "log.retention.hours": "1",
                "message.max.bytes": "2000000",
                "auto.create.topics.enable": "false",
            },
        )
    )
    assert cfg.bind_host == "0.0.0.0" and cfg.listener.port == 0
    assert cfg.advertised_host == "broker-3.example"
    assert cfg.auto_create_topics_enable is False
    lc = cfg.log_config()
    assert lc.segment_bytes == 1048576 and lc.retention_ms == 3_600_000 and lc.max_message_bytes == 2000000


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("no.such.setting", "1", "no.such.setting"),
        ("broker.id", "x", "broker.id"),
        ("broker.id", "-1", "broker.id"),
        ("listeners", "SSL://127.0.0.1:9093", "listeners"),
        ("listeners", "127.0.0.1:9092", "listeners"),
        ("listeners", "PLAINTEXT://127.0.0.1:70000", "listeners"),
        ("num.io.threads", "0", "num.io.threads"),
        ("auto.create.topics.enable", "yes", "auto.create.topics.enable"),
        ("zookeeper.connect", "localhost", "zookeeper.connect"),
        ("socket.request.max.bytes", "big", "socket.request.max.bytes"),
    ],
)
def test_bad_settings_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError) as e:
        ServerConfig.from_properties(dict(BASE, **{key: value}))
    assert fragment in str(e.value)


def test_missing_required_and_bad_log_values():
    with pytest.raises(ConfigError, match="broker.id"):
        ServerConfig.from_properties({"zookeeper.connect": "h:1"})
    with pytest.raises(ConfigError, match="zookeeper.connect"):
        ServerConfig.from_properties({"broker.id": "0"})
    cfg = ServerConfig.from_properties(dict(BASE, **{"log.cleanup.policy": "shred"}))
    with pytest.raises(ConfigError, match="cleanup.policy"):
        cfg.log_config()


def test_stock_kafka_compat_and_group_keys_are_accepted():
    cfg = ServerConfig.from_properties(
        dict(
            BASE,
            **{
                "num.recovery.threads.per.data.dir": "1",
                "transaction.state.log.min.isr": "1",
                "group.initial.rebalance.delay.ms": "0",
                "group.max.session.timeout.ms": "60000",
            },
        )
    )
    assert cfg.broker_id == 3 and cfg.raw["group.initial.rebalance.delay.ms"] == "0"
    with pytest.raises(ConfigError, match="group.min.session.timeout.ms"):
        ServerConfig.from_properties(
            dict(BASE, **{"group.min.session.timeout.ms": "70000", "group.max.session.timeout.ms": "60000"})
        )
    with pytest.raises(ConfigError, match="group.max.size"):
        ServerConfig.from_properties(dict(BASE, **{"group.max.size": "0"}))
