"""A topic deletion that waits for a broker that is down: ``pyklog-topics --zookeeper`` shows the
topic as Kafka 2.x's tool does (``- marked for deletion``, ``MarkedForDeletion: true``), and a
deletion left half done (partition nodes removed, the topic node and the mark still there, as a
controller that stopped between its multi-ops leaves it) is completed by the next controller."""

from __future__ import annotations

import glob
import os

from pyklog.broker.cli.topics import main
from pyklog.broker.zk import paths
from tests.integration.controller.support import controller_of, start_cluster
from tests.support import wait_for

PARTITIONS = 4


def _log_dirs(broker, topic) -> list[str]:
    return sorted(glob.glob(os.path.join(broker.log_dir, "data", f"{topic}-*")))


def test_a_pending_deletion_is_listed_as_marked_and_a_half_done_one_is_resumed(broker_factory, zk, zk_chroot, capsys):
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_cluster(broker_factory, zk, ids=(0, 1))
    admin = AdminClient({"bootstrap.servers": brokers[0].bootstrap})
    topic, kept = "pending", "kept"
    for name in (topic, kept):
        admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=2)])[name].result(30)
    for b in brokers.values():
        wait_for(lambda b=b: len(_log_dirs(b, topic)) == PARTITIONS, 30, message=f"broker {b.broker_id}'s replicas")
    down = 1 if controller_of(zk)[0] != 1 else 0
    up = 1 - down
    brokers[down].stop()
    admin.delete_topics([topic], operation_timeout=30)[topic].result(30)
    wait_for(lambda: zk.exists(paths.replica_deletion(topic)), 10, message="the deletion started")
    wait_for(
        lambda: zk.get_children(paths.replica_deletion(topic)) == [str(up)], 10, message="the live broker answered"
    )

    # Kafka 2.x's TopicCommand with --zookeeper: the pending topic is listed and described, marked
    assert main(["--zookeeper", zk_chroot, "--list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines() == [kept, f"{topic} - marked for deletion"], out
    assert main(["--zookeeper", zk_chroot, "--describe", "--topic", topic]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + PARTITIONS, lines
    assert lines[0].startswith(f"Topic: {topic}\tTopicId: ") and "\tPartitionCount: 4\t" in lines[0], lines
    assert all(line.endswith("\tMarkedForDeletion: true") for line in lines), lines
    assert lines[1].startswith(f"\tTopic: {topic}\tPartition: 0\tLeader: "), lines
    assert main(["--zookeeper", zk_chroot, "--describe"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split("\t")[0] for line in lines if not line.startswith("\t")] == [f"Topic: {kept}", f"Topic: {topic}"]
    assert not any("MarkedForDeletion" in line for line in lines if kept in line.split("\t")[1]), lines

    # a controller that stopped between its multi-ops: partitions 2 and 3 lost their nodes already
    brokers[up].stop()
    for p in (2, 3):
        zk.delete(paths.partition_state(topic, p))
        zk.delete(paths.partition(topic, p))
    assert main(["--zookeeper", zk_chroot, "--list"]) == 0
    assert f"{topic} - marked for deletion" in capsys.readouterr().out
    for b in brokers.values():
        b.restart()
    # the next controller resumes: the returning broker deletes its replicas, then every node goes
    wait_for(lambda: not zk.exists(paths.delete_topic_request(topic)), 30, message="the deletion completed")
    assert not zk.exists(paths.topic(topic)) and not zk.exists(paths.replica_deletion(topic))
    assert not zk.exists(paths.topic_config(topic)) and zk.exists(paths.deleted_topic_record(topic))
    for b in brokers.values():
        assert _log_dirs(b, topic) == [], b.broker_id
    assert main(["--zookeeper", zk_chroot, "--list"]) == 0
    assert capsys.readouterr().out.splitlines() == [kept]
    admin = AdminClient({"bootstrap.servers": brokers[up].bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=2)])[topic].result(30)
    assert sorted(zk.get_children(paths.topic_partitions(topic))) == ["0"]
