"""LogConfig: the storage settings of one partition's log, under Kafka's names.

Broker-level names (``server.properties``) are read by :meth:`LogConfig.from_properties`;
per-topic overrides use the topic-level names (``segment.bytes``, ``retention.ms``, ...) via
:meth:`LogConfig.with_overrides`.  Both raise :class:`broker.errors.ConfigError` with the key, the
expected form and the value read when a setting is malformed.

Immutable (frozen dataclass), so it is safe to share between threads.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

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

    def __post_init__(self):
        if self.segment_bytes < 14:
            raise ConfigError(f"segment.bytes must be >= 14, got {self.segment_bytes}")
        if self.segment_ms < 1:
            raise ConfigError(f"segment.ms must be >= 1, got {self.segment_ms}")
        if self.index_interval_bytes < 0:
            raise ConfigError(f"index.interval.bytes must be >= 0, got {self.index_interval_bytes}")
        if self.segment_index_bytes < 12:
            raise ConfigError(f"segment.index.bytes must be >= 12, got {self.segment_index_bytes}")
        if self.flush_interval_messages < 1:
            raise ConfigError(
                f"flush.messages must be >= 1, got {self.flush_interval_messages}"
            )
        if self.cleanup_policy not in CLEANUP_POLICIES:
            raise ConfigError(
                f"cleanup.policy must be one of {', '.join(CLEANUP_POLICIES)}, "
                f"got {self.cleanup_policy!r}"
            )
        if self.message_timestamp_type not in TIMESTAMP_TYPES:
            raise ConfigError(
                f"message.timestamp.type must be CreateTime or LogAppendTime, "
                f"got {self.message_timestamp_type!r}"
            )
        if self.max_message_bytes < 0:
            raise ConfigError(f"max.message.bytes must be >= 0, got {self.max_message_bytes}")
        if not 0.0 <= self.min_cleanable_dirty_ratio <= 1.0:
            raise ConfigError(
                f"min.cleanable.dirty.ratio must be in [0, 1], got {self.min_cleanable_dirty_ratio}"
            )

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
    def from_properties(cls, props: dict[str, str]) -> "LogConfig":
        """Build from broker-level settings (``log.segment.bytes``, ``log.retention.hours``, ...).

        Unrelated keys are ignored (server.properties holds many other settings).  Where Kafka has
        several units for one setting the finest given wins (``log.retention.ms`` over
        ``log.retention.minutes`` over ``log.retention.hours``).
        """
        kw: dict = {}
        _int_opt(props, kw, "segment_bytes", "log.segment.bytes")
        _ms_opt(props, kw, "segment_ms", "log.roll")
        _int_opt(props, kw, "index_interval_bytes", "log.index.interval.bytes")
        _int_opt(props, kw, "segment_index_bytes", "log.index.size.max.bytes")
        _int_opt(props, kw, "flush_interval_messages", "log.flush.interval.messages")
        _int_opt(props, kw, "flush_interval_ms", "log.flush.interval.ms")
        _ms_opt(props, kw, "retention_ms", "log.retention")
        _int_opt(props, kw, "retention_bytes", "log.retention.bytes")
        _str_opt(props, kw, "cleanup_policy", "log.cleanup.policy")
        _int_opt(props, kw, "delete_retention_ms", "log.cleaner.delete.retention.ms")
        _int_opt(props, kw, "max_message_bytes", "message.max.bytes")
        _int_opt(props, kw, "file_delete_delay_ms", "log.segment.delete.delay.ms")
        _int_opt(props, kw, "retention_check_interval_ms", "log.retention.check.interval.ms")
        _str_opt(props, kw, "message_timestamp_type", "log.message.timestamp.type")
        _float_opt(props, kw, "min_cleanable_dirty_ratio", "log.cleaner.min.cleanable.ratio")
        _int_opt(props, kw, "min_compaction_lag_ms", "log.cleaner.min.compaction.lag.ms")
        _int_opt(props, kw, "cleaner_backoff_ms", "log.cleaner.backoff.ms")
        _int_opt(props, kw, "flush_scheduler_interval_ms", "log.flush.scheduler.interval.ms")
        _int_opt(props, kw, "flush_offset_checkpoint_interval_ms",
                 "log.flush.offset.checkpoint.interval.ms")
        _int_opt(props, kw, "producer_id_expiration_ms", "producer.id.expiration.ms")
        return cls(**kw)

    def with_overrides(self, topic_props: dict[str, str] | None) -> "LogConfig":
        """A copy with topic-level settings applied (``segment.bytes``, ``retention.ms``, ...).

        Unknown topic-level keys that are not storage settings are ignored.
        """
        if not topic_props:
            return self
        kw: dict = {}
        _int_opt(topic_props, kw, "segment_bytes", "segment.bytes")
        _int_opt(topic_props, kw, "segment_ms", "segment.ms")
        _int_opt(topic_props, kw, "index_interval_bytes", "index.interval.bytes")
        _int_opt(topic_props, kw, "segment_index_bytes", "segment.index.bytes")
        _int_opt(topic_props, kw, "flush_interval_messages", "flush.messages")
        _int_opt(topic_props, kw, "flush_interval_ms", "flush.ms")
        _int_opt(topic_props, kw, "retention_ms", "retention.ms")
        _int_opt(topic_props, kw, "retention_bytes", "retention.bytes")
        _str_opt(topic_props, kw, "cleanup_policy", "cleanup.policy")
        _int_opt(topic_props, kw, "delete_retention_ms", "delete.retention.ms")
        _int_opt(topic_props, kw, "max_message_bytes", "max.message.bytes")
        _int_opt(topic_props, kw, "file_delete_delay_ms", "file.delete.delay.ms")
        _str_opt(topic_props, kw, "message_timestamp_type", "message.timestamp.type")
        _float_opt(topic_props, kw, "min_cleanable_dirty_ratio", "min.cleanable.dirty.ratio")
        _int_opt(topic_props, kw, "min_compaction_lag_ms", "min.compaction.lag.ms")
        return dataclasses.replace(self, **kw) if kw else self


def _int_opt(props, kw, field, key):
    raw = props.get(key)
    if raw is None:
        return
    try:
        kw[field] = int(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key} must be an integer, got {raw!r}") from None


def _float_opt(props, kw, field, key):
    raw = props.get(key)
    if raw is None:
        return
    try:
        kw[field] = float(str(raw).strip())
    except ValueError:
        raise ConfigError(f"{key} must be a number, got {raw!r}") from None


def _str_opt(props, kw, field, key):
    raw = props.get(key)
    if raw is None:
        return
    value = str(raw).strip()
    if field == "cleanup_policy":
        parts = sorted({p.strip() for p in value.split(",") if p.strip()})
        value = ",".join(parts)
    kw[field] = value


def _ms_opt(props, kw, field, prefix):
    """``<prefix>.ms`` / ``.minutes`` / ``.hours``; the finest unit given wins."""
    for unit in ("ms", "minutes", "hours"):
        key = f"{prefix}.{unit}"
        raw = props.get(key)
        if raw is None:
            continue
        try:
            n = int(str(raw).strip())
        except ValueError:
            raise ConfigError(f"{key} must be an integer, got {raw!r}") from None
        kw[field] = n if n < 0 else n * _MS_PER[unit]
        return
