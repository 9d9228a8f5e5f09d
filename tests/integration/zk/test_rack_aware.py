"""Rack-aware replica placement (Kafka's ``AdminUtils.assignReplicasToBrokersRackAware``): the pure
algorithm against Kafka's own expected layouts, then real brokers with ``broker.rack``."""

from __future__ import annotations

import collections
import json
import uuid

import pytest

from pyklog.broker.zk import paths
from tests.support import wait_for


def test_brokers_with_racks_place_replicas_across_racks(broker_factory, zk, zk_chroot, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic

    racks = {0: "r1", 1: "r1", 2: "r2", 3: "r2"}
    quick = {"controlled.shutdown.enable": "false"}  # placement only: stop at once at teardown
    brokers = {i: broker_factory(i, **{"broker.rack": r}, **quick) for i, r in racks.items()}
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == 4, message="brokers registered")
    for i, r in racks.items():  # Kafka's registration JSON carries the rack
        assert json.loads(zk.get(paths.broker_id(i))[0])["rack"] == r
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    ad = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"rack-{uuid.uuid4().hex[:6]}"
    ad.create_topics([NewTopic(topic, num_partitions=8, replication_factor=2)])[topic].result(30)
    assignment = json.loads(zk.get(paths.topic(topic))[0])["partitions"]
    for p, replicas in assignment.items():
        assert {racks[b] for b in replicas} == {"r1", "r2"}, (p, replicas)
    assert set(collections.Counter(r[0] for r in assignment.values()).values()) == {2}  # leaders even

    # a broker without broker.rack: Kafka's enforced mode refuses to place, --disable-rack-aware places
    broker_factory(4, **quick)
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == 5, message="fifth broker registered")
    t2 = f"rack-{uuid.uuid4().hex[:6]}"
    fut = ad.create_topics([NewTopic(t2, num_partitions=2, replication_factor=2)])[t2]
    with pytest.raises(Exception, match="Not all brokers have rack information"):
        fut.result(30)
    assert zk.exists(paths.topic(t2)) is None
    from pyklog.broker.cli import topics

    assert (
        topics.main(
            ["--zookeeper", zk_chroot, "--create", "--topic", t2, "--partitions", "2", "--replication-factor", "2"]
        )
        == 1
    )
    assert "Not all brokers have rack information" in capsys.readouterr().err
    assert (
        topics.main(
            [
                "--zookeeper",
                zk_chroot,
                "--create",
                "--topic",
                t2,
                "--partitions",
                "2",
                "--replication-factor",
                "2",
                "--disable-rack-aware",
            ]
        )
        == 0
    )
    assert len(json.loads(zk.get(paths.topic(t2))[0])["partitions"]) == 2
