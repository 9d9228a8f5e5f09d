"""pyklog-console-producer / pyklog-console-consumer as a user runs them (subprocesses)."""

from __future__ import annotations

import os
import subprocess
import sys

from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer

BIN = os.path.dirname(sys.executable)


def _tool(name, args, stdin=b"", timeout=60):
    return subprocess.run([os.path.join(BIN, name), *args], input=stdin, capture_output=True, timeout=timeout)


def test_console_producer_and_consumer_round_trip(broker, zk_chroot):
    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("lines", 2)
    lines = b"".join(b"key%d:value %d\n" % (i % 3, i) for i in range(20))
    r = _tool(
        "pyklog-console-producer",
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            "lines",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
            "--compression-codec",
            "lz4",
        ],
        lines,
    )
    assert r.returncode == 0, r.stderr.decode()
    with SimpleConsumer(broker.bootstrap) as c:
        got = {q: [(x.key, x.value) for x in c.iter_records("lines", q, 0)] for q in (0, 1)}
    assert sorted(got[0] + got[1], key=lambda kv: int(kv[1].split()[1])) == [
        (b"key%d" % (i % 3), b"value %d" % i) for i in range(20)
    ]
    # the consumer found through ZooKeeper, from the beginning, with keys
    r = _tool(
        "pyklog-console-consumer",
        [
            "--zookeeper",
            zk_chroot,
            "--topic",
            "lines",
            "--from-beginning",
            "--max-messages",
            "20",
            "--property",
            "print.key=true",
            "--property",
            "key.separator=|",
        ],
    )
    assert r.returncode == 0, r.stderr.decode()
    out = sorted(r.stdout.decode().splitlines(), key=lambda s: int(s.split()[1]))
    assert out == [f"key{i % 3}|value {i}" for i in range(20)]
    assert b"Processed a total of 20 messages" in r.stderr
    # one partition from an offset, stopping when idle for --timeout-ms
    r = _tool(
        "pyklog-console-consumer",
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            "lines",
            "--partition",
            "0",
            "--offset",
            "2",
            "--timeout-ms",
            "1500",
            "--property",
            "print.offset=true",
        ],
    )
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"Offset:{i}\t{v.decode()}" for i, (_, v) in enumerate(got[0])][2:]
    # a line without the separator fails with a clear message; the lines before it are delivered
    r = _tool(
        "pyklog-console-producer",
        [
            "--bootstrap-server",
            broker.bootstrap,
            "--topic",
            "lines",
            "--property",
            "parse.key=true",
            "--partition",
            "1",
        ],
        b"a\tb\nno separator here\nc\td\n",
    )
    assert r.returncode == 1 and b"line 2: no key separator" in r.stderr
    with SimpleConsumer(broker.bootstrap) as c:
        assert c.latest_offset("lines", 1) == len(got[1]) + 1
    # without --from-beginning the consumer starts at the end: nothing old is printed
    r = _tool(
        "pyklog-console-consumer", ["--bootstrap-server", broker.bootstrap, "--topic", "lines", "--timeout-ms", "800"]
    )
    assert r.returncode == 0 and r.stdout == b""


def test_console_consumer_group_and_consumer_properties(broker):
    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("grp", 2)
    lines = b"".join(b"v%d\n" % i for i in range(10))
    r = _tool("pyklog-console-producer", ["--bootstrap-server", broker.bootstrap, "--topic", "grp"], lines)
    assert r.returncode == 0, r.stderr.decode()
    base = ["--bootstrap-server", broker.bootstrap, "--topic", "grp", "--timeout-ms", "1500"]
    # a new group starts where auto.offset.reset says, then commits its positions
    r = _tool(
        "pyklog-console-consumer",
        base
        + [
            "--group",
            "console-g",
            "--consumer-property",
            "auto.offset.reset=earliest",
            "--consumer-property",
            "foo=bar",
        ],
    )
    assert r.returncode == 0, r.stderr.decode()
    assert sorted(r.stdout.decode().split()) == sorted(f"v{i}" for i in range(10))
    assert b"WARN The configuration 'foo' was supplied but isn't a known config." in r.stderr
    with ClusterClient(broker.bootstrap) as c:
        committed = c.fetch_committed("console-g", [("grp", 0), ("grp", 1)])
        ends = c.list_offsets({("grp", 0): -1, ("grp", 1): -1})
    assert committed == ends and sum(ends.values()) == 10
    # the same group again: nothing new (even with --from-beginning: committed offsets come first)
    r = _tool("pyklog-console-producer", ["--bootstrap-server", broker.bootstrap, "--topic", "grp"], b"late\n")
    r = _tool("pyklog-console-consumer", base + ["--consumer-property", "group.id=console-g", "--from-beginning"])
    assert r.returncode == 0 and r.stdout.decode().split() == ["late"], r.stderr.decode()
    # enable.auto.commit=false commits nothing; auto.offset.reset=none without offsets fails
    r = _tool(
        "pyklog-console-consumer",
        base + ["--group", "other", "--from-beginning", "--consumer-property", "enable.auto.commit=false"],
    )
    assert r.returncode == 0 and len(r.stdout.split()) == 11
    with ClusterClient(broker.bootstrap) as c:
        assert c.fetch_committed("other", [("grp", 0), ("grp", 1)]) == {("grp", 0): None, ("grp", 1): None}
    r = _tool("pyklog-console-consumer", base + ["--group", "other", "--consumer-property", "auto.offset.reset=none"])
    assert r.returncode == 1 and b"NoOffsetForPartitionException" in r.stderr
    r = _tool("pyklog-console-consumer", base + ["--group", "a", "--consumer-property", "group.id=b"])
    assert r.returncode == 1 and b"different group.id" in r.stderr
    # the group shows in pyklog-consumer-groups
    r = _tool("pyklog-consumer-groups", ["--bootstrap-server", broker.bootstrap, "--describe", "--group", "console-g"])
    assert r.returncode == 0
    rows = [ln.split() for ln in r.stdout.decode().splitlines() if ln.strip()][1:]
    assert [x[5] for x in rows] == ["0", "0"]


def test_producer_warns_on_each_failed_attempt():
    from pyklog.broker.zk.server import free_port

    port = free_port()
    r = _tool(
        "pyklog-console-producer",
        ["--bootstrap-server", f"127.0.0.1:{port}", "--topic", "t", "--producer-property", "max.block.ms=1500"],
        b"x\n",
    )
    assert r.returncode == 1
    err = r.stderr.decode()
    warnings = [ln for ln in err.splitlines() if "WARNING" in ln and "could not be established" in ln]
    assert len(warnings) >= 2 and f"127.0.0.1:{port}" in warnings[0] and "(attempt 1," in warnings[0], err
    assert "Broker may not be available." in warnings[0]
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith("pyklog-console-producer: topic 't' not available after max.block.ms=1500")
    )


def test_producer_warns_while_the_topic_is_missing(broker_factory):
    b = broker_factory(0, auto_create_topics_enable="false")
    r = _tool(
        "pyklog-console-producer",
        ["--bootstrap-server", b.bootstrap, "--topic", "missing", "--producer-property", "max.block.ms=1500"],
        b"x\n",
    )
    assert r.returncode == 1
    err = r.stderr.decode()
    warnings = [ln for ln in err.splitlines() if "WARNING" in ln and "error while fetching metadata" in ln]
    assert len(warnings) >= 2 and "topic 'missing'" in warnings[0] and "UNKNOWN_TOPIC_OR_PARTITION" in warnings[0], err
