"""KIP-368 re-authentication: ``connections.max.reauth.ms`` on a SASL_PLAINTEXT broker.  The session
lifetime is answered in SaslAuthenticate v1+, a request after it ends closes the connection, a client
re-authenticates on the same connection, a deleted credential fails the next re-authentication, and
producers running across several expiries lose nothing."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.connector.client import BrokerConnection
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.producer import Producer
from pyklog.connector.sasl_client import SaslCredentials, authenticate
from tests.integration.security.sasl_support import (
    ADMIN_PASSWORD,
    ALICE_PASSWORD,
    add_scram_user,
    assert_no_password_in_log,
    sasl_broker,
    sasl_security,
)
from tests.support import Wire

REAUTH_MS = 3000


@pytest.fixture
def broker(broker_factory, zk_chroot):
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, ("SCRAM-SHA-256",))
    return sasl_broker(broker_factory, **{"connections.max.reauth.ms": str(REAUTH_MS)})


class _WireExchange:
    def __init__(self, w: Wire):
        self.w = w

    def __call__(self, api_key, body, version):
        return self.w.request(api_key, version, body)


_VERSIONS = {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)}


def test_session_lifetime_answered_and_an_expired_session_is_closed(broker):
    with Wire(broker.port, timeout=10) as w:
        lifetime = authenticate(_WireExchange(w), SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD), _VERSIONS)
        assert lifetime == REAUTH_MS
        assert w.request(ApiKey.METADATA, 1, {"topics": None})["brokers"]
        time.sleep(REAUTH_MS / 1000 + 0.5)
        w.send(ApiKey.METADATA, 1, {"topics": None})
        assert w.is_closed()
    assert "SASL session expired" in broker.output()


def test_reauthentication_on_the_same_connection_and_a_deleted_credential(broker, zk_chroot):
    creds = SaslCredentials("SCRAM-SHA-256", "alice", ALICE_PASSWORD)
    with Wire(broker.port, timeout=10) as w:
        ex = _WireExchange(w)
        assert authenticate(ex, creds, _VERSIONS) == REAUTH_MS
        for _ in range(3):  # re-authenticate before each expiry: the connection serves on
            time.sleep(REAUTH_MS / 1000 * 0.6)
            assert authenticate(ex, creds, _VERSIONS) == REAUTH_MS
            assert w.request(ApiKey.METADATA, 1, {"topics": None})["brokers"]
        # another user cannot take the connection over
        add_scram_user(zk_chroot, "bob", "bob-secret-Lm4", ("SCRAM-SHA-256",))
        time.sleep(0.5)
        with pytest.raises(Exception, match="Cannot change principals"):
            authenticate(ex, SaslCredentials("SCRAM-SHA-256", "bob", "bob-secret-Lm4"), _VERSIONS)
        assert w.is_closed()
    with Wire(broker.port, timeout=10) as w:
        ex = _WireExchange(w)
        authenticate(ex, creds, _VERSIONS)
        # the credential is deleted: the next re-authentication fails and the connection closes
        from pyklog.broker.zk.scram_credentials import ZkScramCredentials
        from tests.integration.security.sasl_support import _Session
        from tests.support import kazoo_client

        zk = kazoo_client(zk_chroot)
        try:
            ZkScramCredentials(_Session(zk)).alter("alice", deletions=["SCRAM-SHA-256"])
        finally:
            zk.stop()
            zk.close()
        time.sleep(1.0)
        with pytest.raises(Exception, match="invalid credentials"):
            authenticate(ex, creds, _VERSIONS)
        assert w.is_closed()
    assert_no_password_in_log(broker)


def _produce_across_expiries(produce_one, seconds: float) -> int:
    acked = 0
    deadline = time.monotonic() + seconds
    i = 0
    while time.monotonic() < deadline:
        produce_one(i)
        acked += 1
        i += 1
        time.sleep(0.01)
    return acked


def _read_all(broker, topic, creds) -> list[bytes]:
    c = SimpleConsumer(broker.bootstrap, security=sasl_security(creds))
    try:
        out, offset = [], 0
        end = c.latest_offset(topic, 0)
        while offset < end:
            r = c.fetch(topic, 0, offset)
            out.extend(rec.value for rec in r.records)
            offset = r.next_offset
        return out
    finally:
        c.close()


def test_pyklog_producer_across_several_expiries_loses_nothing(broker):
    creds = SaslCredentials("SCRAM-SHA-256", "alice", ALICE_PASSWORD)
    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": ALICE_PASSWORD,
        }
    )
    values = []

    def one(i):
        v = f"v{i}".encode()
        p.send(topic, value=v, partition=0).result(30)
        values.append(v)

    acked = _produce_across_expiries(one, REAUTH_MS / 1000 * 3.5)
    p.close()
    got = _read_all(broker, topic, creds)
    assert acked > 10
    assert got == values  # nothing lost, nothing duplicated
    assert "SASL session expired" not in broker.output()  # re-authenticated in time: never cut off


def test_confluent_kafka_producer_across_several_expiries_loses_nothing(broker):
    from confluent_kafka import Producer as CkProducer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = CkProducer(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "alice",
            "sasl.password": ALICE_PASSWORD,
            "enable.idempotence": True,
        }
    )
    errors, values = [], []
    lock = threading.Lock()

    def cb(err, msg):
        with lock:
            (errors if err else values).append(err or msg.value())

    def one(i):
        p.produce(topic, f"v{i}".encode(), partition=0, on_delivery=cb)
        p.poll(0)

    sent = _produce_across_expiries(one, REAUTH_MS / 1000 * 3.5)
    assert p.flush(30) == 0
    assert not errors and len(values) == sent
    got = _read_all(broker, topic, SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD))
    assert got == values
    assert "SASL session expired" not in broker.output()  # librdkafka re-authenticated in time (KIP-368)


def test_pyklog_connection_reauthenticates_and_stops_when_the_credential_is_gone(broker, zk_chroot):
    from pyklog.broker.errors import SaslAuthenticationError
    from pyklog.broker.zk.scram_credentials import ZkScramCredentials
    from tests.integration.security.sasl_support import _Session
    from tests.support import kazoo_client

    conn = BrokerConnection("127.0.0.1", broker.port, sasl=SaslCredentials("SCRAM-SHA-256", "alice", ALICE_PASSWORD))
    for _ in range(4):  # across two session lifetimes: re-authenticated on the same connection
        time.sleep(REAUTH_MS / 1000 / 2)
        assert conn.request(ApiKey.METADATA, {"topics": None})["brokers"]
    assert not conn.closed
    zk = kazoo_client(zk_chroot)
    try:
        ZkScramCredentials(_Session(zk)).alter("alice", deletions=["SCRAM-SHA-256"])
    finally:
        zk.stop()
        zk.close()
    time.sleep(REAUTH_MS / 1000)
    with pytest.raises(SaslAuthenticationError):
        conn.request(ApiKey.METADATA, {"topics": None})
    assert conn.closed


def test_kafka_python_producer_across_several_expiries_loses_nothing(broker):
    from kafka import KafkaProducer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="alice",
        sasl_plain_password=ALICE_PASSWORD,
        acks="all",
    )
    values = []

    def one(i):
        v = f"v{i}".encode()
        p.send(topic, v, partition=0).get(timeout=30)
        values.append(v)

    acked = _produce_across_expiries(one, REAUTH_MS / 1000 * 3.5)
    p.close()
    assert acked > 10
    assert _read_all(broker, topic, SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD)) == values
    assert "SASL session expired" not in broker.output()  # kafka-python re-authenticated in time (KIP-368)
