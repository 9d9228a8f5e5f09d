"""The broker process: ``pyklog-broker server.properties`` (also ``python -m pyklog.broker server.properties``).

Start-up: read and validate the config (a bad or unknown key exits with code 2 and a message
naming it) -> the listener is bound (so ``listeners=PLAINTEXT://host:0`` registers the real port)
-> the ``meta.properties`` of every log dir are read and checked against ``broker.id``
(:mod:`pyklog.broker.server.meta_properties`) -> :class:`broker.zk.cluster.ZkCluster` connects,
checks ZooKeeper's cluster id against the stored one (a mismatch, e.g. a ZooKeeper restarted empty,
exits 1 with nothing written) and registers the broker -> ``meta.properties`` is written where
missing -> :class:`broker.log.LogManager`
loads and, after an unclean shutdown, recovers every log (with topic configs from ZooKeeper) -> the logs of partitions this broker leads are created ->
:class:`broker.coordinator.offsets.OffsetManager` starts -> :class:`broker.coordinator.transaction.TransactionCoordinator`
starts (loads the ``__transaction_state`` partitions led here in the background) -> the controller
starts (:mod:`pyklog.broker.controller`: runs for ``/controller``) -> with ``authorizer.class.name``
set, the ACL authorizer loads the ACLs from ZooKeeper and follows their changes -> the socket server serves, and the broker logs
``pyklog broker started (broker.id=N, listener=host:port)``.

A fatal condition found while running (ZooKeeper lost its data under the broker: every server is
behind the zxid the broker has seen, or a new session finds another cluster id) is logged at ERROR,
the broker shuts down as below (logs flushed and kept) and exits 1.

SIGTERM / SIGINT: controlled shutdown first (``controlled.shutdown.enable``: the controller moves
this broker's leaderships to other ISR members), then stop accepting, answer waiting fetches, finish in-flight requests, then
``LogManager.shutdown()`` (flush, checkpoints, clean-shutdown marker), deregister from ZooKeeper,
exit 0.

:class:`BrokerServer` can also run inside another process (tests, notebooks): ``startup()`` /
``shutdown()``, owned by one thread.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import socket
import struct
import sys
import threading

from pyklog.broker.common.cli import add_version_argument
from pyklog.broker.errors import BrokerIdInUseError, ConfigError, PyklogError, ZooKeeperError
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.sasl_server import ScramCredentialCache
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.server.meta_properties import (
    META_PROPERTIES,
    InconsistentBrokerMetadataError,
    check_cluster_id,
    read_meta_properties,
    stored_identity,
    write_meta_properties,
)

log = logging.getLogger("pyklog.broker.server")

READY_MESSAGE = "pyklog broker started (broker.id=%d, listener=%s:%d)"


def open_listener_warning(cfg) -> str | None:
    """The start-up warning of a broker anyone on the network may use: a PLAINTEXT listener bound to
    a non-loopback address (or every interface) with no ``authorizer.class.name``; None otherwise."""
    import ipaddress

    if (cfg.raw or {}).get("authorizer.class.name", "").strip():
        return None
    for ep in cfg.all_listeners():
        if ep.security_protocol != "PLAINTEXT":
            continue
        host = ep.host
        if host == "localhost":
            continue
        try:
            if host and ipaddress.ip_address(host).is_loopback:
                continue
        except ValueError:
            pass  # a host name: it may resolve to any interface
        return (
            f"listener {ep} is PLAINTEXT on {'every interface' if host in ('', '0.0.0.0', '::') else host} "
            "with no authorizer (authorizer.class.name is empty): any client that reaches it can read, write, "
            "delete topics and change configs; bind it to 127.0.0.1, or add authentication and an authorizer"
        )
    return None


def listener_specs(cfg: ServerConfig) -> list:
    """The socket server's listeners: one per ``listeners`` entry, TLS ones with their server context
    and certificate principal builder (``listener.name.<name>.ssl.*`` over ``ssl.*``).  ConfigError
    naming the setting for a bad keystore or truststore."""
    from pyklog.broker.security.ssl_factory import server_context
    from pyklog.broker.security.ssl_principal import SslPrincipalBuilder, SslPrincipalMapper
    from pyklog.broker.server.network import ListenerSpec

    specs = []
    for e in cfg.all_listeners():
        context = builder = None
        if e.security_protocol in ("SSL", "SASL_SSL"):
            get, name = _listener_getter(cfg, e.listener_name)
            context = server_context(get, name)
            builder = SslPrincipalBuilder(SslPrincipalMapper(get("ssl.principal.mapping.rules")))
        specs.append(ListenerSpec(e.listener_name, e.security_protocol, e.host, e.port, context, builder))
    return specs


def _listener_getter(cfg: ServerConfig, listener_name: str):
    """``(get, name)`` for one listener's settings: the value, and the key it was read from."""
    prefix = f"listener.name.{listener_name.lower()}."

    def get(key: str) -> str | None:
        return cfg.listener_setting(listener_name, key)

    def name(key: str) -> str:
        return prefix + key if prefix + key in cfg.raw else key

    return get, name


def inter_broker_connector(cfg: ServerConfig):
    """``connect(host, port, timeout_s)`` for the broker's own connections to other brokers: TLS
    with the inter-broker listener's settings (its truststore checks the other broker, its keystore
    is this broker's certificate) when that listener is SSL / SASL_SSL, plain TCP otherwise; on a
    SASL_PLAINTEXT / SASL_SSL inter-broker listener the connection is logged in with the
    inter-broker credentials (``sasl.mechanism.inter.broker.protocol`` and that mechanism's JAAS
    config of the listener) before it is handed over, so replica fetchers, the controller's
    requests and transaction markers all authenticate."""
    from pyklog.broker.security import ssl_factory
    from pyklog.broker.security.sasl_client import inter_broker_credentials

    tls = cfg.inter_broker_security_protocol in ("SSL", "SASL_SSL")
    context = [None]  # replaced by reload(): the listener's keystore or truststore changed
    if tls:
        get, name = _listener_getter(cfg, cfg.inter_broker_listener_name)
        context[0] = ssl_factory.client_context(get, name)
    credentials = inter_broker_credentials(cfg.raw, cfg.inter_broker_listener_name, cfg.inter_broker_security_protocol)

    def connect(host: str, port: int, timeout_s: float | None):
        sock = ssl_factory.connect(host, port, timeout_s, context[0])
        if credentials is not None:
            try:
                _sasl_login(sock, credentials, timeout_s)
            except BaseException:
                sock.close()
                raise
        return sock

    def reload(props) -> None:
        """New connections to other brokers use the inter-broker listener's settings in ``props``
        (ConfigError naming the setting when they cannot be used; the old context stays)."""
        if tls:
            from pyklog.broker.server.listener_tls import props_getter

            context[0] = ssl_factory.client_context(*props_getter(props, cfg.inter_broker_listener_name))

    connect.reload = reload  # type: ignore[attr-defined]
    return connect


def _sasl_login(sock, credentials, timeout_s: float | None) -> None:
    """One SASL exchange (SaslHandshake v1, SaslAuthenticate) on a new blocking connection to
    another broker, before its user sends anything (correlation ids below the user's own)."""
    from pyklog.broker.common.sockets import recv_exact
    from pyklog.broker.protocol import decode_response, encode_request
    from pyklog.broker.security.sasl_client import authenticate

    sock.settimeout(timeout_s)
    cid = -1000

    closed = "the other broker closed the connection during SASL authentication"

    def exchange(api, body, version):
        nonlocal cid
        cid += 1
        sock.sendall(encode_request(api, version, cid, "pyklog-inter-broker", body))
        (size,) = struct.unpack(">i", recv_exact(sock, 4, closed))
        return decode_response(api, version, recv_exact(sock, size, closed))[1]

    authenticate(exchange, credentials, {ApiKey.SASL_HANDSHAKE: (0, 1), ApiKey.SASL_AUTHENTICATE: (0, 2)})


def advertised_endpoints(cfg: ServerConfig, socket_server) -> list:
    """The advertised listeners with port 0 replaced by the port the listener is bound to and an
    empty or wildcard host by this machine's name."""
    out = []
    for e in cfg.all_advertised_listeners():
        port = e.port or socket_server.bound_port(e.listener_name)
        host = e.host if e.host not in ("", "0.0.0.0", "::") else socket.gethostname()
        out.append(dataclasses.replace(e, host=host, port=port))
    return out


class BrokerServer:
    """One broker, and its composition root: :meth:`startup` builds every component with
    constructor arguments, in dependency order (socket server -> ZooKeeper registration -> dynamic
    config -> log manager -> replica manager (purgatories, coordinator appends) -> offset manager ->
    group coordinator -> transaction coordinator -> controller -> request dispatch), then starts
    them in the order the module docstring gives; :meth:`shutdown` stops them in reverse.  Nothing
    is handed to a component by attribute after its construction.

    Owned by one thread (``startup`` / ``shutdown``); the log-sync tasks run on the log manager's
    scheduler (see ``_sync_lock``)."""

    def __init__(self, config: ServerConfig):
        self.config = config
        self.log_manager = None
        self.cluster = None
        self.replica_manager = None
        self.offset_manager = None
        self.group_coordinator = None
        self.producer_ids = None
        self.txn_coordinator = None
        self.controller = None
        self.authorizer = None  # broker.security.authorizer.AclAuthorizer when authorizer.class.name is set
        self.apis = None
        self.socket_server = None
        #: the SCRAM credentials SASL listeners check against, filled from ZooKeeper once it is reached
        self.scram_cache = ScramCredentialCache()
        self.scram_credentials = None  # broker.zk.scram_credentials.ZkScramCredentials
        self.dynamic_config = None  # broker.server.dynamic_config.DynamicBrokerConfig
        self._broker_connector = None  # inter_broker_connector(...): connections to other brokers
        # Log sync with the topic registry: on every registry change and every 10 s as a safety net,
        # as tasks on the log manager's Scheduler; requests coalesce while one is pending.
        self._sync_lock = threading.Lock()  # guards _sync_pending
        self._sync_pending = False
        self._sync_running = threading.Lock()  # held while sync_logs runs (shutdown waits for it)
        self._sync_periodic = None  # the 10 s task (ScheduledTask)
        self._sync_oneshot = None  # the latest on-change task
        self._stopping = threading.Event()
        self.port: int | None = None
        # set when the broker must stop on its own (ZooKeeper lost its data under it); main() exits 1
        self.fatal_error: str | None = None
        self.failed = threading.Event()

    def startup(self) -> BrokerServer:
        from pyklog.broker.controller.controller import KafkaController
        from pyklog.broker.coordinator.group import GroupCoordinator
        from pyklog.broker.coordinator.offsets import OffsetManager
        from pyklog.broker.coordinator.producer_id import ProducerIdManager
        from pyklog.broker.coordinator.transaction import TransactionCoordinator
        from pyklog.broker.log import LogManager
        from pyklog.broker.security.authorizer import AclAuthorizer
        from pyklog.broker.server.apis import KafkaApis
        from pyklog.broker.server.dynamic_config import DynamicBrokerConfig
        from pyklog.broker.server.network import SocketServer
        from pyklog.broker.server.replica_manager import ReplicaManager
        from pyklog.broker.zk.cluster import ZkCluster
        from pyklog.broker.zk.scram_credentials import ZkScramCredentials

        cfg = self.config
        log_config = cfg.log_config()  # validates the log.* settings before touching anything
        try:
            # TLS contexts and SASL settings first (a bad keystore or JAAS config stops the start
            # before anything binds), then bind: the registration must carry the real ports
            # (listeners=...:0 picks one)
            specs = [
                dataclasses.replace(spec, authenticator_factory=self._sasl_authenticator_factory(spec))
                if spec.security_protocol.startswith("SASL_")
                else spec
                for spec in listener_specs(cfg)
            ]
            sasl_listeners = any(spec.authenticator_factory is not None for spec in specs)
            broker_connector = self._broker_connector = inter_broker_connector(cfg)
            self.socket_server = SocketServer(
                cfg.bind_host,
                cfg.listener.port,
                self._handle,
                num_network_threads=cfg.num_network_threads,
                num_io_threads=cfg.num_io_threads,
                queued_max_requests=cfg.queued_max_requests,
                max_request_bytes=cfg.socket_request_max_bytes,
                send_buffer_bytes=cfg.socket_send_buffer_bytes,
                receive_buffer_bytes=cfg.socket_receive_buffer_bytes,
                connections_max_idle_ms=cfg.connections_max_idle_ms,
                listeners=specs,
                inter_broker_listener=cfg.inter_broker_listener_name,
                **cfg.socket_server_limits(),
            ).bind()
            self.port = self.socket_server.port
            advertised = advertised_endpoints(cfg, self.socket_server)
            adv_host, adv_port = advertised[0].host, advertised[0].port
            plaintext = next((e for e in advertised if e.security_protocol == "PLAINTEXT"), None)
            # meta.properties (Kafka's BrokerMetadataCheckpoint): checked before ZooKeeper is written
            log_dirs = [os.path.abspath(d) for d in cfg.log_dirs]
            stored_cluster_id = stored_identity(log_dirs, cfg.broker_id)

            zk_credentials, zk_set_acl = cfg.zookeeper_security()

            def cluster_id_check(zk_cluster_id):
                check_cluster_id(stored_cluster_id, zk_cluster_id, cfg.zookeeper_connect, log_dirs)

            self.cluster = ZkCluster(
                cfg.zookeeper_connect,
                cfg.broker_id,
                # Kafka's registration: host/port are the PLAINTEXT endpoint's (null / -1 without one)
                plaintext.host if plaintext is not None else None,
                plaintext.port if plaintext is not None else -1,
                listeners=[str(e) for e in advertised],
                protocol_map=dict(cfg.listener_security_protocol_map),
                inter_broker_listener=cfg.inter_broker_listener_name,
                broker_connector=broker_connector,
                session_timeout_ms=cfg.zookeeper_session_timeout_ms,
                connect_timeout_s=cfg.zookeeper_connection_timeout_ms / 1000.0,
                cluster_id_check=cluster_id_check,
                on_fatal=self._on_fatal,
                rack=(cfg.raw.get("broker.rack") or "").strip() or None,
                credentials=zk_credentials,
                set_acl=zk_set_acl,
                controller_deletes_topics=True,
            )
            self.cluster.start()
            # SCRAM credentials (/config/users), followed through the config change notifications
            self.scram_credentials = ZkScramCredentials(self.cluster.session)
            if sasl_listeners:
                self.scram_credentials.follow(self.scram_cache.set_user, self.scram_cache.replace_all)
            for d in log_dirs:
                meta = read_meta_properties(d)
                if meta is None or meta["cluster.id"] != self.cluster.cluster_id:
                    write_meta_properties(d, cfg.broker_id, self.cluster.cluster_id)
                    log.info(
                        "%s: wrote %s (broker.id=%d, cluster.id=%s)",
                        d,
                        META_PROPERTIES,
                        cfg.broker_id,
                        self.cluster.cluster_id,
                    )
            # Dynamic broker configs (KIP-226): /config/brokers/<default> and /config/brokers/<id> are
            # read before the logs open, so they apply from the first moment
            self.dynamic_config = DynamicBrokerConfig(cfg.broker_id, cfg.raw)
            self.dynamic_config.load(self.cluster)
            log_config = self.dynamic_config.log_config()
            # as Kafka: the log manager starts once topic configs (compaction etc.) can be read
            # retention and compaction wait for the first sync with the registry (hold_cleaning), which
            # pauses them for logs whose topic is missing (their topic config is unknown)
            self.log_manager = LogManager(
                list(cfg.log_dirs),
                log_config,
                topic_config=self._topic_config,
                hold_cleaning=True,
                recovery_threads=cfg.recovery_threads_per_data_dir(),
                high_watermark_checkpoint_interval_ms=cfg.replication_settings()[
                    "replica_high_watermark_checkpoint_interval_ms"
                ],
            )
            self.log_manager.startup()
            rm = self.replica_manager = ReplicaManager(
                cfg, self.log_manager, self.cluster, default_log_config=log_config
            )
            # the coordinators append with acks=all through the replica manager
            self.offset_manager = OffsetManager(
                self.log_manager,
                self.cluster,
                cfg.broker_id,
                num_partitions=cfg.offsets_topic_num_partitions,
                replication_factor=cfg.offsets_topic_replication_factor,
                replication=rm.coordinator_appends,
            )
            self.group_coordinator = GroupCoordinator.from_config(self.offset_manager, cfg)
            # producer ids from blocks reserved in ZooKeeper: InitProducerId's and the transaction coordinator's
            self.producer_ids = ProducerIdManager(self.cluster.allocate_producer_ids)
            self.txn_coordinator = TransactionCoordinator.from_config(
                cfg,
                self.log_manager,
                self.cluster,
                producer_id_allocator=self.producer_ids.generate_producer_id,
                offsets_partition_for=self._offsets_partition_for,
                replication=rm.coordinator_appends,
            )
            s = cfg.controller_settings()
            self.controller = KafkaController(
                self.cluster,
                cfg.broker_id,
                unclean_leader_election=s["unclean.leader.election.enable"],
                auto_leader_rebalance=s["auto.leader.rebalance.enable"],
                imbalance_check_interval_s=float(s["leader.imbalance.check.interval.seconds"]),
                imbalance_percentage=s["leader.imbalance.per.broker.percentage"],
                topic_config=self._topic_config,
                delete_topic_enable=cfg.delete_topic_enable,
            )
            # the ACL authorizer (authorizer.class.name): ACLs loaded from ZooKeeper and followed live,
            # before the first request is served
            self.authorizer = AclAuthorizer.from_config(self.cluster.zk, cfg.raw)
            if self.authorizer is not None:
                self.authorizer.start()
            self.apis = KafkaApis(
                cfg,
                self.cluster,
                rm,
                self.log_manager,
                offset_manager=self.offset_manager,
                group_coordinator=self.group_coordinator,
                txn_coordinator=self.txn_coordinator,
                controller=self.controller,
                dynamic_config=self.dynamic_config,
                producer_ids=self.producer_ids,
                authorizer=self.authorizer,
                scram_credentials=self.scram_credentials,
            )
            # start, in dependency order
            self._watch_dynamic_config()
            rm.sync_logs()
            self.cluster.add_listener(self._request_sync)
            self._sync_periodic = self.log_manager.scheduler.schedule_periodic("log-sync", 10.0, self._sync)
            self.offset_manager.startup()
            self.txn_coordinator.startup()  # loads the __transaction_state partitions led here
            self.controller.startup()  # runs for /controller; acts only while this broker holds it
            self.socket_server.start()
        except BaseException:
            self.shutdown()
            raise
        log.info(READY_MESSAGE, cfg.broker_id, adv_host, adv_port)
        warning = open_listener_warning(cfg)
        if warning:
            log.warning(warning)
        return self

    def _watch_dynamic_config(self) -> None:
        """Follow the dynamic config's changes: each new default LogConfig reaches every log without
        a topic override (Kafka's ``DynamicLogConfig``), new connection limits the socket server."""
        self.socket_server.quotas.reconfigure(**self.dynamic_config.connection_limits())
        self.dynamic_config.add_reconfigurable(self._reconfigure_logs)
        # TLS listeners: a new keystore / truststore (listener.name.<l>.ssl.*) for the next connections
        tls_listeners = [s.name for s in self.socket_server.listeners if s.ssl_context is not None]
        if tls_listeners:
            from pyklog.broker.server.listener_tls import ListenerTls

            def client_side(listener: str, props) -> None:
                # the certificate this broker presents to the others, the truststore it checks them with
                if listener == self.config.inter_broker_listener_name and self._broker_connector is not None:
                    self._broker_connector.reload(props)

            listener_tls = ListenerTls(tls_listeners, self.config.raw, self.socket_server.set_ssl_context, client_side)
            listener_tls.reconfigure(self.dynamic_config.effective_props())  # stored before this start
            self.dynamic_config.add_validator(listener_tls.validate)
            self.dynamic_config.add_props_listener(listener_tls.reconfigure)
        self.dynamic_config.watch(self.cluster)

    def _reconfigure_logs(self, log_config, connection_limits) -> None:
        """A dynamic broker config changed (request or kazoo thread): new log defaults, then re-apply
        every log's config on the scheduler (``sync_logs`` gives each log default + topic overrides);
        new connection limits for the next connection (Kafka's ``DynamicConnectionQuota``)."""
        if self.socket_server is not None:
            self.socket_server.quotas.reconfigure(**connection_limits)
        if log_config != self.log_manager.default_config:
            self.log_manager.default_config = log_config
            self.replica_manager.default_log_config = log_config
            self._request_sync()

    def _controlled_shutdown(self) -> None:
        """Before the broker stops serving: ask the controller to move this broker's leaderships
        away (controlled.shutdown.enable), retried as Kafka's KafkaServer.controlledShutdown."""
        if self.cluster is None or self.cluster.zk is None or self.controller is None:
            return
        s = self.config.controller_settings()
        if not s["controlled.shutdown.enable"]:
            return
        from pyklog.broker.controller.channel import controlled_shutdown

        if self.replica_manager is not None:
            self.replica_manager.begin_controlled_shutdown()
        moved = False
        try:
            moved = controlled_shutdown(
                self.cluster,
                self.config.broker_id,
                local_controller=self.controller,
                max_retries=s["controlled.shutdown.max.retries"],
                retry_backoff_ms=s["controlled.shutdown.retry.backoff.ms"],
            )
        except Exception:  # noqa: BLE001 - a failed controlled shutdown never blocks the shutdown
            log.exception("controlled shutdown failed")
        if moved:
            # everything with a replica elsewhere is led elsewhere now: resign here at once and
            # read none of the thousands of states the controller wrote for this departure
            self.cluster.stop_following_states()
            if self.replica_manager is not None:
                self.replica_manager.resign_moved_leaderships()
        # as Kafka's StopReplica to a stopping broker: it stops fetching, so its new leaders do not
        # take it back into their ISRs (and then wait for it) in its last moments
        if self.replica_manager is not None:
            try:
                self.replica_manager.shutdown()
            except Exception:  # noqa: BLE001
                log.exception("stopping the replica fetchers failed")

    def _on_fatal(self, message: str) -> None:
        """A condition the broker cannot serve through (kazoo thread): remember it and wake up
        :func:`main`, which shuts down cleanly and exits 1.  In-process owners watch :attr:`failed`."""
        if self.fatal_error is None:
            self.fatal_error = message
            log.error("stopping the broker: %s", message)
        self.failed.set()

    def _offsets_partition_for(self, group: str) -> tuple[str, int]:
        """AddOffsetsToTxn: the ``__consumer_offsets`` partition of ``group`` (created if missing:
        the markers of AddOffsetsToTxn need the partition to exist)."""
        from pyklog.broker.zk.topics import OFFSETS_TOPIC

        self.offset_manager.ensure_topic()
        return OFFSETS_TOPIC, self.offset_manager.partition_for(group)

    def _topic_config(self, topic: str) -> dict | None:
        cluster = self.cluster
        if cluster is None or cluster.zk is None:
            return None
        try:
            return cluster.topic_config(topic)
        except Exception as e:  # noqa: BLE001 - ZooKeeper trouble: defaults, as the log manager expects
            raise ZooKeeperError(f"cannot read the config of topic {topic}: {e}") from e

    def _sasl_authenticator_factory(self, spec):
        """A SASL listener's authenticator factory; ConfigError for SASL settings that cannot work
        (see :func:`pyklog.broker.security.sasl_server.listener_settings`)."""
        from pyklog.broker.security.sasl_server import SaslServerAuthenticator, listener_settings
        from pyklog.broker.server.handlers.sasl import illegal_sasl_state_response

        try:
            settings = listener_settings(self.config.raw, spec.name)
        except ValueError as e:
            raise ConfigError(str(e)) from None
        log.info("listener %s: SASL mechanisms %s", spec.name, ", ".join(settings.enabled_mechanisms))
        if settings.oauth_validator is not None:
            log.warning(
                "listener %s: OAUTHBEARER accepts Kafka's unsecured (unsigned) tokens: any client can claim any "
                "principal; for development only",
                spec.name,
            )
        cache = self.scram_cache

        def factory(peer: str) -> SaslServerAuthenticator:
            return SaslServerAuthenticator(settings, cache, peer, error_response=illegal_sasl_state_response)

        return factory

    def _handle(self, request) -> None:
        self.apis.handle(request)

    def _request_sync(self) -> None:
        """The topic registry changed (ZooKeeper watch thread): sync the local logs soon, once."""
        with self._sync_lock:
            if self._sync_pending or self._stopping.is_set():
                return
            self._sync_pending = True
        self._sync_oneshot = self.log_manager.scheduler.schedule(0, self._sync, name="log-sync-on-change")

    def _sync(self) -> None:
        """On the log manager's Scheduler thread: one pass of :meth:`ReplicaManager.sync_logs`."""
        with self._sync_lock:
            self._sync_pending = False
        if self._stopping.is_set():
            return
        with self._sync_running:
            try:
                self.replica_manager.sync_logs()
            except Exception:  # noqa: BLE001
                log.exception("synchronising local logs with the topic registry failed")

    def shutdown(self) -> None:
        """Stop serving, finish in-flight requests, flush and close the logs, deregister: the
        components stop in the reverse of their start order.  Safe after a failed :meth:`startup`
        (what was not built is skipped)."""
        if not self._stopping.is_set() and self.fatal_error is None:
            self._controlled_shutdown()
        self._stopping.set()
        # waiting requests are answered first, while the socket server still sends: Fetches and
        # acks=all Produces now (later ones at once), JoinGroup/SyncGroup NOT_COORDINATOR
        if self.apis is not None:
            self.apis.begin_shutdown()
        if self.replica_manager is not None:
            self._stop("completing delayed operations", self.replica_manager.complete_delayed_operations)
            # fetcher threads and the ISR task stop before the logs close
            self._stop("replica manager shutdown", self.replica_manager.shutdown)
        if self.group_coordinator is not None:
            self._stop("group coordinator shutdown", self.group_coordinator.shutdown)
        if self.socket_server is not None:
            self.socket_server.stop(drain_timeout_s=10.0)  # in-flight requests get 10 s to finish
            self.socket_server = None
        for task in (self._sync_periodic, self._sync_oneshot):
            if task is not None:
                task.cancel()
        if self._sync_running.acquire(timeout=10):  # a sync in progress finishes first
            self._sync_running.release()
        if self.controller is not None:
            self._stop("controller shutdown", self.controller.shutdown)
            self.controller = None
        if self.txn_coordinator is not None:
            self._stop("transaction coordinator shutdown", self.txn_coordinator.shutdown)
            self.txn_coordinator = None
        if self.offset_manager is not None:
            self._stop("offset manager shutdown", self.offset_manager.shutdown)
            self.offset_manager = None
        if self.log_manager is not None:
            self._stop("log manager shutdown", self.log_manager.shutdown)
            self.log_manager = None
        if self.authorizer is not None:
            self._stop("authorizer shutdown", self.authorizer.stop)
            self.authorizer = None
        if self.cluster is not None:
            self._stop("ZooKeeper deregistration", self.cluster.stop)
            self.cluster = None

    @staticmethod
    def _stop(what: str, stop) -> None:
        """Run one component's stop; a failure is logged and never stops the rest of the shutdown."""
        try:
            stop()
        except Exception:  # noqa: BLE001
            log.exception("%s failed", what)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        stream=sys.stderr,
        format="[%(asctime)s] %(levelname)s [%(threadName)s] %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(max(logging.WARNING, logging.getLogger().level))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pyklog-broker", description="Run a pyklog broker.")
    add_version_argument(parser)
    parser.add_argument("config", help="server.properties file")
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting of the file (repeatable), as kafka-server-start's --override",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    args = parser.parse_args(argv)
    _configure_logging(args.log_level)
    overrides = {}
    for item in args.override:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"pyklog-broker: --override expects KEY=VALUE, read {item!r}", file=sys.stderr)
            return 2
        overrides[key.strip()] = value
    try:
        config = ServerConfig.from_file(args.config, overrides)
        config.log_config()
    except ConfigError as e:
        print(f"pyklog-broker: configuration error: {e}", file=sys.stderr)
        return 2

    stop = threading.Event()

    def on_signal(signum, _frame):
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = BrokerServer(config)
    try:
        server.startup()
    except ConfigError as e:
        print(f"pyklog-broker: configuration error: {e}", file=sys.stderr)
        return 2
    except (BrokerIdInUseError, InconsistentBrokerMetadataError) as e:
        log.error("cannot start: %s", e)
        return 1
    except (ZooKeeperError, PyklogError, OSError) as e:
        log.error("cannot start: %s", e, exc_info=not isinstance(e, ZooKeeperError))
        return 1
    while not stop.wait(0.2):
        if server.failed.is_set():
            break
    try:
        server.shutdown()
    except Exception:  # noqa: BLE001
        log.exception("unclean shutdown")
        return 1
    if server.fatal_error is not None:
        log.error("pyklog broker %d stopped: %s", config.broker_id, server.fatal_error)
        return 1
    log.info("pyklog broker %d shut down cleanly", config.broker_id)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
