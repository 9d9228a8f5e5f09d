"""Topic administration rules, pure (no ZooKeeper I/O): names, replica assignment, topic configs.

* :func:`validate_topic_name`: Kafka's legal topic names, ``[a-zA-Z0-9._-]``, 1..249 characters,
  neither ``.`` nor ``..``.  A legal name is also a safe directory name, so no topic can make a
  partition directory ``<topic>-<partition>`` leave ``log.dirs``.
* :func:`collides`: Kafka refuses a topic whose name differs from an existing one only by ``.``
  versus ``_`` (both become ``_`` in metric names).
* :func:`assign_replicas`: Kafka's rack-unaware assignment (AdminUtils): partition ``p``'s first
  replica is broker ``(start + p) % n`` of the sorted broker list, the further replicas follow at a
  shift that grows by one after every ``n`` partitions, so leaders and followers spread evenly.
* :func:`validate_topic_configs`: topic-level config names (``cleanup.policy``, ``segment.bytes``, ...)
  and their value types, checked before anything is written.

All functions are pure and thread-safe.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping

from pyklog.broker.errors import (
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
)

MAX_TOPIC_NAME_LENGTH = 249
_LEGAL = re.compile(r"[a-zA-Z0-9._-]+")

#: Kafka's internal topic holding committed consumer offsets.
OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's internal topic holding the transaction coordinators' state (broker.coordinator.transaction).
TRANSACTION_STATE_TOPIC = "__transaction_state"
#: The exactly-once Spark sinks' commit records (pyklog.connector.spark.sink_log): a compacted topic
#: clients write, which the brokers protect as they protect their own internal topics.
SPARK_SINK_LOG_TOPIC = "__pyklog_spark_sinks"


def validate_topic_name(name) -> str:
    """Return ``name`` if it is a legal Kafka topic name, else raise :class:`InvalidTopicError`."""
    if not isinstance(name, str):
        raise InvalidTopicError(f"topic name must be a string, got {type(name).__name__} {name!r}")
    if not name:
        raise InvalidTopicError("topic name is empty; expected 1 to 249 characters of [a-zA-Z0-9._-]")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise InvalidTopicError(
            f"topic name is {len(name)} characters long; the maximum is {MAX_TOPIC_NAME_LENGTH}: {name[:40]!r}..."
        )
    if not _LEGAL.fullmatch(name):
        bad = sorted({c for c in name if not _LEGAL.fullmatch(c)})
        raise InvalidTopicError(
            f"topic name {name!r} contains illegal characters {''.join(bad)!r}; "
            "expected only ASCII letters, digits, '.', '_' and '-'"
        )
    return name


def is_internal(name: str) -> bool:
    """Kafka's internal topics (``Topic.INTERNAL_TOPICS``: ``__consumer_offsets``, ``__transaction_state``)."""
    return name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC)


def is_protected(name: str) -> bool:
    """Topics whose loss loses state: the internal topics and :data:`SPARK_SINK_LOG_TOPIC`.  The
    brokers and the tools refuse to delete them or their records, to add partitions to them (their
    users hash keys over the partition count) and configs that would let retention delete them."""
    return is_internal(name) or name == SPARK_SINK_LOG_TOPIC


def _unify(name: str) -> str:
    return name.replace(".", "_")


def collides(name: str, existing: Iterable[str]) -> list[str]:
    """Existing topics whose names equal ``name`` once ``.`` and ``_`` are unified (Kafka's rule)."""
    if "." not in name and "_" not in name:
        return []
    key = _unify(name)
    return sorted(t for t in existing if t != name and _unify(t) == key)


def assign_replicas(
    brokers: Iterable[int],
    num_partitions: int,
    replication_factor: int = 1,
    *,
    start_index: int | None = None,
    replica_shift: int | None = None,
    rng: random.Random | None = None,
    racks: dict[int, str] | None = None,
) -> dict[int, list[int]]:
    """Spread ``num_partitions`` partitions with ``replication_factor`` replicas over ``brokers``.

    With ``racks`` (every broker's ``broker.rack``; see :func:`placement_racks`) Kafka's
    rack-aware algorithm (``AdminUtils.assignReplicasToBrokersRackAware``): the brokers are taken
    in rack-alternated order (:func:`rack_alternated_brokers`) and each further replica goes to
    the next broker, in the same shifted order, whose rack holds no replica of the partition yet
    (once every rack has one, any broker without one), so the replicas of a partition span
    min(replication factor, racks) racks and leaders spread evenly over racks.

    Kafka's rack-unaware algorithm: with the broker ids sorted into ``b[0..n-1]``, partition ``p``'s
    first replica (its leader) is ``b[(start + p) % n]``; replica ``j >= 1`` sits at
    ``first + 1 + (shift + j - 1) % (n - 1)``, where ``shift`` grows by one after every ``n`` partitions.
    ``start_index`` and ``replica_shift`` default to random choices (so that many small topics do not
    all put partition 0 on the same broker); pass them for a deterministic layout.
    """
    ids = sorted({int(b) for b in brokers})
    if num_partitions is None or int(num_partitions) <= 0:
        raise InvalidPartitionsError(f"number of partitions must be larger than 0, got {num_partitions}")
    if replication_factor is None or int(replication_factor) <= 0:
        raise InvalidReplicationFactorError(f"replication factor must be larger than 0, got {replication_factor}")
    n = len(ids)
    if replication_factor > n:
        raise InvalidReplicationFactorError(
            f"replication factor: {replication_factor} larger than available brokers: {n}"
            + (f" (live brokers {ids})" if ids else "")
        )
    rng = rng or random
    start = start_index if start_index is not None else rng.randrange(n)
    shift = replica_shift if replica_shift is not None else rng.randrange(n)
    if racks is not None:
        unknown = [b for b in ids if not racks.get(b)]
        if unknown:
            raise InvalidReplicaAssignmentError(f"no rack known for broker(s) {unknown}")
        return _assign_rack_aware(
            {b: racks[b] for b in ids}, int(num_partitions), int(replication_factor), start, shift
        )
    out: dict[int, list[int]] = {}
    for p in range(int(num_partitions)):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        replicas = [ids[first]]
        for j in range(replication_factor - 1):
            replicas.append(ids[(first + 1 + (shift + j) % (n - 1)) % n])
        out[p] = replicas
    return out


def rack_alternated_brokers(racks: dict[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: racks sorted, brokers sorted within a rack, then one
    broker of each rack in turn (``{0: r1, 1: r3, 2: r3, 3: r2, 4: r2, 5: r1}`` -> 0, 3, 1, 5, 4, 2)."""
    by_rack: dict[str, list[int]] = {}
    for b, r in racks.items():
        by_rack.setdefault(r, []).append(int(b))
    queues = [sorted(by_rack[r]) for r in sorted(by_rack)]
    out: list[int] = []
    i = 0
    while len(out) < len(racks):
        q = queues[i % len(queues)]
        if q:
            out.append(q.pop(0))
        i += 1
    return out


def placement_racks(racks: dict[int, str | None], rack_aware: bool = True) -> dict[int, str] | None:
    """The racks to place replicas by (Kafka's ``RackAwareMode.Enforced``, or ``Disabled`` when
    ``rack_aware`` is false): None when no broker has a rack or ``rack_aware`` is false; every
    broker's rack when all have one; InvalidReplicaAssignmentError when only some do."""
    if not rack_aware or not any(racks.values()):
        return None
    missing = sorted(b for b, r in racks.items() if not r)
    if missing:
        raise InvalidReplicaAssignmentError(
            f"Not all brokers have rack information for replica rack aware assignment (brokers without "
            f"broker.rack: {missing}); use --disable-rack-aware to ignore racks"
        )
    return {b: str(r) for b, r in racks.items()}


def _assign_rack_aware(
    racks: dict[int, str], num_partitions: int, replication_factor: int, start: int, shift: int
) -> dict[int, list[int]]:
    arranged = rack_alternated_brokers(racks)
    n = len(arranged)
    num_racks = len(set(racks.values()))
    out: dict[int, list[int]] = {}
    for p in range(num_partitions):
        if p > 0 and p % n == 0:
            shift += 1
        first = (p + start) % n
        leader = arranged[first]
        replicas, used_racks, used = [leader], {racks[leader]}, {leader}
        k = 0
        for _ in range(replication_factor - 1):
            while True:
                broker = arranged[(first + 1 + (shift * num_racks + k) % (n - 1)) % n]
                k += 1
                rack = racks[broker]
                if (rack not in used_racks or len(used_racks) == num_racks) and (broker not in used or len(used) == n):
                    replicas.append(broker)
                    used_racks.add(rack)
                    used.add(broker)
                    break
        out[p] = replicas
    return out


# Topic-level configuration (Kafka's TopicConfig) and the kind of value each takes.
_LONG, _INT, _BOOL, _RATIO, _LIST, _STR = "long", "int", "boolean", "ratio", "list", "string"
TOPIC_CONFIGS: dict[str, tuple[str, object]] = {
    # name: (kind, minimum or allowed values)
    "cleanup.policy": (_LIST, ("delete", "compact")),
    "compression.type": (_STR, ("uncompressed", "producer", "gzip", "snappy", "lz4", "zstd")),
    "delete.retention.ms": (_LONG, 0),
    "file.delete.delay.ms": (_LONG, 0),
    "flush.messages": (_LONG, 1),
    "flush.ms": (_LONG, 0),
    "follower.replication.throttled.replicas": (_STR, None),
    "index.interval.bytes": (_INT, 0),
    "leader.replication.throttled.replicas": (_STR, None),
    "local.retention.bytes": (_LONG, -2),
    "local.retention.ms": (_LONG, -2),
    "max.compaction.lag.ms": (_LONG, 1),
    "max.message.bytes": (_INT, 0),
    "message.downconversion.enable": (_BOOL, None),
    "message.format.version": (_STR, None),
    "message.timestamp.after.max.ms": (_LONG, 0),
    "message.timestamp.before.max.ms": (_LONG, 0),
    "message.timestamp.difference.max.ms": (_LONG, 0),
    "message.timestamp.type": (_STR, ("CreateTime", "LogAppendTime")),
    "min.cleanable.dirty.ratio": (_RATIO, None),
    "min.compaction.lag.ms": (_LONG, 0),
    "min.insync.replicas": (_INT, 1),
    "preallocate": (_BOOL, None),
    "remote.storage.enable": (_BOOL, None),
    "retention.bytes": (_LONG, -1),
    "retention.ms": (_LONG, -1),
    "segment.bytes": (_INT, 14),
    "segment.index.bytes": (_INT, 4),
    "segment.jitter.ms": (_LONG, 0),
    "segment.ms": (_LONG, 1),
    "unclean.leader.election.enable": (_BOOL, None),
}


_INTERNAL_STATE = {
    OFFSETS_TOPIC: "every group's committed offsets",
    TRANSACTION_STATE_TOPIC: "every transaction's state",
    SPARK_SINK_LOG_TOPIC: "the exactly-once Spark sinks' commit records",
}


def check_internal_topic_configs(topic: str, overrides: dict) -> None:
    """Refuse (INVALID_CONFIG) overrides of an internal topic that would let the log delete live
    state: its ``cleanup.policy`` must stay ``compact`` alone (with ``delete`` in it, or without the
    override and so the broker's ``log.cleanup.policy``, retention would delete segments holding
    live offsets or transaction state).  The other settings leave a compacted log's live keys."""
    policy = overrides.get("cleanup.policy")
    items = sorted({i.strip().lower() for i in (policy or "").split(",") if i.strip()})
    if items != ["compact"]:
        shown = "unset (the broker's log.cleanup.policy)" if policy is None else f"cleanup.policy={policy}"
        raise InvalidConfigError(
            f"{topic} is an internal topic holding {_INTERNAL_STATE.get(topic, 'state')}: its "
            f"cleanup.policy must stay compact so that retention never deletes it; refused: {shown}"
        )


def validate_topic_configs(configs: Mapping[str, object] | None) -> dict[str, str]:
    """Check topic-level configs; return them as ``{name: str(value)}`` or raise :class:`InvalidConfigError`."""
    out: dict[str, str] = {}
    for name, value in (configs or {}).items():
        if name not in TOPIC_CONFIGS:
            raise InvalidConfigError(
                f"unknown topic config {name!r}; expected one of: {', '.join(sorted(TOPIC_CONFIGS))}"
            )
        if value is None:
            raise InvalidConfigError(f"topic config {name!r} has no value")
        if isinstance(value, bool):
            text = "true" if value else "false"
        else:
            text = str(value).strip()
        kind, rule = TOPIC_CONFIGS[name]
        if kind in (_LONG, _INT):
            try:
                number = int(text)
            except ValueError:
                raise InvalidConfigError(f"topic config {name!r} expects an integer, got {text!r}") from None
            limit = 2**63 - 1 if kind == _LONG else 2**31 - 1
            if number < rule or number > limit:
                raise InvalidConfigError(f"topic config {name!r} must be in [{rule}, {limit}], got {number}")
            text = str(number)
        elif kind == _BOOL:
            if text.lower() not in ("true", "false"):
                raise InvalidConfigError(f"topic config {name!r} expects true or false, got {text!r}")
            text = text.lower()
        elif kind == _RATIO:
            try:
                ratio = float(text)
            except ValueError:
                raise InvalidConfigError(f"topic config {name!r} expects a number in [0, 1], got {text!r}") from None
            if not 0.0 <= ratio <= 1.0:
                raise InvalidConfigError(f"topic config {name!r} expects a number in [0, 1], got {text!r}")
        elif kind == _LIST:
            items = [i.strip() for i in text.split(",") if i.strip()]
            if not items or any(i not in rule for i in items):
                raise InvalidConfigError(
                    f"topic config {name!r} expects a comma-separated list of {', '.join(rule)}, got {text!r}"
                )
            text = ",".join(sorted(set(items)))  # canonical: "compact", "delete" or "compact,delete"
        elif kind == _STR and rule is not None and text not in rule:
            raise InvalidConfigError(f"topic config {name!r} expects one of {', '.join(rule)}, got {text!r}")
        out[name] = text
    return out
