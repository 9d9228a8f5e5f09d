"""A topic deleted and created again under the same name starts empty on every replica.  Three
brokers; each round writes records, stops one broker (SIGSTOP, within its ZooKeeper session) so
that it cannot delete its replicas, deletes the topic and tries to create it again at once: the
creation is refused ("marked for deletion", Kafka's controller-driven deletion waits for every
replica) until the broker resumes, deletes its logs and the controller completes the deletion;
then every replica of the new topic holds only the new round's records (counted).  A second
producer writes throughout the deletion (librdkafka's regex-subscription test deletes a topic
under a writing client, whose Metadata requests auto-create it): its acknowledged records all
went to the deleted topic and none reads back from the new one, and its auto-creation is refused
while the deletion runs."""

from __future__ import annotations

import os
import signal
import threading
import time

from tests.integration.replication_support import (
    consume_all,
    log_end_offset,
    produce_acks_all,
    start_brokers,
)
from tests.support import wait_for

TOPIC = "recreated"


class _Writer(threading.Thread):
    """A confluent-kafka producer (acks=all, topic auto-creation allowed) writing ``bg<round>-<n>``
    until stopped; the acknowledged values."""

    def __init__(self, bootstrap: str, rnd: int):
        super().__init__(daemon=True, name="writer")
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 1000,
                "topic.metadata.refresh.interval.ms": 200,
                "allow.auto.create.topics": True,
                "log_level": 0,
            }
        )
        self.rnd = rnd
        self.acked: list[bytes] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        n = 0
        while not self.stop_event.is_set():
            try:
                self.producer.produce(
                    TOPIC,
                    b"bg%d-%d" % (self.rnd, n),
                    on_delivery=lambda e, m: e is None and self.acked.append(m.value()),
                )
                n += 1
            except BufferError:
                pass
            self.producer.poll(0.01)
        self.producer.flush(5)

    def stop(self) -> list[bytes]:
        self.stop_event.set()
        self.join(30)
        return list(self.acked)


PARTITIONS = 3
PER_PARTITION = 5


def test_a_recreated_topic_never_holds_records_of_the_deleted_one(broker_factory):
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    # a topic auto-created by the writer's Metadata requests gets the same layout as create()'s
    brokers = start_brokers(broker_factory, 3, num_partitions=PARTITIONS, default_replication_factor=3)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})

    def create():
        def attempt():
            try:
                admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(
                    30
                )
                return True
            except KafkaException as e:  # still marked for deletion: again
                err = e.args[0]
                # the writer's Metadata requests (its client lives on) auto-created it once the
                # deletion was complete, as librdkafka's test sees
                return err.code() == KafkaError.TOPIC_ALREADY_EXISTS and "already exists" in err.str()

        wait_for(attempt, 60, interval=0.05, message="the topic created")

    create()
    old_values = set()
    for rnd in range(4):
        values = [f"round{rnd}-p{p}-{i}".encode() for p in range(PARTITIONS) for i in range(PER_PARTITION)]
        acked = []
        for p in range(PARTITIONS):
            got, errors = produce_acks_all(
                brokers[0].bootstrap, TOPIC, [v for v in values if f"-p{p}-".encode() in v], partition=p
            )
            assert errors == [] and len(got) == PER_PARTITION
            acked += got
        assert sorted(o for part, o, _ in acked if part == 0) == list(range(PER_PARTITION)), (
            f"round {rnd}: the re-created topic's partition 0 did not start at offset 0: {acked}"
        )
        for b in brokers:  # every replica holds exactly this round's records
            for p in range(PARTITIONS):
                wait_for(
                    lambda b=b, p=p: log_end_offset(b, TOPIC, p) == PER_PARTITION,
                    60,
                    message=f"round {rnd}: broker {b.broker_id}'s replica of {TOPIC}-{p} holds {PER_PARTITION} records",
                )
        read = consume_all(brokers[0].bootstrap, TOPIC, range(PARTITIONS), len(values))
        got_values = {v for _, _, v in read}
        assert got_values == set(values), f"round {rnd}: read {sorted(got_values - set(values))[:5]} besides"
        came_back = got_values & old_values
        assert not came_back, f"round {rnd}: {len(came_back)} record(s) of the deleted topic read back"
        old_values |= got_values
        late = brokers[1 + rnd % 2]  # never broker 0, which answers the admin requests
        writer = _Writer(",".join(b.bootstrap for b in brokers), rnd)
        writer.start()
        wait_for(lambda: len(writer.acked) >= 20, 30, message=f"round {rnd}: the writer's first acknowledgements")
        os.kill(late.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            admin.delete_topics([TOPIC], operation_timeout=30)[TOPIC].result(30)  # until hidden
            # at once: the stopped broker still holds its replicas, so the deletion is not complete
            refused = admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC]
            try:
                refused.result(30)
                raise AssertionError(f"round {rnd}: created again while its deletion was in progress")
            except KafkaException as e:
                err = e.args[0]
                assert err.code() == KafkaError.TOPIC_ALREADY_EXISTS, err
                assert f"Topic '{TOPIC}' is marked for deletion." in err.str(), err
            # hidden from Metadata as soon as the controller started deleting it, and the writer's
            # Metadata requests do not create it again
            time.sleep(0.5)
            assert TOPIC not in admin.list_topics(timeout=10).topics
            written = writer.stop()
            assert TOPIC not in admin.list_topics(timeout=10).topics
            old_values |= set(written)
        finally:
            writer.stop_event.set()
            os.kill(late.proc.pid, signal.SIGCONT)
        resumed = time.monotonic()
        create()  # succeeds once the resumed broker deleted its replicas and the controller completed
        took, after_resume = time.monotonic() - t0, time.monotonic() - resumed
        print(
            f"round {rnd}: deleted and re-created in {1000 * took:.0f} ms, {1000 * after_resume:.0f} ms after "
            f"broker {late.broker_id} resumed; "
            f"{len(written)} record(s) acknowledged to the deleted topic by the writer"
        )
