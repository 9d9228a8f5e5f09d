"""Incremental fetch sessions (KIP-227): Kafka's ``FetchSession.scala`` on the broker side.

A Fetch v7+ carries a ``session_id`` and a ``session_epoch``:

=============  =========  ==================================================================
session_id     epoch      meaning
=============  =========  ==================================================================
0              -1         sessionless full fetch (every partition named, every one answered)
0              0          full fetch that opens a session: the answer's ``session_id`` names it
                          (0 when the cache has no room: the client stays sessionless)
X              0          full fetch that closes session X and opens a new one
X              -1         closes session X; answered as a sessionless full fetch
X              1..2^31-1  incremental fetch in session X: the request names only the partitions
                          whose fetch offset, log start offset, max bytes or leader epoch changed
                          (added ones included) and ``forgotten_topics_data`` the ones to drop;
                          the answer carries only the partitions with something new: records, an
                          error, a moved high watermark, last stable offset or log start offset
=============  =========  ==================================================================

Errors, as the whole answer's ``error_code`` with session id 0 and no partitions: an unknown session
id -> FETCH_SESSION_ID_NOT_FOUND (70), an epoch other than the session's next one ->
INVALID_FETCH_SESSION_EPOCH (71); the client then starts over with a full fetch.

:class:`FetchSessionCache` holds at most ``max.incremental.fetch.session.cache.slots`` sessions and
evicts as Kafka's ``FetchSessionCache.tryEvict``: first a session unused for the eviction time
(two minutes), else the least valuable evictable one -- followers' sessions (privileged) before
consumers', larger before smaller -- if the new session is worth more; a session becomes evictable
by a consumer's once it is older than the eviction time.

Reads in proportion to what changed (pyklog's addition; Kafka reads every session partition): the
replica manager tells the cache of every append and every high watermark / last stable offset move
(:meth:`FetchSessionCache.mark_changed`); a session partition whose last read found nothing to read
and no change is *quiet*, and an incremental fetch skips it until it is marked, named in a request,
or a whole-session re-read (every ``full_read_interval_s``, a safety net for changes told to nobody,
such as a log start offset moved by retention) comes round.  A delayed incremental fetch waits on
its session's one key (:meth:`FetchSession.watch_key`), woken by the marks.

Thread-safety: the cache's lock guards its tables; a session's own lock guards its changed set
and its partition table.  A session is used by one request at a time (a client sends the next
request of a session only after the answer to the previous one); marks arrive from any thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable

log = logging.getLogger(__name__)

#: the session id of "no session" and the epochs of Kafka's FetchMetadata
INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's error codes for fetch sessions
FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
EVICTION_MS = 120_000


def next_epoch(epoch: int) -> int:
    """Kafka's ``FetchMetadata.nextEpoch``: 0 -> 1, ..., INT32_MAX -> 1 (never 0 or -1 again)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch >= 0x7FFFFFFF else epoch + 1


class SessionError(Exception):
    """A request's session could not be used: ``code`` is FETCH_SESSION_ID_NOT_FOUND or
    INVALID_FETCH_SESSION_EPOCH (the whole answer's error)."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class CachedPartition:
    """One partition of a session (Kafka's ``CachedPartition``): what the client last asked for and
    what it was last told."""

    __slots__ = (
        "fetch_offset",
        "max_bytes",
        "leader_epoch",
        "log_start_offset_asked",
        "high_watermark",
        "last_stable_offset",
        "log_start_offset",
    )

    def __init__(self, fetch_offset: int, max_bytes: int, leader_epoch: int, log_start_offset_asked: int):
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.log_start_offset_asked = log_start_offset_asked
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.log_start_offset = -1

    def must_respond(self, data) -> bool:
        """Kafka's ``maybeUpdateResponseData``: records, an error, or a moved high watermark, last
        stable offset or log start offset; the cached values follow (an error resets the high
        watermark so the partition is sent again once the error is gone)."""
        must = data.records is not None and data.records.size > 0
        if data.error is not None:
            self.high_watermark = -1
            return True
        if data.high_watermark != self.high_watermark:
            self.high_watermark = data.high_watermark
            must = True
        if data.last_stable_offset != self.last_stable_offset:
            self.last_stable_offset = data.last_stable_offset
            must = True
        if data.log_start_offset != self.log_start_offset:
            self.log_start_offset = data.log_start_offset
            must = True
        return must


class FetchSession:
    """One incremental fetch session (Kafka's ``FetchSession``): its id, the epoch the next request
    must carry, whether a follower holds it (``privileged``), and its partitions in the order the
    client named them."""

    def __init__(self, session_id: int, privileged: bool, now_ms: int, replica_id: int = -1):
        self.id = session_id
        self.privileged = privileged
        self.replica_id = replica_id
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.partitions: dict[tuple[str, int], CachedPartition] = {}
        self.closed = False
        self.last_full_read = time.monotonic()
        self._changed: set = set()
        self.active: set = set()  # partitions not quiet: read at every incremental fetch
        #: guards the changed set, and the partition table and active set against a client that
        #: misuses its session from two connections at once (re-entrant: plan() takes the changes)
        self.lock = threading.RLock()

    @property
    def watch_key(self) -> Hashable:
        """The fetch purgatory key a delayed incremental fetch of this session waits on."""
        return ("fetch-session", self.id)

    def size(self) -> int:
        return len(self.partitions)

    def mark(self, key) -> None:
        with self.lock:
            self._changed.add(key)

    def has_changes(self) -> bool:
        return bool(self._changed)  # a lock-free read of one reference (a wake-up hint)

    def take_changes(self) -> set:
        with self.lock:
            changed, self._changed = self._changed, set()
        return changed

    def follows(self, key) -> bool:
        """A follower's session still fetching ``key`` (its last fetch then counts for it)."""
        return not self.closed and key in self.partitions

    def __repr__(self) -> str:
        return f"FetchSession(id={self.id}, epoch={self.epoch}, partitions={len(self.partitions)})"


class FetchContext:
    """What one Fetch reads and answers under its session kind (Kafka's ``FetchContext``s):
    ``kind`` is ``"sessionless"``, ``"full"`` (a session is created by :meth:`finish` when there is
    room) or ``"incremental"`` (``session`` set).  ``requested``: the request's partitions in order,
    ``{key: (fetch offset, max bytes, current leader epoch, log start offset)}``.  Used by the request
    and, when it waits, by the thread completing it: never two at once."""

    def __init__(
        self, cache: FetchSessionCache, kind: str, session, requested: dict, privileged: bool, replica_id: int
    ):
        self.cache = cache
        self.kind = kind
        self.session: FetchSession | None = session
        self.requested = requested
        self.privileged = privileged
        self.replica_id = replica_id
        self._pending: set = set()  # incremental: partitions marked since the request arrived

    @property
    def incremental(self) -> bool:
        return self.kind == "incremental"

    def plan(self) -> list:
        """The partitions to read now, as ``fetch_infos`` (``[(topic, [(partition, fetch offset,
        max bytes, current leader epoch)])]``): every requested one for a full fetch; for an
        incremental one the partitions named in the request, marked changed, or not quiet (all of
        them once every ``full_read_interval_s``)."""
        if not self.incremental:
            keys = list(self.requested)
            parts = self.requested
        else:
            s = self.session
            assert s is not None
            now = time.monotonic()
            with s.lock:
                if now - s.last_full_read >= self.cache.full_read_interval_s:
                    s.last_full_read = now
                    s.take_changes()
                    keys = list(s.partitions)
                else:
                    self._pending |= s.take_changes()
                    keys = sorted(k for k in self._pending | s.active | self.requested.keys() if k in s.partitions)
                parts = {
                    k: (cp.fetch_offset, cp.max_bytes, cp.leader_epoch, cp.log_start_offset_asked)
                    for k, cp in ((k, s.partitions[k]) for k in keys)
                }
        topics: dict[str, list] = {}
        for key in keys:
            offset, max_bytes, epoch, _ = parts[key]
            topics.setdefault(key[0], []).append((key[1], offset, max_bytes, epoch))
        return list(topics.items())

    def finish(self, results, read_committed: bool, now_ms: int):
        """The answer's ``(session id, results)``: a full fetch opens its session here (every
        partition answered); an incremental one answers only the partitions with something new.
        Each read partition's cached state and quietness follow what was read."""
        if self.kind == "sessionless":
            return INVALID_SESSION_ID, results
        if self.kind == "full":
            cached = {
                k: CachedPartition(offset, max_bytes, epoch, start)
                for k, (offset, max_bytes, epoch, start) in self.requested.items()
            }
            for topic, parts in results:
                for p, data in parts:
                    cp = cached.get((topic, p))
                    if cp is not None:
                        cp.must_respond(data)
            s = self.cache.create(self.privileged, self.replica_id, cached, now_ms)
            if s is not None:
                s.active = set(cached)  # changes between the read and now were told to no session
            return (INVALID_SESSION_ID if s is None else s.id), results
        s = self.session
        assert s is not None
        with s.lock:
            s.last_used_ms = max(s.last_used_ms, now_ms)
            return s.id, self._answer_changes(s, results, read_committed)

    def _answer_changes(self, s: FetchSession, results, read_committed: bool) -> list:
        """Under the session's lock: the partitions with something new, each one's quietness."""
        out = []
        for topic, parts in results:
            kept = []
            for p, data in parts:
                key = (topic, p)
                cp = s.partitions.get(key)
                if cp is None:
                    continue  # forgotten meanwhile
                has_records = data.records is not None and data.records.size > 0
                if cp.must_respond(data):
                    kept.append((p, data))
                if self.privileged:
                    bound = data.log_end_offset
                elif read_committed:
                    bound = data.last_stable_offset
                else:
                    bound = data.high_watermark
                if has_records or data.error is not None or bound < 0 or cp.fetch_offset < bound:
                    s.active.add(key)
                else:
                    s.active.discard(key)
            if kept:
                out.append((topic, kept))
        return out


class FetchSessionCache:
    """The broker's fetch sessions (Kafka's ``FetchSessionCache``): at most ``max_entries``
    (``max.incremental.fetch.session.cache.slots``; 0: no sessions, every fetch sessionless)."""

    def __init__(self, max_entries: int = 1000, eviction_ms: int = EVICTION_MS, full_read_interval_s: float = 60.0):
        self.max_entries = max(0, int(max_entries))
        self.eviction_ms = eviction_ms
        self.full_read_interval_s = full_read_interval_s
        self._lock = threading.Lock()
        self._sessions: dict[int, FetchSession] = {}
        self._by_partition: dict = {}  # (topic, partition) -> tuple of sessions holding it
        self._next_id = int(time.monotonic_ns() % 0x7FFFFFFE) + 1
        self.evictions = 0

    # ------------------------------------------------------------------ lookups

    def __len__(self) -> int:
        with self._lock:
            return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        with self._lock:
            return self._sessions.get(session_id)

    def mark_changed(self, key) -> list[FetchSession]:
        """``key`` got records or a moved high watermark / last stable offset / leadership: every
        session holding it re-reads it; returns those sessions (their delayed fetches wake).
        Lock-free read of an immutable tuple: any thread, on every append."""
        sessions = self._by_partition.get(key)
        if not sessions:
            return []
        for s in sessions:
            s.mark(key)
        return list(sessions)

    # ------------------------------------------------------------------ the context of one request

    def new_context(
        self,
        session_id: int,
        epoch: int,
        requested: dict,
        forgotten,
        privileged: bool,
        replica_id: int,
        now_ms: int,
    ) -> FetchContext:
        """Kafka's ``FetchManager.newContext``: the :class:`FetchContext` of a request naming
        ``requested`` (``{key: (fetch offset, max bytes, leader epoch, log start offset)}``) and
        ``forgotten`` keys; an incremental one updates its session.  Raises SessionError.  A full
        fetch naming a session closes it first."""
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)
            kind = "sessionless" if epoch == FINAL_EPOCH or self.max_entries <= 0 else "full"
            return FetchContext(self, kind, None, requested, privileged, replica_id)
        s = self._next_in_session(session_id, epoch, now_ms)
        self.update(s, requested, forgotten)
        return FetchContext(self, "incremental", s, requested, privileged, replica_id)

    def _next_in_session(self, session_id: int, epoch: int, now_ms: int) -> FetchSession:
        with self._lock:
            s = self._sessions.get(session_id)
            if s is None:
                raise SessionError(FETCH_SESSION_ID_NOT_FOUND, f"fetch session {session_id} not found")
            if s.epoch != epoch:
                raise SessionError(
                    INVALID_FETCH_SESSION_EPOCH,
                    f"fetch session {session_id} expected epoch {s.epoch}, the request has {epoch}",
                )
            s.epoch = next_epoch(s.epoch)
            s.last_used_ms = now_ms
        return s

    def create(self, privileged: bool, replica_id: int, partitions: dict, now_ms: int) -> FetchSession | None:
        """Kafka's ``maybeCreateSession``: a session of ``partitions`` (``{key: CachedPartition}``)
        if there is room or a less valuable session can be evicted; else None (sessionless)."""
        if self.max_entries <= 0 or not partitions:
            return None
        with self._lock:
            if len(self._sessions) >= self.max_entries and not self._try_evict(privileged, len(partitions), now_ms):
                return None
            sid = self._new_id()
            s = FetchSession(sid, privileged, now_ms, replica_id)
            s.partitions = partitions
            self._sessions[sid] = s
            for key in partitions:
                self._by_partition[key] = self._by_partition.get(key, ()) + (s,)
        log.log(
            logging.INFO if privileged else logging.DEBUG,
            "fetch session %d opened for %s with %d partition(s)",
            sid,
            f"replica {replica_id}" if privileged else "a consumer",
            len(partitions),
        )
        return s

    def update(self, s: FetchSession, added: dict, forgotten) -> None:
        """An incremental request's changes: ``added`` (``{key: (fetch offset, max bytes, leader epoch,
        log start offset)}``) added or updated, ``forgotten`` keys dropped."""
        with self._lock, s.lock:
            for key in forgotten:
                s.active.discard(key)
                if s.partitions.pop(key, None) is not None:
                    self._unindex(key, s)
            for key, (offset, max_bytes, epoch, start) in added.items():
                cp = s.partitions.get(key)
                if cp is None:
                    s.partitions[key] = CachedPartition(offset, max_bytes, epoch, start)
                    self._by_partition[key] = self._by_partition.get(key, ()) + (s,)
                    s.active.add(key)
                else:
                    cp.fetch_offset, cp.max_bytes, cp.leader_epoch, cp.log_start_offset_asked = (
                        offset,
                        max_bytes,
                        epoch,
                        start,
                    )

    def remove(self, session_id: int) -> FetchSession | None:
        with self._lock:
            return self._remove(session_id)

    # ------------------------------------------------------------------ under the lock

    def _remove(self, session_id: int) -> FetchSession | None:
        s = self._sessions.pop(session_id, None)
        if s is not None:
            s.closed = True
            for key in s.partitions:
                self._unindex(key, s)
        return s

    def _unindex(self, key, s: FetchSession) -> None:
        rest = tuple(x for x in self._by_partition.get(key, ()) if x is not s)
        if rest:
            self._by_partition[key] = rest
        else:
            self._by_partition.pop(key, None)

    def _new_id(self) -> int:
        while True:
            self._next_id = self._next_id % 0x7FFFFFFE + 1
            if self._next_id not in self._sessions:
                return self._next_id

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        """Kafka's ``tryEvict``: a stale session first, else the least valuable evictable one if
        worth less than the new one (privileged, then size)."""
        stalest = min(self._sessions.values(), key=lambda s: s.last_used_ms, default=None)
        if stalest is not None and stalest.last_used_ms + self.eviction_ms < now_ms:
            self._remove(stalest.id)
            self.evictions += 1
            return True

        def evictable(s: FetchSession) -> bool:
            old = now_ms - s.creation_ms > self.eviction_ms
            return (not s.privileged or old) if privileged else old

        candidates = [s for s in self._sessions.values() if evictable(s)]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, s.size(), s.id))
        if (privileged, size) <= (least.privileged, least.size()):
            return False
        self._remove(least.id)
        self.evictions += 1
        return True


__all__ = [
    "FETCH_SESSION_ID_NOT_FOUND",
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_FETCH_SESSION_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchContext",
    "FetchSession",
    "FetchSessionCache",
    "SessionError",
    "next_epoch",
]
