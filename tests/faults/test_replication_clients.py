"""pyklog's own clients across leader changes: 3 brokers, replication factor 3,
``min.insync.replicas=2``; the leaders are SIGKILLed (and stopped with SIGTERM, a controlled
shutdown) and restarted while the clients run.

* pyklog's :class:`~connector.producer.Producer` with ``acks=all`` and idempotence: every acknowledged
  record is read back exactly once, in order per partition, and no send fails (every error of a leader
  change is retriable and retried within delivery.timeout.ms);
* pyklog's consumers (:class:`~connector.consumer.SimpleConsumer` and the high-level
  :class:`~connector.high_level.ConsumerConnector`) read while the leaders move: no gap, no duplicate,
  nothing that was not acknowledged (nothing beyond the high watermark), no error raised to the reader.

Every test prints its counts (``-s``): acknowledged, read, lost, duplicated, out of order, phantom.
The leader epoch a Fetch carries is checked in tests/integration/replication/test_clients.py.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import uuid

from tests.integration.replication_support import (
    bounce,
    count,
    create_rf3_topic,
    read_back,
    ride_out_producer_config,
    start_cluster,
    state,
)
from tests.support import wait_for

PARTITIONS = 3


def test_pyklog_idempotent_producer_through_leader_changes(broker_factory, zk, zk_chroot):
    """pyklog's Producer (acks=all, idempotence) while each broker in turn is SIGKILLed as a leader
    and restarted, then once more stopped with SIGTERM: 0 lost, 0 duplicated, 0 out of order, 0
    failed sends."""
    from pyklog.connector.producer import Producer

    brokers = start_cluster(broker_factory, zk)
    topic = f"rc-prod-{uuid.uuid4().hex[:8]}"
    create_rf3_topic(zk, zk_chroot, topic, PARTITIONS)
    bootstrap = ",".join(b.bootstrap for b in brokers.values())

    acked = {p: [] for p in range(PARTITIONS)}
    ack_times = {p: [] for p in range(PARTITIONS)}
    failed: list = []
    lock = threading.Lock()
    stop = threading.Event()
    sent = dict.fromkeys(range(PARTITIONS), 0)
    producer = Producer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=5,
        request_timeout_ms=10000,
        retry_backoff_ms=100,
        delivery_timeout_ms=120000,
        metadata_max_age_ms=5000,
    )

    def on_delivery(md, exc, p, seq):
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
                    on_delivery=lambda md, exc, p=p, seq=seq: on_delivery(md, exc, p, seq),
                )
                sent[p] += 1
            time.sleep(0.002)

    t = threading.Thread(target=produce_loop, name="rc-producer", daemon=True)
    t.start()
    events = []
    try:
        wait_for(lambda: all(acked[p] for p in range(PARTITIONS)), timeout=60, message="first acks")
        plan = [(state(zk, topic, p)["leader"], signal.SIGKILL) for p in range(PARTITIONS)]
        plan.append((state(zk, topic, 0)["leader"], signal.SIGTERM))
        for victim, sig in plan:
            t0 = time.monotonic()
            events.append(bounce(brokers, zk, {topic: PARTITIONS}, victim, sig))
            # acknowledgements continue on every partition after the bounce
            wait_for(
                lambda: all(ack_times[p] and ack_times[p][-1] > t0 for p in range(PARTITIONS)),
                timeout=90,
                message=f"acks on every partition after bouncing broker {victim}",
            )
    finally:
        stop.set()
        t.join(30)
        producer.flush(150)
        producer.close(30)

    read = read_back(bootstrap, topic, PARTITIONS)
    counts = count(acked, read)
    counts.update(sent=sum(sent.values()), failed=len(failed), failed_examples=failed[:5], bounces=events)
    print("\nPYKLOG PRODUCER COUNTS " + json.dumps(counts))
    assert counts["failed"] == 0, counts
    assert counts["acknowledged"] == counts["sent"], counts
    assert counts["lost"] == 0 and counts["duplicated"] == 0 and counts["out_of_order"] == 0, counts


def test_pyklog_consumers_read_through_leader_changes(broker_factory, zk, zk_chroot):
    """confluent-kafka produces (acks=all, idempotence) while pyklog's SimpleConsumer and high-level
    ConsumerConnector read the topic and each broker in turn is SIGKILLed (then one SIGTERM): each
    consumer reads every acknowledged record exactly once, in order, nothing never acknowledged
    (nothing beyond the high watermark), and its reader sees no error."""
    from confluent_kafka import Producer as CkProducer

    from pyklog.connector.consumer import SimpleConsumer
    from pyklog.connector.high_level import ConsumerConnector

    brokers = start_cluster(broker_factory, zk)
    topic = f"rc-cons-{uuid.uuid4().hex[:8]}"
    create_rf3_topic(zk, zk_chroot, topic, PARTITIONS)
    bootstrap = ",".join(b.bootstrap for b in brokers.values())

    acked = {p: [] for p in range(PARTITIONS)}
    failed: list = []
    lock = threading.Lock()
    stop_producing = threading.Event()
    stop_reading = threading.Event()
    producer = CkProducer(ride_out_producer_config(bootstrap, **{"retry.backoff.ms": 100, "log_level": 0}))

    def on_delivery(err, msg):
        p, seq = (int(x) for x in msg.value().decode().split(":"))
        with lock:
            (failed.append((p, seq, str(err))) if err is not None else acked[p].append(seq))

    def produce_loop():
        n = dict.fromkeys(range(PARTITIONS), 0)
        while not stop_producing.is_set():
            for p in range(PARTITIONS):
                try:
                    producer.produce(topic, value=f"{p}:{n[p]}".encode(), partition=p, on_delivery=on_delivery)
                    n[p] += 1
                except BufferError:
                    pass
            producer.poll(0.005)
        producer.flush(150)

    simple_read = {p: [] for p in range(PARTITIONS)}
    simple_errors: list = []
    simple = SimpleConsumer(bootstrap, max_wait_ms=200, request_timeout_ms=30000)

    def simple_loop():
        offsets = dict.fromkeys(range(PARTITIONS), 0)
        while not stop_reading.is_set():
            try:
                got = simple.multi_fetch({(topic, p): (offsets[p], 1 << 20) for p in range(PARTITIONS)})
            except Exception as e:  # noqa: BLE001 - counted: the reader must never see one
                simple_errors.append(repr(e))
                time.sleep(0.2)
                continue
            for p in range(PARTITIONS):
                r = got[(topic, p)]
                simple_read[p].extend(int(rec.value.decode().split(":")[1]) for rec in r.records)
                offsets[p] = r.next_offset

    hl_read = {p: [] for p in range(PARTITIONS)}
    hl_errors: list = []
    connector = ConsumerConnector(
        {
            "zookeeper.connect": zk_chroot,
            "bootstrap.servers": bootstrap,
            "group.id": f"rc-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "smallest",
            "auto.commit.enable": False,
            "consumer.timeout.ms": 200,
        }
    )
    stream = connector.create_message_streams({topic: 1})[topic][0]

    def hl_loop():
        while not stop_reading.is_set():
            try:
                for rec in stream:
                    hl_read[rec.partition].append(int(rec.value.decode().split(":")[1]))
            except Exception as e:  # noqa: BLE001 - counted (consumer.timeout.ms ends an iteration quietly)
                if type(e).__name__ != "ConsumerTimeoutError":
                    hl_errors.append(repr(e))
                    time.sleep(0.2)

    threads = [threading.Thread(target=f, name=f.__name__, daemon=True) for f in (produce_loop, simple_loop, hl_loop)]
    for th in threads:
        th.start()
    events = []
    try:
        wait_for(
            lambda: all(simple_read[p] and hl_read[p] for p in range(PARTITIONS)),
            timeout=60,
            message="both consumers reading",
        )
        plan = [(state(zk, topic, p)["leader"], signal.SIGKILL) for p in range(PARTITIONS)]
        plan.append((state(zk, topic, 1)["leader"], signal.SIGTERM))
        for victim, sig in plan:
            events.append(bounce(brokers, zk, {topic: PARTITIONS}, victim, sig))
        stop_producing.set()
        threads[0].join(180)
        total = lambda r: sum(len(v) for v in r.values())  # noqa: E731
        n_acked = sum(len(v) for v in acked.values())
        for name, r in (("SimpleConsumer", simple_read), ("ConsumerConnector", hl_read)):
            try:
                wait_for(lambda r=r: total(r) >= n_acked, timeout=90, message=f"{name} drained")
            except Exception:  # noqa: BLE001 - the counts below say what is missing
                pass
        time.sleep(1.0)  # a duplicate arriving late is counted too
    finally:
        stop_producing.set()
        stop_reading.set()
        for th in threads:
            th.join(60)
        connector.shutdown()
        simple.close()

    out = {"failed_sends": len(failed), "bounces": events}
    for name, r, errs in (("simple", simple_read, simple_errors), ("high_level", hl_read, hl_errors)):
        c = count(acked, r)
        c.update(errors=len(errs), error_examples=errs[:5])
        out[name] = c
    print("\nPYKLOG CONSUMER COUNTS " + json.dumps(out))
    assert out["failed_sends"] == 0, out
    for name in ("simple", "high_level"):
        c = out[name]
        assert c["acknowledged"] > 0 and c["errors"] == 0, (name, out)
        assert (c["lost"], c["duplicated"], c["out_of_order"], c["phantom"]) == (0, 0, 0, 0), (name, out)
