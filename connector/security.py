"""The clients' security settings, with Kafka's client config names: :class:`ClientSecurityConfig`.

Names (as Kafka's producer, consumer and admin clients take them; the Spark source and sink take the
same with a ``kafka.`` prefix)::

    security.protocol        PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL (default PLAINTEXT)
    ssl.truststore.location / .password / .type, ssl.truststore.certificates
                             the CAs that sign the brokers' certificates (PEM or PKCS12; unset: the
                             system's CAs)
    ssl.keystore.location / .password / .type, ssl.key.password,
    ssl.keystore.certificate.chain / ssl.keystore.key
                             the client's own certificate, for brokers with ssl.client.auth
    ssl.endpoint.identification.algorithm
                             https (default: the broker's certificate must name the host connected
                             to) or "" (not checked)
    ssl.enabled.protocols, ssl.protocol, ssl.cipher.suites
    sasl.mechanism           PLAIN | SCRAM-SHA-256 | SCRAM-SHA-512 (default GSSAPI, as Kafka)
    sasl.jaas.config         ``org.apache.kafka.common.security.plain.PlainLoginModule required
                             username="alice" password="...";`` (the username and password are read
                             from it when sasl.username / sasl.password are not given)
    sasl.username, sasl.password   (librdkafka's names)

The object is an immutable, picklable value (Spark ships it to executors).  Secrets (passwords, the
JAAS text, inline private keys) are kept out of ``repr``/``str`` and out of every error message; the
TLS context is built where a connection opens (:meth:`ClientSecurityConfig.ssl_context`), never
pickled.

Thread-safe: immutable.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyklog.broker.errors import ConfigError, NetworkError
from pyklog.broker.security import ssl_factory

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: the ssl.* client settings read into :attr:`ClientSecurityConfig.ssl`
SSL_KEYS = frozenset(
    {
        "ssl.truststore.location",
        "ssl.truststore.password",
        "ssl.truststore.type",
        "ssl.truststore.certificates",
        "ssl.keystore.location",
        "ssl.keystore.password",
        "ssl.keystore.type",
        "ssl.key.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.endpoint.identification.algorithm",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
    }
)
SASL_KEYS = frozenset({"sasl.mechanism", "sasl.jaas.config", "sasl.username", "sasl.password"})
#: every client config name :meth:`ClientSecurityConfig.from_config` reads
SECURITY_KEYS = frozenset({"security.protocol"}) | SSL_KEYS | SASL_KEYS
#: settings whose values are secrets
SECRET_KEYS = frozenset(
    {
        "ssl.truststore.password",
        "ssl.keystore.password",
        "ssl.key.password",
        "ssl.keystore.key",
        "sasl.jaas.config",
        "sasl.password",
    }
)

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


class SslAuthenticationError(NetworkError):
    """The TLS handshake with a broker failed (unknown CA, the certificate does not name the host,
    the broker wants a client certificate): not retried, as Kafka's ``SslAuthenticationException``."""

    retriable = False


def _python_name(key: str) -> str:
    return key.replace(".", "_")


@dataclass(frozen=True)
class ClientSecurityConfig:
    """A client's security settings (see the module docstring).  Build with :meth:`from_config`."""

    security_protocol: str = "PLAINTEXT"
    #: the ssl.* settings given, as ``((name, value), ...)`` sorted (hidden from repr: may hold secrets)
    ssl: tuple = field(default=(), repr=False)
    sasl_mechanism: str = "GSSAPI"
    sasl_jaas_config: str | None = field(default=None, repr=False)
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)

    @classmethod
    def from_config(cls, config: Mapping | None, *, prefix: str = "") -> ClientSecurityConfig:
        """The security settings among ``config`` (Kafka's names, or python ones with ``_``; with
        ``prefix``, e.g. ``kafka.``, only names carrying it).  Other names are ignored.  ConfigError
        (naming the setting, never a secret's value) for a bad protocol or a malformed JAAS text."""
        values: dict[str, str] = {}
        for k, v in (config or {}).items():
            if v is None:
                continue
            name = str(k)
            if prefix:
                if not name.startswith(prefix):
                    continue
                name = name[len(prefix) :]
            dotted = name if name in SECURITY_KEYS else name.replace("_", ".")
            if dotted in SECURITY_KEYS:
                values[dotted] = str(v)
        proto = values.get("security.protocol", "PLAINTEXT").strip().upper()
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"{prefix}security.protocol: one of {', '.join(SECURITY_PROTOCOLS)}, read {values['security.protocol']!r}"
            )
        jaas = values.get("sasl.jaas.config")
        username = values.get("sasl.username")
        password = values.get("sasl.password")
        if jaas:
            options = parse_jaas_options(jaas, f"{prefix}sasl.jaas.config")
            username = username if username is not None else options.get("username")
            password = password if password is not None else options.get("password")
        return cls(
            security_protocol=proto,
            ssl=tuple(sorted((k, v) for k, v in values.items() if k in SSL_KEYS)),
            sasl_mechanism=values.get("sasl.mechanism", "GSSAPI").strip().upper(),
            sasl_jaas_config=jaas,
            sasl_username=username,
            sasl_password=password,
        )

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def to_config(self) -> dict[str, str]:
        """The settings by Kafka's names (secrets included: for building a client, never for display)."""
        if self == PLAINTEXT:
            return {}
        out = {"security.protocol": self.security_protocol, **dict(self.ssl)}
        for key, value in (
            ("sasl.mechanism", self.sasl_mechanism if self.uses_sasl else None),
            ("sasl.jaas.config", self.sasl_jaas_config),
            ("sasl.username", self.sasl_username),
            ("sasl.password", self.sasl_password),
        ):
            if value is not None:
                out[key] = value
        return out

    def sasl_credentials(self):
        """The :class:`~pyklog.broker.security.sasl_client.SaslCredentials` a SASL_PLAINTEXT /
        SASL_SSL connection logs in with (None otherwise); ConfigError (without the password) when
        the mechanism is not supported or the user name or password is missing."""
        if not self.uses_sasl:
            return None
        from pyklog.broker.security.sasl_client import SaslCredentials

        try:
            return SaslCredentials.from_config(self.to_config())
        except ValueError as e:
            raise ConfigError(str(e)) from None

    def ssl_setting(self, key: str) -> str | None:
        for k, v in self.ssl:
            if k == key:
                return v
        return None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context for connections (None for PLAINTEXT / SASL_PLAINTEXT).  ConfigError naming
        the setting for an unreadable truststore or keystore."""
        if not self.uses_tls:
            return None
        return ssl_factory.client_context(self.ssl_setting)

    def __str__(self) -> str:
        names = ", ".join(k for k, _ in self.ssl)
        return f"ClientSecurityConfig({self.security_protocol}, ssl settings: [{names}], sasl.mechanism={self.sasl_mechanism})"


def parse_jaas_options(text: str, setting: str = "sasl.jaas.config") -> dict[str, str]:
    """The ``key="value"`` options of a JAAS login module line (``<LoginModule class> required
    k="v" ...;``).  ConfigError without the text (it holds a password) when it is malformed."""
    body = text.strip()
    if not body.endswith(";"):
        raise ConfigError(f"{setting}: expected '<LoginModule> required key=\"value\" ...;' (the text ends with ';')")
    head = body.split(None, 2)
    if len(head) < 2 or head[1].rstrip(";") not in ("required", "requisite", "sufficient", "optional"):
        raise ConfigError(f"{setting}: expected '<LoginModule> required key=\"value\" ...;'")
    return {m.group(1): re.sub(r"\\(.)", r"\1", m.group(2)) for m in _JAAS_OPTION.finditer(body)}


def split_security(config: Mapping | None) -> tuple[dict, ClientSecurityConfig]:
    """``config`` without its security settings, and those settings as a :class:`ClientSecurityConfig`."""
    rest = {k: v for k, v in (config or {}).items() if not is_security_key(k)}
    return rest, ClientSecurityConfig.from_config(config)


def is_security_key(name) -> bool:
    """True for a security setting's name (Kafka's, or python's with ``_``)."""
    name = str(name)
    return name in SECURITY_KEYS or name.replace("_", ".") in SECURITY_KEYS


def as_security(value) -> ClientSecurityConfig | None:
    """``security=`` of a client: a :class:`ClientSecurityConfig`, a mapping of Kafka's names, or None."""
    if value is None or isinstance(value, ClientSecurityConfig):
        return value
    if isinstance(value, Mapping):
        return ClientSecurityConfig.from_config(value)
    raise ConfigError(f"security: a ClientSecurityConfig or a dict of security settings, got {type(value).__name__}")


PLAINTEXT = ClientSecurityConfig()
