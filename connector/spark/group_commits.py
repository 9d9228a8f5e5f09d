"""The consumer group's commits of a streaming query's planner: the offset store and the batch-end
watcher.

* :class:`OffsetStoreAdapter`: the group's committed offsets through
  :class:`pyklog.connector.offsets.OffsetStore` (zookeeper | kafka | dual); commits are fenced by
  the member's ZooKeeper session and never move an offset backwards; ``commit_later`` writes them
  on a committer thread, off the planner's critical path.
* :class:`BatchEndWatcher`: commits each micro-batch's end as soon as pyklog's StreamingQueryListener
  in the user's process reports the batch complete (:mod:`pyklog.connector.spark.batch_end`),
  because PySpark calls ``commit(end)`` only when it builds the next batch.

Driver side (planner process), never pickled.  Both take the
:class:`~pyklog.connector.spark.planner.SourcePlanner` that owns them (its outage-bounded ``call``,
its group member, its client); the planner module imports this one, never the other way round.
Thread-safety: each class says it.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from pyklog.connector.spark import offsets as _offsets
from pyklog.connector.spark.batch_end import BatchEndChannel

if TYPE_CHECKING:
    from pyklog.connector.spark.planner import SourcePlanner

log = logging.getLogger(__name__)

__all__ = ["OffsetStoreAdapter", "BatchEndWatcher"]


class OffsetStoreAdapter:
    """The group's committed offsets through connector.offsets.OffsetStore (zookeeper | kafka |
    dual), remembering what was last committed so unchanged offsets are not written again."""

    def __init__(self, driver: SourcePlanner):
        from pyklog.connector.offsets import OffsetStore

        opts = driver.opts
        self.driver = driver
        self.group_id = driver.group_id
        zk = driver.member.zk if driver.member is not None else opts.cluster.zookeeper_connect
        need_zk = opts.offsets_storage == "zookeeper" or opts.dual_commit
        self._store = OffsetStore.create(
            opts.offsets_storage,
            opts.dual_commit,
            zk if need_zk else None,
            driver.client,
            timeout_s=min(opts.cluster.request_timeout_s, driver.bound_s()),
            zk_credentials=opts.cluster.zookeeper_credentials,
        )
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
        got = self.driver.call(
            "OffsetFetch (group offsets)", self._bounded(lambda: self._store.fetch(self.group_id, tps))
        )
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
        """Commit ``offsets`` off the planner's critical path: the committer thread writes
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
                self._committer = threading.Thread(
                    target=self._commit_loop, daemon=True, name=f"pyklog-commit-{self.group_id}"
                )
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
            self._later_cond.wait_for(lambda: not self._in_flight, timeout=2.0 if closing else self.FLUSH_WAIT_S)
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
            log.warning(
                "pyklog: committing a completed batch of group %s failed (%s: %s); the next trigger commits it",
                self.group_id,
                type(e).__name__,
                e,
            )
            return {}

    def _todo(self, offsets: dict) -> dict:
        if self.member is None:
            return {tp: off for tp, off in offsets.items() if self.last.get(tp) != off}
        return {tp: off for tp, off in offsets.items() if off > self.last.get(tp, -1)}

    def _commit(self, todo: dict) -> dict:
        """Write ``todo``; returns what was written.  A group member commits only partitions it owns
        through its live session (fenced in ZooKeeper; a session check before a Kafka commit).
        While the member is disconnected from ZooKeeper nothing is written (ownership cannot be
        checked); ``last`` keeps what was written before, so the next trigger once ZooKeeper answers
        commits the query's position."""
        if self.member is not None and self.member.disconnected_since() is not None:
            log.debug(
                "pyklog: not committing %s for group %s while ZooKeeper is unreachable; "
                "the next trigger after it commits",
                sorted(todo),
                self.group_id,
            )
            return {}
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
                    log.warning(
                        "pyklog: not committing %s for group %s: the member's ZooKeeper session "
                        "is not live (its partitions may have moved)",
                        sorted(todo),
                        self.group_id,
                    )
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


class BatchEndWatcher:
    """Commits each micro-batch's end offsets as soon as Spark reports the batch complete (see
    :mod:`pyklog.connector.spark.batch_end`): a daemon thread polls the channel file the user's
    driver process writes, and for a batch this planner handed to Spark (:meth:`planned`, from
    ``partitions(start, end)``) commits its end for the partitions the member still owns (fenced,
    never backwards).  :meth:`drain` does the same once more on the SIGTERM path, waiting a little
    for the completion of the last batch.  Planner process; thread-safe (one lock)."""

    POLL_S = 0.05
    KEEP = 64  # planned batches remembered (a completion is reported within a batch or two)

    def __init__(self, driver: SourcePlanner):
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
                    log.info(
                        "pyklog group %s: the last batch was not reported complete; its offsets stay uncommitted",
                        self.driver.group_id,
                    )
                return
            time.sleep(self.POLL_S)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(2)
        self.channel.close()
