"""The one state-machine idiom of pyklog: an enum, one table of allowed moves, one error.

Every state machine is written the way Kafka writes its own (``GroupState``, ``TransactionState``,
the producer's ``TransactionManager.State``): an enum of the states and, next to it, ONE table
``VALID_PREVIOUS`` mapping each state to the states it may be entered from (its *valid previous
states*; an initial state that nothing re-enters maps to the empty set).  The one method that
changes the state calls :func:`check_transition` first; a move the table does not allow is a bug in
the code that tried it, never a client's error: it raises :class:`IllegalTransitionError` (or a
subclass) and the caller leaves the state unchanged.  :func:`next_states` reads the table forwards
(for messages and tests).

The machines:

* :class:`pyklog.broker.coordinator.group.state.GroupState` (a classic consumer group);
* :class:`pyklog.broker.coordinator.transaction.metadata.TxnState` (a transactional id);
* :class:`pyklog.broker.coordinator.runtime.LoadState` (a led coordinator-topic partition);
* :class:`pyklog.connector.group.MemberState` (a ZooKeeper group member), raising
  ``pyklog.connector.group.IllegalTransitionError``;
* :class:`pyklog.connector.producer.transaction_manager.TransactionState` (the producer), raising
  ``pyklog.connector.producer.transaction_manager.IllegalStateTransitionError``.

The connector's two errors are subclasses of :class:`IllegalTransitionError` that are also
:class:`~pyklog.broker.errors.PyklogError` s and keep their own messages; they reach
:func:`check_transition` through its ``error`` argument.

Pure code, no state of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TypeVar

S = TypeVar("S", bound=Hashable)


class IllegalTransitionError(Exception):
    """A state change outside its machine's table of valid previous states (a bug, never a client's
    error; Kafka's ``IllegalStateException``).  Not a :class:`~pyklog.broker.errors.PyklogError`: it
    has no wire error code and must not be answered as one."""


def check_transition(
    valid_previous: Mapping[S, frozenset],
    old: S,
    new: S,
    what: str,
    name: Callable[[S], str] = str,
    error: Callable[[S, S], IllegalTransitionError] | None = None,
) -> None:
    """Return if ``old`` is one of ``valid_previous[new]``; otherwise raise ``error(old, new)`` when
    ``error`` is given, else :class:`IllegalTransitionError` (``"<what>: <old> -> <new> is not a legal
    move"``, the states written with ``name``).  Pure."""
    if old in valid_previous[new]:
        return
    if error is not None:
        raise error(old, new)
    raise IllegalTransitionError(f"{what}: {name(old)} -> {name(new)} is not a legal move")


def next_states(valid_previous: Mapping[S, frozenset], state: S) -> frozenset:
    """The states ``state`` may move to: the table read forwards (pure)."""
    return frozenset(s for s, previous in valid_previous.items() if state in previous)


__all__ = ["IllegalTransitionError", "check_transition", "next_states"]
