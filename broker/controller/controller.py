"""The controller: Kafka's ``KafkaController`` in ZooKeeper mode, telling brokers through ZooKeeper.

Every broker runs one :class:`KafkaController`; it acts only while its broker holds ``/controller``.

**Election** (Kafka's ``KafkaZkClient.registerControllerAndIncrementControllerEpoch``): a broker
that sees no ``/controller`` (a data watch, re-armed by kazoo after reconnects and new sessions)
runs for it in ONE multi-op: create the ephemeral ``/controller``
``{"version":1,"brokerid":N,"timestamp":"<ms>"}`` and set ``/controller_epoch`` to epoch+1 at the
version read.  The first broker whose multi succeeds is the controller; the others read who won.

**Fencing.** Every write of the controller (partition states, assignments, admin znodes) is a
multi-op that starts with a check of ``/controller_epoch`` at the version this controller wrote:
once another broker has become controller (after this one's session expired, say while it was
SIGSTOPped), the check fails, nothing is written, and this controller resigns
(:class:`ControllerMovedError`).  A lost session also resigns at once (kazoo's LOST state).

**Telling brokers.** No LeaderAndIsr / UpdateMetadata requests: the controller writes Kafka's
partition state znodes ``/brokers/topics/<t>/partitions/<p>/state``
``{"controller_epoch","leader","version","leader_epoch","isr"}`` conditionally on each znode's version
(batched, many partitions per multi-op), and brokers follow them through ZooKeeper watches
(``ZkCluster``/``ReplicaManager``, pyklog.broker.server).  Every change the controller writes bumps
``leader_epoch`` (Kafka 2.x's ``newLeaderAndIsr``), an ISR it shrinks (dead or stopping followers
removed) too: brokers apply a state when its epoch moves, so that is how the leader learns of the
smaller ISR and stops waiting for the dead follower.  A write that loses a race with a partition
leader's ISR change (BadVersion) is re-read and decided again.

**What it does** (each on the controller's single event thread, Kafka's ``ControllerEventManager``;
watch callbacks only enqueue events):

* broker failure (``/brokers/ids`` child gone, or re-created with a new czxid: a bounced broker is
  a failure then a start-up): partitions led by a dead broker get the first live replica in
  assignment order that is in the ISR (Kafka's OfflinePartitionLeaderElection), ISR minus the dead,
  leader_epoch+1.  With no live ISR member the leader becomes -1 and the ISR keeps its last member,
  unless ``unclean.leader.election.enable`` (broker default false, topic override) lets a live
  replica outside the ISR lead (logged at ERROR: records may be lost).  Dead followers leave the ISR
  of partitions whose leader lives.
* broker start-up: partitions without a live leader whose ISR holds the new broker get it as leader.
* controlled shutdown (ControlledShutdown, API key 7): leadership of the stopping broker's
  partitions (replication factor > 1) moves to another live ISR member (epoch+1), the broker
  leaves the ISRs, and the partitions it still leads are answered (the broker retries).
* preferred replica election: ``/admin/preferred_replica_election`` (Kafka's JSON), ElectLeaders
  (API key 43, preferred and unclean) and ``auto.leader.rebalance.enable`` (every
  ``leader.imbalance.check.interval.seconds``, brokers over ``leader.imbalance.per.broker.percentage``).
* partition reassignment: ``/admin/reassign_partitions`` (Kafka's JSON), Kafka's algorithm: the
  assignment becomes the target followed by the old replicas (RS+TRS) and the leader epoch is bumped
  so new replicas start fetching; once every target replica is in the ISR (checked on
  ``/isr_change_notification`` events and every second) a leader is elected from the target if the
  current one is not in it, the ISR keeps only target replicas, the assignment becomes the target
  and the partition leaves the znode, which is deleted when empty.
* ``/isr_change_notification/isr_change_<seq>`` nodes written by partition leaders are read and
  deleted.
* topic deletion (Kafka's ``TopicDeletionManager``): a topic marked for deletion
  (``/admin/delete_topics/<t>``) is deleted replica by replica.  The controller creates
  ``/admin/replica_deletions/<t>`` naming the brokers holding its replicas (Kafka's
  StopReplica(deletePartitions=true)): every broker hides the topic from its metadata, stops its
  replicas and deletes their logs, then answers with a child node ``<broker id>``.  Once every
  listed broker has answered, one multi-op removes ``/brokers/topics/<t>``, ``/config/topics/<t>``,
  the replica deletion nodes and the marker, and records ``/admin/deleted_topics/<t>``.  A broker
  that is down answers when it starts again (Kafka's "ineligible for deletion" replicas); a topic
  with a reassignment in progress waits for it to end; ``delete.topic.enable=false`` removes the
  markers instead.
* log dir failure (``/log_dir_event_notification/log_dir_event_<seq>``, written by a broker whose
  log dir went offline, Kafka's ``LogDirEventNotification``): the replicas it names are offline
  (Kafka's ``replicasOnOfflineDirs``): partitions they lead get another live ISR member as leader,
  and they leave the ISRs (epoch+1), as for a dead broker but for those partitions only.  They
  count as offline in every later election until that broker registers again (a restart).

Thread-safety: public methods may be called from any thread; everything that reads or writes
ZooKeeper state runs on the event thread (``controller-event-thread``); callers of
:meth:`controlled_shutdown` and :meth:`elect_leaders` wait for their event.
"""

from __future__ import annotations

import functools
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
)
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from pyklog.broker.controller import election
from pyklog.broker.errors import (
    BrokerNotAvailableError,
    ElectionNotNeededError,
    EligibleLeadersNotAvailableError,
    InvalidReplicaAssignmentError,
    NoReassignmentInProgressError,
    NotControllerError,
    PreferredLeaderNotAvailableError,
    PyklogError,
    StaleBrokerEpochError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
)
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import (
    ControllerRegistration,
    LeaderAndIsr,
    ZkDataError,
    decode_controller,
    decode_controller_epoch,
    decode_log_dir_event,
    decode_partition_list,
    decode_partition_state,
    decode_reassignment,
    decode_replica_deletion,
    decode_topic_assignment,
    decode_topic_id,
    encode_controller,
    encode_controller_epoch,
    encode_partition_state,
    encode_reassignment,
    encode_replica_deletion,
    encode_topic_assignment,
)

log = logging.getLogger(__name__)

TP = tuple  # (topic, partition)

#: partition state writes per multi-op (each a set_data, plus the epoch check)
MAX_STATES_PER_MULTI = 1000
#: how often reassignments in progress are checked besides ISR change notifications
REASSIGNMENT_CHECK_S = 1.0
#: ElectionType of ElectLeaders (KIP-460)
PREFERRED, UNCLEAN = 0, 1


class ControllerMovedError(Exception):
    """The ``/controller_epoch`` check of a controller write failed: another broker is controller."""


def _tp_str(tp: TP) -> str:
    return f"{tp[0]}-{tp[1]}"


class KafkaController:
    """One broker's controller (active only while this broker holds ``/controller``).

    ``cluster`` is the broker's started :class:`~pyklog.broker.zk.cluster.ZkCluster` (its kazoo
    client and topic registry cache are used); ``topic_config(topic) -> dict`` reads topic overrides
    (``unclean.leader.election.enable``).
    """

    def __init__(
        self,
        cluster,
        broker_id: int,
        *,
        unclean_leader_election: bool = False,
        auto_leader_rebalance: bool = True,
        imbalance_check_interval_s: float = 300.0,
        imbalance_percentage: int = 10,
        topic_config: Callable[[str], dict] | None = None,
        on_elected: Callable[[], None] | None = None,
        delete_topic_enable: bool = True,
    ):
        self.cluster = cluster
        self.broker_id = int(broker_id)
        self.unclean_leader_election = unclean_leader_election
        self.auto_leader_rebalance = auto_leader_rebalance
        self.imbalance_check_interval_s = imbalance_check_interval_s
        self.imbalance_percentage = imbalance_percentage
        self._topic_config = topic_config or (cluster.topic_config)
        self._on_elected = on_elected
        self.delete_topic_enable = delete_topic_enable
        self._events: queue.Queue = queue.Queue()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._watches: list = []
        # event-thread state (Kafka's ControllerContext)
        self._active = False
        self.epoch = 0  # this controller's epoch (valid while active)
        self._epoch_zk_version = -1  # /controller_epoch's version it wrote
        self._live: dict[int, int] = {}  # live broker -> registration czxid (Kafka's broker epoch)
        self._shutting_down: set[int] = set()
        #: partition state changes written by the current event, logged once it is answered
        self._changes_to_log: list = []
        self._reassigning: dict[TP, list[int]] = {}  # target replicas (Kafka's TRS)
        self._origin: dict[TP, list[int]] = {}  # replicas before the reassignment (Kafka's ORS)
        #: broker -> its replicas on offline log dirs (Kafka's replicasOnOfflineDirs), until it re-registers
        self._offline_replicas: dict[int, set[TP]] = {}
        self._next_rebalance = 0.0
        self._next_reassignment_check = 0.0
        #: topic being deleted -> the brokers it still waits for (logged when that set changes)
        self._deleting_topics: dict[str, frozenset[int]] = {}
        self._next_deletion_check = 0.0
        #: the broker holding /controller as last seen (any thread reads it), -1 if none
        self.active_controller_id = -1

    # ------------------------------------------------------------------ lifecycle

    @property
    def zk(self):
        return self.cluster.zk

    @property
    def is_active(self) -> bool:
        """True while this broker is the controller."""
        return self._active

    def startup(self) -> KafkaController:
        """Start the event thread and the watches; runs for controller at once if there is none."""
        zk = self.zk
        for p in (
            paths.ADMIN,
            paths.ISR_CHANGE_NOTIFICATION,
            paths.LOG_DIR_EVENT_NOTIFICATION,
            paths.ADMIN_DELETE_TOPICS,
            paths.ADMIN_REPLICA_DELETIONS,
            paths.ADMIN_DELETED_TOPICS,
        ):
            self.cluster.retry(zk.ensure_path, p)
        self._thread = threading.Thread(target=self._run, name="controller-event-thread", daemon=True)
        self._thread.start()
        zk.add_listener(self._on_zk_state)
        self._watches.append(DataWatch(zk, paths.CONTROLLER, self._on_controller_node))
        self._watches.append(ChildrenWatch(zk, paths.BROKER_IDS, self._on_broker_ids, send_event=False))
        self._watches.append(ChildrenWatch(zk, paths.ISR_CHANGE_NOTIFICATION, self._on_isr_changes))
        self._watches.append(ChildrenWatch(zk, paths.LOG_DIR_EVENT_NOTIFICATION, self._on_log_dir_events))
        self._watches.append(ChildrenWatch(zk, paths.ADMIN_DELETE_TOPICS, self._on_delete_topics))
        self._watches.append(DataWatch(zk, paths.ADMIN_REASSIGN_PARTITIONS, self._on_admin_node("reassign")))
        self._watches.append(
            DataWatch(zk, paths.ADMIN_PREFERRED_REPLICA_ELECTION, self._on_admin_node("preferred_znode"))
        )
        return self

    def shutdown(self) -> None:
        """Stop the event thread; if this broker is the controller, delete ``/controller`` so another
        broker takes over at once (instead of after the session timeout)."""
        if self._stopping:
            return
        self._stopping = True
        zk = self.zk
        if zk is not None:
            try:
                zk.remove_listener(self._on_zk_state)
            except Exception:  # noqa: BLE001
                pass
        self._events.put(("stop", None, None))
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._active and zk is not None and zk.connected:
            try:
                _, stat = zk.get(paths.CONTROLLER)
                if stat.ephemeralOwner == zk.client_id[0]:
                    zk.delete(paths.CONTROLLER, version=stat.version)
                    log.info("broker %d resigned as controller (epoch %d)", self.broker_id, self.epoch)
            except (NoNodeError, BadVersionError):
                pass
            except KazooException as e:
                log.warning("could not delete %s at shutdown: %s", paths.CONTROLLER, e)
        self._active = False

    # ------------------------------------------------------------------ public requests

    def controlled_shutdown(self, broker_id: int, broker_epoch: int = -1, timeout_s: float = 30.0) -> list[TP]:
        """ControlledShutdown (Kafka's ``doControlledShutdown``): move leadership away from
        ``broker_id`` and take it out of the ISRs; returns the partitions it still leads.  Raises
        NotControllerError, BrokerNotAvailableError, StaleBrokerEpochError."""
        return self._call("controlled_shutdown", (int(broker_id), int(broker_epoch)), timeout_s)

    def elect_leaders(
        self, partitions: Iterable[TP] | None, election_type: int = PREFERRED, timeout_s: float = 30.0
    ) -> dict[TP, PyklogError | None]:
        """ElectLeaders (KIP-460): ``{tp: None (elected) or the error}`` (ELECTION_NOT_NEEDED,
        PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PARTITION);
        ``partitions`` None means every partition.  NotControllerError if not the controller."""
        tps = None if partitions is None else [(str(t), int(p)) for t, p in partitions]
        return self._call("elect_leaders", (tps, int(election_type)), timeout_s)

    def alter_partition_reassignments(self, changes: dict, timeout_s: float = 30.0) -> dict[TP, PyklogError | None]:
        """AlterPartitionReassignments (KIP-455): ``changes`` maps ``(topic, partition)`` to the target
        replica list, or None to cancel that partition's reassignment.  Returns ``{tp: None (started,
        cancelled or nothing to do) or the error}`` (UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS).  NotControllerError if not the
        controller.  Runs the change on the event thread; the caller waits for it, not for the move."""
        norm = {(str(t), int(p)): (None if r is None else [int(b) for b in r]) for (t, p), r in changes.items()}
        return self._call("alter_reassignments", (norm,), timeout_s)

    def list_partition_reassignments(
        self, partitions: Iterable[TP] | None = None, timeout_s: float = 30.0
    ) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        """ListPartitionReassignments (KIP-455): ``{tp: (replicas, adding_replicas, removing_replicas)}``
        of the reassignments in progress (of ``partitions`` only, if given).  NotControllerError if not
        the controller."""
        tps = None if partitions is None else [(str(t), int(p)) for t, p in partitions]
        return self._call("list_reassignments", (tps,), timeout_s)

    def submit(self, name: str, arg: tuple) -> Future:
        """Queue one of the request events (``controlled_shutdown``, ``elect_leaders``,
        ``alter_reassignments``, ``list_reassignments``, with the argument tuple of the blocking
        method of that name) and return its Future at once; it completes on the event thread.  A
        request handler uses it to answer from the Future's callback instead of waiting (the I/O
        thread is not held).  NotControllerError if this broker is not the controller."""
        if not self._active:
            raise NotControllerError(
                f"broker {self.broker_id} is not the controller (controller: {self.active_controller_id})"
            )
        fut: Future = Future()
        self._events.put((name, arg, fut))
        return fut

    def _call(self, name, arg, timeout_s):
        return self.submit(name, arg).result(timeout=timeout_s)

    # ------------------------------------------------------------------ watches (kazoo threads)

    def _enqueue(self, name, arg=None) -> None:
        if not self._stopping:
            self._events.put((name, arg, None))

    def _on_zk_state(self, state) -> None:
        # kazoo's connection thread: no blocking calls
        if state == KazooState.LOST and self._active:
            self._active = False  # a lost session resigns at once; the epoch check fences the rest
            log.warning("broker %d: ZooKeeper session lost: no longer acting as controller", self.broker_id)
            self._enqueue("resigned")
        elif state == KazooState.CONNECTED:
            self._enqueue("elect")

    def _on_controller_node(self, data, stat, event=None):
        if self._stopping:
            return False
        if data is None:
            self.active_controller_id = -1
            self._set_cluster_controller(None)
            self._enqueue("elect")
            return None
        try:
            cid = decode_controller(data, paths.CONTROLLER).broker_id
        except ZkDataError as e:
            log.warning("%s", e)
            return None
        self.active_controller_id = cid
        self._set_cluster_controller(cid)
        if cid != self.broker_id and self._active:
            self._enqueue("elect")  # someone else holds it: the event thread resigns
        return None

    def _set_cluster_controller(self, cid):
        setter = getattr(self.cluster, "set_controller_id", None)
        if setter is not None:
            setter(cid)

    def _on_broker_ids(self, children):
        if self._stopping:
            return False
        self._enqueue("broker_change")
        return None

    def _on_isr_changes(self, children):
        if self._stopping:
            return False
        if children:
            self._enqueue("isr_change")
        return None

    def _on_log_dir_events(self, children):
        if self._stopping:
            return False
        if children:
            self._enqueue("log_dir_event")
        return None

    def _on_delete_topics(self, children):
        if self._stopping:
            return False
        if children:
            self._enqueue("topic_deletion")
        return None

    def _on_replica_deletion_answers(self, event=None) -> None:
        # one-shot watch of /admin/replica_deletions/<t>'s children (a broker answered)
        self._enqueue("topic_deletion")

    def _on_admin_node(self, event_name):
        def watch(data, stat, event=None):
            if self._stopping:
                return False
            if data is not None:
                self._enqueue(event_name)
            return None

        return watch

    # ------------------------------------------------------------------ the event thread

    def _run(self) -> None:
        handlers = {
            "elect": self._elect,
            "resigned": lambda: None,
            "broker_change": self._on_broker_change,
            "isr_change": self._process_isr_changes,
            "log_dir_event": self._process_log_dir_events,
            "reassign": self._read_reassignments,
            "preferred_znode": self._process_preferred_znode,
            "topic_deletion": self._process_topic_deletions,
        }
        while True:
            timeout = self._next_timer()
            try:
                name, arg, fut = self._events.get(timeout=timeout)
            except queue.Empty:
                name, arg, fut = "timer", None, None
            if name == "stop":
                if fut is not None:
                    fut.set_result(None)
                return
            try:
                if name in ("controlled_shutdown", "elect_leaders", "alter_reassignments", "list_reassignments"):
                    if not self._active:
                        raise NotControllerError(f"broker {self.broker_id} is not the controller")
                    fn = {
                        "controlled_shutdown": self._controlled_shutdown,
                        "elect_leaders": self._elect_leaders,
                        "alter_reassignments": self._alter_reassignments,
                        "list_reassignments": self._list_reassignments,
                    }[name]
                    fut.set_result(fn(*arg))
                elif name == "timer":
                    self._on_timer()
                elif name == "elect":
                    self._elect()
                elif self._active:
                    handlers[name]()
            except ControllerMovedError as e:
                self._resign(str(e))
                if fut is not None and not fut.done():
                    fut.set_exception(NotControllerError(f"controller moved: {e}"))
            except BaseException as e:  # noqa: BLE001 - the event thread never dies
                if fut is not None and not fut.done():
                    fut.set_exception(e if isinstance(e, Exception) else RuntimeError(str(e)))
                if self._stopping:
                    continue
                if isinstance(e, (PyklogError, KazooException)):
                    log.warning("controller event %s failed: %s", name, e)
                else:
                    log.exception("controller event %s failed", name)
            finally:
                self._log_changes()

    def _next_timer(self) -> float | None:
        if not self._active:
            return 1.0
        now = time.monotonic()
        due = []
        if self.auto_leader_rebalance:
            due.append(self._next_rebalance)
        if self._reassigning:
            due.append(self._next_reassignment_check)
        if self._deleting_topics:
            due.append(self._next_deletion_check)
        if not due:
            return 1.0
        return max(0.0, min(min(due) - now, 1.0))

    def _on_timer(self) -> None:
        if not self._active:
            return
        now = time.monotonic()
        if self._reassigning and now >= self._next_reassignment_check:
            self._next_reassignment_check = now + REASSIGNMENT_CHECK_S
            self._check_reassignments()
        if self._deleting_topics and now >= self._next_deletion_check:
            self._process_topic_deletions()  # the answers' watches may have been lost with a session
        if self.auto_leader_rebalance and now >= self._next_rebalance:
            self._next_rebalance = now + self.imbalance_check_interval_s
            self._auto_rebalance()

    # ------------------------------------------------------------------ election and fencing

    def _elect(self) -> None:
        """Run for controller if ``/controller`` is absent; resign if another broker holds it."""
        zk = self.zk
        if self._stopping or zk is None or not zk.connected:
            return
        for _ in range(5):
            try:
                data, stat = self.cluster.retry(zk.get, paths.CONTROLLER)
            except NoNodeError:
                pass
            else:
                holder = decode_controller(data, paths.CONTROLLER).broker_id
                self.active_controller_id = holder
                self._set_cluster_controller(holder)
                if holder == self.broker_id and stat.ephemeralOwner == zk.client_id[0]:
                    if not self._active:  # our own node (a retried create): act on it
                        self._read_epoch_and_failover()
                    return
                if self._active:
                    self._resign(f"{paths.CONTROLLER} is held by broker {holder}")
                return
            try:
                edata, estat = self.cluster.retry(zk.get, paths.CONTROLLER_EPOCH)
            except NoNodeError:
                try:
                    self.cluster.retry(zk.create, paths.CONTROLLER_EPOCH, encode_controller_epoch(0))
                except NodeExistsError:
                    pass
                continue
            epoch = decode_controller_epoch(edata, paths.CONTROLLER_EPOCH)

            def attempt():
                t = zk.transaction()
                t.create(
                    paths.CONTROLLER,
                    encode_controller(ControllerRegistration(self.broker_id, int(time.time() * 1000))),
                    ephemeral=True,
                )
                t.set_data(paths.CONTROLLER_EPOCH, encode_controller_epoch(epoch + 1), version=estat.version)
                return t.commit()

            results = self.cluster.retry(attempt)
            if isinstance(results[0], NodeExistsError):
                continue  # another broker won: read who
            if isinstance(results[0], Exception) or isinstance(results[1], Exception):
                continue  # the epoch moved under us: read again
            self.epoch = epoch + 1
            self._epoch_zk_version = results[1].version
            self._become_controller()
            return

    def _read_epoch_and_failover(self) -> None:
        edata, estat = self.cluster.retry(self.zk.get, paths.CONTROLLER_EPOCH)
        self.epoch = decode_controller_epoch(edata, paths.CONTROLLER_EPOCH)
        self._epoch_zk_version = estat.version
        self._become_controller()

    def _become_controller(self) -> None:
        """Kafka's ``onControllerFailover``: read the brokers, elect leaders for offline partitions,
        take dead brokers out of ISRs, resume reassignments and preferred elections."""
        self._active = True
        self.active_controller_id = self.broker_id
        self._set_cluster_controller(self.broker_id)
        log.info("broker %d is the controller (controller epoch %d)", self.broker_id, self.epoch)
        self._shutting_down = set()
        self._reassigning = {}
        self._origin = {}
        self._live = self._read_live_brokers()
        now = time.monotonic()
        self._next_rebalance = now + self.imbalance_check_interval_s
        self._next_reassignment_check = now
        try:
            self.cluster.refresh()
        except (PyklogError, KazooException) as e:
            log.warning("controller failover: could not refresh the topic registry: %s", e)
        self._update_partitions(self._all_partitions(), self._decide_online)
        self._resume_reassignments()
        self._read_reassignments()
        self._process_preferred_znode()
        self._process_isr_changes()
        self._process_log_dir_events()
        self._deleting_topics = {}
        self._process_topic_deletions()
        if self._on_elected is not None:
            try:
                self._on_elected()
            except Exception:  # noqa: BLE001
                log.exception("on_elected hook failed")

    def _resign(self, why: str) -> None:
        if self._active:
            log.warning("broker %d stops acting as controller (epoch %d): %s", self.broker_id, self.epoch, why)
        self._active = False
        self._reassigning = {}
        self._origin = {}
        self._shutting_down = set()
        self._deleting_topics = {}

    def _multi(self, build: Callable) -> list:
        """One multi-op guarded by ``/controller_epoch``'s version; returns the results of the
        operations ``build(transaction)`` added.  ControllerMovedError if the guard failed."""
        return self._multis([build])[0]

    def _multis(self, builds: list[Callable]) -> list[list]:
        """Several multi-ops, each guarded by ``/controller_epoch``'s version, sent together
        (pipelined: ZooKeeper answers a session's requests in order, so they are not queued behind
        the re-reads the first one's watches set off on this broker's own session); the results of
        each.  A retry after a lost connection sends them all again: one that had been applied
        then fails its version checks, and the caller re-reads what failed.  ControllerMovedError
        if a guard failed."""
        if not self._active:
            raise ControllerMovedError("not the controller")
        zk = self.zk

        def attempt():
            pending = []
            for build in builds:
                t = zk.transaction()
                t.check(paths.CONTROLLER_EPOCH, self._epoch_zk_version)
                build(t)
                pending.append(t.commit_async())
            answers = [p.get() for p in pending]
            if any(isinstance(r, NoAuthError) for results in answers for r in results):
                raise NoAuthError()  # as a single commit: reported as ZooKeeper refusing this broker
            return answers

        out = []
        for results in self.cluster.retry(attempt):
            if isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError):
                raise ControllerMovedError(
                    f"{paths.CONTROLLER_EPOCH} is no longer at version {self._epoch_zk_version} "
                    f"({type(results[0]).__name__}): another controller was elected"
                )
            out.append(results[1:])
        return out

    # ------------------------------------------------------------------ reading the cluster

    def _read_live_brokers(self) -> dict[int, int]:
        zk = self.zk

        def read():
            children = zk.get_children(paths.BROKER_IDS)
            pending = [(int(c), zk.exists_async(paths.broker_id(int(c)))) for c in children if c.isdigit()]
            out = {}
            for b, res in pending:
                stat = res.get()
                if stat is not None:
                    out[b] = stat.czxid
            return out

        return self.cluster.retry(read)

    def _assignments(self) -> dict[TP, list[int]]:
        return {(t, p): list(s.replicas) for t, parts in self.cluster.topics().items() for p, s in parts.items()}

    def _all_partitions(self) -> list[TP]:
        return sorted(self._assignments())

    def _read_states(self, tps) -> dict[TP, tuple[LeaderAndIsr, int]]:
        """Fresh ``{tp: (state, znode version)}`` (partitions without a state znode are left out)."""
        zk = self.zk

        def read():
            pending = [(tp, zk.get_async(paths.partition_state(*tp))) for tp in tps]
            out = {}
            for tp, res in pending:
                try:
                    data, stat = res.get()
                except NoNodeError:
                    continue
                try:
                    out[tp] = (decode_partition_state(data, paths.partition_state(*tp)), stat.version)
                except ZkDataError as e:
                    log.warning("%s", e)
            return out

        return self.cluster.retry(read)

    def _electable(self) -> set[int]:
        """Live brokers that may lead (Kafka's ``liveBrokerIds``: not shutting down)."""
        return set(self._live) - self._shutting_down

    def _unclean_allowed(self, topic: str) -> bool:
        try:
            value = (self._topic_config(topic) or {}).get("unclean.leader.election.enable")
        except Exception:  # noqa: BLE001 - unreadable config: the broker default
            value = None
        if value is None:
            return self.unclean_leader_election
        return str(value).strip().lower() == "true"

    # ------------------------------------------------------------------ writing partition states

    def _update_partitions(self, tps, decide, *, assignments=None, attempts: int = 5) -> dict[TP, LeaderAndIsr]:
        """Read each partition's state, ``decide(tp, state, replicas)`` its new :class:`LeaderAndIsr`
        (None: unchanged), write the changes conditionally (batched multi-ops); partitions whose
        znode changed meanwhile (a leader's ISR change) are read and decided again.  Returns the
        final state of every partition read."""
        assignments = assignments if assignments is not None else self._assignments()
        todo = [tp for tp in dict.fromkeys(tps) if tp in assignments]
        final: dict[TP, LeaderAndIsr] = {}
        for _ in range(attempts):
            if not todo:
                break
            t0 = time.monotonic()
            states = self._read_states(todo)
            t_read = time.monotonic() - t0
            changes: dict[TP, tuple[LeaderAndIsr, int]] = {}
            for tp in todo:
                if tp not in states:
                    continue
                st, version = states[tp]
                final[tp] = st
                new = decide(tp, st, assignments[tp])
                if new is not None and new != st:
                    changes[tp] = (new, version)
            retry = []
            items = sorted(changes.items())
            chunks = [items[i : i + MAX_STATES_PER_MULTI] for i in range(0, len(items), MAX_STATES_PER_MULTI)]

            def build(t, chunk):
                for tp, (new, version) in chunk:
                    t.set_data(paths.partition_state(*tp), encode_partition_state(new), version=version)

            t0 = time.monotonic()
            answers = self._multis([functools.partial(build, chunk=c) for c in chunks]) if chunks else []
            if len(todo) >= 1000:  # a burst (a controlled shutdown, a broker lost): what it cost
                log.info(
                    "controller: read %d partition states in %.2fs, wrote %d in %.2fs",
                    len(states),
                    t_read,
                    len(items),
                    time.monotonic() - t0,
                )
            for chunk, results in zip(chunks, answers, strict=True):
                if any(isinstance(r, Exception) and not isinstance(r, RolledBackError) for r in results):
                    retry.extend(tp for tp, _ in chunk)  # atomic: the whole chunk is re-decided
                    continue
                for tp, (new, _) in chunk:
                    final[tp] = new
                    self._changes_to_log.append((tp, states[tp][0], new))
            todo = retry
        if todo:
            log.warning(
                "controller: partition states kept changing, not updated: %s",
                ", ".join(_tp_str(tp) for tp in todo[:20]),
            )
        return final

    def _log_changes(self) -> None:
        """Event thread, after an event (and its answer): one line per partition state it wrote
        (Kafka's state-change log).  A controlled shutdown writes thousands; their lines no
        longer hold back the stopping broker's answer."""
        changes, self._changes_to_log = self._changes_to_log, []
        for tp, old, new in changes:
            self._log_change(tp, old, new)

    def _log_change(self, tp, old: LeaderAndIsr, new: LeaderAndIsr) -> None:
        if old.leader != new.leader:
            log.info(
                "partition %s: leader %d -> %d, leader epoch %d, ISR %s (controller epoch %d)",
                _tp_str(tp),
                old.leader,
                new.leader,
                new.leader_epoch,
                list(new.isr),
                self.epoch,
            )
        else:
            log.info(
                "partition %s: ISR %s -> %s (leader %d, leader epoch %d)",
                _tp_str(tp),
                list(old.isr),
                list(new.isr),
                new.leader,
                new.leader_epoch,
            )

    def _state(self, leader: int, leader_epoch: int, isr) -> LeaderAndIsr:
        return LeaderAndIsr(int(leader), int(leader_epoch), tuple(isr), self.epoch)

    def _decide_online(self, tp, st: LeaderAndIsr, replicas, dead: frozenset = frozenset()):
        """Kafka's OnlinePartition transition for a partition that may have lost its leader, plus the
        removal of dead replicas from the ISR."""
        if self._offline_replicas:  # replicas on failed log dirs lead nothing and leave the ISR
            dead = frozenset(dead) | {b for b, tps in self._offline_replicas.items() if tp in tps}
        live_all = set(self._live) - set(dead)
        electable = self._electable() - set(dead)
        if st.leader in live_all:
            gone = [r for r in st.isr if r not in live_all]
            if gone:  # epoch + 1: how the leader learns of the smaller ISR (Kafka 2.x's LeaderAndIsr)
                return self._state(st.leader, st.leader_epoch + 1, [r for r in st.isr if r in live_all])
            return None
        isr_live = [r for r in st.isr if r in live_all]
        unclean = self._unclean_allowed(tp[0])
        if st.leader == -1 and not isr_live and not (unclean and electable & set(replicas)):
            return None  # still offline: nothing to write
        e = election.offline_partition_leader(replicas, isr_live, electable, unclean_allowed=unclean)
        if e.leader is None:
            if st.leader == -1:
                return None
            keep = [st.leader] if st.leader in st.isr else list(st.isr[:1])
            return self._state(-1, st.leader_epoch + 1, keep)
        if e.unclean:
            log.error(
                "partition %s: UNCLEAN leader election of broker %d, which is not in the ISR %s "
                "(unclean.leader.election.enable): records acknowledged by the old leader may be lost",
                _tp_str(tp),
                e.leader,
                list(st.isr),
            )
            return self._state(e.leader, st.leader_epoch + 1, [e.leader])
        return self._state(e.leader, st.leader_epoch + 1, isr_live)

    # ------------------------------------------------------------------ broker changes

    def _on_broker_change(self) -> None:
        """Kafka's ``BrokerChange`` event: failures first (bounced brokers included), then start-ups."""
        current = self._read_live_brokers()
        old = self._live
        dead = {b for b in old if current.get(b) != old[b]}
        new = {b for b in current if old.get(b) != current[b]}
        if not dead and not new:
            return
        log.info("controller: live brokers %s (failed: %s, started: %s)", sorted(current), sorted(dead), sorted(new))
        self._shutting_down -= dead
        for b in dead:  # gone or re-registered (a restart): its log dirs are online again
            self._offline_replicas.pop(b, None)
        assignments = self._assignments()
        if dead:
            self._live = {b: z for b, z in current.items() if b not in dead}
            dead_set = frozenset(dead)
            tps = [tp for tp, replicas in assignments.items() if dead_set & set(replicas)]
            self._update_partitions(
                tps, lambda tp, st, r: self._decide_online(tp, st, r, dead_set), assignments=assignments
            )
        self._live = current
        if new:
            tps = [tp for tp, replicas in assignments.items() if set(replicas) & new]
            self._update_partitions(tps, self._decide_online, assignments=assignments)
        if self._reassigning:
            self._check_reassignments()

    # ------------------------------------------------------------------ controlled shutdown

    def _controlled_shutdown(self, broker_id: int, broker_epoch: int) -> list[TP]:
        """Kafka's ``doControlledShutdown`` (event thread)."""
        live = self._read_live_brokers()
        if broker_id not in live:
            raise BrokerNotAvailableError(f"broker {broker_id} is not registered (not live)")
        if broker_epoch not in (-1, live[broker_id]):
            raise StaleBrokerEpochError(
                f"broker {broker_id}'s epoch is {live[broker_id]}, the request carries {broker_epoch}"
            )
        self._shutting_down.add(broker_id)
        assignments = self._assignments()
        tps = [tp for tp, replicas in assignments.items() if broker_id in replicas and len(replicas) > 1]

        def decide(tp, st, replicas):
            if st.leader == broker_id:
                e = election.controlled_shutdown_leader(replicas, st.isr, set(self._live), self._shutting_down)
                if e.leader is None:
                    return None
                return self._state(e.leader, st.leader_epoch + 1, [r for r in st.isr if r != broker_id])
            if broker_id in st.isr and st.leader in self._live and len(st.isr) > 1:
                return self._state(st.leader, st.leader_epoch + 1, [r for r in st.isr if r != broker_id])
            return None

        final = self._update_partitions(tps, decide, assignments=assignments)
        remaining = sorted(tp for tp, st in final.items() if st.leader == broker_id)
        log.info(
            "controlled shutdown of broker %d: %d partition(s) with replicas elsewhere, %d still led by it%s",
            broker_id,
            len(tps),
            len(remaining),
            f" ({', '.join(_tp_str(tp) for tp in remaining[:10])})" if remaining else "",
        )
        return remaining

    # ------------------------------------------------------------------ preferred / unclean elections

    def _elect_leaders(self, tps, election_type: int) -> dict[TP, PyklogError | None]:
        assignments = self._assignments()
        if tps is None:
            tps = sorted(assignments)
        out: dict[TP, PyklogError | None] = {}
        for tp in tps:
            if tp not in assignments:
                out[tp] = UnknownTopicOrPartitionError(f"{_tp_str(tp)} does not exist")

        def decide(tp, st, replicas):
            electable = self._electable()
            if election_type == PREFERRED:
                if replicas and st.leader == replicas[0]:
                    out[tp] = ElectionNotNeededError("Leader election not needed for topic partition.")
                    return None
                e = election.preferred_replica_leader(replicas, st.isr, electable)
                if e.leader is None:
                    out[tp] = PreferredLeaderNotAvailableError(
                        f"Failed to elect leader for partition {_tp_str(tp)} under strategy "
                        f"PreferredReplicaPartitionLeaderElectionStrategy: preferred replica "
                        f"{replicas[0] if replicas else -1} is not live or not in the ISR {list(st.isr)}"
                    )
                    return None
                out[tp] = None
                return self._state(e.leader, st.leader_epoch + 1, st.isr)
            if st.leader in self._live:
                out[tp] = ElectionNotNeededError("Leader election not needed for topic partition.")
                return None
            isr_live = [r for r in st.isr if r in self._live]
            e = election.offline_partition_leader(replicas, isr_live, electable, unclean_allowed=True)
            if e.leader is None:
                out[tp] = EligibleLeadersNotAvailableError(
                    f"Failed to elect leader for partition {_tp_str(tp)}: no replica of {replicas} is live"
                )
                return None
            out[tp] = None
            if e.unclean:
                log.error(
                    "partition %s: UNCLEAN leader election of broker %d requested (ElectLeaders): records "
                    "acknowledged by the old leader may be lost",
                    _tp_str(tp),
                    e.leader,
                )
                return self._state(e.leader, st.leader_epoch + 1, [e.leader])
            return self._state(e.leader, st.leader_epoch + 1, isr_live)

        self._update_partitions([tp for tp in tps if tp in assignments], decide, assignments=assignments)
        for tp in tps:
            out.setdefault(tp, EligibleLeadersNotAvailableError(f"{_tp_str(tp)} has no partition state"))
        return out

    def _process_preferred_znode(self) -> None:
        """``/admin/preferred_replica_election`` (Kafka's PreferredReplicaLeaderElection event): elect
        the preferred replicas listed, then delete the znode."""
        zk = self.zk
        try:
            data, stat = self.cluster.retry(zk.get, paths.ADMIN_PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            return
        try:
            tps = decode_partition_list(data, paths.ADMIN_PREFERRED_REPLICA_ELECTION)
        except ZkDataError as e:
            log.error("ignoring %s", e)
            tps = []
        results = self._elect_leaders(tps, PREFERRED) if tps else {}
        for tp, err in sorted(results.items()):
            if err is None:
                log.info("preferred replica election of %s: done", _tp_str(tp))
            elif not isinstance(err, ElectionNotNeededError):
                log.warning("preferred replica election of %s failed: %s", _tp_str(tp), err)
        self._multi(lambda t: t.delete(paths.ADMIN_PREFERRED_REPLICA_ELECTION, version=stat.version))

    def _auto_rebalance(self) -> None:
        """Kafka's ``checkAndTriggerAutoLeaderRebalance``."""
        if self._reassigning:
            return
        assignments = self._assignments()
        electable = self._electable()
        candidates = [tp for tp, r in assignments.items() if len(r) > 1 and r[0] in electable]
        if not candidates:
            return
        states = self._read_states(candidates)
        leaders = {tp: st.leader for tp, (st, _) in states.items()}
        imbalanced = election.imbalanced_brokers(
            leaders, {tp: assignments[tp] for tp in states}, self.imbalance_percentage
        )
        todo = [tp for broker, tps in imbalanced.items() for tp in tps if broker in states[tp][0].isr]
        if todo:
            log.info("auto leader rebalance: electing preferred leaders of %s", ", ".join(map(_tp_str, todo[:20])))
            self._elect_leaders(todo, PREFERRED)

    # ------------------------------------------------------------------ ISR change notifications

    def _process_isr_changes(self) -> None:
        zk = self.zk
        try:
            children = sorted(self.cluster.retry(zk.get_children, paths.ISR_CHANGE_NOTIFICATION))
        except NoNodeError:
            return
        if not children:
            return
        changed = set()
        for c in children:
            path = paths.isr_change_notification(c)
            try:
                data, _ = self.cluster.retry(zk.get, path)
                changed.update(decode_partition_list(data, path))
            except NoNodeError:
                continue
            except ZkDataError as e:
                log.warning("ignoring %s", e)

        def delete():
            for c in children:
                try:
                    zk.delete(paths.isr_change_notification(c))
                except NoNodeError:
                    pass

        self.cluster.retry(delete)
        if self._reassigning and changed & set(self._reassigning):
            self._check_reassignments()

    # ------------------------------------------------------------------ topic deletion

    #: how often topic deletions in progress are checked besides their answers' watches
    DELETION_CHECK_S = 1.0

    def _children(self, path: str, watch=None) -> list[str]:
        try:
            return self.cluster.retry(self.zk.get_children, path, watch=watch)
        except NoNodeError:
            return []

    def _process_topic_deletions(self) -> None:
        """Kafka's ``TopicDeletion`` event and ``resumeDeletions`` (event thread): start the deletion
        of each topic marked for it, complete the deletions every replica has answered."""
        zk = self.zk
        self._next_deletion_check = time.monotonic() + self.DELETION_CHECK_S
        marked = set(self._children(paths.ADMIN_DELETE_TOPICS))
        started = set(self._children(paths.ADMIN_REPLICA_DELETIONS))
        if not self.delete_topic_enable:
            if marked:
                log.info(
                    "controller: removing the deletion marks of topic(s) %s: topic deletion is disabled "
                    "(delete.topic.enable=false)",
                    ", ".join(sorted(marked)),
                )
                self._multi(lambda t: [t.delete(paths.delete_topic_request(n)) for n in sorted(marked)])
            marked = set()
        waiting: dict[str, frozenset[int]] = {}
        for name in sorted(marked | started):
            try:
                data, _ = self.cluster.retry(zk.get, paths.topic(name))
                replicas = {b for r in decode_topic_assignment(data, paths.topic(name)).values() for b in r}
            except NoNodeError:
                replicas = None
            except ZkDataError as e:
                log.warning("controller: topic %s is marked for deletion but %s; deleting it anyway", name, e)
                replicas = set()
            if name not in started:
                if replicas is None:  # Kafka: a marked topic that does not exist loses its mark
                    log.info("controller: topic %s marked for deletion does not exist: removing the mark", name)
                    self._multi(lambda t, n=name: t.delete(paths.delete_topic_request(n)))
                    continue
                if any(tp[0] == name for tp in self._reassigning):
                    if name not in self._deleting_topics:
                        log.info(
                            "controller: deletion of topic %s waits: ineligible for deletion while a partition "
                            "reassignment is in progress",
                            name,
                        )
                    waiting[name] = frozenset()
                    continue
                self._multi(
                    lambda t, n=name, r=replicas: t.create(paths.replica_deletion(n), encode_replica_deletion(r))
                )
                log.info(
                    "controller: deleting topic %s: its replicas on broker(s) %s stop and delete their logs",
                    name,
                    sorted(replicas),
                )
                targets = set(replicas)
            else:
                try:
                    rdata, _ = self.cluster.retry(zk.get, paths.replica_deletion(name))
                    targets = set(decode_replica_deletion(rdata, paths.replica_deletion(name)))
                except NoNodeError:
                    continue
                except ZkDataError as e:
                    log.warning("controller: %s; waiting for the replicas of the topic's assignment", e)
                    targets = set(replicas or ())
                if replicas:
                    targets |= replicas  # partitions added meanwhile
            answered = {
                int(c)
                for c in self._children(paths.replica_deletion(name), self._on_replica_deletion_answers)
                if c.isdigit()
            }
            missing = frozenset(targets - answered)
            if missing:
                if self._deleting_topics.get(name) != missing:
                    offline = sorted(b for b in missing if b not in self._live)
                    log.info(
                        "controller: deletion of topic %s waits for broker(s) %s to delete their replicas%s",
                        name,
                        sorted(missing),
                        f" (broker(s) {offline} not live: ineligible for deletion until they return)"
                        if offline
                        else "",
                    )
                waiting[name] = missing
                continue
            if not self._complete_topic_deletion(name, answered):
                waiting[name] = frozenset()
        self._deleting_topics = waiting

    def _complete_topic_deletion(self, name: str, answered) -> bool:
        """Kafka's ``completeDeleteTopic``: every replica is deleted; remove the topic's nodes, its
        config, the replica deletion nodes and the marker in one multi-op (fenced).  A topic too
        large for one multi-op (ZooKeeper's ``jute.maxbuffer``) first loses its partitions' nodes in
        fenced multi-ops of their own; the topic node, the marker and the rest go last, so until
        then the topic stays hidden from brokers (its replica deletion node) and its name cannot be
        created again, and a controller elected in between resumes from the nodes left.  False if
        a multi-op failed (nodes changed meanwhile: the next check tries again)."""
        zk = self.zk
        admin = self.cluster.topic_admin
        tree = admin.topic_znodes(name)
        has_config = self.cluster.retry(zk.exists, paths.topic_config(name)) is not None
        has_mark = self.cluster.retry(zk.exists, paths.delete_topic_request(name)) is not None
        has_record = self.cluster.retry(zk.exists, paths.deleted_topic_record(name)) is not None
        chunks, tree = admin.partition_node_chunks(name, tree, len(answered) + 7)
        for i, chunk in enumerate(chunks):
            results = self._multi(lambda t, chunk=chunk: [t.delete(n) for n in chunk])
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failures:
                log.info(
                    "controller: deleting the partition nodes of topic %s failed (%r); retrying", name, failures[0]
                )
                return False
            log.info("controller: deleting topic %s: removed partition nodes, part %d of %d", name, i + 1, len(chunks))

        def build(t):
            for b in sorted(answered):
                t.delete(paths.replica_deletion_done(name, b))
            t.delete(paths.replica_deletion(name))
            for p in tree:
                t.delete(p)
            if has_config:
                t.delete(paths.topic_config(name))
            if has_mark:
                t.delete(paths.delete_topic_request(name))
            if not has_record:  # lets a broker that kept a log of it (an offline log dir) delete it later
                t.create(paths.deleted_topic_record(name), b"")

        results = self._multi(build)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            log.info("controller: completing the deletion of topic %s failed (%r); retrying", name, failures[0])
            return False
        for b in self._offline_replicas.values():
            b.difference_update({tp for tp in b if tp[0] == name})
        log.info("controller: deleted topic %s (every replica deleted)", name)
        return True

    # ------------------------------------------------------------------ log dir failures

    def _process_log_dir_events(self) -> None:
        """Kafka's ``LogDirEventNotification`` event: read and delete the notifications, then
        Kafka's ``onBrokerLogDirFailure`` for the replicas they name (live brokers only): leadership
        moves to another live ISR member, the replicas leave the ISRs."""
        zk = self.zk
        try:
            children = sorted(self.cluster.retry(zk.get_children, paths.LOG_DIR_EVENT_NOTIFICATION))
        except NoNodeError:
            return
        if not children:
            return
        failed: dict[int, set[TP]] = {}
        for c in children:
            path = paths.log_dir_event_notification(c)
            try:
                data, _ = self.cluster.retry(zk.get, path)
                broker, _event, tps = decode_log_dir_event(data, path)
            except NoNodeError:
                continue
            except ZkDataError as e:
                log.warning("ignoring %s", e)
                continue
            if tps is None:  # Kafka's form names no partitions: every replica of the broker is checked
                tps = [tp for tp, r in self._assignments().items() if broker in r]
            failed.setdefault(broker, set()).update(tps)

        def delete():
            for c in children:
                try:
                    zk.delete(paths.log_dir_event_notification(c))
                except NoNodeError:
                    pass

        self.cluster.retry(delete)
        live = self._read_live_brokers()
        failed = {b: tps for b, tps in failed.items() if b in live}  # a dead broker's replicas moved already
        if not failed:
            return
        for b, tps in failed.items():
            self._offline_replicas.setdefault(b, set()).update(tps)
            log.info(
                "controller: broker %d lost %d replica(s) to a failed log dir: moving their leadership and ISR",
                b,
                len(tps),
            )
        self._update_partitions(sorted(set().union(*failed.values())), self._decide_online)

    # ------------------------------------------------------------------ partition reassignment

    def _read_reassignments(self) -> None:
        """``/admin/reassign_partitions`` (Kafka's PartitionReassignment event): start the new ones."""
        zk = self.zk
        try:
            data, _ = self.cluster.retry(zk.get, paths.ADMIN_REASSIGN_PARTITIONS)
        except NoNodeError:
            return
        try:
            wanted = decode_reassignment(data, paths.ADMIN_REASSIGN_PARTITIONS)
        except ZkDataError as e:
            log.error("deleting an unreadable reassignment: %s", e)
            self._multi(lambda t: t.delete(paths.ADMIN_REASSIGN_PARTITIONS))
            return
        assignments = self._assignments()
        done = []
        todo = []
        for tp, target in sorted(wanted.items()):
            if self._reassigning.get(tp) == target:
                continue
            problem = None
            if tp not in assignments:
                problem = "the partition does not exist"
            elif not target or len(set(target)) != len(target) or any(r < 0 for r in target):
                problem = f"invalid replica list {target}"
            if problem:
                log.error("reassignment of %s to %s refused: %s", _tp_str(tp), target, problem)
                done.append(tp)
                continue
            if assignments[tp] == target:
                log.info("reassignment of %s: already assigned to %s", _tp_str(tp), target)
                done.append(tp)
                continue
            todo.append((tp, list(target), assignments[tp]))
        self._start_reassignments(todo)
        if done:
            self._remove_from_reassignment_znode(done)
        self._check_reassignments()

    def _start_reassignment(self, tp: TP, target: list[int], current: list[int]) -> None:
        self._start_reassignments([(tp, target, current)])

    def _start_reassignments(self, items) -> None:
        """:meth:`_start_one` for many ``(tp, target, current)``: one assignment write per topic and
        one batch of state writes (a reassignment of hundreds of partitions is a few round trips)."""
        writes: dict[str, dict[int, tuple]] = {}
        unions: dict[TP, list[int]] = {}
        for tp, target, current in items:
            planned = self._plan_reassignment(tp, target, current)
            if planned is not None:
                writes.setdefault(tp[0], {})[tp[1]] = planned
                unions[tp] = planned[0]
        for topic, changes in sorted(writes.items()):
            self._write_assignments(topic, changes)

        def bump(tp, st, replicas):
            union = unions[tp]
            isr = [r for r in st.isr if r in union]
            if st.leader in union:
                return self._state(st.leader, st.leader_epoch + 1, isr or [st.leader])
            e = election.reassign_partition_leader(union, isr, self._electable())
            if e.leader is None:
                return self._state(st.leader, st.leader_epoch + 1, st.isr)
            return self._state(e.leader, st.leader_epoch + 1, isr)

        if unions:
            self._update_partitions(sorted(unions), bump, assignments=unions)

    def _plan_reassignment(self, tp: TP, target: list[int], current: list[int]):
        """Kafka's ``onPartitionReassignment`` steps A1-A3 (event thread): the assignment becomes
        RS = TRS + ORS (the target, then the original replicas not in it), with KIP-455's
        ``adding_replicas``/``removing_replicas`` kept in ``/brokers/topics/<t>`` (so a new controller
        resumes it), and the leader epoch is bumped so every replica follows the state again.  A
        reassignment that replaces one in progress keeps its original replicas; replicas of the old
        target in neither set leave the ISR.  Cancelling is a reassignment to the original replicas."""
        origin = list(self._origin.get(tp) or current)
        union = list(target) + [r for r in origin if r not in target]
        adding = [r for r in target if r not in origin]
        removing = [r for r in origin if r not in target]
        log.info(
            "reassignment of %s: %s -> %s started (adding %s, removing %s)",
            _tp_str(tp),
            current,
            target,
            adding,
            removing,
        )
        self._reassigning[tp] = list(target)
        self._origin[tp] = origin
        if union == list(current) and not adding and not removing:
            return None
        return union, adding, removing

    def _resume_reassignments(self) -> None:
        """Kafka's ``initializePartitionReassignments`` (failover): reassignments recorded in the
        topic znodes' ``adding_replicas``/``removing_replicas`` (KIP-455) continue."""
        zk = self.zk
        topics = sorted(self.cluster.topics())

        def read():
            pending = [(t, zk.get_async(paths.topic(t))) for t in topics]
            out = {}
            for t, res in pending:
                try:
                    out[t] = res.get()[0]
                except NoNodeError:
                    continue
            return out

        for topic, data in self.cluster.retry(read).items():
            try:
                obj = json.loads(data)
                replicas = decode_topic_assignment(data, paths.topic(topic))
                adding = {int(p): [int(b) for b in r] for p, r in (obj.get("adding_replicas") or {}).items()}
                removing = {int(p): [int(b) for b in r] for p, r in (obj.get("removing_replicas") or {}).items()}
            except (ValueError, TypeError, AttributeError, ZkDataError) as e:
                log.warning("controller failover: unreadable reassignment state of topic %s: %s", topic, e)
                continue
            for p in sorted(set(adding) | set(removing)):
                rs = replicas.get(p)
                if not rs or not (adding.get(p) or removing.get(p)):
                    continue
                tp = (topic, p)
                self._reassigning[tp] = [r for r in rs if r not in removing.get(p, [])]
                self._origin[tp] = [r for r in rs if r not in adding.get(p, [])]
                log.info(
                    "controller failover: resuming the reassignment of %s to %s", _tp_str(tp), self._reassigning[tp]
                )

    def _alter_reassignments(self, changes: dict) -> dict[TP, PyklogError | None]:
        """AlterPartitionReassignments on the event thread (Kafka's ``onApiPartitionReassignment``)."""
        assignments = self._assignments()
        live = self._read_live_brokers()
        out: dict[TP, PyklogError | None] = {}
        todo = []
        for tp, target in sorted(changes.items()):
            if tp not in assignments:
                out[tp] = UnknownTopicOrPartitionError(f"{_tp_str(tp)} does not exist")
                continue
            if target is None:
                if tp not in self._reassigning:
                    out[tp] = NoReassignmentInProgressError(f"no reassignment of {_tp_str(tp)} is in progress")
                    continue
                log.info("reassignment of %s cancelled: back to %s", _tp_str(tp), self._origin[tp])
                target = list(self._origin[tp])
            else:
                problem = None
                if not target:
                    problem = "The replica list cannot be empty"
                elif len(set(target)) != len(target):
                    problem = f"The replica list {target} contains duplicates"
                elif any(r < 0 for r in target):
                    problem = f"The replica list {target} contains negative broker ids"
                elif not set(target) <= set(live):
                    problem = (
                        f"Replica assignment has brokers that are not alive. Replica list: {target}, "
                        f"live broker list: {sorted(live)}"
                    )
                if problem:
                    out[tp] = InvalidReplicaAssignmentError(problem)
                    continue
                if tp not in self._reassigning and assignments[tp] == target:
                    out[tp] = None  # already there
                    continue
            todo.append((tp, target, assignments[tp]))
            out[tp] = None
        self._start_reassignments(todo)
        self._check_reassignments()
        return out

    def _list_reassignments(self, tps) -> dict[TP, tuple[list[int], list[int], list[int]]]:
        assignments = self._assignments()
        out = {}
        for tp, target in sorted(self._reassigning.items()):
            if tps is not None and tp not in tps:
                continue
            rs = assignments.get(tp, [])
            origin = self._origin.get(tp, rs)
            out[tp] = (list(rs), [r for r in rs if r not in origin], [r for r in rs if r not in target])
        return out

    def _write_assignment(self, tp: TP, replicas: list[int], *, adding=None, removing=None) -> None:
        self._write_assignments(tp[0], {tp[1]: (replicas, adding, removing)})

    def _write_assignments(self, topic: str, changes: dict) -> None:
        """Set partitions' replicas in ``/brokers/topics/<t>`` (one conditional write, topic id and
        other fields kept) and their KIP-455 ``adding_replicas``/``removing_replicas`` (dropped when
        empty): ``changes`` = ``{partition: (replicas, adding or None, removing or None)}``."""
        zk = self.zk
        for _ in range(5):
            data, stat = self.cluster.retry(zk.get, paths.topic(topic))
            assignment = decode_topic_assignment(data, paths.topic(topic))
            topic_id = decode_topic_id(data, paths.topic(topic))
            for partition, (replicas, _, _) in changes.items():
                assignment[partition] = list(replicas)
            new = encode_topic_assignment(assignment, topic_id)
            if topic_id is not None:
                try:
                    old = json.loads(data)
                except ValueError:
                    old = {}
                doc = json.loads(new)
                for i, key in ((1, "adding_replicas"), (2, "removing_replicas")):
                    m = {k: v for k, v in (old.get(key) or {}).items() if int(k) not in changes}
                    for partition, change in changes.items():
                        if change[i]:
                            m[str(partition)] = [int(b) for b in change[i]]
                    doc[key] = dict(sorted(m.items(), key=lambda kv: int(kv[0])))
                new = json.dumps(doc, separators=(",", ":")).encode()
            results = self._multi(lambda t: t.set_data(paths.topic(topic), new, version=stat.version))
            if not isinstance(results[0], Exception):
                self.cluster.reload_topic(topic)
                return
        raise ZooKeeperError(
            f"reassignment of {topic} partitions {sorted(changes)}: /brokers/topics/{topic} kept changing"
        )

    def _check_reassignments(self) -> None:
        """Complete the reassignments whose target replicas are all in the ISR."""
        if not self._reassigning:
            return
        states = self._read_states(list(self._reassigning))
        live = set(self._live)
        complete = []

        def decide(tp, st, replicas):
            target = self._reassigning[tp]
            isr = [r for r in st.isr if r in target]
            if st.leader in target and st.leader in live:
                return self._state(st.leader, st.leader_epoch + 1, isr)
            e = election.reassign_partition_leader(target, isr, self._electable())
            if e.leader is None:
                return None
            return self._state(e.leader, st.leader_epoch + 1, isr)

        ready: dict[TP, list[int]] = {}
        for tp, target in sorted(self._reassigning.items()):
            if tp not in states:
                log.warning("reassignment of %s abandoned: the partition is gone", _tp_str(tp))
                complete.append(tp)
                continue
            st, _ = states[tp]
            if not set(target) <= set(st.isr):
                continue
            if decide(tp, st, target) is None:
                continue  # no leader in the target yet: try again later
            ready[tp] = list(target)
        if ready:
            # the final assignment first (one write per topic), then the states (epoch + 1): a broker
            # applies the new state with the replica list of its registry cache, so the leader stops
            # tracking (and taking back into its ISR) the removed replicas, which still fetch until
            # they see the change (then they stop: ReplicaManager.stop_replica)
            by_topic: dict[str, dict] = {}
            for (t, p), target in ready.items():
                by_topic.setdefault(t, {})[p] = (target, None, None)
            for t, changes in sorted(by_topic.items()):
                self._write_assignments(t, changes)
            final = self._update_partitions(sorted(ready), decide, assignments=ready)
            for tp, target in sorted(ready.items()):
                st = final.get(tp)
                if st is None or st.leader not in target:
                    log.warning("reassignment of %s: no leader elected from %s yet", _tp_str(tp), target)
                    continue
                log.info(
                    "reassignment of %s to %s completed (leader %d, leader epoch %d)",
                    _tp_str(tp),
                    target,
                    st.leader,
                    st.leader_epoch,
                )
                complete.append(tp)
        for tp in complete:
            self._reassigning.pop(tp, None)
            self._origin.pop(tp, None)
        if complete:
            self._remove_from_reassignment_znode(complete)

    def _remove_from_reassignment_znode(self, tps) -> None:
        zk = self.zk
        for _ in range(5):
            try:
                data, stat = self.cluster.retry(zk.get, paths.ADMIN_REASSIGN_PARTITIONS)
            except NoNodeError:
                return
            try:
                wanted = decode_reassignment(data, paths.ADMIN_REASSIGN_PARTITIONS)
            except ZkDataError:
                wanted = {}
            for tp in tps:
                wanted.pop(tp, None)
            if wanted:
                new = encode_reassignment(wanted)
                results = self._multi(lambda t: t.set_data(paths.ADMIN_REASSIGN_PARTITIONS, new, version=stat.version))
            else:
                results = self._multi(lambda t: t.delete(paths.ADMIN_REASSIGN_PARTITIONS, version=stat.version))
            if not isinstance(results[0], Exception):
                return
