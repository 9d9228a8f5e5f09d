"""Delayed operations (Kafka's "purgatory") for long-poll fetches.

A Fetch that finds fewer than ``min_bytes`` waits up to ``max_wait_ms`` for more data without
holding a request handler thread: the handler registers a :class:`DelayedOperation` watching the
fetched partitions and returns.  The operation completes exactly once, whichever comes first:

* an append to a watched partition brings the bytes appended since registration (plus what the
  first read found) to ``min_bytes`` -- completed on the appending (Produce handler) thread;
* the wait expires -- completed on the purgatory's timer thread (a
  :class:`pyklog.broker.common.scheduler.Scheduler`, Kafka's expiration reaper);
* :meth:`Purgatory.complete_all` (broker shutdown);
* for an operation with a ``ready`` predicate (Kafka's ``DelayedOperation.tryComplete``, e.g. an
  acks=all Produce waiting for the high watermark): :meth:`Purgatory.check` of a watched key finds
  ``ready()`` true -- completed on the checking thread (a follower's Fetch, the ISR shrink task).
  An operation watching many keys may bring ``ready_key(key)`` too: the check of one key then asks
  only about that key's part (an acks=all Produce to N partitions re-checks the one partition whose
  high watermark moved, not all N: N moves cost N checks, not N squared).

Completion runs the operation's own ``on_complete(op)`` when it has one (a purgatory shared by
several kinds of waiters, as the replica manager's), else the purgatory's ``complete(op)``; it
re-reads the logs and sends the response, so it must be quick and must not raise (exceptions are
logged).

Thread-safe: every method may be called from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable, Iterable

from pyklog.broker.common.scheduler import Scheduler

log = logging.getLogger(__name__)


class DelayedOperation:
    """One waiting operation.  ``payload`` is whatever the completer needs (the parsed request);
    ``on_complete(op)``, if given, completes it in place of the purgatory's ``complete``."""

    __slots__ = (
        "keys",
        "deadline",
        "min_bytes",
        "accumulated",
        "payload",
        "ready",
        "ready_key",
        "on_complete",
        "_claimed",
        "_timer",
    )

    def __init__(
        self,
        keys: Iterable[Hashable],
        timeout_ms: int,
        min_bytes: int,
        accumulated: int,
        payload,
        ready: Callable[[], bool] | None = None,
        on_complete: Callable[[DelayedOperation], None] | None = None,
        ready_key: Callable[[Hashable], bool] | None = None,
    ):
        self.keys = tuple(keys)
        self.ready = ready  # checked by Purgatory.check (and once at watch); None: byte counting only
        self.ready_key = ready_key  # Purgatory.check(key)'s question when given (else ready())
        self.on_complete = on_complete
        self.deadline = time.monotonic() + max(0, timeout_ms) / 1000.0
        self.min_bytes = min_bytes
        self.accumulated = accumulated
        self.payload = payload
        self._claimed = False
        self._timer = None


class Purgatory:
    """The waiting operations of one kind, watched by key.  ``complete(op)`` completes an operation
    without an ``on_complete`` of its own (None: every operation brings one)."""

    def __init__(self, complete: Callable[[DelayedOperation], None] | None, name: str = "fetch"):
        self._complete = complete
        self._lock = threading.Lock()
        self._watchers: dict[Hashable, list[DelayedOperation]] = {}
        self._waiting: set[DelayedOperation] = set()
        self._running = True
        self._timer = Scheduler(f"pyklog-{name}-purgatory")

    def watch(self, op: DelayedOperation) -> None:
        with self._lock:
            ready = not self._running
            if not ready:
                for k in op.keys:
                    self._watchers.setdefault(k, []).append(op)
                self._waiting.add(op)
                op._timer = self._timer.schedule_at(op.deadline, self._expire, op, name="delayed-operation-expiry")
        if ready:
            self._run(op)
        elif op.ready is not None:
            self._try(op)  # it may have become ready between the caller's check and the watch

    def check(self, key: Hashable) -> None:
        """Complete the operations watching ``key`` whose ``ready()`` is now true (called after the
        state they wait for changed: a high watermark moved, an ISR shrank, leadership moved)."""
        if not self._watchers:  # fast path, no lock
            return
        with self._lock:
            ops = [op for op in self._watchers.get(key, ()) if not op._claimed and op.ready is not None]
        for op in ops:
            self._try(op, key)

    def _try(self, op: DelayedOperation, key: Hashable = None) -> None:
        try:
            ok = op.ready_key(key) if key is not None and op.ready_key is not None else op.ready()
        except Exception:  # noqa: BLE001 - the completer answers with the error
            log.exception("checking a delayed operation failed")
            ok = True
        if not ok:
            return
        with self._lock:
            if op._claimed:
                return
            op._claimed = True
            self._forget(op)
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
            for op in done:
                self._forget(op)
        for op in done:
            self._run(op)

    def complete_all(self) -> None:
        """Complete every waiting operation now (shutdown) and stop the timer."""
        with self._lock:
            self._running = False
            ops = [op for op in self._waiting if not op._claimed]
            for op in ops:
                op._claimed = True
            self._waiting.clear()
            self._watchers.clear()
        self._timer.shutdown(wait=False)
        for op in ops:
            self._run(op)
        self._timer.shutdown(wait=True, timeout_s=5)

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _forget(self, op: DelayedOperation) -> None:
        """Under the lock: op is claimed; stop watching it and drop its expiry timer."""
        self._waiting.discard(op)
        if op._timer is not None:
            op._timer.cancel()
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
            (op.on_complete or self._complete)(op)
        except Exception:
            log.exception("completing a delayed operation failed")

    def _expire(self, op: DelayedOperation) -> None:
        """On the timer thread at ``op.deadline``: complete it unless an append or shutdown did."""
        with self._lock:
            if op._claimed:
                return
            op._claimed = True
            self._forget(op)
        self._run(op)
