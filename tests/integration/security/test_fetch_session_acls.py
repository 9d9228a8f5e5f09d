"""Fetch sessions under Kafka's ACL authorizer: a session's Fetches are authorized as sessionless
ones, each time they read -- denied, then allowed, and a session opened while allowed gets no record
once READ is revoked (its next Fetch after an append answers TOPIC_AUTHORIZATION_FAILED)."""

from __future__ import annotations

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import CLUSTER_NAME, AclOperation, ResourceType
from tests.integration.security.test_authorization_matrix import TOPIC, TOPIC_AUTH, _secured, binding, expect
from tests.support import records, running_broker


@pytest.fixture(scope="module")
def secured_broker(zookeeper, tmp_path_factory):
    with running_broker(
        zookeeper,
        str(tmp_path_factory.mktemp("session-acl-broker")),
        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "auto.create.topics.enable": "true"},
    ) as broker:
        yield from _secured(broker)


def _session_fetch(c, session_id, epoch, named=True, replica_id=-1, offset=0):
    """A Fetch in a session; returns (session id, top-level error, [(partition error, record bytes)])."""
    r = c.request(
        ApiKey.FETCH,
        {
            "replica_id": replica_id,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "session_id": session_id,
            "session_epoch": epoch,
            "topics": [
                {
                    "topic": TOPIC,
                    "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 1 << 20}],
                }
            ]
            if named
            else [],
            "forgotten_topics_data": [],
        },
    )
    parts = [(p["error_code"], len(p["records"] or b"")) for t in r["responses"] for p in t["partitions"]]
    return r["session_id"], r["error_code"], parts


def _produce(c) -> int:
    r = c.request(
        ApiKey.PRODUCE,
        {
            "acks": 1,
            "timeout_ms": 5000,
            "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records(1)}]}],
        },
    )
    return r["responses"][0]["partition_responses"][0]["error_code"]


def test_session_fetches_are_authorized_at_every_read(secured_broker):
    _, store, conn = secured_broker
    read = binding(ResourceType.TOPIC, TOPIC, AclOperation.READ)
    write = binding(ResourceType.TOPIC, TOPIC, AclOperation.WRITE)
    cluster_action = binding(ResourceType.CLUSTER, CLUSTER_NAME, AclOperation.CLUSTER_ACTION)
    store.add([write])
    try:
        # denied: the full fetch opening a session, and its incremental fetch, answer no record
        sid, err, parts = _session_fetch(conn, 0, 0)
        assert err == 0 and parts == [(TOPIC_AUTH, 0)]
        if sid:
            assert _session_fetch(conn, sid, 1)[2] == [(TOPIC_AUTH, 0)]
        # a follower's session without CLUSTER_ACTION: denied too
        _, _, fparts = _session_fetch(conn, 0, 0, replica_id=3)
        assert fparts == [(TOPIC_AUTH, 0)]
        # allowed: records
        store.add([read])
        expect(lambda: _session_fetch(conn, 0, -1)[2][0][0], {0}, what="READ granted")
        sid, err, parts = _session_fetch(conn, 0, 0)
        assert sid != 0 and err == 0 and parts[0][0] == 0 and parts[0][1] > 0
        end = conn.request(
            ApiKey.LIST_OFFSETS,
            {"replica_id": -1, "topics": [{"name": TOPIC, "partitions": [{"partition_index": 0, "timestamp": -1}]}]},
        )["topics"][0]["partitions"][0]["offset"]
        assert _session_fetch(conn, sid, 1, offset=end)[2] == []  # at the end: nothing new, nothing answered
        assert _session_fetch(conn, sid, 2, named=False)[2] == []
        # READ revoked while the session lives: after an append, its next fetch is refused
        store.remove([read])
        expect(lambda: _session_fetch(conn, 0, -1)[2][0][0], {TOPIC_AUTH}, what="READ revoked")
        assert expect(lambda: _produce(conn), {0}, what="a record appended") == 0
        sid2, err, parts = _session_fetch(conn, sid, 3, named=False)
        assert sid2 == sid and err == 0 and parts == [(TOPIC_AUTH, 0)]
        store.add([cluster_action])
        expect(lambda: _session_fetch(conn, 0, -1, replica_id=3)[2][0][0], {0, 6}, what="CLUSTER_ACTION granted")
    finally:
        store.remove([read, write, cluster_action])
