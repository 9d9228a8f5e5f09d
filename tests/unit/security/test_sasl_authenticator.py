"""The broker's SASL authenticator as a state machine on request bytes (no server)."""

import struct

import pytest

from pyklog.broker.protocol import ApiKey, decode_response, encode_request
from pyklog.broker.security import plain
from pyklog.broker.security.sasl_server import (
    CLOSE,
    PASS,
    SEND,
    SEND_AND_CLOSE,
    SaslListenerSettings,
    SaslServerAuthenticator,
    ScramCredentialCache,
    listener_settings,
)
from pyklog.broker.security.scram import SCRAM_SHA_256, ScramClient, ScramCredential

PASSWORD = "alice-pw-Hq2"


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


@pytest.fixture(scope="module")
def cache():
    c = ScramCredentialCache()
    c.set_user("alice", {"SCRAM-SHA-256": ScramCredential.from_password(SCRAM_SHA_256, PASSWORD, 4096)})
    return c


def _auth(cache, reauth_ms=0, clock=None, mechanisms=("PLAIN", "SCRAM-SHA-256")):
    settings = SaslListenerSettings("SASL_PLAINTEXT", mechanisms, plain.jaas_check({"alice": PASSWORD}), reauth_ms)
    return SaslServerAuthenticator(settings, cache, "127.0.0.1:1", clock=clock or Clock())


def _req(api, version, body, cid=7):
    return memoryview(encode_request(api, version, cid, "unit", body)[4:])


def _resp(api, version, chunks):
    data = b"".join(bytes(c) for c in chunks)
    (size,) = struct.unpack_from(">i", data)
    assert size == len(data) - 4
    return decode_response(api, version, data[4:])[1]


def test_api_versions_passes_then_plain_login(cache):
    a = _auth(cache)
    assert a.on_frame(_req(ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"})) == (
        PASS,
        None,
    )
    action, chunks = a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert action == SEND and _resp(ApiKey.SASL_HANDSHAKE, 1, chunks) == {
        "error_code": 0,
        "mechanisms": ["PLAIN", "SCRAM-SHA-256"],
    }
    action, chunks = a.on_frame(
        _req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": plain.client_token("alice", PASSWORD)})
    )
    assert action == SEND and _resp(ApiKey.SASL_AUTHENTICATE, 2, chunks)["error_code"] == 0
    assert a.complete and str(a.principal) == "User:alice"
    assert a.on_frame(_req(ApiKey.METADATA, 1, {"topics": None})) == (PASS, None)


def test_too_new_api_versions_may_be_retried(cache):
    a = _auth(cache)
    assert (
        a.on_frame(_req(ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}))[0]
        == PASS
    )
    b = _auth(cache)
    frame = bytearray(_req(ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}))
    frame[2:4] = (4).to_bytes(2, "big")  # ApiVersions v4: answered by KafkaApis with UNSUPPORTED_VERSION
    assert b.on_frame(memoryview(frame))[0] == PASS
    assert (
        b.on_frame(_req(ApiKey.API_VERSIONS, 3, {"client_software_name": "x", "client_software_version": "1"}))[0]
        == PASS
    )
    assert b.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))[0] == SEND


def test_unsupported_mechanism_answers_the_enabled_list_then_closes(cache):
    a = _auth(cache)
    action, chunks = a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"}))
    assert action == SEND_AND_CLOSE
    assert _resp(ApiKey.SASL_HANDSHAKE, 1, chunks) == {"error_code": 33, "mechanisms": ["PLAIN", "SCRAM-SHA-256"]}
    assert a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})) == (CLOSE, None)


def test_wrong_password_fails_with_kafka_message(cache):
    a = _auth(cache)
    a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    action, chunks = a.on_frame(_req(ApiKey.SASL_AUTHENTICATE, 1, {"auth_bytes": plain.client_token("alice", "nope")}))
    assert action == SEND_AND_CLOSE
    r = _resp(ApiKey.SASL_AUTHENTICATE, 1, chunks)
    assert r["error_code"] == 58 and r["error_message"] == "Authentication failed: Invalid username or password"
    assert not a.complete and a.principal is None


def test_scram_login_and_session_expiry_and_reauthentication(cache):
    clock = Clock()
    a = _auth(cache, reauth_ms=3000, clock=clock)

    def login():
        client = ScramClient(SCRAM_SHA_256, "alice", PASSWORD)
        assert a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "SCRAM-SHA-256"}))[0] == SEND
        _, chunks = a.on_frame(_req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.first_message()}))
        r = _resp(ApiKey.SASL_AUTHENTICATE, 2, chunks)
        assert r["session_lifetime_ms"] == 0  # not yet authenticated
        _, chunks = a.on_frame(_req(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": client.final_message(r["auth_bytes"])}))
        r = _resp(ApiKey.SASL_AUTHENTICATE, 2, chunks)
        client.verify_server_final(r["auth_bytes"])
        return r

    assert login()["session_lifetime_ms"] == 3000
    clock.t += 2.0
    assert a.on_frame(_req(ApiKey.METADATA, 1, {"topics": None}))[0] == PASS
    assert login()["session_lifetime_ms"] == 3000  # re-authenticated: a new session from now
    clock.t += 2.5
    assert a.on_frame(_req(ApiKey.METADATA, 1, {"topics": None}))[0] == PASS
    clock.t += 1.0
    assert a.on_frame(_req(ApiKey.METADATA, 1, {"topics": None})) == (CLOSE, None)


def test_other_request_during_authentication_gets_illegal_sasl_state(cache):
    settings = SaslListenerSettings("L", ("PLAIN",), plain.jaas_check({}), 0)
    seen = []

    def error_response(header, body, code, message):
        seen.append((header.api_key, code, message))
        return [b"\x00\x00\x00\x00"]

    a = SaslServerAuthenticator(settings, cache, error_response=error_response)
    a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"}))
    assert a.on_frame(_req(ApiKey.METADATA, 1, {"topics": None}))[0] == SEND_AND_CLOSE
    assert seen == [(ApiKey.METADATA, 34, "Unexpected Kafka request of type Metadata during SASL authentication.")]


@pytest.mark.parametrize(
    "frame", [b"", b"\x00", b"\x00\x03\x00\x01", b"\xff" * 20, bytes(_req(ApiKey.METADATA, 1, {"topics": None}))]
)
def test_garbage_or_other_requests_before_the_handshake_close(cache, frame):
    assert _auth(cache).on_frame(memoryview(frame)) == (CLOSE, None)


def test_handshake_v0_then_raw_tokens(cache):
    a = _auth(cache)
    assert a.on_frame(_req(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))[0] == SEND
    action, chunks = a.on_frame(memoryview(plain.client_token("alice", PASSWORD)))
    assert action == SEND and b"".join(chunks) == b"\x00\x00\x00\x00"
    assert a.complete
    b = _auth(cache)
    b.on_frame(_req(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"}))
    assert b.on_frame(memoryview(b"\x00alice\x00bad")) == (CLOSE, None)


def test_listener_settings():
    raw = {
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="b";'
        ),
        "listener.name.sasl_plaintext.connections.max.reauth.ms": "5000",
    }
    s = listener_settings(raw, "SASL_PLAINTEXT")
    assert s.enabled_mechanisms == ("PLAIN", "SCRAM-SHA-256") and s.reauth_ms == 5000
    assert s.plain_check("bob", "b") and not s.plain_check("bob", "x")
    assert '"b"' not in repr(s)
    with pytest.raises(ValueError, match="GSSAPI"):
        listener_settings({}, "SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="not supported"):
        listener_settings({"sasl.enabled.mechanisms": "GSSAPI"}, "SASL_PLAINTEXT")
    with pytest.raises(ValueError, match="plain.sasl.jaas.config"):
        listener_settings({"sasl.enabled.mechanisms": "PLAIN"}, "SASL_PLAINTEXT")
    cb = listener_settings(
        {
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.server.callback.handler.class": "hmac:compare_digest",
        },
        "SASL_PLAINTEXT",
    )
    assert cb.plain_check("same", "same") and not cb.plain_check("a", "b")
