"""The GroupMember state machine as a table (no server): every state reachable, no way out of
STOPPED, every move outside the table refused with an error naming both states."""

from __future__ import annotations

import itertools

import pytest

from pyklog.broker.errors import PyklogError
from pyklog.connector.group import (
    VALID_PREVIOUS,
    GroupMember,
    IllegalTransitionError,
    MemberState,
    check_transition,
    next_states,
)

S = MemberState


def reachable(start):
    seen, todo = {start}, [start]
    while todo:
        for nxt in next_states(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_table_names_every_state_and_only_states():
    assert set(VALID_PREVIOUS) == set(S)
    for old in S:
        targets = next_states(old)
        assert targets <= set(S), old
        assert old not in targets, f"{old.name} -> {old.name}: a state never moves to itself"


def test_every_state_reachable_from_new():
    assert reachable(S.NEW) == set(S)


def test_stopped_is_final_and_reachable_from_every_started_state():
    assert next_states(S.STOPPED) == frozenset()
    assert next_states(S.STOPPING) == frozenset({S.STOPPED})
    for s in set(S) - {S.NEW, S.STOPPING, S.STOPPED}:
        assert S.STOPPING in next_states(s), f"stop() must work from {s.name}"
    for s in S:
        assert S.STOPPED in reachable(s)


def test_kazoo_connection_states_from_every_running_state():
    """kazoo's SUSPENDED keeps ownership, its LOST gives it up; both can come at any time once running."""
    running = {S.REGISTERING, S.REBALANCING, S.STABLE, S.FAILED}
    for s in running:
        assert {S.SUSPENDED, S.LOST} <= next_states(s), s.name
    assert next_states(S.SUSPENDED) == {S.REBALANCING, S.LOST, S.STOPPING}
    assert next_states(S.LOST) == {S.REGISTERING, S.STOPPING}  # a lost member always registers again


def test_only_a_rebalance_reaches_stable_and_failed():
    assert {s for s in S if S.STABLE in next_states(s)} == {S.REBALANCING, S.FAILED}
    assert {s for s in S if S.FAILED in next_states(s)} == {S.REBALANCING}


def test_legal_transitions_pass_and_every_other_pair_raises_naming_both_states():
    for old, new in itertools.product(S, S):
        if new in next_states(old):
            check_transition(old, new)
            continue
        with pytest.raises(IllegalTransitionError) as ei:
            check_transition(old, new)
        msg = str(ei.value)
        assert f"{old.name} -> {new.name}" in msg, msg
        assert (ei.value.old, ei.value.new) == (old, new)
        assert isinstance(ei.value, PyklogError) and not ei.value.retriable


def test_nothing_leaves_stopped():
    for new in S:
        with pytest.raises(IllegalTransitionError, match=f"STOPPED -> {new.name} \\(allowed from STOPPED: none\\)"):
            check_transition(S.STOPPED, new)


def test_member_refuses_an_illegal_transition_and_keeps_its_state():
    m = GroupMember("127.0.0.1:1", "g", topics=["t"])
    seen = []
    m.add_state_listener(lambda old, new: seen.append((old, new)))
    assert m.state is S.NEW and not m.is_stable() and m.error is None
    with m._lock, pytest.raises(IllegalTransitionError, match="NEW -> STABLE"):
        m._transition(S.STABLE)
    assert m.state is S.NEW and seen == []
    m.stop()  # stop() before start() does nothing
    assert m.state is S.NEW and seen == []
    assert m.wait_stable(0.05) is False


def test_failed_start_goes_back_to_new_and_may_be_retried():
    """No ZooKeeper listens on port 1: start() fails, the member is NEW again (as before states)."""
    from pyklog.broker.errors import ZooKeeperError
    from pyklog.broker.zk.server import free_port

    m = GroupMember(f"127.0.0.1:{free_port()}", "g", topics=["t"], connect_timeout_s=0.5)
    seen = []
    m.add_state_listener(lambda old, new: seen.append((old.name, new.name)))
    for _ in range(2):
        with pytest.raises(ZooKeeperError, match="cannot connect to ZooKeeper"):
            m.start()
        assert m.state is S.NEW
    assert seen == [("NEW", "REGISTERING"), ("REGISTERING", "NEW")] * 2


def test_disconnected_since_follows_the_zookeeper_connection():
    """The time the connection was lost, kept through kazoo's LOST, cleared once connected again."""
    from kazoo.client import KazooState

    m = GroupMember("127.0.0.1:1", "g", topics=["t"])
    assert m.disconnected_since() is None
    m._on_state(KazooState.SUSPENDED)
    since = m.disconnected_since()
    assert since is not None
    m._on_state(KazooState.LOST)  # the session expired while disconnected: the outage began earlier
    assert m.disconnected_since() == since
    m._on_state(KazooState.CONNECTED)
    assert m.disconnected_since() is None
