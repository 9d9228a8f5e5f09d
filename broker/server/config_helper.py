"""DescribeConfigs and the config changes of AlterConfigs / IncrementalAlterConfigs: Kafka's
``ConfigHelper`` and ``ConfigAdminManager`` for a ZooKeeper-mode broker, with dynamic broker configs
(KIP-226, :mod:`pyklog.broker.server.dynamic_config`).

Runs on the request handler threads; pure apart from the reads it is handed (the topic's overrides
from ZooKeeper, the dynamic broker configs, the broker's ``server.properties``); thread-safe.

Topic resources (type 2) list every topic-level config (Kafka's ``TopicConfig`` names).  A value
comes from, in Kafka's order of precedence:

* the topic's override in ``/config/topics/<topic>``: source ``DYNAMIC_TOPIC_CONFIG`` (1);
* per broker synonym (``retention.ms`` <- ``log.retention.ms`` <- ``log.retention.minutes`` <-
  ``log.retention.hours``): this broker's dynamic value (``/config/brokers/<id>``,
  ``DYNAMIC_BROKER_CONFIG`` 2), the cluster-wide dynamic default (``/config/brokers/<default>``,
  ``DYNAMIC_DEFAULT_BROKER_CONFIG`` 3), the value in ``server.properties`` (``STATIC_BROKER_CONFIG``
  4), each converted to the topic config's unit (hours -> ms);
* Kafka's default, reported through the broker synonym that carries it (``log.retention.hours=168``):
  ``DEFAULT_CONFIG`` (5).

With ``include_synonyms`` each entry lists that chain, the topic override first, then per broker
synonym its dynamic, static and default values, as Kafka's ``ZkAdminManager`` does.

Broker resources (type 4) named by this broker's id list the broker's settings with the same sources
(dynamic per-broker, dynamic default, static, default; synonyms per unit); only the dynamic broker
configs are not read-only.  The resource name "" (the cluster-wide default) lists only what
``/config/brokers/<default>`` holds.  Passwords and secrets are sensitive (value null).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pyklog.broker.errors import InvalidConfigError, InvalidRequestError
from pyklog.broker.zk.topics import TOPIC_CONFIGS

# Kafka's ConfigResource.Type
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

# Kafka's DescribeConfigsResponse.ConfigSource
SOURCE_DYNAMIC_TOPIC_CONFIG = 1
SOURCE_DYNAMIC_BROKER_CONFIG = 2
SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = 3
SOURCE_STATIC_BROKER_CONFIG = 4
SOURCE_DEFAULT_CONFIG = 5

# Kafka's DescribeConfigsResponse.ConfigType
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_SHORT, TYPE_LONG, TYPE_DOUBLE, TYPE_LIST, TYPE_CLASS, TYPE_PASSWORD = range(
    1, 10
)

# IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType)
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_LMAX = str(2**63 - 1)
_KIND_TYPE = {
    "long": TYPE_LONG,
    "int": TYPE_INT,
    "boolean": TYPE_BOOLEAN,
    "ratio": TYPE_DOUBLE,
    "list": TYPE_LIST,
    "string": TYPE_STRING,
}
_UNIT_MS = {"ms": 1, "minutes": 60_000, "hours": 3_600_000}

#: topic config -> [(broker synonym, Kafka's default of that synonym or None)], Kafka's
#: ServerTopicConfigSynonyms in order of precedence.  A topic config without a broker synonym
#: takes the topic default of TOPIC_DEFAULTS.
TOPIC_SYNONYMS: dict[str, list[tuple[str, str | None]]] = {
    "segment.bytes": [("log.segment.bytes", "1073741824")],
    "segment.ms": [("log.roll.ms", None), ("log.roll.hours", "168")],
    "segment.jitter.ms": [("log.roll.jitter.ms", None), ("log.roll.jitter.hours", "0")],
    "segment.index.bytes": [("log.index.size.max.bytes", "10485760")],
    "flush.messages": [("log.flush.interval.messages", _LMAX)],
    "flush.ms": [("log.flush.interval.ms", None), ("log.flush.scheduler.interval.ms", _LMAX)],
    "retention.bytes": [("log.retention.bytes", "-1")],
    "retention.ms": [("log.retention.ms", None), ("log.retention.minutes", None), ("log.retention.hours", "168")],
    "max.message.bytes": [("message.max.bytes", "1048588")],
    "index.interval.bytes": [("log.index.interval.bytes", "4096")],
    "delete.retention.ms": [("log.cleaner.delete.retention.ms", "86400000")],
    "min.compaction.lag.ms": [("log.cleaner.min.compaction.lag.ms", "0")],
    "max.compaction.lag.ms": [("log.cleaner.max.compaction.lag.ms", _LMAX)],
    "file.delete.delay.ms": [("log.segment.delete.delay.ms", "60000")],
    "min.cleanable.dirty.ratio": [("log.cleaner.min.cleanable.ratio", "0.5")],
    "cleanup.policy": [("log.cleanup.policy", "delete")],
    "unclean.leader.election.enable": [("unclean.leader.election.enable", "false")],
    "min.insync.replicas": [("min.insync.replicas", "1")],
    "compression.type": [("compression.type", "producer")],
    "preallocate": [("log.preallocate", "false")],
    "message.format.version": [("log.message.format.version", "3.0-IV1")],
    "message.timestamp.type": [("log.message.timestamp.type", "CreateTime")],
    "message.timestamp.difference.max.ms": [("log.message.timestamp.difference.max.ms", _LMAX)],
    "message.timestamp.before.max.ms": [("log.message.timestamp.before.max.ms", _LMAX)],
    "message.timestamp.after.max.ms": [("log.message.timestamp.after.max.ms", _LMAX)],
    "message.downconversion.enable": [("log.message.downconversion.enable", "true")],
    "local.retention.ms": [("log.local.retention.ms", "-2")],
    "local.retention.bytes": [("log.local.retention.bytes", "-2")],
}
#: topic configs without a broker synonym: Kafka's topic-level defaults
TOPIC_DEFAULTS = {
    "remote.storage.enable": "false",
    "follower.replication.throttled.replicas": "",
    "leader.replication.throttled.replicas": "",
}

#: broker settings pyklog knows beyond its ServerConfig table, with Kafka's defaults (what clients
#: read at start-up: the topic defaults they may compare with, the protocol limits)
_BROKER_EXTRA_DEFAULTS = {
    "log.retention.hours": "168",
    "log.retention.bytes": "-1",
    "log.segment.bytes": "1073741824",
    "log.roll.hours": "168",
    "log.cleanup.policy": "delete",
    "log.index.interval.bytes": "4096",
    "log.index.size.max.bytes": "10485760",
    "log.cleaner.delete.retention.ms": "86400000",
    "log.cleaner.min.cleanable.ratio": "0.5",
    "log.cleaner.min.compaction.lag.ms": "0",
    "log.segment.delete.delay.ms": "60000",
    "log.message.timestamp.type": "CreateTime",
    "log.flush.interval.messages": _LMAX,
    "log.flush.scheduler.interval.ms": _LMAX,
    "log.retention.check.interval.ms": "300000",
    "min.insync.replicas": "1",
    "compression.type": "producer",
    "unclean.leader.election.enable": "false",
    "log.preallocate": "false",
    "replica.fetch.max.bytes": "1048576",
    "fetch.max.bytes": "57671680",
}


def _is_sensitive(name: str) -> bool:
    n = name.lower()
    return "password" in n or "secret" in n or n.endswith(".jaas.config")


def _entry(name, value, source, read_only, ctype, synonyms, include_synonyms, doc=None):
    return {
        "name": name,
        "value": None if _is_sensitive(name) else value,
        "read_only": read_only,
        "config_source": source,
        "is_default": source == SOURCE_DEFAULT_CONFIG,
        "is_sensitive": _is_sensitive(name),
        "synonyms": synonyms if include_synonyms else [],
        "config_type": ctype,
        "documentation": doc,
    }


def _broker_value_in_unit(topic_name: str, broker_name: str, value: str) -> str:
    """A broker synonym's value in the topic config's unit (``log.retention.hours=1`` -> 3600000)."""
    unit = broker_name.rsplit(".", 1)[1]
    if topic_name.endswith(".ms") and unit in ("minutes", "hours"):
        try:
            v = int(value)
        except ValueError:
            return value
        return str(v if v < 0 else v * _UNIT_MS[unit])
    return value


def describe_topic_configs(
    topic: str,
    overrides: Mapping[str, str],
    broker_props: Mapping[str, str],
    keys: Iterable[str] | None,
    include_synonyms: bool,
    include_documentation: bool = False,
    *,
    dynamic: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
) -> list[dict]:
    """The DescribeConfigs entries of one topic (see the module docstring).  ``keys`` None = all.
    ``dynamic`` = (this broker's dynamic configs, the cluster-wide dynamic defaults): per broker
    synonym they come before its static value, as Kafka's ``DynamicBrokerConfig`` lists them."""
    wanted = None if keys is None else set(keys)
    out = []
    for name in sorted(set(TOPIC_CONFIGS) | set(TOPIC_SYNONYMS)):
        if wanted is not None and name not in wanted:
            continue
        kind = TOPIC_CONFIGS.get(name, ("string", None))[0]
        synonyms = []
        if name in overrides:
            synonyms.append({"name": name, "value": overrides[name], "source": SOURCE_DYNAMIC_TOPIC_CONFIG})
        for bname, bdefault in TOPIC_SYNONYMS.get(name, ()):
            synonyms.extend(_dynamic_synonyms(bname, dynamic))
            if bname in broker_props and broker_props[bname] is not None:
                synonyms.append(
                    {"name": bname, "value": str(broker_props[bname]), "source": SOURCE_STATIC_BROKER_CONFIG}
                )
            if bdefault is not None:
                synonyms.append({"name": bname, "value": bdefault, "source": SOURCE_DEFAULT_CONFIG})
        if synonyms:
            first = synonyms[0]
            value = (
                first["value"]
                if first["source"] == SOURCE_DYNAMIC_TOPIC_CONFIG
                else _broker_value_in_unit(name, first["name"], first["value"])
            )
            source = first["source"]
        else:
            value, source = TOPIC_DEFAULTS.get(name), SOURCE_DEFAULT_CONFIG
        doc = f"Kafka's topic config {name}" if include_documentation else None
        out.append(
            _entry(name, value, source, False, _KIND_TYPE.get(kind, TYPE_STRING), synonyms, include_synonyms, doc)
        )
    return out


def _dynamic_synonyms(bname: str, dynamic) -> list[dict]:
    """The dynamic levels of one broker setting, per-broker first (Kafka's order)."""
    if not dynamic:
        return []
    per_broker, default = dynamic
    out = []
    if bname in per_broker:
        out.append({"name": bname, "value": str(per_broker[bname]), "source": SOURCE_DYNAMIC_BROKER_CONFIG})
    if bname in default:
        out.append({"name": bname, "value": str(default[bname]), "source": SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG})
    return out


#: broker settings that are one duration in several units (Kafka's brokerConfigSynonyms)
_BROKER_SYNONYM_GROUPS = (
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
)


def _broker_synonym_names(name: str) -> tuple[str, ...]:
    for group in _BROKER_SYNONYM_GROUPS:
        if name in group:
            return group if name != "log.flush.scheduler.interval.ms" else (name,)
    return (name,)


def describe_broker_configs(
    broker_props: Mapping[str, str],
    server_config_def,
    keys: Iterable[str] | None,
    include_synonyms: bool,
    include_documentation: bool = False,
    *,
    dynamic: tuple[Mapping[str, str], Mapping[str, str]] | None = None,
    dynamic_names: frozenset = frozenset(),
) -> list[dict]:
    """The DescribeConfigs entries of this broker (resource name = its id): every setting with its
    value from, in Kafka's order, ``dynamic`` = (per-broker ``DYNAMIC_BROKER_CONFIG``, cluster default
    ``DYNAMIC_DEFAULT_BROKER_CONFIG``), ``server.properties`` (``STATIC_BROKER_CONFIG``), the default
    (``DEFAULT_CONFIG``); synonyms per synonym name (``log.retention.ms`` <- ``.minutes`` <- ``.hours``).
    Names in ``dynamic_names`` are not read-only."""
    wanted = None if keys is None else set(keys)
    defaults: dict[str, tuple[str | None, int, str]] = {}
    keys_table = server_config_def.keys
    for name, key in (keys_table() if callable(keys_table) else keys_table).items():
        d = key.default
        text = None if d is None or key.required else (str(d).lower() if isinstance(d, bool) else str(d))
        defaults[name] = (text, _TYPE_OF.get(key.type.name, TYPE_STRING), key.doc)
    for name, d in _BROKER_EXTRA_DEFAULTS.items():
        defaults.setdefault(name, (d, TYPE_STRING, ""))
    out = []
    names = set(defaults) | {k for k in broker_props if isinstance(k, str)} | set(dynamic_names)
    if dynamic:
        names |= set(dynamic[0]) | set(dynamic[1])
    for name in sorted(names):
        if wanted is not None and name not in wanted:
            continue
        _, ctype, doc = defaults.get(name, (None, TYPE_STRING, ""))
        synonyms = []
        for sname in _broker_synonym_names(name):
            synonyms.extend(_dynamic_synonyms(sname, dynamic))
            if sname in broker_props and broker_props[sname] is not None:
                synonyms.append(
                    {"name": sname, "value": str(broker_props[sname]), "source": SOURCE_STATIC_BROKER_CONFIG}
                )
            sdefault = defaults.get(sname, (None,))[0]
            if sdefault is not None:
                synonyms.append({"name": sname, "value": sdefault, "source": SOURCE_DEFAULT_CONFIG})
        own = [s for s in synonyms if s["name"] == name]
        if synonyms:
            value, source = synonyms[0]["value"], synonyms[0]["source"]
            if synonyms[0]["name"] != name:  # a finer unit wins: log.retention.ms for log.retention.hours
                value, source = (own[0]["value"], own[0]["source"]) if own else (None, synonyms[0]["source"])
        else:
            value, source = None, SOURCE_DEFAULT_CONFIG
        for s in synonyms:
            if _is_sensitive(s["name"]):
                s["value"] = None
        out.append(
            _entry(
                name,
                value,
                source,
                name not in dynamic_names,
                ctype,
                synonyms,
                include_synonyms,
                (doc or None) if include_documentation else None,
            )
        )
    return out


def describe_default_broker_configs(
    default: Mapping[str, str], keys: Iterable[str] | None, include_synonyms: bool, include_documentation: bool = False
) -> list[dict]:
    """The DescribeConfigs entries of the cluster-wide default broker resource (name ""): only the
    settings stored at ``/config/brokers/<default>``, source ``DYNAMIC_DEFAULT_BROKER_CONFIG``, as
    Kafka's ZooKeeper-mode brokers answer."""
    wanted = None if keys is None else set(keys)
    out = []
    for name in sorted(default):
        if wanted is not None and name not in wanted:
            continue
        syn = [
            {
                "name": name,
                "value": None if _is_sensitive(name) else str(default[name]),
                "source": SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
            }
        ]
        out.append(
            _entry(
                name,
                str(default[name]),
                SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG,
                False,
                TYPE_STRING,
                syn,
                include_synonyms,
                None,
            )
        )
    return out


_TYPE_OF = {
    "BOOLEAN": TYPE_BOOLEAN,
    "STRING": TYPE_STRING,
    "INT": TYPE_INT,
    "SHORT": TYPE_SHORT,
    "LONG": TYPE_LONG,
    "DOUBLE": TYPE_DOUBLE,
    "LIST": TYPE_LIST,
    "CLASS": TYPE_CLASS,
    "PASSWORD": TYPE_PASSWORD,
}

_LIST_CONFIGS = frozenset(n for n, (kind, _) in TOPIC_CONFIGS.items() if kind == "list") | {
    "follower.replication.throttled.replicas",
    "leader.replication.throttled.replicas",
}


def incremental_changes(current: Mapping[str, str], ops: list[dict]) -> tuple[dict[str, str], set[str]]:
    """Kafka's ``ConfigAdminManager.prepareIncrementalConfigs`` for a topic: the overrides to set
    and the names to delete after applying ``ops`` (``{"name", "config_operation", "value"}``) to
    ``current``.  INVALID_REQUEST for a key named twice or an unknown operation, INVALID_CONFIG
    for an unknown key, a missing value or APPEND/SUBTRACT on a non-list config."""
    names = [op["name"] for op in ops]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise InvalidRequestError(f"error due to duplicate config keys {dups}")
    to_set: dict[str, str] = {}
    to_delete: set[str] = set()
    for op in ops:
        name, code, value = op["name"], op["config_operation"], op["value"]
        if name not in TOPIC_CONFIGS:
            raise InvalidConfigError(f"unknown topic config {name!r}")
        if code == OP_SET:
            if value is None:
                raise InvalidConfigError(f"topic config {name!r}: SET needs a value, got null")
            to_set[name] = value
        elif code == OP_DELETE:
            to_delete.add(name)
        elif code in (OP_APPEND, OP_SUBTRACT):
            if name not in _LIST_CONFIGS:
                raise InvalidConfigError(
                    f"config value {'append' if code == OP_APPEND else 'subtract'} is not allowed for config "
                    f"key {name!r}: it is not a list (lists: {', '.join(sorted(_LIST_CONFIGS))})"
                )
            base = current.get(name)
            if base is None:
                base = TOPIC_DEFAULTS.get(name) or next((d for _, d in TOPIC_SYNONYMS.get(name, ()) if d), "")
            items = [i.strip() for i in base.split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            if code == OP_APPEND:
                items += [g for g in given if g not in items]
            else:
                items = [i for i in items if i not in given]
            to_set[name] = ",".join(items)  # an empty list is refused by the value check
        else:
            raise InvalidRequestError(
                f"unknown config operation {code} for {name!r}; expected 0 SET, 1 DELETE, 2 APPEND or 3 SUBTRACT"
            )
    return to_set, to_delete - set(to_set)


def incremental_broker_changes(current: Mapping[str, str], ops: list[dict]) -> tuple[dict[str, str], set[str]]:
    """IncrementalAlterConfigs on a broker resource (Kafka's ``ConfigAdminManager``): the settings to
    set and the names to delete in one dynamic level after applying ``ops`` to ``current``.
    INVALID_REQUEST for a key named twice, an unknown operation or a missing value; APPEND/SUBTRACT
    only on list settings (``log.cleanup.policy``).  Names and values are checked by the caller
    (:func:`pyklog.broker.server.dynamic_config.validate_dynamic_configs`)."""
    names = [op["name"] for op in ops]
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise InvalidRequestError(f"error due to duplicate config keys {dups}")
    to_set: dict[str, str] = {}
    to_delete: set[str] = set()
    for op in ops:
        name, code, value = op["name"], op["config_operation"], op["value"]
        if code == OP_SET:
            if value is None:
                raise InvalidRequestError(f"broker config {name!r}: SET needs a value, got null")
            to_set[name] = value
        elif code == OP_DELETE:
            to_delete.add(name)
        elif code in (OP_APPEND, OP_SUBTRACT):
            if name != "log.cleanup.policy":
                raise InvalidConfigError(
                    f"config value {'append' if code == OP_APPEND else 'subtract'} is not allowed for config "
                    f"key {name!r}: it is not a list (the list broker config is log.cleanup.policy)"
                )
            items = [i.strip() for i in (current.get(name) or "delete").split(",") if i.strip()]
            given = [i.strip() for i in (value or "").split(",") if i.strip()]
            items = (
                items + [g for g in given if g not in items]
                if code == OP_APPEND
                else [i for i in items if i not in given]
            )
            to_set[name] = ",".join(items)
        else:
            raise InvalidRequestError(
                f"unknown config operation {code} for {name!r}; expected 0 SET, 1 DELETE, 2 APPEND or 3 SUBTRACT"
            )
    return to_set, to_delete - set(to_set)


__all__ = [
    "describe_broker_configs",
    "describe_default_broker_configs",
    "incremental_broker_changes",
    "describe_topic_configs",
    "incremental_changes",
    "RESOURCE_BROKER",
    "RESOURCE_BROKER_LOGGER",
    "RESOURCE_TOPIC",
]
