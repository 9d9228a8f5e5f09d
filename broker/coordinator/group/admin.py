"""The group coordinator's administration: offset expiry, ListGroups, DescribeGroups, DeleteGroups,
OffsetDelete and the introspection tools and tests use.

:class:`GroupAdministration` is a part of :class:`~pyklog.broker.coordinator.group.coordinator.GroupCoordinator`
(its base class), kept in its own module so that each file holds one job: the coordinator module
runs the rebalance protocol (JoinGroup, SyncGroup, rebalances; heartbeats, session timers and
LeaveGroup in :mod:`~pyklog.broker.coordinator.group.sessions`), this one answers for the groups as
a whole.  It uses the coordinator's state, which the coordinator
defines: the group table ``_groups`` (guarded by ``_lock``), ``offsets`` (the
:class:`~pyklog.broker.coordinator.offsets.OffsetManager`, or None), ``broker_id``,
``offsets_retention_ms``, and the checks ``_check_coordinator(group_id)`` and
``_group(group_id, create)``.

Thread-safety: thread-safe, as the coordinator.  Locks: a group's lock, then its offsets partition's
lock; never two groups' locks at once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from pyklog.broker.coordinator.group.metadata import GroupMetadata, subscribed_topics
from pyklog.broker.coordinator.group.state import GroupState
from pyklog.broker.errors import (
    GroupIdNotFoundError,
    GroupSubscribedToTopicError,
    NonEmptyGroupError,
    PyklogError,
)

log = logging.getLogger(__name__)

NONE = 0
#: DescribeGroups authorized operations when asked (no ACLs in pyklog): READ, DELETE, DESCRIBE.
GROUP_AUTHORIZED_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
_NOT_REQUESTED_OPERATIONS = -(1 << 31)


def _now_ms() -> int:
    return int(time.time() * 1000)


class GroupAdministration:
    """The groups as a whole (see the module docstring); a base class of ``GroupCoordinator`` only."""

    def cleanup_group_metadata(self, now_ms: int | None = None) -> dict:
        """Expire committed offsets and remove abandoned groups (Kafka's
        ``GroupMetadataManager.cleanupGroupMetadata``, every ``offsets.retention.check.interval.ms``
        on the coordinator's scheduler thread; callable directly).

        Only groups without members are touched (a group with members never loses offsets):
        * a group this coordinator knows in state Empty: each offset expires once
          ``offsets.retention.minutes`` passed since the later of its commit and the moment the
          group became Empty (KIP-211); once it has no offsets left (and nothing pending) it is
          removed, as Kafka's Empty -> Dead;
        * a group with offsets only (a "simple" consumer, or a group whose membership was lost in a
          restart): each offset by its commit timestamp;
        * ZooKeeper consumer groups (``/consumers/[group]``, offsets.storage=zookeeper), on the
          controller only: the whole group once it has no registered member and nothing under it
          changed within the retention (:meth:`ZkCluster.delete_expired_zookeeper_group`).
        Expired offsets get tombstones in ``__consumer_offsets`` (:meth:`OffsetManager.expire_group_offsets`).
        Locks: each group's lock, then its offsets partition's lock; never two groups at once.
        Returns ``{"expired_offsets", "removed_groups", "removed_zookeeper_groups"}`` (lists of names
        for the groups).
        """
        now = _now_ms() if now_ms is None else int(now_ms)
        retention = self.offsets_retention_ms
        report = {"expired_offsets": 0, "removed_groups": [], "removed_zookeeper_groups": []}
        if self.offsets is None:
            return report
        with self._lock:
            names = set(self._groups)
        names |= set(self.offsets.groups())
        for gid in sorted(names):
            if not self.offsets.serves_group(gid):
                continue
            with self._lock:
                g = self._groups.get(gid)
                offsets_only = g is None  # not known here: lock a placeholder so no join slips in
                if offsets_only:
                    g = self._groups[gid] = GroupMetadata(gid)
            remove = offsets_only
            try:
                with g.lock:
                    if g.state != GroupState.EMPTY or g.members or g.pending:
                        continue  # members: offsets are kept (Kafka's KIP-496 unsubscribed-topic expiry is not done)
                    expired, left = self.offsets.expire_group_offsets(
                        gid, now, retention, empty_since_ms=None if offsets_only else g.empty_since_ms
                    )
                    report["expired_offsets"] += expired
                    if not left and (offsets_only or now - g.empty_since_ms >= retention):
                        report["removed_groups"].append(gid)
                        log.info("group %s removed: empty and without committed offsets", gid)
                        remove = True
                    if remove:
                        g.transition_to(GroupState.DEAD)  # a join holding this object answers COORDINATOR_NOT_AVAILABLE
                        if not offsets_only:  # its metadata record gets a tombstone
                            self.offsets.delete_offsets(gid, [], remove_group=True)
            except PyklogError as e:  # the partition moved or is loading: the next check retries
                log.debug("group %s: offsets not expired now: %s", gid, e)
                with g.lock:
                    if offsets_only and g.state == GroupState.EMPTY and not g.members and not g.pending:
                        g.transition_to(GroupState.DEAD)
            finally:
                if remove:
                    with self._lock:
                        if self._groups.get(gid) is g and g.state == GroupState.DEAD:
                            del self._groups[gid]
        report["removed_zookeeper_groups"] = self._expire_zookeeper_groups(now, retention)
        return report

    def _expire_zookeeper_groups(self, now_ms: int, retention_ms: int) -> list[str]:
        """On the controller (lowest live broker id) only: delete abandoned ZooKeeper groups."""
        cluster = getattr(self.offsets, "cluster", None)
        if cluster is None or not hasattr(cluster, "zookeeper_consumer_groups"):
            return []
        if self.broker_id is None or cluster.controller_id != self.broker_id:
            return []
        removed = []
        for gid in cluster.zookeeper_consumer_groups():
            try:
                if cluster.delete_expired_zookeeper_group(gid, now_ms, retention_ms):
                    removed.append(gid)
            except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: keep everything, retry later
                log.warning("could not check ZooKeeper group %s for expiry: %s", gid, e)
        return removed

    # ------------------------------------------------------------------ ListGroups / DescribeGroups

    def list_groups(self) -> tuple[int, list[tuple[str, str]]]:
        """(error code, [(group id, protocol type)]) of the groups this broker coordinates, including
        groups that only have committed offsets (protocol type "")."""
        code = NONE
        with self._lock:
            groups = list(self._groups.values())
        found: dict[str, str] = {}
        for g in groups:
            with g.lock:
                if g.state == GroupState.DEAD:
                    continue
                ptype = g.protocol_type or ""
            try:
                self._check_coordinator(g.group_id)
            except PyklogError:
                continue
            found[g.group_id] = ptype
        if self.offsets is not None:
            try:
                if self.offsets.is_loading():
                    code = 14  # COORDINATOR_LOAD_IN_PROGRESS
                for gid in self.offsets.groups():
                    found.setdefault(gid, "")
            except PyklogError as e:
                code = e.code
            for gid in self._zookeeper_groups():
                found.setdefault(gid, "")
        return code, sorted(found.items())

    def _zookeeper_groups(self) -> list[str]:
        """ZooKeeper consumer groups (offsets.storage=zookeeper, e.g. a Spark query's generated
        group) that this broker reports in ListGroups: those whose ``__consumer_offsets`` partition it
        leads, so each is listed by exactly one broker of the cluster (protocol type "")."""
        cluster = getattr(self.offsets, "cluster", None)
        if cluster is None or not hasattr(cluster, "zookeeper_consumer_groups"):
            return []
        try:
            return [g for g in cluster.zookeeper_consumer_groups() if self.offsets.serves_group(g)]
        except Exception as e:  # noqa: BLE001 - ListGroups still answers with the broker's groups
            log.warning("could not list ZooKeeper consumer groups: %s", e)
            return []

    def describe_group(self, group_id: str, *, include_authorized_operations: bool = False) -> dict:
        """The DescribeGroups entry of one group (state Dead for an unknown group, as Kafka)."""
        entry = {
            "error_code": NONE,
            "group_id": group_id,
            "group_state": GroupState.DEAD.value,
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": GROUP_AUTHORIZED_OPERATIONS
            if include_authorized_operations
            else _NOT_REQUESTED_OPERATIONS,
        }
        try:
            self._check_coordinator(group_id)
        except PyklogError as e:
            entry["error_code"] = e.code
            entry["group_state"] = ""
            return entry
        group = self._group(group_id, create=False)
        if group is None:
            if self.offsets is not None:
                try:
                    if self.offsets.fetch(group_id, None):
                        entry["group_state"] = GroupState.EMPTY.value  # offsets only (a "simple" consumer group)
                except PyklogError as e:
                    entry["error_code"] = e.code
            return entry
        with group.lock:
            entry["group_state"] = group.state.value
            entry["protocol_type"] = group.protocol_type or ""
            stable = group.state == GroupState.STABLE
            entry["protocol_data"] = (group.protocol_name or "") if stable else ""
            entry["members"] = [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(group.protocol_name) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in group.members.values()
            ]
        return entry

    # ------------------------------------------------------------------ DeleteGroups, OffsetDelete

    def _committed(self, group_id: str) -> dict:
        """The group's committed offsets ``{(topic, partition): OffsetAndMetadata}`` ({} without an
        offset manager)."""
        return self.offsets.fetch_detailed(group_id) if self.offsets is not None else {}

    def delete_groups(self, group_ids: Iterable[str]) -> dict[str, int]:
        """DeleteGroups (Kafka's ``GroupCoordinator.handleDeleteGroups``): ``{group id: error code}``.

        A group this broker coordinates that is Empty (no members), or known only by its committed
        offsets, is deleted: its offsets and its metadata record get tombstones in
        ``__consumer_offsets`` and it becomes Dead.
        NON_EMPTY_GROUP while it has members, GROUP_ID_NOT_FOUND when unknown, the coordinator
        errors (INVALID_GROUP_ID, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS) as Kafka.  Any
        request handler thread; takes the coordinator's lock, then the group's."""
        out: dict[str, int] = {}
        for gid in group_ids:
            try:
                self._check_coordinator(gid)
                group = self._group(gid, create=False)
                committed = self._committed(gid)
                if group is None:
                    if not committed:
                        raise GroupIdNotFoundError(f"group {gid!r} does not exist")
                    self.offsets.delete_offsets(gid, list(committed), remove_group=True)
                else:
                    with group.lock:
                        if group.state == GroupState.DEAD and not committed:
                            raise GroupIdNotFoundError(f"group {gid!r} does not exist")
                        if group.state not in (GroupState.EMPTY, GroupState.DEAD):
                            raise NonEmptyGroupError(
                                f"group {gid!r} has {len(group.members)} member(s) "
                                f"(state {group.state}); stop them before deleting it"
                            )
                        group.transition_to(GroupState.DEAD)
                    with self._lock:
                        if self._groups.get(gid) is group:
                            del self._groups[gid]
                    if self.offsets is not None:  # outside the group's lock (the offset manager takes its own)
                        # the offsets' and the group metadata record's tombstones, one batch
                        self.offsets.delete_offsets(gid, list(committed), remove_group=True)
                log.info("deleted group %s (%d committed offset(s))", gid, len(committed))
                out[gid] = NONE
            except PyklogError as e:
                out[gid] = e.code
        return out

    def delete_offsets(self, group_id: str, partitions: Iterable[tuple[str, int]]) -> tuple[int, dict]:
        """OffsetDelete (KIP-496, Kafka's ``GroupCoordinator.handleDeleteOffsets``):
        ``(group error code, {(topic, partition): error code})``.

        An Empty group (or one known only by its offsets) loses the offsets of every partition named;
        a consumer group with members keeps those of the topics its members subscribe to
        (GROUP_SUBSCRIBED_TO_TOPIC per partition) and loses the others; a non-consumer group with
        members answers NON_EMPTY_GROUP; an unknown group GROUP_ID_NOT_FOUND."""
        tps = [tuple(tp) for tp in partitions]
        try:
            self._check_coordinator(group_id)
            group = self._group(group_id, create=False)
            committed = self._committed(group_id)
            subscribed: set[str] = set()
            if group is None or group.state == GroupState.DEAD:
                if not committed:
                    raise GroupIdNotFoundError(f"group {group_id!r} does not exist")
            else:
                with group.lock:
                    if group.state != GroupState.EMPTY:
                        if group.protocol_type != "consumer":
                            raise NonEmptyGroupError(
                                f"group {group_id!r} has members and protocol type {group.protocol_type!r}"
                            )
                        for m in group.members.values():
                            for _name, meta in m.protocols:
                                subscribed.update(subscribed_topics(meta))
        except PyklogError as e:
            return e.code, {}
        results = {tp: (GroupSubscribedToTopicError.code if tp[0] in subscribed else NONE) for tp in tps}
        doomed = [tp for tp, code in results.items() if code == NONE and tp in committed]
        if doomed:
            try:
                self.offsets.delete_offsets(group_id, doomed)
            except PyklogError as e:
                return e.code, {}
        log.info("deleted %d offset(s) of group %s", len(doomed), group_id)
        return NONE, results

    # ------------------------------------------------------------------ introspection (tools, tests)

    def group_state(self, group_id: str) -> str:
        """The group's state name (``Dead`` for an unknown group)."""
        g = self._group(group_id, create=False)
        if g is None:
            return GroupState.DEAD.value
        with g.lock:
            return g.state.value

    def group_summary(self, group_id: str) -> dict | None:
        """``{state, generation, protocol_type, protocol, leader, members: [ids]}`` or None."""
        g = self._group(group_id, create=False)
        if g is None:
            return None
        with g.lock:
            return {
                "state": g.state.value,
                "generation": g.generation,
                "protocol_type": g.protocol_type,
                "protocol": g.protocol_name,
                "leader": g.leader_id,
                "members": list(g.members),
            }


__all__ = ["GROUP_AUTHORIZED_OPERATIONS", "GroupAdministration"]
