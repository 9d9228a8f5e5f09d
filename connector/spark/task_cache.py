"""One per-process cache of the clients Spark tasks reuse: the read tasks' consumers and the
at-least-once write tasks' producers.

Where it runs: executor side, in each PySpark Python worker, which Spark reuses for task after task
while ``spark.python.worker.reuse`` is true (its default).  Spark's Kafka connector keeps such
caches per executor JVM (``KafkaDataConsumer`` with ``spark.kafka.consumer.cache.capacity``/
``.timeout``; ``CachedKafkaProducer`` with ``spark.kafka.producer.cache.timeout``); reusing a client
saves a task its connections, its ApiVersions handshakes and (a producer) its Metadata and
InitProducerId.

The rules, the same for both kinds: keyed by everything the client was built from (tasks of
different sources or sinks never share one).  A task takes a client out (never two tasks at once)
and gives it back when it ended well; a task that failed closes its client instead (its
connections may be half-way through a response, a producer's sender may hold a fatal error).  A
client idle for more than :attr:`TaskClientCache.IDLE_TIMEOUT_S` is closed when next seen (brokers
close connections idle for ``connections.max.idle.ms``, 10 minutes by default).  At most
``max_idle_per_key`` idle clients per key.  ``usable`` (optional) checks an idle client when it is
taken: False closes it and a new one is made.  A forked child (PySpark's daemon forks its workers)
starts with an empty cache.

Thread-safety: thread-safe; ``_lock`` guards the idle table; clients are closed outside it.  No
pyspark import: the sink and the source's task module share it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Hashable

log = logging.getLogger(__name__)

__all__ = ["TaskClientCache"]


class TaskClientCache:
    """Idle clients by key (see the module docstring).  ``what`` names the kind of client in log
    lines ("consumer", "producer").  ``created`` and ``reused`` count what :meth:`take` did (tests and
    the benchmark read them)."""

    IDLE_TIMEOUT_S = 60.0

    def __init__(self, what: str, *, max_idle_per_key: int = 1, usable: Callable[[object], bool] | None = None):
        self.what = what
        self.max_idle_per_key = max_idle_per_key
        self._usable = usable
        self._lock = threading.Lock()
        self._idle: dict = {}  # key -> [(client, monotonic time given back)]
        self._pid = os.getpid()
        self.created = 0
        self.reused = 0

    def take(self, key: Hashable, make: Callable[[], object]):
        """An idle client for ``key``, or ``make()``'s new one; the caller gives it back."""
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
            self._close_quietly(c)
        if found is not None and (self._usable is None or self._usable(found)):
            self.reused += 1
            return found
        if found is not None:
            self._close_quietly(found)
        self.created += 1
        return make()

    def give(self, key: Hashable, client, ok: bool) -> None:
        """Back after a task: kept when the task ended well (and fewer than ``max_idle_per_key`` are
        idle for ``key``), closed otherwise."""
        if ok:
            with self._lock:
                lst = self._idle.setdefault(key, [])
                if len(lst) < self.max_idle_per_key and self._pid == os.getpid():
                    lst.append((client, time.monotonic()))
                    return
                if not lst:
                    del self._idle[key]
        self._close_quietly(client)

    def clear(self) -> None:
        """Close every idle client and reset the counters (tests; the benchmark)."""
        with self._lock:
            idle, self._idle = self._idle, {}
            self.created = self.reused = 0
        for lst in idle.values():
            for c, _ in lst:
                self._close_quietly(c)

    def _close_quietly(self, client) -> None:
        try:
            client.close()
        except Exception:  # noqa: BLE001 - closing a broken client must not fail a task
            log.debug("closing a cached %s failed", self.what, exc_info=True)
