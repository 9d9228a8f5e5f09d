"""ZooKeeper consumer groups against a real ZooKeeper (no broker): registration, watches, rebalance,
the partition owner registry, session loss, manual release (the Spark driver's mode)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from kazoo.client import KazooClient

from pyklog.broker.errors import RebalanceFailedError
from pyklog.broker.zk import paths
from pyklog.connector.group import Blacklist, GroupMember, MemberState, Whitelist
from tests.support import expire_session, wait_for

SESSION_S = 4.0  # ZooKeeper's minimum (2 x tickTime)


@pytest.fixture
def members(zk_chroot):
    made: list[GroupMember] = []

    def make(group="g", **kw):
        kw.setdefault("session_timeout_s", SESSION_S)
        kw.setdefault("rebalance_backoff_ms", 200)
        if "topic_filter" not in kw:
            kw.setdefault("topics", {"t": 1})
        m = GroupMember(zk_chroot, group, **kw)
        made.append(m)
        return m.start()

    yield make
    for m in made:
        m.stop()


def create_topic(zk, name, n):
    """What the broker writes to /brokers/topics/[topic]."""
    data = json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(n)}}).encode()
    if zk.exists(paths.topic(name)):
        zk.set(paths.topic(name), data)
    else:
        zk.create(paths.topic(name), data, makepath=True)


def owners(zk, group, topic):
    out = {}
    for p in (
        zk.get_children(paths.partition_owners(group, topic)) if zk.exists(paths.partition_owners(group, topic)) else []
    ):
        try:
            out[int(p)] = zk.get(paths.partition_owner(group, topic, int(p)))[0].decode()
        except Exception:  # noqa: BLE001 - an owner node may go at any time
            pass
    return out


def stable(*ms, timeout=30):
    for m in ms:
        assert m.wait_stable(timeout), f"{m.consumer_id} not stable: owned {m.assignment()} target {m.target()}"


def test_registration_and_owner_registry(zk, members):
    create_topic(zk, "t", 4)
    m = members(topics={"t": 2}, consumer_id="host-a:1")
    stable(m)
    data, stat = zk.get(paths.consumer_id("g", "host-a:1"))
    doc = json.loads(data)
    assert doc["version"] == 1 and doc["subscription"] == {"t": 2} and doc["pattern"] == "static"
    assert int(doc["timestamp"]) > 0
    assert stat.ephemeralOwner == m.zk.client_id[0]
    assert m.assignment() == {("t", p) for p in range(4)} == m.target()
    assert owners(zk, "g", "t") == dict.fromkeys(range(4), "host-a:1")
    assert m.streams() == {"t": 2}
    m.stop()
    assert zk.exists(paths.consumer_id("g", "host-a:1")) is None
    assert owners(zk, "g", "t") == {}


def test_default_consumer_id_is_hostname_uuid(zk, members):
    import socket

    m = members()
    host, _, rest = m.consumer_id.rpartition(":")
    assert host == socket.gethostname() and len(rest) == 36


def test_three_members_split_and_converge_on_leave(zk, members):
    create_topic(zk, "t", 7)
    create_topic(zk, "u", 5)
    ms = [members(topics={"t": 1, "u": 1}, consumer_id=f"c{i}") for i in range(3)]
    wait_for(lambda: all(m.is_stable() and len(m.target()) > 0 for m in ms), 30, message="stable group")
    # range: per topic, contiguous, first P mod C get one more
    assert ms[0].assignment() == {("t", 0), ("t", 1), ("t", 2), ("u", 0), ("u", 1)}
    assert ms[1].assignment() == {("t", 3), ("t", 4), ("u", 2), ("u", 3)}
    assert ms[2].assignment() == {("t", 5), ("t", 6), ("u", 4)}
    reg = owners(zk, "g", "t")
    assert reg == {0: "c0", 1: "c0", 2: "c0", 3: "c1", 4: "c1", 5: "c2", 6: "c2"}
    ms[1].stop()
    wait_for(
        lambda: ms[0].is_stable() and ms[2].is_stable() and len(ms[0].assignment()) + len(ms[2].assignment()) == 12,
        30,
        message="2 members own all",
    )
    assert ms[0].assignment() == {("t", p) for p in range(4)} | {("u", p) for p in range(3)}
    assert owners(zk, "g", "u") == {0: "c0", 1: "c0", 2: "c0", 3: "c2", 4: "c2"}


def test_partition_count_change_and_broker_change_trigger_rebalance(zk, members):
    create_topic(zk, "t", 2)
    a = members(consumer_id="a")
    b = members(consumer_id="b")
    wait_for(lambda: a.is_stable() and b.is_stable() and len(a.assignment()) == 1, 30)
    create_topic(zk, "t", 6)  # partitions added
    wait_for(
        lambda: (
            a.assignment() == {("t", 0), ("t", 1), ("t", 2)}
            and b.is_stable()
            and b.assignment() == {("t", 3), ("t", 4), ("t", 5)}
        ),
        30,
        message="6 partitions split",
    )
    before = a.rebalances
    zk.create(paths.broker_id(0), b'{"host":"h","port":1}', ephemeral=True, makepath=True)
    wait_for(lambda: a.rebalances > before, 30, message="rebalance on /brokers/ids change")


def test_static_topic_created_later_is_picked_up(zk, members):
    m = members(topics={"later": 1})
    stable(m)
    assert m.assignment() == set()
    create_topic(zk, "later", 3)
    wait_for(lambda: m.assignment() == {("later", p) for p in range(3)}, 30)


def test_whitelist_picks_up_new_topic_and_blacklist_excludes(zk, members):
    create_topic(zk, "logs-a", 2)
    create_topic(zk, "metrics", 2)
    create_topic(zk, "__consumer_offsets", 2)
    w = members(group="gw", topic_filter=Whitelist("logs-.*"), consumer_id="w")
    bl = members(group="gb", topic_filter=(Blacklist("logs-.*, other"), 2), consumer_id="b")
    stable(w, bl)
    assert w.assignment() == {("logs-a", 0), ("logs-a", 1)}
    assert bl.assignment() == {("metrics", 0), ("metrics", 1)}
    doc = json.loads(zk.get(paths.consumer_id("gw", "w"))[0])
    assert doc["pattern"] == "white_list" and doc["subscription"] == {"logs-.*": 1}
    assert json.loads(zk.get(paths.consumer_id("gb", "b"))[0])["subscription"] == {"logs-.*|other": 2}
    create_topic(zk, "logs-b", 3)
    wait_for(lambda: ("logs-b", 2) in w.assignment() and w.is_stable(), 30, message="new topic via filter")
    assert w.streams() == {"logs-a": 1, "logs-b": 1}
    assert bl.assignment() == {("metrics", 0), ("metrics", 1)}


def test_sticky_members_keep_partitions_when_one_leaves(zk, members):
    create_topic(zk, "t", 12)
    ms = [members(topics={"t": 1}, strategy="sticky", consumer_id=f"s{i}") for i in range(4)]
    wait_for(lambda: all(m.is_stable() and len(m.assignment()) == 3 for m in ms), 30, message="3 each")
    before = {m.consumer_id: m.assignment() for m in ms}
    ms[0].stop()
    rest = ms[1:]
    wait_for(lambda: all(m.is_stable() and len(m.assignment()) == 4 for m in rest), 30, message="4 each")
    for m in rest:
        assert before[m.consumer_id] <= m.assignment()


def test_lost_session_drops_ownership_then_rejoins(zk_chroot, zk, members):
    create_topic(zk, "t", 6)
    lost = []
    a = members(consumer_id="a", on_lost=lost.append)
    b = members(consumer_id="b")
    wait_for(lambda: a.is_stable() and b.is_stable() and len(a.assignment()) == 3, 30)
    old_session = a.zk.client_id[0]
    expire_session(zk_chroot, a.zk)
    wait_for(lambda: lost, 10, message="on_lost")
    assert lost[0] == [("t", 0), ("t", 1), ("t", 2)]
    # re-registered with a new session, and the group converges again
    wait_for(
        lambda: a.is_stable() and b.is_stable() and len(a.assignment()) == 3 and len(b.assignment()) == 3,
        30,
        message="converged after expiry",
    )
    _, stat = zk.get(paths.consumer_id("g", "a"))
    assert stat.ephemeralOwner == a.zk.client_id[0] != old_session
    assert owners(zk, "g", "t") == {0: "a", 1: "a", 2: "a", 3: "b", 4: "b", 5: "b"}


def test_rebalance_fails_after_max_retries_then_recovers(zk_chroot, zk, members):
    create_topic(zk, "t", 2)
    zk.create(paths.partition_owner("g", "t", 1), b"someone-else", ephemeral=True, makepath=True)
    errors = []
    m = members(consumer_id="m", rebalance_max_retries=2, rebalance_backoff_ms=100, on_error=errors.append)
    with pytest.raises(RebalanceFailedError, match=r"could not claim 1 partitions \(t-1\).*rebalance.max.retries=2"):
        wait_for(lambda: m.wait_stable(0.2), 20)
    assert m.state is MemberState.FAILED and isinstance(m.error, RebalanceFailedError)
    wait_for(lambda: errors, 5, message="on_error")
    assert m.assignment() == {("t", 0)} and isinstance(errors[0], RebalanceFailedError)
    zk.delete(paths.partition_owner("g", "t", 1))  # the holder lets go: the owner watch claims at once
    wait_for(m.is_stable, 20)
    assert m.assignment() == {("t", 0), ("t", 1)} and m.error is None


def test_manual_release_hands_over_only_when_released(zk, members):
    create_topic(zk, "t", 6)
    d1 = members(consumer_id="d1", manual_release=True)
    stable(d1)
    assert d1.assignment() == {("t", p) for p in range(6)}
    d2 = members(consumer_id="d2", manual_release=True)
    wait_for(lambda: d1.to_release() == {("t", 3), ("t", 4), ("t", 5)}, 30, message="to_release")
    time.sleep(1.0)  # several backoff periods: nothing moves by itself
    assert d1.assignment() == {("t", p) for p in range(6)}
    assert d1.state is MemberState.REBALANCING and d2.state is MemberState.REBALANCING
    assert d2.target() == {("t", 3), ("t", 4), ("t", 5)} and d2.assignment() == set()
    assert not d2.wait_stable(0.1)
    d1.release([("t", 3)])
    wait_for(lambda: d2.assignment() == {("t", 3)}, 10, message="handover of t-3")
    assert d1.assignment() == {("t", p) for p in (0, 1, 2, 4, 5)}
    assert d1.to_release() == {("t", 4), ("t", 5)}
    d1.release(d1.to_release())
    stable(d1, d2)
    assert d2.assignment() == {("t", 3), ("t", 4), ("t", 5)} and d1.to_release() == set()
    # stop() releases everything at once: the other takes all
    t0 = time.monotonic()
    d1.stop()
    wait_for(lambda: d2.assignment() == {("t", p) for p in range(6)}, 10, message="d2 owns all")
    assert time.monotonic() - t0 < 5
    assert owners(zk, "g", "t") == dict.fromkeys(range(6), "d2")


def test_callbacks_in_auto_mode(zk, members):
    create_topic(zk, "t", 4)
    events = []
    lock = threading.Lock()

    def rec(kind):
        def f(tps):
            with lock:
                events.append((kind, tuple(tps)))

        return f

    a = members(consumer_id="a", on_assign=rec("assign"), on_revoke=rec("revoke"))
    stable(a)
    b = members(consumer_id="b")
    wait_for(lambda: a.is_stable() and b.is_stable() and len(b.assignment()) == 2, 30)
    assert events == [("assign", (("t", 0), ("t", 1), ("t", 2), ("t", 3))), ("revoke", (("t", 2), ("t", 3)))]
    a.stop()
    assert events[-1] == ("revoke", (("t", 0), ("t", 1)))


@pytest.mark.parametrize("strategy", ["sticky", "roundrobin"])
def test_concurrent_joins_and_leaves_converge(zk, members, strategy):
    create_topic(zk, "x", 8)
    create_topic(zk, "y", 7)
    everything = {("x", p) for p in range(8)} | {("y", p) for p in range(7)}

    def converged(ms):
        owned = [m.assignment() for m in ms]
        counts = sorted(len(o) for o in owned)
        return (
            all(m.is_stable() for m in ms)
            and set().union(*owned) == everything
            and sum(counts) == len(everything)
            and counts[-1] - counts[0] <= 1
        )

    ms = [members(topics={"x": 1, "y": 1}, strategy=strategy, consumer_id=f"m{i}") for i in range(4)]
    wait_for(lambda: converged(ms), 30, message="4 members converged")
    ms += [members(topics={"x": 1, "y": 1}, strategy=strategy, consumer_id=f"n{i}") for i in range(2)]
    wait_for(lambda: converged(ms), 30, message="6 members converged")
    for m in ms[1:4]:
        m.stop()
    rest = [ms[0]] + ms[4:]
    wait_for(lambda: converged(rest), 30, message="3 members converged")
    registry = {}
    for t in ("x", "y"):
        for p, owner in owners(zk, "g", t).items():
            registry[(t, p)] = owner
    assert registry == {tp: m.consumer_id for m in rest for tp in m.assignment()}


def test_long_disconnect_drops_ownership_then_reclaims(tmp_path):
    """A private ZooKeeper is stopped for longer than the session timeout: the member gives up its
    partitions although it never heard of an expiry; after the restart it owns them again."""
    from pyklog.broker.zk.server import ZooKeeperServer, free_port

    port = free_port()
    server = ZooKeeperServer(data_dir=str(tmp_path / "zk"), port=port, max_session_timeout_ms=60000).start()
    lost, member = [], None
    try:
        zk = KazooClient(hosts=server.connect_string)
        zk.start(timeout=30)
        create_topic(zk, "t", 2)
        zk.stop()
        zk.close()
        member = GroupMember(
            server.connect_string, "g", topics=["t"], session_timeout_s=SESSION_S, on_lost=lost.append
        ).start()
        stable(member)
        assert member.assignment() == {("t", 0), ("t", 1)}
        server.stop()
        t0 = time.monotonic()
        wait_for(lambda: lost, 3 * SESSION_S, message="ownership dropped while disconnected")
        assert time.monotonic() - t0 >= SESSION_S - 1.0 and member.assignment() == set()
        assert member.state is MemberState.LOST  # waits for the connection to register again
        server = ZooKeeperServer(data_dir=str(tmp_path / "zk"), port=port, max_session_timeout_ms=60000).start()
        wait_for(
            lambda: member.is_stable() and member.assignment() == {("t", 0), ("t", 1)},
            40,
            message="partitions owned again after the restart",
        )
    finally:
        if member is not None:
            member.stop()
        server.stop()


def test_state_sequence_through_join_rebalance_expiry_and_stop(zk_chroot, zk, members):
    """Every state change of one member, in order: it joins alone, a second member joins (one
    rebalance), its session is expired for real (kazoo reports SUSPENDED, then LOST, then CONNECTED on a
    new session), and it stops."""
    create_topic(zk, "t", 4)
    seq = []
    a = GroupMember(
        zk_chroot, "g", topics={"t": 1}, consumer_id="a", session_timeout_s=SESSION_S, rebalance_backoff_ms=200
    )
    a.add_state_listener(lambda old, new: seq.append((old.name, new.name)))
    try:
        a.start()
        stable(a)
        assert seq == [("NEW", "REGISTERING"), ("REGISTERING", "REBALANCING"), ("REBALANCING", "STABLE")]
        assert a.state is MemberState.STABLE and a.assignment() == {("t", p) for p in range(4)}

        del seq[:]
        b = members(consumer_id="b")
        stable(a, b)
        assert seq == [("STABLE", "REBALANCING"), ("REBALANCING", "STABLE")]
        assert a.assignment() == {("t", 0), ("t", 1)}

        del seq[:]
        old_session = a.zk.client_id[0]
        expire_session(zk_chroot, a.zk)
        wait_for(
            lambda: (
                a.zk.client_id not in (None, ())
                and a.zk.client_id[0] != old_session
                and a.is_stable()
                and b.is_stable()
                and a.assignment() == {("t", 0), ("t", 1)}
            ),
            30,
            message="a registered again and stable",
        )
        assert seq == [
            ("STABLE", "SUSPENDED"),
            ("SUSPENDED", "LOST"),
            ("LOST", "REGISTERING"),
            ("REGISTERING", "REBALANCING"),
            ("REBALANCING", "STABLE"),
        ]
        assert zk.get(paths.consumer_id("g", "a"))[1].ephemeralOwner == a.zk.client_id[0]

        del seq[:]
        a.stop()
        assert seq == [("STABLE", "STOPPING"), ("STOPPING", "STOPPED")]
        assert a.state is MemberState.STOPPED and not a.is_stable() and a.wait_stable(0.1) is False
        with pytest.raises(RuntimeError, match="already started"):
            a.start()
        a.stop()  # a second stop does nothing
        assert seq == [("STABLE", "STOPPING"), ("STOPPING", "STOPPED")]
    finally:
        a.stop()
