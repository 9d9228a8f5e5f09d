"""Executor side of the ``pyklog`` source: one read task reads one offset range.

``read()`` runs on executors with one :class:`~pyklog.connector.spark.input_partition.PyklogInputPartition`
(topic, partition, offset range, the leader's broker id and address as planned); it takes a consumer
from this worker's :data:`TASK_CONSUMERS` cache (or opens one connection, to that leader: one
ApiVersions handshake, no metadata request), fetches raw record batches and decodes them to Arrow
in bulk (:mod:`pyklog.connector.spark.arrow`).  Only when that broker no longer leads the partition
(NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION) or cannot be reached does the task look the
leader up in the metadata, and it logs that it does.

Also here, because the planner (driver) shares them with the tasks: how a Fetch answer is decoded
(:func:`decode_raw`), where it says a partition ends (:func:`readable_end`), the Fetch response limit
(:func:`fetch_max_bytes`), the log-end check (:func:`log_end_reaches`) and the failOnDataLoss rule
(:func:`report_loss`).  This module never imports the planner.  Thread-safety: a task runs on one
thread (plus its own prefetch thread); the consumer cache is thread-safe.
"""

from __future__ import annotations

import logging
import time

from pyklog.broker.errors import (
    DataLossError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    UnknownTopicOrPartitionError,
)
from pyklog.connector.spark import arrow as _arrow
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import SourceOptions
from pyklog.connector.spark.task_cache import TaskClientCache
from pyklog.connector.spark.tracing import trace

log = logging.getLogger(__name__)

__all__ = [
    "TASK_CONSUMERS",
    "read_range",
    "decode_raw",
    "readable_end",
    "fetch_max_bytes",
    "log_end_reaches",
    "report_loss",
    "task_consumer_kwargs",
    "consumer_usable",
]


def report_loss(opts: SourceOptions, topic: str, partition: int, lost_from: int, lost_until, why: str) -> None:
    until = "its end" if lost_until is None else str(lost_until)
    msg = (
        f"pyklog: partition {topic}-{partition} lost offsets [{lost_from}, {until}): {why}. "
        "Some data may have been lost because it is no longer available in the broker "
        "(removed by retention, or the topic was deleted and recreated)."
    )
    if opts.fail_on_data_loss:
        raise DataLossError(
            msg + " If you want your streaming query to continue despite this, set the "
            "source option 'failOnDataLoss' to 'false'."
        )
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
    r = consumer.multi_fetch_raw({(topic, int(partition)): (int(offset), 1)}, timeout_s=timeout_s)[
        (topic, int(partition))
    ]
    if r.error_code == OffsetOutOfRangeError.code:
        return False
    if r.error_code:
        raise r.error
    return True


def consumer_usable(consumer) -> bool:
    """Before a cached consumer serves another task: close the connections a broker closed while it
    was idle (:meth:`ClusterClient.close_dead_connections`), so the next request reopens them.
    True: the consumer is usable."""
    consumer.client.close_dead_connections()
    return True


#: this process's cache of read-task consumers (see :mod:`.task_cache`): a task after the first one
#: in a worker opens no connection and sends no ApiVersions, it fetches at once.  At most two idle
#: consumers per key (a worker runs one task at a time).
TASK_CONSUMERS = TaskClientCache("consumer", max_idle_per_key=2, usable=consumer_usable)


def task_consumer_kwargs(opts: SourceOptions, part: PyklogInputPartition) -> dict:
    """What a read task's :class:`SimpleConsumer` is built from (also its cache key)."""
    # the planned leader first; the cluster's own bootstrap servers are where a lookup goes when
    # that broker is gone (nothing connects to them while the planned leader serves the fetches)
    bootstrap = ",".join(b for b in (part.leader, opts.cluster.bootstrap_servers) if b) or None
    return {
        "bootstrap_servers": bootstrap,
        "zookeeper_connect": None if bootstrap else opts.cluster.zookeeper_connect,
        "zookeeper_credentials": None if bootstrap else opts.cluster.zookeeper_credentials,
        "client_id": opts.cluster.client_id,
        "isolation_level": opts.isolation_level,
        "check_crcs": opts.check_crcs,
        "request_timeout_ms": int(opts.cluster.request_timeout_s * 1000),
        "max_wait_ms": min(
            500 if opts.fetch_max_wait_ms is None else opts.fetch_max_wait_ms,
            int(opts.cluster.request_timeout_s * 1000) - 1,
        ),
        "min_bytes": 1 if opts.fetch_min_bytes is None else opts.fetch_min_bytes,
        "fetch_max_bytes": fetch_max_bytes(opts),
        "retry_backoff_ms": 100 if opts.retry_backoff_ms is None else opts.retry_backoff_ms,
        "security": opts.cluster.security,
    }


def fetch_max_bytes(opts: SourceOptions) -> int:
    """The Fetch response limit of the source's consumers (tasks and the fetchOnDriver planner)."""
    return opts.fetch_max_bytes or max(opts.max_partition_fetch_bytes, 1 << 20)


def decode_raw(opts: SourceOptions, r, topic: str, partition: int, start: int, end: int):
    """The rows ``[start, end)`` of one partition's Fetch answer ``r`` (a RawFetchResult) as the
    source's options ask: headers, CRC check, read_committed's aborted transactions.  Read tasks and
    the fetchOnDriver planner."""
    aborted = _arrow.AbortedTransactions(r.aborted_transactions) if opts.isolation_level == "read_committed" else None
    return _arrow.decode_fetch(
        r.records,
        topic,
        partition,
        start,
        end,
        include_headers=opts.include_headers,
        validate_crc=opts.check_crcs,
        aborted=aborted,
    )


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
    kwargs = task_consumer_kwargs(opts, part)
    if opts.consumer_cache:
        key = tuple(sorted(kwargs.items()))
        consumer = TASK_CONSUMERS.take(key, lambda: _new_consumer(kwargs))
    else:
        key, consumer = None, _new_consumer(kwargs)
    try:
        if opts.formats:
            from pyklog.connector.spark.typed import convert_batch

            for batch in _read_range(opts, part, consumer):
                yield convert_batch(batch, opts.formats)
        else:
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
                    report_loss(
                        opts, topic, partition, offset, min(start_off, end), f"the log now starts at offset {start_off}"
                    )
                    offset = min(start_off, end)
                    continue
                if end_off is not None and offset >= end_off:
                    report_loss(opts, topic, partition, offset, end, f"the log now ends at offset {end_off}")
                    return
                raise
            except UnknownTopicOrPartitionError as e:
                report_loss(opts, topic, partition, offset, end, f"the partition no longer exists ({e})")
                return
            nxt = _arrow.complete_batches_end(r.records)
            if nxt is not None and offset < nxt < end:
                if pool is None:
                    from concurrent.futures import ThreadPoolExecutor

                    pool = ThreadPoolExecutor(1, thread_name_prefix=f"pyklog-fetch-{topic}-{partition}")
                ahead = (
                    nxt,
                    max_bytes,
                    pool.submit(consumer.fetch_raw, topic, partition, nxt, max_bytes, timeout_s=deadline_s),
                )
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
                        f"pyklog: {topic}-{partition} at offset {offset}: a record batch does not fit in 1 GiB"
                    )
                max_bytes *= 2  # a batch larger than kafka.max.partition.fetch.bytes
                continue
            hw = readable_end(opts, r)
            if 0 <= hw <= offset:
                if r.high_watermark >= 0 and offset >= r.high_watermark and not hw_lags:
                    # below the planned end: lost (the log ends before it), or a new leader's
                    # high watermark not caught up yet (wait for it, up to pollTimeoutMs)
                    if not log_end_reaches(consumer, topic, partition, end, timeout_s=deadline_s):
                        report_loss(
                            opts,
                            topic,
                            partition,
                            offset,
                            end,
                            f"the log ends at offset {r.high_watermark}, before the planned end {end}",
                        )
                        return
                    hw_lags = True
                    log.info(
                        "pyklog: %s-%s: high watermark %d is behind the planned end %d (the records are "
                        "in the leader's log, not yet known to be replicated: a new leader?); waiting",
                        topic,
                        partition,
                        r.high_watermark,
                        end,
                    )
            now = time.monotonic()
            if stalled_since is None:
                stalled_since = now
            elif now - stalled_since > deadline_s:
                raise TimeoutError(
                    f"pyklog: no data for {topic}-{partition} at offset {offset} (planned up to {end}) "
                    f"within kafkaConsumer.pollTimeoutMs={opts.poll_timeout_ms}"
                )
            time.sleep(0.05)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)  # a prefetch still under way ends before the consumer is reused
        elapsed = time.perf_counter() - t_start
        trace("read", elapsed * 1000)
        trace("read fetch", t_fetch * 1000)
        log.debug(
            "pyklog read %s-%s [%s, %s): %d rows in %.3f s (fetch %.3f s, the rest decoding and "
            "handing batches to Spark)",
            topic,
            partition,
            part.start,
            part.end,
            n_rows,
            elapsed,
            t_fetch,
        )
