"""SASL/PLAIN (RFC 4616) as Kafka's ``PlainSaslServer``: one message
``[authzid] NUL username NUL password``; the authorization id, when given, must equal the user name.

The server checks the password with a credential check ``check(username, password) -> bool``:
Kafka's default (:func:`jaas_check`, the ``user_<name>="<password>"`` options of the listener's
``PlainLoginModule`` entry) or a pluggable Python callable named ``package.module:function``
(:func:`load_callback`, the ``plain.sasl.server.callback.handler.class`` setting).

Errors are :class:`PlainError` with Kafka's messages (``Authentication failed: Invalid username or
password``), never holding the password.  Pure code.  Thread-safe.
"""

from __future__ import annotations

import hmac
import importlib
from collections.abc import Callable

INVALID_CREDENTIALS = "Authentication failed: Invalid username or password"

CredentialCheck = Callable[[str, str], bool]


class PlainError(Exception):
    """A refused PLAIN login; the message is Kafka's and safe to send to the client."""


def client_token(username: str, password: str, authzid: str = "") -> bytes:
    return f"{authzid}\0{username}\0{password}".encode()


def parse_token(token: bytes) -> tuple[str, str, str]:
    """``(authzid, username, password)``; PlainError with Kafka's message for a malformed token."""
    try:
        text = token.decode("utf-8")
    except UnicodeDecodeError:
        raise PlainError("Invalid SASL/PLAIN response: not UTF-8") from None
    parts = text.split("\0")
    if len(parts) != 3:
        raise PlainError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
    authzid, username, password = parts
    if not username:
        raise PlainError("Authentication failed: username not specified")
    if not password:
        raise PlainError("Authentication failed: password not specified")
    if authzid and authzid != username:
        raise PlainError("Authentication failed: Client requested an authorization id that is different from username")
    return authzid, username, password


def jaas_check(users: dict[str, str]) -> CredentialCheck:
    """Kafka's ``PlainServerCallbackHandler``: the password of ``user_<name>``, compared in
    constant time; an unknown user is refused the same way."""
    table = {u: p.encode("utf-8") for u, p in users.items()}

    def check(username: str, password: str) -> bool:
        expected = table.get(username)
        given = password.encode("utf-8")
        if expected is None:
            hmac.compare_digest(given, given)
            return False
        return hmac.compare_digest(expected, given)

    return check


def load_callback(spec: str) -> CredentialCheck:
    """``package.module:function`` -> that callable; ValueError saying what is wrong."""
    module_name, sep, attr = spec.strip().partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"a PLAIN credential check is named package.module:function, read {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ValueError(f"cannot import the PLAIN credential check module {module_name!r}: {e}") from e
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{spec!r}: {attr!r} is not a callable of {module_name}")
    return fn


class PlainServer:
    """One PLAIN exchange: :meth:`evaluate` the client's single message (returns b"")."""

    def __init__(self, check: CredentialCheck):
        self._check = check
        self.username: str | None = None
        self.complete = False

    def __repr__(self) -> str:
        return f"PlainServer(username={self.username!r}, complete={self.complete})"

    def evaluate(self, token: bytes) -> bytes:
        if self.complete or self.username is not None:
            raise PlainError("Authentication failed: unexpected SASL/PLAIN message after the exchange")
        _, username, password = parse_token(token)
        self.username = username
        try:
            ok = bool(self._check(username, password))
        except Exception:  # noqa: BLE001 - a failing pluggable check refuses, never crashes
            ok = False
        if not ok:
            raise PlainError(INVALID_CREDENTIALS)
        self.complete = True
        return b""
