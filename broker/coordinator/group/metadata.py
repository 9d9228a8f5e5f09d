"""A classic group's metadata and its members' (Kafka's ``GroupMetadata`` / ``MemberMetadata``).

:class:`GroupMetadata` holds one group's state (:class:`~pyklog.broker.coordinator.group.state.GroupState`,
changed only through :meth:`GroupMetadata.transition_to`), generation, protocol, leader, members
(in join order: the first is the leader), the member ids handed out with MEMBER_ID_REQUIRED, the
static members (KIP-345) and the rebalance timer; :class:`MemberMetadata` one member's protocols,
assignment, session deadline and the JoinGroup/SyncGroup answer it waits for.  Also here: the
JoinGroup/SyncGroup answer bodies (:func:`join_result`, :func:`sync_result`) and the decoding of the
topics a consumer subscribes to (:func:`subscribed_topics`).

Thread-safety: not thread-safe by themselves; every field of a group and of its members is read and
written under the group's :attr:`GroupMetadata.lock`, held by
:class:`~pyklog.broker.coordinator.group.coordinator.GroupCoordinator`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pyklog.broker.common.scheduler import ScheduledTask
from pyklog.broker.common.state_machine import check_transition
from pyklog.broker.coordinator.group.metadata_record import GroupMetadataValue, MemberRecord
from pyklog.broker.coordinator.group.state import VALID_PREVIOUS, GroupState
from pyklog.broker.errors import InconsistentGroupProtocolError

log = logging.getLogger(__name__)

NO_GENERATION = -1

#: a request's answer callback: called once with the response body (any thread, no lock held)
Respond = Callable[[dict], None]


def _now_ms() -> int:
    return int(time.time() * 1000)


class MemberMetadata:
    """One member of a group: its protocols and assignment, its session deadline and timer, and the
    JoinGroup / SyncGroup answer it waits for (guarded by the group's lock)."""

    __slots__ = (
        "member_id",
        "group_instance_id",
        "client_id",
        "client_host",
        "session_timeout_ms",
        "rebalance_timeout_ms",
        "protocol_type",
        "protocols",
        "assignment",
        "join_cb",
        "sync_cb",
        "deadline",
        "timer",
        "is_new",
    )

    def __init__(
        self,
        member_id,
        group_instance_id,
        client_id,
        client_host,
        session_timeout_ms,
        rebalance_timeout_ms,
        protocol_type,
        protocols,
    ):
        self.member_id = member_id
        self.group_instance_id = group_instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.protocol_type = protocol_type
        self.protocols: list[tuple[str, bytes]] = protocols
        self.assignment = b""
        self.join_cb: Respond | None = None  # a JoinGroup waiting for the rebalance
        self.sync_cb: Respond | None = None  # a SyncGroup waiting for the leader's assignment
        self.deadline = 0.0  # session expiry (monotonic seconds)
        self.timer: ScheduledTask | None = None
        self.is_new = True

    def answer_waiting(self, code: int, out: list) -> None:
        """Queue ``code`` as the answer to a waiting JoinGroup and SyncGroup (``out`` is fired later,
        outside the group lock)."""
        if self.join_cb is not None:
            out.append((self.join_cb, join_result(self.member_id, code)))
            self.join_cb = None
        if self.sync_cb is not None:
            out.append((self.sync_cb, sync_result(code)))
            self.sync_cb = None

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise InconsistentGroupProtocolError(f"member {self.member_id} supports none of {sorted(candidates)}")


class GroupMetadata:
    """One group's state, generation, protocol, leader and members (guarded by :attr:`lock`)."""

    __slots__ = (
        "group_id",
        "state",
        "generation",
        "protocol_type",
        "protocol_name",
        "leader_id",
        "members",
        "pending",
        "static",
        "lock",
        "join_timer",
        "initial_delay",
        "new_member_added",
        "remaining_ms",
        "empty_since_ms",
    )

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, MemberMetadata] = {}  # join order: the first is the leader
        self.pending: dict[str, ScheduledTask] = {}  # member ids handed out with MEMBER_ID_REQUIRED
        self.static: dict[str, str] = {}  # group.instance.id -> member id (KIP-345)
        self.lock = threading.Lock()
        self.join_timer: ScheduledTask | None = None
        self.initial_delay = False  # the join timer is Kafka's InitialDelayedJoin
        self.new_member_added = False
        self.remaining_ms = 0
        #: wall-clock ms when the group last became Empty (Kafka's currentStateTimestamp, KIP-211)
        self.empty_since_ms = _now_ms()

    @classmethod
    def from_record(cls, group_id: str, value: GroupMetadataValue, now_ms: int) -> GroupMetadata:
        """The group a metadata record describes, as a new coordinator loads it (Kafka's
        ``GroupMetadata.loadGroup``): Stable with its generation, protocol, leader, members and their
        assignments, or Empty without members (empty since the record's state timestamp).  Each
        member supports just the group's protocol, with the subscription the record holds.  No
        timers: the coordinator gives each member a fresh session deadline."""
        g = cls(group_id)
        g.generation = value.generation
        g.protocol_type = value.protocol_type or None
        g.protocol_name = value.protocol
        for r in value.members:
            m = MemberMetadata(
                r.member_id,
                r.group_instance_id,
                r.client_id,
                r.client_host,
                r.session_timeout_ms,
                r.rebalance_timeout_ms,
                value.protocol_type,
                [(value.protocol or "", r.subscription)],
            )
            m.assignment = r.assignment
            m.is_new = False
            g.members[r.member_id] = m
            if r.group_instance_id is not None:
                g.static[r.group_instance_id] = r.member_id
        if g.members:
            g.state = GroupState.STABLE
            g.leader_id = value.leader if value.leader in g.members else next(iter(g.members))
        else:
            g.protocol_name = None
            g.empty_since_ms = value.current_state_timestamp if value.current_state_timestamp >= 0 else now_ms
        return g

    def to_record(self, assignments: dict[str, bytes] | None, now_ms: int) -> GroupMetadataValue:
        """The group's metadata record (Kafka's ``GroupMetadataManager.groupMetadataValue``):
        ``assignments`` (member id -> bytes, the leader's new assignment; None: the members' current
        ones).  An Empty group's state timestamp is the moment it became empty.  Caller holds
        :attr:`lock`."""
        members = tuple(
            MemberRecord(
                m.member_id,
                m.group_instance_id,
                m.client_id or "",
                m.client_host or "",
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(self.protocol_name),
                m.assignment if assignments is None else bytes(assignments.get(mid, b"")),
            )
            for mid, m in self.members.items()
        )
        return GroupMetadataValue(
            self.protocol_type or "",
            self.generation,
            self.protocol_name,
            self.leader_id,
            self.empty_since_ms if self.state == GroupState.EMPTY else now_ms,
            members,
        )

    def transition_to(self, state: GroupState) -> None:
        """Enter ``state``; :class:`IllegalTransitionError` (state unchanged) unless the current state is
        one of its valid previous states (:data:`~pyklog.broker.coordinator.group.state.VALID_PREVIOUS`).
        Caller holds :attr:`lock`."""
        check_transition(VALID_PREVIOUS, self.state, state, f"group {self.group_id!r}")
        self.state = state

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def fenced(self, member_id: str, group_instance_id: str | None) -> bool:
        """KIP-345: the instance id belongs to another (newer) member id."""
        if group_instance_id is None:
            return False
        owner = self.static.get(group_instance_id)
        return owner is not None and owner != member_id

    def all_members_joined(self) -> bool:
        return not self.pending and all(m.join_cb is not None for m in self.members.values())

    def candidate_protocols(self) -> set[str]:
        """Protocols every member supports."""
        sets = [{name for name, _ in m.protocols} for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def supports(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        if not protocol_type or not protocols:
            return False
        if self.state == GroupState.EMPTY or not self.members:
            return True
        if protocol_type != self.protocol_type:
            return False
        candidates = self.candidate_protocols()
        return any(name in candidates for name, _ in protocols)

    def select_protocol(self) -> str:
        candidates = self.candidate_protocols()
        if not candidates:
            raise InconsistentGroupProtocolError(f"the members of group {self.group_id!r} share no protocol")
        votes: dict[str, int] = {}
        for m in self.members.values():
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        best = max(votes.values())
        leader = self.members.get(self.leader_id) or next(iter(self.members.values()))
        for name, _ in leader.protocols:  # ties: the leader's preference
            if votes.get(name) == best:
                return name
        return sorted(n for n, v in votes.items() if v == best)[0]


def fire_responses(out: list) -> None:
    """Call the collected ``(respond, body)`` pairs (answers, and the coordinator's group metadata
    writes queued the same way); the caller holds no group lock (they are collected under it, then
    run after it is released).  A failing ``respond`` is logged."""
    for respond, body in out:
        try:
            respond(body)
        except Exception:  # noqa: BLE001 - e.g. the request was answered already
            log.exception("answering a group request failed")


def join_result(member_id: str, code: int) -> dict:
    return {
        "throttle_time_ms": 0,
        "error_code": code,
        "generation_id": NO_GENERATION,
        "protocol_name": "",
        "leader": "",
        "member_id": member_id,
        "members": [],
    }


def sync_result(code: int, assignment: bytes = b"") -> dict:
    return {"throttle_time_ms": 0, "error_code": code, "assignment": assignment}


def subscribed_topics(metadata: bytes) -> list[str]:
    """The topics of a consumer protocol subscription (Kafka's ``ConsumerProtocolSubscription``:
    int16 version, int32 count, int16-length topic names, ...); [] if it cannot be read."""
    import struct

    try:
        mv = memoryview(metadata)
        (n,) = struct.unpack_from(">i", mv, 2)
        pos, out = 6, []
        for _ in range(max(n, 0)):
            (ln,) = struct.unpack_from(">h", mv, pos)
            out.append(bytes(mv[pos + 2 : pos + 2 + ln]).decode("utf-8"))
            pos += 2 + ln
        return out
    except (struct.error, UnicodeDecodeError, TypeError):
        return []


__all__ = [
    "GroupMetadata",
    "MemberMetadata",
    "NO_GENERATION",
    "Respond",
    "fire_responses",
    "join_result",
    "subscribed_topics",
    "sync_result",
]
