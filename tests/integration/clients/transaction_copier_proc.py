"""A consume-transform-produce copier (Kafka's ``TransactionalMessageCopier``, as used by
tests/kafkatest/tests/core/transactions_test.py), with stock confluent-kafka clients:

    python tests/integration/clients/transaction_copier_proc.py --bootstrap HOST:PORT --input A --output B --group G
                                    --transactional-id T [--batch 500]

The transactional producer initialises first (``init_transactions`` fences an earlier instance
with the same transactional id and completes or aborts its open transaction), then the consumer
(``isolation.level=read_committed``, ``enable.auto.commit=false``) is assigned every partition of
the input topic (or, with ``--subscribe``, joins the group as a static member) and starts from the
group's committed offsets.  Each batch of consumed records is
copied to the same partition of the output topic inside one transaction, with
``send_offsets_to_transaction(positions, consumer_group_metadata())``, then committed.  Prints
``READY`` when initialised, ``OFFSETS_SENT`` once ``send_offsets_to_transaction`` returned (the
offsets are pending in the group's coordinator), ``COMMITTED <records> <total>`` after each commit and ``DONE`` (exit
0) once its positions reach the input's end.  Any error exits with status 3 after printing
``ERROR <what>``: the test restarts it with the same transactional id, which is the recovery
being tested.
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
from tests.integration.transaction_support import child_parser  # noqa: E402  (run as a script: the repository root first)


def main(argv=None) -> int:
    ap = child_parser("--bootstrap", "--input", "--output", "--group", "--transactional-id")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--timeout-s", type=float, default=30.0)
    ap.add_argument(
        "--subscribe",
        metavar="INSTANCE_ID",
        help="join the group (subscribe, static member INSTANCE_ID) instead of assigning every partition",
    )
    ap.add_argument(
        "--hold-before-commit-ms",
        type=int,
        default=0,
        help="pause between send_offsets_to_transaction and commit_transaction (gives a test "
        "the moment where the offsets are pending)",
    )
    args = ap.parse_args(argv)

    from confluent_kafka import (
        OFFSET_BEGINNING,
        Consumer,
        KafkaException,
        Producer,
        TopicPartition,
    )

    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.transactional_id,
            "transaction.timeout.ms": 20000,
            "linger.ms": 5,
            "message.timeout.ms": 20000,
            "reconnect.backoff.max.ms": 500,
        }
    )
    consumer = None
    try:
        producer.init_transactions(args.timeout_s)
        conf = {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "reconnect.backoff.max.ms": 500,
        }
        if args.subscribe:
            # static membership (KIP-345): a restarted instance takes its predecessor's place at once
            conf.update({"group.instance.id": args.subscribe, "session.timeout.ms": 10000})
        consumer = Consumer(conf)
        meta = consumer.list_topics(args.input, timeout=args.timeout_s).topics[args.input]
        parts = sorted(meta.partitions)
        ends = {}
        for p in parts:
            _, high = consumer.get_watermark_offsets(TopicPartition(args.input, p), timeout=args.timeout_s)
            ends[p] = high
        committed = consumer.committed([TopicPartition(args.input, p) for p in parts], timeout=args.timeout_s)
        start = [
            TopicPartition(args.input, tp.partition, tp.offset if tp.offset >= 0 else OFFSET_BEGINNING)
            for tp in committed
        ]
        if args.subscribe:
            consumer.subscribe([args.input])  # the group's assignment starts at the committed offsets
        else:
            consumer.assign(start)
        positions = {tp.partition: max(tp.offset, 0) for tp in committed}
        print(f"READY {' '.join(f'{p}:{positions[p]}' for p in parts)}", flush=True)
        total = 0
        while True:
            if all(positions[p] >= ends[p] for p in parts):
                print(f"DONE {total}", flush=True)
                return 0
            msgs = consumer.consume(num_messages=args.batch, timeout=1.0)
            msgs = [m for m in msgs if m.error() is None or _raise(m.error())]
            if not msgs:
                continue
            producer.begin_transaction()
            for m in msgs:
                producer.produce(args.output, value=m.value(), key=m.key(), partition=m.partition())
                positions[m.partition()] = m.offset() + 1
                producer.poll(0)
            offsets = [TopicPartition(args.input, p, positions[p]) for p in parts]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), args.timeout_s)
            print("OFFSETS_SENT", flush=True)
            if args.hold_before_commit_ms:
                time.sleep(args.hold_before_commit_ms / 1000.0)
            producer.commit_transaction(args.timeout_s)
            total += len(msgs)
            print(f"COMMITTED {len(msgs)} {total}", flush=True)
    except KafkaException as e:
        err = e.args[0] if e.args else e
        print(f"ERROR {err}", flush=True)
        return 3
    finally:
        if consumer is not None:
            try:
                consumer.close()
            except Exception:  # noqa: BLE001
                pass


def _raise(err):
    from confluent_kafka import KafkaError, KafkaException

    if err.code() == KafkaError._PARTITION_EOF:
        return False
    raise KafkaException(err)


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.exit(rc)
