"""Flexible versions (KIP-482) against a live broker over the wire: what the handlers add in the new
versions (CreateTopics v5, DeleteTopics v5, JoinGroup v7, SyncGroup v5, ListGroups v4, ApiVersions
v3) and that a malformed flexible request is answered by closing the connection, naming the field in
the broker's log, while the broker keeps serving."""

from __future__ import annotations

import socket
import struct

import pytest

from pyklog.broker.protocol import SUPPORTED, ApiKey, encode_request
from tests.support import Wire


def test_api_versions_v3_advertises_the_flexible_versions(broker):
    with Wire(broker.port) as w:
        resp = w.request(
            ApiKey.API_VERSIONS, 3, {"client_software_name": "pyklog-test", "client_software_version": "1.0"}
        )
    assert resp["error_code"] == 0
    got = {a["api_key"]: (a["min_version"], a["max_version"]) for a in resp["api_keys"]}
    assert got[ApiKey.METADATA] == (0, 12) and got[ApiKey.PRODUCE] == (0, 9) and got[ApiKey.FETCH] == (0, 16)
    assert all(got[int(k)] == SUPPORTED[k] for k in SUPPORTED if int(k) in got)


def test_create_topics_v5_and_delete_topics_v5_fields(broker):
    with Wire(broker.port) as w:
        resp = w.request(
            ApiKey.CREATE_TOPICS,
            5,
            {
                "topics": [
                    {
                        "name": "flex-created",
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "assignments": [],
                        "configs": [{"name": "retention.ms", "value": "3600000"}],
                    }
                ],
                "timeout_ms": 10000,
            },
        )
        t = resp["topics"][0]
        assert (t["error_code"], t["num_partitions"], t["replication_factor"]) == (0, 1, 1)
        assert t["configs"] == [
            {"name": "retention.ms", "value": "3600000", "read_only": False, "config_source": 1, "is_sensitive": False}
        ]
        resp = w.request(
            ApiKey.CREATE_TOPICS,
            5,
            {"topics": [{"name": "flex-created", "num_partitions": 1, "replication_factor": 1}], "timeout_ms": 10000},
        )
        t = resp["topics"][0]
        assert t["error_code"] == 36 and "already exists" in t["error_message"] and t["num_partitions"] == -1
        resp = w.request(ApiKey.DELETE_TOPICS, 5, {"topic_names": ["flex-created", "flex-none"], "timeout_ms": 5000})
        by = {r["name"]: r for r in resp["responses"]}
        assert by["flex-created"]["error_code"] == 0 and by["flex-created"]["error_message"] is None
        assert by["flex-none"]["error_code"] == 3 and "does not exist" in by["flex-none"]["error_message"]


def _join(w, member_id="", version=7):
    return w.request(
        ApiKey.JOIN_GROUP,
        version,
        {
            "group_id": "flex-g",
            "session_timeout_ms": 10000,
            "rebalance_timeout_ms": 10000,
            "member_id": member_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"\0\0"}],
        },
    )


def test_group_protocol_in_join_v7_sync_v5_and_list_groups_v4_states(broker):
    with Wire(broker.port) as w:
        # find the group coordinator: a single broker is it
        assert w.request(ApiKey.FIND_COORDINATOR, 3, {"key": "flex-g", "key_type": 0})["error_code"] == 0
        first = _join(w)
        assert first["error_code"] == 79  # MEMBER_ID_REQUIRED (KIP-394)
        joined = _join(w, first["member_id"])
        assert (
            joined["error_code"] == 0 and joined["protocol_type"] == "consumer" and joined["protocol_name"] == "range"
        )
        me, gen = joined["member_id"], joined["generation_id"]
        bad = w.request(
            ApiKey.SYNC_GROUP,
            5,
            {
                "group_id": "flex-g",
                "generation_id": gen,
                "member_id": me,
                "protocol_type": "consumer",
                "protocol_name": "roundrobin",
                "assignments": [],
            },
        )
        assert bad["error_code"] == 23  # INCONSISTENT_GROUP_PROTOCOL
        synced = w.request(
            ApiKey.SYNC_GROUP,
            5,
            {
                "group_id": "flex-g",
                "generation_id": gen,
                "member_id": me,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": me, "assignment": b"abc"}],
            },
        )
        assert synced == {
            "throttle_time_ms": 0,
            "error_code": 0,
            "protocol_type": "consumer",
            "protocol_name": "range",
            "assignment": b"abc",
        }
        listed = w.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["stable"]})["groups"]
        assert {"group_id": "flex-g", "protocol_type": "consumer", "group_state": "Stable"} in listed
        assert all(
            g["group_id"] != "flex-g" for g in w.request(ApiKey.LIST_GROUPS, 4, {"states_filter": ["Empty"]})["groups"]
        )
        everything = w.request(ApiKey.LIST_GROUPS, 4, {"states_filter": []})["groups"]
        assert any(g["group_id"] == "flex-g" for g in everything)


@pytest.mark.parametrize(
    "mangle, logged",
    [
        (lambda body: b"\xff" * 6 + body[1:], "unsigned varint longer than 5 bytes"),
        (lambda body: b"\xff\xff\xff\xff\x0f" + body[1:], "expected 4294967294 bytes"),
        (lambda body: body[:-1] + b"\x01\x05\x7f", "_tagged_fields"),
    ],
)
def test_malformed_flexible_requests_close_the_connection_and_name_the_problem(broker, mangle, logged):
    frame = encode_request(ApiKey.FIND_COORDINATOR, 3, 5, "bad", {"key": "g", "key_type": 0})
    header_len = 4 + 8 + 2 + 3 + 1  # size, key/version/correlation id, client id "bad", header tags
    body = mangle(frame[header_len:])
    bad = frame[4:header_len] + body
    s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
    try:
        s.sendall(struct.pack(">i", len(bad)) + bad)
        assert s.recv(1) == b""  # closed, no answer
    finally:
        s.close()
    with Wire(broker.port) as w:  # and the broker still serves
        assert w.request(ApiKey.FIND_COORDINATOR, 3, {"key": "g", "key_type": 0})["error_code"] == 0
    assert logged in broker.output() and "malformed FindCoordinator v3 request" in broker.output()
    assert "Traceback" not in broker.output()
