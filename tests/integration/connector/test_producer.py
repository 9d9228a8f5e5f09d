"""Producer tests: murmur2 placement (pure) and the real producer against real brokers."""

from __future__ import annotations

# ---------------------------------------------------------------------------------------------
# against real brokers
# ---------------------------------------------------------------------------------------------
import socket  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

import pytest

from pyklog.broker.errors import UnknownTopicOrPartitionError  # noqa: E402
from pyklog.broker.protocol import ApiKey  # noqa: E402
from pyklog.broker.record.batch import build_batch  # noqa: E402
from pyklog.broker.record.reader import iter_headers  # noqa: E402
from pyklog.connector.client import ClusterClient  # noqa: E402
from pyklog.connector.consumer import SimpleConsumer  # noqa: E402
from pyklog.connector.partitioner import partition_for_key

# ---------------------------------------------------------------------------------------------
# configuration (no server needed: the producer connects lazily)
# ---------------------------------------------------------------------------------------------
from pyklog.connector.producer import (
    Producer,  # noqa: E402
    RecordMetadata,  # noqa: E402
)


@pytest.fixture
def kafka(broker):
    """(broker, ClusterClient, SimpleConsumer) on one fresh broker."""
    client = ClusterClient(broker.bootstrap)
    consumer = SimpleConsumer(client=client)
    yield broker, client, consumer
    client.close()


def _all_records(consumer, topic, partition):
    return list(consumer.iter_records(topic, partition, 0))


def _batch_count(consumer, topic, partition):
    n, off = 0, 0
    end = consumer.latest_offset(topic, partition)
    while off < end:
        raw = consumer.fetch_raw(topic, partition, off, 1 << 20)
        hs = list(iter_headers(bytes(raw.records)))
        n += len(hs)
        off = hs[-1][1].next_offset
    return n


def test_sync_async_keys_and_callbacks(kafka):
    broker, client, consumer = kafka
    client.create_topic("t", 6)
    with Producer(
        bootstrap_servers=broker.bootstrap, key_serializer=str.encode, value_serializer=lambda v: v.encode()
    ) as p:
        md = p.send_sync("t", "first", key="k0")
        assert isinstance(md, RecordMetadata) and md.topic == "t" and md.offset == 0
        assert md.partition == partition_for_key(b"k0", 6)
        seen = []
        futs = [
            p.send(
                "t", f"v{i}", key=f"k{i}", headers=[("n", str(i).encode())], callback=lambda m, e: seen.append((m, e))
            )
            for i in range(300)
        ]
        p.flush()
        mds = [f.result(10) for f in futs]
        assert len(seen) == 300 and all(e is None for _, e in seen)
    for i, m in enumerate(mds):
        assert m.partition == partition_for_key(f"k{i}".encode(), 6)
    # many threads at once, and a buffer.memory that forces send() to wait for deliveries
    with Producer(bootstrap_servers=broker.bootstrap, buffer_memory=4000, batch_size=1000, linger_ms=1) as p:
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 6 of topic 't'"):
            p.send("t", b"x", partition=6)
        out = []

        def worker(w):
            out.extend(p.send("t", b"w%d-%d" % (w, i), partition=w) for i in range(300))

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        p.flush()
        got = [f.result(10) for f in out]
    assert len({(m.partition, m.offset) for m in got}) == 1200
    # flush() waits for what was queued before it, not for what other threads keep adding
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50) as p:
        stop = threading.Event()

        def busy():
            while not stop.is_set():
                p.produce("t", b"busy", partition=0)
                time.sleep(0.0005)

        t = threading.Thread(target=busy)
        t.start()
        try:
            time.sleep(0.2)
            fut = p.send("t", b"mine", partition=1)
            p.flush(timeout=20)
            assert fut.done() and t.is_alive()
        finally:
            stop.set()
            t.join()
    # offsets are consecutive per partition, and the log holds what the futures said
    by_part = {}
    for i, m in enumerate(mds):
        by_part.setdefault(m.partition, []).append((m.offset, i))
    for part, items in by_part.items():
        recs = {r.offset: r for r in _all_records(consumer, "t", part)}
        for off, i in items:
            r = recs[off]
            assert (r.key, r.value, r.headers) == (f"k{i}".encode(), f"v{i}".encode(), (("n", str(i).encode()),))


def test_zookeeper_discovery_and_acks(broker, zk_chroot):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("a", 1)
        consumer = SimpleConsumer(client=c)
        for i, acks in enumerate((0, 1, -1, "all")):
            with Producer(zookeeper_connect=zk_chroot, acks=acks, linger_ms=0) as p:
                futs = [p.send("a", b"x%d" % j, partition=0) for j in range(10)]
                p.flush()
                offs = [f.result(10).offset for f in futs]
            if acks == 0:
                assert offs == [-1] * 10
                # no acknowledgement: the records become visible once the broker has handled the
                # request, which may be just after flush() and close() returned
                deadline = time.monotonic() + 10
                while consumer.latest_offset("a", 0) < 10 and time.monotonic() < deadline:
                    time.sleep(0.02)
            else:
                assert offs == list(range(10 * i, 10 * i + 10))
            assert consumer.latest_offset("a", 0) == 10 * (i + 1)


def test_batching_by_linger_and_batch_size(kafka):
    broker, client, consumer = kafka
    client.create_topic("lg", 1)
    client.create_topic("bs", 1)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=400, batch_size=1 << 20) as p:
        futs = [p.send("lg", b"%0100d" % i, partition=0) for i in range(100)]
        time.sleep(0.1)
        assert not futs[-1].done()  # still lingering
        futs[-1].result(10)
    assert _batch_count(consumer, "lg", 0) == 1
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=2000, batch_size=2000) as p:
        for i in range(100):
            p.produce("bs", b"%0100d" % i, partition=0)
        p.flush()
    n = _batch_count(consumer, "bs", 0)
    assert 5 <= n <= 10, n  # ~110 bytes a record, batches close at 2000 bytes
    assert [r.value for r in _all_records(consumer, "bs", 0)] == [b"%0100d" % i for i in range(100)]
    # null keys stick to one partition per batch, then move on
    client.create_topic("nk", 4)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=1000, batch_size=1000) as p:
        for i in range(400):
            p.produce("nk", b"%0100d" % i)
        p.flush()
    counts = [consumer.latest_offset("nk", q) for q in range(4)]
    assert sum(counts) == 400 and sum(1 for c in counts if c) >= 2, counts
    for q in range(4):
        if counts[q]:
            assert _batch_count(consumer, "nk", q) <= counts[q] // 8 + 1  # ~9 records per batch


def _drop_after_first_produce(p):
    """Fault injection on the real connection: the first Produce request reaches the broker and is
    appended, its response is read and thrown away, and the connection then breaks, so the
    producer only sees a connection error and must resend the batch."""
    fired = []

    def hook(node, conn):
        if not fired:
            fired.append(node)
            conn._read_frame()  # the broker's answer: the batch is in the log
            conn._sock.shutdown(socket.SHUT_RDWR)

    p._sender.fault_after_send = hook
    return fired


def test_idempotent_retry_does_not_duplicate(kafka):
    broker, client, consumer = kafka
    client.create_topic("idem", 1)
    client.create_topic("dup", 1)
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50, retry_backoff_ms=50) as p:
        fired = _drop_after_first_produce(p)
        futs = [p.send("idem", b"r%d" % i, partition=0) for i in range(50)]
        p.flush()
        assert fired == [0]
        assert [f.result(10).offset for f in futs] == list(range(50))
        futs = [p.send("idem", b"s%d" % i, partition=0) for i in range(10)]
        assert [f.result(10).offset for f in futs] == list(range(50, 60))
    values = [r.value for r in _all_records(consumer, "idem", 0)]
    assert values == [b"r%d" % i for i in range(50)] + [b"s%d" % i for i in range(10)]
    # the same fault without idempotence duplicates the batch: the test above can fail
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50, retry_backoff_ms=50, enable_idempotence=False) as p:
        fired = _drop_after_first_produce(p)
        futs = [p.send("dup", b"r%d" % i, partition=0) for i in range(50)]
        p.flush()
        assert fired == [0]
    assert consumer.latest_offset("dup", 0) == 100


def test_raw_resend_of_same_sequence_is_deduplicated(kafka):
    _broker, client, consumer = kafka
    client.create_topic("raw", 1)
    pid, epoch = client.init_producer_id()
    batch = build_batch(
        [(None, b"once-%d" % i, None, ()) for i in range(5)], producer_id=pid, producer_epoch=epoch, base_sequence=0
    )
    conn = client.connection(client.leader_for("raw", 0))
    body = {
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": "raw", "partition_data": [{"index": 0, "records": batch}]}],
    }
    first = conn.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]
    again = conn.request(ApiKey.PRODUCE, body)["responses"][0]["partition_responses"][0]
    assert first["error_code"] == 0 and first["base_offset"] == 0
    assert again["error_code"] == 0 and again["base_offset"] == 0
    assert consumer.latest_offset("raw", 0) == 5


def test_metadata_refresh_for_a_topic_created_later(kafka):
    broker, _client, _consumer = kafka
    with Producer(
        bootstrap_servers=broker.bootstrap, allow_auto_create_topics=False, max_block_ms=20000, retry_backoff_ms=50
    ) as p:

        def create_late():
            with ClusterClient(broker.bootstrap) as admin:
                admin.create_topic("late", 2)

        t = threading.Timer(1.0, create_late)
        t.start()
        md = p.send_sync("late", b"hello", key=b"abc")
        t.join()
        assert md.partition == partition_for_key(b"abc", 2) and md.offset == 0
    with (
        Producer(bootstrap_servers=broker.bootstrap, allow_auto_create_topics=False, max_block_ms=300) as p2,
        pytest.raises(Exception, match="nosuch"),
    ):
        p2.send("nosuch", b"x")


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_kafka_reads_what_we_wrote(kafka, codec):
    from confluent_kafka import Consumer, TopicPartition

    broker, client, _consumer = kafka
    topic = f"codec-{codec}"
    client.create_topic(topic, 1)
    expected = []
    with Producer(bootstrap_servers=broker.bootstrap, compression_type=codec, linger_ms=20) as p:
        for i in range(200):
            key = None if i % 7 == 0 else b"key-%d" % i
            value = None if i % 11 == 0 else (b"value-%d-" % i) * (i % 5 + 1)
            headers = [("h1", b"a%d" % i), ("h2", None)] if i % 3 == 0 else []
            p.produce(topic, value, key, partition=0, headers=headers)
            expected.append((key, value, headers))
        p.flush()
    c = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "t",
            "enable.auto.commit": False,
            "api.version.request": True,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < 200 and time.monotonic() < deadline:
            m = c.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.key(), m.value(), [(k, v) for k, v in (m.headers() or [])], m.offset()))
    finally:
        c.close()
    assert [g[3] for g in got] == list(range(200))
    assert [(k, v, h) for k, v, h, _ in got] == expected


def test_idempotent_retry_with_pipelined_requests_keeps_order(kafka):
    """Several Produce requests in flight when the connection breaks after the broker appended
    them all: every batch is resent in sequence order and the log holds each record once."""
    broker, client, consumer = kafka
    client.create_topic("pipe", 2)
    sends = []
    lost = []

    def hook(node, conn):
        sends.append(node)
        if len(sends) == 4:
            for _ in range(len(conn._pending)):  # every unanswered request: appended, answer lost
                lost.append(conn._read_frame()[0])
            conn._sock.shutdown(socket.SHUT_RDWR)

    with Producer(
        bootstrap_servers=broker.bootstrap,
        linger_ms=0,
        batch_size=300,
        max_in_flight_requests_per_connection=5,
        retry_backoff_ms=20,
    ) as p:
        p._sender.fault_after_send = hook
        futs = [p.send("pipe", b"%05d" % i, partition=i % 2) for i in range(400)]
        p.flush()
        mds = [f.result(10) for f in futs]
    assert len(sends) > 4 and len(lost) >= 1
    for q in (0, 1):
        values = [r.value for r in _all_records(consumer, "pipe", q)]
        assert values == [b"%05d" % i for i in range(q, 400, 2)]
        assert [m.offset for m in mds[q::2]] == list(range(200))


def test_delivery_timeout_when_the_broker_is_gone(kafka):
    from pyklog.broker.errors import RequestTimedOutError

    broker, client, _consumer = kafka
    client.create_topic("gone", 1)
    with Producer(
        bootstrap_servers=broker.bootstrap, delivery_timeout_ms=1500, retry_backoff_ms=100, request_timeout_ms=1000
    ) as p:
        p.send_sync("gone", b"ok", partition=0)
        broker.stop()
        fut = p.send("gone", b"lost", partition=0)
        exc = fut.exception(timeout=20)
        assert isinstance(exc, RequestTimedOutError), exc
        assert p.failed_records == 1


def test_idempotent_batch_rejected_by_broker_does_not_poison_the_partition(broker_factory):
    """A batch the broker rejects for good (MESSAGE_TOO_LARGE: over its message.max.bytes) fails
    alone; the partition's later batches, already in flight or sent later, are written once each
    and in order (the producer re-initialises its producer id so sequences restart from 0)."""
    from pyklog.broker.errors import MessageTooLargeError
    from pyklog.connector.producer.transaction_manager import TransactionState

    broker = broker_factory(0, message_max_bytes=3000)
    with ClusterClient(broker.bootstrap) as client:
        consumer = SimpleConsumer(client=client)
        client.create_topic("big", 2)
        expected = []
        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50, batch_size=4000, retry_backoff_ms=20) as p:
            p.send_sync("big", b"before", partition=0)
            expected.append(b"before")
            txn = p._txn
            first_pid = txn.producer_id
            assert txn.state is TransactionState.READY and first_pid >= 0
            # one batch of ~3.6 KB: under batch.size and max.request.size, over message.max.bytes
            seen = []
            futs = [
                p.send("big", b"L%d-" % i + b"x" * 700, partition=0, callback=lambda m, e: seen.append((m, e)))
                for i in range(5)
            ]
            for f in futs:
                assert isinstance(f.exception(timeout=30), MessageTooLargeError)
            assert len(seen) == 5 and all(m is None and isinstance(e, MessageTooLargeError) for m, e in seen)
            # the same partition (and the other one) keep working
            md = p.send_sync("big", b"after", partition=0)
            expected.append(b"after")
            assert md.offset == 1
            # the gap was closed by a new producer id (UNINITIALIZED -> INITIALIZING -> READY again)
            assert txn.state is TransactionState.READY and txn.producer_id not in (-1, first_pid)
            assert not txn.reset_pending
            assert p.send_sync("big", b"other", partition=1).offset == 0
            # pipelined: rejected single-record batches between good batches, all in flight at once
            good, bad = [], []
            for round_ in range(4):
                for i in range(10):
                    v = b"g%d-%d" % (round_, i)
                    good.append(p.send("big", v, partition=0))
                    expected.append(v)
                bad.append(p.send("big", b"B" * 5000, partition=0))  # a batch of its own
            p.flush()
            for f in bad:
                assert isinstance(f.exception(timeout=30), MessageTooLargeError)
            offsets = [f.result(30).offset for f in good]
            assert offsets == list(range(2, 2 + len(good)))
            assert p.failed_records == 5 + len(bad)
        # the same with the connection breaking while five requests are in flight, after the
        # broker answered them all: good batches are resent (and deduplicated), the rejected one
        # is rejected again, the ones after it are numbered again
        sends, lost = [], []

        def hook(node, conn):
            sends.append(node)
            if len(sends) == 5:
                for _ in range(len(conn._pending)):
                    lost.append(conn._read_frame()[0])
                conn._sock.shutdown(socket.SHUT_RDWR)

        with Producer(bootstrap_servers=broker.bootstrap, linger_ms=50, batch_size=4000, retry_backoff_ms=20) as p:
            p._sender.fault_after_send = hook
            good, bad = [], []
            for round_ in range(4):
                for i in range(10):
                    v = b"h%d-%d" % (round_, i)
                    good.append(p.send("big", v, partition=0))
                    expected.append(v)
                bad.append(p.send("big", b"C" * 5000, partition=0))
            p.flush()
            assert len(lost) >= 2
            for f in bad:
                assert isinstance(f.exception(timeout=30), MessageTooLargeError)
            first = 2 + 40
            assert [f.result(30).offset for f in good] == list(range(first, first + len(good)))
        values = [r.value for r in _all_records(consumer, "big", 0)]
        assert values == expected
        assert [r.value for r in _all_records(consumer, "big", 1)] == [b"other"]


def test_send_many_bulk_append(kafka):
    from pyklog.broker.errors import MessageTooLargeError

    broker, client, consumer = kafka
    client.create_topic("many", 4)
    n = 3000
    keys = [b"k%d" % i for i in range(n)]
    values = [b"v%d" % i for i in range(n)]
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=20, batch_size=4000, max_request_size=10000) as p:
        # everything is checked before anything is queued
        with pytest.raises(ValueError, match="keys has 2 entries, expected 3"):
            p.send_many("many", None, [b"a", b"b"], [b"1", b"2", b"3"])
        with pytest.raises(MessageTooLargeError, match="record 1 of about"):
            p.send_many("many", 0, None, [b"ok", b"x" * 20000])
        with pytest.raises(UnknownTopicOrPartitionError, match="partition 9"):
            p.send_many("many", [0, 9], None, [b"a", b"b"])
        with pytest.raises(TypeError, match="value: expected bytes"):
            p.send_many("many", 0, None, [b"a", 5])
        assert not p._accumulator._unfinished and not p._accumulator._open
        # keyed: murmur2 placement, order kept per partition; str values are UTF-8
        assert p.send_many("many", None, keys, [v.decode() for v in values]) == n
        # explicit partitions (None = partitioner), headers and timestamps per record
        p.send_many(
            "many",
            [3, None, 3],
            [b"x", b"k0", None],
            [b"p3a", b"p?", b"p3b"],
            headers=[[("h", b"1")], None, [("h", None)]],
            timestamps=[1000, 2000, 3000],
        )
        # null keys: sticky runs of batches over the partitions
        p.send_many("many", None, None, [b"%0200d" % i for i in range(400)])
        p.flush()
        assert p.failed_records == 0
        p.send("many", b"solo", key=b"solo").result(30)
        p.flush()
        assert p._accumulator._buffered == 0  # every batch gave back exactly what it took
    got = {q: _all_records(consumer, "many", q) for q in range(4)}
    for q in range(4):
        keyed = [r.value for r in got[q] if r.key in set(keys)]
        assert keyed == [b"v%d" % i for i in range(n) if partition_for_key(keys[i], 4) == q] + (
            [b"p?"] if partition_for_key(b"k0", 4) == q else []
        )
    p3 = {r.value: r for r in got[3]}
    assert (p3[b"p3a"].key, p3[b"p3a"].timestamp, p3[b"p3a"].headers) == (b"x", 1000, (("h", b"1"),))
    assert (p3[b"p3b"].key, p3[b"p3b"].timestamp, p3[b"p3b"].headers) == (None, 3000, (("h", None),))
    nulls = {q: [r.value for r in got[q] if r.key is None and r.value.startswith(b"0")] for q in range(4)}
    assert sum(len(v) for v in nulls.values()) == 400 and sum(1 for v in nulls.values() if v) >= 2
    for vals in nulls.values():
        assert vals == sorted(vals)  # in order within each partition
