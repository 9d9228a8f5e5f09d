"""The ``pyklog`` source's micro-batch reader (``spark.readStream.format("pyklog")``).

Where the code runs: :class:`PyklogStreamReader` is created twice per query: once in the long-lived
*planner* worker on the driver, which runs ``initialOffset``, ``getDefaultReadLimit``,
``latestOffset``, ``reportLatestOffset``, ``partitions``, ``commit`` (state survives between these
calls), and once to be pickled to the executors for ``read()``.  ``__init__`` therefore only keeps
the options; the planner state (:class:`~pyklog.connector.spark.planner.SourcePlanner`) is created
lazily in the planner and excluded from pickling, and ``read()`` hands the task to
:func:`pyklog.connector.spark.read_task.read_range`.

Offsets and the consumer group: see :mod:`pyklog.connector.spark.offsets` and docs/spark-connector.md.
With ``zookeeper.connect`` and ``subscribe``/``subscribePattern`` the planner registers as a member of
ZooKeeper consumer group ``group.id`` (manual release): at each ``latestOffset(start)`` every batch up
to ``start`` is complete, so the planner commits ``start`` for the partitions it owns, releases the
partitions a rebalance took away (after that commit), and adds partitions it newly owns at the
group's committed offset, or at the query's own position when it read the partition before and the
commit lags it (an empty range in that batch, read from the next one).  Before planning it checks
that its ZooKeeper session still lives (a planner paused past it, a zombie, registers again and plans
only what it owns after the rebalance).  While ZooKeeper is unreachable it keeps planning the last
assignment with no ZooKeeper call (the brokers serve) and registers again once ZooKeeper answers.
The end offsets themselves are computed from what those look-ups returned by
:func:`pyklog.connector.spark.end_offsets.plan_end_offsets` (pure).

Thread-safety: used by one thread at a time (Spark's call protocol).
"""

from __future__ import annotations

import logging
import time

from pyspark.sql.datasource import DataSourceStreamReader
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from pyklog.broker.errors import UnknownTopicOrPartitionError
from pyklog.connector.spark import offsets as _offsets
from pyklog.connector.spark import planner_signals
from pyklog.connector.spark.batch_end import REPORT_KEY
from pyklog.connector.spark.end_offsets import plan_end_offsets, start_of_owned_partition
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import EARLIEST, LATEST, SourceOptions, check_covers
from pyklog.connector.spark.planner import SourcePlanner, outage_error
from pyklog.connector.spark.read_task import read_range, report_loss
from pyklog.connector.spark.tracing import traced

log = logging.getLogger(__name__)

__all__ = ["PyklogStreamReader", "zk_connected"]


def _fmt(tps) -> str:
    return "[" + ", ".join(f"{t}-{p}" for t, p in sorted(tps)) + "]"


def zk_connected(member) -> bool:
    """Whether the member's kazoo client is connected now (its own view, no round trip)."""
    from kazoo.client import KazooState

    zk = member.zk
    return zk is not None and zk.state == KazooState.CONNECTED and member.session_valid_cached()


class PyklogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader.  Driver (planner) methods use
    :class:`~pyklog.connector.spark.planner.SourcePlanner`; ``read()`` runs on executors on a pickled
    copy that holds only the options."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._driver: SourcePlanner | None = None
        self._initial: dict | None = None
        self._prev_end_keys: set | None = None  # partitions in the last end offset (this process)
        self._pending: dict = {}  # tp -> position to record when it is next added to an end offset
        self._latest: dict = {}
        self._target: dict | None = None  # Trigger.AvailableNow
        self._last_batch_time = time.monotonic()
        self._epoch: int | None = None  # the group member's epoch at the last trigger
        self._verified_at: float | None = None  # monotonic time the member's session was last verified
        # the query's own position of every partition it has read (this process), kept when a
        # partition leaves the end offsets: a group commit older than it never moves it back
        self._positions: dict = {}
        self._kept: set | None = None  # the assignment of the last trigger planned with ZooKeeper reachable
        self._outage: float | None = None  # ZooKeeper outage: when the member lost its connection
        self._outage_lost_logged = False  # "lost the ZooKeeper session" logged for this outage
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
    def ensure_planner(self) -> SourcePlanner:
        """The planner state of this query, created (and the group joined) on first use.  Planner thread."""
        if self._driver is None:
            d = SourcePlanner(self.opts, streaming=True)
            try:
                d.start_group()
            except BaseException:
                d.close()
                raise
            self._driver = d
            planner_signals.install_sigterm(d)
        return self._driver

    def initialOffset(self) -> dict:
        if self._initial is None:
            d = self.ensure_planner()
            owned = d.owned()
            committed = d.store.fetch(owned)
            fresh = [tp for tp in owned if tp not in committed]
            if fresh:
                # per-partition JSON names every partition of the subscription (Spark's rule)
                check_covers(self.opts.starting, "starting", owned if d.member is None else d.subscribed_partitions())
            positions = dict(committed)
            positions.update(d.resolve(self.opts.starting, fresh, default_kind="latest"))
            self._initial = _offsets.to_json(positions)
            self._prev_end_keys = set(positions)
            if d.member is not None:  # planned with ZooKeeper reachable: what an outage keeps reading
                self._kept = set(owned)
                self._verified_at = time.monotonic()
            log.info("pyklog group %s starts at %s", d.group_id, self._initial)
        return self._initial

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        d = self.ensure_planner()
        owned = d.owned()
        self._target = d.list_offsets(owned, LATEST)
        log.info("pyklog Trigger.AvailableNow target: %s", _offsets.to_json(self._target))

    @traced
    def latestOffset(self, start: dict, limit: ReadLimit = None) -> dict:
        d = self.ensure_planner()
        if d.member is not None:
            return self._latest_offset(d, start, limit, 0.0)
        try:
            return self._latest_offset(d, start, limit, d.DISCOVERY_S)
        except UnknownTopicOrPartitionError:
            # a partition of the reused discovery is gone: discover again (then it is reported lost)
            return self._latest_offset(d, start, limit, 0.0)

    def _latest_offset(self, d: SourcePlanner, start: dict, limit, discovery_age_s: float) -> dict:
        """``latestOffset``'s I/O, in order: the membership check, the group's commit of ``start``, the
        release of what a rebalance took away, the partitions' ends (ListOffsets or fetchOnDriver's
        Fetch), the restarts of positions past the log end, the start of new partitions; then
        :func:`plan_end_offsets` computes the end offsets from those answers.  Planner thread."""
        opts = self.opts
        start_map = _offsets.from_json(start)
        for tp, off in start_map.items():
            self._positions[tp] = off
        first_call = self._prev_end_keys is None
        epoch_changed = False
        outage = d.member is not None and self._zookeeper_outage(d)
        if d.member is not None and not outage:
            epoch_changed = self._check_membership(d)
        if outage:
            # ownership cannot be checked: keep reading what the last assignment held (no ZooKeeper
            # call on this thread until it is back; the brokers serve meanwhile)
            owned_before = {tp for tp in self._kept if tp in start_map or tp in self._pending}
        else:
            owned_before = set(d.owned(discovery_age_s))
        drop: dict = {}  # partitions left out of this end offset, re-added at the given position next time
        if (first_call or epoch_changed) and not outage:
            # a restart (no initialOffset in this process), or this member's session expired since the
            # last trigger (it was paused, a "zombie") and what it owns now it may have regained: another
            # member may have advanced a partition meanwhile; its committed offset is then ahead of ours
            mine = sorted(tp for tp in start_map if tp in owned_before)
            committed = d.store.fetch(mine)
            for tp in mine:
                if committed.get(tp, -1) > start_map[tp]:
                    log.info(
                        "pyklog: %s-%s was advanced to %s by another member of group %s; resuming there",
                        tp[0],
                        tp[1],
                        committed[tp],
                        d.group_id,
                    )
                    drop[tp] = committed[tp]
        # 1. every batch up to ``start`` is complete: commit it for the partitions this query owns,
        #    on the committer thread (the batch-end watcher has usually committed it already)
        d.store.commit_later({tp: off for tp, off in start_map.items() if tp in owned_before and tp not in drop})
        # 2. give up what a rebalance took away (after that commit: written now, on this thread)
        if d.member is not None and not outage:
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
                report_loss(opts, tp[0], tp[1], start_map[tp], None, "the partition is gone (its topic was deleted)")
        latest = None
        self.prefetched = {}
        if self.latest_by_fetch and owned and all(tp in start_map and tp not in drop for tp in owned):
            got = d.latest_by_fetch({tp: start_map[tp] for tp in sorted(owned)})
            if got is not None:
                latest, self.prefetched = got
        if latest is None:
            latest = d.list_offsets(sorted(owned), LATEST) if owned else {}
        self._latest = latest
        # 3. continuing partitions advance (a position past the log end restarts the partition);
        #    new ones are recorded at their start position
        for tp in sorted(owned):
            if tp in drop or tp not in start_map:
                continue
            s = start_map[tp]
            if s > latest[tp] and d.high_watermark_lags(tp, s, latest[tp]):
                latest[tp] = s  # nothing new this trigger: the records are there, wait for them
            if s > latest[tp]:
                report_loss(
                    opts,
                    tp[0],
                    tp[1],
                    latest[tp],
                    s,
                    f"the query's offset {s} is beyond the log end {latest[tp]} (the topic "
                    "was recreated or its log truncated); restarting the partition at its "
                    "earliest offset",
                )
                drop[tp] = d.list_offsets([tp], EARLIEST)[tp]
        new = sorted(tp for tp in owned if tp not in start_map and tp not in drop)
        new_positions: dict = {}
        if new:
            fresh = [tp for tp in new if tp not in self._pending]
            committed = d.store.fetch(fresh)
            missing = [tp for tp in fresh if tp not in committed and (d.member is None or tp not in self._positions)]
            earliest = d.list_offsets(missing, EARLIEST) if missing else {}
            if d.member is None and missing:
                # partitions added to a subscribed topic (CreatePartitions) or a new topic matching
                # the pattern: read from their earliest offset, as Spark's Kafka source does
                log.info(
                    "pyklog %s: partitions added: %s, read from their earliest offsets",
                    opts.describe(),
                    ", ".join(f"{t}-{p}@{earliest[(t, p)]}" for t, p in missing),
                )
            if d.member is None:
                for tp in missing:
                    if earliest[tp] != 0:
                        report_loss(
                            opts,
                            tp[0],
                            tp[1],
                            0,
                            earliest[tp],
                            f"the added partition starts at offset {earliest[tp]} instead of 0",
                        )
            for tp in new:
                if tp in self._pending:
                    new_positions[tp] = self._pending.pop(tp)
                    continue
                # a group member's own position (without a group a partition comes back only as a
                # new one: its topic was re-created or partitions were added)
                position = self._positions.get(tp) if d.member is not None else None
                new_positions[tp] = start_of_owned_partition(committed.get(tp), position, earliest.get(tp))
                if position is not None and new_positions[tp] == position and tp in committed:
                    log.info(
                        "pyklog group %s: %s-%s resumes at the query's position %s (the group's committed "
                        "offset %s is older)",
                        d.group_id,
                        tp[0],
                        tp[1],
                        position,
                        committed[tp],
                    )
                log.info("pyklog group %s: %s-%s starts at offset %s", d.group_id, tp[0], tp[1], new_positions[tp])
        self._pending.update(drop)
        # 4. Trigger.AvailableNow and admission control, over what the look-ups above returned
        planned = plan_end_offsets(
            start_map,
            owned,
            latest,
            new_positions,
            drop,
            target=self._target,
            limit=limit,
            max_offsets_per_trigger=opts.max_offsets_per_trigger,
            min_offsets_per_trigger=opts.min_offsets_per_trigger,
            max_trigger_delay_ms=opts.max_trigger_delay_ms,
            since_last_batch_ms=(time.monotonic() - self._last_batch_time) * 1000,
        )
        self._target = planned.target
        end = planned.end
        if d.member is not None and not outage:
            self._kept = set(owned)
        if planned.advanced(start_map):
            self._last_batch_time = time.monotonic()
        self._prev_end_keys = set(end)
        return _offsets.to_json(end)

    _REJOIN_WAIT_S = 10.0

    def _zookeeper_outage(self, d: SourcePlanner) -> bool:
        """Whether this trigger plans through a ZooKeeper outage: the member is disconnected and the
        query planned before with ZooKeeper reachable.  Then it keeps the last assignment (the brokers
        serve; ownership cannot be checked, and a Kafka consumer keeps fetching while its coordinator
        is away too), and makes no ZooKeeper call: the group's commits wait for ZooKeeper (see
        :meth:`OffsetStoreAdapter.commit`), membership is checked again once it answers.  Logs the
        outage once, and once more when the member lost its session.  Planner thread."""
        m = d.member
        since = m.disconnected_since()
        if since is None or self._kept is None:
            return False
        if self._outage is None and (self._verified_at is None or since - self._verified_at >= m.session_timeout_s):
            # not heard from ZooKeeper for a session timeout before the connection dropped: this
            # process was paused (the server closed its expired session on resume), not an outage;
            # the membership check finds out and registers again
            return False
        from pyklog.connector.group import MemberState

        now = time.monotonic()
        if self._outage is None:
            self._outage = since
            self._outage_lost_logged = False
            log.warning(
                "pyklog group %s: ZooKeeper unreachable (disconnected %.1f s ago); keeping the last "
                "assignment %s while it is down: the brokers still serve, ownership cannot be checked "
                "and the group's commits wait for ZooKeeper",
                d.group_id,
                now - since,
                _fmt(self._kept),
            )
        if m.state is MemberState.LOST and not self._outage_lost_logged:
            self._outage_lost_logged = True
            log.warning(
                "pyklog group %s: lost the ZooKeeper session (disconnected for %.1f s, past "
                "zookeeper.session.timeout.ms=%d); keeping the last assignment %s until ZooKeeper is "
                "back, then registering again and rebalancing (partitions kept continue from the "
                "query's position)",
                d.group_id,
                now - since,
                int(m.session_timeout_s * 1000),
                _fmt(self._kept),
            )
        return True

    def _check_membership(self, d: SourcePlanner) -> bool:
        """Before planning: is the member's session still the one that owns its partitions?  A
        planner paused past its ZooKeeper session (SIGSTOP, a long GC of the host...) resumes
        owning nothing: the group gave its partitions to others.  Asking the server (one round trip)
        is how it finds out; it then registers again and waits (at most _REJOIN_WAIT_S) for the
        rebalance, and plans only what it owns after it.  Returns whether ownership was dropped since
        the last trigger (the member's epoch moved).  Not called while ZooKeeper is unreachable
        (:meth:`_zookeeper_outage`); the first call after an outage logs how it ended."""
        m = d.member
        now = time.monotonic()
        if self._verified_at is not None and now - self._verified_at < m.session_timeout_s / 3 and zk_connected(m):
            # Verified less than a third of the session timeout ago and connected since: the session
            # cannot have expired unnoticed meanwhile (a pause long enough shows as a jump of the
            # monotonic clock, which also runs while the process is stopped), so no round trip on
            # this trigger (it was one ZooKeeper round trip per trigger).
            valid = True
        else:
            valid = None
        for _ in range(0 if valid else 20):  # a resumed zombie's first request may meet the dead connection
            try:
                valid = m.session_valid()
                break
            except Exception as e:  # noqa: BLE001
                if not outage_error(e):
                    raise
                time.sleep(0.1)
        if valid:
            self._verified_at = now
        else:
            self._verified_at = None
        outage, self._outage = self._outage, None
        if valid is False:
            if outage is not None:
                log.warning(
                    "pyklog group %s: ZooKeeper answers again after an outage of %.1f s; the member's "
                    "session expired during it: registering again and rebalancing before planning "
                    "(partitions this member gets back continue from the query's position)",
                    d.group_id,
                    now - outage,
                )
            else:
                log.warning(
                    "pyklog group %s: this member's ZooKeeper session expired while ZooKeeper was "
                    "reachable (the planner was paused past zookeeper.session.timeout.ms); its partitions "
                    "went to other members. Registering again before planning",
                    d.group_id,
                )
            if not m.wait_stable(timeout=self._REJOIN_WAIT_S):
                log.warning(
                    "pyklog group %s: not stable after rejoining; planning with %s", d.group_id, sorted(m.assignment())
                )
        epoch = m.epoch
        changed = self._epoch is not None and epoch != self._epoch
        self._epoch = epoch
        if valid and outage is not None:
            log.warning(
                "pyklog group %s: ZooKeeper answers again after an outage of %.1f s; %s",
                d.group_id,
                now - outage,
                "the member registered again with a new session (rebalanced)"
                if changed
                else "the member's session survived it",
            )
        return changed

    def reportLatestOffset(self):
        d = self._driver
        if d is not None and d.batch_end is not None:
            # where pyklog's listener in the user's process reports this query's completed batches
            return {**_offsets.to_json(self._latest), REPORT_KEY: d.batch_end.path}
        if not self._latest:
            return None
        return _offsets.to_json(self._latest)

    @traced
    def partitions(self, start: dict, end: dict):
        d = self.ensure_planner()
        if d.batch_end is not None:
            d.batch_end.planned(start, end)  # Spark runs this batch; its completion will be reported
        rngs = _offsets.split_ranges(
            _offsets.ranges(_offsets.from_json(start), _offsets.from_json(end)),
            self.opts.min_partitions,
            self.opts.max_records_per_partition,
        )
        return d.input_partitions(rngs)

    def read(self, partition: PyklogInputPartition):
        return read_range(self.opts, partition)

    @traced
    def commit(self, end: dict) -> None:
        """Spark's commit of the previous batch (it lags: ``latestOffset`` has usually committed
        these offsets already).  Commits owned partitions, never moving an offset backwards."""
        d = self.ensure_planner()
        # what the last latestOffset found owned (no second partition discovery in one trigger)
        owned = self._prev_end_keys or set()
        last = d.store.last
        d.store.commit_later(
            {tp: off for tp, off in _offsets.from_json(end).items() if tp in owned and off > last.get(tp, -1)}
        )

    def stop(self) -> None:
        if self._driver is not None:
            self._driver.close()
