"""The group coordinator's state machine (Kafka's classic group membership protocol), driven through
:class:`pyklog.broker.coordinator.group.GroupCoordinator` directly: no sockets, real timers with short
timeouts.  Stock clients against real broker processes are in tests/integration/coordinator/test_group.py."""

from __future__ import annotations

import threading
import time

import pytest

from pyklog.broker.coordinator.group import GroupCoordinator, GroupState
from tests.support import wait_for

EMPTY, STABLE, DEAD = GroupState.EMPTY, GroupState.STABLE, GroupState.DEAD
PREPARING_REBALANCE, COMPLETING_REBALANCE = GroupState.PREPARING_REBALANCE, GroupState.COMPLETING_REBALANCE

NONE, ILLEGAL_GENERATION, INCONSISTENT_PROTOCOL, INVALID_GROUP_ID, UNKNOWN_MEMBER = 0, 22, 23, 24, 25
INVALID_SESSION_TIMEOUT, REBALANCE_IN_PROGRESS, MEMBER_ID_REQUIRED, NOT_COORDINATOR = 26, 27, 79, 16


class Answer:
    """A respond callback that remembers the (single) answer."""

    def __init__(self):
        self.body = None
        self.calls = 0
        self.event = threading.Event()

    def __call__(self, body):
        self.calls += 1
        self.body = body
        self.event.set()

    def wait(self, timeout=5.0):
        assert self.event.wait(timeout), "no answer"
        assert self.calls == 1, f"answered {self.calls} times"
        return self.body

    @property
    def done(self):
        return self.event.is_set()


#: every test fails if a group coordinator in this process logged an error (see tests/conftest.py)
pytestmark = pytest.mark.usefixtures("no_group_coordinator_errors")


@pytest.fixture
def gc():
    c = GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60000)
    yield c
    c.shutdown()


def join(
    gc,
    group="g",
    member="",
    *,
    protocols=(("range", b"m1"),),
    session=5000,
    rebalance=5000,
    v4=False,
    client="c",
    ptype="consumer",
):
    a = Answer()
    gc.join_group(
        group,
        member,
        client_id=client,
        client_host="/127.0.0.1",
        session_timeout_ms=session,
        rebalance_timeout_ms=rebalance,
        protocol_type=ptype,
        protocols=list(protocols),
        respond=a,
        require_known_member_id=v4,
    )
    return a


def sync(gc, group, gen, member, assignments=None):
    a = Answer()
    gc.sync_group(group, gen, member, assignments or {}, a)
    return a


def stable_single(gc, group="g", **kw):
    r = join(gc, group, **kw).wait()
    assert r["error_code"] == NONE
    s = sync(gc, group, r["generation_id"], r["member_id"], {r["member_id"]: b"all"}).wait()
    assert s == {"throttle_time_ms": 0, "error_code": NONE, "assignment": b"all"}
    return r


def test_single_member_join_sync_heartbeat(gc):
    r = join(gc, client="cli").wait()
    assert r["error_code"] == NONE and r["generation_id"] == 1 and r["protocol_name"] == "range"
    assert r["member_id"].startswith("cli-") and r["leader"] == r["member_id"]
    assert r["members"] == [{"member_id": r["member_id"], "group_instance_id": None, "metadata": b"m1"}]
    assert gc.group_state("g") == COMPLETING_REBALANCE
    assert gc.heartbeat("g", 1, r["member_id"]) == NONE
    s = sync(gc, "g", 1, r["member_id"], {r["member_id"]: b"A", "ghost": b"x"}).wait()
    assert s["error_code"] == NONE and s["assignment"] == b"A"
    assert gc.group_state("g") == STABLE
    assert gc.heartbeat("g", 1, r["member_id"]) == NONE
    # a repeated SyncGroup in Stable gets the same assignment
    assert sync(gc, "g", 1, r["member_id"]).wait()["assignment"] == b"A"
    d = gc.describe_group("g")
    assert d["group_state"] == STABLE and d["protocol_type"] == "consumer" and d["protocol_data"] == "range"
    assert d["members"] == [
        {
            "member_id": r["member_id"],
            "group_instance_id": None,
            "client_id": "cli",
            "client_host": "/127.0.0.1",
            "member_metadata": b"m1",
            "member_assignment": b"A",
        }
    ]
    assert gc.list_groups() == (NONE, [("g", "consumer")])


def test_member_id_required_kip394(gc):
    first = join(gc, v4=True).wait()
    assert first["error_code"] == MEMBER_ID_REQUIRED and first["member_id"].startswith("c-")
    assert first["generation_id"] == -1 and gc.group_state("g") == EMPTY
    r = join(gc, member=first["member_id"], v4=True).wait()
    assert r["error_code"] == NONE and r["member_id"] == first["member_id"] and r["generation_id"] == 1


def test_pending_member_is_forgotten_after_its_session_timeout(gc):
    first = join(gc, v4=True, session=100).wait()
    time.sleep(0.4)
    r = join(gc, member=first["member_id"], v4=True).wait()
    assert r["error_code"] == UNKNOWN_MEMBER


def test_second_member_triggers_rebalance_and_followers_wait_for_the_leader(gc):
    a = stable_single(gc, protocols=[("range", b"a")])
    jb = join(gc, protocols=[("range", b"b")])
    assert not jb.done and gc.group_state("g") == PREPARING_REBALANCE
    assert gc.heartbeat("g", 1, a["member_id"]) == REBALANCE_IN_PROGRESS
    # a commit of the old generation is still accepted while preparing (consumers commit on revoke)
    gc.validate_offset_commit("g", 1, a["member_id"])
    ja = join(gc, member=a["member_id"], protocols=[("range", b"a")])
    ra, rb = ja.wait(), jb.wait()
    assert ra["generation_id"] == rb["generation_id"] == 2
    assert ra["leader"] == rb["leader"] == a["member_id"]
    assert [m["metadata"] for m in ra["members"]] == [b"a", b"b"] and rb["members"] == []
    sb = sync(gc, "g", 2, rb["member_id"])
    time.sleep(0.1)
    assert not sb.done  # the follower waits for the leader's assignment
    sa = sync(gc, "g", 2, a["member_id"], {a["member_id"]: b"pa", rb["member_id"]: b"pb"})
    assert sa.wait()["assignment"] == b"pa" and sb.wait()["assignment"] == b"pb"
    assert gc.group_state("g") == STABLE
    # an unchanged follower rejoin gets the current generation, no rebalance
    again = join(gc, member=rb["member_id"], protocols=[("range", b"b")]).wait()
    assert again["generation_id"] == 2 and again["members"] == [] and gc.group_state("g") == STABLE


def test_stale_generation_and_unknown_member(gc):
    r = stable_single(gc)
    mid = r["member_id"]
    assert gc.heartbeat("g", 0, mid) == ILLEGAL_GENERATION
    assert gc.heartbeat("g", 1, "nobody") == UNKNOWN_MEMBER
    assert gc.heartbeat("unknown-group", 1, mid) == UNKNOWN_MEMBER
    assert sync(gc, "g", 7, mid).wait()["error_code"] == ILLEGAL_GENERATION
    assert sync(gc, "g", 1, "nobody").wait()["error_code"] == UNKNOWN_MEMBER
    assert join(gc, member="nobody").wait()["error_code"] == UNKNOWN_MEMBER
    assert join(gc, group="other", member="nobody").wait()["error_code"] == UNKNOWN_MEMBER


def test_session_expiry_removes_the_member_and_rebalances(gc):
    a = stable_single(gc, session=400)
    jb = join(gc, session=400)
    ra = join(gc, member=a["member_id"], session=400).wait()
    rb = jb.wait()
    sync(gc, "g", 2, rb["member_id"])
    sync(gc, "g", 2, a["member_id"], {}).wait()
    assert gc.group_state("g") == STABLE
    # a keeps heartbeating, b goes silent
    deadline = time.monotonic() + 3
    code = NONE
    while time.monotonic() < deadline and code == NONE:
        code = gc.heartbeat("g", 2, a["member_id"])
        time.sleep(0.05)
    assert code == REBALANCE_IN_PROGRESS
    assert gc.group_summary("g")["members"] == [a["member_id"]]
    r = join(gc, member=a["member_id"], session=400).wait()
    assert r["generation_id"] == 3 and [m["member_id"] for m in r["members"]] == [a["member_id"]]
    assert ra["generation_id"] == 2


def test_rebalance_timeout_drops_members_that_do_not_rejoin(gc):
    a = stable_single(gc, session=5000, rebalance=300)
    b_join = join(gc, session=5000, rebalance=300)  # new member: rebalance, a never rejoins
    t0 = time.monotonic()
    rb = b_join.wait(5)
    assert time.monotonic() - t0 >= 0.25
    assert rb["generation_id"] == 2 and rb["leader"] == rb["member_id"]
    assert [m["member_id"] for m in rb["members"]] == [rb["member_id"]]
    assert gc.heartbeat("g", 2, a["member_id"]) == UNKNOWN_MEMBER


def test_leave_group_single_and_batch(gc):
    a = stable_single(gc)
    jb = join(gc)
    join(gc, member=a["member_id"])
    rb = jb.wait()
    assert gc.leave_group("g", ["nobody"]) == (NONE, [UNKNOWN_MEMBER])
    sb = sync(gc, "g", 2, rb["member_id"])
    # the leader leaves before syncing: the waiting follower is told to rejoin
    assert gc.leave_group("g", [a["member_id"]]) == (NONE, [NONE])
    assert sb.wait()["error_code"] == REBALANCE_IN_PROGRESS
    r = join(gc, member=rb["member_id"]).wait()
    assert r["leader"] == rb["member_id"] and r["generation_id"] == 3
    assert gc.leave_group("g", [rb["member_id"], "x"]) == (NONE, [NONE, UNKNOWN_MEMBER])
    assert gc.group_state("g") == EMPTY
    assert gc.leave_group("no-such-group", ["m"]) == (NONE, [UNKNOWN_MEMBER])


def test_protocol_selection_and_inconsistent_protocols(gc):
    c = GroupCoordinator(initial_rebalance_delay_ms=300, min_session_timeout_ms=10)
    try:
        ja = join(c, protocols=[("range", b""), ("roundrobin", b"")])
        jb = join(c, protocols=[("roundrobin", b""), ("range", b"")])
        jc = join(c, protocols=[("roundrobin", b""), ("sticky", b"")])
        names = {j.wait()["protocol_name"] for j in (ja, jb, jc)}
        assert names == {"roundrobin"}
        bad = join(c, protocols=[("sticky", b"")]).wait()
        assert bad["error_code"] == INCONSISTENT_PROTOCOL
        assert join(c, ptype="connect").wait()["error_code"] == INCONSISTENT_PROTOCOL
        assert join(c, group="empty-proto", protocols=[]).wait()["error_code"] == INCONSISTENT_PROTOCOL
    finally:
        c.shutdown()


def test_initial_rebalance_delay_collects_members(gc):
    c = GroupCoordinator(initial_rebalance_delay_ms=300, min_session_timeout_ms=10)
    try:
        t0 = time.monotonic()
        ja = join(c)
        time.sleep(0.1)
        assert not ja.done and c.group_state("g") == PREPARING_REBALANCE
        jb = join(c)
        ra, rb = ja.wait(), jb.wait()
        assert time.monotonic() - t0 >= 0.3
        assert ra["generation_id"] == rb["generation_id"] == 1 and len(ra["members"]) == 2
    finally:
        c.shutdown()


def test_new_member_during_completing_rebalance_voids_the_pending_sync(gc):
    a = stable_single(gc)
    jb = join(gc)
    join(gc, member=a["member_id"]).wait()
    rb = jb.wait()
    assert gc.group_state("g") == COMPLETING_REBALANCE
    with pytest.raises(Exception) as ei:
        gc.validate_offset_commit("g", 2, rb["member_id"])
    assert ei.value.code == REBALANCE_IN_PROGRESS
    sb = sync(gc, "g", 2, rb["member_id"])
    jc = join(gc)
    assert sb.wait()["error_code"] == REBALANCE_IN_PROGRESS
    assert gc.group_state("g") == PREPARING_REBALANCE
    gc.leave_group("g", [a["member_id"], rb["member_id"]])
    assert jc.wait()["generation_id"] == 3


def test_offset_commit_validation(gc):
    gc.validate_offset_commit("simple", -1, "")  # no group: manual assignment commits are fine
    with pytest.raises(Exception) as ei:
        gc.validate_offset_commit("simple", 3, "m")
    assert ei.value.code == ILLEGAL_GENERATION
    r = stable_single(gc)
    gc.validate_offset_commit("g", 1, r["member_id"])
    for gen, member, code in (
        (0, r["member_id"], ILLEGAL_GENERATION),
        (1, "other", UNKNOWN_MEMBER),
        (-1, "", UNKNOWN_MEMBER),
    ):
        with pytest.raises(Exception) as ei:
            gc.validate_offset_commit("g", gen, member)
        assert ei.value.code == code
    gc.leave_group("g", [r["member_id"]])
    gc.validate_offset_commit("g", -1, "")  # empty again


def test_bad_requests(gc):
    assert join(gc, session=5).wait()["error_code"] == INVALID_SESSION_TIMEOUT
    assert join(gc, session=120000).wait()["error_code"] == INVALID_SESSION_TIMEOUT
    assert join(gc, group="").wait()["error_code"] == INVALID_GROUP_ID
    assert gc.heartbeat("", 1, "m") == INVALID_GROUP_ID
    assert gc.describe_group("nope")["group_state"] == DEAD


def test_shutdown_answers_waiting_requests(gc):
    c = GroupCoordinator(initial_rebalance_delay_ms=10_000, min_session_timeout_ms=10)
    waiting = join(c)
    c.shutdown()
    assert waiting.wait()["error_code"] == NOT_COORDINATOR
    assert join(c).wait()["error_code"] == NOT_COORDINATOR


FENCED_INSTANCE_ID = 82


def static_join(gc, instance, member="", **kw):
    a = Answer()
    gc.join_group(
        "g",
        member,
        client_id="c",
        client_host="/h",
        session_timeout_ms=kw.get("session", 5000),
        rebalance_timeout_ms=kw.get("rebalance", 5000),
        protocol_type="consumer",
        protocols=kw.get("protocols", [("range", b"m")]),
        respond=a,
        require_known_member_id=True,
        group_instance_id=instance,
    )
    return a


def test_static_member_restart_keeps_the_assignment_and_fences_the_old_id(gc):
    r = static_join(gc, "i1").wait()
    assert r["error_code"] == NONE and r["member_id"].startswith("i1-")  # no MEMBER_ID_REQUIRED round trip
    old = r["member_id"]
    assert r["members"] == [{"member_id": old, "group_instance_id": "i1", "metadata": b"m"}]
    assert sync(gc, "g", 1, old, {old: b"A"}).wait()["assignment"] == b"A"
    # the consumer restarts: same instance id, empty member id -> new id, same generation, no rebalance
    r2 = static_join(gc, "i1").wait()
    new = r2["member_id"]
    assert r2["error_code"] == NONE and new != old and new.startswith("i1-")
    assert r2["generation_id"] == 1 and r2["members"] == [] and r2["leader"] == new
    assert gc.group_state("g") == STABLE
    s = Answer()
    gc.sync_group("g", 1, new, {}, s, "i1")
    assert s.wait()["assignment"] == b"A"
    assert gc.heartbeat("g", 1, old, "i1") == FENCED_INSTANCE_ID
    assert gc.heartbeat("g", 1, old) == UNKNOWN_MEMBER
    assert gc.heartbeat("g", 1, new, "i1") == NONE
    with pytest.raises(Exception) as ei:
        gc.validate_offset_commit("g", 1, old, "i1")
    assert ei.value.code == FENCED_INSTANCE_ID
    assert static_join(gc, "i1", member=old).wait()["error_code"] == FENCED_INSTANCE_ID
    assert gc.leave_group("g", [(old, "i1")]) == (NONE, [FENCED_INSTANCE_ID])
    assert gc.leave_group("g", [("", "nope")]) == (NONE, [UNKNOWN_MEMBER])
    assert gc.leave_group("g", [("", "i1")]) == (NONE, [NONE])  # leave by instance id
    assert gc.group_state("g") == EMPTY


def test_static_member_that_does_not_rejoin_stays_until_its_session_expires(gc):
    s1 = static_join(gc, "i1", session=600, rebalance=300).wait()
    sync(gc, "g", 1, s1["member_id"], {}).wait()
    jd = join(gc, session=5000, rebalance=300)  # a dynamic member: rebalance; i1 does not rejoin
    rd = jd.wait()
    assert rd["generation_id"] == 2 and set(gc.group_summary("g")["members"]) == {s1["member_id"], rd["member_id"]}
    assert rd["leader"] == s1["member_id"]
    # i1 neither heartbeats nor syncs: its session expires, d becomes the leader of generation 3
    wait_for(lambda: gc.heartbeat("g", 2, rd["member_id"]) == REBALANCE_IN_PROGRESS, 5, message="i1 expiry")
    assert gc.group_summary("g")["members"] == [rd["member_id"]]
    r3 = join(gc, member=rd["member_id"], session=5000, rebalance=300).wait()
    assert r3["generation_id"] == 3 and r3["leader"] == rd["member_id"]


def test_handle_wire_bodies(gc):
    """handle() maps each API's request body (by version) to the response body."""

    def call(api, version, body):
        a = Answer()
        gc.handle(api, version, body, "wire", "127.0.0.1:5555", a)
        return a

    protos = [{"name": "range", "metadata": b"md"}]
    first = call(
        11,
        5,
        {
            "group_id": "w",
            "session_timeout_ms": 6000,
            "rebalance_timeout_ms": 6000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": protos,
        },
    ).wait()
    assert first["error_code"] == MEMBER_ID_REQUIRED
    mid = first["member_id"]
    r = call(
        11,
        5,
        {
            "group_id": "w",
            "session_timeout_ms": 6000,
            "rebalance_timeout_ms": 6000,
            "member_id": mid,
            "protocol_type": "consumer",
            "protocols": protos,
        },
    ).wait()
    assert r["error_code"] == NONE and r["generation_id"] == 1
    s = call(
        14,
        3,
        {
            "group_id": "w",
            "generation_id": 1,
            "member_id": mid,
            "assignments": [{"member_id": mid, "assignment": b"asg"}],
        },
    ).wait()
    assert s["assignment"] == b"asg"
    assert call(12, 0, {"group_id": "w", "generation_id": 1, "member_id": mid}).wait()["error_code"] == NONE
    d = call(15, 4, {"groups": ["w", "x"], "include_authorized_operations": True}).wait()["groups"]
    assert d[0]["members"][0]["client_host"] == "/127.0.0.1" and d[0]["members"][0]["client_id"] == "wire"
    assert d[0]["authorized_operations"] > 0 and d[1]["group_state"] == DEAD
    assert call(16, 2, {}).wait()["groups"] == [{"group_id": "w", "protocol_type": "consumer"}]
    v3 = call(
        13,
        3,
        {
            "group_id": "w",
            "members": [{"member_id": "zz", "group_instance_id": None}, {"member_id": mid, "group_instance_id": None}],
        },
    ).wait()
    assert v3["error_code"] == NONE and [m["error_code"] for m in v3["members"]] == [UNKNOWN_MEMBER, NONE]
    v0 = call(13, 0, {"group_id": "w", "member_id": mid}).wait()
    assert v0["error_code"] == UNKNOWN_MEMBER
    # JoinGroup v0: no rebalance timeout field, the session timeout is used
    r0 = call(
        11,
        0,
        {
            "group_id": "w0",
            "session_timeout_ms": 6000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": protos,
        },
    ).wait()
    assert r0["error_code"] == NONE and r0["generation_id"] == 1


def test_from_config_reads_kafka_setting_names():
    from pyklog.broker.server.config import ServerConfig

    cfg = ServerConfig.from_properties(
        {"broker.id": "3", "zookeeper.connect": "127.0.0.1:2181", "group.initial.rebalance.delay.ms": "250"}
    )
    c = GroupCoordinator.from_config(None, cfg)
    try:
        assert c.initial_rebalance_delay_ms == 250 and c.min_session_timeout_ms == 6000
        assert c.max_session_timeout_ms == 1_800_000
    finally:
        c.shutdown()
    c = GroupCoordinator.from_config(
        None, ServerConfig.from_properties({"broker.id": "3", "zookeeper.connect": "127.0.0.1:2181"})
    )
    try:
        assert c.initial_rebalance_delay_ms == 3000  # Kafka's default
    finally:
        c.shutdown()


# ------------------------------------------------------------------------------ integration: stock clients
