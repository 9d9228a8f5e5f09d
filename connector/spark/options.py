"""Options of the ``pyklog`` data source, named as Spark's Kafka connector (spark-sql-kafka) names them.

Spark hands a data source its options as a case-insensitive dict of strings (keys lower-cased).
:func:`parse_source_options` / :func:`parse_sink_options` turn them into frozen, picklable
dataclasses, checking every value; a wrong or missing option raises
:class:`broker.errors.ConfigError` whose message names the option, says what was expected and
what was read.  Validation runs when the DataFrame is defined (``load()``) and again when the query
starts, so a bad option never reaches an executor.

Source options (see docs/spark-connector.md for the full table)::

    kafka.bootstrap.servers | zookeeper.connect      where the cluster is (one is required)
    subscribe | subscribePattern | assign            what to read (exactly one)
    startingOffsets      earliest | latest | {"t":{"0":23,"1":-2}}  (-2 earliest, -1 latest)
    endingOffsets        batch only: latest | {"t":{"0":50,"1":-1}}
    startingTimestamp / startingOffsetsByTimestamp / startingOffsetsByTimestampStrategy
    endingTimestamp / endingOffsetsByTimestamp       batch only
    failOnDataLoss       true | false                (default true)
    maxOffsetsPerTrigger, minOffsetsPerTrigger, maxTriggerDelay (default 15m)
    minPartitions        split large offset ranges into several Spark tasks
    includeHeaders       true | false                (adds the ``headers`` column)
    consumerCache.enabled  true | false              (default true: tasks reuse a worker's connections)
    isolation.level | kafka.isolation.level          read_uncommitted | read_committed
    group.id | kafka.group.id, groupIdPrefix         consumer group (default: unique per query)
    offsets.storage      zookeeper | kafka           where the group's offsets are committed
    dual.commit.enabled  true | false                commit to both (migration)
    partition.assignment.strategy  range | roundrobin | sticky
    kafka.max.partition.fetch.bytes, kafka.client.id, kafka.request.timeout.ms, ...

Pure code; thread-safe (the dataclasses are immutable).  Runs on the driver and, as part of
pickled readers/writers, on executors.
"""

from __future__ import annotations

import difflib
import json
import logging
import re
import uuid
from dataclasses import dataclass, field

from pyklog.broker.common.config_def import ConfigDef, Type
from pyklog.broker.errors import ConfigError
from pyklog.connector.security import PLAINTEXT as PLAINTEXT_SECURITY
from pyklog.connector.security import SECURITY_KEYS, ClientSecurityConfig

log = logging.getLogger(__name__)

EARLIEST = -2
LATEST = -1

_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")

# options a Spark Kafka user may set that pyklog reads (lower-case, as Spark delivers them)
SOURCE_OPTIONS = {
    "kafka.bootstrap.servers",
    "zookeeper.connect",
    "zookeeper.jaas.config",
    "subscribe",
    "subscribepattern",
    "assign",
    "startingoffsets",
    "endingoffsets",
    "startingtimestamp",
    "startingoffsetsbytimestamp",
    "startingoffsetsbytimestampstrategy",
    "endingtimestamp",
    "endingoffsetsbytimestamp",
    "failondataloss",
    "maxoffsetspertrigger",
    "minoffsetspertrigger",
    "maxtriggerdelay",
    "minpartitions",
    "maxrecordsperpartition",
    "includeheaders",
    "isolation.level",
    "group.id",
    "groupidprefix",
    "offsets.storage",
    "dual.commit.enabled",
    "partition.assignment.strategy",
    "kafkaconsumer.polltimeoutms",
    "fetchoffset.numretries",
    "fetchoffset.retryintervalms",
    "zookeeper.session.timeout.ms",
    "path",
    "consumercache.enabled",
    "fetchondriver",
    "keyformat",
    "valueformat",
    "keyschema",
    "valueschema",
    "mode",
    "schema.registry.url",
    "keysubject",
    "valuesubject",
    "keyschemaversion",
    "valueschemaversion",
    "keymessagename",
    "valuemessagename",
    "key.subject.name.strategy",
    "value.subject.name.strategy",
    "keyrecordname",
    "valuerecordname",
}
# the names as documented (for messages and typo hints)
_DISPLAY = {
    "subscribepattern": "subscribePattern",
    "startingoffsets": "startingOffsets",
    "endingoffsets": "endingOffsets",
    "startingtimestamp": "startingTimestamp",
    "startingoffsetsbytimestamp": "startingOffsetsByTimestamp",
    "startingoffsetsbytimestampstrategy": "startingOffsetsByTimestampStrategy",
    "endingtimestamp": "endingTimestamp",
    "endingoffsetsbytimestamp": "endingOffsetsByTimestamp",
    "failondataloss": "failOnDataLoss",
    "maxoffsetspertrigger": "maxOffsetsPerTrigger",
    "minoffsetspertrigger": "minOffsetsPerTrigger",
    "maxtriggerdelay": "maxTriggerDelay",
    "minpartitions": "minPartitions",
    "maxrecordsperpartition": "maxRecordsPerPartition",
    "includeheaders": "includeHeaders",
    "consumercache.enabled": "consumerCache.enabled",
    "fetchondriver": "fetchOnDriver",
    "keyformat": "keyFormat",
    "valueformat": "valueFormat",
    "keyschema": "keySchema",
    "valueschema": "valueSchema",
    "keysubject": "keySubject",
    "valuesubject": "valueSubject",
    "keyschemaversion": "keySchemaVersion",
    "valueschemaversion": "valueSchemaVersion",
    "keymessagename": "keyMessageName",
    "valuemessagename": "valueMessageName",
    "keyschemaid": "keySchemaId",
    "valueschemaid": "valueSchemaId",
    "keyrecordname": "keyRecordName",
    "valuerecordname": "valueRecordName",
    "producercache.enabled": "producerCache.enabled",
    "groupidprefix": "groupIdPrefix",
    "kafkaconsumer.polltimeoutms": "kafkaConsumer.pollTimeoutMs",
    "fetchoffset.numretries": "fetchOffset.numRetries",
    "fetchoffset.retryintervalms": "fetchOffset.retryIntervalMs",
    "deliveryguarantee": "deliveryGuarantee",
    "transactionalidprefix": "transactionalIdPrefix",
}

# Kafka consumer settings pyklog honours (after the "kafka." prefix); the fetch settings go to the
# executors' SimpleConsumer (``SourceOptions.consumer_kwargs``)
CONSUMER_SETTINGS = {
    "bootstrap.servers",
    "client.id",
    "max.partition.fetch.bytes",
    "fetch.max.bytes",
    "isolation.level",
    "request.timeout.ms",
    "group.id",
    "check.crcs",
    *SECURITY_KEYS,
    "session.timeout.ms",
    "default.api.timeout.ms",
    "fetch.max.wait.ms",
    "fetch.min.bytes",
    "retry.backoff.ms",
}
# Kafka consumer settings a Spark Kafka user may carry over that have no pyklog equivalent, with why
# (named, with the unknown ones, in one WARNING; never an error, as Kafka's clients only log them)
_NO_EFFECT_CONSUMER = {
    "max.poll.records": "each Spark task fetches its whole offset range; there is no poll loop",
    "max.poll.interval.ms": "there is no poll loop",
    "heartbeat.interval.ms": "no group coordinator heartbeats",
    "auto.commit.interval.ms": "offsets are committed at micro-batch boundaries",
    "client.rack": "no rack-aware fetching",
    "receive.buffer.bytes": "the OS default is used",
    "send.buffer.bytes": "the OS default is used",
    "metadata.max.age.ms": "metadata is refreshed at every trigger",
    "reconnect.backoff.ms": "see kafka.retry.backoff.ms",
    "reconnect.backoff.max.ms": "see kafka.retry.backoff.ms",
    "connections.max.idle.ms": "a task's connection lives as long as the task",
    "allow.auto.create.topics": "the source never creates topics",
    "exclude.internal.topics": "subscribePattern never matches internal topics (names starting with '__')",
}
# Kafka consumer settings Spark's Kafka source rejects, with its reasons
_REJECTED_CONSUMER = {
    "auto.offset.reset": "set the source option 'startingOffsets' to 'earliest' or 'latest' instead",
    "key.deserializer": "keys are always read as bytes; deserialize them with DataFrame operations "
    "(e.g. CAST(key AS STRING))",
    "value.deserializer": "values are always read as bytes; deserialize them with DataFrame "
    "operations (e.g. CAST(value AS STRING))",
    "enable.auto.commit": "pyklog commits the group's offsets itself at every micro-batch",
    "interceptor.classes": "consumer interceptors are a Java client feature",
}
# Producer settings the sink passes to connector.producer.Producer (after "kafka.")
PRODUCER_SETTINGS = {
    "bootstrap.servers",
    "acks",
    "compression.type",
    "linger.ms",
    "batch.size",
    "client.id",
    "max.request.size",
    "enable.idempotence",
    "request.timeout.ms",
    "retries",
    "max.in.flight.requests.per.connection",
    "delivery.timeout.ms",
    "retry.backoff.ms",
    "buffer.memory",
    *SECURITY_KEYS,
    "max.block.ms",
    "transaction.timeout.ms",
    "metadata.max.age.ms",
    "allow.auto.create.topics",
}
_NO_EFFECT_PRODUCER = {
    "partitioner.class": "pyklog's producer uses its own partitioner (Kafka's default: murmur2 of the key)",
    "client.dns.lookup": "host names are resolved by the OS",
    "receive.buffer.bytes": "the OS default is used",
    "send.buffer.bytes": "the OS default is used",
    "client.rack": "no rack awareness",
    "connections.max.idle.ms": "a task's connections live as long as the task",
    "reconnect.backoff.ms": "see kafka.retry.backoff.ms",
    "reconnect.backoff.max.ms": "see kafka.retry.backoff.ms",
}
_REJECTED_PRODUCER = {
    "key.serializer": "keys are written as bytes (string columns are UTF-8 encoded)",
    "value.serializer": "values are written as bytes (string columns are UTF-8 encoded)",
    "interceptor.classes": "producer interceptors are a Java client feature",
    "transactional.id": "with deliveryGuarantee=exactly-once each task derives its own transactional id "
    "from the option 'transactionalIdPrefix' (see docs/spark-connector.md)",
}
SINK_OPTIONS = {
    "kafka.bootstrap.servers",
    "zookeeper.connect",
    "zookeeper.jaas.config",
    "topic",
    "includeheaders",
    "path",
    "checkpointlocation",
    "queryname",
    "zookeeper.session.timeout.ms",
    "deliveryguarantee",
    "transactionalidprefix",
    "producercache.enabled",
}
#: the sink's typed key / value options (:mod:`pyklog.connector.spark.typed_write`)
SINK_TYPED_OPTIONS = {
    "keyformat",
    "valueformat",
    "keyschema",
    "valueschema",
    "keyrecordname",
    "valuerecordname",
    "keymessagename",
    "valuemessagename",
    "schema.registry.url",
    "key.subject.name.strategy",
    "value.subject.name.strategy",
    "keysubject",
    "valuesubject",
    "keyschemaid",
    "valueschemaid",
    "keyschemaversion",
    "valueschemaversion",
    "auto.register.schemas",
    "use.latest.version",
}
SINK_OPTIONS |= SINK_TYPED_OPTIONS


def display(name: str) -> str:
    """The documented spelling of a lower-cased option name."""
    return _DISPLAY.get(name, name)


def lower_keys(options) -> dict[str, str]:
    """Spark's options with lower-case keys and string values (option names are case-insensitive)."""
    out = {}
    for k, v in dict(options or {}).items():
        out[str(k).lower()] = v if isinstance(v, str) else str(v)
    return out


#: The boolean options with their defaults (lower-cased names, as Spark hands them over); values
#: follow Kafka's rule: ``true`` or ``false`` in any case.
BOOLEAN_OPTIONS = (
    ConfigDef(
        error_format="option '{name}': expected {expected}, read {value!r}",
        display=display,
        expected={Type.BOOLEAN: "'true' or 'false'"},
    )
    .define("failondataloss", Type.BOOLEAN, True, doc="fail the query when offsets are gone")
    .define("includeheaders", Type.BOOLEAN, False, doc="add the headers column")
    .define(
        "consumercache.enabled", Type.BOOLEAN, True, doc="read tasks reuse their Python worker's broker connections"
    )
    .define(
        "fetchondriver",
        Type.BOOLEAN,
        False,
        doc="the planner fetches each micro-batch's records itself (no read task per partition)",
    )
    .define(
        "producercache.enabled",
        Type.BOOLEAN,
        True,
        doc="at-least-once write tasks reuse their Python worker's producer",
    )
    .define("dual.commit.enabled", Type.BOOLEAN, False, doc="commit offsets to ZooKeeper and Kafka")
    .define("kafka.check.crcs", Type.BOOLEAN, True, doc="verify record batch CRCs")
    .define("kafka.enable.idempotence", Type.BOOLEAN, True, doc="idempotent producer (sink)")
    .define("kafka.allow.auto.create.topics", Type.BOOLEAN, True, doc="auto-create missing topics (sink)")
)


def _bool(opts: dict, name: str) -> bool:
    """Boolean option ``name`` of the lower-cased ``opts`` (its default from BOOLEAN_OPTIONS)."""
    return BOOLEAN_OPTIONS.parse_value(name, opts.get(name))


def _long(opts: dict, name: str, default=None, *, minimum: int | None = None):
    v = opts.get(name)
    if v is None:
        return default
    try:
        n = int(v.strip())
    except ValueError:
        raise ConfigError(f"option '{display(name)}': expected an integer, read {v!r}") from None
    if minimum is not None and n < minimum:
        raise ConfigError(f"option '{display(name)}': expected an integer >= {minimum}, read {v!r}")
    return n


_DURATION_RE = re.compile(
    r"^\s*(-?\d+)\s*(us|ms|s|sec|secs|second|seconds|m|min|mins|minute|minutes|"
    r"h|hour|hours|d|day|days)?\s*$",
    re.I,
)
_UNIT_MS = {
    "us": 0.001,
    "ms": 1,
    "s": 1000,
    "sec": 1000,
    "secs": 1000,
    "second": 1000,
    "seconds": 1000,
    "m": 60000,
    "min": 60000,
    "mins": 60000,
    "minute": 60000,
    "minutes": 60000,
    "h": 3600000,
    "hour": 3600000,
    "hours": 3600000,
    "d": 86400000,
    "day": 86400000,
    "days": 86400000,
}


def parse_duration_ms(value: str, name: str) -> int:
    """Spark's time strings: ``15m``, ``30s``, ``500ms``, ``2h``, ``1d``; a bare number is ms."""
    m = _DURATION_RE.match(value)
    if not m:
        raise ConfigError(
            f"option '{display(name)}': expected a duration such as '15m', '30s' or '500ms', read {value!r}"
        )
    n = int(m.group(1))
    if n < 0:
        raise ConfigError(f"option '{display(name)}': expected a duration >= 0, read {value!r}")
    return int(n * _UNIT_MS[(m.group(2) or "ms").lower()])


def _topic_name(t: str, name: str) -> str:
    if not _TOPIC_RE.match(t) or t in (".", ".."):
        raise ConfigError(
            f"option '{display(name)}': expected topic names of letters, digits, '.', '_' and '-' "
            f"(at most 249 characters), read {t!r}"
        )
    return t


def _json_object(value: str, name: str, example: str):
    try:
        obj = json.loads(value)
    except ValueError as e:
        raise ConfigError(f"option '{display(name)}': expected JSON such as {example}, read {value!r} ({e})") from None
    if not isinstance(obj, dict):
        raise ConfigError(f"option '{display(name)}': expected a JSON object such as {example}, read {value!r}")
    return obj


def parse_partition_offsets(
    value: str, name: str, *, allow: tuple[int, ...] = (EARLIEST, LATEST), what: str = "offset"
) -> dict[tuple[str, int], int]:
    """``{"topicA":{"0":23,"1":-1}}`` -> ``{("topicA", 0): 23, ("topicA", 1): -1}``.

    Values below 0 must be in ``allow`` (-2 earliest, -1 latest)."""
    example = '{"topicA":{"0":23,"1":-1}}'
    obj = _json_object(value, name, example)
    out: dict[tuple[str, int], int] = {}
    for topic, parts in obj.items():
        _topic_name(topic, name)
        if not isinstance(parts, dict):
            raise ConfigError(
                f"option '{display(name)}': expected an object of partition -> {what} for topic "
                f"{topic!r} (e.g. {example}), read {json.dumps(parts)}"
            )
        for p, off in parts.items():
            try:
                pn = int(p)
            except ValueError:
                raise ConfigError(
                    f"option '{display(name)}': expected partition numbers as keys for topic {topic!r}, read {p!r}"
                ) from None
            if pn < 0:
                raise ConfigError(f"option '{display(name)}': expected partition >= 0 for topic {topic!r}, read {pn}")
            if isinstance(off, bool) or not isinstance(off, int):
                raise ConfigError(
                    f"option '{display(name)}': expected an integer {what} for {topic}-{pn}, read {json.dumps(off)}"
                )
            if off < 0 and off not in allow:
                allowed = " or ".join(f"{a} ({'earliest' if a == EARLIEST else 'latest'})" for a in allow)
                raise ConfigError(
                    f"option '{display(name)}': {topic}-{pn} has {what} {off}; expected >= 0"
                    + (f" or {allowed}" if allow else "")
                )
            out[(topic, pn)] = off
    return out


@dataclass(frozen=True)
class OffsetSpec:
    """Where reading starts or ends.

    ``kind``: "earliest" | "latest" | "offsets" (``offsets`` maps (topic, partition) to an offset,
    -2 earliest, -1 latest) | "timestamp" (``timestamp`` ms for every partition) |
    "timestamps" (``offsets`` maps (topic, partition) to a timestamp).
    ``strategy``: for timestamps, "error" (no offset at or after the timestamp fails) or "latest".
    """

    kind: str
    offsets: tuple = ()  # sorted ((topic, partition), value) pairs, hashable and picklable
    timestamp: int | None = None
    strategy: str = "error"

    def offsets_dict(self) -> dict[tuple[str, int], int]:
        return dict(self.offsets)


def _spec_from_map(kind: str, m: dict, strategy: str = "error") -> OffsetSpec:
    return OffsetSpec(kind, tuple(sorted(m.items())), strategy=strategy)


@dataclass(frozen=True)
class Subscription:
    """``kind`` "subscribe" (``topics``), "subscribePattern" (``pattern``) or "assign"
    (``partitions``: sorted (topic, partition) pairs)."""

    kind: str
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    partitions: tuple[tuple[str, int], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribe":
            return topic in self.topics
        if self.kind == "subscribePattern":
            return re.fullmatch(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.partitions)

    def describe(self) -> str:
        if self.kind == "subscribe":
            return f"subscribe={','.join(self.topics)}"
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern}"
        return "assign=" + ",".join(f"{t}-{p}" for t, p in self.partitions)


@dataclass(frozen=True)
class ClusterOptions:
    """How to reach the cluster: a bootstrap list and/or a ZooKeeper connect string."""

    bootstrap_servers: str | None
    zookeeper_connect: str | None
    client_id: str = "pyklog-spark"
    request_timeout_s: float = 30.0
    zk_session_timeout_s: float = 6.0
    #: kafka.security.protocol, kafka.ssl.*, kafka.sasl.* (secrets hidden from repr)
    security: ClientSecurityConfig = PLAINTEXT_SECURITY
    #: ZooKeeper digest credentials (option 'zookeeper.jaas.config'; a ZkCredentials, whose repr
    #: hides the password), None: KAFKA_OPTS' JAAS file where the process has one, else none
    zookeeper_credentials: object = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class SourceOptions:
    cluster: ClusterOptions
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec | None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000
    min_partitions: int | None = None
    max_records_per_partition: int | None = None  # Spark 4.x maxRecordsPerPartition
    include_headers: bool = False
    #: typed key / value columns (:mod:`pyklog.connector.spark.typed`): ``keyFormat``, ``valueFormat``,
    #: ``keySchema``, ``valueSchema``, ``mode``; binary (Spark's Kafka schema) by default
    formats: tuple = ()
    isolation_level: str = "read_uncommitted"
    group_id: str | None = None
    group_id_prefix: str = "spark-pyklog-source"
    offsets_storage: str = "zookeeper"
    dual_commit: bool = False
    assignment_strategy: str = "range"
    max_partition_fetch_bytes: int = 4 * 1024 * 1024
    check_crcs: bool = True
    poll_timeout_ms: int = 120000
    # driver-side look-ups (metadata, ListOffsets, group offsets): Spark's fetchOffset.numRetries /
    # fetchOffset.retryIntervalMs, within Kafka's default.api.timeout.ms as the outage bound
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    api_timeout_ms: int = 60000
    streaming: bool = True
    extra: tuple = field(default=())  # other kafka.* settings, for the record
    # the executors' fetches (kafka.fetch.max.wait.ms, kafka.fetch.min.bytes, kafka.fetch.max.bytes,
    # kafka.retry.backoff.ms); None: pyklog's defaults
    fetch_max_wait_ms: int | None = None
    fetch_min_bytes: int | None = None
    fetch_max_bytes: int | None = None
    retry_backoff_ms: int | None = None
    # read tasks take their consumer (its broker connections) from the Python worker's cache
    # (source option consumerCache.enabled, Spark's spark.kafka.consumer.cache.* for its Kafka source)
    consumer_cache: bool = True
    # source option fetchOnDriver: the planner fetches each micro-batch's records in latestOffset and
    # hands them to Spark with the plan (PySpark's SimpleDataSourceStreamReader): no Python read task
    fetch_on_driver: bool = False

    def describe(self) -> str:
        """A stable, readable name of this source, as Spark's Kafka source names itself in a query's
        progress (``KafkaV2[Subscribe[topicA,topicB]]``): ``pyklog[Subscribe[topicA,topicB]]``,
        ``pyklog[SubscribePattern[events-.*]]``, ``pyklog[Assign[t-0, t-1]]``, plus the group."""
        sub = self.subscription
        if sub.kind == "subscribe":
            what = f"Subscribe[{','.join(sub.topics)}]"
        elif sub.kind == "subscribePattern":
            what = f"SubscribePattern[{sub.pattern}]"
        else:
            what = "Assign[" + ", ".join(f"{t}-{p}" for t, p in sub.partitions) + "]"
        if self.uses_group and self.group_id:
            what += f" group {self.group_id}"
        return f"pyklog[{what}]"

    @property
    def uses_group(self) -> bool:
        """Whether the driver joins the ZooKeeper consumer group (subscribe/subscribePattern with
        zookeeper.connect); ``assign`` and bootstrap-only queries read their partitions directly."""
        return self.cluster.zookeeper_connect is not None and self.subscription.kind != "assign"


def _cluster(opts: dict, *, role: str) -> ClusterOptions:
    bootstrap = opts.get("kafka.bootstrap.servers")
    zk = opts.get("zookeeper.connect")
    if bootstrap is not None and not bootstrap.strip():
        raise ConfigError("option 'kafka.bootstrap.servers': expected host:port[,host:port...], read ''")
    if zk is not None and not zk.strip():
        raise ConfigError("option 'zookeeper.connect': expected host:port[,host:port...][/chroot], read ''")
    if not bootstrap and not zk:
        raise ConfigError(
            f"option 'kafka.bootstrap.servers' or 'zookeeper.connect' must be set for the pyklog {role} "
            "(e.g. .option('kafka.bootstrap.servers', 'localhost:9092') or "
            ".option('zookeeper.connect', 'localhost:2181'))"
        )
    for hp in (bootstrap or "").split(","):
        hp = hp.strip()
        if not hp:
            continue
        hp = hp.split("://", 1)[-1]
        host, _, port = hp.rpartition(":")
        if not host or not port.isdigit():
            raise ConfigError(f"option 'kafka.bootstrap.servers': expected host:port entries, read {hp!r}")
    security = ClientSecurityConfig.from_config(opts, prefix="kafka.")
    try:
        security.sasl_credentials()  # a SASL protocol without a usable mechanism, user or password: now
    except ConfigError as e:
        raise ConfigError(f"option 'kafka.sasl.*': {e}") from None
    timeout_ms = _long(opts, "kafka.request.timeout.ms", 30000, minimum=1)
    zk_timeout_ms = _long(opts, "zookeeper.session.timeout.ms", 6000, minimum=1000)
    jaas = opts.get("zookeeper.jaas.config")
    if jaas is not None:
        from pyklog.broker.zk.znode_acls import parse_client_jaas

        credentials = parse_client_jaas(jaas, "option 'zookeeper.jaas.config'")
    else:
        credentials = None
    return ClusterOptions(
        bootstrap_servers=bootstrap.strip() if bootstrap else None,
        zookeeper_connect=zk.strip() if zk else None,
        client_id=opts.get("kafka.client.id", "pyklog-spark"),
        request_timeout_s=timeout_ms / 1000.0,
        zk_session_timeout_s=zk_timeout_ms / 1000.0,
        security=security,
        zookeeper_credentials=credentials,
    )


def _check_names(
    opts: dict,
    known: set[str],
    allowed_kafka: set[str],
    rejected: dict[str, str],
    role: str,
    no_effect: dict[str, str] | None = None,
) -> list[str]:
    """Reject Kafka settings Spark rejects and typos of known options; return the names pyklog does
    not use, after naming them all in one WARNING (Kafka settings pyklog knows to have no effect
    with the reason, then the unknown ones)."""
    unknown = []
    idle = []
    documented = {display(k) for k in known}
    for k in opts:
        if k.startswith("kafka."):
            setting = k[len("kafka.") :]
            if setting in rejected:
                raise ConfigError(
                    f"option '{k}': Kafka option '{setting}' is not supported by the pyklog {role}: {rejected[setting]}"
                )
            if setting in (no_effect or {}):
                idle.append(f"{k} ({no_effect[setting]})")
            elif setting not in allowed_kafka:
                unknown.append(k)
            continue
        if k in known:
            continue
        close = difflib.get_close_matches(k, list(known), n=1, cutoff=0.85)
        if close:
            raise ConfigError(
                f"unknown option '{k}' for the pyklog {role}; did you mean "
                f"'{display(close[0])}'? (known options: {', '.join(sorted(documented))})"
            )
        unknown.append(k)
    if unknown or idle:
        parts = []
        if idle:
            parts.append("Kafka settings without effect in pyklog: " + "; ".join(sorted(idle)))
        if unknown:
            parts.append("unknown options: " + ", ".join(sorted(unknown)))
        log.warning("pyklog %s ignores %s", role, ". ".join(parts))
    return sorted(unknown) + sorted(k.split(" ", 1)[0] for k in idle)


def _column_formats(opts: dict) -> tuple:
    from pyklog.connector.spark.typed import parse_column_format

    mode = opts.get("mode")
    topics = tuple(t.strip() for t in (opts.get("subscribe") or "").split(",") if t.strip())
    out = tuple(
        parse_column_format(
            c,
            opts.get(f"{c}format"),
            opts.get(f"{c}schema"),
            mode,
            registry_url=opts.get("schema.registry.url"),
            subject=opts.get(f"{c}subject"),
            version=opts.get(f"{c}schemaversion"),
            topics=topics,
            message=opts.get(f"{c}messagename"),
            strategy=opts.get(f"{c}.subject.name.strategy"),
            record_name=opts.get(f"{c}recordname"),
        )
        for c in ("key", "value")
    )
    return tuple(f for f in out if f.typed)


def parse_source_options(options, *, streaming: bool | None) -> SourceOptions:
    """Validate the source options of a streaming (``streaming=True``) or batch (False) query;
    None checks everything that does not depend on the kind of query (when a DataFrame is defined)."""
    opts = lower_keys(options)
    _check_names(opts, SOURCE_OPTIONS, CONSUMER_SETTINGS, _REJECTED_CONSUMER, "source", _NO_EFFECT_CONSUMER)
    cluster = _cluster(opts, role="source")

    given = [n for n in ("subscribe", "subscribepattern", "assign") if opts.get(n) is not None]
    if len(given) != 1:
        raise ConfigError(
            "exactly one of the options 'subscribe', 'subscribePattern' or 'assign' must be set, "
            + (f"read {', '.join(display(g) for g in given)}" if given else "read none")
        )
    kind = given[0]
    if kind == "subscribe":
        topics = [t.strip() for t in opts["subscribe"].split(",") if t.strip()]
        if not topics:
            raise ConfigError(
                f"option 'subscribe': expected a comma-separated list of topics, read {opts['subscribe']!r}"
            )
        sub = Subscription("subscribe", topics=tuple(sorted({_topic_name(t, "subscribe") for t in topics})))
    elif kind == "subscribepattern":
        pattern = opts["subscribepattern"]
        if not pattern.strip():
            raise ConfigError("option 'subscribePattern': expected a regular expression, read ''")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ConfigError(
                f"option 'subscribePattern': expected a regular expression, read {pattern!r} ({e})"
            ) from None
        sub = Subscription("subscribePattern", pattern=pattern)
    else:
        example = '{"topicA":[0,1],"topicB":[2,4]}'
        obj = _json_object(opts["assign"], "assign", example)
        parts = set()
        for t, ps in obj.items():
            _topic_name(t, "assign")
            if not isinstance(ps, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in ps
            ):
                raise ConfigError(
                    f"option 'assign': expected a list of partition numbers >= 0 for topic {t!r} "
                    f"(e.g. {example}), read {json.dumps(ps)}"
                )
            parts.update((t, p) for p in ps)
        if not parts:
            raise ConfigError(
                f"option 'assign': expected at least one partition (e.g. {example}), read {opts['assign']!r}"
            )
        sub = Subscription("assign", partitions=tuple(sorted(parts)))

    # starting position: startingTimestamp > startingOffsetsByTimestamp > startingOffsets (as Spark)
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in ("error", "latest"):
        raise ConfigError(
            f"option 'startingOffsetsByTimestampStrategy': expected 'error' or 'latest', read {strategy!r}"
        )
    starting = _position(opts, "starting", bool(streaming), strategy)
    ending = None
    if streaming:
        for n in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if n in opts:
                raise ConfigError(
                    f"option '{display(n)}' is not valid in streaming queries "
                    "(use it with spark.read, or Trigger.AvailableNow to stop at the end)"
                )
    else:
        ending = _position(opts, "ending", False, "error")
    if streaming is False:
        if starting.kind == "latest":
            raise ConfigError(
                "option 'startingOffsets': 'latest' is not valid for batch queries "
                "(a batch query would read nothing); use 'earliest' or JSON offsets"
            )
        if starting.kind == "offsets" and any(v == LATEST for _, v in starting.offsets):
            raise ConfigError("option 'startingOffsets': -1 (latest) is not valid for batch queries")
        if ending.kind == "earliest":
            raise ConfigError(
                "option 'endingOffsets': 'earliest' is not valid for batch queries; use 'latest' or JSON offsets"
            )
        if ending.kind == "offsets" and any(v == EARLIEST for _, v in ending.offsets):
            raise ConfigError("option 'endingOffsets': -2 (earliest) is not valid for batch queries")

    if ending is not None:
        _check_offset_limits(starting, ending)

    max_per = _long(opts, "maxoffsetspertrigger", None, minimum=1)
    min_per = _long(opts, "minoffsetspertrigger", None, minimum=1)
    if max_per is not None and min_per is not None and min_per > max_per:
        raise ConfigError(
            f"option 'minOffsetsPerTrigger' ({min_per}) must not exceed 'maxOffsetsPerTrigger' ({max_per})"
        )
    delay_ms = parse_duration_ms(opts.get("maxtriggerdelay", "15m"), "maxtriggerdelay")
    if _bool(opts, "fetchondriver"):
        limits = [
            display(n)
            for n in (
                "maxoffsetspertrigger",
                "minoffsetspertrigger",
                "maxtriggerdelay",
                "minpartitions",
                "maxrecordsperpartition",
            )
            if n in opts
        ]
        if limits:
            raise ConfigError(
                f"option 'fetchOnDriver' cannot be combined with {', '.join(limits)}: the "
                "planner then fetches everything available in each trigger and hands it to "
                "Spark as one partition (PySpark's simple stream reader has no read limits); "
                "drop those options or fetchOnDriver"
            )
        if streaming is False:
            raise ConfigError("option 'fetchOnDriver' is valid in streaming queries only")

    isolation = (opts.get("isolation.level") or opts.get("kafka.isolation.level") or "read_uncommitted").strip().lower()
    if isolation not in ("read_uncommitted", "read_committed"):
        raise ConfigError(
            f"option 'isolation.level': expected 'read_uncommitted' or 'read_committed', read {isolation!r}"
        )

    group_id = opts.get("group.id") or opts.get("kafka.group.id")
    if group_id is not None:
        group_id = group_id.strip()
        if not group_id or "/" in group_id:
            raise ConfigError(f"option 'group.id': expected a non-empty group name without '/', read {group_id!r}")
    storage_default = "zookeeper" if cluster.zookeeper_connect else "kafka"
    storage = opts.get("offsets.storage", storage_default).strip().lower()
    if storage not in ("zookeeper", "kafka"):
        raise ConfigError(f"option 'offsets.storage': expected 'zookeeper' or 'kafka', read {storage!r}")
    if storage == "zookeeper" and not cluster.zookeeper_connect:
        raise ConfigError(
            "option 'offsets.storage' is 'zookeeper' but option 'zookeeper.connect' is not set; "
            "set zookeeper.connect or use offsets.storage=kafka"
        )
    dual = _bool(opts, "dual.commit.enabled")
    if dual and not cluster.zookeeper_connect:
        raise ConfigError(
            "option 'dual.commit.enabled' needs option 'zookeeper.connect' (it commits to ZooKeeper and to Kafka)"
        )
    strategy_name = opts.get("partition.assignment.strategy", "range").strip().lower()
    if strategy_name not in ("range", "roundrobin", "sticky"):
        raise ConfigError(
            f"option 'partition.assignment.strategy': expected 'range', 'roundrobin' or "
            f"'sticky', read {strategy_name!r}"
        )
    fetch_bytes = _long(opts, "kafka.max.partition.fetch.bytes", 4 * 1024 * 1024, minimum=1024)
    if fetch_bytes > (1 << 30):
        raise ConfigError(f"option 'kafka.max.partition.fetch.bytes': expected at most 1 GiB, read {fetch_bytes}")
    # the security settings are in cluster.security (whose repr hides the secrets), not here
    extra = tuple(
        sorted((k, v) for k, v in opts.items() if k.startswith("kafka.") and k[len("kafka.") :] not in SECURITY_KEYS)
    )
    return SourceOptions(
        cluster=cluster,
        subscription=sub,
        starting=starting,
        ending=ending,
        fail_on_data_loss=_bool(opts, "failondataloss"),
        max_offsets_per_trigger=max_per,
        min_offsets_per_trigger=min_per,
        max_trigger_delay_ms=delay_ms,
        min_partitions=_long(opts, "minpartitions", None, minimum=1),
        max_records_per_partition=_long(opts, "maxrecordsperpartition", None, minimum=1),
        include_headers=_bool(opts, "includeheaders"),
        formats=_column_formats(opts),
        isolation_level=isolation,
        group_id=group_id,
        group_id_prefix=opts.get("groupidprefix", "spark-pyklog-source"),
        offsets_storage=storage,
        dual_commit=dual,
        assignment_strategy=strategy_name,
        max_partition_fetch_bytes=fetch_bytes,
        check_crcs=_bool(opts, "kafka.check.crcs"),
        poll_timeout_ms=_long(opts, "kafkaconsumer.polltimeoutms", 120000, minimum=1),
        fetch_offset_retries=_long(opts, "fetchoffset.numretries", 3, minimum=0),
        fetch_offset_retry_interval_ms=_long(opts, "fetchoffset.retryintervalms", 10, minimum=0),
        api_timeout_ms=_long(opts, "kafka.default.api.timeout.ms", 60000, minimum=1),
        streaming=bool(streaming),
        extra=extra,
        fetch_max_wait_ms=_long(opts, "kafka.fetch.max.wait.ms", None, minimum=0),
        fetch_min_bytes=_long(opts, "kafka.fetch.min.bytes", None, minimum=0),
        fetch_max_bytes=_long(opts, "kafka.fetch.max.bytes", None, minimum=1024),
        retry_backoff_ms=_long(opts, "kafka.retry.backoff.ms", None, minimum=0),
        consumer_cache=_bool(opts, "consumercache.enabled"),
        fetch_on_driver=_bool(opts, "fetchondriver"),
    )


def _tp_list(tps) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(tps)) or "none"


def _check_offset_limits(starting: OffsetSpec, ending: OffsetSpec) -> None:
    """Spark's ``checkOffsetLimitValidity``: when both ends are per-partition JSON (offsets, or
    timestamps) they must name the same partitions, and no start may lie after its end (earliest
    and latest, -2 and -1, are not compared)."""
    pairs = (
        ("offsets", "startingOffsets", "endingOffsets"),
        ("timestamps", "startingOffsetsByTimestamp", "endingOffsetsByTimestamp"),
    )
    for kind, s_name, e_name in pairs:
        if starting.kind != kind or ending.kind != kind:
            continue
        s, e = starting.offsets_dict(), ending.offsets_dict()
        if set(s) != set(e):
            raise ConfigError(
                f"options '{s_name}' and '{e_name}' must name the same partitions: only in {s_name}: "
                f"{_tp_list(set(s) - set(e))}; only in {e_name}: {_tp_list(set(e) - set(s))}"
            )
        for tp in sorted(s):
            if s[tp] >= 0 and e[tp] >= 0 and s[tp] > e[tp]:
                raise ConfigError(
                    f"option '{s_name}': {tp[0]}-{tp[1]} starts at {s[tp]}, after its end {e[tp]} in '{e_name}'"
                )


def check_covers(spec: OffsetSpec, which: str, partitions) -> None:
    """Spark's rule for per-partition JSON (``startingOffsets``/``endingOffsets``/``...ByTimestamp``):
    it must name exactly the partitions the query reads, no more, no fewer (-2 earliest and -1
    latest are there for partitions one does not care about).  ``partitions``: what the
    subscription covers now (driver planner)."""
    if spec is None or spec.kind not in ("offsets", "timestamps"):
        return
    name = f"{which}Offsets" if spec.kind == "offsets" else f"{which}OffsetsByTimestamp"
    given = set(spec.offsets_dict())
    assigned = set(partitions)
    if given != assigned:
        hint = (
            "use -2 for earliest and -1 for latest where you do not care"
            if spec.kind == "offsets"
            else "every partition read must have a timestamp"
        )
        raise ConfigError(
            f"option '{name}' must name every partition the query reads and no other ({hint}): "
            f"missing {_tp_list(assigned - given)}; not read by this query {_tp_list(given - assigned)}"
        )


def _position(opts: dict, which: str, streaming: bool, strategy: str) -> OffsetSpec:
    ts_name = f"{which}timestamp"
    by_ts_name = f"{which}offsetsbytimestamp"
    off_name = f"{which}offsets"
    if opts.get(ts_name) is not None:
        ts = _long(opts, ts_name, minimum=0)
        return OffsetSpec("timestamp", timestamp=ts, strategy=strategy)
    if opts.get(by_ts_name) is not None:
        m = parse_partition_offsets(opts[by_ts_name], by_ts_name, allow=(), what="timestamp")
        return _spec_from_map("timestamps", m, strategy)
    default = "latest" if (streaming or which == "ending") else "earliest"
    v = opts.get(off_name, default).strip()
    if v.lower() in ("earliest", "latest"):
        return OffsetSpec(v.lower())
    if not v.startswith("{"):
        raise ConfigError(
            f"option '{display(off_name)}': expected 'earliest', 'latest' or JSON such as "
            f'{{"topicA":{{"0":23,"1":-2}}}}, read {v!r}'
        )
    return _spec_from_map("offsets", parse_partition_offsets(v, off_name))


AT_LEAST_ONCE = "at-least-once"
EXACTLY_ONCE = "exactly-once"
#: the sink's default ``kafka.transaction.timeout.ms`` with exactly-once: the brokers' default
#: ``transaction.max.timeout.ms``.  A transaction must outlive its micro-batch AND, after a driver
#: crash inside ``commit``, the restart and the replay of that batch (measured: 70 s on a loaded
#: 2-core machine), so Kafka's producer default of 60 s is too short; Flink's KafkaSink uses 1 h.
DEFAULT_TRANSACTION_TIMEOUT_MS = 900000
#: Kafka's broker default ``transaction.max.timeout.ms``: a larger timeout is refused by the broker
BROKER_MAX_TRANSACTION_TIMEOUT_MS = 900000
_PREFIX_RE = re.compile(r"^[a-zA-Z0-9._-]{1,160}$")


@dataclass(frozen=True)
class SinkOptions:
    cluster: ClusterOptions
    topic: str | None
    producer_config: tuple  # sorted (setting, value) pairs for connector.producer.Producer
    delivery_guarantee: str = AT_LEAST_ONCE
    transactional_id_prefix: str | None = None  # None: derived from the streaming query id
    transaction_timeout_ms: int = DEFAULT_TRANSACTION_TIMEOUT_MS
    # at-least-once tasks take their producer from the Python worker's cache (producerCache.enabled;
    # Spark's Kafka sink: spark.kafka.producer.cache.timeout)
    producer_cache: bool = True
    #: the typed key / value options, sorted ``(lower-case name, value)`` pairs, resolved against
    #: the DataFrame's schema when the writer is created (:mod:`pyklog.connector.spark.typed_write`)
    typed_options: tuple = ()

    @property
    def exactly_once(self) -> bool:
        return self.delivery_guarantee == EXACTLY_ONCE

    def producer_dict(self) -> dict[str, str]:
        return dict(self.producer_config)


def parse_sink_options(options) -> SinkOptions:
    """Validate the sink options (``df.write`` / ``writeStream``)."""
    opts = lower_keys(options)
    _check_names(opts, SINK_OPTIONS, PRODUCER_SETTINGS, _REJECTED_PRODUCER, "sink", _NO_EFFECT_PRODUCER)
    cluster = _cluster(opts, role="sink")
    topic = opts.get("topic")
    if topic is not None:
        topic = _topic_name(topic.strip(), "topic")
    producer = {}
    for k, v in opts.items():
        if (
            k.startswith("kafka.")
            and k[6:] in PRODUCER_SETTINGS
            and k[6:] != "bootstrap.servers"
            and k[6:] not in SECURITY_KEYS
        ):
            producer[k[6:]] = v
    acks = producer.get("acks")
    if acks is not None and acks.strip().lower() not in ("all", "-1", "0", "1"):
        raise ConfigError(f"option 'kafka.acks': expected 'all', '-1', '0' or '1', read {acks!r}")
    codec = producer.get("compression.type")
    if codec is not None and codec.strip().lower() not in ("none", "gzip", "snappy", "lz4", "zstd"):
        raise ConfigError(f"option 'kafka.compression.type': expected none, gzip, snappy, lz4 or zstd, read {codec!r}")
    for name in (
        "linger.ms",
        "batch.size",
        "max.request.size",
        "retries",
        "request.timeout.ms",
        "delivery.timeout.ms",
        "retry.backoff.ms",
        "buffer.memory",
        "max.block.ms",
        "max.in.flight.requests.per.connection",
        "metadata.max.age.ms",
    ):
        if name in producer:
            _long({f"kafka.{name}": producer[name]}, f"kafka.{name}", minimum=0)
    if "enable.idempotence" in producer:
        _bool({"kafka.enable.idempotence": producer["enable.idempotence"]}, "kafka.enable.idempotence")
    if "allow.auto.create.topics" in producer:
        _bool(
            {"kafka.allow.auto.create.topics": producer["allow.auto.create.topics"]}, "kafka.allow.auto.create.topics"
        )

    guarantee = opts.get("deliveryguarantee", AT_LEAST_ONCE).strip().lower()
    if guarantee not in (AT_LEAST_ONCE, EXACTLY_ONCE):
        raise ConfigError(
            f"option 'deliveryGuarantee': expected '{AT_LEAST_ONCE}' or '{EXACTLY_ONCE}', "
            f"read {opts['deliveryguarantee']!r}"
        )
    prefix = opts.get("transactionalidprefix")
    if prefix is not None:
        prefix = prefix.strip()
        if not _PREFIX_RE.match(prefix):
            raise ConfigError(
                "option 'transactionalIdPrefix': expected 1 to 160 letters, digits, '.', '_' "
                f"or '-', read {opts['transactionalidprefix']!r}"
            )
    timeout_ms = DEFAULT_TRANSACTION_TIMEOUT_MS
    if guarantee == EXACTLY_ONCE:
        if "enable.idempotence" in producer and not _bool(
            {"kafka.enable.idempotence": producer["enable.idempotence"]}, "kafka.enable.idempotence"
        ):
            raise ConfigError(
                "option 'kafka.enable.idempotence': deliveryGuarantee=exactly-once writes "
                "through transactions, which need the idempotent producer; read 'false'"
            )
        if acks is not None and acks.strip().lower() not in ("all", "-1"):
            raise ConfigError(
                "option 'kafka.acks': deliveryGuarantee=exactly-once needs acks=all "
                f"(transactions are only as durable as their records), read {acks!r}"
            )
        timeout_ms = _long(opts, "kafka.transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS, minimum=1000)
        if timeout_ms > BROKER_MAX_TRANSACTION_TIMEOUT_MS:
            log.warning(
                "option 'kafka.transaction.timeout.ms'=%d is above Kafka's default broker limit "
                "transaction.max.timeout.ms=%d: the brokers refuse it unless their limit was raised",
                timeout_ms,
                BROKER_MAX_TRANSACTION_TIMEOUT_MS,
            )
        producer["transaction.timeout.ms"] = str(timeout_ms)
        producer["enable.idempotence"] = "true"
        producer["acks"] = "all"
    else:
        if prefix is not None:
            log.warning("option 'transactionalIdPrefix' is ignored with deliveryGuarantee=at-least-once")
        if "transaction.timeout.ms" in producer:
            log.warning("option 'kafka.transaction.timeout.ms' is ignored with deliveryGuarantee=at-least-once")
            del producer["transaction.timeout.ms"]
    return SinkOptions(
        cluster=cluster,
        topic=topic,
        producer_config=tuple(sorted(producer.items())),
        delivery_guarantee=guarantee,
        transactional_id_prefix=prefix,
        transaction_timeout_ms=timeout_ms,
        producer_cache=_bool(opts, "producercache.enabled"),
        typed_options=tuple(sorted((k, v) for k, v in opts.items() if k in SINK_TYPED_OPTIONS)),
    )


def default_group_id(prefix: str) -> str:
    """A fresh group id for a query that did not set group.id (as Spark: prefix + uuid)."""
    return f"{prefix}-{uuid.uuid4()}"
