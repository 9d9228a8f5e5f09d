"""The transaction coordinator on the wire (real broker processes, raw Kafka protocol): Kafka's
checks and error codes per request version, the state in ``__transaction_state`` surviving a
SIGKILL, the fencing of a zombie producer, the timeout abort."""

from __future__ import annotations

import uuid
from collections import Counter

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, create_topic, wait_for

TXN_PROPS = {"transaction.state.log.num.partitions": "4"}

NONE, UNKNOWN_TOPIC, INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING = 0, 3, 47, 48, 49
INVALID_TRANSACTION_TIMEOUT, CONCURRENT_TRANSACTIONS, OPERATION_NOT_ATTEMPTED, PRODUCER_FENCED = 50, 51, 55, 90
COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR = 14, 16


class Txn:
    """Raw transaction requests on one connection."""

    def __init__(self, w: Wire, tid: str):
        self.w, self.tid = w, tid
        self.pid, self.epoch = -1, -1

    def find(self) -> dict:
        return self.w.request(ApiKey.FIND_COORDINATOR, 1, {"key": self.tid, "key_type": 1})

    def init(self, timeout_ms: int = 60000, version: int = 1) -> dict:
        r = self.w.request(
            ApiKey.INIT_PRODUCER_ID, version, {"transactional_id": self.tid, "transaction_timeout_ms": timeout_ms}
        )
        if r["error_code"] == NONE:
            self.pid, self.epoch = r["producer_id"], r["producer_epoch"]
        return r

    def init_retrying(self, timeout_ms: int = 60000) -> dict:
        """InitProducerId until it is not CONCURRENT_TRANSACTIONS / loading (what clients do)."""
        return wait_for(
            lambda: (
                (r := self.init(timeout_ms))["error_code"]
                not in (CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS)
                and r
            ),
            message="InitProducerId",
        )

    def add(self, parts, version: int = 2, pid=None, epoch=None) -> dict[tuple, int]:
        topics: dict[str, list] = {}
        for t, p in parts:
            topics.setdefault(t, []).append(p)
        r = self.w.request(
            ApiKey.ADD_PARTITIONS_TO_TXN,
            version,
            {
                "v3_and_below_transactional_id": self.tid,
                "v3_and_below_producer_id": self.pid if pid is None else pid,
                "v3_and_below_producer_epoch": self.epoch if epoch is None else epoch,
                "v3_and_below_topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
            },
        )
        return {
            (t["name"], p["partition_index"]): p["partition_error_code"]
            for t in r["results_by_topic_v3_and_below"]
            for p in t["results_by_partition"]
        }

    def add_offsets(self, group: str, version: int = 2) -> int:
        return self.w.request(
            ApiKey.ADD_OFFSETS_TO_TXN,
            version,
            {"transactional_id": self.tid, "producer_id": self.pid, "producer_epoch": self.epoch, "group_id": group},
        )["error_code"]

    def end(self, commit: bool, version: int = 2, pid=None, epoch=None) -> int:
        return self.w.request(
            ApiKey.END_TXN,
            version,
            {
                "transactional_id": self.tid,
                "producer_id": self.pid if pid is None else pid,
                "producer_epoch": self.epoch if epoch is None else epoch,
                "committed": commit,
            },
        )["error_code"]


def _tid() -> str:
    return f"tx-{uuid.uuid4().hex[:8]}"


def test_api_versions_advertise_the_transaction_apis(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w:
        keys = {
            k["api_key"]: (k["min_version"], k["max_version"])
            for k in w.request(ApiKey.API_VERSIONS, 0, {})["api_keys"]
        }
    from pyklog.broker.protocol import SUPPORTED

    for k in (ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
        assert keys[int(k)] == SUPPORTED[k] and SUPPORTED[k][1] >= 2  # v2+: PRODUCER_FENCED


def test_init_producer_id_and_the_error_codes_of_each_version(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, topic, 2)["error_code"] == 0
        tx = Txn(w, _tid())
        r = tx.find()
        assert r["error_code"] == NONE and (r["node_id"], r["port"]) == (0, b.port), r
        # the topic exists now, compacted, with the configured partition count
        md = w.request(
            ApiKey.METADATA, 5, {"topics": [{"name": "__transaction_state"}], "allow_auto_topic_creation": False}
        )["topics"][0]
        assert md["is_internal"] and len(md["partitions"]) == 4
        assert tx.init(timeout_ms=900001)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert tx.init(timeout_ms=0)["error_code"] == INVALID_TRANSACTION_TIMEOUT
        assert tx.init()["error_code"] == NONE and tx.epoch == 0
        pid = tx.pid
        assert tx.init()["error_code"] == NONE and (tx.pid, tx.epoch) == (pid, 1)  # epoch bump, same id
        # EndTxn with no transaction: INVALID_TXN_STATE
        assert tx.end(True) == INVALID_TXN_STATE
        # wrong producer id: INVALID_PRODUCER_ID_MAPPING; old epoch: PRODUCER_FENCED (v2) / INVALID_PRODUCER_EPOCH
        assert set(tx.add([(topic, 0)], pid=pid + 1).values()) == {INVALID_PRODUCER_ID_MAPPING}
        assert set(tx.add([(topic, 0)], epoch=0).values()) == {PRODUCER_FENCED}
        assert set(tx.add([(topic, 0)], epoch=0, version=1).values()) == {INVALID_PRODUCER_EPOCH}
        assert set(tx.add([(topic, 0)], epoch=0, version=0).values()) == {INVALID_PRODUCER_EPOCH}
        assert tx.end(True, epoch=0) == PRODUCER_FENCED and tx.end(True, epoch=0, version=1) == INVALID_PRODUCER_EPOCH
        # an unknown id
        other = Txn(w, _tid())
        other.pid, other.epoch = pid, 1
        assert other.end(True) == INVALID_PRODUCER_ID_MAPPING
        assert set(other.add([(topic, 0)]).values()) == {INVALID_PRODUCER_ID_MAPPING}
        # unknown topic: that partition UNKNOWN_TOPIC_OR_PARTITION, the others OPERATION_NOT_ATTEMPTED
        assert tx.add([(topic, 0), ("no-such-topic", 0), (topic, 7)]) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED,
            ("no-such-topic", 0): UNKNOWN_TOPIC,
            (topic, 7): UNKNOWN_TOPIC,
        }
        # internal topics: INVALID_TOPIC_EXCEPTION (only the coordinators write there)
        assert tx.add([(topic, 0), ("__transaction_state", 0)]) == {
            (topic, 0): OPERATION_NOT_ATTEMPTED,
            ("__transaction_state", 0): 17,
        }
        # a transaction: add, add again (idempotent), offsets, then commit
        assert tx.add([(topic, 0), (topic, 1)]) == {(topic, 0): NONE, (topic, 1): NONE}
        assert tx.add([(topic, 1)]) == {(topic, 1): NONE}
        assert tx.add_offsets("some-group") == NONE
        assert tx.end(False, epoch=tx.epoch, version=2, pid=tx.pid) in (NONE,)  # abort from the same producer
        # while the abort's markers are pending or after: commit is the wrong result
        assert tx.end(True) == INVALID_TXN_STATE
        # an empty id is a bad request
        bad = Txn(w, "")
        assert bad.init()["error_code"] == 42


def test_find_coordinator_from_every_broker_and_not_coordinator_elsewhere(broker_factory):
    b0, b1 = broker_factory(0, **TXN_PROPS), broker_factory(1, **TXN_PROPS)
    with Wire(b0.port) as w0, Wire(b1.port) as w1:
        wait_for(
            lambda: (
                len(w0.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})["brokers"]) == 2
            ),
            message="two brokers",
        )
        # ids whose coordinator is each broker
        seen: dict[int, str] = {}
        for _ in range(40):
            tid = _tid()
            r = Txn(w0, tid).find()
            assert r["error_code"] == NONE, r
            assert Txn(w1, tid).find()["node_id"] == r["node_id"]
            seen.setdefault(r["node_id"], tid)
            if len(seen) == 2:
                break
        assert set(seen) == {0, 1}
        wires = {0: w0, 1: w1}
        for node, tid in seen.items():
            assert Txn(wires[1 - node], tid).init()["error_code"] == NOT_COORDINATOR
            assert Txn(wires[node], tid).init_retrying()["error_code"] == NONE


def test_state_survives_sigkill_of_the_coordinator(broker_factory):
    """Every acknowledged transition is in __transaction_state before the answer: after SIGKILL and
    restart the coordinator reloads them (counted: every id's producer id, epoch and state)."""
    from tests.support import stable_port

    b = broker_factory(0, port=stable_port(), **TXN_PROPS)
    with Wire(b.port) as w:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, topic, 1)["error_code"] == 0
        txns = [Txn(w, _tid()) for _ in range(12)]
        for i, tx in enumerate(txns):
            assert tx.init()["error_code"] == NONE
            if i % 3 == 1:
                assert tx.init()["error_code"] == NONE and tx.epoch == 1  # bumped once: epoch 1 acknowledged
            if i % 3 == 2:
                assert tx.add([(topic, 0)]) == {(topic, 0): NONE}  # Ongoing acknowledged
    b.kill()
    b.start()
    with Wire(b.port) as w:
        lost = 0
        for i, tx in enumerate(txns):
            tx.w = w
            if i % 3 == 2:
                # still Ongoing with the same producer: the commit is accepted (Empty would be INVALID_TXN_STATE)
                code = (
                    wait_for(lambda: (c := tx.end(True)) != COORDINATOR_LOAD_IN_PROGRESS and c + 1000, message="loaded")
                    - 1000
                )
                lost += code != NONE
            else:
                code = (
                    wait_for(lambda: (c := tx.end(True)) != COORDINATOR_LOAD_IN_PROGRESS and c + 1000, message="loaded")
                    - 1000
                )
                lost += code != INVALID_TXN_STATE  # Empty, same epoch (a lost bump would be PRODUCER_FENCED)
                old_pid, old_epoch = tx.pid, tx.epoch
                assert tx.init()["error_code"] == NONE
                lost += (tx.pid, tx.epoch) != (old_pid, old_epoch + 1)
        assert lost == 0


def test_timed_out_transaction_is_aborted_and_its_producer_fenced(broker_factory):
    b = broker_factory(0, **TXN_PROPS, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"})
    with Wire(b.port) as w:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, topic, 1)["error_code"] == 0
        tx = Txn(w, _tid())
        assert tx.init_retrying(timeout_ms=1000)["error_code"] == NONE
        assert tx.add([(topic, 0)]) == {(topic, 0): NONE}
        # the coordinator aborts it with epoch + 1: the producer's next request is fenced (until then
        # NONE, or CONCURRENT_TRANSACTIONS while the fence is being written)
        seen = []
        wait_for(
            lambda: seen.append(c := tx.add([(topic, 0)])[(topic, 0)]) or c == PRODUCER_FENCED,
            timeout=30,
            message="the timed-out transaction's producer fenced",
        )
        assert set(seen) <= {NONE, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED}, seen
        assert tx.end(True) == PRODUCER_FENCED
        assert tx.end(True, version=0) == INVALID_PRODUCER_EPOCH
    assert "timed out after 1000 ms: aborting it" in b.output()


def test_a_new_producer_fences_the_zombie(broker_factory):
    """InitProducerId while the old producer's transaction is Ongoing: CONCURRENT_TRANSACTIONS while
    it is aborted with a bumped epoch; the old producer (same connection or another) is fenced."""
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w1, Wire(b.port) as w2:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w1, topic, 1)["error_code"] == 0
        tid = _tid()
        zombie, fresh = Txn(w1, tid), Txn(w2, tid)
        assert zombie.init()["error_code"] == NONE
        assert zombie.add([(topic, 0)]) == {(topic, 0): NONE}
        assert fresh.init()["error_code"] == CONCURRENT_TRANSACTIONS
        assert zombie.end(True) == PRODUCER_FENCED  # its epoch was bumped by the abort
        assert zombie.end(True, version=1) == INVALID_PRODUCER_EPOCH
        assert set(zombie.add([(topic, 0)]).values()) == {PRODUCER_FENCED}


def test_idempotent_producers_and_group_coordinators_unchanged(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w:
        r = w.request(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert r["error_code"] == 0 and r["producer_id"] >= 0 and r["producer_epoch"] == 0
        r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": "some-group", "key_type": 0})
        assert r["error_code"] in (0, 14, 15), r
        r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": "x", "key_type": 7})
        assert r["error_code"] == 42, r  # INVALID_REQUEST, answered at once


def test_end_txn_retries_concurrent_transactions_and_reinit(broker_factory):
    """While the markers are pending the next request gets CONCURRENT_TRANSACTIONS; once complete,
    a retried EndTxn of the same result succeeds and of the other result is INVALID_TXN_STATE;
    EndTxn works from another connection presenting the producer id and epoch (the Spark driver
    completing a task's transaction); InitProducerId over an Ongoing transaction aborts it."""
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w, Wire(b.port) as driver:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, topic, 2)["error_code"] == 0
        tx = Txn(w, _tid())
        assert tx.init()["error_code"] == NONE
        for commit in (True, False, True):
            assert tx.add([(topic, 0), (topic, 1)]) == {(topic, 0): NONE, (topic, 1): NONE}
            assert tx.add_offsets("g1") == NONE
            other = Txn(driver, tx.tid)
            other.pid, other.epoch = tx.pid, tx.epoch
            assert other.end(commit) == NONE  # from another connection
            # until CompleteCommit/CompleteAbort: the same result is CONCURRENT_TRANSACTIONS, the next
            # transaction too; afterwards the same result succeeds again
            wait_for(lambda: tx.end(commit) == NONE, message="the transaction completed")
            assert tx.end(not commit) == INVALID_TXN_STATE
        # an Ongoing transaction and a new InitProducerId: aborted, then a bumped epoch
        assert tx.add([(topic, 0)]) == {(topic, 0): NONE}
        old_epoch = tx.epoch
        fresh = Txn(driver, tx.tid)
        r = fresh.init_retrying()
        assert r["error_code"] == NONE and (fresh.pid, fresh.epoch) == (tx.pid, old_epoch + 2)  # fence + init
        assert tx.end(False) == PRODUCER_FENCED


def test_idle_transactional_ids_expire(broker_factory):
    from tests.support import stable_port

    b = broker_factory(
        0,
        port=stable_port(),
        **TXN_PROPS,
        **{
            "transactional.id.expiration.ms": "1500",
            "transaction.remove.expired.transaction.cleanup.interval.ms": "300",
        },
    )
    with Wire(b.port) as w:
        topic = f"t-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, topic, 1)["error_code"] == 0
        idle, busy = Txn(w, _tid()), Txn(w, _tid())
        assert idle.init()["error_code"] == NONE and busy.init(timeout_ms=600000)["error_code"] == NONE
        assert busy.add([(topic, 0)]) == {(topic, 0): NONE}  # Ongoing: never expires
        wait_for(lambda: idle.end(True) == INVALID_PRODUCER_ID_MAPPING, timeout=20, message="the idle id expired")
        assert busy.end(True) == NONE
    b.kill()
    b.start()
    with Wire(b.port) as w:
        idle.w = w
        code = (
            wait_for(lambda: (c := idle.end(True)) != COORDINATOR_LOAD_IN_PROGRESS and c + 1000, message="loaded")
            - 1000
        )
        assert code == INVALID_PRODUCER_ID_MAPPING  # the tombstone is in the log
        old_pid = idle.pid
        assert idle.init()["error_code"] == NONE and idle.epoch == 0 and idle.pid != old_pid
    assert "expired (idle for more than 1500 ms): removed" in b.output()


def test_markers_for_a_deleted_topic_are_dropped(broker_factory):
    b = broker_factory(0, **TXN_PROPS)
    with Wire(b.port) as w:
        kept, doomed = f"k-{uuid.uuid4().hex[:6]}", f"d-{uuid.uuid4().hex[:6]}"
        assert create_topic(w, kept, 1)["error_code"] == 0 and create_topic(w, doomed, 2)["error_code"] == 0
        tx = Txn(w, _tid())
        assert tx.init()["error_code"] == NONE
        assert set(tx.add([(kept, 0), (doomed, 0), (doomed, 1)]).values()) == {NONE}
        r = w.request(ApiKey.DELETE_TOPICS, 3, {"topic_names": [doomed], "timeout_ms": 10000})
        assert r["responses"][0]["error_code"] == 0
        assert tx.end(True) == NONE
        wait_for(
            lambda: tx.end(True) == NONE and tx.add([(kept, 0)]) == {(kept, 0): NONE},
            timeout=20,
            message="the commit completed without the deleted topic's markers",
        )
    assert f"{doomed}-0 no longer exists" in b.output()


def test_racing_requests_on_one_transactional_id(broker_factory):
    """Four connections race InitProducerId / AddPartitionsToTxn / EndTxn on the same id (handler
    threads in parallel, one lock per id): no two successful InitProducerId answers share an epoch
    (each fences all before it), every answer is one of Kafka's codes for the situation, and the
    broker logs no error."""
    import random
    import threading

    b = broker_factory(0, **TXN_PROPS)
    topic = f"t-{uuid.uuid4().hex[:6]}"
    tid = _tid()
    with Wire(b.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
        assert Txn(w, tid).init()["error_code"] == NONE
    epochs, codes, errors = [], Counter(), []
    lock = threading.Lock()

    def run(seed: int) -> None:
        rng = random.Random(seed)
        try:
            with Wire(b.port) as w:
                tx = Txn(w, tid)
                r = tx.init_retrying()  # a producer id first (without one: INVALID_PRODUCER_ID_MAPPING)
                with lock:
                    epochs.append((r["producer_id"], r["producer_epoch"]))
                for _ in range(40):
                    op = rng.choice(["init", "add", "add", "commit", "abort"])
                    if op == "init":
                        r = tx.init()
                        code = r["error_code"]
                        if code == NONE:
                            with lock:
                                epochs.append((r["producer_id"], r["producer_epoch"]))
                    elif op == "add":
                        code = set(tx.add([(topic, rng.randrange(2))]).values()).pop()
                    else:
                        code = tx.end(op == "commit")
                    with lock:
                        codes[(op, code)] += 1
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert errors == []
    assert len(epochs) == len(set(epochs)), sorted(epochs)
    allowed = {NONE, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED, INVALID_TXN_STATE}
    assert {code for _, code in codes} <= allowed, codes
    assert codes[("init", NONE)] > 0 and codes[("add", NONE)] > 0
    # the state is consistent afterwards: a new producer gets a fresh epoch and can commit
    with Wire(b.port) as w:
        tx = Txn(w, tid)
        assert tx.init_retrying()["error_code"] == NONE
        assert (tx.pid, tx.epoch) not in epochs
        assert tx.add([(topic, 0)]) == {(topic, 0): NONE} and tx.end(True) == NONE
    out = b.output()
    assert "Traceback" not in out and " ERROR " not in out, out[-5000:]
