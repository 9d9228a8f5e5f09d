"""pyklog-producer-perf-test and pyklog-consumer-perf-test against a real broker: Kafka's output lines
(progress while running, the final summary) and exit codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys

BIN = os.path.dirname(sys.executable)
PROGRESS = re.compile(
    r"^\d+ records sent, \d+\.\d records/sec \(\d+\.\d\d MB/sec\), \d+\.\d ms avg latency, "
    r"\d+\.\d ms max latency\.$"
)
SUMMARY = re.compile(
    r"^(\d+) records sent, \d+\.\d{6} records/sec \(\d+\.\d\d MB/sec\), \d+\.\d\d ms avg latency, "
    r"\d+\.\d\d ms max latency, \d+ ms 50th, \d+ ms 95th, \d+ ms 99th, \d+ ms 99\.9th\.$"
)
TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d:\d{3}"
RESULT = re.compile(
    rf"^{TIME}, {TIME}, (\d+\.\d{{4}}), \d+\.\d{{4}}, (\d+), \d+\.\d{{4}}, 0, \d+, \d+\.\d{{4}}, "
    rf"\d+\.\d{{4}}$"
)


def run(name, *args, timeout=120):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, timeout=timeout)


def test_producer_then_consumer_perf(broker, tmp_path):
    from pyklog.connector.client import ClusterClient

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("perf", 2)
    # throttled so the run lasts ~1.5 s: progress lines at the (shortened) reporting interval
    r = run(
        "pyklog-producer-perf-test",
        "--topic",
        "perf",
        "--num-records",
        "600",
        "--record-size",
        "100",
        "--throughput",
        "400",
        "--producer-props",
        f"bootstrap.servers={broker.bootstrap}",
        "acks=1",
        "--reporting-interval",
        "300",
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) >= 3 and all(PROGRESS.match(ln) for ln in lines[:-1]), lines
    m = SUMMARY.match(lines[-1])
    assert m and m.group(1) == "600", lines[-1]
    # a payload file
    f = tmp_path / "payloads.txt"
    f.write_text("alpha\nbeta\ngamma\n")
    r = run(
        "pyklog-producer-perf-test",
        "--topic",
        "perf",
        "--num-records",
        "30",
        "--payload-file",
        str(f),
        "--throughput",
        "-1",
        "--bootstrap-server",
        broker.bootstrap,
    )
    assert r.returncode == 0 and SUMMARY.match(r.stdout.splitlines()[-1]).group(1) == "30", r.stdout

    r = run(
        "pyklog-consumer-perf-test",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        "perf",
        "--messages",
        "630",
        "--group",
        "perf-group",
        "--timeout",
        "5000",
    )
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == (
        "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
        "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
    )
    m = RESULT.match(out[1])
    assert m and m.group(2) == "630" and m.group(1) == "%.4f" % ((600 * 100 + 10 * 14) / 1024 / 1024), out
    # the group's offsets were committed: nothing left, a timeout warning and 0 records
    r = run(
        "pyklog-consumer-perf-test",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        "perf",
        "--messages",
        "10",
        "--group",
        "perf-group",
        "--timeout",
        "500",
        "--hide-header",
    )
    assert r.returncode == 0
    assert "WARNING: Exiting before consuming the expected number of messages: timeout (500 ms) exceeded." in r.stderr
    assert RESULT.match(r.stdout.splitlines()[0]).group(2) == "0"
    r = run(
        "pyklog-consumer-perf-test",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        "perf",
        "--messages",
        "630",
        "--show-detailed-stats",
        "--reporting-interval",
        "1",
        "--timeout",
        "3000",
    )
    assert r.returncode == 0
    assert r.stdout.splitlines()[0].startswith("time, threadId, data.consumed.in.MB")
    assert len(r.stdout.splitlines()) >= 2
