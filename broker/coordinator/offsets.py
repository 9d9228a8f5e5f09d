"""The offset manager (the seed's "Consumer Offset Tracking"): committed offsets in ``__consumer_offsets``.

A group's offsets live in partition ``abs(javaStringHashCode(group)) % offsets.topic.num.partitions``
of the compacted topic ``__consumer_offsets``; the leader of that partition is the group's
coordinator (FindCoordinator).  The topic is created on first use with ``cleanup.policy=compact``
and ``segment.bytes=104857600``, spread over the live brokers like any topic.

* OffsetCommit appends one v2 record batch (all the commit's offsets) to the partition with acks=all
  (:class:`pyklog.broker.coordinator.partition_writer.CoordinatorPartitionWriter`) and, only once
  the ISR has it, updates an in-memory cache and answers (Kafka's ``offsets.commit.required.acks``
  = -1): OffsetFetch never shows a commit an election could undo.
* OffsetFetch answers from the cache.
* When this broker becomes the leader of an offsets partition (start-up, topic creation, or later
  at a new leader epoch) it loads the partition's log into the cache in a background thread; until that finishes requests for its
  groups raise :class:`CoordinatorLoadInProgressError` (the seed's OffsetsLoadInProgress).  Requests
  for groups of a partition this broker does not lead raise :class:`NotCoordinatorError`.
* The log's compaction keeps the latest commit per key; :meth:`OffsetManager.delete_offsets` writes
  tombstones.
* Transactional offset commits (KIP-98, Kafka's ``GroupMetadataManager.storeOffsets`` with a
  producer id): TxnOffsetCommit appends the offsets as a *transactional* batch carrying the
  producer's id and epoch (:meth:`OffsetManager.commit_transactional`) and keeps them *pending* per
  producer id in memory; OffsetFetch does not show them.  When the transaction coordinator's
  COMMIT/ABORT marker has been appended to the same partition (WriteTxnMarkers),
  :meth:`OffsetManager.complete_transaction` makes them the group's committed offsets (commit) or
  drops them (abort), as Kafka's ``handleTxnCompletion``.  A pending offset replaces a committed
  one only if its record is later in the log (Kafka's ``CommitRecordMetadataAndOffset.olderThan``),
  so a plain OffsetCommit appended after the TxnOffsetCommit but before the marker wins, in memory
  and on reload alike.  Loading replays the same rules: transactional batches become pending,
  control batches complete them, offsets still pending at the log end stay pending until their
  marker arrives.

Record format (Kafka's, ``OffsetCommitKey``/``OffsetCommitValue`` message schemas), all big-endian,
strings as int16 length + UTF-8:

    key   v1: version int16 = 1, group string, topic string, partition int32
    value v3: version int16 = 3, offset int64, leader_epoch int32, metadata string, commit_timestamp int64

Values v0-v2 are decoded too (v0: offset, metadata, timestamp; v1: + expire_timestamp; v2: offset,
metadata, commit_timestamp).  Keys of version 2 are group metadata records (a classic group's
generation, protocol, leader and members: :mod:`pyklog.broker.coordinator.group.metadata_record`),
written by the group coordinator through :meth:`OffsetManager.store_group_async` and handed back to
it, read in the same pass as the offsets, when this broker loads the partition (the group listener,
:meth:`OffsetManager.add_group_listener`).

Thread-safety: :class:`OffsetManager` is thread-safe.  Commits to one offsets partition are
serialised (append then cache update under the partition's lock); fetches read a snapshot.
Leadership, loading and the per-request NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
COORDINATOR_NOT_AVAILABLE checks are :class:`pyklog.broker.coordinator.runtime.CoordinatorPartitions`
(shared with the transaction state manager; its lock guards the partition table and load states).
Loading runs on one daemon thread; the cluster listener runs on kazoo's callback thread.  The
loader reads the last stretch of the log and marks the partition loaded under the partition's
lock, so a marker appended while it loads is either read by the loader or completed by
:meth:`OffsetManager.complete_transaction` afterwards, never neither nor both.  Lock order: a
partition's lock, then the runtime's lock.  A partition number keeps one lock across reloads at new
leader epochs, so a commit in flight on the old epoch's object is read by the reload or refused.
"""

from __future__ import annotations

import logging
import struct
import threading
import time
from collections.abc import Callable, Iterable
from typing import NamedTuple, Protocol

from pyklog.broker.coordinator.group.metadata_record import (
    GroupMetadataValue,
    decode_group_metadata_key,
    decode_group_metadata_value,
    encode_group_metadata_key,
)
from pyklog.broker.coordinator.partition_writer import CoordinatorPartitionWriter, coordinator_error_for
from pyklog.broker.coordinator.runtime import (  # noqa: F401 - java_string_hash, kafka_abs re-exported
    FAILED,
    LOADED,
    LOADING,
    CoordinatorPartition,
    CoordinatorPartitions,
    CoordinatorStateManager,
    java_string_hash,
    kafka_abs,
    partition_for_key,
)
from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    InvalidCommitOffsetSizeError,
    InvalidGroupIdError,
    MessageTooLargeError,
    NotCoordinatorError,
    PyklogError,
    RecordListTooLargeError,
    UnknownServerError,
)
from pyklog.broker.record.batch import CONTROL_COMMIT, build_batch
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
#: base sequence of a transactional offset commit batch: Kafka's GroupMetadataManager writes 0; the
#: log skips sequence checks for coordinator appends (``from_client=False``)
TXN_OFFSET_BASE_SEQUENCE = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


class OffsetAndMetadata(NamedTuple):
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


# ---------------------------------------------------------------------------- partitioning


def partition_for_group(group: str, num_partitions: int) -> int:
    """The ``__consumer_offsets`` partition of ``group`` (Kafka's choice, identical in every process)."""
    return partition_for_key(group, num_partitions)


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
    return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n


def encode_offset_key(group: str, topic: str, partition: int) -> bytes:
    return _I16.pack(OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + _I32.pack(partition)


def encode_offset_value(value: OffsetAndMetadata) -> bytes:
    return (
        _I16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _I64.pack(value.offset)
        + _I32.pack(value.leader_epoch)
        + _str(value.metadata or "")
        + _I64.pack(value.commit_timestamp)
    )


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


class _GroupOffsets:
    """Committed and pending offsets of one ``__consumer_offsets`` partition (the loader builds
    one, then hands it to the partition).  Not thread-safe: guarded by the partition's lock.

    ``cache``: group -> (topic, partition) -> committed :class:`OffsetAndMetadata`.
    ``positions``: group -> (topic, partition) -> log offset of the batch that holds the cached
    value (Kafka's ``appendedBatchOffset``).  ``pending``: producer id -> group -> (topic,
    partition) -> (value, log offset of its batch): transactional offsets awaiting their marker
    (Kafka's ``pendingTransactionalOffsetCommits``).  ``groups``: group -> its latest group
    metadata value, filled while loading (a tombstone removes the group) and handed to the group
    listeners; the group coordinator keeps the live state afterwards.
    """

    __slots__ = ("cache", "positions", "pending", "groups")

    def __init__(self):
        self.cache: dict[str, dict[tuple[str, int], OffsetAndMetadata]] = {}
        self.positions: dict[str, dict[tuple[str, int], int]] = {}
        self.pending: dict[int, dict[str, dict[tuple[str, int], tuple[OffsetAndMetadata, int]]]] = {}
        self.groups: dict[str, GroupMetadataValue] = {}

    def put(self, group: str, tp: tuple[str, int], value: OffsetAndMetadata | None, position: int) -> None:
        """A committed offset (None: a tombstone) written at ``position``."""
        if value is None:
            self.remove(group, [tp])
            return
        self.cache.setdefault(group, {})[tp] = value
        self.positions.setdefault(group, {})[tp] = position

    def put_if_newer(self, group: str, tp: tuple[str, int], value: OffsetAndMetadata, position: int) -> None:
        """A committed offset replicated at ``position``: cached unless a later record's value is
        (commits of one partition may finish replicating in any order)."""
        current = self.positions.get(group, {}).get(tp)
        if current is None or current < position:
            self.put(group, tp, value, position)

    def remove(self, group: str, tps) -> None:
        cache = self.cache.get(group)
        positions = self.positions.get(group)
        for tp in tps:
            if cache is not None:
                cache.pop(tp, None)
            if positions is not None:
                positions.pop(tp, None)
        if cache is not None and not cache:
            del self.cache[group]
        if positions is not None and not positions:
            del self.positions[group]

    def put_pending(
        self, producer_id: int, group: str, tp: tuple[str, int], value: OffsetAndMetadata | None, position: int
    ) -> None:
        """A transactional offset of ``producer_id`` (None: a transactional tombstone)."""
        by_group = self.pending.setdefault(producer_id, {})
        offsets = by_group.setdefault(group, {})
        if value is None:
            offsets.pop(tp, None)
        else:
            offsets[tp] = (value, position)

    def complete(self, producer_id: int, commit: bool) -> int:
        """The marker of ``producer_id``'s transaction: materialise (commit) or drop (abort) its
        pending offsets; a pending offset loses to a committed one written later in the log.
        Returns how many offsets became committed."""
        by_group = self.pending.pop(producer_id, None)
        if not by_group or not commit:
            return 0
        n = 0
        for group, offsets in by_group.items():
            positions = self.positions.get(group, {})
            for tp, (value, position) in offsets.items():
                current = positions.get(tp)
                if current is None or current < position:
                    self.put(group, tp, value, position)
                    n += 1
        return n

    def pending_of(self, producer_id: int) -> dict:
        return {g: {tp: v for tp, (v, _) in offs.items()} for g, offs in self.pending.get(producer_id, {}).items()}


class _OffsetsPartition(CoordinatorPartition):
    """One ``__consumer_offsets`` partition this broker leads: load state and coordinator epoch
    (:class:`CoordinatorPartition`) and the offsets cache."""

    __slots__ = ("offsets", "lock")

    def __init__(self, partition: int, coordinator_epoch: int = 0, lock: threading.Lock | None = None):
        super().__init__(partition, coordinator_epoch)
        self.offsets = _GroupOffsets()
        # serialises append + cache update; one lock per partition number for the manager's life, so
        # a commit still holding the object of an older epoch and the reload at the new epoch
        # serialise too (the reload's last read of the log sees that commit, or the commit fails)
        self.lock = lock if lock is not None else threading.Lock()

    @property
    def cache(self) -> dict[str, dict[tuple[str, int], OffsetAndMetadata]]:
        return self.offsets.cache


class GroupListener(Protocol):
    """Who keeps the live state of the groups whose metadata records an offsets partition holds
    (the group coordinator), told when this broker starts and stops serving a partition."""

    def groups_loaded(self, partition: int, groups: dict[str, GroupMetadataValue]) -> None:
        """``partition`` was loaded: ``groups`` maps each group with a metadata record (the latest,
        not deleted) to its value.  Called on the loader thread with the partition's lock and the
        runtime's lock held, before any request of the partition is served: must not call back into
        the offset manager, nor take a lock that is held while calling it."""
        ...

    def groups_unloaded(self, partition: int) -> None:
        """This broker no longer leads ``partition``: forget its groups.  Called on a ZooKeeper
        listener thread, no offset manager lock held."""
        ...


class OffsetManager(CoordinatorStateManager["_OffsetsPartition"]):
    """Committed offsets of consumer groups in ``__consumer_offsets`` (see the module docstring).

    ``log_manager`` is a :class:`broker.log.manager.LogManager`; ``cluster`` a started
    :class:`broker.zk.cluster.ZkCluster`.  ``num_partitions`` is ``offsets.topic.num.partitions``
    (an existing topic's own partition count wins, as in Kafka).
    """

    def __init__(
        self,
        log_manager,
        cluster,
        broker_id: int,
        *,
        num_partitions: int = 50,
        replication_factor: int = 1,
        segment_bytes: int = DEFAULT_OFFSETS_SEGMENT_BYTES,
        metadata_max_bytes: int = DEFAULT_METADATA_MAX_BYTES,
        load_buffer_bytes: int = 5 * 1024 * 1024,
        replication: CoordinatorPartitionWriter | None = None,
    ):
        if num_partitions <= 0:
            raise ValueError(f"offsets.topic.num.partitions must be positive, got {num_partitions}")
        self.log_manager = log_manager
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.replication_factor = int(replication_factor)
        self.segment_bytes = int(segment_bytes)
        self.metadata_max_bytes = int(metadata_max_bytes)
        self.load_buffer_bytes = int(load_buffer_bytes)
        #: leadership, loading and the per-request checks of the offsets partitions (shared with the
        #: transaction state manager)
        self.runtime: CoordinatorPartitions[_OffsetsPartition] = CoordinatorPartitions(
            OFFSETS_TOPIC,
            log_manager,
            cluster,
            self.broker_id,
            num_partitions=num_partitions,
            replication_factor=self.replication_factor,
            topic_configs={
                "cleanup.policy": "compact",
                "segment.bytes": str(self.segment_bytes),
                "compression.type": "producer",
            },
            new_partition=self._new_partition,
            load=self._load,
            on_unloaded=self._on_unloaded,
            loader_name=f"offsets-loader-{self.broker_id}",
            coordinator_name="coordinator",
        )
        self._lock = self.runtime.lock
        self._partitions = self.runtime.partitions
        self._partition_locks: dict[int, threading.Lock] = {}
        #: the acks=all path (the server's CoordinatorAppends, built with the replica manager);
        #: None (unit tests without a replica manager): appends are answered at once
        self.replication: CoordinatorPartitionWriter | None = replication
        self._group_listeners: list[GroupListener] = []

    def add_group_listener(self, listener: GroupListener) -> None:
        """Hand ``listener`` the group metadata of every offsets partition loaded from now on, and
        tell it when a partition is dropped.  Register before :meth:`startup`."""
        self._group_listeners.append(listener)

    def _on_unloaded(self, part: _OffsetsPartition) -> None:
        """The runtime's ``on_unloaded`` hook: the group listeners forget the partition's groups,
        unless this broker still leads it at a new leader epoch (a follower left the ISR): then it
        is reloaded, and the groups it coordinated all along stay as they are (Kafka keeps its group
        cache when it is elected again without resigning)."""
        if self.runtime.get(part.partition) is not None:
            return
        for listener in list(self._group_listeners):
            listener.groups_unloaded(part.partition)

    def _install(self, part: _OffsetsPartition, loaded: _GroupOffsets) -> None:
        """The load's last step (under the partition's and the runtime's locks, the partition still
        LOADING): the offsets cache goes in place and the group listeners get the groups."""
        part.offsets = loaded
        groups, loaded.groups = loaded.groups, {}
        for listener in list(self._group_listeners):
            try:
                listener.groups_loaded(part.partition, dict(groups))
            except Exception:  # noqa: BLE001 - the offsets stay served; the groups start afresh
                log.exception("%s-%d: handing over the loaded groups failed", OFFSETS_TOPIC, part.partition)

    def _new_partition(self, partition: int, coordinator_epoch: int) -> _OffsetsPartition:
        """The runtime's ``new_partition`` hook (under the runtime's lock)."""
        lock = self._partition_locks.setdefault(partition, threading.Lock())
        return _OffsetsPartition(partition, coordinator_epoch, lock)

    @property
    def _synced(self) -> bool:
        return self.runtime.synced

    # ------------------------------------------------------------------ coordinator lookup
    # (lifecycle, partition_for, wait_loaded: CoordinatorStateManager)

    def coordinator_for(self, group: str) -> int | None:
        """The broker id coordinating ``group`` (creating ``__consumer_offsets`` on first use);
        None when its partition has no live leader (COORDINATOR_NOT_AVAILABLE)."""
        if group is None:
            raise InvalidGroupIdError("group id must not be null")
        return self.runtime.coordinator_for(group)

    def is_loading(self, group: str | None = None) -> bool:
        """True while any (or ``group``'s) led offsets partition is still loading."""
        return self.runtime.is_loading(group)

    def _partition_for_request(self, group: str) -> _OffsetsPartition:
        if group is None:
            raise InvalidGroupIdError("group id must not be null")
        return self.runtime.partition_for_request(group, f"group {group!r}", loading_note=f" (group {group!r})")

    # ------------------------------------------------------------------ commit / fetch

    def _validate_offsets(self, offsets: dict, now: int) -> tuple[dict, dict]:
        """``(errors, valid)``: per-partition error codes and the storable :class:`OffsetAndMetadata`
        (OFFSET_METADATA_TOO_LARGE over ``metadata_max_bytes``, UNKNOWN_TOPIC_OR_PARTITION for a
        partition not in the cluster's metadata)."""
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
                int(offset), NO_LEADER_EPOCH if epoch is None else int(epoch), metadata, now
            )
        return results, valid

    def commit(self, group: str, offsets: dict, *, commit_timestamp: int | None = None) -> dict:
        """Blocking form of :meth:`commit_async` (tests, tools): returns its result."""
        return self._blocking(
            lambda done: self.commit_async(group, offsets, done, commit_timestamp=commit_timestamp), offsets
        )

    def commit_async(self, group: str, offsets: dict, done, *, commit_timestamp: int | None = None) -> None:
        """Store ``{(topic, partition): (offset, leader_epoch, metadata)}`` for ``group``; ``done(results)``
        gets ``{(topic, partition): error_code}`` (0 = stored).

        The offsets are appended to the group's ``__consumer_offsets`` partition as one record
        batch with acks=all (Kafka's ``storeOffsets``, ``offsets.commit.required.acks`` = -1): on a
        replicated partition ``done`` is called once the ISR has the batch -- from the completing
        thread, never blocking this one -- and only then does the cache (OffsetFetch) show the
        offsets, so an election cannot undo a commit a client saw acknowledged.  Errors, as Kafka
        maps them: NOT_ENOUGH_REPLICAS(_AFTER_APPEND), REQUEST_TIMED_OUT (not replicated within
        ``offsets.commit.timeout.ms``) -> COORDINATOR_NOT_AVAILABLE; NOT_LEADER_OR_FOLLOWER -> NOT_COORDINATOR;
        too large -> INVALID_COMMIT_OFFSET_SIZE.  Per partition: OFFSET_METADATA_TOO_LARGE,
        UNKNOWN_TOPIC_OR_PARTITION.  Raises NotCoordinatorError / CoordinatorLoadInProgressError for
        the whole request (before anything is appended).  Runs on a request handler thread.
        """
        self._commit_offsets(
            group,
            offsets,
            done,
            commit_timestamp,
            put=lambda cache, tp, v, position: cache.put_if_newer(group, tp, v, position),
            from_client=True,
            what="offset commit",
        )

    def _commit_offsets(
        self,
        group: str,
        offsets: dict,
        done,
        commit_timestamp: int | None,
        *,
        put: Callable,
        from_client: bool,
        what: str,
        batch_attrs: dict | None = None,
    ) -> None:
        """The commit path shared by OffsetCommit and TxnOffsetCommit: validate, build one batch
        (``batch_attrs``: a transactional batch's producer fields), append it with acks=all
        (:meth:`_store`), then ``put(offsets_cache, (topic, partition), value, position)`` each
        offset into the cache and answer ``done(results)``."""
        part = self._partition_for_request(group)
        now = int(time.time() * 1000) if commit_timestamp is None or commit_timestamp < 0 else int(commit_timestamp)
        results, valid = self._validate_offsets(offsets, now)
        if not valid:
            done(results)
            return
        try:
            batch = build_batch(
                [(encode_offset_key(group, t, p), encode_offset_value(v), now, ()) for (t, p), v in valid.items()],
                **(batch_attrs or {}),
            )
        except PyklogError as e:
            results.update(dict.fromkeys(valid, e.code))
            done(results)
            return

        def install(position: int) -> None:
            for tp, v in valid.items():
                put(part.offsets, tp, v, position)

        self._store(part, group, batch, valid, results, install, done, from_client=from_client, what=what)

    def _blocking(self, start, offsets: dict) -> dict:
        """Run an ``*_async`` store and wait for its result (bounded by the replication timeout)."""
        box: list = []
        ev = threading.Event()

        def done(results):
            box.append(results)
            ev.set()

        start(done)
        if not ev.wait(self._replication_timeout_s() + 5.0):
            return dict.fromkeys(offsets, CoordinatorNotAvailableError.code)
        return box[0]

    def _replication_timeout_s(self) -> float:
        repl = self.replication
        return (getattr(repl, "timeout_ms", 5000) or 5000) / 1000.0

    def _store(
        self,
        part: _OffsetsPartition,
        group: str,
        batch,
        valid: dict,
        results: dict,
        install,
        done,
        *,
        from_client: bool,
        what: str,
    ) -> None:
        """Append ``batch`` for ``valid``'s partitions, wait for the ISR, then ``install(position)``
        (under the partition's lock, still current or not: the record is replicated, a reload reads
        it) and ``done(results)``.  Errors go to every partition of ``valid``."""
        wait = None
        with part.lock:
            self._check_still_loaded(part, group)
            try:
                info, wait = self._append(part, batch, from_client=from_client)
            except (MessageTooLargeError, RecordListTooLargeError) as e:
                log.warning("%s of group %s too large: %s", what, group, e)
                results.update(dict.fromkeys(valid, InvalidCommitOffsetSizeError.code))
                done(results)
                return
            except PyklogError as e:
                e = coordinator_error_for(e, f"{what} of group {group!r}")
                log.info("%s of group %s failed: %s", what, group, e)
                results.update(dict.fromkeys(valid, e.code if e.code != -1 else UnknownServerError.code))
                done(results)
                return
            if wait is None:
                install(info.first_offset)
        if wait is None:
            results.update(dict.fromkeys(valid, 0))
            done(results)
            return
        position = info.first_offset

        def replicated(error) -> None:
            if error is not None:
                error = coordinator_error_for(error, f"{what} of group {group!r}")
                log.info("%s of group %s not acknowledged: %s", what, group, error)
                results.update(dict.fromkeys(valid, error.code))
            else:
                with part.lock:
                    install(position)
                results.update(dict.fromkeys(valid, 0))
            done(results)

        self.replication.await_replicated(wait, replicated)

    def _append(self, part: _OffsetsPartition, batch, *, from_client: bool = False):
        """Under ``part.lock``: append to the partition at its coordinator epoch; ``(AppendInfo,
        ReplicaWait | None)`` (None: no replication wait, the single-broker path)."""
        if self.replication is None:
            return self.runtime.log(part.partition).append(batch, from_client=from_client), None
        return self.replication.append(
            OFFSETS_TOPIC, part.partition, batch, leader_epoch=part.coordinator_epoch, from_client=from_client
        )

    def _check_still_loaded(self, part: _OffsetsPartition, group: str) -> None:
        """Under ``part.lock``: the partition is still ours and loaded (else NOT_COORDINATOR)."""
        if not self.runtime.is_current(part):
            raise NotCoordinatorError(
                f"broker {self.broker_id} lost {OFFSETS_TOPIC}-{part.partition} while committing for {group!r}"
            )

    # ------------------------------------------------------------------ transactional offsets (KIP-98)

    def commit_transactional(
        self, group: str, producer_id: int, producer_epoch: int, offsets: dict, *, commit_timestamp: int | None = None
    ) -> dict:
        """Blocking form of :meth:`commit_transactional_async` (tests, tools)."""
        return self._blocking(
            lambda done: self.commit_transactional_async(
                group, producer_id, producer_epoch, offsets, done, commit_timestamp=commit_timestamp
            ),
            offsets,
        )

    def commit_transactional_async(
        self,
        group: str,
        producer_id: int,
        producer_epoch: int,
        offsets: dict,
        done,
        *,
        commit_timestamp: int | None = None,
    ) -> None:
        """TxnOffsetCommit: store ``{(topic, partition): (offset, leader_epoch, metadata)}`` for
        ``group`` inside the transaction of ``producer_id`` (Kafka's ``storeOffsets`` with a producer id);
        ``done(results)`` as :meth:`commit_async`.

        Runs on a request handler thread; takes the offsets partition's lock around the append.
        The offsets are appended to the group's ``__consumer_offsets`` partition as one
        *transactional* batch (the producer's id and epoch, no sequence number,
        ``from_client=False``: a coordinator's append) with acks=all, and once the ISR has it kept
        pending for the producer: OffsetFetch does not return them until :meth:`complete_transaction`
        runs for the COMMIT marker.  Per partition OFFSET_METADATA_TOO_LARGE and
        UNKNOWN_TOPIC_OR_PARTITION as :meth:`commit_async`; the log's INVALID_PRODUCER_EPOCH (a fenced
        producer) and the replication errors (mapped as :meth:`commit_async`) for all.  Raises
        InvalidGroupIdError (empty group id), NotCoordinatorError, CoordinatorLoadInProgressError
        for the whole request.
        """
        if not group:
            raise InvalidGroupIdError(f"a transactional offset commit needs a non-empty group id, got {group!r}")
        pid = int(producer_id)
        self._commit_offsets(
            group,
            offsets,
            done,
            commit_timestamp,
            put=lambda cache, tp, v, position: cache.put_pending(pid, group, tp, v, position),
            from_client=False,
            what=f"transactional offset commit (producer {producer_id} epoch {producer_epoch})",
            batch_attrs={
                "producer_id": pid,
                "producer_epoch": int(producer_epoch),
                "base_sequence": TXN_OFFSET_BASE_SEQUENCE,
                "is_transactional": True,
            },
        )

    def complete_transaction(self, partition: int, producer_id: int, commit: bool) -> int:
        """The COMMIT (``commit``) or ABORT marker of ``producer_id`` is in ``__consumer_offsets``
        partition ``partition``: its pending offsets there become committed or are dropped (Kafka's
        ``GroupMetadataManager.handleTxnCompletion``).  Call only after the marker's append
        returned.  Runs on a request handler thread (WriteTxnMarkers); takes the partition's lock.
        Returns how many offsets became committed.  A partition this broker does not lead, or that
        is still loading (the loader reads the marker from the log), is left alone.
        """
        part = self.runtime.get(partition)
        if part is None:
            log.debug(
                "marker of producer %d on %s-%d: not a partition this broker leads",
                producer_id,
                OFFSETS_TOPIC,
                partition,
            )
            return 0
        with part.lock:
            if part.state != LOADED:
                return 0  # the loader reads the marker (appended before this call) from the log
            n = part.offsets.complete(int(producer_id), bool(commit))
        if n:
            log.debug(
                "%s-%d: transaction of producer %d committed %d offsets", OFFSETS_TOPIC, partition, producer_id, n
            )
        return n

    def pending_offsets(self, group: str, producer_id: int) -> dict:
        """``{(topic, partition): OffsetAndMetadata}`` that ``producer_id``'s open transaction holds
        for ``group`` (empty when none): for tests and diagnostics."""
        part = self._partition_for_request(group)
        with part.lock:
            return dict(part.offsets.pending_of(int(producer_id)).get(group, {}))

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

    def fetch_stable(self, group: str, partitions: Iterable[tuple[str, int]] | None = None) -> tuple[dict, set]:
        """OffsetFetch with RequireStable (v7+, KIP-447): ``(offsets, unstable)`` where ``offsets``
        is :meth:`fetch`'s answer and ``unstable`` the requested partitions (with ``partitions``
        None: the committed ones) for which an open transaction of any producer holds a pending
        offset of ``group`` (Kafka's ``GroupMetadata.hasPendingOffsetCommitsForTopicPartition``;
        the broker answers them UNSTABLE_OFFSET_COMMIT so a read_committed consumer retries until
        the transaction's marker).  Runs on a request handler thread; one snapshot under the
        offsets partition's lock."""
        part = self._partition_for_request(group)
        with part.lock:
            cached = dict(part.cache.get(group, {}))
            pending = set()
            for by_group in part.offsets.pending.values():
                pending.update(by_group.get(group, ()))
        if partitions is None:
            out = {tp: (v.offset, v.leader_epoch, v.metadata) for tp, v in sorted(cached.items())}
        else:
            out = {}
            for tp in partitions:
                v = cached.get(tuple(tp))
                out[tuple(tp)] = (v.offset, v.leader_epoch, v.metadata) if v else (INVALID_OFFSET, NO_LEADER_EPOCH, "")
        return out, {tp for tp in out if tp in pending}

    def fetch_detailed(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Like :meth:`fetch` for all partitions, with commit timestamps."""
        part = self._partition_for_request(group)
        with part.lock:
            return dict(part.cache.get(group, {}))

    def groups(self) -> list[str]:
        """Groups with committed offsets in the loaded partitions this broker leads."""
        parts = self.runtime.loaded_partitions()
        out = set()
        for p in parts:
            with p.lock:
                out.update(g for g, c in p.cache.items() if c)
        return sorted(out)

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]], *, remove_group: bool = False) -> None:
        """Forget ``group``'s offsets for ``partitions``: tombstones (null values) that compaction
        removes; with ``remove_group`` the group's metadata record gets a tombstone in the same batch
        (a deleted or expired group, Kafka's ``cleanupGroupMetadata`` / ``deleteGroups``)."""
        part = self._partition_for_request(group)
        keys = [tuple(tp) for tp in partitions]
        if not keys and not remove_group:
            return
        now = int(time.time() * 1000)
        records = [(encode_offset_key(group, t, p), None, now, ()) for t, p in keys]
        if remove_group:
            records.append((encode_group_metadata_key(group), None, now, ()))
        batch = build_batch(records)
        with part.lock:
            self._append(part, batch)  # not waited for: a lost tombstone leaves the offsets to expiry
            part.offsets.remove(group, keys)

    # ------------------------------------------------------------------ group metadata

    def store_group_async(self, group: str, value: bytes, done: Callable[[int], None]) -> None:
        """Append ``group``'s metadata record (``value``: an encoded group metadata value) to its
        ``__consumer_offsets`` partition with acks=all (Kafka's ``GroupMetadataManager.storeGroup``);
        ``done(error_code)`` (0: the ISR has it) from the completing thread.  Errors as Kafka maps
        them for a group write: a partition not led or loaded here, a lost leadership or a storage
        error NOT_COORDINATOR (or COORDINATOR_LOAD_IN_PROGRESS), too few replicas or a replication
        timeout COORDINATOR_NOT_AVAILABLE, a record too large UNKNOWN_SERVER_ERROR.  Never raises;
        call it without any group lock held (``done`` may run on this thread)."""
        try:
            part = self._partition_for_request(group)
            batch = build_batch([(encode_group_metadata_key(group), value, int(time.time() * 1000), ())])
        except PyklogError as e:
            done(e.code)
            return

        def finished(results: dict) -> None:
            code = results.get(group, UnknownServerError.code)
            done(UnknownServerError.code if code == InvalidCommitOffsetSizeError.code else code)

        try:
            self._store(part, group, batch, {group: None}, {}, lambda position: None, finished, from_client=False,
                        what="group metadata")  # fmt: skip
        except PyklogError as e:  # the partition moved before the append
            done(e.code)

    # ------------------------------------------------------------------ offset expiry (offsets.retention.minutes)

    def expire_group_offsets(
        self, group: str, now_ms: int, retention_ms: int, *, empty_since_ms: int | None = None
    ) -> tuple[int, int]:
        """Expire ``group``'s committed offsets older than ``retention_ms`` (Kafka's
        ``GroupMetadata.removeExpiredOffsets`` with ``offsets.retention.minutes``, KIP-211); returns
        (offsets expired, offsets left including pending transactional ones).

        Called by :meth:`GroupCoordinator.cleanup_group_metadata` (its scheduler thread) only for a
        group without members, with the group's lock held if the coordinator knows the group; takes
        the offsets partition's lock (lock order: group lock, then partition lock).  An offset's clock
        is its commit timestamp, or the time the group became empty (``empty_since_ms``) if later:
        a recent commit is never expired (Kafka would use the empty-since time alone).  Offsets
        with a pending transactional commit (TxnOffsetCommit awaiting its marker) are never expired.
        Expired offsets get tombstones in ``__consumer_offsets`` (:meth:`_append_tombstones`)
        before they leave the cache.  Raises NotCoordinatorError / CoordinatorLoadInProgressError
        when this broker does not (yet) serve the group's partition.
        """
        part = self._partition_for_request(group)
        with part.lock:
            self._check_still_loaded(part, group)
            cache = part.cache.get(group, {})
            pending = {tp for by_group in part.offsets.pending.values() for tp in by_group.get(group, {})}
            base_floor = empty_since_ms if empty_since_ms is not None else -1
            expired = [
                tp
                for tp, v in cache.items()
                if tp not in pending and now_ms - max(v.commit_timestamp, base_floor) >= retention_ms
            ]
            if expired:
                self._append_tombstones(part, group, expired, now_ms)
            left = len(part.cache.get(group, {})) + len(pending)
        if expired:
            log.info(
                "group %s: expired %d committed offset(s) older than %d ms (%d left)",
                group,
                len(expired),
                retention_ms,
                left,
            )
        return len(expired), left

    def serves_group(self, group: str) -> bool:
        """True if this broker leads ``group``'s ``__consumer_offsets`` partition and has loaded it."""
        return self.runtime.get_loaded(self.partition_for(group)) is not None

    def _append_tombstones(self, part: _OffsetsPartition, group: str, keys: list, now_ms: int) -> None:
        """Under ``part.lock``: write one batch of tombstones (null values, which compaction later
        removes) for ``group``'s ``keys`` to its ``__consumer_offsets`` partition, then drop them from
        the cache.  The single path by which the coordinator itself forgets committed offsets."""
        batch = build_batch([(encode_offset_key(group, t, p), None, now_ms, ()) for t, p in keys])
        self._append(part, batch)  # not waited for: a lost tombstone is written again at the next expiry
        part.offsets.remove(group, keys)

    # ------------------------------------------------------------------ leadership and loading

    def _load(self, part: _OffsetsPartition) -> None:
        """Read the partition's log into fresh offsets (Kafka's ``loadGroupsAndOffsets``): plain
        commits in log order (the latest per key wins), transactional batches pending per producer,
        control batches completing them.  Runs on the loader thread (or the caller's, for an empty
        partition); the last stretch of the log is read, and the partition marked loaded, under the
        partition's lock (see the module docstring).  The runtime's ``load`` hook: an exception
        marks the partition FAILED (COORDINATOR_NOT_AVAILABLE for its groups)."""
        started = time.monotonic()
        loaded = _GroupOffsets()
        counts = [0, 0]  # records, markers
        lg = self.runtime.log(part.partition, apply_config=True)
        offset = self._replay(part, lg, lg.log_start_offset, lg.log_end_offset, loaded, counts)
        if offset is None:
            return  # leadership moved while loading
        with part.lock:
            # markers may have been appended meanwhile: read them here, where complete_transaction waits
            offset = self._replay(part, lg, offset, lg.log_end_offset, loaded, counts)
            n_groups = len(loaded.groups)
            if offset is None or not self.runtime.mark_loaded(part, lambda: self._install(part, loaded)):
                return
        pending = sum(len(offs) for by_group in loaded.pending.values() for offs in by_group.values())
        log.info(
            "loaded %s-%d: offsets of %d groups and metadata of %d groups from %d records and %d transaction "
            "markers in %.3fs (%d offsets of %d producers pending)",
            OFFSETS_TOPIC,
            part.partition,
            len(loaded.cache),
            n_groups,
            counts[0],
            counts[1],
            time.monotonic() - started,
            pending,
            len(loaded.pending),
        )

    def _replay(
        self, part: _OffsetsPartition, lg, offset: int, end: int, loaded: _GroupOffsets, counts: list
    ) -> int | None:
        """Apply the batches of ``lg`` from ``offset`` up to ``end`` to ``loaded``; returns the next
        offset to read, or None when the partition is no longer ours."""
        while offset < end:
            if not self.runtime.owns(part):
                return None
            buf = lg.read(offset, self.load_buffer_bytes).read_bytes()
            next_offset = offset
            for batch in iter_batches(buf):
                next_offset = batch.next_offset
                if batch.is_control:
                    try:
                        ctype = batch.control_type
                    except PyklogError as e:
                        log.warning(
                            "%s-%d offset %d: skipping an unreadable control record: %s",
                            OFFSETS_TOPIC,
                            part.partition,
                            batch.base_offset,
                            e,
                        )
                        continue
                    if ctype is not None:
                        counts[1] += 1
                        loaded.complete(batch.producer_id, ctype == CONTROL_COMMIT)
                    continue
                pid = batch.producer_id if batch.is_transactional else None
                for rec in batch.records:
                    counts[0] += 1
                    self._apply(loaded, rec.key, rec.value, part.partition, rec.offset, batch.base_offset, pid)
            if next_offset <= offset:
                break
            offset = next_offset
        return offset

    @staticmethod
    def _apply(
        loaded: _GroupOffsets, key, value, partition: int, offset: int, position: int, producer_id: int | None
    ) -> None:
        try:
            k = decode_offset_key(key)
            if k is None:  # group metadata (Kafka's GroupMetadataManager.loadGroupsAndOffsets)
                group = decode_group_metadata_key(key)
                if value is None:
                    loaded.groups.pop(group, None)
                else:
                    loaded.groups[group] = decode_group_metadata_value(value)
                return
            group, topic, p = k
            v = None if value is None else decode_offset_value(value)
            if producer_id is None:
                loaded.put(group, (topic, p), v, position)
            else:
                loaded.put_pending(producer_id, group, (topic, p), v, position)
        except (ValueError, UnicodeDecodeError) as e:
            log.warning("%s-%d offset %d: skipping an unreadable record: %s", OFFSETS_TOPIC, partition, offset, e)
