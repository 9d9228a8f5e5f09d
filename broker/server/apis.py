"""Request dispatch: Kafka's ``KafkaApis`` for the APIs pyklog serves (the versions of
:data:`pyklog.broker.protocol.SUPPORTED`, KIP-482 flexible versions included: their headers and
encodings are the codec's business, the handlers only fill the new versions' fields).

:meth:`KafkaApis.handle` is the socket server's handler (:mod:`pyklog.broker.server.network`): it
decodes the request header and body with :mod:`pyklog.broker.protocol`, dispatches on the API key to
one handler family and answers.  It is the one place every request passes through, so a
per-request check belongs there, just before the dispatch (authorization is per resource, so it
is asked in each handler family, as Kafka's KafkaApis does).

The handler families (:mod:`pyklog.broker.server.handlers`), one module per API family, each
translating requests into calls on the broker's components and results into responses:

* :mod:`~pyklog.broker.server.handlers.produce_fetch`: Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch (the data path; the purgatories of long polls and acks=all).
* :mod:`~pyklog.broker.server.handlers.metadata`: Metadata, DescribeCluster.
* :mod:`~pyklog.broker.server.handlers.admin`: CreateTopics, DeleteTopics, CreatePartitions,
  DeleteRecords, DescribeLogDirs.
* :mod:`~pyklog.broker.server.handlers.configs`: DescribeConfigs, AlterConfigs,
  IncrementalAlterConfigs.
* :mod:`~pyklog.broker.server.handlers.groups`: FindCoordinator, OffsetCommit, OffsetFetch, the
  group membership APIs, DeleteGroups, OffsetDelete.
* :mod:`~pyklog.broker.server.handlers.transactions`: InitProducerId, the transaction APIs,
  TxnOffsetCommit, WriteTxnMarkers, DescribeProducers, DescribeTransactions, ListTransactions.
* :mod:`~pyklog.broker.server.handlers.controller`: ControlledShutdown, ElectLeaders, the
  partition reassignment APIs.
* :mod:`~pyklog.broker.server.handlers.acls`: DescribeAcls, CreateAcls, DeleteAcls.
* :mod:`~pyklog.broker.server.handlers.sasl`: SaslHandshake and SaslAuthenticate out of place (a
  SASL listener's network layer answers them before KafkaApis), Describe/AlterUserScramCredentials.
* ApiVersions v0-3 is answered here; a newer ApiVersions version gets the v0 layout with
  UNSUPPORTED_VERSION and our ranges (KIP-511) so librdkafka retries lower.

Partition leadership lives in :class:`broker.server.replica_manager.ReplicaManager` (Kafka's
ReplicaManager): a broker serves Produce and consumers' Fetch only for the partitions it leads
(NOT_LEADER_OR_FOLLOWER otherwise), holds the logs of every partition it is a replica of (created as
the ZooKeeper registry changes, :meth:`ReplicaManager.sync_logs`), follows leadership through the
partition state watches, and the logs of deleted topics are deleted.

Bad input: an unparseable header, an unknown API key or an unsupported version closes that
connection (Kafka does the same; no response layout can be formed); a malformed body closes the
connection; an unexpected failure inside a handler is logged and answered with
UNKNOWN_SERVER_ERROR for every partition of the request
(:func:`~pyklog.broker.server.handlers.responses.error_body`).

Thread-safe: ``handle`` runs concurrently on every request handler thread.  KafkaApis holds no lock
of its own; each handler family, the replica manager, the ZooKeeper offset store, the offset
manager, the group coordinator and the purgatories guard their own state and document their
locking rule.
"""

from __future__ import annotations

import logging
import struct
import time

from pyklog.broker.coordinator.producer_id import ProducerIdManager
from pyklog.broker.errors import UnsupportedVersionError
from pyklog.broker.protocol import (
    SUPPORTED,
    ApiKey,
    api_name,
    decode_request,
    decode_request_header,
    encode_response,
)
from pyklog.broker.server.handlers.acls import AclApis
from pyklog.broker.server.handlers.admin import TopicAdminApis
from pyklog.broker.server.handlers.authorization import AuthHelper
from pyklog.broker.server.handlers.configs import ConfigApis
from pyklog.broker.server.handlers.controller import ControllerApis
from pyklog.broker.server.handlers.groups import GroupApis
from pyklog.broker.server.handlers.metadata import MetadataApis
from pyklog.broker.server.handlers.produce_fetch import ProduceFetchApis
from pyklog.broker.server.handlers.responses import (
    INTERNAL_TOPICS,
    MAX_PARTITIONS_PER_TOPIC,
    NONE,
    error_body,
    error_code_of,
    respond,
)
from pyklog.broker.server.handlers.sasl import SaslApis
from pyklog.broker.server.handlers.transactions import TransactionApis
from pyklog.broker.server.network import Request
from pyklog.broker.server.zk_offset_store import ZkOffsetStore

log = logging.getLogger(__name__)

_SLOW_REQUEST_S = 5.0


class KafkaApis:
    """The request dispatch of one broker: builds the handler families from the broker's
    components (all built by :class:`~pyklog.broker.server.main.BrokerServer`).

    ``cluster`` is a started :class:`broker.zk.cluster.ZkCluster`, ``replica_manager`` the
    :class:`~pyklog.broker.server.replica_manager.ReplicaManager` (partition leadership, leader
    logs, purgatories), ``log_manager`` a :class:`broker.log.LogManager`.  ``offset_manager``
    (:class:`broker.coordinator.offsets.OffsetManager`) and ``group_coordinator`` may be None: the group
    APIs then answer COORDINATOR_NOT_AVAILABLE; ``txn_coordinator`` None: the transaction APIs
    answer COORDINATOR_NOT_AVAILABLE; ``controller`` None: the controller's APIs answer
    NOT_CONTROLLER; ``dynamic_config`` None: broker configs cannot be altered.  ``zk_offsets``
    (OffsetCommit/OffsetFetch v0) defaults to a :class:`ZkOffsetStore` of ``cluster``, ``producer_ids``
    (InitProducerId; the broker shares its one with the transaction coordinator) to a
    :class:`~pyklog.broker.coordinator.producer_id.ProducerIdManager` over ``cluster``'s blocks.
    ``authorizer`` (an :class:`~pyklog.broker.security.authorizer.AclAuthorizer`, or None: every
    request allowed) is asked by every handler family, through one
    :class:`~pyklog.broker.server.handlers.authorization.AuthHelper`, what Kafka's KafkaApis asks.
    ``scram_credentials`` (the SCRAM credential APIs) defaults to a
    :class:`~pyklog.broker.zk.scram_credentials.ZkScramCredentials` of ``cluster``'s session.
    """

    def __init__(
        self,
        config,
        cluster,
        replica_manager,
        log_manager,
        *,
        offset_manager=None,
        group_coordinator=None,
        txn_coordinator=None,
        controller=None,
        dynamic_config=None,
        zk_offsets=None,
        producer_ids=None,
        authorizer=None,
        scram_credentials=None,
    ):
        self.config = config
        self.broker_id = config.broker_id
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.offsets = offset_manager
        self.groups = group_coordinator
        self.zk_offsets = zk_offsets if zk_offsets is not None else ZkOffsetStore(cluster)
        #: the fetch purgatory (long polls), the replica manager's
        self.purgatory = replica_manager.fetch_purgatory
        #: the authorizer's checks, shared by every handler family (no authorizer: all allowed)
        self.auth = auth = AuthHelper(authorizer)
        self.produce_fetch = ProduceFetchApis(config, cluster, replica_manager, dynamic_config, auth=auth)
        self.metadata = MetadataApis(config, cluster, replica_manager, auth=auth)
        self.topic_admin = TopicAdminApis(config, cluster, replica_manager, log_manager, auth=auth)
        self.configs = ConfigApis(config, cluster, replica_manager, dynamic_config, auth=auth)
        self.group_apis = GroupApis(
            cluster, offset_manager, group_coordinator, self.zk_offsets, txn_coordinator, auth=auth
        )
        self.producer_ids = producer_ids or ProducerIdManager(cluster.allocate_producer_ids)
        self.transactions = TransactionApis(
            config,
            cluster,
            replica_manager,
            self.producer_ids,
            offset_manager,
            group_coordinator,
            txn_coordinator,
            auth=auth,
        )
        self.controller_apis = ControllerApis(controller, auth=auth)
        self.acl_apis = AclApis(auth)
        if scram_credentials is None:
            from pyklog.broker.zk.scram_credentials import ZkScramCredentials

            scram_credentials = ZkScramCredentials(cluster.session)
        self.sasl_apis = sasl = SaslApis(scram_credentials, auth=auth)
        pf, md, adm, cfg, grp, txn, ctl = (
            self.produce_fetch,
            self.metadata,
            self.topic_admin,
            self.configs,
            self.group_apis,
            self.transactions,
            self.controller_apis,
        )
        #: the dispatch table: API key -> handler(request, header, body)
        self._handlers = {
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.PRODUCE: pf.handle_produce,
            ApiKey.FETCH: pf.handle_fetch,
            ApiKey.LIST_OFFSETS: pf.handle_list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: pf.handle_offset_for_leader_epoch,
            ApiKey.METADATA: md.handle_metadata,
            ApiKey.DESCRIBE_CLUSTER: md.handle_describe_cluster,
            ApiKey.CREATE_TOPICS: adm.handle_create_topics,
            ApiKey.DELETE_TOPICS: adm.handle_delete_topics,
            ApiKey.CREATE_PARTITIONS: adm.handle_create_partitions,
            ApiKey.DELETE_RECORDS: adm.handle_delete_records,
            ApiKey.DESCRIBE_LOG_DIRS: adm.handle_describe_log_dirs,
            ApiKey.DESCRIBE_CONFIGS: cfg.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: cfg.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: cfg.handle_incremental_alter_configs,
            ApiKey.FIND_COORDINATOR: grp.handle_find_coordinator,
            ApiKey.OFFSET_COMMIT: grp.handle_offset_commit,
            ApiKey.OFFSET_FETCH: grp.handle_offset_fetch,
            ApiKey.JOIN_GROUP: grp.handle_group_membership,
            ApiKey.SYNC_GROUP: grp.handle_group_membership,
            ApiKey.HEARTBEAT: grp.handle_group_membership,
            ApiKey.LEAVE_GROUP: grp.handle_group_membership,
            ApiKey.LIST_GROUPS: grp.handle_group_membership,
            ApiKey.DESCRIBE_GROUPS: grp.handle_group_membership,
            ApiKey.DELETE_GROUPS: grp.handle_delete_groups,
            ApiKey.OFFSET_DELETE: grp.handle_offset_delete,
            ApiKey.INIT_PRODUCER_ID: txn.handle_init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: txn.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: txn.handle_add_offsets_to_txn,
            ApiKey.END_TXN: txn.handle_end_txn,
            ApiKey.TXN_OFFSET_COMMIT: txn.handle_txn_offset_commit,
            ApiKey.WRITE_TXN_MARKERS: txn.handle_write_txn_markers,
            ApiKey.DESCRIBE_PRODUCERS: txn.handle_describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: txn.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: txn.handle_list_transactions,
            ApiKey.CONTROLLED_SHUTDOWN: ctl.handle_controlled_shutdown,
            ApiKey.ELECT_LEADERS: ctl.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: ctl.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: ctl.handle_list_partition_reassignments,
            ApiKey.DESCRIBE_ACLS: self.acl_apis.handle_describe_acls,
            ApiKey.CREATE_ACLS: self.acl_apis.handle_create_acls,
            ApiKey.DELETE_ACLS: self.acl_apis.handle_delete_acls,
            ApiKey.SASL_HANDSHAKE: sasl.handle_sasl_handshake,
            ApiKey.SASL_AUTHENTICATE: sasl.handle_sasl_authenticate,
            ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: sasl.handle_describe_user_scram_credentials,
            ApiKey.ALTER_USER_SCRAM_CREDENTIALS: sasl.handle_alter_user_scram_credentials,
        }
        #: what this broker serves and advertises: the protocol's ranges of the APIs handled here
        self.served: dict[int, tuple[int, int]] = {
            int(k): SUPPORTED[k] for k in sorted(self._handlers) if k in SUPPORTED
        }
        self._api_keys = [
            {"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(self.served.items())
        ]
        self._api_versions_error = b"".join(
            encode_response(
                ApiKey.API_VERSIONS,
                0,
                0,
                {"error_code": UnsupportedVersionError.code, "api_keys": self._api_keys, "throttle_time_ms": 0},
            )
        )

    # ------------------------------------------------------------------ dispatch

    def handle(self, request: Request) -> None:
        frame = request.frame
        try:
            header, body_offset = decode_request_header(frame)
        except Exception as e:  # noqa: BLE001 - garbage from the network
            log.info(
                "closing connection %d from %s: unreadable request header (%s)", request.connection_id, request.peer, e
            )
            request.close_connection()
            return
        api_key = header.api_key
        version = header.api_version
        if api_key == ApiKey.API_VERSIONS and version > self.served[ApiKey.API_VERSIONS][1]:
            # KIP-511: the v0 layout, UNSUPPORTED_VERSION and our ranges, so the client retries lower
            frame = bytearray(self._api_versions_error)
            struct.pack_into(">i", frame, 4, header.correlation_id)
            request.send([frame])
            return
        rng = self.served.get(api_key)
        if rng is None or not rng[0] <= version <= rng[1]:
            log.info(
                "closing connection %d from %s (client %r): %s v%d is not supported (supported: %s)",
                request.connection_id,
                request.peer,
                header.client_id,
                api_name(api_key),
                version,
                f"v{rng[0]}-{rng[1]}" if rng else "none",
            )
            request.close_connection()
            return
        try:
            body = decode_request(header, frame, body_offset)
        except Exception as e:  # noqa: BLE001
            log.info(
                "closing connection %d from %s (client %r): malformed %s v%d request: %s",
                request.connection_id,
                request.peer,
                header.client_id,
                api_name(api_key),
                version,
                e,
            )
            request.close_connection()
            return
        t0 = time.monotonic()
        try:
            self._handlers[api_key](request, header, body)
            elapsed = time.monotonic() - t0
            if elapsed > _SLOW_REQUEST_S:
                log.warning(
                    "slow request: %s v%d from %s (client %r) took %.1fs",
                    api_name(api_key),
                    version,
                    request.peer,
                    header.client_id,
                    elapsed,
                )
        except Exception as e:  # noqa: BLE001 - one bad request never takes the broker down
            log.exception(
                "error handling %s v%d from %s (client %r)", api_name(api_key), version, request.peer, header.client_id
            )
            if request.answered:
                return
            try:
                err = error_body(ApiKey(api_key), version, body, error_code_of(e), str(e))
                if err is None:
                    request.close_connection()
                else:
                    request.send(encode_response(api_key, version, header.correlation_id, err))
            except Exception:  # noqa: BLE001
                log.exception("cannot form an error response; closing the connection")
                if not request.answered:
                    request.close_connection()

    def handle_api_versions(self, request, header, body):
        respond(request, header, {"error_code": NONE, "api_keys": self._api_keys, "throttle_time_ms": 0})

    # ------------------------------------------------------------------ producer ids

    # ------------------------------------------------------------------ lifecycle

    def begin_shutdown(self) -> None:
        """The broker is stopping: from now on Fetches and acks=all Produces are answered at once,
        never delayed (the broker then completes the ones waiting, see ``BrokerServer.shutdown``)."""
        self.produce_fetch.begin_shutdown()


__all__ = ["INTERNAL_TOPICS", "KafkaApis", "MAX_PARTITIONS_PER_TOPIC"]
