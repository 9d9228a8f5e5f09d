"""A led coordinator-topic partition's load states as a table (no server): it starts LOADING, ends
LOADED or FAILED, never goes back, and any other move raises the project's IllegalTransitionError."""

from __future__ import annotations

import itertools

import pytest

from pyklog.broker.common.state_machine import IllegalTransitionError
from pyklog.broker.coordinator.runtime import VALID_PREVIOUS, CoordinatorPartition, LoadState

L = LoadState


def test_states_compare_equal_to_their_names():
    assert (L.LOADING, L.LOADED, L.FAILED) == ("loading", "loaded", "failed")
    assert set(VALID_PREVIOUS) == set(L)


def test_every_pair_is_allowed_exactly_when_the_table_says_so():
    for old, new in itertools.product(L, L):
        part = CoordinatorPartition(3, 7)
        part.state = old
        if old in VALID_PREVIOUS[new]:
            part.transition_to(new)
            assert part.state is new
        else:
            with pytest.raises(IllegalTransitionError, match=f"coordinator partition 3: {old} -> {new} is not"):
                part.transition_to(new)
            assert part.state is old


def test_a_partition_starts_loading_and_never_goes_back():
    part = CoordinatorPartition(0)
    assert part.state is L.LOADING and part.error is None
    assert VALID_PREVIOUS[L.LOADING] == frozenset()
    assert VALID_PREVIOUS[L.LOADED] == {L.LOADING}
    assert VALID_PREVIOUS[L.FAILED] == {L.LOADING, L.LOADED}
