"""Group coordination and committed offsets: FindCoordinator, OffsetCommit, OffsetFetch, the group
membership APIs, DeleteGroups and OffsetDelete.

* FindCoordinator v0-4 (v4 batched keys): key type 0 a group (the offset manager), 1 a
  transactional id (the transaction coordinator).
* OffsetCommit v0-8, OffsetFetch v0-9 (v7 RequireStable, v8 several groups) through
  :class:`broker.coordinator.offsets.OffsetManager`; OffsetCommit/OffsetFetch v0 use ZooKeeper
  (``/consumers/<group>/offsets/<topic>/<partition>``) as Kafka 0.8.2 did, through
  :class:`broker.server.zk_offset_store.ZkOffsetStore`.
* JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5, ListGroups v0-4, DescribeGroups v0-5
  (JoinGroup v7 / SyncGroup v5 name the group's protocol type and name, KIP-559; ListGroups v4 the
  group states and a states filter, KIP-518) through
  :class:`broker.coordinator.group.GroupCoordinator` (OffsetCommit with a generation >= 0 is
  validated against the group).
* DeleteGroups v0-2 (ZooKeeper groups too) and OffsetDelete v0
  (:meth:`GroupCoordinator.delete_groups` / ``delete_offsets``).

Authorization (Kafka's KafkaApis): FindCoordinator needs DESCRIBE on the group or transactional id;
JoinGroup, SyncGroup, Heartbeat, LeaveGroup READ on the group (else GROUP_AUTHORIZATION_FAILED for
the request); OffsetCommit READ on the group and READ on each topic (TOPIC_AUTHORIZATION_FAILED for
a denied topic's partitions); OffsetFetch DESCRIBE on the group and DESCRIBE on each topic (asked for
all, the denied topics are left out); DescribeGroups DESCRIBE on each group (with its authorized
operations when asked); ListGroups lists every group with DESCRIBE on the cluster, else the groups
the principal may DESCRIBE; DeleteGroups DELETE on each group; OffsetDelete DELETE on the group and
READ on each topic.

Thread-safety: no state of its own; runs on every request handler thread, and answers from the
coordinators' completing threads (a waiting JoinGroup/SyncGroup, an acks=all commit).
"""

from __future__ import annotations

import logging
import threading

from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    InvalidRequestError,
    PyklogError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper, denial
from pyklog.broker.server.handlers.responses import NONE, RequestHandlers, requested_offsets

log = logging.getLogger(__name__)

#: Kafka's UNSTABLE_OFFSET_COMMIT (KIP-447): OffsetFetch v7+ RequireStable on a partition with
#: pending transactional offsets (retriable)
UNSTABLE_OFFSET_COMMIT = 88


class GroupApis(RequestHandlers):
    """The group APIs.  ``offset_manager`` (:class:`broker.coordinator.offsets.OffsetManager`) and
    ``group_coordinator`` (:class:`broker.coordinator.group.GroupCoordinator`) may be None: the
    group APIs then answer COORDINATOR_NOT_AVAILABLE.  ``zk_offsets`` serves v0 commits;
    ``txn_coordinator`` (or None) answers FindCoordinator for transactional ids."""

    def __init__(
        self,
        cluster,
        offset_manager,
        group_coordinator,
        zk_offsets,
        txn_coordinator=None,
        *,
        auth: AuthHelper = ALLOW_ALL,
    ):
        self.auth = auth
        self.cluster = cluster
        self.offsets = offset_manager
        self.groups = group_coordinator
        self.zk_offsets = zk_offsets
        self.txn_coordinator = txn_coordinator

    def handle_find_coordinator(self, request, header, body):
        """FindCoordinator v0-4 (Kafka's handleFindCoordinatorRequest): key type 0 = a group (the
        offset manager's partition leader), 1 = a transactional id (the transaction coordinator).
        v4+ (KIP-699) carries a batch of keys of one type and answers each key on its own (error
        code and message per key).  Runs on a request handler thread; no lock of its own."""
        key_type = body.get("key_type", 0)
        if header.api_version >= 4:
            coordinators = []
            for key in body["coordinator_keys"]:
                result = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": NONE, "error_message": None}
                try:
                    self._authorize_coordinator_key(request, key, key_type)
                    result["node_id"], (result["host"], result["port"]) = self._find_coordinator(
                        key, key_type, request.listener_name
                    )
                except PyklogError as e:
                    result["error_code"], result["error_message"] = e.code, str(e)[:1000]
                coordinators.append(result)
            self._respond(request, header, {"throttle_time_ms": 0, "coordinators": coordinators})
            return
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "node_id": -1, "host": "", "port": -1}
        try:
            self._authorize_coordinator_key(request, body["key"], key_type)
            resp["node_id"], (resp["host"], resp["port"]) = self._find_coordinator(
                body["key"], key_type, request.listener_name
            )
        except PyklogError as e:
            resp["error_code"] = e.code
            resp["error_message"] = str(e)[:1000]
        self._respond(request, header, resp)

    def _authorize_coordinator_key(self, request, key: str, key_type: int) -> None:
        """DESCRIBE on the group (key type 0) or transactional id (1), else Kafka's denial."""
        rtype = {0: ResourceType.GROUP, 1: ResourceType.TRANSACTIONAL_ID}.get(key_type)
        if rtype is not None and not self.auth.authorize(request, AclOperation.DESCRIBE, rtype, key):
            raise denial(rtype)

    def _find_coordinator(self, key: str, key_type: int, listener_name: str) -> tuple[int, tuple[str, int]]:
        """``(node id, (host, port))`` of the coordinator of ``key`` on listener ``listener_name``; raises
        the PyklogError to answer."""
        if key_type == 1:
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            node = self.txn_coordinator.coordinator_for(key)
            addr = self.cluster.live_brokers(listener_name).get(node) if node is not None else None
            if addr is None:
                raise CoordinatorNotAvailableError(f"the coordinator of transactional id {key!r} is not available")
            return node, addr
        if key_type != 0:
            raise InvalidRequestError(f"unknown coordinator key type {key_type}")
        if self.offsets is None:
            raise CoordinatorNotAvailableError("the offset manager is not running")
        node = self.offsets.coordinator_for(key)
        addr = self.cluster.live_brokers(listener_name).get(node) if node is not None else None
        if addr is None:
            raise CoordinatorNotAvailableError(f"the coordinator of group {key!r} is not available")
        return node, addr

    def handle_offset_commit(self, request, header, body):
        group = body["group_id"]
        wanted = requested_offsets(body)
        # OffsetCommit v1's per-partition commit timestamp (-1: now), as Kafka
        stamps = {
            (t["name"], p["partition_index"]): p.get("commit_timestamp", -1)
            for t in body["topics"]
            for p in t["partitions"]
        }
        topics_of = body["topics"]

        def respond(codes: dict) -> None:
            topics = []
            for t in topics_of:
                topics.append(
                    {
                        "name": t["name"],
                        "partitions": [
                            {
                                "partition_index": p["partition_index"],
                                "error_code": codes.get((t["name"], p["partition_index"]), NONE),
                            }
                            for p in t["partitions"]
                        ],
                    }
                )
            if not request.answered:
                self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

        if self.auth.enabled:
            if not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, group):
                respond(dict.fromkeys(wanted, GroupAuthorizationFailedError.code))
                return
            may_read = self.auth.filter_authorized(
                request, AclOperation.READ, ResourceType.TOPIC, (t for t, _ in wanted)
            )
            denied = {k: TopicAuthorizationFailedError.code for k in wanted if k[0] not in may_read}
            if denied:
                wanted = {k: v for k, v in wanted.items() if k not in denied}
                stamps = {k: v for k, v in stamps.items() if k not in denied}
                inner = respond

                def respond(codes: dict) -> None:
                    inner({**codes, **denied})

                if not wanted:
                    respond({})
                    return
        if header.api_version == 0:
            respond(self.zk_offsets.commit(group, wanted))
            return
        try:
            if self.offsets is None:
                raise CoordinatorNotAvailableError("the offset manager is not running")
            if self.groups is not None:  # generation >= 0: a group member's commit (ILLEGAL_GENERATION & co.)
                self.groups.validate_offset_commit(
                    group,
                    body.get("generation_id_or_member_epoch", -1),
                    body.get("member_id", ""),
                    body.get("group_instance_id"),
                )
            # one append per distinct timestamp (usually one); answered when every one is replicated
            # (acks=all, OffsetManager.commit_async: from the completing thread, none waits here)
            batches = [
                (ts, {k: v for k, v in wanted.items() if stamps[k] == ts}) for ts in sorted(set(stamps.values()))
            ]
            if not batches:
                respond({})
                return
            gathered: dict = {}
            remaining = [len(batches)]
            gather_lock = threading.Lock()

            def one_done(codes: dict) -> None:
                with gather_lock:
                    gathered.update(codes)
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    respond(gathered)

            for ts, part in batches:
                try:
                    self.offsets.commit_async(group, part, one_done, commit_timestamp=ts if ts >= 0 else None)
                except PyklogError as e:
                    one_done(dict.fromkeys(part, e.code))
        except PyklogError as e:
            respond(dict.fromkeys(wanted, e.code))

    def handle_offset_fetch(self, request, header, body):
        """OffsetFetch v0-9 (Kafka's handleOffsetFetchRequest).  v0 reads ZooKeeper's offsets;
        v1+ the offsets topic.  v7+ RequireStable (KIP-447): a partition for which an open
        transaction holds a pending offset of the group is answered UNSTABLE_OFFSET_COMMIT with
        offset -1 (the client retries until the marker).  v8+ (KIP-709) asks for several groups:
        each group gets its own result, a coordinator error (NOT_COORDINATOR & co.) as that group's
        error code.  v9's member id and epoch (KIP-848) concern consumer-protocol groups only;
        classic groups (all pyklog has) ignore them, as Kafka's ClassicGroup.validateOffsetFetch.
        Runs on a request handler thread; no lock of its own."""
        version = header.api_version
        if version >= 8:
            groups = [
                self._offset_fetch_group(
                    version, g["group_id"], g.get("topics"), bool(body.get("require_stable")), request
                )
                for g in body["groups"]
            ]
            self._respond(request, header, {"throttle_time_ms": 0, "groups": groups})
            return
        result = self._offset_fetch_group(
            version, body["group_id"], body.get("topics"), version >= 7 and bool(body.get("require_stable")), request
        )
        self._respond(
            request, header, {"throttle_time_ms": 0, "topics": result["topics"], "error_code": result["error_code"]}
        )

    def _offset_fetch_group(self, version: int, group: str, req_topics, require_stable: bool, request=None) -> dict:
        """One group's OffsetFetch result: ``{"group_id", "topics", "error_code"}`` (the v8 group
        layout; v0-7 take its topics and error code)."""
        wanted = None if req_topics is None else [(t["name"], p) for t in req_topics for p in t["partition_indexes"]]
        auth = self.auth
        if auth.enabled and request is not None:
            if not auth.authorize(request, AclOperation.DESCRIBE, ResourceType.GROUP, group):
                code = GroupAuthorizationFailedError.code
                topics = [
                    {
                        "name": t["name"],
                        "partitions": [
                            {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                            for p in t["partition_indexes"]
                        ],
                    }
                    for t in (req_topics or [])
                ]
                return {"group_id": group, "topics": [] if version >= 8 else topics, "error_code": code}
            result = self._offset_fetch_group(version, group, req_topics, require_stable)
            names = {t["name"] for t in result["topics"]}
            may_describe = auth.filter_authorized(request, AclOperation.DESCRIBE, ResourceType.TOPIC, names)
            if wanted is None:  # all the group's topics: the denied ones are left out
                result["topics"] = [t for t in result["topics"] if t["name"] in may_describe]
            else:
                for t in result["topics"]:
                    if t["name"] not in may_describe:
                        for entry in t["partitions"]:
                            entry.update(
                                committed_offset=-1,
                                committed_leader_epoch=-1,
                                metadata="",
                                error_code=TopicAuthorizationFailedError.code,
                            )
            return result
        top_error = NONE
        part_error = NONE
        unstable: set = set()
        try:
            if version == 0:
                found = self.zk_offsets.fetch(group, wanted or [])
            else:
                if self.offsets is None:
                    raise CoordinatorNotAvailableError("the offset manager is not running")
                if require_stable:
                    found, unstable = self.offsets.fetch_stable(group, wanted)
                else:
                    found = self.offsets.fetch(group, wanted)
        except PyklogError as e:
            found = {}
            if version >= 2:
                top_error = e.code
            part_error = e.code
            if version >= 8:  # Kafka: the group's error only, no partitions
                return {"group_id": group, "topics": [], "error_code": e.code}
        if wanted is None:
            wanted = sorted(found)
        by_topic: dict[str, list] = {}
        for t, p in wanted:
            if (t, p) in unstable:
                by_topic.setdefault(t, []).append(
                    {
                        "partition_index": p,
                        "committed_offset": -1,
                        "committed_leader_epoch": -1,
                        "metadata": "",
                        "error_code": UNSTABLE_OFFSET_COMMIT,
                    }
                )
                continue
            offset, epoch, metadata = found.get((t, p), (-1, -1, ""))
            by_topic.setdefault(t, []).append(
                {
                    "partition_index": p,
                    "committed_offset": offset,
                    "committed_leader_epoch": epoch,
                    "metadata": metadata if metadata is not None else "",
                    "error_code": part_error,
                }
            )
        if unstable:
            log.debug("OffsetFetch of group %r: pending transactional offsets on %s", group, sorted(unstable))
        return {
            "group_id": group,
            "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
            "error_code": top_error,
        }

    def handle_group_membership(self, request, header, body):
        """JoinGroup/SyncGroup/Heartbeat/LeaveGroup/ListGroups/DescribeGroups: broker.coordinator.group
        answers now or later (a waiting JoinGroup/SyncGroup holds no handler thread)."""
        if self.groups is None:
            from pyklog.broker.coordinator.group import error_response

            self._respond(
                request,
                header,
                error_response(header.api_key, header.api_version, body, CoordinatorNotAvailableError.code),
            )
            return
        respond = lambda resp: self._respond(request, header, resp)  # noqa: E731
        if self.auth.enabled:
            respond = self._authorize_membership(request, header, body, respond)
            if respond is None:
                return
        if (header.api_key == ApiKey.JOIN_GROUP and header.api_version >= 7) or (
            header.api_key == ApiKey.SYNC_GROUP and header.api_version >= 5
        ):
            respond = self._with_group_protocol(request, header, body, respond)
            if respond is None:
                return
        elif header.api_key == ApiKey.LIST_GROUPS and header.api_version >= 4:
            respond = self._with_group_states(body, respond)
        self.groups.handle(header.api_key, header.api_version, body, header.client_id, request.peer, respond)

    def _authorize_membership(self, request, header, body, respond):
        """The group APIs' checks: READ on the group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
        DESCRIBE per group (DescribeGroups, with each group's authorized operations when asked),
        DESCRIBE on the cluster or per group (ListGroups).  Returns the respond function to pass on
        (DescribeGroups: ``body`` keeps only the groups allowed), or None when answered here."""
        from pyklog.broker.coordinator.group import error_response

        auth, key = self.auth, header.api_key
        if key in (ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP):
            if not auth.authorize(request, AclOperation.READ, ResourceType.GROUP, body["group_id"]):
                respond(error_response(key, header.api_version, body, GroupAuthorizationFailedError.code))
                return None
            return respond
        if key == ApiKey.LIST_GROUPS:
            if auth.authorize_cluster(request, AclOperation.DESCRIBE, log_if_denied=False):
                return respond

            def respond_allowed(resp):
                groups = [
                    g
                    for g in resp.get("groups", ())
                    if auth.authorize(
                        request, AclOperation.DESCRIBE, ResourceType.GROUP, g["group_id"], log_if_denied=False
                    )
                ]
                respond(dict(resp, groups=groups))

            return respond_allowed
        if key == ApiKey.DESCRIBE_GROUPS:
            asked = list(body.get("groups") or [])
            allowed = [g for g in asked if auth.authorize(request, AclOperation.DESCRIBE, ResourceType.GROUP, g)]
            denied = error_response(
                key,
                header.api_version,
                {"groups": [g for g in asked if g not in allowed]},
                GroupAuthorizationFailedError.code,
            )["groups"]
            body["groups"] = allowed
            include_ops = bool(body.get("include_authorized_operations"))

            def respond_described(resp):
                by_id = {g["group_id"]: g for g in resp.get("groups", ())}
                by_id.update({g["group_id"]: g for g in denied})
                out = []
                for gid in asked:
                    g = dict(by_id.get(gid) or {})
                    if not g:
                        continue
                    if include_ops and gid in allowed and g.get("error_code", NONE) == NONE:
                        g["authorized_operations"] = auth.authorized_operations(request, ResourceType.GROUP, gid)
                    else:  # Kafka leaves the field at its default for a group answered with an error
                        g["authorized_operations"] = AUTHORIZED_OPERATIONS_OMITTED
                    out.append(g)
                respond(dict(resp, groups=out))

            if not allowed:
                respond_described({"throttle_time_ms": 0, "groups": []})
                return None
            return respond_described
        return respond

    def _with_group_states(self, body, respond):
        """ListGroups v4+ (KIP-518): each group's state, and only the groups whose state is in the
        request's ``states_filter`` (compared case-insensitively, as Kafka parses them) if any."""
        wanted = {s.lower() for s in body.get("states_filter") or ()}

        def respond_with_states(resp):
            groups = []
            for g in resp.get("groups", ()):
                state = self.groups.group_state(g["group_id"])
                if not wanted or state.lower() in wanted:
                    groups.append(dict(g, group_state=state))
            respond(dict(resp, groups=groups))

        return respond_with_states

    def _with_group_protocol(self, request, header, body, respond):
        """JoinGroup v7+ / SyncGroup v5+ (KIP-559): the responses name the group's protocol type and
        name; a SyncGroup naming another type or name than the group's is answered
        INCONSISTENT_GROUP_PROTOCOL (as Kafka's GroupCoordinator.handleSyncGroup does).  Returns the
        respond function to pass on, or None when the request was answered here."""
        group_id = body["group_id"]
        if header.api_key == ApiKey.SYNC_GROUP:
            summary = self.groups.group_summary(group_id)
            if summary is not None:
                for key, have in (("protocol_type", summary["protocol_type"]), ("protocol_name", summary["protocol"])):
                    want = body.get(key)
                    if want is not None and have is not None and want != have:
                        self._respond(request, header, {"throttle_time_ms": 0, "error_code": 23, "assignment": b""})
                        return None

        def respond_with_protocol(resp):
            if resp.get("error_code") == NONE:
                summary = self.groups.group_summary(group_id) or {}
                resp = dict(resp, protocol_type=summary.get("protocol_type"))
                if header.api_key == ApiKey.SYNC_GROUP:
                    resp["protocol_name"] = summary.get("protocol")
            respond(resp)

        return respond_with_protocol

    def handle_delete_groups(self, request, header, body):
        """DeleteGroups v0-1 through :meth:`GroupCoordinator.delete_groups`, and of ZooKeeper groups
        (:meth:`_delete_zookeeper_groups`)."""
        names = body["groups_names"]
        may_delete = self.auth.filter_authorized(request, AclOperation.DELETE, ResourceType.GROUP, names)
        allowed = [g for g in names if g in may_delete]
        codes = dict.fromkeys(names, GroupAuthorizationFailedError.code)
        if not allowed:
            pass
        elif self.groups is None:
            codes.update(dict.fromkeys(allowed, CoordinatorNotAvailableError.code))
        else:
            codes.update(self._delete_zookeeper_groups(self.groups.delete_groups(allowed)))
        self._respond(
            request,
            header,
            {"throttle_time_ms": 0, "results": [{"group_id": g, "error_code": codes[g]} for g in names]},
        )

    def _delete_zookeeper_groups(self, codes: dict[str, int]) -> dict[str, int]:
        """DeleteGroups of ZooKeeper consumer groups (``/consumers/<group>``, offsets.storage=zookeeper):
        after the coordinator's answer (NONE or GROUP_ID_NOT_FOUND, so only the group's coordinator
        deletes), a ZooKeeper group of that name is deleted too (:meth:`ZkCluster.delete_zookeeper_group`:
        NON_EMPTY_GROUP while a member is registered).  The code is NONE if either kind was deleted."""
        from pyklog.broker.errors import GroupIdNotFoundError

        out = dict(codes)
        for g, code in codes.items():
            if code not in (NONE, GroupIdNotFoundError.code):
                continue
            try:
                if self.cluster.delete_zookeeper_group(g):
                    out[g] = NONE
            except PyklogError as e:
                out[g] = e.code
        return out

    def handle_offset_delete(self, request, header, body):
        """OffsetDelete v0 (KIP-496) through :meth:`GroupCoordinator.delete_offsets`; a topic this
        cluster does not have gets UNKNOWN_TOPIC_OR_PARTITION per partition, as Kafka."""
        group = body["group_id"]
        if not self.auth.authorize(request, AclOperation.DELETE, ResourceType.GROUP, group):
            self._respond(
                request, header, {"error_code": GroupAuthorizationFailedError.code, "throttle_time_ms": 0, "topics": []}
            )
            return
        may_read = self.auth.filter_authorized(
            request, AclOperation.READ, ResourceType.TOPIC, (t["name"] for t in body["topics"])
        )
        known, unknown = [], set()
        for t in body["topics"]:
            if t["name"] not in may_read:
                continue
            exists = self.cluster.topic(t["name"], refresh_if_missing=True) is not None
            for pd in t["partitions"]:
                tp = (t["name"], pd["partition_index"])
                if exists:
                    known.append(tp)
                else:
                    unknown.add(tp)
        if self.groups is None:
            code, results = CoordinatorNotAvailableError.code, {}
        else:
            code, results = self.groups.delete_offsets(group, known)
        topics = []
        if code == NONE:
            for t in body["topics"]:
                topics.append(
                    {
                        "name": t["name"],
                        "partitions": [
                            {
                                "partition_index": pd["partition_index"],
                                "error_code": TopicAuthorizationFailedError.code
                                if t["name"] not in may_read
                                else UnknownTopicOrPartitionError.code
                                if (t["name"], pd["partition_index"]) in unknown
                                else results.get((t["name"], pd["partition_index"]), NONE),
                            }
                            for pd in t["partitions"]
                        ],
                    }
                )
        self._respond(request, header, {"error_code": code, "throttle_time_ms": 0, "topics": topics})
