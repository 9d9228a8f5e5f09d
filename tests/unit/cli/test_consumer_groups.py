"""pyklog-consumer-groups as a user runs it (subprocess) against a real broker, a stock client's group
(kafka-python) and a ZooKeeper group, checked against Kafka's ConsumerGroupCommand layout."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyklog.connector.cli.consumer_groups import parse_datetime, parse_duration

BIN = os.path.dirname(sys.executable)


def tool(*args, timeout=60):
    r = subprocess.run(
        [os.path.join(BIN, "pyklog-consumer-groups"), *args], capture_output=True, text=True, timeout=timeout
    )
    return r


def test_time_arguments():
    assert parse_datetime("1970-01-01T00:00:01.5") == 1500
    assert parse_datetime("1970-01-01T01:00:00+01:00") == 0
    assert parse_datetime("1970-01-01T00:00:02Z") == 2000
    assert parse_duration("PT1H") == 3600000
    assert parse_duration("P1DT2M3S") == 86400000 + 120000 + 3000
    with pytest.raises(Exception, match="ISO-8601"):
        parse_duration("1h")


def test_usage_errors_help_and_version():
    r = tool("--help")
    assert r.returncode == 0 and "example:" in r.stdout and "--reset-offsets" in r.stdout
    r = tool("--version")
    assert r.returncode == 0 and r.stdout.startswith("pyklog-consumer-groups (pyklog ")
    r = tool("--list")
    assert r.returncode == 1 and 'Error: Missing required argument "[bootstrap-server]"' in r.stderr
    r = tool("--bootstrap-server", "127.0.0.1:1", "--describe")
    assert r.returncode == 1 and "[all-groups], [group]" in r.stderr
