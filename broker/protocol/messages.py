"""The message schemas pyklog speaks, transcribed from Kafka's JSON schemas.

Source: ``clients/src/main/resources/common/message/<Name>Request.json`` / ``<Name>Response.json``
in apache/kafka, field names as in Kafka 4.x (the same files kafka-python 3.0.12 bundles in
``kafka/protocol/schemas/resources/``), up to the versions in :data:`SUPPORTED`, flexible ones
(:data:`FLEXIBLE`) included; tagged fields carry ``tag=``/``tagged=`` (Kafka's ``tag`` and
``taggedVersions``).  Tagged fields pyklog neither sends nor reads are left out (a decoder skips
unknown tags).
Dict keys are ``snake_case(name)``.

Names worth knowing (they changed across Kafka releases; these are the current ones):
Produce request ``topic_data[].partition_data[].{index, records}``, response
``responses[].partition_responses[].{index, error_code, base_offset, ...}``; Fetch request
``topics[].partitions[].{partition, fetch_offset, partition_max_bytes, ...}`` and
``forgotten_topics_data``; Fetch response ``responses[].partitions[].{partition_index, ...,
records}``; OffsetCommit ``generation_id_or_member_epoch``; CreateTopics ``timeout_ms``,
``validate_only``; DeleteTopics ``topic_names``.
"""

from __future__ import annotations

import enum

from pyklog.broker.protocol.schema import A, F, Field
from pyklog.broker.protocol.types import BOOL, BYTES, INT8, INT16, INT32, INT64, RECORDS, STRING, UUID


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23  # replication and KIP-320 consumers
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    # ACLs (the authorizer)
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    # admin APIs (kafka-admin)
    DELETE_RECORDS = 21
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLUSTER = 60
    # transaction admin APIs (KIP-664, flex-admin)
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    # the controller (pyklog.broker.controller)
    CONTROLLED_SHUTDOWN = 7
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45  # KIP-455
    LIST_PARTITION_REASSIGNMENTS = 46
    # authentication (KIP-43, KIP-152, KIP-368) and SCRAM credentials (KIP-554)
    SASL_HANDSHAKE = 17
    SASL_AUTHENTICATE = 36
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51


#: (min, max) version pyklog serves per API: min 0 (librdkafka gates features on ranges
#: reaching down to 0), max = the highest version implemented (flexible ones included).
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 9),
    ApiKey.FETCH: (0, 16),  # v13 topic ids (KIP-516), v15 replica state, v16 node endpoints
    ApiKey.LIST_OFFSETS: (0, 8),  # v7 max timestamp (KIP-734), v8 earliest local (KIP-405)
    ApiKey.METADATA: (0, 12),
    ApiKey.OFFSET_COMMIT: (0, 8),
    ApiKey.OFFSET_FETCH: (0, 9),  # v7 RequireStable (KIP-447), v8 several groups (KIP-709), v9 member (KIP-848)
    ApiKey.FIND_COORDINATOR: (0, 4),  # v4 batched keys (KIP-699)
    ApiKey.JOIN_GROUP: (0, 9),  # v8 reason (KIP-800), v9 skip assignment (KIP-814, always false)
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),  # v5 reason (KIP-800)
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 7),  # v7 topic ids in the response (KIP-516)
    ApiKey.DELETE_TOPICS: (0, 6),  # v6 by topic id (KIP-516)
    ApiKey.INIT_PRODUCER_ID: (0, 4),  # v3 producer id/epoch (KIP-360), v4 PRODUCER_FENCED
    # v2+ CurrentLeaderEpoch fencing (KIP-320), v3+ ReplicaId, v4 flexible; Kafka 4 dropped v0-1
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    # transactions (KIP-98): the codecs exist for these versions; ApiVersions advertises an API only
    # once KafkaApis has a handler for it
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),  # broker to broker; Kafka 4 dropped v0 for v1 (flexible)
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),  # v3 member id, generation, group instance id
    # ACLs: v1 pattern types (KIP-290), v2 flexible
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    # admin APIs (kafka-admin, flex-admin): a Kafka 3.7 broker's versions, flexible ones included
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    # transaction admin APIs (KIP-664): flexible from v0; ListTransactions v1 (KIP-994) adds the
    # duration filter
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    # the controller: ControlledShutdown v0 has request header v0 (Kafka 0.8's, no client_id)
    ApiKey.CONTROLLED_SHUTDOWN: (0, 3),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    # authentication: SaslHandshake v1 announces SaslAuthenticate; SaslAuthenticate v1 the session
    # lifetime (KIP-368), v2 flexible; the SCRAM credential APIs (KIP-554) flexible from v0
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

#: The first flexible version (KIP-482) of each API: Kafka's ``flexibleVersions`` "N+".  From it on
#: requests use header v2, responses header v1 (not ApiVersions), and the body compact lengths and
#: tagged field sections (see :mod:`pyklog.broker.protocol.schema`).  An API gains flexible versions
#: by listing it here and raising its SUPPORTED max, once its schema has the new versions' fields.
FLEXIBLE: dict[int, int] = {  # ApiKey -> first flexible version; looked up by a plain int too
    ApiKey.PRODUCE: 9,
    ApiKey.FETCH: 12,
    ApiKey.LIST_OFFSETS: 6,
    ApiKey.METADATA: 9,
    ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 6,
    ApiKey.FIND_COORDINATOR: 3,
    ApiKey.JOIN_GROUP: 6,
    ApiKey.HEARTBEAT: 4,
    ApiKey.LEAVE_GROUP: 4,
    ApiKey.SYNC_GROUP: 4,
    ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 3,
    ApiKey.API_VERSIONS: 3,
    ApiKey.CREATE_TOPICS: 5,
    ApiKey.DELETE_TOPICS: 4,
    ApiKey.INIT_PRODUCER_ID: 2,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: 4,
    ApiKey.ADD_PARTITIONS_TO_TXN: 3,
    ApiKey.ADD_OFFSETS_TO_TXN: 3,
    ApiKey.END_TXN: 3,
    ApiKey.WRITE_TXN_MARKERS: 1,
    ApiKey.TXN_OFFSET_COMMIT: 3,
    ApiKey.DESCRIBE_ACLS: 2,
    ApiKey.CREATE_ACLS: 2,
    ApiKey.DELETE_ACLS: 2,
    # admin APIs (kafka-admin, flex-admin)
    ApiKey.DELETE_RECORDS: 2,
    ApiKey.DESCRIBE_CONFIGS: 4,
    ApiKey.ALTER_CONFIGS: 2,
    ApiKey.DESCRIBE_LOG_DIRS: 2,
    ApiKey.CREATE_PARTITIONS: 2,
    ApiKey.DELETE_GROUPS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1,
    ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.DESCRIBE_PRODUCERS: 0,
    ApiKey.DESCRIBE_TRANSACTIONS: 0,
    ApiKey.LIST_TRANSACTIONS: 0,
    ApiKey.CONTROLLED_SHUTDOWN: 3,
    ApiKey.ELECT_LEADERS: 2,
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: 0,
    ApiKey.LIST_PARTITION_REASSIGNMENTS: 0,
    ApiKey.SASL_AUTHENTICATE: 2,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: 0,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: 0,
}

#: Kafka's names of every API key (also those pyklog does not serve), for logs.
API_NAMES: dict[int, str] = {
    0: "Produce",
    1: "Fetch",
    2: "ListOffsets",
    3: "Metadata",
    4: "LeaderAndIsr",
    5: "StopReplica",
    6: "UpdateMetadata",
    7: "ControlledShutdown",
    8: "OffsetCommit",
    9: "OffsetFetch",
    10: "FindCoordinator",
    11: "JoinGroup",
    12: "Heartbeat",
    13: "LeaveGroup",
    14: "SyncGroup",
    15: "DescribeGroups",
    16: "ListGroups",
    17: "SaslHandshake",
    18: "ApiVersions",
    19: "CreateTopics",
    20: "DeleteTopics",
    21: "DeleteRecords",
    22: "InitProducerId",
    23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn",
    25: "AddOffsetsToTxn",
    26: "EndTxn",
    27: "WriteTxnMarkers",
    28: "TxnOffsetCommit",
    29: "DescribeAcls",
    30: "CreateAcls",
    31: "DeleteAcls",
    32: "DescribeConfigs",
    33: "AlterConfigs",
    34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs",
    36: "SaslAuthenticate",
    37: "CreatePartitions",
    38: "CreateDelegationToken",
    39: "RenewDelegationToken",
    40: "ExpireDelegationToken",
    41: "DescribeDelegationToken",
    42: "DeleteGroups",
    43: "ElectLeaders",
    44: "IncrementalAlterConfigs",
    45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments",
    47: "OffsetDelete",
    48: "DescribeClientQuotas",
    49: "AlterClientQuotas",
    50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials",
    55: "DescribeQuorum",
    57: "UpdateFeatures",
    60: "DescribeCluster",
    61: "DescribeProducers",
    65: "DescribeTransactions",
    66: "ListTransactions",
    67: "AllocateProducerIds",
    68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe",
    71: "GetTelemetrySubscriptions",
    72: "PushTelemetry",
    74: "ListConfigResources",
    75: "DescribeTopicPartitions",
}


def api_name(api_key: int) -> str:
    return API_NAMES.get(int(api_key), f"UnknownApi{int(api_key)}")


_THROTTLE = "ThrottleTimeMs"

# ---------------------------------------------------------------------------- ApiVersions 18

API_VERSIONS_REQUEST = [  # v0-2 have no fields
    F("ClientSoftwareName", STRING, "3+"),  # KIP-511, e.g. "apache-kafka-java", "librdkafka"
    F("ClientSoftwareVersion", STRING, "3+"),
]

API_VERSIONS_RESPONSE = [
    F("ErrorCode", INT16),
    A(
        "ApiKeys",
        fields=[
            F("ApiKey", INT16),
            F("MinVersion", INT16),
            F("MaxVersion", INT16),
        ],
    ),
    F(_THROTTLE, INT32, "1+"),
    # KIP-584 feature flags (pyklog has none: left empty / at their defaults)
    A(
        "SupportedFeatures",
        "3+",
        tag=0,
        tagged="3+",
        fields=[
            F("Name", STRING, "3+"),
            F("MinVersion", INT16, "3+"),
            F("MaxVersion", INT16, "3+"),
        ],
    ),
    F("FinalizedFeaturesEpoch", INT64, "3+", default=-1, tag=1, tagged="3+"),
    A(
        "FinalizedFeatures",
        "3+",
        tag=2,
        tagged="3+",
        fields=[
            F("Name", STRING, "3+"),
            F("MaxVersionLevel", INT16, "3+"),
            F("MinVersionLevel", INT16, "3+"),
        ],
    ),
    F("ZkMigrationReady", BOOL, "3+", default=False, tag=3, tagged="3+"),
]

# ---------------------------------------------------------------------------- Metadata 3

METADATA_REQUEST = [
    # v0: empty array = all topics (null not allowed); v1+: null = all, empty = none
    A(
        "Topics",
        nullable="1+",
        fields=[
            F("TopicId", UUID, "10+"),  # v10+: a topic may be asked for by id (name null)
            F("Name", STRING, nullable="10+"),
        ],
    ),
    F("AllowAutoTopicCreation", BOOL, "4+", default=True),
    F("IncludeClusterAuthorizedOperations", BOOL, "8-10"),
    F("IncludeTopicAuthorizedOperations", BOOL, "8+"),
]

METADATA_RESPONSE = [
    F(_THROTTLE, INT32, "3+"),
    A(
        "Brokers",
        fields=[
            F("NodeId", INT32),
            F("Host", STRING),
            F("Port", INT32),
            F("Rack", STRING, "1+", nullable="1+", default=None),
        ],
    ),
    F("ClusterId", STRING, "2+", nullable="2+", default=None),
    F("ControllerId", INT32, "1+", default=-1),
    A(
        "Topics",
        fields=[
            F("ErrorCode", INT16),
            F("Name", STRING, nullable="12+"),  # v12+: null for an unknown topic asked for by id
            F("TopicId", UUID, "10+"),  # KIP-516: changes when a topic is re-created
            F("IsInternal", BOOL, "1+", default=False),
            A(
                "Partitions",
                fields=[
                    F("ErrorCode", INT16),
                    F("PartitionIndex", INT32),
                    F("LeaderId", INT32),
                    F("LeaderEpoch", INT32, "7+", default=-1),
                    F("ReplicaNodes", "[]int32"),
                    F("IsrNodes", "[]int32"),
                    F("OfflineReplicas", "[]int32", "5+"),
                ],
            ),
            F("TopicAuthorizedOperations", INT32, "8+", default=-2147483648),
        ],
    ),
    F("ClusterAuthorizedOperations", INT32, "8-10", default=-2147483648),
]

# ---------------------------------------------------------------------------- Produce 0

PRODUCE_REQUEST = [
    F("TransactionalId", STRING, "3+", nullable="3+", default=None),
    F("Acks", INT16),
    F("TimeoutMs", INT32),
    A(
        "TopicData",
        fields=[
            F("Name", STRING),
            A(
                "PartitionData",
                fields=[
                    F("Index", INT32),
                    F("Records", RECORDS, nullable="0+"),
                ],
            ),
        ],
    ),
]

PRODUCE_RESPONSE = [
    A(
        "Responses",
        fields=[
            F("Name", STRING),
            A(
                "PartitionResponses",
                fields=[
                    F("Index", INT32),
                    F("ErrorCode", INT16),
                    F("BaseOffset", INT64),
                    F("LogAppendTimeMs", INT64, "2+", default=-1),
                    F("LogStartOffset", INT64, "5+", default=-1),
                    A(
                        "RecordErrors",
                        "8+",
                        fields=[
                            F("BatchIndex", INT32, "8+"),
                            F("BatchIndexErrorMessage", STRING, "8+", nullable="8+", default=None),
                        ],
                    ),
                    F("ErrorMessage", STRING, "8+", nullable="8+", default=None),
                ],
            ),
        ],
    ),
    F(_THROTTLE, INT32, "1+"),
]

# ---------------------------------------------------------------------------- Fetch 1

FETCH_REQUEST = [
    F("ReplicaId", INT32, "0-14", default=-1),  # v15+: the tagged ReplicaState (a follower's id and
    # broker epoch, KIP-903) instead; the schema engine has no tagged structs yet, so pyklog skips it
    # (consumers never send it) and a v15+ fetch is a consumer's
    F("MaxWaitMs", INT32),
    F("MinBytes", INT32),
    F("MaxBytes", INT32, "3+", default=0x7FFFFFFF),
    F("IsolationLevel", INT8, "4+", default=0),
    F("SessionId", INT32, "7+", default=0),
    F("SessionEpoch", INT32, "7+", default=-1),
    A(
        "Topics",
        fields=[
            F("Topic", STRING, "0-12"),
            F("TopicId", UUID, "13+"),  # KIP-516: v13+ names topics by id
            A(
                "Partitions",
                fields=[
                    F("Partition", INT32),
                    F("CurrentLeaderEpoch", INT32, "9+", default=-1),
                    F("FetchOffset", INT64),
                    F("LastFetchedEpoch", INT32, "12+", default=-1),  # followers only (KIP-595)
                    F("LogStartOffset", INT64, "5+", default=-1),
                    F("PartitionMaxBytes", INT32),
                ],
            ),
        ],
    ),
    A(
        "ForgottenTopicsData",
        "7+",
        fields=[
            F("Topic", STRING, "7-12"),
            F("TopicId", UUID, "13+"),
            F("Partitions", "[]int32", "7+"),
        ],
    ),
    F("RackId", STRING, "11+", default=""),
    F("ClusterId", STRING, "12+", nullable="12+", default=None, tag=0, tagged="12+"),
]

FETCH_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16, "7+"),
    F("SessionId", INT32, "7+", default=0),
    A(
        "Responses",
        fields=[
            F("Topic", STRING, "0-12"),
            F("TopicId", UUID, "13+"),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                    F("HighWatermark", INT64),
                    F("LastStableOffset", INT64, "4+", default=-1),
                    F("LogStartOffset", INT64, "5+", default=-1),
                    A(
                        "AbortedTransactions",
                        "4+",
                        nullable="4+",
                        fields=[
                            F("ProducerId", INT64, "4+"),
                            F("FirstOffset", INT64, "4+"),
                        ],
                    ),
                    F("PreferredReadReplica", INT32, "11+", default=-1),
                    F("Records", RECORDS, nullable="0+"),
                ],
            ),
        ],
    ),
    # v16+ (KIP-951): the endpoints of the leaders named in NOT_LEADER hints; pyklog sends none
    A(
        "NodeEndpoints",
        "16+",
        tag=0,
        tagged="16+",
        fields=[
            F("NodeId", INT32, "16+"),
            F("Host", STRING, "16+"),
            F("Port", INT32, "16+"),
            F("Rack", STRING, "16+", nullable="16+", default=None),
        ],
    ),
]

# ---------------------------------------------------------------------------- ListOffsets 2

LIST_OFFSETS_REQUEST = [
    F("ReplicaId", INT32),
    F("IsolationLevel", INT8, "2+"),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("CurrentLeaderEpoch", INT32, "4+", default=-1),
                    F("Timestamp", INT64),
                    F("MaxNumOffsets", INT32, "0", default=1),
                ],
            ),
        ],
    ),
]

LIST_OFFSETS_RESPONSE = [
    F(_THROTTLE, INT32, "2+"),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                    F("OldStyleOffsets", "[]int64", "0"),
                    F("Timestamp", INT64, "1+", default=-1),
                    F("Offset", INT64, "1+", default=-1),
                    F("LeaderEpoch", INT32, "4+", default=-1),
                ],
            ),
        ],
    ),
]

# ---------------------------------------------------------------------------- OffsetCommit 8

OFFSET_COMMIT_REQUEST = [
    F("GroupId", STRING),
    F("GenerationIdOrMemberEpoch", INT32, "1+", default=-1),
    F("MemberId", STRING, "1+"),
    F("GroupInstanceId", STRING, "7+", nullable="7+", default=None),
    F("RetentionTimeMs", INT64, "2-4", default=-1),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("CommittedOffset", INT64),
                    F("CommittedLeaderEpoch", INT32, "6+", default=-1),
                    F("CommitTimestamp", INT64, "1", default=-1),
                    F("CommittedMetadata", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
]

OFFSET_COMMIT_RESPONSE = [
    F(_THROTTLE, INT32, "3+"),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                ],
            ),
        ],
    ),
]

# ---------------------------------------------------------------------------- OffsetFetch 9

OFFSET_FETCH_REQUEST = [
    F("GroupId", STRING, "0-7"),
    # v2+: null = all partitions the group committed
    A(
        "Topics",
        "0-7",
        nullable="2-7",
        fields=[
            F("Name", STRING, "0-7"),
            F("PartitionIndexes", "[]int32", "0-7"),
        ],
    ),
    A(
        "Groups",
        "8+",
        fields=[  # v8+: several groups in one request (KIP-709)
            F("GroupId", STRING, "8+"),
            # v9+ (KIP-848): the consumer-protocol member asking; classic groups ignore them, as Kafka
            F("MemberId", STRING, "9+", nullable="9+", default=None),
            F("MemberEpoch", INT32, "9+", default=-1),
            A(
                "Topics",
                "8+",
                nullable="8+",
                fields=[
                    F("Name", STRING, "8+"),
                    F("PartitionIndexes", "[]int32", "8+"),
                ],
            ),
        ],
    ),
    F("RequireStable", BOOL, "7+", default=False),  # KIP-447: UNSTABLE_OFFSET_COMMIT for pending txn offsets
]

OFFSET_FETCH_RESPONSE = [
    F(_THROTTLE, INT32, "3+"),
    A(
        "Topics",
        "0-7",
        fields=[
            F("Name", STRING, "0-7"),
            A(
                "Partitions",
                "0-7",
                fields=[
                    F("PartitionIndex", INT32, "0-7"),
                    F("CommittedOffset", INT64, "0-7"),
                    F("CommittedLeaderEpoch", INT32, "5-7", default=-1),
                    F("Metadata", STRING, "0-7", nullable="0-7"),
                    F("ErrorCode", INT16, "0-7"),
                ],
            ),
        ],
    ),
    F("ErrorCode", INT16, "2-7", default=0),
    A(
        "Groups",
        "8+",
        fields=[
            F("GroupId", STRING, "8+"),
            A(
                "Topics",
                "8+",
                fields=[
                    F("Name", STRING, "8+"),
                    A(
                        "Partitions",
                        "8+",
                        fields=[
                            F("PartitionIndex", INT32, "8+"),
                            F("CommittedOffset", INT64, "8+"),
                            F("CommittedLeaderEpoch", INT32, "8+", default=-1),
                            F("Metadata", STRING, "8+", nullable="8+"),
                            F("ErrorCode", INT16, "8+"),
                        ],
                    ),
                ],
            ),
            F("ErrorCode", INT16, "8+", default=0),
        ],
    ),
]

# ---------------------------------------------------------------------------- FindCoordinator 10

FIND_COORDINATOR_REQUEST = [
    F("Key", STRING, "0-3"),
    F("KeyType", INT8, "1+", default=0),
    F("CoordinatorKeys", "[]string", "4+"),  # v4+: a batch of keys (KIP-699)
]

FIND_COORDINATOR_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16, "0-3"),
    F("ErrorMessage", STRING, "1-3", nullable="1-3", default=None),
    F("NodeId", INT32, "0-3"),
    F("Host", STRING, "0-3"),
    F("Port", INT32, "0-3"),
    A(
        "Coordinators",
        "4+",
        fields=[  # v4+: one result per key
            F("Key", STRING, "4+"),
            F("NodeId", INT32, "4+"),
            F("Host", STRING, "4+"),
            F("Port", INT32, "4+"),
            F("ErrorCode", INT16, "4+"),
            F("ErrorMessage", STRING, "4+", nullable="4+", default=None),
        ],
    ),
]

# ---------------------------------------------------------------------------- JoinGroup 11
# (group membership: broker.coordinator.group.coordinator; Kafka's classic group protocol)

JOIN_GROUP_REQUEST = [
    F("GroupId", STRING),
    F("SessionTimeoutMs", INT32),
    F("RebalanceTimeoutMs", INT32, "1+", default=-1),  # v0: the session timeout is the rebalance timeout
    F("MemberId", STRING),
    F("GroupInstanceId", STRING, "5+", nullable="5+", default=None),  # KIP-345 static membership
    F("ProtocolType", STRING),
    A(
        "Protocols",
        fields=[
            F("Name", STRING),
            F("Metadata", BYTES, default=b""),
        ],
    ),
    F("Reason", STRING, "8+", nullable="8+", default=None),  # KIP-800: why the member (re)joins, logged
]

JOIN_GROUP_RESPONSE = [
    F(_THROTTLE, INT32, "2+"),
    F("ErrorCode", INT16),
    F("GenerationId", INT32, default=-1),
    F("ProtocolType", STRING, "7+", nullable="7+", default=None),
    F("ProtocolName", STRING, nullable="7+"),
    F("Leader", STRING),
    F("SkipAssignment", BOOL, "9+", default=False),  # KIP-814: only for KRaft-era server-side assignors
    F("MemberId", STRING),
    A(
        "Members",
        fields=[  # only the leader gets the members
            F("MemberId", STRING),
            F("GroupInstanceId", STRING, "5+", nullable="5+", default=None),
            F("Metadata", BYTES, default=b""),
        ],
    ),
]

# ---------------------------------------------------------------------------- Heartbeat 12

HEARTBEAT_REQUEST = [
    F("GroupId", STRING),
    F("GenerationId", INT32),
    F("MemberId", STRING),
    F("GroupInstanceId", STRING, "3+", nullable="3+", default=None),
]

HEARTBEAT_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16),
]

# ---------------------------------------------------------------------------- LeaveGroup 13

LEAVE_GROUP_REQUEST = [
    F("GroupId", STRING),
    F("MemberId", STRING, "0-2"),
    A(
        "Members",
        "3+",
        fields=[  # v3+: a batch of members (KIP-345)
            F("MemberId", STRING, "3+"),
            F("GroupInstanceId", STRING, "3+", nullable="3+", default=None),
            F("Reason", STRING, "5+", nullable="5+", default=None),  # KIP-800, logged
        ],
    ),
]

LEAVE_GROUP_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16),
    A(
        "Members",
        "3+",
        fields=[
            F("MemberId", STRING, "3+"),
            F("GroupInstanceId", STRING, "3+", nullable="3+", default=None),
            F("ErrorCode", INT16, "3+"),
        ],
    ),
]

# ---------------------------------------------------------------------------- SyncGroup 14

SYNC_GROUP_REQUEST = [
    F("GroupId", STRING),
    F("GenerationId", INT32),
    F("MemberId", STRING),
    F("GroupInstanceId", STRING, "3+", nullable="3+", default=None),
    F("ProtocolType", STRING, "5+", nullable="5+", default=None),
    F("ProtocolName", STRING, "5+", nullable="5+", default=None),
    A(
        "Assignments",
        fields=[  # only the leader sends assignments
            F("MemberId", STRING),
            F("Assignment", BYTES, default=b""),
        ],
    ),
]

SYNC_GROUP_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16),
    F("ProtocolType", STRING, "5+", nullable="5+", default=None),
    F("ProtocolName", STRING, "5+", nullable="5+", default=None),
    F("Assignment", BYTES, default=b""),
]

# ---------------------------------------------------------------------------- DescribeGroups 15

DESCRIBE_GROUPS_REQUEST = [
    F("Groups", "[]string"),
    F("IncludeAuthorizedOperations", BOOL, "3+"),
]

DESCRIBE_GROUPS_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    A(
        "Groups",
        fields=[
            F("ErrorCode", INT16),
            F("GroupId", STRING),
            F("GroupState", STRING),  # Empty / PreparingRebalance / CompletingRebalance / Stable / Dead
            F("ProtocolType", STRING),
            F("ProtocolData", STRING),  # the chosen protocol (assignor) name
            A(
                "Members",
                fields=[
                    F("MemberId", STRING),
                    F("GroupInstanceId", STRING, "4+", nullable="4+", default=None),
                    F("ClientId", STRING),
                    F("ClientHost", STRING),
                    F("MemberMetadata", BYTES, default=b""),
                    F("MemberAssignment", BYTES, default=b""),
                ],
            ),
            F("AuthorizedOperations", INT32, "3+", default=-2147483648),
        ],
    ),
]

# ---------------------------------------------------------------------------- ListGroups 16

LIST_GROUPS_REQUEST = [  # v0-3 have no fields
    F("StatesFilter", "[]string", "4+"),  # KIP-518: only groups in these states (empty: all)
]

LIST_GROUPS_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    F("ErrorCode", INT16),
    A(
        "Groups",
        fields=[
            F("GroupId", STRING),
            F("ProtocolType", STRING),
            F("GroupState", STRING, "4+"),
        ],
    ),
]

# ---------------------------------------------------------------------------- CreateTopics 19

CREATE_TOPICS_REQUEST = [
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            F("NumPartitions", INT32),
            F("ReplicationFactor", INT16),
            A(
                "Assignments",
                fields=[
                    F("PartitionIndex", INT32),
                    F("BrokerIds", "[]int32"),
                ],
            ),
            A(
                "Configs",
                fields=[
                    F("Name", STRING),
                    F("Value", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
    F("timeoutMs", INT32, default=60000),
    F("validateOnly", BOOL, "1+", default=False),
]

CREATE_TOPICS_RESPONSE = [
    F(_THROTTLE, INT32, "2+"),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            F("TopicId", UUID, "7+"),  # KIP-516
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, "1+", nullable="0+", default=None),
            F("TopicConfigErrorCode", INT16, "5+", default=0, tag=0, tagged="5+"),
            F("NumPartitions", INT32, "5+", default=-1),
            F("ReplicationFactor", INT16, "5+", default=-1),
            A(
                "Configs",
                "5+",
                nullable="5+",
                fields=[  # the created topic's configs (KIP-525)
                    F("Name", STRING, "5+"),
                    F("Value", STRING, "5+", nullable="5+"),
                    F("ReadOnly", BOOL, "5+"),
                    F("ConfigSource", INT8, "5+", default=-1),
                    F("IsSensitive", BOOL, "5+"),
                ],
            ),
        ],
    ),
]

# ---------------------------------------------------------------------------- DeleteTopics 20

DELETE_TOPICS_REQUEST = [
    A(
        "Topics",
        "6+",
        fields=[  # v6+ (KIP-516): by name or by id (name null)
            F("Name", STRING, "6+", nullable="6+", default=None),
            F("TopicId", UUID, "6+"),
        ],
    ),
    F("TopicNames", "[]string", "0-5"),
    F("TimeoutMs", INT32),
]

DELETE_TOPICS_RESPONSE = [
    F(_THROTTLE, INT32, "1+"),
    A(
        "Responses",
        fields=[
            F("Name", STRING, nullable="6+"),
            F("TopicId", UUID, "6+"),
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, "5+", nullable="5+", default=None),
        ],
    ),
]

# ---------------------------------------------------------------------------- InitProducerId 22

INIT_PRODUCER_ID_REQUEST = [
    F("TransactionalId", STRING, nullable="0+", default=None),
    F("TransactionTimeoutMs", INT32),
    # v3+ (KIP-360): the producer's current id and epoch, to bump its epoch after an abortable error
    F("ProducerId", INT64, "3+", default=-1),
    F("ProducerEpoch", INT16, "3+", default=-1),
]

INIT_PRODUCER_ID_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ProducerId", INT64, default=-1),
    F("ProducerEpoch", INT16),
]

# ---------------------------------------------------------------------------- transactions (KIP-98)
# AddPartitionsToTxn 24: v1 = v0, v2 adds the PRODUCER_FENCED error code, v3 flexible, v4+ (broker
# to broker, KIP-890) batches several transactions.

ADD_PARTITIONS_TO_TXN_REQUEST = [
    F("V3AndBelowTransactionalId", STRING, "0-3"),
    F("V3AndBelowProducerId", INT64, "0-3"),
    F("V3AndBelowProducerEpoch", INT16, "0-3"),
    A(
        "V3AndBelowTopics",
        "0-3",
        fields=[
            F("Name", STRING),
            F("Partitions", "[]" + INT32),
        ],
    ),
]

ADD_PARTITIONS_TO_TXN_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "ResultsByTopicV3AndBelow",
        "0-3",
        fields=[
            F("Name", STRING),
            A(
                "ResultsByPartition",
                fields=[
                    F("PartitionIndex", INT32),
                    F("PartitionErrorCode", INT16),
                ],
            ),
        ],
    ),
]

# AddOffsetsToTxn 25: v1 = v0, v2 adds PRODUCER_FENCED, v3 flexible.

ADD_OFFSETS_TO_TXN_REQUEST = [
    F("TransactionalId", STRING),
    F("ProducerId", INT64),
    F("ProducerEpoch", INT16),
    F("GroupId", STRING),
]

ADD_OFFSETS_TO_TXN_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
]

# EndTxn 26: v1 = v0, v2 adds PRODUCER_FENCED and TRANSACTION_TIMED_OUT, v3 flexible.

END_TXN_REQUEST = [
    F("TransactionalId", STRING),
    F("ProducerId", INT64),
    F("ProducerEpoch", INT16),
    F("Committed", BOOL),
]

END_TXN_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
]

# WriteTxnMarkers 27: the transaction coordinator asks the leaders of a transaction's partitions to
# append its COMMIT or ABORT marker.  v0 is the non-flexible layout (pyklog brokers speak it among
# themselves); Kafka 4 serves v1+ only.

WRITE_TXN_MARKERS_REQUEST = [
    A(
        "Markers",
        fields=[
            F("ProducerId", INT64),
            F("ProducerEpoch", INT16),
            F("TransactionResult", BOOL),  # false = ABORT, true = COMMIT
            A(
                "Topics",
                fields=[
                    F("Name", STRING),
                    F("PartitionIndexes", "[]" + INT32),
                ],
            ),
            F("CoordinatorEpoch", INT32),
        ],
    ),
]

WRITE_TXN_MARKERS_RESPONSE = [
    A(
        "Markers",
        fields=[
            F("ProducerId", INT64),
            A(
                "Topics",
                fields=[
                    F("Name", STRING),
                    A(
                        "Partitions",
                        fields=[
                            F("PartitionIndex", INT32),
                            F("ErrorCode", INT16),
                        ],
                    ),
                ],
            ),
        ],
    ),
]

# TxnOffsetCommit 28: v1 = v0, v2 adds the committed leader epoch, v3 flexible (member id,
# generation, group instance id: checked against the group as OffsetCommit, KIP-447).

TXN_OFFSET_COMMIT_REQUEST = [
    F("TransactionalId", STRING),
    F("GroupId", STRING),
    F("ProducerId", INT64),
    F("ProducerEpoch", INT16),
    F("GenerationId", INT32, "3+", default=-1),
    F("MemberId", STRING, "3+", default=""),
    F("GroupInstanceId", STRING, "3+", nullable="3+", default=None),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("CommittedOffset", INT64),
                    F("CommittedLeaderEpoch", INT32, "2+", default=-1),
                    F("CommittedMetadata", STRING, nullable="0+", default=None),
                ],
            ),
        ],
    ),
]

TXN_OFFSET_COMMIT_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                ],
            ),
        ],
    ),
]


# ---------------------------------------------------------------------------- admin APIs (kafka-admin)
# CreatePartitions 37: v1 = v0 (throttling behaviour), v2+ flexible, v3 = v2 (may answer
# THROTTLING_QUOTA_EXCEEDED, KIP-599: pyklog has no quotas).

CREATE_PARTITIONS_REQUEST = [
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            F("Count", INT32),
            A(
                "Assignments",
                nullable="0+",
                fields=[
                    F("BrokerIds", "[]int32"),
                ],
            ),
        ],
    ),
    F("TimeoutMs", INT32),
    F("ValidateOnly", BOOL),
]

CREATE_PARTITIONS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Results",
        fields=[
            F("Name", STRING),
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
        ],
    ),
]


# DescribeConfigs 32: v1 adds synonyms and the config source (IsDefault only in v0), v2 = v1,
# v3 adds the config type and documentation, v4+ flexible.  Resource types (Kafka's
# ConfigResource.Type): 2 TOPIC, 4 BROKER, 8 BROKER_LOGGER.

DESCRIBE_CONFIGS_REQUEST = [
    A(
        "Resources",
        fields=[
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            F("ConfigurationKeys", "[]string", nullable="0+", default=None),
        ],
    ),
    F("IncludeSynonyms", BOOL, "1+", default=False),
    F("IncludeDocumentation", BOOL, "3+", default=False),
]

DESCRIBE_CONFIGS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Results",
        fields=[
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            A(
                "Configs",
                fields=[
                    F("Name", STRING),
                    F("Value", STRING, nullable="0+", default=None),
                    F("ReadOnly", BOOL),
                    F("ConfigSource", INT8, "1+", default=-1),
                    F("IsDefault", BOOL, "0", default=False),
                    F("IsSensitive", BOOL),
                    A(
                        "Synonyms",
                        "1+",
                        fields=[
                            F("Name", STRING),
                            F("Value", STRING, nullable="0+", default=None),
                            F("Source", INT8),
                        ],
                    ),
                    F("ConfigType", INT8, "3+", default=0),
                    F("Documentation", STRING, "3+", nullable="0+", default=None),
                ],
            ),
        ],
    ),
]

# AlterConfigs 33 (v1 = v0, v2+ flexible) and IncrementalAlterConfigs 44 (v1+ flexible); the
# operations of the latter (Kafka's AlterConfigOp.OpType): 0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT.

ALTER_CONFIGS_REQUEST = [
    A(
        "Resources",
        fields=[
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            A(
                "Configs",
                fields=[
                    F("Name", STRING),
                    F("Value", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
    F("ValidateOnly", BOOL),
]

_ALTER_CONFIGS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Responses",
        fields=[
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
            F("ResourceType", INT8),
            F("ResourceName", STRING),
        ],
    ),
]
ALTER_CONFIGS_RESPONSE = _ALTER_CONFIGS_RESPONSE

INCREMENTAL_ALTER_CONFIGS_REQUEST = [
    A(
        "Resources",
        fields=[
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            A(
                "Configs",
                fields=[
                    F("Name", STRING),
                    F("ConfigOperation", INT8),
                    F("Value", STRING, nullable="0+"),
                ],
            ),
        ],
    ),
    F("ValidateOnly", BOOL),
]

INCREMENTAL_ALTER_CONFIGS_RESPONSE = _ALTER_CONFIGS_RESPONSE

# OffsetForLeaderEpoch 23 (KIP-101, KIP-279, KIP-320): v1 adds the answered LeaderEpoch, v2 the
# request's CurrentLeaderEpoch (fencing) and ThrottleTimeMs, v3 ReplicaId (-1 consumer, -2 unset),
# v4+ flexible.

OFFSET_FOR_LEADER_EPOCH_REQUEST = [
    F("ReplicaId", INT32, "3+", default=-2),
    A(
        "Topics",
        fields=[
            F("Topic", STRING),
            A(
                "Partitions",
                fields=[
                    F("Partition", INT32),
                    F("CurrentLeaderEpoch", INT32, "2+", default=-1),
                    F("LeaderEpoch", INT32),
                ],
            ),
        ],
    ),
]

OFFSET_FOR_LEADER_EPOCH_RESPONSE = [
    F(_THROTTLE, INT32, "2+"),
    A(
        "Topics",
        fields=[
            F("Topic", STRING),
            A(
                "Partitions",
                fields=[
                    F("ErrorCode", INT16),
                    F("Partition", INT32),
                    F("LeaderEpoch", INT32, "1+", default=-1),
                    F("EndOffset", INT64, default=-1),
                ],
            ),
        ],
    ),
]

# DeleteRecords 21: v1 = v0, v2+ flexible.

DELETE_RECORDS_REQUEST = [
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("Offset", INT64),
                ],
            ),
        ],
    ),
    F("TimeoutMs", INT32),
]

DELETE_RECORDS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("LowWatermark", INT64, default=-1),
                    F("ErrorCode", INT16),
                ],
            ),
        ],
    ),
]

# DescribeLogDirs 35: v1 = v0, v2+ flexible, v3 adds the top-level error code, v4 the volume's total
# and usable bytes (KIP-827).  Topics null = every partition.

DESCRIBE_LOG_DIRS_REQUEST = [
    A(
        "Topics",
        nullable="0+",
        fields=[
            F("Topic", STRING),
            F("Partitions", "[]int32"),
        ],
    ),
]

DESCRIBE_LOG_DIRS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16, "3+", default=0),
    A(
        "Results",
        fields=[
            F("ErrorCode", INT16),
            F("LogDir", STRING),
            A(
                "Topics",
                fields=[
                    F("Name", STRING),
                    A(
                        "Partitions",
                        fields=[
                            F("PartitionIndex", INT32),
                            F("PartitionSize", INT64),
                            F("OffsetLag", INT64),
                            F("IsFutureKey", BOOL, default=False),
                        ],
                    ),
                ],
            ),
            F("TotalBytes", INT64, "4+", default=-1),
            F("UsableBytes", INT64, "4+", default=-1),
        ],
    ),
]

# DeleteGroups 42: v1 = v0, v2+ flexible.  OffsetDelete 47: v0 only.

DELETE_GROUPS_REQUEST = [
    F("GroupsNames", "[]string"),
]

DELETE_GROUPS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Results",
        fields=[
            F("GroupId", STRING),
            F("ErrorCode", INT16),
        ],
    ),
]

OFFSET_DELETE_REQUEST = [
    F("GroupId", STRING),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                ],
            ),
        ],
    ),
]

OFFSET_DELETE_RESPONSE = [
    F("ErrorCode", INT16),
    F(_THROTTLE, INT32),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                ],
            ),
        ],
    ),
]


# DescribeCluster 60 (KIP-700): flexible from v0; v1 adds the endpoint type (1 BROKERS, 2 CONTROLLERS),
# v2 fenced brokers.

DESCRIBE_CLUSTER_REQUEST = [
    F("IncludeClusterAuthorizedOperations", BOOL),
    F("EndpointType", INT8, "1+", default=1),
]

DESCRIBE_CLUSTER_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    F("EndpointType", INT8, "1+", default=1),
    F("ClusterId", STRING),
    F("ControllerId", INT32, default=-1),
    A(
        "Brokers",
        fields=[
            F("BrokerId", INT32),
            F("Host", STRING),
            F("Port", INT32),
            F("Rack", STRING, nullable="0+", default=None),
        ],
    ),
    F("ClusterAuthorizedOperations", INT32, default=-2147483648),
]


# ---------------------------------------------------------------------------- ACLs 29-31
# DescribeAcls 29, CreateAcls 30, DeleteAcls 31: v1 adds the pattern types (KIP-290: LITERAL 3 by
# default, PREFIXED 4; filters also ANY 1 and MATCH 2), v2 flexible, v3 = v2 (USER resources).
# Codes of resource types, operations and permissions: pyklog.broker.security.acl.

_ACL_FILTER = [
    F("ResourceTypeFilter", INT8),
    F("ResourceNameFilter", STRING, nullable="0+"),
    F("PatternTypeFilter", INT8, "1+", default=3),
    F("PrincipalFilter", STRING, nullable="0+"),
    F("HostFilter", STRING, nullable="0+"),
    F("Operation", INT8),
    F("PermissionType", INT8),
]

DESCRIBE_ACLS_REQUEST = list(_ACL_FILTER)

DESCRIBE_ACLS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    A(
        "Resources",
        fields=[
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            F("PatternType", INT8, "1+", default=3),
            A(
                "Acls",
                fields=[
                    F("Principal", STRING),
                    F("Host", STRING),
                    F("Operation", INT8),
                    F("PermissionType", INT8),
                ],
            ),
        ],
    ),
]

CREATE_ACLS_REQUEST = [
    A(
        "Creations",
        fields=[
            F("ResourceType", INT8),
            F("ResourceName", STRING),
            F("ResourcePatternType", INT8, "1+", default=3),
            F("Principal", STRING),
            F("Host", STRING),
            F("Operation", INT8),
            F("PermissionType", INT8),
        ],
    ),
]

CREATE_ACLS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Results",
        fields=[
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
        ],
    ),
]

DELETE_ACLS_REQUEST = [A("Filters", fields=list(_ACL_FILTER))]

DELETE_ACLS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "FilterResults",
        fields=[
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
            A(
                "MatchingAcls",
                fields=[
                    F("ErrorCode", INT16),
                    F("ErrorMessage", STRING, nullable="0+", default=None),
                    F("ResourceType", INT8),
                    F("ResourceName", STRING),
                    F("PatternType", INT8, "1+", default=3),
                    F("Principal", STRING),
                    F("Host", STRING),
                    F("Operation", INT8),
                    F("PermissionType", INT8),
                ],
            ),
        ],
    ),
]


# ---------------------------------------------------------------------------- transaction admin (KIP-664)
# DescribeProducers 61: the producer state of partitions led here (Kafka's ``UnifiedLog.activeProducers``).
# DescribeTransactions 65: the coordinator's state of transactional ids.  ListTransactions 66: every
# transactional id this broker coordinates, filtered by state names and producer ids (v1: by how long
# the transaction has run, KIP-994).  All three are flexible from v0.

DESCRIBE_PRODUCERS_REQUEST = [
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            F("PartitionIndexes", "[]int32"),
        ],
    ),
]

DESCRIBE_PRODUCERS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                    F("ErrorMessage", STRING, nullable="0+", default=None),
                    A(
                        "ActiveProducers",
                        fields=[
                            F("ProducerId", INT64),
                            F("ProducerEpoch", INT32),  # int32 on the wire, as Kafka's schema
                            F("LastSequence", INT32, default=-1),
                            F("LastTimestamp", INT64, default=-1),
                            F("CoordinatorEpoch", INT32),
                            F("CurrentTxnStartOffset", INT64, default=-1),  # -1: no open transaction
                        ],
                    ),
                ],
            ),
        ],
    ),
]


# ControlledShutdown 7 (broker to controller): v1 = v0 (v0's header has no client id), v2 adds the
# broker epoch (KIP-380), v3+ flexible.  ElectLeaders 43 (KIP-183, KIP-460): v1 adds the election
# type and the top-level error, v2+ flexible.

CONTROLLED_SHUTDOWN_REQUEST = [
    F("BrokerId", INT32),
    F("BrokerEpoch", INT64, "2+", default=-1),
]

CONTROLLED_SHUTDOWN_RESPONSE = [
    F("ErrorCode", INT16),
    A(
        "RemainingPartitions",
        fields=[
            F("TopicName", STRING),
            F("PartitionIndex", INT32),
        ],
    ),
]

ELECT_LEADERS_REQUEST = [
    F("ElectionType", INT8, "1+", default=0),
    A(
        "TopicPartitions",
        nullable="0+",
        fields=[
            F("Topic", STRING),
            F("Partitions", "[]int32"),
        ],
    ),
    F("TimeoutMs", INT32, default=60000),
]

ELECT_LEADERS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16, "1+", default=0),
    A(
        "ReplicaElectionResults",
        fields=[
            F("Topic", STRING),
            A(
                "PartitionResult",
                fields=[
                    F("PartitionId", INT32),
                    F("ErrorCode", INT16),
                    F("ErrorMessage", STRING, nullable="0+", default=None),
                ],
            ),
        ],
    ),
]

# AlterPartitionReassignments 45 and ListPartitionReassignments 46 (KIP-455, the admin client sends
# them to the controller): v0 flexible.  Null Replicas cancels a partition's reassignment; null
# Topics lists every reassignment in progress.

ALTER_PARTITION_REASSIGNMENTS_REQUEST = [
    F("TimeoutMs", INT32, default=60000),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("Replicas", "[]int32", nullable="0+", default=None),
                ],
            ),
        ],
    ),
]

ALTER_PARTITION_REASSIGNMENTS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    A(
        "Responses",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("ErrorCode", INT16),
                    F("ErrorMessage", STRING, nullable="0+", default=None),
                ],
            ),
        ],
    ),
]

LIST_PARTITION_REASSIGNMENTS_REQUEST = [
    F("TimeoutMs", INT32, default=60000),
    A(
        "Topics",
        nullable="0+",
        default=None,
        fields=[
            F("Name", STRING),
            F("PartitionIndexes", "[]int32"),
        ],
    ),
]

LIST_PARTITION_REASSIGNMENTS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    A(
        "Topics",
        fields=[
            F("Name", STRING),
            A(
                "Partitions",
                fields=[
                    F("PartitionIndex", INT32),
                    F("Replicas", "[]int32"),
                    F("AddingReplicas", "[]int32"),
                    F("RemovingReplicas", "[]int32"),
                ],
            ),
        ],
    ),
]

DESCRIBE_TRANSACTIONS_REQUEST = [
    F("TransactionalIds", "[]string"),
]

DESCRIBE_TRANSACTIONS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "TransactionStates",
        fields=[
            F("ErrorCode", INT16),
            F("TransactionalId", STRING),
            F("TransactionState", STRING),  # Kafka's state name: "Ongoing", "PrepareCommit", ...
            F("TransactionTimeoutMs", INT32),
            F("TransactionStartTimeMs", INT64),
            F("ProducerId", INT64),
            F("ProducerEpoch", INT16),
            A(
                "Topics",
                fields=[
                    F("Topic", STRING),
                    F("Partitions", "[]int32"),
                ],
            ),
        ],
    ),
]

LIST_TRANSACTIONS_REQUEST = [
    F("StateFilters", "[]string"),
    F("ProducerIdFilters", "[]int64"),
    F("DurationFilter", INT64, "1+", default=-1),
]

LIST_TRANSACTIONS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("UnknownStateFilters", "[]string"),
    A(
        "TransactionStates",
        fields=[
            F("TransactionalId", STRING),
            F("ProducerId", INT64),
            F("TransactionState", STRING),
        ],
    ),
]


# ---------------------------------------------------------------------------- authentication
# SaslHandshake 17 (never flexible): v0 is followed by raw SASL tokens, v1 by SaslAuthenticate
# requests.  SaslAuthenticate 36: the SASL token both ways (KIP-152), v1 the session lifetime
# (KIP-368), v2 flexible.  Describe/AlterUserScramCredentials 50/51 (KIP-554), flexible from v0:
# mechanism 1 SCRAM-SHA-256, 2 SCRAM-SHA-512; the client sends the salt and the salted password.

SASL_HANDSHAKE_REQUEST = [
    F("Mechanism", STRING),
]

SASL_HANDSHAKE_RESPONSE = [
    F("ErrorCode", INT16),
    F("Mechanisms", "[]string"),
]

SASL_AUTHENTICATE_REQUEST = [
    F("AuthBytes", BYTES, default=b""),
]

SASL_AUTHENTICATE_RESPONSE = [
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    F("AuthBytes", BYTES, default=b""),
    F("SessionLifetimeMs", INT64, "1+", default=0),
]

DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST = [
    A("Users", nullable="0+", fields=[F("Name", STRING)]),
]

DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE = [
    F(_THROTTLE, INT32),
    F("ErrorCode", INT16),
    F("ErrorMessage", STRING, nullable="0+", default=None),
    A(
        "Results",
        fields=[
            F("User", STRING),
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
            A("CredentialInfos", fields=[F("Mechanism", INT8), F("Iterations", INT32)]),
        ],
    ),
]

ALTER_USER_SCRAM_CREDENTIALS_REQUEST = [
    A("Deletions", fields=[F("Name", STRING), F("Mechanism", INT8)]),
    A(
        "Upsertions",
        fields=[
            F("Name", STRING),
            F("Mechanism", INT8),
            F("Iterations", INT32),
            F("Salt", BYTES, default=b""),
            F("SaltedPassword", BYTES, default=b""),
        ],
    ),
]

ALTER_USER_SCRAM_CREDENTIALS_RESPONSE = [
    F(_THROTTLE, INT32),
    A(
        "Results",
        fields=[
            F("User", STRING),
            F("ErrorCode", INT16),
            F("ErrorMessage", STRING, nullable="0+", default=None),
        ],
    ),
]


#: api key -> (Kafka message base name, request fields, response fields)
SCHEMAS: dict[ApiKey, tuple[str, list[Field], list[Field]]] = {
    ApiKey.PRODUCE: ("Produce", PRODUCE_REQUEST, PRODUCE_RESPONSE),
    ApiKey.FETCH: ("Fetch", FETCH_REQUEST, FETCH_RESPONSE),
    ApiKey.LIST_OFFSETS: ("ListOffsets", LIST_OFFSETS_REQUEST, LIST_OFFSETS_RESPONSE),
    ApiKey.METADATA: ("Metadata", METADATA_REQUEST, METADATA_RESPONSE),
    ApiKey.OFFSET_COMMIT: ("OffsetCommit", OFFSET_COMMIT_REQUEST, OFFSET_COMMIT_RESPONSE),
    ApiKey.OFFSET_FETCH: ("OffsetFetch", OFFSET_FETCH_REQUEST, OFFSET_FETCH_RESPONSE),
    ApiKey.FIND_COORDINATOR: ("FindCoordinator", FIND_COORDINATOR_REQUEST, FIND_COORDINATOR_RESPONSE),
    ApiKey.JOIN_GROUP: ("JoinGroup", JOIN_GROUP_REQUEST, JOIN_GROUP_RESPONSE),
    ApiKey.HEARTBEAT: ("Heartbeat", HEARTBEAT_REQUEST, HEARTBEAT_RESPONSE),
    ApiKey.LEAVE_GROUP: ("LeaveGroup", LEAVE_GROUP_REQUEST, LEAVE_GROUP_RESPONSE),
    ApiKey.SYNC_GROUP: ("SyncGroup", SYNC_GROUP_REQUEST, SYNC_GROUP_RESPONSE),
    ApiKey.DESCRIBE_GROUPS: ("DescribeGroups", DESCRIBE_GROUPS_REQUEST, DESCRIBE_GROUPS_RESPONSE),
    ApiKey.LIST_GROUPS: ("ListGroups", LIST_GROUPS_REQUEST, LIST_GROUPS_RESPONSE),
    ApiKey.API_VERSIONS: ("ApiVersions", API_VERSIONS_REQUEST, API_VERSIONS_RESPONSE),
    ApiKey.CREATE_TOPICS: ("CreateTopics", CREATE_TOPICS_REQUEST, CREATE_TOPICS_RESPONSE),
    ApiKey.DELETE_TOPICS: ("DeleteTopics", DELETE_TOPICS_REQUEST, DELETE_TOPICS_RESPONSE),
    ApiKey.INIT_PRODUCER_ID: ("InitProducerId", INIT_PRODUCER_ID_REQUEST, INIT_PRODUCER_ID_RESPONSE),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (
        "OffsetForLeaderEpoch",
        OFFSET_FOR_LEADER_EPOCH_REQUEST,
        OFFSET_FOR_LEADER_EPOCH_RESPONSE,
    ),
    ApiKey.ADD_PARTITIONS_TO_TXN: ("AddPartitionsToTxn", ADD_PARTITIONS_TO_TXN_REQUEST, ADD_PARTITIONS_TO_TXN_RESPONSE),
    ApiKey.ADD_OFFSETS_TO_TXN: ("AddOffsetsToTxn", ADD_OFFSETS_TO_TXN_REQUEST, ADD_OFFSETS_TO_TXN_RESPONSE),
    ApiKey.END_TXN: ("EndTxn", END_TXN_REQUEST, END_TXN_RESPONSE),
    ApiKey.WRITE_TXN_MARKERS: ("WriteTxnMarkers", WRITE_TXN_MARKERS_REQUEST, WRITE_TXN_MARKERS_RESPONSE),
    ApiKey.TXN_OFFSET_COMMIT: ("TxnOffsetCommit", TXN_OFFSET_COMMIT_REQUEST, TXN_OFFSET_COMMIT_RESPONSE),
    ApiKey.CREATE_PARTITIONS: ("CreatePartitions", CREATE_PARTITIONS_REQUEST, CREATE_PARTITIONS_RESPONSE),
    ApiKey.DELETE_RECORDS: ("DeleteRecords", DELETE_RECORDS_REQUEST, DELETE_RECORDS_RESPONSE),
    ApiKey.DESCRIBE_CONFIGS: ("DescribeConfigs", DESCRIBE_CONFIGS_REQUEST, DESCRIBE_CONFIGS_RESPONSE),
    ApiKey.ALTER_CONFIGS: ("AlterConfigs", ALTER_CONFIGS_REQUEST, ALTER_CONFIGS_RESPONSE),
    ApiKey.DESCRIBE_LOG_DIRS: ("DescribeLogDirs", DESCRIBE_LOG_DIRS_REQUEST, DESCRIBE_LOG_DIRS_RESPONSE),
    ApiKey.DELETE_GROUPS: ("DeleteGroups", DELETE_GROUPS_REQUEST, DELETE_GROUPS_RESPONSE),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (
        "IncrementalAlterConfigs",
        INCREMENTAL_ALTER_CONFIGS_REQUEST,
        INCREMENTAL_ALTER_CONFIGS_RESPONSE,
    ),
    ApiKey.OFFSET_DELETE: ("OffsetDelete", OFFSET_DELETE_REQUEST, OFFSET_DELETE_RESPONSE),
    ApiKey.DESCRIBE_CLUSTER: ("DescribeCluster", DESCRIBE_CLUSTER_REQUEST, DESCRIBE_CLUSTER_RESPONSE),
    ApiKey.DESCRIBE_ACLS: ("DescribeAcls", DESCRIBE_ACLS_REQUEST, DESCRIBE_ACLS_RESPONSE),
    ApiKey.CREATE_ACLS: ("CreateAcls", CREATE_ACLS_REQUEST, CREATE_ACLS_RESPONSE),
    ApiKey.DELETE_ACLS: ("DeleteAcls", DELETE_ACLS_REQUEST, DELETE_ACLS_RESPONSE),
    ApiKey.DESCRIBE_PRODUCERS: ("DescribeProducers", DESCRIBE_PRODUCERS_REQUEST, DESCRIBE_PRODUCERS_RESPONSE),
    ApiKey.DESCRIBE_TRANSACTIONS: (
        "DescribeTransactions",
        DESCRIBE_TRANSACTIONS_REQUEST,
        DESCRIBE_TRANSACTIONS_RESPONSE,
    ),
    ApiKey.LIST_TRANSACTIONS: ("ListTransactions", LIST_TRANSACTIONS_REQUEST, LIST_TRANSACTIONS_RESPONSE),
    ApiKey.CONTROLLED_SHUTDOWN: ("ControlledShutdown", CONTROLLED_SHUTDOWN_REQUEST, CONTROLLED_SHUTDOWN_RESPONSE),
    ApiKey.ELECT_LEADERS: ("ElectLeaders", ELECT_LEADERS_REQUEST, ELECT_LEADERS_RESPONSE),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (
        "AlterPartitionReassignments",
        ALTER_PARTITION_REASSIGNMENTS_REQUEST,
        ALTER_PARTITION_REASSIGNMENTS_RESPONSE,
    ),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (
        "ListPartitionReassignments",
        LIST_PARTITION_REASSIGNMENTS_REQUEST,
        LIST_PARTITION_REASSIGNMENTS_RESPONSE,
    ),
    ApiKey.SASL_HANDSHAKE: ("SaslHandshake", SASL_HANDSHAKE_REQUEST, SASL_HANDSHAKE_RESPONSE),
    ApiKey.SASL_AUTHENTICATE: ("SaslAuthenticate", SASL_AUTHENTICATE_REQUEST, SASL_AUTHENTICATE_RESPONSE),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (
        "DescribeUserScramCredentials",
        DESCRIBE_USER_SCRAM_CREDENTIALS_REQUEST,
        DESCRIBE_USER_SCRAM_CREDENTIALS_RESPONSE,
    ),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (
        "AlterUserScramCredentials",
        ALTER_USER_SCRAM_CREDENTIALS_REQUEST,
        ALTER_USER_SCRAM_CREDENTIALS_RESPONSE,
    ),
}
