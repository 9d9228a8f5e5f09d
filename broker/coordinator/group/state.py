"""The states of a classic consumer group and the moves between them (Kafka's ``GroupState``).

Each state lists the states it may be entered from (:data:`VALID_PREVIOUS`, Kafka's
``validPreviousStates``); :meth:`pyklog.broker.coordinator.group.metadata.GroupMetadata.transition_to`
checks every move against it and raises
:class:`~pyklog.broker.common.state_machine.IllegalTransitionError` for any other::

    Empty --join--> PreparingRebalance --all known members rejoined / rebalance timeout-->
    CompletingRebalance --leader's SyncGroup--> Stable
    Stable / CompletingRebalance --join with new metadata, a leave, a session expiry--> PreparingRebalance
    PreparingRebalance --nobody rejoined--> Empty
    any state --group deleted or expired--> Dead

The values are the names on the wire (DescribeGroups' ``group_state``, ``kafka-consumer-groups
--describe --state``).  :class:`GroupState` is a ``str`` enum, so a state compares equal to its name.

Pure declarations; no state.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType


class GroupState(enum.StrEnum):
    """A classic group's state; the value is Kafka's name for it."""

    EMPTY = "Empty"  # no members (perhaps committed offsets)
    PREPARING_REBALANCE = "PreparingRebalance"  # waiting for the known members to rejoin
    COMPLETING_REBALANCE = "CompletingRebalance"  # joined; waiting for the leader's assignment
    STABLE = "Stable"  # every member has its assignment
    DEAD = "Dead"  # removed: no members, no offsets; never left


_G = GroupState

#: state -> the states it may be entered from (Kafka's ``GroupState.validPreviousStates``)
VALID_PREVIOUS: Mapping[GroupState, frozenset] = MappingProxyType(
    {
        _G.EMPTY: frozenset({_G.PREPARING_REBALANCE}),
        _G.PREPARING_REBALANCE: frozenset({_G.STABLE, _G.COMPLETING_REBALANCE, _G.EMPTY}),
        _G.COMPLETING_REBALANCE: frozenset({_G.PREPARING_REBALANCE}),
        _G.STABLE: frozenset({_G.COMPLETING_REBALANCE}),
        _G.DEAD: frozenset({_G.STABLE, _G.PREPARING_REBALANCE, _G.COMPLETING_REBALANCE, _G.EMPTY, _G.DEAD}),
    }
)

__all__ = ["GroupState", "VALID_PREVIOUS"]
