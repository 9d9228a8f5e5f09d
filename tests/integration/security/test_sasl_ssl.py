"""SASL over TLS (SASL_SSL) with the authorizer: the user a client logs in as is the principal the
ACLs name.  One broker whose only listener is SASL_SSL (its own connections log in as the super
user ``admin``); ``alice`` (SCRAM-SHA-512) may write and read one topic with her group, ``bob``
(PLAIN) may do nothing.  Stock clients and pyklog's clients, the passwords never in the log."""

from __future__ import annotations

import time
import uuid

import pytest

from pyklog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from tests.integration.security.sasl_support import ADMIN_PASSWORD, ALICE_PASSWORD, add_scram_user
from tests.integration.security.tls_broker_support import start_sasl_ssl_broker, tls_certs
from tests.tls_support import KEYSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

BOB_PASSWORD = "bob-secret-Lm4"
SECRETS = (ADMIN_PASSWORD, ALICE_PASSWORD, BOB_PASSWORD, KEYSTORE_PASSWORD)


@pytest.fixture
def broker(broker_factory, tls_certs, zk_chroot):
    plain_users = {
        "username": "admin",
        "password": ADMIN_PASSWORD,
        "user_admin": ADMIN_PASSWORD,
        "user_bob": BOB_PASSWORD,
    }
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, mechanisms=("SCRAM-SHA-512",))
    return start_sasl_ssl_broker(
        broker_factory,
        tls_certs,
        plain_users=plain_users,
        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:admin"},
    )


def _security(tls_certs, mech, user, password) -> dict:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": tls_certs.ca_pem,
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": password,
    }


def _ck(b, tls_certs, mech, user, password) -> dict:
    return {
        "bootstrap.servers": b.bootstrap,
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": tls_certs.ca_pem,
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": password,
    }


def _allow(principal, rtype, name, *ops):
    return [
        AclBinding(
            ResourcePattern(rtype, name),
            AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW),
        )
        for op in ops
    ]


def test_named_principals_over_sasl_ssl(broker, tls_certs):
    from confluent_kafka import Consumer, KafkaError, Producer

    from pyklog.connector.admin import AdminClient
    from pyklog.connector.producer import Producer as PyklogProducer

    topic, group = f"t-{uuid.uuid4().hex[:8]}", f"g-{uuid.uuid4().hex[:6]}"
    with AdminClient(broker.bootstrap, security=_security(tls_certs, "PLAIN", "admin", ADMIN_PASSWORD)) as admin:
        admin.client.create_topic(topic, 1, timeout_s=30)
        results = admin.create_acls(
            _allow("User:alice", ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
            + _allow("User:alice", ResourceType.GROUP, group, AclOperation.READ)
        )
        assert results == [None, None, None]

    # alice (SCRAM-SHA-512): confluent-kafka writes, pyklog writes, confluent-kafka reads with her group
    p = Producer(_ck(broker, tls_certs, "SCRAM-SHA-512", "alice", ALICE_PASSWORD))
    acked = []
    deadline = time.monotonic() + 30
    while not acked and time.monotonic() < deadline:  # the ACLs reach the broker through notifications
        errs = []
        p.produce(topic, b"from-ck", on_delivery=lambda err, msg: (acked if err is None else errs).append(err))
        p.flush(10)
        if not acked:
            time.sleep(0.2)
    assert acked, "alice could not write"
    with PyklogProducer(
        {"bootstrap.servers": broker.bootstrap, **_security(tls_certs, "SCRAM-SHA-512", "alice", ALICE_PASSWORD)}
    ) as pp:
        pp.send(topic, value=b"from-pyklog").result(30)
    c = Consumer(
        {**_ck(broker, tls_certs, "SCRAM-SHA-512", "alice", ALICE_PASSWORD), "group.id": group,
         "auto.offset.reset": "earliest"}
    )  # fmt: skip
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 2 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert sorted(got) == [b"from-ck", b"from-pyklog"]

    # bob (PLAIN) logs in, but is not allowed to write the topic
    bob_errors = []
    pb = Producer({**_ck(broker, tls_certs, "PLAIN", "bob", BOB_PASSWORD), "message.timeout.ms": 10000})
    pb.produce(topic, b"from-bob", on_delivery=lambda err, msg: bob_errors.append(err))
    pb.flush(20)
    assert bob_errors and bob_errors[0] is not None
    assert bob_errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, bob_errors

    out = broker.output()
    for s in SECRETS:
        assert s not in out, "a password reached the broker's log"
