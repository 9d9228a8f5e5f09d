"""What a coordinator needs from the broker to write its own records: the acks=all append path.

The coordinators (offsets, transaction state) append to their internal topics' partitions through
the broker's replica manager with acks=all, and change their caches only once the ISR has the
write (Kafka's ``CoordinatorPartitionWriter``: ``GroupMetadataManager.storeOffsets``,
``TransactionStateManager.appendTransactionToLog``).  The coordinator package does not import the
server: it states here what it calls (:class:`CoordinatorPartitionWriter`), and the server's
:class:`pyklog.broker.server.coordinator_appends.CoordinatorAppends` implements it and is handed to
the coordinators.  None in its place (unit tests, no replica manager) means: append to the local
log and answer at once.

Also here: :class:`ReplicaWait` (one appended write waiting for the ISR) and
:func:`coordinator_error_for` (Kafka's mapping of an append's error for a coordinator's client).

Pure declarations; no state, no locks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    KafkaStorageError,
    NotCoordinatorError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    PyklogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)


class ReplicaWait(NamedTuple):
    """One appended coordinator write waiting for the ISR: the high watermark must reach
    ``required_offset`` (the append's last offset + 1) while this broker still leads at ``leader_epoch``."""

    topic: str
    partition: int
    required_offset: int
    leader_epoch: int
    nbytes: int = 0  # appended bytes: the long-polling Fetches of the partition are woken by that much


class CoordinatorPartitionWriter(Protocol):
    """The acks=all append path a coordinator writes through (thread-safe; see the module docstring)."""

    #: how long a write may wait for the ISR (Kafka's ``offsets.commit.timeout.ms``)
    timeout_ms: int

    def append(self, topic: str, partition: int, batch, *, leader_epoch: int | None = None, from_client: bool = False):
        """Append ``batch`` as the leader at ``leader_epoch`` (the coordinator epoch); returns
        ``(AppendInfo, ReplicaWait | None)``, None when the write needs no replication wait.  Raises the
        log's errors, NOT_LEADER_OR_FOLLOWER and NOT_ENOUGH_REPLICAS (nothing appended).  Caller's thread."""
        ...

    def await_replicated(
        self, waits, callback: Callable[[PyklogError | None], None], timeout_ms: int | None = None
    ) -> None:
        """``callback(None)`` once every wait is replicated, else ``callback(first error)``; never
        blocks.  The callback may run on this thread or another and must not block."""
        ...

    def wait_replicated(self, waits, timeout_ms: int | None = None) -> PyklogError | None:
        """Blocking form of :meth:`await_replicated`: the error, or None once replicated."""
        ...


def coordinator_error_for(e: PyklogError, what: str) -> PyklogError:
    """Kafka's mapping of an append's error for a coordinator's client (``storeOffsets`` /
    ``appendTransactionToLog``): a missing partition, too few replicas or a replication timeout ->
    COORDINATOR_NOT_AVAILABLE (retriable: the client finds the coordinator again); leadership
    moved or a storage error -> NOT_COORDINATOR; other errors as they are."""
    if isinstance(
        e,
        (UnknownTopicOrPartitionError, NotEnoughReplicasError, NotEnoughReplicasAfterAppendError, RequestTimedOutError),
    ):
        return CoordinatorNotAvailableError(f"{what}: {e}")
    if isinstance(e, (NotLeaderOrFollowerError, KafkaStorageError)):
        return NotCoordinatorError(f"{what}: {e}")
    return e


__all__ = ["CoordinatorPartitionWriter", "ReplicaWait", "coordinator_error_for"]
