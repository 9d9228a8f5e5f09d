"""The registry's settings, with Confluent Schema Registry's names.

=====================================  =========================================================
listeners                              ``http://127.0.0.1:8081`` or ``https://...`` (comma-separated;
                                       the first is served)
host.name                              the host other instances reach this one at (default: the
                                       listener's host)
kafkastore.bootstrap.servers           the pyklog cluster (required)
kafkastore.topic                       ``_schemas``
kafkastore.topic.replication.factor    3 (at most the number of brokers)
kafkastore.timeout.ms                  how long a write may wait for the cluster (default 10000)
kafkastore.init.timeout.ms             how long the start may wait for the topic (default 60000)
kafkastore.group.id                    the group the instances elect their primary in
                                       (default ``schema-registry``)
kafkastore.session.timeout.ms          how long the group waits for a silent instance before
                                       electing another primary (default 10000)
kafkastore.security.protocol,          the pyklog clients' security settings (TLS, SASL), by
kafkastore.ssl.*, kafkastore.sasl.*    Kafka's names; other ``kafkastore.*`` settings go to the
                                       producer as they are
schema.compatibility.level             the global level until ``PUT /config`` sets one (``backward``)
leader.eligibility                     ``true``: this instance may be the primary
ssl.keystore.location / .password /    the HTTPS listener's certificate and key (PEM or PKCS12),
.type, ssl.key.password,               the CAs of client certificates, ``ssl.client.auth``
ssl.truststore.*, ssl.client.auth      (none | requested | required): Kafka's names, as Confluent's
authentication.method                  ``NONE`` or ``BASIC`` (HTTP basic authentication)
authentication.realm                   the realm named in the 401 answer (``SchemaRegistry``)
authentication.users.file              BASIC: a file of ``user: password[,role...]`` lines (Jetty's
                                       property-file format; ``MD5:<hex>`` passwords accepted)
=====================================  =========================================================

Secrets (passwords of the users, keystores, the cluster's SASL settings) are never logged and
never appear in an error message or a ``repr``.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pyklog.connector.schema_registry.compatibility import DEFAULT_LEVEL, LEVELS


class RegistryConfigError(ValueError):
    """A missing or malformed setting (the command line exits with 1)."""


def parse_properties(text: str) -> dict[str, str]:
    """Java properties: ``key=value`` or ``key: value`` lines, ``#``/``!`` comments, ``\\`` continuations."""
    out: dict[str, str] = {}
    pending = ""
    for raw in text.splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#!":
            continue
        if line.endswith("\\"):
            pending = line[:-1]
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
        else:
            out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


def load_users(path: str) -> dict[str, str]:
    """``user: password[,role...]`` lines -> ``{user: password}`` (``MD5:<hex>`` kept as written)."""
    users: dict[str, str] = {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RegistryConfigError(f"authentication.users.file: cannot read {path!r}: {e.strerror}") from None
    for user, value in parse_properties(text).items():
        users[user] = value.split(",")[0].strip()
    if not users:
        raise RegistryConfigError(f"authentication.users.file: no user in {path!r}")
    return users


def password_matches(stored: str, given: str) -> bool:
    """Constant-time comparison of a given password with a stored one (plain, or ``MD5:<hex>``)."""
    if stored.startswith("MD5:"):
        return hmac.compare_digest(stored[4:].lower(), hashlib.md5(given.encode()).hexdigest())  # noqa: S324 - Jetty's format
    return hmac.compare_digest(stored.encode(), given.encode())


@dataclass(repr=False)
class RegistryConfig:
    host: str
    port: int
    advertised_url: str
    topic: str
    level: str
    leader_eligible: bool
    group_id: str
    timeout_ms: int
    init_timeout_ms: int
    replication_factor: int
    session_timeout_ms: int
    kafkastore: dict = field(default_factory=dict)  # the kafkastore.* settings without the prefix
    tls: dict | None = None  # the HTTPS listener's ssl.* settings (None: HTTP)
    realm: str = "SchemaRegistry"
    users: dict | None = None  # BASIC authentication: user -> stored password (None: no authentication)

    def __repr__(self) -> str:  # no secret in a repr
        return f"RegistryConfig(listener={self.advertised_url!r}, topic={self.topic!r}, level={self.level!r})"

    @classmethod
    def from_properties(cls, props: dict) -> RegistryConfig:
        listeners = props.get("listeners") or "http://0.0.0.0:8081"
        first = listeners.split(",")[0].strip()
        u = urlsplit(first)
        if u.scheme not in ("http", "https") or not u.port:
            raise RegistryConfigError(f"listeners: expected http://host:port or https://host:port, got {first!r}")
        host = u.hostname or "0.0.0.0"
        store = {k[len("kafkastore.") :]: v for k, v in props.items() if k.startswith("kafkastore.")}
        if not store.get("bootstrap.servers"):
            raise RegistryConfigError("kafkastore.bootstrap.servers is required")
        level = (props.get("schema.compatibility.level") or DEFAULT_LEVEL).upper()
        if level not in LEVELS:
            raise RegistryConfigError(f"schema.compatibility.level: expected one of {', '.join(LEVELS)}, got {level!r}")
        advertised_host = props.get("host.name") or ("127.0.0.1" if host in ("0.0.0.0", "") else host)
        tls = {k: v for k, v in props.items() if k.startswith("ssl.")} if u.scheme == "https" else None
        method = str(props.get("authentication.method", "NONE")).upper()
        if method not in ("NONE", "BASIC"):
            raise RegistryConfigError(f"authentication.method: expected NONE or BASIC, got {method!r}")
        users = None
        if method == "BASIC":
            if not props.get("authentication.users.file"):
                raise RegistryConfigError("authentication.method=BASIC needs authentication.users.file")
            users = load_users(props["authentication.users.file"])
        try:
            return cls(
                host=host,
                port=int(u.port),
                advertised_url=f"{u.scheme}://{advertised_host}:{u.port}",
                topic=store.get("topic") or "_schemas",
                level=level,
                leader_eligible=str(props.get("leader.eligibility", "true")).lower() == "true",
                group_id=store.get("group.id") or "schema-registry",
                timeout_ms=int(store.get("timeout.ms", 10000)),
                init_timeout_ms=int(store.get("init.timeout.ms", 60000)),
                replication_factor=int(store.get("topic.replication.factor", 3)),
                session_timeout_ms=int(store.get("session.timeout.ms", 10000)),
                kafkastore=store,
                tls=tls,
                realm=props.get("authentication.realm") or "SchemaRegistry",
                users=users,
            )
        except ValueError as e:
            raise RegistryConfigError(str(e)) from None
