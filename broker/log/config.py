"""LogConfig: the storage settings of one partition's log, under Kafka's names.

Broker-level names (``server.properties``) are read by :meth:`LogConfig.from_properties`;
per-topic overrides use the topic-level names (``segment.bytes``, ``retention.ms``, ...) via
:meth:`LogConfig.with_overrides`; both are declared as ConfigDef tables (:data:`BROKER_LOG_CONFIG`,
:data:`TOPIC_LOG_CONFIG`, see :mod:`pyklog.broker.common.config_def`).  Both raise
:class:`broker.errors.ConfigError` with the key, the expected form and the value read when a
setting is malformed.

Immutable (frozen dataclass), so it is safe to share between threads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyklog.broker.common.config_def import ConfigDef, Importance, Type
from pyklog.broker.errors import ConfigError

LONG_MAX = 2**63 - 1
_MS_PER = {"ms": 1, "minutes": 60_000, "hours": 3_600_000}

CLEANUP_POLICIES = ("delete", "compact", "compact,delete")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


@dataclass(frozen=True)
class LogConfig:
    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3_600_000
    index_interval_bytes: int = 4096
    segment_index_bytes: int = 10 * 1024 * 1024
    flush_interval_messages: int = LONG_MAX
    flush_interval_ms: int | None = None
    retention_ms: int = 7 * 24 * 3_600_000
    retention_bytes: int = -1
    cleanup_policy: str = "delete"
    delete_retention_ms: int = 24 * 3_600_000
    max_message_bytes: int = 1048588
    file_delete_delay_ms: int = 60_000
    retention_check_interval_ms: int = 300_000
    message_timestamp_type: str = "CreateTime"
    min_cleanable_dirty_ratio: float = 0.5
    min_compaction_lag_ms: int = 0
    cleaner_backoff_ms: int = 15_000
    flush_scheduler_interval_ms: int = 1000
    flush_offset_checkpoint_interval_ms: int = 60_000
    producer_id_expiration_ms: int = 86_400_000

    def __post_init__(self) -> None:
        if self.segment_bytes < 14:
            raise ConfigError(f"segment.bytes must be >= 14, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ConfigError(f"segment.ms must be >= 1, got {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ConfigError(f"index.interval.bytes must be >= 0, got {self.index_interval_bytes}")
        if self.segment_index_bytes < 12:
            raise ConfigError(f"segment.index.bytes must be >= 12, got {self.segment_index_bytes}")
        if self.flush_interval_messages < 1:
            raise ConfigError(f"flush.messages must be >= 1, got {self.flush_interval_messages}")
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ConfigError(
                f"cleanup.policy must be one of {', '.join(CLEANUP_POLICIES)}, got {self.cleanup_policy!r}"
            )
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ConfigError(
                f"message.timestamp.type must be CreateTime or LogAppendTime, got {self.message_timestamp_type!r}"
            )
        if self.max_message_bytes < 0:
            raise ConfigError(f"max.message.bytes must be >= 0, got {self.max_message_bytes}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ConfigError(f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}")

    # ---------------------------------------------------------------- derived
    @property
    def compact(self) -> bool:
        return "compact" in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return "delete" in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    # ---------------------------------------------------------------- parsing
    @classmethod
    def from_properties(cls, props: dict[str, str]) -> LogConfig:
        """Build from broker-level settings (``log.segment.bytes``, ``log.retention.hours``, ...).

        Unrelated keys are ignored (server.properties holds many other settings).  Where Kafka has
        several units for one setting the finest given wins (``log.retention.ms`` over
        ``log.retention.minutes`` over ``log.retention.hours``).
        """
        return cls(**_fields(BROKER_LOG_CONFIG, _BROKER_FIELDS, props))

    def with_overrides(self, topic_props: dict[str, str] | None) -> LogConfig:
        """A copy with topic-level settings applied (``segment.bytes``, ``retention.ms``, ...).

        Unknown topic-level keys that are not storage settings are ignored.
        """
        if not topic_props:
            return self
        kw = _fields(TOPIC_LOG_CONFIG, _TOPIC_FIELDS, topic_props)
        return dataclasses.replace(self, **kw) if kw else self


# ---------------------------------------------------------------------------- the setting tables
# LogConfig field -> Kafka setting name (broker level, topic level).  A tuple of names is one
# duration in several units (Kafka's log.roll.{ms,hours}, log.retention.{ms,minutes,hours}): the
# finest unit given wins.  Every key defaults to None ("not set": the dataclass default applies);
# the ranges are checked by LogConfig.__post_init__ with its own messages.
_BROKER_FIELDS: dict[str, str | tuple[str, ...]] = {
    "segment_bytes": "log.segment.bytes",
    "segment_ms": ("log.roll.ms", "log.roll.minutes", "log.roll.hours"),
    "index_interval_bytes": "log.index.interval.bytes",
    "segment_index_bytes": "log.index.size.max.bytes",
    "flush_interval_messages": "log.flush.interval.messages",
    "flush_interval_ms": "log.flush.interval.ms",
    "retention_ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "retention_bytes": "log.retention.bytes",
    "cleanup_policy": "log.cleanup.policy",
    "delete_retention_ms": "log.cleaner.delete.retention.ms",
    "max_message_bytes": "message.max.bytes",
    "file_delete_delay_ms": "log.segment.delete.delay.ms",
    "retention_check_interval_ms": "log.retention.check.interval.ms",
    "message_timestamp_type": "log.message.timestamp.type",
    "min_cleanable_dirty_ratio": "log.cleaner.min.cleanable.ratio",
    "min_compaction_lag_ms": "log.cleaner.min.compaction.lag.ms",
    "cleaner_backoff_ms": "log.cleaner.backoff.ms",
    "flush_scheduler_interval_ms": "log.flush.scheduler.interval.ms",
    "flush_offset_checkpoint_interval_ms": "log.flush.offset.checkpoint.interval.ms",
    "producer_id_expiration_ms": "producer.id.expiration.ms",
}
_TOPIC_FIELDS: dict[str, str | tuple[str, ...]] = {
    "segment_bytes": "segment.bytes",
    "segment_ms": "segment.ms",
    "index_interval_bytes": "index.interval.bytes",
    "segment_index_bytes": "segment.index.bytes",
    "flush_interval_messages": "flush.messages",
    "flush_interval_ms": "flush.ms",
    "retention_ms": "retention.ms",
    "retention_bytes": "retention.bytes",
    "cleanup_policy": "cleanup.policy",
    "delete_retention_ms": "delete.retention.ms",
    "max_message_bytes": "max.message.bytes",
    "file_delete_delay_ms": "file.delete.delay.ms",
    "message_timestamp_type": "message.timestamp.type",
    "min_cleanable_dirty_ratio": "min.cleanable.dirty.ratio",
    "min_compaction_lag_ms": "min.compaction.lag.ms",
}
_FIELD_TYPES = {
    "cleanup_policy": Type.LIST,
    "message_timestamp_type": Type.STRING,
    "min_cleanable_dirty_ratio": Type.DOUBLE,
}


def _table(fields: dict[str, str | tuple[str, ...]]) -> ConfigDef:
    d = ConfigDef(error_format="{name} must be {expected}, got {value!r}")
    for field, keys in fields.items():
        for key in keys if isinstance(keys, tuple) else (keys,):
            d.define(key, _FIELD_TYPES.get(field, Type.LONG), None, None, Importance.MEDIUM, f"LogConfig.{field}")
    return d


#: Broker-level log settings (server.properties names) and topic-level overrides.
BROKER_LOG_CONFIG = _table(_BROKER_FIELDS)
TOPIC_LOG_CONFIG = _table(_TOPIC_FIELDS)


def _fields(table: ConfigDef, fields: dict[str, str | tuple[str, ...]], props: Mapping[str, Any]) -> dict:
    """The LogConfig fields set in ``props`` (keys absent or None are left out)."""
    kw: dict = {}
    for field, keys in fields.items():
        for key in keys if isinstance(keys, tuple) else (keys,):
            value = table.parse_value(key, props.get(key))
            if value is None:
                continue
            if field == "cleanup_policy":
                value = ",".join(sorted(set(value)))
            elif isinstance(keys, tuple):
                unit = key.rsplit(".", 1)[1]
                value = value if value < 0 else value * _MS_PER[unit]
            kw[field] = value
            break
    return kw
