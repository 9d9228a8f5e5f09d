"""A topic deleted and created again at once under the same name starts empty on every replica
(KIP-516's partition.metadata: a log left behind by the deleted topic is recognised by its topic id
and deleted, never served).  Three brokers; each round writes records, stops one broker (SIGSTOP,
well within its ZooKeeper session) so that it cannot remove its logs of the topic, deletes the topic
and re-creates it within milliseconds, resumes the broker, then counts what every replica holds."""

from __future__ import annotations

import os
import signal
import time

from tests.integration.replication_support import (
    consume_all,
    log_end_offset,
    produce_acks_all,
    start_brokers,
)
from tests.support import wait_for

TOPIC = "recreated"
PARTITIONS = 3
PER_PARTITION = 5


def test_a_recreated_topic_never_holds_records_of_the_deleted_one(broker_factory):
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_brokers(broker_factory, 3)
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})

    def create():
        def attempt():
            try:
                admin.create_topics([NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)])[TOPIC].result(
                    30
                )
                return True
            except Exception:  # noqa: BLE001 - the deletion not yet seen by the broker answering: again
                return False

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
        assert not got_values & old_values
        old_values |= got_values
        late = brokers[1 + rnd % 2]  # never broker 0, which answers the admin requests
        os.kill(late.proc.pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            admin.delete_topics([TOPIC])[TOPIC].result(30)
            create()  # at once: the stopped broker still holds its logs of the deleted topic
            took = time.monotonic() - t0
        finally:
            os.kill(late.proc.pid, signal.SIGCONT)
        print(f"round {rnd}: deleted and re-created in {1000 * took:.0f} ms while broker {late.broker_id} was stopped")
