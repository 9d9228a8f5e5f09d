"""The group metadata record of ``__consumer_offsets`` (Kafka's GroupMetadataKey / GroupMetadataValue
schemas): golden bytes written by hand from the schemas, round trips of every version, the
decoder's errors, and the load path (records replayed into the offsets partition's state, then
the groups brought back by the coordinator, Stable, with their members, assignments and static
instance ids)."""

from __future__ import annotations

import time

import pytest

from pyklog.broker.coordinator.group import GroupCoordinator, GroupState
from pyklog.broker.coordinator.group.metadata_record import (
    GroupMetadataRecordError,
    GroupMetadataValue,
    MemberRecord,
    decode_group_metadata_key,
    decode_group_metadata_value,
    encode_group_metadata_key,
    encode_group_metadata_value,
)
from pyklog.broker.coordinator.offsets import (
    OffsetAndMetadata,
    OffsetManager,
    _GroupOffsets,
    decode_offset_key,
    encode_offset_key,
    encode_offset_value,
)

MEMBER = MemberRecord("m1", "i1", "c1", "/h", 300000, 10000, b"\x00\x01", b"\x02")
VALUE = GroupMetadataValue("consumer", 5, "range", "m1", 1_700_000_000_000, (MEMBER,))


def s16(s: str) -> bytes:
    return len(s).to_bytes(2, "big") + s.encode()


# version 3, as Kafka 3.7 writes it: int16-length strings, int32 bytes and array counts
GOLDEN_V3 = b"".join(
    [
        b"\x00\x03",  # version
        s16("consumer"),  # protocolType
        b"\x00\x00\x00\x05",  # generation
        s16("range"),  # protocol
        s16("m1"),  # leader
        b"\x00\x00\x01\x8b\xcf\xe5\x68\x00",  # currentStateTimestamp 1700000000000
        b"\x00\x00\x00\x01",  # members: 1
        s16("m1"),  # memberId
        s16("i1"),  # groupInstanceId (v3+)
        s16("c1"),  # clientId
        s16("/h"),  # clientHost
        b"\x00\x04\x93\xe0",  # rebalanceTimeout 300000 (v1+)
        b"\x00\x00\x27\x10",  # sessionTimeout 10000
        b"\x00\x00\x00\x02\x00\x01",  # subscription
        b"\x00\x00\x00\x01\x02",  # assignment
    ]
)

# version 4 (flexible): compact strings / bytes / arrays (uvarint length + 1, 0 = null) and
# tagged-field sections; one unknown tagged field at the end is skipped
GOLDEN_V4 = b"".join(
    [
        b"\x00\x04",
        b"\x09consumer",
        b"\x00\x00\x00\x05",
        b"\x06range",
        b"\x00",  # leader: null
        b"\xff" * 8,  # currentStateTimestamp -1
        b"\x02",  # members: 1
        b"\x03m1",
        b"\x00",  # groupInstanceId: null
        b"\x03c1",
        b"\x03/h",
        b"\x00\x04\x93\xe0",
        b"\x00\x00\x27\x10",
        b"\x03\x00\x01",
        b"\x01",  # assignment: empty
        b"\x00",  # member's tagged fields: none
        b"\x01\x05\x02\xaa\xbb",  # one tagged field (tag 5, 2 bytes), unknown: skipped
    ]
)


def test_key_golden_bytes_and_round_trip():
    key = encode_group_metadata_key("g1")
    assert key == b"\x00\x02\x00\x02g1"
    assert decode_group_metadata_key(key) == "g1"
    assert decode_offset_key(key) is None  # the offsets codec tells the two keys apart
    with pytest.raises(GroupMetadataRecordError, match="expected version 2, read 1"):
        decode_group_metadata_key(encode_offset_key("g1", "t", 0))


def test_value_v3_golden_bytes_and_round_trip():
    assert encode_group_metadata_value(VALUE) == GOLDEN_V3
    assert decode_group_metadata_value(GOLDEN_V3) == VALUE


def test_value_v4_flexible_golden_bytes_decoded():
    v = decode_group_metadata_value(GOLDEN_V4)
    assert v == GroupMetadataValue(
        "consumer", 5, "range", None, -1, (MemberRecord("m1", None, "c1", "/h", 300000, 10000, b"\x00\x01", b""),)
    )


@pytest.mark.parametrize("version", [0, 1, 2, 3])
def test_value_round_trip_every_written_version(version):
    v = decode_group_metadata_value(encode_group_metadata_value(VALUE, version))
    assert v.generation == 5 and v.protocol == "range" and v.leader == "m1"
    m = v.members[0]
    assert (m.member_id, m.client_id, m.client_host, m.session_timeout_ms) == ("m1", "c1", "/h", 10000)
    assert (m.subscription, m.assignment) == (b"\x00\x01", b"\x02")
    assert m.group_instance_id == ("i1" if version >= 3 else None)
    assert m.rebalance_timeout_ms == (300000 if version >= 1 else 10000)  # v0: the session timeout
    assert v.current_state_timestamp == (1_700_000_000_000 if version >= 2 else -1)


def test_empty_group_value_and_decoder_errors():
    empty = GroupMetadataValue("consumer", 7, None, None, 123, ())
    assert decode_group_metadata_value(encode_group_metadata_value(empty)) == empty
    with pytest.raises(GroupMetadataRecordError, match="expected version 0-4, read 9"):
        decode_group_metadata_value(b"\x00\x09")
    with pytest.raises(GroupMetadataRecordError, match="assignment at byte"):
        decode_group_metadata_value(GOLDEN_V3[:-1])
    with pytest.raises(GroupMetadataRecordError, match="expected at least a 2-byte version"):
        decode_group_metadata_value(b"")


# ---------------------------------------------------------------------------- the load path


def _replay(records) -> _GroupOffsets:
    loaded = _GroupOffsets()
    for i, (key, value) in enumerate(records):
        OffsetManager._apply(loaded, key, value, 0, i, i, None)
    return loaded


def test_replay_keeps_the_latest_record_per_group_and_honours_tombstones():
    old = VALUE._replace(generation=4)
    gone = GroupMetadataValue("consumer", 2, None, None, 5, ())
    loaded = _replay(
        [
            (encode_group_metadata_key("g"), encode_group_metadata_value(old)),
            (encode_offset_key("g", "t", 0), encode_offset_value(OffsetAndMetadata(42, -1, "", 1))),
            (encode_group_metadata_key("g"), encode_group_metadata_value(VALUE)),
            (encode_group_metadata_key("dead"), encode_group_metadata_value(gone)),
            (encode_group_metadata_key("dead"), None),  # tombstone
            (encode_group_metadata_key("bad"), b"\x00\x03\x00"),  # unreadable: skipped, logged
        ]
    )
    assert loaded.groups == {"g": VALUE}
    assert loaded.cache["g"][("t", 0)].offset == 42


def test_loaded_groups_are_stable_with_members_assignments_and_static_ids():
    c = GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60000)
    try:
        dynamic = MemberRecord("d-1", None, "c2", "/h2", 30000, 10000, b"sub-d", b"asg-d")
        value = VALUE._replace(members=(MEMBER, dynamic))
        empty = GroupMetadataValue("consumer", 3, None, None, 1_000, ())
        c.groups_loaded(0, {"g": value, "e": empty})
        assert c.group_summary("g") == {
            "state": "Stable",
            "generation": 5,
            "protocol_type": "consumer",
            "protocol": "range",
            "leader": "m1",
            "members": ["m1", "d-1"],
        }
        # the members carry on where they were: heartbeat, SyncGroup (their assignment), commits
        assert c.heartbeat("g", 5, "d-1") == 0
        assert c.heartbeat("g", 5, "m1", "i1") == 0
        assert c.heartbeat("g", 4, "d-1") == 22  # ILLEGAL_GENERATION
        answers = []
        c.sync_group("g", 5, "d-1", {}, answers.append)
        assert answers == [{"throttle_time_ms": 0, "error_code": 0, "assignment": b"asg-d"}]
        c.validate_offset_commit("g", 5, "m1", "i1")
        # the static mapping came back: another member id for instance i1 is fenced
        assert c.heartbeat("g", 5, "other", "i1") == 82  # FENCED_INSTANCE_ID
        desc = c.describe_group("g")
        assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
        assert [(m["member_id"], m["group_instance_id"], m["member_assignment"]) for m in desc["members"]] == [
            ("m1", "i1", b"\x02"),
            ("d-1", None, b"asg-d"),
        ]
        assert c.group_state("e") == GroupState.EMPTY
        # a group already live here keeps its state when the partition is reloaded
        c.groups_loaded(0, {"g": value._replace(generation=1, members=())})
        assert c.group_summary("g")["generation"] == 5
    finally:
        c.shutdown()


def test_loaded_members_get_a_fresh_session_and_expire_without_heartbeats():
    c = GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60000)
    try:
        short = MemberRecord("m1", None, "c1", "/h", 200, 200, b"s", b"a")
        c.groups_loaded(0, {"g": VALUE._replace(members=(short,))})
        assert c.group_state("g") == GroupState.STABLE
        deadline = time.monotonic() + 5
        while c.group_state("g") != GroupState.EMPTY and time.monotonic() < deadline:
            time.sleep(0.02)
        assert c.group_state("g") == GroupState.EMPTY  # expired, rebalanced, empty
    finally:
        c.shutdown()


def test_group_record_round_trips_through_the_coordinator():
    """A group formed by JoinGroup/SyncGroup writes the record a new coordinator loads back the same."""
    c = GroupCoordinator(initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60000)
    try:
        joined = []
        c.join_group(
            "g", "", client_id="cl", client_host="/1.2.3.4", session_timeout_ms=10000, rebalance_timeout_ms=20000,
            protocol_type="consumer", protocols=[("range", b"sub")], respond=joined.append,
            group_instance_id="inst",
        )  # fmt: skip
        deadline = time.monotonic() + 5  # the join completes on the coordinator's timer thread
        while not joined and time.monotonic() < deadline:
            time.sleep(0.01)
        mid = joined[0]["member_id"]
        synced = []
        c.sync_group("g", joined[0]["generation_id"], mid, {mid: b"asg"}, synced.append, "inst")
        assert synced[0]["assignment"] == b"asg"
        g = c._group("g", create=False)
        with g.lock:
            record = decode_group_metadata_value(encode_group_metadata_value(g.to_record(None, 99)))
        assert record == GroupMetadataValue(
            "consumer",
            1,
            "range",
            mid,
            99,
            (MemberRecord(mid, "inst", "cl", "/1.2.3.4", 20000, 10000, b"sub", b"asg"),),
        )
    finally:
        c.shutdown()


# ---------------------------------------------------------------------------- the write path


class _OffsetsStub:
    """What the group coordinator asks of the offset manager: every group served here, and a group
    metadata write answered with ``code`` (the records written are kept)."""

    def __init__(self):
        self.code = 0
        self.written: list[tuple[str, GroupMetadataValue]] = []
        self.listeners = []

    def add_group_listener(self, listener):
        self.listeners.append(listener)

    def fetch(self, group, partitions):
        return {}

    def partition_for(self, group):
        return 0

    def store_group_async(self, group, value, done):
        if self.code == 0:
            self.written.append((group, decode_group_metadata_value(value)))
        done(self.code)


def _join(c, member_id="", instance=None):
    box = []
    c.join_group(
        "g", member_id, client_id="cl", client_host="/h", session_timeout_ms=10000, rebalance_timeout_ms=10000,
        protocol_type="consumer", protocols=[("range", b"sub")], respond=box.append, group_instance_id=instance,
    )  # fmt: skip
    deadline = time.monotonic() + 5  # the join completes on the coordinator's timer thread
    while not box and time.monotonic() < deadline:
        time.sleep(0.01)
    return box[0]


def test_sync_group_answers_only_after_the_record_is_written_and_a_failed_write_rebalances():
    stub = _OffsetsStub()
    c = GroupCoordinator(stub, initial_rebalance_delay_ms=0, min_session_timeout_ms=10, max_session_timeout_ms=60000)
    try:
        assert stub.listeners == [c]
        j = _join(c, instance="inst")
        mid, gen = j["member_id"], j["generation_id"]
        stub.code = 15  # COORDINATOR_NOT_AVAILABLE: the ISR did not take the record
        synced = []
        c.sync_group("g", gen, mid, {mid: b"asg"}, synced.append, "inst")
        assert synced == [{"throttle_time_ms": 0, "error_code": 15, "assignment": b""}]
        assert c.group_state("g") == GroupState.PREPARING_REBALANCE  # rebalancing again
        assert stub.written == []
        stub.code = 0
        j = _join(c, mid, instance="inst")
        assert j["generation_id"] == gen + 1
        synced = []
        c.sync_group("g", gen + 1, mid, {mid: b"asg"}, synced.append, "inst")
        assert synced[0]["error_code"] == 0 and synced[0]["assignment"] == b"asg"
        assert c.group_state("g") == GroupState.STABLE
        assert stub.written == [
            ("g", GroupMetadataValue("consumer", gen + 1, "range", mid, stub.written[0][1].current_state_timestamp,
                                     (MemberRecord(mid, "inst", "cl", "/h", 10000, 10000, b"sub", b"asg"),)))
        ]  # fmt: skip
        # a restarted static member (empty member id) gets a new id, written before it is answered
        stub.code = 16  # NOT_COORDINATOR
        j = _join(c, "", instance="inst")
        assert j["error_code"] == 16
        stub.code = 0
        j = _join(c, "", instance="inst")
        assert j["error_code"] == 0 and stub.written[-1][1].members[0].member_id == j["member_id"] != mid
        # the last member leaves: an Empty record (no members, no protocol)
        assert c.leave_group("g", [(j["member_id"], "inst")]) == (0, [0])
        assert c.group_state("g") == GroupState.EMPTY
        last = stub.written[-1][1]
        assert (last.members, last.protocol, last.generation) == ((), None, gen + 2)
    finally:
        c.shutdown()
