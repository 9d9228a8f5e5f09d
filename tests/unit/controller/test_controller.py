"""The controller (pyklog.broker.controller) with real broker processes in one ZooKeeper chroot.

Until followers replicate (the replica fetcher), these tests put followers into the ISR by writing
the partition state znodes as a partition leader would (conditionally, keeping leader and epoch),
and check every election by reading the state znodes the controller writes.
"""

from __future__ import annotations

import json

import pytest

from pyklog.broker.controller import election
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import (
    decode_controller,
    decode_partition_list,
    decode_reassignment,
    encode_partition_list,
    encode_reassignment,
)

# ------------------------------------------------------------------------------ pure algorithms


def test_offline_election_takes_the_first_live_isr_replica_in_assignment_order():
    assert election.offline_partition_leader([3, 1, 2], isr=[1, 2], live=[1, 2, 3]) == (1, False)
    assert election.offline_partition_leader([3, 1, 2], isr=[2, 1], live=[2]) == (2, False)
    # never from outside the ISR unless unclean election is allowed
    assert election.offline_partition_leader([1, 2, 3], isr=[1], live=[2, 3]) == (None, False)
    assert election.offline_partition_leader([1, 2, 3], isr=[1], live=[3, 2], unclean_allowed=True) == (2, True)


def test_preferred_reassign_and_controlled_shutdown_elections():
    assert election.preferred_replica_leader([2, 1], isr=[1, 2], live=[1, 2]) == (2, False)
    assert election.preferred_replica_leader([2, 1], isr=[1], live=[1, 2]).leader is None
    assert election.preferred_replica_leader([2, 1], isr=[1, 2], live=[1]).leader is None
    assert election.reassign_partition_leader([4, 5], isr=[1, 5, 4], live=[1, 4, 5]).leader == 4
    assert election.reassign_partition_leader([4, 5], isr=[1], live=[1, 4, 5]).leader is None
    assert election.controlled_shutdown_leader([1, 2, 3], [1, 2, 3], [1, 2, 3], shutting_down=[1, 2]).leader == 3
    assert election.controlled_shutdown_leader([1, 2], [1], [1, 2], shutting_down=[1]).leader is None


def test_imbalance_ratio():
    assignments = {("t", 0): [1, 2], ("t", 1): [1, 2], ("t", 2): [2, 1], ("t", 3): [1, 2]}
    leaders = {("t", 0): 2, ("t", 1): 1, ("t", 2): 2, ("t", 3): 1}
    assert election.imbalanced_brokers(leaders, assignments, 10) == {1: [("t", 0)]}
    assert election.imbalanced_brokers(leaders, assignments, 50) == {}


def test_controller_znode_codecs_are_kafkas_json():
    from pyklog.broker.zk.znodes import ControllerRegistration, encode_controller

    assert (
        encode_controller(ControllerRegistration(2, 1700000000000))
        == b'{"version":1,"brokerid":2,"timestamp":"1700000000000"}'
    )
    assert decode_controller(b'{"version":1,"brokerid":2,"timestamp":"1700000000000"}').broker_id == 2
    assert decode_controller(b"3").broker_id == 3  # Kafka 0.8
    assert encode_partition_list([("t", 1)]) == b'{"version":1,"partitions":[{"topic":"t","partition":1}]}'
    assert decode_partition_list(b'{"version":1,"partitions":[{"topic":"t","partition":1}]}', "/x") == [("t", 1)]
    doc = encode_reassignment({("t", 0): [1, 2]})
    assert doc == b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}'
    assert decode_reassignment(
        b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any","any"]}]}', "/x"
    ) == {("t", 0): [1, 2]}
    with pytest.raises(ValueError):
        decode_reassignment(
            b'{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1]},'
            b'{"topic":"t","partition":0,"replicas":[2]}]}',
            "/x",
        )


# ------------------------------------------------------------------------------ helpers


def state(zk, topic, p) -> dict:
    return json.loads(zk.get(paths.partition_state(topic, p))[0])


# ------------------------------------------------------------------------------ controller election


# ------------------------------------------------------------------------------ leader failure


# ------------------------------------------------------------------------------ preferred election


# ------------------------------------------------------------------------------ reassignment


def test_reassign_tool_refuses_bad_input(tmp_path, capsys):
    from pyklog.connector.cli import reassign_partitions

    f = tmp_path / "bad.json"
    f.write_text('{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,1]}]}')
    assert (
        reassign_partitions.main(["--zookeeper", "127.0.0.1:1", "--reassignment-json-file", str(f), "--execute"]) == 1
    )
    assert "may not contain duplicate entries" in capsys.readouterr().err
    assert (
        reassign_partitions.main(
            ["--bootstrap-server", "127.0.0.1:1", "--reassignment-json-file", str(f), "--execute", "--verify"]
        )
        == 1
    )
    assert "exactly one action" in capsys.readouterr().err


def test_golden_controlled_shutdown_v0_has_kafka_08s_header_without_client_id():
    from pyklog.broker.protocol import decode_request_header, encode_request
    from pyklog.broker.protocol.api import decode_request

    frame = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 0, 1, "ignored", {"broker_id": 3})
    assert frame == bytes.fromhex("0000000c000700000000000100000003")
    header, off = decode_request_header(frame[4:])
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id, off) == (
        ApiKey.CONTROLLED_SHUTDOWN,
        0,
        1,
        None,
        8,
    )
    assert decode_request(header, frame[4:], off) == {"broker_id": 3}
    v2 = encode_request(ApiKey.CONTROLLED_SHUTDOWN, 2, 1, "c", {"broker_id": 3, "broker_epoch": 7})
    assert v2 == bytes.fromhex("000000170007000200000001000163000000030000000000000007")
