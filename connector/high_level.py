"""The high-level consumer: the seed's ``ConsumerConnector`` over a ZooKeeper consumer group.

::

    conn = ConsumerConnector({"zookeeper.connect": "127.0.0.1:2181", "group.id": "g",
                              "auto.offset.reset": "smallest", "consumer.timeout.ms": 1000})
    streams = conn.create_message_streams({"events": 2})        # {topic: [KafkaStream, KafkaStream]}
    for record in streams["events"][0]:                          # ConsumerRecord(topic, partition, offset, ...)
        handle(record)
    conn.commit_offsets()
    conn.shutdown()

    conn.create_message_streams_by_filter(Whitelist("logs-.*"), 3)   # [KafkaStream] x 3

How it works (Kafka's ZookeeperConsumerConnector):

* a :class:`~connector.group.GroupMember` registers the consumer, watches the registry and
  rebalances; each partition it owns is read by exactly one stream (partitions are spread over the
  topic's streams, or over all streams for a filter);
* one fetcher thread per connector sends :meth:`SimpleConsumer.multi_fetch_raw`-based fetches
  (one Fetch per leader broker, all in flight together) for every owned partition whose stream
  queue has room, and puts chunks of decoded records into the stream queues (bounded:
  ``queued.max.message.chunks``);
* a partition starts at its committed offset (``offsets.storage`` zookeeper | kafka, with
  ``dual.commit.enabled``), or at this consumer's own position when it read the partition before,
  gave it up (a lost ZooKeeper session, a rebalance) and the commit lags that position (it could not
  be written: a group commit older than the consumer's position never moves it back); without one, or
  when the offset is out of range, at
  ``auto.offset.reset`` (smallest/earliest or largest/latest; with ``none`` the partition is parked
  and its stream raises :class:`~broker.errors.OffsetOutOfRangeError` to the reader);
* a record counts as consumed when the stream hands it out; :meth:`commit_offsets` stores the next
  offset to consume of every partition that advanced; ``auto.commit.enable`` does so every
  ``auto.commit.interval.ms``;
* on a rebalance, for the partitions that move: the streams stop handing out their records, the
  fetcher drops them, their consumed offsets are committed, their chunks are removed from the
  queues, and only then is ownership released (the owner nodes deleted).  A lost ZooKeeper session
  drops them the same way without committing (another consumer may own them already), except
  during a ZooKeeper outage;
* ZooKeeper outages: while ZooKeeper is unreachable the fetcher keeps fetching the partitions the
  consumer owned (the brokers serve; a Kafka consumer keeps fetching while its coordinator is away)
  and commits wait (``commit_offsets`` commits nothing meanwhile).  If the session expires meanwhile
  the partitions are kept until ZooKeeper answers; then the member registers again, and what the
  rebalance gives back continues from the consumer's position.  Told apart from a pause of this
  process past its session by when the fetcher last saw the session alive (less than a session
  timeout before the connection dropped);
* with ``offsets.storage=zookeeper`` commits go through the member's fence
  (:meth:`GroupMember.commit_offsets`: only partitions owned through the live session, never
  backwards); with Kafka storage a session check precedes them.  Before fetching, at most every
  third of the session timeout, the fetcher asks ZooKeeper whether the session still lives, so a
  consumer paused past its session fetches nothing more for partitions that moved (records fetched
  before the pause may still be handed out once; their commits are refused);
* ``consumer.timeout.ms`` (default -1: wait forever) ends an iteration of a stream when no record
  arrived for that long; iterating the stream again continues where it stopped.
  :meth:`shutdown` ends every stream for good.

Thread-safety: the connector is thread-safe; each :class:`KafkaStream` is meant to be iterated by
one thread at a time (different streams by different threads).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Mapping

from pyklog.broker.common.config_def import ConfigDef, Range, Type
from pyklog.broker.common.retry import Backoff
from pyklog.broker.common.scheduler import Scheduler
from pyklog.broker.errors import ConfigError, OffsetOutOfRangeError, PyklogError
from pyklog.connector.group import Blacklist, GroupMember, TopicFilter, Whitelist, default_consumer_id
from pyklog.connector.offsets import OffsetStore

log = logging.getLogger(__name__)

__all__ = ["ConsumerConnector", "KafkaStream", "Whitelist", "Blacklist", "DEFAULTS"]

DEFAULTS = {
    "zookeeper.connect": None,
    "group.id": None,
    "consumer.id": None,
    "bootstrap.servers": None,
    "client.id": None,
    "partition.assignment.strategy": "range",
    "offsets.storage": "zookeeper",
    "dual.commit.enabled": False,
    "auto.commit.enable": True,
    "auto.commit.interval.ms": 60000,
    "auto.offset.reset": "largest",
    "consumer.timeout.ms": -1,
    "zookeeper.session.timeout.ms": 6000,
    "rebalance.max.retries": 4,
    "rebalance.backoff.ms": 2000,
    "fetch.message.max.bytes": 1048576,
    "fetch.wait.max.ms": 100,
    "fetch.min.bytes": 1,
    "queued.max.message.chunks": 10,
    "exclude.internal.topics": True,
    "isolation.level": "read_uncommitted",
    "offsets.commit.timeout.ms": 30000,
    "zookeeper.jaas.config": None,
}
_RESET = {"smallest": "earliest", "earliest": "earliest", "largest": "latest", "latest": "latest"}
_SHUTDOWN = object()


#: The typed settings of DEFAULTS (Kafka's coercion: booleans true/false in any case, integers
#: from int or decimal strings); the others are names or modes checked where they are used.
CONSUMER_CONFIG = (
    ConfigDef(error_format="{name} must be {expected}; got {value!r}")
    .define("auto.commit.enable", Type.BOOLEAN, DEFAULTS["auto.commit.enable"])
    .define("dual.commit.enabled", Type.BOOLEAN, DEFAULTS["dual.commit.enabled"])
    .define("exclude.internal.topics", Type.BOOLEAN, DEFAULTS["exclude.internal.topics"])
    .define("auto.commit.interval.ms", Type.INT, DEFAULTS["auto.commit.interval.ms"], Range(1))
    .define("consumer.timeout.ms", Type.INT, DEFAULTS["consumer.timeout.ms"])
    .define("zookeeper.session.timeout.ms", Type.INT, DEFAULTS["zookeeper.session.timeout.ms"], Range(1))
    .define("rebalance.max.retries", Type.INT, DEFAULTS["rebalance.max.retries"], Range(1))
    .define("rebalance.backoff.ms", Type.INT, DEFAULTS["rebalance.backoff.ms"], Range(0))
    .define("fetch.message.max.bytes", Type.INT, DEFAULTS["fetch.message.max.bytes"], Range(1))
    .define("fetch.wait.max.ms", Type.INT, DEFAULTS["fetch.wait.max.ms"], Range(0))
    .define("fetch.min.bytes", Type.INT, DEFAULTS["fetch.min.bytes"], Range(0))
    .define("queued.max.message.chunks", Type.INT, DEFAULTS["queued.max.message.chunks"], Range(1))
    .define("offsets.commit.timeout.ms", Type.INT, DEFAULTS["offsets.commit.timeout.ms"], Range(1))
)


class _PartitionInfo:
    """Fetch and consumed positions of one owned partition (Kafka's PartitionTopicInfo)."""

    __slots__ = ("tp", "stream", "fetch_offset", "consumed", "committed", "active", "lock", "error_until", "failed")

    def __init__(self, tp, stream):
        self.tp = tp
        self.stream = stream
        self.fetch_offset = None  # None until the starting offset is known
        self.consumed = None
        self.committed = None
        self.active = True
        self.lock = threading.Lock()
        self.error_until = 0.0
        self.failed = False  # no position and auto.offset.reset=none: parked, the stream raised


class KafkaStream:
    """An iterator of :class:`~connector.consumer.ConsumerRecord` fed by the connector's fetcher.

    Iteration ends after ``consumer.timeout.ms`` without a record (it may be resumed) or for good
    after :meth:`ConsumerConnector.shutdown`.  One thread at a time per stream."""

    def __init__(self, connector: ConsumerConnector, index: int, maxsize: int, timeout_ms: int):
        self._connector = connector
        self.index = index
        self.queue: queue.Queue = queue.Queue(maxsize)
        self._timeout = None if timeout_ms < 0 else timeout_ms / 1000.0
        self._chunk = None
        self._pos = 0
        self._done = False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        while True:
            chunk = self._chunk
            if chunk is not None:
                info, records = chunk
                while self._pos < len(records):
                    rec = records[self._pos]
                    self._pos += 1
                    with info.lock:
                        if not info.active:
                            break
                        if info.consumed is not None and rec.offset < info.consumed:
                            continue  # already handed out (a refetch after a reset)
                        info.consumed = rec.offset + 1
                        return rec
                self._chunk = None
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                item = self.queue.get(timeout=wait) if wait is None or wait > 0 else self.queue.get_nowait()
            except queue.Empty:
                raise StopIteration from None
            if item is _SHUTDOWN:
                self._done = True
                raise StopIteration
            if isinstance(item, BaseException):
                raise item
            self._chunk, self._pos = item, 0

    def clear(self, infos) -> int:
        """Drop queued chunks of partitions in ``infos``; returns how many chunks were dropped."""
        with self.queue.mutex:
            kept = [c for c in self.queue.queue if c is _SHUTDOWN or isinstance(c, BaseException) or c[0] not in infos]
            dropped = len(self.queue.queue) - len(kept)
            self.queue.queue.clear()
            self.queue.queue.extend(kept)
            if dropped:
                self.queue.not_full.notify_all()
        return dropped


class ConsumerConnector:
    """The seed's high-level consumer.  ``config``: Kafka's consumer settings (see ``DEFAULTS``); keyword
    arguments with ``_`` for ``.`` are accepted too.  Thread-safe (see the module doc)."""

    def __init__(self, config: Mapping | None = None, **kwargs):
        from pyklog.connector.security import split_security

        cfg = dict(DEFAULTS)
        given = dict(config or {})
        given.update({k.replace("_", "."): v for k, v in kwargs.items()})
        given, security = split_security(given)  # security.protocol, ssl.*, sasl.*
        unknown = sorted(k for k in given if k not in DEFAULTS)
        if unknown:
            raise ConfigError(f"unknown consumer settings {unknown}; expected some of {sorted(DEFAULTS)}")
        cfg.update(given)
        if not cfg["zookeeper.connect"]:
            raise ConfigError("zookeeper.connect is required (the consumer group lives in ZooKeeper)")
        if not cfg["group.id"]:
            raise ConfigError("group.id is required")
        reset = str(cfg["auto.offset.reset"]).lower()
        if reset not in _RESET and reset != "none":
            raise ConfigError(f"auto.offset.reset must be smallest, largest, earliest, latest or none; got {reset!r}")
        values = CONSUMER_CONFIG.parse(cfg)
        # ZooKeeper digest credentials (a DigestLoginModule JAAS entry; else KAFKA_OPTS' JAAS file)
        from pyklog.broker.zk.znode_acls import client_credentials, parse_client_jaas

        jaas = cfg["zookeeper.jaas.config"]
        self._zk_credentials = client_credentials(parse_client_jaas(str(jaas)) if jaas else None)
        if jaas:
            cfg["zookeeper.jaas.config"] = "[hidden]"
        self.config = cfg
        self._values = values  # typed (CONSUMER_CONFIG)
        self.group_id = str(cfg["group.id"])
        self.consumer_id = cfg["consumer.id"] or default_consumer_id()
        self.auto_offset_reset = _RESET.get(reset, "none")
        self.auto_commit = values["auto.commit.enable"]
        self._session_timeout_s = values["zookeeper.session.timeout.ms"] / 1000.0
        self.auto_commit_interval_s = values["auto.commit.interval.ms"] / 1000.0
        self.timeout_ms = values["consumer.timeout.ms"]
        self.fetch_size = values["fetch.message.max.bytes"]
        self.max_chunks = values["queued.max.message.chunks"]
        self.dual_commit = values["dual.commit.enabled"]
        storage = str(cfg["offsets.storage"]).lower()
        if storage not in ("zookeeper", "kafka"):
            raise ConfigError(f"offsets.storage must be 'zookeeper' or 'kafka'; got {storage!r}")
        self.offsets_storage = storage

        from pyklog.connector.client import ClusterClient
        from pyklog.connector.consumer import SimpleConsumer

        client_id = cfg["client.id"] or self.group_id
        self.client = ClusterClient(
            cfg["bootstrap.servers"] or None,
            None if cfg["bootstrap.servers"] else cfg["zookeeper.connect"],
            client_id=client_id,
            security=security,
            zookeeper_credentials=self._zk_credentials,
        )
        try:
            self.simple = SimpleConsumer(
                client=self.client,
                client_id=client_id,
                isolation_level=cfg["isolation.level"],
                max_wait_ms=values["fetch.wait.max.ms"],
                min_bytes=values["fetch.min.bytes"],
            )
            self.offset_store = OffsetStore.create(
                storage,
                self.dual_commit,
                cfg["zookeeper.connect"] if (storage == "zookeeper" or self.dual_commit) else None,
                self.client,
                timeout_s=values["offsets.commit.timeout.ms"] / 1000.0,
                zk_credentials=self._zk_credentials,
            )
        except BaseException:
            self.client.close()
            raise
        self._lock = threading.RLock()
        self._wake = threading.Condition(self._lock)
        self._infos: dict = {}  # (t, p) -> _PartitionInfo
        # (t, p) -> this consumer's position (next offset to hand out) when it last gave the partition
        # up (a lost session or a rebalance): when it gets the partition back, a group commit older
        # than this position (one that could not be written) never moves it back
        self._positions: dict = {}
        self._streams_by_topic: dict[str, list[KafkaStream]] = {}
        self._filter_streams: list[KafkaStream] | None = None
        self._all_streams: list[KafkaStream] = []
        self._member: GroupMember | None = None
        self._running = False
        self._closed = False
        self._threads: list[threading.Thread] = []
        # ZooKeeper outages: when the fetcher last saw the member's session alive (monotonic), and the
        # partitions kept (still fetched) after the session was lost while ZooKeeper was unreachable
        self._verified_at: float | None = None
        self._kept: set = set()
        self._outage_logged = False
        self._committer: Scheduler | None = None  # runs the auto commit (auto.commit.enable)

    # ------------------------------------------------------------------ public API

    def create_message_streams(self, topic_count_map: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """``{topic: n_streams}`` -> ``{topic: [KafkaStream] * n_streams}``; each owned partition of a
        topic is read by exactly one of its streams."""
        if not isinstance(topic_count_map, Mapping) or not topic_count_map:
            raise ConfigError(f"expected a non-empty {{topic: n_streams}} map; got {topic_count_map!r}")
        with self._lock:
            self._check_once()
            for t, n in topic_count_map.items():
                if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                    raise ConfigError(f"number of streams for {t!r} must be an int >= 1; got {n!r}")
                self._streams_by_topic[t] = [self._new_stream() for _ in range(n)]
        self._start(topics=dict(topic_count_map))
        return {t: list(s) for t, s in self._streams_by_topic.items()}

    def create_message_streams_by_filter(self, topic_filter: TopicFilter, num_streams: int = 1) -> list[KafkaStream]:
        """Streams over every topic ``topic_filter`` (Whitelist / Blacklist) allows, including topics
        created later."""
        if not isinstance(topic_filter, TopicFilter):
            raise ConfigError(f"expected a Whitelist or Blacklist; got {topic_filter!r}")
        if isinstance(num_streams, bool) or not isinstance(num_streams, int) or num_streams < 1:
            raise ConfigError(f"num_streams must be an int >= 1; got {num_streams!r}")
        with self._lock:
            self._check_once()
            self._filter_streams = [self._new_stream() for _ in range(num_streams)]
        self._start(topic_filter=(topic_filter, num_streams))
        return list(self._filter_streams)

    def commit_offsets(self) -> dict:
        """Commit the next offset to consume of every partition consumed since its last commit;
        returns what was committed."""
        with self._lock:
            infos = list(self._infos.values())
        return self._commit(infos)

    def assignment(self) -> set:
        """Partitions this consumer owns now."""
        return self._member.assignment() if self._member else set()

    @property
    def member(self) -> GroupMember | None:
        return self._member

    def wait_stable(self, timeout: float = 30.0) -> bool:
        return self._member.wait_stable(timeout) if self._member else False

    def shutdown(self) -> None:
        """Stop fetching, commit (if auto.commit.enable), leave the group, end every stream."""
        with self._wake:
            if self._closed:
                return
            self._closed = True
            self._running = False
            self._wake.notify_all()
        if self._committer is not None:
            self._committer.shutdown(wait=True, timeout_s=30)  # a commit in progress finishes
        for th in self._threads:
            th.join(30)
        try:
            if self._member is not None:
                self._member.stop()  # on_revoke commits (auto commit) and clears; then the session closes
        finally:
            with self._lock:
                self._infos.clear()
            for s in self._all_streams:
                while True:
                    try:
                        s.queue.put_nowait(_SHUTDOWN)
                        break
                    except queue.Full:
                        try:
                            s.queue.get_nowait()
                        except queue.Empty:
                            pass
            self.offset_store.close()
            self.simple.close()
            self.client.close()

    close = shutdown

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.shutdown()

    # ------------------------------------------------------------------ setup

    def _check_once(self):
        if self._closed:
            raise RuntimeError("ConsumerConnector is shut down")
        if self._member is not None or self._all_streams:
            raise RuntimeError("create_message_streams may be called only once per ConsumerConnector")

    def _new_stream(self):
        s = KafkaStream(self, len(self._all_streams), self.max_chunks, self.timeout_ms)
        self._all_streams.append(s)
        return s

    def _start(self, **subscription):
        cfg, values = self.config, self._values
        self._member = GroupMember(
            cfg["zookeeper.connect"],
            self.group_id,
            strategy=cfg["partition.assignment.strategy"],
            consumer_id=self.consumer_id,
            session_timeout_s=values["zookeeper.session.timeout.ms"] / 1000.0,
            rebalance_max_retries=values["rebalance.max.retries"],
            rebalance_backoff_ms=values["rebalance.backoff.ms"],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
            exclude_internal_topics=values["exclude.internal.topics"],
            credentials=self._zk_credentials,
            **subscription,
        )
        self._running = True
        fetcher = threading.Thread(target=self._fetch_loop, name=f"pyklog-fetcher-{self.consumer_id}", daemon=True)
        self._threads.append(fetcher)
        fetcher.start()
        if self.auto_commit:
            self._committer = Scheduler(f"pyklog-autocommit-{self.consumer_id}")
            self._committer.schedule_periodic("auto-commit", self.auto_commit_interval_s, self._auto_commit)
        try:
            self._member.start()
        except BaseException:
            self.shutdown()
            raise

    # ------------------------------------------------------------------ group callbacks (rebalance thread)

    def _streams_for(self, topic):
        if self._filter_streams is not None:
            return self._filter_streams
        return self._streams_by_topic.get(topic, [])

    def _on_assign(self, tps):
        with self._wake:
            for tp in tps:
                if tp in self._infos:
                    continue
                streams = self._streams_for(tp[0])
                if not streams:
                    log.warning("partition %s-%s assigned but no stream consumes topic %s", tp[0], tp[1], tp[0])
                    continue
                load = {id(s): 0 for s in streams}
                for info in self._infos.values():
                    if id(info.stream) in load:
                        load[id(info.stream)] += 1
                stream = min(streams, key=lambda s: (load[id(s)], s.index))
                self._infos[tp] = _PartitionInfo(tp, stream)
            self._wake.notify_all()

    def _deactivate(self, tps):
        with self._lock:
            infos = [self._infos.pop(tp) for tp in tps if tp in self._infos]
        for info in infos:
            with info.lock:
                info.active = False
                consumed = info.consumed
            if consumed is not None:
                with self._lock:
                    self._positions[info.tp] = consumed
        dropped = set(infos)
        for s in {id(i.stream): i.stream for i in infos}.values():
            s.clear(dropped)
        return infos

    def _on_revoke(self, tps):
        infos = self._deactivate(tps)
        # commit what was consumed before ownership goes: the next owner starts right there
        try:
            self._commit(infos)
        except PyklogError as e:
            log.error("committing offsets of revoked partitions %s failed: %s", sorted(tps), e)

    def _on_lost(self, tps):
        if self._in_outage():
            # ZooKeeper is unreachable (not a pause of this process): keep fetching the last
            # assignment from the brokers, as a Kafka consumer does while its coordinator is away;
            # once ZooKeeper answers, what the new rebalance does not give back is dropped
            with self._lock:
                self._kept |= set(tps)
            log.warning(
                "consumer %s of group %s lost its ZooKeeper session during a ZooKeeper outage; keeping the "
                "last assignment (%d partitions) until ZooKeeper is back, then registering again and "
                "rebalancing (partitions it gets back continue from its position)",
                self.consumer_id,
                self.group_id,
                len(tps),
            )
            return
        self._deactivate(tps)

    def _in_outage(self) -> bool:
        """ZooKeeper is unreachable and the member's session was seen alive less than a session
        timeout before the connection dropped (else this process was paused past its session: its
        partitions belong to others now)."""
        member = self._member
        since = member.disconnected_since() if member is not None else None
        verified = self._verified_at
        return since is not None and verified is not None and since - verified < self._session_timeout_s

    def _drop_kept(self):
        """ZooKeeper answers again: the partitions kept through the outage that the member does not own
        now stop being fetched (their positions are kept; :meth:`_initial_offsets` resumes there if
        they come back).  Fetcher thread; under the connector's lock, so a claim's ``on_assign``
        either comes first (the partition is owned: kept) or finds it gone (a new one is made)."""
        with self._lock:
            owned = self._member.assignment()
            gone = [tp for tp in self._kept if tp not in owned]
            self._kept = set()
            if gone:
                self._deactivate(gone)
        self._outage_logged = False
        log.warning(
            "consumer %s: ZooKeeper answers again; the partitions kept through the outage are fetched again "
            "once the rebalance gives them back (%d not owned yet)",
            self.consumer_id,
            len(gone),
        )

    # ------------------------------------------------------------------ offsets

    def _commit(self, infos) -> dict:
        todo = {}
        for info in infos:
            with info.lock:
                if info.consumed is not None and info.consumed != info.committed:
                    todo[info.tp] = info.consumed
        if not todo:
            return {}
        member = self._member
        if member is not None and member.disconnected_since() is not None:
            log.debug("consumer %s: not committing %s while ZooKeeper is unreachable", self.consumer_id, sorted(todo))
            return {}
        if member is not None and self.offsets_storage == "zookeeper" and not self.dual_commit:
            # fenced: only partitions this member owns through its live session, never backwards
            # (a consumer paused past its session commits nothing once it resumes)
            r = member.commit_offsets(todo)
            done = r.committed
            todo = {**r.committed, **{tp: todo[tp] for tp in r.ahead}}  # nothing left to commit for these
        else:
            if member is not None:
                owned = member.assignment()
                todo = {tp: off for tp, off in todo.items() if tp in owned}
                if todo and not member.session_valid():
                    log.warning(
                        "consumer %s: not committing %s: its ZooKeeper session is not live (its "
                        "partitions may have moved)",
                        self.consumer_id,
                        sorted(todo),
                    )
                    return {}
                if not todo:
                    return {}
            self.offset_store.commit(self.group_id, todo)
            done = todo
        for info in infos:
            with info.lock:
                if info.tp in todo and (info.committed is None or todo[info.tp] > info.committed):
                    info.committed = todo[info.tp]
        log.debug("consumer %s committed %s", self.consumer_id, done)
        return done

    def _auto_commit(self):
        """Every ``auto.commit.interval.ms`` on the committer's Scheduler thread."""
        if not self._running:
            return
        try:
            self.commit_offsets()
        except Exception as e:  # noqa: BLE001 - an auto commit never stops consumption
            log.warning("auto commit failed (retrying in auto.commit.interval.ms): %s", e)

    def _initial_offsets(self, infos):
        """Committed offsets, else auto.offset.reset, for partitions that have no position yet."""
        tps = [i.tp for i in infos]
        committed = self.offset_store.fetch(self.group_id, tps)
        with self._lock:
            kept = {tp: self._positions.pop(tp) for tp in tps if tp in self._positions}
        positions = dict(committed)
        for tp, off in kept.items():
            if committed.get(tp, -1) < off:
                # this consumer read up to ``off`` before it gave the partition up; the group's commit
                # lags it (it could not be written before the session was lost): never move back
                log.info(
                    "consumer %s: %s-%s resumes at its own position %d (the group's committed offset %s is older)",
                    self.consumer_id,
                    tp[0],
                    tp[1],
                    off,
                    committed.get(tp),
                )
                positions[tp] = off
        missing = [tp for tp in tps if tp not in positions]
        if missing and self.auto_offset_reset == "none":
            for info in infos:
                if info.tp not in positions:
                    self._fail(
                        info,
                        OffsetOutOfRangeError(
                            f"{info.tp[0]}-{info.tp[1]} has no committed offset in group {self.group_id} and "
                            "auto.offset.reset=none"
                        ),
                    )
            infos = [i for i in infos if i.tp in positions]
            missing = []
        reset = self._reset_offsets(missing) if missing else {}
        for info in infos:
            off = positions.get(info.tp)
            if off is None:
                off = reset[info.tp]
            with info.lock:
                if info.fetch_offset is None:
                    info.fetch_offset = info.consumed = off
                    info.committed = committed.get(info.tp)  # a position ahead of it is committed next

    def _fail(self, info, exc):
        """Park a partition that cannot be read and hand ``exc`` to its stream's reader."""
        log.error("%s", exc)
        info.failed = True
        self._put_item(info, exc)

    def _reset_offsets(self, tps):
        from pyklog.connector.client import EARLIEST, LATEST

        ts = EARLIEST if self.auto_offset_reset == "earliest" else LATEST
        got = self.client.list_offsets(dict.fromkeys(tps, ts))
        return {tp: (got.get(tp) or 0) for tp in tps}

    # ------------------------------------------------------------------ fetcher thread

    def _fetch_loop(self):
        # after a failure: 0.1 s doubling up to 2 s; back to 0.1 s after a successful fetch
        backoff = Backoff(0.1, multiplier=2.0, max_s=2.0, jitter=0.0)
        # how often to ask ZooKeeper whether our session still owns what we fetch: a process paused
        # past its session (SIGSTOP, a stalled VM) resumes here before kazoo notices the expiry, and
        # must not fetch and hand out records of partitions another consumer reads now
        check_every = max(0.2, self._session_timeout_s / 3)
        checked = self._verified_at = time.monotonic()
        while True:
            with self._wake:
                if not self._running:
                    return
                infos = [i for i in self._infos.values() if i.active]
                if not infos:
                    self._wake.wait(0.2)
                    continue
            try:
                infos = [i for i in infos if not i.failed]
                pending = [i for i in infos if i.fetch_offset is None]
                if pending:
                    self._initial_offsets(pending)
                now = time.monotonic()
                ready = [
                    i
                    for i in infos
                    if i.active and i.fetch_offset is not None and i.error_until <= now and not i.stream.queue.full()
                ]
                if not ready:
                    with self._wake:
                        self._wake.wait(0.05)
                    continue
                member = self._member
                if member is not None and self._kept and member.disconnected_since() is None:
                    self._drop_kept()
                    continue
                if member is not None and self._in_outage():
                    # ZooKeeper unreachable: ownership cannot be checked; keep fetching what is owned
                    if not self._outage_logged:
                        self._outage_logged = True
                        log.warning(
                            "consumer %s: ZooKeeper unreachable; fetching the last assignment from the "
                            "brokers until it is back (commits wait for it)",
                            self.consumer_id,
                        )
                elif member is not None and time.monotonic() - checked > check_every:
                    if not member.session_valid():
                        log.warning(
                            "consumer %s: its ZooKeeper session expired (paused past "
                            "zookeeper.session.timeout.ms?); not fetching until it has rejoined",
                            self.consumer_id,
                        )
                        with self._wake:
                            self._wake.wait(0.1)
                        continue
                    checked = self._verified_at = time.monotonic()
                self._fetch_once(ready)
                backoff.reset()
            except Exception as e:  # noqa: BLE001 - a broker or ZooKeeper problem: back off and try again
                if not self._running:
                    return
                delay = backoff.next()
                log.warning("consumer %s fetcher: %s; retrying in %.1fs", self.consumer_id, e, delay)
                with self._wake:
                    self._wake.wait(delay)

    def _fetch_once(self, infos):
        from pyklog.connector.consumer import decode_records

        reqs = {i.tp: (i.fetch_offset, self.fetch_size) for i in infos}
        raw = self.simple.multi_fetch_raw(reqs)
        by_tp = {i.tp: i for i in infos}
        for tp, r in raw.items():
            info = by_tp.get(tp)
            if info is None or not info.active or info.fetch_offset != r.offset:
                continue
            if r.error_code:
                if r.error_code == OffsetOutOfRangeError.code:
                    self._handle_out_of_range(info)
                else:
                    log.warning("fetch %s-%s at %d: %s", tp[0], tp[1], r.offset, r.error)
                    info.error_until = time.monotonic() + 1.0
                continue
            records, nxt = decode_records(
                tp[0],
                tp[1],
                bytes(r.records),
                r.offset,
                isolation_level=self.simple.isolation_level,
                aborted_transactions=r.aborted_transactions,
                last_stable_offset=r.last_stable_offset,
                validate_crc=self.simple.check_crcs,
            )
            if nxt == r.offset and not records and len(r.records) > 0 and r.high_watermark > r.offset:
                log.error(
                    "%s-%s at offset %d: a batch larger than fetch.message.max.bytes=%d; skipping "
                    "fetches of this partition for 5s",
                    tp[0],
                    tp[1],
                    r.offset,
                    self.fetch_size,
                )
                info.error_until = time.monotonic() + 5.0
                continue
            if records:
                if not self._put(info, records):
                    continue
            with info.lock:
                if info.active and info.fetch_offset == r.offset:
                    info.fetch_offset = nxt

    def _put(self, info, records) -> bool:
        return self._put_item(info, (info, records))

    def _put_item(self, info, item) -> bool:
        q = info.stream.queue
        while True:
            if not self._running or not info.active:
                return False
            try:
                q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue

    def _handle_out_of_range(self, info):
        tp = info.tp
        if self.auto_offset_reset == "none":
            self._fail(
                info,
                OffsetOutOfRangeError(
                    f"offset {info.fetch_offset} of {tp[0]}-{tp[1]} is out of range and auto.offset.reset=none"
                ),
            )
            return
        try:
            new = self._reset_offsets([tp])[tp]
        except PyklogError as e:
            log.error("%s-%s: offset %s out of range and cannot reset: %s", tp[0], tp[1], info.fetch_offset, e)
            info.error_until = time.monotonic() + 5.0
            return
        log.warning(
            "%s-%s: offset %d out of range; resetting to %s offset %d (auto.offset.reset)",
            tp[0],
            tp[1],
            info.fetch_offset,
            self.auto_offset_reset,
            new,
        )
        with info.lock:
            info.fetch_offset = new
            info.consumed = new
