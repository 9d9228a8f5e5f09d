"""SASL/OAUTHBEARER (RFC 7628) with Kafka's unsecured JWS tokens, for development only: Kafka's
``OAuthBearerUnsecuredLoginCallbackHandler`` (the client makes an unsigned token, ``alg: none``) and
``OAuthBearerUnsecuredValidatorCallbackHandler`` (the broker accepts any well-formed unsigned token).
Anyone can claim any principal with it: never enable it on a listener others reach.

* Client initial response: ``n,[a=<authzid>],`` ``\\x01auth=Bearer <token>\\x01`` (other
  ``key=value`` pairs allowed) ``\\x01``.
* Token: ``base64url(header).base64url(claims).`` with an empty signature; header ``{"alg":"none"}``;
  claims ``sub`` (the principal; another name with ``unsecuredValidatorPrincipalClaimName``), ``exp``
  (seconds since the epoch, required), optional ``iat`` and ``scope``.  Checks as Kafka's validator:
  not expired, not issued in the future, ``unsecuredValidatorRequiredScope`` all present, both
  within ``unsecuredValidatorAllowableClockSkewMs``.
* A refused token gets the server's error challenge ``{"status":"invalid_token"}``; the client
  answers ``\\x01`` and the exchange fails with that message (Kafka's flow).

Pure code.  Thread-safety: one server object per exchange; values immutable.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping

KVSEP = "\x01"


class OAuthBearerError(Exception):
    """A refused OAUTHBEARER login; the message is Kafka's answer, safe to send."""


def _b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsecured_token(subject: str, lifetime_s: int = 3600, *, now: float | None = None, scope=None) -> str:
    """Kafka's unsecured login token (``unsecuredLoginStringClaim_sub``, ``unsecuredLoginLifetimeSeconds``)."""
    now = time.time() if now is None else now
    claims = {"sub": subject, "iat": now, "exp": now + lifetime_s}
    if scope:
        claims["scope"] = list(scope)
    return f"{_b64url(json.dumps({'alg': 'none'}).encode())}.{_b64url(json.dumps(claims).encode())}."


def client_initial_response(token: str, authzid: str = "") -> bytes:
    gs2 = f"n,a={authzid}," if authzid else "n,,"
    return f"{gs2}{KVSEP}auth=Bearer {token}{KVSEP}{KVSEP}".encode()


class UnsecuredValidator:
    """Kafka's unsecured validator; ``options`` are its JAAS options (``unsecuredValidator*``)."""

    def __init__(self, options: Mapping[str, str] | None = None):
        options = dict(options or {})
        self.principal_claim = options.get("unsecuredValidatorPrincipalClaimName", "sub")
        self.required_scope = set((options.get("unsecuredValidatorRequiredScope") or "").split())
        try:
            self.skew_s = int(options.get("unsecuredValidatorAllowableClockSkewMs") or 0) / 1000.0
        except ValueError:
            raise ValueError("unsecuredValidatorAllowableClockSkewMs must be a number of milliseconds") from None

    def validate(self, token: str, now: float) -> tuple[str, float]:
        """(principal name, expiry in seconds since the epoch); OAuthBearerError when invalid."""
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            raise OAuthBearerError('{"status":"invalid_token"}')
        try:
            header = json.loads(_b64url_decode(parts[0]))
            claims = json.loads(_b64url_decode(parts[1]))
        except (ValueError, UnicodeDecodeError):
            raise OAuthBearerError('{"status":"invalid_token"}') from None
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            raise OAuthBearerError('{"status":"invalid_token"}')
        exp, iat = claims.get("exp"), claims.get("iat")
        sub = claims.get(self.principal_claim)
        if not isinstance(exp, (int, float)) or isinstance(exp, bool) or exp + self.skew_s <= now:
            raise OAuthBearerError('{"status":"invalid_token"}')
        if iat is not None and (not isinstance(iat, (int, float)) or iat - self.skew_s > now):
            raise OAuthBearerError('{"status":"invalid_token"}')
        if not isinstance(sub, str) or not sub.strip():
            raise OAuthBearerError('{"status":"invalid_token"}')
        scope = claims.get("scope") or []
        scope = set(scope.split() if isinstance(scope, str) else scope)
        if not self.required_scope <= scope:
            missing = " ".join(sorted(self.required_scope))
            raise OAuthBearerError(
                json.dumps({"status": "insufficient_scope", "scope": missing}, separators=(",", ":"))
            )
        return sub, float(exp)


class OAuthBearerServer:
    """One OAUTHBEARER exchange (Kafka's ``OAuthBearerSaslServer``).  After success
    :attr:`username` is the token's principal and :attr:`expires_at` its expiry (epoch seconds)."""

    def __init__(self, validator: UnsecuredValidator, clock=time.time):
        self._validator = validator
        self._clock = clock
        self.username: str | None = None
        self.expires_at: float | None = None
        self.complete = False
        self._error: str | None = None

    def __repr__(self) -> str:
        return f"OAuthBearerServer(username={self.username!r}, complete={self.complete})"

    def evaluate(self, response: bytes) -> bytes:
        if self._error is not None:
            if response == KVSEP.encode():
                raise OAuthBearerError(self._error)
            raise OAuthBearerError("Authentication failed: expected %x01 after the error challenge")
        if self.complete:
            raise OAuthBearerError("Authentication failed: unexpected OAUTHBEARER message after the exchange")
        try:
            text = response.decode("utf-8")
        except UnicodeDecodeError:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message: not UTF-8") from None
        gs2, sep, rest = text.partition(KVSEP)
        if not sep or not rest.endswith(KVSEP + KVSEP) or not gs2.startswith(("n,", "y,")) or not gs2.endswith(","):
            raise OAuthBearerError("Invalid OAUTHBEARER client first message")
        authzid = gs2[2:-1]
        if authzid and not authzid.startswith("a="):
            raise OAuthBearerError("Invalid OAUTHBEARER client first message")
        pairs = {}
        for kv in rest[:-2].split(KVSEP):
            k, eq, v = kv.partition("=")
            if not eq:
                raise OAuthBearerError("Invalid OAUTHBEARER client first message")
            pairs[k] = v
        auth = pairs.get("auth", "")
        scheme, _, token = auth.partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise OAuthBearerError("Invalid OAUTHBEARER client first message")
        try:
            sub, exp = self._validator.validate(token.strip(), self._clock())
        except OAuthBearerError as e:
            self._error = str(e)
            return self._error.encode()  # the error challenge; the client answers %x01
        if authzid and authzid[2:] != sub:
            raise OAuthBearerError(
                "Authentication failed: Client requested an authorization id that is different from the token's principal name"
            )
        self.username, self.expires_at, self.complete = sub, exp, True
        return b""
