"""One thread that runs what ZooKeeper watches ask for, however many of them fire.

kazoo runs watch callbacks on its one callback thread, where nothing may block; the follow-up work
(re-reading a changed node, applying a partition's new state, carrying out a deletion request) used
to get a new thread each (``handler.spawn``): a controller election or a topic creation fires one
state watch per partition, so 10,000 partitions meant thousands of threads at once, all queued on
the same locks.  Kafka's brokers run a fixed set of threads and get partition state from the
controller in batches (LeaderAndIsr); :class:`ZkEventQueue` is the same bound for pyklog's watches.

Each piece of work is submitted under a key; work not yet started is **coalesced** by its key (a
second submit of a pending key is dropped: the follow-ups re-read ZooKeeper, so one run sees the
latest state), work runs one piece at a time in submission order, and a key submitted while its
work runs is queued again (the run in progress may have read too early).  Callers that want
batches keep their own pending set and submit one key for it (see
:meth:`pyklog.broker.zk.metadata_cache.ZkMetadataCache` and its partition-state reloads).

Thread-safety: thread-safe; :meth:`submit` never blocks (kazoo's callback thread calls it).  The
thread starts at the first submit and ends at :meth:`stop` (a daemon: a piece of work stuck in a
ZooKeeper retry never holds up the interpreter's exit).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

log = logging.getLogger(__name__)


class ZkEventQueue:
    """Work for watch follow-ups on one named daemon thread, coalesced by key (see the module)."""

    def __init__(self, name: str):
        self.name = name
        self._cond = threading.Condition()
        self._pending: dict[Hashable, tuple[Callable[..., Any], tuple]] = {}  # insertion order = run order
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._busy = False

    def submit(self, key: Hashable, fn: Callable[..., Any], *args: Any) -> bool:
        """Run ``fn(*args)`` on the queue's thread unless work under ``key`` is already waiting
        (then nothing: that run reads the newest state).  False if the queue is stopped."""
        with self._cond:
            if self._stopped:
                return False
            if key not in self._pending:
                self._pending[key] = (fn, args)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
                self._thread.start()
            self._cond.notify()
            return True

    @property
    def stopped(self) -> bool:
        return self._stopped

    def pending(self) -> int:
        """How many pieces of work wait (not counting one running)."""
        with self._cond:
            return len(self._pending)

    def idle(self) -> bool:
        """Nothing waiting and nothing running."""
        with self._cond:
            return not self._pending and not self._busy

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until :meth:`idle` (True) or ``timeout_s`` passed (False).  Not from the queue's thread."""
        with self._cond:
            return self._cond.wait_for(lambda: (not self._pending and not self._busy) or self._stopped, timeout_s)

    def stop(self) -> None:
        """Drop the waiting work and let the thread end after the piece it runs (idempotent)."""
        with self._cond:
            self._stopped = True
            self._pending.clear()
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._pending and not self._stopped:
                    self._busy = False
                    self._cond.notify_all()  # wait_idle
                    self._cond.wait()
                if self._stopped:
                    self._busy = False
                    self._cond.notify_all()
                    return
                key = next(iter(self._pending))
                fn, args = self._pending.pop(key)
                self._busy = True
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one failed follow-up must not end the thread
                log.exception("%s: %r failed", self.name, key)
