"""One hosted partition: Kafka's ``cluster/Partition`` (its leader/follower state, ISR, high
watermark and lock) and ``Replica`` (the leader's view of a follower).

:class:`Partition` is made and given its role by the
:class:`~pyklog.broker.server.replica_manager.ReplicaManager` (``become_leader`` /
``become_follower``, ISR changes written to ZooKeeper there).  The partition itself owns what is
decided under its lock: the acks=all appends of a leader (:meth:`Partition.append_records_to_leader`,
:meth:`Partition.append_control_marker_to_leader`: the ISR checked against ``min.insync.replicas``
and the append made with no ISR change in between),
the high watermark a leader computes from its ISR (:meth:`Partition.maybe_increment_high_watermark`)
and the ``min.insync.replicas`` check (:meth:`Partition.check_enough_replicas`).

Locking rule: ``Partition.lock`` (re-entrant) guards role, leader epoch, ISR, ZooKeeper version and
follower states; it is taken after the replica manager's ``_sync_lock`` when both are held, and no
callback runs under it.  The log guards its own data (appends under the partition lock are what
make an acks=all ISR check and its append one step).
"""

from __future__ import annotations

import threading

from pyklog.broker.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)


class FollowerState:
    """The leader's view of one follower replica (Kafka's ``Replica``): its log end offset as of its
    last Fetch (-1: unknown since this broker became leader), when it was last caught up, and the
    leader's log end offset / time at its previous Fetch.  Guarded by the partition's lock."""

    __slots__ = ("broker_id", "log_end_offset", "last_caught_up_ms", "last_fetch_leader_leo", "last_fetch_ms")

    def __init__(self, broker_id: int, last_caught_up_ms: int):
        self.broker_id = broker_id
        self.log_end_offset = -1
        self.last_caught_up_ms = last_caught_up_ms
        self.last_fetch_leader_leo = -1
        self.last_fetch_ms = 0

    def update(self, fetch_offset: int, leader_leo: int, now_ms: int) -> None:
        """Kafka's ``Replica.updateFetchState``: caught up when the fetch reaches the leader's log end
        offset now, or the one the leader had at the follower's previous fetch."""
        if fetch_offset >= leader_leo:
            self.last_caught_up_ms = max(self.last_caught_up_ms, now_ms)
        elif fetch_offset >= self.last_fetch_leader_leo >= 0:
            self.last_caught_up_ms = max(self.last_caught_up_ms, self.last_fetch_ms)
        self.log_end_offset = fetch_offset
        self.last_fetch_leader_leo = leader_leo
        self.last_fetch_ms = now_ms


class Partition:
    """One hosted partition (Kafka's ``Partition``): its local log, replicas, current leader and leader
    epoch, and as leader its ISR, state-znode version and followers.  ``lock`` guards all of it."""

    def __init__(self, topic: str, partition: int, log_, replicas):
        self.topic = topic
        self.partition = partition
        self.log = log_
        self.replicas: tuple = tuple(replicas)
        self.leader = -1
        self.leader_epoch = -1
        self.is_leader = False
        self.isr: frozenset = frozenset()
        self.zk_version = -1
        self.leader_epoch_start_offset = 0
        self.followers: dict[int, FollowerState] = {}
        self.lock = threading.RLock()

    @property
    def replicated(self) -> bool:
        return len(self.replicas) > 1

    def check_current_leader_epoch(self, asked: int):
        """Kafka's ``checkCurrentLeaderEpoch`` for a fetcher's ``current_leader_epoch`` (KIP-320):
        None if it is this partition's leader epoch, else the error to answer -- older:
        FENCED_LEADER_EPOCH (the fetcher missed a leader change), newer: UNKNOWN_LEADER_EPOCH (this
        broker has not seen it yet).  A lock-free read of the epoch."""
        current = self.leader_epoch
        if asked < current:
            return FencedLeaderEpochError(
                f"{self.topic}-{self.partition}: the follower's leader epoch {asked} is older than {current}"
            )
        if asked > current:
            return UnknownLeaderEpochError(
                f"{self.topic}-{self.partition}: the follower's leader epoch {asked} is newer than {current}"
            )
        return None

    def check_enough_replicas(self, min_insync_replicas: int) -> None:
        """Before an acks=all append (Kafka's ``Partition.appendRecordsToLeader``): raise
        NotEnoughReplicasError when the ISR is smaller than ``min_insync_replicas``.  A partition
        with a single replica passes (its ISR is itself; Kafka refuses min.insync.replicas > 1 there too)."""
        if not self.replicated:
            return
        isr = self.isr
        if len(isr) < min_insync_replicas:
            raise NotEnoughReplicasError(
                f"the ISR of {self.topic}-{self.partition} is {sorted(isr)}: {len(isr)} in-sync replica(s), "
                f"min.insync.replicas is {min_insync_replicas}"
            )

    def append_records_to_leader(self, records, leader_epoch: int, min_insync_replicas=None):
        """Kafka's ``appendRecordsToLeader``: append ``records`` to the log at ``leader_epoch``;
        returns the log's AppendInfo.  With ``min_insync_replicas`` (a callable giving it: an acks=all
        append of a replicated partition) the ISR check (NOT_ENOUGH_REPLICAS, nothing appended) and
        the append run under the partition lock, as Kafka's under ``leaderIsrUpdateLock``: an ISR
        change in flight (its ZooKeeper write) finishes first, and none happens in between.
        Request handler threads."""
        if min_insync_replicas is not None and self.replicated:
            with self.lock:
                self.check_enough_replicas(min_insync_replicas())
                return self.log.append(records, leader_epoch=leader_epoch)
        return self.log.append(records, leader_epoch=leader_epoch)

    def append_control_marker_to_leader(
        self,
        local_broker_id: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
        min_insync_replicas,
    ):
        """A transaction marker appended as leader with acks=all (Kafka's WriteTxnMarkers appends
        with requiredAcks -1): under the lock, still the leader (else NOT_LEADER_OR_FOLLOWER), the ISR
        checked against ``min_insync_replicas()``, the marker appended at the current leader epoch.
        Returns ``(AppendInfo, leader epoch)``.  Request handler threads."""
        with self.lock:
            if not self.is_leader:
                raise NotLeaderOrFollowerError(
                    f"broker {local_broker_id} no longer leads {self.topic}-{self.partition}"
                )
            self.check_enough_replicas(min_insync_replicas())
            epoch = self.leader_epoch
            info = self.log.append_control_marker(
                producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch=epoch
            )
        return info, epoch

    def maybe_increment_high_watermark(self, local_broker_id: int) -> bool:
        """Kafka's ``maybeIncrementLeaderHW``: as leader, HW = min log end offset over the ISR
        (``local_broker_id``, the leader, included); a follower in the ISR whose offset is unknown
        holds it.  True if the high watermark moved, or may have (an unreplicated log: its high
        watermark is its log end offset).  Takes the lock; any thread."""
        lg = self.log
        if not self.is_leader:
            return False
        if not self.replicated or not lg.replicated:
            return True  # high watermark = log end offset: waiting operations may complete
        with self.lock:
            if not self.is_leader:
                return False
            new_hw = lg.log_end_offset
            for r in self.isr:
                if r == local_broker_id:
                    continue
                fs = self.followers.get(r)
                if fs is None or fs.log_end_offset < 0:
                    new_hw = min(new_hw, lg.high_watermark)
                else:
                    new_hw = min(new_hw, fs.log_end_offset)
            return bool(lg.update_high_watermark(new_hw)) if new_hw > lg.high_watermark else False

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader}"
        return f"Partition({self.topic}-{self.partition}, {role}, epoch {self.leader_epoch}, isr {sorted(self.isr)})"


__all__ = ["FollowerState", "Partition"]
