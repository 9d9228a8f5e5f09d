"""Behaviour details where pyklog must answer exactly as Kafka does.

* Metadata v8 authorized operations: without an authorizer Kafka reports every operation the
  resource type supports (topics 3576, the cluster 8096), Integer.MIN_VALUE when not asked.
* OffsetCommit / Heartbeat / SyncGroup check the member, then the generation, then the group's
  state (Kafka's GroupMetadata.validateOffsetCommit): a stale member committing while its group
  completes a rebalance gets ILLEGAL_GENERATION, not REBALANCE_IN_PROGRESS.

Real ZooKeeper, real broker processes, real clients (raw protocol, confluent-kafka, kafka-python).
"""

from __future__ import annotations

import threading
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, create_topic, wait_for

TOPIC_OPS = 3576  # READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS
CLUSTER_OPS = 8096  # CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS IDEMPOTENT_WRITE
NOT_ASKED = -2147483648

ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS = 22, 25, 27


@pytest.fixture
def kbroker(broker_factory):
    b = broker_factory(0, group_initial_rebalance_delay_ms=0, group_min_session_timeout_ms=1000)
    yield b
    assert b.stop() == 0, b.output()[-5000:]
    assert "Traceback" not in b.output(), b.output()[-20000:]


# ------------------------------------------------------------------ Metadata authorized operations


def test_metadata_v8_authorized_operations_raw(kbroker):
    topic = "ops-" + uuid.uuid4().hex[:8]
    with Wire(kbroker.port) as w:
        assert create_topic(w, topic, 2)["error_code"] == 0
        for ask_topic, ask_cluster in ((True, True), (False, False), (True, False), (False, True)):
            r = w.request(
                ApiKey.METADATA,
                8,
                {
                    "topics": [{"name": topic}],
                    "allow_auto_topic_creation": False,
                    "include_cluster_authorized_operations": ask_cluster,
                    "include_topic_authorized_operations": ask_topic,
                },
            )
            (t,) = r["topics"]
            assert t["error_code"] == 0 and len(t["partitions"]) == 2
            assert t["topic_authorized_operations"] == (TOPIC_OPS if ask_topic else NOT_ASKED)
            assert r["cluster_authorized_operations"] == (CLUSTER_OPS if ask_cluster else NOT_ASKED)


def test_confluent_kafka_describe_topics_and_cluster_report_every_operation(kbroker):
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation, AdminClient, NewTopic

    topic = "ops-" + uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": kbroker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    desc = admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(30)
    assert set(desc.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    }
    cluster = admin.describe_cluster(include_authorized_operations=True).result(30)
    assert set(cluster.authorized_operations) == {
        AclOperation.CREATE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
    }
    # not asked: librdkafka reports None (Kafka's -2147483648 on the wire)
    plain = admin.describe_topics(TopicCollection([topic]))[topic].result(30)
    assert plain.authorized_operations is None


# ------------------------------------------------------------------ OffsetCommit order of checks


def _join(w: Wire, group: str, member: str = "") -> dict:
    return w.request(
        ApiKey.JOIN_GROUP,
        3,
        {
            "group_id": group,
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": member,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )


def _join_probe(w: Wire, group: str) -> bool:
    """True once the coordinator is loaded: an OffsetFetch of the group answers without error."""
    r = w.request(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [{"name": "x", "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]["error_code"] == 0


def _commit(w: Wire, group: str, generation: int, member: str, topic: str, offset: int) -> int:
    r = w.request(
        ApiKey.OFFSET_COMMIT,
        2,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": topic,
                    "partitions": [{"partition_index": 0, "committed_offset": offset, "committed_metadata": ""}],
                }
            ],
        },
    )
    return r["topics"][0]["partitions"][0]["error_code"]


def _committed(w: Wire, group: str, topic: str) -> int:
    r = w.request(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0]}]})
    return r["topics"][0]["partitions"][0]["committed_offset"]


def test_stale_member_commit_during_completing_rebalance_is_illegal_generation(kbroker):
    """A member of generation 1 commits while generation 2 is CompletingRebalance (the leader has
    not synced yet): Kafka answers ILLEGAL_GENERATION (pyklog used to answer REBALANCE_IN_PROGRESS,
    on which clients retry the stale commit instead of rejoining)."""
    group, topic = "stale-" + uuid.uuid4().hex[:8], "stale-" + uuid.uuid4().hex[:8]
    with Wire(kbroker.port) as wa, Wire(kbroker.port) as wb, Wire(kbroker.port) as wc:
        assert create_topic(wc, topic)["error_code"] == 0
        wait_for(
            lambda: (
                wc.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})["error_code"] == 0
                and _join_probe(wc, group)
            ),
            message="the group coordinator",
        )
        a1 = _join(wa, group)
        assert a1["error_code"] == 0 and a1["generation_id"] == 1
        a = a1["member_id"]
        r = wa.request(
            ApiKey.SYNC_GROUP,
            2,
            {
                "group_id": group,
                "generation_id": 1,
                "member_id": a,
                "assignments": [{"member_id": a, "assignment": b"x"}],
            },
        )
        assert r["error_code"] == 0
        assert _commit(wc, group, 1, a, topic, 5) == 0  # Stable, current member: stored

        b_result: dict = {}
        tb = threading.Thread(target=lambda: b_result.update(_join(wb, group)))
        tb.start()  # B's join moves the group to PreparingRebalance; it waits for A
        # A's heartbeat says a rebalance is in progress (generation 1 is still current)
        for _ in range(200):
            hb = wc.request(ApiKey.HEARTBEAT, 2, {"group_id": group, "generation_id": 1, "member_id": a})
            if hb["error_code"] == REBALANCE_IN_PROGRESS:
                break
        assert hb["error_code"] == REBALANCE_IN_PROGRESS
        a2 = _join(wa, group, a)  # A rejoins: generation 2, CompletingRebalance until A (leader) syncs
        tb.join(30)
        assert a2["error_code"] == 0 and a2["generation_id"] == 2 and b_result["generation_id"] == 2
        b = b_result["member_id"]

        # the stale generation comes before the state: ILLEGAL_GENERATION
        assert _commit(wc, group, 1, a, topic, 6) == ILLEGAL_GENERATION
        assert _commit(wc, group, 1, b, topic, 6) == ILLEGAL_GENERATION
        # an unknown member comes before the generation and the state
        assert _commit(wc, group, 2, "gone-member", topic, 6) == UNKNOWN_MEMBER_ID
        assert _commit(wc, group, 1, "gone-member", topic, 6) == UNKNOWN_MEMBER_ID
        # a current member of the current generation: the state decides
        assert _commit(wc, group, 2, b, topic, 6) == REBALANCE_IN_PROGRESS
        # Heartbeat and SyncGroup use the same order
        assert (
            wc.request(ApiKey.HEARTBEAT, 2, {"group_id": group, "generation_id": 1, "member_id": b})["error_code"]
            == ILLEGAL_GENERATION
        )
        assert (
            wc.request(ApiKey.HEARTBEAT, 2, {"group_id": group, "generation_id": 2, "member_id": "gone-member"})[
                "error_code"
            ]
            == UNKNOWN_MEMBER_ID
        )
        assert (
            wc.request(
                ApiKey.SYNC_GROUP, 2, {"group_id": group, "generation_id": 1, "member_id": b, "assignments": []}
            )["error_code"]
            == ILLEGAL_GENERATION
        )
        assert _committed(wc, group, topic) == 5  # nothing refused was stored

        r = wa.request(
            ApiKey.SYNC_GROUP,
            2,
            {
                "group_id": group,
                "generation_id": 2,
                "member_id": a,
                "assignments": [{"member_id": a, "assignment": b"x"}, {"member_id": b, "assignment": b""}],
            },
        )
        assert r["error_code"] == 0
        assert _commit(wc, group, 2, b, topic, 7) == 0
        assert _commit(wc, group, 1, a, topic, 8) == ILLEGAL_GENERATION
        assert _committed(wc, group, topic) == 7


# ------------------------------------------------------------------ CreateTopics / DeleteTopics in batches


def test_create_and_delete_topics_in_one_batch_answer_each_topic(kbroker):
    """One CreateTopics of 60 topics (written to ZooKeeper in one multi-op) with refused ones among
    them: each topic gets its own answer, the refused ones write nothing; then one DeleteTopics."""
    prefix = "batch-" + uuid.uuid4().hex[:6]
    good = [f"{prefix}-{i:03d}" for i in range(60)]
    with Wire(kbroker.port) as w:
        assert create_topic(w, f"{prefix}-existing")["error_code"] == 0
        topics = [
            {"name": n, "num_partitions": 2, "replication_factor": 1, "assignments": [], "configs": []} for n in good
        ]
        topics += [
            {
                "name": f"{prefix}-existing",
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [],
            },
            {"name": "bad/name", "num_partitions": 1, "replication_factor": 1, "assignments": [], "configs": []},
            {
                "name": f"{prefix}-badcfg",
                "num_partitions": 1,
                "replication_factor": 1,
                "assignments": [],
                "configs": [{"name": "cleanup.policy", "value": "shred"}],
            },
            {"name": f"{prefix}-rf", "num_partitions": 1, "replication_factor": 3, "assignments": [], "configs": []},
        ]
        r = w.request(ApiKey.CREATE_TOPICS, 4, {"topics": topics, "timeout_ms": 30000, "validate_only": False})
        codes = {t["name"]: t["error_code"] for t in r["topics"]}
        assert [codes[n] for n in good] == [0] * 60
        assert codes[f"{prefix}-existing"] == 36  # TOPIC_ALREADY_EXISTS
        assert codes["bad/name"] == 17  # INVALID_TOPIC_EXCEPTION
        assert codes[f"{prefix}-badcfg"] == 40  # INVALID_CONFIG
        assert codes[f"{prefix}-rf"] == 38  # INVALID_REPLICATION_FACTOR
        md = w.request(
            ApiKey.METADATA,
            8,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        listed = {t["name"]: len(t["partitions"]) for t in md["topics"] if t["name"].startswith(prefix)}
        assert listed == {**dict.fromkeys(good, 2), f"{prefix}-existing": 1}  # nothing of the refused ones
        r = w.request(ApiKey.DELETE_TOPICS, 3, {"topic_names": good + [f"{prefix}-missing"], "timeout_ms": 30000})
        dcodes = {t["name"]: t["error_code"] for t in r["responses"]}
        assert [dcodes[n] for n in good] == [0] * 60 and dcodes[f"{prefix}-missing"] == 3
        md = w.request(
            ApiKey.METADATA,
            8,
            {
                "topics": None,
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        assert {t["name"] for t in md["topics"] if t["name"].startswith(prefix)} == {f"{prefix}-existing"}
    import os

    wait_for(
        lambda: not [d for d in os.listdir(kbroker.props["log.dirs"]) if d.startswith(prefix + "-0")],
        message="the deleted topics' logs to go",
    )
    assert os.path.isdir(os.path.join(kbroker.props["log.dirs"], f"{prefix}-existing-0"))
