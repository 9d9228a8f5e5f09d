"""Fetch and ListOffsets with transactions (KIP-98), against a real broker.

The broker runs in this test process (``BrokerServer`` on a real socket, the session's real
ZooKeeper): transactional batches and markers are written through the broker's own Log API
(``Log.append`` / ``Log.append_control_marker`` + the purgatory notify WriteTxnMarkers does),
since no transaction coordinator answers clients yet.  Everything read goes over the wire:
raw Fetch/ListOffsets requests and the stock consumers (confluent-kafka, kafka-python) with
``isolation.level=read_committed``, which filter aborted records with the broker's
``aborted_transactions`` and stop at its ``last_stable_offset``.
"""

import threading
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.server.main import BrokerServer
from pyklog.broker.zk.server import free_port
from tests.support import Wire, create_topic, wait_for


@pytest.fixture
def server(zk_chroot, tmp_path):
    port = free_port()
    cfg = ServerConfig.from_properties(
        {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(tmp_path / "data"),
            "zookeeper.connect": zk_chroot,
            "num.partitions": "1",
            "offsets.topic.num.partitions": "2",
            "zookeeper.session.timeout.ms": "6000",
        }
    )
    srv = BrokerServer(cfg).startup()
    try:
        yield srv
    finally:
        srv.shutdown()


def leader_log(srv, topic, partition=0):
    wait_for(lambda: _try_log(srv, topic, partition) is not None, message=f"log of {topic}")
    return _try_log(srv, topic, partition)


def _try_log(srv, topic, partition):
    try:
        return srv.apis.replica_manager.leader_log(topic, partition)
    except Exception:  # noqa: BLE001 - not led yet
        return None


class Writer:
    """Writes to one partition through the broker's Log API, as Produce and WriteTxnMarkers do
    (append, then notify the fetch purgatory)."""

    def __init__(self, srv, topic):
        self.srv, self.topic = srv, topic
        self.lg = leader_log(srv, topic)
        self.seq = {}

    def data(self, pid, values, transactional=True, ts=None):
        if pid is None:
            b = build_batch([(b"k", v, ts, ()) for v in values])
        else:
            s = self.seq.get(pid, 0)
            self.seq[pid] = s + len(values)
            b = build_batch(
                [(b"k", v, ts, ()) for v in values],
                producer_id=pid,
                producer_epoch=0,
                base_sequence=s,
                is_transactional=transactional,
            )
        info = self.lg.append(b)
        self.srv.apis.purgatory.notify((self.topic, 0), len(b))
        return info

    def marker(self, pid, commit):
        info = self.lg.append_control_marker(pid, 0, commit, 0)
        self.srv.apis.purgatory.notify((self.topic, 0), 70)
        return info


def fetch(w, topic, offset, isolation, version=11, max_wait_ms=0, min_bytes=0, send_only=False):
    body = {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 50 << 20,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {"topic": topic, "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}]}
        ],
    }
    if send_only:
        return w.send(ApiKey.FETCH, version, body)
    return w.request(ApiKey.FETCH, version, body)["responses"][0]["partitions"][0]


def list_offset(w, topic, ts, isolation, version=5):
    resp = w.request(
        ApiKey.LIST_OFFSETS,
        version,
        {
            "replica_id": -1,
            "isolation_level": isolation,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}],
        },
    )
    p = resp["topics"][0]["partitions"][0]
    assert p["error_code"] == 0
    return p["offset"]


def data_values(raw):
    """Values of the data records in the raw bytes (control batches skipped)."""
    return [r.value for b in iter_batches(bytes(raw or b"")) if not b.is_control for r in b.records]


FUTURE = int(time.time() * 1000) + 3_600_000


def scenario(wr):
    """Two interleaved transactions (one committed, one aborted), plain records, and a third
    transaction left open.  Returns (committed values, open-transaction first offset)."""
    wr.data(None, [b"p0"])  # 0
    wr.data(10, [b"c0", b"c1"])  # 1-2  committed later
    wr.data(20, [b"a0"])  # 3    aborted later
    wr.data(None, [b"p1"])  # 4
    wr.data(20, [b"a1", b"a2"])  # 5-6
    wr.data(10, [b"c2"])  # 7
    wr.marker(20, False)  # 8    abort 20
    wr.data(None, [b"p2"])  # 9
    wr.marker(10, True)  # 10   commit 10
    first_open = wr.data(30, [b"o0"], ts=FUTURE).first_offset  # 11 open, an hour ahead
    wr.data(None, [b"p3"])  # 12
    return [b"p0", b"c0", b"c1", b"p1", b"c2", b"p2"], first_open


def test_fetch_and_list_offsets_wire(server):
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    with Wire(server.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
        wr = Writer(server, topic)
        committed, first_open = scenario(wr)
        leo = wr.lg.log_end_offset
        assert (first_open, leo) == (11, 13)

        rc = fetch(w, topic, 0, isolation=1)
        assert rc["error_code"] == 0
        assert rc["high_watermark"] == leo and rc["last_stable_offset"] == first_open
        assert [(a["producer_id"], a["first_offset"]) for a in rc["aborted_transactions"]] == [(20, 3)]
        batches = list(iter_batches(bytes(rc["records"])))
        assert batches[-1].next_offset == first_open  # nothing at or beyond the LSO
        # what a read_committed client keeps: aborted producer 20's records go, markers skipped
        kept = [r.value for b in batches if not b.is_control and b.producer_id != 20 for r in b.records]
        assert kept == committed

        ru = fetch(w, topic, 0, isolation=0)
        assert ru["last_stable_offset"] == first_open and ru["high_watermark"] == leo
        assert ru["aborted_transactions"] is None
        assert len(data_values(ru["records"])) == 11  # everything, the open transaction too

        # fetch at the LSO: nothing yet for read_committed, not an error
        at = fetch(w, topic, first_open, isolation=1)
        assert at["error_code"] == 0 and not at["records"] and at["last_stable_offset"] == first_open
        # a fetch starting after the aborted transaction's marker reports no aborted transaction
        later = fetch(w, topic, 9, isolation=1)
        assert later["aborted_transactions"] == [] and data_values(later["records"]) == [b"p2"]
        # v4 (first version with isolation) and down-converted v3 (read_uncommitted)
        v4 = fetch(w, topic, 0, isolation=1, version=4)
        assert v4["last_stable_offset"] == first_open
        assert [(a["producer_id"], a["first_offset"]) for a in v4["aborted_transactions"]] == [(20, 3)]
        v3 = fetch(w, topic, 0, isolation=1, version=3)
        assert len(data_values(v3["records"])) == 11

        # ListOffsets: latest is the LSO for read_committed (v2+), the log end otherwise
        assert list_offset(w, topic, -1, 1) == first_open
        assert list_offset(w, topic, -1, 1, version=2) == first_open
        assert list_offset(w, topic, -1, 0) == leo
        assert list_offset(w, topic, -2, 1) == 0
        # by timestamp: the open transaction's record is found only read_uncommitted
        assert list_offset(w, topic, FUTURE, 0) == first_open
        assert list_offset(w, topic, FUTURE, 1) == -1

        wr.marker(30, False)  # abort the open transaction: the LSO moves to the end
        rc = fetch(w, topic, first_open, isolation=1)
        assert rc["last_stable_offset"] == wr.lg.log_end_offset == 14
        assert [(a["producer_id"], a["first_offset"]) for a in rc["aborted_transactions"]] == [(30, 11)]
        assert list_offset(w, topic, -1, 1) == 14


def test_delayed_read_committed_fetch_completes_when_the_lso_moves(server):
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    with Wire(server.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
        wr = Writer(server, topic)
        wr.data(40, [b"t0", b"t1"])  # open: nothing is readable committed
        assert wr.lg.last_stable_offset == 0
        t0 = time.monotonic()
        cid = fetch(w, topic, 0, isolation=1, max_wait_ms=20000, min_bytes=1, send_only=True)
        wait_for(lambda: len(server.apis.purgatory) == 1, message="the fetch waits in the purgatory")
        # more data of the open transaction wakes the fetch, which has still nothing committed
        # to return: it must keep waiting, not answer empty
        threading.Timer(0.2, wr.data, (40, [b"t2"])).start()
        threading.Timer(1.0, wr.marker, (40, True)).start()
        from pyklog.broker.protocol import decode_response

        got_cid, resp = decode_response(ApiKey.FETCH, 11, w.recv_frame())
        took = time.monotonic() - t0
        assert got_cid == cid
        p = resp["responses"][0]["partitions"][0]
        assert data_values(p["records"]) == [b"t0", b"t1", b"t2"], f"answered after {took:.2f}s"
        assert p["last_stable_offset"] == 4
        assert 1.0 <= took < 10, f"the delayed fetch answered after {took:.1f}s (marker at 1.0s)"


def _consume_confluent(bootstrap, topic, isolation, expect, timeout=30.0):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        # and nothing more arrives (an aborted or uncommitted record would show up here)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        return got
    finally:
        c.close()


def _consume_kafka_python(bootstrap, topic, isolation, expect, timeout=30.0):
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level=isolation, enable_auto_commit=False, fetch_max_wait_ms=100
    )
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        c.seek(tp, 0)
        got = []
        deadline = time.monotonic() + timeout
        while len(got) < expect and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=200).values():
                got += [r.value for r in recs]
        end = time.monotonic() + 1.5
        while time.monotonic() < end:
            for recs in c.poll(timeout_ms=200).values():
                got += [r.value for r in recs]
        return got
    finally:
        c.close()


@pytest.mark.parametrize(
    "consume", [_consume_confluent, _consume_kafka_python], ids=["confluent-kafka", "kafka-python"]
)
def test_stock_consumers_read_committed(server, consume):
    """Stock consumers with read_committed see the committed and plain records up to the LSO,
    none of the aborted ones (counted), and the rest once the open transaction commits;
    read_uncommitted sees every data record."""
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    bootstrap = f"127.0.0.1:{server.port}"
    with Wire(server.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
    wr = Writer(server, topic)
    committed, _ = scenario(wr)
    got = consume(bootstrap, topic, "read_committed", len(committed))
    aborted_seen = [v for v in got if v.startswith(b"a")]
    assert aborted_seen == [], f"aborted records delivered: {aborted_seen}"
    assert got == committed, f"expected {committed}, got {got}"
    got = consume(bootstrap, topic, "read_uncommitted", 11)
    assert len(got) == 11 and set(got) >= set(committed) | {b"a0", b"a1", b"a2", b"o0", b"p3"}
    wr.marker(30, True)
    got = consume(bootstrap, topic, "read_committed", len(committed) + 2)
    assert got == committed + [b"o0", b"p3"]


def test_aborted_list_covers_data_read_past_a_compacted_gap(server):
    """A read_committed fetch whose offset lies in a segment compaction emptied from there on
    gets the next segment's batches; the aborted transactions reported must cover *those*
    (the upper bound follows the first batch returned, not the fetch offset)."""
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    with Wire(server.port) as w:
        assert (
            create_topic(
                w,
                topic,
                configs=[
                    {"name": "cleanup.policy", "value": "compact"},
                    {"name": "delete.retention.ms", "value": "0"},
                    {"name": "min.cleanable.dirty.ratio", "value": "0"},
                ],
            )["error_code"]
            == 0
        )
        lg = leader_log(server, topic)
        kv = lambda k, v, **kw: build_batch([(k, v, None, ())], **kw)  # noqa: E731
        lg.append(kv(b"a", b"a1"))  # 0
        lg.append(kv(b"b", b"b1"))  # 1
        lg.append(kv(b"c", None))  # 2 tombstone
        lg.roll()
        lg.append(kv(b"x", b"X-aborted", producer_id=60, producer_epoch=0, base_sequence=0, is_transactional=True))  # 3
        lg.append(kv(b"d", b"d1"))  # 4
        lg.append_control_marker(60, 0, False, 0)  # 5
        lg.append(
            kv(b"y", b"y-open", producer_id=61, producer_epoch=0, base_sequence=0, is_transactional=True)
        )  # 6 open: LSO
        lg.roll()
        assert lg.last_stable_offset == 6
        # only the first segment is below the LSO: its tombstone goes, leaving a gap at 2
        stats = lg.compact(now_ms=int(time.time() * 1000) + 60_000, force=True)
        assert stats.tombstones_dropped == 1 and stats.aborted_batches_removed == 0
        rc = fetch(w, topic, 2, isolation=1)
        batches = list(iter_batches(bytes(rc["records"])))
        assert batches[0].base_offset == 3
        assert [(a["producer_id"], a["first_offset"]) for a in rc["aborted_transactions"]] == [(60, 3)]
        kept = [r.value for b in batches if not b.is_control and b.producer_id != 60 for r in b.records]
        assert kept == [b"d1"]
