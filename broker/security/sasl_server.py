"""The broker's side of SASL on one connection: Kafka's ``SaslServerAuthenticator``.

A SASL_PLAINTEXT or SASL_SSL connection starts unauthenticated.  The network processor hands every
request frame of it to :meth:`SaslServerAuthenticator.on_frame` before anything reaches KafkaApis:

* ApiVersions (first, optional): handed on to KafkaApis (:data:`PASS`), which answers as on any
  listener (its answer advertises SaslHandshake and SaslAuthenticate);
* SaslHandshake v0/v1 naming an enabled mechanism: answered with no error and the enabled list; a
  mechanism not enabled: UNSUPPORTED_SASL_MECHANISM with the enabled list, then the connection closes;
* after a v0 handshake the frames are raw SASL tokens (size-prefixed, no Kafka header) answered the
  same way; after v1, SaslAuthenticate requests carrying the tokens (v1+ answer the session lifetime);
* a failed login: SASL_AUTHENTICATION_FAILED with Kafka's message (KIP-152: PLAIN's "Invalid username
  or password"; SCRAM's generic "... invalid credentials with SASL mechanism SCRAM-SHA-256", no hint
  whether the user exists), then the connection closes; logged once at INFO without any credential;
* any other request before authentication closes the connection (during SaslAuthenticate, after
  answering it with ILLEGAL_SASL_STATE when ``error_response`` can form its error body, as Kafka).

Once authenticated, :attr:`principal` is ``User:<username>`` and frames go to KafkaApis, except a
SaslHandshake, which starts a re-authentication (KIP-368, same mechanism and same user, or it fails)
on the same connection.  With ``connections.max.reauth.ms`` > 0 a session ends that long after its
authentication: :meth:`on_frame` closes the connection at the first request after that, unless it
is a SaslHandshake (a re-authentication).

Thread-safety: one authenticator per connection, used by its network thread only.  The shared
:class:`ScramCredentialCache` is thread-safe.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from pyklog.broker.errors import IllegalSaslStateError, SaslAuthenticationError, UnsupportedSaslMechanismError
from pyklog.broker.protocol import SUPPORTED, ApiKey, api_name, decode_request, decode_request_header, encode_response
from pyklog.broker.security import oauthbearer, plain, scram
from pyklog.broker.security.principal import KafkaPrincipal

log = logging.getLogger(__name__)

PLAIN = "PLAIN"
OAUTHBEARER = "OAUTHBEARER"
SUPPORTED_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", OAUTHBEARER)

#: what :meth:`SaslServerAuthenticator.on_frame` asks of the network layer
PASS, SEND, SEND_AND_CLOSE, CLOSE = 0, 1, 2, 3

_NONE = 0


def scram_failure_message(mechanism: str) -> str:
    """Kafka's answer to a failed SCRAM login (``SaslServerAuthenticator``, KIP-152)."""
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}"


class ScramCredentialCache:
    """The SCRAM credentials the broker knows: user -> {mechanism name -> ScramCredential} (Kafka's
    ``CredentialCache``), filled from ZooKeeper and updated by its change notifications.  Thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._users: dict[str, dict[str, scram.ScramCredential]] = {}

    def get(self, mechanism: str, user: str) -> scram.ScramCredential | None:
        with self._lock:
            return self._users.get(user, {}).get(mechanism)

    def set_user(self, user: str, credentials: dict[str, scram.ScramCredential]) -> None:
        with self._lock:
            if credentials:
                self._users[user] = dict(credentials)
            else:
                self._users.pop(user, None)

    def replace_all(self, users: dict[str, dict[str, scram.ScramCredential]]) -> None:
        with self._lock:
            self._users = {u: dict(c) for u, c in users.items() if c}

    def users(self) -> list[str]:
        with self._lock:
            return sorted(self._users)

    def __repr__(self) -> str:
        return f"ScramCredentialCache({len(self._users)} users)"


@dataclass(frozen=True)
class SaslListenerSettings:
    """One SASL listener's settings: the enabled mechanisms (in the order announced), PLAIN's
    credential check (None when PLAIN is not enabled) and ``connections.max.reauth.ms`` (0: sessions
    never end)."""

    listener_name: str
    enabled_mechanisms: tuple[str, ...]
    plain_check: plain.CredentialCheck | None = None
    reauth_ms: int = 0
    #: OAUTHBEARER's unsecured-JWS validator (None when OAUTHBEARER is not enabled)
    oauth_validator: oauthbearer.UnsecuredValidator | None = None
    #: the largest frame accepted before authentication (``sasl.server.max.receive.size``)
    max_receive_size: int = 524288

    def __repr__(self) -> str:
        return (
            f"SaslListenerSettings({self.listener_name}, mechanisms={list(self.enabled_mechanisms)}, "
            f"reauth_ms={self.reauth_ms})"
        )


# states
_INITIAL, _HANDSHAKE, _AUTHENTICATE, _RAW_AUTHENTICATE, _COMPLETE, _FAILED = range(6)

ErrorResponse = Callable[[object, dict, int, str], "list | None"]


class SaslServerAuthenticator:
    """One connection's authentication (see the module docstring).  ``error_response(header, body,
    code, message)`` forms another API's error response (None: close without answering)."""

    def __init__(
        self,
        settings: SaslListenerSettings,
        credentials: ScramCredentialCache,
        peer: str = "",
        *,
        error_response: ErrorResponse | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.settings = settings
        self.credentials = credentials
        self.peer = peer
        self._error_response = error_response
        self._clock = clock
        self._state = _INITIAL
        self._mechanism: str | None = None
        self._server = None
        self.principal: KafkaPrincipal | None = None
        self._session_expires: float | None = None
        self._reauthenticating = False
        self._client_id: str | None = None
        self.session_lifetime_ms = 0

    def __repr__(self) -> str:
        return f"SaslServerAuthenticator(peer={self.peer}, mechanism={self._mechanism}, principal={self.principal})"

    @property
    def complete(self) -> bool:
        return self._state == _COMPLETE

    @property
    def max_receive_size(self) -> int:
        return self.settings.max_receive_size

    @property
    def mechanism(self) -> str | None:
        return self._mechanism

    def session_expired(self, now: float | None = None) -> bool:
        exp = self._session_expires
        return exp is not None and (self._clock() if now is None else now) >= exp

    # ------------------------------------------------------------------ frames

    def on_frame(self, frame) -> tuple[int, list | None]:
        """One request frame (size prefix excluded): ``(PASS, None)`` hands it to KafkaApis,
        ``(SEND, chunks)`` answers it here, ``(SEND_AND_CLOSE, chunks)`` answers then closes,
        ``(CLOSE, None)`` closes without an answer."""
        if self._state == _FAILED:
            return CLOSE, None
        if self._state == _RAW_AUTHENTICATE:
            return self._raw_token(bytes(frame))
        if self._state == _COMPLETE:
            key = int.from_bytes(bytes(frame[:2]), "big", signed=True) if len(frame) >= 2 else -1
            if key == ApiKey.SASL_HANDSHAKE:
                self._state = _HANDSHAKE
                self._reauthenticating = True
            elif self.session_expired():
                log.info(
                    "closing connection from %s (principal %s): its SASL session expired "
                    "(connections.max.reauth.ms=%d) and the client did not re-authenticate",
                    self.peer,
                    self.principal,
                    self.settings.reauth_ms,
                )
                return CLOSE, None
            else:
                return PASS, None
        try:
            header, offset = decode_request_header(frame)
        except Exception as e:  # noqa: BLE001 - garbage from the network
            return self._fail_close(f"unreadable request header ({e})")
        self._client_id = header.client_id
        key = header.api_key
        if key == ApiKey.API_VERSIONS and self._state == _INITIAL:
            # a version too new is answered with UNSUPPORTED_VERSION (KIP-511) and may be retried
            # lower, as Kafka's authenticator allows
            if header.api_version <= SUPPORTED[ApiKey.API_VERSIONS][1]:
                self._state = _HANDSHAKE
            return PASS, None
        if key == ApiKey.SASL_HANDSHAKE and self._state in (_INITIAL, _HANDSHAKE):
            return self._handshake(header, frame, offset)
        if key == ApiKey.SASL_AUTHENTICATE and self._state == _AUTHENTICATE:
            return self._authenticate(header, frame, offset)
        if self._state == _AUTHENTICATE:
            return self._illegal(header, frame, offset)
        return self._fail_close(f"unexpected {api_name(key)} request during the SASL handshake")

    def _decode(self, header, frame, offset) -> dict | None:
        rng = SUPPORTED.get(header.api_key) if isinstance(header.api_key, ApiKey) else None
        if rng is None or not rng[0] <= header.api_version <= rng[1]:
            return None
        try:
            return decode_request(header, frame, offset)
        except Exception:  # noqa: BLE001
            return None

    def _handshake(self, header, frame, offset) -> tuple[int, list | None]:
        body = self._decode(header, frame, offset)
        if body is None:
            return self._fail_close(f"malformed or unsupported SaslHandshake v{header.api_version}")
        enabled = list(self.settings.enabled_mechanisms)
        mech = body["mechanism"]
        if mech not in enabled:
            self._state = _FAILED
            log.info(
                "failed authentication with %s (client %r): unsupported SASL mechanism %r (enabled: %s)",
                self.peer,
                header.client_id,
                mech[:64],
                ", ".join(enabled),
            )
            return SEND_AND_CLOSE, self._respond(
                header, {"error_code": UnsupportedSaslMechanismError.code, "mechanisms": enabled}
            )
        if self._reauthenticating and mech != self._mechanism:
            self._state = _FAILED
            log.info(
                "failed re-authentication with %s (principal %s): mechanism %s differs from %s",
                self.peer,
                self.principal,
                mech,
                self._mechanism,
            )
            return SEND_AND_CLOSE, self._respond(
                header, {"error_code": IllegalSaslStateError.code, "mechanisms": enabled}
            )
        self._mechanism = mech
        if mech == PLAIN:
            assert self.settings.plain_check is not None
            self._server = plain.PlainServer(self.settings.plain_check)
        elif mech == OAUTHBEARER:
            assert self.settings.oauth_validator is not None
            self._server = oauthbearer.OAuthBearerServer(self.settings.oauth_validator)
        else:
            m = scram.mechanism(mech)
            self._server = scram.ScramServer(m, lambda user, _m=mech: self.credentials.get(_m, user))
        self._state = _AUTHENTICATE if header.api_version >= 1 else _RAW_AUTHENTICATE
        return SEND, self._respond(header, {"error_code": _NONE, "mechanisms": enabled})

    def _evaluate(self, token: bytes) -> tuple[bytes | None, str | None]:
        """(the server's answer, None) or (None, the failure message for the client)."""
        try:
            return self._server.evaluate(token), None
        except (plain.PlainError, oauthbearer.OAuthBearerError) as e:
            return None, str(e)
        except scram.ScramError:
            return None, scram_failure_message(self._mechanism or "")

    def _finish(self) -> None:
        user = self._server.username
        principal = KafkaPrincipal.user(user)
        if self._reauthenticating and principal != self.principal:
            raise SaslAuthenticationError(
                f"Cannot change principals during re-authentication from {self.principal}: {principal}"
            )
        self.principal = principal
        self._state = _COMPLETE
        self._reauthenticating = False
        reauth = self.settings.reauth_ms
        token_expiry = getattr(self._server, "expires_at", None)
        if reauth > 0 and token_expiry is not None:  # KIP-368: a token's session ends with the token too
            reauth = max(0, min(reauth, int((token_expiry - time.time()) * 1000)))
            reauth = reauth or 1
        self.session_lifetime_ms = reauth
        self._session_expires = self._clock() + reauth / 1000.0 if reauth > 0 else None
        self._server = None

    def _log_failure(self, message: str) -> None:
        log.info(
            "failed %sauthentication with %s (client %r, mechanism %s): %s",
            "re-" if self._reauthenticating else "",
            self.peer,
            self._client_id,
            self._mechanism,
            message,
        )

    def _authenticate(self, header, frame, offset) -> tuple[int, list | None]:
        body = self._decode(header, frame, offset)
        if body is None:
            return self._fail_close(f"malformed or unsupported SaslAuthenticate v{header.api_version}")
        answer, failure = self._step(body["auth_bytes"] or b"")
        if failure is not None:
            return SEND_AND_CLOSE, self._respond(
                header,
                {
                    "error_code": SaslAuthenticationError.code,
                    "error_message": failure,
                    "auth_bytes": b"",
                    "session_lifetime_ms": 0,
                },
            )
        lifetime = self.session_lifetime_ms if self._state == _COMPLETE else 0
        return SEND, self._respond(
            header,
            {"error_code": _NONE, "error_message": None, "auth_bytes": answer or b"", "session_lifetime_ms": lifetime},
        )

    def _step(self, token: bytes) -> tuple[bytes | None, str | None]:
        """One token of the exchange, whichever framing carried it: ``(answer, failure)``; a
        completed exchange is finished (the principal set), a failure ends the session (logged once)."""
        answer, failure = self._evaluate(token)
        if failure is None and self._server.complete:
            try:
                self._finish()
            except SaslAuthenticationError as e:
                failure = str(e)
        if failure is not None:
            self._state = _FAILED
            self._log_failure(failure)
        return answer, failure

    def _raw_token(self, token: bytes) -> tuple[int, list | None]:
        answer, failure = self._step(token)
        if failure is not None:
            return CLOSE, None
        answer = answer or b""
        return SEND, [len(answer).to_bytes(4, "big"), answer]

    def _illegal(self, header, frame, offset) -> tuple[int, list | None]:
        self._state = _FAILED
        message = f"Unexpected Kafka request of type {api_name(header.api_key)} during SASL authentication."
        log.info("closing connection from %s (client %r): %s", self.peer, header.client_id, message)
        body = self._decode(header, frame, offset)
        if body is not None and self._error_response is not None:
            try:
                chunks = self._error_response(header, body, IllegalSaslStateError.code, message)
            except Exception:  # noqa: BLE001
                chunks = None
            if chunks is not None:
                return SEND_AND_CLOSE, chunks
        return CLOSE, None

    def _fail_close(self, why: str) -> tuple[int, list | None]:
        self._state = _FAILED
        log.info("closing connection from %s (client %r): %s", self.peer, self._client_id, why)
        return CLOSE, None

    @staticmethod
    def _respond(header, body: dict) -> list:
        return encode_response(header.api_key, header.api_version, header.correlation_id, body)


def listener_settings(
    raw: dict[str, str], listener_name: str, load_callback=plain.load_callback
) -> SaslListenerSettings:
    """Read one SASL listener's settings from the broker's properties (Kafka's names; a
    ``listener.name.<listener lower-case>.`` prefixed key wins over the plain one):
    ``sasl.enabled.mechanisms``, ``<mechanism lower-case>.sasl.jaas.config`` (listener-prefixed only,
    as Kafka's brokers), ``plain.sasl.server.callback.handler.class`` (listener-prefixed: a Python
    callable ``package.module:function(username, password) -> bool``), ``connections.max.reauth.ms``.
    ValueError (naming the setting, never a secret) for what cannot work."""
    from pyklog.broker.security.jaas import PLAIN_LOGIN_MODULE, JaasError, parse_jaas_config

    prefix = f"listener.name.{listener_name.lower()}."

    def get(name: str) -> str | None:
        v = raw.get(prefix + name)
        return v if v is not None else raw.get(name)

    text = get("sasl.enabled.mechanisms")
    if text is None or not text.strip():
        raise ValueError(
            "sasl.enabled.mechanisms: Kafka's default GSSAPI (Kerberos) is not supported; "
            f"set it (or {prefix}sasl.enabled.mechanisms) to PLAIN, SCRAM-SHA-256 and/or SCRAM-SHA-512"
        )
    mechs = tuple(m.strip().upper() for m in text.split(",") if m.strip())
    bad = [m for m in mechs if m not in SUPPORTED_MECHANISMS]
    if bad:
        raise ValueError(
            f"sasl.enabled.mechanisms: {', '.join(bad)} not supported (supported: {', '.join(SUPPORTED_MECHANISMS)})"
        )
    check = None
    if PLAIN in mechs:
        cb_key = prefix + "plain.sasl.server.callback.handler.class"
        jaas_key = prefix + "plain.sasl.jaas.config"
        if raw.get(cb_key):
            check = load_callback(raw[cb_key])
        elif raw.get(jaas_key):
            try:
                entry = parse_jaas_config(raw[jaas_key])
            except JaasError as e:
                raise ValueError(f"{jaas_key}: {e}") from None
            if entry.login_module != PLAIN_LOGIN_MODULE:
                raise ValueError(f"{jaas_key}: expected {PLAIN_LOGIN_MODULE}, read {entry.login_module}")
            check = plain.jaas_check(entry.plain_users())
        else:
            raise ValueError(f"PLAIN is enabled on listener {listener_name}: set {jaas_key} or {cb_key}")
    validator = None
    if OAUTHBEARER in mechs:
        key = prefix + "oauthbearer.sasl.jaas.config"
        options = {}
        if raw.get(key):
            try:
                options = parse_jaas_config(raw[key]).options
            except JaasError as e:
                raise ValueError(f"{key}: {e}") from None
        validator = oauthbearer.UnsecuredValidator(options)
    reauth_text = get("connections.max.reauth.ms")
    try:
        reauth = int(reauth_text) if reauth_text not in (None, "") else 0
    except ValueError:
        raise ValueError(
            f"connections.max.reauth.ms: expected a number of milliseconds, read {reauth_text!r}"
        ) from None
    if reauth < 0:
        raise ValueError(f"connections.max.reauth.ms: expected 0 (off) or more, read {reauth}")
    size_text = get("sasl.server.max.receive.size")
    try:
        max_size = int(size_text) if size_text not in (None, "") else 524288
    except ValueError:
        raise ValueError(f"sasl.server.max.receive.size: expected a number of bytes, read {size_text!r}") from None
    if max_size < 1:
        raise ValueError(f"sasl.server.max.receive.size: expected 1 or more, read {max_size}")
    return SaslListenerSettings(listener_name, mechs, check, reauth, validator, max_size)
