"""An idempotent producer's resends across a restart and a leader change.

A producer may have up to 5 batches in flight.  When the leader dies, the producer resends every
batch it has no answer for to the new leader, which must answer a batch it already holds as a
duplicate (its original offsets, nothing appended) and not OUT_OF_ORDER_SEQUENCE_NUMBER: librdkafka
treats that answer for its oldest in-flight batch as a fatal "sequence desynchronization" and the
producer dies with records unacknowledged (seen once in CI in the Spark rolling-restart test).

The new leader here is a follower that was restarted cleanly before the failure: its producer
state came back from the snapshot written at shutdown, which (in Kafka's layout) holds only each
producer's last batch; the loader reads the earlier four back from the log.  Real broker processes
and ZooKeeper, 3 brokers, replication factor 3, ``min.insync.replicas=2``; the batches are sent
with a raw Produce v8 so the test picks exactly which ones are resent.  Counts: resends answered
duplicate / out of order, what the partition holds (each sequence once, in order).
"""

from __future__ import annotations

import signal
import time
import uuid

from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from tests.integration.replication_support import (
    create_rf3_topic,
    read_back,
    start_cluster,
    state,
)
from tests.support import Wire, produce, wait_for

OUT_OF_ORDER_SEQUENCE_NUMBER = 45


def _batch(pid: int, epoch: int, seq: int, n: int = 2) -> bytes:
    now = int(time.time() * 1000)
    return build_batch(
        [(b"k", b"0:%d" % (seq + i), now, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def test_new_leader_restarted_cleanly_answers_resent_in_flight_batches_as_duplicates(broker_factory, zk, zk_chroot):
    brokers = start_cluster(broker_factory, zk)
    topic = f"idem-{uuid.uuid4().hex[:6]}"
    create_rf3_topic(zk, zk_chroot, topic, 1)  # replicas [0, 1, 2]: broker 0 leads
    assert state(zk, topic, 0)["leader"] == 0
    with Wire(brokers[0].port, timeout=30) as w:
        r = w.request(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        pid, epoch = r["producer_id"], r["producer_epoch"]
        first = {}
        for k in range(10):  # 10 batches of 2 records, sequences 0..19, acknowledged by the ISR
            resp = produce(w, topic, _batch(pid, epoch, 2 * k), acks=-1)
            assert resp["error_code"] == 0, resp
            first[k] = resp["base_offset"]
    # both followers restart cleanly: each comes back from a snapshot holding only batch 9
    for f in (1, 2):
        brokers[f].stop(signal.SIGTERM)
        brokers[f].start()
        wait_for(lambda: f in state(zk, topic, 0)["isr"], timeout=90, message=f"broker {f} back in the ISR")
    brokers[0].kill()  # the leader dies with (from the producer's view) batches 5..9 unanswered
    wait_for(lambda: state(zk, topic, 0)["leader"] in (1, 2), timeout=90, message="a new leader")
    new = state(zk, topic, 0)["leader"]
    answers = {}
    with Wire(brokers[new].port, timeout=30) as w:

        def resend(k):
            return produce(w, topic, _batch(pid, epoch, 2 * k), acks=-1)

        # the producer resends its in-flight batches oldest first; the leader may still be loading
        wait_for(
            lambda: resend(5)["error_code"] in (0, OUT_OF_ORDER_SEQUENCE_NUMBER),
            timeout=60,
            message="the new leader answering",
        )
        for k in range(5, 10):
            resp = resend(k)
            answers[k] = (resp["error_code"], resp["base_offset"])
        after = produce(w, topic, _batch(pid, epoch, 20), acks=-1)
    duplicates = sum(1 for k, (code, off) in answers.items() if code == 0 and off == first[k])
    out_of_order = sum(1 for code, _ in answers.values() if code == OUT_OF_ORDER_SEQUENCE_NUMBER)
    brokers[0].start()
    read = read_back(brokers[new].bootstrap, topic, 1)[0]
    print(
        f"\nRESENT 5 in-flight batches to the restarted new leader {new}: {duplicates} duplicates, "
        f"{out_of_order} out of order; partition holds {len(read)} records"
    )
    assert answers == {k: (0, first[k]) for k in range(5, 10)}, answers
    assert after["error_code"] == 0 and after["base_offset"] == first[9] + 2, after
    assert read == list(range(22)), read  # each sequence once, in order: nothing appended twice
