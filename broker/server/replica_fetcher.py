"""Followers fetching from their leaders: Kafka's ``ReplicaFetcherManager`` / ``ReplicaFetcherThread``
(``AbstractFetcherThread``) for pyklog.

A broker that follows a partition fetches it from the partition's leader on a fetcher thread:
``num.replica.fetchers`` threads per source broker, a partition always on the same one
(``hash(topic, partition) % num.replica.fetchers``, Kafka's ``getFetcherId``).  Each thread keeps one
blocking connection to its source broker (address from the ZooKeeper registration, looked up again
at every reconnect) and loops:

1. **Truncation** (KIP-101/KIP-279) for the partitions just added (a new leader or epoch): one
   OffsetsForLeaderEpoch request (replica_id = this broker) for the local log's latest epoch; the
   log is truncated where ``Log.truncation_offset`` says (Kafka's ``getOffsetTruncationState``:
   the smaller end offset of a common epoch; when the leader answered an epoch this log never had,
   truncate to our end of it and ask again with the new latest epoch); a leader that knows no
   epoch for it (UNDEFINED) or does not serve the API -> truncate to the local high watermark.
2. **Fetch** (v12 or the highest both serve) with replica_id = this broker's id, fetch offset = the
   local log end offset, ``replica.fetch.wait.max.ms``, ``replica.fetch.min.bytes``,
   ``replica.fetch.max.bytes`` per partition and ``replica.fetch.response.max.bytes`` in all; the
   batches are appended with ``Log.append_as_follower`` (the leader's offsets and epochs kept) and
   the local high watermark becomes min(leader's high watermark, local log end offset).
   With a leader serving Fetch v7+ the fetches run in a fetch session (KIP-227): after the first
   full fetch each request names only the partitions whose fetch state changed, and the answer
   only the partitions with something new, so a round costs what changed, not what is followed.
3. Errors: OFFSET_OUT_OF_RANGE below the leader's log start -> the log restarts at the leader's log
   start offset (``truncate_fully_and_start_at``), else truncation again; NOT_LEADER_OR_FOLLOWER,
   FENCED/UNKNOWN_LEADER_EPOCH, UNKNOWN_TOPIC_OR_PARTITION -> the partition waits
   ``replica.fetch.backoff.ms`` (the state watch brings the new leader); a connection failure ->
   reconnect after ``replica.fetch.backoff.ms``.

A partition is removed from its thread when this broker becomes its leader, stops hosting it, or
follows another leader; a response for a removed or re-added partition (another epoch) is dropped.

Thread-safety: the manager's methods may be called from any thread (its lock guards the thread
table); each thread's partition table is guarded by that thread's lock, and only the thread itself
touches its connection.  The ReplicaManager's calls made here take its per-partition locks.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import time
import zlib

from pyklog.broker.common.sockets import recv_exact
from pyklog.broker.errors import (
    FencedLeaderEpochError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PyklogError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol import ApiKey, decode_response, encode_request
from pyklog.broker.server.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INITIAL_EPOCH,
    INVALID_FETCH_SESSION_EPOCH,
    next_epoch,
)

log = logging.getLogger(__name__)

#: Fetch version a follower sends when the leader serves it (replica id in the body, leader epochs)
FETCH_VERSION = 12
#: Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class _PartitionFetchState:
    """One followed partition on a fetcher thread (Kafka's ``PartitionFetchState``)."""

    __slots__ = ("leader_epoch", "truncating", "delayed_until", "warned")

    def __init__(self, leader_epoch: int):
        self.leader_epoch = leader_epoch
        self.truncating = True
        self.delayed_until = 0.0
        self.warned = 0  # the error code last logged at WARNING (once per code, not every retry)


class _Connection:
    """One blocking Kafka-protocol connection to the source broker (fetcher thread only)."""

    def __init__(self, sock: socket.socket, client_id: str):
        self.sock = sock
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.client_id = client_id
        self.cid = 0
        _, body = self._request(ApiKey.API_VERSIONS, 0, {})
        self.versions = {k["api_key"]: (k["min_version"], k["max_version"]) for k in body.get("api_keys", [])}

    def version(self, api: int, highest: int) -> int | None:
        rng = self.versions.get(int(api))
        if rng is None or rng[0] > highest:
            return None
        return min(rng[1], highest)

    def _request(self, api, version, body):
        self.cid += 1
        self.sock.sendall(encode_request(api, version, self.cid, self.client_id, body))
        size = struct.unpack(">i", self._exact(4))[0]
        cid, resp = decode_response(api, version, self._exact(size))
        if cid != self.cid:
            raise ConnectionError(f"correlation id {cid} does not match the request's {self.cid}")
        return cid, resp

    def request(self, api, version, body) -> dict:
        return self._request(api, version, body)[1]

    def _exact(self, n: int) -> bytes:
        return recv_exact(self.sock, n, "connection closed by the leader")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class ReplicaFetcherThread(threading.Thread):
    """Fetches the partitions this broker follows from one source broker (daemon thread)."""

    def __init__(self, manager: ReplicaFetcherManager, source_broker: int, fetcher_id: int):
        super().__init__(name=f"ReplicaFetcherThread-{fetcher_id}-{source_broker}", daemon=True)
        self.manager = manager
        self.rm = manager.replica_manager
        self.source_broker = source_broker
        self.fetcher_id = fetcher_id
        self._lock = threading.Lock()
        self._partitions: dict[tuple[str, int], _PartitionFetchState] = {}
        #: bumped at every add / remove: the fetcher copies the table only when it changed
        self._table_version = 0
        #: the partitions that may be truncating or paused (added ones, and those the fetcher
        #: paused or sent back to truncation): a round looks at these, not at every partition, so
        #: its cost follows what changed (thousands of followed partitions cost each round 0.3 ms)
        self._special: set = set()
        #: removed partitions the leader's session may still hold (forgotten in the next fetch)
        self._removed: set = set()
        #: the fetch session with the source broker (Kafka's FetchSessionHandler): its id (0: none),
        #: the epoch of the next request (0: a full fetch opening one), what the leader's session
        #: holds (partition -> (fetch offset, log start offset, leader epoch)) and the partitions
        #: whose fetch state may have changed since they were last sent; fetcher thread only,
        #: ``_touched`` also by add_partition (under the lock)
        self._session_id = 0
        self._session_epoch = 0
        self._sent: dict[tuple[str, int], tuple] = {}
        self._touched: set = set()
        self.full_fetches = 0  # diagnostics and tests
        self.partitions_sent = 0
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._conn: _Connection | None = None
        s = manager.settings
        self.wait_ms = s.get("replica_fetch_wait_max_ms", 500)
        self.min_bytes = s.get("replica_fetch_min_bytes", 1)
        self.partition_max_bytes = s.get("replica_fetch_max_bytes", 1048576)
        self.max_bytes = s.get("replica_fetch_response_max_bytes", 10485760)
        self.backoff_s = s.get("replica_fetch_backoff_ms", 1000) / 1000.0
        self.socket_timeout_s = max(s.get("replica_socket_timeout_ms", 30000) / 1000.0, self.wait_ms / 1000.0 + 5)

    # ------------------------------------------------------------------ partition table (any thread)

    def add_partition(self, key, leader_epoch: int) -> None:
        with self._lock:
            self._partitions[key] = _PartitionFetchState(leader_epoch)
            self._touched.add(key)
            self._special.add(key)  # truncates first
            self._removed.discard(key)
            self._table_version += 1
        self._wake.set()

    def remove_partitions(self, keys) -> None:
        with self._lock:
            for k in keys:
                if self._partitions.pop(k, None) is not None:
                    self._removed.add(k)
                    self._special.discard(k)
            self._table_version += 1

    def partition_count(self) -> int:
        with self._lock:
            return len(self._partitions)

    def shutdown(self) -> None:
        self._stopped.set()
        self._wake.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _current(self, key, state) -> bool:
        with self._lock:
            return self._partitions.get(key) is state

    def _delay(self, key, state, why: str) -> None:
        state.delayed_until = time.monotonic() + self.backoff_s
        self._mark_special(key)
        log.debug(
            "%s-%d: fetch from broker %d paused %.1fs: %s", key[0], key[1], self.source_broker, self.backoff_s, why
        )

    def _mark_special(self, key) -> None:
        """``key`` is truncating again or paused (fetcher thread): the next rounds look at it."""
        with self._lock:
            if key in self._partitions:
                self._special.add(key)

    # ------------------------------------------------------------------ the loop

    def _round(self, table: dict, now: float):
        """What this round does: ``(truncating, fetching, paused)`` -- the partitions to truncate,
        to fetch (the whole table, not a copy, when none is special) and the set of paused ones;
        special partitions that are neither any more go back to plain fetching (told to the
        session as changed).  Looks only at the special partitions."""
        with self._lock:
            special = [k for k in self._special if k in table]
        if not special:
            return {}, table, frozenset()
        truncating, paused, settled = {}, set(), []
        for k in special:
            st = table[k]
            if st.delayed_until > now:
                paused.add(k)
            elif st.truncating:
                truncating[k] = st
            else:
                settled.append(k)
        self._settle(settled)
        if not truncating and not paused:
            return truncating, table, paused
        fetching = {k: st for k, st in table.items() if k not in paused and k not in truncating}
        return truncating, fetching, paused

    def _settle(self, keys) -> None:
        """``keys`` are neither truncating nor paused any more: plain fetching again, named in the
        next request (the session forgot them while they were out)."""
        if keys:
            with self._lock:
                self._special.difference_update(keys)
                self._touched.update(keys)

    def run(self) -> None:
        version, table = -1, {}
        while not self._stopped.is_set():
            with self._lock:
                if version != self._table_version:  # copied only when partitions came or went
                    version, table = self._table_version, dict(self._partitions)
            now = time.monotonic()
            truncating, fetching, paused = self._round(table, now)
            if not truncating and not fetching:
                self._wake.clear()
                nxt = min((table[k].delayed_until for k in paused), default=now + 1.0)
                self._wake.wait(max(0.01, min(1.0, nxt - now)))
                continue
            try:
                conn = self._connection()
                if conn is None:
                    self._stopped.wait(self.backoff_s)
                    continue
                sent = False
                if truncating:
                    sent |= self._truncate(conn, truncating)
                    # the ones truncated now fetch in this same round: a partition truncated at a
                    # new leader epoch is never dropped from the leader's fetch session meanwhile
                    # (a dropped one no longer counts as caught up there through the session)
                    done = {k: st for k, st in truncating.items() if not st.truncating}
                    self._settle(done)
                    fetching = {**fetching, **done}
                if fetching:
                    sent |= self._fetch(conn, fetching, len(fetching) < len(table))
                if not sent:  # every partition's role is changing: the manager updates this thread
                    self._wake.clear()
                    self._wake.wait(0.05)
            except (OSError, ConnectionError, PyklogError, ValueError, struct.error) as e:
                if self._stopped.is_set():
                    break
                log.info("fetcher %s: %s; reconnecting in %.1fs", self.name, e, self.backoff_s)
                self._close()
                self._stopped.wait(self.backoff_s)
            except Exception:  # noqa: BLE001 - the thread never dies of one bad answer
                log.exception("fetcher %s failed; retrying in %.1fs", self.name, self.backoff_s)
                self._close()
                self._stopped.wait(self.backoff_s)
        self._close()

    def _connection(self) -> _Connection | None:
        if self._conn is not None:
            return self._conn
        addr = self.manager.cluster.live_brokers().get(self.source_broker)
        if addr is None:
            log.debug("fetcher %s: broker %d is not registered", self.name, self.source_broker)
            return None
        sock = self.manager.cluster.connect_to_broker(addr[0], addr[1], self.socket_timeout_s)
        self._conn = _Connection(sock, f"pyklog-replica-fetcher-{self.rm.broker_id}")
        log.info("fetcher %s: connected to broker %d at %s:%d", self.name, self.source_broker, *addr)
        return self._conn

    def _close(self) -> None:
        self._reset_session()
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # ------------------------------------------------------------------ truncation (KIP-101 / KIP-279)

    def _truncate(self, conn: _Connection, parts: dict) -> bool:
        """Truncate the partitions just added; True if anything was done."""
        logs = {}
        for key, state in parts.items():
            lg = self.rm.follower_log(key[0], key[1], state.leader_epoch)
            if lg is None:
                continue  # no longer followed at this epoch: the manager removes or re-adds it
            logs[key] = lg
        if not logs:
            return False
        api = ApiKey.OFFSET_FOR_LEADER_EPOCH
        version = conn.version(api, 3)
        if version is None or version < 2:
            # the leader knows no epochs: truncate to the high watermark (Kafka before KIP-101)
            for key, lg in logs.items():
                self._truncate_to(key, parts[key], lg, lg.high_watermark, "leader without OffsetsForLeaderEpoch")
            return True
        topics: dict[str, list] = {}
        for (t, p), lg in logs.items():
            epoch = _latest_epoch(lg)
            if epoch is None or epoch < 0:
                # an empty epoch cache: nothing to compare, keep the log up to the high watermark
                self._truncate_to((t, p), parts[(t, p)], lg, lg.high_watermark, "no local leader epoch")
                continue
            topics.setdefault(t, []).append(
                {"partition": p, "current_leader_epoch": parts[(t, p)].leader_epoch, "leader_epoch": epoch}
            )
        if not topics:
            return True
        body = {"replica_id": self.rm.broker_id, "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()]}
        resp = conn.request(api, version, body)
        for tr in resp.get("topics", []):
            for pr in tr.get("partitions", []):
                key = (tr["topic"], pr["partition"])
                state, lg = parts.get(key), logs.get(key)
                if state is None or lg is None or not self._current(key, state):
                    continue
                code = pr.get("error_code", 0)
                if code:
                    self._delay(key, state, f"OffsetsForLeaderEpoch error {code}")
                    continue
                leader_epoch, end = pr.get("leader_epoch", UNDEFINED_EPOCH), pr.get("end_offset", -1)
                # Kafka's getOffsetTruncationState (KIP-101, KIP-279): not completed when the leader
                # answered an epoch this log never had -> truncate there and ask again next round
                target, completed = lg.truncation_offset(leader_epoch, end)
                self._truncate_to(
                    key, state, lg, target, f"leader's end offset of epoch {leader_epoch} is {end}", completed
                )
        return True

    def _truncate_to(self, key, state, lg, offset: int, why: str, completed: bool = True) -> None:
        def cut(lg):
            if offset < lg.log_end_offset:
                log.info(
                    "%s-%d: truncating from log end offset %d to %d (%s)",
                    key[0],
                    key[1],
                    lg.log_end_offset,
                    offset,
                    why,
                )
                lg.truncate_to(offset)
            elif not completed:
                # nothing to cut but an epoch that starts at the log end offset (assigned on becoming
                # leader, nothing written in it): drop it, or the next round would ask about it again
                lg.leader_epoch_cache.truncate_from_end(offset)

        try:
            self.rm.as_follower(key[0], key[1], state.leader_epoch, cut)
        except NotLeaderOrFollowerError:
            return  # the role changed meanwhile: the manager removed or re-added the partition
        state.truncating = not completed

    # ------------------------------------------------------------------ fetch

    def _reset_session(self) -> None:
        """Start over with a full fetch (a new connection, a session error)."""
        self._session_id = 0
        self._session_epoch = 0
        self._sent = {}

    def _fetch_state(self, key, state):
        """``(fetch offset, log start offset, leader epoch)`` of a followed partition, None if it is
        no longer followed at the state's epoch (the manager removes or re-adds it)."""
        lg = self.rm.follower_log(key[0], key[1], state.leader_epoch)
        if lg is None:
            return None
        return (lg.log_end_offset, lg.log_start_offset, state.leader_epoch)

    def _fetch(self, conn: _Connection, parts: dict, partial: bool = False) -> bool:
        """One Fetch for the partitions ready to fetch; True if a request was sent.  With a leader
        serving Fetch v7+ the fetches run in a fetch session (KIP-227, Kafka's
        ``FetchSessionHandler``): a full fetch opens it, then each incremental fetch names only the
        partitions whose fetch offset, log start offset or leader epoch changed (added ones
        included) and forgets the ones no longer fetched; the answer carries only the partitions
        with something new.  An unknown session or a wrong epoch starts over with a full fetch.
        ``parts`` is every followed partition unless ``partial`` (some are truncating or paused:
        the session forgets them until they fetch again); an incremental fetch looks only at the
        partitions touched since the last one."""
        version = conn.version(ApiKey.FETCH, FETCH_VERSION)
        if version is None or version < 4:
            raise ConnectionError(f"broker {self.source_broker} serves no Fetch v4+ for replication")
        sessions = version >= 7
        incremental = sessions and self._session_id != 0
        with self._lock:
            touched, self._touched = self._touched, set()
            removed, self._removed = self._removed, set()
        send: dict = {}
        forgotten: list = []
        if incremental:
            sent = self._sent
            # a followed partition the session does not hold was added, or is back from truncating
            # or a pause: each of these is touched
            later = []
            for key in touched:
                if key not in parts:
                    continue
                fs = self._fetch_state(key, parts[key])
                if fs is None:
                    if key not in sent:
                        later.append(key)  # its role is being applied: looked at again next round
                elif sent.get(key) != fs:
                    send[key] = fs
            if later:
                with self._lock:
                    self._touched.update(later)
            if partial:
                forgotten = [key for key in sent if key not in parts]
            else:
                forgotten = [key for key in removed if key in sent and key not in parts]
            for key in touched & sent.keys():
                if key in parts and key not in send and self._fetch_state(key, parts[key]) is None:
                    forgotten.append(key)  # no longer followed at this epoch
        else:
            for key, state in parts.items():
                fs = self._fetch_state(key, state)
                if fs is not None:
                    send[key] = fs
            if not send:
                return False
        topics: dict[str, list] = {}
        for (t, p), (offset, start, epoch) in send.items():
            topics.setdefault(t, []).append(
                {
                    "partition": p,
                    "current_leader_epoch": epoch,
                    "fetch_offset": offset,
                    "last_fetched_epoch": -1,
                    "log_start_offset": start,
                    "partition_max_bytes": self.partition_max_bytes,
                }
            )
        forgotten_topics: dict[str, list] = {}
        for t, p in forgotten:
            forgotten_topics.setdefault(t, []).append(p)
        body = {
            "replica_id": self.rm.broker_id,
            "max_wait_ms": self.wait_ms,
            "min_bytes": self.min_bytes,
            "max_bytes": self.max_bytes,
            "isolation_level": 0,
            "session_id": self._session_id if incremental else 0,
            "session_epoch": self._session_epoch if sessions else -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [{"topic": t, "partitions": ps} for t, ps in forgotten_topics.items()],
            "rack_id": "",
        }
        if not incremental:
            self.full_fetches += 1
        self.partitions_sent += len(send)
        try:
            resp = conn.request(ApiKey.FETCH, version, body)
        except BaseException:
            self._reset_session()
            raise
        code = resp.get("error_code", 0)
        if code in (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH):
            log.info("fetcher %s: fetch session %d refused (error %d): full fetch", self.name, self._session_id, code)
            self._reset_session()
            with self._lock:
                self._touched |= touched
            return True
        if code:
            self._reset_session()
            raise ConnectionError(f"Fetch answered error {code}")
        if sessions:
            if incremental:
                for key in forgotten:
                    self._sent.pop(key, None)
                self._sent.update(send)
                self._session_epoch = next_epoch(self._session_epoch)
            elif resp.get("session_id", 0):
                self._session_id = resp["session_id"]
                self._session_epoch = next_epoch(INITIAL_EPOCH)
                self._sent = dict(send)
        done = set()
        for tr in resp.get("responses", []):
            for pr in tr.get("partitions", []):
                key = (tr["topic"], pr["partition_index"])
                state = parts.get(key)
                fs = send.get(key) or self._sent.get(key)
                if state is None or fs is None or not self._current(key, state):
                    continue
                done.add(key)
                self._process(key, state, fs[0], pr)
        if done:
            with self._lock:
                self._touched |= done
        return True

    def _process(self, key, state, fetch_offset: int, pr: dict) -> None:
        t, p = key
        code = pr.get("error_code", 0)
        if code == 0:
            records = pr.get("records")
            try:
                self.rm.append_as_follower(
                    t, p, records, pr.get("high_watermark", -1), state.leader_epoch, pr.get("log_start_offset", -1)
                )
            except NotLeaderOrFollowerError:
                return  # the role changed meanwhile
            except OffsetOutOfRangeError as e:  # the log moved under us (a truncation): start over
                log.info("%s-%d: follower append refused (%s); truncating again", t, p, e)
                state.truncating = True
                self._mark_special(key)
            except PyklogError as e:
                # a failed log dir is reported once per dir (the partition goes offline); anything
                # else once per partition and error, not at every retry
                offline = isinstance(e, KafkaStorageError) and self.rm.partition_offline(t, p)
                if not offline and state.warned != e.code:
                    state.warned = e.code
                    log.warning("%s-%d: cannot append the leader's batches at %d: %s", t, p, fetch_offset, e)
                self._delay(key, state, str(e))
            return
        if code == OffsetOutOfRangeError.code:
            lg = self.rm.follower_log(t, p, state.leader_epoch)
            leader_start = pr.get("log_start_offset", -1)
            if lg is not None and 0 <= fetch_offset < leader_start:
                log.info(
                    "%s-%d: fetch offset %d is below the leader's log start offset %d: restarting the log there",
                    t,
                    p,
                    fetch_offset,
                    leader_start,
                )
                try:
                    self.rm.as_follower(
                        t, p, state.leader_epoch, lambda lg: lg.truncate_fully_and_start_at(leader_start)
                    )
                except NotLeaderOrFollowerError:
                    return
            else:
                state.truncating = True  # above the leader's end: truncate by epoch again
                self._mark_special(key)
            return
        if code in (
            NotLeaderOrFollowerError.code,
            FencedLeaderEpochError.code,
            UnknownLeaderEpochError.code,
            UnknownTopicOrPartitionError.code,
        ):
            self._delay(key, state, f"error {code}")
            return
        if state.warned != code:
            state.warned = code
            log.warning("%s-%d: fetch from broker %d answered error %d", t, p, self.source_broker, code)
        self._delay(key, state, f"error {code}")


def _latest_epoch(lg) -> int:
    """The log's latest leader epoch (-1: none)."""
    return lg.latest_epoch


class ReplicaFetcherManager:
    """The fetcher threads of one broker (Kafka's ``ReplicaFetcherManager``): ``num.replica.fetchers``
    per source broker, created on first need, stopped when they have no partition left."""

    def __init__(self, replica_manager, cluster, settings: dict):
        self.replica_manager = replica_manager
        self.cluster = cluster
        self.settings = dict(settings)
        self.num_fetchers = max(1, int(self.settings.get("num_replica_fetchers", 1)))
        self._lock = threading.Lock()
        self._threads: dict[tuple[int, int], ReplicaFetcherThread] = {}
        self._where: dict[tuple[str, int], tuple[int, int]] = {}  # partition -> (source broker, fetcher id)
        self._stopped = False

    def add_partition(self, key, leader: int, leader_epoch: int) -> None:
        """Follow ``key`` from ``leader`` at ``leader_epoch`` (truncation first)."""
        fid = (31 * zlib.crc32(key[0].encode()) + key[1]) % self.num_fetchers  # Kafka's getFetcherId
        with self._lock:
            if self._stopped:
                return
            old = self._where.get(key)
            if old is not None and old != (leader, fid):
                self._threads[old].remove_partitions([key])
            thread = self._threads.get((leader, fid))
            if thread is None or not thread.is_alive():
                thread = ReplicaFetcherThread(self, leader, fid)
                self._threads[(leader, fid)] = thread
                thread.start()
            self._where[key] = (leader, fid)
            thread.add_partition(key, leader_epoch)
        self._stop_idle()

    def remove_partitions(self, keys) -> None:
        with self._lock:
            for key in keys:
                where = self._where.pop(key, None)
                if where is not None and where in self._threads:
                    self._threads[where].remove_partitions([key])
        self._stop_idle()

    def _stop_idle(self) -> None:
        with self._lock:
            idle = [k for k, t in self._threads.items() if t.partition_count() == 0]
            stopping = [self._threads.pop(k) for k in idle]
        for t in stopping:
            t.shutdown()

    def fetching(self) -> dict[tuple[str, int], int]:
        """``{partition: source broker}`` being fetched now (tests, diagnostics)."""
        with self._lock:
            return {k: w[0] for k, w in self._where.items()}

    def shutdown(self) -> None:
        with self._lock:
            self._stopped = True
            threads = list(self._threads.values())
            self._threads.clear()
            self._where.clear()
        for t in threads:
            t.shutdown()
        for t in threads:
            t.join(timeout=5)


__all__ = ["FETCH_VERSION", "ReplicaFetcherManager", "ReplicaFetcherThread"]
