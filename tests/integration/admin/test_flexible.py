"""The admin APIs at a Kafka 3.7 broker's versions (flexible ones, KIP-482) against a live broker:
stock clients (confluent-kafka's AdminClient, kafka-python 3's KafkaAdminClient) now pick the new
versions -- read from the broker's DEBUG per-request log line, not assumed -- and get the right
answers; DescribeLogDirs v3/v4 fields; malformed flexible requests of these APIs close the
connection with a log line naming the API and the problem, and the broker keeps serving."""

from __future__ import annotations

import os
import re
import socket
import struct
import uuid

from pyklog.broker.protocol import SUPPORTED, ApiKey, encode_request
from tests.support import Wire, create_topic, produce, records, wait_for

_REQUEST = re.compile(r"request api_key=(\d+) api_version=(\d+) correlation_id=-?\d+ client_id=(\S*) ")

#: the admin APIs whose versions this branch raised, and the new transaction admin APIs
ADMIN_APIS = [
    ApiKey.DELETE_RECORDS,
    ApiKey.DESCRIBE_CONFIGS,
    ApiKey.ALTER_CONFIGS,
    ApiKey.DESCRIBE_LOG_DIRS,
    ApiKey.CREATE_PARTITIONS,
    ApiKey.DELETE_GROUPS,
    ApiKey.INCREMENTAL_ALTER_CONFIGS,
    ApiKey.OFFSET_DELETE,
    ApiKey.DESCRIBE_CLUSTER,
    ApiKey.DESCRIBE_PRODUCERS,
    ApiKey.DESCRIBE_TRANSACTIONS,
    ApiKey.LIST_TRANSACTIONS,
]


def _versions_used(output: str, client_id: str) -> dict[int, set[int]]:
    """{api key: {versions}} of the requests ``client_id`` sent, from the broker's DEBUG lines."""
    out: dict[int, set[int]] = {}
    for key, version, cid in _REQUEST.findall(output):
        if cid == client_id:
            out.setdefault(int(key), set()).add(int(version))
    return out


def _topic() -> str:
    return f"fa-{uuid.uuid4().hex[:8]}"


def _fill(port: int, topic: str, partitions: int, n: int = 10) -> None:
    with Wire(port) as w:
        assert create_topic(w, topic, partitions)["error_code"] == 0
        for p in range(partitions):
            assert produce(w, topic, records(n, prefix=b"p%d-" % p), partition=p)["error_code"] == 0


def test_confluent_kafka_admin_client_uses_the_new_versions(broker_factory):
    """librdkafka 2.x negotiates each admin API's version from ApiVersions: with the flexible
    versions advertised it uses them (it fell back to the old ones before), and each call works."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        NewPartitions,
    )

    b = broker_factory(0, log_level="DEBUG")
    topic = _topic()
    _fill(b.port, topic, 2)
    admin = AdminClient({"bootstrap.servers": b.bootstrap, "client.id": "ck-admin"})

    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    got = admin.describe_configs([res])[res].result(30)
    assert got["cleanup.policy"].value == "delete"
    broker_res = ConfigResource(ConfigResource.Type.BROKER, "0")
    assert "log.retention.hours" in admin.describe_configs([broker_res])[broker_res].result(30)

    inc = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([inc])[inc].result(30)
    assert admin.describe_configs([res])[res].result(30)["retention.ms"].value == "3600000"
    whole = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"segment.ms": "7200000"})
    admin.alter_configs([whole])[whole].result(30)
    now = admin.describe_configs([res])[res].result(30)
    assert now["segment.ms"].value == "7200000" and now["retention.ms"].value != "3600000"  # AlterConfigs replaces

    admin.create_partitions([NewPartitions(topic, 3)])[topic].result(30)
    wait_for(lambda: len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 3, message="3 partitions")
    low = next(iter(admin.delete_records([TopicPartition(topic, 0, 4)]).values())).result(30)
    assert low.low_watermark == 4

    from confluent_kafka import Consumer

    group = f"g-{uuid.uuid4().hex[:6]}"
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
    c.commit(offsets=[TopicPartition(topic, 0, 5)], asynchronous=False)
    c.close()
    admin.delete_consumer_groups([group])[group].result(30)

    cluster = admin.describe_cluster().result(30)
    assert [n.id for n in cluster.nodes] == [0]

    used = _versions_used(b.output(), "ck-admin")
    print(f"librdkafka admin versions: { {ApiKey(k).name: sorted(v) for k, v in used.items() if k in ADMIN_APIS} }")
    # librdkafka 2.16's highest versions, all within pyklog's ranges: the flexible ones now (main's
    # ranges had it on IncrementalAlterConfigs 0, AlterConfigs/CreatePartitions/DeleteRecords/DeleteGroups 1)
    assert used[ApiKey.DESCRIBE_CONFIGS] == {1}  # librdkafka's maximum is v1 (non-flexible)
    assert used[ApiKey.INCREMENTAL_ALTER_CONFIGS] == {1}
    assert used[ApiKey.ALTER_CONFIGS] == {2}
    assert used[ApiKey.CREATE_PARTITIONS] == {2}  # librdkafka's maximum (pyklog serves 3)
    assert used[ApiKey.DELETE_RECORDS] == {2}
    assert used[ApiKey.DELETE_GROUPS] == {2}
    assert ApiKey.DESCRIBE_CLUSTER not in used  # librdkafka's describe_cluster asks Metadata
    assert "Traceback" not in b.output()


def test_kafka_python_admin_client_uses_the_new_versions(broker_factory):
    """kafka-python 3 uses min(its max, the broker's max) for every API: the highest both know."""
    from kafka import TopicPartition as TP
    from kafka.admin import (
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewPartitions,
    )
    from kafka.protocol.admin import (
        AlterConfigsRequest,
        CreatePartitionsRequest,
        DeleteGroupsRequest,
        DeleteRecordsRequest,
        DescribeClusterRequest,
        DescribeConfigsRequest,
        DescribeLogDirsRequest,
        IncrementalAlterConfigsRequest,
    )
    from kafka.protocol.admin.transactions import (
        DescribeProducersRequest,
        DescribeTransactionsRequest,
        ListTransactionsRequest,
    )

    b = broker_factory(0, log_level="DEBUG", transaction_state_log_num_partitions=2)
    topic = _topic()
    _fill(b.port, topic, 2)
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap, client_id="kp-admin")
    try:
        got = kp.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        assert "cleanup.policy" in repr(got), got
        # kafka-python's alter_configs goes incremental when the broker has IncrementalAlterConfigs
        kp.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "1234567"})])
        assert "1234567" in repr(kp.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]))
        kp.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={"segment.ms": "7654321"})], incremental=False
        )  # the legacy whole-set AlterConfigs (kafka-python re-sends the
        now = repr(kp.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]))  # overrides it read)
        assert "7654321" in now and "1234567" in now, now
        kp.create_partitions({topic: NewPartitions(3)})
        out = kp.delete_records({TP(topic, 1): 6})
        assert "6" in repr(out), out
        dirs = kp.describe_log_dirs()
        assert topic in repr(dirs), dirs
        cluster = kp.describe_cluster()
        assert "0" in repr(cluster)
        group = f"g-{uuid.uuid4().hex[:6]}"
        from kafka.structs import OffsetAndMetadata

        kp.alter_group_offsets(group, {TP(topic, 0): OffsetAndMetadata(3, "", None)})
        kp.delete_group_offsets(group, [TP(topic, 0)])
        kp.delete_groups([group])
        assert kp.list_transactions() == {0: []}
        producers = kp.describe_producers([TP(topic, 0)])
        assert list(producers) == [TP(topic, 0)] and producers[TP(topic, 0)].active_producers == []
    finally:
        kp.close()

    used = _versions_used(b.output(), "kp-admin")
    print(f"kafka-python admin versions: { {ApiKey(k).name: sorted(v) for k, v in used.items() if k in ADMIN_APIS} }")
    for cls in (
        DescribeConfigsRequest,
        AlterConfigsRequest,
        IncrementalAlterConfigsRequest,
        CreatePartitionsRequest,
        DeleteRecordsRequest,
        DescribeLogDirsRequest,
        DescribeClusterRequest,
        DeleteGroupsRequest,
        ListTransactionsRequest,
        DescribeProducersRequest,
    ):
        want = min(cls.max_version, SUPPORTED[ApiKey(cls.API_KEY)][1])
        assert used.get(cls.API_KEY) == {want}, (cls.__name__, used.get(cls.API_KEY), want)
    assert used[ApiKey.OFFSET_DELETE] == {0}
    assert DescribeTransactionsRequest.API_KEY not in used  # not called here (see test_admin_transactions)
    assert "Traceback" not in b.output()


def test_describe_log_dirs_v3_error_code_and_v4_volume_bytes(broker_factory):
    """v3 adds the top-level error code, v4 the volume's total and usable bytes: the log dir's
    filesystem's real figures (os.statvfs), which move when a file is written there."""
    b = broker_factory(0)
    topic = _topic()
    _fill(b.port, topic, 1)
    log_dir = os.path.join(b.log_dir, "data")
    with Wire(b.port) as w:
        v2 = w.request(ApiKey.DESCRIBE_LOG_DIRS, 2, {"topics": None})
        assert "error_code" not in v2 and "total_bytes" not in v2["results"][0]
        v3 = w.request(ApiKey.DESCRIBE_LOG_DIRS, 3, {"topics": None})
        assert v3["error_code"] == 0 and "total_bytes" not in v3["results"][0]
        v4 = w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": [{"topic": topic, "partitions": [0]}]})
        (res,) = v4["results"]
        assert res["error_code"] == 0 and os.path.realpath(res["log_dir"]) == os.path.realpath(log_dir)
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]]) for t in res["topics"]] == [(topic, [0])]
        st = os.statvfs(log_dir)
        assert res["total_bytes"] == st.f_blocks * st.f_frsize
        assert 0 < res["usable_bytes"] <= res["total_bytes"]
        # another process writes 64 MiB to the same filesystem: the broker's usable bytes go down
        filler = os.path.join(b.log_dir, "filler.bin")
        before = res["usable_bytes"]
        with open(filler, "wb") as f:
            f.write(b"\0" * (64 << 20))
            f.flush()
            os.fsync(f.fileno())
        try:
            after = w.request(ApiKey.DESCRIBE_LOG_DIRS, 4, {"topics": None})["results"][0]["usable_bytes"]
            # other writers share the disk: allow them 32 MiB of noise either way
            assert before - after > 32 << 20, (before, after)
        finally:
            os.unlink(filler)


# one well-formed request of each raised/new API in its newest (flexible) version
_FLEX_REQUESTS = {
    ApiKey.DESCRIBE_CONFIGS: {
        "resources": [{"resource_type": 2, "resource_name": "t", "configuration_keys": None}],
        "include_synonyms": True,
        "include_documentation": True,
    },
    ApiKey.ALTER_CONFIGS: {
        "resources": [
            {"resource_type": 2, "resource_name": "t", "configs": [{"name": "retention.ms", "value": "1000"}]}
        ],
        "validate_only": True,
    },
    ApiKey.INCREMENTAL_ALTER_CONFIGS: {
        "resources": [
            {
                "resource_type": 2,
                "resource_name": "t",
                "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
            }
        ],
        "validate_only": True,
    },
    ApiKey.CREATE_PARTITIONS: {
        "topics": [{"name": "t", "count": 1, "assignments": None}],
        "timeout_ms": 1000,
        "validate_only": True,
    },
    ApiKey.DELETE_RECORDS: {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "offset": 0}]}],
        "timeout_ms": 1000,
    },
    ApiKey.DELETE_GROUPS: {"groups_names": ["no-such-group"]},
    ApiKey.DESCRIBE_LOG_DIRS: {"topics": [{"topic": "t", "partitions": [0]}]},
    ApiKey.DESCRIBE_CLUSTER: {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    ApiKey.DESCRIBE_PRODUCERS: {"topics": [{"name": "t", "partition_indexes": [0, 7]}]},
    ApiKey.DESCRIBE_TRANSACTIONS: {"transactional_ids": ["nobody"]},
    ApiKey.LIST_TRANSACTIONS: {"state_filters": ["Ongoing"], "producer_id_filters": [], "duration_filter": -1},
}

_MANGLES = [
    (lambda body: b"\xff" * 6 + body[1:], "unsigned varint longer than 5 bytes"),
    (lambda body: b"\xff\xff\xff\xff\x0f" + body[1:], "expected 4294967294"),
    (lambda body: body[:-1] + b"\x01\x05\x7f", "_tagged_fields"),
    (lambda body: body[: len(body) // 2], "malformed"),
]


def test_malformed_flexible_admin_requests_close_the_connection_and_name_the_problem(broker_factory):
    """Each API's newest version, well-formed: answered.  Mangled (a varint that never ends, a huge
    compact length, a tagged field section promising more than it holds, a body cut in half): the
    connection is closed without an answer, the broker logs which API and what it read, and goes on
    serving (no Traceback: no handler ever saw the bad body)."""
    b = broker_factory(0, transaction_state_log_num_partitions=2)
    _fill(b.port, "t", 1)
    closed = 0
    for api, body in _FLEX_REQUESTS.items():
        version = SUPPORTED[api][1]
        with Wire(b.port) as w:
            resp = w.request(api, version, body)
            assert resp.get("error_code", 0) in (0, 15), (api, resp)  # 15: no coordinator yet (ListTransactions)
        frame = encode_request(api, version, 5, "bad", body)
        header_len = 4 + 8 + 2 + 3 + 1  # size, key/version/correlation id, client id "bad", header tags
        for mangle, logged in _MANGLES:
            bad = frame[4:header_len] + mangle(frame[header_len:])
            s = socket.create_connection(("127.0.0.1", b.port), timeout=10)
            try:
                s.sendall(struct.pack(">i", len(bad)) + bad)
                assert s.recv(1) == b"", (api, logged)  # closed, no answer
                closed += 1
            finally:
                s.close()
            wait_for(
                lambda: f"malformed {_name(api)} v{version} request" in b.output(),
                timeout=10,
                message=f"the log line for {_name(api)}",
            )
        assert any(logged in b.output() for _, logged in _MANGLES)
    assert closed == len(_FLEX_REQUESTS) * len(_MANGLES)
    with Wire(b.port) as w:  # still serving
        assert w.request(ApiKey.DESCRIBE_CLUSTER, 1, _FLEX_REQUESTS[ApiKey.DESCRIBE_CLUSTER])["error_code"] == 0
    assert b.proc.poll() is None and "Traceback" not in b.output()


def _name(api) -> str:
    from pyklog.broker.protocol import api_name

    return api_name(api)
