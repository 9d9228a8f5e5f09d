"""A SASL_PLAINTEXT broker with PLAIN and SCRAM-SHA-256/512: stock clients (kafka-python,
confluent-kafka) produce and consume with the right password and are refused with a wrong one."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.integration.security.sasl_support import (
    ADMIN_PASSWORD,
    ALICE_PASSWORD,
    add_scram_user,
    assert_no_password_in_log,
    sasl_broker,
)

MECHS = ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


@pytest.fixture
def broker(broker_factory, zk_chroot):
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD)
    return sasl_broker(broker_factory)


def _kp_conf(b, mech, user, password):
    return dict(
        bootstrap_servers=b.bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mech,
        sasl_plain_username=user,
        sasl_plain_password=password,
        request_timeout_ms=15000,
    )


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python_produces_and_consumes(broker, mech):
    from kafka import KafkaConsumer, KafkaProducer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    p = KafkaProducer(**_kp_conf(broker, mech, "alice", ALICE_PASSWORD))
    for i in range(10):
        p.send(topic, f"v{i}".encode()).get(timeout=30)
    p.close()
    c = KafkaConsumer(
        topic,
        auto_offset_reset="earliest",
        consumer_timeout_ms=30000,
        **_kp_conf(broker, mech, "alice", ALICE_PASSWORD),
    )
    got = []
    for m in c:  # stops at the tenth record (or after 30 s without one)
        got.append(m.value)
        if len(got) == 10:
            break
    c.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mech", MECHS)
def test_kafka_python_wrong_password_is_refused(broker, mech):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    with pytest.raises(KafkaError) as info:
        # api_version given: no version probing before the login (which would wait out its timeout)
        p = KafkaProducer(
            max_block_ms=5000, api_version=(2, 6), **_kp_conf(broker, mech, "alice", "wrong-password-Kd9")
        )
        p.send("t-refused", b"x").get(timeout=10)
    text = repr(info.value) + str(info.value)
    assert "wrong-password-Kd9" not in text
    assert_no_password_in_log(broker)


def _ck_conf(b, mech, user, password):
    return {
        "bootstrap.servers": b.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mech,
        "sasl.username": user,
        "sasl.password": password,
    }


@pytest.mark.parametrize("mech", MECHS)
def test_confluent_kafka_produces_and_consumes(broker, mech):
    from confluent_kafka import Consumer, Producer

    topic = f"t-{uuid.uuid4().hex[:8]}"
    user, pw = ("admin", ADMIN_PASSWORD) if mech == "PLAIN" else ("alice", ALICE_PASSWORD)
    p = Producer(_ck_conf(broker, mech, user, pw))
    acked = []
    for i in range(10):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(30) == 0
    assert acked == [None] * 10
    c = Consumer(
        {**_ck_conf(broker, mech, user, pw), "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"}
    )
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 10 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(10)]


@pytest.mark.parametrize("mech", MECHS)
def test_confluent_kafka_wrong_password_gets_the_authentication_error(broker, mech):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import AdminClient

    errors = []
    conf = {**_ck_conf(broker, mech, "alice", "wrong-password-Kd9"), "error_cb": errors.append}
    admin = AdminClient(conf)
    with pytest.raises(Exception):  # noqa: B017 - nothing is served: metadata cannot be read
        admin.list_topics(timeout=5)
    for _ in range(10):  # error_cb runs in poll()
        admin.poll(0.5)
        if errors:
            break
    auth = [e for e in errors if e.code() == KafkaError._AUTHENTICATION]
    assert auth, errors
    text = " ".join(e.str() for e in auth)
    assert "Authentication failed" in text and "wrong-password-Kd9" not in text
    assert_no_password_in_log(broker)


def test_oauthbearer_unsecured_tokens(broker_factory):
    """Kafka's unsecured JWS (development only): librdkafka's built-in unsecured token and pyklog's
    client log in as the token's subject; a token the validator refuses fails with Kafka's answer."""
    from confluent_kafka import Consumer, Producer

    from pyklog.broker.errors import SaslAuthenticationError
    from pyklog.connector.client import BrokerConnection
    from pyklog.connector.sasl_client import SaslCredentials

    b = sasl_broker(
        broker_factory,
        mechanisms="OAUTHBEARER",
        **{
            "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                'unsecuredValidatorRequiredScope="kafka";'
            )
        },
    )
    assert "accepts Kafka's unsecured" in b.output()
    topic = f"t-{uuid.uuid4().hex[:8]}"
    conf = {
        "bootstrap.servers": b.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "OAUTHBEARER",
        "enable.sasl.oauthbearer.unsecure.jwt": True,
        "sasl.oauthbearer.config": "principal=alice scope=kafka",
    }
    p = Producer(conf)
    acked = []
    for i in range(5):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda err, msg: acked.append(err))
    assert p.flush(30) == 0 and acked == [None] * 5
    c = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:6]}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert got == [f"v{i}".encode() for i in range(5)]
    # pyklog's client: its unsecured token has no scope, which this listener requires
    with pytest.raises(SaslAuthenticationError, match="insufficient_scope"):
        BrokerConnection("127.0.0.1", b.port, sasl=SaslCredentials("OAUTHBEARER", "alice"), timeout_s=10)
    assert "failed authentication" in b.output()


def test_oauthbearer_pyklog_client(broker_factory):
    from pyklog.broker.protocol import ApiKey
    from pyklog.connector.client import BrokerConnection
    from pyklog.connector.sasl_client import SaslCredentials

    b = sasl_broker(broker_factory, mechanisms="PLAIN,OAUTHBEARER")
    jaas = (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        'unsecuredLoginStringClaim_sub="alice";'
    )
    creds = SaslCredentials.from_config({"sasl.mechanism": "OAUTHBEARER", "sasl.jaas.config": jaas})
    conn = BrokerConnection("127.0.0.1", b.port, sasl=creds, timeout_s=10)
    assert conn.request(ApiKey.METADATA, {"topics": None})["brokers"]
    conn.close()
