"""Partition leadership of one broker: Kafka's ``ReplicaManager`` (and its ``Partition``s) for pyklog.

Which partitions this broker leads, their leader epochs and their leader logs (the local
:class:`~pyklog.broker.log.Log` of a partition it leads).  The ZooKeeper registry
(:class:`~pyklog.broker.zk.cluster.ZkCluster`) says who leads what; pyklog has no replication and no
leader elections, so a partition's leader is its first replica, fixed when the topic is created, and
a broker only ever holds leader logs (no follower replicas).

* :meth:`ReplicaManager.sync_logs` makes the local logs follow the registry: it creates the log of
  every partition this broker leads (and applies changed topic configs to existing ones), records
  the led partitions and their leader epochs, and deletes the logs of topics deleted by request
  (:meth:`ZkCluster.topic_deletion_recorded`).  A log whose topic is merely missing from the
  registry (ZooKeeper restarted empty, znodes removed by hand) is kept, not served, and reported
  at ERROR once: only an explicit deletion deletes data.
  Called at startup and on every registry change (the broker's sync thread).
* :meth:`ReplicaManager.leader_log` is the lookup of the Produce, Fetch and ListOffsets handlers:
  the partition's leader log, or UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER.  A partition in
  the led set costs one set lookup and one dict lookup, no ZooKeeper read; only a partition this
  broker does not (yet) know to lead consults the registry (the topic may be brand new).
* :meth:`ReplicaManager.delete_local_logs` drops a deleted topic's logs at once (DeleteTopics on
  this broker; the other brokers follow through their registry listener).
* :meth:`ReplicaManager.auto_create_topic` / :meth:`wait_for_topic`: ``auto.create.topics.enable``
  for Metadata and Produce, and CreateTopics waiting until the new topic is in the registry cache.

Thread-safety: thread-safe.  ``leader_log`` and ``leader_epoch`` run on every request handler thread
without a lock: they read ``_led`` and ``_epochs``, which are replaced whole (an immutable frozenset,
a dict never mutated after publication), never changed in place.  ``sync_logs`` and
``delete_local_logs`` run under ``_sync_lock`` (one writer at a time), which is held across the
log manager's create/delete calls and never taken on the Produce/Fetch path.  The log manager and
the ZkCluster are thread-safe themselves.
"""
from __future__ import annotations

import logging
import threading

from pyklog.broker.common.retry import Deadline
from pyklog.broker.errors import NotLeaderOrFollowerError, TopicAlreadyExistsError, UnknownTopicOrPartitionError
from pyklog.broker.zk.topics import validate_topic_name

log = logging.getLogger(__name__)


class ReplicaManager:
    """The partitions one broker leads and their leader logs.

    ``config`` is the broker's :class:`~pyklog.broker.server.config.BrokerConfig`, ``log_manager`` a
    :class:`~pyklog.broker.log.LogManager`, ``cluster`` a started :class:`~pyklog.broker.zk.cluster.ZkCluster`.
    """

    def __init__(self, config, log_manager, cluster):
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.cluster = cluster
        self.default_log_config = config.log_config()
        self._led: frozenset = frozenset()  # (topic, partition) this broker leads; replaced whole
        self._epochs: dict = {}  # (topic, partition) -> leader epoch; replaced whole
        self._sync_lock = threading.Lock()
        self._strays_reported: frozenset = frozenset()  # stray logs already reported at ERROR

    # ------------------------------------------------------------------ following the registry

    def sync_logs(self) -> None:
        """Create the logs of partitions this broker leads, delete the logs of topics deleted by
        request, keep (unserved) the logs of topics missing without a request.
        Called at startup and on every registry change (from a background thread)."""
        with self._sync_lock:
            topics = self.cluster.topics()
            led = self.cluster.partitions_led_by(self.broker_id)
            epochs = {}
            for (t, p) in led:
                st = topics.get(t, {}).get(p)
                epochs[(t, p)] = st.leader_epoch if st is not None else 0
                try:
                    # creates a missing log; applies changed topic-level config to an existing one
                    self.logs.get_or_create_log(t, p, self.log_config_for(t))
                except Exception:  # noqa: BLE001
                    log.exception("cannot create the log of %s-%d", t, p)
            self._led = frozenset(led)
            self._epochs = epochs
            strays = {}
            for (t, p), lg in list(self.logs.logs().items()):
                if t in topics:
                    continue
                try:
                    if self.cluster.topic(t, refresh_if_missing=True) is not None:
                        continue  # the cache was late; the topic exists
                    deleted = self.cluster.topic_deletion_recorded(t)
                except Exception:  # noqa: BLE001 - ZooKeeper unreachable: delete nothing
                    log.warning("cannot check whether topic %s still exists; keeping its logs", t)
                    continue
                if not deleted:
                    strays[(t, p)] = lg
                    continue
                try:
                    self.logs.delete_log(t, p)
                    log.info("deleted log of %s-%d (topic deleted by request)", t, p)
                except Exception:  # noqa: BLE001
                    log.exception("cannot delete the log of %s-%d", t, p)
            set_paused = getattr(self.logs, "set_cleaning_paused", None)
            if set_paused is not None:
                set_paused(strays)  # no retention/compaction under a config the topic may not have
            self._report_strays(strays)

    def _report_strays(self, strays: dict) -> None:
        """Logs present on disk whose topic is missing from the registry without a deletion request
        (ZooKeeper restarted empty, znodes removed by hand): kept, not served (not in the led set),
        their retention and compaction paused, reported at ERROR once per log until its topic comes
        back (then it is served and cleaned again)."""
        new = {k: lg for k, lg in strays.items() if k not in self._strays_reported}
        self._strays_reported = frozenset(strays)
        if not new:
            return
        details = ", ".join(f"{lg.dir} ({_size_of(lg)} bytes, log end offset {_leo_of(lg)})"
                            for _, lg in sorted(new.items()))
        log.error("keeping %d log(s) whose topic is not in the ZooKeeper registry and was not deleted by "
                  "request: %s. They are not served. If ZooKeeper lost its data, restore it and the topics "
                  "come back with their records; to remove them, re-create the topic and delete it "
                  "(DeleteTopics / pyklog-topics --delete), or remove the directories by hand.",
                  len(new), details)

    def delete_local_logs(self, topic: str) -> None:
        """Delete this broker's logs of a deleted topic at once (other brokers follow through their
        registry listener), so a topic re-created right away never finds the old records."""
        with self._sync_lock:
            self._led = frozenset(k for k in self._led if k[0] != topic)
            for (t, p) in list(self.logs.logs()):
                if t == topic:
                    try:
                        self.logs.delete_log(t, p)
                    except Exception:  # noqa: BLE001
                        log.exception("cannot delete the log of %s-%d", t, p)

    def log_config_for(self, topic: str):
        """The broker's log config with the topic's overrides (defaults if ZooKeeper cannot say)."""
        try:
            overrides = self.cluster.topic_config(topic)
        except Exception:  # noqa: BLE001
            overrides = {}
        return self.default_log_config.with_overrides(overrides) if overrides else self.default_log_config

    # ------------------------------------------------------------------ lookups (request handler threads)

    def leader_log(self, topic: str, partition: int):
        """The local log of a partition this broker leads; UnknownTopicOrPartitionError /
        NotLeaderOrFollowerError otherwise."""
        key = (topic, partition)
        if key in self._led:
            lg = self.logs.get_log(topic, partition)
            if lg is not None:
                return lg
        validate_topic_name(topic)  # before any ZooKeeper path or directory is built from it
        parts = self.cluster.topic(topic, refresh_if_missing=True)
        if not parts or partition not in parts:
            raise UnknownTopicOrPartitionError(
                f"this server does not host partition {topic}-{partition}")
        leader = parts[partition].leader
        if leader != self.broker_id:
            led = self.cluster.partitions_led_by(self.broker_id)
            if key not in led:
                raise NotLeaderOrFollowerError(
                    f"broker {self.broker_id} is not the leader of {topic}-{partition} (leader: {leader})")
        return self.logs.get_or_create_log(topic, partition, self.log_config_for(topic))

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch of a partition this broker leads (0 if not known yet)."""
        return self._epochs.get((topic, partition), 0)

    def local_log(self, topic: str, partition: int):
        """This broker's log of a partition, or None (no leadership check)."""
        return self.logs.get_log(topic, partition)

    @property
    def led_partitions(self) -> frozenset:
        """The (topic, partition) pairs this broker leads, as of the last sync."""
        return self._led

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
        topic = getattr(self.cluster, "topic", None)
        if topic is None:
            return name in self.cluster.topics()
        return topic(name, refresh_if_missing=False) is not None

    def wait_for_topic(self, name: str, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for ``name`` to be in the registry cache; True if it is.

        Wakes up on the registry's change listener (called when the topic watch has updated the
        cache) and re-checks at least every :attr:`TOPIC_RECHECK_S` (a cache refreshed without a
        notification); a cluster without ``add_listener`` is simply polled at that interval."""
        deadline = Deadline.after(timeout_s)
        changed = threading.Event()
        on_change = changed.set
        add = getattr(self.cluster, "add_listener", None)
        if add is not None:
            add(on_change)
        try:
            while True:
                changed.clear()  # before the check, so a change during the check is not lost
                if self._in_registry_cache(name):  # O(1): no copy of the whole registry per topic
                    return True
                if deadline.expired():
                    return False
                changed.wait(min(self.TOPIC_RECHECK_S, deadline.remaining()))
        finally:
            if add is not None:
                self.cluster.remove_listener(on_change)


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


__all__ = ["ReplicaManager"]
