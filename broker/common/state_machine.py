"""The one state-machine idiom of pyklog: an enum, one table of allowed moves, one error.

Every state machine (the group coordinator's :class:`~pyklog.broker.coordinator.group.state.GroupState`,
the transaction coordinator's :class:`~pyklog.broker.coordinator.transaction.metadata.TxnState`) is
written the way Kafka writes its own (``GroupState``, ``TransactionState``): an enum of the states
and, next to it, one table mapping each state to the states it may be entered from (its *valid
previous states*).  A move the table does not allow is a bug in the code that tried it, never a
client's error: :func:`check_transition` raises :class:`IllegalTransitionError` and the caller
leaves the state unchanged.

The connector's machines raise subclasses of the same error that are also
:class:`~pyklog.broker.errors.PyklogError` s, as they always were:
``pyklog.connector.group.IllegalTransitionError`` (a ZooKeeper group member, whose table lists the
states each state may move to) and ``pyklog.connector.producer.transaction_manager.IllegalStateTransitionError``
(the producer's ``VALID_TRANSITIONS``, valid previous states like Kafka's producer).

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
    valid_previous: Mapping[S, frozenset], old: S, new: S, what: str, name: Callable[[S], str] = str
) -> None:
    """Raise :class:`IllegalTransitionError` (``"<what>: <old> -> <new> is not a legal move"``, the
    states written with ``name``) unless ``old`` is one of ``valid_previous[new]``."""
    if old not in valid_previous[new]:
        raise IllegalTransitionError(f"{what}: {name(old)} -> {name(new)} is not a legal move")


__all__ = ["IllegalTransitionError", "check_transition"]
