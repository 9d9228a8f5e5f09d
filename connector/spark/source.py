"""The ``pyklog`` data source: stream and batch readers (Spark's Kafka source, plus consumer groups).

Where the code runs
-------------------
* :class:`PyklogDataSource` is pickled when it is registered; Spark instantiates it with the
  options on the driver (a Python worker) whenever a DataFrame is defined or a query starts.
* :class:`PyklogStreamReader` is created twice per query: once in the long-lived *planner* worker
  on the driver, which runs ``initialOffset``, ``getDefaultReadLimit``, ``latestOffset``,
  ``reportLatestOffset``, ``partitions``, ``commit`` (state survives between these calls), and once
  to be pickled to the executors for ``read()``.  ``__init__`` therefore only parses options; the
  driver state (:class:`_Driver`: a ClusterClient, the ZooKeeper group member, the offset store)
  is created lazily in the planner and excluded from pickling.
* ``read()`` runs on executors with one :class:`PyklogInputPartition` (topic, partition, offset
  range, the leader's broker id and address as planned); it opens one connection, to that leader
  (one ApiVersions handshake, no metadata request), fetches raw record batches and decodes them to
  Arrow in bulk (:mod:`pyklog.connector.spark.arrow`).  Only when that broker no longer leads the
  partition (NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) or cannot be reached does the
  task look the leader up in the metadata, and it logs that it does.

Offsets and the consumer group: see :mod:`pyklog.connector.spark.offsets` (what a micro-batch
``(start, end)`` reads) and docs/spark-connector.md.  In short, with ``zookeeper.connect`` and
``subscribe``/``subscribePattern`` the planner registers as a member of ZooKeeper consumer group
``group.id`` (manual release): at each ``latestOffset(start)`` every batch up to ``start`` is
complete, so the planner commits ``start`` for the partitions it owns, releases the partitions a
rebalance took away (after that commit), and adds partitions it newly owns at the group's committed
offset (an empty range in that batch, read from the next one).

Because PySpark calls ``commit(end)`` only when it builds the next batch, a group query's planner
also learns of each completed batch from pyklog's StreamingQueryListener in the user's process
(:mod:`pyklog.connector.spark.batch_end`): :class:`_BatchEndWatcher` commits the batch's end at
once.  Every group commit is fenced by the member's ZooKeeper session and never moves an offset
backwards (:meth:`pyklog.connector.group.GroupMember.commit_offsets`); before planning, the planner
checks that its session still lives (a planner paused past it, a zombie, registers again and plans
only what it owns after the rebalance).

PySpark sends SIGTERM to the planner worker instead of calling ``stop()`` on ``query.stop()``: a
handler installed in the planner commits the batches reported complete (waiting briefly for the
last one), then closes the ZooKeeper session, so the group rebalances at once.

Thread-safety: readers are used by one thread at a time (Spark's call protocol); _Driver is
not thread-safe beyond that, except that the batch-end watcher's thread commits through the offset
store adapter, whose commits are serialized by its lock.
"""
from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
import uuid

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    ConfigError,
    DataLossError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    PyklogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pyklog.connector.spark import arrow as _arrow
from pyklog.connector.spark import offsets as _offsets
from pyklog.connector.spark.options import (
    BOOLEAN_OPTIONS,
    EARLIEST,
    LATEST,
    SourceOptions,
    _lower,
    check_covers,
    default_group_id,
    parse_sink_options,
    parse_source_options,
)

log = logging.getLogger(__name__)

__all__ = ["PyklogDataSource", "PyklogStreamReader", "PyklogBatchReader", "PyklogInputPartition",
           "ClusterUnreachableError"]


class ClusterUnreachableError(RequestTimedOutError):
    """The brokers (or ZooKeeper) stayed unreachable longer than ``kafka.default.api.timeout.ms``:
    the message names what was unreachable and for how long.  Fails the query (driver side)."""


def _outage_error(e: BaseException) -> bool:
    """Whether ``e`` means "the cluster cannot be reached right now" (retried by the driver):
    a retriable pyklog error (network error, timeout, no leader, ZooKeeper unreachable...) except
    an unknown topic or partition (the client already retried that; it is an answer, not an
    outage), a socket error, or a kazoo connection loss / session expiry / timeout."""
    if isinstance(e, UnknownTopicOrPartitionError):
        return False
    if isinstance(e, PyklogError):
        return bool(e.retriable)
    if isinstance(e, (OSError, TimeoutError)):
        return True
    try:
        from kazoo.exceptions import ConnectionLoss, OperationTimeoutError, SessionExpiredError
        from kazoo.handlers.threading import KazooTimeoutError
    except ImportError:  # pragma: no cover - kazoo is a dependency
        return False
    return isinstance(e, (ConnectionLoss, OperationTimeoutError, SessionExpiredError, KazooTimeoutError))


class PyklogInputPartition(InputPartition):
    """One Spark task: rows ``[start, end)`` of ``topic``/``partition``.

    ``leader`` (``host:port``) and ``leader_id`` (its broker id) name the partition's leader when
    the range was planned (driver planner).  With both, the task (executor) opens exactly one
    connection, to that broker, and fetches at once: no metadata request, no bootstrap connection.
    Only if that broker no longer leads the partition or cannot be reached does the task look the
    leader up.  Without ``leader_id`` the task finds the leader through the metadata, with
    ``leader`` as its bootstrap server.  The API versions the planner negotiated are not carried:
    the task's one ApiVersions round trip is also how it learns that the broker is up and what it
    supports now.  Picklable (plain values only)."""

    def __init__(self, topic: str, partition: int, start: int, end: int, leader: str | None,
                 leader_id: int | None = None):
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.leader = leader
        self.leader_id = leader_id

    def __repr__(self) -> str:
        return (f"PyklogInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}) "
                f"leader={self.leader_id}@{self.leader})")


# ------------------------------------------------------------------------------------------------
# the data source
# ------------------------------------------------------------------------------------------------
class PyklogDataSource(DataSource):
    """``spark.readStream.format("pyklog")`` / ``spark.read.format("pyklog")`` and the writers.

    Found by Spark through ``pyspark_pyklog`` when pyklog is installed, or registered with ``pyklog.register(spark)``.  Runs on the driver (Python workers); picklable
    (it holds only the option strings)."""

    @classmethod
    def name(cls) -> str:
        return "pyklog"

    def schema(self):
        # Called when a reading DataFrame is defined: validate the source options now, so a wrong
        # option fails at load() with a message naming it (batch/stream-only checks run at start).
        keys = {str(k).lower() for k in dict(self.options or {})}
        if keys & {"subscribe", "subscribepattern", "assign", "kafka.bootstrap.servers", "zookeeper.connect"} \
                and "topic" not in keys:
            return _arrow.spark_schema_ddl(parse_source_options(self.options, streaming=None).include_headers)
        return _arrow.spark_schema_ddl(_bool_option(self.options, "includeHeaders"))

    def reader(self, schema):
        opts = parse_source_options(self.options, streaming=False)
        _check_schema(schema, opts.include_headers)
        return PyklogBatchReader(opts)

    def streamReader(self, schema):
        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, opts.include_headers)
        if opts.fetch_on_driver:
            # PySpark then asks simpleStreamReader (its documented fallback)
            from pyspark.errors import PySparkNotImplementedError

            raise PySparkNotImplementedError(errorClass="NOT_IMPLEMENTED",
                                             messageParameters={"feature": "streamReader with fetchOnDriver"})
        return PyklogStreamReader(opts)

    def simpleStreamReader(self, schema):
        """Source option ``fetchOnDriver=true``: see :mod:`pyklog.connector.spark.driver_fetch`."""
        from pyklog.connector.spark.driver_fetch import PyklogDriverStreamReader

        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, opts.include_headers)
        return PyklogDriverStreamReader(opts)

    def writer(self, schema, overwrite: bool):
        """Batch write (driver).  Spark hands a Python data source only Append (``overwrite``
        False) and Overwrite (True); it refuses ErrorIfExists, its default, and Ignore itself
        (UNSUPPORTED_DATA_SOURCE_SAVE_MODE) before this is called, so ``df.write.format("pyklog")``
        needs ``.mode("append")``.  Overwrite is refused here, as Spark's Kafka sink refuses it:
        a topic cannot be truncated, so "overwrite" would silently append."""
        from pyklog.connector.spark.sink import PyklogBatchWriter

        opts = parse_sink_options(self.options)
        if overwrite:
            raise ConfigError(OVERWRITE_REFUSED)
        return PyklogBatchWriter(opts, schema)

    def streamWriter(self, schema, overwrite: bool):
        """Streaming write (driver).  ``overwrite`` is True in the Complete output mode; as Spark's
        Kafka sink (whose ``truncate()`` does nothing) every micro-batch's whole result is then
        appended to the topic."""
        from pyklog.connector.spark.sink import PyklogStreamWriter

        return PyklogStreamWriter(parse_sink_options(self.options), schema)


#: the error of ``df.write.format("pyklog").mode("overwrite")`` (Spark's Kafka sink refuses it too)
OVERWRITE_REFUSED = (
    "pyklog sink: save mode 'overwrite' is not allowed: a Kafka topic cannot be truncated, so the rows "
    "would be appended to what the topic holds. Use .mode(\"append\") (as Spark's Kafka sink, which "
    "allows only Append and ErrorIfExists; PySpark refuses ErrorIfExists and Ignore for every Python "
    "data source, so .mode(\"append\") is the one mode that writes)")


def _bool_option(options, name: str) -> bool:
    """Boolean option ``name`` (any case) of Spark's options, as the options module reads it
    (ConfigError naming the option for a value other than true/false).  Driver side."""
    return BOOLEAN_OPTIONS.parse_value(name.lower(), _lower(options).get(name.lower()))


def _check_schema(schema, include_headers: bool) -> None:
    """The source has a fixed schema (as Spark's Kafka source): refuse a user-specified other one."""
    if schema is None:
        return
    try:
        names = [f.name for f in schema.fields]
    except AttributeError:
        return
    expected = [n for n, _, _ in _arrow.SCHEMA_FIELDS] + (["headers"] if include_headers else [])
    if names != expected:
        raise ConfigError(
            f"the pyklog source has a fixed schema ({_arrow.spark_schema_ddl(include_headers)}) and "
            f"cannot be read with a user-specified one; read columns {names}")


# ------------------------------------------------------------------------------------------------
# executor side: read one offset range
# ------------------------------------------------------------------------------------------------
def _report_loss(opts: SourceOptions, topic: str, partition: int, lost_from: int, lost_until, why: str) -> None:
    until = "its end" if lost_until is None else str(lost_until)
    msg = (f"pyklog: partition {topic}-{partition} lost offsets [{lost_from}, {until}): {why}. "
           "Some data may have been lost because it is no longer available in the broker "
           "(removed by retention, or the topic was deleted and recreated).")
    if opts.fail_on_data_loss:
        raise DataLossError(msg + " If you want your streaming query to continue despite this, set the "
                                  "source option 'failOnDataLoss' to 'false'.")
    log.warning("%s Skipping them because failOnDataLoss is false.", msg)


def log_end_reaches(consumer, topic: str, partition: int, offset: int, *, timeout_s: float | None = None) -> bool:
    """Whether the leader of ``topic``-``partition`` holds ``offset`` in its log (``offset`` at most its
    log end offset), asked with one Fetch at ``offset`` (OFFSET_OUT_OF_RANGE: no).  Driver or executor.

    A partition's high watermark can be below what the query already saw for a moment: after a leader
    change the new leader's high watermark lags the old leader's until its followers fetch from it
    (Kafka answers ListOffsets with OFFSET_NOT_AVAILABLE then, KIP-207).  Records below the log end
    offset are not lost, they are not yet known to be replicated: the source waits for them.  A log
    end offset below the query's position means the log was truncated or the topic recreated: data
    loss (failOnDataLoss).  ``consumer`` is a :class:`~connector.consumer.SimpleConsumer`; errors other
    than OFFSET_OUT_OF_RANGE are raised."""
    r = consumer.multi_fetch_raw({(topic, int(partition)): (int(offset), 1)},
                                 timeout_s=timeout_s)[(topic, int(partition))]
    if r.error_code == OffsetOutOfRangeError.code:
        return False
    if r.error_code:
        raise r.error
    return True


class _ConsumerCache:
    """The read tasks' consumers kept between tasks, one cache per process (executor side: each
    PySpark Python worker, which Spark reuses for task after task while ``spark.python.worker.reuse``
    is true, its default).  Spark's Kafka source keeps such a cache per executor JVM
    (``KafkaDataConsumer``, ``spark.kafka.consumer.cache.capacity``/``.timeout``); here the thing
    reused is a :class:`SimpleConsumer` with its broker connections, so a task after the first one
    in a worker opens no connection and sends no ApiVersions: it fetches at once.

    Keyed by everything the consumer was built from (bootstrap servers, ZooKeeper, client id, the
    fetch settings): tasks of different sources never share one.  A consumer is taken out while a
    task uses it (never two tasks at once) and given back when the task ends well; a task that
    failed closes its consumer instead (its connections may be half-way through a response).  A
    consumer idle for more than :attr:`IDLE_TIMEOUT_S` is closed when next seen (brokers close
    connections idle for ``connections.max.idle.ms``, 10 minutes by default), and on taking one every
    connection whose socket is readable while idle (closed by the broker, or stray bytes) is
    closed, so the next request reopens it.  At most :attr:`MAX_IDLE_PER_KEY` idle consumers per key
    (a worker runs one task at a time).  A forked child (PySpark's daemon forks its workers)
    starts with an empty cache.  Locking: ``_lock`` guards ``_idle``; consumers are closed outside it."""

    IDLE_TIMEOUT_S = 60.0
    MAX_IDLE_PER_KEY = 2

    def __init__(self):
        self._lock = threading.Lock()
        self._idle: dict = {}  # key -> [(consumer, monotonic time given back)]
        self._pid = os.getpid()
        self.created = 0  # consumers built by take() (tests and the benchmark read it)
        self.reused = 0

    def take(self, key, make):
        """An idle consumer for ``key``, or ``make()``'s new one; the caller gives it back."""
        now = time.monotonic()
        found, stale = None, []
        with self._lock:
            if self._pid != os.getpid():  # a forked child: the parent's sockets are not ours
                self._idle, self._pid = {}, os.getpid()
            for k in list(self._idle):
                keep = []
                for c, at in self._idle[k]:
                    (keep if now - at <= self.IDLE_TIMEOUT_S else stale).append((c, at))
                if keep:
                    self._idle[k] = keep
                else:
                    del self._idle[k]
            lst = self._idle.get(key)
            if lst:
                found = lst.pop()[0]
                if not lst:
                    del self._idle[key]
        for c, _ in stale:
            _close_quietly(c)
        if found is not None and _drop_dead_connections(found):
            self.reused += 1
            return found
        if found is not None:
            _close_quietly(found)
        self.created += 1
        return make()

    def give(self, key, consumer, ok: bool) -> None:
        """Back after a task: kept when the task ended well, closed otherwise."""
        if ok:
            with self._lock:
                lst = self._idle.setdefault(key, [])
                if len(lst) < self.MAX_IDLE_PER_KEY and self._pid == os.getpid():
                    lst.append((consumer, time.monotonic()))
                    return
        _close_quietly(consumer)

    def clear(self) -> None:
        """Close every idle consumer and reset the counters (tests; the benchmark)."""
        with self._lock:
            idle, self._idle = self._idle, {}
            self.created = self.reused = 0
        for lst in idle.values():
            for c, _ in lst:
                _close_quietly(c)


def _close_quietly(consumer) -> None:
    try:
        consumer.close()
    except Exception:  # noqa: BLE001 - closing a broken consumer must not fail a task
        log.debug("closing a cached consumer failed", exc_info=True)


def _drop_dead_connections(consumer) -> bool:
    """Close the idle connections of a cached consumer that a broker closed meanwhile (an idle
    Kafka connection is never readable: readable means EOF or bytes nobody asked for).  True if the
    consumer is usable (its client still open)."""
    import select

    client = getattr(consumer, "client", None)
    conns = getattr(client, "_conns", None)
    lock = getattr(client, "_lock", None)
    if client is None or conns is None or lock is None:
        return False
    with lock:
        items = list(conns.items())
    for nid, conn in items:
        try:
            dead = conn.closed or bool(select.select([conn.fileno()], [], [], 0)[0])
        except (OSError, ValueError):
            dead = True
        if dead:
            with lock:
                if conns.get(nid) is conn:
                    del conns[nid]
            try:
                conn.close()
            except Exception:  # noqa: BLE001
                pass
    return True


#: this process's cache of read-task consumers (see :class:`_ConsumerCache`)
TASK_CONSUMERS = _ConsumerCache()


def _task_consumer_kwargs(opts: SourceOptions, part: PyklogInputPartition) -> dict:
    """What a read task's :class:`SimpleConsumer` is built from (also its cache key)."""
    # the planned leader first; the cluster's own bootstrap servers are where a lookup goes when
    # that broker is gone (nothing connects to them while the planned leader serves the fetches)
    bootstrap = ",".join(b for b in (part.leader, opts.cluster.bootstrap_servers) if b) or None
    return dict(
        bootstrap_servers=bootstrap,
        zookeeper_connect=None if bootstrap else opts.cluster.zookeeper_connect,
        client_id=opts.cluster.client_id,
        isolation_level=opts.isolation_level,
        check_crcs=opts.check_crcs,
        request_timeout_ms=int(opts.cluster.request_timeout_s * 1000),
        max_wait_ms=min(500 if opts.fetch_max_wait_ms is None else opts.fetch_max_wait_ms,
                        int(opts.cluster.request_timeout_s * 1000) - 1),
        min_bytes=1 if opts.fetch_min_bytes is None else opts.fetch_min_bytes,
        fetch_max_bytes=_fetch_max_bytes(opts),
        retry_backoff_ms=100 if opts.retry_backoff_ms is None else opts.retry_backoff_ms,
    )


def _fetch_max_bytes(opts: SourceOptions) -> int:
    """The Fetch response limit of the source's consumers (tasks and the fetchOnDriver planner)."""
    return opts.fetch_max_bytes or max(opts.max_partition_fetch_bytes, 1 << 20)


def decode_raw(opts: SourceOptions, r, topic: str, partition: int, start: int, end: int):
    """The rows ``[start, end)`` of one partition's Fetch answer ``r`` (a RawFetchResult) as the
    source's options ask: headers, CRC check, read_committed's aborted transactions.  Read tasks and
    the fetchOnDriver planner."""
    aborted = _arrow.AbortedTransactions(r.aborted_transactions) if opts.isolation_level == "read_committed" else None
    return _arrow.decode_fetch(r.records, topic, partition, start, end, include_headers=opts.include_headers,
                               validate_crc=opts.check_crcs, aborted=aborted)


def readable_end(opts: SourceOptions, r) -> int:
    """Where a Fetch answer ``r`` says the partition ends for this source: its last stable offset
    for read_committed (when the broker gives one), else its high watermark (what ListOffsets
    answers with the same isolation level)."""
    if opts.isolation_level == "read_committed" and r.last_stable_offset >= 0:
        return r.last_stable_offset
    return r.high_watermark


def read_range(opts: SourceOptions, part: PyklogInputPartition):
    """Yield ``pyarrow.RecordBatch``es of the rows ``[part.start, part.end)`` (executor side).

    The consumer comes from this worker's :data:`TASK_CONSUMERS` cache (``consumerCache.enabled``,
    default true) and goes back there when every row was read; a failed task closes it."""
    ok = False
    kwargs = _task_consumer_kwargs(opts, part)
    if opts.consumer_cache:
        key = tuple(sorted(kwargs.items()))
        consumer = TASK_CONSUMERS.take(key, lambda: _new_consumer(kwargs))
    else:
        key, consumer = None, _new_consumer(kwargs)
    try:
        yield from _read_range(opts, part, consumer)
        ok = True
    finally:
        if key is not None:
            TASK_CONSUMERS.give(key, consumer, ok)
        else:
            consumer.close()


def _new_consumer(kwargs: dict):
    from pyklog.connector.consumer import SimpleConsumer

    return SimpleConsumer(**kwargs)


def _read_range(opts: SourceOptions, part: PyklogInputPartition, consumer):
    from pyklog.connector.client import parse_bootstrap

    topic, partition, offset, end = part.topic, part.partition, part.start, part.end
    if part.leader and part.leader_id is not None:
        host, port = parse_bootstrap(part.leader)[0]
        consumer.use_leader(topic, partition, part.leader_id, host, port)
    max_bytes = opts.max_partition_fetch_bytes
    t_start = time.perf_counter()
    t_fetch = 0.0
    n_rows = 0
    deadline_s = opts.poll_timeout_ms / 1000.0
    stalled_since = None
    hw_lags = False  # the high watermark was seen behind the planned end, with the records on the leader
    # One fetch ahead: while this response is decoded and handed to Spark, a thread already waits
    # for the next one (the broker works meanwhile; socket waits release the GIL).
    pool = None  # started at the first prefetch (a small range takes one fetch and needs none)
    ahead = None  # (offset, max_bytes, future)

    def fetch(off: int, mb: int):
        nonlocal ahead
        if ahead is not None:
            a_off, a_mb, fut = ahead
            ahead = None
            if a_off == off and a_mb == mb:
                return fut.result()
            try:
                fut.result()  # a prefetch we no longer need: let it finish, ignore it
            except Exception:  # noqa: BLE001
                pass
        return consumer.fetch_raw(topic, partition, off, mb, timeout_s=deadline_s)

    try:
        while offset < end:
            try:
                t0 = time.perf_counter()
                r = fetch(offset, max_bytes)
                t_fetch += time.perf_counter() - t0
            except OffsetOutOfRangeError as e:
                start_off = getattr(e, "log_start_offset", None)
                end_off = getattr(e, "log_end_offset", None)
                if start_off is not None and offset < start_off:
                    _report_loss(opts, topic, partition, offset, min(start_off, end),
                                 f"the log now starts at offset {start_off}")
                    offset = min(start_off, end)
                    continue
                if end_off is not None and offset >= end_off:
                    _report_loss(opts, topic, partition, offset, end,
                                 f"the log now ends at offset {end_off}")
                    return
                raise
            except UnknownTopicOrPartitionError as e:
                _report_loss(opts, topic, partition, offset, end, f"the partition no longer exists ({e})")
                return
            nxt = _arrow.complete_batches_end(r.records)
            if nxt is not None and offset < nxt < end:
                if pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    pool = ThreadPoolExecutor(1, thread_name_prefix=f"pyklog-fetch-{topic}-{partition}")
                ahead = (nxt, max_bytes, pool.submit(consumer.fetch_raw, topic, partition, nxt, max_bytes,
                                                      timeout_s=deadline_s))
            d = decode_raw(opts, r, topic, partition, offset, end)
            if d.batch is not None and d.batch.num_rows:
                n_rows += d.batch.num_rows
                yield d.batch
            if d.next_offset is not None and d.next_offset > offset:
                offset = d.next_offset
                stalled_since = None
                continue
            # no complete batch at ``offset``
            if len(r.records) > 0:
                if max_bytes >= (1 << 30):
                    raise MessageTooLargeError(
                        f"pyklog: {topic}-{partition} at offset {offset}: a record batch does not fit "
                        f"in 1 GiB")
                max_bytes *= 2  # a batch larger than kafka.max.partition.fetch.bytes
                continue
            hw = readable_end(opts, r)
            if 0 <= hw <= offset:
                if r.high_watermark >= 0 and offset >= r.high_watermark and not hw_lags:
                    # below the planned end: lost (the log ends before it), or a new leader's
                    # high watermark not caught up yet (wait for it, up to pollTimeoutMs)
                    if not log_end_reaches(consumer, topic, partition, end, timeout_s=deadline_s):
                        _report_loss(opts, topic, partition, offset, end,
                                     f"the log ends at offset {r.high_watermark}, before the planned end {end}")
                        return
                    hw_lags = True
                    log.info("pyklog: %s-%s: high watermark %d is behind the planned end %d (the records are "
                             "in the leader's log, not yet known to be replicated: a new leader?); waiting",
                             topic, partition, r.high_watermark, end)
            now = time.monotonic()
            if stalled_since is None:
                stalled_since = now
            elif now - stalled_since > deadline_s:
                raise TimeoutError(
                    f"pyklog: no data for {topic}-{partition} at offset {offset} (planned up to {end}) "
                    f"within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}")
            time.sleep(0.05)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)  # a prefetch still under way ends before the consumer is reused
        elapsed = time.perf_counter() - t_start
        _trace("read", elapsed * 1000)
        _trace("read fetch", t_fetch * 1000)
        log.debug("pyklog read %s-%s [%s, %s): %d rows in %.3f s (fetch %.3f s, the rest decoding and "
                  "handing batches to Spark)", topic, partition, part.start, part.end, n_rows, elapsed, t_fetch)


# ------------------------------------------------------------------------------------------------
# driver side: offsets, group membership, commits
# ------------------------------------------------------------------------------------------------
class _Driver:
    """Planner-side state of one streaming query (or one batch planning call).

    Holds the ClusterClient, and for streaming the ZooKeeper group member (manual release) and the
    offset store.  Lives only in the planner process; never pickled.  Not thread-safe (Spark calls
    the planner from one thread), except :meth:`close` which may run from a signal handler.
    """

    def __init__(self, opts: SourceOptions, *, streaming: bool):
        from pyklog.connector.client import ClusterClient

        self.opts = opts
        self.streaming = streaming
        self.group_id = opts.group_id or default_group_id(opts.group_id_prefix)
        c = opts.cluster
        self.client = ClusterClient(c.bootstrap_servers, c.zookeeper_connect, client_id=c.client_id,
                                    request_timeout_ms=int(c.request_timeout_s * 1000))
        self.isolation = 1 if opts.isolation_level == "read_committed" else 0
        self.member = None
        self.store = None
        self.batch_end: _BatchEndWatcher | None = None  # streaming group queries (start_group)
        self._closed = False
        self._close_lock = threading.Lock()
        self._down_since: float | None = None  # monotonic time of the first failure of this outage
        self._deadline: Deadline | None = None  # set while call() runs (nested calls do not retry)
        self._probe = None  # SimpleConsumer on self.client for high_watermark_lags, opened on first use
        self._fetcher = None  # SimpleConsumer on self.client for latest_by_fetch (fetchOnDriver)

    # -- outages: every look-up and commit goes through call() -----------------------------------
    def where(self) -> str:
        """What the driver talks to, for messages: the bootstrap brokers and/or ZooKeeper."""
        c = self.opts.cluster
        parts = []
        if c.bootstrap_servers:
            parts.append(f"brokers {c.bootstrap_servers} (kafka.bootstrap.servers)")
        if c.zookeeper_connect:
            parts.append(f"ZooKeeper {c.zookeeper_connect} (zookeeper.connect) and the brokers registered there")
        return " and ".join(parts)

    def _backoff(self) -> Backoff:
        """fetchOffset.retryIntervalMs doubling up to 1 s (Kafka's ExponentialBackoff, KIP-580)."""
        interval = self.opts.fetch_offset_retry_interval_ms / 1000.0
        return Backoff(interval, multiplier=2.0, max_s=max(1.0, interval), jitter=0.2)

    def bound_s(self) -> float:
        """How long an outage may last before a look-up fails the query: kafka.default.api.timeout.ms,
        and never less than the time fetchOffset.numRetries retries take."""
        b = Backoff(self._backoff().initial_s, multiplier=2.0, max_s=self._backoff().max_s, jitter=0.0)
        min_s = sum(b.next() for _ in range(self.opts.fetch_offset_retries))
        return max(self.opts.api_timeout_ms / 1000.0, min_s)

    def timeout_s(self) -> float | None:
        """The time one client call inside :meth:`call` may take: what is left of the outage bound
        (at most kafka.request.timeout.ms); None outside call()."""
        if self._deadline is None:
            return None
        return max(0.001, min(self.opts.cluster.request_timeout_s, self._deadline.remaining()))

    def call(self, what: str, fn, *, fatal: bool = True):
        """``fn()`` retried while the cluster is unreachable (:func:`_outage_error`), with
        fetchOffset.retryIntervalMs backoff, until the outage has lasted kafka.default.api.timeout.ms
        (counted from the first failure, across calls, so a commit that failed a moment ago and
        the look-up after it share one bound).  Then, with ``fatal``, raises
        :class:`ClusterUnreachableError` naming what was unreachable and for how long; without
        (commits), gives up after fetchOffset.numRetries retries, logs a WARNING and returns None.
        Other errors are raised at once.  A nested call runs ``fn`` once (the outer loop retries)."""
        if self._deadline is not None:
            return fn()
        now = time.monotonic()
        bound = self.bound_s()
        ends = (self._down_since if self._down_since is not None else now) + bound
        deadline = Deadline(ends)
        backoff = self._backoff()
        retries = [0]

        def attempt():
            try:
                return fn()
            except Exception as e:  # noqa: BLE001 - _outage_error decides
                if _outage_error(e):
                    if self._down_since is None:
                        self._down_since = now  # the call started failing (the client may have retried inside)
                        log.warning("pyklog: %s failed, %s unreachable (%s: %s); retrying for up to %.1f s "
                                    "(kafka.default.api.timeout.ms)", what, self.where(), type(e).__name__, e, bound)
                    if not fatal and retries[0] >= self.opts.fetch_offset_retries:
                        raise _GiveUp(e) from e
                    retries[0] += 1
                raise

        self._deadline = deadline
        try:
            result = retry(attempt, deadline=deadline, backoff=backoff, retriable=_outage_error, what=what,
                           raise_last=True)
        except _GiveUp as g:
            log.warning("pyklog: %s failed after %d retries (%s: %s); the query goes on and retries it at "
                        "the next trigger", what, retries[0], type(g.cause).__name__, g.cause)
            return None
        except Exception as e:  # noqa: BLE001
            if not _outage_error(e):
                raise
            down = time.monotonic() - (self._down_since or now)
            msg = (f"pyklog: {what} failed: {self.where()} unreachable for {down:.1f} s, which reaches the "
                   f"outage bound kafka.default.api.timeout.ms={self.opts.api_timeout_ms} (fetchOffset.numRetries="
                   f"{self.opts.fetch_offset_retries}, fetchOffset.retryIntervalMs="
                   f"{self.opts.fetch_offset_retry_interval_ms}); last error: {type(e).__name__}: {e}")
            if not fatal:
                log.warning("%s; the query goes on and retries it at the next trigger", msg)
                return None
            log.error("%s", msg)
            raise ClusterUnreachableError(msg) from e
        finally:
            self._deadline = None
        if self._down_since is not None:
            log.warning("pyklog: %s reachable again after %.1f s; %s succeeded", self.where(),
                        time.monotonic() - self._down_since, what)
            self._down_since = None
        return result

    # -- partitions and offsets ----------------------------------------------------------------
    #: streaming without a group: how old the partition discovery (a metadata request) used by a
    #: trigger may be.  Spark's Kafka source relies on its consumer's metadata (metadata.max.age.ms,
    #: 5 minutes); pyklog used to refresh it on every trigger (issue 13).  A ListOffsets that finds a
    #: partition gone discovers again at once.
    DISCOVERY_S = 1.0

    def subscribed_partitions(self, max_age_s: float = 0.0) -> list[tuple[str, int]]:
        """Every partition the subscription covers now (no group: what this query reads); with
        ``max_age_s`` a discovery at most that old may be reused."""
        sub = self.opts.subscription
        if sub.kind == "assign":
            return list(sub.partitions)
        now = time.monotonic()
        cached = getattr(self, "_discovered", None)
        if max_age_s > 0 and cached is not None and now - cached[0] < max_age_s:
            return list(cached[1])
        out = self.call("partition discovery", self._subscribed_partitions)
        self._discovered = (now, list(out))
        return out

    def discovered_recently(self) -> bool:
        """Whether a cached partition discovery exists (see :meth:`subscribed_partitions`)."""
        return getattr(self, "_discovered", None) is not None

    def _subscribed_partitions(self) -> list[tuple[str, int]]:
        sub = self.opts.subscription
        if sub.kind == "subscribe":
            topics = list(sub.topics)
            md = self.client.metadata(topics, refresh=True)
        else:
            md = self.client.metadata(None, refresh=True)
            topics = sorted(t for t in md.topics if sub.matches(t) and not t.startswith("__"))
        out = []
        for t in topics:
            tm = md.topics.get(t)
            if tm is None or not tm.partitions:
                continue
            out.extend((t, p) for p in sorted(tm.partitions))
        return out

    def list_offsets(self, tps, spec: int) -> dict:
        """``{tp: offset}`` for EARLIEST (-2) / LATEST (-1); read_committed uses the LSO."""
        tps = list(tps)
        if not tps:
            return {}
        res = self.call(f"ListOffsets ({'latest' if spec == LATEST else 'earliest'})",
                        lambda: self.client.list_offsets({tp: spec for tp in tps}, isolation_level=self.isolation,
                                                         timeout_s=self.timeout_s()))
        out = {}
        for tp in tps:
            off = res.get(tp)
            if off is None:
                raise UnknownTopicOrPartitionError(f"pyklog: no {'latest' if spec == LATEST else 'earliest'} "
                                                   f"offset for {tp[0]}-{tp[1]}")
            out[tp] = off
        return out

    def resolve(self, spec, tps, *, default_kind: str) -> dict:
        """Offsets of ``tps`` for an OffsetSpec (startingOffsets / endingOffsets / timestamps)."""
        tps = list(tps)
        if not tps:
            return {}
        kind = spec.kind
        if kind in ("earliest", "latest"):
            return self.list_offsets(tps, EARLIEST if kind == "earliest" else LATEST)
        if kind == "offsets":
            given = spec.offsets_dict()
            out = {}
            need = {}
            for tp in tps:
                v = given.get(tp)
                if v is None:
                    v = EARLIEST if default_kind == "earliest" else LATEST
                if v < 0:
                    need.setdefault(v, []).append(tp)
                else:
                    out[tp] = v
            for v, group in need.items():
                out.update(self.list_offsets(group, v))
            return out
        # timestamps
        if kind == "timestamp":
            ts = {tp: spec.timestamp for tp in tps}
            name = "startingTimestamp/endingTimestamp"
        else:
            given = spec.offsets_dict()
            missing = [tp for tp in tps if tp not in given]
            if missing:
                raise ConfigError(
                    f"option 'startingOffsetsByTimestamp'/'endingOffsetsByTimestamp': no timestamp for "
                    f"{', '.join(f'{t}-{p}' for t, p in missing)} (every partition read must be listed)")
            ts = {tp: given[tp] for tp in tps}
            name = "startingOffsetsByTimestamp/endingOffsetsByTimestamp"
        res = self.call("ListOffsets (timestamps)",
                        lambda: self.client.offsets_for_times(ts, isolation_level=self.isolation,
                                                              timeout_s=self.timeout_s()))
        out = {}
        latest_needed = []
        for tp in tps:
            r = res.get(tp)
            if r is None:
                if spec.strategy == "latest" or default_kind == "latest":
                    latest_needed.append(tp)
                    continue
                raise ConfigError(
                    f"option '{name}': no record at or after timestamp {ts[tp]} in {tp[0]}-{tp[1]} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead)")
            out[tp] = r[0]
        out.update(self.list_offsets(latest_needed, LATEST))
        return out

    def latest_by_fetch(self, positions: dict):
        """fetchOnDriver: one Fetch per leader at the query's ``positions`` (``{tp: offset}``), which
        answers both questions of a trigger at once: where each partition ends now (its high
        watermark, or its last stable offset for read_committed, as ListOffsets would say) and the
        records from ``positions`` on (up to maxPartitionFetchBytes each).  Returns ``(latest,
        {tp: RawFetchResult})``, or None when a partition answers with an error (the position
        outside the log, no leader...): the caller then asks ListOffsets, whose path reports each
        case.  Planner thread; retried as every look-up while the cluster is unreachable."""
        from pyklog.connector.consumer import SimpleConsumer

        if not positions:
            return {}, {}
        opts = self.opts
        if self._fetcher is None:
            self._fetcher = SimpleConsumer(client=self.client, isolation_level=opts.isolation_level,
                                           check_crcs=opts.check_crcs, max_wait_ms=0, min_bytes=0,
                                           fetch_max_bytes=_fetch_max_bytes(opts),
                                           request_timeout_ms=int(opts.cluster.request_timeout_s * 1000))
        mb = opts.max_partition_fetch_bytes
        res = self.call("Fetch (latest offsets)", lambda: self._fetcher.multi_fetch_raw(
            {tp: (off, mb) for tp, off in positions.items()}, timeout_s=self.timeout_s()))
        latest = {}
        for tp in positions:
            r = res.get(tp)
            if r is None or r.error_code:
                return None
            end = readable_end(opts, r)
            if end < 0:
                return None
            latest[tp] = end
        return latest, res

    def high_watermark_lags(self, tp, offset: int, high_watermark: int) -> bool:
        """Whether ``tp``'s high watermark (``high_watermark``, below the query's ``offset``) only lags:
        the leader's log still reaches ``offset`` (:func:`log_end_reaches`; a new leader whose followers
        have not fetched from it yet).  False: the log ends before ``offset`` (truncated, or the topic
        recreated).  Planner thread; retried as every look-up while the cluster is unreachable."""
        from pyklog.connector.consumer import SimpleConsumer

        if self._probe is None:
            self._probe = SimpleConsumer(client=self.client, max_wait_ms=0, min_bytes=0,
                                         request_timeout_ms=int(self.opts.cluster.request_timeout_s * 1000))
        reaches = self.call(f"log end check of {tp[0]}-{tp[1]}",
                            lambda: log_end_reaches(self._probe, tp[0], tp[1], offset, timeout_s=self.timeout_s()))
        if reaches:
            log.info("pyklog: %s-%s: high watermark %d is behind the query's offset %d, which the leader's log "
                     "holds (a new leader whose followers have not fetched yet?); no rows for it this trigger",
                     tp[0], tp[1], high_watermark, offset)
        return bool(reaches)

    def leaders(self, tps) -> dict:
        """``{tp: (leader broker id, "host:port")}``, ``(None, None)`` when there is none now
        (from the metadata cache the offset lookups just refreshed)."""
        out = {}
        for tp in tps:
            try:
                node = self.client.leader_for(*tp)
                host, port = self.client.broker_address(node)
                out[tp] = (node, f"{host}:{port}")
            except PyklogError as e:
                log.warning("pyklog: no leader for %s-%s while planning (%s); the task will look it up", tp[0], tp[1], e)
                out[tp] = (None, None)
        return out

    def input_partitions(self, rngs) -> list:
        """One :class:`PyklogInputPartition` per ``(topic, partition, start, end)``, each carrying
        its partition's leader (id and address) so the task connects straight to it."""
        leaders = self.leaders({(t, p) for t, p, _, _ in rngs})
        return [PyklogInputPartition(t, p, a, b, leaders[(t, p)][1], leaders[(t, p)][0])
                for t, p, a, b in rngs]

    # -- group -------------------------------------------------------------------------------------
    def start_group(self) -> None:
        """Join the consumer group (subscribe/subscribePattern with zookeeper.connect) and open the
        offset store.  Waits for the first rebalance."""
        opts = self.opts
        if opts.uses_group:
            from pyklog.connector.group import GroupMember, Whitelist

            sub = opts.subscription
            kwargs = {"topics": list(sub.topics)} if sub.kind == "subscribe" else {"topic_filter": Whitelist(sub.pattern)}
            consumer_id = f"{socket.gethostname()}-spark-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.member = GroupMember(opts.cluster.zookeeper_connect, self.group_id,
                                      strategy=opts.assignment_strategy, consumer_id=consumer_id,
                                      session_timeout_s=opts.cluster.zk_session_timeout_s,
                                      manual_release=True, **kwargs)
            self.member.start()
            self.member.wait_stable(timeout=max(15.0, 2 * opts.cluster.zk_session_timeout_s))
            log.info("pyklog query joined group %s as %s with %s", self.group_id, consumer_id,
                     sorted(self.member.assignment()))
        self.store = _OffsetStoreAdapter(self)
        if self.member is not None and self.streaming:
            self.batch_end = _BatchEndWatcher(self)

    def owned(self, max_age_s: float = 0.0) -> list[tuple[str, int]]:
        if self.member is not None:
            return sorted(self.member.assignment())
        return self.subscribed_partitions(max_age_s)

    DRAIN_S = 2.0  # SIGTERM: how long to wait for the last batch's completion to be reported

    def close(self, *, fast: bool = False) -> None:
        """Leave the group and close connections.  First commits the batches Spark reported complete
        (on the SIGTERM path waiting up to DRAIN_S for the last one, which a stop may have cut
        short); then ``fast`` (the SIGTERM path, where PySpark may follow up with SIGKILL) closes the
        group member's ZooKeeper session before anything else, so its registration and owner nodes
        disappear at once."""
        with self._close_lock:
            if self._closed:
                return
            self._closed = True
        if self in _SIGTERM_DRIVERS:
            _SIGTERM_DRIVERS.remove(self)
        if self.batch_end is not None:
            # commit what Spark reported complete while the session (and the ownership) still lives
            try:
                self.batch_end.drain(self.DRAIN_S if fast else 0.0)
            except Exception as e:  # noqa: BLE001 - best effort on shutdown
                log.warning("pyklog: committing the completed batches on close failed: %s", e)
            self.batch_end.close()
        if self.store is not None:
            try:
                self.store.flush(closing=True)  # what commit_later() still holds, while the session lives
            except Exception as e:  # noqa: BLE001 - best effort on shutdown
                log.warning("pyklog: committing the last offsets on close failed: %s", e)
        if fast and self.member is not None and self.member.zk is not None:
            try:
                self.member.zk.stop()
            except Exception as e:  # noqa: BLE001 - best effort on shutdown
                log.warning("pyklog: closing the group's ZooKeeper session failed: %s", e)
        try:
            if self.member is not None:
                self.member.stop(timeout=2 if fast else 10)
        except Exception as e:  # noqa: BLE001 - best effort on shutdown
            log.warning("pyklog: stopping the group member failed: %s", e)
        try:
            if self.store is not None:
                self.store.close()
        except Exception as e:  # noqa: BLE001
            log.warning("pyklog: closing the offset store failed: %s", e)
        self._forget_generated_group()
        try:
            self.client.close()
        except Exception as e:  # noqa: BLE001
            log.warning("pyklog: closing the cluster client failed: %s", e)


    def _forget_generated_group(self) -> None:
        """A query without ``group.id`` ran under a generated group (``<groupIdPrefix>-<uuid>``) that
        no later run reuses (Spark's checkpoint is the source of truth; a restart generates a new
        id): on a clean stop delete its ZooKeeper offsets, ``/consumers/[group]``, unless a member is
        still registered there, so stopped queries do not leave groups behind.  Best effort, at
        most a few seconds (the broker's offsets.retention.minutes expiry removes what is left, and
        expires the group's offsets in Kafka storage).  Planner process, from :meth:`close`."""
        opts = self.opts
        zk_connect = opts.cluster.zookeeper_connect
        if opts.group_id is not None or zk_connect is None or self.store is None:
            return
        if opts.offsets_storage != "zookeeper" and not opts.dual_commit:
            return
        from kazoo.client import KazooClient
        from kazoo.exceptions import NoNodeError, NotEmptyError

        from pyklog.broker.zk import paths

        zk = KazooClient(hosts=zk_connect, timeout=2.0)
        try:
            zk.start(timeout=2.0)
            try:
                if zk.get_children(paths.consumer_ids(self.group_id)):
                    return  # someone registered under this group: keep it
            except NoNodeError:
                pass
            zk.delete(paths.consumer_group(self.group_id), recursive=True)
            log.info("pyklog: deleted the generated group %s of the stopped query", self.group_id)
        except (NoNodeError, NotEmptyError):
            pass
        except Exception as e:  # noqa: BLE001 - best effort; the broker's expiry removes it later
            log.info("pyklog: could not delete the generated group %s: %s", self.group_id, e)
        finally:
            try:
                zk.stop()
                zk.close()
            except Exception:  # noqa: BLE001
                pass


class _OffsetStoreAdapter:
    """The group's committed offsets through connector.offsets.OffsetStore (zookeeper | kafka |
    dual), remembering what was last committed so unchanged offsets are not written again."""

    def __init__(self, driver: _Driver):
        from pyklog.connector.offsets import OffsetStore

        opts = driver.opts
        self.driver = driver
        self.group_id = driver.group_id
        zk = driver.member.zk if driver.member is not None else opts.cluster.zookeeper_connect
        need_zk = opts.offsets_storage == "zookeeper" or opts.dual_commit
        self._store = OffsetStore.create(opts.offsets_storage, opts.dual_commit,
                                         zk if need_zk else None, driver.client,
                                         timeout_s=min(opts.cluster.request_timeout_s, driver.bound_s()))
        # a group member with offsets in ZooKeeper only commits through its fence (never backwards,
        # nothing once its session expired); with Kafka storage only an ownership check guards it
        self.member = driver.member
        self.fenced = self.member is not None and opts.offsets_storage == "zookeeper" and not opts.dual_commit
        self._lock = threading.RLock()  # the planner's thread and the batch-end watcher both commit
        self.last: dict = {}
        # commit_later(): offsets waiting for the committer thread, newest (largest) per partition
        self._later: dict = {}
        self._later_cond = threading.Condition()
        self._committer: threading.Thread | None = None
        self._in_flight = False  # the committer thread is writing what it took from _later
        self._closing = False

    def _bounded(self, fn):
        """``fn`` with the Kafka store's own retry loop bounded by what is left of the driver's
        outage bound (ZooKeeper calls go through kazoo's retry)."""
        def run():
            t = self.driver.timeout_s()
            for s in (self._store, getattr(self._store, "primary", None), getattr(self._store, "secondary", None)):
                if s is not None and hasattr(s, "timeout_s") and t is not None:
                    s.timeout_s = t
            return fn()
        return run

    def fetch(self, tps) -> dict:
        tps = list(tps)
        if not tps:
            return {}
        got = self.driver.call("OffsetFetch (group offsets)",
                               self._bounded(lambda: self._store.fetch(self.group_id, tps)))
        return {tp: off for tp, off in got.items() if off is not None and off >= 0}

    def commit(self, offsets: dict) -> None:
        """Commit the group's offsets (for lag and for the group's other members).  Planner thread.
        Never fails the query by itself: Spark's checkpoint is the source of truth, so a commit that
        still fails after fetchOffset.numRetries retries is logged at WARNING and tried again at the
        next trigger (``last`` only records what was committed)."""
        with self._lock:
            todo = self._todo(offsets)
        if not todo:
            return
        self.driver.call("OffsetCommit (group offsets)", self._bounded(lambda: self._commit(todo)), fatal=False)

    def commit_later(self, offsets: dict) -> None:
        """Commit ``offsets`` off the planner's critical path (issue 13): the committer thread writes
        them (one attempt, as :meth:`commit_completed`; what fails is submitted again at the next
        trigger, since ``last`` records only what was written).  The planner never waits here: for a
        group member with offsets in ZooKeeper a fenced commit costs two round trips per partition
        and a multi-op, which used to run inside every ``latestOffset``.  Fenced and never backwards
        as every commit; what must be durable first (a release, a stop) calls :meth:`flush`.
        Planner thread."""
        if not offsets:
            return
        with self._later_cond:
            if self._closing:
                return
            for tp, off in offsets.items():
                if self.member is None or off > self._later.get(tp, -1):
                    self._later[tp] = off
            if self._committer is None:
                self._committer = threading.Thread(target=self._commit_loop, daemon=True,
                                                   name=f"pyklog-commit-{self.group_id}")
                self._committer.start()
            self._later_cond.notify_all()

    def _commit_loop(self) -> None:
        while True:
            with self._later_cond:
                while not self._later and not self._closing:
                    self._later_cond.wait()
                if self._closing and not self._later:
                    return
                todo, self._later = self._later, {}
                self._in_flight = True
            try:
                self.commit_completed(todo)
            finally:
                with self._later_cond:
                    self._in_flight = False
                    self._later_cond.notify_all()

    FLUSH_WAIT_S = 10.0

    def flush(self, *, closing: bool = False) -> None:
        """Write what :meth:`commit_later` still holds, on the caller's thread, after a commit the
        committer thread is writing has finished (at most FLUSH_WAIT_S).  Before a release (with
        outage retries, as :meth:`commit`), and on close (``closing``: one attempt, as
        :meth:`commit_completed`, so a stop never waits out an outage).  Planner thread (or the
        SIGTERM handler)."""
        with self._later_cond:
            self._later_cond.wait_for(lambda: not self._in_flight,
                                      timeout=2.0 if closing else self.FLUSH_WAIT_S)
            todo, self._later = self._later, {}
        if todo:
            if closing:
                self.commit_completed(todo)
            else:
                self.commit(todo)

    def commit_completed(self, offsets: dict) -> dict:
        """Commit the end of a batch Spark reported complete (the batch-end watcher's thread, or the
        SIGTERM handler): one attempt, no outage retries (the next completion or trigger commits
        again); returns what was committed."""
        with self._lock:
            todo = self._todo(offsets)
        if not todo:
            return {}
        try:
            return self._commit(todo)
        except Exception as e:  # noqa: BLE001 - logged; the next trigger commits again
            log.warning("pyklog: committing a completed batch of group %s failed (%s: %s); the next "
                        "trigger commits it", self.group_id, type(e).__name__, e)
            return {}

    def _todo(self, offsets: dict) -> dict:
        if self.member is None:
            return {tp: off for tp, off in offsets.items() if self.last.get(tp) != off}
        return {tp: off for tp, off in offsets.items() if off > self.last.get(tp, -1)}

    def _commit(self, todo: dict) -> dict:
        """Write ``todo``; returns what was written.  A group member commits only partitions it owns
        through its live session (fenced in ZooKeeper; a session check before a Kafka commit)."""
        with self._lock:
            if self.fenced:
                r = self.member.commit_offsets(todo)
                self.last.update(r.committed)
                self.last.update(r.ahead)
                return r.committed
            if self.member is not None:
                owned = self.member.assignment()
                todo = {tp: off for tp, off in todo.items() if tp in owned}
                if todo and not self.member.session_valid():
                    log.warning("pyklog: not committing %s for group %s: the member's ZooKeeper session "
                                "is not live (its partitions may have moved)", sorted(todo), self.group_id)
                    return {}
                if not todo:
                    return {}
            self._store.commit(self.group_id, todo)
            self.last.update(todo)
            return todo

    def close(self) -> None:
        try:
            self.flush(closing=True)
        except Exception as e:  # noqa: BLE001 - best effort on close; the group's offsets lag a batch
            log.warning("pyklog: committing the last offsets of group %s on close failed: %s", self.group_id, e)
        with self._later_cond:
            self._closing = True
            self._later_cond.notify_all()
        if self._committer is not None and self._committer is not threading.current_thread():
            self._committer.join(2)
        close = getattr(self._store, "close", None)
        if close is not None:
            close()


class _BatchEndWatcher:
    """Commits each micro-batch's end offsets as soon as Spark reports the batch complete (see
    :mod:`pyklog.connector.spark.batch_end`): a daemon thread polls the channel file the user's
    driver process writes, and for a batch this planner handed to Spark (:meth:`planned`, from
    ``partitions(start, end)``) commits its end for the partitions the member still owns (fenced,
    never backwards).  :meth:`drain` does the same once more on the SIGTERM path, waiting a little
    for the completion of the last batch.  Planner process; thread-safe (one lock)."""

    POLL_S = 0.05
    KEEP = 64  # planned batches remembered (a completion is reported within a batch or two)

    def __init__(self, driver: _Driver):
        from pyklog.connector.spark.batch_end import BatchEndChannel

        self.driver = driver
        self.channel = BatchEndChannel()
        self._lock = threading.RLock()  # re-entrant: drain() may run in a signal handler on the planner thread
        self._planned: dict = {}  # end offsets as sorted JSON text -> {tp: offset}, insertion order
        self._last_planned: str | None = None
        self._completed: set = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"pyklog-batch-end-{driver.group_id}", daemon=True)
        self._thread.start()

    @property
    def path(self) -> str:
        return self.channel.path

    @staticmethod
    def _key(end: dict) -> str:
        import json

        return json.dumps(end, sort_keys=True)

    def planned(self, start: dict, end: dict) -> None:
        """Spark runs a batch ``(start, end)`` (planner thread, from ``partitions``)."""
        if start == end:
            return
        key = self._key(end)
        with self._lock:
            self._planned[key] = _offsets.from_json(end)
            self._last_planned = key
            while len(self._planned) > self.KEEP:
                self._planned.pop(next(iter(self._planned)))

    def _run(self):
        while not self._stop.wait(self.POLL_S):
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - keep watching; the next trigger commits anyway
                log.exception("pyklog: batch-end watcher of group %s", self.driver.group_id)

    def poll(self) -> bool:
        """Read the channel once; commit a newly completed batch.  True when one was found."""
        with self._lock:
            msg = self.channel.read_new()
            if msg is None:
                return False
            batch_id, end = msg
            key = self._key(end)
            positions = self._planned.get(key)
            if positions is None:
                log.debug("pyklog: completed batch %s was not planned by this planner; ignored", batch_id)
                return False
            self._completed.add(key)
        member = self.driver.member
        owned = member.assignment() if member is not None else None
        todo = {tp: off for tp, off in positions.items() if owned is None or tp in owned}
        done = self.driver.store.commit_completed(todo)
        log.debug("pyklog group %s: batch %s complete; committed %s", self.driver.group_id, batch_id, done)
        return True

    def drain(self, wait_s: float) -> None:
        """SIGTERM path: commit what completed, waiting up to ``wait_s`` for the last batch handed to
        Spark to be reported complete (it may have been interrupted by the stop: then it is not)."""
        deadline = time.monotonic() + wait_s
        while True:
            self.poll()
            with self._lock:
                done = self._last_planned is None or self._last_planned in self._completed
            if done or time.monotonic() >= deadline:
                if not done:
                    log.info("pyklog group %s: the last batch was not reported complete; its offsets stay "
                             "uncommitted", self.driver.group_id)
                return
            time.sleep(self.POLL_S)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(2)
        self.channel.close()


# ------------------------------------------------------------------------------------------------
# stream reader
# ------------------------------------------------------------------------------------------------
def _trace(name: str, ms: float) -> None:
    """Record one planner call or read task's wall time (see :func:`_traced`)."""
    path = os.environ.get("PYKLOG_PLANNER_TRACE")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f'{{"call": "{name}", "ms": {ms:.3f}, "t": {time.time():.3f}, "pid": {os.getpid()}}}\n')
    except OSError:
        pass


def _traced(fn):
    """Planner calls record their wall time (JSON lines ``{"call", "ms", "t"}``) in the file named by
    the environment variable ``PYKLOG_PLANNER_TRACE`` when it is set (bench/bench_latency.py; Spark's
    Python workers inherit the driver's environment).  Otherwise ``fn`` unchanged.  Planner thread."""
    import functools

    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        path = os.environ.get("PYKLOG_PLANNER_TRACE")
        if not path:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _trace(name, (time.perf_counter() - t0) * 1000)
    return wrapper


_SIGTERM_DRIVERS: list = []
_SIGTERM_INSTALLED = False


def _in_planner_worker() -> bool:
    """Whether this process is a PySpark Python worker (where SIGTERM means "query stopped"),
    rather than a user's process that happens to call the reader (tests, notebooks)."""
    if os.environ.get("PYKLOG_SPARK_SIGTERM") == "1":
        return True
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = (getattr(spec, "name", None) or getattr(main, "__file__", None) or "")
    return "pyspark" in name and ("worker" in name or "runner" in name or "daemon" in name)


def _install_sigterm(driver: _Driver) -> None:
    """PySpark stops a planner worker with SIGTERM (stop() is not called): close the driver state
    (ZooKeeper session first, so the group rebalances at once), then die as SIGTERM would."""
    global _SIGTERM_INSTALLED
    _SIGTERM_DRIVERS.append(driver)
    if _SIGTERM_INSTALLED:
        return
    if not _in_planner_worker():
        log.debug("pyklog: not in a PySpark worker; no SIGTERM handler installed")
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            # PySpark may send SIGTERM more than once; a second one arriving while this handler runs
            # would re-enter it and kill the process before the ZooKeeper session is closed
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for d in list(_SIGTERM_DRIVERS):
                try:
                    d.close(fast=True)
                except Exception:  # noqa: BLE001
                    pass
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, handler)
        _SIGTERM_INSTALLED = True
    except ValueError:  # not the main thread (e.g. a test calling the reader directly)
        log.debug("pyklog: cannot install a SIGTERM handler outside the main thread")


def _zk_connected(member) -> bool:
    """Whether the member's kazoo client is connected now (its own view, no round trip)."""
    from kazoo.client import KazooState

    zk = member.zk
    return zk is not None and zk.state == KazooState.CONNECTED and member.session_valid_cached()


class PyklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader.  Driver (planner) methods use :class:`_Driver`; ``read()`` runs on
    executors on a pickled copy that holds only the options."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._driver: _Driver | None = None
        self._initial: dict | None = None
        self._prev_end_keys: set | None = None  # partitions in the last end offset (this process)
        self._pending: dict = {}  # tp -> position to record when it is next added to an end offset
        self._latest: dict = {}
        self._target: dict | None = None  # Trigger.AvailableNow
        self._last_batch_time = time.monotonic()
        self._epoch: int | None = None  # the group member's epoch at the last trigger
        self._verified_at: float | None = None  # monotonic time the member's session was last verified
        # fetchOnDriver (driver_fetch): the trigger's ends come from a Fetch at the query's positions,
        # whose records are kept for the batch (prefetched: {tp: RawFetchResult}, consumed once)
        self.latest_by_fetch = False
        self.prefetched: dict = {}

    def __getstate__(self):
        # only the options travel to the executors
        return {"opts": self.opts}

    def __setstate__(self, state):
        self.__init__(state["opts"])

    # -- driver ---------------------------------------------------------------------------------
    def _ensure_driver(self) -> _Driver:
        if self._driver is None:
            d = _Driver(self.opts, streaming=True)
            try:
                d.start_group()
            except BaseException:
                d.close()
                raise
            self._driver = d
            _install_sigterm(d)
        return self._driver

    def initialOffset(self) -> dict:
        if self._initial is None:
            d = self._ensure_driver()
            owned = d.owned()
            committed = d.store.fetch(owned)
            fresh = [tp for tp in owned if tp not in committed]
            if fresh:
                # per-partition JSON names every partition of the subscription (Spark's rule)
                check_covers(self.opts.starting, "starting",
                             owned if d.member is None else d.subscribed_partitions())
            positions = dict(committed)
            positions.update(d.resolve(self.opts.starting, fresh, default_kind="latest"))
            self._initial = _offsets.to_json(positions)
            self._prev_end_keys = set(positions)
            log.info("pyklog group %s starts at %s", d.group_id, self._initial)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        d = self._ensure_driver()
        owned = d.owned()
        self._target = d.list_offsets(owned, LATEST)
        log.info("pyklog Trigger.AvailableNow target: %s", _offsets.to_json(self._target))

    @_traced
    def latestOffset(self, start: dict, limit: ReadLimit = None) -> dict:
        d = self._ensure_driver()
        if d.member is not None:
            return self._latest_offset(d, start, limit, 0.0)
        try:
            return self._latest_offset(d, start, limit, d.DISCOVERY_S)
        except UnknownTopicOrPartitionError:
            # a partition of the reused discovery is gone: discover again (then it is reported lost)
            return self._latest_offset(d, start, limit, 0.0)

    def _latest_offset(self, d: _Driver, start: dict, limit, discovery_age_s: float) -> dict:
        opts = self.opts
        start_map = _offsets.from_json(start)
        first_call = self._prev_end_keys is None
        epoch_changed = False
        if d.member is not None:
            epoch_changed = self._check_membership(d)
        owned_before = set(d.owned(discovery_age_s))
        drop: dict = {}  # partitions left out of this end offset, re-added at the given position next time
        if first_call or epoch_changed:
            # a restart (no initialOffset in this process), or this member's session expired since the
            # last trigger (it was paused, a "zombie") and what it owns now it may have regained: another
            # member may have advanced a partition meanwhile; its committed offset is then ahead of ours
            mine = sorted(tp for tp in start_map if tp in owned_before)
            committed = d.store.fetch(mine)
            for tp in mine:
                if committed.get(tp, -1) > start_map[tp]:
                    log.info("pyklog: %s-%s was advanced to %s by another member of group %s; resuming "
                             "there", tp[0], tp[1], committed[tp], d.group_id)
                    drop[tp] = committed[tp]
        # 1. every batch up to ``start`` is complete: commit it for the partitions this query owns,
        #    on the committer thread (the batch-end watcher has usually committed it already)
        d.store.commit_later({tp: off for tp, off in start_map.items() if tp in owned_before and tp not in drop})
        # 2. give up what a rebalance took away (after that commit: written now, on this thread)
        if d.member is not None:
            release = d.member.to_release()
            if release:
                d.store.flush()
                log.info("pyklog group %s: releasing %s at the batch boundary", d.group_id, sorted(release))
                d.member.release(release)
                for tp in release:  # a position kept for it is stale once another member reads it
                    self._pending.pop(tp, None)
            owned = set(d.owned())
        else:
            owned = owned_before
        if d.member is None:
            # Without a group every partition of the subscription is read: one that was read and is
            # no longer in the metadata is gone (its topic deleted), as Spark's Kafka source reports
            # it.  (In a group, a partition not owned any more was handed to another member.)
            for tp in sorted(tp for tp in start_map if tp not in owned and tp not in drop):
                _report_loss(opts, tp[0], tp[1], start_map[tp], None,
                             "the partition is gone (its topic was deleted)")
        latest = None
        self.prefetched = {}
        if self.latest_by_fetch and owned and all(tp in start_map and tp not in drop for tp in owned):
            got = d.latest_by_fetch({tp: start_map[tp] for tp in sorted(owned)})
            if got is not None:
                latest, self.prefetched = got
        if latest is None:
            latest = d.list_offsets(sorted(owned), LATEST) if owned else {}
        self._latest = latest
        # 3. continuing partitions advance; new ones are recorded at their start position
        end: dict = {}
        cont = []
        for tp in sorted(owned):
            if tp in drop:
                continue
            if tp in start_map:
                s = start_map[tp]
                if s > latest[tp] and d.high_watermark_lags(tp, s, latest[tp]):
                    latest[tp] = s  # nothing new this trigger: the records are there, wait for them
                if s > latest[tp]:
                    _report_loss(opts, tp[0], tp[1], latest[tp], s,
                                 f"the query's offset {s} is beyond the log end {latest[tp]} (the topic "
                                 "was recreated or its log truncated); restarting the partition at its "
                                 "earliest offset")
                    drop[tp] = d.list_offsets([tp], EARLIEST)[tp]
                    continue
                cont.append(tp)
                end[tp] = latest[tp]
        new = sorted(tp for tp in owned if tp not in start_map and tp not in drop)
        if new:
            fresh = [tp for tp in new if tp not in self._pending]
            committed = d.store.fetch(fresh)
            missing = [tp for tp in fresh if tp not in committed]
            earliest = d.list_offsets(missing, EARLIEST) if missing else {}
            if d.member is None and missing:
                # partitions added to a subscribed topic (CreatePartitions) or a new topic matching
                # the pattern: read from their earliest offset, as Spark's Kafka source does
                log.info("pyklog %s: partitions added: %s, read from their earliest offsets",
                         opts.describe(), ", ".join(f"{t}-{p}@{earliest[(t, p)]}" for t, p in missing))
            if d.member is None:
                for tp in missing:
                    if earliest[tp] != 0:
                        _report_loss(opts, tp[0], tp[1], 0, earliest[tp],
                                     f"the added partition starts at offset {earliest[tp]} instead of 0")
            for tp in new:
                if tp in self._pending:
                    end[tp] = self._pending.pop(tp)
                else:
                    end[tp] = committed[tp] if tp in committed else earliest[tp]
                log.info("pyklog group %s: %s-%s starts at offset %s", d.group_id, tp[0], tp[1], end[tp])
        self._pending.update(drop)
        # 4. Trigger.AvailableNow: never beyond the target
        if self._target is not None:
            for tp in cont:
                if tp not in self._target:
                    self._target[tp] = latest[tp]
                end[tp] = max(start_map[tp], min(end[tp], self._target[tp]))
        # 5. admission control (only continuing partitions have rows in this batch)
        if limit is not None and not isinstance(limit, ReadAllAvailable) and cont:
            cont_start = {tp: start_map[tp] for tp in cont}
            cont_end = {tp: end[tp] for tp in cont}
            available = sum(cont_end[tp] - cont_start[tp] for tp in cont)
            max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else opts.max_offsets_per_trigger
            min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else opts.min_offsets_per_trigger
            if min_rows is not None and self._target is None and 0 < available < min_rows and \
                    (time.monotonic() - self._last_batch_time) * 1000 < opts.max_trigger_delay_ms:
                cont_end = dict(cont_start)  # wait for more data, at most maxTriggerDelay
            elif max_rows is not None:
                cont_end = _offsets.rate_limit(cont_start, cont_end, max_rows)
            end.update(cont_end)
        if any(end[tp] != start_map[tp] for tp in cont):
            self._last_batch_time = time.monotonic()
        self._prev_end_keys = set(end)
        return _offsets.to_json(end)

    _REJOIN_WAIT_S = 10.0

    def _check_membership(self, d: _Driver) -> bool:
        """Before planning: is the member's session still the one that owns its partitions?  A
        planner paused past its ZooKeeper session (SIGSTOP, a long GC of the host...) resumes
        owning nothing: the group gave its partitions to others.  Asking the server (one round trip)
        is how it finds out; it then registers again and waits (at most _REJOIN_WAIT_S) for the
        rebalance, and plans only what it owns after it.  Returns whether ownership was dropped since
        the last trigger (the member's epoch moved).  ZooKeeper unreachable: plans with what it owns
        (the member drops it after a session timeout of disconnection)."""
        m = d.member
        now = time.monotonic()
        if self._verified_at is not None and now - self._verified_at < m.session_timeout_s / 3 \
                and _zk_connected(m):
            # Verified less than a third of the session timeout ago and connected since: the session
            # cannot have expired unnoticed meanwhile (a pause long enough shows as a jump of the
            # monotonic clock, which also runs while the process is stopped), so no round trip on
            # this trigger (issue 13: it was one ZooKeeper round trip per trigger).
            valid = True
        else:
            valid = None
        for _ in range(0 if valid else 20):  # a resumed zombie's first request may meet the dead connection
            try:
                valid = m.session_valid()
                break
            except Exception as e:  # noqa: BLE001
                if not _outage_error(e):
                    raise
                time.sleep(0.1)
        if valid:
            self._verified_at = now
        else:
            self._verified_at = None
        if valid is False:
            log.warning("pyklog group %s: this member's ZooKeeper session expired (the planner was paused "
                        "past zookeeper.session.timeout.ms); its partitions went to other members. "
                        "Registering again before planning", d.group_id)
            if not m.wait_stable(timeout=self._REJOIN_WAIT_S):
                log.warning("pyklog group %s: not stable after rejoining; planning with %s", d.group_id,
                            sorted(m.assignment()))
        epoch = m.epoch
        changed = self._epoch is not None and epoch != self._epoch
        self._epoch = epoch
        return changed

    def reportLatestOffset(self):
        d = self._driver
        if d is not None and d.batch_end is not None:
            from pyklog.connector.spark.batch_end import REPORT_KEY

            # where pyklog's listener in the user's process reports this query's completed batches
            return {**_offsets.to_json(self._latest), REPORT_KEY: d.batch_end.path}
        if not self._latest:
            return None
        return _offsets.to_json(self._latest)

    @_traced
    def partitions(self, start: dict, end: dict):
        d = self._ensure_driver()
        if d.batch_end is not None:
            d.batch_end.planned(start, end)  # Spark runs this batch; its completion will be reported
        rngs = _offsets.split_ranges(_offsets.ranges(_offsets.from_json(start), _offsets.from_json(end)),
                                     self.opts.min_partitions, self.opts.max_records_per_partition)
        return d.input_partitions(rngs)

    def read(self, partition: PyklogInputPartition):
        return read_range(self.opts, partition)

    @_traced
    def commit(self, end: dict) -> None:
        """Spark's commit of the previous batch (it lags: ``latestOffset`` has usually committed
        these offsets already).  Commits owned partitions, never moving an offset backwards."""
        d = self._ensure_driver()
        # what the last latestOffset found owned (no second partition discovery in one trigger)
        owned = self._prev_end_keys or set()
        last = d.store.last
        d.store.commit_later({tp: off for tp, off in _offsets.from_json(end).items()
                              if tp in owned and off > last.get(tp, -1)})

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()


# ------------------------------------------------------------------------------------------------
# batch reader
# ------------------------------------------------------------------------------------------------
class PyklogBatchReader(DataSourceReader):
    """``spark.read.format("pyklog")``: ``partitions()`` runs on the driver (resolves
    startingOffsets/endingOffsets for every subscribed partition), ``read()`` on executors."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts

    def partitions(self):
        d = _Driver(self.opts, streaming=False)
        try:
            tps = d.subscribed_partitions()
            if not tps:
                raise UnknownTopicOrPartitionError(
                    f"pyklog: no partitions found for {self.opts.subscription.describe()}")
            check_covers(self.opts.starting, "starting", tps)  # Spark's rule for per-partition JSON
            check_covers(self.opts.ending, "ending", tps)
            start = d.resolve(self.opts.starting, tps, default_kind="earliest")
            end = d.resolve(self.opts.ending, tps, default_kind="latest")
            earliest = d.list_offsets(tps, EARLIEST)
            for tp in tps:
                if start[tp] < earliest[tp]:
                    _report_loss(self.opts, tp[0], tp[1], start[tp], earliest[tp],
                                 f"startingOffsets asks for offset {start[tp]} but the log starts at {earliest[tp]}")
                    start[tp] = min(earliest[tp], end[tp])
                if end[tp] < start[tp]:
                    raise ConfigError(
                        f"option 'endingOffsets': {tp[0]}-{tp[1]} ends at {end[tp]}, before its starting offset "
                        f"{start[tp]}")
            rngs = _offsets.split_ranges(_offsets.ranges(start, end), self.opts.min_partitions,
                                         self.opts.max_records_per_partition)
            parts = d.input_partitions(rngs)
        finally:
            d.close()
        if not parts:
            # Spark needs at least one partition; an empty range reads nothing
            t, p = tps[0]
            parts = [PyklogInputPartition(t, p, 0, 0, None)]
        return parts

    def read(self, partition: PyklogInputPartition):
        return read_range(self.opts, partition)


class _GiveUp(Exception):
    """Internal: a non-fatal :meth:`_Driver.call` (a commit) used up fetchOffset.numRetries."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause
