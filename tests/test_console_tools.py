"""pyklog-console-producer / pyklog-console-consumer as a user runs them (subprocesses)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyklog.connector.cli.console_producer import LineReader
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer

BIN = os.path.dirname(sys.executable)


def _tool(name, args, stdin=b"", timeout=60):
    return subprocess.run([os.path.join(BIN, name), *args], input=stdin, capture_output=True,
                          timeout=timeout)


def test_line_reader_properties():
    r = LineReader({"parse.key": "true", "key.separator": ":"})
    assert r.parse("k:v:w", 1) == (b"k", b"v:w", ())
    with pytest.raises(ValueError, match="line 3: no key separator ':'"):
        r.parse("novalue", 3)
    r = LineReader({"parse.key": "true", "ignore.error": "true", "null.marker": "NULL"})
    assert r.parse("nokey", 1) == (None, b"nokey", ())
    assert r.parse("NULL\tNULL", 1) == (None, None, ())
    r = LineReader({"parse.headers": "true", "parse.key": "true"})
    assert r.parse("a:1,b:2\tk\tv", 1) == (b"k", b"v", (("a", b"1"), ("b", b"2")))


@pytest.mark.integration
def test_console_producer_and_consumer_round_trip(broker, zk_chroot):
    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("lines", 2)
    lines = b"".join(b"key%d:value %d\n" % (i % 3, i) for i in range(20))
    r = _tool("pyklog-console-producer", ["--bootstrap-server", broker.bootstrap, "--topic", "lines",
                                          "--property", "parse.key=true", "--property", "key.separator=:",
                                          "--compression-codec", "lz4"], lines)
    assert r.returncode == 0, r.stderr.decode()
    with SimpleConsumer(broker.bootstrap) as c:
        got = {q: [(x.key, x.value) for x in c.iter_records("lines", q, 0)] for q in (0, 1)}
    assert sorted(got[0] + got[1], key=lambda kv: int(kv[1].split()[1])) == \
        [(b"key%d" % (i % 3), b"value %d" % i) for i in range(20)]
    # the consumer found through ZooKeeper, from the beginning, with keys
    r = _tool("pyklog-console-consumer", ["--zookeeper", zk_chroot, "--topic", "lines", "--from-beginning",
                                          "--max-messages", "20", "--property", "print.key=true",
                                          "--property", "key.separator=|"])
    assert r.returncode == 0, r.stderr.decode()
    out = sorted(r.stdout.decode().splitlines(), key=lambda s: int(s.split()[1]))
    assert out == [f"key{i % 3}|value {i}" for i in range(20)]
    assert b"Processed a total of 20 messages" in r.stderr
    # one partition from an offset, stopping when idle for --timeout-ms
    r = _tool("pyklog-console-consumer", ["--bootstrap-server", broker.bootstrap, "--topic", "lines",
                                          "--partition", "0", "--offset", "2", "--timeout-ms", "1500",
                                          "--property", "print.offset=true"])
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout.decode().splitlines() == [f"Offset:{i}\t{v.decode()}" for i, (_, v) in enumerate(got[0])][2:]
    # a line without the separator fails with a clear message; the lines before it are delivered
    r = _tool("pyklog-console-producer", ["--bootstrap-server", broker.bootstrap, "--topic", "lines",
                                          "--property", "parse.key=true", "--partition", "1"],
              b"a\tb\nno separator here\nc\td\n")
    assert r.returncode == 1 and b"line 2: no key separator" in r.stderr
    with SimpleConsumer(broker.bootstrap) as c:
        assert c.latest_offset("lines", 1) == len(got[1]) + 1
    # without --from-beginning the consumer starts at the end: nothing old is printed
    r = _tool("pyklog-console-consumer", ["--bootstrap-server", broker.bootstrap, "--topic", "lines",
                                          "--timeout-ms", "800"])
    assert r.returncode == 0 and r.stdout == b""
