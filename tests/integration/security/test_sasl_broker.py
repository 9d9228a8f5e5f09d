"""The SASL_PLAINTEXT broker with pyklog's own clients and tools, and bad input: SCRAM users made
live through AlterUserScramCredentials and pyklog-configs --zookeeper, a deleted credential, wrong
passwords, malformed tokens, clients that stop mid-handshake, 1,000 failed logins."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import uuid

import pytest

from pyklog.broker.errors import SaslAuthenticationError, UnsupportedSaslMechanismError
from pyklog.broker.protocol import ApiKey, decode_response, encode_request
from pyklog.connector.admin import AdminClient
from pyklog.connector.client import BrokerConnection
from pyklog.connector.producer import Producer
from pyklog.connector.sasl_client import SaslCredentials
from tests.integration.security.sasl_support import (
    ADMIN_PASSWORD,
    ALICE_PASSWORD,
    add_scram_user,
    assert_no_password_in_log,
    sasl_broker,
    sasl_security,
)
from tests.support import Wire, wait_for

ADMIN = SaslCredentials("PLAIN", "admin", ADMIN_PASSWORD)


@pytest.fixture
def broker(broker_factory, zk_chroot):
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, ("SCRAM-SHA-512",))
    return sasl_broker(broker_factory)


def _connect(b, creds):
    return BrokerConnection("127.0.0.1", b.port, sasl=creds, timeout_s=15)


def _can_login(b, mech, user, password) -> bool:
    try:
        _connect(b, SaslCredentials(mech, user, password)).close()
        return True
    except SaslAuthenticationError:
        return False


def test_pyklog_client_plain_and_scram(broker):
    for creds in (ADMIN, SaslCredentials("SCRAM-SHA-512", "alice", ALICE_PASSWORD)):
        conn = _connect(broker, creds)
        md = conn.request(ApiKey.METADATA, {"topics": None})
        assert md["brokers"][0]["port"] == broker.port
        conn.close()


def test_pyklog_client_wrong_password_and_unknown_user_fail_alike(broker):
    messages = []
    for mech, user in (
        ("SCRAM-SHA-512", "alice"),
        ("SCRAM-SHA-512", "nobody"),
        ("PLAIN", "alice"),
        ("PLAIN", "nobody"),
    ):
        with pytest.raises(SaslAuthenticationError) as info:
            _connect(broker, SaslCredentials(mech, user, "wrong-password-Kd9"))
        assert "wrong-password-Kd9" not in str(info.value)
        messages.append(str(info.value).split(": ", 1)[1])
    # KIP-152: no hint whether the user exists
    assert messages[0] == messages[1] and messages[2] == messages[3]
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in messages[0]
    assert "Invalid username or password" in messages[2]
    assert_no_password_in_log(broker)


def test_mechanism_not_enabled(broker_factory):
    b = sasl_broker(broker_factory, mechanisms="PLAIN")
    with pytest.raises(UnsupportedSaslMechanismError, match="enabled: PLAIN"):
        _connect(b, SaslCredentials("SCRAM-SHA-256", "alice", ALICE_PASSWORD))


def test_producer_with_jaas_config(broker):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    jaas = f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{ALICE_PASSWORD}";'
    p = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": jaas,
        }
    )
    for i in range(5):
        p.send(topic, value=f"v{i}".encode()).result(30)
    p.close()
    assert "secret" not in repr(p.config.get("sasl.jaas.config"))


def test_scram_user_created_through_the_api_is_live_and_deletion_locks_it_out(broker):
    with AdminClient(broker.bootstrap, security=sasl_security(ADMIN)) as admin:
        assert not _can_login(broker, "SCRAM-SHA-256", "bob", "bob-secret-Lm4")
        res = admin.alter_user_scram_credentials([("bob", "SCRAM-SHA-256", "bob-secret-Lm4", 4096)])
        assert res == {"bob": None}
        wait_for(lambda: _can_login(broker, "SCRAM-SHA-256", "bob", "bob-secret-Lm4"), 15, message="bob can log in")
        assert not _can_login(broker, "SCRAM-SHA-256", "bob", "wrong-password-Kd9")
        assert admin.describe_user_scram_credentials(["bob"]) == {"bob": [("SCRAM-SHA-256", 4096)]}
        assert set(admin.describe_user_scram_credentials()) == {"alice", "bob"}
        # Kafka's errors
        res = admin.alter_user_scram_credentials([("bob", "SCRAM-SHA-256", "x", 100)])
        assert res["bob"].name == "UNACCEPTABLE_CREDENTIAL"
        res = admin.alter_user_scram_credentials([], [("carol", "SCRAM-SHA-256")])
        assert res["carol"].name == "RESOURCE_NOT_FOUND"
        res = admin.alter_user_scram_credentials(
            [("bob", "SCRAM-SHA-256", "bob-secret-Lm4", 4096)], [("bob", "SCRAM-SHA-256")]
        )
        assert res["bob"].name == "DUPLICATE_RESOURCE"
        with pytest.raises(Exception, match="does not exist"):
            admin.describe_user_scram_credentials(["carol"])
        # deleted -> the next login fails
        assert admin.alter_user_scram_credentials([], [("bob", "SCRAM-SHA-256")]) == {"bob": None}
        wait_for(lambda: not _can_login(broker, "SCRAM-SHA-256", "bob", "bob-secret-Lm4"), 15, message="bob locked out")
    assert_no_password_in_log(broker)


def _configs(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pyklog.connector.cli.configs", *args], capture_output=True, text=True, timeout=60
    )


def test_pyklog_configs_users_through_zookeeper_and_bootstrap(broker, zk_chroot, tmp_path):
    r = _configs(
        "--zookeeper", zk_chroot, "--entity-type", "users", "--entity-name", "carol", "--alter",
        "--add-config", "SCRAM-SHA-512=[iterations=8192,password=carol-secret-Vw2]",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "carol-secret" not in r.stdout + r.stderr
    wait_for(lambda: _can_login(broker, "SCRAM-SHA-512", "carol", "carol-secret-Vw2"), 15, message="carol live")
    props = tmp_path / "client.properties"
    props.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        "sasl.mechanism=PLAIN\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required \\\n"
        f'  username="admin" password="{ADMIN_PASSWORD}";\n'
    )
    r = _configs(
        "--bootstrap-server", broker.bootstrap, "--command-config", str(props),
        "--entity-type", "users", "--entity-name", "carol", "--describe",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "SCRAM credential configs for user-principal 'carol' are SCRAM-SHA-512=iterations=8192" in r.stdout
    r = _configs(
        "--bootstrap-server", broker.bootstrap, "--command-config", str(props),
        "--entity-type", "users", "--entity-name", "carol", "--alter", "--delete-config", "SCRAM-SHA-512",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    wait_for(lambda: not _can_login(broker, "SCRAM-SHA-512", "carol", "carol-secret-Vw2"), 15, message="carol gone")
    # without credentials the tool is refused, clearly
    r = _configs("--bootstrap-server", broker.bootstrap, "--entity-type", "users", "--describe")
    assert r.returncode != 0
    assert_no_password_in_log(broker)


def _frame(api, version, body, cid=1) -> bytes:
    return encode_request(api, version, cid, "raw-test", body)


def _sasl_wire(b, mech="PLAIN") -> Wire:
    w = Wire(b.port, timeout=10)
    resp = w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": mech})
    assert resp["error_code"] == 0 and mech in resp["mechanisms"]
    return w


def test_requests_before_authentication_close_the_connection(broker):
    with Wire(broker.port, timeout=10) as w:
        w.send(ApiKey.METADATA, 1, {"topics": None})
        assert w.is_closed()
    with _sasl_wire(broker) as w:  # during SaslAuthenticate: Kafka's ILLEGAL_SASL_STATE answer, then closed
        cid = w.send(ApiKey.METADATA, 4, {"topics": None, "allow_auto_topic_creation": False})
        got, resp = decode_response(ApiKey.METADATA, 4, w.recv_frame())
        assert got == cid
        assert all(t["error_code"] == 34 for t in resp["topics"]) or resp.get("error_code", 34) == 34
        assert w.is_closed()
    # ApiVersions is answered before authentication and advertises the SASL APIs
    with Wire(broker.port, timeout=10) as w:
        resp = w.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t", "client_software_version": "1"})
        keys = {k["api_key"]: (k["min_version"], k["max_version"]) for k in resp["api_keys"]}
        assert keys[ApiKey.SASL_HANDSHAKE] == (0, 1) and keys[ApiKey.SASL_AUTHENTICATE] == (0, 2)


@pytest.mark.parametrize(
    "token",
    [b"", b"\x00", b"\xff" * 300, b"admin\x00" + ADMIN_PASSWORD.encode(), b"\x00\x00\x00", b"x" * 100_000],
)
def test_malformed_plain_tokens_are_refused_and_the_broker_serves_on(broker, token):
    with _sasl_wire(broker) as w:
        resp = w.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        assert resp["error_code"] == SaslAuthenticationError.code
        assert resp["error_message"].startswith(("Authentication failed", "Invalid SASL/PLAIN"))
        assert w.is_closed()
    assert _can_login(broker, "PLAIN", "admin", ADMIN_PASSWORD)


@pytest.mark.parametrize("token", [b"", b"n,,", b"y,,n=,r=", b"\xff\xfe", b"n,,n=alice,r=abc,extra", b"p=tr,,n=a,r=b"])
def test_malformed_scram_tokens(broker, token):
    with _sasl_wire(broker, "SCRAM-SHA-512") as w:
        resp = w.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})
        if resp["error_code"] == 0:  # a well-formed first message: the final one is garbage
            resp = w.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"c=biws,r=zzz,p=AAAA"})
        assert resp["error_code"] == SaslAuthenticationError.code
        assert w.is_closed()
    assert _can_login(broker, "SCRAM-SHA-512", "alice", ALICE_PASSWORD)


def test_handshake_v0_then_raw_tokens(broker):
    with Wire(broker.port, timeout=10) as w:
        resp = w.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        assert resp["error_code"] == 0
        token = b"\x00admin\x00" + ADMIN_PASSWORD.encode()
        w.sock.sendall(struct.pack(">i", len(token)) + token)
        assert w.recv_frame() == b""  # PLAIN's empty answer
        md = w.request(ApiKey.METADATA, 1, {"topics": None})
        assert md["brokers"]
    with Wire(broker.port, timeout=10) as w:
        w.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})
        token = b"\x00admin\x00wrong-password-Kd9"
        w.sock.sendall(struct.pack(">i", len(token)) + token)
        assert w.is_closed()


def test_clients_that_stop_mid_handshake(broker):
    socks = []
    for i in range(20):
        s = socket.create_connection(("127.0.0.1", broker.port), timeout=10)
        if i % 3 == 0:
            s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"})[:7])  # half a frame
        elif i % 3 == 1:
            s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-512"}))
            s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"n,,n=alice,r=abc"}, cid=2))
        socks.append(s)
    for s in socks[::2]:
        s.close()  # some vanish, the others hang
    assert _can_login(broker, "SCRAM-SHA-512", "alice", ALICE_PASSWORD)
    for s in socks[1::2]:
        s.close()
    assert _can_login(broker, "PLAIN", "admin", ADMIN_PASSWORD)


def test_a_thousand_failed_logins(broker):
    """No crash, each failure logged once without the credential, memory bounded (the broker's RSS
    grows by less than 50 MB), and the broker still serves."""
    import os

    def rss_kb() -> int:
        with open(f"/proc/{broker.proc.pid}/status") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("VmRSS"))

    token = b"\x00alice\x00wrong-password-Kd9"
    before = rss_kb()
    n = 1000
    for i in range(n):
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.sendall(_frame(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}, cid=1))
            s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token}, cid=2))
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            assert data, f"login {i}: no answer"
    assert _can_login(broker, "PLAIN", "admin", ADMIN_PASSWORD)
    assert rss_kb() - before < 50_000
    out = broker.output()
    assert out.count("failed authentication with") >= n
    assert_no_password_in_log(broker)
    assert os.path.exists(broker.stdout_path)


def test_describe_configs_hides_the_jaas_config(broker):
    with AdminClient(broker.bootstrap, security=sasl_security(ADMIN)) as admin:
        entries = admin.describe_configs([(4, "0")])[(4, "0")]
    jaas = [e for e in entries if e["name"].endswith("sasl.jaas.config")]
    assert jaas and all(e["value"] is None and e["is_sensitive"] for e in jaas)


def test_a_large_frame_before_authentication_closes_the_connection(broker):
    """sasl.server.max.receive.size (512 KiB): an unauthenticated client cannot make the broker
    reserve socket.request.max.bytes."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        s.sendall(struct.pack(">i", 10_000_000) + b"\x00" * 1000)
        s.settimeout(10)
        assert s.recv(10) == b""
    assert "before authentication" in broker.output()
    assert _can_login(broker, "PLAIN", "admin", ADMIN_PASSWORD)


def test_random_sasl_tokens_and_frames(broker):
    """A seeded fuzz of the exchange: random tokens for each mechanism, random frames at each step;
    every connection ends answered-and-closed or closed, and the broker serves on."""
    import random

    rng = random.Random(23)
    for i in range(150):
        mech = rng.choice(["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
            s.settimeout(10)
            step = rng.randrange(3)
            if step == 0:  # garbage instead of a request
                junk = rng.randbytes(rng.randrange(1, 200))
                s.sendall(struct.pack(">i", len(junk)) + junk)
            else:
                s.sendall(_frame(ApiKey.SASL_HANDSHAKE, rng.choice([0, 1]), {"mechanism": mech}))
                token = rng.randbytes(rng.randrange(0, 300))
                if step == 1:
                    s.sendall(_frame(ApiKey.SASL_AUTHENTICATE, rng.choice([0, 1, 2]), {"auth_bytes": token}, cid=2))
                else:
                    s.sendall(struct.pack(">i", len(token)) + token)
            try:
                while s.recv(65536):
                    pass
            except (ConnectionResetError, TimeoutError) as e:
                assert not isinstance(e, TimeoutError), f"round {i}: the broker neither answered nor closed"
    assert _can_login(broker, "SCRAM-SHA-512", "alice", ALICE_PASSWORD)
    assert "Traceback" not in broker.output()
