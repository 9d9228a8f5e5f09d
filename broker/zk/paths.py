"""Every ZooKeeper path pyklog uses, built here and nowhere else (the seed's "ZooKeeper Directories").

Ephemeral nodes mark liveness, persistent nodes hold state:

    /cluster/id                                        persistent  {"version":"1","id":"<22 chars>"}
    /brokers/ids/[broker_id]                           ephemeral   {"host","port","endpoints","timestamp","version",...}
    /brokers/topics/[topic]                            persistent  {"version":1,"partitions":{"0":[replicas]}}
    /brokers/topics/[topic]/partitions/[p]/state       persistent  {"controller_epoch","leader","version","leader_epoch","isr"}
    /consumers/[group]/ids/[consumer_id]               ephemeral   {"version","subscription","pattern","timestamp"}
    /consumers/[group]/offsets/[topic]/[partition]     persistent  offset as decimal text
    /consumers/[group]/owners/[topic]/[partition]      ephemeral   consumer_id
"""

from __future__ import annotations

CLUSTER_ID = "/cluster/id"
BROKERS = "/brokers"
BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"


def child(parent: str, name: str) -> str:
    """The node ``name`` (a child as ``get_children`` lists it) under ``parent``."""
    return f"{parent}/{name}"


def broker_id(broker: int) -> str:
    return f"{BROKER_IDS}/{int(broker)}"


def broker_id_placeholder() -> str:
    """``/brokers/ids/?``: the path named in a decoding error when the caller gave none."""
    return f"{BROKER_IDS}/?"


def topic(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}"


def topic_partitions(name: str) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions"


def partition(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{int(partition_id)}"


def partition_state(name: str, partition_id: int) -> str:
    return f"{BROKER_TOPICS}/{name}/partitions/{int(partition_id)}/state"


def consumer_group(group: str) -> str:
    return f"{CONSUMERS}/{group}"


def consumer_ids(group: str) -> str:
    return f"{CONSUMERS}/{group}/ids"


def consumer_id(group: str, consumer: str) -> str:
    return f"{CONSUMERS}/{group}/ids/{consumer}"


def consumer_offsets(group: str, topic_name: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/offsets"
    return base if topic_name is None else f"{base}/{topic_name}"


def consumer_offset(group: str, topic_name: str, partition_id: int) -> str:
    return f"{CONSUMERS}/{group}/offsets/{topic_name}/{int(partition_id)}"


def consumer_fences(group: str) -> str:
    """pyklog's own record: ``/consumers/[group]/pyklog_fences``, parent of one ephemeral sequential
    node per member session (``[consumer_id]-[seq]``).  A sequence number is never reused, so the node
    names one ZooKeeper session of one member: a commit that checks it in the same multi-op cannot
    succeed once that session has expired (the zombie fence of connector.group)."""
    return f"{CONSUMERS}/{group}/pyklog_fences"


def consumer_fence_prefix(group: str, consumer: str) -> str:
    return f"{CONSUMERS}/{group}/pyklog_fences/{consumer}-"


def partition_owners(group: str, topic_name: str | None = None) -> str:
    base = f"{CONSUMERS}/{group}/owners"
    return base if topic_name is None else f"{base}/{topic_name}"


def partition_owner(group: str, topic_name: str, partition_id: int) -> str:
    return f"{CONSUMERS}/{group}/owners/{topic_name}/{int(partition_id)}"


# Topic configuration, admin requests and producer id blocks (Kafka's ZkData):
#   /config/topics/[topic]           persistent  {"version":1,"config":{"cleanup.policy":"compact",...}}
#   /admin/delete_topics/[topic]     persistent  (empty) the topic is marked for deletion (DeleteTopics, as
#                                                 kafka-topics.sh --zookeeper writes it) until the controller
#                                                 has deleted it
#   /latest_producer_id_block        persistent  {"version":1,"broker":id,"block_start":"0","block_end":"999"}
CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
ADMIN = "/admin"
ADMIN_DELETE_TOPICS = "/admin/delete_topics"
LATEST_PRODUCER_ID_BLOCK = "/latest_producer_id_block"


def topic_config(name: str) -> str:
    return f"{CONFIG_TOPICS}/{name}"


def delete_topic_request(name: str) -> str:
    return f"{ADMIN_DELETE_TOPICS}/{name}"


# pyklog's own record of a completed topic deletion (Kafka's controller sends StopReplica with
# deletePartitions=true instead; pyklog has no controller-to-broker requests):
#   /admin/deleted_topics/[topic]    persistent  (empty) written in the deletion's multi-op, removed
#                                                 when a topic of that name is created again
# A broker deletes a local log whose topic is absent from /brokers/topics only when this node exists.
ADMIN_DELETED_TOPICS = "/admin/deleted_topics"


def deleted_topic_record(name: str) -> str:
    return f"{ADMIN_DELETED_TOPICS}/{name}"


# pyklog's own replica deletion of a topic being deleted (Kafka's controller sends
# StopReplica(deletePartitions=true) to each replica and waits for the answers):
#   /admin/replica_deletions/[topic]        persistent  {"version":1,"replicas":[broker ids]} created by the
#                                                       controller when it starts deleting the topic: every
#                                                       broker stops its replicas of it and deletes their logs;
#                                                       brokers hide the topic from Metadata from then on
#   /admin/replica_deletions/[topic]/[id]   persistent  (empty) broker [id] deleted its replicas (the answer)
# The controller removes the topic's nodes, its marker and these nodes in one multi-op once every
# broker listed has answered; a broker that is down answers when it starts again.
ADMIN_REPLICA_DELETIONS = "/admin/replica_deletions"


def replica_deletion(topic: str) -> str:
    return f"{ADMIN_REPLICA_DELETIONS}/{topic}"


def replica_deletion_done(topic: str, broker_id: int) -> str:
    return f"{ADMIN_REPLICA_DELETIONS}/{topic}/{int(broker_id)}"


# Dynamic broker configs (Kafka's ZkData ConfigEntityZNode for ConfigType.Broker, KIP-226):
#   /config/brokers/[id]             persistent  {"version":1,"config":{"log.retention.ms":"3600000",...}}
#   /config/brokers/<default>        persistent  the cluster-wide defaults (the resource name "" of AlterConfigs)
CONFIG_BROKERS = "/config/brokers"
BROKER_DEFAULT_ENTITY = "<default>"


def broker_config(entity: str | int) -> str:
    """``/config/brokers/<id>``, or ``/config/brokers/<default>`` for ``""`` / ``"<default>"``."""
    entity = str(entity)
    if entity in ("", BROKER_DEFAULT_ENTITY):
        return f"{CONFIG_BROKERS}/{BROKER_DEFAULT_ENTITY}"
    if not entity.isdigit():
        raise ValueError(f"a broker config entity is a broker id or '' / '<default>', got {entity!r}")
    return f"{CONFIG_BROKERS}/{int(entity)}"


# SCRAM credentials (Kafka's ConfigEntityZNode for ConfigType.User) and delegation tokens: with
# zookeeper.set.acl readable only by their owner (Kafka's SensitiveRootPaths, pyklog.broker.zk.znode_acls):
#   /config/users/[user]             persistent  {"version":1,"config":{"SCRAM-SHA-512":"salt=...,..."}}
#   /delegation_token                persistent  (Kafka's; pyklog writes none)
CONFIG_USERS = "/config/users"
DELEGATION_TOKEN = "/delegation_token"

# Kafka's other top-level roots, named so that zookeeper.set.acl and the security migration can
# secure them (Kafka's ZkData.SecureRootPaths; the ACL store's roots are ZkAclStore.securePaths):
CLUSTER = "/cluster"
LOG_DIR_EVENT_NOTIFICATION = "/log_dir_event_notification"
FEATURE = "/feature"
MIGRATION = "/migration"
ACL_STORE_ROOTS = ("/kafka-acl", "/kafka-acl-extended", "/kafka-acl-changes", "/kafka-acl-extended-changes")


def sanitize_user(name: str) -> str:
    """Kafka's ``Sanitizer.sanitize``: a user name as a znode name (URL-encoded)."""
    from urllib.parse import quote

    return quote(name, safe="-._").replace("~", "%7E")


def desanitize_user(name: str) -> str:
    from urllib.parse import unquote

    return unquote(name)


def user_config(name: str) -> str:
    """``/config/users/<sanitized user name>``."""
    if not name:
        raise ValueError("a user name must not be empty")
    return f"{CONFIG_USERS}/{sanitize_user(name)}"


# Config change notifications (Kafka's ZkData ConfigEntityChangeNotificationZNode):
#   /config/changes/config_change_[seq]   persistent sequential  {"version":2,"entity_path":"topics/<topic>"}
CONFIG_CHANGES = "/config/changes"
CONFIG_CHANGE_PREFIX = "/config/changes/config_change_"

# Kafka's IsrChangeNotificationZNode: a partition's leader writes a sequential child
# ``isr_change_<seq>`` = ``{"version":1,"partitions":[{"topic":t,"partition":p}]}`` after changing
# the ISR in the partition state, so the controller propagates it to every broker's metadata.
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
ISR_CHANGE_PREFIX = "/isr_change_notification/isr_change_"

# Kafka's LogDirEventNotificationZNode: a broker whose log dir went offline writes a sequential child
# ``log_dir_event_<seq>`` = ``{"version":1,"broker":N,"event":1}`` (1: LogDirFailure), plus pyklog's
# ``"partitions"`` (the replicas it lost: Kafka's controller learns them from LeaderAndIsr answers,
# which ZooKeeper-only pyklog does not send); the controller moves their leadership and ISR.
# (LOG_DIR_EVENT_NOTIFICATION, the root, is above with Kafka's other secured roots.)
LOG_DIR_EVENT_PREFIX = "/log_dir_event_notification/log_dir_event_"


def log_dir_event_notification(child: str) -> str:
    return f"{LOG_DIR_EVENT_NOTIFICATION}/{child}"


# pyklog's own record of the replicas on a live broker's failed log dirs, which Metadata reports as
# offline_replicas (Kafka's controller sends them to every broker in UpdateMetadata):
#   /offline_replicas/[id]-[seq]   persistent  {"version":1,"partitions":[{"topic":..,"partition":..}]}
#                                              one node per failure the broker reported; the broker removes
#                                              its nodes when it starts (its log dirs are online again)
# Only the nodes of registered brokers count: every replica of a broker that is down is offline.
OFFLINE_REPLICAS = "/offline_replicas"


def offline_replicas_prefix(broker_id: int) -> str:
    return f"{OFFLINE_REPLICAS}/{int(broker_id)}-"


# The controller (Kafka's ZkData ControllerZNode, ControllerEpochZNode, PreferredReplicaElectionZNode,
# ReassignPartitionsZNode, IsrChangeNotificationZNode), used by pyklog.broker.controller:
#   /controller                         ephemeral   {"version":1,"brokerid":N,"timestamp":"<ms>"}
#   /controller_epoch                   persistent  the epoch as decimal text, +1 by each new controller
#   /admin/preferred_replica_election   persistent  {"version":1,"partitions":[{"topic":..,"partition":..}]}
#   /admin/reassign_partitions          persistent  {"version":1,"partitions":[{"topic":..,"partition":..,
#                                                    "replicas":[..]}]}
#   /isr_change_notification/isr_change_[seq]   persistent sequential, written by partition leaders
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ADMIN_PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
ADMIN_REASSIGN_PARTITIONS = "/admin/reassign_partitions"


def isr_change_notification(child: str) -> str:
    return f"{ISR_CHANGE_NOTIFICATION}/{child}"


# The exactly-once Spark stream sink's records (pyklog's own, pyklog.connector.spark.sink's
# SinkTransactionLog), under the sink's zookeeper.connect chroot:
#   /pyklog_spark_sinks/[query id]/commits/[batch id]                            persistent  CommitRecord JSON
#   /pyklog_spark_sinks/[query id]/transactions/[batch id]/[transactional id]    persistent  {"partition","attempt"}
SPARK_SINKS = "/pyklog_spark_sinks"


def spark_sink_commits(query_id: str) -> str:
    return f"{SPARK_SINKS}/{query_id}/commits"


def spark_sink_commit(query_id: str, batch_id: int) -> str:
    return f"{SPARK_SINKS}/{query_id}/commits/{batch_id}"


def spark_sink_transactions(query_id: str, batch_id: int | None = None) -> str:
    base = f"{SPARK_SINKS}/{query_id}/transactions"
    return base if batch_id is None else f"{base}/{batch_id}"


# ACLs (Kafka's AclAuthorizer in ZooKeeper mode, ZkData.scala's ZkAclStore):
#   /kafka-acl/[ResourceType]/[name]                               persistent  {"version":1,"acls":[...]}  (LITERAL)
#   /kafka-acl-extended/prefixed/[ResourceType]/[name]             persistent  the same (PREFIXED)
#   /kafka-acl-changes/acl_changes_[seq]                           persistent sequential  "<TYPE>:<name>"
#   /kafka-acl-extended-changes/acl_changes_[seq]                  persistent sequential  {"version":1,"resourceType",
#                                                                                          "name","patternType"}
# [ResourceType] is Kafka's PascalCase name (Topic, Group, Cluster, TransactionalId, DelegationToken, User).
ACL_LITERAL = "/kafka-acl"
ACL_EXTENDED = "/kafka-acl-extended"
ACL_LITERAL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
ACL_CHANGE_PREFIX = "acl_changes_"


def acl_store(pattern_type_name: str) -> str:
    """The root of a pattern type's ACLs: ``/kafka-acl`` for LITERAL, ``/kafka-acl-extended/<type>``
    (lower case, e.g. ``prefixed``) for the others."""
    if pattern_type_name.upper() == "LITERAL":
        return ACL_LITERAL
    return f"{ACL_EXTENDED}/{pattern_type_name.lower()}"


def acl_resource_type(pattern_type_name: str, resource_type_name: str) -> str:
    return f"{acl_store(pattern_type_name)}/{resource_type_name}"


def acl_resource(pattern_type_name: str, resource_type_name: str, name: str) -> str:
    return f"{acl_store(pattern_type_name)}/{resource_type_name}/{name}"


def acl_changes(pattern_type_name: str) -> str:
    """Where a change of a pattern type's ACLs is announced."""
    return ACL_LITERAL_CHANGES if pattern_type_name.upper() == "LITERAL" else ACL_EXTENDED_CHANGES


def acl_change(pattern_type_name: str, child: str = "") -> str:
    """``/kafka-acl-changes/acl_changes_`` (the prefix of a new sequential node) or a child."""
    return f"{acl_changes(pattern_type_name)}/{child or ACL_CHANGE_PREFIX}"
