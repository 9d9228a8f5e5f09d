"""The leader's replication throttle: Kafka's ``ReplicationQuotaManager`` for ``LeaderReplication``
(KIP-73), as a reassignment's ``--throttle`` sets it.

* ``leader.replication.throttled.rate`` (a dynamic broker config, bytes/s; unset = no limit): the
  rate at which this broker, as leader, answers throttled followers' Fetches;
* ``leader.replication.throttled.replicas`` (a topic config): ``"*"`` or ``"partition:broker,..."``;
  this broker throttles partition P as leader when ``P:<this broker id>`` (or ``*``) is listed.

A follower's Fetch of a throttled partition from a replica outside the ISR (Kafka's
``shouldLeaderThrottle``: in-sync followers are never throttled) gets no records while the bytes
sent to throttled followers over the last :data:`WINDOW_S` seconds exceed the rate (Kafka's
``isQuotaExceeded`` over ``replication.quota.window.num`` one-second samples); the bytes it does
get are recorded.  The follower's side (``follower.replication.throttled.*``) is not applied:
the leader alone bounds the copy rate.

Thread-safety: request handler threads call :meth:`should_throttle` and :meth:`record`; one lock
guards the samples; the configs are read through the callables given (cached ``TTL_S``).
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

#: Kafka's replication.quota.window.num (11) x replication.quota.window.size.seconds (1)
WINDOW_S = 11.0
#: how long a config read is reused
TTL_S = 1.0
RATE_CONFIG = "leader.replication.throttled.rate"
REPLICAS_CONFIG = "leader.replication.throttled.replicas"


def throttled_partitions(value: str | None, broker_id: int) -> frozenset[int] | str:
    """Kafka's ``parseThrottledPartitions``: ``"*"`` (every partition) or the partitions listed with
    ``broker_id``; malformed entries are ignored."""
    text = (value or "").strip()
    if text == "*":
        return "*"
    out = set()
    for entry in text.split(","):
        p, _, b = entry.strip().partition(":")
        if p.strip().isdigit() and b.strip().lstrip("-").isdigit() and int(b) == broker_id:
            out.add(int(p))
    return frozenset(out)


class LeaderReplicationQuota:
    """``rate()`` -> the broker's ``leader.replication.throttled.rate`` (None: unlimited);
    ``topic_config(topic)`` -> the topic's overrides."""

    def __init__(self, broker_id: int, rate: Callable[[], str | None], topic_config: Callable[[str], dict]):
        self.broker_id = int(broker_id)
        self._rate_fn = rate
        self._topic_config = topic_config
        self._lock = threading.Lock()
        self._samples: collections.deque = collections.deque()  # (monotonic time, bytes)
        self._total = 0
        self._first = None
        self._rate_cache = (0.0, None)
        self._topic_cache: dict[str, tuple[float, object]] = {}

    def rate(self) -> float | None:
        at, value = self._rate_cache
        now = time.monotonic()
        if now - at > TTL_S:
            try:
                raw = self._rate_fn()
                value = float(raw) if raw not in (None, "") else None
            except (TypeError, ValueError):
                value = None
            self._rate_cache = (now, value)
        return value

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Kafka's ``quota.isThrottled(tp)``: the topic's leader list names this broker for it."""
        now = time.monotonic()
        at, parts = self._topic_cache.get(topic, (0.0, None))
        if now - at > TTL_S:
            try:
                value = (self._topic_config(topic) or {}).get(REPLICAS_CONFIG)
            except Exception:  # noqa: BLE001 - ZooKeeper unreachable: not throttled
                value = None
            parts = throttled_partitions(value, self.broker_id)
            if len(self._topic_cache) > 10_000:
                self._topic_cache.clear()
            self._topic_cache[topic] = (now, parts)
        return parts == "*" or partition in parts

    def should_throttle(self, topic: str, partition: int, in_sync: bool) -> bool:
        """Kafka's ``shouldLeaderThrottle``: a follower outside the ISR, a throttled partition and
        the quota exceeded."""
        if in_sync or self.rate() is None or not self.is_throttled(topic, partition):
            return False
        return self.is_quota_exceeded()

    def record(self, topic: str, partition: int, in_sync: bool, nbytes: int) -> None:
        """Count bytes sent to a throttled follower (outside the ISR) of a throttled partition."""
        if nbytes <= 0 or in_sync or self.rate() is None or not self.is_throttled(topic, partition):
            return
        now = time.monotonic()
        with self._lock:
            if self._first is None:
                self._first = now
            self._samples.append((now, nbytes))
            self._total += nbytes
            self._expire(now)

    def _expire(self, now: float) -> None:
        while self._samples and self._samples[0][0] < now - WINDOW_S:
            self._total -= self._samples.popleft()[1]

    def is_quota_exceeded(self) -> bool:
        rate = self.rate()
        if rate is None:
            return False
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if not self._samples:
                return False
            elapsed = min(WINDOW_S, max(1.0, now - self._first))
            return self._total / elapsed > rate
