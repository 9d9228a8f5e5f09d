"""The broker's cache of the cluster's metadata in ZooKeeper: live brokers, the topic registry,
partition states, topic configs, the active controller.

Read from (every path from :mod:`pyklog.broker.zk.paths`, every node decoded by
:mod:`pyklog.broker.zk.znodes`):

* ``/brokers/ids/[id]``: the live brokers (a ChildrenWatch, re-armed by kazoo after a reconnect or
  a new session).
* ``/brokers/topics/[topic]`` -> ``{"version":1,"partitions":{"0":[replicas]},"topic_id":...}``: the
  topic registry (a ChildrenWatch of ``/brokers/topics``, plus a one-shot data watch of each topic
  node: CreatePartitions rewrites a topic's assignment in place).  A topic found without a topic id
  (KIP-516) gets one written by the first registering broker that sees it.
* ``/brokers/topics/[topic]/partitions/[p]/state`` -> ``{"controller_epoch","leader","version",
  "leader_epoch","isr"}``: each registering broker watches the state nodes of the partitions it
  caches (one read of the changed node per change, re-armed after a connection loss) and tells its
  partition-state listeners (the ReplicaManager).  Kafka's brokers learn leaders and ISRs from the
  controller's LeaderAndIsr requests instead.
* ``/admin/replica_deletions/[topic]``: topics whose deletion the controller has started (a
  ChildrenWatch).  They are hidden: gone from the registry cache (Metadata, the replica manager's
  hosted partitions, auto-creation) until the controller has removed them, as Kafka's brokers drop a
  topic from their metadata cache when the controller's UpdateMetadata says ``LeaderDuringDelete``.
* ``/offline_replicas/[id]-[seq]``: the replicas on failed log dirs of broker [id] (a ChildrenWatch;
  each node is written once), reported by Metadata as ``offline_replicas`` while [id] is live.
* ``/config/topics/[topic]``: read lazily by :meth:`ZkMetadataCache.topic_config` and cached until a
  config change notification (:mod:`pyklog.broker.zk.configs`) or the topic is created again.

Metadata reports leader -1 for a partition whose leader is not a live broker (as Kafka does once the
controller finds no live ISR member).

The watch and refresh logic carries race fixes worth knowing before changing it: a topic entry is
read (its state watches armed) before it is installed, so the newest state read of each partition
is kept by its node's ``(czxid, version)`` and applied at install (:meth:`_with_newest_states`);
a state node older than its topic node belongs to an earlier topic of that name and is never
carried over; the topic node's data watch looks at a deleted topic's node again, so a topic
created again at once under the same name is read at once.

Thread-safety: thread-safe.  Reads (``live_brokers``, ``topics``, ...) return snapshots taken under
one re-entrant lock; watch callbacks run on kazoo's callback thread and hand what blocks to the
session's event threads (:mod:`pyklog.broker.zk.event_queue`: one thread whatever the number of
partitions, a burst of state changes re-read in batches); partition-state listeners run on a thread
of their own, so the reads that keep the cache current never wait for them; listeners are never
called with the lock held.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from kazoo.exceptions import BadVersionError, KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from pyklog.broker.errors import InvalidTopicError, PyklogError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.session import ZkSession, watch_callback
from pyklog.broker.zk.topics import validate_topic_name
from pyklog.broker.zk.znodes import (
    BrokerRegistration,
    decode_broker_registration,
    decode_partition_list,
    decode_partition_state,
    decode_topic_assignment,
    decode_topic_config,
    decode_topic_id,
    new_topic_id,
    with_topic_id,
)

log = logging.getLogger(__name__)


class PartitionState(NamedTuple):
    """A partition as metadata reports it.  ``leader`` is -1 when the leader broker is not live."""

    leader: int
    leader_epoch: int
    isr: list
    replicas: list


@dataclass
class _TopicEntry:
    czxid: int
    mzxid: int
    replicas: dict = field(default_factory=dict)  # partition -> [broker ids]
    states: dict = field(default_factory=dict)  # partition -> (leader, leader_epoch, isr)
    topic_id: uuid.UUID | None = None  # KIP-516 (None: the node has none and none could be written)


class ZkMetadataCache:
    """What one broker (or admin client) knows of the cluster, kept current by ZooKeeper watches.

    ``broker_id`` None (an admin client): no state-node watches, no topic ids written.
    ``on_controller_duty()`` is called when this broker is (or becomes) the active controller and
    pending topic deletion requests should be carried out, on the session's admin event thread
    (after the live brokers changed or :meth:`set_controller_id`).
    """

    #: the topic-names watch re-reads every cached topic's node (to see one deleted and re-created
    #: between two watch events) at most this often; otherwise it reads only the new names
    FULL_TOPIC_REFRESH_S = 30.0

    def __init__(
        self,
        session: ZkSession,
        broker_id: int | None,
        *,
        on_controller_duty: Callable[[], None] | None = None,
        inter_broker_listener: str | None = None,
    ):
        self.session = session
        self.broker_id = broker_id
        self._on_controller_duty = on_controller_duty
        #: the listener whose endpoints :meth:`live_brokers` gives by default (None: the PLAINTEXT one)
        self.inter_broker_listener = inter_broker_listener
        self._lock = threading.RLock()
        # every live broker's registration (its endpoints by listener name) and its default address
        self._registrations: dict[int, BrokerRegistration] = {}
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, _TopicEntry] = {}
        #: topics whose deletion the controller started (``/admin/replica_deletions``): hidden
        self._deleting: frozenset[str] = frozenset()
        #: /offline_replicas children read -> (broker id, the partitions it names)
        self._offline_nodes: dict[str, tuple[int, frozenset]] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._active_controller_id: int | None = None
        self._last_full_topic_refresh = time.monotonic()
        # replication: listeners told of each changed partition state, and the watch re-arm after a
        # connection loss (see "partition states" below)
        self._state_listeners: list[Callable[[str, int], None]] = []
        self._state_rearm_pending = False
        # set once this broker's controlled shutdown moved everything away: state changes are no
        # longer read (see stop_following_states)
        self._states_unfollowed = False
        # the newest state read of each partition, by its node's (czxid, version): a topic entry
        # read before a state change must not be installed over it (see _with_newest_states);
        # with the node's controller epoch (what the leader's ISR write keeps, -1: not known)
        self._newest_states: dict[tuple[str, int], tuple[tuple[int, int], tuple, int]] = {}
        # partitions whose state watch fired and that the event thread has not re-read yet
        self._pending_state_reloads: dict[tuple[str, int], None] = {}
        # partitions whose new cached state the listeners have not been told yet (in order)
        self._pending_state_applies: dict[tuple[str, int], None] = {}
        #: counts the changes of the cached topics, partition states, topic configs and live
        #: brokers: a reader that saw the same generation twice knows nothing changed in between
        self.generation = 0

    def watch_brokers_and_topics(self) -> list:
        """Start the ChildrenWatches of ``/brokers/ids`` and ``/brokers/topics`` (each reads its
        children at once, filling the cache); returns the watch objects."""
        zk = self.session.zk
        return [
            ChildrenWatch(zk, paths.BROKER_IDS, self._on_broker_ids),
            # before the topics: a topic being deleted is never installed
            ChildrenWatch(zk, paths.ADMIN_REPLICA_DELETIONS, self._on_replica_deletions),
            ChildrenWatch(zk, paths.OFFLINE_REPLICAS, self._on_offline_replicas),
            ChildrenWatch(zk, paths.BROKER_TOPICS, self._on_topic_names),
        ]

    @watch_callback
    def _on_replica_deletions(self, children) -> bool | None:
        """kazoo's callback thread: the topics whose deletion the controller started changed.  A
        topic that starts being deleted leaves the cache at once; one whose deletion ended (its
        registry nodes gone, perhaps created again already) is read again on the event thread."""
        new = frozenset(c for c in children)
        with self._lock:
            added, removed = new - self._deleting, self._deleting - new
            self._deleting = new
            for name in added:
                self._topics.pop(name, None)
                self._configs.pop(name, None)
        for name in removed:
            self.session.events.submit(("reload-topic", name), self.reload_topic, name)
        if added or removed:
            self.notify()
        return None

    @watch_callback
    def _on_offline_replicas(self, children) -> bool | None:
        """kazoo's callback thread: read the new ``/offline_replicas`` nodes (written once each)."""
        with self._lock:
            known = dict(self._offline_nodes)
        new = [c for c in children if c not in known and c.split("-", 1)[0].isdigit()]

        def read():
            pending = [(c, self.session.zk.get_async(f"{paths.OFFLINE_REPLICAS}/{c}")) for c in new]
            out = {}
            for c, res in pending:
                try:
                    data, _ = res.get()
                    out[c] = (int(c.split("-", 1)[0]), frozenset(decode_partition_list(data, paths.OFFLINE_REPLICAS)))
                except NoNodeError:
                    continue
                except ZooKeeperError as e:
                    log.warning("ignoring %s/%s: %s", paths.OFFLINE_REPLICAS, c, e)
            return out

        try:
            got = self.session.retry(read) if new else {}
        except (PyklogError, KazooException) as e:
            log.warning("could not read the offline replicas: %s", e)
            return None
        with self._lock:
            self._offline_nodes = {c: known.get(c) or got[c] for c in children if c in known or c in got}
        return None

    def offline_replicas(self) -> dict[int, frozenset]:
        """``{broker id: the (topic, partition) replicas on its failed log dirs}`` of live brokers."""
        with self._lock:
            out: dict[int, frozenset] = {}
            for b, tps in self._offline_nodes.values():
                if b in self._brokers:
                    out[b] = out.get(b, frozenset()) | tps
            return out

    def topics_being_deleted(self) -> frozenset[str]:
        """The topics whose deletion the controller started and has not completed (hidden)."""
        return self._deleting

    # ------------------------------------------------------------------ writers' updates
    # (topic administration, config changes and ISR writes keep the cache in step with what they wrote)

    def set_topic_config(self, name: str, config: dict[str, str], *, only_cached_topic: bool = False) -> None:
        """Cache ``config`` as topic ``name``'s overrides (``only_cached_topic``: only if the topic is
        in the registry cache)."""
        with self._lock:
            if not only_cached_topic or name in self._topics:
                self._configs[name] = dict(config)
                self.generation += 1

    def clear_topic_configs(self) -> None:
        """Forget every cached topic config (re-read lazily by :meth:`topic_config`)."""
        with self._lock:
            self._configs.clear()
            self.generation += 1

    def forget_topics(self, names) -> None:
        """Drop deleted topics (and their configs) from the cache."""
        with self._lock:
            for name in names:
                self._topics.pop(name, None)
                self._configs.pop(name, None)
            self.generation += 1

    def record_isr_write(self, topic: str, partition: int, stat, state: tuple, controller_epoch: int = -1) -> None:
        """The leader's own ISR write (:mod:`pyklog.broker.zk.isr`): cache ``state`` (leader,
        leader_epoch, isr) unless a newer state of the partition was read meanwhile.  No listener
        is told (the writer is the leader itself)."""
        with self._lock:
            entry = self._topics.get(topic)
            if (
                entry is not None
                and partition in entry.replicas
                and self._note_state(topic, partition, stat, state, controller_epoch)
            ):
                self._set_state(topic, entry, partition, state)
                self.generation += 1

    def _set_state(self, topic: str, entry: _TopicEntry, partition: int, state: tuple) -> None:
        """Under ``_lock``: ``entry``'s state of ``partition`` becomes ``state``, in place when the
        partition has one (replacing a value never changes the size of a dict another thread may be
        iterating; one ISR write must not copy a topic's thousands of states), else in a new entry."""
        if partition in entry.states:
            entry.states[partition] = state
            return
        states = dict(entry.states)
        states[partition] = state
        self._topics[topic] = _TopicEntry(entry.czxid, entry.mzxid, entry.replicas, states, entry.topic_id)

    # ------------------------------------------------------------------ watches and cache

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (on kazoo's callback thread) whenever live brokers or topics change."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def notify(self) -> None:
        with self._lock:
            self.generation += 1
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn()
            except Exception:
                log.exception("cluster listener %r failed", fn)

    @watch_callback
    def _on_broker_ids(self, children) -> bool | None:
        try:
            registrations = self._read_brokers(children)
        except (PyklogError, KazooException) as e:
            log.warning("could not read broker registrations: %s", e)
            return None
        brokers = self._default_addresses(registrations)
        with self._lock:
            gone = set(self._brokers) - set(brokers)
        if gone:
            self._refresh_states_led_by(gone)
        with self._lock:
            changed = brokers != self._brokers or registrations != self._registrations
            self._brokers = brokers
            self._registrations = registrations
        if changed:
            log.info("live brokers: %s", sorted(brokers))
            self.notify()
            if (
                self.broker_id is not None
                and self.controller_id == self.broker_id
                and self._on_controller_duty is not None
            ):
                self.session.admin_events.submit("controller-duty", self._on_controller_duty)
        return None

    def _refresh_states_led_by(self, gone) -> None:
        """Before brokers that left stop counting as live: re-read the states of the partitions
        they lead in the cache.  A broker's controlled shutdown moves its leaderships and then
        deregisters; the state reads those moves set off may still be queued (thousands of them)
        when the deregistration is seen, and Metadata answered those partitions without a leader
        meanwhile -- as Kafka's brokers take new leaders and live brokers from one UpdateMetadata.
        After a crash the states are unchanged and the re-read costs one round of reads."""
        led = [tp for b in gone for tp in self.partitions_led_by(b)]
        if not led:
            return
        with self._lock:
            for tp in led:
                self._pending_state_reloads[tp] = None
        try:
            self._tell_state_listeners(self._read_pending_states())
        except Exception:  # noqa: BLE001 - the event thread's reload reads them again
            log.exception("re-reading the states of %d partition(s) led by broker(s) %s failed", len(led), sorted(gone))

    def _default_addresses(self, registrations: dict[int, BrokerRegistration]) -> dict[int, tuple[str, int]]:
        """Each broker's address for the broker's own connections: its inter-broker listener's
        endpoint, else its PLAINTEXT one, else its first (a broker is live whatever it advertises)."""
        out = {}
        for b, reg in registrations.items():
            e = reg.endpoint(self.inter_broker_listener) if self.inter_broker_listener else None
            if e is None:
                try:
                    out[b] = reg.address()
                    continue
                except ZooKeeperError:
                    e = reg.endpoints[0] if reg.endpoints else None
            if e is not None:
                out[b] = (e.host, e.port)
        return out

    def _read_brokers(self, children) -> dict[int, BrokerRegistration]:
        def read():
            pending = [
                (c, self.session.zk.get_async(paths.child(paths.BROKER_IDS, c))) for c in children if c.isdigit()
            ]
            out = {}
            for c, res in pending:
                try:
                    data, _ = res.get()
                except NoNodeError:
                    continue
                try:
                    path = paths.broker_id(int(c))
                    out[int(c)] = decode_broker_registration(data, path)
                except (ZooKeeperError, ValueError) as e:
                    log.warning("ignoring unreadable broker registration %s: %s", c, e)
            return out

        return self.session.retry(read)

    @watch_callback
    def _on_topic_names(self, children) -> bool | None:
        """kazoo's callback thread, on every change of ``/brokers/topics``' children.  Reads only the
        topics that appeared (Kafka's controller does the same on a TopicChange): creating or
        deleting one topic among N costs O(1) ZooKeeper reads, not N (a CreateTopics of 100 topics on
        a broker holding ~900 used to re-read every topic 100 times).  Every
        :attr:`FULL_TOPIC_REFRESH_S` seconds one event re-reads them all (a topic re-created under
        the same name elsewhere between two events changes its czxid)."""
        try:
            full = time.monotonic() - self._last_full_topic_refresh >= self.FULL_TOPIC_REFRESH_S
            changed = self._refresh_topics(children, only_new=not full)
            if full:
                self._last_full_topic_refresh = time.monotonic()
        except (PyklogError, KazooException) as e:
            log.warning("could not read the topic registry: %s", e)
            return None
        if changed:
            self.notify()
        return None

    def _refresh_topics(self, names, *, only_new: bool = False) -> bool:
        """Re-read the topics whose registry node is new or changed (``only_new``: the new ones only,
        cached entries of names still present are kept); True if the cache changed."""
        with self._lock:
            cached = dict(self._topics)

        def read():
            # a data watch on each topic node read: CreatePartitions (or Kafka's tools) rewrite its
            # assignment in place, which the children watch of /brokers/topics does not see
            out = {}
            todo = names
            if only_new:
                out = {n: cached[n] for n in names if n in cached}
                todo = [n for n in names if n not in cached]
            pending = [(n, self.session.zk.get_async(paths.topic(n), watch=self._on_topic_data)) for n in todo]
            for n, res in pending:
                try:
                    data, stat = res.get()
                except NoNodeError:
                    continue
                old = cached.get(n)
                if old is not None and old.czxid == stat.czxid and old.mzxid == stat.mzxid:
                    out[n] = old
                    continue
                entry = self._read_topic_entry(n, data, stat)
                if entry is not None:
                    out[n] = entry
            return out

        topics = self.session.retry(read)
        with self._lock:
            for name in self._deleting & topics.keys():
                del topics[name]  # being deleted: hidden
            changed = set(topics) != set(self._topics) or any(topics[n] is not self._topics.get(n) for n in topics)
            for name in list(self._configs):
                old = self._topics.get(name)
                if name not in topics or (old is not None and old.czxid != topics[name].czxid):
                    del self._configs[name]  # deleted or re-created: read its config again
            gone = self._topics.keys() - topics.keys()
            # an entry still installed is current (state reads update it in place): only the ones
            # read now get the newest states seen (a creation next to 10,000 partitions costs O(new))
            self._topics = {
                n: e if e is self._topics.get(n) else self._with_newest_states(n, e) for n, e in topics.items()
            }
            if gone:
                self._newest_states = {k: v for k, v in self._newest_states.items() if k[0] in topics}
            if changed:
                self.generation += 1
        return changed

    def _on_topic_data(self, event) -> None:
        """Data watch of ``/brokers/topics/<topic>`` (kazoo's callback thread): the assignment changed
        (partitions added); re-read that topic on the session's event thread and tell the listeners.
        A deletion is left to the children watch, but the node is looked at again: a topic created
        again under the same name at once (the children watch may see no change of names) is read
        now, with its data watch, instead of at the next full refresh.  One-shot:
        :meth:`reload_topic` re-arms it."""
        if self.session.stopping or self.session.zk is None or event.path is None:
            return
        name = event.path.rsplit("/", 1)[-1]
        self.session.events.submit(("reload-topic", name), self.reload_topic, name)

    def reload_topic(self, name: str) -> bool:
        """Re-read one topic's assignment and partition states into the cache (re-arming its data
        watch); True if the cached entry changed, and then the listeners are told.  Any thread."""
        if self.session.stopping or self.session.zk is None:
            return False
        try:
            data, stat = self.session.retry(self.session.zk.get, paths.topic(name), watch=self._on_topic_data)
        except NoNodeError:
            return False
        except (PyklogError, KazooException) as e:
            log.warning("could not re-read topic %s: %s", name, e)
            return False
        entry = self._read_topic_entry(name, data, stat)
        if entry is None:
            return False
        with self._lock:
            if name in self._deleting:
                return False
            old = self._topics.get(name)
            if (
                old is not None
                and old.czxid == entry.czxid
                and old.mzxid == entry.mzxid
                and old.states.keys() == entry.states.keys()
            ):
                return False
            if old is not None and old.czxid != entry.czxid:
                self._configs.pop(name, None)  # created again: read its config again
            self._topics[name] = self._with_newest_states(name, entry)
            self.generation += 1
        self.notify()
        return True

    def _read_topic_entry(self, name: str, data: bytes, stat) -> _TopicEntry | None:
        path = paths.topic(name)
        try:
            replicas = decode_topic_assignment(data, path)
        except ZooKeeperError as e:
            log.warning("ignoring topic %s with an unreadable assignment: %s", name, e)
            return None
        watch = self._on_partition_state_data if self.broker_id is not None else None
        pending = [(p, self.session.zk.get_async(paths.partition_state(name, p), watch=watch)) for p in replicas]
        states = {}
        for p, res in pending:
            try:
                sdata, sstat = res.get()
                s = decode_partition_state(sdata, paths.partition_state(name, p))
                states[p] = (s.leader, s.leader_epoch, list(s.isr))
                self._note_state(name, p, sstat, states[p], s.controller_epoch)
            except NoNodeError:
                # Assignment written without state (e.g. by another tool): the first replica leads.
                first = replicas[p][0] if replicas[p] else -1
                states[p] = (first, 0, [first] if first >= 0 else [])
            except ZooKeeperError as e:
                log.warning("unreadable partition state %s-%d: %s", name, p, e)
                states[p] = (-1, 0, [])
        try:
            topic_id = decode_topic_id(data, path)
        except ZooKeeperError as e:
            log.warning("topic %s: %s", name, e)
            topic_id = None
        if topic_id is None and self.broker_id is not None:
            topic_id = self._assign_topic_id(name, data, stat)
        return _TopicEntry(stat.czxid, stat.mzxid, replicas, states, topic_id)

    def _assign_topic_id(self, name: str, data: bytes, stat):
        """Give a topic created without an id (by an older pyklog or Kafka before 2.8) one, as
        Kafka's controller does on first sight: a conditional write of ``/brokers/topics/<t>``, so
        when several brokers race the first write wins and the others read it back.  Runs on the
        registry refresh (a kazoo or caller thread), no lock held.  Returns the id or None."""
        path = paths.topic(name)
        tid = new_topic_id()
        try:
            self.session.zk.set(path, with_topic_id(data, path, tid), version=stat.version)
            log.info("assigned topic id %s to topic %s", tid, name)
            return tid
        except BadVersionError:
            try:
                return decode_topic_id(self.session.zk.get(path)[0], path)
            except (NoNodeError, ZooKeeperError):
                return None
        except (NoNodeError, ZooKeeperError, KazooException) as e:
            log.warning("could not assign a topic id to topic %s: %s", name, e)
            return None

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (KIP-516) from the registry cache; None if unknown or it has none."""
        with self._lock:
            entry = self._topics.get(name)
        return None if entry is None else entry.topic_id

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic whose id is ``topic_id`` (from the registry cache), None if none."""
        with self._lock:
            entries = list(self._topics.items())
        for name, entry in entries:
            if entry.topic_id == topic_id:
                return name
        return None

    def refresh(self) -> None:
        """Re-read live brokers and the topic registry now (watches do this on every change)."""
        registrations = self._read_brokers(self.session.retry(self.session.zk.get_children, paths.BROKER_IDS))
        brokers = self._default_addresses(registrations)
        with self._lock:
            self._brokers = brokers
            self._registrations = registrations
        self._refresh_topics(self.session.retry(self.session.zk.get_children, paths.BROKER_TOPICS))

    # ------------------------------------------------------------------ reads

    def live_brokers(self, listener_name: str | None = None) -> dict[int, tuple[str, int]]:
        """``{broker_id: (host, port)}`` of the registered brokers.  ``listener_name``: their endpoints of
        that listener, leaving out brokers without it (what Metadata answers a client of that listener,
        as Kafka does); None: every live broker at its inter-broker (else PLAINTEXT) endpoint."""
        with self._lock:
            if listener_name is None:
                return dict(self._brokers)
            registrations = dict(self._registrations)
        out = {}
        for b, reg in registrations.items():
            e = reg.endpoint(listener_name)
            if e is not None:
                out[b] = (e.host, e.port)
            elif not reg.endpoints and listener_name == "PLAINTEXT" and reg.host is not None:
                out[b] = (reg.host, reg.port)  # v1: host/port is the PLAINTEXT address
        return out

    @property
    def controller_id(self) -> int:
        """The broker holding ``/controller`` as the broker's controller (pyklog.broker.controller)
        last saw it and it is live; else (no controller known yet, an admin client) the lowest live
        broker id; -1 if no broker is live."""
        with self._lock:
            cid = self._active_controller_id
            if cid is not None and cid in self._brokers:
                return cid
            return min(self._brokers) if self._brokers else -1

    def set_controller_id(self, broker_id: int | None) -> None:
        """Called by the broker's controller (a kazoo or controller thread) with the broker holding
        ``/controller`` (None: nobody).  The newly elected controller carries out pending topic
        deletion requests."""
        with self._lock:
            before = self._active_controller_id
            self._active_controller_id = broker_id
        if (
            broker_id is not None
            and broker_id != before
            and broker_id == self.broker_id
            and not self.session.stopping
            and self.session.zk is not None
        ):
            if self._on_controller_duty is not None:
                self.session.admin_events.submit("controller-duty", self._on_controller_duty)

    @staticmethod
    def _partition_states(entry: _TopicEntry, live) -> dict[int, PartitionState]:
        parts = {}
        for p, replicas in sorted(entry.replicas.items()):
            leader, epoch, isr = entry.states.get(p, (-1, 0, []))
            parts[p] = PartitionState(leader if leader in live else -1, epoch, list(isr), list(replicas))
        return parts

    def topics(self) -> dict[str, dict[int, PartitionState]]:
        """``{topic: {partition: PartitionState}}``; leader -1 where the leader broker is not live."""
        with self._lock:
            live = set(self._brokers)
            entries = dict(self._topics)
        return {name: self._partition_states(e, live) for name, e in entries.items()}

    def topic(self, name: str, *, refresh_if_missing: bool = True) -> dict[int, PartitionState] | None:
        """One topic's partitions, read from ZooKeeper if the cache does not have it yet (else None)."""
        with self._lock:
            entry = self._topics.get(name)
            live = set(self._brokers)
        if entry is None and refresh_if_missing:
            try:
                validate_topic_name(name)  # never build a ZooKeeper path from an illegal name
            except InvalidTopicError:
                return None
            try:
                data, stat = self.session.retry(self.session.zk.get, paths.topic(name))
            except NoNodeError:
                return None
            fresh = self._read_topic_entry(name, data, stat)
            if fresh is None:
                return None
            with self._lock:
                if name in self._deleting:
                    return None
                entry = self._topics.setdefault(name, self._with_newest_states(name, fresh))
                self.generation += 1
        return None if entry is None else self._partition_states(entry, live)

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic-level config overrides stored at ``/config/topics/<topic>`` (``{}`` if none)."""
        with self._lock:
            cached = self._configs.get(topic)
            known = topic in self._topics
        if cached is not None:
            return dict(cached)
        validate_topic_name(topic)
        try:
            data, _ = self.session.retry(self.session.zk.get, paths.topic_config(topic))
            config = decode_topic_config(data, paths.topic_config(topic))
        except NoNodeError:
            config = {}
        if known:
            with self._lock:
                self._configs[topic] = config
        return dict(config)

    def partitions_hosted_by(self, broker_id: int) -> set[tuple[str, int]]:
        """Partitions that have ``broker_id`` among their replicas (leader or follower)."""
        with self._lock:
            entries = dict(self._topics)
        return {(name, p) for name, e in entries.items() for p, r in e.replicas.items() if broker_id in r}

    def partition_states_as_written(self, topic: str) -> dict[int, PartitionState] | None:
        """One topic's partitions from the cache with the state znodes' leaders as written (not -1
        for a leader that is not live, unlike :meth:`topic`); None if the topic is not cached.
        What a replica follows: a dead leader is still the leader until the controller says otherwise."""
        with self._lock:
            entry = self._topics.get(topic)
        if entry is None:
            return None
        return {
            p: PartitionState(*entry.states.get(p, (-1, 0, [])), list(r)) for p, r in sorted(entry.replicas.items())
        }

    def partition_state_as_written(self, topic: str, partition: int) -> PartitionState | None:
        """One partition of :meth:`partition_states_as_written` (None if not cached): O(1)."""
        with self._lock:
            entry = self._topics.get(topic)
        if entry is None or partition not in entry.replicas:
            return None
        return PartitionState(*entry.states.get(partition, (-1, 0, [])), list(entry.replicas[partition]))

    def partition_state_version(self, topic: str, partition: int, leader: int, leader_epoch: int, isr) -> int | None:
        """The version of the state node as last read or written here, if it holds this leader,
        leader epoch and ISR (else None: unknown)."""
        with self._lock:
            seen = self._newest_states.get((topic, partition))
        if seen is None:
            return None
        (_czxid, version), (s_leader, s_epoch, s_isr), _controller_epoch = seen
        if s_leader != leader or s_epoch != leader_epoch or sorted(s_isr) != sorted(isr):
            return None
        return version

    def controller_epoch_at(
        self, topic: str, partition: int, version: int, leader: int, leader_epoch: int
    ) -> int | None:
        """The controller epoch the partition's state node holds at ``version``, if that version,
        as last read or written here, names ``leader`` at ``leader_epoch``; else None (not known)."""
        with self._lock:
            seen = self._newest_states.get((topic, partition))
        if seen is None:
            return None
        (_czxid, seen_version), (s_leader, s_epoch, _isr), controller_epoch = seen
        if seen_version != version or s_leader != leader or s_epoch != leader_epoch or controller_epoch < 0:
            return None
        return controller_epoch

    def partition_replicas(self, topic: str, partition: int) -> list[int]:
        """The assigned replicas of a partition from the cache ([] if unknown)."""
        with self._lock:
            entry = self._topics.get(topic)
        return list(entry.replicas.get(partition, ())) if entry is not None else []

    def partitions_led_by(self, broker_id: int) -> set[tuple[str, int]]:
        """Partitions whose (fixed) leader is ``broker_id``."""
        with self._lock:
            entries = dict(self._topics)
        return {
            (name, p) for name, e in entries.items() for p, (leader, _, _) in e.states.items() if leader == broker_id
        }

    # ------------------------------------------------------------------ partition states (replication)
    #
    # Kafka's brokers learn leaders and ISRs from the controller's LeaderAndIsr requests; pyklog's
    # brokers follow the state znodes ``/brokers/topics/<t>/partitions/<p>/state`` through one-shot
    # data watches instead (armed whenever a state node is read by a registering broker,
    # :meth:`_read_topic_entry`), so a change costs one read of the changed node on each broker.
    # The controller alone changes leader and leader_epoch; a partition's leader changes the ISR
    # (:meth:`pyklog.broker.zk.isr.IsrWriter.update_isr`), both conditionally on the node's version.

    def add_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        """Call ``fn(topic, partition)`` (on the session's state thread) after a partition's state node
        changed and the cache holds the new state (see :meth:`partition_states_as_written`)."""
        with self._lock:
            self._state_listeners.append(fn)

    def remove_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        with self._lock:
            if fn in self._state_listeners:
                self._state_listeners.remove(fn)

    def stop_following_states(self) -> None:
        """This broker's controlled shutdown succeeded: it leads and follows nothing any more and
        stops serving in a moment, so the state changes the controller writes for its departure
        (thousands: every partition it hosted) are not read (Kafka's controller sends a stopping
        broker StopReplica, not the new states).  Their reads competed with the broker closing its
        logs.  The watches fire once more and are not re-armed."""
        with self._lock:
            self._states_unfollowed = True
            self._pending_state_reloads.clear()

    def _on_partition_state_data(self, event) -> None:
        """One-shot data watch of a state node (kazoo's callback thread: no blocking call here).
        A connection loss fires every watch with no path (kazoo drops them): re-arm them all once
        the connection is back."""
        if self.session.stopping or self.session.zk is None or self._states_unfollowed:
            return
        if event.path is None:
            with self._lock:
                if self._state_rearm_pending:
                    return
                self._state_rearm_pending = True
            self.session.events.submit("rearm-partition-states", self._rearm_partition_state_watches)
            return
        if event.type == "DELETED":
            return  # the topic is being deleted: the registry's children watch handles it
        parts = event.path.split("/")  # ['', 'brokers', 'topics', t, 'partitions', p, 'state']
        if len(parts) != 7 or not parts[5].isdigit():
            return
        with self._lock:
            self._pending_state_reloads[(parts[3], int(parts[5]))] = None
        self.session.events.submit("reload-partition-states", self._reload_pending_partition_states)

    #: state nodes read per round trip batch when many changed at once
    STATE_RELOAD_BATCH = 1000

    def _reload_pending_partition_states(self) -> None:
        """The session's event thread: re-read every state node whose watch fired since the last
        run (re-arming each watch), in pipelined batches, update the cache, and hand the partitions
        changed to the listeners' own thread.  A burst of thousands of changes (an election, a
        restart) costs a few round trips, not a thread and a round trip per partition.

        The reads never wait for the listeners: every state read is in the cache (what Metadata
        answers) at once, while the replica manager applies the burst behind its lock on the
        listeners' thread.  When both ran on one thread, a broker applying thousands of
        leaderships (a controlled shutdown elsewhere) stopped reading the next changes while its
        log sync held that lock, and answered with leaders that had already moved to a broker that
        then left: partitions without a live leader for seconds."""
        t0 = time.monotonic()
        changed = self._read_pending_states()
        if len(changed) >= 1000:  # a burst (an election, a controlled shutdown): how long it took
            log.info("read %d changed partition states in %.2fs", len(changed), time.monotonic() - t0)
        self._tell_state_listeners(changed)

    def _read_pending_states(self) -> list:
        """Re-read (re-arming each watch) and cache the state nodes whose watch fired since the last
        read, in pipelined batches; the partitions whose cached state changed."""
        with self._lock:
            todo = list(self._pending_state_reloads)
            self._pending_state_reloads.clear()
        changed: list = []
        for i in range(0, len(todo), self.STATE_RELOAD_BATCH):
            zk = self.session.zk
            if self.session.stopping or zk is None or self._states_unfollowed:
                return changed
            chunk = todo[i : i + self.STATE_RELOAD_BATCH]

            def read(chunk=chunk, zk=zk):
                pending = [
                    (tp, zk.get_async(paths.partition_state(*tp), watch=self._on_partition_state_data)) for tp in chunk
                ]
                out = []
                for tp, res in pending:
                    try:
                        data, stat = res.get()
                    except NoNodeError:
                        continue
                    out.append((tp, data, stat))
                return out

            try:
                got = self.session.retry(read)
            except (PyklogError, KazooException) as e:
                # the connection is gone: every watch fires with no path and the re-arm reads them all
                log.warning("could not re-read %d partition states: %s", len(chunk), e)
                continue
            updates = []
            for (topic, partition), data, stat in got:
                try:
                    s = decode_partition_state(data, paths.partition_state(topic, partition))
                except ZooKeeperError as e:
                    log.warning("unreadable partition state %s-%d: %s", topic, partition, e)
                    continue
                updates.append((topic, partition, (s.leader, s.leader_epoch, list(s.isr)), stat, s.controller_epoch))
            changed.extend(self._cache_partition_states(updates, notify=False))
        return changed

    def _note_state(self, topic: str, partition: int, stat, state: tuple, controller_epoch: int = -1) -> bool:
        """Under or outside ``_lock``: remember ``state`` (and the node's ``controller_epoch``) as
        the partition's newest if its node's ``(czxid, version)`` is newer than the one remembered;
        True if it was."""
        if stat is None:
            return True
        key = (stat.czxid, stat.version)
        with self._lock:
            seen = self._newest_states.get((topic, partition))
            if seen is not None and seen[0] >= key:
                return seen[0] == key
            self._newest_states[(topic, partition)] = (key, state, controller_epoch)
            return True

    def _with_newest_states(self, name: str, entry: _TopicEntry) -> _TopicEntry:
        """Under ``_lock``: ``entry`` with each partition's newest state seen.  A topic entry is read
        (its states with their watches) before it is installed: a state change in between fires the
        watch, whose re-read finds no entry to update yet (a broker starting while the controller
        elects it) or updates one the install then replaces; the watch is spent, so without this the
        cache kept the older state for good (a restarted broker stayed "follower of -1" of a
        partition it had been elected to lead)."""
        states = None
        for p in entry.replicas:
            seen = self._newest_states.get((name, p))
            # a state node created before the topic node belongs to an earlier topic of that name
            # (deleted and created again): never carried over
            if seen is not None and seen[0][0] >= entry.czxid and entry.states.get(p) != seen[1]:
                states = dict(entry.states) if states is None else states
                states[p] = seen[1]
        if states is None:
            return entry
        return _TopicEntry(entry.czxid, entry.mzxid, entry.replicas, states, entry.topic_id)

    def _cache_partition_states(self, updates, *, notify: bool = True) -> list:
        """Cache each ``(topic, partition, (leader, leader_epoch, isr), stat, controller_epoch)``
        newer than the state cached, then (``notify``) tell the listeners of each partition changed,
        in the order given (no lock held).  Returns the partitions changed."""
        changed = []
        with self._lock:
            for topic, partition, state, stat, controller_epoch in updates:
                if not self._note_state(topic, partition, stat, state, controller_epoch):
                    continue  # an older read than the state cached (two re-reads overtaking each other)
                changed.append((topic, partition))
                entry = self._topics.get(topic)
                if entry is not None and partition in entry.replicas:
                    self._set_state(topic, entry, partition, state)
            if changed:
                self.generation += 1
        if notify:
            self._tell_state_listeners(changed)
        return changed

    #: partitions applied between two looks for newer pending ones (the listeners' thread)
    STATE_APPLY_BATCH = 100

    def _tell_state_listeners(self, changed) -> None:
        """Queue ``changed`` partitions for the state listeners, called on the session's state
        thread in the order queued (a partition queued again keeps its place: its listener reads
        the newest cached state)."""
        if not changed:
            return
        with self._lock:
            for tp in changed:
                self._pending_state_applies[tp] = None
        self.session.state_events.submit("apply-partition-states", self._apply_pending_states)

    def _apply_pending_states(self) -> None:
        """The session's state thread: tell each listener of every queued partition, in batches of
        :data:`STATE_APPLY_BATCH` taken in queue order."""
        while not self.session.stopping:
            with self._lock:
                if not self._pending_state_applies:
                    return
                batch = []
                for tp in self._pending_state_applies:
                    batch.append(tp)
                    if len(batch) >= self.STATE_APPLY_BATCH:
                        break
                for tp in batch:
                    del self._pending_state_applies[tp]
                listeners = list(self._state_listeners)
            for topic, partition in batch:
                for fn in listeners:
                    try:
                        fn(topic, partition)
                    except Exception:  # noqa: BLE001
                        log.exception("partition state listener %r failed", fn)

    def _rearm_partition_state_watches(self) -> None:
        """After a connection loss (the session's event thread): wait for the connection, then re-read
        every cached partition's state with its watch, and tell the listeners of each (a change
        made while disconnected was missed).  Retried every second while not stopping."""
        try:
            while not self.session.stopping and not self._states_unfollowed:
                zk = self.session.zk
                if zk is None:
                    return
                if not zk.connected:
                    time.sleep(0.2)
                    continue
                with self._lock:
                    self._state_rearm_pending = False
                    names = list(self._topics)
                try:
                    for name in names:
                        with self._lock:
                            entry = self._topics.get(name)
                        if entry is None:
                            continue
                        pending = [
                            (p, zk.get_async(paths.partition_state(name, p), watch=self._on_partition_state_data))
                            for p in entry.replicas
                        ]
                        updates = []
                        for p, res in pending:
                            try:
                                data, stat = res.get()
                                s = decode_partition_state(data, paths.partition_state(name, p))
                            except NoNodeError:
                                continue
                            except ZooKeeperError as e:
                                log.warning("unreadable partition state %s-%d: %s", name, p, e)
                                continue
                            updates.append((name, p, (s.leader, s.leader_epoch, list(s.isr)), stat, s.controller_epoch))
                        self._cache_partition_states(updates)
                    return
                except KazooException as e:
                    log.info("re-arming the partition state watches failed (%s); retrying", e)
                    time.sleep(1.0)
        except Exception:  # noqa: BLE001
            log.exception("re-arming the partition state watches failed")
