"""The group coordinator (Kafka's classic group membership protocol) as stock clients see it:
confluent-kafka, kafka-python 3 and kcat against real broker processes, the wire protocol across two
brokers, session expiry of a crashed consumer and static members.  The state machine driven directly
(no sockets) is in tests/unit/coordinator/test_group.py."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid

import pytest

from pyklog.broker.coordinator.group import GroupState
from tests.support import Wire, wait_for

NONE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER = 0, 22, 23, 24, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED, NOT_COORDINATOR = 26, 27, 79, 16
COORDINATOR_LOAD_IN_PROGRESS = 14

EMPTY, STABLE = GroupState.EMPTY, GroupState.STABLE
KCAT = shutil.which("kcat") or shutil.which("kafkacat")


#: every test fails if a group coordinator in this process logged an error (see tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_group_coordinator_errors")


def _topic() -> str:
    return f"grp-{uuid.uuid4().hex[:10]}"


def _produce(bootstrap, topic, values):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i, v in enumerate(values):
        p.produce(topic, key=b"k%d" % i, value=v)
    assert p.flush(30) == 0


@pytest.fixture
def group_broker(broker_factory):
    # 4 partitions per auto-created topic; no initial rebalance delay and short sessions allowed so tests run fast
    b = broker_factory(0, num_partitions=4, group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000)
    yield b
    assert b.stop() == 0, b.output()[-5000:]
    assert "Traceback" not in b.output(), b.output()[-20000:]


def test_confluent_kafka_two_consumers_share_a_group(group_broker):
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = group_broker.bootstrap
    topic, group = _topic(), "cg-" + uuid.uuid4().hex[:8]
    _produce(bootstrap, topic, [b"warmup"])  # creates the 4-partition topic
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 50,
        "topic.metadata.refresh.interval.ms": 2000,
    }
    assigned = {"c1": set(), "c2": set()}
    consumers = {}
    for name in ("c1", "c2"):
        c = Consumer(dict(conf, **{"client.id": name}))

        def on_assign(consumer, parts, name=name):
            assigned[name] = {p.partition for p in parts}

        def on_revoke(consumer, parts, name=name):
            assigned[name] = set()

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        consumers[name] = c
    seen: dict[str, list] = {"c1": [], "c2": []}

    def poll_all(rounds=1):
        for _ in range(rounds):
            for name, c in consumers.items():
                m = c.poll(0.05)
                if m is not None and m.error() is None:
                    seen[name].append((m.partition(), m.offset(), m.value()))

    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            poll_all()
            if assigned["c1"] and assigned["c2"] and assigned["c1"] | assigned["c2"] == {0, 1, 2, 3}:
                break
        assert assigned["c1"] and assigned["c2"], assigned
        assert assigned["c1"].isdisjoint(assigned["c2"]) and assigned["c1"] | assigned["c2"] == {0, 1, 2, 3}
        values = [b"v-%d" % i for i in range(200)]
        _produce(bootstrap, topic, values)
        # the warm-up record may legitimately come twice (read in generation 1, again after the
        # rebalance to 2 members as nothing was committed); the 200 produced now exactly once
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and sum(v != b"warmup" for _, _, v in seen["c1"] + seen["c2"]) < 200:
            poll_all()
        poll_all(5)
        got = [x for x in seen["c1"] + seen["c2"] if x[2] != b"warmup"]
        assert sorted(v for _, _, v in got) == sorted(values)  # every record exactly once
        for name in ("c1", "c2"):
            assert {p for p, _, v in seen[name] if v != b"warmup"} <= assigned[name]
        for c in consumers.values():
            c.commit(asynchronous=False)
        committed = consumers["c1"].committed([TopicPartition(topic, p) for p in range(4)], timeout=10)
        ends = {p: consumers["c1"].get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(4)}
        assert {tp.partition: tp.offset for tp in committed} == ends

        consumers.pop("c2").close()  # LeaveGroup: c1 gets every partition
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and assigned["c1"] != {0, 1, 2, 3}:
            poll_all()
        assert assigned["c1"] == {0, 1, 2, 3}
        n_before = len(seen["c1"])
        poll_all(10)
        assert len(seen["c1"]) == n_before  # nothing redelivered: everything was committed
        more = [b"after-%d" % i for i in range(50)]
        _produce(bootstrap, topic, more)
        seen["c1"].clear()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen["c1"]) < 50:
            poll_all()
        assert sorted(v for _, _, v in seen["c1"]) == sorted(more)  # continues from the committed offsets
    finally:
        for c in consumers.values():
            c.close()


def test_kafka_python_group_consumer_commit_and_admin_tools(group_broker):
    from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

    bootstrap = group_broker.bootstrap
    topic, group = _topic(), "kp-" + uuid.uuid4().hex[:8]
    values = [b"kp-%d" % i for i in range(60)]
    _produce(bootstrap, topic, values)
    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=8000,
        client_id="kp-client",
        heartbeat_interval_ms=300,
    )
    admin = None
    try:
        got = []
        for m in c:
            got.append(m.value)
            if len(got) == len(values):
                break
        assert sorted(got) == sorted(values)
        assert c.assignment() == {TopicPartition(topic, p) for p in range(4)}
        c.commit()
        assert sum(c.committed(TopicPartition(topic, p)) or 0 for p in range(4)) == len(values)

        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        listed = admin.list_groups()
        assert {"group_id": group, "protocol_type": "consumer"} in [
            {k: g[k] for k in ("group_id", "protocol_type")} for g in listed
        ], listed
        desc = admin.describe_groups([group])[group]
        assert desc["error"] is None and desc["group_state"] == "Stable", desc
        assert desc["protocol_type"] == "consumer" and desc["protocol_data"] == "range"
        assert [m["client_id"] for m in desc["members"]] == ["kp-client"]
        offsets = admin.list_group_offsets({group: None})[group]
        assert sum(o.offset for o in offsets.values()) == len(values)
    finally:
        c.close()
        if admin is not None:
            admin.close()
    # a new member of the group starts from the committed offsets: only new records
    _produce(bootstrap, topic, [b"late"])
    c2 = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
    )
    try:
        assert [m.value for m in c2] == [b"late"]
    finally:
        c2.close()


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
def test_kcat_balanced_consumer(group_broker):
    bootstrap = group_broker.bootstrap
    topic, group = _topic(), "kcat-" + uuid.uuid4().hex[:8]
    values = [f"line-{i}" for i in range(40)]
    _produce(bootstrap, topic, [v.encode() for v in values])
    p = subprocess.run(
        [KCAT, "-b", bootstrap, "-G", group, "-o", "beginning", "-e", "-q", "-X", "heartbeat.interval.ms=300", topic],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.split()) == sorted(values), p.stderr


def test_wire_protocol_two_brokers_not_coordinator_and_delayed_answers(broker_factory):
    """Raw requests: NOT_COORDINATOR from the other broker; on the coordinator a full rebalance of
    two members on two connections, where JoinGroup and SyncGroup are answered later (from another
    request's handler thread); OffsetCommit validated against the generation."""
    from pyklog.broker.protocol import ApiKey, decode_response

    b0 = broker_factory(0, group_initial_rebalance_delay_ms=0)
    b1 = broker_factory(1, group_initial_rebalance_delay_ms=0)
    ports = {0: b0.port, 1: b1.port}
    group = "wire-" + uuid.uuid4().hex[:8]
    with Wire(b0.port) as w:
        w.request(
            ApiKey.CREATE_TOPICS,
            0,
            {"topics": [{"name": "wt", "num_partitions": 2, "replication_factor": 1}], "timeout_ms": 5000},
        )
        fc = wait_for(
            lambda: (lambda r: r if r["error_code"] == 0 else None)(
                w.request(ApiKey.FIND_COORDINATOR, 1, {"key": group})
            ),
            30,
            message="coordinator",
        )
    coord = fc["node_id"]
    join_body = {
        "group_id": group,
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"meta"}],
    }
    with Wire(ports[1 - coord]) as other:
        assert other.request(ApiKey.JOIN_GROUP, 5, join_body)["error_code"] == NOT_COORDINATOR
        assert (
            other.request(ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": 1, "member_id": "m"})["error_code"]
            == NOT_COORDINATOR
        )
    with Wire(ports[coord]) as wa, Wire(ports[coord]) as wb:
        # the coordinator may still be loading its offsets partition (COORDINATOR_LOAD_IN_PROGRESS,
        # which clients retry): ask again until it answers
        first = wait_for(
            lambda: (lambda r: None if r["error_code"] == COORDINATOR_LOAD_IN_PROGRESS else r)(
                wa.request(ApiKey.JOIN_GROUP, 5, join_body)
            ),
            30,
            message="the coordinator to finish loading",
        )
        assert first["error_code"] == MEMBER_ID_REQUIRED
        a = wa.request(ApiKey.JOIN_GROUP, 5, dict(join_body, member_id=first["member_id"]))
        assert a["error_code"] == NONE and a["generation_id"] == 1 and a["leader"] == first["member_id"]
        a_id = a["member_id"]
        s = wa.request(
            ApiKey.SYNC_GROUP,
            3,
            {
                "group_id": group,
                "generation_id": 1,
                "member_id": a_id,
                "assignments": [{"member_id": a_id, "assignment": b"A1"}],
            },
        )
        assert s == {"throttle_time_ms": 0, "error_code": NONE, "assignment": b"A1"}

        def commit(gen, member):
            return wa.request(
                ApiKey.OFFSET_COMMIT,
                7,
                {
                    "group_id": group,
                    "generation_id_or_member_epoch": gen,
                    "member_id": member,
                    "topics": [{"name": "wt", "partitions": [{"partition_index": 0, "committed_offset": 5}]}],
                },
            )["topics"][0]["partitions"][0]["error_code"]

        assert commit(1, a_id) == NONE
        assert commit(2, a_id) == ILLEGAL_GENERATION
        assert commit(1, "stranger") == UNKNOWN_MEMBER
        assert commit(-1, "") == UNKNOWN_MEMBER  # the group has members: a "simple" commit is refused

        # member b joins on its own connection: its JoinGroup waits for a's rejoin
        b_first = wb.request(ApiKey.JOIN_GROUP, 5, join_body)
        b_join = wb.send(ApiKey.JOIN_GROUP, 5, dict(join_body, member_id=b_first["member_id"]))
        wait_for(
            lambda: (
                wa.request(ApiKey.HEARTBEAT, 3, {"group_id": group, "generation_id": 1, "member_id": a_id})[
                    "error_code"
                ]
                == REBALANCE_IN_PROGRESS
            ),
            10,
            message="REBALANCE_IN_PROGRESS",
        )
        a2 = wa.request(ApiKey.JOIN_GROUP, 5, dict(join_body, member_id=a_id))
        cid, b2 = decode_response(ApiKey.JOIN_GROUP, 5, wb.recv_frame())
        assert cid == b_join and b2["error_code"] == NONE and b2["generation_id"] == a2["generation_id"] == 2
        assert len(a2["members"]) == 2 and b2["members"] == []
        b_sync = wb.send(
            ApiKey.SYNC_GROUP,
            3,
            {"group_id": group, "generation_id": 2, "member_id": b2["member_id"], "assignments": []},
        )
        time.sleep(0.2)
        s = wa.request(
            ApiKey.SYNC_GROUP,
            3,
            {
                "group_id": group,
                "generation_id": 2,
                "member_id": a_id,
                "assignments": [
                    {"member_id": a_id, "assignment": b"A2"},
                    {"member_id": b2["member_id"], "assignment": b"B2"},
                ],
            },
        )
        assert s["assignment"] == b"A2"
        cid, sb = decode_response(ApiKey.SYNC_GROUP, 3, wb.recv_frame())
        assert cid == b_sync and sb["error_code"] == NONE and sb["assignment"] == b"B2"

        d = wa.request(ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group]})["groups"][0]
        assert d["group_state"] == STABLE and d["protocol_data"] == "range"
        assert sorted(m["member_assignment"] for m in d["members"]) == [b"A2", b"B2"]
        assert {"group_id": group, "protocol_type": "consumer"} in wa.request(ApiKey.LIST_GROUPS, 2, {})["groups"]
        left = wa.request(
            ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [{"member_id": a_id}, {"member_id": b2["member_id"]}]}
        )
        assert left["error_code"] == NONE and [m["error_code"] for m in left["members"]] == [NONE, NONE]
        assert wa.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})["groups"][0]["group_state"] == EMPTY
        assert commit(-1, "") == NONE  # empty again: manual-assignment commits work


_CHILD_CONSUMER = r"""
import sys, time
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "session.timeout.ms": 2000,
              "heartbeat.interval.ms": 300, "client.id": "child"})
c.subscribe([sys.argv[3]], on_assign=lambda cons, parts: print("assigned", sorted(p.partition for p in parts),
                                                               flush=True))
while True:
    c.poll(0.1)
"""


def test_crashed_consumer_is_expired_after_its_session_timeout(group_broker, tmp_path):
    """A consumer killed with SIGKILL sends no LeaveGroup: after session.timeout.ms the coordinator
    removes it and the surviving consumer gets every partition."""
    import sys

    from confluent_kafka import Consumer

    bootstrap = group_broker.bootstrap
    topic, group = _topic(), "crash-" + uuid.uuid4().hex[:8]
    _produce(bootstrap, topic, [b"x"])
    out_path = tmp_path / "child.out"
    with open(out_path, "w") as out:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD_CONSUMER, bootstrap, group, topic], stdout=out, stderr=subprocess.STDOUT
        )
    assigned: set = set()
    c = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": group, "session.timeout.ms": 2000, "heartbeat.interval.ms": 300}
    )

    def on_assign(consumer, parts):
        assigned.clear()
        assigned.update(p.partition for p in parts)

    c.subscribe([topic], on_assign=on_assign, on_revoke=lambda consumer, parts: assigned.clear())
    try:
        deadline = time.monotonic() + 60

        def child_assignment():
            lines = [ln for ln in out_path.read_text().splitlines() if ln.startswith("assigned ")]
            return lines[-1][len("assigned ") :] if lines else "[]"

        while time.monotonic() < deadline and not (assigned and len(assigned) < 4 and child_assignment() != "[]"):
            c.poll(0.1)
        assert assigned and len(assigned) < 4, (assigned, out_path.read_text())
        child.kill()
        child.wait(10)
        t_kill = time.monotonic()
        while time.monotonic() - t_kill < 40 and assigned != {0, 1, 2, 3}:
            c.poll(0.1)
        assert assigned == {0, 1, 2, 3}
        assert time.monotonic() - t_kill >= 1.5  # it took the session timeout, not a LeaveGroup
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        c.close()


def test_confluent_kafka_static_member_restart(group_broker):
    """group.instance.id (KIP-345): a restarted static consumer takes its old member's place at once
    (no LeaveGroup was sent, no session timeout is waited out) and keeps consuming from the commits."""
    from confluent_kafka import Consumer

    bootstrap = group_broker.bootstrap
    topic, group = _topic(), "static-" + uuid.uuid4().hex[:8]
    _produce(bootstrap, topic, [b"a-%d" % i for i in range(20)])
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": "instance-1",
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 300,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }

    def consume(n):
        c = Consumer(conf)
        assigned = []
        c.subscribe([topic], on_assign=lambda consumer, parts: assigned.append(sorted(p.partition for p in parts)))
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(got) < n:
            m = c.poll(0.1)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.commit(asynchronous=False)
        c.close()
        return assigned, got

    assigned, got = consume(20)
    assert assigned == [[0, 1, 2, 3]] and len(got) == 20
    _produce(bootstrap, topic, [b"b-%d" % i for i in range(10)])
    t0 = time.monotonic()
    assigned, got = consume(10)
    assert assigned == [[0, 1, 2, 3]] and sorted(got) == sorted(b"b-%d" % i for i in range(10))
    assert time.monotonic() - t0 < 25  # well under the 30 s session timeout of the old member
    assert f"static member instance-1 of group {group} rejoined" in group_broker.output()
