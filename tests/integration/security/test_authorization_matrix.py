"""The authorization matrix: one row per API, denied then allowed, on a broker with Kafka's ACL
authorizer (``authorizer.class.name``), as Kafka's AuthorizerIntegrationTest.

Every connection is ``User:ANONYMOUS`` (no SASL on these listeners), so each row grants ACLs to
``User:ANONYMOUS``.  The ACLs are written straight into ZooKeeper with the authorizer's own store
(Kafka's ``/kafka-acl`` layout and change notifications): the broker follows them live, so every
row also shows that a grant and a revocation reach a running broker.  Each row:

1. no ACL for the principal: the request gets the row's authorization error;
2. the ACLs are granted one at a time: until the last one the request still fails (with the error of
   the first resource still denied, e.g. GROUP then TOPIC for OffsetCommit);
3. with every ACL the request gets an answer that is not an authorization error (the row's allowed
   codes);
4. the ACLs are revoked and the denial comes back.

Requests go raw through pyklog's :class:`~pyklog.connector.client.BrokerConnection`.
"""

from __future__ import annotations

import os
import time

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
    operations_from_bitfield,
)
from pyklog.broker.security.authorizer import PYKLOG_AUTHORIZER, ZkAclStore
from pyklog.connector.client import BrokerConnection
from tests.support import kazoo_client, records, running_broker, wait_for

Op, RT = AclOperation, ResourceType
ANON = "User:ANONYMOUS"
TOPIC, GROUP, TXN = "orders", "g1", "tx1"
TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH = 29, 30, 31, 53
AUTH_ERRORS = {TOPIC_AUTH, GROUP_AUTH, CLUSTER_AUTH, TXN_AUTH}


def binding(rtype, name, op, perm=AclPermissionType.ALLOW, principal=ANON, host="*", pt=PatternType.LITERAL):
    return AclBinding(ResourcePattern(rtype, name, pt), AccessControlEntry(principal, host, op, perm))


@pytest.fixture(scope="module")
def secured(zookeeper, tmp_path_factory):
    """One broker with the ACL authorizer; its ZooKeeper ACL store; topics ``orders`` (with records),
    ``doomed`` (to delete) and ``grow`` (to add partitions to), made with ACLs removed again."""
    with running_broker(
        zookeeper,
        str(tmp_path_factory.mktemp("acl-broker")),
        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "auto.create.topics.enable": "true"},
    ) as broker:
        yield from _secured(broker)


def _secured(broker):
    kc = kazoo_client(broker.zk_connect)
    store = ZkAclStore(kc)
    conn = BrokerConnection("127.0.0.1", broker.port, client_id="acl-matrix")
    setup = [binding(RT.CLUSTER, CLUSTER_NAME, Op.CREATE), binding(RT.TOPIC, "*", Op.ALL)]
    store.add(setup)
    for name in (TOPIC, "doomed", "grow"):

        def created(name=name):
            r = conn.request(
                ApiKey.CREATE_TOPICS,
                {"topics": [{"name": name, "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 5000},
            )
            return r["topics"][0]["error_code"] in (0, 36)

        wait_for(created, 30, message=f"topic {name} created")

    def produced():
        r = conn.request(
            ApiKey.PRODUCE,
            {
                "acks": 1,
                "timeout_ms": 5000,
                "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records(3)}]}],
            },
        )
        return r["responses"][0]["partition_responses"][0]["error_code"] == 0

    wait_for(produced, 30, message="records produced")
    store.remove(setup)
    yield broker, store, conn
    conn.close()
    kc.stop()
    kc.close()


def expect(call, accept, timeout=20.0, what=""):
    """Poll ``call()`` until its code is in ``accept`` (the broker follows ACL changes live)."""
    accept = set(accept)
    seen = []

    def ok():
        seen.append(call())
        return seen[-1] in accept

    wait_for(ok, timeout, interval=0.1, message=f"{what}: a code in {sorted(accept)} (last: {seen[-1:]})")
    return seen[-1]


# --------------------------------------------------------------------- the rows: API -> request


def _produce(c):
    r = c.request(
        ApiKey.PRODUCE,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records(1)}]}],
        },
    )
    return r["responses"][0]["partition_responses"][0]["error_code"]


def _fetch(c):
    r = c.request(
        ApiKey.FETCH,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
            ],
        },
    )
    return r["responses"][0]["partitions"][0]["error_code"]


def _follower_fetch(c):
    r = c.request(
        ApiKey.FETCH,
        {
            "replica_id": 7,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}
            ],
        },
    )
    return r["responses"][0]["partitions"][0]["error_code"]


def _list_offsets(c):
    r = c.request(
        ApiKey.LIST_OFFSETS,
        {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
    )
    return r["topics"][0]["partitions"][0]["error_code"]


def _metadata(c):
    r = c.request(ApiKey.METADATA, {"topics": [{"name": TOPIC}], "allow_auto_topic_creation": False})
    return r["topics"][0]["error_code"]


def _offset_for_leader_epoch(c):
    r = c.request(
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        {
            "replica_id": -1,
            "topics": [
                {"topic": TOPIC, "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}]}
            ],
        },
    )
    return r["topics"][0]["partitions"][0]["error_code"]


_created = [0]


def _create_topics(c):
    _created[0] += 1
    r = c.request(
        ApiKey.CREATE_TOPICS,
        {
            "topics": [{"name": "made-1", "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 5000,
            "validate_only": True,
        },
    )
    return r["topics"][0]["error_code"]


def _delete_topics(c):
    r = c.request(ApiKey.DELETE_TOPICS, {"topic_names": ["doomed"], "topics": [{"name": "doomed"}], "timeout_ms": 5000})
    return r["responses"][0]["error_code"]


def _create_partitions(c):
    r = c.request(
        ApiKey.CREATE_PARTITIONS,
        {"topics": [{"name": "grow", "count": 2, "assignments": None}], "timeout_ms": 5000, "validate_only": True},
    )
    return r["results"][0]["error_code"]


def _delete_records(c):
    r = c.request(
        ApiKey.DELETE_RECORDS,
        {"topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "offset": 0}]}], "timeout_ms": 5000},
    )
    return r["topics"][0]["partitions"][0]["error_code"]


def _describe_configs(rtype, name):
    def call(c):
        r = c.request(
            ApiKey.DESCRIBE_CONFIGS,
            {"resources": [{"resource_type": rtype, "resource_name": name, "configuration_keys": None}]},
        )
        return r["results"][0]["error_code"]

    return call


def _alter_topic_config(c):
    r = c.request(
        ApiKey.ALTER_CONFIGS,
        {
            "resources": [
                {"resource_type": 2, "resource_name": TOPIC, "configs": [{"name": "retention.ms", "value": "86400000"}]}
            ],
            "validate_only": True,
        },
    )
    return r["responses"][0]["error_code"]


def _incremental_alter_broker_config(c):
    r = c.request(
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": "",
                    "configs": [{"name": "log.retention.ms", "config_operation": 0, "value": "86400000"}],
                }
            ],
            "validate_only": True,
        },
    )
    return r["responses"][0]["error_code"]


def _describe_log_dirs(c):
    return c.request(ApiKey.DESCRIBE_LOG_DIRS, {"topics": None})["error_code"]


def _find_coordinator(key_type, key):
    def call(c):
        r = c.request(ApiKey.FIND_COORDINATOR, {"key": key, "key_type": key_type, "coordinator_keys": [key]})
        return r["coordinators"][0]["error_code"] if r.get("coordinators") else r["error_code"]

    return call


def _offset_commit(c):
    r = c.request(
        ApiKey.OFFSET_COMMIT,
        {
            "group_id": GROUP,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}
            ],
        },
    )
    return r["topics"][0]["partitions"][0]["error_code"]


def _offset_fetch(c):
    r = c.request(
        ApiKey.OFFSET_FETCH,
        {
            "group_id": GROUP,
            "topics": [{"name": TOPIC, "partition_indexes": [0]}],
            "groups": [{"group_id": GROUP, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}],
        },
    )
    if r.get("groups"):
        g = r["groups"][0]
        return g["error_code"] or g["topics"][0]["partitions"][0]["error_code"]
    return r["error_code"] or r["topics"][0]["partitions"][0]["error_code"]


_PROTOCOLS = [{"name": "range", "metadata": b""}]


def _join_group(c):
    r = c.request(
        ApiKey.JOIN_GROUP,
        {
            "group_id": GROUP,
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": _PROTOCOLS,
        },
    )
    return r["error_code"]


def _sync_group(c):
    r = c.request(
        ApiKey.SYNC_GROUP,
        {"group_id": GROUP, "generation_id": 1, "member_id": "nobody", "group_instance_id": None, "assignments": []},
    )
    return r["error_code"]


def _heartbeat(c):
    r = c.request(
        ApiKey.HEARTBEAT, {"group_id": GROUP, "generation_id": 1, "member_id": "nobody", "group_instance_id": None}
    )
    return r["error_code"]


def _leave_group(c):
    r = c.request(ApiKey.LEAVE_GROUP, {"group_id": GROUP, "member_id": "nobody"}, version=2)
    return r["error_code"]


def _describe_groups(c):
    r = c.request(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP], "include_authorized_operations": True})
    return r["groups"][0]["error_code"]


def _delete_groups(c):
    return c.request(ApiKey.DELETE_GROUPS, {"groups_names": ["other-group"]})["results"][0]["error_code"]


def _offset_delete(c):
    r = c.request(
        ApiKey.OFFSET_DELETE,
        {"group_id": "other-group", "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
    )
    return r["error_code"]


def _init_producer_id(tid):
    def call(c):
        r = c.request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": tid, "transaction_timeout_ms": 60000})
        return r["error_code"]

    return call


def _add_partitions_to_txn(c):
    r = c.request(
        ApiKey.ADD_PARTITIONS_TO_TXN,
        {
            "v3_and_below_transactional_id": TXN,
            "v3_and_below_producer_id": 424242,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": TOPIC, "partitions": [0]}],
        },
    )
    return r["results_by_topic_v3_and_below"][0]["results_by_partition"][0]["partition_error_code"]


def _add_offsets_to_txn(c):
    r = c.request(
        ApiKey.ADD_OFFSETS_TO_TXN,
        {"transactional_id": TXN, "producer_id": 424242, "producer_epoch": 0, "group_id": GROUP},
    )
    return r["error_code"]


def _end_txn(c):
    r = c.request(
        ApiKey.END_TXN, {"transactional_id": TXN, "producer_id": 424242, "producer_epoch": 0, "committed": False}
    )
    return r["error_code"]


def _txn_offset_commit(c):
    r = c.request(
        ApiKey.TXN_OFFSET_COMMIT,
        {
            "transactional_id": TXN,
            "group_id": GROUP,
            "producer_id": 424242,
            "producer_epoch": 0,
            "generation_id": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}
            ],
        },
    )
    return r["topics"][0]["partitions"][0]["error_code"]


def _write_txn_markers(c):
    r = c.request(
        ApiKey.WRITE_TXN_MARKERS,
        {
            "markers": [
                {
                    "producer_id": 424242,
                    "producer_epoch": 0,
                    "transaction_result": False,
                    "topics": [{"name": "no-such-topic", "partition_indexes": [0]}],
                    "coordinator_epoch": 0,
                }
            ]
        },
    )
    return r["markers"][0]["topics"][0]["partitions"][0]["error_code"]


def _describe_producers(c):
    r = c.request(ApiKey.DESCRIBE_PRODUCERS, {"topics": [{"name": TOPIC, "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def _describe_transactions(c):
    return c.request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": [TXN]})["transaction_states"][0]["error_code"]


def _elect_leaders(c):
    r = c.request(
        ApiKey.ELECT_LEADERS,
        {"election_type": 0, "topic_partitions": [{"topic": TOPIC, "partitions": [0]}], "timeout_ms": 5000},
    )
    return r["error_code"]


def _describe_scram_credentials(c):
    return c.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, {"users": None})["error_code"]


def _alter_scram_credentials(c):
    r = c.request(
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        {"deletions": [{"name": "matrix-user", "mechanism": 2}], "upsertions": []},
    )
    return r["results"][0]["error_code"]


def _alter_reassignments(c):
    return c.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {"timeout_ms": 5000, "topics": []})["error_code"]


def _list_reassignments(c):
    return c.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 5000, "topics": None})["error_code"]


def _create_acls(c):
    r = c.request(
        ApiKey.CREATE_ACLS,
        {
            "creations": [
                {
                    "resource_type": int(RT.TOPIC),
                    "resource_name": "bobs",
                    "resource_pattern_type": int(PatternType.LITERAL),
                    "principal": "User:bob",
                    "host": "*",
                    "operation": int(Op.READ),
                    "permission_type": int(AclPermissionType.ALLOW),
                }
            ]
        },
    )
    return r["results"][0]["error_code"]


_ANY_FILTER = {
    "resource_type_filter": int(RT.TOPIC),
    "resource_name_filter": "bobs",
    "pattern_type_filter": int(PatternType.ANY),
    "principal_filter": "User:bob",
    "host_filter": None,
    "operation": int(Op.ANY),
    "permission_type": int(AclPermissionType.ANY),
}


def _describe_acls(c):
    return c.request(ApiKey.DESCRIBE_ACLS, dict(_ANY_FILTER))["error_code"]


def _delete_acls(c):
    return c.request(ApiKey.DELETE_ACLS, {"filters": [dict(_ANY_FILTER)]})["filter_results"][0]["error_code"]


# (row id, request, grants in the order the broker checks them with each one's denial, allowed codes)
T, G, C, X = RT.TOPIC, RT.GROUP, RT.CLUSTER, RT.TRANSACTIONAL_ID
OK = {0}
MATRIX = [
    ("Produce", _produce, [(T, TOPIC, Op.WRITE, TOPIC_AUTH)], OK),
    ("Fetch", _fetch, [(T, TOPIC, Op.READ, TOPIC_AUTH)], OK),
    ("Fetch(follower)", _follower_fetch, [(C, CLUSTER_NAME, Op.CLUSTER_ACTION, TOPIC_AUTH)], {0, 6}),
    ("ListOffsets", _list_offsets, [(T, TOPIC, Op.DESCRIBE, TOPIC_AUTH)], OK),
    ("Metadata", _metadata, [(T, TOPIC, Op.DESCRIBE, TOPIC_AUTH)], OK),
    ("OffsetForLeaderEpoch", _offset_for_leader_epoch, [(T, TOPIC, Op.DESCRIBE, TOPIC_AUTH)], OK),
    ("CreateTopics", _create_topics, [(T, "made-1", Op.CREATE, TOPIC_AUTH)], OK),
    ("CreatePartitions", _create_partitions, [(T, "grow", Op.ALTER, TOPIC_AUTH)], OK),
    ("DeleteRecords", _delete_records, [(T, TOPIC, Op.DELETE, TOPIC_AUTH)], OK),
    ("DescribeConfigs(topic)", _describe_configs(2, TOPIC), [(T, TOPIC, Op.DESCRIBE_CONFIGS, TOPIC_AUTH)], OK),
    ("DescribeConfigs(broker)", _describe_configs(4, "0"), [(C, CLUSTER_NAME, Op.DESCRIBE_CONFIGS, CLUSTER_AUTH)], OK),
    ("AlterConfigs(topic)", _alter_topic_config, [(T, TOPIC, Op.ALTER_CONFIGS, TOPIC_AUTH)], OK),
    (
        "IncrementalAlterConfigs(broker)",
        _incremental_alter_broker_config,
        [(C, CLUSTER_NAME, Op.ALTER_CONFIGS, CLUSTER_AUTH)],
        OK,
    ),
    ("DescribeLogDirs", _describe_log_dirs, [(C, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_AUTH)], OK),
    ("FindCoordinator(group)", _find_coordinator(0, GROUP), [(G, GROUP, Op.DESCRIBE, GROUP_AUTH)], {0, 15}),
    ("FindCoordinator(txn)", _find_coordinator(1, TXN), [(X, TXN, Op.DESCRIBE, TXN_AUTH)], {0, 15}),
    ("OffsetCommit", _offset_commit, [(G, GROUP, Op.READ, GROUP_AUTH), (T, TOPIC, Op.READ, TOPIC_AUTH)], OK),
    ("OffsetFetch", _offset_fetch, [(G, GROUP, Op.DESCRIBE, GROUP_AUTH), (T, TOPIC, Op.DESCRIBE, TOPIC_AUTH)], OK),
    ("JoinGroup", _join_group, [(G, GROUP, Op.READ, GROUP_AUTH)], {0, 79}),
    ("SyncGroup", _sync_group, [(G, GROUP, Op.READ, GROUP_AUTH)], {25}),
    ("Heartbeat", _heartbeat, [(G, GROUP, Op.READ, GROUP_AUTH)], {25}),
    ("LeaveGroup", _leave_group, [(G, GROUP, Op.READ, GROUP_AUTH)], {0, 25}),
    ("DescribeGroups", _describe_groups, [(G, GROUP, Op.DESCRIBE, GROUP_AUTH)], OK),
    ("DeleteGroups", _delete_groups, [(G, "other-group", Op.DELETE, GROUP_AUTH)], {0, 69}),
    ("OffsetDelete", _offset_delete, [(G, "other-group", Op.DELETE, GROUP_AUTH)], {0, 69}),
    ("InitProducerId(idempotent)", _init_producer_id(None), [(C, CLUSTER_NAME, Op.IDEMPOTENT_WRITE, CLUSTER_AUTH)], OK),
    ("InitProducerId(transactional)", _init_producer_id(TXN), [(X, TXN, Op.WRITE, TXN_AUTH)], {0, 14, 15}),
    (
        "AddPartitionsToTxn",
        _add_partitions_to_txn,
        [(X, TXN, Op.WRITE, TXN_AUTH), (T, TOPIC, Op.WRITE, TOPIC_AUTH)],
        {47, 49, 51, 14, 15, 16},
    ),
    (
        "AddOffsetsToTxn",
        _add_offsets_to_txn,
        [(X, TXN, Op.WRITE, TXN_AUTH), (G, GROUP, Op.READ, GROUP_AUTH)],
        {47, 49, 51, 14, 15, 16},
    ),
    ("EndTxn", _end_txn, [(X, TXN, Op.WRITE, TXN_AUTH)], {47, 48, 49, 51, 14, 15, 16}),
    (
        "TxnOffsetCommit",
        _txn_offset_commit,
        [(X, TXN, Op.WRITE, TXN_AUTH), (G, GROUP, Op.READ, GROUP_AUTH), (T, TOPIC, Op.READ, TOPIC_AUTH)],
        {0, 47, 49, 51, 14, 15, 16},
    ),
    ("WriteTxnMarkers", _write_txn_markers, [(C, CLUSTER_NAME, Op.CLUSTER_ACTION, CLUSTER_AUTH)], {3, 6}),
    ("DescribeProducers", _describe_producers, [(T, TOPIC, Op.READ, TOPIC_AUTH)], OK),
    ("DescribeTransactions", _describe_transactions, [(X, TXN, Op.DESCRIBE, TXN_AUTH)], {0, 14, 15, 16, 105}),
    ("ElectLeaders", _elect_leaders, [(C, CLUSTER_NAME, Op.ALTER, CLUSTER_AUTH)], {0}),
    ("AlterPartitionReassignments", _alter_reassignments, [(C, CLUSTER_NAME, Op.ALTER, CLUSTER_AUTH)], {0}),
    ("ListPartitionReassignments", _list_reassignments, [(C, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_AUTH)], {0}),
    ("CreateAcls", _create_acls, [(C, CLUSTER_NAME, Op.ALTER, CLUSTER_AUTH)], OK),
    ("DescribeAcls", _describe_acls, [(C, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_AUTH)], OK),
    ("DeleteAcls", _delete_acls, [(C, CLUSTER_NAME, Op.ALTER, CLUSTER_AUTH)], OK),
    ("DeleteTopics", _delete_topics, [(T, "doomed", Op.DELETE, TOPIC_AUTH)], OK),
    # allowed: RESOURCE_NOT_FOUND (91) for a user without credentials
    ("DescribeUserScramCredentials", _describe_scram_credentials, [(C, CLUSTER_NAME, Op.DESCRIBE, CLUSTER_AUTH)], OK),
    ("AlterUserScramCredentials", _alter_scram_credentials, [(C, CLUSTER_NAME, Op.ALTER, CLUSTER_AUTH)], {91}),
]


def test_matrix_covers_every_authorized_api():
    """The matrix names every API the broker serves, except those Kafka does not authorize
    (ApiVersions; SaslHandshake and SaslAuthenticate, which come before there is a principal) or
    that are covered by their own tests below (ListGroups, ListTransactions, DescribeCluster: they
    filter or report rather than refuse; ControlledShutdown: a broker's)."""
    from pyklog.broker.protocol import SUPPORTED, api_name

    covered = {row[0].split("(")[0] for row in MATRIX}
    own_tests = {
        "ApiVersions",
        "SaslHandshake",
        "SaslAuthenticate",
        "ListGroups",
        "ListTransactions",
        "DescribeCluster",
        "ControlledShutdown",
    }
    assert {api_name(k) for k in SUPPORTED} - covered - own_tests == set()
    assert len(MATRIX) == 43


@pytest.mark.parametrize("row", MATRIX, ids=[r[0] for r in MATRIX])
def test_denied_then_allowed(secured, row):
    _, store, conn = secured
    name, call, grants, allowed = row
    granted = []
    try:
        for rtype, rname, op, denial in grants:
            expect(lambda: call(conn), {denial}, what=f"{name} without {op.name} on {rtype.name} {rname}")
            b = binding(rtype, rname, op)
            store.add([b])
            granted.append(b)
        code = expect(lambda: call(conn), allowed, what=f"{name} with its ACLs")
        assert code not in AUTH_ERRORS
    finally:
        store.remove(granted)
    # revoked: denied again (the first check's error)
    expect(lambda: call(conn), {grants[0][3]}, what=f"{name} after the ACLs were removed")


def test_deny_beats_allow_and_host_and_wildcards(secured):
    _, store, conn = secured
    allow_all = binding(RT.TOPIC, "*", Op.ALL, principal="User:*")
    deny_write = binding(RT.TOPIC, "ord", Op.WRITE, AclPermissionType.DENY, pt=PatternType.PREFIXED)
    other_host = binding(RT.TOPIC, TOPIC, Op.READ, host="10.255.255.1")
    try:
        store.add([other_host])
        expect(lambda: _fetch(conn), {TOPIC_AUTH}, what="READ granted for another host only")
        store.add([allow_all])
        expect(lambda: _produce(conn), {0}, what="User:* ALL on every topic")
        assert _fetch(conn) == 0
        store.add([deny_write])
        expect(lambda: _produce(conn), {TOPIC_AUTH}, what="a PREFIXED DENY of WRITE")
        assert _fetch(conn) == 0  # only WRITE is denied
    finally:
        store.remove([allow_all, deny_write, other_host])
    expect(lambda: _fetch(conn), {TOPIC_AUTH}, what="all removed")


def test_metadata_hides_topics_and_auto_creation_needs_create(secured):
    _, store, conn = secured

    def all_topics():
        return {t["name"] for t in conn.request(ApiKey.METADATA, {"topics": None})["topics"]}

    describe = binding(RT.TOPIC, TOPIC, Op.DESCRIBE)
    assert TOPIC not in all_topics()
    try:
        store.add([describe])
        wait_for(lambda: all_topics() == {TOPIC}, 20, message="only the describable topic listed")
    finally:
        store.remove([describe])

    def auto(name):
        r = conn.request(ApiKey.METADATA, {"topics": [{"name": name}], "allow_auto_topic_creation": True})
        return r["topics"][0]["error_code"]

    may_describe = binding(RT.TOPIC, "auto-", Op.DESCRIBE, pt=PatternType.PREFIXED)
    may_create = binding(RT.TOPIC, "auto-", Op.CREATE, pt=PatternType.PREFIXED)
    try:
        store.add([may_describe])
        expect(lambda: auto("auto-1"), {TOPIC_AUTH}, what="auto-creation without CREATE")
        store.add([may_create])
        expect(lambda: auto("auto-1"), {0, 5}, what="auto-creation with CREATE")
        expect(lambda: auto("auto-1"), {0}, what="the created topic")
    finally:
        store.remove([may_describe, may_create])


def test_authorized_operations_report_real_rights(secured):
    _, store, conn = secured
    grants = [
        binding(RT.TOPIC, TOPIC, Op.READ),
        binding(RT.CLUSTER, CLUSTER_NAME, Op.DESCRIBE),
        binding(RT.CLUSTER, CLUSTER_NAME, Op.IDEMPOTENT_WRITE),
        binding(RT.GROUP, GROUP, Op.READ),
    ]

    def cluster_ops():
        r = conn.request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations": True})
        return operations_from_bitfield(r["cluster_authorized_operations"])

    assert cluster_ops() == set()  # 0: may not describe the cluster
    try:
        store.add(grants)
        wait_for(lambda: cluster_ops() == {Op.DESCRIBE, Op.IDEMPOTENT_WRITE}, 20, message="cluster operations")

        def metadata():
            return conn.request(
                ApiKey.METADATA,
                {
                    "topics": [{"name": TOPIC}],
                    "include_topic_authorized_operations": True,
                    "include_cluster_authorized_operations": True,
                },
                version=10,
            )

        # each resource's ACLs are a node of their own with its own change notification: the
        # broker may have applied the cluster's before the topic's
        wait_for(
            lambda: (
                operations_from_bitfield(metadata()["topics"][0]["topic_authorized_operations"])
                == {Op.READ, Op.DESCRIBE}
            ),
            20,
            message="topic operations",
        )
        r = metadata()
        assert operations_from_bitfield(r["cluster_authorized_operations"]) == {Op.DESCRIBE, Op.IDEMPOTENT_WRITE}

        def group_ops():
            r = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP], "include_authorized_operations": True})
            return operations_from_bitfield(r["groups"][0]["authorized_operations"])

        wait_for(lambda: group_ops() == {Op.READ, Op.DESCRIBE}, 20, message="group operations")
        r = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP], "include_authorized_operations": False})
        assert r["groups"][0]["authorized_operations"] == -2147483648
    finally:
        store.remove(grants)


def test_list_groups_and_transactions_show_only_what_may_be_described(secured):
    _, store, conn = secured
    commit = [binding(RT.GROUP, "listed", Op.READ), binding(RT.TOPIC, TOPIC, Op.READ)]
    try:
        store.add(commit)

        def committed():
            r = conn.request(
                ApiKey.OFFSET_COMMIT,
                {
                    "group_id": "listed",
                    "generation_id_or_member_epoch": -1,
                    "member_id": "",
                    "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "committed_offset": 1}]}],
                },
            )
            return r["topics"][0]["partitions"][0]["error_code"] == 0

        wait_for(committed, 20, message="offsets committed for group 'listed'")
    finally:
        store.remove(commit)

    def groups():
        return {g["group_id"] for g in conn.request(ApiKey.LIST_GROUPS, {})["groups"]}

    assert "listed" not in groups()
    describe = binding(RT.GROUP, "listed", Op.DESCRIBE)
    try:
        store.add([describe])
        wait_for(lambda: "listed" in groups(), 20, message="the describable group listed")
    finally:
        store.remove([describe])
    cluster = binding(RT.CLUSTER, CLUSTER_NAME, Op.DESCRIBE)
    try:
        store.add([cluster])
        wait_for(lambda: "listed" in groups(), 20, message="every group listed with DESCRIBE on the cluster")
    finally:
        store.remove([cluster])
    wait_for(lambda: "listed" not in groups(), 20, message="hidden again")
    r = conn.request(ApiKey.LIST_TRANSACTIONS, {"state_filters": [], "producer_id_filters": []})
    assert r["transaction_states"] == []


def test_controlled_shutdown_needs_cluster_action(secured):
    _, _, conn = secured
    r = conn.request(ApiKey.CONTROLLED_SHUTDOWN, {"broker_id": 99, "broker_epoch": -1})
    assert r["error_code"] == CLUSTER_AUTH


def test_acl_apis_answer_kafkas_errors(secured):
    """Invalid ACLs and filters get INVALID_REQUEST; what CreateAcls made is in ZooKeeper in Kafka's
    JSON and DescribeAcls / DeleteAcls find it (also by a PREFIXED pattern and MATCH)."""
    _, store, conn = secured
    admin = binding(RT.CLUSTER, CLUSTER_NAME, Op.ALTER)
    try:
        store.add([admin])
        good = {
            "resource_type": int(RT.GROUP),
            "resource_name": "spark-",
            "resource_pattern_type": int(PatternType.PREFIXED),
            "principal": "User:spark",
            "host": "*",
            "operation": int(Op.READ),
            "permission_type": int(AclPermissionType.ALLOW),
        }
        bad = [
            dict(good, resource_type=int(RT.CLUSTER), resource_name="not-kafka-cluster", operation=int(Op.ALTER)),
            dict(good, operation=int(Op.WRITE)),  # WRITE is not a group operation
            dict(good, principal="spark"),
            dict(good, resource_pattern_type=int(PatternType.MATCH)),
            dict(good, resource_name=""),
        ]

        def created():
            return [x["error_code"] for x in conn.request(ApiKey.CREATE_ACLS, {"creations": [good, *bad]})["results"]]

        wait_for(lambda: created()[0] == 0, 20, message="CreateAcls allowed")
        assert created() == [0, 42, 42, 42, 42, 42]
        data, _ = store.client.get("/kafka-acl-extended/prefixed/Group/spark-")
        assert b'"principal":"User:spark"' in data and b'"operation":"Read"' in data
        assert store.client.get_children("/kafka-acl-extended-changes")
        # DescribeAcls needs DESCRIBE on the cluster: ALTER implies it
        flt = {
            "resource_type_filter": int(RT.GROUP),
            "resource_name_filter": "spark-job-1",
            "pattern_type_filter": int(PatternType.MATCH),
            "principal_filter": None,
            "host_filter": None,
            "operation": int(Op.ANY),
            "permission_type": int(AclPermissionType.ANY),
        }
        r = conn.request(ApiKey.DESCRIBE_ACLS, flt)
        assert r["error_code"] == 0
        assert [(x["resource_name"], x["pattern_type"], x["acls"][0]["principal"]) for x in r["resources"]] == [
            ("spark-", int(PatternType.PREFIXED), "User:spark")
        ]
        r = conn.request(ApiKey.DESCRIBE_ACLS, dict(flt, resource_type_filter=0))
        assert r["error_code"] == 42
        r = conn.request(
            ApiKey.DELETE_ACLS,
            {"filters": [dict(flt, pattern_type_filter=int(PatternType.PREFIXED), resource_name_filter="spark-")]},
        )
        assert [m["principal"] for m in r["filter_results"][0]["matching_acls"]] == ["User:spark"]
        assert not store.client.exists("/kafka-acl-extended/prefixed/Group/spark-")
    finally:
        store.remove([admin])


def test_denials_are_logged_on_the_authorizer_logger(secured):
    broker, _, conn = secured
    _produce(conn)
    out = broker.output()
    assert (
        "Principal = User:ANONYMOUS is Denied operation = WRITE from host = 127.0.0.1 on resource = Topic:LITERAL:orders"
        in out
    )
    assert "Traceback" not in out


@pytest.mark.skipif(os.environ.get("PYKLOG_SKIP_STOCK") == "1", reason="stock clients disabled")
def test_stock_clients_get_kafkas_authorization_errors(secured):
    """confluent-kafka (librdkafka): a producer without WRITE gets TOPIC_AUTHORIZATION_FAILED; its
    AdminClient creates, lists and deletes ACLs through pyklog's CreateAcls/DescribeAcls/DeleteAcls."""
    from confluent_kafka import KafkaError, Producer
    from confluent_kafka.admin import (
        AclBinding as CkBinding,
    )
    from confluent_kafka.admin import (
        AclBindingFilter,
        AdminClient,
        ResourcePatternType,
    )
    from confluent_kafka.admin import (
        AclOperation as CkOp,
    )
    from confluent_kafka.admin import (
        AclPermissionType as CkPerm,
    )
    from confluent_kafka.admin import ResourceType as CkType

    broker, store, _ = secured
    errors = []
    p = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 10000})
    p.produce(TOPIC, b"x", on_delivery=lambda err, msg: errors.append(err))
    p.flush(15)
    assert errors and errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    b = CkBinding(CkType.TOPIC, "ck-topic", ResourcePatternType.LITERAL, "User:carol", "*", CkOp.READ, CkPerm.ALLOW)
    fut = admin.create_acls([b])[b]
    with pytest.raises(Exception) as denied:
        fut.result(timeout=15)
    assert "CLUSTER_AUTHORIZATION_FAILED" in str(denied.value) or "authoriz" in str(denied.value).lower()
    grant = binding(RT.CLUSTER, CLUSTER_NAME, Op.ALTER)
    try:
        store.add([grant])
        deadline = time.monotonic() + 20
        while True:
            try:
                admin.create_acls([b])[b].result(timeout=15)
                break
            except Exception:  # noqa: BLE001 - the grant may not have reached the broker yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        flt = AclBindingFilter(CkType.TOPIC, "ck-topic", ResourcePatternType.ANY, None, None, CkOp.ANY, CkPerm.ANY)
        listed = admin.describe_acls(flt).result(timeout=15)
        assert [(x.name, x.principal, x.operation) for x in listed] == [("ck-topic", "User:carol", CkOp.READ)]
        deleted = admin.delete_acls([flt])[flt].result(timeout=15)
        assert [x.principal for x in deleted] == ["User:carol"]
    finally:
        store.remove([grant])


def test_super_users_and_allow_everyone(zookeeper, tmp_path):
    """super.users bypass every ACL (a DENY included); allow.everyone.if.no.acl.found opens the
    resources without any ACL, and only those."""
    with running_broker(
        zookeeper,
        str(tmp_path / "b"),
        **{"authorizer.class.name": PYKLOG_AUTHORIZER, "super.users": "User:admin;User:ANONYMOUS"},
    ) as broker:
        _super_user_allowed(broker)
    with running_broker(
        zookeeper,
        str(tmp_path / "c"),
        **{"authorizer.class.name": PYKLOG_AUTHORIZER, "allow.everyone.if.no.acl.found": "true"},
    ) as broker:
        _open_without_acls(broker)


def _super_user_allowed(broker):
    kc = kazoo_client(broker.zk_connect)
    try:
        ZkAclStore(kc).add([binding(RT.CLUSTER, CLUSTER_NAME, Op.ALL, AclPermissionType.DENY, principal="User:*")])
        conn = BrokerConnection("127.0.0.1", broker.port)
        time.sleep(0.5)
        assert _describe_log_dirs(conn) == 0
        conn.close()
    finally:
        kc.stop()
        kc.close()


def _open_without_acls(broker):
    kc = kazoo_client(broker.zk_connect)
    try:
        conn = BrokerConnection("127.0.0.1", broker.port)
        assert _describe_log_dirs(conn) == 0  # no ACL on the cluster: open
        ZkAclStore(kc).add([binding(RT.CLUSTER, CLUSTER_NAME, Op.ALTER, principal="User:admin")])
        expect(lambda: _describe_log_dirs(conn), {CLUSTER_AUTH}, what="an ACL on the cluster for someone else")
        conn.close()
    finally:
        kc.stop()
        kc.close()


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    conn = BrokerConnection("127.0.0.1", broker.port)
    try:
        assert _describe_acls(conn) == 54
        assert _create_acls(conn) == 54
        assert _delete_acls(conn) == 54
        assert _produce(conn) in (0, 3, 5)  # everything allowed, as before
    finally:
        conn.close()


def test_produce_auto_creates_only_with_create(secured):
    _, store, conn = secured

    def produce_to(name):
        r = conn.request(
            ApiKey.PRODUCE,
            {
                "acks": 1,
                "timeout_ms": 5000,
                "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": records(1)}]}],
            },
        )
        return r["responses"][0]["partition_responses"][0]["error_code"]

    write = binding(RT.TOPIC, "made-by-produce", Op.WRITE)
    create = binding(RT.TOPIC, "made-by-produce", Op.CREATE)
    try:
        store.add([write])
        expect(lambda: produce_to("made-by-produce"), {3}, what="Produce to a missing topic without CREATE")
        store.add([create])
        expect(lambda: produce_to("made-by-produce"), {0}, what="Produce auto-creating with CREATE")
    finally:
        store.remove([write, create])


def test_create_topics_answers_configs_only_with_describe_configs(secured):
    _, store, conn = secured

    def create(name):
        return conn.request(
            ApiKey.CREATE_TOPICS,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": 1,
                        "replication_factor": 1,
                        "configs": [{"name": "retention.ms", "value": "3600000"}],
                    }
                ],
                "timeout_ms": 5000,
                "validate_only": True,
            },
        )["topics"][0]

    grants = [binding(RT.TOPIC, "cfg-", Op.CREATE, pt=PatternType.PREFIXED)]
    try:
        store.add(grants)
        wait_for(lambda: create("cfg-1")["error_code"] == 0, 20, message="CreateTopics allowed")
        t = create("cfg-1")
        assert t["topic_config_error_code"] == TOPIC_AUTH and t["configs"] == []
        grants.append(binding(RT.TOPIC, "cfg-", Op.DESCRIBE_CONFIGS, pt=PatternType.PREFIXED))
        store.add(grants[1:])
        wait_for(lambda: create("cfg-1")["topic_config_error_code"] == 0, 20, message="configs answered")
        assert [c["name"] for c in create("cfg-1")["configs"]] == ["retention.ms"]
    finally:
        store.remove(grants)


def test_kafka_python_consumer_gets_topic_authorization_failed(secured):
    from kafka import KafkaConsumer
    from kafka.errors import TopicAuthorizationFailedError

    broker, store, _ = secured
    describe = binding(RT.TOPIC, TOPIC, Op.DESCRIBE)  # it may see the topic, not read it
    try:
        store.add([describe])
        time.sleep(0.5)
        consumer = KafkaConsumer(
            TOPIC, bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", api_version=(2, 5, 0)
        )
        try:
            with pytest.raises(TopicAuthorizationFailedError):
                deadline = time.monotonic() + 20
                while time.monotonic() < deadline:
                    consumer.poll(timeout_ms=500)
        finally:
            consumer.close()
    finally:
        store.remove([describe])
