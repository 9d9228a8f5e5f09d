"""pyklog-get-offsets, pyklog-delete-records and pyklog-configs as a user runs them (subprocesses)
against a real broker, output lines and exit codes as Kafka's GetOffsetShell, DeleteRecordsCommand and
ConfigCommand.  Help, usage errors and bad input files (no broker) are in tests/unit/cli/test_admin_tools.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

BIN = os.path.dirname(sys.executable)


def run(name, *args):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, timeout=90)


@pytest.fixture
def topics(broker):
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("go-a", 3)
        c.create_topic("go-b", 1)
    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=0)
    t0 = int(time.time() * 1000)
    for part in range(3):
        for i in range(part + 2):
            p.send("go-a", b"x", partition=part, timestamp_ms=t0 + i * 1000)
    p.send("go-b", b"y", partition=0, timestamp_ms=t0)
    p.flush()
    p.close()
    return broker, t0


def test_get_offsets(topics):
    broker, t0 = topics
    b = ["--bootstrap-server", broker.bootstrap]
    r = run("pyklog-get-offsets", *b, "--topic", "go-.*")
    assert (r.returncode, r.stdout) == (0, "go-a:0:2\ngo-a:1:3\ngo-a:2:4\ngo-b:0:1\n"), r.stderr
    r = run("pyklog-get-offsets", *b, "--topic", "go-a", "--partitions", "1-", "--time", "-2")
    assert r.stdout == "go-a:1:0\ngo-a:2:0\n"
    r = run("pyklog-get-offsets", *b, "--topic-partitions", "go-a:0,2,go-b", "--time", "earliest")
    assert r.stdout == "go-a:0:0\ngo-a:2:0\ngo-b:0:0\n"
    # by timestamp: the first record at or after it; none -> an empty offset
    r = run("pyklog-get-offsets", *b, "--topic", "go-a", "--time", str(t0 + 2000))
    assert r.stdout == "go-a:0:\ngo-a:1:2\ngo-a:2:2\n"
    r = run("pyklog-get-offsets", *b, "--exclude-internal-topics")
    assert "__consumer_offsets" not in r.stdout and "go-b:0:1" in r.stdout
    r = run("pyklog-get-offsets", "--bootstrap-server", "127.0.0.1:1", "--topic", "x")
    assert r.returncode == 1 and r.stderr.startswith("Error: ")


def test_delete_records(topics, tmp_path):
    broker, _ = topics
    f = tmp_path / "d.json"
    f.write_text(
        json.dumps(
            {
                "partitions": [
                    {"topic": "go-a", "partition": 2, "offset": 3},
                    {"topic": "go-b", "partition": 0, "offset": -1},
                ],
                "version": 1,
            }
        )
    )
    r = run("pyklog-delete-records", "--bootstrap-server", broker.bootstrap, "--offset-json-file", str(f))
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Executing records delete operation",
        "Records delete operation completed:",
        "partition: go-a-2\tlow_watermark: 3",
        "partition: go-b-0\tlow_watermark: 1",
    ]
    r = run("pyklog-get-offsets", "--bootstrap-server", broker.bootstrap, "--topic", "go-.*", "--time", "-2")
    assert r.stdout == "go-a:0:0\ngo-a:1:0\ngo-a:2:3\ngo-b:0:1\n"


def test_configs(broker, zk_chroot):
    from pyklog.connector.client import ClusterClient

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("cfg", 1, {"retention.ms": "60000"})
    # ZooKeeper mode: topic overrides
    z = ["--zookeeper", zk_chroot, "--entity-type", "topics", "--entity-name", "cfg"]
    r = run("pyklog-configs", *z, "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == [
        "Dynamic configs for topic cfg are:",
        "  retention.ms=60000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=60000}",
    ]
    r = run(
        "pyklog-configs",
        *z,
        "--alter",
        "--add-config",
        "cleanup.policy=[compact,delete],segment.ms=100000",
        "--delete-config",
        "retention.ms",
    )
    assert (r.returncode, r.stdout) == (0, "Completed updating config for topic cfg.\n"), r.stderr
    r = run("pyklog-configs", *z, "--describe")
    assert r.stdout.splitlines()[1:] == [
        "  cleanup.policy=compact,delete sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact,delete}",
        "  segment.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=100000}",
    ]
    r = run("pyklog-configs", "--zookeeper", zk_chroot, "--entity-type", "brokers", "--entity-name", "0", "--describe")
    # a broker's dynamic configs live in /config/brokers/<id> (none set yet): readable from ZooKeeper too
    assert (r.returncode, r.stdout) == (0, "Dynamic configs for broker 0 are:\n"), r.stderr
    # through the brokers
    b = ["--bootstrap-server", broker.bootstrap, "--entity-type", "topics", "--entity-name", "cfg"]
    r = run("pyklog-configs", *b, "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "Dynamic configs for topic cfg are:"
    assert any(
        ln.startswith("  segment.ms=100000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.ms=100000")
        for ln in r.stdout.splitlines()
    )
    r = run("pyklog-configs", *b, "--alter", "--add-config", "retention.ms=5000", "--delete-config", "segment.ms")
    assert (r.returncode, r.stdout) == (0, "Completed updating config for topic cfg.\n"), r.stderr
    out = run("pyklog-configs", *b, "--describe").stdout
    assert "  retention.ms=5000 sensitive=false" in out and "segment.ms" not in out
    r = run("pyklog-configs", *b, "--describe", "--all")
    assert r.stdout.splitlines()[0] == "All configs for topic cfg are:" and "max.message.bytes=" in r.stdout
    r = run(
        "pyklog-configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--entity-type",
        "brokers",
        "--entity-name",
        "0",
        "--describe",
        "--all",
    )
    assert r.returncode == 0 and r.stdout.splitlines()[0] == "All configs for broker 0 are:"
    r = run(
        "pyklog-configs",
        "--bootstrap-server",
        broker.bootstrap,
        "--entity-type",
        "topics",
        "--entity-name",
        "nope",
        "--describe",
    )
    assert r.returncode == 1 and "The topic 'nope' does not exist." in r.stderr
