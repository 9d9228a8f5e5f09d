"""Unit tests of broker.protocol: round trips for every API and version, cross-checks with
kafka-python 3.0.12's JSON-schema protocol classes (bytes and values, both directions),
golden vectors, error messages, zero-copy guarantees, and a fuzz of decode_request."""

from __future__ import annotations

import json
import os
import random
import re
import struct
import tempfile
import uuid

import pytest

from pyklog.broker.errors import InvalidRequestError, UnsupportedVersionError
from pyklog.broker.protocol import (
    API_NAMES,
    FLEXIBLE,
    SCHEMAS,
    SUPPORTED,
    ApiKey,
    FileRegion,
    RequestHeader,
    api_versions_body,
    api_versions_error_response,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_chunks,
    encode_response,
    encoded_size,
    response_header_version,
)
from pyklog.broker.protocol.schema import active_fields, snake_case
from pyklog.broker.protocol.types import STRING
from tests.support import from_kp, norm, to_kp

ALL_VERSIONS = [(k, v) for k, (lo, hi) in sorted(SUPPORTED.items()) for v in range(lo, hi + 1)]
IDS = [f"{SCHEMAS[k][0]}-v{v}" for k, v in ALL_VERSIONS]

_INT_RANGES = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}


# ------------------------------------------------------------------------------ helpers


def _scalar(t: str, rng: random.Random):
    if t == "uuid":
        return uuid.UUID(int=rng.choice([0, rng.getrandbits(128)]))
    if t == "bool":
        return rng.random() < 0.5
    if t in _INT_RANGES:
        bits = _INT_RANGES[t]
        return rng.choice([0, -1, 1, -(1 << bits), (1 << bits) - 1, rng.randint(-(1 << bits), (1 << bits) - 1)])
    if t == STRING:
        return rng.choice(["", "topic-1", "ünïcødé-✓", "x" * rng.randint(0, 300)])
    return bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 61, 1500])))


def _sample_value(f, version, rng, depth):
    if f.nullable_in(version) and rng.random() < 0.25:
        return None
    if f.is_array:
        n = rng.randint(0, 3 if depth < 2 else 2)
        if f.elem is not None:
            return [_scalar(f.elem, rng) for _ in range(n)]
        return [_sample(f.fields, version, rng, depth + 1) for _ in range(n)]
    return _scalar(f.type, rng)


def _sample(fields, version, rng, depth=0):
    return {f.key: _sample_value(f, version, rng, depth) for f in active_fields(fields, version)}


def _body_bytes(chunks):
    return b"".join(c.read_bytes() if isinstance(c, FileRegion) else bytes(c) for c in chunks)


def _req_frame_body(api_key, version, body, corr=1, client_id="c"):
    frame = encode_request(api_key, version, corr, client_id, body)
    header, off = decode_request_header(frame[4:])
    return frame, header, off


# ------------------------------------------------------------------------------ round trips


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS, ids=IDS)
def test_request_round_trip(api_key, version):
    rng = random.Random(f"req-{int(api_key)}-{version}")
    for _ in range(4):
        body = _sample(SCHEMAS[api_key][1], version, rng)
        frame, header, off = _req_frame_body(api_key, version, body, corr=77, client_id="cl")
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        # ControlledShutdown v0: request header v0, which has no client_id (Kafka 0.8)
        client_id = None if (api_key, version) == (ApiKey.CONTROLLED_SHUTDOWN, 0) else "cl"
        assert header == RequestHeader(api_key, version, 77, client_id)
        assert isinstance(header.api_key, ApiKey)
        decoded = decode_request(header, frame[4:], off)
        expected = body
        if api_key == ApiKey.METADATA and version == 0 and body["topics"] is None:
            expected = dict(body, topics=[])
        assert norm(decoded) == expected


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS, ids=IDS)
def test_response_round_trip(api_key, version):
    rng = random.Random(f"resp-{int(api_key)}-{version}")
    for _ in range(4):
        body = _sample(SCHEMAS[api_key][2], version, rng)
        if api_key == ApiKey.API_VERSIONS and body["error_code"] == 35:
            body["error_code"] = 0  # 35 switches to the v0 layout (tested separately)
        chunks = encode_response(api_key, version, 123, body)
        frame = _body_bytes(chunks)
        assert encoded_size(chunks) == len(frame)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        corr, decoded = decode_response(api_key, version, frame[4:])
        assert corr == 123
        assert norm(decoded) == body


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS, ids=IDS)
def test_missing_fields_take_schema_defaults(api_key, version):
    frame, header, off = _req_frame_body(api_key, version, {})
    decoded = decode_request(header, frame[4:], off)
    for f in active_fields(SCHEMAS[api_key][1], version):
        want = list(f.default) if isinstance(f.default, tuple) else f.default
        if api_key == ApiKey.METADATA and f.key == "topics":
            want = []
        assert decoded[f.key] == want, f.key
    _, resp = decode_response(api_key, version, b"".join(encode_response(api_key, version, 1, {}))[4:])
    assert set(resp) == {f.key for f in active_fields(SCHEMAS[api_key][2], version)}


def test_fields_outside_the_version_are_ignored():
    body = {"acks": 1, "timeout_ms": 5, "transactional_id": "tx", "topic_data": []}
    frame, header, off = _req_frame_body(ApiKey.PRODUCE, 2, body)
    assert decode_request(header, frame[4:], off) == {"acks": 1, "timeout_ms": 5, "topic_data": []}


# ------------------------------------------------------------------------------ schema vs Kafka's JSON

KP_SCHEMAS = os.path.join(os.path.dirname(__import__("kafka").__file__), "protocol", "schemas", "resources")


# Kafka's schemas of broker-internal APIs that kafka-python does not bundle, transcribed from
# clients/src/main/resources/common/message/ (Kafka 2.4-3.x, comments left out)
BROKER_INTERNAL_SCHEMAS = {
    "ControlledShutdownRequest": {
        "apiKey": 7,
        "type": "request",
        "name": "ControlledShutdownRequest",
        "validVersions": "0-3",
        "flexibleVersions": "3+",
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": "0+", "entityType": "brokerId"},
            {"name": "BrokerEpoch", "type": "int64", "versions": "2+", "default": "-1", "ignorable": True},
        ],
    },
    "ControlledShutdownResponse": {
        "apiKey": 7,
        "type": "response",
        "name": "ControlledShutdownResponse",
        "validVersions": "0-3",
        "flexibleVersions": "3+",
        "fields": [
            {"name": "ErrorCode", "type": "int16", "versions": "0+"},
            {
                "name": "RemainingPartitions",
                "type": "[]RemainingPartition",
                "versions": "0+",
                "fields": [
                    {"name": "TopicName", "type": "string", "versions": "0+", "mapKey": True},
                    {"name": "PartitionIndex", "type": "int32", "versions": "0+", "mapKey": True},
                ],
            },
        ],
    },
}


def _load_kafka_json(name):
    if name in BROKER_INTERNAL_SCHEMAS and not os.path.exists(os.path.join(KP_SCHEMAS, name + ".json")):
        return BROKER_INTERNAL_SCHEMAS[name]
    with open(os.path.join(KP_SCHEMAS, name + ".json")) as fh:
        text = re.sub(r"^\s*//.*$", "", fh.read(), flags=re.M)
    return json.loads(text)


def _kp_versions(spec):
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), 0x7FFF
    if "-" in spec:
        a, b = spec.split("-")
        return int(a), int(b)
    return int(spec), int(spec)


def _json_layout(fields, version, common=None):
    """Kafka's JSON fields as (name, type, nullable, sub-layout); ``common`` resolves the types
    of ``commonStructs`` (``"[]AddPartitionsToTxnTopic"``)."""
    common = common or {}
    out = []
    for f in fields:
        lo, hi = _kp_versions(f["versions"])
        tagged = _kp_versions(f.get("taggedVersions"))
        if not lo <= version <= hi or (tagged and tagged[0] <= version <= tagged[1]):
            continue
        nv = _kp_versions(f.get("nullableVersions"))
        nullable = bool(nv and nv[0] <= version <= nv[1])
        struct = f["fields"] if "fields" in f else common.get(f["type"][2:]) if f["type"].startswith("[]") else None
        sub = _json_layout(struct, version, common) if struct is not None else None
        t = "[]" if sub is not None else f["type"]
        out.append((snake_case(f["name"]), t, nullable, sub))
    return out


def _our_layout(fields, version):
    out = []
    for f in active_fields(fields, version):
        if f.tagged_in(version):
            continue
        sub = _our_layout(f.fields, version) if f.fields else None
        out.append((f.key, f.type, f.nullable_in(version), sub))
    return out


def _json_tagged(fields, version, path, common):
    """{path: (tag, type, nullable, default)} of Kafka's tagged fields present in ``version``."""
    out = {}
    for f in fields:
        lo, hi = _kp_versions(f["versions"])
        if not lo <= version <= hi:
            continue
        struct = f["fields"] if "fields" in f else common.get(f["type"][2:]) if f["type"].startswith("[]") else None
        tagged = _kp_versions(f.get("taggedVersions"))
        key = path + snake_case(f["name"])
        if tagged and tagged[0] <= version <= tagged[1]:
            nv = _kp_versions(f.get("nullableVersions"))
            out[key] = (f["tag"], "[]" if struct is not None else f["type"], bool(nv and nv[0] <= version <= nv[1]))
        elif struct is not None:
            out.update(_json_tagged(struct, version, key + ".", common))
    return out


def _our_tagged(fields, version, path=""):
    out = {}
    for f in active_fields(fields, version):
        if f.tagged_in(version):
            out[path + f.key] = (f.tag, f.type, f.nullable_in(version))
        elif f.fields:
            out.update(_our_tagged(f.fields, version, path + f.key + "."))
    return out


#: Kafka's tagged fields pyklog neither sends nor reads (decoders skip unknown tags): the Fetch
#: response's KIP-595 fields (a Raft/follower matter) and KIP-951's new-leader hints.
UNDECLARED_TAGGED = {
    "FetchResponse": {
        "responses.partitions.diverging_epoch",
        "responses.partitions.current_leader",
        "responses.partitions.snapshot_id",
    },
    # v15+: a follower's replica id and broker epoch, a tagged struct (KIP-903)
    "FetchRequest": {"replica_state"},
}


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS, ids=IDS)
def test_schema_matches_kafka_json(api_key, version):
    """Field names, order, types and nullability equal Kafka's JSON schemas in every version; a
    version is flexible exactly when Kafka's ``flexibleVersions`` says so, and the tagged fields
    (tag, type, nullability) are Kafka's, but for the few listed in UNDECLARED_TAGGED."""
    name, req, resp = SCHEMAS[api_key]
    for suffix, ours in (("Request", req), ("Response", resp)):
        js = _load_kafka_json(name + suffix)
        flex = _kp_versions(js.get("flexibleVersions"))
        if api_key in FLEXIBLE or (flex and SUPPORTED[api_key][1] >= flex[0]):
            # an API served in flexible versions is flexible from Kafka's first flexible version (an
            # API served only in non-flexible versions need not be listed in FLEXIBLE)
            assert flex and FLEXIBLE.get(api_key) == flex[0], name + suffix
        common = {c["name"]: c["fields"] for c in js.get("commonStructs", ())}
        assert _our_layout(ours, version) == _json_layout(js["fields"], version, common), name + suffix
        theirs = _json_tagged(js["fields"], version, "", common)
        for path in UNDECLARED_TAGGED.get(name + suffix, ()):
            theirs.pop(path, None)
        assert _our_tagged(ours, version) == theirs, name + suffix


def test_long_scalar_arrays_round_trip():
    """Scalar arrays of >= 16 elements take the generic struct path (shorter ones are precompiled)."""
    part = {
        "error_code": 0,
        "partition_index": 1,
        "leader_id": 2,
        "leader_epoch": 3,
        "replica_nodes": list(range(40)),
        "isr_nodes": list(range(-20, 0)),
        "offline_replicas": [7] * 15,
    }
    body = {
        "throttle_time_ms": 0,
        "brokers": [],
        "cluster_id": "c",
        "controller_id": 1,
        "topics": [
            {
                "error_code": 0,
                "name": "t",
                "is_internal": True,
                "partitions": [part] * 3,
                "topic_authorized_operations": 5,
            }
        ],
        "cluster_authorized_operations": 6,
    }
    frame = b"".join(encode_response(ApiKey.METADATA, 8, 2, body))
    assert decode_response(ApiKey.METADATA, 8, frame[4:]) == (2, body)
    names = [f"topic-{i}" for i in range(30)]
    frame, header, off = _req_frame_body(ApiKey.DELETE_TOPICS, 3, {"topic_names": names, "timeout_ms": 5})
    assert decode_request(header, frame[4:], off) == {"topic_names": names, "timeout_ms": 5}
    offsets = list(range(2**40, 2**40 + 20))
    body = {
        "topics": [{"name": "t", "partitions": [{"partition_index": 0, "error_code": 0, "old_style_offsets": offsets}]}]
    }
    frame = b"".join(encode_response(ApiKey.LIST_OFFSETS, 0, 1, body))
    assert decode_response(ApiKey.LIST_OFFSETS, 0, frame[4:])[1] == body
    assert ListOffsetsResponse.decode(frame[8:], version=0).to_dict(json=False) == body


# ------------------------------------------------------------------------------ kafka-python cross-checks

from kafka.protocol.admin import (  # noqa: E402
    AlterConfigsRequest,
    AlterConfigsResponse,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from kafka.protocol.admin.groups import (  # noqa: E402
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.admin.topics import (  # noqa: E402  # noqa: E402  # noqa: E402
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from kafka.protocol.admin.transactions import (  # noqa: E402
    DescribeProducersRequest,
    DescribeProducersResponse,
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse  # noqa: E402
from kafka.protocol.consumer.group import (  # noqa: E402  # noqa: E402
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.consumer.offsets import (  # noqa: E402  # noqa: E402
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
)
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse  # noqa: E402
from kafka.protocol.metadata.find_coordinator import (  # noqa: E402
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)
from kafka.protocol.metadata.metadata import MetadataRequest, MetadataResponse  # noqa: E402
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse  # noqa: E402
from kafka.protocol.producer.transaction import (  # noqa: E402
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
    WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
)
from kafka.protocol.sasl import (  # noqa: E402
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

KP = {
    ApiKey.PRODUCE: (ProduceRequest, ProduceResponse),
    ApiKey.FETCH: (FetchRequest, FetchResponse),
    ApiKey.LIST_OFFSETS: (ListOffsetsRequest, ListOffsetsResponse),
    ApiKey.METADATA: (MetadataRequest, MetadataResponse),
    ApiKey.OFFSET_COMMIT: (OffsetCommitRequest, OffsetCommitResponse),
    ApiKey.OFFSET_FETCH: (OffsetFetchRequest, OffsetFetchResponse),
    ApiKey.FIND_COORDINATOR: (FindCoordinatorRequest, FindCoordinatorResponse),
    ApiKey.API_VERSIONS: (ApiVersionsRequest, ApiVersionsResponse),
    ApiKey.CREATE_TOPICS: (CreateTopicsRequest, CreateTopicsResponse),
    ApiKey.DELETE_TOPICS: (DeleteTopicsRequest, DeleteTopicsResponse),
    ApiKey.INIT_PRODUCER_ID: (InitProducerIdRequest, InitProducerIdResponse),
    ApiKey.JOIN_GROUP: (JoinGroupRequest, JoinGroupResponse),
    ApiKey.HEARTBEAT: (HeartbeatRequest, HeartbeatResponse),
    ApiKey.LEAVE_GROUP: (LeaveGroupRequest, LeaveGroupResponse),
    ApiKey.SYNC_GROUP: (SyncGroupRequest, SyncGroupResponse),
    ApiKey.DESCRIBE_GROUPS: (DescribeGroupsRequest, DescribeGroupsResponse),
    ApiKey.LIST_GROUPS: (ListGroupsRequest, ListGroupsResponse),
    ApiKey.ADD_PARTITIONS_TO_TXN: (AddPartitionsToTxnRequest, AddPartitionsToTxnResponse),
    ApiKey.ADD_OFFSETS_TO_TXN: (AddOffsetsToTxnRequest, AddOffsetsToTxnResponse),
    ApiKey.END_TXN: (EndTxnRequest, EndTxnResponse),
    ApiKey.WRITE_TXN_MARKERS: (WriteTxnMarkersRequest, WriteTxnMarkersResponse),
    ApiKey.TXN_OFFSET_COMMIT: (TxnOffsetCommitRequest, TxnOffsetCommitResponse),
    ApiKey.CREATE_PARTITIONS: (CreatePartitionsRequest, CreatePartitionsResponse),
    ApiKey.DELETE_RECORDS: (DeleteRecordsRequest, DeleteRecordsResponse),
    ApiKey.DESCRIBE_CONFIGS: (DescribeConfigsRequest, DescribeConfigsResponse),
    ApiKey.ALTER_CONFIGS: (AlterConfigsRequest, AlterConfigsResponse),
    ApiKey.DESCRIBE_LOG_DIRS: (DescribeLogDirsRequest, DescribeLogDirsResponse),
    ApiKey.DELETE_GROUPS: (DeleteGroupsRequest, DeleteGroupsResponse),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse),
    ApiKey.OFFSET_DELETE: (OffsetDeleteRequest, OffsetDeleteResponse),
    ApiKey.DESCRIBE_CLUSTER: (DescribeClusterRequest, DescribeClusterResponse),
    ApiKey.ELECT_LEADERS: (ElectLeadersRequest, ElectLeadersResponse),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse),
    ApiKey.DESCRIBE_PRODUCERS: (DescribeProducersRequest, DescribeProducersResponse),
    ApiKey.DESCRIBE_TRANSACTIONS: (DescribeTransactionsRequest, DescribeTransactionsResponse),
    ApiKey.LIST_TRANSACTIONS: (ListTransactionsRequest, ListTransactionsResponse),
    ApiKey.SASL_HANDSHAKE: (SaslHandshakeRequest, SaslHandshakeResponse),
    ApiKey.SASL_AUTHENTICATE: (SaslAuthenticateRequest, SaslAuthenticateResponse),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (DescribeUserScramCredentialsRequest, DescribeUserScramCredentialsResponse),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (AlterUserScramCredentialsRequest, AlterUserScramCredentialsResponse),
}


@pytest.mark.parametrize("api_key,version", ALL_VERSIONS, ids=IDS)
def test_cross_check_kafka_python(api_key, version):
    if api_key not in KP:
        pytest.skip(f"kafka-python has no {SCHEMAS[api_key][0]} (a broker-to-controller API)")
    kp_req, kp_resp = KP[api_key]
    if version < kp_req.min_version:
        pytest.skip(f"kafka-python has no {kp_req.__name__} v{version} (Kafka 4 removed it)")
    assert int(api_key) == kp_req.API_KEY and kp_req.max_version >= version
    rng = random.Random(f"kp-{int(api_key)}-{version}")
    for _ in range(3):
        # request: same bytes both ways (whole frame incl. header v1), values equal both ways
        body = _sample(SCHEMAS[api_key][1], version, rng)
        if api_key == ApiKey.METADATA and version == 0 and body["topics"] is None:
            body["topics"] = []
        ours = encode_request(api_key, version, 42, "kp-client", body)
        theirs_obj = to_kp(kp_req, body, version)
        theirs_obj.with_header(correlation_id=42, client_id="kp-client")
        theirs = bytes(theirs_obj.encode(header=True, framed=True))
        assert ours == theirs
        header, off = decode_request_header(theirs[4:])
        assert norm(decode_request(header, theirs[4:], off)) == body
        theirs_dec = kp_req.decode(ours[off + 4 :], version=version).to_dict(json=False)
        assert from_kp(theirs_dec, SCHEMAS[api_key][1], version) == body

        # response body: same bytes, values equal both ways
        body = _sample(SCHEMAS[api_key][2], version, rng)
        if api_key == ApiKey.API_VERSIONS:
            body["error_code"] = 0
        hlen = 9 if response_header_version(api_key, version) == 1 else 8
        ours = _body_bytes(encode_response(api_key, version, 9, body))
        assert ours[4:hlen] == (b"\0\0\0\x09" if hlen == 8 else b"\0\0\0\x09\0")
        theirs = bytes(to_kp(kp_resp, body, version).encode(version=version))
        assert ours[hlen:] == theirs
        assert norm(decode_response(api_key, version, ours[4:hlen] + theirs)[1]) == body
        theirs_dec = kp_resp.decode(ours[hlen:], version=version).to_dict(json=False)
        assert from_kp(theirs_dec, SCHEMAS[api_key][2], version) == body


def test_kafka_python_reads_our_api_versions_error_response():
    frame = api_versions_error_response(17)
    decoded = ApiVersionsResponse.decode(frame[8:], version=3)  # a v3 request answered in v0 layout
    assert decoded.error_code == 35
    got = {(a.api_key, a.min_version, a.max_version) for a in decoded.api_keys}
    assert got == {(int(k), lo, hi) for k, (lo, hi) in SUPPORTED.items()}


# ------------------------------------------------------------------------------ golden bytes


def test_golden_api_versions_v0_request():
    frame = encode_request(ApiKey.API_VERSIONS, 0, 1, "abc", {})
    assert frame == bytes.fromhex("0000000d00120000000000010003616263")
    header, off = decode_request_header(frame[4:])
    assert header == RequestHeader(ApiKey.API_VERSIONS, 0, 1, "abc") and off == 13
    assert decode_request(header, frame[4:], off) == {}


def test_golden_api_versions_error_response():
    frame = api_versions_error_response(5)
    assert frame == bytes.fromhex(
        "0000011e"
        "00000005"
        "0023"
        "0000002e"
        "000000000009"
        "000100000010"
        "000200000008"
        "00030000000c"
        "000700000003"
        "000800000008"
        "000900000009"
        "000a00000004"
        "000b00000009"
        "000c00000004"
        "000d00000005"
        "000e00000005"
        "000f00000005"
        "001000000004"
        "001100000001"  # SaslHandshake (17) v0-1
        "001200000003"
        "001300000007"
        "001400000006"
        "001500000002"
        "001600000004"
        "001700000004"  # OffsetForLeaderEpoch (23) v0-4
        "001800000003"
        "001900000003"
        "001a00000003"
        "001b00000001"
        "001c00000003"
        "001d00000003"  # DescribeAcls (29) v0-3
        "001e00000003"  # CreateAcls (30) v0-3
        "001f00000003"  # DeleteAcls (31) v0-3
        "002000000004"
        "002100000002"
        "002300000004"
        "002400000002"  # SaslAuthenticate (36) v0-2
        "002500000003"
        "002a00000002"
        "002b00000002"
        "002c00000001"
        "002d00000000"
        "002e00000000"
        "002f00000000"
        "003200000000"  # Describe/AlterUserScramCredentials (50, 51) v0
        "003300000000"
        "003c00000001"  # DeleteRecords (21), the
        # admin APIs from DescribeConfigs (32) on; ControlledShutdown (7) v0-3, ElectLeaders (43) v0-2,
        # Alter/ListPartitionReassignments (45, 46) v0 (the controller)
        "003d00000000"
        "004100000000"
        "004200000001"  # DescribeProducers, DescribeTransactions, ListTransactions
    )
    # a client that asked for v2 decodes it in the v0 layout
    corr, body = decode_response(ApiKey.API_VERSIONS, 2, frame[4:])
    assert corr == 5 and body["error_code"] == 35 and "throttle_time_ms" not in body
    assert body["api_keys"] == api_versions_body()["api_keys"]


def test_api_versions_response_falls_back_to_v0_layout():
    v0 = b"".join(encode_response(ApiKey.API_VERSIONS, 0, 8, api_versions_body(0)))[4:]
    corr, body = decode_response(ApiKey.API_VERSIONS, 2, v0)
    assert corr == 8 and body == {k: v for k, v in api_versions_body(0).items() if k != "throttle_time_ms"}
    with pytest.raises(InvalidRequestError, match="ApiVersionsResponse v2"):
        decode_response(ApiKey.API_VERSIONS, 2, v0[:-1])


def test_golden_produce_v3_request():
    records = b"\x01\x02\x03"
    frame = encode_request(
        ApiKey.PRODUCE,
        3,
        2,
        None,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    assert frame.hex() == (
        "00000028"
        "0000"
        "0003"
        "00000002"
        "ffff"  # size 40, header, client_id null
        "ffff"
        "ffff"
        "00007530"  # transactional_id null, acks -1, timeout
        "00000001"
        "0001"
        "74"  # one topic "t"
        "00000001"
        "00000000"
        "00000003"
        "010203"  # one partition, records
    )


def test_golden_api_versions_v3_request_and_v4_is_unsupported_but_header_decodes():
    # a flexible ApiVersions v3 request as librdkafka sends it: header v2 (int16 client_id, then an
    # empty tagged field section), compact strings (length + 1), the body's empty tagged fields
    body = bytes.fromhex("0b") + b"librdkafka" + bytes.fromhex("06") + b"2.6.0" + b"\x00"
    frame = bytes.fromhex("00120003000000070007") + b"rdkafka" + b"\x00" + body
    header, off = decode_request_header(frame)
    assert header == RequestHeader(ApiKey.API_VERSIONS, 3, 7, "rdkafka") and off == 18
    assert decode_request(header, frame, off) == {
        "client_software_name": "librdkafka",
        "client_software_version": "2.6.0",
    }
    assert (
        encode_request(
            ApiKey.API_VERSIONS,
            3,
            7,
            "rdkafka",
            {"client_software_name": "librdkafka", "client_software_version": "2.6.0"},
        )[4:]
        == frame
    )
    # a header v2 with a tagged field in it: skipped
    frame4 = bytes.fromhex("0012000400000008ffff010502abcd") + body
    header, off = decode_request_header(frame4)
    assert header == RequestHeader(ApiKey.API_VERSIONS, 4, 8, None) and frame4[off:] == body
    with pytest.raises(UnsupportedVersionError, match=r"ApiVersions v4 .*0-3"):
        decode_request(header, frame4, off)
    assert api_versions_error_response(header.correlation_id)[4:8] == b"\0\0\0\x08"


def test_golden_flexible_metadata_v9_and_response_header_v1():
    frame = encode_request(
        ApiKey.METADATA,
        9,
        3,
        "c",
        {"topics": [{"name": "t"}], "allow_auto_topic_creation": True, "include_topic_authorized_operations": False},
    )
    assert frame.hex() == (
        "00000014"
        "0003"
        "0009"
        "00000003"
        "0001"
        "63"
        "00"  # header v2: client_id "c", no tags
        "02"
        "02"
        "74"
        "00"  # topics: 1 (+1), name "t" (+1), tags
        "01"
        "00"
        "00"
        "00"
    )  # allow, include x2, body tags
    resp = {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
        "cluster_id": None,
        "controller_id": 1,
        "topics": [],
    }
    out = b"".join(encode_response(ApiKey.METADATA, 9, 3, resp))
    assert out.hex() == (
        "00000021"
        "00000003"
        "00"  # response header v1
        "00000000"
        "02"
        "00000001"
        "0268"
        "00002384"
        "00"
        "00"  # brokers: node 1 "h" 9092, rack null
        "00"
        "00000001"
        "01"
        "80000000"
        "00"
    )  # cluster null, controller, no topics
    assert decode_response(ApiKey.METADATA, 9, out[4:])[1]["brokers"][0]["host"] == "h"
    # ApiVersions v3 answers with response header v0 (KIP-511)
    out = b"".join(encode_response(ApiKey.API_VERSIONS, 3, 4, {"api_keys": []}))
    assert out.hex() == "0000000c000000040000010000000000"


def test_tagged_fields_written_only_when_set_and_unknown_tags_skipped():
    body = {
        "error_code": 0,
        "api_keys": [],
        "throttle_time_ms": 0,
        "finalized_features_epoch": 7,
        "zk_migration_ready": True,
    }
    out = b"".join(encode_response(ApiKey.API_VERSIONS, 3, 1, body))
    # tagged section: 2 fields, tag 1 (8 bytes int64 7), tag 3 (1 byte true), in tag order
    assert out[4:].hex().endswith("0201080000000000000007030101")
    dec = decode_response(ApiKey.API_VERSIONS, 3, out[4:])[1]
    assert dec["finalized_features_epoch"] == 7 and dec["zk_migration_ready"] is True
    assert dec["supported_features"] == [] and dec["finalized_features"] == []
    # an unknown tag (9) in a struct nested in the body, and one at the top: skipped
    frame = encode_request(ApiKey.FIND_COORDINATOR, 3, 1, "c", {"key": "g", "key_type": 0})
    header, off = decode_request_header(frame[4:])
    raw = frame[4:-1] + bytes.fromhex("010903aabbcc")
    assert decode_request(header, raw, off) == {"key": "g", "key_type": 0}
    # a declared size that does not match the value, tags out of order, truncated sections
    bad = frame[4:-1] + bytes.fromhex("0209000500")
    with pytest.raises(InvalidRequestError, match="tagged field 5 after tag 9"):
        decode_request(header, bad, off)
    with pytest.raises(InvalidRequestError, match="_tagged_fields"):
        decode_request(header, frame[4:-1] + bytes.fromhex("010905aa"), off)
    r = b"".join(encode_response(ApiKey.API_VERSIONS, 3, 1, body))[4:]
    bad_size = r[:-14] + bytes.fromhex("020109000000000000000700030101")
    with pytest.raises(InvalidRequestError, match="finalized_features_epoch: tagged field 1 declares 9 bytes"):
        decode_response(ApiKey.API_VERSIONS, 3, bad_size)


def test_compact_lengths_bad_varints_and_huge_counts_are_specific():
    frame = encode_request(ApiKey.FIND_COORDINATOR, 3, 1, "c", {"key": "g", "key_type": 0})
    header, off = decode_request_header(frame[4:])
    body = frame[4 + off :]
    assert body == bytes.fromhex("02670000")
    with pytest.raises(InvalidRequestError, match="key: unsigned varint longer than 5 bytes"):
        decode_request(header, frame[4 : 4 + off] + b"\xff" * 6 + body, off)
    with pytest.raises(InvalidRequestError, match="key: unsigned varint truncated"):
        decode_request(header, frame[4 : 4 + off] + b"\x80", off)
    with pytest.raises(InvalidRequestError, match="key: expected a length >= 0 .*read -1"):
        decode_request(header, frame[4 : 4 + off] + b"\x00\x00\x00", off)
    with pytest.raises(InvalidRequestError, match="key: expected 4095 bytes"):
        decode_request(header, frame[4 : 4 + off] + b"\x80\x20" + body[1:], off)
    frame = encode_request(ApiKey.DELETE_TOPICS, 4, 1, "c", {"topic_names": ["a"], "timeout_ms": 1})
    header, off = decode_request_header(frame[4:])
    huge = frame[4 : 4 + off] + b"\xff\xff\xff\xff\x0f" + frame[4 + off + 1 :]
    with pytest.raises(InvalidRequestError, match="topic_names: array count 4294967294"):
        decode_request(header, huge, off)
    with pytest.raises(InvalidRequestError, match="request header v2: tagged fields"):
        decode_request_header(frame[4 : 4 + off - 1] + b"\x05")


# ------------------------------------------------------------------------------ version quirks


def test_metadata_topics_null_semantics():
    for version in (1, 4, 8):
        frame, header, off = _req_frame_body(ApiKey.METADATA, version, {"topics": None})
        assert decode_request(header, frame[4:], off)["topics"] is None
        frame, header, off = _req_frame_body(ApiKey.METADATA, version, {"topics": []})
        assert decode_request(header, frame[4:], off)["topics"] == []
    # v0: no null on the wire; None (all topics) is sent as the empty array meaning all
    frame, header, off = _req_frame_body(ApiKey.METADATA, 0, {"topics": None})
    assert decode_request(header, frame[4:], off) == {"topics": []}
    bad = bytearray(frame[4:])
    bad[off : off + 4] = b"\xff\xff\xff\xff"
    with pytest.raises(InvalidRequestError, match="topics: expected a length >= 0 .*read -1"):
        decode_request(header, bytes(bad), off)


def test_offset_fetch_null_topics_v2_plus_only():
    frame, header, off = _req_frame_body(ApiKey.OFFSET_FETCH, 2, {"group_id": "g", "topics": None})
    assert decode_request(header, frame[4:], off) == {"group_id": "g", "topics": None}
    with pytest.raises(InvalidRequestError, match=r"topics: None is not allowed \(not nullable in this version\)"):
        encode_request(ApiKey.OFFSET_FETCH, 1, 1, "c", {"group_id": "g", "topics": None})


def test_offset_commit_timestamp_and_retention_by_version():
    part = {"partition_index": 0, "committed_offset": 10, "commit_timestamp": 1234, "committed_metadata": "m"}
    body = {"group_id": "g", "retention_time_ms": 999, "topics": [{"name": "t", "partitions": [part]}]}
    got = {}
    for version in range(8):
        frame, header, off = _req_frame_body(ApiKey.OFFSET_COMMIT, version, body)
        got[version] = decode_request(header, frame[4:], off)
    assert "commit_timestamp" not in got[0]["topics"][0]["partitions"][0]
    assert got[1]["topics"][0]["partitions"][0]["commit_timestamp"] == 1234
    assert "retention_time_ms" not in got[1]
    assert all(got[v]["retention_time_ms"] == 999 for v in (2, 3, 4))
    assert all("commit_timestamp" not in got[v]["topics"][0]["partitions"][0] for v in range(2, 8))
    assert "retention_time_ms" not in got[5]
    assert got[7]["group_instance_id"] is None and got[6]["topics"][0]["partitions"][0]["committed_leader_epoch"] == -1


def test_list_offsets_v0_old_style_offsets():
    body = {
        "topics": [
            {"name": "t", "partitions": [{"partition_index": 1, "error_code": 0, "old_style_offsets": [9, 5, 0]}]}
        ]
    }
    _, got = decode_response(ApiKey.LIST_OFFSETS, 0, b"".join(encode_response(ApiKey.LIST_OFFSETS, 0, 3, body))[4:])
    assert got == body
    frame, header, off = _req_frame_body(
        ApiKey.LIST_OFFSETS,
        0,
        {"replica_id": -1, "topics": [{"name": "t", "partitions": [{"partition_index": 1, "timestamp": -1}]}]},
    )
    assert decode_request(header, frame[4:], off)["topics"][0]["partitions"][0] == {
        "partition_index": 1,
        "timestamp": -1,
        "max_num_offsets": 1,
    }


# ------------------------------------------------------------------------------ zero copy


def test_produce_records_are_zero_copy_views_of_the_frame():
    records = os.urandom(5000)
    frame = encode_request(
        ApiKey.PRODUCE,
        8,
        1,
        "p",
        {
            "acks": 1,
            "timeout_ms": 1,
            "topic_data": [
                {"name": "t", "partition_data": [{"index": 3, "records": records}, {"index": 4, "records": None}]}
            ],
        },
    )
    buf = bytearray(frame[4:])
    header, off = decode_request_header(buf)
    body = decode_request(header, buf, off)
    parts = body["topic_data"][0]["partition_data"]
    view = parts[0]["records"]
    assert isinstance(view, memoryview) and view.obj is buf and view == records
    assert parts[1]["records"] is None
    at = bytes(buf).index(records) + len(records) - 1
    buf[at] ^= 0xFF  # proves the view shares memory with the frame
    assert view[-1] == records[-1] ^ 0xFF


def test_fetch_response_records_chunks_are_not_copied():
    big = os.urandom(4096)
    small = b"tiny"
    with tempfile.TemporaryFile() as fh:
        fh.write(b"x" * 100 + big + b"y" * 100)
        fh.flush()
        region = FileRegion(fh, 100, len(big))
        body = {
            "responses": [
                {
                    "topic": "t",
                    "partitions": [
                        {"partition_index": 0, "high_watermark": 10, "records": region},
                        {"partition_index": 1, "high_watermark": 11, "records": big},
                        {"partition_index": 2, "high_watermark": 12, "records": small},
                        {"partition_index": 3, "high_watermark": 13, "records": None},
                    ],
                }
            ]
        }
        chunks = encode_response(ApiKey.FETCH, 11, 55, body)
        assert any(c is region for c in chunks)
        assert any(c is big for c in chunks)
        assert all(isinstance(c, (bytes, FileRegion)) for c in chunks)
        frame = _body_bytes(chunks)
        assert encoded_size(chunks) == len(frame)
        assert struct.unpack(">i", frame[:4])[0] == len(frame) - 4
        corr, got = decode_response(ApiKey.FETCH, 11, frame[4:])
    parts = got["responses"][0]["partitions"]
    assert corr == 55
    assert [bytes(p["records"]) if p["records"] is not None else None for p in parts] == [big, big, small, None]
    # no FileRegion: the chunks join into the frame
    plain = encode_response(ApiKey.FETCH, 4, 1, {"responses": []})
    assert b"".join(plain) == bytes.fromhex("0000000c000000010000000000000000")


def test_encode_request_chunks_keep_records_uncopied():
    records = os.urandom(2048)
    chunks = encode_request_chunks(
        ApiKey.PRODUCE,
        7,
        1,
        "p",
        {
            "acks": 1,
            "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    assert any(c is records for c in chunks)
    assert b"".join(chunks) == encode_request(
        ApiKey.PRODUCE,
        7,
        1,
        "p",
        {
            "acks": 1,
            "timeout_ms": 1,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )


# ------------------------------------------------------------------------------ errors


def _produce_frame():
    frame = encode_request(
        ApiKey.PRODUCE,
        8,
        1,
        "p",
        {
            "acks": 1,
            "timeout_ms": 1,
            "topic_data": [{"name": "topic", "partition_data": [{"index": 0, "records": b"abcdef"}]}],
        },
    )
    return frame[4:]


def test_unknown_api_key_header_decodes_and_request_names_the_key():
    frame = struct.pack(">hhih", 999, 0, 12, -1)
    header, off = decode_request_header(frame)
    assert header == RequestHeader(999, 0, 12, None) and off == 10
    with pytest.raises(InvalidRequestError, match="999"):
        decode_request(header, frame, off)
    header, off = decode_request_header(struct.pack(">hhih", 4, 0, 1, -1))  # LeaderAndIsr: known name, not served
    with pytest.raises(InvalidRequestError, match=r"api key 4 \(LeaderAndIsr\)"):
        decode_request(header, b"", off)
    assert API_NAMES[4] == "LeaderAndIsr" and header.api_name == "LeaderAndIsr"


def test_unsupported_versions():
    for key, (_lo, hi) in SUPPORTED.items():
        frame = struct.pack(">hhih", int(key), hi + 1, 1, -1) + (b"\0" if FLEXIBLE.get(key, 99) <= hi + 1 else b"")
        header, off = decode_request_header(frame)
        with pytest.raises(UnsupportedVersionError, match=f"v{hi + 1} is not supported"):
            decode_request(header, frame, off)
        with pytest.raises(UnsupportedVersionError):
            decode_request(header._replace(api_version=-1), frame, off)
        with pytest.raises(UnsupportedVersionError):
            encode_request(key, hi + 1, 1, "c", {})


def test_header_errors():
    with pytest.raises(InvalidRequestError, match="at least 10 bytes, got 3"):
        decode_request_header(b"\0\0\0")
    with pytest.raises(InvalidRequestError, match="client_id length -2"):
        decode_request_header(struct.pack(">hhih", 0, 0, 0, -2))
    with pytest.raises(InvalidRequestError, match="client_id length 5 but only 2 bytes left"):
        decode_request_header(struct.pack(">hhih", 0, 0, 0, 5) + b"ab")


def test_truncated_trailing_and_negative_lengths_are_specific():
    frame = _produce_frame()
    header, off = decode_request_header(frame)
    with pytest.raises(
        InvalidRequestError, match=r"topic_data\[0\]\.partition_data\[0\]\.records: expected 6 bytes, only 3 left"
    ):
        decode_request(header, frame[:-3], off)
    with pytest.raises(InvalidRequestError, match="acks: expected 2 bytes, only 1 left"):
        decode_request(header, frame[: off + 3], off)
    with pytest.raises(InvalidRequestError, match="2 trailing bytes"):
        decode_request(header, frame + b"\0\0", off)
    # records length -2: invalid even though records are nullable
    bad = frame[:-10] + struct.pack(">i", -2) + frame[-6:]
    with pytest.raises(InvalidRequestError, match=r"records: expected -1 \(null\) or a length >= 0, read -2"):
        decode_request(header, bad, off)
    # topic name length -1: string not nullable
    pos = off + 2 + 2 + 4 + 4  # transactional_id(null), acks, timeout, count
    bad = frame[:pos] + b"\xff\xff" + frame[pos + 2 :]
    with pytest.raises(
        InvalidRequestError, match=r"topic_data\[0\]\.name: expected a length >= 0 \(field is not nullable\), read -1"
    ):
        decode_request(header, bad, off)
    # array count far larger than the bytes left
    bad = frame[: pos - 4] + struct.pack(">i", 0x7FFFFFFF) + frame[pos:]
    with pytest.raises(InvalidRequestError, match="topic_data: array count 2147483647 needs at least"):
        decode_request(header, bad, off)
    # invalid UTF-8 in a topic name
    bad = frame[: pos + 2] + b"\xff\xfe\xfd\xfc\xfb" + frame[pos + 7 :]
    with pytest.raises(InvalidRequestError, match="not valid UTF-8"):
        decode_request(header, bad, off)


def test_malformed_responses_raise_invalid_request():
    frame = b"".join(encode_response(ApiKey.METADATA, 8, 4, {"brokers": [{"node_id": 1, "host": "h", "port": 9}]}))[4:]
    with pytest.raises(InvalidRequestError, match=r"MetadataResponse v8: .*truncated"):
        decode_response(ApiKey.METADATA, 8, frame[:-1])
    with pytest.raises(InvalidRequestError, match="trailing"):
        decode_response(ApiKey.METADATA, 8, frame + b"\0")
    with pytest.raises(InvalidRequestError, match="no correlation id"):
        decode_response(ApiKey.METADATA, 8, b"\0")


def test_encode_errors_name_the_field():
    with pytest.raises(
        InvalidRequestError, match=r"topic_data\[0\]\.partition_data\[1\]\.index: expected int32, got str"
    ):
        encode_request(
            ApiKey.PRODUCE,
            8,
            1,
            "c",
            {
                "acks": 1,
                "timeout_ms": 1,
                "topic_data": [{"name": "t", "partition_data": [{"index": 0}, {"index": "1"}]}],
            },
        )
    with pytest.raises(InvalidRequestError, match=r"acks: 40000 does not fit in int16"):
        encode_request(ApiKey.PRODUCE, 8, 1, "c", {"acks": 40000, "timeout_ms": 1})
    with pytest.raises(InvalidRequestError, match=r"brokers\[0\]\.host: None is not allowed"):
        encode_response(ApiKey.METADATA, 1, 1, {"brokers": [{"node_id": 1, "host": None, "port": 1}]})
    with pytest.raises(InvalidRequestError, match=r"records: expected a bytes-like object, got int"):
        encode_response(ApiKey.FETCH, 4, 1, {"responses": [{"topic": "t", "partitions": [{"records": 5}]}]})


# ------------------------------------------------------------------------------ fuzz


def _valid_frames(rng):
    frames = []
    for key, version in ALL_VERSIONS:
        body = _sample(SCHEMAS[key][1], version, rng)
        if key == ApiKey.METADATA and version == 0 and body["topics"] is None:
            body["topics"] = []
        frames.append(encode_request(key, version, rng.randint(0, 1000), "fz", body)[4:])
    return frames


def _check_decode(frame):
    try:
        header, off = decode_request_header(frame)
        decode_request(header, frame, off)
    except (InvalidRequestError, UnsupportedVersionError) as e:
        assert str(e)


def test_fuzz_decode_request_only_raises_protocol_errors():
    rng = random.Random(20261122)
    frames = _valid_frames(rng)
    for frame in frames:
        _check_decode(frame)  # valid frames decode
    cases = 0
    for _ in range(3000):
        base = bytearray(rng.choice(frames))
        mode = rng.randrange(5)
        if mode == 0:  # truncation
            data = base[: rng.randrange(len(base) + 1)]
        elif mode == 1:  # byte flips in the body
            for _ in range(rng.randint(1, 4)):
                base[rng.randrange(len(base))] = rng.getrandbits(8)
            data = base
        elif mode == 2:  # a random int16/int32 length/count planted somewhere
            pos = rng.randrange(max(1, len(base) - 4))
            base[pos : pos + 4] = struct.pack(">i", rng.choice([-1, -2, -0x80000000, 0x7FFFFFFF, rng.getrandbits(16)]))
            data = base
        elif mode == 3:  # garbage after a valid header
            data = base[:10] + bytes(rng.getrandbits(8) for _ in range(rng.randrange(40)))
        else:  # random bytes with a random known api key/version
            key, version = rng.choice(ALL_VERSIONS)
            data = struct.pack(">hhih", int(key), version, 1, -1) + bytes(
                rng.getrandbits(8) for _ in range(rng.randrange(64))
            )
        _check_decode(bytes(data))
        cases += 1
    assert cases == 3000


def test_fuzz_pure_random_bytes_with_hypothesis():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    @settings(max_examples=1500, deadline=None, database=None)
    @given(st.binary(max_size=200), st.sampled_from(ALL_VERSIONS))
    def check(data, kv):
        _check_decode(data)
        _check_decode(struct.pack(">hhih", int(kv[0]), kv[1], 1, -1) + data)

    check()
