"""pyklog-topics against the real ZooKeeper, with brokers registered by ZkCluster."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from kazoo.client import KazooClient

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.server import free_port
from pyklog.connector.cli.topics import main
from tests.support import wait_for


@pytest.fixture
def two_brokers(zk_chroot):
    brokers = [ZkCluster(zk_chroot, i, "127.0.0.1", 9300 + i, session_timeout_ms=6000).start() for i in (0, 1)]
    yield brokers
    for b in brokers:
        b.stop()


def cli(capsys, *args):
    rc = main(list(args))
    out, err = capsys.readouterr()
    return rc, out, err


def test_create_list_describe_delete(zk_chroot, two_brokers, capsys):
    zk = ["--zookeeper", zk_chroot]
    rc, out, err = cli(
        capsys,
        *zk,
        "--create",
        "--topic",
        "orders",
        "--partitions",
        "4",
        "--config",
        "cleanup.policy=compact",
        "--config",
        "retention.ms=60000",
    )
    assert (rc, out, err) == (0, "Created topic orders.\n", "")
    assert (
        cli(capsys, *zk, "--create", "--topic", "audit.log", "--partitions", "2", "--replication-factor", "2")[0] == 0
    )
    rc, out, _ = cli(capsys, *zk, "--list")
    assert (rc, out) == (0, "audit.log\norders\n")
    rc, out, _ = cli(capsys, *zk, "--describe", "--topic", "orders")
    lines = out.splitlines()
    assert rc == 0 and len(lines) == 5
    assert re.fullmatch(
        r"Topic: orders\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 4\tReplicationFactor: 1\t"
        r"Configs: cleanup.policy=compact,retention.ms=60000",
        lines[0],
    ), lines[0]
    leaders = []
    for p, line in enumerate(lines[1:]):
        fields = dict(f.split(": ") for f in line.strip().split("\t"))
        assert fields["Topic"] == "orders" and fields["Partition"] == str(p)
        assert fields["Replicas"] == fields["Leader"] == fields["Isr"]
        leaders.append(int(fields["Leader"]))
    assert sorted(leaders) == [0, 0, 1, 1]
    rc, out, _ = cli(capsys, *zk, "--describe")
    assert rc == 0 and "ReplicationFactor: 2" in out and out.count("\tTopic: ") == 6
    # what the tool wrote is Kafka's layout
    kc = KazooClient(hosts=zk_chroot)
    kc.start(timeout=30)
    try:
        assert json.loads(kc.get(paths.topic_config("orders"))[0])["config"] == {
            "cleanup.policy": "compact",
            "retention.ms": "60000",
        }
    finally:
        kc.stop()
        kc.close()
    rc, out, _ = cli(
        capsys,
        *zk,
        "--alter",
        "--topic",
        "orders",
        "--config",
        "retention.ms=5000",
        "--delete-config",
        "cleanup.policy",
    )
    assert (rc, out) == (0, "Updated config of topic orders: retention.ms=5000\n")
    assert cli(capsys, *zk, "--describe", "--topic", "orders")[1].splitlines()[0].endswith("Configs: retention.ms=5000")
    rc, out, _ = cli(capsys, *zk, "--delete", "--topic", "orders")
    assert (rc, out) == (
        0,
        "Topic orders is marked for deletion.\n"
        "Note: This will have no impact if delete.topic.enable is not set to true.\n",
    )
    wait_for(lambda: cli(capsys, *zk, "--list")[1] == "audit.log\n", timeout=20)  # the controller deletes it
    # a broker that is gone shows as leader none
    two_brokers[1].stop()
    rc, out, _ = cli(capsys, *zk, "--describe", "--topic", "audit.log")
    assert "Leader: none" in out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--create", "--topic", "../escape", "--partitions", "1"], "illegal characters '/'"),
        (["--create", "--topic", "x" * 250, "--partitions", "1"], "maximum is 249"),
        (["--create", "--topic", "dup", "--partitions", "1"], "topic 'dup' already exists"),
        (
            ["--create", "--topic", "wide", "--partitions", "1", "--replication-factor", "3"],
            "larger than available brokers: 2",
        ),
        (["--create", "--topic", "cfg", "--partitions", "1", "--config", "segment.bytes=huge"], "expects an integer"),
        (["--create", "--topic", "cfg", "--partitions", "1", "--config", "nonsense"], "KEY=VALUE"),
        (["--create", "--topic", "zero", "--partitions", "0"], "larger than 0"),
        (["--create", "--topic", "nop"], "--create needs --partitions"),
        (["--describe", "--topic", "missing"], "topic 'missing' does not exist"),
        (["--delete", "--topic", "missing"], "topic 'missing' does not exist"),
        (["--delete"], "--delete needs --topic"),
        (["--list", "--delete"], "not allowed with argument"),
        (["--alter", "--topic", "dup"], "--alter needs --partitions N, --config KEY=VALUE"),
        (["--alter", "--topic", "dup", "--partitions", "3", "--config", "a=b"], "in two runs"),
        (["--alter", "--topic", "missing", "--config", "retention.ms=1"], "topic 'missing' does not exist"),
    ],
)
def test_errors_are_one_line_and_exit_1(zk_chroot, two_brokers, capsys, args, message):
    assert cli(capsys, "--zookeeper", zk_chroot, "--create", "--topic", "dup", "--partitions", "1")[0] == 0
    rc, out, err = cli(capsys, "--zookeeper", zk_chroot, *args)
    assert rc == 1 and out == ""
    assert err.startswith("Error: ") and message in err and err.count("\n") == 1, err


def test_unknown_chroot_is_an_error_not_a_new_cluster(zookeeper, capsys):
    rc, out, err = cli(capsys, "--zookeeper", f"{zookeeper}/no-such-cluster-{free_port()}", "--list")
    assert rc == 1 and out == "" and "has no chroot /no-such-cluster-" in err


def test_if_exists_flags(zk_chroot, two_brokers, capsys):
    zk = ["--zookeeper", zk_chroot]
    assert cli(capsys, *zk, "--create", "--topic", "t", "--partitions", "1")[0] == 0
    assert cli(capsys, *zk, "--create", "--topic", "t", "--partitions", "1", "--if-not-exists") == (0, "", "")
    assert cli(capsys, *zk, "--delete", "--topic", "u", "--if-exists") == (0, "", "")


def test_console_script_and_unreachable_zookeeper():
    exe = os.path.join(os.path.dirname(sys.executable), "pyklog-topics")
    cmd = [exe] if os.path.exists(exe) else [sys.executable, "-m", "pyklog.broker.cli.topics"]
    r = subprocess.run(
        cmd + ["--zookeeper", f"127.0.0.1:{free_port()}/x", "--timeout", "1.5", "--list"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip().splitlines()[-1].startswith("Error: could not connect to ZooKeeper at 127.0.0.1:")
    assert "within 1.5s" in r.stderr


def _script(*args, timeout=60):
    exe = os.path.join(os.path.dirname(sys.executable), "pyklog-topics")
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout)


def test_bootstrap_server_mode_and_alter_partitions(broker, zk_chroot):
    """--bootstrap-server: create, list, describe (Kafka's lines), alter --partitions, delete; --alter
    --partitions in --zookeeper mode goes to the registered brokers."""
    b = ["--bootstrap-server", broker.bootstrap]
    r = _script(*b, "--create", "--topic", "grow", "--partitions", "2", "--config", "retention.ms=60000")
    assert (r.returncode, r.stdout) == (0, "Created topic grow.\n"), r.stderr
    r = _script(*b, "--list")
    assert r.returncode == 0 and "grow" in r.stdout.split()
    r = _script(*b, "--alter", "--topic", "grow", "--partitions", "3")
    assert (r.returncode, r.stdout) == (0, "Adding partitions succeeded!\n"), r.stderr
    r = _script("--zookeeper", zk_chroot, "--alter", "--topic", "grow", "--partitions", "4")
    assert (r.returncode, r.stdout) == (0, "Adding partitions succeeded!\n"), r.stderr
    r = _script(*b, "--describe", "--topic", "grow")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert re.match(
        r"Topic: grow\tTopicId: [A-Za-z0-9_-]{22}\tPartitionCount: 4\tReplicationFactor: 1\tConfigs: ", lines[0]
    ), lines[0]
    assert lines[0].endswith("Configs: retention.ms=60000") and r.stderr == ""
    assert [ln.split("\t")[1:3] for ln in lines[1:]] == [["Topic: grow", f"Partition: {p}"] for p in range(4)]
    assert all("\tLeader: 0\tReplicas: 0\tIsr: 0" in ln for ln in lines[1:])
    # the zookeeper view agrees
    r = _script("--zookeeper", zk_chroot, "--describe", "--topic", "grow")
    assert "PartitionCount: 4" in r.stdout
    r = _script(*b, "--alter", "--topic", "grow", "--partitions", "2")
    assert r.returncode == 1 and r.stdout == ""
    assert "can only be increased. Topic grow currently has 4 partitions, 2 would not be an increase." in r.stderr
    r = _script(*b, "--alter", "--topic", "nope", "--partitions", "2")
    assert r.returncode == 1 and "topic 'nope' does not exist" in r.stderr
    r = _script(*b, "--delete", "--topic", "grow")
    assert (r.returncode, r.stdout) == (0, "Deleted topic grow.\n"), r.stderr
    r = _script(*b, "--describe", "--topic", "grow")
    assert r.returncode == 1 and "topic 'grow' does not exist" in r.stderr
    assert _script(*b, "--describe", "--topic", "grow", "--if-exists").returncode == 0
