"""pyklog-producer-perf-test and pyklog-consumer-perf-test against a real broker: Kafka's output lines
(progress while running, the final summary) and exit codes."""

from __future__ import annotations

import os
import subprocess
import sys

BIN = os.path.dirname(sys.executable)


def run(name, *args, timeout=120):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, timeout=timeout)


def test_usage_errors():
    r = run(
        "pyklog-producer-perf-test",
        "--topic",
        "t",
        "--num-records",
        "1",
        "--throughput",
        "-1",
        "--producer-props",
        "bootstrap.servers=127.0.0.1:1",
    )
    assert r.returncode == 1 and "Either --record-size or --payload-file must be specified" in r.stderr
    r = run(
        "pyklog-producer-perf-test", "--topic", "t", "--num-records", "1", "--throughput", "-1", "--record-size", "1"
    )
    assert r.returncode == 1 and "bootstrap.servers" in r.stderr
    r = run("pyklog-consumer-perf-test", "--topic", "t", "--messages", "1")
    assert r.returncode == 1 and 'Missing required argument "[bootstrap-server]"' in r.stderr
