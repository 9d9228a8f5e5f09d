"""Listeners and TLS end to end: a broker with PLAINTEXT and SSL listeners, stock clients
(confluent-kafka, kafka-python) and pyklog's clients over SSL and mutual TLS, clear errors for
a wrong host name or an unknown CA, bad TLS input, a bad keystore, replication over SSL."""

from __future__ import annotations

import json
import socket
import ssl
import time
import uuid

import pytest

from pyklog.broker.errors import NetworkError
from pyklog.broker.zk import paths
from pyklog.connector.admin import AdminClient
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.producer import Producer
from pyklog.connector.security import ClientSecurityConfig, SslAuthenticationError
from tests.integration.security.tls_broker_support import (  # noqa: F401 - fixture
    assert_no_secret_logged,
    start_tls_broker,
    tls_certs,
)
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD

pytestmark = pytest.mark.timeout(240)


def _ssl(certs, **extra) -> ClientSecurityConfig:
    return ClientSecurityConfig.from_config(
        {"security.protocol": "SSL", "ssl.truststore.location": certs.ca_pem, **extra}
    )


def _topic() -> str:
    return f"tls-{uuid.uuid4().hex[:8]}"


def test_two_listeners_each_answers_its_own_endpoints(broker_factory, tls_certs, zk):
    b = start_tls_broker(broker_factory, tls_certs)
    with ClusterClient(b.ssl_bootstrap, security=_ssl(tls_certs)) as over_ssl:
        assert over_ssl.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", b.ssl_port)}
    with ClusterClient(b.bootstrap) as plain:
        assert plain.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", b.port)}
    # Kafka's registration: every advertised endpoint, the protocol map, host/port = PLAINTEXT's
    reg = json.loads(zk.get(paths.broker_id(0))[0])
    assert sorted(reg["endpoints"]) == sorted([f"PLAINTEXT://127.0.0.1:{b.port}", f"SSL://127.0.0.1:{b.ssl_port}"])
    assert reg["listener_security_protocol_map"] == {"PLAINTEXT": "PLAINTEXT", "SSL": "SSL"}
    assert (reg["host"], reg["port"]) == ("127.0.0.1", b.port)
    # a plaintext client on the SSL port gets no answer (the broker expects a TLS handshake)
    with pytest.raises(NetworkError):
        ClusterClient(b.ssl_bootstrap, request_timeout_ms=3000).metadata(None, refresh=True)
    assert_no_secret_logged(b)


def test_custom_listener_names_with_protocol_map(broker_factory, tls_certs, zk):
    from pyklog.broker.zk.server import free_port

    internal, external = free_port(), free_port()
    b = broker_factory(
        0,
        port=internal,
        **{
            "listeners": f"INTERNAL://127.0.0.1:{internal},EXTERNAL://127.0.0.1:{external}",
            "listener.security.protocol.map": "INTERNAL:PLAINTEXT,EXTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "listener.name.external.ssl.keystore.type": "PEM",
            "listener.name.external.ssl.keystore.location": tls_certs.broker_pem,
        },
    )
    reg = json.loads(zk.get(paths.broker_id(0))[0])
    assert reg["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT", "EXTERNAL": "SSL"}
    assert reg["port"] == internal
    with ClusterClient(f"127.0.0.1:{external}", security=_ssl(tls_certs)) as c:
        assert c.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", external)}
    with ClusterClient(f"127.0.0.1:{internal}") as c:
        assert c.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", internal)}
    assert b.proc.poll() is None


def _confluent_roundtrip(bootstrap: str, settings: dict, topic: str, n: int = 20) -> list[bytes]:
    from confluent_kafka import Consumer
    from confluent_kafka import Producer as CProducer

    p = CProducer({"bootstrap.servers": bootstrap, **settings})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode())
    assert p.flush(30) == 0
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            **settings,
        }
    )
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


def test_confluent_kafka_over_ssl_and_mutual_tls(broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs, **{"ssl.client.auth": "required"})
    topic = _topic()
    b_client = ClusterClient(b.bootstrap)
    b_client.create_topic(topic, 1)
    b_client.close()
    server_only = {"security.protocol": "SSL", "ssl.ca.location": tls_certs.ca_pem}
    # ssl.client.auth=required: a client without a certificate cannot connect
    from confluent_kafka.admin import AdminClient as CAdmin

    admin = CAdmin({"bootstrap.servers": b.ssl_bootstrap, **server_only})
    with pytest.raises(Exception):  # noqa: B017,PT011 - librdkafka's KafkaException (transport failure)
        admin.list_topics(timeout=5)
    # pyklog's client says why, at once (not retried)
    started = time.monotonic()
    with pytest.raises(SslAuthenticationError) as ei:
        ClusterClient(b.ssl_bootstrap, security=_ssl(tls_certs)).metadata(None, refresh=True)
    assert "CERTIFICATE_REQUIRED" in str(ei.value).upper() and time.monotonic() - started < 10
    # with one it can
    mutual = {
        **server_only,
        "ssl.certificate.location": tls_certs.client_cert_pem,
        "ssl.key.location": tls_certs.client_key_pem,
    }
    got = _confluent_roundtrip(b.ssl_bootstrap, mutual, topic)
    assert got == [f"v{i}".encode() for i in range(20)]
    # a certificate from a CA the broker does not trust is refused
    other = {
        **server_only,
        "ssl.certificate.location": tls_certs.other_client_pem,
        "ssl.key.location": tls_certs.other_client_pem,
    }
    with pytest.raises(Exception):  # noqa: B017,PT011
        CAdmin({"bootstrap.servers": b.ssl_bootstrap, **other}).list_topics(timeout=5)
    assert b.proc.poll() is None
    assert_no_secret_logged(b)


def test_confluent_kafka_over_ssl_with_pem_truststore(broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs)
    topic = _topic()
    with ClusterClient(b.bootstrap) as c:
        c.create_topic(topic, 1)
    got = _confluent_roundtrip(
        b.ssl_bootstrap, {"security.protocol": "SSL", "ssl.ca.location": tls_certs.ca_pem}, topic
    )
    assert got == [f"v{i}".encode() for i in range(20)]


def test_kafka_python_over_ssl_and_mutual_tls(broker_factory, tls_certs):
    from kafka import KafkaConsumer, KafkaProducer

    b = start_tls_broker(
        broker_factory,
        tls_certs,
        log_level="DEBUG",
        **{
            "ssl.client.auth": "required",
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+),OU=eng,.*$/$1/U,DEFAULT",
        },
    )
    topic = _topic()
    with ClusterClient(b.bootstrap) as c:
        c.create_topic(topic, 1)
    settings = {
        "security_protocol": "SSL",
        "ssl_cafile": tls_certs.ca_pem,
        "ssl_certfile": tls_certs.client_cert_pem,
        "ssl_keyfile": tls_certs.client_key_pem,
    }
    p = KafkaProducer(bootstrap_servers=b.ssl_bootstrap, **settings)
    for i in range(10):
        p.send(topic, f"k{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(
        topic, bootstrap_servers=b.ssl_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=30000, **settings
    )
    got = []
    for m in c:  # stops at the tenth record (or after 30 s without one)
        got.append(m.value)
        if len(got) == 10:
            break
    c.close()
    assert got == [f"k{i}".encode() for i in range(10)]
    # the connections authenticated as the certificate's subject, mapped by the rules
    # (CN=alice,OU=eng,O=acme,C=US -> ALICE)
    assert "principal User:ALICE" in b.output()


def test_pyklog_clients_over_ssl_with_pkcs12_stores(broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs, **{"ssl.client.auth": "requested"})
    topic = _topic()
    settings = {
        "security.protocol": "SSL",
        "ssl.truststore.type": "PKCS12",
        "ssl.truststore.location": tls_certs.ca_p12,
        "ssl.truststore.password": TRUSTSTORE_PASSWORD,
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": tls_certs.client_p12,
        "ssl.keystore.password": KEYSTORE_PASSWORD,
    }
    admin = AdminClient(b.ssl_bootstrap, security=settings)
    admin.client.create_topic(topic, 2)
    # the keystore password is sensitive: DescribeConfigs answers null (as Kafka)
    entries = {e["name"]: e for e in admin.describe_configs([(4, "0")])[(4, "0")]}
    assert entries["ssl.keystore.password"]["value"] is None and entries["ssl.keystore.password"]["is_sensitive"]
    assert entries["ssl.keystore.location"]["value"] == tls_certs.broker_p12
    admin.close()
    p = Producer({"bootstrap.servers": b.ssl_bootstrap, "acks": "all", **settings})
    for i in range(200):
        p.send(topic, value=b"x" * 1000 + str(i).encode(), partition=i % 2)
    p.flush(30)
    assert "ks-secret" not in repr(p.client.security) and "ks-secret" not in str(p.client.security)
    p.close()
    consumer = SimpleConsumer(b.ssl_bootstrap, security=settings, max_wait_ms=200)
    total = 0
    for part in (0, 1):
        offset = 0
        while offset < 100:
            result = consumer.fetch(topic, part, offset)
            assert result.records, f"no records at {topic}-{part}@{offset}"
            total += len(result.records)
            offset = result.next_offset
    consumer.close()
    assert total == 200
    assert_no_secret_logged(b)


def test_wrong_host_name_and_unknown_ca_are_clear_client_errors(broker_factory, tls_certs):
    b = start_tls_broker(
        broker_factory,
        tls_certs,
        **{"ssl.keystore.type": "PEM", "ssl.keystore.location": tls_certs.wrong_host_pem, "ssl.keystore.password": ""},
    )
    with pytest.raises(SslAuthenticationError) as ei:
        ClusterClient(b.ssl_bootstrap, security=_ssl(tls_certs)).metadata(None, refresh=True)
    assert "mismatch" in str(ei.value).lower() and "TLS handshake" in str(ei.value)
    # without host name verification the same certificate is accepted (it is signed by the CA)
    off = _ssl(tls_certs, **{"ssl.endpoint.identification.algorithm": ""})
    with ClusterClient(b.ssl_bootstrap, security=off) as c:
        assert c.metadata(None, refresh=True).brokers[0][1] == b.ssl_port
    # a truststore without the broker's CA
    unknown = ClientSecurityConfig.from_config(
        {"security.protocol": "SSL", "ssl.truststore.location": tls_certs.other_ca_pem}
    )
    with pytest.raises(SslAuthenticationError) as ei:
        ClusterClient(b.ssl_bootstrap, security=unknown).metadata(None, refresh=True)
    assert "certificate verify failed" in str(ei.value) or "unable to get local issuer" in str(ei.value)


def test_tls_garbage_and_stalled_handshakes_leave_the_broker_serving(broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs)
    garbage = []
    for payload in (
        b"\x00" * 64,
        b"GET / HTTP/1.1\r\n\r\n",
        b"\x16\x03\x01\x00\x05hello",
        b"\x00\x00\x00\x10" + b"x" * 16,
    ):
        s = socket.create_connection(("127.0.0.1", b.ssl_port), timeout=10)
        s.sendall(payload)
        garbage.append(s)
    # a client that stops mid-handshake: it sends the start of a ClientHello and waits
    ctx = ssl.create_default_context(cafile=tls_certs.ca_pem)
    stalled = socket.create_connection(("127.0.0.1", b.ssl_port), timeout=10)
    tls_obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    with pytest.raises(ssl.SSLWantReadError):
        tls_obj.do_handshake()
    hello = out.read()
    stalled.sendall(hello[: len(hello) // 2])
    silent = socket.create_connection(("127.0.0.1", b.ssl_port), timeout=10)  # connects, says nothing
    # garbage connections are closed by the broker
    for s in garbage:
        s.settimeout(10)
        try:
            assert s.recv(4096) in (b"",) or True
        except OSError:
            pass
    # everyone else is served, on both listeners, while the stalled ones hang
    for _ in range(3):
        with ClusterClient(b.ssl_bootstrap, security=_ssl(tls_certs)) as c:
            assert c.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", b.ssl_port)}
        with ClusterClient(b.bootstrap) as c:
            assert c.metadata(None, refresh=True).brokers == {0: ("127.0.0.1", b.port)}
    for s in (*garbage, stalled, silent):
        s.close()
    assert b.proc.poll() is None


def test_stalled_handshake_is_closed_by_connections_max_idle_ms(broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs, **{"connections.max.idle.ms": "1500"})
    s = socket.create_connection(("127.0.0.1", b.ssl_port), timeout=15)
    s.sendall(b"\x16\x03\x01")  # the start of a TLS record, never finished
    started = time.monotonic()
    assert s.recv(1024) == b""  # the broker closed it
    assert time.monotonic() - started < 12
    s.close()


def test_pkcs12_keystore_with_wrong_password_is_a_clear_start_error(broker_factory, tls_certs):
    wrong = "not-the-Right-pw-42"
    b = start_tls_broker(broker_factory, tls_certs, start=False, **{"ssl.keystore.password": wrong})
    b.start(expect_ready=False)
    assert b.wait_exit(60) != 0
    out = b.output()
    assert "ssl.keystore.location" in out and "ssl.keystore.password" in out
    assert wrong not in out and KEYSTORE_PASSWORD not in out


def test_expired_certificate_is_a_clear_start_error(broker_factory, tls_certs):
    b = start_tls_broker(
        broker_factory,
        tls_certs,
        start=False,
        **{"ssl.keystore.type": "PEM", "ssl.keystore.location": tls_certs.expired_pem, "ssl.keystore.password": ""},
    )
    b.start(expect_ready=False)
    assert b.wait_exit(60) != 0
    assert "expired" in b.output() and "ssl.keystore.location" in b.output()


def test_two_brokers_replicate_over_the_ssl_inter_broker_listener(broker_factory, tls_certs):
    extra = {"inter.broker.listener.name": "SSL", "ssl.client.auth": "required", "min.insync.replicas": "2"}
    b0 = start_tls_broker(broker_factory, tls_certs, 0, **extra)
    b1 = start_tls_broker(broker_factory, tls_certs, 1, **extra)
    topic = _topic()
    with ClusterClient(b0.bootstrap) as c:
        c.create_topic(topic, 2, replication_factor=2)
    p = Producer({"bootstrap.servers": b0.ssl_bootstrap, "acks": "all", **_ssl_settings(tls_certs)})
    for i in range(300):
        p.send(topic, value=f"r{i}".encode(), partition=i % 2)
    p.flush(60)
    assert p.failed_records == 0
    p.close()
    consumer = SimpleConsumer(b1.bootstrap, max_wait_ms=200)
    got = []
    for part in (0, 1):
        offset = 0
        deadline = time.monotonic() + 60
        while offset < 150 and time.monotonic() < deadline:
            result = consumer.fetch(topic, part, offset)
            got += [r.value for r in result.records]
            offset = result.next_offset
    consumer.close()
    assert sorted(got) == sorted(f"r{i}".encode() for i in range(300))
    # the followers fetched from the leaders' SSL endpoints
    ssl_ports = {b0.ssl_port, b1.ssl_port}
    fetch_lines = [
        line
        for b in (b0, b1)
        for line in b.output().splitlines()
        if "fetcher" in line and "connected to broker" in line
    ]
    assert fetch_lines and all(any(f":{p}" in line for p in ssl_ports) for line in fetch_lines)
    assert_no_secret_logged(b0, b1)


def _ssl_settings(certs) -> dict:
    return {
        "security.protocol": "SSL",
        "ssl.truststore.location": certs.ca_pem,
        "ssl.keystore.location": certs.client_pem,
    }
