"""A group's metadata record in ``__consumer_offsets`` brings it back after its coordinator's restart,
and its tombstone keeps a deleted group deleted.

One broker process, raw requests: a static member (``group.instance.id``, KIP-345) joins and
syncs; the broker is SIGKILLed and started again; the member's Heartbeat with its member id and
generation is accepted and DescribeGroups shows the group Stable with the same member, instance id
and assignment (without the record: UNKNOWN_MEMBER_ID, and the group unknown).  The member leaves
(an Empty record), the group is deleted (a tombstone), the broker is SIGKILLed again: the group
stays deleted (without the tombstone the Empty record would bring it back).
"""

from __future__ import annotations

import uuid

from pyklog.broker.protocol import ApiKey
from tests.support import Wire, wait_for

NONE, LOAD_IN_PROGRESS, NOT_COORDINATOR = 0, 14, 16


def _answer(port: int, api: ApiKey, version: int, body: dict, code_of=lambda r: r["error_code"]) -> dict:
    """The request's answer once the coordinator has loaded (retrying the coordinator errors)."""

    def ask():
        with Wire(port, timeout=10) as w:
            r = w.request(api, version, body)
        return None if code_of(r) in (LOAD_IN_PROGRESS, NOT_COORDINATOR) else r

    return wait_for(ask, timeout=30, interval=0.1, message=f"{api.name} answered")


def test_static_member_survives_coordinator_restart_and_deleted_group_stays_deleted(broker_factory):
    b = broker_factory(0, group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=1)
    group, instance = f"gm-{uuid.uuid4().hex[:8]}", f"inst-{uuid.uuid4().hex[:6]}"
    _answer(b.port, ApiKey.FIND_COORDINATOR, 1, {"key": group})  # creates __consumer_offsets
    joined = _answer(
        b.port,
        ApiKey.JOIN_GROUP,
        5,
        {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": "",
            "group_instance_id": instance,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"subscription"}],
        },
    )
    assert joined["error_code"] == NONE, joined
    member, generation = joined["member_id"], joined["generation_id"]
    sync = {
        "group_id": group,
        "generation_id": generation,
        "member_id": member,
        "group_instance_id": instance,
        "assignments": [{"member_id": member, "assignment": b"assignment"}],
    }
    with Wire(b.port) as w:
        synced = w.request(ApiKey.SYNC_GROUP, 3, sync)
    assert synced["error_code"] == NONE and synced["assignment"] == b"assignment", synced

    b.kill()
    b.start()
    heartbeat = {"group_id": group, "generation_id": generation, "member_id": member, "group_instance_id": instance}
    assert _answer(b.port, ApiKey.HEARTBEAT, 3, heartbeat)["error_code"] == NONE
    described = _answer(b.port, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group]}, lambda r: r["groups"][0]["error_code"])
    g = described["groups"][0]
    assert (g["group_state"], g["protocol_type"], g["protocol_data"]) == ("Stable", "consumer", "range"), g
    assert [(m["member_id"], m["group_instance_id"], m["member_assignment"]) for m in g["members"]] == [
        (member, instance, b"assignment")
    ]
    with Wire(b.port) as w:  # SyncGroup of the current generation: the stored assignment
        assert w.request(ApiKey.SYNC_GROUP, 3, dict(sync, assignments=[]))["assignment"] == b"assignment"
        # the instance id still maps to the member: another member id for it is fenced
        assert w.request(ApiKey.HEARTBEAT, 3, dict(heartbeat, member_id="intruder"))["error_code"] == 82
        left = w.request(ApiKey.LEAVE_GROUP, 3, {"group_id": group, "members": [{"member_id": member, "group_instance_id": instance}]})  # fmt: skip
        assert left["error_code"] == NONE and left["members"][0]["error_code"] == NONE, left
        deleted = w.request(ApiKey.DELETE_GROUPS, 0, {"groups_names": [group]})
        assert deleted["results"][0]["error_code"] == NONE, deleted

    b.kill()
    b.start()
    described = _answer(b.port, ApiKey.DESCRIBE_GROUPS, 4, {"groups": [group]}, lambda r: r["groups"][0]["error_code"])
    assert described["groups"][0]["group_state"] == "Dead", described
    listed = _answer(b.port, ApiKey.LIST_GROUPS, 0, {})
    assert group not in {x["group_id"] for x in listed["groups"]}
