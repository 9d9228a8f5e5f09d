"""Partition leadership and replication of one broker: Kafka's ``ReplicaManager`` (the partitions
themselves are :class:`~pyklog.broker.server.partition.Partition`).

Which partitions this broker hosts (leader or follower replica), their leader epochs, their local
:class:`~pyklog.broker.log.Log`, and replication in ZooKeeper mode, as Kafka 2.x does it:

* **Roles** come from the partition state znodes (``/brokers/topics/<t>/partitions/<p>/state``:
  leader, leader_epoch, isr), which :class:`~pyklog.broker.zk.cluster.ZkCluster` watches and caches.
  The controller alone changes leader and epoch (until it exists, the first replica leads, as
  written at creation).  :meth:`ReplicaManager.sync_logs` (start-up, registry changes, every 10 s)
  and the partition-state listener (one changed partition: O(1) per change) apply them through
  :meth:`ReplicaManager.become_leader` (Kafka's ``makeLeader``: the epoch cache gets (epoch, log end
  offset), follower tracking restarts, Produce is accepted, the partition leaves the fetchers) or
  :meth:`ReplicaManager.become_follower` (``makeFollower``: Produce gets NOT_LEADER_OR_FOLLOWER; the
  :class:`~pyklog.broker.server.replica_fetcher.ReplicaFetcherManager` truncates by
  OffsetsForLeaderEpoch against the new leader, then fetches from it).  Every partition this broker
  is a replica of has a local log.
* **Follower tracking** (leader side, Kafka's ``Replica.updateFetchState``): each follower Fetch
  (replica_id >= 0) gives the follower's log end offset (its fetch offset) and its last caught-up
  time.  **High watermark** = the smallest log end offset over the ISR, leader included, moved
  forward after appends and follower fetches (``maybeIncrementLeaderHW``).
* **ISR**: a follower not caught up within ``replica.lag.time.max.ms`` leaves the ISR (the shrink
  task runs every half lag time, ``isr-expiration``); a follower outside the ISR whose log end offset
  reaches the high watermark and the current epoch's start offset joins it.  Each change is written
  to the state znode by :meth:`ZkCluster.update_isr` conditionally on the node's version; a write
  refused because leader or epoch changed means we were deposed (the state watch brings the role).
* **acks=all / min.insync.replicas** (broker setting, topic override): :meth:`check_enough_replicas`
  before an acks=all append (NOT_ENOUGH_REPLICAS, nothing appended) and :meth:`produce_status` for
  the Produce purgatory (Kafka's ``checkEnoughReplicasReachOffset``: done once the high watermark
  passed the append; NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR is below the minimum then).
* A partition with a single replica keeps pyklog's earlier behaviour: high watermark = log end offset.

* **Produce path** (Kafka's ``appendRecords``): :meth:`ReplicaManager.append_records` appends a
  Produce's partitions to their leader logs (acks=all through
  :meth:`Partition.append_records_to_leader`), wakes the long polls, moves the high watermark and
  answers through the caller's callback, after the acks=all wait in the produce purgatory when
  there is one.
* **Fetch path** (Kafka's ``fetchMessages``): :meth:`ReplicaManager.fetch_messages` reads a Fetch's
  partitions (leader epoch fencing; a follower up to the log end offset, throttled by the leader's
  replication quota, its fetch state updated; a consumer below the high watermark or the last
  stable offset) and answers through the caller's callback with :class:`FetchPartitionData`, after
  a long poll in the fetch purgatory when fewer than ``min_bytes`` were found.
* The purgatories (fetch, produce, coordinator appends) belong to this object and are checked on
  every high watermark, leadership or ISR change; :meth:`begin_shutdown` stops new waits.

* **Offline log dirs** (Kafka's ``handleLogDirFailure``): the ``LogDirFailureHandler`` thread (started
  by the constructor) takes each log dir the LogManager's failure channel reports offline: its
  partitions answer KAFKA_STORAGE_ERROR and leave the fetchers, the controller is told through
  ``/log_dir_event_notification``; with no log dir left the broker halts (``halt``).

Other duties: deleting the logs of topics being deleted (the controller lists them in
``/admin/replica_deletions``; the answer is a child node there) and of topics deleted by request
(stray logs are kept, not served, reported at ERROR once), :meth:`leader_log` for the request handlers, topic auto-creation.

Collaborators, used only through their public methods: the broker's ``ServerConfig``, the
``LogManager`` and its logs, and a started ``ZkCluster`` (registry cache, partition states, ISR
writes, listeners; :meth:`ReplicaManager.stop_replica` reads a topic's assignment fresh from
ZooKeeper through its ``topic_admin``).

Thread-safety: thread-safe.  ``leader_log``, ``leader_epoch`` and ``partition`` run on every request
handler thread without a lock: they read ``_led``, ``_epochs`` and ``_partitions``, changed one key
at a time under ``_sync_lock`` (a single lookup or membership test is atomic; a becoming leader
costs O(1), not a copy of every partition's entry).  Each :class:`Partition` guards its role, ISR and
follower states with its own lock (taken after ``_sync_lock`` when both are held) and decides its
ISR changes; the ZooKeeper ISR write (:meth:`ReplicaManager._write_isr`, the partition's
``alter_isr`` callback) is made under the partition lock and never calls back into this module.  The purgatories this
object owns are checked after a high watermark, leadership or ISR change with no lock held.
"""

from __future__ import annotations

import errno
import logging
import os
import resource
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from pyklog.broker.common.retry import Deadline
from pyklog.broker.common.scheduler import Scheduler
from pyklog.broker.errors import (
    FencedLeaderEpochError,
    InvalidTopicError,
    KafkaStorageError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.record.batch import CONTROL_COMMIT, build_control_batch
from pyklog.broker.server.coordinator_appends import CoordinatorAppends, ReplicaWait
from pyklog.broker.server.fetch import (
    DelayedFetch,
    FetchParams,
    FetchPartitionData,
    fenced_partitions,
    fetch_moved,
    read_fetch,
)
from pyklog.broker.server.fetch_session import FetchSessionCache
from pyklog.broker.server.partition import FollowerState, Partition
from pyklog.broker.server.produce_validation import records_to_append
from pyklog.broker.server.purgatory import DelayedOperation, Purgatory
from pyklog.broker.zk import paths
from pyklog.broker.zk.topics import OFFSETS_TOPIC, is_internal, validate_topic_name
from pyklog.broker.zk.znodes import encode_log_dir_event

if TYPE_CHECKING:
    from pyklog.broker.log import LogConfig, LogManager
    from pyklog.broker.server.config import ServerConfig
    from pyklog.broker.zk.cluster import ZkCluster

log = logging.getLogger(__name__)


#: a byte count that completes any waiting Fetch (a high watermark moved: every waiter re-reads)
INT32_MAX = 0x7FFFFFFF
#: bytes of one transaction marker (a control batch of one record): what a marker append adds to a
#: partition, for the fetch purgatory's min_bytes accounting
MARKER_BYTES = len(build_control_batch(CONTROL_COMMIT, 0, 0))


class ProducePartitionResult(NamedTuple):
    """One partition's outcome of :meth:`ReplicaManager.append_records`: the log's AppendInfo (None
    if nothing was appended) and the error to answer (None: success).  An acks=all append that was
    made but not replicated in time has both."""

    info: Any
    error: BaseException | None


def _now_ms() -> int:
    return int(time.monotonic() * 1000)


class _PendingAppends:
    """What a delayed acks=all Produce still waits for: its appends by partition (Kafka's
    ``DelayedProduce`` keeps an ``acksPending`` flag per partition).  ``ready_key(key)`` re-checks
    only the appends of the partition whose high watermark, ISR or leadership changed, so a Produce
    to N partitions costs N checks over the N moves that complete it, not N squared.  Thread-safe
    (checks arrive from several fetch threads at once)."""

    __slots__ = ("_rm", "_by_key", "_lock")

    def __init__(self, rm: ReplicaManager, waits):
        self._rm = rm
        self._by_key: dict = {}
        for w in waits:
            self._by_key.setdefault((w[1], w[2]), []).append(w[1:])
        self._lock = threading.Lock()

    def keys(self) -> list:
        return list(self._by_key)

    def ready_key(self, key) -> bool:
        with self._lock:
            ws = self._by_key.get(key)
            if ws is not None and all(self._rm.produce_status(*w) is not None for w in ws):
                del self._by_key[key]
            return not self._by_key

    def ready(self) -> bool:
        with self._lock:
            for key in list(self._by_key):
                if all(self._rm.produce_status(*w) is not None for w in self._by_key[key]):
                    del self._by_key[key]
            return not self._by_key


class ReplicaManager:
    """The partitions one broker hosts, their roles, logs and replication state.

    ``config`` is the broker's :class:`~pyklog.broker.server.config.ServerConfig`, ``log_manager`` a
    :class:`~pyklog.broker.log.LogManager`, ``cluster`` a started :class:`~pyklog.broker.zk.cluster.ZkCluster`,
    ``default_log_config`` the broker-wide log defaults (with the dynamic broker configs applied;
    None: the static config's).

    Owns the delayed operations of the partitions (Kafka's ReplicaManager purgatories): the fetch
    purgatory (long-polling Fetches), the produce purgatory (acks=all Produces) and the
    coordinators' acks=all appends (:attr:`coordinator_appends`).  A high watermark, leadership or
    ISR change checks them (with no lock held); :meth:`complete_delayed_operations` completes them
    all at shutdown.
    """

    def __init__(
        self,
        config: ServerConfig,
        log_manager: LogManager,
        cluster: ZkCluster,
        *,
        default_log_config: LogConfig | None = None,
        halt: Callable[[str], None] | None = None,
    ):
        """``halt(reason)``: stop the process at once when no log dir is left (default: close the
        ZooKeeper session, then exit with status 1, as Kafka's ``Exit.halt(1)``)."""
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.cluster = cluster
        self.default_log_config = default_log_config if default_log_config is not None else config.log_config()
        settings = config.replication_settings()
        self.min_insync_replicas = settings.get("min_insync_replicas", 1)
        self.replica_lag_time_max_ms = settings.get("replica_lag_time_max_ms", 30000)
        self.replication_settings = settings
        self._led: set = set()  # (topic, partition) this broker leads; changed under _sync_lock
        self._epochs: dict = {}  # (topic, partition) -> leader epoch of those; changed under _sync_lock
        self._partitions: dict = {}  # (topic, partition) -> Partition; changed under _sync_lock
        self._sync_lock = threading.RLock()
        self._strays_reported: frozenset = frozenset()  # stray logs already reported at ERROR
        # what the last log sync that left nothing to retry saw (metadata generation, broker log
        # config, offline partitions) and when the last complete sync ran: see sync_logs
        self._synced: tuple | None = None
        self._last_full_sync = 0.0
        self._log_configs: dict = {}  # topic -> (broker config, overrides, LogConfig): log_config_for
        # ISR expansions waiting for their ZooKeeper write: (topic, partition) -> Partition; written
        # in batches on the scheduler thread (_write_isr_expansions), never on a Fetch's thread
        self._isr_expansions: dict = {}
        self._isr_expansion_scheduled = False
        self._isr_lock = threading.Lock()
        self._answered_deletions: frozenset = frozenset()  # topics being deleted whose replicas are gone here
        self._scheduler: Scheduler | None = None
        self._fetchers = None
        self._shutdown = False
        self._answer_at_once = False  # begin_shutdown: Fetches and acks=all Produces never wait
        self._leaving = False  # begin_controlled_shutdown: replicas taken out of the ISR are not fetched
        # resign_moved_leaderships: partitions the controlled shutdown moved away; no cached state
        # (no longer read) makes this broker their leader again
        self._resigned: frozenset = frozenset()
        #: long-polling Fetches wait here for data (completed by each operation's own on_complete)
        self.fetch_purgatory = Purgatory(None, name="fetch")
        #: incremental fetch sessions (KIP-227), told of every append and high watermark move
        self.fetch_sessions = FetchSessionCache(config.setting("max.incremental.fetch.session.cache.slots"))
        #: acks=all Produces wait here for the high watermark (Kafka's DelayedProduce)
        self.produce_purgatory = Purgatory(None, name="produce")
        #: the coordinators' own appends (offsets, transaction state, markers) with acks=all
        self.coordinator_appends = CoordinatorAppends(self, on_append=self.partition_changed)
        #: (topic, partition) whose log is in an offline log dir: KAFKA_STORAGE_ERROR until a restart
        self._offline: frozenset = frozenset()
        self._failed_dirs: frozenset = frozenset()  # log dirs whose failure was handled
        self._told_controller = -1  # the controller last told of the offline partitions
        self._halt = halt if halt is not None else self._halt_process
        self._dir_failure_handler = threading.Thread(
            target=self._handle_log_dir_failures, name=f"LogDirFailureHandler-{self.broker_id}", daemon=True
        )
        self._dir_failure_handler.start()
        cluster.add_partition_state_listener(self._on_partition_state)

    # ------------------------------------------------------------------ background work

    def _background(self) -> Scheduler:
        """The replica manager's scheduler (Kafka's ``isr-expiration`` task), started on first need."""
        with self._sync_lock:
            if self._scheduler is None:
                self._scheduler = Scheduler(f"pyklog-replica-manager-{self.broker_id}")
                interval = max(0.01, self.replica_lag_time_max_ms / 2000.0)
                self._scheduler.schedule_periodic("isr-expiration", interval, self.maybe_shrink_isr)
            return self._scheduler

    def fetcher_manager(self):
        """The :class:`~pyklog.broker.server.replica_fetcher.ReplicaFetcherManager`, made on first need."""
        with self._sync_lock:
            if self._fetchers is None:
                from pyklog.broker.server.replica_fetcher import ReplicaFetcherManager

                self._fetchers = ReplicaFetcherManager(self, self.cluster, self.replication_settings)
            return self._fetchers

    def shutdown(self) -> None:
        """Stop the fetcher threads and the ISR task (broker shutdown, before the logs close)."""
        self._shutdown = True
        self.cluster.remove_partition_state_listener(self._on_partition_state)  # the handler ends within 0.5 s
        fetchers, sched = self._fetchers, self._scheduler
        if fetchers is not None:
            fetchers.shutdown()
        if sched is not None:
            sched.shutdown(wait=True, timeout_s=5)

    # ------------------------------------------------------------------ following the registry

    #: seconds between two complete log syncs while the registry does not change
    FULL_SYNC_INTERVAL_S = 120.0

    def sync_logs(self) -> None:
        """Create the logs of partitions this broker hosts and apply their states (leader or
        follower), delete the logs of topics deleted by request, keep (unserved) the logs of
        topics missing without a request.  Called at startup, on every registry change and every
        10 s (a background thread).

        The periodic call visits every partition only when something may need doing: the cached
        registry changed since the last sync (its generation), the broker's log config or the
        offline partitions changed, the last sync left work to retry (logs it could not create,
        replicas to stop, stray logs, ZooKeeper unreachable), or :data:`FULL_SYNC_INTERVAL_S` passed.
        Each state change is applied by its own watch as it comes; an idle broker holding thousands
        of partitions does not walk them every 10 s."""
        with self._sync_lock:
            generation = getattr(self.cluster, "metadata_generation", None)
            now = time.monotonic()
            last = self._synced
            if (
                generation is not None
                and last is not None
                and last[0] == generation
                and last[1] is self.default_log_config
                and last[2] == self._offline
                and now - self._last_full_sync < self.FULL_SYNC_INTERVAL_S
            ):
                return
            self._synced = None
            self._last_full_sync = now
            retry = False
            topics = self.cluster.topics()
            hosted = self.cluster.partitions_hosted_by(self.broker_id)
            written: dict = {}
            configs: dict = {}  # topic -> (log config, topic id): read once per topic per pass
            out_of_descriptors: list = []
            no_log = []  # hosted partitions whose log cannot be created while a log dir is offline
            for t, p in sorted(hosted):
                if t not in written:
                    written[t] = self._states_as_written(t, topics.get(t))
                    configs[t] = (self.log_config_for(t), self.cluster.topic_id(t))
                st = (written[t] or {}).get(p)
                if st is None or (t, p) in self._offline:
                    continue
                if out_of_descriptors and (t, p) not in self._partitions:
                    out_of_descriptors.append((t, p))  # would fail the same way: not tried this pass
                    continue
                try:
                    # creates a missing log; applies changed topic-level config to an existing one
                    lg = self.logs.get_or_create_log(t, p, configs[t][0], topic_id=configs[t][1])
                except KafkaStorageError:
                    no_log.append((t, p))
                    continue
                except OSError as e:
                    if e.errno in (errno.EMFILE, errno.ENFILE):
                        out_of_descriptors.append((t, p))
                        continue
                    log.exception("cannot create the log of %s-%d", t, p)
                    retry = True
                    continue
                except Exception:  # noqa: BLE001
                    log.exception("cannot create the log of %s-%d", t, p)
                    retry = True
                    continue
                self._apply_state(t, p, lg, st)
            if out_of_descriptors:
                self._report_out_of_descriptors(out_of_descriptors)
            gone = [k for k in self._partitions if k not in hosted]
            retry = retry or bool(gone or out_of_descriptors or no_log)
            for k in gone:
                if k[0] in topics and k[1] in (topics.get(k[0]) or {}):
                    self._stop_replica_soon(*k)  # the topic lives on: reassigned away (StopReplica)
                else:
                    self._drop_partition(k)
            strays = {}
            being_deleted = self.cluster.topics_being_deleted()
            for (t, p), lg in list(self.logs.logs().items()):
                if t in topics:
                    continue
                try:
                    # the controller's StopReplica(delete=true): a topic being deleted loses its logs
                    deleted = t in being_deleted
                    if not deleted and self.cluster.topic(t, refresh_if_missing=True) is not None:
                        continue  # the cache was late; the topic exists
                    deleted = deleted or self.cluster.topic_deletion_recorded(t)
                except Exception:  # noqa: BLE001 - ZooKeeper unreachable: delete nothing
                    log.warning("cannot check whether topic %s still exists; keeping its logs", t)
                    retry = True
                    continue
                if not deleted:
                    strays[(t, p)] = lg
                    continue
                try:
                    self._drop_partition((t, p))
                    self.logs.delete_log(t, p)
                    log.info("deleted log of %s-%d (topic deleted by request)", t, p)
                except Exception:  # noqa: BLE001
                    log.exception("cannot delete the log of %s-%d", t, p)
                    retry = True
            retry = retry or bool(strays)
            self.logs.set_cleaning_paused(strays)  # no retention/compaction under a config the topic may not have
            self._report_strays(strays)
            if not self._answer_replica_deletions(being_deleted):
                retry = True  # a replica not deleted yet, or the controller not told: the next sync tries
            if no_log:  # offline here (Kafka: no log is created while a dir is offline): leaders move
                self._offline = self._offline | set(no_log)
                log.info(
                    "%d partition(s) offline: their log is not here and is not created while log dir(s) %s "
                    "are offline: %s",
                    len(no_log),
                    ",".join(sorted(self.logs.failure_channel.offline_log_dirs)),
                    ", ".join(f"{t}-{p}" for t, p in no_log[:20]),
                )
                self._tell_controller(no_log, "partitions without a log")
                self._report_offline(no_log)
            elif self._offline and self.cluster.controller_id != self._told_controller:
                # a new controller does not know them (Kafka's learns from LeaderAndIsr answers): again
                self._tell_controller(sorted(self._offline), "a new controller")
            if self._offline and self.cluster.controller_id != self._told_controller:
                retry = True  # the controller was not told yet
            if not retry:
                self._synced = (generation, self.default_log_config, self._offline)

    def _answer_replica_deletions(self, being_deleted: frozenset) -> bool:
        """Under ``_sync_lock``, after the logs of topics being deleted were deleted: tell the
        controller, once per topic, that this broker's replicas of it are gone (Kafka's
        StopReplica response).  A log left on an offline log dir does not hold the deletion up: its
        partition.metadata keeps it from serving a topic created again under the name.  False when
        a topic is left unanswered (a log not deleted yet, ZooKeeper unreachable)."""
        self._answered_deletions &= being_deleted
        done = True
        for t in sorted(being_deleted - self._answered_deletions):
            if any(k[0] == t for k in self._partitions) or any(
                lt == t and not lg.offline for (lt, _), lg in self.logs.logs().items()
            ):
                done = False  # a log could not be deleted: the next sync tries again
                continue
            try:
                self.cluster.replica_deletion_done(t)
            except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: the next sync answers
                log.warning("cannot tell the controller that the replicas of topic %s are deleted: %s", t, e)
                done = False
                continue
            self._answered_deletions = self._answered_deletions | {t}
            log.info("stopped and deleted the replicas of topic %s (being deleted)", t)
        return done

    def _on_partition_state(self, topic: str, partition: int) -> None:
        """ZkCluster's partition-state listener (the ZooKeeper session's state thread): one partition's state node
        changed; apply it if this broker hosts the partition."""
        if self._shutdown:
            return
        try:
            with self._sync_lock:
                # the state is read under the lock that applies it: two callbacks (or a callback
                # and sync_logs) racing for the lock each apply the newest cached state, never an
                # older one read before another thread applied a newer ("follower at epoch 3"
                # applied after "leader at epoch 4")
                st = self.cluster.partition_state_as_written(topic, partition)
                if st is not None and self.broker_id not in st.replicas and (topic, partition) in self._partitions:
                    self._stop_replica_soon(topic, partition)  # reassigned away (StopReplica)
                if st is None or self.broker_id not in st.replicas or (topic, partition) in self._offline:
                    return
                lg = self._hosted_log(topic, partition)
                self._apply_state(topic, partition, lg, st)
        except KafkaStorageError as e:  # no log while a dir is offline: sync_logs takes it offline
            log.debug("%s-%d: %s", topic, partition, e)
        except OSError as e:
            if e.errno in (errno.EMFILE, errno.ENFILE):
                # a burst of new states meets the limit: no traceback per partition; the next log
                # sync reports the partitions left out once (and creates them when it can)
                log.debug("%s-%d: out of file descriptors applying its new state", topic, partition)
                return
            log.exception("applying the new state of %s-%d failed", topic, partition)
        except Exception:  # noqa: BLE001
            log.exception("applying the new state of %s-%d failed", topic, partition)

    def _states_as_written(self, topic: str, fallback):
        """The topic's partition states with the leaders as the state znodes say (a leader that is not
        live stays the leader for its replicas: this broker keeps leading through a ZooKeeper session
        blip, followers keep following a dead leader until the controller elects another)."""
        got = self.cluster.partition_states_as_written(topic)
        return got if got is not None else fallback

    def _apply_state(self, topic: str, partition: int, lg, st) -> None:
        """Under ``_sync_lock``: make this broker leader or follower of a hosted partition as its
        cached state says (nothing if role, leader and epoch are unchanged)."""
        key = (topic, partition)
        if key in self._resigned and st.leader == self.broker_id:
            return
        part = self._partitions.get(key)
        if part is None or part.log is not lg:
            part = Partition(topic, partition, lg, st.replicas)
            self._partitions[key] = part
        else:
            part.replicas = tuple(st.replicas)
        if st.leader == self.broker_id:
            if part.is_leader and part.leader_epoch == st.leader_epoch:
                part.update_assigned_replicas(self.broker_id)  # replicas added or removed without an epoch change
                return
            # the state node's version as the cache read it (None: unknown, read now): thousands of
            # leaderships moved at once (a controlled shutdown) are not a ZooKeeper read each
            version_of = getattr(self.cluster, "partition_state_version", None)
            version = (
                version_of(topic, partition, st.leader, st.leader_epoch, st.isr) if version_of is not None else None
            )
            self.become_leader(topic, partition, st.leader_epoch, st.isr, version)
        else:
            if not part.is_leader and part.leader == st.leader and part.leader_epoch == st.leader_epoch:
                return
            # the controller took a stopping broker out of the ISR: Kafka's StopReplica(delete=false)
            fetch = not (self._leaving and self.broker_id not in st.isr)
            self.become_follower(topic, partition, st.leader, st.leader_epoch, fetch=fetch)

    def _drop_partition(self, key) -> None:
        """Under ``_sync_lock``: forget a partition this broker no longer hosts."""
        part = self._partitions.get(key)
        if part is None:
            return
        del self._partitions[key]
        self._led.discard(key)
        self._epochs.pop(key, None)
        if self._fetchers is not None:
            self._fetchers.remove_partitions([key])
        self._role_changed(*key)

    def _stop_replica_soon(self, topic: str, partition: int) -> None:
        """Run :meth:`stop_replica` soon on the replica manager's scheduler thread (callers hold
        ``_sync_lock`` or apply a burst of partition states: the ZooKeeper reads it makes must not
        hold them up; one thread whatever the number of replicas moved away)."""
        if not self._shutdown:
            try:
                self._background().schedule(0, self.stop_replica, topic, partition, name="stop-replica")
            except RuntimeError:
                pass  # the scheduler is shut down: the broker is stopping

    def stop_replica(self, topic: str, partition: int) -> bool:
        """Kafka's StopReplica(delete=true) for a replica a reassignment removed from this broker
        (ZooKeeper mode: no request, the assignment in ``/brokers/topics/<t>`` says so): the partition
        stops being led or fetched (Produce gets NOT_LEADER_OR_FOLLOWER, the fetcher drops it) and its
        log is deleted (renamed ``<dir>.<uuid>-delete`` first, then removed, as Kafka's LogManager).
        The assignment is read from ZooKeeper itself first: a log whose partition still lists this
        broker, or whose topic or partition ZooKeeper does not know, is never touched.  Any thread but
        a kazoo handler thread; takes ``_sync_lock``.  Returns whether the replica was stopped."""
        if self._shutdown:
            return False
        try:
            assignment = self.cluster.topic_admin.read_assignment(topic)
        except Exception as e:  # noqa: BLE001 - unreadable or unreachable: keep the log
            log.warning("%s-%d: cannot read its assignment (%s); keeping the replica", topic, partition, e)
            return False
        if assignment is None:
            return False  # a deleted topic: the topic deletion path deletes its logs
        replicas = assignment.get(partition)
        if replicas is None or self.broker_id in replicas:
            return False
        try:
            got = self.cluster.partition_state(topic, partition)
        except Exception as e:  # noqa: BLE001
            log.warning("%s-%d: cannot read its state (%s); keeping the replica", topic, partition, e)
            return False
        if got is None or got[0].leader == self.broker_id:
            # still the leader as written: the controller moves leadership right after the assignment
            # (Kafka elects before it stops the old replicas); the state change calls this again.
            # Stopping now would let a request re-create an empty log a follower could truncate to.
            log.info(
                "%s-%d: removed from broker %d, which still leads it: waiting for the new leader",
                topic,
                partition,
                self.broker_id,
            )
            return False
        with self._sync_lock:
            if self._shutdown or self.broker_id in self.cluster.partition_replicas(topic, partition):
                return False
            self._drop_partition((topic, partition))
            try:
                deleted = self.logs.delete_log(topic, partition)
            except Exception:  # noqa: BLE001
                log.exception("%s-%d: cannot delete the log of the removed replica", topic, partition)
                deleted = False
        log.info(
            "%s-%d: replica removed from broker %d (assigned to %s): stopped%s",
            topic,
            partition,
            self.broker_id,
            replicas,
            ", log deleted" if deleted else "",
        )
        return True

    def _publish_role(self, key, part: Partition) -> None:
        """Under ``_sync_lock``: one partition's role into the lock-free lookups."""
        if part.is_leader:
            self._epochs[key] = part.leader_epoch
            self._led.add(key)
        else:
            self._led.discard(key)
            self._epochs.pop(key, None)

    # ------------------------------------------------------------------ offline log dirs

    def _handle_log_dir_failures(self) -> None:
        """The ``LogDirFailureHandler`` thread (Kafka's): each log dir the LogManager's failure
        channel reports offline is handled once, in order."""
        channel = self.logs.failure_channel
        while not self._shutdown:
            d = channel.take(timeout_s=0.5)
            if d is None or self._shutdown:
                continue
            try:
                self.handle_log_dir_failure(d)
            except Exception:  # noqa: BLE001 - the thread handles the next dir whatever happens
                log.exception("handling the failure of log dir %s failed", d)

    def handle_log_dir_failure(self, log_dir: str) -> list[tuple[str, int]]:
        """Kafka's ``ReplicaManager.handleLogDirFailure``: the partitions whose log is in ``log_dir``
        go offline here (Produce, Fetch, ListOffsets get KAFKA_STORAGE_ERROR; their fetchers stop;
        waiting acks=all Produces and Fetches are answered), their logs leave the LogManager, and the
        controller is told through ``/log_dir_event_notification`` (it moves their leadership to other
        ISR members and shrinks their ISR).  With no log dir left the broker halts.  Returns the
        partitions taken offline.  Any thread but a kazoo handler thread."""
        with self._sync_lock:
            if log_dir in self._failed_dirs:
                return []
            self._failed_dirs = self._failed_dirs | {log_dir}
            keys = self.logs.handle_log_dir_failure(log_dir)
            keys += [k for k, part in self._partitions.items() if part.log.log_dir == log_dir and k not in keys]
            self._offline = self._offline | set(keys)
            if self._fetchers is not None:
                self._fetchers.remove_partitions(keys)
            self._partitions = {k: v for k, v in self._partitions.items() if k not in self._offline}
            for k in keys:
                self._led.discard(k)
                self._epochs.pop(k, None)
        log.info(
            "%d partition(s) offline after the failure of log dir %s%s",
            len(keys),
            log_dir,
            f": {', '.join(f'{t}-{p}' for t, p in keys[:20])}{' ...' if len(keys) > 20 else ''}" if keys else "",
        )
        for t, p in keys:
            self._role_changed(t, p)
            self.fetch_purgatory.notify((t, p), INT32_MAX)
        live = self.logs.live_log_dirs
        if not live:
            self._halt(f"Shutdown broker because all log dirs in {', '.join(self.logs.log_dirs)} have failed")
            return keys
        self._tell_controller(keys, log_dir)
        self._report_offline(keys)
        return keys

    def _report_offline(self, keys) -> None:
        """Every broker's Metadata names these replicas in ``offline_replicas`` from now on."""
        try:
            self.cluster.report_offline_replicas(keys)
        except Exception as e:  # noqa: BLE001 - Metadata reports them late (or once the broker stops)
            log.warning("could not record %d offline replica(s) in ZooKeeper: %s", len(keys), e)

    def _tell_controller(self, keys, why: str) -> None:
        """Write ``/log_dir_event_notification/log_dir_event_<seq>`` naming the partitions now offline
        here (Kafka's ``propagateLogDirEvent``)."""
        try:
            controller = getattr(self.cluster, "controller_id", -1)
            self.cluster.retry(
                self.cluster.zk.create,
                paths.LOG_DIR_EVENT_PREFIX,
                encode_log_dir_event(self.broker_id, keys),
                sequence=True,
                makepath=True,
            )
            self._told_controller = controller
        except Exception as e:  # noqa: BLE001 - the partitions stay offline; the controller learns late
            log.warning("could not write the log dir event notification (%s): %s", why, e)

    def _offline_error(self, topic: str, partition: int) -> KafkaStorageError:
        return KafkaStorageError(
            f"{topic}-{partition} is offline on broker {self.broker_id}: its log dir "
            f"{self.logs.offline_log_dir_of(topic, partition) or '?'} failed"
        )

    def partition_offline(self, topic: str, partition: int) -> bool:
        """Whether the partition's log is in an offline log dir (handled or not yet).  Lock-free."""
        if (topic, partition) in self._offline:
            return True
        part = self._partitions.get((topic, partition))
        return part is not None and part.log.offline

    @property
    def offline_partitions(self) -> frozenset:
        """The (topic, partition) pairs whose log is in an offline log dir."""
        return self._offline

    def _halt_process(self, reason: str) -> None:
        """Kafka's ``Exit.halt(1)`` after a CRITICAL line: the ZooKeeper session is closed first (at
        most 3 s), so the controller elects other leaders at once instead of after the session
        timeout; nothing else runs (no log is written to, no controlled shutdown)."""
        log.critical("%s", reason)
        logging.disable(logging.ERROR)  # the last line: what the closing session makes fail is noise
        closer = threading.Thread(target=self.cluster.stop, name="halt-zk-close", daemon=True)
        closer.start()
        closer.join(timeout=3.0)
        logging.shutdown()
        os._exit(1)

    # ------------------------------------------------------------------ roles

    def become_leader(self, topic: str, partition: int, leader_epoch: int, isr, zk_version: int | None) -> None:
        """Kafka's ``Partition.makeLeader``: this broker leads ``topic-partition`` at ``leader_epoch``
        with ``isr`` (``zk_version`` of the state node; None: read it).  The epoch cache gets
        (epoch, log end offset); follower states restart (ISR members count as caught up now);
        the partition leaves the fetchers; the high watermark may move."""
        key = (topic, partition)
        with self._sync_lock:
            part = self._partitions.get(key)
            if part is None:
                lg = self._hosted_log(topic, partition)
                part = Partition(
                    topic, partition, lg, self.cluster.partition_replicas(topic, partition) or [self.broker_id]
                )
                self._partitions[key] = part
            if self._fetchers is not None:
                self._fetchers.remove_partitions([key])
            replicated = part.replicated
            if replicated and zk_version is None:
                got = self.cluster.partition_state(topic, partition)
                if got is not None:
                    state, zk_version = got
                    if state.leader != self.broker_id:
                        return  # moved on meanwhile: the state watch brings the new role
                    leader_epoch, isr = state.leader_epoch, state.isr
            part.make_leader(self.broker_id, leader_epoch, isr, zk_version, _now_ms())
            self._publish_role(key, part)
            if replicated:
                self._background()
        log.info(
            "%s-%d: leader at epoch %d (isr %s, log end offset %d)",
            topic,
            partition,
            leader_epoch,
            sorted(part.isr),
            part.log.log_end_offset,
        )
        self.maybe_increment_high_watermark(part)
        self._role_changed(topic, partition)

    def become_follower(
        self, topic: str, partition: int, leader: int, leader_epoch: int, *, fetch: bool = True
    ) -> None:
        """Kafka's ``Partition.makeFollower``: Produce is refused from now on; the fetchers truncate
        against ``leader`` (OffsetsForLeaderEpoch) and fetch from it.  Leader -1 (not live): wait.
        ``fetch`` False, or the replica manager shut down: a follower that does not fetch (the
        replica is stopped, as after Kafka's StopReplica)."""
        key = (topic, partition)
        with self._sync_lock:
            part = self._partitions.get(key)
            if part is None:
                lg = self._hosted_log(topic, partition)
                part = Partition(topic, partition, lg, self.cluster.partition_replicas(topic, partition))
                self._partitions[key] = part
            part.make_follower(leader, leader_epoch)
            self._publish_role(key, part)
            fetch = fetch and not self._shutdown
            if leader >= 0 and part.replicated and fetch:
                self.fetcher_manager().add_partition(key, leader, leader_epoch)
            elif self._fetchers is not None:
                self._fetchers.remove_partitions([key])
        log.info(
            "%s-%d: follower of broker %d at epoch %d (log end offset %d)%s",
            topic,
            partition,
            leader,
            leader_epoch,
            part.log.log_end_offset,
            "" if fetch else "; stopped: not fetching (this broker is shutting down)",
        )
        self._role_changed(topic, partition)

    def _role_changed(self, topic: str, partition: int) -> None:
        """Leadership or the ISR changed (no lock held): waiting acks=all Produces and coordinator
        appends re-check (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        try:
            self.produce_purgatory.check((topic, partition))
            self.coordinator_appends.check(topic, partition)
            # waiting Fetches and the fetch sessions holding it read it again (its error, its epoch)
            self.partition_changed(topic, partition, INT32_MAX)
        except Exception:  # noqa: BLE001
            log.exception("role change callback failed")

    def partition_changed(self, topic: str, partition: int, nbytes: int) -> None:
        """Records were appended to a partition (``nbytes`` of them) or its high watermark / last
        stable offset moved or its leadership changed (``nbytes`` INT32_MAX): the Fetches waiting on
        it are told, and the fetch sessions holding it re-read it (their waiting Fetches wake)."""
        key = (topic, partition)
        self.fetch_purgatory.notify(key, nbytes)
        for session in self.fetch_sessions.mark_changed(key):
            self.fetch_purgatory.notify(session.watch_key, nbytes)

    def log_start_offset_moved(self, topic: str, partition: int) -> None:
        """DeleteRecords moved a led partition's log start offset: the Fetches waiting on it and the
        fetch sessions holding it read it again, so followers learn the new log start offset at once
        (retention's moves reach the sessions at their periodic full read)."""
        self.partition_changed(topic, partition, INT32_MAX)

    def _high_watermark_moved(self, topic: str, partition: int) -> None:
        """A high watermark moved (no lock held): waiting acks=all Produces may complete, and
        delayed Fetches see new data (they re-read and wait again if short)."""
        try:
            self.produce_purgatory.check((topic, partition))
            self.coordinator_appends.check(topic, partition)
            # wake every fetch waiting on it: each re-reads (followers learn the new high watermark at once)
            self.partition_changed(topic, partition, INT32_MAX)
        except Exception:  # noqa: BLE001
            log.exception("high watermark callback failed")

    def begin_controlled_shutdown(self) -> None:
        """The broker asks the controller for a controlled shutdown: from now on a partition whose
        new state leaves this broker out of the ISR (the controller's answer) is not fetched any
        more (Kafka's StopReplica(deletePartitions=false) to the stopping broker), so its new
        leader never takes it back into the ISR and waits for it in its last moments."""
        self._leaving = True

    def resign_moved_leaderships(self) -> int:
        """This broker's controlled shutdown succeeded: the controller moved the leadership of every
        partition led here that has replicas elsewhere.  They stop being led here at once (Produce
        and waiting acks=all Produces get NOT_LEADER_OR_FOLLOWER) instead of when their new states
        are read, which this broker no longer does (Kafka's controller sends a stopping broker
        LeaderAndIsr for them before it answers).  Returns how many resigned."""
        moved = []
        with self._sync_lock:
            for key, part in list(self._partitions.items()):
                if part.is_leader and part.replicated:
                    part.make_follower(-1, part.leader_epoch)
                    self._publish_role(key, part)
                    moved.append(key)
            self._resigned = frozenset(moved)
        for key in moved:
            self._role_changed(*key)
        if moved:
            log.info("resigned the leadership of %d partition(s) the controlled shutdown moved", len(moved))
        return len(moved)

    def begin_shutdown(self) -> None:
        """The broker is stopping: from now on Fetches and acks=all Produces are answered at once,
        never delayed (:meth:`complete_delayed_operations` then answers the ones waiting)."""
        self._answer_at_once = True

    def complete_delayed_operations(self) -> None:
        """Broker shutdown: answer every waiting Fetch, acks=all Produce (REQUEST_TIMED_OUT or its
        outcome) and coordinator append now; later ones complete at once."""
        self.fetch_purgatory.complete_all()
        self.produce_purgatory.complete_all()
        self.coordinator_appends.shutdown()

    # ------------------------------------------------------------------ leader side: followers, HW, ISR

    def partition(self, topic: str, partition: int) -> Partition | None:
        """The hosted partition (lock-free lookup), None if this broker does not host it."""
        return self._partitions.get((topic, partition))

    def update_follower_fetch(
        self, topic: str, partition: int, replica_id: int, fetch_offset: int, session=None
    ) -> None:
        """A follower's Fetch reached the leader (request handler thread): record its log end
        offset and caught-up time (and its fetch ``session``: while the partition stays quiet in it,
        each of the session's fetches counts as caught up), let it join the ISR, move the high
        watermark.  Raises NotLeaderOrFollowerError if this broker does not lead the partition."""
        part = self._partitions.get((topic, partition))
        if part is None or not part.is_leader:
            raise NotLeaderOrFollowerError(f"broker {self.broker_id} is not the leader of {topic}-{partition}")
        if not part.update_follower_fetch_state(replica_id, fetch_offset, _now_ms(), session):
            return  # not an assigned replica (an old replica, a tool): no tracking
        if replica_id in self.cluster.live_brokers():
            # Kafka's isReplicaIsrEligible (KIP-841): only a registered broker joins the ISR.  A
            # fetch of a broker that has since stopped (parked in the purgatory, answered when a
            # leader epoch change wakes it) must not put it back: every acks=all write would then
            # wait for it until replica.lag.time.max.ms took it out again
            part.maybe_expand_isr(replica_id, self._queue_isr_expansion)
        self.maybe_increment_high_watermark(part)

    def _queue_isr_expansion(self, part: Partition, new_isr: frozenset, why: str) -> None:
        """Under ``part.lock`` (a follower's Fetch): the follower may join the ISR.  The write is
        queued for the scheduler thread, which writes every queued expansion in one batch
        (:meth:`_write_isr_expansions`, Kafka's AlterPartition manager): a Fetch of thousands of
        partitions from a restarted follower neither waits for thousands of ZooKeeper writes nor
        times out; until written, the partition's ISR is the old one (acks=all waits for it alone)."""
        # never _background() here: it takes _sync_lock, which a thread applying partition states
        # holds while it waits for partition locks (this one holds part.lock). The scheduler
        # exists: this broker leads a replicated partition
        sched = self._scheduler
        with self._isr_lock:
            self._isr_expansions[(part.topic, part.partition)] = part
            if self._isr_expansion_scheduled or self._shutdown or sched is None:
                return
            self._isr_expansion_scheduled = True
        try:
            sched.schedule(0, self._write_isr_expansions, name="isr-expand")
        except RuntimeError:  # the scheduler is shut down: the broker is stopping
            with self._isr_lock:
                self._isr_expansion_scheduled = False

    def _eligible_isr(self, part: Partition) -> frozenset | None:
        """Under ``part.lock``: the ISR with every assigned, registered follower caught up to the
        high watermark and the epoch's start offset (Kafka's ``maybeExpandIsr`` conditions); None if
        no follower joins or this broker no longer leads."""
        if not part.is_leader:
            return None
        live = self.cluster.live_brokers()
        joining = {
            r
            for r, fs in part.followers.items()
            if r not in part.isr
            and r in live
            and fs.log_end_offset >= part.log.high_watermark
            and fs.log_end_offset >= part.leader_epoch_start_offset
        }
        return frozenset(part.isr | joining) if joining else None

    def _write_isr_expansions(self) -> None:
        """The scheduler thread: write the queued ISR expansions, in batches of pipelined ZooKeeper
        requests (:meth:`IsrWriter.update_isrs`), and adopt each ISR written."""
        while not self._shutdown:
            with self._isr_lock:
                queued, self._isr_expansions = self._isr_expansions, {}
                if not queued:
                    self._isr_expansion_scheduled = False
                    return
            changes = []
            planned = {}
            for key, part in queued.items():
                with part.lock:
                    new_isr = self._eligible_isr(part)
                    if new_isr is None:
                        continue
                    if part.zk_version < 0:  # its version is not known: the one-partition path
                        self._write_isr(part, new_isr, "expand")
                        continue
                    planned[key] = (part, part.leader_epoch, part.zk_version, new_isr)
                    changes.append((key[0], key[1], part.leader_epoch, sorted(new_isr), part.zk_version))
            try:
                written = self.cluster.update_isrs(changes) if changes else {}
            except Exception as e:  # noqa: BLE001 - ZooKeeper unreachable: the next fetches queue them again
                log.warning("could not write %d ISR expansion(s): %s", len(changes), e)
                continue
            for key, (part, epoch, version, new_isr) in planned.items():
                new_version = written.get(key)
                if new_version is None:
                    continue  # deposed: the state watch brings the new role
                with part.lock:
                    if new_version == -1:
                        # the node moved on since this broker last wrote or read it: the
                        # one-partition path under the partition's lock (read again, its rules)
                        new_isr = self._eligible_isr(part)
                        if new_isr is not None:
                            self._write_isr(part, new_isr, "expand")
                    elif part.is_leader and part.leader_epoch == epoch and part.zk_version == version:
                        part.zk_version = new_version
                        part.isr = new_isr
                self.maybe_increment_high_watermark(part)

    def maybe_increment_high_watermark(self, part: Partition) -> bool:
        """:meth:`Partition.maybe_increment_high_watermark`, then, if it moved, the purgatories are
        told (with no lock held).  Any thread."""
        moved = part.maybe_increment_high_watermark(self.broker_id)
        if moved:
            self._high_watermark_moved(part.topic, part.partition)
        return moved

    def maybe_shrink_isr(self) -> None:
        """Kafka's ``maybeShrinkIsr`` (the scheduler's ``isr-expiration`` task, every half
        ``replica.lag.time.max.ms``): drop the followers not caught up within the lag time; the high
        watermark may then move.  Also moves the high watermark of every led partition (appends made
        directly to the log by the broker's coordinators)."""
        now = _now_ms()
        lag = self.replica_lag_time_max_ms
        for part in list(self._partitions.values()):
            if not part.is_leader or not part.replicated:
                continue
            try:
                out = part.maybe_shrink_isr(self.broker_id, now, lag, self._write_isr)
                if out is None:
                    continue
                self.maybe_increment_high_watermark(part)
                if out:
                    self._role_changed(part.topic, part.partition)  # waiting acks=all produces re-check
            except Exception:  # noqa: BLE001 - one partition's trouble never stops the task
                log.exception("ISR check of %s-%d failed", part.topic, part.partition)

    def _write_isr(self, part: Partition, new_isr: frozenset, why: str) -> None:
        """Under ``part.lock``: write the ISR to ZooKeeper (conditional on the node version), then
        adopt it; deposed (leader or epoch changed) -> nothing changes here (the watch follows)."""
        if part.zk_version < 0:
            got = self.cluster.partition_state(part.topic, part.partition)
            if got is None:
                return
            state, part.zk_version = got
            if state.leader != self.broker_id or state.leader_epoch != part.leader_epoch:
                return
        version = self.cluster.update_isr(
            part.topic, part.partition, part.leader_epoch, sorted(new_isr), part.zk_version
        )
        if version is None:
            log.info("%s-%d: ISR %s not written: deposed as leader", part.topic, part.partition, why)
            return
        part.zk_version = version
        part.isr = frozenset(new_isr)

    # ------------------------------------------------------------------ acks=all

    def min_insync_replicas_for(self, topic: str) -> int:
        """``min.insync.replicas``: the topic's override, else the broker's."""
        try:
            value = self.cluster.topic_config(topic).get("min.insync.replicas")
            if value is not None:
                return max(1, int(value))
        except Exception:  # noqa: BLE001 - ZooKeeper trouble: the broker's value
            pass
        return self.min_insync_replicas

    def check_enough_replicas(self, topic: str, partition: int) -> None:
        """Before an acks=all append (Kafka's ``Partition.appendRecordsToLeader``): raise
        NotEnoughReplicasError when the ISR is smaller than ``min.insync.replicas``."""
        part = self._partitions.get((topic, partition))
        if part is None or not part.replicated:
            return  # a single replica: its ISR is itself (min.insync.replicas > 1 cannot be met: Kafka refuses too)
        part.check_enough_replicas(self.min_insync_replicas_for(topic))

    def append_records(
        self,
        timeout_ms: int,
        required_acks: int,
        entries,
        response_callback,
        error_callback=None,
        *,
        produce_version: int = 9,
        internal_topics_allowed: bool = False,
        may_auto_create: Callable[[str], bool] | None = None,
    ):
        """Kafka's ``appendRecords``: append each of ``entries`` (``(topic, partition, records)``, the
        records as a Produce v``produce_version`` request carries them) to its leader log, then
        answer through ``response_callback(results)``: one :class:`ProducePartitionResult` per
        entry, same order.

        Before each append (Kafka's ``appendToLocalLog``): an internal topic is refused
        (INVALID_TOPIC_EXCEPTION: a forged record would rewrite committed offsets) unless
        ``internal_topics_allowed``; the leadership is checked and an unknown topic auto-created
        when ``auto.create.topics.enable`` and ``may_auto_create(topic)`` (the principal's CREATE
        right; None: allowed) (UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER win
        over malformed records); the records must be record batches v2, v0-2 message sets are
        up-converted (:func:`~pyklog.broker.server.produce_validation.records_to_append`).

        Each append is made at the current leader epoch -- for acks=all (``required_acks`` -1) on a
        replicated partition through :meth:`Partition.append_records_to_leader` (NOT_ENOUGH_REPLICAS,
        nothing appended) -- then the partition's long-polling Fetches are woken and its high
        watermark moves.  An append's error (UNKNOWN_TOPIC_OR_PARTITION, NOT_LEADER_OR_FOLLOWER, the
        log's errors, anything unexpected) is that entry's result; the others go on.  acks=all with
        an append to a replicated partition: the answer waits in the produce purgatory (Kafka's
        DelayedProduce) until the high watermark passes every such append, ``timeout_ms`` runs out
        (REQUEST_TIMED_OUT), the ISR shrank below ``min.insync.replicas``
        (NOT_ENOUGH_REPLICAS_AFTER_APPEND) or leadership moved (NOT_LEADER_OR_FOLLOWER); a duplicate's
        offsets were written before: it waits too.  Otherwise (and after :meth:`begin_shutdown`) the
        callback runs at once, on the calling thread.

        Runs on a request handler thread; a delayed answer is given on the thread completing it (a
        follower's Fetch, the ISR task, a role change, the purgatory's timer, shutdown), with no lock
        held.  ``error_callback(exception)`` (or nothing) is told when a delayed completion fails."""
        results = []
        waits = []  # (index in results, topic, partition, required offset, leader epoch)
        appended = []  # (topic, partition, bytes): the waiting Fetches are woken after every append
        for topic, partition, records in entries:
            try:
                if is_internal(topic) and not internal_topics_allowed:
                    raise InvalidTopicError(f"Cannot append to internal topic {topic}")
                self._leader_log_creating_topic(topic, partition, may_auto_create)
                records = records_to_append(topic, partition, records, produce_version)
                info, wait = self._append_to_leader(topic, partition, records, required_acks)
            except Exception as e:  # noqa: BLE001 - the entry's result; the caller translates it
                results.append(ProducePartitionResult(None, e))
                continue
            appended.append((topic, partition, 0 if info.duplicate else len(records)))
            if wait is not None:
                waits.append((len(results), topic, partition) + wait)
            results.append(ProducePartitionResult(info, None))
        # Kafka completes the delayed Fetches after the whole request is appended: a follower woken
        # by the first append would otherwise fetch that one partition, then the next, one round each
        for topic, partition, nbytes in appended:
            if nbytes:
                self.partition_changed(topic, partition, nbytes)
            part = self._partitions.get((topic, partition))
            if part is not None and part.replicated:
                self.maybe_increment_high_watermark(part)  # an ISR of the leader alone
        if waits and not self._answer_at_once:
            pending = _PendingAppends(self, waits)
            self.produce_purgatory.watch(
                DelayedOperation(
                    pending.keys(),
                    timeout_ms,
                    0,
                    0,
                    (results, waits, response_callback, error_callback),
                    ready=pending.ready,
                    ready_key=pending.ready_key,
                    on_complete=self._complete_delayed_produce,
                )
            )
            return
        self._finish_produce(results, waits, response_callback)

    def _complete_delayed_produce(self, op: DelayedOperation) -> None:
        """The produce purgatory's completion (a follower's Fetch thread, the ISR task, a role
        change, the timer at the request's timeout_ms, or shutdown): answer every partition."""
        results, waits, response_callback, error_callback = op.payload
        try:
            self._finish_produce(results, waits, response_callback)
        except Exception as e:  # noqa: BLE001
            log.exception("completing a delayed produce failed")
            if error_callback is not None:
                error_callback(e)

    def _finish_produce(self, results, waits, response_callback) -> None:
        """Each waiting append's outcome (REQUEST_TIMED_OUT if still short) into its result, then the
        answer."""
        for i, topic, partition, required, epoch in waits:
            status = self.produce_status(topic, partition, required, epoch)
            if status is None:
                status = RequestTimedOutError(
                    f"{topic}-{partition}: not replicated to the ISR up to offset {required} within the request's timeout"
                )
            if status != 0:
                results[i] = ProducePartitionResult(results[i].info, status)
        response_callback(results)

    def _leader_log_creating_topic(self, topic: str, partition: int, may_create: Callable[[str], bool] | None = None):
        """:meth:`leader_log`, creating an unknown topic first when ``auto.create.topics.enable``
        (which also covers Produce to an unknown topic; never ``__consumer_offsets``)."""
        try:
            return self.leader_log(topic, partition)
        except UnknownTopicOrPartitionError:
            if (
                not self.config.auto_create_topics_enable
                or topic == OFFSETS_TOPIC
                or self.cluster.topic(topic, refresh_if_missing=True) is not None
                or (may_create is not None and not may_create(topic))
            ):
                raise
            self.auto_create_topic(topic)
            return self.leader_log(topic, partition)

    def _append_to_leader(self, topic: str, partition: int, records, required_acks: int):
        """One partition of :meth:`append_records`: the append (the caller then wakes the Fetches and
        moves the high watermark, once every partition is appended).  Returns ``(AppendInfo, wait)``:
        ``wait`` is ``(required offset, leader epoch)`` when an acks=all Produce must wait for the
        high watermark (a replicated partition), else None."""
        lg = self.leader_log(topic, partition)
        key = (topic, partition)
        part = self._partitions.get(key)
        replicated = part is not None and part.replicated
        leader_epoch = self.leader_epoch(topic, partition)
        if replicated and required_acks == -1:
            info = part.append_records_to_leader(
                records, leader_epoch, min_insync_replicas=lambda: self.min_insync_replicas_for(topic)
            )
        else:
            info = lg.append(records, leader_epoch=leader_epoch)
        if not replicated or required_acks != -1:
            return info, None
        return info, (info.last_offset + 1, leader_epoch)

    def append_transaction_marker(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> ReplicaWait | None:
        """WriteTxnMarkers' append of one COMMIT/ABORT marker to a partition led here (request handler
        thread): on a replicated partition through :meth:`Partition.append_control_marker_to_leader`
        (acks=all: returns the :class:`ReplicaWait` to wait on), else to the log at the leader epoch
        (None); then the long-polling Fetches of the partition are woken (read_committed ones see the
        new last stable offset).  Raises UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER /
        NOT_ENOUGH_REPLICAS and the log's errors (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED)."""
        lg = self.leader_log(topic, partition)
        part = self._partitions.get((topic, partition))
        if part is not None and part.replicated:
            info, epoch = part.append_control_marker_to_leader(
                self.broker_id,
                producer_id,
                producer_epoch,
                commit,
                coordinator_epoch,
                min_insync_replicas=lambda: self.min_insync_replicas_for(topic),
            )
            wait = ReplicaWait(topic, partition, info.last_offset + 1, epoch)
        else:
            lg.append_control_marker(
                producer_id, producer_epoch, commit, coordinator_epoch, leader_epoch=self.leader_epoch(topic, partition)
            )
            wait = None
        self.partition_changed(topic, partition, MARKER_BYTES)
        return wait

    def produce_status(self, topic: str, partition: int, required_offset: int, leader_epoch: int):
        """Kafka's ``checkEnoughReplicasReachOffset`` for an acks=all append that needs the high
        watermark at ``required_offset`` (its last offset + 1): None (keep waiting), 0 (done), or
        the PyklogError to answer (no longer the leader at ``leader_epoch``; the ISR below
        ``min.insync.replicas`` when the high watermark got there)."""
        part = self._partitions.get((topic, partition))
        if part is None:
            if (topic, partition) in self._offline:
                return self._offline_error(topic, partition)
            return NotLeaderOrFollowerError(
                f"broker {self.broker_id} is no longer the leader of {topic}-{partition} at epoch {leader_epoch}"
            )
        return part.check_enough_replicas_reach_offset(
            self.broker_id, required_offset, leader_epoch, lambda: self.min_insync_replicas_for(topic)
        )

    def legacy_fetch_offsets_before(self, topic: str, partition: int, timestamp: int, max_num_offsets: int) -> list:
        """ListOffsets v0 (Kafka's ``legacyFetchOffsetsForTimestamp``, the seed's getOffsetsBefore):
        up to ``max_num_offsets`` segment base offsets before ``timestamp`` (-1 latest, -2 earliest)
        of a partition led here.  UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER otherwise.
        Request handler threads; lock-free reads of the log."""
        return list(self.leader_log(topic, partition).offsets_before(timestamp, max_num_offsets))

    def fetch_offset_for_timestamp(
        self, topic: str, partition: int, timestamp: int, read_committed: bool
    ) -> tuple[int, int]:
        """ListOffsets v1+ (Kafka's ``fetchOffsetForTimestamp``) on a partition led here: ``(offset,
        timestamp)``, -1 for what is not found or not answered.  -1 latest (the high watermark; the
        last stable offset for READ_COMMITTED), -2 earliest and -4 earliest local (KIP-405; all is
        local: the log start offset), -3 the first record with the largest timestamp (KIP-734),
        else the first record at or after ``timestamp``; a found record must be below the high
        watermark (READ_COMMITTED: the last stable offset, Kafka's ``lastFetchableOffset``).
        UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER otherwise.  Request handler threads;
        lock-free reads of the log."""
        lg = self.leader_log(topic, partition)
        offset, found_ts = -1, -1
        if timestamp == -1:
            # consumers' latest: the high watermark (= log end offset unreplicated)
            offset = lg.last_stable_offset if read_committed else lg.high_watermark
        elif timestamp == -2 or timestamp == -4:  # -4 (v8, KIP-405): the earliest local offset; all is local
            offset = lg.log_start_offset
        elif timestamp == -3:  # v7 (KIP-734): the first record with the largest timestamp
            fetchable = lg.last_stable_offset if read_committed else lg.high_watermark
            found = _max_timestamp_offset(lg)
            if found is not None and found[0] < fetchable:
                offset, found_ts = found
        else:
            lso = lg.last_stable_offset if read_committed else lg.high_watermark
            found = lg.offset_for_timestamp(timestamp)
            if found is not None and (lso is None or found[0] < lso):
                offset, found_ts = found
        return offset, found_ts

    def last_offset_for_leader_epoch(
        self, topic: str, partition: int, current_leader_epoch: int, leader_epoch: int
    ) -> tuple[int, int]:
        """Kafka's ``lastOffsetForLeaderEpoch`` (OffsetForLeaderEpoch, leader side): ``(epoch, end
        offset)`` where ``leader_epoch`` ends in this leader's log (``Log.end_offset_for_epoch``: the
        largest epoch <= the requested one and the start offset of the next, or the log end offset
        for the current epoch; -1/-1 when undefined).  ``current_leader_epoch`` (-1: no check) is
        fenced against this broker's leader epoch: older -> FENCED_LEADER_EPOCH, newer ->
        UNKNOWN_LEADER_EPOCH.  Raises UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER for a
        partition not led here.  Request handler threads; lock-free reads of the log's epoch cache."""
        lg = self.leader_log(topic, partition)
        current = self.leader_epoch(topic, partition)
        asked = current_leader_epoch
        if asked >= 0 and asked < current:
            raise FencedLeaderEpochError(
                f"{topic}-{partition}: current leader epoch {asked} is older than the leader's {current}"
            )
        if asked > current:
            raise UnknownLeaderEpochError(
                f"{topic}-{partition}: current leader epoch {asked} is newer than the leader's {current}"
            )
        epoch = leader_epoch
        latest = lg.latest_epoch
        if latest < epoch <= current:
            # the cache lacks the current epoch (nothing written in it yet and become_leader has
            # not assigned it): answer as Kafka's leader, whose cache always ends with (current
            # epoch, its start): the epoch asked for ends at the LEO, reported as the current one,
            # the latest known below it, or itself when none is known
            found = epoch if epoch == current or latest < 0 else latest
            return found, lg.log_end_offset
        return lg.end_offset_for_epoch(epoch)

    # ------------------------------------------------------------------ Fetch (request handler threads)

    def fetch_messages(
        self,
        params: FetchParams,
        fetch_infos,
        quota,
        response_callback,
        error_callback=None,
        *,
        context=None,
        authorize=None,
    ) -> None:
        """Kafka's ``fetchMessages``: read the partitions of one Fetch and answer through
        ``response_callback(results)``, ``results`` being ``[(topic, [(partition,
        FetchPartitionData)])]`` in the order of ``fetch_infos`` (``[(topic, [(partition, fetch
        offset, partition max bytes, current leader epoch)])]``, the epoch -1 when not given).

        A follower (``params.replica_id`` >= 0) reads up to the log end offset, is throttled by
        ``quota`` (the leader's :class:`~pyklog.broker.server.replication_quota.LeaderReplicationQuota`,
        KIP-73; None: none) and moves its follower state (log end offset, caught-up time: may expand
        the ISR and move the high watermark); a consumer reads below the high watermark, or with
        READ_COMMITTED below the last stable offset and gets the aborted transactions it overlaps.
        ``current_leader_epoch`` is fenced for both (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH,
        KIP-320), once, when the request arrives.

        Fewer than ``min_bytes`` read, no partition in error and ``max_wait_ms`` > 0 (and not after
        :meth:`begin_shutdown`): the Fetch waits in the fetch purgatory (Kafka's DelayedFetch) without
        holding the thread, and the callback runs on the thread completing it (an appending thread,
        the timer, shutdown) with no lock held; else it runs at once on the calling thread.
        ``error_callback(exception)`` (or nothing) is told when a delayed completion fails.

        In a fetch session (``context``, a :class:`~pyklog.broker.server.fetch_session.FetchContext`;
        ``fetch_infos`` then None): the partitions read come from ``context.plan()`` (filtered by
        ``authorize(fetch_infos) -> (allowed, denied)`` when given) and the callback is
        ``response_callback(results, denied)``; an incremental fetch waits on its session's one key
        (woken by the appends and high watermark moves of its partitions) and re-plans at each read,
        so an idle session costs nothing per partition."""
        denied: list = []
        if context is not None:
            fetch_infos, denied = self._plan_fetch(context, authorize)
        fetch = DelayedFetch(
            params,
            fetch_infos,
            fenced_partitions(self, fetch_infos),
            quota,
            response_callback,
            error_callback,
            context,
            authorize,
            denied,
        )
        session = fetch.session
        if session is not None:
            keys = [session.watch_key]
            moved = session.has_changes
        else:
            keys = [(t, p[0]) for t, parts in fetch_infos for p in parts]
            moved = fetch_moved(self, keys, params.is_follower)  # marks taken before the read (see fetch.fetch_moved)
        results, nbytes, errors = read_fetch(self, fetch)
        if (
            params.max_wait_ms <= 0
            or nbytes >= params.min_bytes
            or errors
            or (not fetch_infos and session is None)
            or self._answer_at_once
        ):
            self._answer_fetch(fetch, results)
            return
        self.fetch_purgatory.watch(
            DelayedOperation(
                keys,
                params.max_wait_ms,
                params.min_bytes,
                nbytes,
                fetch,
                ready=moved,
                on_complete=self._complete_delayed_fetch,
            )
        )

    @staticmethod
    def _plan_fetch(context, authorize):
        fetch_infos = context.plan()
        if authorize is not None and fetch_infos:
            return authorize(fetch_infos)
        return fetch_infos, []

    @staticmethod
    def _answer_fetch(fetch: DelayedFetch, results) -> None:
        if fetch.context is None:
            fetch.response_callback(results)
        else:
            fetch.response_callback(results, fetch.denied)

    def _complete_delayed_fetch(self, op: DelayedOperation) -> None:
        """The purgatory's completion (on the appending thread, the timer thread or at
        shutdown): re-read and answer.  A READ_COMMITTED fetch woken by appends that are all
        above the last stable offset (an open transaction's data) still has fewer than
        ``min_bytes`` to return: it waits again for the rest of its time, so it completes when
        the marker moves the LSO (Kafka's DelayedFetch counts bytes up to the LSO)."""
        fetch: DelayedFetch = op.payload
        params = fetch.params
        try:
            session = fetch.session
            if session is not None:  # re-plan: the partitions changed meanwhile
                fetch_infos, denied = self._plan_fetch(fetch.context, fetch.authorize)
                fetch = fetch._replace(
                    fetch_infos=fetch_infos, fenced=fenced_partitions(self, fetch_infos), denied=denied
                )
                moved = session.has_changes
            else:
                moved = fetch_moved(self, op.keys, params.is_follower)  # before the re-read, as in fetch_messages
            results, nbytes, errors = read_fetch(self, fetch, from_purgatory=True)
            remaining_ms = int((op.deadline - time.monotonic()) * 1000)
            # READ_COMMITTED, or a consumer of a replicated log woken by an append still above
            # the high watermark: fewer than min_bytes readable yet, wait for the rest of the time
            if (
                nbytes < op.min_bytes
                and not errors
                and remaining_ms > 0
                and not self._answer_at_once
                and (params.isolation_level == 1 or not params.is_follower)
            ):
                self.fetch_purgatory.watch(
                    DelayedOperation(
                        op.keys,
                        remaining_ms,
                        op.min_bytes,
                        nbytes,
                        fetch,
                        ready=moved,
                        on_complete=self._complete_delayed_fetch,
                    )
                )
                return
            self._answer_fetch(fetch, results)
        except Exception as e:  # noqa: BLE001
            log.exception("completing a delayed fetch failed")
            if fetch.error_callback is not None:
                fetch.error_callback(e)

    # ------------------------------------------------------------------ follower side (fetcher threads)

    def append_as_follower(
        self,
        topic: str,
        partition: int,
        data,
        leader_high_watermark: int,
        leader_epoch: int,
        leader_log_start_offset: int = -1,
    ):
        """A fetcher thread's append of the leader's batches (offsets kept), then the follower's
        high watermark = min(leader's, own log end offset) and its log start offset moves up to the
        leader's (DeleteRecords, retention on the leader; Kafka's ``maybeIncrementLogStartOffset``).
        NotLeaderOrFollowerError if the partition is no longer followed at ``leader_epoch``."""
        part = self._partitions.get((topic, partition))
        if part is None:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} is no longer hosted here")
        return part.append_records_to_follower(data, leader_high_watermark, leader_epoch, leader_log_start_offset)

    def as_follower(self, topic: str, partition: int, leader_epoch: int, fn):
        """Run ``fn(log)`` (a fetcher thread's truncation) under the partition lock if the partition
        is still followed at ``leader_epoch``; else NotLeaderOrFollowerError and nothing runs (a
        truncation must never cut a log that has just become the leader's)."""
        part = self._partitions.get((topic, partition))
        if part is None:
            raise NotLeaderOrFollowerError(f"{topic}-{partition} is no longer hosted here")
        return part.run_as_follower(leader_epoch, fn)

    def follower_log(self, topic: str, partition: int, leader_epoch: int):
        """The local log of a partition followed at ``leader_epoch`` (fetcher threads), else None."""
        part = self._partitions.get((topic, partition))
        if part is None or part.is_leader or part.leader_epoch != leader_epoch:
            return None
        return part.log

    def _hosted_log(self, topic: str, partition: int):
        """The local log of a partition this broker hosts, created if missing, with the topic's
        config, checked against the registry's topic id (a deleted topic's leftover log is deleted,
        never served: :meth:`LogManager.get_or_create_log`)."""
        return self.logs.get_or_create_log(
            topic, partition, self.log_config_for(topic), topic_id=self.cluster.topic_id(topic)
        )

    def log_config_for(self, topic: str):
        """The broker's log config with the topic's overrides (defaults if ZooKeeper cannot say).
        The same overrides on the same broker config give the same LogConfig object (parsed once,
        and a log given its own config again compares it by identity)."""
        try:
            overrides = self.cluster.topic_config(topic)
        except Exception:  # noqa: BLE001
            overrides = {}
        base = self.default_log_config
        if not overrides:
            return base
        cached = self._log_configs.get(topic)
        if cached is not None and cached[0] is base and cached[1] == overrides:
            return cached[2]
        cfg = base.with_overrides(overrides)
        if len(self._log_configs) >= 100_000:
            self._log_configs.clear()  # deleted topics' entries: bounded
        self._log_configs[topic] = (base, overrides, cfg)
        return cfg

    # ------------------------------------------------------------------ lookups (request handler threads)

    def leader_log(self, topic: str, partition: int):
        """The local log of a partition this broker leads; UnknownTopicOrPartitionError /
        NotLeaderOrFollowerError otherwise."""
        key = (topic, partition)
        if key in self._led:
            lg = self.logs.get_log(topic, partition)
            if lg is not None:
                return lg
        if key in self._offline:
            raise self._offline_error(topic, partition)
        validate_topic_name(topic)  # before any ZooKeeper path or directory is built from it
        # one partition's cached state (O(1)): a request for each partition of a new topic of N
        # partitions (followers' OffsetsForLeaderEpoch before the state is applied here) must not
        # build the topic's N states each time
        st = self.cluster.partition_state_as_written(topic, partition)
        if st is None:
            parts = self.cluster.topic(topic, refresh_if_missing=True)
            if not parts or partition not in parts:
                raise UnknownTopicOrPartitionError(f"this server does not host partition {topic}-{partition}")
            st = self.cluster.partition_state_as_written(topic, partition) or parts[partition]
        if st.leader != self.broker_id or key in self._resigned:
            raise NotLeaderOrFollowerError(
                f"broker {self.broker_id} is not the leader of {topic}-{partition} "
                f"(leader: {st.leader if key not in self._resigned else 'moved by its controlled shutdown'})"
            )
        # a partition this broker leads that the last sync has not applied yet (a brand new topic)
        with self._sync_lock:
            # re-read under the applying lock: never apply a state older than one applied meanwhile
            st = self.cluster.partition_state_as_written(topic, partition) or st
            if st.leader != self.broker_id:
                raise NotLeaderOrFollowerError(
                    f"broker {self.broker_id} is not the leader of {topic}-{partition} (leader: {st.leader})"
                )
            lg = self._hosted_log(topic, partition)
            self._apply_state(topic, partition, lg, st)
        return lg

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch of a partition this broker leads (0 if not known yet)."""
        return self._epochs.get((topic, partition), 0)

    def local_log(self, topic: str, partition: int):
        """This broker's log of a partition, or None (no leadership check)."""
        return self.logs.get_log(topic, partition)

    @property
    def led_partitions(self) -> frozenset:
        """The (topic, partition) pairs this broker leads now (a snapshot)."""
        return frozenset(self._led)  # one C-level copy: atomic against the changes under _sync_lock

    def delete_local_logs(self, topic: str) -> None:
        """Delete this broker's logs of a deleted topic at once (other brokers follow through their
        registry listener), so a topic re-created right away never finds the old records."""
        with self._sync_lock:
            for key in [k for k in self._partitions if k[0] == topic]:
                self._drop_partition(key)
            for t, p in list(self.logs.logs()):
                if t == topic:
                    try:
                        self.logs.delete_log(t, p)
                    except Exception:  # noqa: BLE001
                        log.exception("cannot delete the log of %s-%d", t, p)

    def _report_out_of_descriptors(self, keys: list) -> None:
        """One ERROR per sync pass (not a traceback per partition) when the process ran out of file
        descriptors creating logs: the partitions stay unserved, the rest of the broker (its
        ZooKeeper session, the logs it has) goes on, and the next pass tries again."""
        try:
            soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError):
            soft = -1
        log.error(
            "cannot create the logs of %d partition(s) (%s%s): too many open files (the broker's limit is %d "
            "descriptors, about one per segment plus two per partition written since start); they are not "
            "served until the next log sync finds descriptors: raise ulimit -n (docs/operations.md, "
            "'Partitions at scale')",
            len(keys),
            ", ".join(f"{t}-{p}" for t, p in keys[:5]),
            ", ..." if len(keys) > 5 else "",
            soft,
        )

    def _report_strays(self, strays: dict) -> None:
        """Logs present on disk whose topic is missing from the registry without a deletion request
        (ZooKeeper restarted empty, znodes removed by hand): kept, not served (not in the led set),
        their retention and compaction paused, reported at ERROR once per log until its topic comes
        back (then it is served and cleaned again)."""
        new = {k: lg for k, lg in strays.items() if k not in self._strays_reported}
        self._strays_reported = frozenset(strays)
        if not new:
            return
        details = ", ".join(
            f"{lg.dir} ({_size_of(lg)} bytes, log end offset {_leo_of(lg)})" for _, lg in sorted(new.items())
        )
        log.error(
            "keeping %d log(s) whose topic is not in the ZooKeeper registry and was not deleted by "
            "request: %s. They are not served. If ZooKeeper lost its data, restore it and the topics "
            "come back with their records; to remove them, re-create the topic and delete it "
            "(DeleteTopics / pyklog-topics --delete), or remove the directories by hand.",
            len(new),
            details,
        )

    # ------------------------------------------------------------------ topic creation

    def auto_create_topic(self, name: str) -> None:
        """Create ``name`` with the broker's defaults (``num.partitions``,
        ``default.replication.factor``); a topic created meanwhile by someone else is fine."""
        try:
            self.cluster.create_topic(name, self.config.num_partitions, self.config.default_replication_factor)
            log.info("auto-created topic %s (%d partitions)", name, self.config.num_partitions)
        except TopicAlreadyExistsError:
            pass

    # a cache update that does not call the listeners (ZkCluster.refresh()) is still seen this often
    TOPIC_RECHECK_S = 0.1

    def _in_registry_cache(self, name: str) -> bool:
        return self.cluster.topic(name, refresh_if_missing=False) is not None

    def wait_for_topic(self, name: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``name`` to be in the registry cache; True if it is.

        Wakes up on the registry's change listener (called when the topic watch has updated the
        cache) and re-checks at least every :attr:`TOPIC_RECHECK_S` (a cache refreshed without a
        notification)."""
        deadline = Deadline.after(timeout_s)
        changed = threading.Event()
        on_change = changed.set
        self.cluster.add_listener(on_change)
        try:
            while True:
                changed.clear()  # before the check, so a change during the check is not lost
                if self._in_registry_cache(name):  # O(1): no copy of the whole registry per topic
                    return True
                if deadline.expired():
                    return False
                changed.wait(min(self.TOPIC_RECHECK_S, deadline.remaining()))
        finally:
            self.cluster.remove_listener(on_change)


def _max_timestamp_offset(lg) -> tuple[int, int] | None:
    """ListOffsets v7+ MAX_TIMESTAMP (-3, KIP-734): ``(offset, timestamp)`` of the first record
    holding the largest timestamp of the log (its segments' largest, then the first record at
    or after it), None for a log without records.  Lock-free, as ``offset_for_timestamp``."""
    max_ts = max((seg.max_timestamp for seg in lg.segments), default=-1)
    if max_ts < 0:
        return None
    return lg.offset_for_timestamp(max_ts)


def _size_of(lg) -> int | str:
    try:
        return lg.size
    except Exception:  # noqa: BLE001 - a closed or broken log still gets reported
        return "?"


def _leo_of(lg) -> int | str:
    try:
        return lg.log_end_offset
    except Exception:  # noqa: BLE001
        return "?"


__all__ = [
    "FetchParams",
    "FetchPartitionData",
    "FollowerState",
    "Partition",
    "ProducePartitionResult",
    "ReplicaManager",
]  # Partition, FollowerState: broker.server.partition
