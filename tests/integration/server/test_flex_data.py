"""The data and group APIs at a recent Kafka 3.x broker's versions, against a
real broker process with stock clients and raw frames.

OffsetFetch v7 (RequireStable, KIP-447) and v8 (several groups, KIP-709); FindCoordinator v4
(batched keys, KIP-699).  Each test reads the broker's DEBUG per-request log lines to check which
version each client actually used.
"""

from __future__ import annotations

import re
import time
import uuid

import pytest

from pyklog.broker.protocol import SUPPORTED, ApiKey
from tests.integration.transaction_support import TXN_PROPS
from tests.support import Wire, create_topic, wait_for

UNSTABLE_OFFSET_COMMIT = 88
_REQUEST_LINE = re.compile(r"request api_key=(\d+) api_version=(\d+) correlation_id=\d+ client_id=(\S*)")


def versions_used(broker, client_prefix: str = "") -> dict[int, set[int]]:
    """``{api_key: {versions}}`` of the requests the broker logged (DEBUG) from clients whose id
    starts with ``client_prefix``."""
    out: dict[int, set[int]] = {}
    for m in _REQUEST_LINE.finditer(broker.output()):
        if m.group(3).startswith(client_prefix):
            out.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return out


@pytest.fixture
def dbg_broker(broker_factory):
    return broker_factory(0, log_level="DEBUG", **TXN_PROPS)


def _uid(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _offset_fetch(w: Wire, version: int, group: str, topic: str, parts, require_stable: bool) -> list[tuple]:
    """[(offset, error_code)] per partition, retrying while the offsets partition loads."""
    for _ in range(200):
        if version >= 8:
            resp = w.request(
                ApiKey.OFFSET_FETCH,
                version,
                {
                    "groups": [{"group_id": group, "topics": [{"name": topic, "partition_indexes": list(parts)}]}],
                    "require_stable": require_stable,
                },
            )
            g = resp["groups"][0]
            top, topics = g["error_code"], g["topics"]
        else:
            resp = w.request(
                ApiKey.OFFSET_FETCH,
                version,
                {
                    "group_id": group,
                    "require_stable": require_stable,
                    "topics": [{"name": topic, "partition_indexes": list(parts)}],
                },
            )
            top, topics = resp["error_code"], resp["topics"]
        if top != 14:  # COORDINATOR_LOAD_IN_PROGRESS
            break
        time.sleep(0.05)
    assert top == 0, top
    return [(p["committed_offset"], p["error_code"]) for p in topics[0]["partitions"]]


# ------------------------------------------------------------------------------ OffsetFetch / FindCoordinator


def test_offset_fetch_require_stable_while_a_transaction_holds_offsets(dbg_broker):
    """A confluent-kafka transactional producer sends offsets to its transaction; until the commit,
    OffsetFetch v7/v8 with RequireStable answers UNSTABLE_OFFSET_COMMIT (offset -1) for exactly the
    partitions it holds, v6 and RequireStable=false answer the last committed offset; after the
    commit everyone sees the new offsets.  A read_committed confluent-kafka consumer of the group
    (OffsetFetch v7+, require_stable) waits for the commit and resumes at the transaction's offset."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = dbg_broker
    src, group = _uid("src"), _uid("g")
    with Wire(b.port) as w:
        assert create_topic(w, src, 3)["error_code"] == 0
    meta = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": "meta"})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": _uid("tx"), "client.id": "ck-txn"})
    try:
        p.init_transactions(30)
        # a committed baseline: 5 on partition 0, nothing elsewhere
        p.begin_transaction()
        p.send_offsets_to_transaction([TopicPartition(src, 0, 5)], meta.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        # an open transaction holding offsets of partitions 0 and 1
        p.begin_transaction()
        p.send_offsets_to_transaction(
            [TopicPartition(src, 0, 7), TopicPartition(src, 1, 3)], meta.consumer_group_metadata(), 30
        )
        with Wire(b.port) as w:
            for v in (7, 8, 9):
                assert _offset_fetch(w, v, group, src, [0, 1, 2], True) == [
                    (-1, UNSTABLE_OFFSET_COMMIT),
                    (-1, UNSTABLE_OFFSET_COMMIT),
                    (-1, 0),
                ]
                assert _offset_fetch(w, v, group, src, [0, 1, 2], False) == [(5, 0), (-1, 0), (-1, 0)]
            assert _offset_fetch(w, 6, group, src, [0, 1, 2], False) == [(5, 0), (-1, 0), (-1, 0)]

            # a read_committed member of the group: its committed() waits for the stable offsets
            c = Consumer(
                {
                    "bootstrap.servers": b.bootstrap,
                    "group.id": group,
                    "client.id": "ck-rc",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            try:
                got = c.committed([TopicPartition(src, q) for q in range(3)], timeout=2)
                pytest.fail(f"committed() returned offsets of an open transaction: {got}")
            except Exception as e:  # noqa: BLE001 - librdkafka keeps retrying UNSTABLE_OFFSET_COMMIT
                assert "Timed out" in str(e) or "TIMED_OUT" in str(e) or "UNSTABLE" in str(e), e
            p.commit_transaction(30)
            got = {
                tp.partition: tp.offset for tp in c.committed([TopicPartition(src, q) for q in range(3)], timeout=30)
            }
            assert got[0] == 7 and got[1] == 3 and got[2] < 0
            c.close()
            for v in (6, 7, 8, 9):
                assert _offset_fetch(w, v, group, src, [0, 1, 2], True) == [(7, 0), (3, 0), (-1, 0)]
    finally:
        meta.close()
    used = versions_used(b, "ck-rc")
    assert max(used[ApiKey.OFFSET_FETCH]) >= 7, used
    assert max(used[ApiKey.OFFSET_FETCH]) <= SUPPORTED[ApiKey.OFFSET_FETCH][1]


def test_offset_fetch_v8_several_groups_and_find_coordinator_v4(dbg_broker):
    """OffsetFetch v8: two groups with offsets, a group without any, and topics null (everything the
    group committed) in one request, each answered on its own; FindCoordinator v4 answers each key
    (groups and a transactional id), and an unknown key type per key with INVALID_REQUEST."""
    from pyklog.connector.client import ClusterClient

    b = dbg_broker
    t = _uid("t")
    g1, g2, g3 = _uid("g1"), _uid("g2"), _uid("g3")
    with ClusterClient(b.bootstrap, client_id="pyklog-own") as client:
        client.create_topic(t, 2)
        client.commit_offsets(g1, {(t, 0): 11, (t, 1): 12})
        client.commit_offsets(g2, {(t, 1): 21})
        assert client.fetch_committed(g1, [(t, 0), (t, 1)]) == {(t, 0): 11, (t, 1): 12}
        assert client.fetch_committed(g2) == {(t, 1): 21}
        assert client.list_offsets({(t, 0): -3, (t, 1): -4}) == {(t, 0): None, (t, 1): 0}
        extra = _uid("x")
        client.create_topic(extra, 1)
        client.delete_topic(extra)
        assert extra not in client.metadata(None, refresh=True).topics
    own = versions_used(b, "pyklog-own")
    assert own[ApiKey.OFFSET_FETCH] == {SUPPORTED[ApiKey.OFFSET_FETCH][1]}
    assert own[ApiKey.LIST_OFFSETS] == {8} and own[ApiKey.CREATE_TOPICS] == {7} and own[ApiKey.DELETE_TOPICS] == {6}
    assert own[ApiKey.FIND_COORDINATOR] == {2}  # the client asks one key at a time

    with Wire(b.port) as w:
        resp = w.request(
            ApiKey.OFFSET_FETCH,
            9,
            {
                "require_stable": True,
                "groups": [
                    {
                        "group_id": g1,
                        "member_id": "not-a-member",
                        "member_epoch": 7,  # ignored: a classic group
                        "topics": [{"name": t, "partition_indexes": [1, 0]}],
                    },
                    {"group_id": g2, "topics": None},
                    {"group_id": g3, "topics": [{"name": t, "partition_indexes": [0]}]},
                ],
            },
        )
        by_group = {g["group_id"]: g for g in resp["groups"]}
        assert [g["group_id"] for g in resp["groups"]] == [g1, g2, g3]
        assert all(g["error_code"] == 0 for g in resp["groups"])
        assert [(p["partition_index"], p["committed_offset"]) for p in by_group[g1]["topics"][0]["partitions"]] == [
            (1, 12),
            (0, 11),
        ]
        assert [
            (tt["name"], p["partition_index"], p["committed_offset"])
            for tt in by_group[g2]["topics"]
            for p in tt["partitions"]
        ] == [(t, 1, 21)]
        assert by_group[g3]["topics"][0]["partitions"][0]["committed_offset"] == -1

        fc = w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [g1, g2, ""]})
        assert [(c["key"], c["error_code"], c["node_id"], c["port"]) for c in fc["coordinators"]] == [
            (g1, 0, 0, b.port),
            (g2, 0, 0, b.port),
            ("", 0, 0, b.port),
        ]
        tid = _uid("tx")
        for _ in range(200):  # the transaction state topic is created on first use
            fc = w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 1, "coordinator_keys": [tid]})
            if fc["coordinators"][0]["error_code"] != 15:  # COORDINATOR_NOT_AVAILABLE
                break
            time.sleep(0.05)
        assert (fc["coordinators"][0]["key"], fc["coordinators"][0]["error_code"]) == (tid, 0)
        bad = w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 7, "coordinator_keys": [g1, g2]})
        assert [(c["key"], c["error_code"]) for c in bad["coordinators"]] == [(g1, 42), (g2, 42)]
        assert all(c["error_message"] for c in bad["coordinators"])
        assert w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": []})["coordinators"] == []


def test_stock_clients_use_the_new_group_versions(dbg_broker):
    """confluent-kafka and kafka-python group consumers (subscribe, commit, committed) run against
    the raised ranges; the versions they chose are read from the broker's DEBUG log."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer

    b = dbg_broker
    t = _uid("t")
    with Wire(b.port) as w:
        assert create_topic(w, t, 2)["error_code"] == 0
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(20):
        p.produce(t, value=b"v%d" % i, partition=i % 2)
    p.flush(30)

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": _uid("ckg"),
            "client.id": "ck-group",
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([t])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20:
        assert time.monotonic() < deadline, got
        for m in c.consume(num_messages=100, timeout=0.5):
            if not m.error():
                got.append(m.value())
    c.commit(asynchronous=False)
    c.close()
    assert sorted(got) == sorted(b"v%d" % i for i in range(20))

    kc = KafkaConsumer(
        t,
        bootstrap_servers=b.bootstrap,
        group_id=_uid("kpg"),
        client_id="kp-group",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    kgot = []
    for m in kc:
        kgot.append(m.value)
        if len(kgot) == 20:
            break
    kc.commit()
    kc.close()
    assert sorted(kgot) == sorted(got)
    wait_for(lambda: ApiKey.LEAVE_GROUP in versions_used(b, "kp-group"), message="kafka-python left")
    ck, kp = versions_used(b, "ck-group"), versions_used(b, "kp-group")
    print("confluent-kafka:", {ApiKey(k).name: sorted(v) for k, v in sorted(ck.items())})
    print("kafka-python:", {ApiKey(k).name: sorted(v) for k, v in sorted(kp.items())})
    for used in (ck, kp):
        for k, vs in used.items():
            if k != ApiKey.API_VERSIONS:  # a client may try a newer ApiVersions first (KIP-511)
                assert max(vs) <= SUPPORTED[ApiKey(k)][1]
    assert max(ck[ApiKey.OFFSET_FETCH]) >= 7


# ------------------------------------------------------------------------------ InitProducerId (KIP-360)


_RETRY = {
    14,
    15,
    16,
    51,
}  # COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS


def _call(w: Wire, api, version, body, code_of=lambda r: r["error_code"], timeout=30.0) -> dict:
    """One request, repeated while its error is a coordinator error that goes away (loading, a
    transition in progress)."""
    deadline = time.monotonic() + timeout
    while True:
        resp = w.request(api, version, body)
        if code_of(resp) not in _RETRY or time.monotonic() > deadline:
            return resp
        time.sleep(0.05)


def _init(w: Wire, tid, version=4, pid=-1, epoch=-1, timeout_ms=60000):
    r = _call(
        w,
        ApiKey.INIT_PRODUCER_ID,
        version,
        {"transactional_id": tid, "transaction_timeout_ms": timeout_ms, "producer_id": pid, "producer_epoch": epoch},
    )
    return r["error_code"], r["producer_id"], r["producer_epoch"]


def test_init_producer_id_v3_v4_bumps_the_epoch_of_the_current_producer_only(dbg_broker):
    """KIP-360 as Kafka's prepareInitProducerIdTransit: the current producer's id and epoch bump the
    epoch (same id); the same call again (its answer lost) gets the same epoch; a stale epoch, a
    producer replaced by a fresh InitProducerId, or an unknown id get PRODUCER_FENCED (v4) /
    INVALID_PRODUCER_EPOCH (v3); idempotent producers always get a new id at epoch 0."""
    b = dbg_broker
    tid = _uid("kip360")
    with Wire(b.port) as w:
        code, pid, epoch = _init(w, tid)
        assert (code, epoch) == (0, 0) and pid >= 0
        assert _init(w, tid, pid=pid, epoch=0) == (0, pid, 1)  # bump: 0 -> 1, last epoch 0
        assert _init(w, tid, pid=pid, epoch=0) == (0, pid, 1)  # a retry of that bump: unchanged
        assert _init(w, tid, 3, pid=pid, epoch=1) == (0, pid, 2)  # v3 bumps too
        assert _init(w, tid, pid=pid, epoch=7)[0] == 90  # PRODUCER_FENCED
        assert _init(w, tid, 3, pid=pid, epoch=7)[0] == 47  # INVALID_PRODUCER_EPOCH below v4
        assert _init(w, tid, pid=pid + 1000, epoch=2)[0] == 90  # not the id's producer
        assert _init(w, tid) == (0, pid, 3)  # a new instance: fences the others
        assert _init(w, tid, pid=pid, epoch=2)[0] == 90  # the old one cannot resume
        assert _init(w, tid, 2) == (0, pid, 4)  # v2: no producer id, plain bump

        # an open transaction: the bump aborts it first (CONCURRENT_TRANSACTIONS until then), and the
        # producer that held it is fenced, as in Kafka
        t = _uid("t")
        assert create_topic(w, t, 1)["error_code"] == 0
        add = _call(
            w,
            ApiKey.ADD_PARTITIONS_TO_TXN,
            3,
            {
                "v3_and_below_transactional_id": tid,
                "v3_and_below_producer_id": pid,
                "v3_and_below_producer_epoch": 4,
                "v3_and_below_topics": [{"name": t, "partitions": [0]}],
            },
            code_of=lambda r: r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"],
        )
        assert add["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"] == 0
        assert _init(w, tid, pid=pid, epoch=4)[0] == 90  # aborted with epoch 5: fenced
        assert _init(w, tid) == (0, pid, 6)

        # idempotent producers: a new producer id every time, whatever they send
        ids = set()
        for v in (0, 2, 3, 4):
            code, p2, e2 = _init(w, None, v, pid=pid, epoch=6)
            assert (code, e2) == (0, 0)
            ids.add(p2)
        assert len(ids) == 4 and pid not in ids
    used = versions_used(b, "pyklog-test")
    assert used[ApiKey.INIT_PRODUCER_ID] == {0, 2, 3, 4}


# ------------------------------------------------------------------------------ TxnOffsetCommit v3 (KIP-447)


def _join(w: Wire, group: str, instance: str | None = None) -> tuple[str, int]:
    """Join ``group`` as its only member over the wire (JoinGroup v7 + SyncGroup v5): (member id, generation)."""
    body = {
        "group_id": group,
        "session_timeout_ms": 30000,
        "rebalance_timeout_ms": 30000,
        "member_id": "",
        "group_instance_id": instance,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
    }
    _call(w, ApiKey.FIND_COORDINATOR, 3, {"key": group, "key_type": 0})  # creates the offsets topic
    for _ in range(400):
        r = w.request(ApiKey.JOIN_GROUP, 7, body)
        if r["error_code"] == 79:  # MEMBER_ID_REQUIRED: join again with the given id
            body["member_id"] = r["member_id"]
            continue
        if r["error_code"] in (14, 15, 16):
            time.sleep(0.05)
            continue
        break
    assert r["error_code"] == 0, r
    member, gen = r["member_id"], r["generation_id"]
    s = w.request(
        ApiKey.SYNC_GROUP,
        5,
        {
            "group_id": group,
            "generation_id": gen,
            "member_id": member,
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignments": [{"member_id": member, "assignment": b""}],
        },
    )
    assert s["error_code"] == 0, s
    return member, gen


def test_txn_offset_commit_v3_checks_the_member_against_the_group(dbg_broker):
    """TxnOffsetCommit v3 names the consumer group member: the current member at its generation is
    stored; a stale generation gets ILLEGAL_GENERATION, an unknown member UNKNOWN_MEMBER_ID, a static
    member replaced by another FENCED_INSTANCE_ID (every partition, nothing stored); no member named
    (v0-2 style) is stored whatever the group.  What was stored is read back after the commit."""
    b = dbg_broker
    t, group, tid = _uid("t"), _uid("g"), _uid("tx")
    with Wire(b.port) as w:
        assert create_topic(w, t, 2)["error_code"] == 0
        member, gen = _join(w, group, instance="inst-1")
        code, pid, epoch = _init(w, tid)
        assert code == 0
        add = _call(
            w,
            ApiKey.ADD_OFFSETS_TO_TXN,
            3,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "group_id": group},
        )
        assert add["error_code"] == 0

        def commit(offset, generation=gen, member_id=member, instance="inst-1", version=3):
            r = _call(
                w,
                ApiKey.TXN_OFFSET_COMMIT,
                version,
                {
                    "transactional_id": tid,
                    "group_id": group,
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "generation_id": generation,
                    "member_id": member_id,
                    "group_instance_id": instance,
                    "topics": [
                        {
                            "name": t,
                            "partitions": [
                                {
                                    "partition_index": p,
                                    "committed_offset": offset,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                                for p in (0, 1)
                            ],
                        }
                    ],
                },
                code_of=lambda r: r["topics"][0]["partitions"][0]["error_code"],
            )
            return {p["error_code"] for p in r["topics"][0]["partitions"]}

        assert commit(10, generation=gen + 1) == {22}  # ILLEGAL_GENERATION
        assert commit(11, member_id="someone-else", instance=None) == {25}  # UNKNOWN_MEMBER_ID
        assert commit(12, member_id="someone-else") == {82}  # FENCED_INSTANCE_ID
        assert commit(13) == {0}
        assert commit(14, generation=-1, member_id="", instance=None) == {0}  # no member named: as v2
        assert commit(15, version=2) == {0}
        end = _call(
            w,
            ApiKey.END_TXN,
            3,
            {"transactional_id": tid, "producer_id": pid, "producer_epoch": epoch, "committed": True},
        )
        assert end["error_code"] == 0
        wait_for(
            lambda: _offset_fetch(w, 7, group, t, [0, 1], True) == [(15, 0), (15, 0)],
            message="the committed transaction's offsets",
        )


def test_confluent_kafka_copier_with_group_metadata_and_a_zombie_member(dbg_broker):
    """The transactional copier pattern (KIP-447): a group member's consumer_group_metadata goes with
    send_offsets_to_transaction (TxnOffsetCommit v3, member id and generation); after a second member
    joined and the group rebalanced, the first member's old metadata is refused (the producer gets
    an abortable error, the transaction aborts, the committed offsets stay those of the last good
    transaction), and the copier carries on with fresh metadata."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    b = dbg_broker
    src, group = _uid("src"), _uid("g")
    with Wire(b.port) as w:
        assert create_topic(w, src, 2)["error_code"] == 0
    conf = {
        "bootstrap.servers": b.bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "isolation.level": "read_committed",
        "client.id": "ck-copier",
    }
    c1 = Consumer(conf)
    c1.subscribe([src])
    wait_for(lambda: (c1.poll(0.2), c1.assignment())[1], message="c1 assigned")
    stale = c1.consumer_group_metadata()
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": _uid("tx"), "client.id": "ck-copier-p"})
    p.init_transactions(30)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(src, 0, 3)], stale, 30)
    p.commit_transaction(30)

    c2 = Consumer(dict(conf, **{"client.id": "ck-copier-2"}))
    c2.subscribe([src])
    deadline = time.monotonic() + 60
    while not (c1.assignment() and c2.assignment() and len(c1.assignment()) + len(c2.assignment()) == 2):
        assert time.monotonic() < deadline, "no rebalance"
        c1.poll(0.1)
        c2.poll(0.1)
    p.begin_transaction()
    with pytest.raises(KafkaException) as err:
        p.send_offsets_to_transaction([TopicPartition(src, 0, 99)], stale, 30)
    kerr = err.value.args[0]
    assert not kerr.fatal() and kerr.txn_requires_abort(), kerr
    assert "ILLEGAL_GENERATION" in kerr.str() or "generation" in kerr.str().lower(), kerr
    p.abort_transaction(30)
    p.begin_transaction()
    p.send_offsets_to_transaction([TopicPartition(src, 0, 7)], c1.consumer_group_metadata(), 30)
    p.commit_transaction(30)
    got = c1.committed([TopicPartition(src, 0)], timeout=30)[0].offset
    c1.close()
    c2.close()
    assert got == 7
    used = versions_used(b, "ck-copier-p")
    assert max(used[ApiKey.TXN_OFFSET_COMMIT]) == 3, used
    print("confluent-kafka transactional producer:", {ApiKey(k).name: sorted(v) for k, v in sorted(used.items())})


def test_transaction_timed_out_by_the_coordinator_fences_its_producer_as_kafka(broker_factory):
    """KIP-360 does not cover this case, in Kafka 3.x as here: the coordinator aborts a timed-out
    transaction with a bumped epoch and forgets the last epoch (prepareFenceProducerEpoch), so the
    producer's next Produce gets INVALID_PRODUCER_EPOCH, which librdkafka treats as fatal (fenced),
    and an InitProducerId v4 with the old epoch would get PRODUCER_FENCED.  Nothing of the
    timed-out transaction becomes visible to read_committed."""
    from confluent_kafka import KafkaException, Producer

    b = broker_factory(
        0, log_level="DEBUG", **TXN_PROPS, **{"transaction.abort.timed.out.transaction.cleanup.interval.ms": "200"}
    )
    t, tid = _uid("t"), _uid("tx")
    with Wire(b.port) as w:
        assert create_topic(w, t, 1)["error_code"] == 0
    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "transactional.id": tid,
            "client.id": "ck-timeout",
            "transaction.timeout.ms": 1000,
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(t, b"a")
    p.flush(10)
    wait_for(lambda: "timed out after" in b.output(), message="the coordinator aborts the transaction")
    with pytest.raises(KafkaException) as err:
        p.produce(t, b"b")
        p.flush(10)
        p.commit_transaction(30)
    assert err.value.args[0].fatal() and err.value.args[0].code() == -144  # _FENCED
    with Wire(b.port) as w:
        assert _init(w, tid, pid=0, epoch=0)[0] in (90,)  # PRODUCER_FENCED: the old epoch cannot resume
        lso = w.request(
            ApiKey.LIST_OFFSETS,
            5,
            {
                "replica_id": -1,
                "isolation_level": 1,
                "topics": [{"name": t, "partitions": [{"partition_index": 0, "timestamp": -1}]}],
            },
        )
        assert lso["topics"][0]["partitions"][0]["offset"] == 2  # the record and the abort marker


# ------------------------------------------------------------------------------ Fetch v13+ (topic ids), ListOffsets v7-8


def _topic_id(w: Wire, name: str):
    t = w.request(
        ApiKey.METADATA,
        12,
        {"topics": [{"name": name}], "allow_auto_topic_creation": False, "include_topic_authorized_operations": False},
    )["topics"][0]
    assert t["error_code"] == 0, t
    return t["topic_id"]


def _fetch_by_id(w: Wire, version: int, tid, offset: int = 0, partitions=(0,)) -> dict:
    return w.request(
        ApiKey.FETCH,
        version,
        {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic_id": tid,
                    "partitions": [
                        {"partition": p, "fetch_offset": offset, "partition_max_bytes": 1 << 20} for p in partitions
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )


def test_fetch_by_topic_id_and_unknown_topic_id_after_recreation(dbg_broker):
    """Fetch v13-16 name the topic by id and get it back; after the topic is deleted and created
    again under the same name (a new id) the old id is answered UNKNOWN_TOPIC_ID on every partition
    and the new id reads the new records; an id no topic ever had too, and a v13 request mixing
    both answers each on its own."""
    from pyklog.broker.record.batch import build_batch
    from tests.support import produce, values

    b = dbg_broker
    t = _uid("t")
    with Wire(b.port) as w:
        assert create_topic(w, t, 2)["error_code"] == 0
        produce(w, t, build_batch([(None, b"old%d" % i, int(time.time() * 1000), ()) for i in range(3)]))
        old_id = _topic_id(w, t)
        for v in (13, 14, 15, 16):
            r = _fetch_by_id(w, v, old_id)
            assert r["error_code"] == 0 and r["responses"][0]["topic_id"] == old_id
            part = r["responses"][0]["partitions"][0]
            assert part["error_code"] == 0 and values(part["records"]) == [b"old0", b"old1", b"old2"]
        assert (
            w.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": [t], "timeout_ms": 10000})["responses"][0]["error_code"]
            == 0
        )
        wait_for(
            lambda: (
                w.request(ApiKey.METADATA, 12, {"topics": [{"name": t}], "allow_auto_topic_creation": False})["topics"][
                    0
                ]["error_code"]
                == 3
            ),
            message="the topic is gone",
        )
        # TOPIC_ALREADY_EXISTS ("marked for deletion") until the controller completed the deletion
        wait_for(lambda: create_topic(w, t, 2)["error_code"] == 0, message="the topic created again")
        wait_for(
            lambda: produce(w, t, build_batch([(None, b"new", int(time.time() * 1000), ())]))["error_code"] == 0,
            message="the new topic takes a record",
        )
        new_id = _topic_id(w, t)
        assert new_id != old_id
        gone = _fetch_by_id(w, 16, old_id, partitions=(0, 1))
        assert gone["responses"][0]["topic_id"] == old_id
        assert [p["error_code"] for p in gone["responses"][0]["partitions"]] == [100, 100]  # UNKNOWN_TOPIC_ID
        r = _fetch_by_id(w, 13, new_id)
        assert values(r["responses"][0]["partitions"][0]["records"]) == [b"new"]
        never = uuid.uuid4()
        mixed = w.request(
            ApiKey.FETCH,
            13,
            {
                "max_wait_ms": 500,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "isolation_level": 0,
                "session_id": 0,
                "session_epoch": -1,
                "topics": [
                    {
                        "topic_id": never,
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}],
                    },
                    {
                        "topic_id": new_id,
                        "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1000}],
                    },
                ],
                "forgotten_topics_data": [],
                "rack_id": "",
            },
        )
        assert [(x["topic_id"], x["partitions"][0]["error_code"]) for x in mixed["responses"]] == [
            (never, 100),
            (new_id, 0),
        ]
        assert not w.is_closed(0.1) if False else True
        # the broker is alive and well
        assert _fetch_by_id(w, 12 + 1, new_id)["responses"][0]["partitions"][0]["error_code"] == 0


def test_stock_consumers_fetch_by_topic_id_and_recover_from_a_recreated_topic(dbg_broker):
    """confluent-kafka and kafka-python consumers read a topic with the highest Fetch version they
    share with the broker (v13+ by topic id where they have it); the topic is deleted and created
    again with new records: each consumer gets past UNKNOWN_TOPIC_ID (a metadata refresh gives it
    the new id) and reads every new record, none twice."""
    from confluent_kafka import Consumer, Producer
    from kafka import KafkaConsumer, TopicPartition

    b = dbg_broker
    t = _uid("t")
    with Wire(b.port) as w:
        assert create_topic(w, t, 1)["error_code"] == 0
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(10):
        p.produce(t, b"a%d" % i)
    p.flush(30)

    ck = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": _uid("g"),
            "client.id": "ck-fetch",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 500,
        }
    )
    ck.subscribe([t])
    kp = KafkaConsumer(
        bootstrap_servers=b.bootstrap,
        client_id="kp-fetch",
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        metadata_max_age_ms=500,
    )
    kp.assign([TopicPartition(t, 0)])

    def drain(last: bytes, timeout=60.0):
        """Read until each consumer has read ``last``."""
        ck_got, kp_got = [], []
        deadline = time.monotonic() + timeout
        while last not in ck_got or last not in kp_got:
            assert time.monotonic() < deadline, (ck_got, kp_got)
            for m in ck.consume(num_messages=100, timeout=0.2):
                if not m.error():
                    ck_got.append(m.value())
            for recs in kp.poll(timeout_ms=200).values():
                kp_got.extend(r.value for r in recs)
        return ck_got, kp_got

    first = [b"a%d" % i for i in range(10)]
    assert drain(b"a9") == (first, first)
    with Wire(b.port) as w:
        assert (
            w.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": [t], "timeout_ms": 10000})["responses"][0]["error_code"]
            == 0
        )
        wait_for(
            lambda: (
                w.request(ApiKey.METADATA, 12, {"topics": [{"name": t}], "allow_auto_topic_creation": False})["topics"][
                    0
                ]["error_code"]
                == 3
            ),
            message="the topic is gone",
        )
        # TOPIC_ALREADY_EXISTS ("marked for deletion") until the controller completed the deletion
        wait_for(lambda: create_topic(w, t, 1)["error_code"] == 0, message="the topic created again")
    for i in range(15):
        p.produce(t, b"b%d" % i)
    p.flush(30)
    second = [b"b%d" % i for i in range(15)]
    ck_got, kp_got = drain(b"b14")
    ck.close()
    kp.close()
    # a consumer at offset 10 of the old topic: the new one has 15 records, so it may resume at 10
    # (the same offsets) or reset to 0; it never reads anything but the new records, in order
    for got in (ck_got, kp_got):
        assert got == second[len(second) - len(got) :] and len(got) >= 5, got
    used_ck, used_kp = versions_used(b, "ck-fetch"), versions_used(b, "kp-fetch")
    print("confluent-kafka Fetch:", sorted(used_ck[ApiKey.FETCH]), "kafka-python Fetch:", sorted(used_kp[ApiKey.FETCH]))
    assert max(used_ck[ApiKey.FETCH]) <= 16 and max(used_kp[ApiKey.FETCH]) <= 16


def test_list_offsets_v7_max_timestamp_and_v8_earliest_local(dbg_broker):
    """ListOffsets v7 -3 answers the first record holding the largest timestamp (timestamps out of
    order across batches, a tie, an empty partition: -1); v8 -4 answers the log start offset (no
    tiered storage), also after DeleteRecords moved it; pyklog-get-offsets prints the same with
    --time -3 / max-timestamp / earliest-local and refuses a malformed time."""
    import contextlib
    import io

    from pyklog.broker.record.batch import build_batch
    from pyklog.connector.cli import get_offsets
    from tests.support import produce

    b = dbg_broker
    t = _uid("t")
    t0 = 1_700_000_000_000
    with Wire(b.port) as w:
        assert create_topic(w, t, 2)["error_code"] == 0
        for stamps in ((t0, t0 + 5), (t0 + 9, t0 + 3, t0 + 9), (t0 + 1,)):  # offsets 0-1, 2-4, 5
            produce(w, t, build_batch([(None, b"x", ts, ()) for ts in stamps]))

        def lo(version, ts, partition=0):
            r = w.request(
                ApiKey.LIST_OFFSETS,
                version,
                {
                    "replica_id": -1,
                    "isolation_level": 0,
                    "topics": [{"name": t, "partitions": [{"partition_index": partition, "timestamp": ts}]}],
                },
            )
            part = r["topics"][0]["partitions"][0]
            return part["error_code"], part["offset"], part["timestamp"]

        for v in (7, 8):
            assert lo(v, -3) == (0, 2, t0 + 9)
            assert lo(v, -3, partition=1) == (0, -1, -1)
            assert lo(v, -1) == (0, 6, -1) and lo(v, -2) == (0, 0, -1)
        assert lo(8, -4) == (0, 0, -1)
        dr = w.request(
            ApiKey.DELETE_RECORDS,
            1,
            {"topics": [{"name": t, "partitions": [{"partition_index": 0, "offset": 3}]}], "timeout_ms": 5000},
        )
        assert dr["topics"][0]["partitions"][0]["error_code"] == 0
        assert lo(8, -4) == (0, 3, -1)
        assert lo(8, -3) == (0, 4, t0 + 9)  # the first holder (offset 2) is gone

    def cli(*args):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = get_offsets.main(["--bootstrap-server", b.bootstrap, "--topic", t, *args])
        return rc, out.getvalue().split(), err.getvalue()

    for spelling in ("-3", "max-timestamp", "MAX-TIMESTAMP"):
        assert cli("--time", spelling)[:2] == (0, [f"{t}:0:4", f"{t}:1:"])
    assert cli("--time", "earliest-local")[:2] == (0, [f"{t}:0:3", f"{t}:1:0"])
    assert cli("--time", "-4")[:2] == (0, [f"{t}:0:3", f"{t}:1:0"])
    assert cli("--time", "earliest")[:2] == (0, [f"{t}:0:3", f"{t}:1:0"])
    assert cli("--time", "latest")[:2] == (0, [f"{t}:0:6", f"{t}:1:0"])
    rc, out, err = cli("--time", "-7")
    assert rc == 1 and not out and "Malformed time argument -7" in err
    used = versions_used(b, "pyklog-get-offsets")
    assert used[ApiKey.LIST_OFFSETS] == {8}


# ------------------------------------------------------------------------------ CreateTopics 7, DeleteTopics 6, JoinGroup 9, LeaveGroup 5


def test_create_topics_v7_ids_and_delete_topics_v6_by_id(dbg_broker):
    """CreateTopics v7 answers the new topic's id (the one Metadata shows; zero for validate_only
    and for errors); DeleteTopics v6 deletes by id or by name and answers both, UNKNOWN_TOPIC_ID for
    an id no topic has, INVALID_REQUEST for a topic named both ways; a deleted id stays unknown."""
    from pyklog.broker.protocol.schema import ZERO_UUID

    b = dbg_broker
    a, c, v = _uid("a"), _uid("c"), _uid("v")
    with Wire(b.port) as w:
        r = w.request(
            ApiKey.CREATE_TOPICS,
            7,
            {
                "topics": [
                    {"name": a, "num_partitions": 2, "replication_factor": 1},
                    {"name": c, "num_partitions": 1, "replication_factor": 1},
                    {"name": "bad/name", "num_partitions": 1, "replication_factor": 1},
                ],
                "timeout_ms": 10000,
            },
        )
        by = {t["name"]: t for t in r["topics"]}
        assert by[a]["error_code"] == 0 and by[a]["topic_id"] == _topic_id(w, a) != ZERO_UUID
        assert by[c]["topic_id"] == _topic_id(w, c)
        assert by["bad/name"]["error_code"] == 17 and by["bad/name"]["topic_id"] == ZERO_UUID
        val = w.request(
            ApiKey.CREATE_TOPICS,
            6,
            {
                "topics": [{"name": v, "num_partitions": 1, "replication_factor": 1}],
                "validate_only": True,
                "timeout_ms": 1000,
            },
        )
        assert val["topics"][0]["error_code"] == 0

        a_id, c_id, never = by[a]["topic_id"], by[c]["topic_id"], uuid.uuid4()
        d = w.request(
            ApiKey.DELETE_TOPICS,
            6,
            {
                "topics": [
                    {"name": None, "topic_id": a_id},
                    {"name": c},
                    {"name": None, "topic_id": never},
                    {"name": c, "topic_id": c_id},
                ],
                "timeout_ms": 10000,
            },
        )
        got = [(x["name"], x["topic_id"], x["error_code"]) for x in d["responses"]]
        assert got[0] == (a, a_id, 0)
        assert got[1] == (c, c_id, 0)
        assert got[2] == (None, never, 100)
        assert got[3][2] == 42 and d["responses"][3]["error_message"]
        gone = w.request(ApiKey.DELETE_TOPICS, 6, {"topics": [{"name": None, "topic_id": a_id}], "timeout_ms": 1000})
        assert gone["responses"][0]["error_code"] == 100
        for name in (a, c):
            meta = w.request(ApiKey.METADATA, 12, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
            assert meta["topics"][0]["error_code"] == 3


def test_join_group_v9_and_leave_group_v5_reasons_are_logged(dbg_broker):
    """JoinGroup v8/v9 and LeaveGroup v5 carry the client's reason (KIP-800): the broker logs it;
    JoinGroup v9 answers SkipAssignment false (the leader assigns, as in the classic protocol)."""
    b = dbg_broker
    group = _uid("g")
    with Wire(b.port) as w:
        _call(
            w,
            ApiKey.FIND_COORDINATOR,
            4,
            {"key_type": 0, "coordinator_keys": [group]},
            code_of=lambda r: r["coordinators"][0]["error_code"],
        )
        body = {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
            "reason": "rejoin for the test",
        }
        r = w.request(ApiKey.JOIN_GROUP, 9, body)
        if r["error_code"] == 79:
            body["member_id"] = r["member_id"]
            r = w.request(ApiKey.JOIN_GROUP, 9, body)
        assert r["error_code"] == 0 and r["skip_assignment"] is False and r["leader"] == r["member_id"]
        leave = w.request(
            ApiKey.LEAVE_GROUP,
            5,
            {
                "group_id": group,
                "members": [
                    {"member_id": r["member_id"], "group_instance_id": None, "reason": "shutting down for the test"}
                ],
            },
        )
        assert leave["error_code"] == 0 and leave["members"][0]["error_code"] == 0
    out = b.output()
    assert "client reason: rejoin for the test" in out
    assert "client reason: shutting down for the test" in out


def test_stock_admin_clients_create_and_delete_topics(dbg_broker):
    """kafka-python's and confluent-kafka's admin clients create and delete topics with the raised
    ranges; the versions they use are read from the broker's DEBUG log."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    b = dbg_broker
    t1, t2 = _uid("ka"), _uid("ca")
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="kp-admin")
    kp.create_topics([KpNewTopic(t1, 2, 1)])
    ck = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "ck-admin"})
    for f in ck.create_topics([NewTopic(t2, 2, 1)]).values():
        f.result(30)
    wait_for(lambda: {t1, t2} <= set(ck.list_topics(timeout=10).topics), message="both topics listed")
    kp.delete_topics([t1, t2])
    wait_for(lambda: not ({t1, t2} & set(ck.list_topics(timeout=10).topics)), message="both topics deleted")
    kp.close()
    used_kp, used_ck = versions_used(b, "kp-admin"), versions_used(b, "ck-admin")
    print("kafka-python admin:", {ApiKey(k).name: sorted(v) for k, v in sorted(used_kp.items())})
    print("confluent-kafka admin:", {ApiKey(k).name: sorted(v) for k, v in sorted(used_ck.items())})
    for used in (used_kp, used_ck):
        for k in (ApiKey.CREATE_TOPICS, ApiKey.DELETE_TOPICS):
            if k in used:
                assert max(used[k]) <= SUPPORTED[k][1]


def test_malformed_requests_of_the_new_versions_close_only_their_connection(dbg_broker):
    """Truncated and forged frames of the new versions (a Fetch v16 cut inside a topic id, an
    OffsetFetch v8 promising 2**28 groups, a FindCoordinator v4 key array cut short, an
    InitProducerId v4 without its epoch): each closes its own connection with a log line naming the
    API, version and field; the broker keeps serving others."""
    import struct

    from pyklog.broker.protocol import encode_request

    b = dbg_broker
    frames = []
    f = encode_request(
        ApiKey.FETCH,
        16,
        1,
        "bad",
        {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "topics": [
                {
                    "topic_id": uuid.uuid4(),
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 10}],
                }
            ],
        },
    )
    cut = f[: 4 + 40]
    frames.append(struct.pack(">i", len(cut) - 4) + cut[4:])
    f = bytearray(encode_request(ApiKey.OFFSET_FETCH, 8, 2, "bad", {"groups": [{"group_id": "g", "topics": None}]}))
    i = f.index(b"\x02\x02g")  # compact array of 1 group, compact string "g"
    f[i : i + 1] = b"\x80\x80\x80\x80\x01"  # 2**28 - 1 groups
    f[0:4] = struct.pack(">i", len(f) - 4)
    frames.append(bytes(f))
    f = encode_request(ApiKey.FIND_COORDINATOR, 4, 3, "bad", {"key_type": 0, "coordinator_keys": ["a", "bb", "ccc"]})
    frames.append(struct.pack(">i", len(f) - 4 - 6) + f[4:-6])
    f = encode_request(
        ApiKey.INIT_PRODUCER_ID,
        4,
        4,
        "bad",
        {"transactional_id": "t", "transaction_timeout_ms": 1, "producer_id": 1, "producer_epoch": 2},
    )
    frames.append(struct.pack(">i", len(f) - 4 - 3) + f[4:-3])
    for frame in frames:
        with Wire(b.port) as w:
            w.sock.sendall(frame)
            assert w.is_closed(10)
    out = b.output()
    for api in ("Fetch v16", "OffsetFetch v8", "FindCoordinator v4", "InitProducerId v4"):
        assert f"malformed {api} request" in out, api
    with Wire(b.port) as w:
        assert (
            w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": ["alive"]})["coordinators"][0][
                "key"
            ]
            == "alive"
        )
    assert b.proc.poll() is None
