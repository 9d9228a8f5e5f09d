"""Dynamic broker configs (KIP-226) as Kafka's ZooKeeper mode has them: Kafka's ``DynamicBrokerConfig``
and ``DynamicLogConfig``.

Two levels are stored in ZooKeeper (:meth:`pyklog.broker.zk.cluster.ZkCluster.alter_broker_config`):

* ``/config/brokers/<id>``: one broker's settings, source ``DYNAMIC_BROKER_CONFIG`` (2);
* ``/config/brokers/<default>``: the cluster-wide defaults (the resource name ``""``), source
  ``DYNAMIC_DEFAULT_BROKER_CONFIG`` (3).

The effective settings are ``server.properties`` overridden by the cluster default, overridden by the
per-broker value (Kafka's ``updateCurrentConfig``: one merged property map, so within one level the
finest unit still wins: ``log.retention.ms`` over ``log.retention.hours``).  Every broker reads both
nodes at start-up (before its logs open, so a restart applies them at once) and watches them; a change
rebuilds the broker-wide default :class:`~pyklog.broker.log.config.LogConfig` and hands it to the
reconfigure callbacks, which give it to every log (a topic override still wins over it), as Kafka's
``DynamicLogConfig.reconfigure`` does.

Which settings can change: every setting Kafka 3.7 updates dynamically
(:mod:`pyklog.broker.common.kafka_settings`, ``per-broker`` and ``cluster-wide``, with Kafka's rules:
per-broker settings only at ``/config/brokers/<id>``, the ``ssl.*`` store settings only with a
``listener.name.<listener>.`` prefix, passwords only per broker and only with
``password.encoder.secret`` set, then stored encoded as Kafka's ``PasswordEncoder`` does).  Of these
pyklog applies live :data:`DYNAMIC_CONFIGS`: the broker synonyms of topic configs that a live log takes
at once (Kafka's ``DynamicLogConfig``), ``message.max.bytes``, the connection limits
``max.connections``, ``max.connections.per.ip``, ``max.connections.per.ip.overrides`` (Kafka's
``DynamicConnectionQuota``: for the next connection, open ones are kept), the replication
throttles, and a TLS listener's ``listener.name.<l>.ssl.*`` keystore and truststore
(:mod:`pyklog.broker.server.listener_tls`, through :meth:`DynamicBrokerConfig.add_validator` and
:meth:`~DynamicBrokerConfig.add_props_listener`); the others are stored and described and have no effect (``num.io.threads``, for one,
cannot resize pyklog's pool).  A read-only setting is refused with INVALID_REQUEST "Cannot update
these configs dynamically: Set(...)" (Kafka's message); a name neither Kafka 3.7 nor pyklog knows is
INVALID_CONFIG; a bad value is INVALID_REQUEST "Invalid config value for resource ...", as Kafka's
``ZkAdminManager``.  Nothing is stored when a request is refused.

A stored password is decoded when a level is read (Kafka's ``fromPersistentProps``): the levels hold
it in clear, in memory only, for the component that uses it; one that cannot be decoded is dropped
with an ERROR naming the setting (never the value).

Thread-safety: :class:`DynamicBrokerConfig` is thread-safe (one lock guards the two levels and the
current LogConfig; the reconfigure callbacks run outside it, on the thread that made the change: a
request handler thread or kazoo's callback thread).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from pyklog.broker.common.kafka_settings import (
    LISTENER_ONLY_DYNAMIC_SETTINGS,
    PER_BROKER,
    READ_ONLY,
    check_value,
    is_sensitive,
    parse_listener_setting,
    setting_for,
    update_mode,
)
from pyklog.broker.errors import ConfigError, InvalidConfigError, InvalidRequestError

log = logging.getLogger(__name__)

#: the settings a live broker applies without a restart (Kafka's names)
DYNAMIC_CONFIGS = frozenset(
    {
        "log.segment.bytes",
        "log.roll.ms",
        "log.roll.hours",
        "log.index.interval.bytes",
        "log.index.size.max.bytes",
        "log.flush.interval.messages",
        "log.flush.interval.ms",
        "log.retention.ms",
        "log.retention.minutes",
        "log.retention.hours",
        "log.retention.bytes",
        "log.cleanup.policy",
        "log.cleaner.delete.retention.ms",
        "log.cleaner.min.cleanable.ratio",
        "log.cleaner.min.compaction.lag.ms",
        "log.segment.delete.delay.ms",
        "log.message.timestamp.type",
        "message.max.bytes",
        # Kafka's DynamicConnectionQuota: the socket server's limits, for the next connection
        "max.connections",
        "max.connections.per.ip",
        "max.connections.per.ip.overrides",
        # replication throttles (KIP-73; broker.server.replication_quota reads them at each use)
        "leader.replication.throttled.rate",
        "follower.replication.throttled.rate",
    }
)
THROTTLE_RATE_CONFIGS = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
CONNECTION_CONFIGS = ("max.connections", "max.connections.per.ip", "max.connections.per.ip.overrides")

#: Kafka broker settings that exist but are read-only; the names pyklog reads from
#: server.properties are added from ServerConfig.KNOWN_KEYS
_KAFKA_READ_ONLY = frozenset(
    {
        "broker.id",
        "log.dirs",
        "log.dir",
        "listeners",
        "advertised.listeners",
        "zookeeper.connect",
        "security.inter.broker.protocol",
        "inter.broker.listener.name",
        "broker.rack",
        "process.roles",
        "node.id",
        "log.retention.check.interval.ms",
        "log.cleaner.backoff.ms",
        "log.flush.scheduler.interval.ms",
        "log.flush.offset.checkpoint.interval.ms",
        "log.roll.minutes",
        "num.io.threads",
        "num.network.threads",
    }
)

LEVEL_BROKER = "broker"  # /config/brokers/<id>
LEVEL_DEFAULT = "default"  # /config/brokers/<default>


def read_only_configs() -> frozenset[str]:
    from pyklog.broker.server.config import ServerConfig
    from pyklog.broker.server.config_helper import _BROKER_EXTRA_DEFAULTS

    return (frozenset(ServerConfig.KNOWN_KEYS) | _KAFKA_READ_ONLY | frozenset(_BROKER_EXTRA_DEFAULTS)) - DYNAMIC_CONFIGS


def resource_text(name: str) -> str:
    """Kafka's ``ConfigResource.toString`` of a broker resource."""
    return f"ConfigResource(type=BROKER, name='{name}')"


def is_dynamic(name: str) -> bool:
    """True if ``name`` may be stored as a dynamic broker config: a setting pyklog applies live
    (:data:`DYNAMIC_CONFIGS`) or one Kafka 3.7 updates dynamically (its per-listener forms included)."""
    if name in DYNAMIC_CONFIGS:
        return True
    mode = update_mode(name)
    return mode is not None and mode != READ_ONLY


def _kafka_set(names) -> str:
    return f"Set({', '.join(sorted(names))})"


def validate_dynamic_configs(
    resource_name: str,
    props: Mapping[str, str],
    static_props: Mapping[str, str] | None = None,
    *,
    new_passwords: bool = True,
) -> None:
    """Refuse a dynamic broker config set (the complete new content of one level) as Kafka's
    ``DynamicBrokerConfig.validateConfigs``: INVALID_CONFIG for a name neither Kafka 3.7 nor pyklog
    knows, INVALID_REQUEST for read-only names, ``ssl.*`` store settings without a listener prefix,
    per-broker settings at the cluster default, passwords without ``password.encoder.secret`` and bad
    values (each message names the resource, never a sensitive value).  ``new_passwords`` False:
    ``props`` is a level's merged content whose passwords are stored encoded already."""
    names = set(props)
    unknown = sorted(n for n in names if n not in read_only_configs() and not is_dynamic(n) and setting_for(n) is None)
    if unknown:
        raise InvalidConfigError(
            f"Unknown broker config(s) for resource {resource_text(resource_name)}: {', '.join(unknown)} "
            "(Kafka 3.7's broker settings are accepted; see docs/operations.md)"
        )

    def refuse(bad, why: str) -> None:
        if bad:
            raise InvalidRequestError(
                f"Invalid config value for resource {resource_text(resource_name)}: {why}: {_kafka_set(bad)}"
            )

    refuse({n for n in names if not is_dynamic(n)}, "Cannot update these configs dynamically")
    refuse(
        names & LISTENER_ONLY_DYNAMIC_SETTINGS,
        "These security configs can be dynamically updated only per-listener using the listener prefix",
    )
    if resource_name == "":
        refuse(
            {n for n in names if update_mode(n) == PER_BROKER},
            "Cannot update these configs at default cluster level, broker id must be specified",
        )
    secrets = {n for n in names if is_sensitive(n) and props[n] is not None} if new_passwords else set()
    if secrets and resource_name == "":
        raise InvalidRequestError(
            f"Invalid config value for resource {resource_text(resource_name)}: "
            "Password config can be defined only at broker level"
        )
    if secrets and not (static_props or {}).get("password.encoder.secret"):
        raise InvalidRequestError(
            f"Invalid config value for resource {resource_text(resource_name)}: Password encoder secret not "
            f"configured (set password.encoder.secret in server.properties to store {_kafka_set(secrets)})"
        )
    try:
        for name in sorted(names):
            parsed = parse_listener_setting(name)
            try:
                check_value(parsed.base if parsed else name, props[name])
            except ValueError as e:
                raise ConfigError(str(e).replace(parsed.base, name, 1) if parsed else str(e)) from None
        effective_log_config({**(static_props or {}), **props})
        from pyklog.broker.server.config import SERVER_CONFIG

        if "message.max.bytes" in props:
            SERVER_CONFIG.parse_value("message.max.bytes", props["message.max.bytes"])
        connection_limits({**(static_props or {}), **props})
        for name in THROTTLE_RATE_CONFIGS:
            if name in props and not (str(props[name]).strip().isdigit()):
                raise ConfigError(f"{name}: expected a rate in bytes/s >= 0, read {props[name]!r}")
    except ConfigError as e:
        raise InvalidRequestError(f"Invalid config value for resource {resource_text(resource_name)}: {e}") from e


def connection_limits(props: Mapping[str, str]) -> dict:
    """The socket server's connection limits of merged broker props, as keyword arguments of
    ``ConnectionQuotas.reconfigure`` (ConfigError on a bad value, as at start-up)."""
    from pyklog.broker.server.config import SERVER_CONFIG, parse_connection_overrides

    total = SERVER_CONFIG.parse_value("max.connections", props.get("max.connections"))
    per_ip = SERVER_CONFIG.parse_value("max.connections.per.ip", props.get("max.connections.per.ip"))
    overrides = parse_connection_overrides(str(props.get("max.connections.per.ip.overrides") or ""))
    if per_ip == 0 and not overrides:
        raise ConfigError("max.connections.per.ip: 0 is allowed only with max.connections.per.ip.overrides set")
    per_listener = {}
    for name, value in props.items():
        if name.startswith("listener.name.") and name.endswith(".max.connections"):
            listener = name[len("listener.name.") : -len(".max.connections")]
            if not listener or "." in listener:
                continue
            text = str(value).strip()
            if not text.isdigit() or int(text) > 2147483647:
                raise ConfigError(f"{name}: expected an integer between 0 and 2147483647, read {value!r}")
            per_listener[listener.upper()] = int(text)
    return {"max_connections": total, "max_per_ip": per_ip, "per_ip_overrides": overrides, "per_listener": per_listener}


def effective_log_config(props: Mapping[str, str]):
    """The broker-wide default LogConfig of merged broker props (ConfigError on a bad value)."""
    from pyklog.broker.log.config import LogConfig
    from pyklog.broker.server.config import LOG_KEYS

    log_props = {k: str(v) for k, v in props.items() if k in LOG_KEYS or k == "message.max.bytes"}
    try:
        return LogConfig.from_properties(log_props)
    except ConfigError:
        raise
    except (ValueError, TypeError, KeyError) as e:
        raise ConfigError(f"invalid log setting: {e}") from e


class DynamicBrokerConfig:
    """The dynamic levels of one broker's config and the LogConfig they give (Kafka's
    ``DynamicBrokerConfig``).  ``static_props`` is ``server.properties`` (``ServerConfig.raw``)."""

    def __init__(self, broker_id: int, static_props: Mapping[str, str]):
        self.broker_id = int(broker_id)
        self.static_props = {str(k): str(v) for k, v in static_props.items()}
        self._lock = threading.Lock()
        self._levels: dict[str, dict[str, str]] = {LEVEL_BROKER: {}, LEVEL_DEFAULT: {}}
        self._versions: dict[str, int] = {LEVEL_BROKER: -1, LEVEL_DEFAULT: -1}
        self._log_config = effective_log_config(self.static_props)
        self._limits = connection_limits(self.static_props)
        self._reconfigurables: list[Callable[[object, dict], None]] = []
        self._validators: list[Callable[[dict], None]] = []
        self._props_listeners: list[Callable[[dict], None]] = []
        self._cluster = None

    # ------------------------------------------------------------------ reads

    def dynamic_broker_configs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._levels[LEVEL_BROKER])

    def dynamic_default_configs(self) -> dict[str, str]:
        with self._lock:
            return dict(self._levels[LEVEL_DEFAULT])

    def effective_props(self) -> dict[str, str]:
        """server.properties <- cluster default <- per-broker (Kafka's precedence)."""
        with self._lock:
            return {**self.static_props, **self._levels[LEVEL_DEFAULT], **self._levels[LEVEL_BROKER]}

    def log_config(self):
        """The broker-wide default LogConfig with the dynamic levels applied."""
        with self._lock:
            return self._log_config

    def connection_limits(self) -> dict:
        """The connection limits with the dynamic levels applied (``ConnectionQuotas.reconfigure``)."""
        with self._lock:
            return dict(self._limits)

    # ------------------------------------------------------------------ changes

    def add_reconfigurable(self, fn: Callable[[object, dict], None]) -> None:
        """``fn(log_config, connection_limits)`` after every change of the effective settings (Kafka's
        ``BrokerReconfigurable``); runs on the thread that made the change, outside the lock."""
        self._reconfigurables.append(fn)

    def add_validator(self, fn: Callable[[dict], None]) -> None:
        """``fn(merged_props)`` before an AlterConfigs / IncrementalAlterConfigs on this broker is stored:
        the effective settings the change would give (passwords in clear); it raises to refuse the
        change (e.g. a listener's new keystore that cannot be read)."""
        self._validators.append(fn)

    def add_props_listener(self, fn: Callable[[dict], None]) -> None:
        """``fn(merged_props)`` after every applied update of a level, changed or not (Kafka's
        ``reloadUpdatedFilesWithoutConfigChange``: a keystore rewritten at the same path is read
        again); runs on the thread that made the change, outside the lock."""
        self._props_listeners.append(fn)

    def _merged_after(self, level: str, to_set: Mapping[str, str], to_delete) -> dict[str, str]:
        with self._lock:
            levels = {k: dict(v) for k, v in self._levels.items()}
        for name in to_delete:
            levels[level].pop(name, None)
        levels[level].update({k: str(v) for k, v in to_set.items()})
        return {**self.static_props, **levels[LEVEL_DEFAULT], **levels[LEVEL_BROKER]}

    def update(self, level: str, config: Mapping[str, str], version: int) -> bool:
        """Replace one level with what ZooKeeper holds at ``version`` (older versions are ignored).
        Settings that are not dynamic, or a set that gives an invalid LogConfig, are logged at ERROR
        and the level is left as it was (Kafka: "could not be applied").  True if the LogConfig changed."""
        config = {str(k): str(v) for k, v in config.items()}
        with self._lock:
            if version != -1 and version < self._versions[level]:
                return False
            usable = self._from_persistent({k: v for k, v in config.items() if is_dynamic(k)}, level)
            ignored = sorted(k for k in config if not is_dynamic(k))
            levels = dict(self._levels)
            levels[level] = usable
            merged = {**self.static_props, **levels[LEVEL_DEFAULT], **levels[LEVEL_BROKER]}
            try:
                new = effective_log_config(merged)
                limits = connection_limits(merged)
            except ConfigError as e:
                log.error(
                    "%s dynamic broker configs could not be applied (%s): %s",
                    "per-broker" if level == LEVEL_BROKER else "cluster default",
                    e,
                    sorted(config),
                )
                return False
            if ignored:
                log.error("ignoring dynamic broker configs pyklog cannot update at runtime: %s", ignored)
            self._levels = levels
            self._versions[level] = version
            changed = new != self._log_config or limits != self._limits
            self._log_config = new
            self._limits = limits
        for listener in list(self._props_listeners):
            try:
                listener(merged)
            except Exception:  # noqa: BLE001
                log.exception("applying the dynamic broker config failed")
        if changed:
            shown = {k: "[hidden]" if is_sensitive(k) else v for k, v in usable.items()}
            log.info("dynamic broker config changed (%s level, version %d): %s", level, version, shown)
            for fn in list(self._reconfigurables):
                try:
                    fn(new, limits)
                except Exception:  # noqa: BLE001
                    log.exception("applying the dynamic broker config failed")
        return changed

    def load(self, cluster) -> None:
        """Read both levels from ZooKeeper (start-up, before the logs open)."""
        for level, entity in ((LEVEL_DEFAULT, ""), (LEVEL_BROKER, self.broker_id)):
            config, version = cluster.broker_config(entity)
            self.update(level, config, version)

    def watch(self, cluster) -> None:
        """Follow both levels in ZooKeeper from now on (see :meth:`ZkCluster.watch_broker_config`)."""
        self._cluster = cluster
        cluster.watch_broker_config("", lambda c, v: self.update(LEVEL_DEFAULT, c, v))
        cluster.watch_broker_config(self.broker_id, lambda c, v: self.update(LEVEL_BROKER, c, v))

    def _from_persistent(self, config: dict[str, str], level: str) -> dict[str, str]:
        """Kafka's ``fromPersistentProps``: the stored passwords decoded with
        ``password.encoder.secret`` (the levels hold them in clear, in memory only); one that cannot be
        decoded (no secret, another secret, a password at the cluster default) is dropped with an ERROR
        naming the setting."""
        secrets = [k for k in config if is_sensitive(k)]
        if not secrets:
            return config
        from pyklog.broker.security.password_encoder import encoder_from_props

        try:
            encoder = encoder_from_props(self.static_props)
        except ConfigError as e:
            log.error("dynamic password configs %s ignored: %s", secrets, e)
            encoder = None
        out = dict(config)
        for k in secrets:
            if level == LEVEL_DEFAULT or encoder is None:
                log.error(
                    "Dynamic password config %s ignored: %s",
                    k,
                    "password configs are only per broker"
                    if level == LEVEL_DEFAULT
                    else "password.encoder.secret is not set",
                )
                del out[k]
                continue
            try:
                out[k] = encoder.decode(config[k])
            except ConfigError as e:
                log.error("Dynamic password config %s could not be decoded, ignoring: %s", k, e)
                del out[k]
        return out

    def _to_persistent(self, to_set: Mapping[str, str]) -> dict[str, str]:
        """Kafka's ``toPersistentProps``: password settings encoded with ``password.encoder.secret``
        (validation has refused them already when no secret is set)."""
        secrets = [k for k, v in to_set.items() if is_sensitive(k) and v is not None]
        if not secrets:
            return dict(to_set)
        from pyklog.broker.security.password_encoder import encoder_from_props

        encoder = encoder_from_props(self.static_props)
        if encoder is None:
            raise InvalidRequestError("Password encoder secret not configured")
        return {k: encoder.encode(v) if k in secrets else v for k, v in to_set.items()}

    def alter(self, cluster, resource_name: str, to_set: Mapping[str, str], to_delete, validate_only: bool) -> None:
        """AlterConfigs / IncrementalAlterConfigs on a broker resource (request handler thread):
        validate the new content of the level, store it in ZooKeeper (with the change notification)
        and apply it here at once; the other brokers follow through their watches.
        ``resource_name`` is this broker's id or "" (the cluster default)."""
        level = LEVEL_DEFAULT if resource_name == "" else LEVEL_BROKER
        entity = "" if level == LEVEL_DEFAULT else self.broker_id

        def check(new: dict[str, str], new_passwords: bool = False) -> None:
            validate_dynamic_configs(resource_name, new, self.effective_props(), new_passwords=new_passwords)

        def check_components() -> None:
            if self._validators:
                merged = self._merged_after(level, to_set, to_delete)
                for fn in list(self._validators):
                    fn(merged)

        if validate_only:
            current, _ = cluster.broker_config(entity)
            new = {k: v for k, v in current.items() if k not in set(to_delete)}
            new.update(to_set)
            check(dict(to_set), new_passwords=True)
            check(new)
            check_components()
            return
        # validate what is asked first (nothing of a bad request reaches ZooKeeper), then the merge
        check(dict(to_set), new_passwords=True)
        for name in to_delete:
            if not is_dynamic(name):
                check({name: ""})
        check_components()
        config, version = cluster.alter_broker_config(entity, self._to_persistent(to_set), to_delete, validate=check)
        self.update(level, config, version)


__all__ = [
    "DYNAMIC_CONFIGS",
    "DynamicBrokerConfig",
    "LEVEL_BROKER",
    "LEVEL_DEFAULT",
    "effective_log_config",
    "read_only_configs",
    "validate_dynamic_configs",
    "is_dynamic",
    "connection_limits",
    "CONNECTION_CONFIGS",
]
