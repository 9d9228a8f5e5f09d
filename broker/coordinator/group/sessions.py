"""A group member's liveness: heartbeats, session timers, and removal (session expiry, LeaveGroup).

:class:`MemberSessions` is a part of :class:`~pyklog.broker.coordinator.group.coordinator.GroupCoordinator`
(its base class), kept in its own module so that each file holds one job: the coordinator module
runs the rebalance protocol (JoinGroup, SyncGroup, static members rejoining, the join timers), this
one keeps members alive or removes them (Kafka's ``DelayedHeartbeat`` and ``removeMemberAndUpdateGroup``):

* every member has a session deadline (``MemberMetadata.deadline``) and one timer on the
  coordinator's scheduler thread (``MemberMetadata.timer``); a heartbeat, a join, a sync or a valid
  offset commit moves the deadline (:meth:`MemberSessions._heartbeat_ok`);
* a member whose timer fires past its deadline is removed, unless it waits in JoinGroup (a new
  member only until its first-join deadline) or SyncGroup; the group then rebalances;
* Heartbeat answers the member's standing; LeaveGroup removes members at once (v3: a batch, static
  members by instance id).

It uses the coordinator's state and rebalance steps, which the coordinator defines: ``_clock``,
``_schedule_at(when, fn)``, ``_check_coordinator(group_id)``, ``_group(group_id, create)``,
``_prepare_rebalance(group, reason, out)`` and ``_try_complete_join(group, out)``.

Thread-safety: thread-safe, as the coordinator.  Every method here that takes a ``group`` runs with
that group's lock held (the caller's, or taken here by the timer callbacks and the public methods);
the collected ``respond`` answers are sent after the lock is released.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pyklog.broker.common.scheduler import ScheduledTask
from pyklog.broker.coordinator.group.metadata import GroupMetadata, MemberMetadata, fire_responses
from pyklog.broker.coordinator.group.state import GroupState
from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    FencedInstanceIdError,
    IllegalGenerationError,
    PyklogError,
    RebalanceInProgressError,
    UnknownMemberIdError,
)

log = logging.getLogger(__name__)

NONE = 0


class MemberSessions:
    """Heartbeats, session expiry and member removal (see the module docstring); a base class of
    ``GroupCoordinator`` only."""

    # ------------------------------------------------------------------ members: expiry and removal

    def _set_deadline(self, group: GroupMetadata, m: MemberMetadata, deadline: float) -> None:
        """Kafka's completeAndScheduleNextHeartbeatExpiration: the member lives until ``deadline``."""
        m.deadline = deadline
        if m.timer is None or m.timer.cancelled or m.timer.when > deadline:
            if m.timer is not None:
                m.timer.cancel()
            m.timer = self._schedule_at(deadline, lambda t, g=group, mid=m.member_id: self._on_expiry(g, mid, t))

    def _heartbeat_ok(self, group: GroupMetadata, m: MemberMetadata) -> None:
        self._set_deadline(group, m, self._clock() + m.session_timeout_ms / 1000.0)

    def _on_expiry(self, group: GroupMetadata, member_id: str, timer: ScheduledTask) -> None:
        out: list = []
        with group.lock:
            m = group.members.get(member_id)
            if m is None or m.timer is not timer:
                return
            now = self._clock()
            if m.join_cb is not None:
                alive = not m.is_new or now < m.deadline  # waiting in JoinGroup
            else:
                alive = m.sync_cb is not None or now < m.deadline
            if alive:
                nxt = m.deadline if now < m.deadline else now + m.session_timeout_ms / 1000.0
                m.timer = self._schedule_at(nxt, lambda t: self._on_expiry(group, member_id, t))
                return
            log.info(
                "member %s in group %s has failed (no heartbeat for %d ms): removing it",
                member_id,
                group.group_id,
                m.session_timeout_ms,
            )
            self._remove_member_and_update_group(group, m, f"member {member_id} expired", out)
        fire_responses(out)

    def _expire_pending(self, group: GroupMetadata, member_id: str, timer: ScheduledTask) -> None:
        out: list = []
        with group.lock:
            if group.pending.get(member_id) is not timer:
                return
            del group.pending[member_id]
            log.info("pending member %s of group %s did not rejoin: forgotten", member_id, group.group_id)
            self._try_complete_join(group, out)
        fire_responses(out)

    def _remove_member(self, group: GroupMetadata, m: MemberMetadata, out: list) -> None:
        if m.timer is not None:
            m.timer.cancel()
            m.timer = None
        m.answer_waiting(UnknownMemberIdError.code, out)
        group.members.pop(m.member_id, None)
        if m.group_instance_id is not None and group.static.get(m.group_instance_id) == m.member_id:
            del group.static[m.group_instance_id]
        if group.leader_id == m.member_id:
            group.leader_id = next(iter(group.members), None)

    def _remove_member_and_update_group(self, group: GroupMetadata, m: MemberMetadata, reason: str, out: list) -> None:
        self._remove_member(group, m, out)
        if group.state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, reason, out)
        elif group.state == GroupState.PREPARING_REBALANCE:
            self._try_complete_join(group, out)

    # ------------------------------------------------------------------ Heartbeat

    def heartbeat(self, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None = None) -> int:
        """The Heartbeat error code (0 = the member is current and the group is not rebalancing)."""
        try:
            self._check_coordinator(group_id)
        except PyklogError as e:
            return e.code
        group = self._group(group_id, create=False)
        if group is None:
            return UnknownMemberIdError.code
        with group.lock:
            if group.state == GroupState.DEAD:
                return CoordinatorNotAvailableError.code
            if group.fenced(member_id, group_instance_id):
                return FencedInstanceIdError.code
            m = group.members.get(member_id)
            if group.state == GroupState.EMPTY or m is None:
                return UnknownMemberIdError.code
            if generation_id != group.generation:
                return IllegalGenerationError.code
            self._heartbeat_ok(group, m)
            if group.state == GroupState.PREPARING_REBALANCE:
                return RebalanceInProgressError.code
            return NONE

    # ------------------------------------------------------------------ LeaveGroup

    def leave_group(self, group_id: str, member_ids: Iterable[str | tuple]) -> tuple[int, list[int]]:
        """Remove members (member ids, or ``(member_id, group_instance_id[, reason])``: a static
        member may leave by instance id with an empty member id; the client's reason, LeaveGroup v5+,
        is logged); returns (request error code, one code per member)."""
        member_ids = [(x, None, None) if isinstance(x, str) else (tuple(x) + (None,))[:3] for x in member_ids]
        try:
            self._check_coordinator(group_id)
        except PyklogError as e:
            return e.code, [e.code] * len(member_ids)
        group = self._group(group_id, create=False)
        if group is None:
            return NONE, [UnknownMemberIdError.code] * len(member_ids)
        out: list = []
        codes = []
        with group.lock:
            if group.state == GroupState.DEAD:
                return CoordinatorNotAvailableError.code, [CoordinatorNotAvailableError.code] * len(member_ids)
            for mid, instance, reason in member_ids:
                if instance is not None:
                    owner = group.static.get(instance)
                    if owner is None:
                        codes.append(UnknownMemberIdError.code)
                        continue
                    if mid and mid != owner:
                        codes.append(FencedInstanceIdError.code)
                        continue
                    mid = owner
                if mid in group.pending:
                    group.pending.pop(mid).cancel()
                    codes.append(NONE)
                    self._try_complete_join(group, out)
                    continue
                m = group.members.get(mid)
                if m is None:
                    codes.append(UnknownMemberIdError.code)
                    continue
                log.info("member %s leaves group %s%s", mid, group_id, f" (client reason: {reason})" if reason else "")
                self._remove_member_and_update_group(
                    group, m, f"member {mid} left the group" + (f"; client reason: {reason}" if reason else ""), out
                )
                codes.append(NONE)
        fire_responses(out)
        return NONE, codes


__all__ = ["MemberSessions"]
