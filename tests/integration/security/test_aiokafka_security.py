"""aiokafka, unchanged, over TLS and over SASL_SSL with SCRAM-SHA-512: it produces and reads back
through a broker listening on PLAINTEXT, SSL and SASL_SSL; a wrong SCRAM password is refused."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from pyklog.broker.zk.server import free_port
from tests.integration.security.sasl_support import ALICE_PASSWORD, add_scram_user
from tests.integration.security.tls_broker_support import tls_certs
from tests.tls_support import KEYSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

aiokafka = pytest.importorskip("aiokafka")


@pytest.fixture
def broker(broker_factory, tls_certs, zk_chroot):
    ports = {name: free_port() for name in ("PLAINTEXT", "SSL", "SASL_SSL")}
    b = broker_factory(
        0,
        start=False,
        port=ports["PLAINTEXT"],
        **{
            "listeners": ",".join(f"{name}://127.0.0.1:{port}" for name, port in ports.items()),
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "ssl.keystore.type": "PKCS12",
            "ssl.keystore.location": tls_certs.broker_p12,
            "ssl.keystore.password": KEYSTORE_PASSWORD,
        },
    )
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, mechanisms=("SCRAM-SHA-512",))
    b.start()
    b.ssl_bootstrap = f"127.0.0.1:{ports['SSL']}"
    b.sasl_ssl_bootstrap = f"127.0.0.1:{ports['SASL_SSL']}"
    return b


async def _round_trip(bootstrap: str, topic: str, **security) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", **security)
    await producer.start()
    try:
        for i in range(5):
            await producer.send_and_wait(topic, f"v{i}".encode())
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=f"g-{uuid.uuid4().hex[:6]}",
        **security,
    )  # fmt: skip
    await consumer.start()
    got = []
    try:
        while len(got) < 5:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), 30)
            got += [m.value for msgs in batch.values() for m in msgs]
    finally:
        await consumer.stop()
    return got


def test_aiokafka_over_ssl_and_sasl_ssl(broker, tls_certs):
    from aiokafka.helpers import create_ssl_context

    from pyklog.connector.client import ClusterClient

    topics = [f"aio-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    with ClusterClient(broker.bootstrap) as c:
        for t in topics:
            c.create_topic(t, 1)
    context = create_ssl_context(cafile=tls_certs.ca_pem)
    expected = [f"v{i}".encode() for i in range(5)]
    got = asyncio.run(_round_trip(broker.ssl_bootstrap, topics[0], security_protocol="SSL", ssl_context=context))
    assert got == expected
    scram = {
        "security_protocol": "SASL_SSL",
        "ssl_context": context,
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "alice",
        "sasl_plain_password": ALICE_PASSWORD,
    }
    assert asyncio.run(_round_trip(broker.sasl_ssl_bootstrap, topics[1], **scram)) == expected


def test_aiokafka_wrong_scram_password_is_refused(broker, tls_certs):
    from aiokafka import AIOKafkaProducer
    from aiokafka.errors import KafkaError
    from aiokafka.helpers import create_ssl_context

    async def attempt():
        p = AIOKafkaProducer(
            bootstrap_servers=broker.sasl_ssl_bootstrap,
            security_protocol="SASL_SSL",
            ssl_context=create_ssl_context(cafile=tls_certs.ca_pem),
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password="wrong-password-Kd9",
            request_timeout_ms=10000,
        )
        try:
            await p.start()
        finally:
            await p.stop()

    with pytest.raises(KafkaError):
        asyncio.run(attempt())
    assert "wrong-password-Kd9" not in broker.output()
