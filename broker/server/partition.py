"""One hosted partition: Kafka's ``cluster/Partition`` (its leader/follower state, ISR, high
watermark and lock) and ``Replica`` (the leader's view of a follower).

:class:`Partition` is made by the :class:`~pyklog.broker.server.replica_manager.ReplicaManager`,
which decides its role from the registry (``become_leader`` / ``become_follower`` call
:meth:`Partition.make_leader` / :meth:`Partition.make_follower`), schedules the periodic ISR check
and makes the ZooKeeper ISR writes (the ``alter_isr`` callback given to the ISR methods).  The
partition owns what is decided under its lock:

* leader: the follower fetch states (:meth:`Partition.update_follower_fetch_state`), the ISR
  expand / shrink decisions (:meth:`Partition.maybe_expand_isr`, :meth:`Partition.maybe_shrink_isr`),
  the high watermark computed from the ISR (:meth:`Partition.maybe_increment_high_watermark`), the
  ``min.insync.replicas`` check (:meth:`Partition.check_enough_replicas`) and the acks=all appends
  (:meth:`Partition.append_records_to_leader`, :meth:`Partition.append_control_marker_to_leader`:
  the ISR checked and the append made with no ISR change in between);
* follower: the appends of the leader's batches and truncations, refused once the partition is no
  longer followed at the fetcher's epoch (:meth:`Partition.append_records_to_follower`,
  :meth:`Partition.run_as_follower`).

Locking rule: ``Partition.lock`` (re-entrant) guards role, leader epoch, ISR, ZooKeeper version and
follower states; it is taken after the replica manager's ``_sync_lock`` when both are held, and the
only callback run under it is the replica manager's ZooKeeper ISR write (``alter_isr``), which
never calls back into the partition or the replica manager.  The log guards its own data (appends under the partition lock are what
make an acks=all ISR check and its append one step).
"""

from __future__ import annotations

import logging
import threading

from pyklog.broker.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasAfterAppendError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)

log = logging.getLogger(__name__)


class FollowerState:
    """The leader's view of one follower replica (Kafka's ``Replica``): its log end offset as of its
    last Fetch (-1: unknown since this broker became leader), when it was last caught up, and the
    leader's log end offset / time at its previous Fetch.  Guarded by the partition's lock."""

    __slots__ = (
        "broker_id",
        "log_end_offset",
        "last_caught_up_ms",
        "last_fetch_leader_leo",
        "last_fetch_ms",
        "session",
    )

    def __init__(self, broker_id: int, last_caught_up_ms: int):
        self.broker_id = broker_id
        #: the fetch session of its last Fetch of this partition (None: sessionless); while the
        #: partition is quiet in it (no append since), each Fetch of the session is one of this
        #: partition too, without naming or reading it
        self.session = None
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

    # ------------------------------------------------------------------ role changes

    def make_leader(self, local_broker_id: int, leader_epoch: int, isr, zk_version: int | None, now_ms: int) -> None:
        """Kafka's ``makeLeader`` (the replica manager decides, under its ``_sync_lock``): lead at
        ``leader_epoch`` with ``isr`` (``local_broker_id`` always in it) and the state znode's
        ``zk_version`` (None: unknown, read before the first ISR write).  The epoch cache gets
        (epoch, log end offset); follower states restart, ISR members counting as caught up at
        ``now_ms``.  Takes the lock."""
        with self.lock:
            self.is_leader = True
            self.leader = local_broker_id
            self.leader_epoch = leader_epoch
            self.isr = frozenset(isr) | {local_broker_id}
            self.zk_version = -1 if zk_version is None else zk_version
            lg = self.log
            lg.replicated = self.replicated  # one replica: the high watermark is the log end offset
            self.leader_epoch_start_offset = lg.log_end_offset
            lg.assign_epoch_start_offset(leader_epoch, lg.log_end_offset)
            self.followers = {
                r: FollowerState(r, now_ms if r in self.isr else 0) for r in self.replicas if r != local_broker_id
            }

    def make_follower(self, leader: int, leader_epoch: int) -> None:
        """Kafka's ``makeFollower``: follow ``leader`` at ``leader_epoch``; no ISR, no follower
        states.  Takes the lock."""
        with self.lock:
            self.is_leader = False
            self.leader = leader
            self.leader_epoch = leader_epoch
            self.isr = frozenset()
            self.followers = {}
            if self.replicated:
                self.log.replicated = True

    def update_assigned_replicas(self, local_broker_id: int) -> None:
        """As leader: track exactly the assigned replicas (a reassignment changed :attr:`replicas`
        without an epoch change); a new follower starts not caught up.  Takes the lock."""
        with self.lock:
            want = {r for r in self.replicas if r != local_broker_id}
            if want == set(self.followers):
                return
            self.followers = {r: self.followers.get(r) or FollowerState(r, 0) for r in want}
            if self.replicated and not self.log.replicated:
                self.log.replicated = True

    # ------------------------------------------------------------------ leader: followers and ISR

    def update_follower_fetch_state(self, replica_id: int, fetch_offset: int, now_ms: int, session=None) -> bool:
        """Kafka's ``updateFollowerFetchState``: a follower's Fetch at ``fetch_offset`` (its log end
        offset) reached this leader, in fetch ``session`` (None: sessionless).  False if
        ``replica_id`` is not an assigned follower (an old replica, a tool: not tracked).  Takes the
        lock; request handler threads."""
        with self.lock:
            fs = self.followers.get(replica_id)
            if fs is None:
                return False
            fs.update(fetch_offset, self.log.log_end_offset, now_ms)
            fs.session = session
            return True

    def _last_caught_up_ms(self, fs: FollowerState) -> int:
        """When the follower was last caught up: its own fetches of the partition, or the last
        Fetch of its session while it still holds the partition and is at the log end offset (an
        incremental fetch does not read a partition without changes)."""
        t = fs.last_caught_up_ms
        s = fs.session
        if s is not None and fs.log_end_offset >= self.log.log_end_offset and s.follows((self.topic, self.partition)):
            t = max(t, s.last_used_ms)
        return t

    def maybe_expand_isr(self, replica_id: int, alter_isr) -> None:
        """Kafka's ``maybeExpandIsr``: a follower outside the ISR whose log end offset reached the
        high watermark and the current epoch's start offset joins it, through
        ``alter_isr(partition, new_isr, "expand")`` (the replica manager's ZooKeeper write, which
        adopts the ISR if written) called under the lock.  Request handler threads."""
        if replica_id in self.isr:
            return
        with self.lock:
            fs = self.followers.get(replica_id)
            if (
                not self.is_leader
                or fs is None
                or replica_id in self.isr
                or fs.log_end_offset < self.log.high_watermark
                or fs.log_end_offset < self.leader_epoch_start_offset
            ):
                return
            alter_isr(self, self.isr | {replica_id}, "expand")

    def out_of_sync_replicas(self, local_broker_id: int, now_ms: int, max_lag_ms: int) -> set:
        """Kafka's ``getOutOfSyncReplicas``: the ISR members (the leader aside) not caught up within
        ``max_lag_ms`` (or never seen).  Under the lock (the caller's)."""
        return {
            r
            for r in self.isr
            if r != local_broker_id
            and (self.followers.get(r) is None or now_ms - self._last_caught_up_ms(self.followers[r]) > max_lag_ms)
        }

    def maybe_shrink_isr(self, local_broker_id: int, now_ms: int, max_lag_ms: int, alter_isr) -> set | None:
        """Kafka's ``maybeShrinkIsr``: drop the out-of-sync followers from the ISR through
        ``alter_isr(partition, new_isr, "shrink")`` under the lock.  Returns the replicas it meant to
        drop (empty: none), None if this broker no longer leads.  Takes the lock; the replica
        manager's ISR task."""
        with self.lock:
            if not self.is_leader:
                return None
            out = self.out_of_sync_replicas(local_broker_id, now_ms, max_lag_ms)
            if out:
                log.info(
                    "%s-%d: shrinking the ISR from %s to %s: out of sync %s (lag time %d ms)",
                    self.topic,
                    self.partition,
                    sorted(self.isr),
                    sorted(self.isr - out),
                    sorted(out),
                    max_lag_ms,
                )
                alter_isr(self, self.isr - out, "shrink")
            return out

    # ------------------------------------------------------------------ leader: appends, high watermark

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

    def check_enough_replicas_reach_offset(
        self, local_broker_id: int, required_offset: int, leader_epoch: int, min_insync_replicas
    ):
        """Kafka's ``checkEnoughReplicasReachOffset`` for an acks=all append that needs the high
        watermark at ``required_offset`` (its last offset + 1): None (keep waiting), 0 (done), or
        the PyklogError to answer (no longer the leader at ``leader_epoch``; the ISR below
        ``min_insync_replicas()`` when the high watermark got there).  Lock-free reads; any thread
        (the purgatories' checks)."""
        if not self.is_leader or self.leader_epoch != leader_epoch:
            return NotLeaderOrFollowerError(
                f"broker {local_broker_id} is no longer the leader of {self.topic}-{self.partition} "
                f"at epoch {leader_epoch}"
            )
        if self.log.high_watermark >= required_offset:
            if self.replicated and len(self.isr) < min_insync_replicas():
                return NotEnoughReplicasAfterAppendError(
                    f"{self.topic}-{self.partition}: the record is replicated to the ISR {sorted(self.isr)} only, "
                    f"fewer than min.insync.replicas {min_insync_replicas()}"
                )
            return 0
        return None

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

    # ------------------------------------------------------------------ follower side (fetcher threads)

    def append_records_to_follower(
        self, data, leader_high_watermark: int, leader_epoch: int, leader_log_start_offset: int = -1
    ):
        """Kafka's ``appendRecordsToFollowerOrFutureReplica``: a fetcher thread's append of the
        leader's batches (offsets kept), then the follower's high watermark = min(leader's, own log
        end offset) and its log start offset moves up to the leader's (Kafka's
        ``maybeIncrementLogStartOffset``).  Under the lock: a role change (``make_leader`` assigns its
        epoch at the log end offset) never interleaves with an append of the old leader's batches.
        NotLeaderOrFollowerError if no longer followed at ``leader_epoch``.  Returns the AppendInfo
        (None: nothing appended)."""
        with self.lock:
            self._check_followed_at(leader_epoch)
            lg = self.log
            info = None
            if data is not None and len(data) > 0:
                info = lg.append_as_follower(data)
            hw = min(leader_high_watermark, lg.log_end_offset)
            if hw > lg.high_watermark:
                lg.update_high_watermark(hw)
            start = min(leader_log_start_offset, lg.high_watermark)
            if start > lg.log_start_offset:
                lg.increment_log_start_offset(start)
        return info

    def run_as_follower(self, leader_epoch: int, fn):
        """``fn(log)`` (a fetcher thread's truncation) under the lock if still followed at
        ``leader_epoch``; else NotLeaderOrFollowerError and nothing runs (a truncation must never
        cut a log that has just become the leader's)."""
        with self.lock:
            self._check_followed_at(leader_epoch)
            return fn(self.log)

    def _check_followed_at(self, leader_epoch: int) -> None:
        if self.is_leader or self.leader_epoch != leader_epoch:
            raise NotLeaderOrFollowerError(
                f"{self.topic}-{self.partition} is no longer followed at epoch {leader_epoch}"
            )

    def __repr__(self) -> str:
        role = "leader" if self.is_leader else f"follower of {self.leader}"
        return f"Partition({self.topic}-{self.partition}, {role}, epoch {self.leader_epoch}, isr {sorted(self.isr)})"


__all__ = ["FollowerState", "Partition"]
