"""pyklog-consumer-groups (subprocess, real broker, real ZooKeeper): ``--reset-offsets --export`` writes
Kafka's CSV, ``--from-file`` reads it back and commits exactly those offsets (counted per partition),
``--list --type`` adds Kafka 3.7's TYPE column (broker groups Classic, ZooKeeper groups zookeeper), and
a ZooKeeper group's HOST and CLIENT-ID come from its registry (consumer id's host part, the
registration's client_id or the group id)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyklog.broker.zk import paths
from tests.support import kazoo_client

BIN = os.path.dirname(sys.executable)


def tool(*args, timeout=60):
    return subprocess.run(
        [os.path.join(BIN, "pyklog-consumer-groups"), *args], capture_output=True, text=True, timeout=timeout
    )


def table(out: str) -> list[list[str]]:
    return [ln.split() for ln in out.splitlines() if ln.strip()]


@pytest.fixture
def cluster(broker):
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("ex", 3)
        c.commit_offsets("bg", {("ex", 0): 1, ("ex", 1): 2, ("ex", 2): 3})
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    for part in range(3):
        for i in range(10):
            p.send("ex", b"v%d" % i, partition=part)
    p.flush()
    p.close()
    return broker


def test_export_then_from_file_round_trip(cluster, tmp_path):
    from pyklog.connector.client import ClusterClient

    b = cluster.bootstrap
    r = tool(
        "--bootstrap-server",
        b,
        "--reset-offsets",
        "--group",
        "bg",
        "--all-topics",
        "--shift-by",
        "4",
        "--export",
        "--dry-run",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "ex,0,5\nex,1,6\nex,2,7\n\n"  # Kafka's CSV, then println's newline
    plan = tmp_path / "plan.csv"
    plan.write_text(r.stdout)
    with ClusterClient(b) as c:  # a dry run commits nothing
        assert c.fetch_committed("bg", None) == {("ex", 0): 1, ("ex", 1): 2, ("ex", 2): 3}
    # edit the plan as an operator would, then apply it
    plan.write_text("ex,0,9\nex,2,0\n")
    r = tool("--bootstrap-server", b, "--reset-offsets", "--group", "bg", "--from-file", str(plan), "--execute")
    assert r.returncode == 0, r.stderr
    assert table(r.stdout) == [
        ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
        ["bg", "ex", "0", "9"],
        ["bg", "ex", "2", "0"],
    ]
    with ClusterClient(b) as c:
        assert c.fetch_committed("bg", None) == {("ex", 0): 9, ("ex", 1): 2, ("ex", 2): 0}
    # several groups: the group column
    with ClusterClient(b) as c:
        c.commit_offsets("bg2", {("ex", 1): 4})
    r = tool(
        "--bootstrap-server",
        b,
        "--reset-offsets",
        "--group",
        "bg",
        "--group",
        "bg2",
        "--topic",
        "ex:1",
        "--to-latest",
        "--export",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout == "bg,ex,1,10\nbg2,ex,1,10\n\n"
    plan.write_text("bg2,ex,1,3\nbg,ex,1,8\n")
    r = tool(
        "--bootstrap-server",
        b,
        "--reset-offsets",
        "--group",
        "bg",
        "--group",
        "bg2",
        "--from-file",
        str(plan),
        "--execute",
        "--export",
    )
    assert r.returncode == 0 and r.stdout == "bg,ex,1,8\nbg2,ex,1,3\n\n", (r.stdout, r.stderr)
    with ClusterClient(b) as c:
        assert c.fetch_committed("bg2", None) == {("ex", 1): 3}
        assert c.fetch_committed("bg", None)[("ex", 1)] == 8
    # bad files: exit 1, nothing committed
    for text in ("ex,zero,1\n", "ex,1\n", "ex,7,1\n"):
        plan.write_text(text)
        r = tool("--bootstrap-server", b, "--reset-offsets", "--group", "bg", "--from-file", str(plan), "--execute")
        assert r.returncode == 1 and "Error:" in r.stderr, (text, r.stderr)
    r = tool("--bootstrap-server", b, "--reset-offsets", "--group", "bg", "--from-file", str(tmp_path / "none"))
    assert r.returncode == 1 and "cannot read --from-file" in r.stderr
    with ClusterClient(b) as c:
        assert c.fetch_committed("bg", None) == {("ex", 0): 9, ("ex", 1): 8, ("ex", 2): 0}
    r = tool("--bootstrap-server", b, "--list", "--export")
    assert r.returncode == 1 and "[reset-offsets]" in r.stderr


def test_list_type_and_zookeeper_group_host_client_id(cluster, zk_chroot):
    b = cluster.bootstrap
    zk = kazoo_client(zk_chroot)
    try:
        zk.ensure_path(paths.consumer_ids("zkg"))
        kafka_style = "zkg_worker-7.example.com-1700000000000-1a2b3c4d"
        pyklog_style = "worker-8:6f1c2e9a-6b0e-4f39-9a57-5a0f3c1d2e3f"
        zk.create(
            paths.consumer_id("zkg", kafka_style),
            b'{"version":1,"subscription":{"ex":1},"pattern":"static","timestamp":"1"}',
            ephemeral=True,
        )
        zk.create(
            paths.consumer_id("zkg", pyklog_style),
            b'{"version":1,"subscription":{"ex":1},"pattern":"static","timestamp":"1","client_id":"spark-query-1"}',
            ephemeral=True,
        )
        zk.create(paths.partition_owner("zkg", "ex", 0), kafka_style.encode(), makepath=True)
        zk.create(paths.partition_owner("zkg", "ex", 1), pyklog_style.encode(), makepath=True)
        zk.create(paths.consumer_offset("zkg", "ex", 0), b"3", makepath=True)

        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--list", "--type")
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert lines[0].split() == ["GROUP", "TYPE"] and lines[0].startswith("GROUP" + " " * 21 + "TYPE")
        assert ["bg", "Classic"] in table(r.stdout) and ["zkg", "zookeeper"] in table(r.stdout)
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--list", "--type", "classic", "--state")
        assert table(r.stdout) == [["GROUP", "TYPE", "STATE"], ["bg", "Classic", "Empty"]]
        r = tool("--bootstrap-server", b, "--list", "--type", "share")
        assert r.returncode == 1 and "Invalid types list 'share'" in r.stderr

        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--group", "zkg")
        assert r.returncode == 0, r.stderr
        rows = {row[2]: row for row in table(r.stdout)[1:]}
        assert rows["0"][3:] == ["3", "10", "7", kafka_style, "worker-7.example.com", "zkg"]
        assert rows["1"][6:] == [pyklog_style, "worker-8", "spark-query-1"]
        r = tool("--bootstrap-server", b, "--zookeeper", zk_chroot, "--describe", "--group", "zkg", "--members")
        got = {row[1]: row[2:4] for row in table(r.stdout)[1:]}
        assert got == {kafka_style: ["worker-7.example.com", "zkg"], pyklog_style: ["worker-8", "spark-query-1"]}
    finally:
        zk.stop()
        zk.close()
