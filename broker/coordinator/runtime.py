"""The partitions of an internal coordinator topic this broker leads: the part shared by the offset
manager (``__consumer_offsets``, :mod:`pyklog.broker.coordinator.offsets`) and the transaction state
manager (``__transaction_state``, :mod:`pyklog.broker.coordinator.transaction.state_manager`).

Kafka's name for this: the loading half of ``GroupMetadataManager`` / ``TransactionStateManager``
(``onElection`` / ``onResignation``, ``loadingPartitions``, ``ownedPartitions``, the coordinator
epoch), unified in newer Kafka as the ``CoordinatorRuntime``.  :class:`CoordinatorPartitions` is a
helper object each manager *composes* (it is not a base class); the managers keep only their own
records and caches and plug in through hooks:

* ``new_partition(partition, coordinator_epoch)``: the manager's per-partition object, a
  subclass of :class:`CoordinatorPartition` (its cache lives there);
* ``load(part)``: read the partition's log into a fresh cache and install it with
  :meth:`CoordinatorPartitions.mark_loaded` (on the loader thread; an exception marks it FAILED);
* ``on_unloaded(part)``: after the partition was dropped (resignation or a new epoch);
* ``topic_configs``: the configs the topic is created with on first use.

Lifecycle of one partition (:class:`LoadState`, its moves in :data:`VALID_PREVIOUS`): this broker becomes its leader (the ZkCluster listener reports a
state with ``leader == broker_id``; at start-up, on topic creation, and on any later change of the
leader or of the leader epoch, e.g. by the controller) -> a new partition object in LOADING with
``coordinator_epoch`` = the ZooKeeper leader epoch, queued for the loader thread (an empty log is
loaded inline: no load-in-progress window) -> LOADED (or FAILED with the error) -> this broker is
no longer its leader, or its leader epoch changed -> dropped from the table, ``on_unloaded``
called, and for a new epoch with this broker still leader a fresh object loads again.  A request
for a key raises NOT_COORDINATOR (partition not in the table), COORDINATOR_LOAD_IN_PROGRESS
(LOADING) or COORDINATOR_NOT_AVAILABLE (FAILED) through :meth:`CoordinatorPartitions.partition_for_request`.

Threads: the cluster listeners run on kazoo's callback threads, loading on one daemon thread per
runtime (``loader_name``), requests on the request handler threads.

Locking rule: :attr:`CoordinatorPartitions.lock` (an RLock) guards the partition table and every
partition's ``state``/``error``; it is held only for table lookups and state changes, never while
reading or appending to a log, and never while calling a hook (``load`` and ``on_unloaded`` run
without it).  A manager may take it inside its own per-partition lock (the offset manager's
``part.lock`` -> ``lock`` order), never the reverse.  A partition object leaves the table whole: a
holder of a stale object finds out with :meth:`CoordinatorPartitions.owns` /
:meth:`CoordinatorPartitions.is_current`.
"""

from __future__ import annotations

import enum
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Generic, TypeVar

from pyklog.broker.common.retry import Deadline
from pyklog.broker.common.state_machine import check_transition
from pyklog.broker.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
    PyklogError,
    TopicAlreadyExistsError,
)

log = logging.getLogger(__name__)


class LoadState(enum.StrEnum):
    """Where a led coordinator-topic partition is in its load (a ``str`` enum: a state compares equal
    to its lower-case name, as the plain strings it replaces did)."""

    LOADING = "loading"  # led here; its log is being read (COORDINATOR_LOAD_IN_PROGRESS)
    LOADED = "loaded"  # its cache is installed: requests are served
    FAILED = "failed"  # the load hook raised (COORDINATOR_NOT_AVAILABLE until leadership moves)


#: state -> the states it may be entered from (the project's one idiom,
#: :mod:`pyklog.broker.common.state_machine`).  A partition object starts LOADING and never goes
#: back (a new leader epoch makes a new object).  FAILED may follow LOADED: a load hook that raises
#: after installing its cache marks the partition failed.
VALID_PREVIOUS: Mapping[LoadState, frozenset] = MappingProxyType(
    {
        LoadState.LOADING: frozenset(),
        LoadState.LOADED: frozenset({LoadState.LOADING}),
        LoadState.FAILED: frozenset({LoadState.LOADING, LoadState.LOADED}),
    }
)

LOADING, LOADED, FAILED = LoadState.LOADING, LoadState.LOADED, LoadState.FAILED


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


def partition_for_key(key: str, num_partitions: int) -> int:
    """Kafka's ``partitionFor(groupId | transactionalId)``: identical in every process."""
    return kafka_abs(java_string_hash(key)) % num_partitions


# ---------------------------------------------------------------------------- partitions


class CoordinatorPartition:
    """One led partition of a coordinator topic: its number, the coordinator epoch it was elected
    with (the ZooKeeper leader epoch), its load state and the load error.  Managers subclass it to
    add their cache.  ``state``/``error`` are guarded by the runtime's lock."""

    __slots__ = ("partition", "coordinator_epoch", "state", "error")

    def __init__(self, partition: int, coordinator_epoch: int = 0):
        self.partition = partition
        self.coordinator_epoch = coordinator_epoch
        self.state = LOADING
        self.error: str | None = None

    def transition_to(self, state: LoadState) -> None:
        """Enter ``state``; :class:`~pyklog.broker.common.state_machine.IllegalTransitionError` (state
        unchanged) unless :data:`VALID_PREVIOUS` allows it.  The caller holds the runtime's lock."""
        check_transition(VALID_PREVIOUS, self.state, state, f"coordinator partition {self.partition}")
        self.state = state


P = TypeVar("P", bound=CoordinatorPartition)


class CoordinatorPartitions(Generic[P]):
    """The led partitions of ``topic`` and their loading (see the module docstring).

    ``log_manager`` is a :class:`broker.log.LogManager`, ``cluster`` a started
    :class:`broker.zk.cluster.ZkCluster` (both may be None for a cache-only unit test that never
    calls :meth:`startup`).  ``coordinator_name`` words the errors ("coordinator",
    "transaction coordinator").
    """

    def __init__(
        self,
        topic: str,
        log_manager,
        cluster,
        broker_id: int,
        *,
        num_partitions: int,
        replication_factor: int,
        topic_configs: dict[str, str],
        new_partition: Callable[[int, int], P],
        load: Callable[[P], None],
        on_unloaded: Callable[[P], None] | None = None,
        loader_name: str = "coordinator-loader",
        coordinator_name: str = "coordinator",
    ):
        self.topic = topic
        self.log_manager = log_manager
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.num_partitions = int(num_partitions)
        self.replication_factor = int(replication_factor)
        self.topic_configs = dict(topic_configs)
        self.new_partition = new_partition
        self.load_hook = load
        self.on_unloaded = on_unloaded
        self.loader_name = loader_name
        self.coordinator_name = coordinator_name
        self.lock = threading.RLock()
        #: partition -> led partition object; replaced entries leave whole (never reassigned: the
        #: managers expose this very dict)
        self.partitions: dict[int, P] = {}
        self.synced = False  # leadership of an existing topic has been looked at
        self._queue: queue.Queue = queue.Queue()
        self._loader: threading.Thread | None = None
        self._running = False

    # ------------------------------------------------------------------ lifecycle

    def startup(self) -> None:
        """Start the loader thread and follow leadership of the topic's partitions (cluster
        listener, and the partition-state listener where the ZkCluster has one); loads the
        partitions led now.  The topic itself is created on first use (:meth:`ensure_topic`)."""
        with self.lock:
            if self._running:
                return
            self._running = True
            self._loader = threading.Thread(target=self._load_loop, name=self.loader_name, daemon=True)
            self._loader.start()
        self.cluster.add_listener(self._on_cluster_change)
        add_state_listener = getattr(self.cluster, "add_partition_state_listener", None)
        if add_state_listener is not None:
            add_state_listener(self._on_partition_state)
        self.sync_leadership()

    def shutdown(self) -> None:
        """Stop following leadership, stop the loader (waits up to 30 s), forget every partition
        (no ``on_unloaded``: the whole broker stops)."""
        with self.lock:
            if not self._running:
                return
            self._running = False
        self.cluster.remove_listener(self._on_cluster_change)
        remove_state_listener = getattr(self.cluster, "remove_partition_state_listener", None)
        if remove_state_listener is not None:
            remove_state_listener(self._on_partition_state)
        self._queue.put(None)
        if self._loader is not None:
            self._loader.join(30)
        with self.lock:
            self.partitions.clear()

    def ensure_topic(self) -> None:
        """Create the topic (``topic_configs``, ``replication_factor`` replicas) unless it exists,
        then load the partitions this broker now leads inline; COORDINATOR_NOT_AVAILABLE if it cannot
        be created (fewer live brokers than the replication factor, as Kafka 2.x: never created
        with fewer replicas than configured; the client retries FindCoordinator).
        Caller's thread (a request handler)."""
        if self.synced and self.cluster.topic(self.topic, refresh_if_missing=False) is not None:
            return
        created = False
        if self.cluster.topic(self.topic) is None:
            live = len(self.cluster.live_brokers())
            if live < self.replication_factor:
                # Kafka 2.x (KafkaApis.createInternalTopic): never created with fewer replicas than
                # configured; the client retries FindCoordinator until enough brokers are up
                raise CoordinatorNotAvailableError(
                    f"cannot create {self.topic} yet: {live} live broker(s), its replication factor is "
                    f"{self.replication_factor}"
                )
            try:
                self.cluster.create_topic(
                    self.topic,
                    self.num_partitions,
                    replication_factor=self.replication_factor,
                    configs=dict(self.topic_configs),
                )
                created = True
                log.info("created %s with %d partitions", self.topic, self.num_partitions)
            except TopicAlreadyExistsError:
                pass
            except PyklogError as e:
                raise CoordinatorNotAvailableError(f"cannot create {self.topic}: {e}") from e
        self.sync_leadership(load_inline=True)
        if created:
            # the new (empty) partitions may be loading on the listener's thread: they are ready at once
            self.wait_loaded(10.0)

    # ------------------------------------------------------------------ lookups

    def partition_for(self, key: str) -> int:
        return partition_for_key(key, self.num_partitions)

    def coordinator_for(self, key: str) -> int | None:
        """The broker leading ``key``'s partition (creating the topic on first use); None when it
        has no live leader (COORDINATOR_NOT_AVAILABLE)."""
        self.ensure_topic()
        parts = self.cluster.topic(self.topic, refresh_if_missing=False) or {}
        state = parts.get(self.partition_for(key))
        if state is None or state.leader < 0:
            return None
        return state.leader

    def get(self, partition: int) -> P | None:
        """The led partition object (any state), or None."""
        with self.lock:
            return self.partitions.get(int(partition))

    def get_loaded(self, partition: int) -> P | None:
        """The led partition object if LOADED, else None."""
        with self.lock:
            part = self.partitions.get(int(partition))
            return part if part is not None and part.state == LOADED else None

    def loaded_partitions(self) -> list[P]:
        with self.lock:
            return [p for p in self.partitions.values() if p.state == LOADED]

    def owns(self, part: P) -> bool:
        """``part`` is still the table's object for its partition (not resigned, no newer epoch)."""
        with self.lock:
            return self.partitions.get(part.partition) is part

    def is_current(self, part: P) -> bool:
        """:meth:`owns` and LOADED."""
        with self.lock:
            return self.partitions.get(part.partition) is part and part.state == LOADED

    def is_loading(self, key: str | None = None) -> bool:
        """True while any (or ``key``'s) led partition is still loading."""
        with self.lock:
            if key is not None:
                part = self.partitions.get(self.partition_for(key))
                return part is not None and part.state == LOADING
            return any(p.state == LOADING for p in self.partitions.values())

    def wait_loaded(self, timeout: float = 30.0) -> bool:
        """Poll (every 20 ms, caller's thread) until no led partition is loading; False after
        ``timeout`` seconds."""
        deadline = Deadline.after(timeout)
        while self.is_loading():
            if deadline.expired():
                return False
            time.sleep(min(0.02, deadline.remaining()))
        return True

    def partition_for_request(self, key: str, what: str, *, loading_note: str = "") -> P:
        """The led, loaded partition of ``key`` or the request's error (Kafka's checks before a
        coordinator serves a key): NotCoordinatorError when another broker leads it,
        CoordinatorLoadInProgressError while it loads, CoordinatorNotAvailableError when its load
        failed.  ``what`` names the key in the error ("group 'g'", "'txn-id'")."""
        p = self.partition_for(key)
        with self.lock:
            part = self.partitions.get(p)
        if part is None:
            raise NotCoordinatorError(
                f"broker {self.broker_id} is not the {self.coordinator_name} of {what} "
                f"({self.topic}-{p} is led elsewhere)"
            )
        if part.state == LOADING:
            raise CoordinatorLoadInProgressError(
                f"broker {self.broker_id} is still loading {self.topic}-{p}{loading_note}"
            )
        if part.state == FAILED:
            raise CoordinatorNotAvailableError(
                f"loading {self.topic}-{p} failed on broker {self.broker_id}: {part.error}"
            )
        return part

    # ------------------------------------------------------------------ leadership

    def _on_cluster_change(self) -> None:
        try:
            self.sync_leadership()
        except Exception:  # noqa: BLE001 - a listener must not raise into kazoo
            log.exception("%s partition leadership update failed", self.topic)

    def _on_partition_state(self, topic: str, partition: int) -> None:
        if topic == self.topic:
            self._on_cluster_change()

    def sync_leadership(self, load_inline: bool = False) -> None:
        """Compare the cluster's view of the topic with the table (Kafka's ``onElection`` /
        ``onResignation``): drop partitions no longer led here or led at another epoch (then
        ``on_unloaded``), add and load those newly led (in the background unless ``load_inline``
        or the log is empty).  Any thread; idempotent."""
        parts = self.cluster.topic(self.topic, refresh_if_missing=False)
        led: dict[int, int] = {}
        if parts:
            self.synced = True
            self.num_partitions = len(parts)
            led = {p: s.leader_epoch for p, s in parts.items() if s.leader == self.broker_id}
        to_load, dropped = [], []
        with self.lock:
            if not self._running:
                return
            for p in sorted(self.partitions):
                old = self.partitions[p]
                if p not in led or led[p] != old.coordinator_epoch:
                    if p in led:
                        log.info(
                            "%s-%d: leader epoch %d -> %d: reloading its %s cache",
                            self.topic,
                            p,
                            old.coordinator_epoch,
                            led[p],
                            self.coordinator_name,
                        )
                    else:
                        log.info(
                            "no longer the %s of %s-%d at epoch %d: dropping its cache",
                            self.coordinator_name,
                            self.topic,
                            p,
                            old.coordinator_epoch,
                        )
                    del self.partitions[p]
                    dropped.append(old)
            for p in sorted(set(led) - set(self.partitions)):
                part = self.new_partition(p, led[p])
                self.partitions[p] = part
                to_load.append(part)
        for old in dropped:
            if self.on_unloaded is not None:
                try:
                    self.on_unloaded(old)
                except Exception:  # noqa: BLE001
                    log.exception("unloading %s-%d failed", self.topic, old.partition)
        for part in to_load:
            existing = self.log_manager.get_log(self.topic, part.partition)
            empty = existing is None or existing.log_end_offset == existing.log_start_offset
            if load_inline or empty:
                self._load(part)  # nothing (or a caller that waits anyway): no load-in-progress window
            else:
                self._queue.put(part)

    # ------------------------------------------------------------------ loading

    def _load_loop(self) -> None:
        while True:
            part = self._queue.get()
            if part is None:
                return
            self._load(part)

    def _load(self, part: P) -> None:
        """Run the ``load`` hook for ``part`` if it is still ours and LOADING; an exception marks
        it FAILED (COORDINATOR_NOT_AVAILABLE for its keys) and never kills the loader thread."""
        with self.lock:
            if self.partitions.get(part.partition) is not part or part.state != LOADING:
                return
        try:
            self.load_hook(part)
        except Exception as e:  # noqa: BLE001 - a broken log must not kill the loader thread
            log.exception("loading %s-%d failed", self.topic, part.partition)
            with self.lock:
                part.error = f"{type(e).__name__}: {e}"
                part.transition_to(FAILED)

    def mark_loaded(self, part: P, install: Callable[[], None] | None = None) -> bool:
        """Under the lock: if ``part`` is still ours, run ``install()`` (put the loaded cache in
        place) and mark it LOADED; False (nothing installed) when leadership moved meanwhile."""
        with self.lock:
            if self.partitions.get(part.partition) is not part:
                return False
            if install is not None:
                install()
            part.transition_to(LOADED)
            return True

    def log(self, partition: int, *, apply_config: bool = False):
        """The partition's log; with ``apply_config`` (at load) create it or make sure it runs with
        the topic's config (compaction), whatever config the LogManager opened it with."""
        if not apply_config:
            existing = self.log_manager.get_log(self.topic, partition)
            if existing is not None:
                return existing
        config = self.log_manager.default_config.with_overrides(self.cluster.topic_config(self.topic))
        return self.log_manager.get_or_create_log(self.topic, partition, config)


class CoordinatorStateManager(Generic[P]):
    """The base of a coordinator's state manager (the offset manager, the transaction state
    manager): lifecycle and lookups answered by its :attr:`runtime`, which subclasses build in
    ``__init__``.  Thread-safe as the runtime is."""

    runtime: CoordinatorPartitions[P]

    @property
    def num_partitions(self) -> int:
        """The topic's configured partition count, or the existing topic's own count once seen."""
        return self.runtime.num_partitions

    def startup(self) -> None:
        """Follow leadership of the topic's partitions; load led ones in the background.  The
        topic itself is created on first use (:meth:`ensure_topic`)."""
        self.runtime.startup()

    def shutdown(self) -> None:
        self.runtime.shutdown()

    def ensure_topic(self) -> None:
        """Create the topic (compacted) unless it exists; load partitions this broker now leads
        (COORDINATOR_NOT_AVAILABLE if it cannot be created)."""
        self.runtime.ensure_topic()

    def partition_for(self, key: str) -> int:
        """The topic partition of ``key`` (a group or transactional id)."""
        return self.runtime.partition_for(key)

    def coordinator_for(self, key: str) -> int | None:
        """The broker coordinating ``key`` (creating the topic on first use); None when its
        partition has no live leader (COORDINATOR_NOT_AVAILABLE)."""
        return self.runtime.coordinator_for(key)

    def wait_loaded(self, timeout: float = 30.0) -> bool:
        """Poll (every 20 ms, in the caller's thread) until no led partition is loading; False
        after ``timeout`` s."""
        return self.runtime.wait_loaded(timeout)
