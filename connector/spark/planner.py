"""Driver side of the ``pyklog`` source: the planner's state of one query.

:class:`SourcePlanner` lives in the long-lived *planner* worker on the driver (a Python worker),
created lazily by the stream reader's first planning call (or by one batch planning call) and never
pickled.  It holds the ClusterClient and, for a streaming query with ``zookeeper.connect`` and
``subscribe``/``subscribePattern``, the ZooKeeper group member (manual release) and the group's
offset store (:mod:`pyklog.connector.spark.group_commits`).  It answers the planner's questions:
which partitions the query reads (discovery, or the group's assignment), their offsets
(ListOffsets, timestamps, the group's committed offsets), their leaders (carried by each
:class:`~pyklog.connector.spark.input_partition.PyklogInputPartition`), and for ``fetchOnDriver``
one Fetch per leader at the query's positions.

Outages: every look-up and commit goes through :meth:`SourcePlanner.call`, retried while the
cluster is unreachable (:func:`outage_error`) until ``kafka.default.api.timeout.ms``, then
:class:`ClusterUnreachableError` fails the query (a commit only logs and waits for the next
trigger).  Closing (``stop()``, or SIGTERM through :mod:`pyklog.connector.spark.planner_signals`)
commits what Spark reported complete, leaves the group, and deletes a generated group's offsets.

Imports go one way: this module uses the task module's shared Fetch helpers
(:mod:`pyklog.connector.spark.read_task`) and the group commits; none of them imports it.
Thread-safety: not thread-safe (Spark calls the planner from one thread), except ``close`` which may
run from a signal handler and the batch-end watcher's thread, which commits through the offset
store adapter (its commits are serialized by its lock).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    ConfigError,
    PyklogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
)
from pyklog.connector.spark import planner_signals
from pyklog.connector.spark.group_commits import BatchEndWatcher, OffsetStoreAdapter
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import EARLIEST, LATEST, SourceOptions, default_group_id
from pyklog.connector.spark.read_task import fetch_max_bytes, log_end_reaches, readable_end

log = logging.getLogger(__name__)

__all__ = ["SourcePlanner", "ClusterUnreachableError", "outage_error"]


class ClusterUnreachableError(RequestTimedOutError):
    """The brokers (or ZooKeeper) stayed unreachable longer than ``kafka.default.api.timeout.ms``:
    the message names what was unreachable and for how long.  Fails the query (driver side)."""


def outage_error(e: BaseException) -> bool:
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


class SourcePlanner:
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
        self.client = ClusterClient(
            c.bootstrap_servers,
            c.zookeeper_connect,
            client_id=c.client_id,
            request_timeout_ms=int(c.request_timeout_s * 1000),
            sasl=c.sasl,
        )
        self.isolation = 1 if opts.isolation_level == "read_committed" else 0
        self.member = None
        self.store = None
        self.batch_end: BatchEndWatcher | None = None  # streaming group queries (start_group)
        self._closed = False
        self._close_lock = threading.Lock()
        self._down_since: float | None = None  # monotonic time of the first failure of this outage
        self._deadline: Deadline | None = None  # set while call() runs (nested calls do not retry)
        self._probe = None  # SimpleConsumer on self.client for high_watermark_lags, opened on first use
        self._fetcher = None  # SimpleConsumer on self.client for latest_by_fetch (fetchOnDriver)
        self._discovered: tuple[float, list] | None = None  # (monotonic time, partitions) of the last discovery

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
        """``fn()`` retried while the cluster is unreachable (:func:`outage_error`), with
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
            except Exception as e:  # noqa: BLE001 - outage_error decides
                if outage_error(e):
                    if self._down_since is None:
                        self._down_since = now  # the call started failing (the client may have retried inside)
                        log.warning(
                            "pyklog: %s failed, %s unreachable (%s: %s); retrying for up to %.1f s "
                            "(kafka.default.api.timeout.ms)",
                            what,
                            self.where(),
                            type(e).__name__,
                            e,
                            bound,
                        )
                    if not fatal and retries[0] >= self.opts.fetch_offset_retries:
                        raise _GiveUp(e) from e
                    retries[0] += 1
                raise

        self._deadline = deadline
        try:
            result = retry(
                attempt, deadline=deadline, backoff=backoff, retriable=outage_error, what=what, raise_last=True
            )
        except _GiveUp as g:
            log.warning(
                "pyklog: %s failed after %d retries (%s: %s); the query goes on and retries it at the next trigger",
                what,
                retries[0],
                type(g.cause).__name__,
                g.cause,
            )
            return None
        except Exception as e:  # noqa: BLE001
            if not outage_error(e):
                raise
            down = time.monotonic() - (self._down_since or now)
            msg = (
                f"pyklog: {what} failed: {self.where()} unreachable for {down:.1f} s, which reaches the "
                f"outage bound kafka.default.api.timeout.ms={self.opts.api_timeout_ms} (fetchOffset.numRetries="
                f"{self.opts.fetch_offset_retries}, fetchOffset.retryIntervalMs="
                f"{self.opts.fetch_offset_retry_interval_ms}); last error: {type(e).__name__}: {e}"
            )
            if not fatal:
                log.warning("%s; the query goes on and retries it at the next trigger", msg)
                return None
            log.error("%s", msg)
            raise ClusterUnreachableError(msg) from e
        finally:
            self._deadline = None
        if self._down_since is not None:
            log.warning(
                "pyklog: %s reachable again after %.1f s; %s succeeded",
                self.where(),
                time.monotonic() - self._down_since,
                what,
            )
            self._down_since = None
        return result

    # -- partitions and offsets ----------------------------------------------------------------
    #: streaming without a group: how old the partition discovery (a metadata request) used by a
    #: trigger may be.  Spark's Kafka source relies on its consumer's metadata (metadata.max.age.ms,
    #: 5 minutes); pyklog used to refresh it on every trigger.  A ListOffsets that finds a
    #: partition gone discovers again at once.
    DISCOVERY_S = 1.0

    def subscribed_partitions(self, max_age_s: float = 0.0) -> list[tuple[str, int]]:
        """Every partition the subscription covers now (no group: what this query reads); with
        ``max_age_s`` a discovery at most that old may be reused."""
        sub = self.opts.subscription
        if sub.kind == "assign":
            return list(sub.partitions)
        now = time.monotonic()
        cached = self._discovered
        if max_age_s > 0 and cached is not None and now - cached[0] < max_age_s:
            return list(cached[1])
        out = self.call("partition discovery", self._subscribed_partitions)
        self._discovered = (now, list(out))
        return out

    def discovered_recently(self) -> bool:
        """Whether a cached partition discovery exists (see :meth:`subscribed_partitions`)."""
        return self._discovered is not None

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
        res = self.call(
            f"ListOffsets ({'latest' if spec == LATEST else 'earliest'})",
            lambda: self.client.list_offsets(
                dict.fromkeys(tps, spec), isolation_level=self.isolation, timeout_s=self.timeout_s()
            ),
        )
        out = {}
        for tp in tps:
            off = res.get(tp)
            if off is None:
                raise UnknownTopicOrPartitionError(
                    f"pyklog: no {'latest' if spec == LATEST else 'earliest'} offset for {tp[0]}-{tp[1]}"
                )
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
            ts = dict.fromkeys(tps, spec.timestamp)
            name = "startingTimestamp/endingTimestamp"
        else:
            given = spec.offsets_dict()
            missing = [tp for tp in tps if tp not in given]
            if missing:
                raise ConfigError(
                    f"option 'startingOffsetsByTimestamp'/'endingOffsetsByTimestamp': no timestamp for "
                    f"{', '.join(f'{t}-{p}' for t, p in missing)} (every partition read must be listed)"
                )
            ts = {tp: given[tp] for tp in tps}
            name = "startingOffsetsByTimestamp/endingOffsetsByTimestamp"
        res = self.call(
            "ListOffsets (timestamps)",
            lambda: self.client.offsets_for_times(ts, isolation_level=self.isolation, timeout_s=self.timeout_s()),
        )
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
                    "(set startingOffsetsByTimestampStrategy=latest to start at the latest offset instead)"
                )
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
            self._fetcher = SimpleConsumer(
                client=self.client,
                isolation_level=opts.isolation_level,
                check_crcs=opts.check_crcs,
                max_wait_ms=0,
                min_bytes=0,
                fetch_max_bytes=fetch_max_bytes(opts),
                request_timeout_ms=int(opts.cluster.request_timeout_s * 1000),
            )
        mb = opts.max_partition_fetch_bytes
        res = self.call(
            "Fetch (latest offsets)",
            lambda: self._fetcher.multi_fetch_raw(
                {tp: (off, mb) for tp, off in positions.items()}, timeout_s=self.timeout_s()
            ),
        )
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
            self._probe = SimpleConsumer(
                client=self.client,
                max_wait_ms=0,
                min_bytes=0,
                request_timeout_ms=int(self.opts.cluster.request_timeout_s * 1000),
            )
        reaches = self.call(
            f"log end check of {tp[0]}-{tp[1]}",
            lambda: log_end_reaches(self._probe, tp[0], tp[1], offset, timeout_s=self.timeout_s()),
        )
        if reaches:
            log.info(
                "pyklog: %s-%s: high watermark %d is behind the query's offset %d, which the leader's log "
                "holds (a new leader whose followers have not fetched yet?); no rows for it this trigger",
                tp[0],
                tp[1],
                high_watermark,
                offset,
            )
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
                log.warning(
                    "pyklog: no leader for %s-%s while planning (%s); the task will look it up", tp[0], tp[1], e
                )
                out[tp] = (None, None)
        return out

    def input_partitions(self, rngs) -> list:
        """One :class:`PyklogInputPartition` per ``(topic, partition, start, end)``, each carrying
        its partition's leader (id and address) so the task connects straight to it."""
        leaders = self.leaders({(t, p) for t, p, _, _ in rngs})
        return [PyklogInputPartition(t, p, a, b, leaders[(t, p)][1], leaders[(t, p)][0]) for t, p, a, b in rngs]

    # -- group -------------------------------------------------------------------------------------
    def start_group(self) -> None:
        """Join the consumer group (subscribe/subscribePattern with zookeeper.connect) and open the
        offset store.  Waits for the first rebalance."""
        opts = self.opts
        if opts.uses_group:
            from pyklog.connector.group import GroupMember, Whitelist

            sub = opts.subscription
            kwargs = (
                {"topics": list(sub.topics)} if sub.kind == "subscribe" else {"topic_filter": Whitelist(sub.pattern)}
            )
            consumer_id = f"{socket.gethostname()}-spark-{os.getpid()}-{uuid.uuid4().hex[:8]}"
            self.member = GroupMember(
                opts.cluster.zookeeper_connect,
                self.group_id,
                strategy=opts.assignment_strategy,
                consumer_id=consumer_id,
                session_timeout_s=opts.cluster.zk_session_timeout_s,
                manual_release=True,
                **kwargs,
            )
            self.member.start()
            self.member.wait_stable(timeout=max(15.0, 2 * opts.cluster.zk_session_timeout_s))
            log.info(
                "pyklog query joined group %s as %s with %s",
                self.group_id,
                consumer_id,
                sorted(self.member.assignment()),
            )
        self.store = OffsetStoreAdapter(self)
        if self.member is not None and self.streaming:
            self.batch_end = BatchEndWatcher(self)

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
        planner_signals.forget(self)
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


class _GiveUp(Exception):
    """Internal: a non-fatal :meth:`SourcePlanner.call` (a commit) used up fetchOffset.numRetries."""

    def __init__(self, cause: BaseException):
        super().__init__(str(cause))
        self.cause = cause
