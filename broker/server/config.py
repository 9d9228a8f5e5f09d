"""Broker configuration: Kafka's ``server.properties`` format and setting names.

:func:`parse_properties` reads the Java properties syntax (``#``/``!`` comments, ``key=value``,
``key: value`` or ``key value``, backslash line continuation and escapes).  :meth:`ServerConfig.from_properties`
turns the settings into a typed :class:`ServerConfig`; any unknown key or invalid value raises
:class:`broker.errors.ConfigError` naming the key, what was expected and what was read.  The typed
settings are declared once in :data:`SERVER_CONFIG` (a :class:`pyklog.broker.common.config_def.ConfigDef`,
Kafka's ``KafkaConfig`` definition style); the broker refuses unknown keys.

Settings (Kafka's names and defaults unless noted)::

    broker.id                          required, int >= 0
    listeners                          PLAINTEXT://127.0.0.1:9092 (NAME://host:port,...: each name a
                                       key of listener.security.protocol.map; empty host = all
                                       interfaces, port 0 = an ephemeral port)
    listener.security.protocol.map     PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
    advertised.listeners               = listeners (what Metadata and ZooKeeper tell clients; names a
                                       subset of listeners; port 0 = the bound port)
    inter.broker.listener.name         PLAINTEXT (or security.inter.broker.protocol, not both): the
                                       listener the broker's own connections to other brokers use
    ssl.*, listener.name.<name>.ssl.*  TLS of SSL / SASL_SSL listeners: see pyklog.broker.security.ssl_config
    sasl.enabled.mechanisms, connections.max.reauth.ms, listener.name.<name>.<mechanism>.sasl.jaas.config
                                       SASL of SASL_PLAINTEXT / SASL_SSL listeners (docs/security.md)
    log.dirs / log.dir                 /tmp/pyklog-logs (comma-separated)
    zookeeper.connect                  required (host:port[,host:port][/chroot])
    zookeeper.session.timeout.ms       18000
    zookeeper.connection.timeout.ms    = session timeout
    zookeeper.set.acl                  false (true: znodes created with secure ACLs, docs/security.md)
    zookeeper.jaas.config              (pyklog) the ZooKeeper digest credentials, one JAAS entry
                                       "org.apache.zookeeper.server.auth.DigestLoginModule required
                                       username=... password=...;" (default: the Client section of
                                       the JAAS file named in KAFKA_OPTS, as Kafka); sensitive
    num.partitions                     1      auto-created topics
    default.replication.factor         1
    auto.create.topics.enable          true
    offsets.topic.num.partitions       50
    offsets.topic.replication.factor   1
    message.max.bytes                  1048588 (largest record batch; also the log's limit)
    socket.request.max.bytes           104857600 (larger frame -> connection closed)
    socket.send.buffer.bytes           -1 (OS default and autotuning; Kafka's default is 102400)
    socket.receive.buffer.bytes        -1 (idem)
    num.network.threads                3
    num.io.threads                     8
    num.recovery.threads.per.data.dir  1 (threads per log dir loading the logs at start, closing them at stop)
    queued.max.requests                500
    connections.max.idle.ms            600000
    max.connections                    2147483647 (at the limit the acceptor waits: new connections stay
                                       in the listen backlog until one closes, as Kafka's Acceptor does)
    max.connections.per.ip             2147483647 (a new connection beyond it is closed at once; 0 only
                                       with overrides)
    max.connections.per.ip.overrides   "" ("host:count,host:count"; a host name counts for its addresses)
    queued.max.request.bytes           -1 (unbounded; else the bytes of requests being received or
                                       queued/handled, reserved when a request's size prefix is read:
                                       the network threads stop reading while they are exhausted)
    delete.topic.enable                true
    group.initial.rebalance.delay.ms   3000   (the group coordinator's settings, Kafka's defaults)
    group.min.session.timeout.ms       6000
    group.max.session.timeout.ms       1800000
    group.max.size                     2147483647
    transaction.state.log.num.partitions                          50   (the transaction coordinator's
    transaction.state.log.segment.bytes                           104857600     settings, Kafka's names
    transaction.state.log.replication.factor                      1    and defaults; the replication
    transaction.state.log.load.buffer.size                        5242880       factor is 1 as for
    transaction.max.timeout.ms                                    900000        __consumer_offsets:
    transactional.id.expiration.ms                                604800000     pyklog does not replicate,
    transaction.abort.timed.out.transaction.cleanup.interval.ms   10000         Kafka's default is 3)
    transaction.remove.expired.transaction.cleanup.interval.ms    3600000
    min.insync.replicas                1      (replication, Kafka's names and defaults: acks=all
    replica.lag.time.max.ms            30000   needs this many in-sync replicas; a follower not
    replica.fetch.wait.max.ms          500     caught up within the lag time leaves the ISR; the
    replica.fetch.min.bytes            1       followers' Fetch settings; fetcher threads per
    replica.fetch.max.bytes            1048576 source broker; how often the high watermarks are
    replica.fetch.response.max.bytes   10485760 checkpointed)
    replica.fetch.backoff.ms           1000
    replica.socket.timeout.ms          30000
    num.replica.fetchers               1
    max.incremental.fetch.session.cache.slots 1000 (fetch sessions kept, KIP-227)
    replica.high.watermark.checkpoint.interval.ms 5000
    log.*                              see broker.log.config.LogConfig (log.segment.bytes, log.roll.ms,
                                       log.retention.hours, log.cleanup.policy, ...)

Every other Kafka 3.7 broker setting (:mod:`pyklog.broker.common.kafka_settings`, the ``ssl.*`` and
``sasl.*`` families and their ``listener.name.<listener>.`` forms included) is accepted for
compatibility with a stock Kafka ``server.properties``, checked by Kafka's type and range, and has
no effect in pyklog: one WARNING line at start names them all (names only, never values).  A name
Kafka 3.7 does not know is refused.  ``transaction.state.log.min.isr`` becomes
``__transaction_state``'s ``min.insync.replicas`` when the topic is created (unset: the broker's
``min.insync.replicas`` applies; Kafka's default is 2).

Pure code apart from reading the file; :class:`ServerConfig` is immutable, hence thread-safe.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import socket
from typing import Any

from pyklog.broker.common.config_def import REQUIRED, ConfigDef, Importance, Range, Type
from pyklog.broker.common.kafka_settings import check_value, parse_listener_setting, setting_for
from pyklog.broker.errors import ConfigError
from pyklog.broker.security.authorizer_settings import authorizer_settings
from pyklog.broker.zk.znode_acls import (
    DIGEST_LOGIN_MODULE,
    JAAS_FILE_PROPERTY,
    ZkCredentials,
    credentials_from_environment,
    parse_client_jaas,
)

log = logging.getLogger(__name__)

# Settings handed to broker.log.config.LogConfig.from_properties (Kafka's broker-level names).
LOG_KEYS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.minutes",
        "log.roll.hours",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.retention.check.interval.ms",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.cleaner.backoff.ms",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.type",
    }
)

IGNORED_KEYS: frozenset[str] = frozenset()

# Read by broker.coordinator.group.coordinator.GroupCoordinator.from_config (from ServerConfig.raw).
GROUP_KEYS = frozenset(
    {
        "group.initial.rebalance.delay.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.max.size",
        "offsets.retention.minutes",
        "offsets.retention.check.interval.ms",
    }
)

# Read by broker.server.replica_manager.ReplicaManager (ServerConfig.replication_settings()).
REPLICATION_KEYS = frozenset(
    {
        "min.insync.replicas",
        "replica.lag.time.max.ms",
        "replica.fetch.wait.max.ms",
        "replica.fetch.min.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.backoff.ms",
        "replica.socket.timeout.ms",
        "num.replica.fetchers",
        "replica.high.watermark.checkpoint.interval.ms",
    }
)

# Read by broker.coordinator.transaction.TransactionCoordinator.from_config (ServerConfig.transaction_settings()).
TRANSACTION_KEYS = frozenset(
    {
        "transaction.state.log.num.partitions",
        "transaction.state.log.segment.bytes",
        "transaction.state.log.replication.factor",
        "transaction.state.log.load.buffer.size",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "transaction.abort.timed.out.transaction.cleanup.interval.ms",
        "transaction.remove.expired.transaction.cleanup.interval.ms",
    }
)

_INT32_MAX = 2**31 - 1


def parse_properties(text: str) -> dict[str, str]:
    """Parse Java ``.properties`` text into a dict (later keys win, as in java.util.Properties)."""
    props: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].lstrip()
        i += 1
        if not line or line[0] in "#!":
            continue
        # continuation: an odd number of trailing backslashes joins the next line
        while _odd_trailing_backslashes(line) and i <= len(lines):
            line = line[:-1] + (lines[i].lstrip() if i < len(lines) else "")
            i += 1
        key, value = _split_key_value(line)
        props[_unescape(key)] = _unescape(value)
    return props


def _odd_trailing_backslashes(s: str) -> bool:
    n = len(s) - len(s.rstrip("\\"))
    return n % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    j = 0
    while j < len(line):
        c = line[j]
        if c == "\\":
            j += 2
            continue
        if c in "=: \t\f":
            break
        j += 1
    key = line[:j]
    rest = line[j:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return key, rest


_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _unescape(s: str) -> str:
    if "\\" not in s:
        return s
    out = []
    j = 0
    while j < len(s):
        c = s[j]
        if c == "\\" and j + 1 < len(s):
            nxt = s[j + 1]
            if nxt == "u" and j + 6 <= len(s):
                try:
                    out.append(chr(int(s[j + 2 : j + 6], 16)))
                    j += 6
                    continue
                except ValueError:
                    pass
            out.append(_ESCAPES.get(nxt, nxt))
            j += 2
            continue
        out.append(c)
        j += 1
    return "".join(out)


def load_properties(path: str) -> dict[str, str]:
    """Read a properties file (UTF-8); ConfigError if it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            return parse_properties(f.read())
    except OSError as e:
        raise ConfigError(f"cannot read config file {path!r}: {e.strerror or e}") from e
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file {path!r} is not UTF-8 text: {e}") from e


@dataclasses.dataclass(frozen=True)
class Endpoint:
    """One listener: ``NAME://host:port`` with its security protocol.  ``host`` "" means every interface."""

    security_protocol: str
    host: str
    port: int
    listener_name: str = "PLAINTEXT"

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


#: Kafka's security protocols (``SecurityProtocol``)
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
#: ``listener.security.protocol.map``'s default: each protocol name is a listener name of that protocol
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}

#: The listener and TLS settings (Kafka's names).  Each ``ssl.*`` one may also be given per listener
#: as ``listener.name.<lower-case listener name>.ssl.*`` (:func:`listener_setting`).
#: Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: the key and trust stores, which a running listener
#: takes without a restart (:mod:`pyklog.broker.server.listener_tls`)
SSL_STORE_KEYS = (
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
)

LISTENER_SECURITY_KEYS = frozenset(
    {
        "listener.security.protocol.map",
        "inter.broker.listener.name",
        "security.inter.broker.protocol",
        *SSL_STORE_KEYS,
        "ssl.client.auth",
        "ssl.enabled.protocols",
        "ssl.protocol",
        "ssl.cipher.suites",
        "ssl.endpoint.identification.algorithm",
        "ssl.principal.mapping.rules",
        # KIP-771: may a dynamic keystore change bring another subject DN / other SANs (listener_tls)
        "ssl.allow.dn.changes",
        "ssl.allow.san.changes",
    }
)

#: SASL settings (Kafka's names), read from ``ServerConfig.raw`` by
#: :func:`pyklog.broker.security.sasl_server.listener_settings` (per listener too:
#: ``listener.name.<listener>.<setting>``)
SASL_KEYS = frozenset(
    {
        "sasl.enabled.mechanisms",
        "sasl.mechanism.inter.broker.protocol",
        "connections.max.reauth.ms",
        "sasl.server.max.receive.size",
    }
)

_LISTENER_RE = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.]+\]|[^:/\[\]]*):(-?\d+)$")


def parse_protocol_map(value: str | None) -> dict[str, str]:
    """``listener.security.protocol.map`` (``NAME:PROTOCOL,...``; unset: :data:`DEFAULT_PROTOCOL_MAP`).
    ConfigError on a malformed entry, an unknown protocol or a name given twice."""
    if value is None or not value.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, str] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        name, sep, proto = part.partition(":")
        name, proto = name.strip().upper(), proto.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z0-9_]+", name):
            raise ConfigError(
                f"listener.security.protocol.map: expected LISTENER_NAME:SECURITY_PROTOCOL[,...], read {part!r}"
            )
        if proto not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"listener.security.protocol.map: unknown security protocol {proto!r} for listener {name} "
                f"(one of {', '.join(SECURITY_PROTOCOLS)})"
            )
        if name in out:
            raise ConfigError(f"listener.security.protocol.map: listener {name} is mapped twice in {value!r}")
        out[name] = proto
    return out


def parse_listeners(
    key: str, value: str, protocol_map: dict[str, str] | None = None, *, require_distinct_ports: bool = True
) -> list[Endpoint]:
    """``listeners`` / ``advertised.listeners``: ``NAME://host:port[,...]``, Kafka's checks (each
    listener name once, each port once unless 0, every name in the protocol map)."""
    protocols = DEFAULT_PROTOCOL_MAP if protocol_map is None else protocol_map
    endpoints: list[Endpoint] = []
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        m = _LISTENER_RE.match(part)
        if not m:
            raise ConfigError(f"{key}: expected LISTENER_NAME://host:port, read {part!r}")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if not 0 <= port <= 65535:
            raise ConfigError(f"{key}: port must be 0..65535, read {port} in {part!r}")
        if name not in protocols:
            raise ConfigError(
                f"{key}: no security protocol defined for listener {name} in {part!r} (add it to "
                f"listener.security.protocol.map; known: {', '.join(sorted(protocols))})"
            )
        if host.startswith("["):
            host = host[1:-1]
        endpoints.append(Endpoint(protocols[name], host, port, name))
    if not endpoints:
        raise ConfigError(f"{key}: expected at least one LISTENER_NAME://host:port, read {value!r}")
    names = [e.listener_name for e in endpoints]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError(f"{key}: each listener must have a different name, {', '.join(dup)} repeats in {value!r}")
    if require_distinct_ports:
        ports = [e.port for e in endpoints if e.port != 0]
        dup_ports = sorted({p for p in ports if ports.count(p) > 1})
        if dup_ports:
            raise ConfigError(
                f"{key}: each listener must have a different port, {', '.join(map(str, dup_ports))} repeats in {value!r}"
            )
    return endpoints


def _inter_broker_listener(props: dict[str, str], protocols: dict[str, str], advertised: list[Endpoint]) -> str:
    """Kafka's ``interBrokerListenerName``: ``inter.broker.listener.name`` or the listener named after
    ``security.inter.broker.protocol`` (never both), PLAINTEXT by default; it must be advertised."""
    by_name = props.get("inter.broker.listener.name", "").strip()
    by_protocol = props.get("security.inter.broker.protocol", "").strip()
    if by_name and by_protocol:
        raise ConfigError(
            "inter.broker.listener.name and security.inter.broker.protocol: only one of them may be set, "
            f"read {by_name!r} and {by_protocol!r}"
        )
    if by_protocol:
        name = by_protocol.upper()
        if name not in SECURITY_PROTOCOLS:
            raise ConfigError(
                f"security.inter.broker.protocol: one of {', '.join(SECURITY_PROTOCOLS)}, read {by_protocol!r}"
            )
        key = "security.inter.broker.protocol"
    else:
        name = (by_name or "PLAINTEXT").upper()
        key = "inter.broker.listener.name"
        if name not in protocols:
            raise ConfigError(
                f"inter.broker.listener.name: no security protocol defined for listener {name} in "
                "listener.security.protocol.map"
            )
    if name not in {e.listener_name for e in advertised}:
        raise ConfigError(
            f"{key}: the inter-broker listener {name} must be a listener defined in advertised.listeners "
            f"(or listeners); the configured ones are {', '.join(e.listener_name for e in advertised)}"
        )
    return name


def listener_setting(raw: dict[str, str], listener_name: str, key: str) -> str | None:
    """``key`` for listener ``listener_name``: ``listener.name.<lower-case name>.<key>`` if set, else
    ``key`` (Kafka's per-listener overrides, KIP-103)."""
    value = raw.get(f"listener.name.{listener_name.lower()}.{key}")
    return raw.get(key) if value is None else value


def _server_config_def() -> ConfigDef:
    H, M, L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
    return (
        ConfigDef()
        .define("broker.id", Type.INT, REQUIRED, Range(0, _INT32_MAX), H, "an integer >= 0")
        .define("zookeeper.session.timeout.ms", Type.INT, 18000, Range(1000), H, "ZooKeeper session timeout")
        .define("zookeeper.set.acl", Type.BOOLEAN, False, None, H, "create znodes with secure ACLs")
        .define(
            "zookeeper.jaas.config",
            Type.PASSWORD,
            None,
            None,
            H,
            "ZooKeeper digest credentials: a DigestLoginModule JAAS entry (default: KAFKA_OPTS' JAAS file)",
        )
        .define(
            "zookeeper.connection.timeout.ms",
            Type.INT,
            None,
            Range(1),
            H,
            "ZooKeeper connection timeout (default: the session timeout)",
        )
        .define("num.partitions", Type.INT, 1, Range(1, 1_000_000), M, "partitions of an auto-created topic")
        .define(
            "default.replication.factor", Type.INT, 1, Range(1, 32767), M, "replication factor of an auto-created topic"
        )
        .define("auto.create.topics.enable", Type.BOOLEAN, True, None, H, "create topics on first use")
        .define("delete.topic.enable", Type.BOOLEAN, True, None, H, "DeleteTopics allowed")
        .define(
            "offsets.topic.num.partitions", Type.INT, 50, Range(1, 1_000_000), H, "partitions of __consumer_offsets"
        )
        .define(
            "offsets.topic.replication.factor",
            Type.INT,
            1,
            Range(1, 32767),
            H,
            "replication factor of __consumer_offsets",
        )
        .define("message.max.bytes", Type.INT, 1048588, Range(0, _INT32_MAX), H, "largest record batch")
        .define("socket.request.max.bytes", Type.INT, 104857600, Range(1, _INT32_MAX), H, "largest request frame")
        .define("socket.send.buffer.bytes", Type.INT, -1, Range(-1, _INT32_MAX), H, "SO_SNDBUF, -1: OS default")
        .define("socket.receive.buffer.bytes", Type.INT, -1, Range(-1, _INT32_MAX), H, "SO_RCVBUF, -1: OS default")
        .define("num.network.threads", Type.INT, 3, Range(1, 256), H, "network threads")
        .define("num.io.threads", Type.INT, 8, Range(1, 1024), H, "request handler threads")
        .define("queued.max.requests", Type.INT, 500, Range(1, 1_000_000), H, "request queue size")
        .define("connections.max.idle.ms", Type.LONG, 600000, Range(-1), M, "idle connection timeout")
        .define(
            "max.connections",
            Type.INT,
            _INT32_MAX,
            Range(0),
            M,
            "connections the broker allows at any time; at the limit the acceptor waits",
        )
        .define(
            "max.connections.per.ip",
            Type.INT,
            _INT32_MAX,
            Range(0),
            M,
            "connections allowed from each address; more are closed at once",
        )
        .define(
            "max.connections.per.ip.overrides", Type.STRING, "", None, M, "per-host limits, 'host:count,host:count'"
        )
        .define(
            "queued.max.request.bytes",
            Type.LONG,
            -1,
            Range(-1),
            M,
            "bytes of requests received or queued before the network threads stop reading; -1: no limit",
        )
        .define(
            "num.recovery.threads.per.data.dir",
            Type.INT,
            1,
            Range(1, 1024),
            H,
            "threads per log dir that load (recover) the logs at start-up and close them at shutdown",
        )
        .define(
            "transaction.state.log.min.isr",
            Type.INT,
            None,
            Range(1),
            L,
            "min.insync.replicas of __transaction_state when created (unset: the broker's)",
        )
        # read by broker.coordinator.group.coordinator.GroupCoordinator.from_config (GROUP_KEYS); checked here
        .define("group.initial.rebalance.delay.ms", Type.INT, 3000, Range(0), M, "first rebalance delay")
        .define("group.min.session.timeout.ms", Type.INT, 6000, Range(1), M, "smallest session timeout")
        .define("group.max.session.timeout.ms", Type.INT, 1800000, Range(1), M, "largest session timeout")
        .define("group.max.size", Type.INT, _INT32_MAX, Range(1), M, "members per group")
        .define(
            "offsets.retention.minutes",
            Type.INT,
            10080,
            Range(1),
            H,
            "committed offsets of a group without members expire this long after the later of "
            "their commit and the moment the group became empty (KIP-211); also ZooKeeper groups",
        )
        .define(
            "offsets.retention.check.interval.ms",
            Type.LONG,
            600000,
            Range(1),
            H,
            "how often expired offsets and abandoned groups are looked for",
        )
        # the transaction coordinator (TRANSACTION_KEYS), Kafka's names and defaults
        .define(
            "transaction.state.log.num.partitions",
            Type.INT,
            50,
            Range(1, 1_000_000),
            H,
            "partitions of __transaction_state",
        )
        .define(
            "transaction.state.log.segment.bytes",
            Type.INT,
            104857600,
            Range(1024),
            H,
            "segment size of __transaction_state",
        )
        .define(
            "transaction.state.log.replication.factor",
            Type.INT,
            1,
            Range(1, 32767),
            H,
            "replication factor of __transaction_state (1 as __consumer_offsets: no replication)",
        )
        .define(
            "transaction.state.log.load.buffer.size",
            Type.INT,
            5242880,
            Range(1),
            L,
            "bytes read at a time when loading __transaction_state",
        )
        .define(
            "transaction.max.timeout.ms",
            Type.INT,
            900000,
            Range(1),
            H,
            "largest transaction.timeout.ms a producer may ask for",
        )
        .define(
            "transactional.id.expiration.ms",
            Type.INT,
            604800000,
            Range(1),
            H,
            "an idle transactional id is removed after this long",
        )
        .define(
            "transaction.abort.timed.out.transaction.cleanup.interval.ms",
            Type.INT,
            10000,
            Range(1),
            L,
            "how often timed-out transactions are looked for and aborted",
        )
        .define(
            "transaction.remove.expired.transaction.cleanup.interval.ms",
            Type.INT,
            3600000,
            Range(1),
            L,
            "how often expired transactional ids are looked for",
        )
        # replication (Kafka's ReplicaManager / ReplicaFetcherThread settings)
        .define(
            "min.insync.replicas",
            Type.INT,
            1,
            Range(1),
            H,
            "in-sync replicas an acks=all produce needs (topic config overrides)",
        )
        .define(
            "replica.lag.time.max.ms",
            Type.LONG,
            30000,
            Range(1),
            H,
            "a follower not caught up for this long leaves the ISR",
        )
        .define("replica.fetch.wait.max.ms", Type.INT, 500, Range(0), M, "followers' Fetch max_wait_ms")
        .define("replica.fetch.min.bytes", Type.INT, 1, Range(1), M, "followers' Fetch min_bytes")
        .define("replica.fetch.max.bytes", Type.INT, 1048576, Range(0), M, "followers' Fetch partition_max_bytes")
        .define("replica.fetch.response.max.bytes", Type.INT, 10485760, Range(0), M, "followers' Fetch max_bytes")
        .define("replica.fetch.backoff.ms", Type.INT, 1000, Range(0), M, "follower's pause after a fetch error")
        .define("replica.socket.timeout.ms", Type.INT, 30000, Range(1), M, "followers' socket timeout")
        .define("num.replica.fetchers", Type.INT, 1, Range(1, 64), M, "fetcher threads per source broker")
        .define(
            "max.incremental.fetch.session.cache.slots",
            Type.INT,
            1000,
            Range(0),
            M,
            "incremental fetch sessions (KIP-227) kept at most; 0: every Fetch sessionless",
        )
        .define(
            "replica.high.watermark.checkpoint.interval.ms",
            Type.LONG,
            5000,
            Range(1),
            M,
            "how often the high watermarks are written to replication-offset-checkpoint",
        )
    )


def _define_controller_settings(cdef: ConfigDef) -> ConfigDef:
    """The controller's settings (CONTROLLER_KEYS, read by pyklog.broker.controller through
    :meth:`ServerConfig.controller_settings`), Kafka's names and defaults."""
    H, M = Importance.HIGH, Importance.MEDIUM
    return (
        cdef.define(
            "controlled.shutdown.enable",
            Type.BOOLEAN,
            True,
            None,
            M,
            "a stopping broker first asks the controller to move its leaderships away",
        )
        .define(
            "controlled.shutdown.max.retries",
            Type.INT,
            3,
            Range(1),
            M,
            "controlled shutdown attempts before the broker stops anyway",
        )
        .define(
            "controlled.shutdown.retry.backoff.ms",
            Type.LONG,
            5000,
            Range(0),
            M,
            "wait between controlled shutdown attempts",
        )
        .define(
            "unclean.leader.election.enable",
            Type.BOOLEAN,
            False,
            None,
            H,
            "elect a replica outside the ISR when no ISR member is live (records may be lost)",
        )
        .define(
            "auto.leader.rebalance.enable",
            Type.BOOLEAN,
            True,
            None,
            H,
            "the controller moves leadership back to preferred replicas",
        )
        .define(
            "leader.imbalance.check.interval.seconds",
            Type.LONG,
            300,
            Range(1),
            H,
            "how often the controller checks the leader balance",
        )
        .define(
            "leader.imbalance.per.broker.percentage",
            Type.INT,
            10,
            Range(0, 100),
            H,
            "share of a broker's preferred partitions led elsewhere that triggers a rebalance",
        )
    )


# Read by pyklog.broker.controller (ServerConfig.controller_settings()).
CONTROLLER_KEYS = frozenset(
    {
        "controlled.shutdown.enable",
        "controlled.shutdown.max.retries",
        "controlled.shutdown.retry.backoff.ms",
        "unclean.leader.election.enable",
        "auto.leader.rebalance.enable",
        "leader.imbalance.check.interval.seconds",
        "leader.imbalance.per.broker.percentage",
    }
)


# Read by pyklog.broker.security.authorizer (authorizer_settings): which authorizer, who bypasses it
# and what a resource without ACLs allows.
AUTHORIZER_KEYS = frozenset({"authorizer.class.name", "super.users", "allow.everyone.if.no.acl.found"})


#: what a SASL listener reads per mechanism (``listener.name.<l>.<mechanism>.<setting>``)
_PER_MECHANISM_SETTINGS = frozenset({"sasl.jaas.config", "sasl.server.callback.handler.class"})


def _has_effect(key: str, known: frozenset) -> bool:
    """True for a setting pyklog applies: one it reads, or the per-listener form of one (a SASL
    listener's per-mechanism JAAS config and credential check included)."""
    if key in known:
        return key not in IGNORED_KEYS
    parsed = parse_listener_setting(key)
    if parsed is None:
        return False
    if parsed.mechanism is not None:
        return parsed.base in _PER_MECHANISM_SETTINGS
    return parsed.base in known and parsed.base not in IGNORED_KEYS


#: The typed server settings (besides listeners, log.dirs, zookeeper.connect and log.*).
SERVER_CONFIG = _define_controller_settings(_server_config_def())


@dataclasses.dataclass(frozen=True)
class ServerConfig:
    """Typed broker settings.  Build with :meth:`from_properties` or :meth:`from_file`."""

    broker_id: int
    zookeeper_connect: str
    listener: Endpoint
    advertised_listener: Endpoint
    log_dirs: tuple[str, ...]
    zookeeper_session_timeout_ms: int = 18000
    zookeeper_connection_timeout_ms: int = 18000
    num_partitions: int = 1
    default_replication_factor: int = 1
    auto_create_topics_enable: bool = True
    delete_topic_enable: bool = True
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 1
    message_max_bytes: int = 1048588
    socket_request_max_bytes: int = 104857600
    socket_send_buffer_bytes: int = -1
    socket_receive_buffer_bytes: int = -1
    num_network_threads: int = 3
    num_io_threads: int = 8
    queued_max_requests: int = 500
    connections_max_idle_ms: int = 600000
    max_connections: int = _INT32_MAX
    max_connections_per_ip: int = _INT32_MAX
    max_connections_per_ip_overrides: dict[str, int] = dataclasses.field(default_factory=dict)
    queued_max_request_bytes: int = -1
    log_props: dict[str, str] = dataclasses.field(default_factory=dict)  # log.* + message.max.bytes
    raw: dict[str, str] = dataclasses.field(default_factory=dict, repr=False)  # may hold secrets
    #: every listener (``listener`` is the first) and every advertised one (``advertised_listener``
    #: is the first); empty when built directly: then ``(listener,)`` / ``(advertised_listener,)``
    listeners: tuple[Endpoint, ...] = ()
    advertised_listeners: tuple[Endpoint, ...] = ()
    inter_broker_listener_name: str = "PLAINTEXT"
    listener_security_protocol_map: dict[str, str] = dataclasses.field(
        default_factory=lambda: dict(DEFAULT_PROTOCOL_MAP)
    )

    KNOWN_KEYS = (
        frozenset(
            {
                "broker.id",
                "listeners",
                "advertised.listeners",
                "log.dirs",
                "log.dir",
                "zookeeper.connect",
                "zookeeper.session.timeout.ms",
                "zookeeper.connection.timeout.ms",
                "zookeeper.set.acl",
                "zookeeper.jaas.config",
                "num.partitions",
                "default.replication.factor",
                "auto.create.topics.enable",
                "delete.topic.enable",
                "offsets.topic.num.partitions",
                "offsets.topic.replication.factor",
                "message.max.bytes",
                "socket.request.max.bytes",
                "socket.send.buffer.bytes",
                "socket.receive.buffer.bytes",
                "num.network.threads",
                "num.io.threads",
                "queued.max.requests",
                "connections.max.idle.ms",
                "max.connections",
                "max.connections.per.ip",
                "max.connections.per.ip.overrides",
                "queued.max.request.bytes",
                # read by broker.coordinator.transaction.TransactionCoordinator.from_config: __transaction_state's min ISR
                "transaction.state.log.min.isr",
                "num.recovery.threads.per.data.dir",  # the log manager's load and close pools
                "broker.rack",  # written into the broker registration; rack-aware replica placement (repl-admin)
            }
        )
        | LOG_KEYS
        | IGNORED_KEYS
        | GROUP_KEYS
        | TRANSACTION_KEYS
        | REPLICATION_KEYS
        | CONTROLLER_KEYS
        | AUTHORIZER_KEYS
        | LISTENER_SECURITY_KEYS
        | SASL_KEYS
    )

    @classmethod
    def from_file(cls, path: str, overrides: dict[str, str] | None = None) -> ServerConfig:
        props = load_properties(path)
        if overrides:
            props.update(overrides)
        return cls.from_properties(props)

    @classmethod
    def from_properties(cls, props: dict[str, Any]) -> ServerConfig:
        props = {str(k).strip(): str(v).strip() for k, v in props.items()}
        # Kafka 3.7's settings, their per-listener forms included (listener.name.<l>.ssl.*, ...)
        unknown = sorted(k for k in props if k not in cls.KNOWN_KEYS and setting_for(k) is None)
        if unknown:
            raise ConfigError(
                f"unknown setting{'s' if len(unknown) > 1 else ''} {', '.join(repr(k) for k in unknown)} "
                "(pyklog takes Kafka 3.7's broker settings, listener.name.<listener>.<setting> for the ssl.*, "
                "sasl.* and connection settings; see docs/operations.md)"
            )
        ignored = sorted(k for k in props if not _has_effect(k, cls.KNOWN_KEYS))
        for k in ignored:  # Kafka's type and range rules still apply to a setting without effect
            try:
                check_value(k, props[k])
            except ValueError as e:
                raise ConfigError(str(e)) from None
        if ignored:  # names only: some of these are passwords
            log.warning(
                "settings accepted for compatibility with Kafka, without effect in pyklog: %s", ", ".join(ignored)
            )
        values = SERVER_CONFIG.parse(props)
        zk = props.get("zookeeper.connect", "")
        if not zk:
            raise ConfigError("zookeeper.connect: required (host:port[,host:port...][/chroot]), not set")
        _check_zk_connect(zk)
        authorizer_settings(props)  # an unknown authorizer.class.name stops the broker here
        if props.get("zookeeper.jaas.config"):
            parse_client_jaas(props["zookeeper.jaas.config"], "zookeeper.jaas.config")
        protocols = parse_protocol_map(props.get("listener.security.protocol.map"))
        listeners = parse_listeners("listeners", props.get("listeners", "PLAINTEXT://127.0.0.1:9092"), protocols)
        if props.get("advertised.listeners"):
            advertised = parse_listeners(
                "advertised.listeners", props["advertised.listeners"], protocols, require_distinct_ports=False
            )
            bound = {e.listener_name: e for e in listeners}
            for e in advertised:
                if e.listener_name not in bound:
                    raise ConfigError(
                        f"advertised.listeners: listener {e.listener_name} is not one of listeners "
                        f"({', '.join(bound)}); advertised listener names must be a subset of them"
                    )
                if not e.host:
                    raise ConfigError(
                        f"advertised.listeners: a host is required, read {str(e)!r} in {props['advertised.listeners']!r}"
                    )
        else:
            advertised = list(listeners)
        inter_broker = _inter_broker_listener(props, protocols, advertised)
        dirs_raw = props.get("log.dirs") or props.get("log.dir") or "/tmp/pyklog-logs"
        log_dirs = tuple(d.strip() for d in dirs_raw.split(",") if d.strip())
        if not log_dirs:
            raise ConfigError(f"log.dirs: expected one or more directories, read {dirs_raw!r}")
        session = values["zookeeper.session.timeout.ms"]
        message_max = values["message.max.bytes"]
        log_props = {k: v for k, v in props.items() if k in LOG_KEYS}
        log_props["message.max.bytes"] = str(message_max)
        connection = values["zookeeper.connection.timeout.ms"]
        overrides = parse_connection_overrides(values["max.connections.per.ip.overrides"])
        if values["max.connections.per.ip"] == 0 and not overrides:
            raise ConfigError(
                "max.connections.per.ip: 0 is allowed only with max.connections.per.ip.overrides "
                "set, read 0 and no overrides"
            )
        cfg = cls(
            broker_id=values["broker.id"],
            zookeeper_connect=zk,
            listener=listeners[0],
            advertised_listener=advertised[0],
            listeners=tuple(listeners),
            advertised_listeners=tuple(advertised),
            inter_broker_listener_name=inter_broker,
            listener_security_protocol_map=protocols,
            log_dirs=log_dirs,
            zookeeper_session_timeout_ms=session,
            zookeeper_connection_timeout_ms=session if connection is None else connection,
            num_partitions=values["num.partitions"],
            default_replication_factor=values["default.replication.factor"],
            auto_create_topics_enable=values["auto.create.topics.enable"],
            delete_topic_enable=values["delete.topic.enable"],
            offsets_topic_num_partitions=values["offsets.topic.num.partitions"],
            offsets_topic_replication_factor=values["offsets.topic.replication.factor"],
            message_max_bytes=message_max,
            socket_request_max_bytes=values["socket.request.max.bytes"],
            socket_send_buffer_bytes=values["socket.send.buffer.bytes"],
            socket_receive_buffer_bytes=values["socket.receive.buffer.bytes"],
            num_network_threads=values["num.network.threads"],
            num_io_threads=values["num.io.threads"],
            queued_max_requests=values["queued.max.requests"],
            connections_max_idle_ms=values["connections.max.idle.ms"],
            max_connections=values["max.connections"],
            max_connections_per_ip=values["max.connections.per.ip"],
            max_connections_per_ip_overrides=overrides,
            queued_max_request_bytes=values["queued.max.request.bytes"],
            log_props=log_props,
            raw=props,
        )
        if values["group.min.session.timeout.ms"] > values["group.max.session.timeout.ms"]:
            raise ConfigError(
                "group.min.session.timeout.ms: must not exceed group.max.session.timeout.ms, read "
                f"{props.get('group.min.session.timeout.ms', 6000)} > "
                f"{props.get('group.max.session.timeout.ms', 1800000)}"
            )
        return cfg

    def setting(self, key: str) -> Any:
        """One declared setting's typed value (its default when unset), validated by :data:`SERVER_CONFIG`."""
        return SERVER_CONFIG.parse_value(key, self.raw.get(key))

    def zookeeper_security(self, environ=None) -> tuple[ZkCredentials | None, bool]:
        """``(credentials, set_acl)`` of the broker's ZooKeeper session: ``zookeeper.jaas.config``, else
        the ``Client`` section of the JAAS file named in ``KAFKA_OPTS`` (Kafka's way); ``set_acl`` is
        ``zookeeper.set.acl``.  ConfigError when set.acl has no credentials or they are malformed
        (the message never holds the password)."""
        set_acl = self.setting("zookeeper.set.acl")
        jaas = self.setting("zookeeper.jaas.config")
        if jaas is not None:
            credentials = parse_client_jaas(jaas.value, "zookeeper.jaas.config")
        else:
            credentials = credentials_from_environment(environ)
        if set_acl and credentials is None:
            raise ConfigError(
                "zookeeper.set.acl=true needs ZooKeeper credentials: set zookeeper.jaas.config "
                f'(\'{DIGEST_LOGIN_MODULE} required username="..." password="...";\') or name a JAAS file '
                f"with a Client section in KAFKA_OPTS (-D{JAAS_FILE_PROPERTY}=<file>)"
            )
        return credentials, set_acl

    def transaction_settings(self) -> dict[str, int]:
        """The transaction coordinator's settings as keyword arguments of
        :class:`pyklog.broker.coordinator.transaction.TransactionCoordinator` (validated by
        :data:`SERVER_CONFIG`)."""
        v = {k: SERVER_CONFIG.parse_value(k, self.raw.get(k)) for k in TRANSACTION_KEYS}
        return {
            "num_partitions": v["transaction.state.log.num.partitions"],
            "segment_bytes": v["transaction.state.log.segment.bytes"],
            "replication_factor": v["transaction.state.log.replication.factor"],
            "load_buffer_bytes": v["transaction.state.log.load.buffer.size"],
            "transaction_max_timeout_ms": v["transaction.max.timeout.ms"],
            "transactional_id_expiration_ms": v["transactional.id.expiration.ms"],
            "abort_timed_out_interval_ms": v["transaction.abort.timed.out.transaction.cleanup.interval.ms"],
            "remove_expired_interval_ms": v["transaction.remove.expired.transaction.cleanup.interval.ms"],
        }

    def controller_settings(self) -> dict[str, Any]:
        """The controller's settings (:data:`CONTROLLER_KEYS`), validated by :data:`SERVER_CONFIG`."""
        return {k: SERVER_CONFIG.parse_value(k, self.raw.get(k)) for k in CONTROLLER_KEYS}

    def recovery_threads_per_data_dir(self) -> int:
        """``num.recovery.threads.per.data.dir`` (Kafka's default 1): threads per log dir loading
        the logs at start-up and closing them at shutdown."""
        return int(
            SERVER_CONFIG.parse_value(
                "num.recovery.threads.per.data.dir", self.raw.get("num.recovery.threads.per.data.dir")
            )
        )

    def replication_settings(self) -> dict[str, int]:
        """The replication settings (:data:`REPLICATION_KEYS`, validated by :data:`SERVER_CONFIG`), keyed
        by Kafka's names with ``.`` replaced by ``_`` (``min_insync_replicas``, ``replica_lag_time_max_ms``, ...)."""
        return {k.replace(".", "_"): SERVER_CONFIG.parse_value(k, self.raw.get(k)) for k in REPLICATION_KEYS}

    def socket_server_limits(self) -> dict[str, Any]:
        """The resource bounds as keyword arguments of :class:`pyklog.broker.server.network.SocketServer`."""
        return {
            "max_connections": self.max_connections,
            "max_connections_per_ip": self.max_connections_per_ip,
            "max_connections_per_ip_overrides": dict(self.max_connections_per_ip_overrides),
            "queued_max_request_bytes": self.queued_max_request_bytes,
        }

    def log_config(self):
        """The broker-wide default :class:`broker.log.config.LogConfig` (ConfigError on a bad log.* value)."""
        from pyklog.broker.log.config import LogConfig

        try:
            return LogConfig.from_properties(dict(self.log_props))
        except ConfigError:
            raise
        except (ValueError, TypeError, KeyError) as e:
            raise ConfigError(f"invalid log setting: {e}") from e

    @property
    def advertised_host(self) -> str:
        """The host clients are told to connect to (never empty)."""
        host = self.advertised_listener.host
        if host in ("", "0.0.0.0", "::"):
            return socket.gethostname()
        return host

    @property
    def bind_host(self) -> str:
        return self.listener.host or "0.0.0.0"

    def all_listeners(self) -> tuple[Endpoint, ...]:
        """Every listener the broker binds, the first one first."""
        return self.listeners or (self.listener,)

    def all_advertised_listeners(self) -> tuple[Endpoint, ...]:
        """Every advertised listener (written to ``/brokers/ids/<id>``), the first one first."""
        return self.advertised_listeners or (self.advertised_listener,)

    @property
    def inter_broker_security_protocol(self) -> str:
        return self.listener_security_protocol_map.get(self.inter_broker_listener_name, "PLAINTEXT")

    def listener_setting(self, listener_name: str, key: str) -> str | None:
        """``key`` for one listener (``listener.name.<name>.<key>`` over ``key``), None when unset."""
        return listener_setting(self.raw, listener_name, key)


def parse_connection_overrides(value: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count`` (Kafka's CSV map; the count
    follows the last ``:``, so an IPv6 address may be written as is).  ConfigError on a bad entry."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in value.split(",")):
        if not part:
            continue
        host, sep, count = part.rpartition(":")
        host = host.strip().strip("[]")
        count = count.strip()
        if not sep or not host or not count.isdigit() or int(count) > _INT32_MAX:
            raise ConfigError(
                "max.connections.per.ip.overrides: expected host:count[,host:count...] with "
                f"count 0..{_INT32_MAX}, read {part!r} in {value!r}"
            )
        out[host] = int(count)
    return out


def _check_zk_connect(value: str) -> None:
    hosts, _, chroot = value.partition("/")
    for hp in hosts.split(","):
        hp = hp.strip()
        host, sep, port = hp.rpartition(":")
        if not hp or not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
            raise ConfigError(f"zookeeper.connect: expected host:port[,host:port...][/chroot], read {value!r}")
    if chroot and (chroot.endswith("/") or "//" in chroot):
        raise ConfigError(f"zookeeper.connect: invalid chroot '/{chroot}' in {value!r}")
