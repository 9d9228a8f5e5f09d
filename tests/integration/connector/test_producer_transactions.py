"""pyklog's transactional producer (KIP-98) against real broker processes: commit and abort
visibility read by confluent-kafka (read_committed / read_uncommitted) and by pyklog's
SimpleConsumer; AddPartitionsToTxn once per drain before the first Produce and EndTxn after the
last one (counted in the broker's DEBUG request log); fencing of two producers with one
transactional.id; a producer SIGKILLed mid-transaction, its transaction aborted by the next
init_transactions or by the coordinator's timeout; send_offsets_to_transaction; a timed-out
transaction named as such; prepare in one process, SIGKILL, complete_transaction from another;
a broker without transactions answering a fast, clear error.

The rules without a server (config, request bodies, state checks) are in
tests/unit/connector/test_producer_transactions.py.
"""

from __future__ import annotations

import re
import signal
import socket
import struct
import threading
import time
import uuid

import pytest

from pyklog.broker.errors import (
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionalIdAuthorizationFailedError,
    UnsupportedVersionError,
)
from pyklog.broker.protocol import SUPPORTED, ApiKey
from pyklog.broker.protocol.api import decode_request_header, encode_response
from pyklog.connector.client import ClusterClient
from pyklog.connector.producer import (
    IllegalStateError,
    PreparedTransaction,
    Producer,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionState,
    TransactionTimedOutError,
    complete_transaction,
)
from tests.integration.transaction_support import (
    TXN_PROPS,
    ProducerProc,
    read_confluent,
    read_pyklog,
    visible_now,
)
from tests.support import wait_for

S = TransactionState


def _tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def _topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"t-{uuid.uuid4().hex[:8]}"
    with ClusterClient(bootstrap) as c:
        c.create_topic(name, partitions)
    return name


def _producer(bootstrap: str, tid: str | None = None, **cfg) -> Producer:
    return Producer({"bootstrap.servers": bootstrap, "transactional.id": tid or _tid(), **cfg})


# ------------------------------------------------------------------------------------ no server


# ------------------------------------------------------------------------------------ real brokers


@pytest.fixture
def txn_broker(broker_factory):
    return broker_factory(0, **TXN_PROPS, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})


def test_commits_and_aborts_interleaved_over_partitions_and_producers(txn_broker):
    """Two transactional producers, 3 partitions, 12 transactions each, every third aborted (one
    after a flush, so its records are in the log).  confluent-kafka and pyklog read_committed see
    exactly the committed records, in order; read_uncommitted sees every data record and no
    control record."""
    bs = txn_broker.bootstrap
    topic = _topic(bs, 3)
    producers = [_producer(bs, linger_ms=2) for _ in range(2)]
    committed: dict = {0: [], 1: [], 2: []}
    everything: dict = {0: [], 1: [], 2: []}
    for p in producers:
        p.init_transactions(30)
    for t in range(12):
        for i, p in enumerate(producers):
            p.begin_transaction()
            vals = [(k % 3, f"p{i}-t{t}-r{k}".encode()) for k in range(7)]
            futs = [p.send(topic, v, partition=part) for part, v in vals]
            abort = t % 3 == 2
            if abort:
                if i == 0:
                    p.flush()
                    assert all(f.result().offset >= 0 for f in futs)  # in the log, then aborted
                p.abort_transaction(30)
                for f in futs:
                    if not f.done() or f.exception() is not None:
                        assert isinstance(f.exception(10), TransactionAbortedError)
                    else:
                        everything[f.result().partition].append(vals[futs.index(f)][1])
            else:
                p.commit_transaction(30)
                for (part, v), f in zip(vals, futs):
                    assert f.result().partition == part
                    committed[part].append(v)
                    everything[part].append(v)
            assert p.transaction_state is S.READY
    for p in producers:
        p.close()
    for reader in (read_confluent, read_pyklog):
        got = reader(bs, topic, "read_committed")
        assert got == committed, reader.__name__
        unc = reader(bs, topic, "read_uncommitted")
        for part in unc:  # every record written, in each producer's order; no control records
            assert sorted(unc[part]) == sorted(everything[part]), (reader.__name__, part)
            for i in range(2):
                mine = [v for v in unc[part] if v.startswith(f"p{i}-".encode())]
                assert mine == [v for v in everything[part] if v.startswith(f"p{i}-".encode())]
    n_committed = sum(map(len, committed.values()))
    n_aborted = sum(map(len, everything.values())) - n_committed
    print(
        f"\ncommitted {n_committed} records, aborted {n_aborted} written records: read_committed "
        f"delivered exactly the committed ones (confluent-kafka and pyklog)"
    )
    assert n_committed == 2 * 8 * 7 and n_aborted >= 4 * 7


def test_add_partitions_once_per_drain_before_produce_and_end_txn_after(broker_factory):
    """The broker's DEBUG request log of this producer's connection: one AddPartitionsToTxn (24) for
    the six partitions drained together, before the first Produce (0); EndTxn (26) after the last
    Produce; the next transaction adds its partitions again."""
    b = broker_factory(0, log_level="DEBUG", **TXN_PROPS)
    t1, t2 = _topic(b.bootstrap, 3), _topic(b.bootstrap, 3)
    cid = f"seq-{uuid.uuid4().hex[:6]}"
    p = _producer(b.bootstrap, linger_ms=60000, client_id=cid)
    p.init_transactions(30)
    p.partitions_for(t1), p.partitions_for(t2)
    for _ in range(2):
        p.begin_transaction()
        for t in (t1, t2):
            for part in range(3):
                p.send(t, b"v", partition=part)
        p.commit_transaction(30)
    p.close()

    def apis():
        return [
            int(k)
            for k in re.findall(
                rf"request api_key=(\d+) api_version=\d+ correlation_id=\d+ "
                rf"client_id={cid} ",
                b.output(),
            )
        ]

    seq = wait_for(lambda: (a := apis()).count(26) == 2 and a, message="both EndTxn in the request log")
    txn_calls = [k for k in seq if k in (0, 22, 24, 26)]
    # repeats are retries: the second transaction's AddPartitionsToTxn may meet CONCURRENT_TRANSACTIONS
    # while the first one's markers are written; Produce requests: one per drain
    runs = [k for i, k in enumerate(txn_calls) if i == 0 or txn_calls[i - 1] != k]
    assert runs == [22, 24, 0, 26, 24, 0, 26], seq
    assert txn_calls[:4] == [22, 24, 0, 26], seq  # nothing to retry the first time


def test_two_producers_with_one_id_the_older_is_fenced(txn_broker):
    bs = txn_broker.bootstrap
    topic = _topic(bs, 2)
    tid = _tid()
    old, new = _producer(bs, tid), _producer(bs, tid)
    old.init_transactions(30)
    old.begin_transaction()
    zombie = [old.send(topic, f"zombie-{i}".encode(), partition=i % 2) for i in range(10)]
    old.flush()
    assert all(f.result().offset >= 0 for f in zombie)  # written, open
    new.init_transactions(30)  # fences `old` and aborts its transaction
    with pytest.raises(ProducerFencedError, match="another producer with this transactional.id initialised"):
        old.commit_transaction(30)
    assert old.transaction_state is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError, match="FATAL_ERROR and must be closed"):
        old.send(topic, b"late", partition=0)
    old.close(5)
    new.begin_transaction()
    for i in range(4):
        new.send(topic, f"new-{i}".encode(), partition=i % 2)
    new.commit_transaction(30)
    new.close()
    got = read_confluent(bs, topic, "read_committed")
    assert got == {0: [b"new-0", b"new-2"], 1: [b"new-1", b"new-3"]}


@pytest.mark.parametrize("ended_by", ["next_init", "timeout"])
def test_sigkilled_producer_transaction_is_aborted(txn_broker, ended_by):
    """A producer process writes 30 records in a transaction (all acknowledged) and is SIGKILLed.
    Its transaction is aborted by the next init_transactions of the same id, or by the
    coordinator after transaction.timeout.ms (2 s); none of its records is ever visible to
    read_committed readers, the committed ones after it are."""
    bs = txn_broker.bootstrap
    topic = _topic(bs, 3)
    tid = _tid()
    proc = ProducerProc("open", bs, topic, tid, 30, 2000 if ended_by == "timeout" else 60000)
    acked = int(proc.wait_line("flushed").split()[1])
    assert acked == 30
    proc.kill()
    other = _producer(bs, tid if ended_by == "next_init" else None)
    t0 = time.monotonic()
    other.init_transactions(30)
    other.begin_transaction()
    for i in range(6):
        other.send(topic, f"after-{i}".encode(), partition=i % 3)
    other.commit_transaction(30)
    other.close()
    got = read_confluent(bs, topic, "read_committed", timeout=30)
    waited = time.monotonic() - t0
    assert sorted(v for vs in got.values() for v in vs) == sorted(f"after-{i}".encode() for i in range(6))
    unc = read_pyklog(bs, topic, "read_uncommitted")
    killed = [v for vs in unc.values() for v in vs if v.startswith(tid.encode())]
    assert len(killed) == 30  # in the log, never visible to read_committed
    assert read_pyklog(bs, topic, "read_committed") == got
    print(
        f"\nSIGKILLed producer: {acked} acknowledged records, 0 visible after the abort "
        f"({ended_by}, read_committed complete after {waited:.1f}s)"
    )


def test_send_offsets_commit_and_abort(txn_broker):
    bs = txn_broker.bootstrap
    topic = _topic(bs, 2)
    group = f"g-{uuid.uuid4().hex[:6]}"
    p = _producer(bs)
    p.init_transactions(30)
    p.begin_transaction()
    p.send(topic, b"x", partition=0)
    p.send_offsets_to_transaction({(topic, 0): 5, (topic, 1): 7}, group, 30)
    p.commit_transaction(30)
    with ClusterClient(bs) as c:
        assert wait_for(
            lambda: c.fetch_committed(group, [(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 7},
            message="committed offsets",
        )
        p.begin_transaction()
        p.send_offsets_to_transaction({(topic, 0): 99}, group, 30)
        p.abort_transaction(30)
        p.begin_transaction()  # an empty transaction after: commits nothing, needs no EndTxn
        p.commit_transaction(30)
        assert c.fetch_committed(group, [(topic, 0), (topic, 1)]) == {(topic, 0): 5, (topic, 1): 7}
    with pytest.raises(TypeError, match="offset >= 0"):
        p.begin_transaction()
        p.send_offsets_to_transaction({(topic, 0): -1}, group)
    p.close()


def test_transaction_outliving_its_timeout_is_named(txn_broker):
    bs = txn_broker.bootstrap
    topic = _topic(bs, 1)
    p = _producer(bs, transaction_timeout_ms=1000)
    p.init_transactions(30)
    p.begin_transaction()
    p.send(topic, b"late", partition=0).result(30)
    time.sleep(1.5)  # the coordinator's clock: nothing to poll on the client side
    with pytest.raises(TransactionTimedOutError, match=r"longer than transaction.timeout.ms=1000") as ei:
        wait_for(lambda: p.commit_transaction(30), timeout=15)
    assert isinstance(ei.value, ProducerFencedError)
    assert p.transaction_state is S.FATAL_ERROR
    p.close(5)
    assert read_confluent(bs, topic, "read_committed") == {0: []}


def test_a_failed_record_makes_the_transaction_abortable(txn_broker):
    """A record the broker refuses (a null key on a compacted topic) fails its future, the commit
    raises TransactionAbortableError, abort_transaction recovers (a new epoch, since the failed
    batch left a sequence gap) and the next transaction commits."""
    bs = txn_broker.bootstrap
    with ClusterClient(bs) as c:
        compacted = f"c-{uuid.uuid4().hex[:6]}"
        c.create_topic(compacted, 1, {"cleanup.policy": "compact"})
    p = _producer(bs)
    p.init_transactions(30)
    epoch0 = p._txn.producer_epoch
    p.begin_transaction()
    ok = p.send(compacted, b"v", key=b"k")
    ok.result(30)
    bad = p.send(compacted, b"no key")
    with pytest.raises(Exception):
        bad.result(30)
    with pytest.raises(TransactionAbortableError, match="abort_transaction"):
        p.commit_transaction(30)
    assert p.transaction_state is S.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortableError):
        p.send(compacted, b"v", key=b"k")
    p.abort_transaction(30)
    assert p.transaction_state is S.READY and p._txn.producer_epoch == epoch0 + 1
    p.begin_transaction()
    p.send(compacted, b"v2", key=b"k2")
    p.commit_transaction(30)
    p.close()
    assert read_confluent(bs, compacted, "read_committed") == {0: [b"v2"]}


def test_prepare_sigkill_then_complete_from_another_process(txn_broker):
    """Two-phase commit across processes: process A prepares a transaction of 40 records and is
    SIGKILLed; process B commits it with complete_transaction.  The 40 records become visible
    exactly once; a retried commit succeeds; an abort afterwards is refused (INVALID_TXN_STATE)."""
    bs = txn_broker.bootstrap
    topic = _topic(bs, 2)
    tid = _tid()
    a = ProducerProc("prepare", bs, topic, tid, 40, 60000)
    assert a.wait_line("flushed") == "flushed 40"
    _, ptid, pid, epoch = a.wait_line("prepared").split()
    a.kill()
    assert visible_now(bs, topic) == {0: [], 1: []}  # prepared, not visible
    b = ProducerProc("complete", bs, ptid, pid, epoch, "commit")
    assert b.wait(60) == 0 and b.lines[-1] == "completed", b.lines
    want = {p: [f"{tid}-{i}".encode() for i in range(40) if i % 2 == p] for p in (0, 1)}
    assert read_confluent(bs, topic, "read_committed") == want
    assert read_pyklog(bs, topic, "read_committed") == want
    prep = PreparedTransaction(ptid, int(pid), int(epoch))
    complete_transaction({"bootstrap.servers": bs}, prep, commit=True, timeout_s=30)  # retried: fine
    with pytest.raises(InvalidTxnStateError, match="INVALID_TXN_STATE"):
        complete_transaction({"bootstrap.servers": bs}, prep, commit=False, timeout_s=30)
    assert read_confluent(bs, topic, "read_committed") == want
    print(
        f"\nprepared 40 records, producer SIGKILLed, committed from another process: "
        f"{sum(map(len, want.values()))} visible once, 0 duplicated"
    )


def test_prepared_transaction_fenced_or_timed_out_cannot_commit(txn_broker):
    bs = txn_broker.bootstrap
    topic = _topic(bs, 1)
    # fenced: a new producer with the id initialises before the commit
    tid = _tid()
    p = _producer(bs, tid)
    p.init_transactions(30)
    p.begin_transaction()
    p.send(topic, b"fenced", partition=0)
    prep = p.prepare_transaction(30)
    assert prep.producer_id >= 0 and prep.transactional_id == tid
    for call in (p.commit_transaction, p.abort_transaction):
        with pytest.raises(IllegalStateError, match="complete_transaction"):
            call(1)
    with pytest.raises(IllegalStateError, match="prepared"):
        p.send(topic, b"more", partition=0)
    p.close()  # does not abort it: still open, holding the last stable offset
    assert visible_now(bs, topic) == {0: []}
    with ClusterClient(bs) as c:
        assert c.list_offsets({(topic, 0): -1}, isolation_level=1) == {(topic, 0): 0}
    newer = _producer(bs, tid)
    newer.init_transactions(30)
    newer.close()
    with pytest.raises(ProducerFencedError, match="PRODUCER_FENCED"):
        complete_transaction({"bootstrap.servers": bs}, prep, commit=True, timeout_s=30)
    # timed out: transaction.timeout.ms=1000
    q = _producer(bs, transaction_timeout_ms=1000)
    q.init_transactions(30)
    q.begin_transaction()
    q.send(topic, b"timed-out", partition=0)
    prep2 = q.prepare_transaction(30)
    q.close()
    with ClusterClient(bs) as c:  # the coordinator's abort marker moves the last stable offset to the end
        wait_for(
            lambda: c.list_offsets({(topic, 0): -1}, isolation_level=1) == c.list_offsets({(topic, 0): -1}),
            timeout=15,
            message="the timed-out transaction aborted",
        )
    with pytest.raises(ProducerFencedError, match="transaction.timeout.ms"):
        complete_transaction({"bootstrap.servers": bs}, prep2, commit=True, timeout_s=30)
    assert read_confluent(bs, topic, "read_committed") == {0: []}
    # an empty prepared transaction: nothing to complete
    e = _producer(bs)
    e.init_transactions(30)
    e.begin_transaction()
    assert e.prepare_transaction(30).producer_id == -1
    e.close()


def test_close_aborts_an_open_transaction(txn_broker):
    bs = txn_broker.bootstrap
    topic = _topic(bs, 1)
    p = _producer(bs)
    p.init_transactions(30)
    p.begin_transaction()
    f = p.send(topic, b"dropped", partition=0)
    f.result(30)
    p.close(30)
    # aborted at close: read_committed reaches the end at once (no open transaction holds the LSO)
    assert read_confluent(bs, topic, "read_committed", timeout=5) == {0: []}


# ------------------------------------------------------------------------------------ no transactions


class _OldBroker:
    """A broker of before KIP-98, as far as a transactional client can tell: answers ApiVersions
    without the transaction APIs and FindCoordinator(key_type 1) with ``code`` (53, as pyklog
    answered before it had a coordinator, or 35 UNSUPPORTED_VERSION as Kafka 0.10 does for a
    version it lacks).  Only what init_transactions sends is answered."""

    def __init__(self, code: int):
        self.code = code
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.port = self.sock.getsockname()[1]
        self.apis = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                while True:
                    head = conn.recv(4, socket.MSG_WAITALL)
                    if len(head) < 4:
                        break
                    frame = conn.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
                    h, _off = decode_request_header(frame)
                    self.apis.append(int(h.api_key))
                    if h.api_key == ApiKey.API_VERSIONS:
                        keys = [ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.API_VERSIONS]
                        resp = {
                            "error_code": 0,
                            "throttle_time_ms": 0,
                            "api_keys": [
                                {"api_key": int(k), "min_version": 0, "max_version": SUPPORTED[k][1]} for k in keys
                            ],
                        }
                    elif h.api_key == ApiKey.FIND_COORDINATOR:
                        resp = {
                            "throttle_time_ms": 0,
                            "error_code": self.code,
                            "error_message": "no transactions",
                            "node_id": -1,
                            "host": "",
                            "port": -1,
                        }
                    else:
                        break
                    conn.sendall(b"".join(encode_response(h.api_key, h.api_version, h.correlation_id, resp)))

    def close(self):
        self.sock.close()


@pytest.mark.parametrize("code,error", [(53, TransactionalIdAuthorizationFailedError), (35, UnsupportedVersionError)])
def test_broker_without_transactions_fails_fast_and_clearly(code, error):
    old = _OldBroker(code)
    try:
        p = Producer({"bootstrap.servers": f"127.0.0.1:{old.port}", "transactional.id": "x"})
        t0 = time.monotonic()
        with pytest.raises(error) as ei:
            p.init_transactions(20)
        assert time.monotonic() - t0 < 2.0
        assert "transactional id 'x'" in str(ei.value) and ApiKey.FIND_COORDINATOR in old.apis
        assert p.transaction_state is S.FATAL_ERROR
        with pytest.raises(error, match="must be closed"):
            p.begin_transaction()
        p.close(1)
    finally:
        old.close()


def test_commit_and_complete_ride_out_a_broker_sigkill(broker_factory):
    """The broker (coordinator and leader) is SIGKILLed after the records of a transaction were
    acknowledged, and restarted on the same port 1.5 s later: commit_transaction, already waiting,
    retries (connection refused, COORDINATOR_LOAD_IN_PROGRESS, ...) and returns once the
    coordinator accepted; then a prepared transaction is completed across a second SIGKILL.  Every
    acknowledged record is visible exactly once."""
    from tests.support import stable_port

    b = broker_factory(0, port=stable_port(), **TXN_PROPS)
    bs = b.bootstrap
    topic = _topic(bs, 2)
    p = _producer(bs, retry_backoff_ms=50)
    p.init_transactions(30)
    p.begin_transaction()
    futs = [p.send(topic, f"c-{i}".encode(), partition=i % 2) for i in range(50)]
    p.flush()
    assert all(f.result().offset >= 0 for f in futs)
    b.stop(signal.SIGKILL)
    restarter = threading.Timer(1.5, b.start)
    restarter.start()
    t0 = time.monotonic()
    p.commit_transaction(60)
    took = time.monotonic() - t0
    restarter.join()
    assert took >= 1.0  # it did wait for the restarted coordinator
    p.begin_transaction()
    for i in range(20):
        p.send(topic, f"p-{i}".encode(), partition=i % 2)
    prep = p.prepare_transaction(30)
    p.close()
    b.stop(signal.SIGKILL)
    restarter = threading.Timer(1.5, b.start)
    restarter.start()
    complete_transaction({"bootstrap.servers": bs, "retry.backoff.ms": 50}, prep, commit=True, timeout_s=60)
    restarter.join()
    got = read_confluent(bs, topic, "read_committed")
    values = [v for vs in got.values() for v in vs]
    want = [f"c-{i}".encode() for i in range(50)] + [f"p-{i}".encode() for i in range(20)]
    assert sorted(values) == sorted(want) and len(values) == len(set(values))
    print(
        f"\nbroker SIGKILLed twice: commit took {took:.1f}s, {len(values)} of {len(want)} acknowledged records "
        f"visible, 0 lost, 0 duplicated"
    )


def test_two_brokers_coordinator_and_leaders_apart(broker_factory):
    """Two brokers: partitions led by both, transaction coordinators spread over both (several
    transactional ids).  Commits, aborts and a prepared-then-completed transaction per id; read
    back with read_committed: exactly the committed records."""
    b0, b1 = broker_factory(0, **TXN_PROPS), broker_factory(1, **TXN_PROPS)
    bs = f"{b0.bootstrap},{b1.bootstrap}"
    topic = _topic(bs, 4)
    with ClusterClient(bs) as c:
        leaders = {c.leader_for(topic, p) for p in range(4)}
        coordinators = set()
        tids = [_tid() for _ in range(4)]
        for tid in tids:
            coordinators.add(c.find_coordinator(tid, key_type=1, timeout_s=30))
    assert leaders == {0, 1}
    want: dict = {p: [] for p in range(4)}
    for tid in tids:
        p = _producer(bs, tid)
        p.init_transactions(30)
        for t, end in enumerate(("commit", "abort", "prepare")):
            p.begin_transaction()
            vals = [(k % 4, f"{tid}-{t}-{k}".encode()) for k in range(8)]
            for part, v in vals:
                p.send(topic, v, partition=part)
            if end == "commit":
                p.commit_transaction(30)
            elif end == "abort":
                p.abort_transaction(30)
                continue
            else:
                prep = p.prepare_transaction(30)
                complete_transaction({"bootstrap.servers": b1.bootstrap}, prep, commit=True, timeout_s=30)
            for part, v in vals:
                want[part].append(v)
        p.close()
    got = read_confluent(bs, topic, "read_committed")
    assert {p: sorted(vs) for p, vs in got.items()} == {p: sorted(vs) for p, vs in want.items()}
    print(
        f"\ntwo brokers, coordinators on {sorted(coordinators)}: {sum(map(len, want.values()))} committed "
        f"records visible once, aborted ones never"
    )
