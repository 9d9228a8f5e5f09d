"""Metadata and DescribeCluster: what the cluster looks like, from the ZooKeeper registry cache.

* Metadata v0-12 (v10+: topic ids, KIP-516, also to ask for a topic by id; auto-creates unknown
  topics when ``auto.create.topics.enable`` and the request allow it).
* DescribeCluster v0-1 (KIP-700, flexible).

Authorization (Kafka's KafkaApis): Metadata answers only topics the principal may DESCRIBE; asked
for all topics the others are left out, asked for by name they get TOPIC_AUTHORIZATION_FAILED
(without partitions or topic id).  Auto-creating a missing topic needs CREATE on the cluster or on
that topic (else TOPIC_AUTHORIZATION_FAILED).  The authorized-operations fields (Metadata v8+,
DescribeCluster) carry the principal's allowed operations as Kafka's bit field; cluster operations
only for a principal that may DESCRIBE the cluster (else 0).

Thread-safety: stateless; runs on every request handler thread.
"""

from __future__ import annotations

import logging

from pyklog.broker.errors import (
    InvalidTopicError,
    LeaderNotAvailableError,
    PyklogError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.security.acl import AUTHORIZED_OPERATIONS_OMITTED, AclOperation, ResourceType
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper
from pyklog.broker.server.handlers.responses import INTERNAL_TOPICS, NONE, RequestHandlers
from pyklog.broker.zk.topics import OFFSETS_TOPIC, validate_topic_name

log = logging.getLogger(__name__)

#: Kafka's value of an authorized-operations field the client did not ask for (Integer.MIN_VALUE)
NOT_REQUESTED_OPERATIONS = AUTHORIZED_OPERATIONS_OMITTED


class MetadataApis(RequestHandlers):
    """Metadata and DescribeCluster.  ``cluster`` is the started
    :class:`~pyklog.broker.zk.cluster.ZkCluster`; ``replica_manager`` auto-creates topics."""

    def __init__(self, config, cluster, replica_manager, *, auth: AuthHelper = ALLOW_ALL):
        self.config = config
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.auth = auth

    def _cluster_authorized_operations(self, request) -> int:
        if self.auth.authorize_cluster(request, AclOperation.DESCRIBE):
            return self.auth.authorized_operations(request, ResourceType.CLUSTER, "kafka-cluster")
        return 0

    def handle_metadata(self, request, header, body):
        version = header.api_version
        requested = body.get("topics")
        all_topics = self.cluster.topics()
        live = self.cluster.live_brokers()
        offline = self.cluster.offline_replicas()  # replicas on failed log dirs of live brokers
        # the endpoints of the listener the request came in on; brokers without it are left out (Kafka)
        brokers = [
            {"node_id": b, "host": h, "port": p, "rack": None}
            for b, (h, p) in sorted(self.cluster.live_brokers(request.listener_name).items())
        ]
        unknown_ids = []
        all_requested = requested is None or (version == 0 and not requested)
        if all_requested:
            names = sorted(all_topics)
        else:
            names = []
            for t in requested:
                if t["name"] is None:  # v12+: asked for by topic id (KIP-516)
                    if version < 12:  # Kafka rejects it too: v10-11 carry ids but cannot answer a null name
                        log.info(
                            "closing connection %d from %s (client %r): Metadata v%d asks for a topic by id; "
                            "topic names cannot be null before v12",
                            request.connection_id,
                            request.peer,
                            header.client_id,
                            version,
                        )
                        request.close_connection()
                        return
                    name = self.cluster.topic_name_by_id(t["topic_id"])
                    if name is None:
                        unknown_ids.append(t["topic_id"])
                        continue
                    t = {"name": name}
                names.append(t["name"])
            names = list(dict.fromkeys(names))
        allow_auto = self.config.auto_create_topics_enable and body.get("allow_auto_topic_creation", True)
        topics = [
            {"error_code": 100, "name": None, "topic_id": tid, "partitions": []}  # UNKNOWN_TOPIC_ID
            for tid in dict.fromkeys(unknown_ids)
        ]
        auth = self.auth
        denied: list[str] = []
        if auth.enabled:
            # topics the principal may not describe: hidden from "all topics", refused when named
            # (their existence is not disclosed either way)
            may_describe = {
                n
                for n in names
                if auth.authorize(
                    request, AclOperation.DESCRIBE, ResourceType.TOPIC, n, log_if_denied=not all_requested
                )
            }
            if not all_requested:  # asked for all topics, the others are simply left out
                denied = [n for n in names if n not in may_describe]
            names = [n for n in names if n in may_describe]
        may_create_any = None  # CREATE on the cluster, asked once if a topic is missing
        for name in names:
            parts = all_topics.get(name)
            code = NONE
            if (
                parts is None
                and allow_auto
                and auth.enabled
                and self.cluster.topic(name, refresh_if_missing=True) is None
            ):
                if may_create_any is None:
                    may_create_any = auth.authorize_cluster(request, AclOperation.CREATE, log_if_denied=False)
                if not may_create_any and not auth.authorize(request, AclOperation.CREATE, ResourceType.TOPIC, name):
                    denied.append(name)
                    continue
            if parts is None:
                parts, code = self._metadata_for_missing_topic(name, allow_auto)
            partitions = []
            for p, st in sorted((parts or {}).items()):
                partitions.append(
                    {
                        "error_code": NONE if st.leader >= 0 else LeaderNotAvailableError.code,
                        "partition_index": p,
                        "leader_id": st.leader,
                        "leader_epoch": st.leader_epoch,
                        "replica_nodes": list(st.replicas),
                        "isr_nodes": list(st.isr),  # the state znode's ISR, as Kafka's metadata cache
                        # down, or on a failed log dir of a live broker (Kafka's UpdateMetadata)
                        "offline_replicas": [
                            b for b in st.replicas if b not in live or (name, p) in offline.get(b, ())
                        ],
                    }
                )
            topics.append(
                {
                    "error_code": code,
                    "name": name,
                    "is_internal": name in INTERNAL_TOPICS,
                    "partitions": partitions,
                    "topic_id": self.cluster.topic_id(name) or ZERO_UUID,
                    "topic_authorized_operations": auth.authorized_operations(request, ResourceType.TOPIC, name)
                    if body.get("include_topic_authorized_operations")
                    else NOT_REQUESTED_OPERATIONS,
                }
            )
        for name in denied:
            topics.append(
                {
                    "error_code": TopicAuthorizationFailedError.code,
                    "name": name,
                    "is_internal": False,
                    "partitions": [],
                    "topic_id": ZERO_UUID,
                    "topic_authorized_operations": NOT_REQUESTED_OPERATIONS,
                }
            )
        self._respond(
            request,
            header,
            {
                "throttle_time_ms": 0,
                "brokers": brokers,
                "cluster_id": self.cluster.cluster_id,
                "controller_id": self.cluster.controller_id,
                "topics": topics,
                "cluster_authorized_operations": self._cluster_authorized_operations(request)
                if body.get("include_cluster_authorized_operations")
                else NOT_REQUESTED_OPERATIONS,
            },
        )

    def _metadata_for_missing_topic(self, name: str, allow_auto: bool):
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return None, InvalidTopicError.code
        parts = self.cluster.topic(name, refresh_if_missing=True)
        if parts is not None:
            return parts, NONE
        if not allow_auto or name == OFFSETS_TOPIC:
            return None, UnknownTopicOrPartitionError.code
        try:
            self.replica_manager.auto_create_topic(name)
        except PyklogError as e:
            return None, e.code
        parts = self.cluster.topic(name, refresh_if_missing=True)
        if parts is None:
            return None, LeaderNotAvailableError.code
        return parts, NONE

    def handle_describe_cluster(self, request, header, body):
        """DescribeCluster v0-1 (KIP-700, flexible): the cluster id, the controller (pyklog's: the
        lowest live broker id) and the live brokers, as Metadata reports them.  v1 endpoint type 2
        (controllers) gets MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE."""
        from pyklog.broker.errors import MismatchedEndpointTypeError, UnsupportedEndpointTypeError

        etype = body.get("endpoint_type", 1)
        resp = {
            "throttle_time_ms": 0,
            "error_code": NONE,
            "error_message": None,
            "endpoint_type": etype,
            "cluster_id": self.cluster.cluster_id or "",
            "controller_id": -1,
            "brokers": [],
            "cluster_authorized_operations": -2147483648,
        }
        if etype == 2:
            resp.update(
                error_code=MismatchedEndpointTypeError.code,
                endpoint_type=1,
                error_message="the request was sent to a broker, but asked for controller endpoints "
                "(pyklog has no KRaft controllers)",
            )
        elif etype != 1:
            resp.update(
                error_code=UnsupportedEndpointTypeError.code,
                endpoint_type=1,
                error_message=f"unsupported endpoint type {etype}; expected 1 (brokers)",
            )
        else:
            resp["controller_id"] = self.cluster.controller_id
            resp["brokers"] = [
                {"broker_id": b, "host": h, "port": p, "rack": None}
                for b, (h, p) in sorted(self.cluster.live_brokers(request.listener_name).items())
            ]
            if body.get("include_cluster_authorized_operations"):
                resp["cluster_authorized_operations"] = self._cluster_authorized_operations(request)
        self._respond(request, header, resp)
