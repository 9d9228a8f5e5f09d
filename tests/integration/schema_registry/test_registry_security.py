"""The registry over HTTPS with basic authentication, storing its schemas in a SASL_SSL cluster:
confluent-kafka's client with the right password works, a wrong one gets 401 with Confluent's
40101; no secret reaches the registry's log."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError as ConfluentRegistryError

from pyklog.broker.zk.server import free_port
from pyklog.connector.schema_registry.client import SchemaRegistryClient as PyklogRegistryClient
from pyklog.connector.schema_registry.errors import SchemaRegistryError
from tests.integration.schema_registry.registry_support import RegistryProcess
from tests.integration.security.tls_broker_support import start_sasl_ssl_broker, tls_certs
from tests.tls_support import KEYSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

CLUSTER_PASSWORD = "sr-cluster-Pw7"
FRED_PASSWORD = "fred-http-Pw9"


def test_https_basic_auth_over_a_sasl_ssl_cluster(broker_factory, tls_certs, tmp_path):
    users = {"username": "registry", "password": CLUSTER_PASSWORD, "user_registry": CLUSTER_PASSWORD}
    b = start_sasl_ssl_broker(
        broker_factory, tls_certs, plain_users=users, mechanisms="PLAIN", **{"group.initial.rebalance.delay.ms": 0}
    )
    users_file = tmp_path / "users.properties"
    users_file.write_text(f"fred: {FRED_PASSWORD},admin\n")
    sr_port = free_port()
    sr = RegistryProcess(
        b.bootstrap,
        tmp_path,
        "secure",
        port=sr_port,
        **{
            "listeners": f"https://127.0.0.1:{sr_port}",
            "ssl.keystore.location": tls_certs.broker_p12,
            "ssl.keystore.password": KEYSTORE_PASSWORD,
            "ssl.keystore.type": "PKCS12",
            "ssl.truststore.location": tls_certs.ca_pem,
            "authentication.method": "BASIC",
            "authentication.users.file": str(users_file),
            "kafkastore.security.protocol": "SASL_SSL",
            "kafkastore.ssl.truststore.location": tls_certs.ca_pem,
            "kafkastore.sasl.mechanism": "PLAIN",
            "kafkastore.sasl.username": "registry",
            "kafkastore.sasl.password": CLUSTER_PASSWORD,
        },
    ).start()
    url = f"https://127.0.0.1:{sr_port}"
    try:
        conf = {"url": url, "ssl.ca.location": tls_certs.ca_pem}
        client = SchemaRegistryClient({**conf, "basic.auth.user.info": f"fred:{FRED_PASSWORD}"})
        sid = client.register_schema("s-value", Schema(json.dumps({"type": "array", "items": "int"}), "AVRO"))
        assert client.get_latest_version("s-value").schema_id == sid
        for bad in ({**conf, "basic.auth.user.info": "fred:wrong"}, conf):
            with pytest.raises(ConfluentRegistryError) as e:
                SchemaRegistryClient(bad).get_subjects()
            assert e.value.http_status_code == 401 and e.value.error_code == 40101
        ours = PyklogRegistryClient(url, basic_auth=("fred", FRED_PASSWORD), ssl_ca_location=tls_certs.ca_pem)
        assert ours.get_schema(sid)["schema"] == json.dumps({"type": "array", "items": "int"})
        with pytest.raises(SchemaRegistryError) as e:
            PyklogRegistryClient(url, basic_auth=("fred", "nope"), ssl_ca_location=tls_certs.ca_pem).get_schema(sid)
        assert e.value.error_code == 40101
    finally:
        sr.stop()
    out = sr.output()
    for secret in (CLUSTER_PASSWORD, FRED_PASSWORD, KEYSTORE_PASSWORD):
        assert secret not in out
