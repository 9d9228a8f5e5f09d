"""Brokers on SASL_PLAINTEXT listeners replicate to each other: the replica fetchers, the
transaction markers and controlled shutdown log in with the inter-broker credentials."""

from __future__ import annotations

import uuid

from pyklog.broker.protocol import ApiKey
from pyklog.connector.admin import AdminClient
from pyklog.connector.producer import Producer
from pyklog.connector.sasl_client import SaslCredentials
from tests.integration.security.sasl_support import (
    ADMIN_PASSWORD,
    assert_no_password_in_log,
    sasl_broker,
    sasl_security,
)
from tests.support import wait_for

ADMIN = SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD)


def test_two_sasl_brokers_replicate_and_commit_transactions(broker_factory):
    extra = {"sasl.mechanism.inter.broker.protocol": "PLAIN", "offsets.topic.replication.factor": "1"}
    brokers = [sasl_broker(broker_factory, broker_id=i, **extra) for i in (0, 1)]
    topic = f"t-{uuid.uuid4().hex[:8]}"
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import NewTopic

    ck = CkAdmin({"bootstrap.servers": brokers[0].bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": ADMIN_PASSWORD})  # fmt: skip
    for f in ck.create_topics([NewTopic(topic, 2, 2)]).values():
        f.result(30)
    conf = {"bootstrap.servers": brokers[0].bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "admin",
            "sasl.password": ADMIN_PASSWORD, "acks": "all"}  # fmt: skip
    p = Producer(conf)
    for i in range(20):
        p.send(topic, value=f"v{i}".encode(), partition=i % 2).result(30)
    p.close()

    def isr_full():
        with AdminClient(brokers[1].bootstrap, security=sasl_security(ADMIN)) as admin:
            conn = admin.client.any_connection()
            md = conn.request(ApiKey.METADATA, {"topics": [{"name": topic}]}, 1)
        parts = md["topics"][0]["partitions"]
        return len(parts) == 2 and all(sorted(pt["isr_nodes"]) == [0, 1] for pt in parts)

    wait_for(isr_full, 30, message="both replicas in the ISR (the followers fetched over SASL)")
    tp = Producer({**conf, "transactional.id": f"tx-{uuid.uuid4().hex[:6]}"})
    tp.init_transactions()
    tp.begin_transaction()
    for i in range(4):
        tp.send(topic, value=f"t{i}".encode(), partition=i % 2)
    tp.commit_transaction()  # markers written to both partitions' leaders, over SASL
    tp.close()
    for b in brokers:
        out = b.output()
        assert "failed authentication" not in out, out[-3000:]
    brokers[1].stop()
    assert "controlled shutdown failed" not in brokers[1].output()
    for b in brokers:
        assert_no_password_in_log(b)
