"""The command-line tools without a broker (subprocesses): every pyklog tool's --help with an example
and its --version, usage errors exiting 1, and bad offset JSON for pyklog-delete-records.

pyklog-get-offsets, pyklog-delete-records and pyklog-configs against a real broker are in
tests/integration/cli/test_admin_tools.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

BIN = os.path.dirname(sys.executable)


def run(name, *args):
    return subprocess.run([os.path.join(BIN, name), *args], capture_output=True, text=True, timeout=90)


@pytest.mark.parametrize(
    "name",
    [
        "pyklog-get-offsets",
        "pyklog-delete-records",
        "pyklog-configs",
        "pyklog-consumer-groups",
        "pyklog-topics",
        "pyklog-dump-log",
        "pyklog-console-producer",
        "pyklog-console-consumer",
        "pyklog-producer-perf-test",
        "pyklog-consumer-perf-test",
    ],
)
def test_every_tool_has_help_with_an_example_and_version(name):
    r = run(name, "--help")
    assert r.returncode == 0 and "example:" in r.stdout, r.stdout
    r = run(name, "--version")
    assert r.returncode == 0 and r.stdout.startswith(f"{name} (pyklog ")


def test_usage_errors_exit_1():
    r = run("pyklog-console-consumer", "--topic", "t")
    assert r.returncode == 1 and r.stderr.startswith("Error: one of the arguments --bootstrap-server --zookeeper")
    r = run("pyklog-console-consumer", "--bootstrap-server", "127.0.0.1:1", "--topic", "t", "--offset", "3")
    assert r.returncode == 1 and "--offset needs --partition" in r.stderr
    r = run("pyklog-get-offsets", "--topic", "x")
    assert r.returncode == 1 and 'Missing required argument "[bootstrap-server]"' in r.stderr
    r = run("pyklog-get-offsets", "--bootstrap-server", "127.0.0.1:1", "--time", "yesterday")
    assert r.returncode == 1 and "Malformed time argument yesterday" in r.stderr
    r = run("pyklog-get-offsets", "--bootstrap-server", "127.0.0.1:1", "--partitions", "a")
    assert r.returncode == 1 and "Invalid partition 'a'" in r.stderr
    r = run("pyklog-delete-records", "--bootstrap-server", "127.0.0.1:1")
    assert r.returncode == 1 and 'Missing required argument "[offset-json-file]"' in r.stderr
    r = run("pyklog-configs", "--bootstrap-server", "127.0.0.1:1", "--describe")
    assert r.returncode == 1 and 'Missing required argument "[entity-type]"' in r.stderr
    r = run(
        "pyklog-configs",
        "--bootstrap-server",
        "127.0.0.1:1",
        "--entity-type",
        "topics",
        "--entity-name",
        "t",
        "--alter",
        "--add-config",
        "nonsense",
    )
    assert r.returncode == 1 and "--add-config: expected k1=v1" in r.stderr


def test_offset_json_file_errors(tmp_path):
    from pyklog.connector.cli.delete_records import parse_offset_json

    assert parse_offset_json('{"partitions": [{"topic": "t", "partition": 1, "offset": 5}], "version": 1}') == {
        ("t", 1): 5
    }
    for bad, msg in [
        ("{", "not valid JSON"),
        ('{"partitions": 3}', '"partitions"'),
        ('{"partitions": [{"topic": "t", "partition": "1", "offset": 5}]}', "partitions[0]"),
        (
            '{"partitions": [{"topic": "t", "partition": 1, "offset": 5}, '
            '{"topic": "t", "partition": 1, "offset": 6}]}',
            "duplicate topic partitions: t-1",
        ),
    ]:
        with pytest.raises(ValueError, match=msg.replace("[", r"\[")):
            parse_offset_json(bad)
    f = tmp_path / "bad.json"
    f.write_text("{")
    r = run("pyklog-delete-records", "--bootstrap-server", "127.0.0.1:1", "--offset-json-file", str(f))
    assert r.returncode == 1 and r.stdout == "" and "not valid JSON" in r.stderr
