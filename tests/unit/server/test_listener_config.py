"""listeners, listener.security.protocol.map, advertised.listeners and the inter-broker listener:
Kafka's parsing and checks, and the listener.name.<name>.* overrides."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.broker.server.config import Endpoint, ServerConfig

BASE = {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "log.dirs": "/tmp/x"}


def cfg(**props) -> ServerConfig:
    return ServerConfig.from_properties({**BASE, **props})


def test_several_listeners_each_with_its_protocol():
    c = cfg(listeners="PLAINTEXT://127.0.0.1:0,SSL://:9093,SASL_SSL://[::1]:9094")
    assert c.all_listeners() == (
        Endpoint("PLAINTEXT", "127.0.0.1", 0, "PLAINTEXT"),
        Endpoint("SSL", "", 9093, "SSL"),
        Endpoint("SASL_SSL", "::1", 9094, "SASL_SSL"),
    )
    assert c.listener.listener_name == "PLAINTEXT"
    assert c.all_advertised_listeners() == c.all_listeners()
    assert c.inter_broker_listener_name == "PLAINTEXT" and c.inter_broker_security_protocol == "PLAINTEXT"


def test_custom_names_need_the_protocol_map():
    with pytest.raises(ConfigError, match="no security protocol defined for listener INTERNAL"):
        cfg(listeners="INTERNAL://:9092")
    c = cfg(
        listeners="INTERNAL://:9092,external://:9093",
        **{
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
        },
    )
    assert [(e.listener_name, e.security_protocol) for e in c.all_listeners()] == [
        ("INTERNAL", "PLAINTEXT"),
        ("EXTERNAL", "SSL"),
    ]


@pytest.mark.parametrize(
    "props,fragment",
    [
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "different name"),
        ({"listeners": "PLAINTEXT://:9092,SSL://:9092"}, "different port"),
        (
            {"listeners": "PLAINTEXT://:9092", "listener.security.protocol.map": "PLAINTEXT:TLS"},
            "unknown security protocol",
        ),
        ({"listeners": "PLAINTEXT//:9092"}, "LISTENER_NAME://host:port"),
        ({"listeners": "PLAINTEXT://:70000"}, "0..65535"),
        (
            {
                "listeners": "PLAINTEXT://:1,SSL://:2",
                "inter.broker.listener.name": "SSL",
                "security.inter.broker.protocol": "SSL",
            },
            "only one of them",
        ),
        ({"listeners": "PLAINTEXT://:1", "inter.broker.listener.name": "SSL"}, "must be a listener defined"),
        ({"listeners": "SSL://:1"}, "inter-broker listener PLAINTEXT"),
        ({"listeners": "PLAINTEXT://:1", "security.inter.broker.protocol": "TLS"}, "security.inter.broker.protocol"),
        ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "SSL://h:1"}, "not one of listeners"),
        ({"listeners": "PLAINTEXT://:1", "advertised.listeners": "PLAINTEXT://:1"}, "a host is required"),
        ({"listeners": "PLAINTEXT://:1", "listener.name.plaintext.no.such.key": "x"}, "unknown setting"),
    ],
)
def test_kafka_listener_checks(props, fragment):
    with pytest.raises(ConfigError) as ei:
        cfg(**props)
    assert fragment in str(ei.value)


def test_port_zero_may_repeat_and_advertised_ports_may_repeat():
    c = cfg(
        listeners="PLAINTEXT://:0,SSL://:0",
        **{
            "advertised.listeners": "PLAINTEXT://a.example:9092,SSL://b.example:9092",
            "security.inter.broker.protocol": "SSL",
        },
    )
    assert [e.port for e in c.all_advertised_listeners()] == [9092, 9092]
    assert c.inter_broker_listener_name == "SSL" and c.inter_broker_security_protocol == "SSL"


def test_per_listener_ssl_overrides():
    c = cfg(
        listeners="PLAINTEXT://:1,SSL://:2",
        **{
            "ssl.keystore.location": "/common.p12",
            "listener.name.ssl.ssl.keystore.location": "/ssl.p12",
            "listener.name.ssl.ssl.client.auth": "required",
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": "x required;",
        },
    )
    assert c.listener_setting("SSL", "ssl.keystore.location") == "/ssl.p12"
    assert c.listener_setting("PLAINTEXT", "ssl.keystore.location") == "/common.p12"
    assert c.listener_setting("SSL", "ssl.client.auth") == "required"
    assert c.listener_setting("SSL", "ssl.truststore.location") is None
