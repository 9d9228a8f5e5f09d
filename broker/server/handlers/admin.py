"""Topic and log administration: CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords,
DescribeLogDirs (Kafka's ZooKeeper-mode ``ZkAdminManager`` and ``ReplicaManager.deleteRecords``).

* CreateTopics v0-7 (v5: the created topic's partitions, replication factor and explicit configs;
  v7 topic ids), DeleteTopics v0-6 (v5: error messages; v6 by topic id) through
  :class:`broker.zk.cluster.ZkCluster`.
* CreatePartitions v0-3 (:meth:`ZkCluster.create_partitions`; every broker follows by a data watch
  on ``/brokers/topics/<t>`` and the leaders create the logs).
* DeleteRecords v0-2 (moves the log start offset, checkpointed before the answer), DescribeLogDirs
  v0-4.
* The internal topics (``__consumer_offsets``, ``__transaction_state``) stay whatever a client asks:
  DeleteTopics and DeleteRecords on them answer INVALID_TOPIC_EXCEPTION with Kafka's messages.

Authorization (Kafka's KafkaApis): CreateTopics needs CREATE on the cluster or on each topic,
DeleteTopics DELETE on each topic (and DESCRIBE on a topic named by id), CreatePartitions ALTER on
each topic, DeleteRecords DELETE on each topic: a denied topic gets TOPIC_AUTHORIZATION_FAILED and
the others go ahead.  DescribeLogDirs needs DESCRIBE on the cluster (else no log dirs and
CLUSTER_AUTHORIZATION_FAILED).

Thread-safety: stateless; runs on every request handler thread.
"""

from __future__ import annotations

import logging
import os
import time

from pyklog.broker.errors import (
    ClusterAuthorizationFailedError,
    InvalidPartitionsError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaStorageError,
    OffsetOutOfRangeError,
    PyklogError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    TopicDeletionDisabledError,
)
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.security.acl import AclOperation, ResourceType
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper
from pyklog.broker.server.handlers.responses import (
    MAX_PARTITIONS_PER_TOPIC,
    NONE,
    UNKNOWN_TOPIC_ID,
    RequestHandlers,
)
from pyklog.broker.zk.topics import is_protected, validate_topic_name

log = logging.getLogger(__name__)

_CREATE_WAIT_S = 2.0


def _volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the filesystem holding ``path`` (Kafka's DescribeLogDirs v4
    TotalBytes/UsableBytes: ``FileStore.getTotalSpace()``/``getUsableSpace()``, the latter being what
    an unprivileged process may still write, ``f_bavail``); (-1, -1) if the path cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        log.warning("DescribeLogDirs: cannot stat log dir %s: %s", path, e)
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


class TopicAdminApis(RequestHandlers):
    """CreateTopics, DeleteTopics, CreatePartitions, DeleteRecords and DescribeLogDirs.
    ``log_manager`` (:class:`~pyklog.broker.log.LogManager`) holds the log dirs and checkpoints."""

    def __init__(self, config, cluster, replica_manager, log_manager, *, auth: AuthHelper = ALLOW_ALL):
        self.auth = auth
        self.config = config
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.logs = log_manager

    def handle_create_topics(self, request, header, body):
        """CreateTopics: each topic is checked on its own, then every valid topic is written to
        ZooKeeper in one batch (:meth:`ZkCluster.create_topics`: one multi-op, one read of the
        registry), so 100 topics cost about as much on a broker holding 900 topics as on one
        holding 6.  Request handler thread."""
        validate_only = body.get("validate_only", False)
        timeout_s = min(max(body.get("timeout_ms", 0), 0) / 1000.0, _CREATE_WAIT_S)
        seen: dict[str, int] = {}
        for t in body["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        errors: dict[int, PyklogError] = {}
        specs: list[tuple[int, dict]] = []
        auth = self.auth
        if auth.enabled and not auth.authorize_cluster(request, AclOperation.CREATE, log_if_denied=False):
            may_create = auth.filter_authorized(request, AclOperation.CREATE, ResourceType.TOPIC, seen)
        else:
            may_create = set(seen)
        for i, t in enumerate(body["topics"]):
            name = t["name"]
            try:
                if seen[name] > 1:
                    raise InvalidRequestError(f"topic {name!r} appears more than once in the request")
                if name not in may_create:
                    raise TopicAuthorizationFailedError("Authorization failed.")
                n = t["num_partitions"]
                rf = t["replication_factor"]
                assignment = None
                if t.get("assignments"):
                    if n != -1 or rf != -1:
                        raise InvalidRequestError(
                            "with a manual replica assignment num_partitions and replication_factor must be -1"
                        )
                    assignment = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
                    n, rf = len(assignment), len(next(iter(assignment.values())))
                else:
                    n = self.config.num_partitions if n == -1 else n
                    rf = self.config.default_replication_factor if rf == -1 else rf
                    if n > MAX_PARTITIONS_PER_TOPIC:
                        raise InvalidPartitionsError(
                            f"topic {name!r}: {n} partitions requested, at most {MAX_PARTITIONS_PER_TOPIC} allowed"
                        )
                configs = {c["name"]: c["value"] for c in t.get("configs") or []}
                specs.append(
                    (
                        i,
                        {
                            "name": name,
                            "num_partitions": n,
                            "replication_factor": rf,
                            "configs": configs,
                            "replica_assignment": assignment,
                        },
                    )
                )
            except PyklogError as e:
                errors[i] = e
        if specs:
            try:
                created = self.cluster.create_topics([sp for _, sp in specs], validate_only)
            except PyklogError as e:  # ZooKeeper unreachable & co.: every topic of the batch fails
                created = {sp["name"]: e for _, sp in specs}
            for i, sp in specs:
                outcome = created.get(sp["name"])
                if isinstance(outcome, PyklogError):
                    errors[i] = outcome
                elif not validate_only:
                    self.replica_manager.wait_for_topic(sp["name"], timeout_s)
        spec_of = dict(specs)
        results = []
        for i, t in enumerate(body["topics"]):
            entry = {"name": t["name"], "error_code": NONE, "error_message": None}
            if i in errors:
                entry["error_code"] = errors[i].code
                entry["error_message"] = str(errors[i])[:1000]
            elif header.api_version >= 5 and i in spec_of:  # KIP-525: the created topic's layout and configs
                sp = spec_of[i]
                if header.api_version >= 7 and not validate_only:  # KIP-516
                    entry["topic_id"] = self.cluster.topic_id(sp["name"]) or ZERO_UUID
                entry.update(
                    num_partitions=sp["num_partitions"],
                    replication_factor=sp["replication_factor"],
                    configs=[
                        {"name": k, "value": v, "read_only": False, "config_source": 1, "is_sensitive": False}
                        for k, v in sorted(sp["configs"].items())
                    ],
                )
                if auth.enabled and not auth.authorize(
                    request, AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, sp["name"], log_if_denied=False
                ):  # Kafka: the configs only for a principal that may describe them
                    entry.update(configs=[], topic_config_error_code=TopicAuthorizationFailedError.code)
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "topics": results})

    def handle_delete_topics(self, request, header, body):
        """DeleteTopics v0-6 (Kafka's ``ZkAdminManager.deleteTopics``): valid names are marked for
        deletion (:meth:`ZkCluster.mark_topics_for_deletion`; a topic already marked is fine) and the
        answer waits, up to the request's ``timeout_ms``, until each left this broker's metadata
        (the controller started deleting it: its replicas are being deleted), else
        REQUEST_TIMED_OUT.  The controller completes the deletion once every replica is deleted.  v6+ (KIP-516) names
        each topic by name or by id: an id no topic has gets UNKNOWN_TOPIC_ID, both at once
        INVALID_REQUEST, as Kafka; each result carries the topic's name and id.  Request handler
        thread."""
        version = header.api_version
        if version >= 6:
            wanted = [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in body["topics"]]
        else:
            wanted = [(n, ZERO_UUID) for n in body["topic_names"]]
        errors: dict[int, PyklogError | int] = {}
        names: dict[int, str] = {}
        ids: dict[int, object] = {}
        for i, (name, tid) in enumerate(wanted):
            if name is not None and tid != ZERO_UUID:
                errors[i] = InvalidRequestError("you may not name a topic by both its name and its id")
            elif name is None:
                found = self.cluster.topic_name_by_id(tid) if tid != ZERO_UUID else None
                if found is None:
                    errors[i] = UNKNOWN_TOPIC_ID
                else:
                    names[i], ids[i] = found, tid
            else:
                names[i] = name
                ids[i] = self.cluster.topic_id(name) or ZERO_UUID
        by_name: dict[str, PyklogError] = {}
        todo = []
        auth = self.auth
        if auth.enabled:
            for i, name in list(names.items()):
                if ids.get(i) != ZERO_UUID and wanted[i][0] is None:  # named by id: DESCRIBE first
                    if not auth.authorize(request, AclOperation.DESCRIBE, ResourceType.TOPIC, name):
                        errors[i] = TopicAuthorizationFailedError("Topic authorization failed.")
                        del names[i]
        may_delete = auth.filter_authorized(request, AclOperation.DELETE, ResourceType.TOPIC, names.values())
        for name in dict.fromkeys(names.values()):
            try:
                if name not in may_delete:
                    raise TopicAuthorizationFailedError("Topic authorization failed.")
                if not self.config.delete_topic_enable:
                    raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
                validate_topic_name(name)
                if is_protected(name):
                    # every group's committed offsets, every transaction's state or every
                    # exactly-once Spark sink's commit records would go with it
                    raise InvalidTopicError(
                        f"Topic {name} is a kafka internal topic and is not allowed to be marked for deletion."
                    )
                todo.append(name)
            except PyklogError as e:
                by_name[name] = e
        if todo:
            try:
                outcome = self.cluster.mark_topics_for_deletion(todo)
            except PyklogError as e:
                outcome = dict.fromkeys(todo, e)
            marked = []
            for name in todo:
                e = outcome.get(name)
                if e is not None:
                    by_name[name] = e
                else:
                    marked.append(name)
            # Kafka's DelayedDeleteTopics: answer once the topics left the metadata (the controller
            # started deleting them), REQUEST_TIMED_OUT for those still there after timeout_ms
            # (timeout_ms <= 0: REQUEST_TIMED_OUT at once, as Kafka; librdkafka's operation_timeout=0
            # takes that as "in progress")
            timeout_ms = body.get("timeout_ms", 0)
            deadline = time.monotonic() + max(timeout_ms, 0) / 1000.0
            for name in marked:
                if timeout_ms <= 0 or not self._wait_until_gone(name, deadline):
                    by_name[name] = RequestTimedOutError(
                        f"topic {name!r} is marked for deletion; the controller has not started deleting it yet"
                    )
        results = []
        for i, (name, tid) in enumerate(wanted):
            err = errors.get(i, by_name.get(names.get(i)))
            code = err if isinstance(err, int) else err.code if err is not None else NONE
            message = (
                None if err is None else (f"no topic has the id {tid}" if isinstance(err, int) else str(err)[:1000])
            )
            results.append(
                {"name": names.get(i, name), "topic_id": ids.get(i, tid), "error_code": code, "error_message": message}
            )  # v5+
        self._respond(request, header, {"throttle_time_ms": 0, "responses": results})

    def handle_create_partitions(self, request, header, body):
        """CreatePartitions v0-3 (Kafka's ``ZkAdminManager.createPartitions``): grow each topic
        through :meth:`ZkCluster.create_partitions`, then wait (up to the request's timeout, at most
        a few seconds) until this broker's registry cache shows the new partitions, so a Metadata
        request right after the answer sees them.  A topic named twice gets INVALID_REQUEST, as Kafka."""
        validate_only = body["validate_only"]
        timeout_s = min(max(body["timeout_ms"], 0) / 1000.0, _CREATE_WAIT_S)
        seen: dict[str, int] = {}
        for t in body["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        results = []
        may_alter = self.auth.filter_authorized(request, AclOperation.ALTER, ResourceType.TOPIC, seen)
        for t in body["topics"]:
            name = t["name"]
            entry = {"name": name, "error_code": NONE, "error_message": None}
            try:
                if seen[name] > 1:
                    raise InvalidRequestError(f"duplicate topic name {name!r} in the request")
                if name not in may_alter:
                    raise TopicAuthorizationFailedError("The topic authorization is failed.")
                validate_topic_name(name)
                if is_protected(name):
                    # the coordinators (and the Spark sinks) map keys onto a fixed partition count
                    raise InvalidRequestError(
                        f"cannot add partitions to the internal topic {name!r}: its "
                        "coordinators hash keys over the configured partition count"
                    )
                count = t["count"]
                if count > MAX_PARTITIONS_PER_TOPIC:
                    raise InvalidPartitionsError(
                        f"topic {name!r}: {count} partitions requested, at most {MAX_PARTITIONS_PER_TOPIC} allowed"
                    )
                assignments = t.get("assignments")
                if assignments is not None:
                    assignments = [list(a["broker_ids"]) for a in assignments]
                new = self.cluster.create_partitions(name, count, assignments, validate_only)
                if not validate_only:
                    self._wait_for_partitions(name, max(new) + 1, timeout_s)
            except PyklogError as e:
                entry["error_code"] = e.code
                entry["error_message"] = str(e)[:1000]
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def _wait_until_gone(self, name: str, deadline: float) -> bool:
        """Poll this broker's registry cache until ``name`` is not in it (request thread)."""
        while True:
            if self.cluster.topic(name, refresh_if_missing=False) is None:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _wait_for_partitions(self, name: str, count: int, timeout_s: float) -> bool:
        """Poll this broker's registry cache until ``name`` has ``count`` partitions (request thread)."""
        deadline = time.monotonic() + timeout_s
        while True:
            parts = self.cluster.topic(name, refresh_if_missing=False) or {}
            if len(parts) >= count:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def handle_delete_records(self, request, header, body):
        """DeleteRecords v0-2 (Kafka's ``ReplicaManager.deleteRecords``): move each partition's log
        start offset up to the requested offset (-1: the high watermark) and answer the new low
        watermark.  OFFSET_OUT_OF_RANGE beyond the high watermark or below -1, POLICY_VIOLATION on a
        topic whose cleanup.policy lacks ``delete``; the whole segments below go with the next
        retention pass.  The log dir's checkpoints are written before the answer, so the new start
        offset survives a crash."""
        from pyklog.broker.errors import PolicyViolationError

        topics = []
        may_delete = self.auth.filter_authorized(
            request, AclOperation.DELETE, ResourceType.TOPIC, (t["name"] for t in body["topics"])
        )
        for t in body["topics"]:
            name = t["name"]
            parts = []
            for pd in t["partitions"]:
                p, offset = pd["partition_index"], pd["offset"]
                entry = {"partition_index": p, "low_watermark": -1, "error_code": NONE}
                try:
                    if name not in may_delete:
                        raise TopicAuthorizationFailedError("Topic authorization failed.")
                    if is_protected(name):  # Kafka's ReplicaManager.deleteRecords
                        raise InvalidTopicError(f"Cannot delete records of internal topic {name}")
                    lg = self.replica_manager.leader_log(name, p)
                    if not lg.config.delete:
                        raise PolicyViolationError(
                            f"records of partition {name}-{p} can not be deleted due to "
                            f"the configured policy (cleanup.policy={lg.config.cleanup_policy})"
                        )
                    hw = lg.high_watermark
                    target = hw if offset == -1 else offset
                    if target < 0 or target > hw:
                        raise OffsetOutOfRangeError(
                            f"cannot delete records of {name}-{p} before offset {offset}: "
                            f"expected -1 or an offset in [0, {hw}] (the high watermark)"
                        )
                    before = lg.log_start_offset
                    lg.increment_log_start_offset(target)
                    if lg.log_start_offset != before:
                        self.logs.checkpoint_log_start_offset(lg)
                        self.replica_manager.log_start_offset_moved(name, p)  # followers learn it now
                        log.info(
                            "DeleteRecords: log start offset of %s-%d moved from %d to %d",
                            name,
                            p,
                            before,
                            lg.log_start_offset,
                        )
                    entry["low_watermark"] = lg.log_start_offset
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    def handle_describe_log_dirs(self, request, header, body):
        """DescribeLogDirs v0-4: each of ``log.dirs`` with the partitions it holds (all, or those
        requested), their size in bytes and offset lag 0 (no future replicas, no replication); v3
        adds the top-level error code (0), v4 the volume's total and usable bytes (KIP-827, from
        ``os.statvfs`` of the log dir, as Kafka's ``FileStore.getTotalSpace``/``getUsableSpace``;
        -1 when the dir cannot be read: it then carries KAFKA_STORAGE_ERROR)."""
        if not self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            self._respond(
                request,
                header,
                {"throttle_time_ms": 0, "error_code": ClusterAuthorizationFailedError.code, "results": []},
            )
            return
        wanted = None
        if body["topics"] is not None:
            wanted = {(t["topic"], p) for t in body["topics"] for p in t["partitions"]}
        by_dir: dict[str, dict[str, list]] = {d: {} for d in self.logs.log_dirs}
        for (t, p), lg in sorted(self.logs.logs().items()):
            if wanted is not None and (t, p) not in wanted:
                continue
            d = os.path.dirname(lg.dir)
            try:
                size = lg.size
            except Exception:  # noqa: BLE001 - a log closed meanwhile
                continue
            by_dir.setdefault(d, {}).setdefault(t, []).append(
                {"partition_index": p, "partition_size": size, "offset_lag": 0, "is_future_key": False}
            )
        results = []
        for d, topics in by_dir.items():
            entry = {
                "error_code": NONE,
                "log_dir": d,
                "topics": [{"name": t, "partitions": parts} for t, parts in sorted(topics.items())],
            }
            if header.api_version >= 4:
                entry["total_bytes"], entry["usable_bytes"] = _volume_bytes(d)
                if entry["total_bytes"] < 0:
                    entry["error_code"] = KafkaStorageError.code
            if self.logs.failure_channel.has_offline_log_dir(d):  # Kafka: an offline dir, no partitions
                entry["error_code"] = KafkaStorageError.code
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": NONE, "results": results})
