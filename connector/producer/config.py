"""The producer's configuration: one declarative table of Kafka's producer settings.

Each :class:`ProducerConfigKey` gives a setting's Kafka name (see "Producer Configs" in Kafka's
documentation), its type, default and lower bound.  :func:`parse_config` reads a dict of Kafka
names and/or python keyword names (``linger_ms``), coerces every value by its type, checks the
bounds, then applies the rules that tie settings together (idempotence needs acks=all and at most
5 requests in flight, batch.size gives way to max.request.size, ...), as Kafka's ProducerConfig
does in ``postProcessParsedConfig``.

Pure: no I/O, no threads; safe to call from any thread.
"""
from __future__ import annotations

from typing import Any, NamedTuple

from pyklog.broker.errors import ConfigError
from pyklog.broker.record import compression as _compression

__all__ = ["ProducerConfigKey", "PRODUCER_CONFIG", "PRODUCER_DEFAULTS", "parse_config"]


class ProducerConfigKey(NamedTuple):
    name: str  # Kafka's name ("linger.ms"); the python keyword replaces dots by underscores
    type: str  # "int", "bool", "acks", "compression", "callable" or "any" (taken as given)
    default: Any
    min: int | None = None  # lower bound of an "int"
    doc: str = ""


_I32_MAX = 2147483647

# fmt: off
PRODUCER_CONFIG: tuple[ProducerConfigKey, ...] = (
    ProducerConfigKey("bootstrap.servers", "any", None, doc="host:port[,host:port] of any brokers"),
    ProducerConfigKey("zookeeper.connect", "any", None, doc="or find the brokers in ZooKeeper"),
    ProducerConfigKey("client.id", "any", "pyklog-producer"),
    ProducerConfigKey("acks", "acks", -1, doc="0, 1 or -1/'all'"),
    ProducerConfigKey("compression.type", "compression", "none", doc="none, gzip, snappy, lz4, zstd"),
    ProducerConfigKey("batch.size", "int", 16384, 0),
    ProducerConfigKey("linger.ms", "int", 5, 0),
    ProducerConfigKey("retries", "int", _I32_MAX, 0),
    ProducerConfigKey("retry.backoff.ms", "int", 100, 0),
    ProducerConfigKey("delivery.timeout.ms", "int", 120000, 0),
    ProducerConfigKey("enable.idempotence", "bool", True),
    ProducerConfigKey("max.in.flight.requests.per.connection", "int", 5, 1),
    ProducerConfigKey("buffer.memory", "int", 33554432, 0),
    ProducerConfigKey("max.block.ms", "int", 60000, 0),
    ProducerConfigKey("max.request.size", "int", 1048576, 0),
    ProducerConfigKey("request.timeout.ms", "int", 30000, 0),
    ProducerConfigKey("metadata.max.age.ms", "int", 300000, 0),
    ProducerConfigKey("key.serializer", "callable", None, doc="key -> bytes"),
    ProducerConfigKey("value.serializer", "callable", None, doc="value -> bytes"),
    ProducerConfigKey("partitioner", "any", None, doc="see connector.partitioner.resolve_partitioner"),
    ProducerConfigKey("allow.auto.create.topics", "bool", True),
)
# fmt: on

_KEYS: dict[str, ProducerConfigKey] = {k.name: k for k in PRODUCER_CONFIG}

# Kafka's producer config names and their defaults (kept as a dict for callers that list them).
PRODUCER_DEFAULTS: dict = {k.name: k.default for k in PRODUCER_CONFIG}

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def _coerce(key: ProducerConfigKey, v):
    """One value converted to ``key.type`` (ConfigError saying what was expected)."""
    t = key.type
    if t == "int":
        try:
            v = int(v)
        except (TypeError, ValueError):
            raise ConfigError(f"{key.name}: expected an integer, got {v!r}") from None
        if key.min is not None and v < key.min:
            raise ConfigError(f"{key.name}: expected a value >= {key.min}, got {v}")
        return v
    if t == "bool":
        if isinstance(v, str):
            if v.lower() not in ("true", "false"):
                raise ConfigError(f"{key.name}: expected true or false, got {v!r}")
            return v.lower() == "true"
        return bool(v)
    if t == "acks":
        acks = _ACKS.get(v.strip().lower(), v) if isinstance(v, str) else v
        if acks not in (-1, 0, 1):
            raise ConfigError(f"acks: expected 0, 1, -1 or 'all', got {v!r}")
        return acks
    if t == "compression":
        try:
            return _compression.codec_id(v or "none")
        except Exception:
            raise ConfigError(f"compression.type: expected one of none, gzip, snappy, lz4, zstd, "
                              f"got {v!r}") from None
    if t == "callable":
        if v is not None and not callable(v):
            raise ConfigError(f"{key.name}: expected a callable (value -> bytes), got {v!r}")
        return v
    return v


def parse_config(config: dict | None, kwargs: dict) -> tuple[dict, set]:
    """Merge ``config`` (Kafka names) and ``kwargs`` (python names), coerce and check them.

    Returns ``(cfg, explicit)``: every setting by Kafka name (compression.type as its codec id),
    and the names the caller set.  Unknown names raise ConfigError listing the known ones."""
    merged = {}
    for src in (config or {}), kwargs:
        for k, v in src.items():
            name = k if k in _KEYS else k.replace("_", ".")
            if name not in _KEYS:
                raise ConfigError(f"unknown producer config {k!r} (known: {', '.join(sorted(_KEYS))})")
            merged[name] = v
    explicit = set(merged)
    cfg = dict(PRODUCER_DEFAULTS)
    cfg.update(merged)
    for key in PRODUCER_CONFIG:
        cfg[key.name] = _coerce(key, cfg[key.name])
    _apply_dependencies(cfg, explicit)
    return cfg, explicit


def _apply_dependencies(cfg: dict, explicit: set) -> None:
    """The rules between settings.  A default gives way silently; a setting the caller chose
    that contradicts another raises ConfigError."""
    if cfg["enable.idempotence"]:
        if cfg["acks"] != -1:
            if "enable.idempotence" in explicit:
                raise ConfigError(f"enable.idempotence=true needs acks=all (-1), got acks={cfg['acks']}")
            cfg["enable.idempotence"] = False
        elif cfg["max.in.flight.requests.per.connection"] > 5:
            if "enable.idempotence" in explicit:
                raise ConfigError("enable.idempotence=true needs max.in.flight.requests.per.connection "
                                  f"<= 5, got {cfg['max.in.flight.requests.per.connection']}")
            cfg["enable.idempotence"] = False
        elif cfg["retries"] == 0 and "enable.idempotence" in explicit:
            raise ConfigError("enable.idempotence=true needs retries > 0, got retries=0")
    if cfg["batch.size"] > cfg["max.request.size"]:
        if "batch.size" in explicit:
            raise ConfigError(f"batch.size={cfg['batch.size']} is larger than max.request.size="
                              f"{cfg['max.request.size']}: expected batch.size <= max.request.size (a batch "
                              f"that size could never be sent)")
        cfg["batch.size"] = cfg["max.request.size"]  # the default gives way to a smaller request limit
    if not cfg["bootstrap.servers"] and not cfg["zookeeper.connect"]:
        raise ConfigError("expected bootstrap.servers or zookeeper.connect, got neither")
