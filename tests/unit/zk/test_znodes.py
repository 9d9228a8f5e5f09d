"""Codecs of the ZooKeeper records (pyklog.broker.zk.znodes): golden JSON in Kafka's exact forms
(written by hand from Kafka's documentation and the ZkData znode descriptions), round trips, malformed
data, and the broker/client agreement on which endpoint of a registration to use."""

from __future__ import annotations

import json

import pytest

from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import (
    BrokerRegistration,
    ConsumerRegistration,
    EndPoint,
    LeaderAndIsr,
    ProducerIdBlock,
    ZkDataError,
    decode_broker_registration,
    decode_cluster_id,
    decode_config_change,
    decode_consumer_offset,
    decode_consumer_registration,
    decode_partition_state,
    decode_producer_id_block,
    decode_replica_deletion,
    decode_topic_assignment,
    decode_topic_config,
    encode_broker_registration,
    encode_cluster_id,
    encode_config_change,
    encode_consumer_offset,
    encode_consumer_registration,
    encode_partition_state,
    encode_producer_id_block,
    encode_replica_deletion,
    encode_topic_assignment,
    encode_topic_config,
    partition_count,
)

BROKER = paths.broker_id(1)

# Kafka's BrokerIdZNode examples, one per version.
V1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
V2 = (
    b'{"version":2,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
    b'"endpoints":["PLAINTEXT://host1:9092","SSL://host1:9093"]}'
)
V3 = (
    b'{"version":3,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
    b'"endpoints":["PLAINTEXT://host1:9092","SSL://host1:9093"],"rack":"dc1"}'
)
# v4 with custom listener names: the first endpoint speaks SSL, the PLAINTEXT one comes second.
V4 = (
    b'{"version":4,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
    b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
    b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":"dc1"}'
)
V5 = (
    b'{"features":{"metadata.version":{"min_version":1,"max_version":7}},"host":"localhost","port":9092,'
    b'"jmx_port":9999,"timestamp":"2233345666","endpoints":["PLAINTEXT://host1:9092"],'
    b'"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"rack":null,"version":5}'
)
# v2+ without a PLAINTEXT listener: host null, port -1
SSL_ONLY = (
    b'{"version":4,"host":null,"port":-1,"jmx_port":-1,"timestamp":"2233345666",'
    b'"endpoints":["SSL://host1:9093"],"listener_security_protocol_map":{"SSL":"SSL"},"rack":null}'
)


# ---------------------------------------------------------------------------- broker registration


def test_broker_registration_every_version():
    r1 = decode_broker_registration(V1, BROKER)
    assert (r1.version, r1.endpoints, r1.address()) == (1, (), ("localhost", 9092))
    r2 = decode_broker_registration(V2, BROKER)
    assert r2.endpoints == (EndPoint("PLAINTEXT", "host1", 9092, "PLAINTEXT"), EndPoint("SSL", "host1", 9093, "SSL"))
    assert r2.address() == ("host1", 9092)  # endpoints take precedence over host/port
    r3 = decode_broker_registration(V3, BROKER)
    assert (r3.rack, r3.jmx_port, r3.timestamp, r3.address()) == ("dc1", 9999, "2233345666", ("host1", 9092))
    r5 = decode_broker_registration(V5, BROKER)
    assert r5.version == 5 and r5.features == {"metadata.version": {"min_version": 1, "max_version": 7}}
    assert r5.address() == ("host1", 9092)


def test_broker_registration_where_the_old_parsers_disagreed():
    # connector/client.py took the first endpoint (CLIENT, an SSL listener: a PLAINTEXT client cannot
    # talk to it); broker/zk/cluster.py took the PLAINTEXT one.  Kafka's Broker.node(listener) agrees
    # with the latter: the endpoint of the listener the client uses.
    r4 = decode_broker_registration(V4, BROKER)
    assert r4.endpoint("CLIENT") == EndPoint("CLIENT", "host1", 9092, "SSL")
    assert r4.address() == ("host1", 9093)
    assert r4.address("CLIENT") == ("host1", 9092)
    # host null in v2+ (no PLAINTEXT listener): neither the SSL endpoint nor host/port is an address
    ssl = decode_broker_registration(SSL_ONLY, BROKER)
    assert ssl.host is None and ssl.port == -1
    with pytest.raises(ZkDataError, match=r"/brokers/ids/1: expected an endpoint of listener PLAINTEXT"):
        ssl.address(path=BROKER)


def test_broker_registration_as_pyklog_writes_it():
    reg = BrokerRegistration.for_listeners(
        ["PLAINTEXT://127.0.0.1:9093"], "127.0.0.1", 9093, timestamp_ms=1700000000000
    )
    golden = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://127.0.0.1:9093"],'
        b'"rack":null,"jmx_port":-1,"host":"127.0.0.1","timestamp":"1700000000000","port":9093,"version":4}'
    )
    assert encode_broker_registration(reg) == golden
    assert decode_broker_registration(golden) == reg
    # a custom listener name is registered as PLAINTEXT; IPv6 hosts keep their brackets
    six = BrokerRegistration.for_listeners(["INTERNAL://[::1]:9094"], None, None, timestamp_ms=1)
    assert json.loads(encode_broker_registration(six))["endpoints"] == ["INTERNAL://[::1]:9094"]
    assert json.loads(encode_broker_registration(six))["listener_security_protocol_map"] == {"INTERNAL": "PLAINTEXT"}
    assert decode_broker_registration(encode_broker_registration(six)).address() == ("::1", 9094)
    for golden_v in (V1, V2, V3, V4, V5, SSL_ONLY):
        r = decode_broker_registration(golden_v)
        assert decode_broker_registration(encode_broker_registration(r)) == r


@pytest.mark.parametrize(
    "data, expected",
    [
        (b"host:1", r"/brokers/ids/1: expected JSON broker registration, read b'host:1'"),
        (b"[1]", r"/brokers/ids/1: expected a JSON object broker registration, read b'\[1\]'"),
        (
            b'{"version":4,"endpoints":["PLAINTEXT:/h:1"]}',
            r"/brokers/ids/1: expected endpoints as listener://host:port, read 'PLAINTEXT:/h:1' in b'",
        ),
        (
            b'{"version":4,"endpoints":["PLAINTEXT://h:x"]}',
            r"expected endpoints as listener://host:port, read 'PLAINTEXT://h:x'",
        ),
        (b'{"version":1,"host":"h"}', r"/brokers/ids/1: expected endpoints or host and port, read b'"),
        (b'{"version":1,"host":"h","port":"x"}', r"/brokers/ids/1: expected an integer port, read b'"),
        (b"\xff", r"/brokers/ids/1: expected JSON broker registration, read b'\\xff'"),
    ],
)
def test_broker_registration_malformed(data, expected):
    with pytest.raises(ZkDataError, match=expected) as e:
        decode_broker_registration(data, BROKER)
    assert e.value.path == BROKER and e.value.data == data and not e.value.retriable
    assert isinstance(e.value, ZooKeeperError) and isinstance(e.value, ValueError)


# ---------------------------------------------------------------------------- topics


def test_topic_assignment():
    path = paths.topic("orders")
    golden = b'{"version":1,"partitions":{"0":[0,1],"1":[1,2],"2":[2,0]}}'
    assert decode_topic_assignment(golden, path) == {0: [0, 1], 1: [1, 2], 2: [2, 0]}
    assert encode_topic_assignment({2: [2, 0], 0: [0, 1], 1: [1, 2]}) == golden
    # v2 (KIP-455 reassignment) and v3 (topic id) carry more fields; the assignment is the same
    v2 = b'{"version":2,"partitions":{"0":[1,2]},"adding_replicas":{"0":[2]},"removing_replicas":{}}'
    v3 = b'{"version":3,"topic_id":"3q2-7mMTTUqAXwf7Ojs6eg","partitions":{"0":[1,2]},"adding_replicas":{},"removing_replicas":{}}'
    assert decode_topic_assignment(v2, path) == decode_topic_assignment(v3, path) == {0: [1, 2]}
    assert partition_count(decode_topic_assignment(golden, path), path) == 3
    with pytest.raises(
        ZkDataError, match=r"/brokers/topics/orders: expected partitions 0..1, read partitions \[0, 2\]"
    ):
        partition_count({0: [0], 2: [0]}, path)
    with pytest.raises(ZkDataError, match=r"/brokers/topics/orders: expected JSON \{\"version\":1,\"partitions\""):
        decode_topic_assignment(b"{", path)
    with pytest.raises(ZkDataError, match=r"expected partition ids as decimal keys, read 'a' in"):
        decode_topic_assignment(b'{"version":1,"partitions":{"a":[0]}}', path)
    with pytest.raises(ZkDataError, match=r"expected a list of broker ids as replicas of partition 0"):
        decode_topic_assignment(b'{"version":1,"partitions":{"0":7}}', path)
    with pytest.raises(
        ZkDataError, match=r"expected \{\"version\":1,\"partitions\":\{\"0\":\[...\],...\}\}, read b'\{\"version\":1\}'"
    ):
        decode_topic_assignment(b'{"version":1}', path)


def test_partition_state():
    path = paths.partition_state("orders", 4)
    golden = b'{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1,2]}'
    st = decode_partition_state(golden, path)
    assert st == LeaderAndIsr(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1, version=1)
    assert encode_partition_state(st) == golden
    # Kafka 3.x adds leader_recovery_state (version 2): read and ignored
    assert decode_partition_state(
        b'{"controller_epoch":3,"leader":-1,"version":2,"leader_epoch":5,"isr":[],"leader_recovery_state":0}', path
    ) == LeaderAndIsr(-1, 5, (), 3, 2)
    with pytest.raises(ZkDataError, match=r"/brokers/topics/orders/partitions/4/state: expected \{\"leader\""):
        decode_partition_state(b'{"isr":[1]}', path)
    with pytest.raises(ZkDataError, match=r"expected an integer broker id in isr, read b'"):
        decode_partition_state(b'{"leader":1,"isr":["x"]}', path)


def test_topic_config_and_change_notification():
    path = paths.topic_config("orders")
    golden = b'{"version":1,"config":{"cleanup.policy":"compact","retention.ms":"1000"}}'
    assert decode_topic_config(golden, path) == {"cleanup.policy": "compact", "retention.ms": "1000"}
    assert encode_topic_config({"cleanup.policy": "compact", "retention.ms": "1000"}) == golden
    assert decode_topic_config(b'{"version":1,"config":{}}', path) == {}
    assert decode_topic_config(b'{"version":1}', path) == {}
    with pytest.raises(
        ZkDataError, match=r"/config/topics/orders: expected \{\"version\":1,\"config\":\{...\}\}, read b'"
    ):
        decode_topic_config(b'{"version":1,"config":["retention.ms"]}', path)
    change = b'{"version":2,"entity_path":"topics/orders"}'
    assert encode_config_change("topics/orders") == change
    assert decode_config_change(change, "/config/changes/config_change_0000000000") == "topics/orders"
    with pytest.raises(ZkDataError, match=r"config_change_0000000001: expected \{\"version\":2,\"entity_path\""):
        decode_config_change(b'{"version":2}', "/config/changes/config_change_0000000001")


def test_cluster_id_and_producer_id_block():
    assert encode_cluster_id("7uqb9nFOTm6z2V8NVjJa9w") == b'{"version":"1","id":"7uqb9nFOTm6z2V8NVjJa9w"}'
    assert decode_cluster_id(b'{"version":"1","id":"7uqb9nFOTm6z2V8NVjJa9w"}') == "7uqb9nFOTm6z2V8NVjJa9w"
    with pytest.raises(
        ZkDataError, match=r"/cluster/id: expected \{\"version\":\"1\",\"id\":...\}, read b'\{\"version\":\"1\"\}'"
    ):
        decode_cluster_id(b'{"version":"1"}')
    golden = b'{"version":1,"broker":0,"block_start":"0","block_end":"999"}'
    block = decode_producer_id_block(golden)
    assert block == ProducerIdBlock(broker=0, block_start=0, block_end=999)
    assert encode_producer_id_block(block) == golden
    assert decode_producer_id_block(b'{"version":1,"broker":2,"block_start":1000,"block_end":1999}').block_end == 1999
    with pytest.raises(ZkDataError, match=r"/latest_producer_id_block: expected \{\"version\":1,\"broker\""):
        decode_producer_id_block(b'{"version":1,"broker":0}')
    with pytest.raises(ZkDataError, match=r"expected an integer block_end, read b'"):
        decode_producer_id_block(b'{"version":1,"block_end":"lots"}')


# ---------------------------------------------------------------------------- ZooKeeper consumer groups


def test_consumer_offset():
    path = paths.consumer_offset("g", "orders", 3)
    assert encode_consumer_offset(42) == b"42"
    assert decode_consumer_offset(b"42", path) == 42
    assert decode_consumer_offset(b"0\n", path) == 0
    assert decode_consumer_offset(encode_consumer_offset(2**62), path) == 2**62
    with pytest.raises(
        ZkDataError, match=r"/consumers/g/offsets/orders/3: expected an offset as decimal text, read b'seven'"
    ):
        decode_consumer_offset(b"seven", path)
    with pytest.raises(ZkDataError, match=r"expected an offset as decimal text, read b''"):
        decode_consumer_offset(b"", path)
    with pytest.raises(TypeError):
        encode_consumer_offset(True)


def test_consumer_registration():
    path = paths.consumer_id("g", "host-1435241393049-abc")
    golden = b'{"version":1,"subscription":{"topic1":1},"pattern":"static","timestamp":"1435241393049"}'
    reg = decode_consumer_registration(golden, path)
    assert reg == ConsumerRegistration({"topic1": 1}, "static", "1435241393049", 1)
    assert encode_consumer_registration(reg) == golden
    wl = decode_consumer_registration(
        b'{"version":1,"subscription":{"abc.*":2},"pattern":"white_list","timestamp":"1435241393049"}', path
    )
    assert (wl.pattern, wl.subscription) == ("white_list", {"abc.*": 2})
    with pytest.raises(
        ZkDataError, match=r"/consumers/g/ids/host-1435241393049-abc: expected registration JSON, read b'x'"
    ):
        decode_consumer_registration(b"x", path)
    with pytest.raises(ZkDataError, match=r"expected pattern static, white_list or black_list, read 'regex' in b'"):
        decode_consumer_registration(b'{"subscription":{"t":1},"pattern":"regex"}', path)
    with pytest.raises(ZkDataError, match=r"expected a stream count >= 1 for 't', read 0 in b'"):
        decode_consumer_registration(b'{"subscription":{"t":0}}', path)
    with pytest.raises(ZkDataError, match=r"expected an object with a 'subscription' object"):
        decode_consumer_registration(b'{"subscription":["t"]}', path)


# ---------------------------------------------------------------------------- readers agree (real ZooKeeper)


def test_replica_deletion():
    """The controller's replica deletion node: the brokers that must delete, sorted, once each."""
    path = paths.replica_deletion("t")
    assert encode_replica_deletion([3, 1, 3]) == b'{"version":1,"replicas":[1,3]}'
    assert decode_replica_deletion(b'{"version":1,"replicas":[2,0]}', path) == [0, 2]
    for bad in (b"", b"[1]", b'{"version":1}', b'{"version":1,"replicas":["x"]}'):
        with pytest.raises(ZkDataError):
            decode_replica_deletion(bad, path)
