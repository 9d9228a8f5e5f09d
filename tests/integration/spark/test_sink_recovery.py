"""The exactly-once sink driver's recovery decisions against each real commit-record store (ZooKeeper,
and the cluster's ``__pyklog_spark_sinks`` topic on a real broker): the brokers' side of
``complete_transaction`` is replaced by a table of transaction states here, so every branch of the
decision (first commit, replay after a half-done commit, replay after the brokers aborted everything,
partial loss, abort after a failed commit, lingering clean-up) is checked in milliseconds.

Options and codecs without a server are in tests/unit/spark/test_sink_exactly_once.py; the same guarantees
against real brokers and a SIGKILLed Spark driver in tests/integration/spark/test_sink_exactly_once.py and
tests/faults/test_spark_sink_exactly_once.py."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from pyklog.broker.errors import InvalidTxnStateError, ProducerFencedError
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink import (
    CommitRecord,
    PyklogCommitMessage,
    PyklogStreamWriter,
    SinkTransactionError,
    TaskIdentity,
)

SCHEMA = StructType([StructField("value", BinaryType())])


class _Brokers:
    """The transaction coordinator's answers to EndTxn, as complete_transaction reports them."""

    def __init__(self):
        self.state: dict[str, str] = {}  # transactional id -> open | committed | aborted
        self.calls: list[tuple[str, bool]] = []
        self.fenced: list[str] = []

    def prepare(self, tid: str) -> tuple:
        self.state[tid] = "open"
        return (tid, 1000 + len(self.state), 0)

    def complete(self, txn, commit: bool) -> None:
        tid = txn[0]
        self.calls.append((tid, commit))
        s = self.state[tid]
        want = "committed" if commit else "aborted"
        if s == "open" or s == want:
            self.state[tid] = want
        elif s == "aborted":
            raise ProducerFencedError(f"{tid}: aborted")
        else:
            raise InvalidTxnStateError(f"{tid}: abort requested after the commit completed")

    def fence(self, tid: str) -> None:
        self.fenced.append(tid)
        if self.state.get(tid) == "open":
            self.state[tid] = "aborted"


class _Writer(PyklogStreamWriter):
    """The real driver-side logic with EndTxn answered by ``_Brokers`` (pickles nothing)."""

    brokers: _Brokers

    def _complete(self, txn, commit):
        self.brokers.complete(txn, commit)

    def _fence(self, tid):
        self.brokers.fence(tid)


@pytest.fixture(params=["zookeeper", "kafka"])
def where(request):
    """The sink's options naming the cluster, one per commit-record store: ``zookeeper.connect``
    keeps the records in ZooKeeper, ``kafka.bootstrap.servers`` alone in the cluster's topic."""
    if request.param == "zookeeper":
        return {"zookeeper.connect": request.getfixturevalue("zk_chroot")}
    return {"kafka.bootstrap.servers": request.getfixturevalue("broker").bootstrap}


def _opts(where):
    return parse_sink_options({**where, "topic": "t", "deliveryGuarantee": "exactly-once"})


def _writer(where, brokers) -> _Writer:
    w = _Writer(_opts(where), SCHEMA)  # a fresh instance per call, as Spark's driver worker makes
    w.brokers = brokers
    return w


def _log(where, q):
    """The commit-record store the writer uses for query ``q`` (a context manager)."""
    return _writer(where, None)._sink_log(f"pyklog-spark-{q}")


def _records(where, q, batches=range(8)) -> dict:
    """``{batch id: commit record as JSON}`` of the batches that have one."""
    with _log(where, q) as tlog:
        found = {b: tlog.read(q, b)[0] for b in batches}
    return {b: json.loads(r.encode()) for b, r in found.items() if r is not None}


def _registered(where, q) -> dict:
    with _log(where, q) as tlog:
        return tlog.registered(q, 1 << 30)


def _task(brokers, where, q, batch, partition, attempt=0, register=True) -> PyklogCommitMessage:
    ident = TaskIdentity(q, batch, partition, attempt, f"pyklog-spark-{q}", f"{len(brokers.state):08x}")
    tid = ident.transactional_id()
    if register:
        with _log(where, q) as tlog:
            tlog.register(q, batch, tid, partition, attempt)
    return PyklogCommitMessage(
        records=10,
        per_topic={"t": 10},
        transaction=brokers.prepare(tid),
        query_id=q,
        batch_id=batch,
        partition=partition,
        started_at=None,
    )


def test_recovery_decisions(where):
    b = _Brokers()
    q = "5b1f0c6e-0000-4000-8000-000000000001"
    # batch 0: two tasks; a speculative loser of partition 1 registered and prepared, never reported
    m0 = [_task(b, where, q, 0, 0), _task(b, where, q, 0, 1)]
    loser = _task(b, where, q, 0, 1, attempt=1)
    _writer(where, b).commit(m0, 0)
    assert [b.state[m.transaction[0]] for m in m0] == ["committed", "committed"]
    assert b.state[loser.transaction[0]] == "aborted" and b.fenced == [loser.transaction[0]]
    rec = _records(where, q)[0]
    assert rec["state"] == "committed" and len(rec["transactions"]) == 2
    assert _registered(where, q) == {}  # registrations forgotten
    # commit is idempotent: the same call again changes nothing
    _writer(where, b).commit(m0, 0)
    assert [b.state[m.transaction[0]] for m in m0] == ["committed", "committed"]

    # batch 1, first attempt: the driver dies after committing 1 of 3 (the record was written first)
    m1 = [_task(b, where, q, 1, p) for p in range(3)]
    created = CommitRecord(q, 1, tuple(sorted(m.transaction for m in m1)), "prepared", None)
    with _log(where, q) as tlog:
        tlog.decide(created)
    b.complete(created.transactions[0], True)
    # the replay: new tasks, new transactions; the driver completes the first attempt's, aborts its own
    r1 = [_task(b, where, q, 1, p) for p in range(3)]
    _writer(where, b).commit(r1, 1)
    assert all(b.state[t[0]] == "committed" for t in created.transactions)
    assert all(b.state[m.transaction[0]] == "aborted" for m in r1)
    assert list(_records(where, q)) == [1]  # batch 0's record forgotten

    # batch 2: the driver died before commit; the replay aborts the first attempt's (registered) ones
    m2 = [_task(b, where, q, 2, p) for p in range(2)]
    r2 = [_task(b, where, q, 2, p) for p in range(2)]
    _writer(where, b).commit(r2, 2)
    assert all(b.state[m.transaction[0]] == "committed" for m in r2)
    assert all(b.state[m.transaction[0]] == "aborted" for m in m2)

    # batch 3: the commit record was written, then the brokers aborted everything (timeout): nothing
    # of the batch is visible, so the replay's transactions become the batch
    m3 = [_task(b, where, q, 3, p) for p in range(2)]
    with _log(where, q) as tlog:
        tlog.decide(CommitRecord(q, 3, tuple(sorted(m.transaction for m in m3)), "prepared", None))
    for m in m3:
        b.fence(m.transaction[0])
    r3 = [_task(b, where, q, 3, p) for p in range(2)]
    _writer(where, b).commit(r3, 3)
    assert all(b.state[m.transaction[0]] == "committed" for m in r3)

    # batch 4: one committed, one aborted by the brokers: the batch cannot be exactly once -> loud failure
    m4 = [_task(b, where, q, 4, p) for p in range(2)]
    with _log(where, q) as tlog:
        rec4, _, _ = tlog.decide(CommitRecord(q, 4, tuple(sorted(m.transaction for m in m4)), "prepared", None))
    b.complete(rec4.transactions[0], True)
    b.fence(rec4.transactions[1][0])
    r4 = [_task(b, where, q, 4, p) for p in range(2)]
    with pytest.raises(SinkTransactionError, match="1 of its 2 prepared transactions were aborted"):
        _writer(where, b).commit(r4, 4)


def test_abort_never_undoes_a_recorded_commit(where):
    b = _Brokers()
    q = "5b1f0c6e-0000-4000-8000-000000000002"
    m = [_task(b, where, q, 0, p) for p in range(2)]
    # no record: abort aborts the prepared transactions
    _writer(where, b).abort(m, 0)
    assert all(b.state[x.transaction[0]] == "aborted" for x in m)
    # a commit that failed after writing its record: Spark calls abort; the record's transactions stay
    m = [_task(b, where, q, 1, p) for p in range(2)]
    with _log(where, q) as tlog:
        tlog.decide(CommitRecord(q, 1, tuple(sorted(x.transaction for x in m)), "prepared", None))
    b.complete(m[0].transaction, True)
    _writer(where, b).abort(m, 1)
    assert b.state[m[1].transaction[0]] == "open"  # left for the replay's commit
    _writer(where, b).commit([_task(b, where, q, 1, p) for p in range(2)], 1)
    assert all(b.state[x.transaction[0]] == "committed" for x in m)
