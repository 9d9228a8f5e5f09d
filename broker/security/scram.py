"""SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka speaks them: the credential
format, the client's and the server's state machines.  Pure code: no I/O, no logging.

Kafka's ``org.apache.kafka.common.security.scram``:

* A stored credential (Kafka's ``ScramCredential``, written at ``/config/users/<user>`` under the
  mechanism's name) is ``salt=<b64>,stored_key=<b64>,server_key=<b64>,iterations=<n>``:
  ``SaltedPassword = Hi(password, salt, i)`` (PBKDF2-HMAC), ``ClientKey = HMAC(SaltedPassword,
  "Client Key")``, ``StoredKey = H(ClientKey)``, ``ServerKey = HMAC(SaltedPassword, "Server Key")``.
  The password itself is never stored.
* Iterations: 4096 (Kafka's ``minIterations`` for both mechanisms) to 16384 (Kafka's
  ``AlterUserScramCredentials`` limit).
* The exchange: client-first ``n,,n=<user>,r=<client nonce>`` (a gs2 header, the user name with
  ``=`` and ``,`` escaped as ``=3D`` / ``=2C``, optional extensions such as Kafka's ``tokenauth``
  ignored); server-first ``r=<client nonce + server nonce>,s=<b64 salt>,i=<n>``; client-final
  ``c=biws,r=<nonce>,p=<b64 ClientProof>``; server-final ``v=<b64 ServerSignature>`` (or ``e=...``).

Failures raise :class:`ScramError` whose message never holds a credential (the server turns it into
Kafka's generic authentication failure; the client shows it).

Thread-safety: the state machines belong to one connection (one thread at a time); values are immutable.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from dataclasses import dataclass

#: Kafka's limits (``ScramMechanism.minIterations`` and AlterUserScramCredentials' maximum)
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096


class ScramError(Exception):
    """A malformed message, a wrong proof, an unknown user: the message holds no credential."""


@dataclass(frozen=True)
class ScramMechanism:
    """One SCRAM mechanism: its SASL name, hash and Kafka's wire type id (AlterUserScramCredentials'
    ``Mechanism`` int8: 1 SCRAM-SHA-256, 2 SCRAM-SHA-512)."""

    name: str
    hash_name: str
    type_id: int

    @property
    def digest_size(self) -> int:
        return hashlib.new(self.hash_name).digest_size

    def hi(self, password: bytes, salt: bytes, iterations: int) -> bytes:
        return hashlib.pbkdf2_hmac(self.hash_name, password, salt, iterations)

    def hmac(self, key: bytes, data: bytes) -> bytes:
        return hmac.new(key, data, self.hash_name).digest()

    def h(self, data: bytes) -> bytes:
        return hashlib.new(self.hash_name, data).digest()


SCRAM_SHA_256 = ScramMechanism("SCRAM-SHA-256", "sha256", 1)
SCRAM_SHA_512 = ScramMechanism("SCRAM-SHA-512", "sha512", 2)
MECHANISMS: dict[str, ScramMechanism] = {m.name: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}
BY_TYPE_ID: dict[int, ScramMechanism] = {m.type_id: m for m in (SCRAM_SHA_256, SCRAM_SHA_512)}


def mechanism(name: str) -> ScramMechanism:
    """The mechanism of that SASL name; ScramError for another name."""
    try:
        return MECHANISMS[name.upper()]
    except KeyError:
        raise ScramError(f"unknown SCRAM mechanism {name!r} (expected one of {', '.join(MECHANISMS)})") from None


def check_iterations(iterations: int) -> None:
    if not MIN_ITERATIONS <= iterations <= MAX_ITERATIONS:
        raise ScramError(f"iterations must be {MIN_ITERATIONS}..{MAX_ITERATIONS}, read {iterations}")


@dataclass(frozen=True)
class ScramCredential:
    """A stored SCRAM credential (Kafka's ``ScramCredential``).  Its keys are out of ``repr``: the
    server key lets whoever holds it impersonate the broker."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    def __repr__(self) -> str:
        return f"ScramCredential(iterations={self.iterations})"

    __str__ = __repr__

    def to_kafka_string(self) -> str:
        """Kafka's ``ScramCredentialUtils.credentialToString``."""
        b64 = base64.b64encode
        return (
            f"salt={b64(self.salt).decode()},stored_key={b64(self.stored_key).decode()},"
            f"server_key={b64(self.server_key).decode()},iterations={self.iterations}"
        )

    @classmethod
    def from_kafka_string(cls, text: str) -> ScramCredential:
        """Parse Kafka's format; ScramError (naming the missing or bad field, never its value)."""
        fields: dict[str, str] = {}
        for part in text.split(","):
            k, sep, v = part.partition("=")
            if not sep:
                raise ScramError("a SCRAM credential is salt=...,stored_key=...,server_key=...,iterations=N")
            fields[k.strip()] = v.strip()
        missing = [k for k in ("salt", "stored_key", "server_key", "iterations") if k not in fields]
        if missing:
            raise ScramError(f"SCRAM credential without {', '.join(missing)}")
        try:
            salt = base64.b64decode(fields["salt"], validate=True)
            stored = base64.b64decode(fields["stored_key"], validate=True)
            server = base64.b64decode(fields["server_key"], validate=True)
        except (binascii.Error, ValueError):
            raise ScramError("SCRAM credential with a value that is not base64") from None
        try:
            iterations = int(fields["iterations"])
        except ValueError:
            raise ScramError("SCRAM credential iterations is not a number") from None
        return cls(salt, stored, server, iterations)

    @classmethod
    def from_salted_password(
        cls, mech: ScramMechanism, salted_password: bytes, salt: bytes, iterations: int
    ) -> ScramCredential:
        """What a broker keeps of AlterUserScramCredentials' salted password (Kafka's
        ``ScramFormatter.generateCredential``)."""
        client_key = mech.hmac(salted_password, b"Client Key")
        return cls(salt, mech.h(client_key), mech.hmac(salted_password, b"Server Key"), iterations)

    @classmethod
    def from_password(
        cls, mech: ScramMechanism, password: str, iterations: int = DEFAULT_ITERATIONS, salt: bytes | None = None
    ) -> ScramCredential:
        """A new credential with a random salt (or ``salt``)."""
        check_iterations(iterations)
        salt = salt if salt is not None else secure_salt()
        return cls.from_salted_password(mech, mech.hi(password.encode("utf-8"), salt, iterations), salt, iterations)


def secure_salt() -> bytes:
    """Kafka's ``ScramFormatter.secureRandomBytes``: a random salt."""
    return secrets.token_bytes(32)


def nonce() -> str:
    """A printable random nonce (no ``,``)."""
    return secrets.token_urlsafe(24)


def escape_username(name: str) -> str:
    """RFC 5802's saslname: ``=`` -> ``=3D``, ``,`` -> ``=2C`` (Kafka's ``ScramFormatter.saslName``)."""
    return name.replace("=", "=3D").replace(",", "=2C")


def unescape_username(sasl_name: str) -> str:
    """Kafka's ``ScramFormatter.username``: ScramError for an ``=`` not followed by 2C or 3D."""
    out, i = [], 0
    while i < len(sasl_name):
        c = sasl_name[i]
        if c == "=":
            code = sasl_name[i + 1 : i + 3]
            if code == "2C":
                out.append(",")
            elif code == "3D":
                out.append("=")
            else:
                raise ScramError("invalid username: '=' must be followed by 2C or 3D")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    out = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=":
            raise ScramError(f"invalid {what}: expected comma-separated attributes such as r=...")
        out.append((part[0], part[2:]))
    return out


def _b64decode(value: str, what: str) -> bytes:
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ScramError(f"invalid {what}: not base64") from None


def _xor(a: bytes, b: bytes) -> bytes:
    return bytes(x ^ y for x, y in zip(a, b, strict=True))


class ScramClient:
    """The client side: :meth:`first_message`, then :meth:`final_message` (given server-first), then
    :meth:`verify_server_final`.  The password is out of ``repr``."""

    def __init__(self, mech: ScramMechanism, username: str, password: str, client_nonce: str | None = None):
        self.mechanism = mech
        self.username = username
        self._password = password
        self._nonce = client_nonce or nonce()
        self._bare = f"n={escape_username(username)},r={self._nonce}"
        self._server_signature: bytes | None = None

    def __repr__(self) -> str:
        return f"ScramClient({self.mechanism.name}, username={self.username!r})"

    def first_message(self) -> bytes:
        return ("n,," + self._bare).encode("utf-8")

    def final_message(self, server_first: bytes) -> bytes:
        try:
            text = server_first.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("invalid server-first message: not UTF-8") from None
        attrs = dict(_attributes(text, "server-first message"))
        if "e" in attrs:
            raise ScramError(f"the server refused: {attrs['e']}")
        try:
            full_nonce, salt_b64, iterations = attrs["r"], attrs["s"], int(attrs["i"])
        except (KeyError, ValueError):
            raise ScramError("invalid server-first message: expected r=, s= and i=") from None
        if not full_nonce.startswith(self._nonce) or len(full_nonce) == len(self._nonce):
            raise ScramError("invalid server-first message: the server nonce does not extend the client nonce")
        if iterations < MIN_ITERATIONS:
            raise ScramError(f"the server asks for {iterations} iterations, fewer than the minimum {MIN_ITERATIONS}")
        mech = self.mechanism
        salted = mech.hi(self._password.encode("utf-8"), _b64decode(salt_b64, "salt"), iterations)
        without_proof = f"c=biws,r={full_nonce}"
        auth_message = f"{self._bare},{text},{without_proof}".encode()
        client_key = mech.hmac(salted, b"Client Key")
        signature = mech.hmac(mech.h(client_key), auth_message)
        proof = base64.b64encode(_xor(client_key, signature)).decode()
        self._server_signature = mech.hmac(mech.hmac(salted, b"Server Key"), auth_message)
        return f"{without_proof},p={proof}".encode()

    def verify_server_final(self, server_final: bytes) -> None:
        text = server_final.decode("utf-8", "replace")
        attrs = dict(_attributes(text, "server-final message"))
        if "e" in attrs:
            raise ScramError(f"the server refused: {attrs['e']}")
        if self._server_signature is None or "v" not in attrs:
            raise ScramError("invalid server-final message")
        if not hmac.compare_digest(_b64decode(attrs["v"], "server signature"), self._server_signature):
            raise ScramError("the server's signature is wrong: it does not know this credential")


class ScramServer:
    """The server side of one exchange: :meth:`evaluate` the client-first message (returns
    server-first), then the client-final message (returns server-final; :attr:`complete` then
    True).  ``lookup(username)`` gives the stored credential or None.  Every failure raises
    :class:`ScramError`; a missing user and a wrong password fail the same way (at the proof: a
    missing user gets a fake exchange with a random salt, so nothing says which it was)."""

    def __init__(self, mech: ScramMechanism, lookup, server_nonce: str | None = None):
        self.mechanism = mech
        self._lookup = lookup
        self._server_nonce = server_nonce or nonce()
        self._state = 0  # 0 expect client-first, 1 expect client-final, 2 complete, 3 failed
        self.username: str | None = None
        self._credential: ScramCredential | None = None
        self._known_user = False
        self._first_bare = self._server_first = self._nonce = ""

    def __repr__(self) -> str:
        return f"ScramServer({self.mechanism.name}, username={self.username!r}, complete={self.complete})"

    @property
    def complete(self) -> bool:
        return self._state == 2

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state == 0:
                return self._client_first(token)
            if self._state == 1:
                return self._client_final(token)
            raise ScramError("unexpected SCRAM message after the exchange ended")
        except ScramError:
            self._state = 3
            raise

    def _client_first(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise ScramError("invalid client-first message: not UTF-8") from None
        gs2, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or gs2 not in ("n", "y") or (authzid and not authzid.startswith("a=")):
            raise ScramError("invalid client-first message: expected a gs2 header n,, or n,a=<authzid>,")
        attrs = _attributes(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise ScramError("invalid client-first message: expected n=<user>,r=<nonce>")
        username = unescape_username(attrs[0][1])
        if not username:
            raise ScramError("invalid client-first message: empty user name")
        if authzid and unescape_username(authzid[2:]) != username:
            raise ScramError(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.username = username
        cred = self._lookup(username)
        self._known_user = cred is not None and cred.iterations >= MIN_ITERATIONS
        if cred is None:  # a fake credential: the exchange goes on and fails at the proof
            size = self.mechanism.digest_size
            cred = ScramCredential(secure_salt(), secrets.token_bytes(size), secrets.token_bytes(size), MIN_ITERATIONS)
        self._credential = cred
        self._nonce = attrs[1][1] + self._server_nonce
        self._first_bare = bare
        salt = base64.b64encode(cred.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={cred.iterations}"
        self._state = 1
        return self._server_first.encode()

    def _client_final(self, token: bytes) -> bytes:
        text = token.decode("utf-8", "replace")
        proof_at = text.rfind(",p=")
        if proof_at < 0:
            raise ScramError("invalid client-final message: no proof")
        without_proof = text[:proof_at]
        attrs = dict(_attributes(without_proof, "client-final message"))
        if attrs.get("r") != self._nonce:
            raise ScramError("Invalid client nonce in the final client message.")
        if "c" not in attrs:
            raise ScramError("invalid client-final message: no channel binding")
        proof = _b64decode(text[proof_at + 3 :], "client proof")
        cred = self._credential
        assert cred is not None
        mech = self.mechanism
        auth_message = f"{self._first_bare},{self._server_first},{without_proof}".encode()
        signature = mech.hmac(cred.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("Invalid client credentials")
        client_key = _xor(proof, signature)
        if not hmac.compare_digest(mech.h(client_key), cred.stored_key) or not self._known_user:
            raise ScramError("Invalid client credentials")
        self._state = 2
        server_signature = mech.hmac(cred.server_key, auth_message)
        return b"v=" + base64.b64encode(server_signature)
