"""The offset manager (the seed's "Consumer Offset Tracking"): committed offsets in ``__consumer_offsets``.

A group's offsets live in partition ``abs(javaStringHashCode(group)) % offsets.topic.num.partitions``
of the compacted topic ``__consumer_offsets``; the leader of that partition is the group's
coordinator (FindCoordinator).  The topic is created on first use with ``cleanup.policy=compact``
and ``segment.bytes=104857600``, spread over the live brokers like any topic.

* OffsetCommit appends one v2 record batch (all the commit's offsets) to the partition and, only
  once the append returned, updates an in-memory cache.
* OffsetFetch answers from the cache.
* When this broker becomes the leader of an offsets partition (start-up, topic creation) it loads
  the partition's log into the cache in a background thread; until that finishes requests for its
  groups raise :class:`CoordinatorLoadInProgressError` (the seed's OffsetsLoadInProgress).  Requests
  for groups of a partition this broker does not lead raise :class:`NotCoordinatorError`.
* The log's compaction keeps the latest commit per key; :meth:`OffsetManager.delete_offsets` writes
  tombstones.

Record format (Kafka's, ``OffsetCommitKey``/``OffsetCommitValue`` message schemas), all big-endian,
strings as int16 length + UTF-8:

    key   v1: version int16 = 1, group string, topic string, partition int32
    value v3: version int16 = 3, offset int64, leader_epoch int32, metadata string, commit_timestamp int64

Values v0-v2 are decoded too (v0: offset, metadata, timestamp; v1: + expire_timestamp; v2: offset,
metadata, commit_timestamp); keys of version 2 (group metadata) are skipped.

Thread-safety: :class:`OffsetManager` is thread-safe.  Commits to one offsets partition are
serialised (append then cache update under the partition's lock); fetches read a snapshot.
Loading runs on one daemon thread; the cluster listener runs on kazoo's callback thread.
"""
from __future__ import annotations

import logging
import queue
import struct
import threading
import time
from typing import Iterable, NamedTuple

from pyklog.broker.common.retry import Deadline
from pyklog.broker.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    InvalidGroupIdError,
    MessageTooLargeError,
    NotCoordinatorError,
    PyklogError,
    RecordListTooLargeError,
    TopicAlreadyExistsError,
    UnknownServerError,
)
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.zk.topics import OFFSETS_TOPIC

log = logging.getLogger(__name__)

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
DEFAULT_OFFSETS_SEGMENT_BYTES = 100 * 1024 * 1024
DEFAULT_METADATA_MAX_BYTES = 4096
INVALID_OFFSET = -1
NO_LEADER_EPOCH = -1

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

LOADING, LOADED, FAILED = "loading", "loaded", "failed"


class OffsetAndMetadata(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


# ---------------------------------------------------------------------------- Java's hash


def java_string_hash(s: str) -> int:
    """Java's ``String.hashCode()``: ``h = 31*h + c`` over UTF-16 code units, as a signed int32."""
    h = 0
    data = s.encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 0x100000000 if h & 0x80000000 else h


def kafka_abs(n: int) -> int:
    """Kafka's ``Utils.abs``: ``abs`` with ``Integer.MIN_VALUE`` mapped to 0."""
    return 0 if n == -0x80000000 else abs(n)


def partition_for_group(group: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's choice, identical in every process)."""
    return kafka_abs(java_string_hash(group)) % num_partitions


# ---------------------------------------------------------------------------- record codec


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise InvalidCommitOffsetSizeError(f"string of {len(b)} bytes does not fit an int16 length: {s[:40]!r}...")
    return _I16.pack(len(b)) + b


def _read_str(buf: bytes, pos: int, what: str) -> tuple[str | None, int]:
    if pos + 2 > len(buf):
        raise ValueError(f"{what}: expected an int16 length at byte {pos}, the buffer has {len(buf)} bytes")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        return None, pos
    if pos + n > len(buf):
        raise ValueError(f"{what}: string of {n} bytes at byte {pos} runs past the {len(buf)}-byte buffer")
    return bytes(buf[pos:pos + n]).decode("utf-8"), pos + n


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (_I16.pack(OFFSET_COMMIT_VALUE_VERSION) + _I64.pack(value.offset) + _I32.pack(value.leader_epoch)
            + _str(value.metadata or "") + _I64.pack(value.commit_timestamp))


def decode_offset_key(buf: bytes) -> tuple[str, str, int] | None:
    """``(group, topic, partition)`` of an offset commit key; None for a group metadata key (v2)."""
    if buf is None or len(buf) < 2:
        raise ValueError(f"offsets key: expected at least a 2-byte version, read {buf!r}")
    (version,) = _I16.unpack_from(buf, 0)
    if version == GROUP_METADATA_KEY_VERSION:
        return None
    if version not in (0, 1):
        raise ValueError(f"offsets key: expected version 0, 1 or 2, read {version}")
    group, pos = _read_str(buf, 2, "offsets key group")
    topic, pos = _read_str(buf, pos, "offsets key topic")
    if pos + 4 > len(buf):
        raise ValueError(f"offsets key: expected an int32 partition at byte {pos}, buffer has {len(buf)} bytes")
    (partition,) = _I32.unpack_from(buf, pos)
    return group or "", topic or "", partition


def decode_offset_value(buf: bytes) -> OffsetAndMetadata:
    """Decode value versions 0-3 (3 is what pyklog and Kafka 2.1+ write)."""
    if len(buf) < 2:
        raise ValueError(f"offsets value: expected at least a 2-byte version, read {buf!r}")
    (version,) = _I16.unpack_from(buf, 0)
    if version not in (0, 1, 2, 3):
        raise ValueError(f"offsets value: expected version 0-3, read {version}")
    need = 2 + 8 + (4 if version == 3 else 0)
    if len(buf) < need:
        raise ValueError(f"offsets value v{version}: expected at least {need} bytes, read {len(buf)}")
    (offset,) = _I64.unpack_from(buf, 2)
    pos = 10
    epoch = NO_LEADER_EPOCH
    if version == 3:
        (epoch,) = _I32.unpack_from(buf, pos)
        pos += 4
    metadata, pos = _read_str(buf, pos, "offsets value metadata")
    if pos + 8 > len(buf):
        raise ValueError(f"offsets value v{version}: expected an int64 timestamp at byte {pos}, buffer has {len(buf)}")
    (ts,) = _I64.unpack_from(buf, pos)
    return OffsetAndMetadata(offset, epoch, metadata or "", ts)


# ---------------------------------------------------------------------------- manager


class _OffsetsPartition:
    """One ``__consumer_offsets`` partition this broker leads: load state and the offsets cache."""

    __slots__ = ("partition", "state", "cache", "lock", "error")

    def __init__(self, partition: int):
        self.partition = partition
        self.state = LOADING
        self.cache: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.lock = threading.Lock()  # serialises append + cache update
        self.error: str | None = None


class OffsetManager:
    """Committed offsets of consumer groups in ``__consumer_offsets`` (see the module docstring).

    ``log_manager`` is a :class:`broker.log.manager.LogManager`; ``cluster`` a started
    :class:`broker.zk.cluster.ZkCluster`.  ``num_partitions`` is ``offsets.topic.num.partitions``
    (an existing topic's own partition count wins, as in Kafka).
    """

    def __init__(self, log_manager, cluster, broker_id: int, *, num_partitions: int = 50,
                 replication_factor: int = 1, segment_bytes: int = DEFAULT_OFFSETS_SEGMENT_BYTES,
                 metadata_max_bytes: int = DEFAULT_METADATA_MAX_BYTES, load_buffer_bytes: int = 5 * 1024 * 1024):
        if num_partitions <= 0:
            raise ValueError(f"offsets.topic.num.partitions must be positive, got {num_partitions}")
        self.log_manager = log_manager
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.num_partitions = int(num_partitions)
        self.replication_factor = int(replication_factor)
        self.segment_bytes = int(segment_bytes)
        self.metadata_max_bytes = int(metadata_max_bytes)
        self.load_buffer_bytes = int(load_buffer_bytes)
        self._lock = threading.RLock()
        self._partitions: dict[int, _OffsetsPartition] = {}
        self._queue: queue.Queue = queue.Queue()
        self._loader: threading.Thread | None = None
        self._running = False
        self._synced = False  # leadership of an existing offsets topic has been looked at

    # ------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        """Follow leadership of ``__consumer_offsets`` partitions; load led ones in the background.

        The topic itself is created on first use (:meth:`ensure_topic`), when the brokers that
        form the cluster are registered, so its partitions spread over all of them.
        """
        with self._lock:
            if self._running:
                return
            self._running = True
            self._loader = threading.Thread(target=self._load_loop, name=f"offsets-loader-{self.broker_id}",
                                            daemon=True)
            self._loader.start()
        self.cluster.add_listener(self._on_cluster_change)
        self._sync_leadership()

    def shutdown(self) -> None:
        with self._lock:
            if not self._running:
                return
            self._running = False
        self.cluster.remove_listener(self._on_cluster_change)
        self._queue.put(None)
        if self._loader is not None:
            self._loader.join(30)
        with self._lock:
            self._partitions.clear()

    def ensure_topic(self) -> None:
        """Create ``__consumer_offsets`` (compacted) unless it exists; load partitions we now lead."""
        if self.cluster.topic(OFFSETS_TOPIC) is not None and self._synced:
            return
        created = False
        if self.cluster.topic(OFFSETS_TOPIC) is None:
            live = len(self.cluster.live_brokers()) or 1
            try:
                self.cluster.create_topic(OFFSETS_TOPIC, self.num_partitions,
                                          replication_factor=min(self.replication_factor, live),
                                          configs={"cleanup.policy": "compact",
                                                   "segment.bytes": str(self.segment_bytes),
                                                   "compression.type": "producer"})
                created = True
                log.info("created %s with %d partitions", OFFSETS_TOPIC, self.num_partitions)
            except TopicAlreadyExistsError:
                pass
            except PyklogError as e:  # e.g. no live broker yet: the client retries FindCoordinator
                raise CoordinatorNotAvailableError(f"cannot create {OFFSETS_TOPIC}: {e}") from e
        self._sync_leadership(load_inline=True)
        if created:
            # the new (empty) partitions may be loading on the listener's thread: they are ready at once
            self.wait_loaded(10.0)

    # ------------------------------------------------------------------ coordinator lookup

    def partition_for(self, group: str) -> int:
        return partition_for_group(group, self.num_partitions)

    def coordinator_for(self, group: str) -> int | None:
        """The broker id coordinating ``group`` (creating ``__consumer_offsets`` on first use);
        None when its partition has no live leader (COORDINATOR_NOT_AVAILABLE)."""
        if group is None:
            raise InvalidGroupIdError("group id must not be null")
        self.ensure_topic()
        parts = self.cluster.topic(OFFSETS_TOPIC, refresh_if_missing=False) or {}
        state = parts.get(self.partition_for(group))
        if state is None or state.leader < 0:
            return None
        return state.leader

    def is_loading(self, group: str | None = None) -> bool:
        """True while any (or ``group``'s) led offsets partition is still loading."""
        with self._lock:
            if group is not None:
                part = self._partitions.get(self.partition_for(group))
                return part is not None and part.state == LOADING
            return any(p.state == LOADING for p in self._partitions.values())

    def wait_loaded(self, timeout: float = 30.0) -> bool:
        """Poll (every 20 ms) until no led offsets partition is loading; False after ``timeout`` s.
        Runs in the caller's thread."""
        deadline = Deadline.after(timeout)
        while self.is_loading():
            if deadline.expired():
                return False
            time.sleep(min(0.02, deadline.remaining()))
        return True

    def _partition_for_request(self, group: str) -> _OffsetsPartition:
        if group is None:
            raise InvalidGroupIdError("group id must not be null")
        p = self.partition_for(group)
        with self._lock:
            part = self._partitions.get(p)
        if part is None:
            raise NotCoordinatorError(
                f"broker {self.broker_id} is not the coordinator of group {group!r} "
                f"({OFFSETS_TOPIC} partition {p} is led elsewhere)")
        if part.state == LOADING:
            raise CoordinatorLoadInProgressError(
                f"broker {self.broker_id} is still loading {OFFSETS_TOPIC}-{p} (group {group!r})")
        if part.state == FAILED:
            raise CoordinatorNotAvailableError(
                f"loading {OFFSETS_TOPIC}-{p} failed on broker {self.broker_id}: {part.error}")
        return part

    # ------------------------------------------------------------------ commit / fetch

    def commit(self, group: str, offsets: dict, *, commit_timestamp: int | None = None) -> dict:
        """Store ``{(topic, partition): (offset, leader_epoch, metadata)}`` for ``group``.

        Returns ``{(topic, partition): error_code}`` (0 = stored).  The offsets are appended to the
        group's ``__consumer_offsets`` partition as one record batch; the answer comes after the
        append.  Per partition: OFFSET_METADATA_TOO_LARGE for metadata over ``metadata_max_bytes``,
        UNKNOWN_TOPIC_OR_PARTITION for a partition not in the cluster's metadata.  Raises
        NotCoordinatorError / CoordinatorLoadInProgressError for the whole request.
        """
        part = self._partition_for_request(group)
        now = int(time.time() * 1000) if commit_timestamp is None or commit_timestamp < 0 else int(commit_timestamp)
        results: dict[tuple[str, int], int] = {}
        valid: dict[tuple[str, int], OffsetAndMetadata] = {}
        topics: dict[str, dict] = {}
        for (topic, partition), spec in offsets.items():
            offset, epoch, metadata = (tuple(spec) + (None, None))[:3]
            metadata = metadata or ""
            if len(metadata.encode("utf-8")) > self.metadata_max_bytes:
                results[(topic, partition)] = 12  # OFFSET_METADATA_TOO_LARGE
                continue
            if topic not in topics:
                try:
                    topics[topic] = self.cluster.topic(topic) or {}
                except PyklogError:
                    topics[topic] = {}
            if partition not in topics[topic]:
                results[(topic, partition)] = 3  # UNKNOWN_TOPIC_OR_PARTITION
                continue
            valid[(topic, partition)] = OffsetAndMetadata(
                int(offset), NO_LEADER_EPOCH if epoch is None else int(epoch), metadata, now)
        if not valid:
            return results
        try:
            batch = build_batch([(encode_offset_key(group, t, p), encode_offset_value(v), now, ())
                                 for (t, p), v in valid.items()])
        except PyklogError as e:
            results.update({tp: e.code for tp in valid})
            return results
        with part.lock:
            with self._lock:
                if self._partitions.get(part.partition) is not part or part.state != LOADED:
                    raise NotCoordinatorError(
                        f"broker {self.broker_id} lost {OFFSETS_TOPIC}-{part.partition} while committing for {group!r}")
            try:
                self._log(part.partition).append(batch)
            except (MessageTooLargeError, RecordListTooLargeError) as e:
                log.warning("offset commit of group %s too large: %s", group, e)
                results.update({tp: InvalidCommitOffsetSizeError.code for tp in valid})
                return results
            except PyklogError as e:
                log.warning("offset commit of group %s failed: %s", group, e)
                results.update({tp: e.code if e.code != -1 else UnknownServerError.code for tp in valid})
                return results
            group_cache = part.cache.setdefault(group, {})
            group_cache.update(valid)
        results.update({tp: 0 for tp in valid})
        return results

    def fetch(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> dict:
        """``{(topic, partition): (offset, leader_epoch, metadata)}`` committed by ``group``; with
        ``partitions`` given, every requested partition appears (offset -1 if none committed)."""
        part = self._partition_for_request(group)
        with part.lock:
            cached = dict(part.cache.get(group, {}))
        if partitions is None:
            return {tp: (v.offset, v.leader_epoch, v.metadata) for tp, v in sorted(cached.items())}
        out = {}
        for tp in partitions:
            v = cached.get(tuple(tp))
            out[tuple(tp)] = (v.offset, v.leader_epoch, v.metadata) if v else (INVALID_OFFSET, NO_LEADER_EPOCH, "")
        return out

    def fetch_detailed(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Like :meth:`fetch` for all partitions, with commit timestamps."""
        part = self._partition_for_request(group)
        with part.lock:
            return dict(part.cache.get(group, {}))

    def groups(self) -> list[str]:
        """Groups with committed offsets in the loaded partitions this broker leads."""
        with self._lock:
            parts = [p for p in self._partitions.values() if p.state == LOADED]
        out = set()
        for p in parts:
            with p.lock:
                out.update(g for g, c in p.cache.items() if c)
        return sorted(out)

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> None:
        """Forget ``group``'s offsets for ``partitions``: tombstones (null values) that compaction removes."""
        part = self._partition_for_request(group)
        keys = [tuple(tp) for tp in partitions]
        if not keys:
            return
        now = int(time.time() * 1000)
        batch = build_batch([(encode_offset_key(group, t, p), None, now, ()) for t, p in keys])
        with part.lock:
            self._log(part.partition).append(batch)
            cache = part.cache.get(group, {})
            for tp in keys:
                cache.pop(tp, None)
            if not cache:
                part.cache.pop(group, None)

    # ------------------------------------------------------------------ leadership and loading

    def _on_cluster_change(self) -> None:
        try:
            self._sync_leadership()
        except Exception:
            log.exception("offsets partition leadership update failed")

    def _sync_leadership(self, load_inline: bool = False) -> None:
        parts = self.cluster.topic(OFFSETS_TOPIC, refresh_if_missing=False)
        led = set()
        if parts:
            self._synced = True
            self.num_partitions = len(parts)
            led = {p for p, s in parts.items() if s.leader == self.broker_id}
        to_load = []
        with self._lock:
            if not self._running:
                return
            for p in sorted(set(self._partitions) - led):
                log.info("no longer the leader of %s-%d: dropping its offsets cache", OFFSETS_TOPIC, p)
                del self._partitions[p]
            for p in sorted(led - set(self._partitions)):
                part = _OffsetsPartition(p)
                self._partitions[p] = part
                to_load.append(part)
        for part in to_load:
            existing = self.log_manager.get_log(OFFSETS_TOPIC, part.partition)
            empty = existing is None or existing.log_end_offset == existing.log_start_offset
            if load_inline or empty:
                self._load(part)  # nothing (or a caller that waits anyway): no load-in-progress window
            else:
                self._queue.put(part)

    def _load_loop(self) -> None:
        while True:
            part = self._queue.get()
            if part is None:
                return
            self._load(part)

    def _log(self, partition: int, *, apply_config: bool = False):
        """The partition's log; with ``apply_config`` (at load) create it or make sure it runs with
        the topic's config (compaction), whatever config the LogManager opened it with."""
        if not apply_config:
            existing = self.log_manager.get_log(OFFSETS_TOPIC, partition)
            if existing is not None:
                return existing
        config = self.log_manager.default_config.with_overrides(self.cluster.topic_config(OFFSETS_TOPIC))
        return self.log_manager.get_or_create_log(OFFSETS_TOPIC, partition, config)

    def _load(self, part: _OffsetsPartition) -> None:
        """Read the partition's log into a fresh cache; the latest value per key wins."""
        with self._lock:
            if self._partitions.get(part.partition) is not part or part.state != LOADING:
                return
        started = time.monotonic()
        cache: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        records = 0
        try:
            lg = self._log(part.partition, apply_config=True)
            offset, end = lg.log_start_offset, lg.log_end_offset
            while offset < end:
                with self._lock:
                    if self._partitions.get(part.partition) is not part:
                        return  # leadership moved while loading
                buf = lg.read(offset, self.load_buffer_bytes).read_bytes()
                next_offset = offset
                for batch in iter_batches(buf):
                    next_offset = batch.next_offset
                    if batch.is_control:
                        continue
                    for rec in batch.records:
                        records += 1
                        self._apply(cache, rec.key, rec.value, part.partition, rec.offset)
                if next_offset <= offset:
                    break
                offset = next_offset
        except Exception as e:  # a broken log must not kill the loader thread
            log.exception("loading %s-%d failed", OFFSETS_TOPIC, part.partition)
            with self._lock:
                part.error = f"{type(e).__name__}: {e}"
                part.state = FAILED
            return
        with part.lock:
            part.cache = cache
            with self._lock:
                part.state = LOADED
        log.info("loaded %s-%d: %d groups from %d records in %.3fs", OFFSETS_TOPIC, part.partition,
                 len(cache), records, time.monotonic() - started)

    @staticmethod
    def _apply(cache, key, value, partition: int, offset: int) -> None:
        try:
            k = decode_offset_key(key)
            if k is None:
                return  # group metadata: pyklog's groups live in ZooKeeper
            group, topic, p = k
            if value is None:
                group_cache = cache.get(group)
                if group_cache is not None:
                    group_cache.pop((topic, p), None)
                    if not group_cache:
                        del cache[group]
                return
            cache.setdefault(group, {})[(topic, p)] = decode_offset_value(value)
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("%s-%d offset %d: skipping an unreadable record: %s", OFFSETS_TOPIC, partition, offset, e)
