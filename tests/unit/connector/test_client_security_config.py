"""ClientSecurityConfig: Kafka's client names, JAAS options, secrets kept out of repr and errors,
pickling (Spark ships it)."""

from __future__ import annotations

import pickle

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.security import ClientSecurityConfig, parse_jaas_options, split_security

JAAS = 'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="s3cr3t-pw";'


def test_kafka_and_python_names():
    c = ClientSecurityConfig.from_config(
        {
            "security.protocol": "sasl_ssl",
            "ssl.truststore.location": "/ca.pem",
            "ssl_keystore_password": "ks-pw-1",
            "sasl.mechanism": "scram-sha-512",
            "sasl.jaas.config": JAAS,
            "acks": "all",
        }
    )
    assert c.security_protocol == "SASL_SSL" and c.uses_tls and c.uses_sasl
    assert c.ssl_setting("ssl.truststore.location") == "/ca.pem"
    assert c.ssl_setting("ssl.keystore.password") == "ks-pw-1"
    assert (c.sasl_mechanism, c.sasl_username, c.sasl_password) == ("SCRAM-SHA-512", "alice", "s3cr3t-pw")
    for text in (repr(c), str(c)):
        assert "s3cr3t-pw" not in text and "ks-pw-1" not in text and "ScramLoginModule" not in text
    assert pickle.loads(pickle.dumps(c)) == c
    assert c.to_config()["sasl.jaas.config"] == JAAS


def test_prefix_for_spark_options():
    c = ClientSecurityConfig.from_config(
        {"kafka.security.protocol": "SSL", "kafka.ssl.truststore.location": "/t", "security.protocol": "x"},
        prefix="kafka.",
    )
    assert c.security_protocol == "SSL" and c.ssl == (("ssl.truststore.location", "/t"),)


def test_bad_protocol_and_bad_jaas_never_show_the_password():
    with pytest.raises(ConfigError, match="security.protocol"):
        ClientSecurityConfig.from_config({"security.protocol": "TLS"})
    with pytest.raises(ConfigError) as ei:
        ClientSecurityConfig.from_config({"sasl.jaas.config": 'x required password="pw-9"'})
    assert "pw-9" not in str(ei.value)
    assert parse_jaas_options('m required a="1" b="x\\"y";') == {"a": "1", "b": 'x"y'}


def test_split_security():
    rest, sec = split_security({"security.protocol": "SSL", "group.id": "g", "ssl_truststore_location": "/x"})
    assert rest == {"group.id": "g"} and sec.uses_tls
    assert ClientSecurityConfig.from_config(None).ssl_context() is None
