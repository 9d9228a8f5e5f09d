"""Every tool reaches a broker that requires client certificates through Kafka's client
properties file (``--command-config``; the console tools' ``--producer.config`` /
``--consumer.config``): without the file a tool is refused, with it the tool works, and neither its
output nor the broker's log shows a password."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.integration.security.tls_broker_support import assert_no_secret_logged, start_tls_broker, tls_certs
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

BIN = os.path.dirname(sys.executable)
TOPIC = "tooled"


def run(tool, *args, stdin=None, timeout=90):
    return subprocess.run(
        [os.path.join(BIN, tool), *args], input=stdin, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def mtls_broker(broker_factory, tls_certs, tmp_path):
    b = start_tls_broker(broker_factory, tls_certs, **{"ssl.client.auth": "required"})
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SSL\n"
        "ssl.truststore.type=PKCS12\n"
        f"ssl.truststore.location={tls_certs.ca_p12}\n"
        f"ssl.truststore.password={TRUSTSTORE_PASSWORD}\n"
        "ssl.keystore.type=PKCS12\n"
        f"ssl.keystore.location={tls_certs.client_p12}\n"
        f"ssl.keystore.password={KEYSTORE_PASSWORD}\n"
    )
    return b, str(props)


def _secrets_absent(*texts):
    for t in texts:
        assert KEYSTORE_PASSWORD not in t and TRUSTSTORE_PASSWORD not in t


def test_tools_use_the_client_properties_file(mtls_broker):
    b, props = mtls_broker
    bs = b.ssl_bootstrap
    refused = run("pyklog-topics", "--bootstrap-server", bs, "--list", timeout=120)
    assert refused.returncode != 0, "a tool without a client certificate was served"
    r = run(
        "pyklog-topics", "--bootstrap-server", bs, "--command-config", props, "--create", "--topic", TOPIC,
        "--partitions", "2",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run("pyklog-console-producer", "--bootstrap-server", bs, "--topic", TOPIC, "--producer.config", props,
            stdin="a\nb\nc\n")  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = run(
        "pyklog-console-consumer", "--bootstrap-server", bs, "--topic", TOPIC, "--consumer.config", props,
        "--from-beginning", "--max-messages", "3", "--group", "tools",
    )  # fmt: skip
    assert r.returncode == 0 and sorted(r.stdout.split()) == ["a", "b", "c"], (r.stdout, r.stderr)
    outputs = [r.stdout + r.stderr]
    for tool, args in (
        ("pyklog-topics", ["--list"]),
        ("pyklog-topics", ["--describe", "--topic", TOPIC]),
        ("pyklog-configs", ["--describe", "--entity-type", "topics", "--entity-name", TOPIC]),
        ("pyklog-consumer-groups", ["--list"]),
        ("pyklog-consumer-groups", ["--describe", "--group", "tools"]),
        ("pyklog-get-offsets", ["--topic", TOPIC]),
        ("pyklog-transactions", ["list"]),
        ("pyklog-leader-election", ["--election-type", "preferred", "--all-topic-partitions"]),
    ):
        r = run(tool, "--bootstrap-server", bs, "--command-config", props, *args)
        assert r.returncode == 0, (tool, args, r.stdout, r.stderr)
        outputs.append(r.stdout + r.stderr)
    assert TOPIC in outputs[1] and "tools" in outputs[4]
    r = run("pyklog-consumer-perf-test", "--bootstrap-server", bs, "--topic", TOPIC, "--messages", "3",
            "--consumer.config", props, "--timeout", "20000")  # fmt: skip
    assert r.returncode == 0, r.stderr
    _secrets_absent(*outputs, r.stdout + r.stderr)
    assert_no_secret_logged(b)


def test_a_missing_client_properties_file_is_a_usage_error(mtls_broker):
    b, _ = mtls_broker
    r = run("pyklog-topics", "--bootstrap-server", b.ssl_bootstrap, "--command-config", "/nonexistent.properties",
            "--list")  # fmt: skip
    assert r.returncode == 1 and "/nonexistent.properties" in r.stderr and "Traceback" not in r.stderr
