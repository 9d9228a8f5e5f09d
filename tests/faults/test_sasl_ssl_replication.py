"""Replication over SASL_SSL: three brokers whose only listener is SASL_SSL (their replica fetchers,
the controller's requests and the transaction markers log in as ``admin`` over TLS), a topic with
replication factor 3 and ``min.insync.replicas=2``, pyklog's idempotent producer (acks=all,
SCRAM-SHA-512 as ``alice``) writing while the leader of every partition is SIGKILLed in turn and
restarted.  Counts (printed with ``-s``): acknowledged, read back (confluent-kafka over SASL_SSL),
lost, duplicated, out of order; every acknowledged record is read back exactly once."""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

from tests.integration.replication_support import CLUSTER_PROPS, bounce, count, create_rf3_topic, read_back, state
from tests.integration.security.sasl_support import ADMIN_PASSWORD, ALICE_PASSWORD, add_scram_user
from tests.integration.security.tls_broker_support import start_sasl_ssl_broker, tls_certs
from tests.support import wait_for
from tests.tls_support import KEYSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

PARTITIONS = 2


def _start(broker_factory, certs, zk, zk_chroot) -> dict:
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, mechanisms=("SCRAM-SHA-512",))
    brokers = {}
    users = {"username": "admin", "password": ADMIN_PASSWORD, "user_admin": ADMIN_PASSWORD}
    for i in range(3):
        brokers[i] = start_sasl_ssl_broker(broker_factory, certs, i, plain_users=users, **CLUSTER_PROPS)
    wait_for(lambda: len(zk.get_children("/brokers/ids")) == 3, timeout=60, message="3 brokers registered")
    return brokers


def test_acks_all_over_sasl_ssl_through_leader_sigkills(broker_factory, tls_certs, zk, zk_chroot):
    from pyklog.connector.producer import Producer

    brokers = _start(broker_factory, tls_certs, zk, zk_chroot)
    topic = f"sasl-ssl-{uuid.uuid4().hex[:8]}"
    create_rf3_topic(zk, zk_chroot, topic, PARTITIONS)
    wait_for(
        lambda: all(len(state(zk, topic, p)["isr"]) == 3 for p in range(PARTITIONS)),
        timeout=90,
        message="full ISRs over SASL_SSL",
    )
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    acked = {p: [] for p in range(PARTITIONS)}
    ack_times = {p: [] for p in range(PARTITIONS)}
    failed: list = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = dict.fromkeys(range(PARTITIONS), 0)
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "security.protocol": "SASL_SSL",
            "ssl.truststore.location": tls_certs.ca_pem,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": ALICE_PASSWORD,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "request.timeout.ms": 10000,
            "retry.backoff.ms": 100,
            "delivery.timeout.ms": 120000,
            "metadata.max.age.ms": 5000,
        }
    )

    def on_delivery(exc, p, seq):
        with lock:
            if exc is not None:
                failed.append((p, seq, repr(exc)))
            else:
                acked[p].append(seq)
                ack_times[p].append(time.monotonic())

    def produce_loop():
        while not stop.is_set():
            for p in range(PARTITIONS):
                seq = sent[p]
                producer.produce(
                    topic,
                    value=f"{p}:{seq}".encode(),
                    partition=p,
                    on_delivery=lambda md, exc, p=p, seq=seq: on_delivery(exc, p, seq),
                )
                sent[p] += 1
            time.sleep(0.005)

    t = threading.Thread(target=produce_loop, name="sasl-ssl-producer", daemon=True)
    t.start()
    events = []
    try:
        wait_for(lambda: all(acked[p] for p in range(PARTITIONS)), timeout=60, message="first acks")
        for victim in sorted({state(zk, topic, p)["leader"] for p in range(PARTITIONS)}):
            t0 = time.monotonic()
            events.append(bounce(brokers, zk, {topic: PARTITIONS}, victim, signal.SIGKILL))
            wait_for(
                lambda t0=t0: all(ack_times[p] and ack_times[p][-1] > t0 for p in range(PARTITIONS)),
                timeout=90,
                message="acks on every partition after the bounce",
            )
    finally:
        stop.set()
        t.join(30)
        producer.flush(150)
        producer.close(30)

    read = read_back(
        bootstrap,
        topic,
        PARTITIONS,
        **{
            "security.protocol": "SASL_SSL",
            "ssl.ca.location": tls_certs.ca_pem,
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": ALICE_PASSWORD,
        },
    )
    counts = count(acked, read)
    counts.update(sent=sum(sent.values()), failed=len(failed), failed_examples=failed[:5], bounces=events)
    print("\nSASL_SSL PRODUCER COUNTS " + json.dumps(counts))
    assert counts["failed"] == 0, counts
    assert counts["acknowledged"] == counts["sent"], counts
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["out_of_order"] == 0, counts
    for b in brokers.values():
        out = b.output()
        assert ADMIN_PASSWORD not in out and ALICE_PASSWORD not in out and KEYSTORE_PASSWORD not in out
