"""The data and group APIs at a recent Kafka 3.x broker's versions (issue 11, flex-data), against a
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
from support import Wire, create_topic, wait_for
from txn_support import TXN_PROPS

pytestmark = pytest.mark.integration

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
            resp = w.request(ApiKey.OFFSET_FETCH, version, {"groups": [
                {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(parts)}]}],
                "require_stable": require_stable})
            g = resp["groups"][0]
            top, topics = g["error_code"], g["topics"]
        else:
            resp = w.request(ApiKey.OFFSET_FETCH, version, {"group_id": group, "require_stable": require_stable,
                                                            "topics": [{"name": topic, "partition_indexes": list(parts)}]})
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
        p.send_offsets_to_transaction([TopicPartition(src, 0, 7), TopicPartition(src, 1, 3)],
                                      meta.consumer_group_metadata(), 30)
        with Wire(b.port) as w:
            for v in (7, 8):
                assert _offset_fetch(w, v, group, src, [0, 1, 2], True) == [
                    (-1, UNSTABLE_OFFSET_COMMIT), (-1, UNSTABLE_OFFSET_COMMIT), (-1, 0)]
                assert _offset_fetch(w, v, group, src, [0, 1, 2], False) == [(5, 0), (-1, 0), (-1, 0)]
            assert _offset_fetch(w, 6, group, src, [0, 1, 2], False) == [(5, 0), (-1, 0), (-1, 0)]

            # a read_committed member of the group: its committed() waits for the stable offsets
            c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": "ck-rc",
                          "isolation.level": "read_committed", "enable.auto.commit": False})
            try:
                got = c.committed([TopicPartition(src, q) for q in range(3)], timeout=2)
                pytest.fail(f"committed() returned offsets of an open transaction: {got}")
            except Exception as e:  # noqa: BLE001 - librdkafka keeps retrying UNSTABLE_OFFSET_COMMIT
                assert "Timed out" in str(e) or "TIMED_OUT" in str(e) or "UNSTABLE" in str(e), e
            p.commit_transaction(30)
            got = {tp.partition: tp.offset for tp in c.committed([TopicPartition(src, q) for q in range(3)],
                                                                  timeout=30)}
            assert got[0] == 7 and got[1] == 3 and got[2] < 0
            c.close()
            for v in (6, 7, 8):
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
    own = versions_used(b, "pyklog-own")
    assert own[ApiKey.OFFSET_FETCH] == {SUPPORTED[ApiKey.OFFSET_FETCH][1]}

    with Wire(b.port) as w:
        resp = w.request(ApiKey.OFFSET_FETCH, 8, {"require_stable": True, "groups": [
            {"group_id": g1, "topics": [{"name": t, "partition_indexes": [1, 0]}]},
            {"group_id": g2, "topics": None},
            {"group_id": g3, "topics": [{"name": t, "partition_indexes": [0]}]}]})
        by_group = {g["group_id"]: g for g in resp["groups"]}
        assert [g["group_id"] for g in resp["groups"]] == [g1, g2, g3]
        assert all(g["error_code"] == 0 for g in resp["groups"])
        assert [(p["partition_index"], p["committed_offset"]) for p in by_group[g1]["topics"][0]["partitions"]] \
            == [(1, 12), (0, 11)]
        assert [(tt["name"], p["partition_index"], p["committed_offset"])
                for tt in by_group[g2]["topics"] for p in tt["partitions"]] == [(t, 1, 21)]
        assert by_group[g3]["topics"][0]["partitions"][0]["committed_offset"] == -1

        fc = w.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0, "coordinator_keys": [g1, g2, ""]})
        assert [(c["key"], c["error_code"], c["node_id"], c["port"]) for c in fc["coordinators"]] == [
            (g1, 0, 0, b.port), (g2, 0, 0, b.port), ("", 0, 0, b.port)]
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

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": _uid("ckg"), "client.id": "ck-group",
                  "auto.offset.reset": "earliest", "isolation.level": "read_committed",
                  "enable.auto.commit": False})
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

    kc = KafkaConsumer(t, bootstrap_servers=b.bootstrap, group_id=_uid("kpg"), client_id="kp-group",
                       auto_offset_reset="earliest", enable_auto_commit=False, consumer_timeout_ms=15000)
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
