"""The transaction admin APIs (KIP-664: DescribeProducers, DescribeTransactions, ListTransactions)
and ``pyklog-transactions`` (Kafka's kafka-transactions.sh) against real brokers:

* a transaction left open by a SIGKILLed confluent-kafka transactional producer is listed and
  described as Ongoing with its partitions, its producer state shows where it starts on each
  partition, find-hanging does not report it (its coordinator will write the markers), and once a
  new producer with the same id fences it, the same tools show it aborted; a read_committed reader
  then counts what it sees;
* a real hanging transaction (transactional data the coordinator never heard of: Kafka's
  pre-KIP-890 hanging transaction) holds the last stable offset back, ``find-hanging`` reports it
  and ``abort`` releases it: the records written after it become visible, its own never;
* two brokers: each lists the transactional ids it coordinates, DescribeTransactions elsewhere
  answers NOT_COORDINATOR, state and producer id filters as Kafka;
* usage and call errors exit 1 with one line saying what failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid

from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from tests.integration.transaction_support import (
    read_committed_values,
    sigkill_in_open_transaction,
    two_brokers,
)
from tests.support import Wire, create_topic, produce, records, wait_for

BIN = os.path.dirname(sys.executable)
TXN_PROPS = {
    "transaction.state.log.num.partitions": "4",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
}


def tool(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [os.path.join(BIN, "pyklog-transactions"), *args], capture_output=True, text=True, timeout=120
    )


def table(out: str) -> list[dict]:
    """Kafka's prettyPrintTable output -> one dict per row, keyed by the header."""
    lines = [ln for ln in out.splitlines() if ln.strip()]
    headers = [h.strip() for h in lines[0].split("\t") if h.strip()]
    rows = []
    for ln in lines[1:]:
        cells = [c.strip() for c in ln.split("\t")][: len(headers)]
        rows.append(dict(zip(headers, cells)))
    return rows


def rows_of(bootstrap: str, *args) -> list[dict]:
    r = tool("--bootstrap-server", bootstrap, *args)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return table(r.stdout)


def test_sigkilled_producers_open_transaction_in_list_describe_and_describe_producers(broker_factory):
    from confluent_kafka import Producer
    from kafka import TopicPartition as KpTP
    from kafka.admin import KafkaAdminClient

    b = broker_factory(0, **TXN_PROPS)
    topic, tid = f"txa-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:8]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
        assert produce(w, topic, records(3, prefix=b"plain"), partition=0)["error_code"] == 0  # offsets 0-2
    started_ms = int(time.time() * 1000)
    sigkill_in_open_transaction(b.bootstrap, tid, topic, transaction_timeout_ms=120000)

    listed = [r for r in rows_of(b.bootstrap, "list") if r["TransactionalId"] == tid]
    assert len(listed) == 1 and listed[0]["Coordinator"] == "0" and listed[0]["TransactionState"] == "Ongoing"
    pid = int(listed[0]["ProducerId"])

    (d,) = rows_of(b.bootstrap, "describe", "--transactional-id", tid)
    assert (
        d["CoordinatorId"],
        d["TransactionalId"],
        int(d["ProducerId"]),
        d["ProducerEpoch"],
        d["TransactionState"],
        d["TransactionTimeoutMs"],
    ) == ("0", tid, pid, "0", "Ongoing", "120000")
    assert d["TopicPartitions"] == f"{topic}-0,{topic}-1"
    assert started_ms <= int(d["CurrentTransactionStartTimeMs"]) <= int(time.time() * 1000)
    assert int(d["TransactionDurationMs"]) >= 0

    # producer state on each partition: 13 records on p0 after the 3 plain ones, 12 on p1
    for partition, start, n in ((0, 3, 13), (1, 0, 12)):
        (s,) = rows_of(b.bootstrap, "describe-producers", "--topic", topic, "--partition", str(partition))
        assert (
            int(s["ProducerId"]),
            s["ProducerEpoch"],
            s["LatestCoordinatorEpoch"],
            s["LastSequence"],
            s["CurrentTransactionStartOffset"],
        ) == (pid, "0", "-1", str(n - 1), str(start)), s
        assert started_ms <= int(s["LastTimestamp"]) <= int(time.time() * 1000)

    # the coordinator still counts both partitions in the transaction: not hanging, even at 0 minutes
    assert rows_of(b.bootstrap, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0") == []

    # kafka-python's transaction admin calls read the same state (DescribeTransactions v0,
    # ListTransactions v1 with its duration filter, DescribeProducers v0)
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        desc = kp.describe_transactions([tid])[tid]
        assert (desc.state.value, desc.producer_id, desc.transaction_timeout_ms) == ("Ongoing", pid, 120000)
        assert desc.topic_partitions == {KpTP(topic, 0), KpTP(topic, 1)}
        assert [t.transactional_id for t in kp.list_transactions(state_filters=["Ongoing"])[0]] == [tid]
        assert kp.list_transactions(state_filters=["CompleteCommit"]) == {0: []}
        assert kp.list_transactions(duration_filter_ms=3_600_000) == {0: []}  # not running for an hour
        assert [t.transactional_id for t in kp.list_transactions(duration_filter_ms=0)[0]] == [tid]
        states = kp.describe_producers([KpTP(topic, 1)])[KpTP(topic, 1)].active_producers
        assert [(p.producer_id, p.current_transaction_start_offset) for p in states] == [(pid, 0)]
    finally:
        kp.close()

    # a new producer with the same id fences the killed one: its transaction is aborted
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(60)
    (d,) = rows_of(b.bootstrap, "describe", "--transactional-id", tid)
    assert (int(d["ProducerId"]), d["TransactionState"], d["TopicPartitions"]) == (pid, "Empty", "")
    assert int(d["ProducerEpoch"]) >= 1 and d["CurrentTransactionStartTimeMs"] == "None"
    for partition in (0, 1):
        (s,) = rows_of(b.bootstrap, "describe-producers", "--topic", topic, "--partition", str(partition))
        assert s["CurrentTransactionStartOffset"] == "None" and int(s["ProducerEpoch"]) >= 1, s
        assert int(s["LatestCoordinatorEpoch"]) >= 0  # the abort marker's coordinator epoch
    seen = read_committed_values(b.bootstrap, topic, 2)
    acked_open = {b"open%d" % i for i in range(25)}
    plain = [b"plain%d" % i for i in range(3)]
    assert sorted(seen) == plain, f"lost {set(plain) - set(seen)}, leaked {set(seen) & acked_open}"


def _init_producer_id(w: Wire, tid: str) -> tuple[int, int]:
    def attempt():
        r = w.request(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": tid, "transaction_timeout_ms": 60000})
        return (r["producer_id"], r["producer_epoch"]) if r["error_code"] == 0 else None

    return wait_for(attempt, message="InitProducerId")


def test_hanging_transaction_is_found_and_aborted(broker_factory):
    """Transactional records appended without the coordinator knowing the partition (the produce
    outlived its transaction, as before KIP-890): nothing will ever write their marker, so a
    read_committed reader is stuck before them.  find-hanging reports exactly that partition and
    producer; abort writes the ABORT marker; then every record written after it is delivered and
    none of the hanging ones."""
    from confluent_kafka import Producer

    b = broker_factory(0, **TXN_PROPS)
    topic, tid = f"txh-{uuid.uuid4().hex[:6]}", f"tx-{uuid.uuid4().hex[:8]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 1)["error_code"] == 0
        assert produce(w, topic, records(2, prefix=b"before"), partition=0)["error_code"] == 0  # offsets 0-1
        pid, epoch = _init_producer_id(w, tid)
        batch = build_batch(
            [(None, b"hanging%d" % i, None, ()) for i in range(5)],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=0,
            is_transactional=True,
        )
        r = w.request(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": tid,
                "acks": -1,
                "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
            },
        )
        assert r["responses"][0]["partition_responses"][0]["error_code"] == 0  # offsets 2-6
    plain = Producer({"bootstrap.servers": b.bootstrap})
    after = [b"after%d" % i for i in range(10)]
    for v in after:
        plain.produce(topic, value=v, partition=0)
    assert plain.flush(30) == 0

    held = read_committed_values(b.bootstrap, topic, 1)
    assert held == [b"before0", b"before1"]  # stuck at the hanging transaction's first offset

    assert rows_of(b.bootstrap, "find-hanging", "--broker-id", "0") == []  # younger than 15 minutes
    (h,) = rows_of(b.bootstrap, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0")
    assert (
        h["Topic"],
        h["Partition"],
        int(h["ProducerId"]),
        int(h["ProducerEpoch"]),
        h["CoordinatorEpoch"],
        h["StartOffset"],
        h["Duration(min)"],
    ) == (topic, "0", pid, epoch, "-1", "2", "0")
    assert rows_of(
        b.bootstrap, "find-hanging", "--topic", topic, "--partition", "0", "--max-transaction-timeout", "0"
    ) == [h]
    (d,) = rows_of(b.bootstrap, "describe", "--transactional-id", tid)
    assert d["TransactionState"] == "Empty" and d["TopicPartitions"] == ""  # the coordinator knows nothing of it

    r = tool("--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "3")
    assert r.returncode == 1 and "Could not find any open transactions starting at offset 3" in r.stderr
    r = tool("--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", "2")
    assert r.returncode == 0, r.stderr

    seen = read_committed_values(b.bootstrap, topic, 1)
    hanging = {b"hanging%d" % i for i in range(5)}
    assert seen == [b"before0", b"before1"] + after, (
        f"lost {set(after) - set(seen)}, leaked {set(seen) & hanging}, duplicated {len(seen) - len(set(seen))}"
    )
    assert rows_of(b.bootstrap, "find-hanging", "--broker-id", "0", "--max-transaction-timeout", "0") == []
    (s,) = rows_of(b.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    assert int(s["ProducerId"]) == pid and s["CurrentTransactionStartOffset"] == "None"


def test_two_brokers_list_their_own_transactions_and_describe_elsewhere_is_not_coordinator(broker_factory):
    b0, b1 = two_brokers(broker_factory, **TXN_PROPS)
    # one transactional id coordinated by each broker, each with an Empty state (InitProducerId only)
    tids, pids, never_seen = {}, {}, {}
    with Wire(b0.port) as w:
        while len(tids) < 2 or len(never_seen) < 2:
            tid = f"tx-{uuid.uuid4().hex[:8]}"
            r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": tid, "key_type": 1})
            if r["error_code"] == 0:
                (tids if r["node_id"] not in tids else never_seen).setdefault(r["node_id"], tid)
    for node, tid in tids.items():
        with Wire((b0, b1)[node].port) as w:
            pids[node] = _init_producer_id(w, tid)[0]

    for node, b in ((0, b0), (1, b1)):
        other = 1 - node
        with Wire(b.port) as w:
            listed = w.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": [], "producer_id_filters": []})
            assert listed["error_code"] == 0
            assert [
                (s["transactional_id"], s["producer_id"], s["transaction_state"]) for s in listed["transaction_states"]
            ] == [(tids[node], pids[node], "Empty")]
            # Kafka's filters: states (unknown names reported back, matching nothing), producer ids
            f = w.request(ApiKey.LIST_TRANSACTIONS, 0, {"state_filters": ["Bogus"], "producer_id_filters": []})
            assert f["unknown_state_filters"] == ["Bogus"] and f["transaction_states"] == []
            f = w.request(
                ApiKey.LIST_TRANSACTIONS,
                0,
                {"state_filters": ["Empty", "Ongoing"], "producer_id_filters": [pids[other]]},
            )
            assert f["unknown_state_filters"] == [] and f["transaction_states"] == []
            d = w.request(
                ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tids[node], tids[other], never_seen[node]]}
            )
            mine, theirs, unknown = d["transaction_states"]
            assert (mine["error_code"], mine["transaction_state"], mine["producer_id"]) == (0, "Empty", pids[node])
            assert mine["topics"] == [] and mine["transaction_start_time_ms"] == -1
            assert theirs["error_code"] == 16  # NOT_COORDINATOR
            assert unknown["error_code"] == 105  # TRANSACTIONAL_ID_NOT_FOUND (its coordinator has no state)
    # the tool asks every broker and each id's coordinator
    rows = rows_of(b0.bootstrap, "list")
    assert sorted(
        (r["TransactionalId"], r["Coordinator"], int(r["ProducerId"]), r["TransactionState"]) for r in rows
    ) == sorted((tids[n], str(n), pids[n], "Empty") for n in (0, 1))
    for n in (0, 1):
        (d,) = rows_of(b1.bootstrap, "describe", "--transactional-id", tids[n])
        assert (d["CoordinatorId"], int(d["ProducerId"]), d["TransactionState"]) == (str(n), pids[n], "Empty")

    # PrepareCommit: while a marker cannot be written, DescribeTransactions lists exactly the
    # partitions still waiting for theirs (Kafka's rule); once written, CompleteCommit with none
    from confluent_kafka import Producer

    topic = f"txp-{uuid.uuid4().hex[:6]}"
    with Wire(b0.port) as w:
        created = create_topic(
            w,
            topic,
            partitions=-1,
            replication_factor=-1,
            assignments=[{"partition_index": 0, "broker_ids": [0]}, {"partition_index": 1, "broker_ids": [1]}],
        )
        assert created["error_code"] == 0, created
    tid = tids[0]  # coordinated by broker 0
    p = Producer({"bootstrap.servers": f"{b0.bootstrap},{b1.bootstrap}", "transactional.id": tid, "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    values = [b"pc%d" % i for i in range(20)]
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % 2)
    assert p.flush(30) == 0
    (d,) = rows_of(b0.bootstrap, "describe", "--transactional-id", tid)
    assert (d["TransactionState"], d["TopicPartitions"]) == ("Ongoing", f"{topic}-0,{topic}-1")
    b1.kill()
    p.commit_transaction(30)  # answered once PrepareCommit is logged; broker 1's marker cannot be written
    d = wait_for(
        lambda: (
            (r := rows_of(b0.bootstrap, "describe", "--transactional-id", tid)[0])
            and r["TopicPartitions"] == f"{topic}-1"
            and r
        ),
        message="partition 0's marker written",
    )
    assert d["TransactionState"] == "PrepareCommit"
    with Wire(b0.port) as w:
        listed = w.request(
            ApiKey.LIST_TRANSACTIONS,
            1,
            {"state_filters": ["PrepareCommit"], "producer_id_filters": [], "duration_filter": 0},
        )
        assert [s["transactional_id"] for s in listed["transaction_states"]] == [tid]
    (s,) = rows_of(b0.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    assert s["CurrentTransactionStartOffset"] == "None"  # its marker is in partition 0's log
    r = tool(
        "--bootstrap-server",
        b0.bootstrap,
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "0",
        "--broker-id",
        "1",
    )  # broker 1 is down
    assert r.returncode == 1 and f"Failed to describe producers for partition {topic}-0 on broker 1" in r.stderr
    b1.start()
    d = wait_for(
        lambda: (
            (r := rows_of(b0.bootstrap, "describe", "--transactional-id", tid)[0])
            and r["TransactionState"] == "CompleteCommit"
            and r
        ),
        timeout=60,
        message="the commit completed",
    )
    assert d["TopicPartitions"] == ""
    (s,) = rows_of(b1.bootstrap, "describe-producers", "--topic", topic, "--partition", "1")
    assert s["CurrentTransactionStartOffset"] == "None" and int(s["ProducerId"]) == int(d["ProducerId"])
    r = tool(
        "--bootstrap-server",
        b0.bootstrap,
        "describe-producers",
        "--topic",
        topic,
        "--partition",
        "1",
        "--broker-id",
        "0",
    )  # not a replica of partition 1
    assert r.returncode == 1 and "NOT_LEADER_OR_FOLLOWER" in r.stderr, r.stderr
    assert rows_of(b0.bootstrap, "find-hanging", "--topic", topic, "--max-transaction-timeout", "0") == []


def test_tool_usage_and_errors_exit_1(broker):
    r = tool("--help")
    assert r.returncode == 0 and "find-hanging" in r.stdout and "example" in r.stdout
    r = tool("--version")
    assert r.returncode == 0 and "pyklog" in r.stdout
    r = tool("list")
    assert r.returncode == 1 and "--bootstrap-server" in r.stderr
    r = tool("--bootstrap-server", broker.bootstrap)
    assert r.returncode == 1 and "COMMAND" in r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", "nobody-" + uuid.uuid4().hex)
    assert r.returncode == 1 and "Failed to describe transaction state of transactional-id" in r.stderr
    assert "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr or "NOT_COORDINATOR" in r.stderr, r.stderr
    r = tool(
        "--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", "no-such-topic", "--partition", "0"
    )
    assert r.returncode == 1 and "Failed to describe producers for partition no-such-topic-0" in r.stderr, r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "find-hanging")
    assert r.returncode == 1 and "requires either --topic or --broker-id" in r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "find-hanging", "--broker-id", "0", "--partition", "1")
    assert r.returncode == 1 and "--partition argument requires --topic" in r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "find-hanging", "--topic", "no-such-topic")
    assert r.returncode == 1 and "Failed to describe 1 topics" in r.stderr, r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "abort", "--topic", "t", "--partition", "0")
    assert r.returncode == 1 and "--start-offset" in r.stderr
    r = tool("--bootstrap-server", broker.bootstrap, "describe-producers", "--topic", "t", "--partition", "x")
    assert r.returncode == 1 and "invalid int value" in r.stderr
    assert rows_of(broker.bootstrap, "list") == []


def test_abort_refuses_a_live_transaction_unless_forced(broker_factory):
    """A transaction its coordinator holds as Ongoing with the partition is not hanging: abort refuses
    it (exit 1, nothing written), the producer's commit then makes every record visible.  With
    --force the tool does what Kafka's does: the ABORT marker discards what was written so far, and
    the producer's commit still succeeds: none of those records are ever delivered."""
    from confluent_kafka import Producer

    b = broker_factory(0, **TXN_PROPS)
    topic = f"txl-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 1)["error_code"] == 0

    def open_transaction(tid: str, prefix: bytes, n: int):
        p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid, "linger.ms": 0})
        p.init_transactions(30)
        p.begin_transaction()
        for i in range(n):
            p.produce(topic, value=prefix + b"%d" % i, partition=0)
        assert p.flush(30) == 0
        return p

    live = open_transaction(f"tx-{uuid.uuid4().hex[:8]}", b"live", 5)
    (s,) = rows_of(b.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
    start = s["CurrentTransactionStartOffset"]
    assert start == "0", s
    r = tool("--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0", "--start-offset", start)
    assert r.returncode == 1 and "it is not hanging" in r.stderr and "Ongoing" in r.stderr, (r.stdout, r.stderr)
    live.commit_transaction(30)
    assert read_committed_values(b.bootstrap, topic, 1) == [b"live%d" % i for i in range(5)]

    forced = open_transaction(f"tx-{uuid.uuid4().hex[:8]}", b"forced", 3)
    (s,) = [
        r
        for r in rows_of(b.bootstrap, "describe-producers", "--topic", topic, "--partition", "0")
        if r["CurrentTransactionStartOffset"] != "None"
    ]
    r = tool(
        "--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0",
        "--start-offset", s["CurrentTransactionStartOffset"], "--force",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    forced.commit_transaction(30)  # Kafka's behaviour: the commit succeeds, the records are gone
    assert read_committed_values(b.bootstrap, topic, 1) == [b"live%d" % i for i in range(5)]
