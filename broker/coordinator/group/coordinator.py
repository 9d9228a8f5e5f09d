"""The group coordinator: Kafka's classic consumer group membership protocol on the broker.

This is what lets stock clients' ``subscribe()``-style consumer groups run against pyklog
(confluent-kafka ``Consumer({"group.id": ...}).subscribe([...])``, kafka-python's
``KafkaConsumer(topic, group_id=...)``, ``kcat -G group topic``): the broker keeps the group's
members, runs rebalances and hands the leader's partition assignment to every member.  The
assignment itself is computed by the group leader (a client), as in Kafka.

Which broker coordinates a group: the leader of the group's ``__consumer_offsets`` partition,
the same broker :class:`broker.coordinator.offsets.OffsetManager` picks for its offsets.  Requests for a
group coordinated elsewhere get NOT_COORDINATOR, while that partition is loading
COORDINATOR_LOAD_IN_PROGRESS.

Group states and transitions: :mod:`pyklog.broker.coordinator.group.state` (Kafka's ``GroupState``,
each state with its valid previous states; every move is checked); a group's and its members'
fields: :mod:`pyklog.broker.coordinator.group.metadata`.

* **JoinGroup** (v0-5).  An empty member id gets a new one (``<client_id>-<uuid4>``); from v4 the
  first join is answered MEMBER_ID_REQUIRED with that id and the member joins again with it
  (KIP-394).  The coordinator waits until every known member has rejoined, at most the group's
  rebalance timeout (the largest of its members'); members that did not rejoin are removed.  The
  first rebalance of an empty group waits ``group.initial.rebalance.delay.ms`` (Kafka's default
  3000) and again for as long as new members keep arriving, up to the rebalance timeout
  (Kafka's ``InitialDelayedJoin``).  The protocol (assignor) is the one all members support that
  most members list first; the leader is the first member that joined (the next one when it leaves).
  Every member gets the generation, protocol, leader and its member id; only the leader gets the
  member list with each member's metadata.  A follower that rejoins a Stable or
  CompletingRebalance group with unchanged metadata gets the current generation without a rebalance.
* **SyncGroup** (v0-3).  The leader's assignments are written to ``__consumer_offsets`` (the group
  metadata record, below); once replicated every member's waiting SyncGroup is answered with its
  own assignment and the group becomes Stable.  Followers that sync first wait.
* **Heartbeat** (v0-3).  REBALANCE_IN_PROGRESS while a rebalance is being prepared,
  UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION for a stale member or generation.  A member that sends
  nothing (heartbeat, join, sync, offset commit) for its session timeout is removed and the group
  rebalances.  A member waiting in JoinGroup or SyncGroup stays alive (except a new member waiting
  in its first JoinGroup more than 5 minutes, as Kafka).
* **LeaveGroup** (v0-2 one member, v3 a batch): the members are removed at once and the group rebalances.
* **ListGroups** (v0-2) / **DescribeGroups** (v0-4) for tools; groups that only have committed
  offsets are listed with an empty protocol type and described as Empty; ZooKeeper consumer groups
  (``/consumers/[group]``) are listed, protocol type "", by the broker leading their offsets partition.
* **Offset expiry** (:meth:`GroupCoordinator.cleanup_group_metadata`, Kafka's
  ``offsets.retention.minutes`` / ``offsets.retention.check.interval.ms``, KIP-211): offsets of a
  group without members expire after the retention (counted from the later of the commit and the
  moment the group became empty), with tombstones in ``__consumer_offsets``; the group is then
  removed.  Abandoned ZooKeeper groups are deleted by the controller.
* **OffsetCommit** validation (:meth:`GroupCoordinator.validate_offset_commit`): a commit with a
  generation >= 0 must come from a current member of the current generation
  (UNKNOWN_MEMBER_ID, then ILLEGAL_GENERATION, then REBALANCE_IN_PROGRESS while CompletingRebalance:
  Kafka's order of checks, member before generation before state); a
  commit with generation -1 (manual assignment, "simple" consumers) is accepted while the group
  has no members, as in Kafka.
* **Static membership** (``group.instance.id``, KIP-345, JoinGroup v5 / SyncGroup, Heartbeat,
  LeaveGroup v3 / OffsetCommit v7): a static member joins without the MEMBER_ID_REQUIRED round trip
  (member id ``<instance id>-<uuid4>``); when its instance rejoins with an empty member id (a restarted
  consumer) the old member id is fenced (FENCED_INSTANCE_ID for its requests) and a Stable group keeps
  its assignment without a rebalance; a static member that does not rejoin a rebalance stays (its
  session timeout removes it); LeaveGroup v3 may name a member by instance id.

**Group metadata in ``__consumer_offsets``** (Kafka's ``GroupMetadataManager.storeGroup``): at the
end of every rebalance (the leader's SyncGroup) the group's protocol type, generation, protocol,
leader and members (ids, static instance ids, client ids and hosts, timeouts, subscriptions and the
new assignment) are appended to the group's offsets partition as a group metadata record
(:mod:`~pyklog.broker.coordinator.group.metadata_record`) with acks=all, and only once the ISR has
it does the group become Stable and its members get their assignments (an error: the waiting
SyncGroups get it -- COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR, ... as Kafka maps a failed group
write -- and the group rebalances again).  A group that becomes Empty writes a record without
members; a static member replacing its old member id in a Stable group writes the new id before
its JoinGroup is answered; a deleted or expired group gets a tombstone.  When a broker becomes the
coordinator of an offsets partition it loads these records with the offsets
(:meth:`GroupCoordinator.groups_loaded`): Stable groups come back Stable with their generation,
members and assignments, each member with a fresh session deadline, so members of a group whose
coordinator moved keep heartbeating and committing with their member ids and no rebalance; when
it stops being the coordinator it forgets them (:meth:`GroupCoordinator.groups_unloaded`).  A
rebalance in progress when the coordinator moves is not written: the group comes back as its last
Stable (or Empty) generation and the members rejoin.  Empty groups stay in memory (a few hundred
bytes each).

Delayed answers never hold a request handler thread: a JoinGroup or SyncGroup that must wait
stores the caller's ``respond`` callback in the member and returns; the callback is called later
from whichever thread completes the rebalance (another request handler, or the coordinator's
scheduler thread on a timeout).  The network layer allows ``Request.send`` from any thread.

Where each part is written (one job per module; :class:`GroupCoordinator` is the one public class):

* this module: :class:`GroupCoordinator`'s construction and shutdown, the rebalance protocol
  (JoinGroup, SyncGroup, static members rejoining, the join and initial-delay timers) and the
  OffsetCommit / TxnOffsetCommit validation;
* :mod:`pyklog.broker.coordinator.group.sessions`: heartbeats, session timers, member removal and
  LeaveGroup (its base class :class:`~pyklog.broker.coordinator.group.sessions.MemberSessions`);
* :mod:`pyklog.broker.coordinator.group.admin`: offset expiry and the administration APIs
  (ListGroups, DescribeGroups, DeleteGroups, OffsetDelete; its base class
  :class:`~pyklog.broker.coordinator.group.admin.GroupAdministration`);
* :mod:`pyklog.broker.coordinator.group.requests`: request bodies in, method calls, response bodies
  out (:meth:`GroupCoordinator.handle`, :func:`~pyklog.broker.coordinator.group.requests.error_response`).

Thread-safety: :class:`GroupCoordinator` is thread-safe.  Each group has its own lock; all timers
(session expiry, rebalance timeout, initial delay) run on one
:class:`pyklog.broker.common.scheduler.Scheduler` thread (Kafka's DelayedHeartbeat/DelayedJoin timers); ``respond``
callbacks are always called outside the group locks.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from typing import NamedTuple

from pyklog.broker.common.scheduler import ScheduledTask, Scheduler
from pyklog.broker.coordinator.group.admin import GroupAdministration
from pyklog.broker.coordinator.group.metadata import (
    GroupMetadata,
    MemberMetadata,
    Respond,
    fire_responses,
    join_result,
    sync_result,
)
from pyklog.broker.coordinator.group.metadata_record import GroupMetadataValue, encode_group_metadata_value
from pyklog.broker.coordinator.group.requests import GROUP_API_KEYS, error_response, handle_request
from pyklog.broker.coordinator.group.sessions import MemberSessions
from pyklog.broker.coordinator.group.state import GroupState
from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    GroupMaxSizeReachedError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    InvalidGroupIdError,
    InvalidSessionTimeoutError,
    MemberIdRequiredError,
    NotCoordinatorError,
    PyklogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)

NONE = 0
#: Kafka's GroupCoordinator.NewMemberJoinTimeoutMs: a new member waiting in its first JoinGroup
#: longer than this (its client probably went away) is dropped.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000

# Kafka's defaults of the broker settings this module reads.
DEFAULT_INITIAL_REBALANCE_DELAY_MS = 3000
DEFAULT_MIN_SESSION_TIMEOUT_MS = 6000
DEFAULT_MAX_SESSION_TIMEOUT_MS = 1_800_000
DEFAULT_MAX_SIZE = 2**31 - 1

#: Kafka's offsets.retention.minutes (7 days) and offsets.retention.check.interval.ms (10 minutes)
DEFAULT_OFFSETS_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS = 600_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class JoinArgs(NamedTuple):
    """One JoinGroup's member fields, as the join paths pass them on (the first six are
    :class:`MemberMetadata`'s constructor arguments after the ids)."""

    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    respond: Respond
    group_instance_id: str | None


# ---------------------------------------------------------------------------- coordinator


class GroupCoordinator(MemberSessions, GroupAdministration):
    """Kafka's classic group membership protocol (see the module docstring).

    ``offset_manager`` (a :class:`broker.coordinator.offsets.OffsetManager`) decides which groups this
    broker coordinates and supplies the groups that only have committed offsets (ListGroups,
    DescribeGroups); ``None`` makes this coordinator responsible for every group (standalone use,
    unit tests).  ``clock`` returns monotonic seconds.

    Thread-safe.  :meth:`handle` is the entry point for request handlers; the per-API methods
    (:meth:`join_group`, :meth:`sync_group`, :meth:`heartbeat`, :meth:`leave_group`, ...) can be
    called directly.  :meth:`shutdown` answers every waiting request with NOT_COORDINATOR.
    """

    def __init__(
        self,
        offset_manager=None,
        *,
        initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS,
        min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS,
        max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS,
        max_size: int = DEFAULT_MAX_SIZE,
        broker_id: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
        offsets_retention_check_interval_ms: int = DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS,
    ):
        if offsets_retention_ms < 1 or offsets_retention_check_interval_ms < 1:
            raise ValueError(
                "offsets.retention.minutes and offsets.retention.check.interval.ms must be positive, "
                f"got {offsets_retention_ms} ms and {offsets_retention_check_interval_ms} ms"
            )
        if initial_rebalance_delay_ms < 0:
            raise ValueError(f"group.initial.rebalance.delay.ms must be >= 0, got {initial_rebalance_delay_ms}")
        if not 0 < min_session_timeout_ms <= max_session_timeout_ms:
            raise ValueError(
                "group.min.session.timeout.ms must be positive and <= group.max.session.timeout.ms, "
                f"got {min_session_timeout_ms} and {max_session_timeout_ms}"
            )
        if max_size < 1:
            raise ValueError(f"group.max.size must be >= 1, got {max_size}")
        self.offsets = offset_manager
        self.initial_rebalance_delay_ms = int(initial_rebalance_delay_ms)
        self.min_session_timeout_ms = int(min_session_timeout_ms)
        self.max_session_timeout_ms = int(max_session_timeout_ms)
        self.max_size = int(max_size)
        self._clock = clock
        self._lock = threading.Lock()
        self._groups: dict[str, GroupMetadata] = {}
        self._running = True
        name = "pyklog-group-coordinator" + (f"-{broker_id}" if broker_id is not None else "")
        # Kafka's heartbeat / join purgatories as timers on one Scheduler thread (its clock is ours)
        self._scheduler = Scheduler(name, clock=clock)
        self.broker_id = broker_id
        self.offsets_retention_ms = int(offsets_retention_ms)
        self.offsets_retention_check_interval_ms = int(offsets_retention_check_interval_ms)
        if offset_manager is not None:
            # the group metadata records of each offsets partition this broker loads come here
            offset_manager.add_group_listener(self)
            # Kafka's GroupMetadataManager "delete-expired-group-metadata" task
            self._scheduler.schedule_periodic(
                "delete-expired-group-metadata", self.offsets_retention_check_interval_ms / 1000.0, self._cleanup_task
            )

    @classmethod
    def from_config(cls, offset_manager, config) -> GroupCoordinator:
        """Build from a :class:`broker.server.config.ServerConfig` (Kafka's setting names, read from
        ``config.raw``): ``group.initial.rebalance.delay.ms`` (3000), ``group.min.session.timeout.ms``
        (6000), ``group.max.session.timeout.ms`` (1800000), ``group.max.size`` (2147483647),
        ``offsets.retention.minutes`` (10080, 7 days), ``offsets.retention.check.interval.ms`` (600000)."""
        raw = config.raw

        def setting(key: str, default: int) -> int:
            value = raw.get(key)
            if value is None or str(value).strip() == "":
                return default
            try:
                return int(str(value).strip())
            except ValueError:
                from pyklog.broker.errors import ConfigError

                raise ConfigError(f"{key}: expected an integer, read {value!r}") from None

        return cls(
            offset_manager,
            initial_rebalance_delay_ms=setting("group.initial.rebalance.delay.ms", DEFAULT_INITIAL_REBALANCE_DELAY_MS),
            min_session_timeout_ms=setting("group.min.session.timeout.ms", DEFAULT_MIN_SESSION_TIMEOUT_MS),
            max_session_timeout_ms=setting("group.max.session.timeout.ms", DEFAULT_MAX_SESSION_TIMEOUT_MS),
            max_size=setting("group.max.size", DEFAULT_MAX_SIZE),
            broker_id=config.broker_id,
            offsets_retention_ms=setting("offsets.retention.minutes", DEFAULT_OFFSETS_RETENTION_MS // 60_000) * 60_000,
            offsets_retention_check_interval_ms=setting(
                "offsets.retention.check.interval.ms", DEFAULT_OFFSETS_RETENTION_CHECK_INTERVAL_MS
            ),
        )

    def shutdown(self) -> None:
        """Stop the timers; every waiting JoinGroup/SyncGroup is answered NOT_COORDINATOR (the
        clients look the coordinator up again)."""
        out: list = []
        with self._lock:
            if not self._running:
                return
            self._running = False
            groups = list(self._groups.values())
        for g in groups:
            with g.lock:
                for m in g.members.values():
                    m.answer_waiting(NotCoordinatorError.code, out)
        self._scheduler.shutdown(wait=True, timeout_s=5)
        fire_responses(out)

    def _schedule_at(self, when: float, fn: Callable[[ScheduledTask], None]) -> ScheduledTask:
        """Run ``fn(task)`` on the scheduler thread at ``when`` (``clock`` seconds); ``task`` is the
        returned handle, so a callback can check it is still the group's or member's current timer."""
        return self._scheduler.schedule_at(when, self._run_timer, fn, name="group-coordinator-timer")

    def _run_timer(self, fn: Callable[[ScheduledTask], None]) -> None:
        fn(self._scheduler.current_task())

    # ------------------------------------------------------------------ group metadata in __consumer_offsets

    def groups_loaded(self, partition: int, groups: dict[str, GroupMetadataValue]) -> None:
        """The offset manager loaded ``partition``: bring back its groups from their metadata records
        (Kafka's ``GroupCoordinator.onGroupLoaded``): Stable (or Empty) with their generation,
        members and assignments, each member's session deadline starting now.  A group this
        coordinator already holds (the partition was reloaded at a new leader epoch while this
        broker stayed its leader) keeps its live state, as in Kafka.  Runs on the offsets loader
        thread under the offset manager's locks, before the partition serves requests: takes only
        the coordinator's table lock and the scheduler's (the new groups' locks are nobody else's)."""
        if not groups:
            return
        now_ms = _now_ms()
        now = self._clock()
        with self._lock:
            if not self._running:
                return
            fresh = [gid for gid in groups if gid not in self._groups]
            for gid in fresh:
                g = GroupMetadata.from_record(gid, groups[gid], now_ms)
                for m in g.members.values():
                    self._set_deadline(g, m, now + m.session_timeout_ms / 1000.0)
                self._groups[gid] = g
        for gid in fresh:
            v = groups[gid]
            log.info(
                "loaded group %s of partition %d: %s, generation %d, protocol %s, %d member(s)",
                gid,
                partition,
                "Stable" if v.members else "Empty",
                v.generation,
                v.protocol,
                len(v.members),
            )

    def groups_unloaded(self, partition: int) -> None:
        """This broker no longer coordinates ``partition``: forget its groups (Kafka's
        ``onResignation`` / ``removeGroupsForPartition``); their waiting JoinGroups and SyncGroups are
        answered NOT_COORDINATOR and their timers stop.  Runs on a ZooKeeper listener thread."""
        if self.offsets is None:
            return
        with self._lock:
            gone = [g for gid, g in self._groups.items() if self.offsets.partition_for(gid) == partition]
            for g in gone:
                del self._groups[g.group_id]
        out: list = []
        for g in gone:
            with g.lock:
                for m in g.members.values():
                    m.answer_waiting(NotCoordinatorError.code, out)
                    if m.timer is not None:
                        m.timer.cancel()
                        m.timer = None
                for task in g.pending.values():
                    task.cancel()
                g.pending.clear()
                if g.join_timer is not None:
                    g.join_timer.cancel()
                    g.join_timer = None
                g.transition_to(GroupState.DEAD)  # a request holding this object answers COORDINATOR_NOT_AVAILABLE
        if gone:
            log.info("no longer the coordinator of partition %d: forgot %d group(s)", partition, len(gone))
        fire_responses(out)

    def _store_group(self, request: tuple) -> None:
        """Write a group metadata record and call ``on_done(error_code)`` when it is replicated
        (or failed).  ``request`` is ``(group, value, on_done)``; queued in a request's ``out`` list
        under the group's lock and run by :func:`fire_responses` after it is released (the offset
        manager may call ``on_done`` on this very thread, and ``on_done`` takes the group's lock).
        Without an offset manager (standalone, unit tests) ``on_done(0)`` at once."""
        group, value, on_done = request
        if self.offsets is None:
            on_done(NONE)
            return
        with self._lock:
            current = self._groups.get(group.group_id) is group
        if not current:
            on_done(NotCoordinatorError.code)  # the group was forgotten (unloaded) meanwhile
            return
        self.offsets.store_group_async(group.group_id, encode_group_metadata_value(value), on_done)

    def _store_empty_group(self, group: GroupMetadata, out: list) -> None:
        """Under the group's lock, the group just became Empty: queue its record (no members)."""
        generation = group.generation

        def stored(code: int) -> None:
            if code != NONE:
                log.warning(
                    "group %s: writing its metadata (Empty, generation %d) failed with error %d",
                    group.group_id,
                    generation,
                    code,
                )

        out.append((self._store_group, (group, group.to_record(None, _now_ms()), stored)))

    # ------------------------------------------------------------------ request entry point

    def handle(
        self, api_key: int, version: int, body: dict, client_id: str | None, peer: str | None, respond: Respond
    ) -> None:
        """Serve one decoded group request; ``respond(response_body)`` is called now or later
        (from another thread), exactly once.  Never raises: failures are answered with an error.
        The translation from request body to method call and back is
        :func:`pyklog.broker.coordinator.group.requests.handle_request`."""
        handle_request(self, api_key, version, body, client_id, peer, respond)

    # ------------------------------------------------------------------ coordinator checks

    def _check_coordinator(self, group_id: str | None) -> None:
        """Kafka's ``validateGroupStatus``: INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS."""
        if not group_id:
            raise InvalidGroupIdError(f"group id must be a non-empty string, read {group_id!r}")
        if not self._running:
            raise NotCoordinatorError("the group coordinator is shutting down")
        if self.offsets is not None:
            # raises NotCoordinatorError / CoordinatorLoadInProgressError / CoordinatorNotAvailableError
            self.offsets.fetch(group_id, ())

    def _group(self, group_id: str, create: bool) -> GroupMetadata | None:
        with self._lock:
            g = self._groups.get(group_id)
            if g is None and create:
                g = self._groups[group_id] = GroupMetadata(group_id)
            return g

    # ------------------------------------------------------------------ JoinGroup

    def join_group(
        self,
        group_id: str,
        member_id: str,
        *,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        respond: Respond,
        require_known_member_id: bool = False,
        group_instance_id: str | None = None,
    ) -> None:
        """Join (or rejoin) ``group_id``; ``respond`` gets the JoinGroup response body, possibly later."""
        member_id = member_id or ""
        try:
            self._check_coordinator(group_id)
            if not self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms:
                raise InvalidSessionTimeoutError(
                    f"session timeout {session_timeout_ms} ms is outside [{self.min_session_timeout_ms}, "
                    f"{self.max_session_timeout_ms}] (group.min/max.session.timeout.ms)"
                )
        except PyklogError as e:
            respond(join_result(member_id, e.code))
            return
        if rebalance_timeout_ms is None or rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms  # JoinGroup v0 has no rebalance timeout
        protocols = [(str(n), bytes(m or b"")) for n, m in protocols]
        group = self._group(group_id, create=not member_id)
        if group is None:
            respond(join_result(member_id, UnknownMemberIdError.code))
            return
        out: list = []
        with group.lock:
            args = JoinArgs(
                client_id, client_host, session_timeout_ms, rebalance_timeout_ms, protocol_type, protocols, respond,
                group_instance_id,
            )  # fmt: skip
            if group.state == GroupState.DEAD:
                out.append((respond, join_result(member_id, CoordinatorNotAvailableError.code)))
            elif not group.supports(protocol_type, protocols):
                out.append((respond, join_result(member_id, InconsistentGroupProtocolError.code)))
            elif not member_id and group_instance_id is not None and group_instance_id in group.static:
                self._rejoin_static_member(group, args, out)
            elif not member_id:
                # static members need no MEMBER_ID_REQUIRED round trip (their instance id identifies them)
                self._join_new_member(group, require_known_member_id and group_instance_id is None, args, out)
            elif group.fenced(member_id, group_instance_id):
                out.append((respond, join_result(member_id, FencedInstanceIdError.code)))
            else:
                self._join_known_member(group, member_id, args, out)
            if group.state == GroupState.PREPARING_REBALANCE:
                self._try_complete_join(group, out)
        fire_responses(out)

    def _join_new_member(self, group: GroupMetadata, require_known: bool, args: JoinArgs, out: list) -> None:
        respond = args.respond
        if len(group.members) + len(group.pending) >= self.max_size:
            out.append((respond, join_result("", GroupMaxSizeReachedError.code)))
            return
        new_id = f"{args.group_instance_id if args.group_instance_id is not None else args.client_id}-{uuid.uuid4()}"
        if require_known:
            # KIP-394: hand out the id; the member rejoins with it (a pending member until then)
            group.pending[new_id] = self._schedule_at(
                self._clock() + args.session_timeout_ms / 1000.0,
                lambda t, g=group, mid=new_id: self._expire_pending(g, mid, t),
            )
            out.append((respond, join_result(new_id, MemberIdRequiredError.code)))
            return
        self._add_member_and_rebalance(group, new_id, args, out)

    def _join_known_member(self, group: GroupMetadata, member_id: str, args: JoinArgs, out: list) -> None:
        respond = args.respond
        if member_id in group.pending:
            group.pending.pop(member_id).cancel()
            self._add_member_and_rebalance(group, member_id, args, out)
            return
        m = group.members.get(member_id)
        if m is None or group.state == GroupState.EMPTY:
            out.append((respond, join_result(member_id, UnknownMemberIdError.code)))
            return
        protocols = args.protocols
        if group.state == GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(group, m, args, out)
        elif group.state == GroupState.COMPLETING_REBALANCE:
            if m.matches(protocols):
                # a retried join of the current generation: answer it again
                out.append((respond, self._join_response(group, m)))
            else:
                self._update_member_and_rebalance(group, m, args, out)
        elif group.state == GroupState.STABLE:
            if member_id == group.leader_id or not m.matches(protocols):
                # the leader rejoins to trigger a rebalance (e.g. its subscription saw new partitions)
                self._update_member_and_rebalance(group, m, args, out)
            else:
                out.append((respond, self._join_response(group, m)))
                self._heartbeat_ok(group, m)

    def _add_member_and_rebalance(self, group: GroupMetadata, member_id: str, args: JoinArgs, out: list) -> None:
        group_instance_id = args.group_instance_id
        m = MemberMetadata(member_id, group_instance_id, *args[:6])
        m.join_cb = args.respond
        if group.state == GroupState.PREPARING_REBALANCE and group.generation == 0:
            group.new_member_added = True
        if not group.members:
            group.protocol_type = args.protocol_type
        group.members[member_id] = m
        if group_instance_id is not None:
            group.static[group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        self._set_deadline(group, m, self._clock() + NEW_MEMBER_JOIN_TIMEOUT_MS / 1000.0)
        log.info(
            "member %s (client %s%s) joins group %s (%s, generation %d, %d members)",
            member_id,
            args.client_id,
            args.client_host,
            group.group_id,
            group.state,
            group.generation,
            len(group.members),
        )
        self._maybe_prepare_rebalance(group, f"member {member_id} joined", out)

    def _rejoin_static_member(self, group: GroupMetadata, args: JoinArgs, out: list) -> None:
        """KIP-345: a known group.instance.id joins with an empty member id (a restarted consumer): the
        old member id is fenced and replaced; a Stable group keeps its assignment when the group's
        protocol does not change (no rebalance)."""
        client_id, client_host, session_timeout_ms, rebalance_timeout_ms, _, protocols, respond, instance = args
        old_id = group.static[instance]
        m = group.members[old_id]
        new_id = f"{instance}-{uuid.uuid4()}"
        m.answer_waiting(FencedInstanceIdError.code, out)  # the old id's waiting requests
        if m.timer is not None:
            m.timer.cancel()
            m.timer = None
        group.members = {(new_id if k == old_id else k): v for k, v in group.members.items()}
        group.static[instance] = new_id
        if group.leader_id == old_id:
            group.leader_id = new_id
        m.member_id = new_id
        m.client_id, m.client_host = client_id, client_host or m.client_host
        m.session_timeout_ms, m.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        m.protocols = protocols
        m.join_cb = respond
        self._heartbeat_ok(group, m)
        log.info("static member %s of group %s rejoined as %s (the old id is fenced)", instance, group.group_id, new_id)
        if group.state == GroupState.STABLE:
            try:
                same = group.select_protocol() == group.protocol_name
            except InconsistentGroupProtocolError:
                same = False
            if same:
                # Kafka answers without the member list (also to the leader): its assignment stays,
                # under the new member id, once the group's record names it
                m.join_cb = None
                resp = self._join_response(group, m)
                resp["members"] = []

                def stored(code: int) -> None:
                    if code != NONE:
                        log.warning("group %s: writing static member %s's new id failed: %d", group.group_id,
                                    instance, code)  # fmt: skip
                    respond(resp if code == NONE else join_result(new_id, code))

                out.append((self._store_group, (group, group.to_record(None, _now_ms()), stored)))
                return
            self._prepare_rebalance(group, f"static member {instance} rejoined with other protocols", out)
        elif group.state == GroupState.COMPLETING_REBALANCE:
            self._prepare_rebalance(group, f"static member {instance} rejoined", out)

    def _update_member_and_rebalance(self, group: GroupMetadata, m: MemberMetadata, args: JoinArgs, out: list) -> None:
        _, client_host, session_timeout_ms, rebalance_timeout_ms, _, protocols, respond, _ = args
        if m.join_cb is not None and m.join_cb is not respond:
            # an earlier JoinGroup of this member (on another connection) is superseded
            out.append((m.join_cb, join_result(m.member_id, RebalanceInProgressError.code)))
        m.protocols = protocols
        m.session_timeout_ms = session_timeout_ms
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.client_host = client_host or m.client_host
        m.join_cb = respond
        self._maybe_prepare_rebalance(group, f"member {m.member_id} rejoined", out)

    def _maybe_prepare_rebalance(self, group: GroupMetadata, reason: str, out: list) -> None:
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY):
            self._prepare_rebalance(group, reason, out)

    def _prepare_rebalance(self, group: GroupMetadata, reason: str, out: list) -> None:
        if group.state == GroupState.COMPLETING_REBALANCE:
            # the assignment being distributed is void: waiting syncs learn to rejoin
            for m in group.members.values():
                m.assignment = b""
                if m.sync_cb is not None:
                    out.append((m.sync_cb, sync_result(RebalanceInProgressError.code)))
                    m.sync_cb = None
        if group.join_timer is not None:
            group.join_timer.cancel()
        now = self._clock()
        rebalance_timeout = group.rebalance_timeout_ms()
        if group.state == GroupState.EMPTY:
            delay = min(self.initial_rebalance_delay_ms, rebalance_timeout)
            group.initial_delay = True
            group.new_member_added = False
            group.remaining_ms = max(rebalance_timeout - delay, 0)
        else:
            delay = rebalance_timeout
            group.initial_delay = False
        log.info(
            "preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
            group.group_id,
            group.state,
            group.generation,
            reason,
        )
        group.transition_to(GroupState.PREPARING_REBALANCE)
        group.join_timer = self._schedule_at(now + delay / 1000.0, lambda t, g=group: self._on_join_timer(g, t))
        self._try_complete_join(group, out)

    def _try_complete_join(self, group: GroupMetadata, out: list) -> None:
        if group.state == GroupState.PREPARING_REBALANCE and not group.initial_delay and group.all_members_joined():
            self._complete_join(group, out)

    def _on_join_timer(self, group: GroupMetadata, timer: ScheduledTask) -> None:
        out: list = []
        with group.lock:
            if group.join_timer is not timer or group.state != GroupState.PREPARING_REBALANCE:
                return
            if group.initial_delay and group.new_member_added and group.remaining_ms > 0:
                # Kafka's InitialDelayedJoin: new members keep arriving, wait once more
                delay = min(self.initial_rebalance_delay_ms, group.remaining_ms)
                group.remaining_ms -= delay
                group.new_member_added = False
                group.join_timer = self._schedule_at(
                    self._clock() + delay / 1000.0, lambda t, g=group: self._on_join_timer(g, t)
                )
                return
            self._complete_join(group, out)
        fire_responses(out)

    def _complete_join(self, group: GroupMetadata, out: list) -> None:
        if group.join_timer is not None:
            group.join_timer.cancel()
            group.join_timer = None
        group.initial_delay = False
        for m in [m for m in group.members.values() if m.join_cb is None and m.group_instance_id is None]:
            log.info(
                "member %s of group %s did not rejoin within the rebalance timeout: removed",
                m.member_id,
                group.group_id,
            )
            self._remove_member(group, m, out)
        if group.state == GroupState.DEAD:
            return
        group.generation += 1
        if not group.members:
            group.protocol_name = None
            group.transition_to(GroupState.EMPTY)
            group.empty_since_ms = _now_ms()
            log.info("group %s with generation %d is now empty", group.group_id, group.generation)
            self._store_empty_group(group, out)
            return
        try:
            group.protocol_name = group.select_protocol()
        except InconsistentGroupProtocolError:  # cannot happen: joins were checked; be safe anyway
            log.exception("group %s: no common protocol", group.group_id)
            for m in list(group.members.values()):
                if m.join_cb is not None:
                    out.append((m.join_cb, join_result(m.member_id, InconsistentGroupProtocolError.code)))
                    m.join_cb = None
                self._remove_member(group, m, out)
            group.transition_to(GroupState.EMPTY)
            group.empty_since_ms = _now_ms()
            self._store_empty_group(group, out)
            return
        group.transition_to(GroupState.COMPLETING_REBALANCE)
        log.info(
            "stabilized group %s generation %d (protocol %s, leader %s, %d members)",
            group.group_id,
            group.generation,
            group.protocol_name,
            group.leader_id,
            len(group.members),
        )
        for m in group.members.values():
            if m.join_cb is not None:  # a static member that did not rejoin has nothing waiting
                out.append((m.join_cb, self._join_response(group, m)))
                m.join_cb = None
            m.is_new = False
            self._heartbeat_ok(group, m)

    def _join_response(self, group: GroupMetadata, m: MemberMetadata) -> dict:
        members = []
        if m.member_id == group.leader_id:
            members = [
                {
                    "member_id": o.member_id,
                    "group_instance_id": o.group_instance_id,
                    "metadata": o.metadata(group.protocol_name),
                }
                for o in group.members.values()
            ]
        return {
            "throttle_time_ms": 0,
            "error_code": NONE,
            "generation_id": group.generation,
            "protocol_name": group.protocol_name or "",
            "leader": group.leader_id or "",
            "member_id": m.member_id,
            "members": members,
        }

    # ------------------------------------------------------------------ SyncGroup

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        assignments: dict[str, bytes],
        respond: Respond,
        group_instance_id: str | None = None,
    ) -> None:
        """``respond`` gets the SyncGroup body (``error_code``, ``assignment``), at once or when the
        leader's assignment arrives.  ``assignments`` (member id -> bytes) count only from the leader."""
        try:
            self._check_coordinator(group_id)
        except PyklogError as e:
            respond(sync_result(e.code))
            return
        group = self._group(group_id, create=False)
        if group is None:
            respond(sync_result(UnknownMemberIdError.code))
            return
        out: list = []
        with group.lock:
            m = group.members.get(member_id)
            if group.state == GroupState.DEAD:
                out.append((respond, sync_result(CoordinatorNotAvailableError.code)))
            elif group.fenced(member_id, group_instance_id):
                out.append((respond, sync_result(FencedInstanceIdError.code)))
            elif m is None:
                out.append((respond, sync_result(UnknownMemberIdError.code)))
            elif generation_id != group.generation:
                out.append((respond, sync_result(IllegalGenerationError.code)))
            elif group.state == GroupState.PREPARING_REBALANCE:
                out.append((respond, sync_result(RebalanceInProgressError.code)))
            elif group.state == GroupState.COMPLETING_REBALANCE:
                if m.sync_cb is not None and m.sync_cb is not respond:
                    out.append((m.sync_cb, sync_result(RebalanceInProgressError.code)))
                m.sync_cb = respond
                if member_id == group.leader_id:
                    assignment = {mid: bytes(assignments.get(mid, b"")) for mid in group.members}
                    unknown = set(assignments) - set(group.members)
                    if unknown:
                        log.info("group %s: leader assigned to unknown members %s (ignored)", group_id, sorted(unknown))
                    # Kafka's storeGroup: the members get the assignment once the record is replicated
                    generation = group.generation
                    out.append(
                        (
                            self._store_group,
                            (
                                group,
                                group.to_record(assignment, _now_ms()),
                                lambda code: self._assignment_stored(group, generation, assignment, code),
                            ),
                        )
                    )
                self._heartbeat_ok(group, m)
            elif group.state == GroupState.STABLE:
                out.append((respond, sync_result(NONE, m.assignment)))
                self._heartbeat_ok(group, m)
            else:  # Empty
                out.append((respond, sync_result(UnknownMemberIdError.code)))
        fire_responses(out)

    def _assignment_stored(self, group: GroupMetadata, generation: int, assignment: dict, code: int) -> None:
        """The leader's assignment of ``generation`` was written (``code`` 0) or not: hand it to the
        members and make the group Stable, or answer the waiting SyncGroups with the error and
        rebalance again -- if the group is still completing that generation (Kafka's storeGroup
        callback in ``doSyncGroup``).  Any thread; takes the group's lock."""
        out: list = []
        with group.lock:
            if group.state != GroupState.COMPLETING_REBALANCE or group.generation != generation:
                return
            if code != NONE:
                log.warning(
                    "group %s: writing the assignment of generation %d failed with error %d: rebalancing again",
                    group.group_id,
                    generation,
                    code,
                )
                for m in group.members.values():
                    m.assignment = b""
                    if m.sync_cb is not None:
                        out.append((m.sync_cb, sync_result(code)))
                        m.sync_cb = None
                self._prepare_rebalance(group, "storing the group's assignment failed", out)
            else:
                for mid, other in group.members.items():
                    other.assignment = assignment.get(mid, b"")
                    if other.sync_cb is not None:
                        out.append((other.sync_cb, sync_result(NONE, other.assignment)))
                        other.sync_cb = None
                group.transition_to(GroupState.STABLE)
                log.info(
                    "group %s generation %d is stable (%d members)", group.group_id, generation, len(group.members)
                )
        fire_responses(out)

    # ------------------------------------------------------------------ OffsetCommit validation

    def validate_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
    ) -> None:
        """Raise unless an OffsetCommit (v1+) with this generation and member may be stored:
        IllegalGenerationError, UnknownMemberIdError, RebalanceInProgressError,
        CoordinatorNotAvailableError.  Generation < 0 passes while the group has no members.
        A valid commit from a member counts as its heartbeat (as in Kafka)."""
        group = self._group(group_id, create=False) if group_id else None
        if group is not None or (generation_id is not None and generation_id >= 0):
            self._check_coordinator(group_id)  # NOT_COORDINATOR & co. come first, as in Kafka
        if group is None:
            if generation_id is not None and generation_id >= 0:
                raise IllegalGenerationError(
                    f"group {group_id!r} has no members here; generation {generation_id} is not current"
                )
            return
        with group.lock:
            if group.state == GroupState.DEAD:
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            if generation_id < 0 and group.state == GroupState.EMPTY:
                return  # offsets only: the group does not use Kafka's group management
            # Kafka's order (GroupMetadata.validateOffsetCommit): the member, then the generation,
            # then the group's state.  A stale member committing while its group completes a
            # rebalance gets ILLEGAL_GENERATION (it must rejoin), not REBALANCE_IN_PROGRESS.
            if group.fenced(member_id, group_instance_id):
                raise FencedInstanceIdError(
                    f"group.instance.id {group_instance_id!r} of group {group_id!r} "
                    f"belongs to another member than {member_id!r}"
                )
            m = group.members.get(member_id)
            if m is None:
                raise UnknownMemberIdError(f"{member_id!r} is not a member of group {group_id!r}")
            if generation_id != group.generation:
                raise IllegalGenerationError(
                    f"group {group_id!r} is at generation {group.generation}, the commit is for {generation_id}"
                )
            if group.state == GroupState.COMPLETING_REBALANCE:
                raise RebalanceInProgressError(f"group {group_id!r} is completing a rebalance")
            self._heartbeat_ok(group, m)

    def validate_txn_offset_commit(
        self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None
    ) -> None:
        """Raise unless a TxnOffsetCommit (v3+, KIP-447) from this member may be stored (Kafka's
        ``validateOffsetCommit`` with ``isTransactional``): when the request names a member
        (generation >= 0, a member id or a group instance id) it must be the group's current
        member -- FencedInstanceIdError for a static member replaced by another, UnknownMemberIdError
        -- at the group's generation (IllegalGenerationError); a request naming no member (v0-2,
        or a producer outside the group) passes whatever the group's state.  A Dead group raises
        CoordinatorNotAvailableError.  Runs on a request handler thread; takes the group's lock."""
        names_member = (
            (generation_id is not None and generation_id >= 0) or bool(member_id) or group_instance_id is not None
        )
        group = self._group(group_id, create=False) if group_id else None
        if group is not None or names_member:
            self._check_coordinator(group_id)
        if not names_member:
            if group is not None and group.state == GroupState.DEAD:
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            return
        if group is None:
            raise UnknownMemberIdError(f"{member_id!r} is not a member of group {group_id!r} (no members here)")
        with group.lock:
            if group.state == GroupState.DEAD:
                raise CoordinatorNotAvailableError(f"group {group_id!r} is being removed")
            if group.fenced(member_id, group_instance_id):
                raise FencedInstanceIdError(
                    f"group.instance.id {group_instance_id!r} of group {group_id!r} "
                    f"belongs to another member than {member_id!r}"
                )
            if member_id not in group.members:
                raise UnknownMemberIdError(f"{member_id!r} is not a member of group {group_id!r}")
            if generation_id != group.generation:
                raise IllegalGenerationError(
                    f"group {group_id!r} is at generation {group.generation}, the transactional commit is for "
                    f"{generation_id}"
                )

    # ------------------------------------------------------------------ offset expiry (offsets.retention.minutes)
    # cleanup_group_metadata and the administration APIs: GroupAdministration (admin.py)

    def _cleanup_task(self) -> None:
        try:
            self.cleanup_group_metadata()
        except Exception:  # noqa: BLE001 - logged; the next check runs anyway
            log.exception("expiring group offsets failed")


__all__ = ["GROUP_API_KEYS", "GroupCoordinator", "GroupState", "error_response"]
