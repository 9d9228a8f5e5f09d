"""SASL/OAUTHBEARER with Kafka's unsecured JWS tokens, pure."""

import base64
import json

import pytest

from pyklog.broker.security import oauthbearer
from pyklog.broker.security.oauthbearer import OAuthBearerError, OAuthBearerServer, UnsecuredValidator

NOW = 1_800_000_000.0


def _server(**options):
    return OAuthBearerServer(UnsecuredValidator(options), clock=lambda: NOW)


def _token(claims, header=None):
    enc = lambda d: base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()  # noqa: E731
    return f"{enc(header or {'alg': 'none'})}.{enc(claims)}."


def test_valid_unsecured_token():
    s = _server()
    token = oauthbearer.unsecured_token("alice", 3600, now=NOW - 10)
    assert s.evaluate(oauthbearer.client_initial_response(token)) == b""
    assert s.complete and s.username == "alice" and s.expires_at == NOW + 3590


@pytest.mark.parametrize(
    "claims",
    [
        {"sub": "alice", "exp": NOW - 1},  # expired
        {"sub": "alice"},  # no exp
        {"sub": "", "exp": NOW + 60},
        {"exp": NOW + 60},
        {"sub": "alice", "exp": NOW + 60, "iat": NOW + 600},  # issued in the future
    ],
)
def test_invalid_tokens_get_the_error_challenge_then_fail(claims):
    s = _server()
    challenge = s.evaluate(oauthbearer.client_initial_response(_token(claims)))
    assert json.loads(challenge) == {"status": "invalid_token"}
    with pytest.raises(OAuthBearerError, match="invalid_token"):
        s.evaluate(b"\x01")
    assert not s.complete


def test_signed_or_malformed_tokens_and_messages():
    assert _server().evaluate(
        oauthbearer.client_initial_response(_token({"sub": "a", "exp": NOW + 9}, {"alg": "RS256"}))
    )
    assert _server().evaluate(oauthbearer.client_initial_response("not-a-jws"))
    for msg in (b"", b"\xff", b"n,,auth=Bearer x", b"n,,\x01auth=Basic x\x01\x01", b"n,,\x01noequals\x01\x01"):
        with pytest.raises(OAuthBearerError):
            _server().evaluate(msg)


def test_required_scope_and_skew():
    s = _server(unsecuredValidatorRequiredScope="read write")
    ch = s.evaluate(oauthbearer.client_initial_response(oauthbearer.unsecured_token("a", now=NOW, scope=["read"])))
    assert json.loads(ch)["status"] == "insufficient_scope"
    ok = _server(unsecuredValidatorRequiredScope="read", unsecuredValidatorAllowableClockSkewMs="5000")
    token = _token({"sub": "a", "exp": NOW - 2, "scope": ["read"]})
    assert ok.evaluate(oauthbearer.client_initial_response(token)) == b"" and ok.complete


def test_authzid_must_match_the_principal():
    token = oauthbearer.unsecured_token("alice", now=NOW)
    with pytest.raises(OAuthBearerError, match="authorization id"):
        _server().evaluate(oauthbearer.client_initial_response(token, authzid="bob"))
    s = _server()
    s.evaluate(oauthbearer.client_initial_response(token, authzid="alice"))
    assert s.complete
