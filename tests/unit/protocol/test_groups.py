"""Wire schemas of the group membership APIs (JoinGroup 11, Heartbeat 12, LeaveGroup 13,
SyncGroup 14, DescribeGroups 15, ListGroups 16; every non-flexible version): round trips,
field-by-field equality with Kafka's JSON schemas, byte-for-byte cross-checks against
kafka-python 3.0.12's protocol classes in both directions, and golden vectors."""

from __future__ import annotations

import json
import os
import random
import re
import struct

import pytest
from kafka.protocol.admin.groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer.group import (
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)

from pyklog.broker.protocol import (
    FLEXIBLE,
    SCHEMAS,
    SUPPORTED,
    ApiKey,
    RequestHeader,
    api_name,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    response_header_version,
)
from pyklog.broker.protocol.schema import active_fields, snake_case
from tests.support import from_kp, norm, to_kp

KP = {
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
}
EXPECTED_RANGES = {
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 4),
}
VERSIONS = [(k, v) for k in KP for v in range(SUPPORTED[k][0], SUPPORTED[k][1] + 1)]
IDS = [f"{SCHEMAS[k][0]}-v{v}" for k, v in VERSIONS]
_BITS = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


def _scalar(t, rng):
    if t == "bool":
        return rng.random() < 0.5
    if t in _BITS:
        b = _BITS[t]
        return rng.choice([0, -1, 1, -(1 << b), (1 << b) - 1, rng.randint(-(1 << b), (1 << b) - 1)])
    if t == "string":
        return rng.choice(["", "consumer", "ünï-✓", "m-" * rng.randint(0, 60)])
    return rng.randbytes(rng.choice([0, 1, 30, 700]))


def _sample(fields, version, rng, depth=0):
    out = {}
    for f in active_fields(fields, version):
        if f.nullable_in(version) and rng.random() < 0.25:
            out[f.key] = None
        elif f.is_array:
            n = rng.randint(0, 3 if depth < 2 else 1)
            out[f.key] = (
                [_scalar(f.elem, rng) for _ in range(n)]
                if f.elem is not None
                else [_sample(f.fields, version, rng, depth + 1) for _ in range(n)]
            )
        else:
            out[f.key] = _scalar(f.type, rng)
    return out


def test_advertised_ranges():
    for key, rng in EXPECTED_RANGES.items():
        assert SUPPORTED[key] == rng
        assert api_name(key) == SCHEMAS[key][0]


@pytest.mark.parametrize("api_key,version", VERSIONS, ids=IDS)
def test_round_trip(api_key, version):
    rng = random.Random(int(api_key) * 100 + version)
    for _ in range(5):
        body = _sample(SCHEMAS[api_key][1], version, rng)
        frame = encode_request(api_key, version, 11, "rt", body)
        header, off = decode_request_header(frame[4:])
        assert header == RequestHeader(api_key, version, 11, "rt")
        assert norm(decode_request(header, frame[4:], off)) == body
        body = _sample(SCHEMAS[api_key][2], version, rng)
        resp = b"".join(encode_response(api_key, version, 12, body))
        assert decode_response(api_key, version, resp[4:]) == (12, body)


def _load_kafka_json(name):
    path = os.path.join(
        os.path.dirname(__import__("kafka").__file__), "protocol", "schemas", "resources", name + ".json"
    )
    with open(path) as fh:
        return json.loads(re.sub(r"^\s*//.*$", "", fh.read(), flags=re.M))


def _vr(spec):
    if spec is None:
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    a, _, b = spec.partition("-")
    return int(a), int(b or a)


def _json_layout(fields, version):
    out = []
    for f in fields:
        lo, hi = _vr(f["versions"])
        if not lo <= version <= hi:
            continue
        nv = _vr(f.get("nullableVersions"))
        sub = _json_layout(f["fields"], version) if "fields" in f else None
        out.append(
            (snake_case(f["name"]), "[]" if sub is not None else f["type"], bool(nv and nv[0] <= version <= nv[1]), sub)
        )
    return out


def _our_layout(fields, version):
    return [
        (f.key, f.type, f.nullable_in(version), _our_layout(f.fields, version) if f.fields else None)
        for f in active_fields(fields, version)
    ]


@pytest.mark.parametrize("api_key,version", VERSIONS, ids=IDS)
def test_schema_matches_kafka_json(api_key, version):
    name, req, resp = SCHEMAS[api_key]
    for suffix, ours in (("Request", req), ("Response", resp)):
        js = _load_kafka_json(name + suffix)
        assert FLEXIBLE[api_key] == _vr(js["flexibleVersions"])[0], name + suffix  # flexible from the same version
        assert _our_layout(ours, version) == _json_layout(js["fields"], version), name + suffix


@pytest.mark.parametrize("api_key,version", VERSIONS, ids=IDS)
def test_cross_check_kafka_python(api_key, version):
    kp_req, kp_resp = KP[api_key]
    assert int(api_key) == kp_req.API_KEY and kp_req.max_version >= version
    rng = random.Random(int(api_key) * 1000 + version)
    for _ in range(4):
        body = _sample(SCHEMAS[api_key][1], version, rng)
        ours = encode_request(api_key, version, 42, "kp-client", body)
        theirs_obj = to_kp(kp_req, body, version)
        theirs_obj.with_header(correlation_id=42, client_id="kp-client")
        theirs = bytes(theirs_obj.encode(header=True, framed=True))
        assert ours == theirs
        header, off = decode_request_header(theirs[4:])
        assert norm(decode_request(header, theirs[4:], off)) == body
        assert (
            from_kp(kp_req.decode(ours[off + 4 :], version=version).to_dict(json=False), SCHEMAS[api_key][1], version)
            == body
        )

        body = _sample(SCHEMAS[api_key][2], version, rng)
        ours = b"".join(encode_response(api_key, version, 9, body))
        theirs = bytes(to_kp(kp_resp, body, version).encode(version=version))
        hlen = 8 + response_header_version(api_key, version)
        assert ours[hlen:] == theirs
        assert norm(decode_response(api_key, version, ours[4:hlen] + theirs)[1]) == body
        assert (
            from_kp(kp_resp.decode(ours[hlen:], version=version).to_dict(json=False), SCHEMAS[api_key][2], version)
            == body
        )


def test_golden_join_group_v0_request():
    body = {
        "group_id": "g",
        "session_timeout_ms": 6000,
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"\x00\x01"}],
    }
    frame = encode_request(ApiKey.JOIN_GROUP, 0, 7, "c", body)
    expected = (
        struct.pack(">hhih", 11, 0, 7, 1)
        + b"c"
        + b"\x00\x01g"
        + struct.pack(">i", 6000)
        + b"\x00\x00"
        + b"\x00\x08consumer"
        + struct.pack(">i", 1)
        + b"\x00\x05range"
        + struct.pack(">i", 2)
        + b"\x00\x01"
    )
    assert frame == struct.pack(">i", len(expected)) + expected


def test_golden_sync_group_v3_response_and_defaults():
    frame = b"".join(encode_response(ApiKey.SYNC_GROUP, 3, 5, {"error_code": 27}))
    # size, correlation id, throttle 0, error 27, empty assignment (default b"", never null)
    assert frame == bytes.fromhex("0000000e0000000500000000001b00000000")


def test_leave_group_member_id_v0_2_members_v3():
    frame = encode_request(
        ApiKey.LEAVE_GROUP, 2, 1, "c", {"group_id": "g", "member_id": "m", "members": [{"member_id": "x"}]}
    )
    header, off = decode_request_header(frame[4:])
    assert decode_request(header, frame[4:], off) == {"group_id": "g", "member_id": "m"}
    frame = encode_request(
        ApiKey.LEAVE_GROUP, 3, 1, "c", {"group_id": "g", "member_id": "m", "members": [{"member_id": "x"}]}
    )
    header, off = decode_request_header(frame[4:])
    assert decode_request(header, frame[4:], off) == {
        "group_id": "g",
        "members": [{"member_id": "x", "group_instance_id": None}],
    }
