"""Fetch: one request's parameters, each partition's outcome, and the reads of
:meth:`ReplicaManager.fetch_messages <pyklog.broker.server.replica_manager.ReplicaManager.fetch_messages>`
(Kafka's ``FetchParams``, ``FetchPartitionData``, ``ReplicaManager.readFromLog`` and the checks of
``DelayedFetch``).  The replica manager owns the fetch purgatory and decides when a Fetch waits;
the functions here read the partitions through its public lookups (``leader_log``, ``local_log``,
``partition``, ``update_follower_fetch``).  They run on request handler threads, or on the thread
completing a delayed Fetch; they hold no lock of their own (the logs and partitions guard theirs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pyklog.broker.errors import OffsetOutOfRangeError, PyklogError

if TYPE_CHECKING:
    from pyklog.broker.server.replica_manager import ReplicaManager

log = logging.getLogger(__name__)

INT32_MAX = 0x7FFFFFFF


class FetchParams:
    """One Fetch request's parameters (Kafka's ``FetchParams``): the request version (v3+: KIP-74
    soft limits and the request's ``max_bytes``; v4+: the isolation level), ``replica_id`` (>= 0: a
    follower replica, reads up to the log end offset; -1: a consumer, reads below the high
    watermark), ``max_wait_ms`` / ``min_bytes`` (the long poll), ``max_bytes`` and
    ``isolation_level`` (1: READ_COMMITTED).  Immutable after construction; any thread."""

    __slots__ = ("request_version", "replica_id", "max_wait_ms", "min_bytes", "max_bytes", "isolation_level")

    def __init__(
        self,
        request_version: int,
        replica_id: int,
        max_wait_ms: int,
        min_bytes: int,
        max_bytes: int,
        isolation_level: int,
    ):
        self.request_version = request_version
        self.replica_id = replica_id
        self.max_wait_ms = max_wait_ms
        self.min_bytes = min_bytes
        self.max_bytes = max_bytes
        self.isolation_level = isolation_level

    @property
    def is_follower(self) -> bool:
        """A follower replica's Fetch (reads up to the log end offset, moves the follower state)."""
        return self.replica_id >= 0

    @property
    def read_committed(self) -> bool:
        """READ_COMMITTED (v4+ ``isolation_level`` 1): reads stop at the last stable offset."""
        return self.isolation_level == 1 and self.request_version >= 4


class FetchPartitionData:
    """One partition's outcome of :meth:`ReplicaManager.fetch_messages` (Kafka's
    ``FetchPartitionData``): ``error`` (None, a PyklogError, or an unexpected exception: the caller
    answers UNKNOWN_SERVER_ERROR), the high watermark, last stable offset and log start offset
    (-1: unknown), ``aborted_transactions`` (READ_COMMITTED: ``(producer id, first offset)`` pairs
    overlapping the records; else None) and ``records`` (a
    :class:`~pyklog.broker.log.log.FetchSlice` of whole batches, or None)."""

    __slots__ = (
        "error",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
        "log_end_offset",
        "aborted_transactions",
        "records",
    )

    def __init__(self, read_committed: bool):
        self.error: BaseException | None = None
        self.high_watermark = -1
        self.log_end_offset = -1  # the leader's, after the read (a fetch session's quietness test)
        self.last_stable_offset = -1
        self.log_start_offset = -1
        self.aborted_transactions: list | None = [] if read_committed else None
        self.records = None


class DelayedFetch(NamedTuple):
    """The payload of a Fetch waiting in the fetch purgatory: what a re-read needs and the answer's
    callbacks.  ``fenced`` is the leader-epoch check made when the request arrived (an incremental
    fetch re-plans and re-checks at each read).  ``context``: the fetch session's
    :class:`~pyklog.broker.server.fetch_session.FetchContext` (None: sessionless) and ``authorize``
    its filter of each plan; ``denied``: the partitions refused by it, answered with the rest."""

    params: FetchParams
    fetch_infos: list
    fenced: dict
    quota: Any
    response_callback: Callable
    error_callback: Callable | None
    context: Any = None
    authorize: Callable | None = None
    denied: Any = ()

    @property
    def session(self):
        """The fetch session this Fetch belongs to (None: a sessionless or first full fetch)."""
        return None if self.context is None else self.context.session


def fetch_moved(rm: ReplicaManager, keys, follower: bool):
    """A predicate for a delayed Fetch: has any of its partitions moved since now (log end offset
    for a follower, high watermark for a consumer)?  Taken BEFORE the read; the purgatory checks
    it once right after the watch is registered, so an append landing between the read and the
    watch (its notify finding no watcher) does not leave the fetch waiting out its max_wait_ms --
    on the acks=all path that would stall such a produce by replica.fetch.wait.max.ms (Kafka's
    DelayedOperation.safeTryCompleteOrElse)."""

    def end(key):
        lg = rm.local_log(*key)
        if lg is None:
            return None
        return lg.log_end_offset if follower else lg.high_watermark

    marks = {k: end(k) for k in keys}
    return lambda: any(end(k) != m for k, m in marks.items())


def fenced_partitions(rm: ReplicaManager, fetch_infos) -> dict:
    """A Fetch's (v9+) ``current_leader_epoch`` checked against this leader's epoch, as Kafka's
    ``Partition.checkCurrentLeaderEpoch``, for followers and consumers alike (KIP-320): older ->
    FENCED_LEADER_EPOCH (the fetcher missed a leader change: a consumer refreshes its metadata
    and validates its position with OffsetsForLeaderEpoch, so it never reads past a truncation
    point from a deposed leader), newer -> UNKNOWN_LEADER_EPOCH (this broker has not seen it yet).
    Returns ``{(topic, partition): error}``; -1 (no epoch) is not checked."""
    out = {}
    for topic, parts in fetch_infos:
        for p, _, _, asked in parts:
            if asked is None or asked < 0:
                continue
            part = rm.partition(topic, p)
            if part is None or not part.is_leader:
                continue  # answered NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION by the read
            error = part.check_current_leader_epoch(asked)
            if error is not None:
                out[(topic, p)] = error
    return out


def read_fetch(rm: ReplicaManager, fetch: DelayedFetch, *, from_purgatory: bool = False):
    """Read every requested partition; returns (results with FetchSlice records, bytes, errors).
    A follower's fetch state is updated by the first read only: ``from_purgatory`` (the re-read of a
    delayed fetch) leaves it alone, as Kafka's ``DelayedFetch.onComplete`` (the follower may have
    stopped since its request arrived: its next fetch tells where it is)."""
    params, quota, fenced = fetch.params, fetch.quota, fetch.fenced
    version = params.request_version
    follower = params.is_follower  # a follower replica's Fetch: reads up to the log end offset
    replica_id = params.replica_id
    soft_limits = version >= 3  # KIP-74: the first non-empty partition returns >= 1 batch
    remaining = params.max_bytes if version >= 3 else INT32_MAX
    min_one = soft_limits
    total = 0
    errors = 0
    read_committed = params.read_committed
    session = fetch.session
    results = []
    for name, parts in fetch.fetch_infos:
        out = []
        for p, offset, pmax, _ in parts:
            data = FetchPartitionData(read_committed)
            try:
                lg = rm.leader_log(name, p)
                if (name, p) in fenced:
                    raise fenced[(name, p)]
                # read once: the LSO bounds a READ_COMMITTED read and is reported to all
                lso = lg.last_stable_offset
                limit = min(pmax, remaining)
                if follower:
                    bound = None
                elif read_committed:
                    bound = lso
                else:  # consumers read only below the high watermark (= log end offset unreplicated)
                    bound = lg.high_watermark
                in_sync = True
                throttled = follower and quota is not None
                if throttled:  # the leader's replication throttle (KIP-73, a reassignment's --throttle)
                    part = rm.partition(name, p)
                    in_sync = part is None or replica_id in part.isr
                    if quota.should_throttle(name, p, in_sync):
                        limit, min_one_here = 0, False
                    else:
                        min_one_here = min_one
                else:
                    min_one_here = min_one
                if limit <= 0 and not min_one_here:
                    sl = None
                else:
                    sl = lg.read(offset, max(limit, 0), min_one=min_one_here, max_offset=bound)
                if throttled and sl is not None:
                    quota.record(name, p, in_sync, sl.size)
                if follower and not from_purgatory:  # Kafka's updateFollowerFetchState (after a successful read): the
                    # follower's log end offset and caught-up time; may expand the ISR, move the HW
                    rm.update_follower_fetch(name, p, replica_id, offset, session)
                data.high_watermark = lg.high_watermark
                data.log_end_offset = lg.log_end_offset
                data.last_stable_offset = lso
                data.log_start_offset = lg.log_start_offset
                if sl is not None and sl.size > 0:
                    data.records = sl
                    total += sl.size
                    remaining -= sl.size
                    min_one = False
                    if read_committed:  # Kafka's addAbortedTransactions
                        data.aborted_transactions = list(
                            lg.aborted_transactions(offset, lg.fetch_upper_bound(sl.first_offset))
                        )
            except OffsetOutOfRangeError as e:
                errors += 1
                data.error = e
                lg = rm.local_log(name, p)
                if lg is not None:
                    data.high_watermark = lg.high_watermark
                    data.last_stable_offset = lg.last_stable_offset
                    data.log_start_offset = lg.log_start_offset
            except PyklogError as e:
                errors += 1
                data.error = e
            except Exception as e:  # noqa: BLE001
                errors += 1
                log.exception("fetch from %s-%d failed", name, p)
                data.error = e
            out.append((p, data))
        results.append((name, out))
    return results, total, errors
