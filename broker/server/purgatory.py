"""Delayed operations (Kafka's "purgatory") for long-poll fetches.

A Fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` for more data without
holding a request handler thread: the handler registers a :class:`DelayedOperation` watching the
fetched partitions and returns.  The operation completes exactly once, whichever comes first:

* an append to a watched partition brings the bytes appended since registration (plus what the
  first read found) to ``min_bytes`` -- completed on the appending (Produce handler) thread;
* the wait expires -- completed on the purgatory's timer thread;
* :meth:`Purgatory.complete_all` (broker shutdown).

``complete(op)`` is the caller's function; it re-reads the logs and sends the response, so it must
be quick and must not raise (exceptions are logged).

Thread-safe: every method may be called from any thread.
"""
from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from typing import Callable, Hashable, Iterable

log = logging.getLogger(__name__)


class DelayedOperation:
    """One waiting operation.  ``payload`` is whatever the completer needs (the parsed request)."""

    __slots__ = ("keys", "deadline", "min_bytes", "accumulated", "payload", "_claimed")

    def __init__(self, keys: Iterable[Hashable], timeout_ms: int, min_bytes: int, accumulated: int, payload):
        self.keys = tuple(keys)
        self.deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self.payload = payload
        self._claimed = False


class Purgatory:
    def __init__(self, complete: Callable[[DelayedOperation], None], name: str = "fetch"):
        self._complete = complete
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._heap: list[tuple[float, int, DelayedOperation]] = []
        self._seq = itertools.count()
        self._running = True
        self._timer = threading.Thread(target=self._expire_loop, name=f"pyklog-{name}-purgatory", daemon=True)
        self._timer.start()

    def watch(self, op: DelayedOperation) -> None:
        with self._lock:
            if not self._running:
                ready = True
            else:
                ready = False
                for k in op.keys:
                    self._watchers.setdefault(k, []).append(op)
                heapq.heappush(self._heap, (op.deadline, next(self._seq), op))
                if self._heap[0][2] is op:
                    self._cond.notify()
        if ready:
            self._run(op)

    def notify(self, key: Hashable, nbytes: int) -> None:
        """``nbytes`` were appended to ``key``: complete the operations that now have enough."""
        if not self._watchers:  # fast path, no lock: nothing waits anywhere
            return
        done = []
        with self._lock:
            ops = self._watchers.get(key)
            if not ops:
                return
            for op in ops:
                if op._claimed:
                    continue
                op.accumulated += nbytes
                if op.accumulated >= op.min_bytes:
                    op._claimed = True
                    done.append(op)
            if done:
                for op in done:
                    self._unwatch(op)
        for op in done:
            self._run(op)

    def complete_all(self) -> None:
        """Complete every waiting operation now (shutdown) and stop the timer."""
        with self._lock:
            self._running = False
            ops = [op for _, _, op in self._heap if not op._claimed]
            for op in ops:
                op._claimed = True
            self._heap.clear()
            self._watchers.clear()
            self._cond.notify()
        for op in ops:
            self._run(op)
        self._timer.join(5)

    def __len__(self) -> int:
        with self._lock:
            return sum(1 for _, _, op in self._heap if not op._claimed)

    def _unwatch(self, op: DelayedOperation) -> None:
        for k in op.keys:
            lst = self._watchers.get(k)
            if lst is not None:
                try:
                    lst.remove(op)
                except ValueError:
                    pass
                if not lst:
                    del self._watchers[k]

    def _run(self, op: DelayedOperation) -> None:
        try:
            self._complete(op)
        except Exception:
            log.exception("completing a delayed operation failed")

    def _expire_loop(self) -> None:
        while True:
            expired = []
            with self._lock:
                while self._running:
                    while self._heap and self._heap[0][2]._claimed:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait(1.0)
                        continue
                    wait = self._heap[0][0] - time.monotonic()
                    if wait > 0:
                        self._cond.wait(wait)
                        continue
                    break
                if not self._running:
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, op = heapq.heappop(self._heap)
                    if not op._claimed:
                        op._claimed = True
                        self._unwatch(op)
                        expired.append(op)
            for op in expired:
                self._run(op)
