"""The client's side of SASL: PLAIN and SCRAM-SHA-256/512 over a
:class:`~pyklog.connector.client.BrokerConnection`, after its ApiVersions negotiation (Kafka's
``SaslClientAuthenticator``): SaslHandshake v1, then SaslAuthenticate (v2 where the broker has it)
carrying the tokens.  A broker answering a session lifetime (KIP-368, ``connections.max.reauth.ms``)
gets a re-authentication on the same connection before it ends: the connection calls
:func:`authenticate` again once 85-95 % of the lifetime has passed (:func:`reauth_delay_s`), at its
next request with nothing in flight.

:class:`SaslCredentials` is what a client is given (``sasl=`` of BrokerConnection / ClusterClient,
or the Kafka client settings ``sasl.mechanism`` + ``sasl.username`` / ``sasl.password`` or
``sasl.jaas.config``, :meth:`SaslCredentials.from_config`); its password is out of ``repr``.

Errors: :class:`~pyklog.broker.errors.SaslAuthenticationError` (the broker's message, never the
password), :class:`~pyklog.broker.errors.UnsupportedSaslMechanismError` (the broker's enabled list).

Thread-safety: :func:`authenticate` runs on the one thread that owns the connection at that moment.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyklog.broker.errors import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    UnsupportedSaslMechanismError,
    error_for_code,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security import plain, scram
from pyklog.broker.security.jaas import JaasError, parse_jaas_config

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")

#: ``exchange(api_key, body, version) -> response body``: one request on the connection
Exchange = Callable[[int, dict, int], dict]


@dataclass(frozen=True)
class SaslCredentials:
    """A SASL mechanism with its user name and password (the password out of ``repr``)."""

    mechanism: str
    username: str
    password: str = field(repr=False)

    def __post_init__(self):
        mech = self.mechanism.upper()
        if mech not in MECHANISMS:
            raise ValueError(
                f"sasl.mechanism: {self.mechanism!r} is not supported (supported: {', '.join(MECHANISMS)})"
            )
        object.__setattr__(self, "mechanism", mech)
        if not self.username:
            raise ValueError("SASL needs a user name (sasl.username, or username in sasl.jaas.config)")
        if not self.password:
            raise ValueError("SASL needs a password (sasl.password, or password in sasl.jaas.config)")

    @classmethod
    def from_config(cls, config: Mapping[str, object]) -> SaslCredentials | None:
        """From Kafka's client settings: ``sasl.mechanism`` (default GSSAPI, not supported: PLAIN
        is taken when a user name is given without a mechanism) and ``sasl.username`` /
        ``sasl.password`` (librdkafka's) or ``sasl.jaas.config`` (the Java client's
        ``PlainLoginModule`` / ``ScramLoginModule required username="..." password="...";``).
        None when no SASL setting is present."""

        def text(name: str):
            v = config.get(name)
            return getattr(v, "value", v)  # a config Password holds its secret in .value

        mech = text("sasl.mechanism") or text("sasl.mechanisms")
        user, password = text("sasl.username"), text("sasl.password")
        jaas = text("sasl.jaas.config")
        if jaas:
            try:
                entry = parse_jaas_config(str(jaas))
            except JaasError as e:
                raise ValueError(f"sasl.jaas.config: {e}") from None
            user = user or entry.username
            password = password or entry.password
        if not (mech or user or password):
            return None
        return cls(str(mech or "PLAIN"), str(user or ""), str(password or ""))


def reauth_delay_s(session_lifetime_ms: int) -> float | None:
    """When to re-authenticate after a session of that lifetime (Kafka's client picks 85-95 % of
    it); None for a session without an end."""
    if session_lifetime_ms <= 0:
        return None
    return session_lifetime_ms / 1000.0 * random.uniform(0.85, 0.95)


def authenticate(exchange: Exchange, creds: SaslCredentials, versions: Mapping[int, tuple[int, int]]) -> int:
    """One SASL exchange over ``exchange``; ``versions`` are the broker's ApiVersions ranges.
    Returns the session lifetime in milliseconds (0: no end)."""
    if ApiKey.SASL_HANDSHAKE not in versions or ApiKey.SASL_AUTHENTICATE not in versions:
        raise IllegalSaslStateError("the broker does not support SaslHandshake v1 / SaslAuthenticate (too old?)")
    hs = exchange(ApiKey.SASL_HANDSHAKE, {"mechanism": creds.mechanism}, 1)
    code = hs.get("error_code", 0)
    if code == UnsupportedSaslMechanismError.code:
        raise UnsupportedSaslMechanismError(
            f"the broker does not enable SASL mechanism {creds.mechanism} "
            f"(enabled: {', '.join(hs.get('mechanisms') or []) or 'none'})"
        )
    if code:
        raise error_for_code(code, f"SaslHandshake {creds.mechanism}")
    version = min(2, versions[ApiKey.SASL_AUTHENTICATE][1])

    def step(token: bytes) -> dict:
        resp = exchange(ApiKey.SASL_AUTHENTICATE, {"auth_bytes": token}, version)
        code = resp.get("error_code", 0)
        if code:
            raise error_for_code(code, resp.get("error_message") or "SASL authentication failed")
        return resp

    if creds.mechanism == "PLAIN":
        resp = step(plain.client_token(creds.username, creds.password))
    else:
        client = scram.ScramClient(scram.mechanism(creds.mechanism), creds.username, creds.password)
        server_first = step(client.first_message())["auth_bytes"]
        try:
            final = client.final_message(server_first)
        except scram.ScramError as e:
            raise SaslAuthenticationError(f"SCRAM: {e}") from None
        resp = step(final)
        try:
            client.verify_server_final(resp["auth_bytes"])
        except scram.ScramError as e:
            raise SaslAuthenticationError(f"SCRAM: {e}") from None
    return int(resp.get("session_lifetime_ms") or 0)
