"""The broker process over the wire, request by request (broker.protocol frames on a raw socket).

One broker process (real ZooKeeper, ``python -m pyklog.broker``) is shared by this module; each test
uses its own topics.  Covers every API and version range pyklog serves, the KIP-511 ApiVersions
fallback, legacy message sets, long-poll fetches, limits and bad input.
"""

from __future__ import annotations

import os
import struct
import threading
import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey, decode_response
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.legacy import build_message_set, decode_message_set
from pyklog.broker.record.reader import iter_batches
from tests.support import (
    Wire,
    create_topic,
    fetch,
    produce,
    records,
    running_broker,
    values,
    wait_for,
)

MESSAGE_MAX = 100_000
#: what the broker must advertise: every API it serves, from v0 to the highest non-flexible version
SERVED = {
    0: (0, 9),
    1: (0, 16),
    2: (0, 8),
    3: (0, 12),
    8: (0, 8),
    9: (0, 9),
    10: (0, 4),
    11: (0, 9),
    12: (0, 4),
    13: (0, 5),
    14: (0, 5),
    15: (0, 5),
    16: (0, 4),
    18: (0, 3),
    19: (0, 7),
    20: (0, 6),
    22: (0, 4),
    24: (0, 3),
    25: (0, 3),
    26: (0, 3),
    27: (0, 1),
    28: (0, 3),
}  # kafka-flex's ranges
SERVED.update(
    {21: (0, 2), 32: (0, 4), 33: (0, 2), 35: (0, 4), 37: (0, 3), 42: (0, 2), 44: (0, 1), 47: (0, 0), 60: (0, 1)}
)  # admin APIs (flex-admin: a Kafka 3.7 broker's versions)
SERVED.update({61: (0, 0), 65: (0, 0), 66: (0, 1)})  # transaction admin APIs (KIP-664, flex-admin)
SERVED.update({7: (0, 3), 43: (0, 2), 45: (0, 0), 46: (0, 0)})  # the controller: ControlledShutdown,
# ElectLeaders, Alter/ListPartitionReassignments (KIP-455)
SERVED.update({17: (0, 1), 36: (0, 2), 50: (0, 0), 51: (0, 0)})  # SaslHandshake, SaslAuthenticate,
# Describe/AlterUserScramCredentials (KIP-554)
SERVED.update({23: (0, 4)})  # OffsetForLeaderEpoch (repl-log)
SERVED.update({29: (0, 3), 30: (0, 3), 31: (0, 3)})  # DescribeAcls, CreateAcls, DeleteAcls (the authorizer)
REQUEST_MAX = 4 * 1024 * 1024


def topic_name() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="module")
def shared_broker(zookeeper, tmp_path_factory):
    with running_broker(
        zookeeper,
        str(tmp_path_factory.mktemp("shared-broker")),
        message_max_bytes=MESSAGE_MAX,
        socket_request_max_bytes=REQUEST_MAX,
        num_network_threads=2,
        num_io_threads=4,
    ) as b:
        yield b


@pytest.fixture
def wire(shared_broker):
    w = Wire(shared_broker.port)
    yield w
    w.close()


# ---------------------------------------------------------------------------------- ApiVersions


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_api_versions_advertises_supported_ranges(wire, version):
    resp = wire.request(ApiKey.API_VERSIONS, version, {"client_software_name": "t", "client_software_version": "1"})
    assert resp["error_code"] == 0
    ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
    assert ranges == SERVED
    assert all(lo == 0 for lo, _ in ranges.values())


def test_api_versions_newer_version_gets_v0_layout_with_unsupported_version(wire):
    # ApiVersions v4 (newer than pyklog's v3): header v2 (tagged fields), compact strings in the body
    body = bytes([len(b"librdkafka") + 1]) + b"librdkafka" + bytes([len(b"2.16") + 1]) + b"2.16" + b"\x00"
    cid = 77
    header = struct.pack(">hhih", 18, 4, cid, 4) + b"rdkc" + b"\x00"
    frame = header + body
    wire.sock.sendall(struct.pack(">i", len(frame)) + frame)
    raw = wire.recv_frame()
    got_cid, err = struct.unpack_from(">ih", raw, 0)
    assert got_cid == cid and err == 35
    _, resp = decode_response(ApiKey.API_VERSIONS, 0, raw)
    assert {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]} == SERVED


# ---------------------------------------------------------------------------------- Metadata


@pytest.mark.parametrize("version", range(9))
def test_metadata_every_version_auto_creates(shared_broker, wire, version):
    name = topic_name()
    body = {"topics": [{"name": name}], "allow_auto_topic_creation": True}
    resp = wire.request(ApiKey.METADATA, version, body)
    assert [(b["node_id"], b["host"], b["port"]) for b in resp["brokers"]] == [(0, "127.0.0.1", shared_broker.port)]
    (t,) = resp["topics"]
    assert t["name"] == name and t["error_code"] == 0
    assert [(p["partition_index"], p["leader_id"], p["replica_nodes"]) for p in t["partitions"]] == [(0, 0, [0])]
    if version >= 1:
        assert resp["controller_id"] == 0
    if version >= 2:
        assert resp["cluster_id"] and len(resp["cluster_id"]) == 22


def test_metadata_all_topics_and_no_auto_create(wire):
    name = topic_name()
    resp = wire.request(ApiKey.METADATA, 4, {"topics": [{"name": name}], "allow_auto_topic_creation": False})
    assert resp["topics"][0]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    created = topic_name()
    assert create_topic(wire, created, 3)["error_code"] == 0
    all_v1 = wire.request(ApiKey.METADATA, 1, {"topics": None})
    all_v0 = wire.request(ApiKey.METADATA, 0, {"topics": []})
    for resp in (all_v1, all_v0):
        by_name = {t["name"]: t for t in resp["topics"]}
        assert name not in by_name
        assert sorted(p["partition_index"] for p in by_name[created]["partitions"]) == [0, 1, 2]


@pytest.mark.parametrize("bad", ["../x", "a/b", "x" * 250, "..", "", "spaces here", "\u00e9t\u00e9"])
def test_invalid_topic_names_never_touch_the_filesystem(shared_broker, wire, bad):
    data_dir = shared_broker.props["log.dirs"]
    parent = os.path.dirname(data_dir)
    before = set(os.listdir(parent)), set(os.listdir(data_dir))
    resp = wire.request(ApiKey.METADATA, 8, {"topics": [{"name": bad}], "allow_auto_topic_creation": True})
    assert resp["topics"][0]["error_code"] == 17  # INVALID_TOPIC_EXCEPTION
    assert produce(wire, bad, records(1))["error_code"] == 17
    assert fetch(wire, bad, 0)["error_code"] == 17
    assert create_topic(wire, bad)["error_code"] == 17
    assert set(os.listdir(parent)) == before[0]
    new = set(os.listdir(data_dir)) - before[1]
    assert all(n.startswith("t-") for n in new), new  # only other tests' logs appear meanwhile
    assert not os.path.exists(os.path.join(data_dir, "x")) and not os.path.exists(os.path.join(data_dir, "a"))


# ---------------------------------------------------------------------------------- Produce / Fetch


@pytest.mark.parametrize("pv,fv", [(3, 4), (4, 5), (5, 6), (6, 7), (7, 8), (8, 9), (8, 10), (8, 11)])
def test_produce_fetch_round_trip_every_version(wire, pv, fv):
    name = topic_name()
    assert create_topic(wire, name)["error_code"] == 0
    r1 = produce(wire, name, records(5, b"a"), version=pv)
    r2 = produce(wire, name, records(3, b"b", compression=1), version=pv)
    assert (r1["error_code"], r1["base_offset"], r2["error_code"], r2["base_offset"]) == (0, 0, 0, 5)
    if pv >= 5:
        assert r2["log_start_offset"] == 0
    part = fetch(wire, name, 0, version=fv)
    assert part["error_code"] == 0 and part["high_watermark"] == 8
    assert part["last_stable_offset"] == 8 and part.get("log_start_offset", 0) == 0
    assert values(part["records"]) == [b"a%d" % i for i in range(5)] + [b"b%d" % i for i in range(3)]
    # from the middle of the second batch: whole batches, the client skips what it did not ask for
    part = fetch(wire, name, 6, version=fv)
    assert [b.base_offset for b in iter_batches(bytes(part["records"]))] == [5]
    # at the end: empty; beyond: OFFSET_OUT_OF_RANGE with the watermarks
    assert fetch(wire, name, 8, version=fv)["records"] in (b"", None)
    oor = fetch(wire, name, 9, version=fv)
    assert oor["error_code"] == 1 and oor["high_watermark"] == 8


def test_fetch_limits_partition_max_bytes_and_min_one(wire):
    name = topic_name()
    create_topic(wire, name)
    for i in range(10):
        produce(wire, name, records(50, b"%d-" % i))
    one = len(records(50, b"0-"))
    part = fetch(wire, name, 0, partition_max_bytes=one * 3 + 10)
    assert len(list(iter_batches(bytes(part["records"])))) == 3
    # KIP-74: the first partition returns at least one whole batch even when it exceeds the limits
    part = fetch(wire, name, 0, partition_max_bytes=10, max_bytes=10)
    assert len(list(iter_batches(bytes(part["records"])))) == 1
    # the fetch-wide max_bytes caps the sum
    part = fetch(wire, name, 0, max_bytes=one * 2 + 5)
    assert len(list(iter_batches(bytes(part["records"])))) == 2


def test_multi_partition_fetch_uses_sendfile_regions_in_order(wire):
    name = topic_name()
    create_topic(wire, name, 3)
    for p in range(3):
        produce(wire, name, records(4, b"p%d-" % p), partition=p)
    resp = wire.request(
        ApiKey.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": name,
                    "partitions": [
                        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1 << 20} for p in (2, 0, 1)
                    ],
                }
            ],
        },
    )
    parts = resp["responses"][0]["partitions"]
    assert [p["partition_index"] for p in parts] == [2, 0, 1]
    for p in parts:
        assert values(p["records"]) == [b"p%d-%d" % (p["partition_index"], i) for i in range(4)]


def test_long_poll_fetch_completes_when_data_arrives(shared_broker, wire):
    name = topic_name()
    create_topic(wire, name)
    produce(wire, name, records(1))
    result = {}

    def poll():
        with Wire(shared_broker.port) as w2:
            t0 = time.monotonic()
            result["part"] = fetch(w2, name, 1, max_wait_ms=30000, min_bytes=1)
            result["elapsed"] = time.monotonic() - t0

    t = threading.Thread(target=poll)
    t.start()
    time.sleep(0.5)
    assert t.is_alive(), "the fetch waits for data (min_bytes=1) instead of answering empty"
    # other requests on other connections are served meanwhile (no handler thread is held)
    for _ in range(10):
        assert wire.request(ApiKey.API_VERSIONS, 2, {})["error_code"] == 0
    produce(wire, name, records(2, b"late"))
    t.join(20)
    assert not t.is_alive()
    assert values(result["part"]["records"]) == [b"late0", b"late1"]
    assert result["elapsed"] < 20  # completed by the append, not by the 30 s expiry


def test_long_poll_fetch_expires_empty(wire):
    name = topic_name()
    create_topic(wire, name)
    t0 = time.monotonic()
    part = fetch(wire, name, 0, max_wait_ms=300, min_bytes=1)
    assert time.monotonic() - t0 >= 0.25
    assert part["error_code"] == 0 and part["records"] in (b"", None) and part["high_watermark"] == 0


def test_message_too_large_and_bad_records(wire):
    name = topic_name()
    create_topic(wire, name)
    big = build_batch([(None, os.urandom(MESSAGE_MAX + 10), 0, ())])
    assert produce(wire, name, big)["error_code"] == 10  # MESSAGE_TOO_LARGE
    legacy = build_message_set([(None, b"x", 0)], magic=1)
    assert produce(wire, name, legacy, version=3)["error_code"] == 87  # INVALID_RECORD: v3+ needs magic 2
    corrupt = bytearray(records(3))
    corrupt[-1] ^= 0xFF
    assert produce(wire, name, bytes(corrupt))["error_code"] == 2  # CORRUPT_MESSAGE (CRC)
    assert produce(wire, name, records(2))["base_offset"] == 0  # nothing was appended before
    # acks must be -1, 0 or 1
    assert produce(wire, name, records(1), acks=2)["error_code"] == 21


def test_acks_zero_has_no_response_and_errors_close(shared_broker, wire):
    name = topic_name()
    create_topic(wire, name)
    wire.send(
        ApiKey.PRODUCE,
        8,
        {
            "acks": 0,
            "timeout_ms": 1000,
            "topic_data": [{"name": name, "partition_data": [{"index": 0, "records": records(3)}]}],
        },
    )
    # the next response on the connection is the ApiVersions one: the produce had none
    assert wire.request(ApiKey.API_VERSIONS, 2, {})["error_code"] == 0
    assert fetch(wire, name, 0)["high_watermark"] == 3
    with Wire(shared_broker.port) as w2:
        w2.send(
            ApiKey.PRODUCE,
            8,
            {
                "acks": 0,
                "timeout_ms": 1000,
                "topic_data": [{"name": name, "partition_data": [{"index": 7, "records": records(1)}]}],
            },
        )
        assert w2.is_closed(), "acks=0 produce that fails closes the connection (Kafka's signal)"


def test_not_leader_for_partitions_of_another_broker(shared_broker, wire):
    # a topic whose partition 1 belongs to broker 5 (registered in Kafka's layout, as an old
    # admin tool would write it; broker 5 is not running)
    import json

    from kazoo.client import KazooClient

    from pyklog.broker.zk import paths

    name = topic_name()
    kc = KazooClient(hosts=shared_broker.zk_connect)
    kc.start(timeout=30)
    try:
        t = kc.transaction()
        t.create(paths.topic(name), json.dumps({"version": 1, "partitions": {"0": [0], "1": [5]}}).encode())
        t.create(paths.topic_partitions(name), b"")
        for p, leader in ((0, 0), (1, 5)):
            t.create(paths.partition(name, p), b"")
            t.create(
                paths.partition_state(name, p),
                json.dumps(
                    {"controller_epoch": 1, "leader": leader, "version": 1, "leader_epoch": 0, "isr": [leader]}
                ).encode(),
            )
        assert not any(isinstance(r, Exception) for r in t.commit())
    finally:
        kc.stop()
        kc.close()
    assert produce(wire, name, records(1), partition=0)["error_code"] == 0
    assert produce(wire, name, records(1), partition=1)["error_code"] == 6  # NOT_LEADER_OR_FOLLOWER
    assert fetch(wire, name, 0, partition=1)["error_code"] == 6
    assert produce(wire, name, records(1), partition=2)["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
    meta = wire.request(ApiKey.METADATA, 8, {"topics": [{"name": name}]})
    parts = {p["partition_index"]: p for p in meta["topics"][0]["partitions"]}
    assert parts[0]["leader_id"] == 0 and parts[1]["leader_id"] == -1 and parts[1]["error_code"] == 5


# ---------------------------------------------------------------------------------- legacy formats


@pytest.mark.parametrize("pv,magic", [(0, 0), (1, 0), (2, 1)])
def test_legacy_produce_is_up_converted(wire, pv, magic):
    name = topic_name()
    create_topic(wire, name)
    ms = build_message_set([(b"k%d" % i, b"old%d" % i, 1_600_000_000_000 + i) for i in range(4)], magic=magic)
    r = produce(wire, name, ms, version=pv)
    assert r["error_code"] == 0 and r["base_offset"] == 0
    gz = build_message_set([(None, b"gz%d" % i, 1_600_000_000_000) for i in range(3)], magic=magic, compression=1)
    assert produce(wire, name, gz, version=pv)["base_offset"] == 4
    part = fetch(wire, name, 0, version=11)
    batches = list(iter_batches(bytes(part["records"])))
    assert all(b.header.magic == 2 for b in batches)
    assert [r.value for b in batches for r in b.records] == [b"old%d" % i for i in range(4)] + [
        b"gz%d" % i for i in range(3)
    ]


@pytest.mark.parametrize("fv,magic", [(0, 0), (1, 0), (2, 1), (3, 1)])
def test_legacy_fetch_is_down_converted(wire, fv, magic):
    name = topic_name()
    create_topic(wire, name)
    produce(wire, name, records(3, b"new"))
    produce(wire, name, records(2, b"zst", compression=4))
    part = fetch(wire, name, 0, version=fv)
    msgs = decode_message_set(bytes(part["records"]))
    assert [m.value for m in msgs] == [b"new0", b"new1", b"new2", b"zst0", b"zst1"]
    assert [m.offset for m in msgs] == [0, 1, 2, 3, 4]
    assert {m.magic for m in msgs} == {magic}
    assert part["high_watermark"] == 5


# ---------------------------------------------------------------------------------- ListOffsets


def test_list_offsets_every_version(wire):
    name = topic_name()
    create_topic(wire, name)
    t0 = 1_700_000_000_000
    for i in range(3):
        produce(wire, name, build_batch([(None, b"x", t0 + i * 1000, ()), (None, b"y", t0 + i * 1000 + 1, ())]))

    def lo(version, ts, max_num=1):
        resp = wire.request(
            ApiKey.LIST_OFFSETS,
            version,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": name,
                        "partitions": [
                            {
                                "partition_index": 0,
                                "timestamp": ts,
                                "max_num_offsets": max_num,
                                "current_leader_epoch": -1,
                            }
                        ],
                    }
                ],
            },
        )
        return resp["topics"][0]["partitions"][0]

    assert lo(0, -1, 10)["old_style_offsets"][0] == 6
    assert lo(0, -2, 10)["old_style_offsets"] == [0]
    for v in range(1, 6):
        assert lo(v, -1)["offset"] == 6
        assert lo(v, -2)["offset"] == 0
        r = lo(v, t0 + 1500)
        assert (r["error_code"], r["offset"], r["timestamp"]) == (0, 4, t0 + 2000)
        assert lo(v, t0 + 10_000)["offset"] == -1


# ---------------------------------------------------------------------------------- admin APIs


@pytest.mark.parametrize("version", range(8))
def test_create_topics_every_version(shared_broker, wire, version):
    name = topic_name()
    assert create_topic(wire, name, 2, version=version)["error_code"] == 0
    assert create_topic(wire, name, 2, version=version)["error_code"] == 36  # TOPIC_ALREADY_EXISTS
    data = shared_broker.props["log.dirs"]
    wait_for(
        lambda: all(os.path.isdir(os.path.join(data, f"{name}-{p}")) for p in (0, 1)),
        message="the leader's logs are created",
    )
    resp = wire.request(
        ApiKey.CREATE_TOPICS,
        version,
        {
            "topics": [
                {"name": "ok-" + name, "num_partitions": 0, "replication_factor": 1},
                {"name": "rf-" + name, "num_partitions": 1, "replication_factor": 3},
                {"name": "dup-" + name, "num_partitions": 1, "replication_factor": 1},
                {"name": "dup-" + name, "num_partitions": 1, "replication_factor": 1},
            ],
            "timeout_ms": 5000,
        },
    )
    codes = [t["error_code"] for t in resp["topics"]]
    assert codes == [37, 38, 42, 42]  # INVALID_PARTITIONS, INVALID_REPLICATION_FACTOR, INVALID_REQUEST
    if version >= 1:
        assert all(t["error_message"] for t in resp["topics"])
        v = wire.request(
            ApiKey.CREATE_TOPICS,
            version,
            {"topics": [{"name": "v-" + name, "num_partitions": 1, "replication_factor": 1}], "validate_only": True},
        )
        assert v["topics"][0]["error_code"] == 0
        meta = wire.request(ApiKey.METADATA, 4, {"topics": [{"name": "v-" + name}], "allow_auto_topic_creation": False})
        assert meta["topics"][0]["error_code"] == 3  # validate_only created nothing


@pytest.mark.parametrize("version", range(4))
def test_delete_topics_removes_logs(shared_broker, wire, version):
    name = topic_name()
    create_topic(wire, name, 2)
    produce(wire, name, records(3))
    data = shared_broker.props["log.dirs"]
    wait_for(lambda: os.path.isdir(os.path.join(data, f"{name}-1")), message="logs created")
    resp = wire.request(ApiKey.DELETE_TOPICS, version, {"topic_names": [name, topic_name()], "timeout_ms": 5000})
    assert [r["error_code"] for r in resp["responses"]] == [0, 3]
    wait_for(
        lambda: (
            not any(
                d.startswith(name + "-") and not d.endswith("-delete")
                for d in os.listdir(data)
                if d.split(".")[0].startswith(name)
            )
        ),
        message="the deleted topic's logs are gone",
    )
    # produce auto-creates the topic again once the controller completed the deletion (until then
    # the name is marked for deletion: UNKNOWN_TOPIC_OR_PARTITION, which clients retry): a new, empty log
    r = wait_for(lambda: (r := produce(wire, name, records(1)))["error_code"] == 0 and r, message="auto-created")
    assert r["base_offset"] == 0


def test_produce_auto_creates_unknown_topic(wire):
    name = topic_name()
    r = produce(wire, name, records(2))
    assert (r["error_code"], r["base_offset"]) == (0, 0)
    assert values(fetch(wire, name, 0)["records"]) == [b"v0", b"v1"]


def test_init_producer_id_and_idempotent_produce(wire):
    ids = {
        wire.request(ApiKey.INIT_PRODUCER_ID, v, {"transactional_id": None, "transaction_timeout_ms": 60000})[
            "producer_id"
        ]
        for v in (0, 1, 0, 1)
    }
    assert len(ids) == 4 and min(ids) >= 0
    resp = wire.request(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": "tx", "transaction_timeout_ms": 60000})
    assert resp["error_code"] == 0 and resp["producer_id"] not in ids  # the transaction coordinator's own id
    pid = max(ids)
    name = topic_name()
    create_topic(wire, name)
    b0 = records(3, producer_id=pid, producer_epoch=0, base_sequence=0)
    b1 = records(2, b"w", producer_id=pid, producer_epoch=0, base_sequence=3)
    assert produce(wire, name, b0)["base_offset"] == 0
    assert produce(wire, name, b1)["base_offset"] == 3
    again = produce(wire, name, b1)  # a retried batch: same offsets, no duplicate in the log
    assert (again["error_code"], again["base_offset"]) == (0, 3)
    assert fetch(wire, name, 0)["high_watermark"] == 5
    gap = records(1, producer_id=pid, producer_epoch=0, base_sequence=9)
    assert produce(wire, name, gap)["error_code"] == 45  # OUT_OF_ORDER_SEQUENCE_NUMBER


# ---------------------------------------------------------------------------------- offsets


def test_find_coordinator_and_offsets_all_versions(shared_broker, wire):
    name = topic_name()
    create_topic(wire, name, 2)
    group = "g-" + uuid.uuid4().hex[:8]
    for v in range(3):
        resp = wire.request(ApiKey.FIND_COORDINATOR, v, {"key": group, "key_type": 0})
        assert (resp["error_code"], resp["node_id"], resp["port"]) == (0, 0, shared_broker.port)

    def commit(v, offset):
        body = {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": offset + p,
                            "committed_metadata": f"m{v}",
                            "committed_leader_epoch": -1,
                            "commit_timestamp": -1,
                        }
                        for p in (0, 1)
                    ],
                }
            ],
        }
        for _attempt in range(100):
            resp = wire.request(ApiKey.OFFSET_COMMIT, v, body)
            codes = [p["error_code"] for p in resp["topics"][0]["partitions"]]
            if codes != [14, 14]:  # COORDINATOR_LOAD_IN_PROGRESS right after creation
                return codes
            time.sleep(0.1)
        return codes

    def fetch_offsets(v):
        resp = wire.request(
            ApiKey.OFFSET_FETCH, v, {"group_id": group, "topics": [{"name": name, "partition_indexes": [0, 1]}]}
        )
        return [(p["committed_offset"], p["metadata"], p["error_code"]) for p in resp["topics"][0]["partitions"]]

    for v in range(1, 8):
        assert commit(v, 10 * v) == [0, 0]
        for fv in range(1, 6):
            assert fetch_offsets(fv) == [(10 * v, f"m{v}", 0), (10 * v + 1, f"m{v}", 0)]
    all_resp = wire.request(ApiKey.OFFSET_FETCH, 2, {"group_id": group, "topics": None})
    assert {(t["name"], p["partition_index"]) for t in all_resp["topics"] for p in t["partitions"]} == {
        (name, 0),
        (name, 1),
    }
    # v0 is ZooKeeper storage (Kafka 0.8.2), separate from the offsets topic
    assert commit(0, 500) == [0, 0]
    assert [o for o, _, _ in fetch_offsets(0)] == [500, 501]
    assert [o for o, _, _ in fetch_offsets(1)] == [70, 71]
    unknown = wire.request(
        ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": [{"name": name + "-none", "partition_indexes": [0]}]}
    )
    assert unknown["topics"][0]["partitions"][0]["committed_offset"] == -1


# ---------------------------------------------------------------------------------- bad input


def test_unknown_api_bad_version_and_garbage_close_only_that_connection(shared_broker, wire):
    port = shared_broker.port
    cases = [
        struct.pack(">hhih", 11, 0, 1, -1) + b"\x00" * 20,  # JoinGroup: not served
        struct.pack(">hhih", 0, 9, 1, -1) + b"\x00" * 20,  # Produce v9 (flexible): not served
        struct.pack(">hhih", 3, 8, 1, -1) + b"\xff" * 3,  # Metadata v8, truncated body
        struct.pack(">hhih", 3, 1, 1, 30000) + b"x",  # client id longer than the frame
        b"\x00",  # shorter than a header
    ]
    for frame in cases:
        with Wire(port) as bad:
            bad.sock.sendall(struct.pack(">i", len(frame)) + frame)
            assert bad.is_closed(), frame
    with Wire(port) as big:
        big.sock.sendall(struct.pack(">i", REQUEST_MAX + 1) + b"\x00" * 100)
        assert big.is_closed()
    assert wire.request(ApiKey.API_VERSIONS, 2, {})["error_code"] == 0
    assert shared_broker.proc.poll() is None
