"""The client's side of a SASL exchange, pure: PLAIN and SCRAM-SHA-256/512 over any request/response
``exchange`` (SaslHandshake v1, then SaslAuthenticate, v2 where the broker has it), and the
credentials a client is given (:class:`SaslCredentials`, password out of ``repr``).

Used by pyklog's clients (:mod:`pyklog.connector.sasl_client`, which adds re-authentication) and by
the broker's own connections to other brokers (replica fetchers, transaction markers, controlled
shutdown), which authenticate with :func:`inter_broker_credentials`.

Errors: :class:`~pyklog.broker.errors.SaslAuthenticationError` (the broker's message, never the
password), :class:`~pyklog.broker.errors.UnsupportedSaslMechanismError` (the broker's enabled list).
Thread-safety: immutable values; :func:`authenticate` runs on the thread that owns the connection.
"""

from __future__ import annotations

import logging
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

log = logging.getLogger(__name__)

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")

#: ``exchange(api_key, body, version) -> response body``: one request on the connection
Exchange = Callable[[int, dict, int], dict]


@dataclass(frozen=True)
class SaslCredentials:
    """A SASL mechanism with its user name and password (the password out of ``repr``)."""

    mechanism: str
    username: str
    password: str = field(default="", repr=False)

    def __post_init__(self):
        mech = self.mechanism.upper()
        if mech not in MECHANISMS:
            raise ValueError(
                f"sasl.mechanism: {self.mechanism!r} is not supported (supported: {', '.join(MECHANISMS)})"
            )
        object.__setattr__(self, "mechanism", mech)
        if not self.username:
            raise ValueError("SASL needs a user name (sasl.username, or username in sasl.jaas.config)")
        if not self.password and mech != "OAUTHBEARER":  # OAUTHBEARER: an unsecured token for username
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
            user = user or entry.username or entry.options.get("unsecuredLoginStringClaim_sub")
            password = password or entry.password
        if not (mech or user or password):
            return None
        return cls(str(mech or "PLAIN"), str(user or ""), str(password or ""))


def inter_broker_credentials(raw: Mapping[str, str], listener_name: str, security_protocol: str):
    """The credentials a broker's connections to other brokers authenticate with (Kafka's
    inter-broker SASL client): ``sasl.mechanism.inter.broker.protocol`` (default: the first of the
    listener's enabled mechanisms), the user name and password of that mechanism's
    ``listener.name.<listener>.<mechanism lower-case>.sasl.jaas.config``.  None on a listener
    without SASL, or (logged) when the JAAS config names no user and password."""
    if not security_protocol.startswith("SASL_"):
        return None
    prefix = f"listener.name.{listener_name.lower()}."
    enabled = raw.get(prefix + "sasl.enabled.mechanisms") or raw.get("sasl.enabled.mechanisms") or ""
    mech = (raw.get("sasl.mechanism.inter.broker.protocol") or enabled.split(",")[0]).strip().upper()
    key = f"{prefix}{mech.lower()}.sasl.jaas.config"
    try:
        entry = parse_jaas_config(raw.get(key) or "")
        return SaslCredentials(mech, entry.username or "", entry.password or "")
    except (JaasError, ValueError) as e:
        log.warning(
            "connections to other brokers cannot authenticate with %s: %s (set username and password in %s)",
            mech,
            e,
            key,
        )
        return None


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
    elif creds.mechanism == "OAUTHBEARER":
        from pyklog.broker.security import oauthbearer

        resp = step(oauthbearer.client_initial_response(oauthbearer.unsecured_token(creds.username)))
        if resp.get("auth_bytes"):  # the broker's error challenge: acknowledge it, then it fails
            resp = step(oauthbearer.KVSEP.encode())
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
