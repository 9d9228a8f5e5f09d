"""The group state machine (no server): Kafka's GroupState table, every move checked, the names on
the wire unchanged."""

from __future__ import annotations

import pytest

from pyklog.broker.common.state_machine import IllegalTransitionError
from pyklog.broker.coordinator.group.metadata import GroupMetadata
from pyklog.broker.coordinator.group.state import VALID_PREVIOUS, GroupState

G = GroupState


def test_wire_names_are_kafkas():
    assert [s.value for s in G] == ["Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"]
    assert G.STABLE == "Stable" and f"{G.PREPARING_REBALANCE}" == "PreparingRebalance"
    assert "%s" % G.COMPLETING_REBALANCE == "CompletingRebalance"


def test_table_is_kafkas_valid_previous_states():
    assert set(VALID_PREVIOUS) == set(G)
    assert VALID_PREVIOUS[G.EMPTY] == {G.PREPARING_REBALANCE}
    assert VALID_PREVIOUS[G.PREPARING_REBALANCE] == {G.STABLE, G.COMPLETING_REBALANCE, G.EMPTY}
    assert VALID_PREVIOUS[G.COMPLETING_REBALANCE] == {G.PREPARING_REBALANCE}
    assert VALID_PREVIOUS[G.STABLE] == {G.COMPLETING_REBALANCE}
    assert VALID_PREVIOUS[G.DEAD] == set(G)


def test_a_rebalance_round_trip_and_deletion():
    g = GroupMetadata("g")
    assert g.state is G.EMPTY
    for s in (G.PREPARING_REBALANCE, G.COMPLETING_REBALANCE, G.STABLE, G.PREPARING_REBALANCE, G.EMPTY, G.DEAD, G.DEAD):
        g.transition_to(s)
        assert g.state is s


@pytest.mark.parametrize("old", list(G))
@pytest.mark.parametrize("new", list(G))
def test_every_move_outside_the_table_is_refused_and_changes_nothing(old, new):
    g = GroupMetadata("g")
    g.state = old
    if old in VALID_PREVIOUS[new]:
        g.transition_to(new)
        assert g.state is new
    else:
        with pytest.raises(IllegalTransitionError, match=f"group 'g': {old} -> {new} is not a legal move"):
            g.transition_to(new)
        assert g.state is old
