"""pyklog-consumer-groups as a user runs it (subprocess) against a real broker, a stock client's group
(kafka-python) and a ZooKeeper group, checked against Kafka's ConsumerGroupCommand layout."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.support import wait_for

BIN = os.path.dirname(sys.executable)
OFFSET_HEADER = [
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
]


def tool(*args, timeout=60):
    r = subprocess.run(
        [os.path.join(BIN, "pyklog-consumer-groups"), *args], capture_output=True, text=True, timeout=timeout
    )
    return r


def table(out: str) -> list[list[str]]:
    return [ln.split() for ln in out.splitlines() if ln.strip()]


@pytest.fixture
def setup(broker, zk_chroot):
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("cg", 2)
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=2)
    for part in range(2):
        for i in range(10):
            p.send("cg", b"v%d" % i, partition=part)
    p.flush()
    p.close()
    return broker


def test_broker_group_describe_members_state_reset_delete(setup, zk_chroot):
    from kafka import KafkaConsumer

    b = setup.bootstrap
    kc = KafkaConsumer(
        "cg",
        bootstrap_servers=b,
        group_id="kp-group",
        client_id="kp-client",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=500,
    )
    try:
        n = 0
        deadline = time.monotonic() + 30
        while n < 20 and time.monotonic() < deadline:
            n += sum(len(v) for v in kc.poll(500).values())
        assert n == 20
        kc.commit()
        # make partition 0 lag by 3
        from pyklog.connector.producer import Producer

        p = Producer(bootstrap_servers=b, linger_ms=0)
        for _i in range(3):
            p.send("cg", b"late", partition=0)
        p.flush()
        p.close()

        r = tool("--bootstrap-server", b, "--list")
        assert r.returncode == 0, r.stderr
        assert "kp-group" in r.stdout.split()

        r = tool("--bootstrap-server", b, "--describe", "--group", "kp-group")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.split("\n")
        assert lines[0] == ""  # Kafka's layout: a blank line, then the header
        assert lines[1].split() == OFFSET_HEADER
        # columns at Kafka's positions: GROUP %-15s, TOPIC %-15s, PARTITION %-10s, offsets %-15s
        assert lines[1].startswith("GROUP           TOPIC           PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG")
        rows = table(r.stdout)[1:]
        assert [r_[:6] for r_ in rows] == [
            ["kp-group", "cg", "0", "10", "13", "3"],
            ["kp-group", "cg", "1", "10", "10", "0"],
        ]
        assert all(r_[6].startswith("kp-client") and r_[8] == "kp-client" for r_ in rows)
        assert all(r_[7] in ("127.0.0.1", "localhost") for r_ in rows), rows

        r = tool("--bootstrap-server", b, "--describe", "--group", "kp-group", "--members", "--verbose")
        assert r.returncode == 0, r.stderr
        t = table(r.stdout)
        assert t[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"]
        assert t[1][0] == "kp-group" and t[1][3] == "kp-client" and t[1][4] == "2" and t[1][5] == "cg(0,1)"

        r = tool("--bootstrap-server", b, "--describe", "--group", "kp-group", "--state")
        assert r.returncode == 0, r.stderr
        t = table(r.stdout)
        assert t[0] == ["GROUP", "COORDINATOR", "(ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        assert t[1][0] == "kp-group" and t[1][1] == b and t[1][2] == "(0)" and t[1][-2:] == ["Stable", "1"]
        assert t[1][3] in ("range", "roundrobin", "sticky", "cooperative-sticky")

        # reset of an active group is refused
        r = tool(
            "--bootstrap-server",
            b,
            "--reset-offsets",
            "--group",
            "kp-group",
            "--topic",
            "cg",
            "--to-earliest",
            "--execute",
        )
        assert r.returncode == 1
        assert (
            "Assignments can only be reset if the group 'kp-group' is inactive, but the current state is "
            "Stable." in r.stderr
        )
    finally:
        kc.close()

    # the group is empty now
    wait_for(
        lambda: "Stable" not in tool("--bootstrap-server", b, "--describe", "--group", "kp-group", "--state").stdout,
        30,
        message="group to become empty",
    )
    r = tool("--bootstrap-server", b, "--describe", "--group", "kp-group")
    assert r.returncode == 0
    assert "Consumer group 'kp-group' has no active members." in r.stderr
    assert [r_[:9] for r_ in table(r.stdout)[1:]] == [
        ["kp-group", "cg", "0", "10", "13", "3", "-", "-", "-"],
        ["kp-group", "cg", "1", "10", "10", "0", "-", "-", "-"],
    ]
    # dry run by default: shows, changes nothing
    r = tool("--bootstrap-server", b, "--reset-offsets", "--group", "kp-group", "--topic", "cg:0", "--to-earliest")
    assert r.returncode == 0, r.stderr
    assert "WARN: No action will be performed as the --execute option is missing" in r.stderr
    assert table(r.stdout) == [["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], ["kp-group", "cg", "0", "0"]]
    assert table(tool("--bootstrap-server", b, "--describe", "--group", "kp-group").stdout)[1][3] == "10"
    # each scenario
    for args, want in [
        (["--to-latest"], ["13", "10"]),
        (["--to-offset", "5"], ["5", "5"]),
        (["--to-offset", "99"], ["13", "10"]),
        (["--shift-by", "-4"], ["6", "6"]),
        (["--to-current"], ["10", "10"]),
        (["--to-datetime", "1970-01-01T00:00:00.000"], ["0", "0"]),
        (["--by-duration", "PT0S"], ["13", "10"]),
    ]:
        r = tool("--bootstrap-server", b, "--reset-offsets", "--group", "kp-group", "--all-topics", *args, "--dry-run")
        assert r.returncode == 0, (args, r.stderr)
        assert [x[3] for x in table(r.stdout)[1:]] == want, (args, r.stdout)
    r = tool(
        "--bootstrap-server",
        b,
        "--reset-offsets",
        "--group",
        "kp-group",
        "--topic",
        "cg",
        "--shift-by",
        "-2",
        "--execute",
    )
    assert r.returncode == 0, r.stderr
    assert [x[3] for x in table(r.stdout)[1:]] == ["8", "8"]
    rows = table(tool("--bootstrap-server", b, "--describe", "--group", "kp-group").stdout)[1:]
    assert [x[3:6] for x in rows] == [["8", "13", "5"], ["8", "10", "2"]]
    # --all-groups, --describe of a missing group
    r = tool("--bootstrap-server", b, "--describe", "--group", "nope")
    assert r.returncode == 1 and "Error: Consumer group 'nope' does not exist." in r.stderr
    # --delete-offsets of one partition (the group is empty)
    r = tool("--bootstrap-server", b, "--delete-offsets", "--group", "kp-group", "--topic", "cg:1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "Request succeed for deleting offsets with topic cg group kp-group"
    assert table(r.stdout)[1:] == [["TOPIC", "PARTITION", "STATUS"], ["cg", "1", "Successful"]]
    rows = table(tool("--bootstrap-server", b, "--describe", "--group", "kp-group").stdout)[1:]
    assert [x[1:4] for x in rows] == [["cg", "0", "8"]]
    r = tool("--bootstrap-server", b, "--delete-offsets", "--group", "nope", "--topic", "cg")
    assert r.returncode == 1 and "Error: 'nope' does not exist." in r.stderr
    # delete
    r = tool("--bootstrap-server", b, "--delete", "--group", "kp-group")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Deletion of requested consumer groups ('kp-group') was successful."
    assert "kp-group" not in tool("--bootstrap-server", b, "--list").stdout.split()


def test_zookeeper_group_with_offsets_in_kafka_listed_and_described(setup, zk_chroot):
    """A ZooKeeper group that commits to the broker (offsets.storage=kafka) shows its offsets without
    --offsets-storage; a ZooKeeper-storage group next to it; --list shows both kinds."""
    from kazoo.client import KazooClient

    from pyklog.broker.zk import paths
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.offsets import ZooKeeperOffsetStore

    b = setup.bootstrap
    zk = KazooClient(hosts=zk_chroot)
    zk.start(timeout=30)
    try:
        zk.ensure_path(paths.consumer_ids("zk-kafka"))
        zk.ensure_path(paths.consumer_ids("zk-zk"))
        ZooKeeperOffsetStore(zk).commit("zk-zk", {("cg", 0): 4, ("cg", 1): 7})
        with ClusterClient(b) as c:
            c.commit_offsets("zk-kafka", {("cg", 0): 2, ("cg", 1): 9})
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--list")
        assert r.returncode == 0, r.stderr
        assert {"zk-kafka", "zk-zk"} <= set(r.stdout.split())
        r = tool(
            "--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--group", "zk-kafka", "--group", "zk-zk"
        )
        assert r.returncode == 0, r.stderr
        t = table(r.stdout)
        assert t[0] == OFFSET_HEADER and t[3] == OFFSET_HEADER
        assert t[1] == ["zk-kafka", "cg", "0", "2", "10", "8", "-", "-", "-"]
        assert t[2] == ["zk-kafka", "cg", "1", "9", "10", "1", "-", "-", "-"]
        assert t[4][:6] == ["zk-zk", "cg", "0", "4", "10", "6"]
        assert t[5][:6] == ["zk-zk", "cg", "1", "7", "10", "3"]
        # --all-groups: broker groups and ZooKeeper groups in one run, sorted
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--all-groups")
        assert r.returncode == 0, r.stderr
        assert [row[0] for row in table(r.stdout) if row[0] != "GROUP"] == ["zk-kafka"] * 2 + ["zk-zk"] * 2
        # --members / --state of a ZooKeeper group without members; --list --state
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--group", "zk-zk", "--members")
        assert r.returncode == 0 and "Consumer group 'zk-zk' has no active members." in r.stderr
        assert table(r.stdout) == [["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]]
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--group", "zk-zk", "--state")
        assert table(r.stdout)[1] == ["zk-zk", zk_chroot, "(zookeeper)", "-", "Empty", "0"]
        zk.create(
            paths.consumer_id("zk-zk", "zk-zk_host-1"),
            b'{"version":1,"subscription":{"cg":1},"pattern":"static","timestamp":"0"}',
            ephemeral=True,
        )
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--list", "--state")
        t = table(r.stdout)
        assert t[0] == ["GROUP", "STATE"] and ["zk-zk", "Stable"] in t and ["zk-kafka", "Empty"] in t
        assert r.stdout.splitlines()[0] == "GROUP" + " " * 21 + "STATE"
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--list", "--state", "stable")
        assert table(r.stdout)[1:] == [["zk-zk", "Stable"]]
        r = tool(
            "--bootstrap-server",
            b,
            "--zookeeper",
            zk_chroot,
            "--reset-offsets",
            "--group",
            "zk-zk",
            "--all-topics",
            "--to-latest",
            "--execute",
        )
        assert r.returncode == 1 and "can only be reset if the group 'zk-zk' is inactive" in r.stderr
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--delete", "--group", "zk-zk")
        assert r.returncode == 1 and "* Group 'zk-zk' could not be deleted due to: NON_EMPTY_GROUP" in r.stderr
        zk.delete(paths.consumer_id("zk-zk", "zk-zk_host-1"))
        # reset a ZooKeeper-storage group: written where its offsets are
        r = tool(
            "--bootstrap-server",
            b,
            "--zookeeper",
            zk_chroot,
            "--reset-offsets",
            "--group",
            "zk-zk",
            "--all-topics",
            "--to-latest",
            "--execute",
        )
        assert r.returncode == 0, r.stderr
        assert ZooKeeperOffsetStore(zk).fetch("zk-zk", [("cg", 0), ("cg", 1)]) == {("cg", 0): 10, ("cg", 1): 10}
        # delete a ZooKeeper group
        r = tool("--zookeeper", zk_chroot, "--bootstrap-server", b, "--delete", "--group", "zk-zk")
        assert r.returncode == 0, r.stderr
        assert zk.exists(paths.consumer_group("zk-zk")) is None
    finally:
        zk.stop()
        zk.close()
