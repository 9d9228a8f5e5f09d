"""The broker's ZooKeeper side as one object: :class:`ZkCluster` composes the parts, one job each.

=================================================  ==================================================
:mod:`~pyklog.broker.zk.session`                   the kazoo client and its retry, the cluster id
                                                   (``/cluster/id``), the data-loss watchdog
:mod:`~pyklog.broker.zk.registration`              ``/brokers/ids/[id]`` (ephemeral), re-registration
                                                   after a session expiry
:mod:`~pyklog.broker.zk.metadata_cache`            live brokers, topic registry, partition states,
                                                   cached topic configs, kept current by watches
:mod:`~pyklog.broker.zk.topic_admin`               create / grow / delete topics, ``/admin/delete_topics``
:mod:`~pyklog.broker.zk.configs`                   topic and dynamic broker configs, ``/config/changes``
:mod:`~pyklog.broker.zk.producer_ids`              ``/latest_producer_id_block``
:mod:`~pyklog.broker.zk.isr`                       the leader's ISR writes into the state nodes
:mod:`~pyklog.broker.zk.consumer_groups`           ``/consumers/[group]``: DeleteGroups and expiry
=================================================  ==================================================

Every path comes from :mod:`pyklog.broker.zk.paths`, every node's data is encoded and decoded by
:mod:`pyklog.broker.zk.znodes`; each part's module docstring describes the nodes it owns.

:class:`ZkCluster` keeps the API the broker, the tools and the tests use (its methods delegate to
the parts); new code may take the part it needs (``cluster.metadata_cache``, ``cluster.topic_admin``,
...) instead.  Every ZooKeeper call goes through :meth:`ZkCluster.retry` (kazoo's ``client.retry``);
a caller sees :class:`ZooKeeperError` when ZooKeeper stays unreachable.

Thread-safety: :class:`ZkCluster` is thread-safe.  Reads (``live_brokers``, ``topics``, ...) return
snapshots taken under the metadata cache's lock; watch callbacks and listeners run on kazoo's
callback thread.  :meth:`start` and :meth:`stop` are called by the owner only.
"""

from __future__ import annotations

import functools
import logging
import socket
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Concatenate, ParamSpec, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from pyklog.broker.zk import paths
from pyklog.broker.zk.acl_migration import migrate_acls
from pyklog.broker.zk.configs import ZkConfigs
from pyklog.broker.zk.consumer_groups import ZkConsumerGroups
from pyklog.broker.zk.isr import IsrWriter
from pyklog.broker.zk.metadata_cache import PartitionState, ZkMetadataCache
from pyklog.broker.zk.producer_ids import ZkProducerIdManager
from pyklog.broker.zk.registration import BrokerRegistrar
from pyklog.broker.zk.session import ZkSession, new_cluster_id, split_connect_string  # noqa: F401 - re-exported
from pyklog.broker.zk.topic_admin import TopicAdmin
from pyklog.broker.zk.znode_acls import ZkCredentials
from pyklog.broker.zk.znodes import BrokerRegistration, encode_partition_list

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")


def _forward(part: str, method: Callable[Concatenate[Any, P], T]) -> Callable[Concatenate[ZkCluster, P], T]:
    """A :class:`ZkCluster` method that calls ``method`` on the part held in the attribute named
    ``part``, with ``method``'s signature and docstring (``help()`` and ``inspect`` show them)."""

    @functools.wraps(method)
    def forwarded(self: ZkCluster, *args: P.args, **kwargs: P.kwargs) -> T:
        return method(getattr(self, part), *args, **kwargs)

    return forwarded


__all__ = ["ZkCluster", "PartitionState", "split_connect_string", "new_cluster_id"]


def _plain_connect(host: str, port: int, timeout_s: float | None) -> socket.socket:
    return socket.create_connection((host, port), timeout=timeout_s)


class ZkCluster:
    """One broker's (or an admin tool's) view of the cluster in ZooKeeper.

    ``ZkCluster(zk_connect, broker_id, host, port)``; ``broker_id=None`` makes an admin client that
    reads and administers topics without registering (used by ``pyklog-topics``).  ``listeners``
    are the registration's endpoints (default ``["PLAINTEXT://host:port"]``).
    ``cluster_id_check`` is called with ZooKeeper's ``/cluster/id`` (None if absent) before it is
    created and before the broker registers: raising there stops :meth:`start` with nothing written
    (the meta.properties check).  ``on_fatal`` is called once (on a kazoo thread) when ZooKeeper is
    found to have lost its data under us.  ``controller_deletes_topics``: the broker's
    :class:`~pyklog.broker.controller.controller.KafkaController` carries out the deletion requests
    (``/admin/delete_topics``); without it (a registry-only test cluster) the broker holding
    ``/controller`` removes a requested topic's nodes at once.
    """

    def __init__(
        self,
        zk_connect: str,
        broker_id: int | None,
        host: str | None = None,
        port: int | None = None,
        *,
        session_timeout_ms: int = 18000,
        listeners: Iterable[str] | None = None,
        connect_timeout_s: float | None = None,
        rack: str | None = None,
        cluster_id_check: Callable[[str | None], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
        protocol_map: dict[str, str] | None = None,
        inter_broker_listener: str | None = None,
        broker_connector: Callable[[str, int, float | None], socket.socket] | None = None,
        credentials: ZkCredentials | None = None,
        set_acl: bool = False,
        controller_deletes_topics: bool = False,
    ):
        self.zk_connect = zk_connect
        split_connect_string(zk_connect)  # a malformed connect string fails here, before anything starts
        self.broker_id = None if broker_id is None else int(broker_id)
        self.host = host
        self.port = None if port is None else int(port)
        if self.broker_id is not None and not listeners and (host is None or port is None):
            raise ValueError("a registering broker needs host and port, or listeners")
        #: connects to another broker's inter-broker endpoint (TLS when that listener is SSL / SASL_SSL)
        self.broker_connector = broker_connector or _plain_connect
        self.listeners = (
            list(listeners)
            if listeners
            else ([f"PLAINTEXT://{host}:{self.port}"] if self.broker_id is not None else [])
        )
        self.rack = rack
        self.controller_deletes_topics = controller_deletes_topics
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.connect_timeout_s = (
            connect_timeout_s if connect_timeout_s is not None else max(10.0, self.session_timeout_s)
        )
        registering = self.broker_id is not None
        self.session = ZkSession(
            zk_connect,
            session_timeout_s=self.session_timeout_s,
            connect_timeout_s=self.connect_timeout_s,
            registering=registering,
            cluster_id_check=cluster_id_check,
            on_fatal=on_fatal,
            on_session_lost=self._on_session_lost if registering else None,
            on_new_session=self._on_new_session if registering else None,
            credentials=credentials,
            set_acl=set_acl,
        )
        self.metadata_cache = ZkMetadataCache(
            self.session,
            self.broker_id,
            on_controller_duty=self._process_delete_requests,
            inter_broker_listener=inter_broker_listener,
        )
        self.registrar = (
            BrokerRegistrar(
                self.session,
                self.broker_id,
                host,
                self.port,
                self.listeners,
                rack,
                on_registered_again=self.metadata_cache.notify,
                protocol_map=protocol_map,
            )
            if registering
            else None
        )
        self.topic_admin = TopicAdmin(self.session, self.metadata_cache, self.broker_id)
        self.configs = ZkConfigs(self.session, self.metadata_cache, self.broker_id)
        self.producer_ids = ZkProducerIdManager(self.session, self.broker_id)
        self.isr = IsrWriter(self.session, self.metadata_cache, self.broker_id)
        self.consumer_groups = ZkConsumerGroups(self.session)
        self._watches: list[ChildrenWatch] = []

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ZkCluster:
        """Connect, read or create the cluster id, register the broker, start the watches.

        Raises :class:`ZooKeeperError` if ZooKeeper cannot be reached within ``connect_timeout_s``
        and :class:`BrokerIdInUseError` if a live broker already holds this broker id.
        """
        self.session.start()
        try:
            if self.session.set_acl and self.broker_id is not None:
                self._secure_existing_znodes()
                # the clients' open roots: under a secure chroot only a broker can create them
                for p in (paths.CONSUMERS, paths.SPARK_SINKS):
                    self.retry(self.zk.ensure_path, p)
            for p in (
                paths.BROKER_IDS,
                paths.BROKER_TOPICS,
                paths.CONFIG_TOPICS,
                paths.CONFIG_CHANGES,
                paths.ADMIN_DELETE_TOPICS,
                paths.ADMIN_DELETED_TOPICS,
                paths.ADMIN_REPLICA_DELETIONS,
                paths.OFFLINE_REPLICAS,
            ):
                self.retry(self.zk.ensure_path, p)
            if self.broker_id is not None:
                self._clear_offline_replicas()  # before registering: its log dirs are online now
            if self.registrar is not None:
                self.registrar.register()
            self._watches.extend(self.metadata_cache.watch_brokers_and_topics())
            if self.broker_id is not None:
                if not self.controller_deletes_topics:
                    self._watches.append(self.topic_admin.watch_delete_requests())
                self._watches.append(self.configs.watch_config_changes())
        except BaseException:
            self.session.close()
            raise
        log.info(
            "ZooKeeper %s: cluster id %s%s",
            self.zk_connect,
            self.cluster_id,
            f", registered broker {self.broker_id} at {self.listeners}" if self.broker_id is not None else "",
        )
        return self

    def _secure_existing_znodes(self) -> None:
        """zookeeper.set.acl: give the znodes this cluster's brokers own the secure ACLs before
        registering (a registry written without ACLs is fixed at the first secure start)."""
        result = self.retry(migrate_acls, self.zk, self.session.acls_for, include_root=bool(self.session.chroot))
        if result.changed:
            log.info(
                "ZooKeeper ACLs: secured %d of %d existing znodes (zookeeper.set.acl=true, as %s)",
                result.changed,
                result.checked,
                self.session.credentials,
            )

    def stop(self) -> None:
        """Delete our own registration (if this session holds it) and close the session."""
        self.session.begin_stop()
        if self.session.zk is None:
            return
        if self.registrar is not None:
            self.registrar.deregister()
        self.session.close()

    close = stop

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _on_session_lost(self) -> None:
        self.registrar.on_session_lost()

    def _on_new_session(self) -> None:
        self.registrar.reregister()

    def _clear_offline_replicas(self) -> None:
        prefix = paths.offline_replicas_prefix(self.broker_id).rsplit("/", 1)[1]

        def clear():
            for c in self.zk.get_children(paths.OFFLINE_REPLICAS):
                if c.startswith(prefix):
                    try:
                        self.zk.delete(f"{paths.OFFLINE_REPLICAS}/{c}")
                    except NoNodeError:
                        pass

        self.retry(clear)

    def report_offline_replicas(self, partitions) -> None:
        """Record this broker's replicas on a failed log dir (``/offline_replicas/<id>-<seq>``), which
        every broker's Metadata then reports as ``offline_replicas``.  Any thread but a kazoo handler
        thread; raises ZooKeeperError if ZooKeeper stays unreachable."""
        self.retry(
            self.zk.create,
            paths.offline_replicas_prefix(self.broker_id),
            encode_partition_list(sorted(partitions)),
            sequence=True,
        )

    def offline_replicas(self) -> dict[int, frozenset]:
        """``{live broker id: its replicas on failed log dirs}`` (Metadata's offline_replicas)."""
        return self.metadata_cache.offline_replicas()

    def _process_delete_requests(self) -> None:
        if not self.controller_deletes_topics:
            self.topic_admin.process_delete_requests()

    # ------------------------------------------------------------------ session

    @property
    def zk(self) -> KazooClient | None:
        """The kazoo client while started (None before :meth:`start` and after :meth:`stop`)."""
        return self.session.zk

    @property
    def cluster_id(self) -> str | None:
        return self.session.cluster_id

    @property
    def session_id(self) -> int | None:
        return self.session.session_id

    def retry(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """``client.retry(fn, ...)``, with an unreachable ZooKeeper turned into :class:`ZooKeeperError`.
        Any thread; for callers that read or write ZooKeeper nodes of their own (the controller)."""
        return self.session.retry(fn, *args, **kwargs)

    # ------------------------------------------------------------------ registration

    def broker_registration(self) -> BrokerRegistration:
        """The registration this broker writes at ``/brokers/ids/<id>`` (fresh timestamp)."""
        return self.registrar.broker_registration()

    def registration(self) -> dict:
        """The registration as the JSON object Kafka writes (see :meth:`broker_registration`)."""
        return self.broker_registration().to_json()

    @property
    def registered(self) -> bool:
        """True while this broker's registration node is believed to exist (False after a session loss)."""
        return self.registrar is not None and self.registrar.registered

    def wait_registered(self, timeout: float | None = None) -> bool:
        if self.registrar is None:
            return False
        return self.registrar.wait_registered(timeout)

    # ------------------------------------------------------------------ metadata cache

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (on kazoo's callback thread) whenever live brokers or topics change."""
        self.metadata_cache.add_listener(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        self.metadata_cache.remove_listener(fn)

    def add_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        """Call ``fn(topic, partition)`` (on the session's event thread) after a partition's state node
        changed and the cache holds the new state."""
        self.metadata_cache.add_partition_state_listener(fn)

    def remove_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        self.metadata_cache.remove_partition_state_listener(fn)

    def stop_following_states(self) -> None:
        self.metadata_cache.stop_following_states()

    def refresh(self) -> None:
        """Re-read live brokers and the topic registry now (watches do this on every change)."""
        self.metadata_cache.refresh()

    def reload_topic(self, name: str) -> bool:
        """Re-read one topic's assignment and partition states into the cache; True if it changed."""
        return self.metadata_cache.reload_topic(name)

    def live_brokers(self, listener_name: str | None = None) -> dict[int, tuple[str, int]]:
        """``{broker_id: (host, port)}`` of the registered brokers: their endpoints of listener
        ``listener_name`` (brokers without that listener are left out), by default the inter-broker
        listener's (a broker's own connections to the others)."""
        return self.metadata_cache.live_brokers(listener_name)

    def connect_to_broker(self, host: str, port: int, timeout_s: float | None) -> socket.socket:
        """A blocking connection to another broker's inter-broker endpoint (TLS handshake done when
        the inter-broker listener is SSL / SASL_SSL)."""
        return self.broker_connector(host, port, timeout_s)

    @property
    def controller_id(self) -> int:
        """The active controller if known and live, else the lowest live broker id; -1 if none."""
        return self.metadata_cache.controller_id

    def set_controller_id(self, broker_id: int | None) -> None:
        """Called by the broker's controller with the broker holding ``/controller`` (None: nobody)."""
        self.metadata_cache.set_controller_id(broker_id)

    @property
    def metadata_generation(self) -> int:
        """A number that changes whenever the cached topics, partition states, topic configs or live
        brokers change (equal twice: nothing changed in between)."""
        return self.metadata_cache.generation

    def topics(self) -> dict[str, dict[int, PartitionState]]:
        """``{topic: {partition: PartitionState}}``; leader -1 where the leader broker is not live."""
        return self.metadata_cache.topics()

    def topic(self, name: str, *, refresh_if_missing: bool = True) -> dict[int, PartitionState] | None:
        """One topic's partitions, read from ZooKeeper if the cache does not have it yet (else None)."""
        return self.metadata_cache.topic(name, refresh_if_missing=refresh_if_missing)

    def topic_id(self, name: str) -> uuid.UUID | None:
        return self.metadata_cache.topic_id(name)

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None:
        return self.metadata_cache.topic_name_by_id(topic_id)

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic-level config overrides stored at ``/config/topics/<topic>`` (``{}`` if none)."""
        return self.metadata_cache.topic_config(topic)

    def topics_being_deleted(self) -> frozenset[str]:
        """Topics whose deletion the controller started and has not completed (hidden from the cache)."""
        return self.metadata_cache.topics_being_deleted()

    def partitions_hosted_by(self, broker_id: int) -> set[tuple[str, int]]:
        return self.metadata_cache.partitions_hosted_by(broker_id)

    def partition_states_as_written(self, topic: str) -> dict[int, PartitionState] | None:
        return self.metadata_cache.partition_states_as_written(topic)

    def partition_state_as_written(self, topic: str, partition: int) -> PartitionState | None:
        return self.metadata_cache.partition_state_as_written(topic, partition)

    def partition_state_version(self, topic: str, partition: int, leader: int, leader_epoch: int, isr) -> int | None:
        return self.metadata_cache.partition_state_version(topic, partition, leader, leader_epoch, isr)

    def partition_replicas(self, topic: str, partition: int) -> list[int]:
        return self.metadata_cache.partition_replicas(topic, partition)

    def partitions_led_by(self, broker_id: int) -> set[tuple[str, int]]:
        return self.metadata_cache.partitions_led_by(broker_id)

    # ------------------------------------------------------------------ topic administration
    # (each forwards to its part, keeping the part's signature and docstring)

    create_topic = _forward("topic_admin", TopicAdmin.create_topic)
    create_topics = _forward("topic_admin", TopicAdmin.create_topics)
    create_partitions = _forward("topic_admin", TopicAdmin.create_partitions)
    delete_topic = _forward("topic_admin", TopicAdmin.delete_topic)
    delete_topics = _forward("topic_admin", TopicAdmin.delete_topics)
    mark_topics_for_deletion = _forward("topic_admin", TopicAdmin.mark_topics_for_deletion)
    replica_deletion_done = _forward("topic_admin", TopicAdmin.replica_deletion_done)
    topic_deletion_recorded = _forward("topic_admin", TopicAdmin.topic_deletion_recorded)
    broker_racks = _forward("topic_admin", TopicAdmin.broker_racks)

    # ------------------------------------------------------------------ configs

    alter_topic_config = _forward("configs", ZkConfigs.alter_topic_config)
    broker_config = _forward("configs", ZkConfigs.broker_config)
    alter_broker_config = _forward("configs", ZkConfigs.alter_broker_config)
    watch_broker_config = _forward("configs", ZkConfigs.watch_broker_config)

    # ------------------------------------------------------------------ producer ids, ISR

    allocate_producer_ids = _forward("producer_ids", ZkProducerIdManager.allocate_producer_ids)
    partition_state = _forward("isr", IsrWriter.partition_state)
    update_isr = _forward("isr", IsrWriter.update_isr)
    update_isrs = _forward("isr", IsrWriter.update_isrs)

    # ------------------------------------------------------------------ ZooKeeper consumer groups

    zookeeper_consumer_groups = _forward("consumer_groups", ZkConsumerGroups.zookeeper_consumer_groups)
    delete_expired_zookeeper_group = _forward("consumer_groups", ZkConsumerGroups.delete_expired_zookeeper_group)
    delete_zookeeper_group = _forward("consumer_groups", ZkConsumerGroups.delete_zookeeper_group)
