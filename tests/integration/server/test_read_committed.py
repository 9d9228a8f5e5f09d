"""pyklog's consumers against real transactions written by confluent-kafka's transactional producer.

Three transactional producers (librdkafka) and one plain idempotent producer write to 3 partitions;
their transactions are open at the same time, interleaved record by record, every third one
aborted (after its records were acknowledged, so they are in the log).  Expected, per partition
and in offset order: the committed and plain records (read_committed), every data record and no
control record (read_uncommitted).  Checked with pyklog's SimpleConsumer, the high-level
ConsumerConnector and the Spark source (batch read through the shared SparkSession); an open
transaction holds every read_committed reader at the last stable offset until it ends.
"""

from __future__ import annotations

import uuid

import pytest

from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from tests.integration.transaction_support import TXN_PROPS, read_confluent
from tests.support import wait_for

PARTITIONS = 3


def _confluent_txn_producer(bootstrap: str):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cf-{uuid.uuid4().hex[:8]}", "linger.ms": 1})
    p.init_transactions(30)
    return p


def write_interleaved(bootstrap: str, topic: str, rounds: int = 9) -> tuple[dict, dict]:
    """The workload of the module docstring.  Returns ``(committed, everything)``: ``{partition:
    [(offset, value)]}`` sorted by offset, from the producers' delivery reports."""
    from confluent_kafka import Producer

    txn = [_confluent_txn_producer(bootstrap) for _ in range(3)]
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 1})
    acked: dict = {}  # value -> (partition, offset)

    def on_delivery(err, msg):
        assert err is None, err
        acked[msg.value()] = (msg.partition(), msg.offset())

    committed_values, all_values = set(), set()
    for r in range(rounds):
        for p in txn:
            p.begin_transaction()
        pending: list[list[bytes]] = [[] for _ in txn]
        for k in range(6):  # record by record, producer by producer: interleaved in every partition
            for i, p in enumerate(txn):
                v = f"r{r}-p{i}-k{k}".encode()
                p.produce(topic, v, partition=(k + i) % PARTITIONS, on_delivery=on_delivery)
                p.poll(0)
                pending[i].append(v)
            v = f"r{r}-plain-k{k}".encode()
            plain.produce(topic, v, partition=k % PARTITIONS, on_delivery=on_delivery)
            plain.poll(0)
            committed_values.add(v)
            all_values.add(v)
        for i, p in enumerate(txn):
            p.flush(30)  # every record acknowledged (in the log) before the decision
            all_values.update(pending[i])
            if (r + i) % 3 == 2:
                p.abort_transaction(30)
            else:
                p.commit_transaction(30)
                committed_values.update(pending[i])
    plain.flush(30)
    assert set(acked) == all_values
    committed: dict = {p: [] for p in range(PARTITIONS)}
    everything: dict = {p: [] for p in range(PARTITIONS)}
    for v, (part, off) in sorted(acked.items(), key=lambda kv: kv[1]):
        everything[part].append((off, v))
        if v in committed_values:
            committed[part].append((off, v))
    return committed, everything


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(0, **TXN_PROPS)


def _topic(bootstrap: str) -> str:
    name = f"rc-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as c:
        c.create_topic(name, PARTITIONS)
    return name


def _simple(bootstrap: str, topic: str, isolation: str) -> dict:
    out: dict = {p: [] for p in range(PARTITIONS)}
    with SimpleConsumer(bootstrap, isolation_level=isolation) as c:  # small fetches: many per transaction
        for p in range(PARTITIONS):
            end = c.latest_offset(topic, p)
            off = 0
            while off < end:
                r = c.fetch(topic, p, off, max_bytes=2048)
                out[p].extend((rec.offset, rec.value) for rec in r.records)
                assert r.next_offset > off or r.next_offset == r.last_stable_offset
                off = r.next_offset
    return out


def test_simple_high_level_and_spark_read_exactly_the_committed_records(txn_broker, spark):
    bs = txn_broker.bootstrap
    topic = _topic(bs)
    committed, everything = write_interleaved(bs, topic)
    n_c, n_all = sum(map(len, committed.values())), sum(map(len, everything.values()))
    assert n_all - n_c >= 3 * 6  # aborted records are in the log

    # the reference: librdkafka's own read_committed consumer
    assert read_confluent(bs, topic, "read_committed") == {p: [v for _o, v in rs] for p, rs in committed.items()}

    # SimpleConsumer, small fetches (batches cut mid-transaction, markers at fetch boundaries)
    assert _simple(bs, topic, "read_committed") == committed
    assert _simple(bs, topic, "read_uncommitted") == everything

    # the high-level consumer (a ZooKeeper group) with isolation.level=read_committed
    from pyklog.connector.high_level import ConsumerConnector

    conn = ConsumerConnector(
        {
            "zookeeper.connect": txn_broker.zk_connect,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 200,
            "isolation.level": "read_committed",
        }
    )
    try:
        [stream] = conn.create_message_streams({topic: 1})[topic]
        got: dict = {p: [] for p in range(PARTITIONS)}

        def drain():
            for rec in stream:
                got[rec.partition].append((rec.offset, rec.value))
            return sum(map(len, got.values())) >= n_c

        wait_for(drain, timeout=60, message="the high-level consumer's records")
        drain()
        assert got == committed
    finally:
        conn.shutdown()

    # the Spark source, batch read
    for isolation, want in (("read_committed", committed), ("read_uncommitted", everything)):
        rows = (
            spark.read.format("pyklog")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic)
            .option("isolation.level", isolation)
            .load()
            .selectExpr("partition", "offset", "value")
            .collect()
        )
        spark_got: dict = {p: [] for p in range(PARTITIONS)}
        for r in sorted(rows, key=lambda r: (r.partition, r.offset)):
            spark_got[r.partition].append((r.offset, bytes(r.value)))
        assert spark_got == want, isolation
    print(
        f"\n{n_all} records acknowledged ({n_c} committed or plain, {n_all - n_c} aborted): SimpleConsumer, "
        f"ConsumerConnector and the Spark source delivered exactly the {n_c}, in offset order; "
        f"read_uncommitted delivered all {n_all} and no control record"
    )


def test_an_open_transaction_holds_read_committed_readers_at_the_lso(txn_broker, spark):
    from confluent_kafka import Producer

    bs = txn_broker.bootstrap
    topic = _topic(bs)
    plain = Producer({"bootstrap.servers": bs, "enable.idempotence": True})
    plain.produce(topic, b"before", partition=0)
    plain.flush(30)
    open_txn = _confluent_txn_producer(bs)
    open_txn.begin_transaction()
    for i in range(5):
        open_txn.produce(topic, f"open-{i}".encode(), partition=0)
    open_txn.flush(30)
    plain.produce(topic, b"after", partition=0)  # above the open transaction's first offset
    plain.flush(30)

    def spark_values(isolation):
        rows = (
            spark.read.format("pyklog")
            .option("kafka.bootstrap.servers", bs)
            .option("subscribe", topic)
            .option("isolation.level", isolation)
            .load()
            .selectExpr("offset", "value")
            .collect()
        )
        return [bytes(r.value) for r in sorted(rows, key=lambda r: r.offset)]

    with SimpleConsumer(bs, isolation_level="read_committed") as c:
        r = c.fetch(topic, 0, 0)
        assert [rec.value for rec in r.records] == [b"before"] and r.last_stable_offset == 1
        assert spark_values("read_committed") == [b"before"]
        assert spark_values("read_uncommitted") == [b"before"] + [f"open-{i}".encode() for i in range(5)] + [b"after"]
        open_txn.commit_transaction(30)
        r = wait_for(
            lambda: (r := c.fetch(topic, 0, 0)).last_stable_offset == r.high_watermark and r,
            message="the LSO past the committed transaction",
        )
        want = [b"before"] + [f"open-{i}".encode() for i in range(5)] + [b"after"]
        assert [rec.value for rec in r.records] == want
    assert spark_values("read_committed") == want
