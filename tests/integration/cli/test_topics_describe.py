"""``pyklog-topics --describe`` in Kafka 3's format (subprocess, real broker and ZooKeeper):
``Topic: T\\tTopicId: <22 chars>\\tPartitionCount: N\\tReplicationFactor: R\\tConfigs: ...`` then one
``\\tTopic: T\\tPartition: P\\tLeader: L\\tReplicas: ...\\tIsr: ...`` line per partition.  With
--bootstrap-server the Configs are every non-default config (the topic's overrides, dynamic broker
configs, server.properties), as Kafka 3's TopicCommand; with --zookeeper the topic's overrides.  The
TopicId is the one in ZooKeeper, the same in both modes."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from pyklog.broker.zk import paths
from tests.support import kazoo_client

BIN = os.path.dirname(sys.executable)


def run(name, *args):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, timeout=120)


def test_describe_lines_topic_id_and_configs(broker_factory, zk_chroot):
    b = broker_factory(0, log_segment_bytes=1073741824)  # as Kafka's sample server.properties
    boot = ["--bootstrap-server", b.bootstrap]
    r = run(
        "pyklog-topics", *boot, "--create", "--topic", "d1", "--partitions", "2", "--config", "cleanup.policy=compact"
    )
    assert r.returncode == 0, r.stderr
    r = run(
        "pyklog-configs",
        *boot,
        "--entity-type",
        "brokers",
        "--entity-default",
        "--alter",
        "--add-config",
        "log.retention.ms=3600000",
    )
    assert r.returncode == 0, r.stderr
    zk = kazoo_client(zk_chroot)
    try:
        stored = json.loads(zk.get(paths.topic("d1"))[0])["topic_id"]
    finally:
        zk.stop()
        zk.close()
    r = run("pyklog-topics", *boot, "--describe", "--topic", "d1")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == (
        f"Topic: d1\tTopicId: {stored}\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: "
        "cleanup.policy=compact,retention.ms=3600000,segment.bytes=1073741824"
    ), lines[0]
    assert lines[1:] == [f"\tTopic: d1\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0" for p in range(2)]
    r = run("pyklog-topics", "--zookeeper", zk_chroot, "--describe", "--topic", "d1")
    assert r.returncode == 0, r.stderr
    zl = r.stdout.splitlines()
    assert (
        zl[0]
        == f"Topic: d1\tTopicId: {stored}\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: cleanup.policy=compact"
    )
    assert zl[1:] == lines[1:]
    assert re.fullmatch(r"[A-Za-z0-9_-]{22}", stored)
    r = run("pyklog-topics", *boot, "--describe", "--topic", "nope")
    assert r.returncode == 1 and "does not exist" in r.stderr
