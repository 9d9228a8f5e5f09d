"""The producer's configuration: one declarative table of Kafka's producer settings.

:data:`PRODUCER_CONFIG` is a :class:`~pyklog.broker.common.config_def.ConfigDef` (Kafka's
``ConfigDef``) giving each setting's Kafka name (see "Producer Configs" in Kafka's documentation),
type, default and bounds.  :func:`parse_config` reads a dict of Kafka names and/or python keyword
names (``linger_ms``), coerces every value by its type, checks the bounds, converts ``acks`` and
``compression.type`` to their wire values, then applies the rules that tie settings together
(idempotence needs acks=all and at most 5 requests in flight, batch.size gives way to
max.request.size, ...), as Kafka's ProducerConfig does in ``postProcessParsedConfig``.

Pure: no I/O, no threads; safe to call from any thread.
"""

from __future__ import annotations

from pyklog.broker.common.config_def import INT32_MAX, ConfigDef, Importance, InvalidValue, Range, Type
from pyklog.broker.errors import ConfigError
from pyklog.broker.record import compression as _compression

__all__ = ["PRODUCER_CONFIG", "PRODUCER_DEFAULTS", "parse_config"]

_ACKS = {"all": -1, "-1": -1, "0": 0, "1": 1}


def _acks_value(v):
    """``acks`` as its wire value (-1, 0, 1), or None when it is none of Kafka's forms."""
    acks = _ACKS.get(v.strip().lower()) if isinstance(v, str) else v
    return acks if acks in (-1, 0, 1) and not isinstance(acks, bool) else None


def _acks(value, expected):
    if value is not None and _acks_value(value) is None:
        raise InvalidValue("0, 1, -1 or 'all'", value)


def _codec(value, expected):
    try:
        _compression.codec_id(value or "none")
    except Exception:  # noqa: BLE001 - any failure of the codec lookup is an invalid value
        raise InvalidValue("one of none, gzip, snappy, lz4, zstd", value) from None


def _callable(value, expected):
    if value is not None and not callable(value):
        raise InvalidValue("a callable (value -> bytes)", value)


def _transactional_id(value, expected):
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidValue("a non-empty string", value)


_H, _M, _L = Importance.HIGH, Importance.MEDIUM, Importance.LOW
_POS = Range(0)

# fmt: off
PRODUCER_CONFIG = (
    ConfigDef(error_format="{name}: expected {expected}, got {value!r}")
    .define("bootstrap.servers", Type.ANY, None, None, _H, "host:port[,host:port] of any brokers")
    .define("zookeeper.connect", Type.ANY, None, None, _H, "or find the brokers in ZooKeeper")
    .define("client.id", Type.ANY, "pyklog-producer", None, _M)
    .define("acks", Type.ANY, -1, _acks, _H, "0, 1 or -1/'all'")
    .define("compression.type", Type.ANY, "none", _codec, _H, "none, gzip, snappy, lz4, zstd")
    .define("batch.size", Type.INT, 16384, _POS, _M)
    .define("linger.ms", Type.LONG, 5, _POS, _M)
    .define("retries", Type.INT, INT32_MAX, _POS, _H)
    .define("retry.backoff.ms", Type.LONG, 100, _POS, _L)
    .define("delivery.timeout.ms", Type.INT, 120000, _POS, _M)
    .define("enable.idempotence", Type.BOOLEAN, True, None, _L)
    .define("max.in.flight.requests.per.connection", Type.INT, 5, Range(1), _L)
    .define("buffer.memory", Type.LONG, 33554432, _POS, _H)
    .define("max.block.ms", Type.LONG, 60000, _POS, _M)
    .define("max.request.size", Type.INT, 1048576, _POS, _M)
    .define("request.timeout.ms", Type.INT, 30000, _POS, _M)
    .define("metadata.max.age.ms", Type.LONG, 300000, _POS, _L)
    .define("key.serializer", Type.ANY, None, _callable, _H, "key -> bytes")
    .define("value.serializer", Type.ANY, None, _callable, _H, "value -> bytes")
    .define("partitioner", Type.ANY, None, None, _M, "see connector.partitioner.resolve_partitioner")
    .define("allow.auto.create.topics", Type.BOOLEAN, True, None, _L)
    .define("transactional.id", Type.ANY, None, _transactional_id, _L,
            "makes the producer transactional (KIP-98): init_transactions, begin/commit/abort")
    .define("transaction.timeout.ms", Type.INT, 60000, Range(1), _L,
            "the coordinator aborts a transaction open longer than this")
    # SASL (pyklog.connector.sasl_client.SaslCredentials.from_config)
    .define("sasl.mechanism", Type.ANY, None, None, _M, "PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    .define("sasl.username", Type.ANY, None, None, _M)
    .define("sasl.password", Type.PASSWORD, None, None, _M)
    .define("sasl.jaas.config", Type.PASSWORD, None, None, _M, "PlainLoginModule / ScramLoginModule text")
)
# fmt: on

# Kafka's producer config names and their defaults (kept as a dict for callers that list them).
PRODUCER_DEFAULTS: dict = {k.name: k.default for k in PRODUCER_CONFIG.keys.values()}


def parse_config(config: dict | None, kwargs: dict) -> tuple[dict, set]:
    """Merge ``config`` (Kafka names) and ``kwargs`` (python names), coerce and check them.

    Returns ``(cfg, explicit)``: every setting by Kafka name (acks as -1/0/1, compression.type as
    its codec id), and the names the caller set.  Unknown names raise ConfigError listing the
    known ones."""
    known = PRODUCER_CONFIG.names()
    merged = {}
    for src in (config or {}), kwargs:
        for k, v in src.items():
            name = k if k in known else k.replace("_", ".")
            if name not in known:
                raise ConfigError(f"unknown producer config {k!r} (known: {', '.join(sorted(known))})")
            merged[name] = v
    explicit = set(merged)
    cfg = PRODUCER_CONFIG.parse(merged)
    cfg["acks"] = _acks_value(cfg["acks"])
    cfg["compression.type"] = _compression.codec_id(cfg["compression.type"] or "none")
    _apply_dependencies(cfg, explicit)
    return cfg, explicit


def _apply_dependencies(cfg: dict, explicit: set) -> None:
    """The rules between settings.  A default gives way silently; a setting the caller chose
    that contradicts another raises ConfigError."""
    if cfg["transactional.id"] is not None:
        # Kafka's ProducerConfig: a transactional producer is idempotent (acks=all, at most 5
        # requests in flight, retries > 0); contradictory explicit settings are refused
        tid = cfg["transactional.id"]
        if not cfg["enable.idempotence"]:
            raise ConfigError(f"transactional.id={tid!r} needs enable.idempotence=true, got enable.idempotence=false")
        for bad, why in (
            (cfg["acks"] != -1, f"acks=all (-1), got acks={cfg['acks']}"),
            (
                cfg["max.in.flight.requests.per.connection"] > 5,
                f"max.in.flight.requests.per.connection <= 5, got {cfg['max.in.flight.requests.per.connection']}",
            ),
            (cfg["retries"] == 0, "retries > 0, got retries=0"),
        ):
            if bad:
                raise ConfigError(f"transactional.id={tid!r} implies enable.idempotence, which needs {why}")
    if cfg["enable.idempotence"]:
        if cfg["acks"] != -1:
            if "enable.idempotence" in explicit:
                raise ConfigError(f"enable.idempotence=true needs acks=all (-1), got acks={cfg['acks']}")
            cfg["enable.idempotence"] = False
        elif cfg["max.in.flight.requests.per.connection"] > 5:
            if "enable.idempotence" in explicit:
                raise ConfigError(
                    "enable.idempotence=true needs max.in.flight.requests.per.connection "
                    f"<= 5, got {cfg['max.in.flight.requests.per.connection']}"
                )
            cfg["enable.idempotence"] = False
        elif cfg["retries"] == 0 and "enable.idempotence" in explicit:
            raise ConfigError("enable.idempotence=true needs retries > 0, got retries=0")
    if cfg["batch.size"] > cfg["max.request.size"]:
        if "batch.size" in explicit:
            raise ConfigError(
                f"batch.size={cfg['batch.size']} is larger than max.request.size="
                f"{cfg['max.request.size']}: expected batch.size <= max.request.size (a batch "
                f"that size could never be sent)"
            )
        cfg["batch.size"] = cfg["max.request.size"]  # the default gives way to a smaller request limit
    if not cfg["bootstrap.servers"] and not cfg["zookeeper.connect"]:
        raise ConfigError("expected bootstrap.servers or zookeeper.connect, got neither")
