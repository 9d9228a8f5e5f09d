"""Request handlers: Kafka's ``KafkaApis`` for the APIs pyklog serves (the versions of
:data:`pyklog.broker.protocol.SUPPORTED`, KIP-482 flexible versions included: their headers and
encodings are the codec's business, the handlers only fill the new versions' fields).

:meth:`KafkaApis.handle` is the socket server's handler (:mod:`pyklog.broker.server.network`): it decodes
the request header and body with :mod:`pyklog.broker.protocol`, dispatches on the API key and answers.

* ApiVersions v0-3; a newer ApiVersions version gets the v0 layout with UNSUPPORTED_VERSION and
  our ranges (KIP-511) so librdkafka retries lower.
* Metadata v0-12 (v10+: topic ids, KIP-516, also to ask for a topic by id; auto-creates unknown topics when ``auto.create.topics.enable`` and the request allow it).
* Produce v3-9 (record batch v2, appended without decoding records) and v0-2 (v0/v1 message sets,
  up-converted to v2); acks 0 / 1 / -1.  acks=-1 (all) on a replicated partition: NOT_ENOUGH_REPLICAS
  before appending when the ISR is smaller than ``min.insync.replicas``, then the answer waits in the
  produce purgatory until the high watermark passes the append (REQUEST_TIMED_OUT after the
  request's timeout_ms, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum,
  NOT_LEADER_OR_FOLLOWER if leadership moved); with one replica it is answered like 1.  acks=0 with an
  error closes the connection, as Kafka does, so the producer notices.  Produce to an internal topic
  (``__consumer_offsets``, ``__transaction_state``) gets INVALID_TOPIC_EXCEPTION per partition and
  appends nothing: only the broker's own offset manager writes there, through the log.
  Transactional batches (KIP-98) need the request's ``transactional_id`` (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers) and a producer id; the log tracks the
  producer's open transaction.
* Fetch v4-16 (v13+: topics by id, KIP-516), sessionless (session id 0 in every answer), record bytes sent with ``os.sendfile``
  from a dup of the segment's fd; v0-3 down-convert to v0/v1 message sets.  ``max_wait_ms`` /
  ``min_bytes`` long polls go to a :class:`~broker.server.purgatory.Purgatory` and complete when data
  arrives or the wait expires, without holding a handler thread.  A follower's Fetch (replica_id >=
  0) reads up to the log end offset and tells the replica manager the follower's position;
  consumers (replica_id -1) read only below the high watermark (= the log end offset on a partition
  with one replica).  v9+ ``current_leader_epoch`` is fenced for both (FENCED_LEADER_EPOCH /
  UNKNOWN_LEADER_EPOCH, KIP-320).  Every v4+ answer carries the last stable offset (the first offset of the oldest open
  transaction).  isolation_level 1 (READ_COMMITTED) reads only up to the last stable offset and
  answers the aborted transactions overlapping what it returns (``Log.aborted_transactions``);
  v0-3 (no isolation level) read uncommitted, as Kafka.
* ListOffsets v0-8 (v0: the seed's getOffsetsBefore with max_num_offsets; v1+: by timestamp,
  -1 latest = the high watermark, -2 earliest, v7 -3 max timestamp, v8 -4 earliest local).  v2+ with isolation_level 1: latest is the last stable offset and a
  timestamp lookup finds only offsets below it (Kafka's ``lastFetchableOffset``).
* CreateTopics v0-7 (v5: the created topic's partitions, replication factor and explicit configs;
  v7 topic ids), DeleteTopics v0-6 (v5: error messages; v6 by topic id) through :class:`broker.zk.cluster.ZkCluster`.
* InitProducerId v0-4 (idempotent producers; producer ids in blocks from ZooKeeper; v3+ KIP-360
  epoch bump of the current producer).  Transactions
  (KIP-98): FindCoordinator(key_type=1), a transactional InitProducerId, AddPartitionsToTxn v0-3,
  AddOffsetsToTxn v0-3 and EndTxn v0-3 go to :class:`broker.transaction.TransactionCoordinator`
  (``__transaction_state``); COORDINATOR_NOT_AVAILABLE while it is not running.
* JoinGroup v0-9, SyncGroup v0-5, Heartbeat v0-4, LeaveGroup v0-5, ListGroups v0-4, DescribeGroups v0-5
  (JoinGroup v7 / SyncGroup v5 name the group's protocol type and name, KIP-559; ListGroups v4 the
  group states and a states filter, KIP-518)
  through :class:`broker.group_coordinator.GroupCoordinator` (OffsetCommit with a generation >= 0 is
  validated against the group).
* FindCoordinator v0-4 (v4 batched keys), OffsetCommit v0-8, OffsetFetch v0-9 (v7 RequireStable,
  v8 several groups) through
  :class:`broker.coordinator.OffsetManager`; OffsetCommit/OffsetFetch v0 use ZooKeeper
  (``/consumers/<group>/offsets/<topic>/<partition>``) as Kafka 0.8.2 did, through
  :class:`broker.server.zk_offset_store.ZkOffsetStore`.
* TxnOffsetCommit v0-3 (v3: member and generation checked): a transactional producer's offsets, pending in ``__consumer_offsets`` until
  the transaction's marker (:meth:`broker.coordinator.OffsetManager.commit_transactional`).
* WriteTxnMarkers v0-1: the transaction coordinator's COMMIT/ABORT markers appended to the partitions
  led here; on ``__consumer_offsets`` partitions the pending transactional offsets are then
  completed.  Kafka authorises it as CLUSTER_ACTION; pyklog has no ACLs and accepts it from anyone.
* Admin APIs (Kafka's ZooKeeper-mode ``ZkAdminManager`` / ``ConfigHelper``): CreatePartitions v0-3
  (:meth:`ZkCluster.create_partitions`; every broker follows by a data watch on
  ``/brokers/topics/<t>`` and the leaders create the logs), DescribeConfigs v0-4, AlterConfigs v0-2,
  IncrementalAlterConfigs v0-1 (:mod:`broker.server.config_helper`; topic overrides in
  ``/config/topics/<t>`` with a ``/config/changes`` notification, applied to the live logs; dynamic
  broker configs in ``/config/brokers/<id>`` and ``<default>``, KIP-226), DeleteRecords v0-2 (moves the log start offset, checkpointed
  before the answer), DescribeLogDirs v0-4, DeleteGroups v0-2 (ZooKeeper groups too) and OffsetDelete v0
  (:meth:`GroupCoordinator.delete_groups` / ``delete_offsets``), DescribeCluster v0-1 (flexible);
  DescribeProducers v0, DescribeTransactions v0, ListTransactions v0-1 (KIP-664, read-only).
* Replication (issue 12): OffsetForLeaderEpoch v0-4 (``Log.end_offset_for_epoch``); ControlledShutdown
  v0-3 and ElectLeaders v0-2 go to :class:`broker.controller.KafkaController` (NOT_CONTROLLER on a
  broker that is not the controller).

The handlers here only translate requests into calls and results into responses.  Partition
leadership lives in :class:`broker.server.replica_manager.ReplicaManager` (Kafka's ReplicaManager):
a broker serves Produce and consumers' Fetch only for the partitions it leads (NOT_LEADER_OR_FOLLOWER
otherwise), holds the logs of every partition it is a replica of (created as the ZooKeeper registry
changes, :meth:`KafkaApis.sync_logs`), follows leadership through the partition state watches, and the
logs of deleted topics are deleted.

Bad input: an unparseable header, an unknown API key or an unsupported version closes that
connection (Kafka does the same; no response layout can be formed); a malformed body closes the
connection; an unexpected failure inside a handler is logged and answered with
UNKNOWN_SERVER_ERROR for every partition of the request.

Thread-safe: ``handle`` runs concurrently on every request handler thread.  KafkaApis itself holds
no lock; the producer id manager, the replica manager, the ZooKeeper offset store, the offset
manager, the group coordinator and the purgatory each guard their own state and document their
locking rule.
"""
from __future__ import annotations

import logging
import os
import struct
import threading
import time
import uuid

from pyklog.broker.errors import (
    CoordinatorNotAvailableError,
    CorruptRecordError,
    FencedLeaderEpochError,
    InvalidPartitionsError,
    InvalidRecordError,
    InvalidRequestError,
    InvalidRequiredAcksError,
    InvalidTopicError,
    KafkaStorageError,
    LeaderNotAvailableError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PyklogError,
    RequestTimedOutError,
    TopicDeletionDisabledError,
    TransactionalIdAuthorizationFailedError,
    UnknownServerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.protocol import (
    SUPPORTED,
    ApiKey,
    FileRegion,
    api_name,
    decode_request,
    decode_request_header,
    encode_response,
)
from pyklog.broker.record.batch import CONTROL_COMMIT, build_control_batch
from pyklog.broker.record.reader import iter_headers
from pyklog.broker.server.network import OwnedFd, Request
from pyklog.broker.coordinator.producer_id import ProducerIdManager
from pyklog.broker.server.coordinator_appends import ReplicaWait
from pyklog.broker.server.purgatory import DelayedOperation, Purgatory
from pyklog.broker.server.replica_manager import ReplicaManager
from pyklog.broker.server.zk_offset_store import ZkOffsetStore
from pyklog.broker.zk.topics import OFFSETS_TOPIC, validate_topic_name

log = logging.getLogger(__name__)

#: Kafka's ``Topic.INTERNAL_TOPICS``: written only by the broker's own coordinators, which append
#: through the log directly (:class:`broker.coordinator.OffsetManager`), never through Produce.
#: ``__transaction_state`` is written by the transaction coordinator (:mod:`broker.transaction`).
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

UNKNOWN_SERVER_ERROR = -1
NONE = 0
#: Kafka's UNSTABLE_OFFSET_COMMIT (KIP-447): OffsetFetch v7+ RequireStable on a partition with
#: pending transactional offsets (retriable)
UNSTABLE_OFFSET_COMMIT = 88
#: Kafka's UNKNOWN_TOPIC_ID (KIP-516): Fetch v13+ / DeleteTopics v6 naming an id no topic has
UNKNOWN_TOPIC_ID = 100
#: Fetch v13+: the stand-in name of a topic id no topic has (":" and "/" are never in topic names)
_UNKNOWN_TOPIC_ID_PREFIX = "/unknown-topic-id:"
_INVALID_PRODUCER_EPOCH = 47  # InitProducerId below v4 answers this for PRODUCER_FENCED (90)
_PRODUCER_FENCED = 90
_CORRUPT_MESSAGE = CorruptRecordError.code
_MAGIC_OFFSET = 16
_INT32_MAX = 0x7FFFFFFF
_CREATE_WAIT_S = 2.0
#: CreateTopics refuses more partitions per topic (INVALID_PARTITIONS): a topic's ZooKeeper nodes
#: are written in one multi-op, bounded by ZooKeeper's jute.maxbuffer (1 MiB by default), and a
#: request must not make the broker build billions of assignments.
MAX_PARTITIONS_PER_TOPIC = 10_000
_SLOW_REQUEST_S = 5.0

# Metadata v8+ authorized operations (bit sets of Kafka's AclOperation codes).  Without an authorizer
# Kafka reports every operation the resource type supports (AuthHelper.authorizedOperations with no
# authorizer = AclEntry.supportedOperations); pyklog has no authorizer.  AclOperation codes:
# READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8, CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10,
# ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12.
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in (3, 4, 5, 6, 7, 8, 10, 11))      # 3576
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))      # 8096
#: Kafka's value of an authorized-operations field the client did not ask for (Integer.MIN_VALUE)
NOT_REQUESTED_OPERATIONS = -(1 << 31)
#: bytes of one transaction marker (a control batch of one record): what a marker append adds to a
#: partition, for the fetch purgatory's min_bytes accounting
_MARKER_BYTES = len(build_control_batch(CONTROL_COMMIT, 0, 0))


def _volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the filesystem holding ``path`` (Kafka's DescribeLogDirs v4
    TotalBytes/UsableBytes: ``FileStore.getTotalSpace()``/``getUsableSpace()``, the latter being what
    an unprivileged process may still write, ``f_bavail``); (-1, -1) if the path cannot be read."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        log.warning("DescribeLogDirs: cannot stat log dir %s: %s", path, e)
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _code(e: BaseException) -> int:
    return e.code if isinstance(e, PyklogError) else UNKNOWN_SERVER_ERROR


def _batch_headers(records):
    """``BatchHeader`` of each complete v2 batch of a Produce partition's records; stops quietly
    at anything malformed (the log's validator reports it)."""
    if not records or len(records) <= _MAGIC_OFFSET:
        return
    try:
        for _, h in iter_headers(records, validate_crc=False):
            yield h
    except PyklogError:
        return


def _has_transactional_batch(records) -> bool:
    return any(h.is_transactional for h in _batch_headers(records))


def _check_transactional_producer_id(records, topic: str, partition: int) -> None:
    """A transactional batch must carry a producer id (it belongs to that producer's transaction)."""
    for h in _batch_headers(records):
        if h.is_transactional and h.producer_id < 0:
            raise InvalidRecordError(f"produce to {topic}-{partition}: a transactional record batch needs "
                                     f"a producer id, read {h.producer_id}")


class KafkaApis:
    """The request handlers of one broker.

    ``log_manager`` is a :class:`broker.log.LogManager`, ``cluster`` a started
    :class:`broker.zk.cluster.ZkCluster`, ``offset_manager`` a :class:`broker.coordinator.OffsetManager`
    (or None: the group APIs then answer COORDINATOR_NOT_AVAILABLE).  ``replica_manager`` (partition
    leadership, leader logs) and ``zk_offsets`` (OffsetCommit/OffsetFetch v0) are built here.
    """

    def __init__(self, config, log_manager, cluster, offset_manager=None, txn_coordinator=None):
        self.config = config
        self.broker_id = config.broker_id
        self.logs = log_manager
        self.cluster = cluster
        self.offsets = offset_manager
        #: the transaction coordinator (broker.transaction.TransactionCoordinator); main.py sets it
        #: once this object exists (it allocates producer ids through producer_ids)
        self.txn_coordinator = txn_coordinator
        # group membership (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, ListGroups, DescribeGroups)
        from pyklog.broker.coordinator.group import GroupCoordinator

        self.groups = GroupCoordinator.from_config(offset_manager, config) if offset_manager is not None else None
        # partition leadership and leader logs (Kafka's ReplicaManager), ZooKeeper offsets for v0 commits
        self.replica_manager = ReplicaManager(config, log_manager, cluster)
        # dynamic broker configs (KIP-226, broker.server.dynamic_config.DynamicBrokerConfig), set by BrokerServer
        self.dynamic_config = None
        self.zk_offsets = ZkOffsetStore(cluster)
        #: Fetch v13+ (flex-data): topic id -> name, checked against the registry on every use
        self._topic_names_by_id: dict = {}
        self.purgatory = Purgatory(self._complete_delayed_fetch)
        # replication: acks=all Produces wait here for the high watermark (Kafka's DelayedProduce)
        self.produce_purgatory = Purgatory(self._complete_delayed_produce, name="produce")
        self.replica_manager.on_high_watermark = self._on_high_watermark
        self.replica_manager.on_role_change = self._on_partition_role_change
        # the coordinators' own appends (offsets, transaction state, markers) with acks=all
        from pyklog.broker.server.coordinator_appends import CoordinatorAppends

        self.coordinator_appends = CoordinatorAppends(
            self.replica_manager, timeout_ms=getattr(config, "offsets_commit_timeout_ms", 5000))
        self.coordinator_appends.on_append = lambda t, p, n: self.purgatory.notify((t, p), n)
        if offset_manager is not None:
            offset_manager.replication = self.coordinator_appends
        #: producer ids from blocks reserved in ZooKeeper (InitProducerId; the transaction coordinator)
        self.producer_ids = ProducerIdManager(lambda n: self.cluster.allocate_producer_ids(n))
        self._shutting_down = False
        self._handlers = {
            ApiKey.PRODUCE: self.handle_produce,
            ApiKey.FETCH: self.handle_fetch,
            ApiKey.LIST_OFFSETS: self.handle_list_offsets,
            ApiKey.METADATA: self.handle_metadata,
            ApiKey.OFFSET_COMMIT: self.handle_offset_commit,
            ApiKey.OFFSET_FETCH: self.handle_offset_fetch,
            ApiKey.FIND_COORDINATOR: self.handle_find_coordinator,
            ApiKey.API_VERSIONS: self.handle_api_versions,
            ApiKey.CREATE_TOPICS: self.handle_create_topics,
            ApiKey.DELETE_TOPICS: self.handle_delete_topics,
            ApiKey.INIT_PRODUCER_ID: self.handle_init_producer_id,
            ApiKey.JOIN_GROUP: self.handle_group_membership,
            ApiKey.SYNC_GROUP: self.handle_group_membership,
            ApiKey.HEARTBEAT: self.handle_group_membership,
            ApiKey.LEAVE_GROUP: self.handle_group_membership,
            ApiKey.LIST_GROUPS: self.handle_group_membership,
            ApiKey.DESCRIBE_GROUPS: self.handle_group_membership,
            ApiKey.WRITE_TXN_MARKERS: self.handle_write_txn_markers,
            ApiKey.TXN_OFFSET_COMMIT: self.handle_txn_offset_commit,
        }
        # replication (issue 12): a returning follower's truncation point, KIP-320 position validation
        self._handlers[ApiKey.OFFSET_FOR_LEADER_EPOCH] = self.handle_offset_for_leader_epoch
        # transactions (KIP-98): the transaction coordinator's APIs
        self._handlers.update({
            ApiKey.ADD_PARTITIONS_TO_TXN: self.handle_add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self.handle_add_offsets_to_txn,
            ApiKey.END_TXN: self.handle_end_txn,
        })
        # admin APIs (kafka-admin)
        self._handlers.update({
            ApiKey.CREATE_PARTITIONS: self.handle_create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.handle_describe_configs,
            ApiKey.ALTER_CONFIGS: self.handle_alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self.handle_incremental_alter_configs,
            ApiKey.DELETE_RECORDS: self.handle_delete_records,
            ApiKey.DESCRIBE_LOG_DIRS: self.handle_describe_log_dirs,
            ApiKey.DELETE_GROUPS: self.handle_delete_groups,
            ApiKey.OFFSET_DELETE: self.handle_offset_delete,
            ApiKey.DESCRIBE_CLUSTER: self.handle_describe_cluster,
        })
        # transaction admin APIs (KIP-664, flex-admin)
        self._handlers.update({
            ApiKey.DESCRIBE_PRODUCERS: self.handle_describe_producers,
            ApiKey.DESCRIBE_TRANSACTIONS: self.handle_describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self.handle_list_transactions,
        })
        # the controller (pyklog.broker.controller.KafkaController); main.py sets it
        self.controller = None
        self._handlers.update({
            ApiKey.CONTROLLED_SHUTDOWN: self.handle_controlled_shutdown,
            ApiKey.ELECT_LEADERS: self.handle_elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self.handle_alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self.handle_list_partition_reassignments,
        })
        #: what this broker serves and advertises: the protocol's ranges of the APIs handled here
        self.served: dict[int, tuple[int, int]] = {
            int(k): SUPPORTED[k] for k in sorted(self._handlers) if k in SUPPORTED}
        self._api_keys = [{"api_key": k, "min_version": lo, "max_version": hi}
                          for k, (lo, hi) in sorted(self.served.items())]
        self._api_versions_error = b"".join(encode_response(ApiKey.API_VERSIONS, 0, 0, {
            "error_code": UnsupportedVersionError.code, "api_keys": self._api_keys, "throttle_time_ms": 0}))

    # ------------------------------------------------------------------ dispatch

    def handle(self, request: Request) -> None:
        frame = request.frame
        try:
            header, body_offset = decode_request_header(frame)
        except Exception as e:  # noqa: BLE001 - garbage from the network
            log.info("closing connection %d from %s: unreadable request header (%s)",
                     request.connection_id, request.peer, e)
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
            log.info("closing connection %d from %s (client %r): %s v%d is not supported (supported: %s)",
                     request.connection_id, request.peer, header.client_id, api_name(api_key), version,
                     f"v{rng[0]}-{rng[1]}" if rng else "none")
            request.close_connection()
            return
        try:
            body = decode_request(header, frame, body_offset)
        except Exception as e:  # noqa: BLE001
            log.info("closing connection %d from %s (client %r): malformed %s v%d request: %s",
                     request.connection_id, request.peer, header.client_id, api_name(api_key), version, e)
            request.close_connection()
            return
        t0 = time.monotonic()
        try:
            self._handlers[api_key](request, header, body)
            elapsed = time.monotonic() - t0
            if elapsed > _SLOW_REQUEST_S:
                log.warning("slow request: %s v%d from %s (client %r) took %.1fs", api_name(api_key), version,
                            request.peer, header.client_id, elapsed)
        except Exception as e:  # noqa: BLE001 - one bad request never takes the broker down
            log.exception("error handling %s v%d from %s (client %r)", api_name(api_key), version,
                          request.peer, header.client_id)
            if request.answered:
                return
            try:
                err = self._error_body(ApiKey(api_key), version, body, _code(e), str(e))
                if err is None:
                    request.close_connection()
                else:
                    request.send(encode_response(api_key, version, header.correlation_id, err))
            except Exception:  # noqa: BLE001
                log.exception("cannot form an error response; closing the connection")
                if not request.answered:
                    request.close_connection()

    def _respond(self, request: Request, header, body: dict) -> None:
        request.send(encode_response(header.api_key, header.api_version, header.correlation_id, body))

    # ------------------------------------------------------------------ partitions and logs

    def sync_logs(self) -> None:
        """Make the local logs follow the ZooKeeper registry (see :meth:`ReplicaManager.sync_logs`)."""
        self.replica_manager.sync_logs()

    # ------------------------------------------------------------------ ApiVersions

    def handle_api_versions(self, request, header, body):
        self._respond(request, header, {"error_code": NONE, "api_keys": self._api_keys, "throttle_time_ms": 0})

    # ------------------------------------------------------------------ Metadata

    def handle_metadata(self, request, header, body):
        version = header.api_version
        requested = body.get("topics")
        all_topics = self.cluster.topics()
        live = self.cluster.live_brokers()
        brokers = [{"node_id": b, "host": h, "port": p, "rack": None} for b, (h, p) in sorted(live.items())]
        unknown_ids = []
        if requested is None or (version == 0 and not requested):
            names = sorted(all_topics)
        else:
            names = []
            for t in requested:
                if t["name"] is None:  # v12+: asked for by topic id (KIP-516)
                    if version < 12:  # Kafka rejects it too: v10-11 carry ids but cannot answer a null name
                        log.info("closing connection %d from %s (client %r): Metadata v%d asks for a topic by id; "
                                 "topic names cannot be null before v12", request.connection_id, request.peer,
                                 header.client_id, version)
                        request.close_connection()
                        return
                    name = self.cluster.topic_name_by_id(t["topic_id"])
                    if name is None:
                        unknown_ids.append(t["topic_id"])
                        continue
                    t = {"name": name}
                names.append(t["name"])
            names = list(dict.fromkeys(names))
        allow_auto = self.config.auto_create_topics_enable and body.get("allow_auto_topic_creation", True)
        topics = [{"error_code": 100, "name": None, "topic_id": tid, "partitions": []}  # UNKNOWN_TOPIC_ID
                  for tid in dict.fromkeys(unknown_ids)]
        for name in names:
            parts = all_topics.get(name)
            code = NONE
            if parts is None:
                parts, code = self._metadata_for_missing_topic(name, allow_auto)
            partitions = []
            for p, st in sorted((parts or {}).items()):
                partitions.append({
                    "error_code": NONE if st.leader >= 0 else LeaderNotAvailableError.code,
                    "partition_index": p,
                    "leader_id": st.leader,
                    "leader_epoch": st.leader_epoch,
                    "replica_nodes": list(st.replicas),
                    "isr_nodes": list(st.isr),  # the state znode's ISR, as Kafka's metadata cache
                    "offline_replicas": [b for b in st.replicas if b not in live],
                })
            topics.append({"error_code": code, "name": name, "is_internal": name in INTERNAL_TOPICS,
                           "partitions": partitions, "topic_id": self.cluster.topic_id(name) or ZERO_UUID,
                           "topic_authorized_operations": TOPIC_AUTHORIZED_OPERATIONS
                           if body.get("include_topic_authorized_operations") else NOT_REQUESTED_OPERATIONS})
        self._respond(request, header, {
            "throttle_time_ms": 0, "brokers": brokers, "cluster_id": self.cluster.cluster_id,
            "controller_id": self.cluster.controller_id, "topics": topics,
            "cluster_authorized_operations": CLUSTER_AUTHORIZED_OPERATIONS
            if body.get("include_cluster_authorized_operations") else NOT_REQUESTED_OPERATIONS,
        })

    def _metadata_for_missing_topic(self, name: str, allow_auto: bool):
        try:
            validate_topic_name(name)
        except InvalidTopicError:
            return None, InvalidTopicError.code
        parts = self.cluster.topic(name, refresh_if_missing=True)
        if parts is not None:
            return parts, NONE
        if not allow_auto or name == OFFSETS_TOPIC:
            return None, UnknownTopicOrPartitionError.code
        try:
            self.replica_manager.auto_create_topic(name)
        except PyklogError as e:
            return None, e.code
        parts = self.cluster.topic(name, refresh_if_missing=True)
        if parts is None:
            return None, LeaderNotAvailableError.code
        return parts, NONE

    # ------------------------------------------------------------------ Produce

    def handle_produce(self, request, header, body):
        version = header.api_version
        acks = body["acks"]
        responses = []
        failed = False
        ack_error = acks not in (0, 1, -1)
        tx_error = self._check_transactional_produce(body, version)
        waits = []  # acks=all appends to replicated partitions: (entry, topic, partition, offset, epoch)
        for td in body["topic_data"]:
            name = td["name"]
            parts = []
            for pd in td["partition_data"]:
                idx = pd["index"]
                entry = {"index": idx, "error_code": NONE, "base_offset": -1, "log_append_time_ms": -1,
                         "log_start_offset": -1, "record_errors": [], "error_message": None}
                try:
                    if ack_error:
                        raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks}")
                    if tx_error is not None:
                        raise tx_error
                    if name in INTERNAL_TOPICS:
                        # Kafka's ReplicaManager.appendToLocalLog refuses client appends to internal
                        # topics (a forged record would rewrite committed offsets)
                        raise InvalidTopicError(f"Cannot append to internal topic {name}")
                    wait = self._append(name, idx, pd["records"], version, entry, acks)
                    if wait is not None:
                        waits.append((entry,) + wait)
                except PyklogError as e:
                    failed = True
                    entry["error_code"] = e.code
                    entry["error_message"] = str(e)[:1000]
                    if getattr(e, "record_errors", None):  # a per-record rule refused (KIP-467)
                        entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": m}
                                                  for i, m in e.record_errors]
                        if version < 8:  # INVALID_RECORD is unknown before v8: CORRUPT_MESSAGE
                            entry["error_code"] = _CORRUPT_MESSAGE
                    if e.code != UnknownTopicOrPartitionError.code and e.code != NotLeaderOrFollowerError.code:
                        log.debug("produce to %s-%d failed: %s", name, idx, e)
                except Exception as e:  # noqa: BLE001
                    failed = True
                    log.exception("produce to %s-%d failed", name, idx)
                    entry["error_code"] = UNKNOWN_SERVER_ERROR
                    entry["error_message"] = f"{type(e).__name__}: {e}"[:1000]
                parts.append(entry)
            responses.append({"name": name, "partition_responses": parts})
        if acks == 0:
            if failed:
                request.close_connection()  # Kafka closes so an acks=0 producer notices
            else:
                request.send_nothing()
            return
        if waits and not self._shutting_down:
            produce = (request, header, responses, waits)
            keys = [(w[1], w[2]) for w in waits]
            self.produce_purgatory.watch(DelayedOperation(
                keys, body.get("timeout_ms", 30000), 0, 0, produce,
                ready=lambda: all(self._produce_status(w) is not None for w in waits)))
            return
        self._finish_produce(request, header, responses, waits)

    @staticmethod
    def _check_transactional_produce(body, version: int) -> PyklogError | None:
        """Kafka's KafkaApis.handleProduceRequest: a request holding transactional batches must name
        its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, as
        Kafka answers when the id is missing or not authorised).  A transactional id with
        non-transactional batches is accepted, as in Kafka.  Runs on the request handler thread;
        reads only the batch headers (the log validates the rest)."""
        if version < 3 or body.get("transactional_id") is not None:
            return None  # v0-2 message sets have no transactional bit
        for td in body["topic_data"]:
            for pd in td["partition_data"]:
                if _has_transactional_batch(pd["records"]):
                    return TransactionalIdAuthorizationFailedError(
                        "transactional record batches need the request's transactional_id")
        return None

    def _append(self, topic: str, partition: int, records, version: int, entry: dict, acks: int = 1):
        """Append to the leader log; returns ``(topic, partition, required offset, leader epoch)``
        when an acks=all Produce must wait for the high watermark (a replicated partition), else None."""
        try:
            lg = self.replica_manager.leader_log(topic, partition)
        except UnknownTopicOrPartitionError:
            # auto.create.topics.enable also covers Produce to an unknown topic
            if not self.config.auto_create_topics_enable or topic == OFFSETS_TOPIC \
                    or self.cluster.topic(topic, refresh_if_missing=True) is not None:
                raise
            self.replica_manager.auto_create_topic(topic)
            lg = self.replica_manager.leader_log(topic, partition)
        if records is None or len(records) == 0:
            raise InvalidRecordError(f"produce to {topic}-{partition} carries no records")
        if version < 3:
            from pyklog.broker.record.convert import message_set_to_batches

            data = message_set_to_batches(records)
            if not data:
                raise InvalidRecordError(f"produce v{version} to {topic}-{partition}: no complete message")
        else:
            if len(records) <= _MAGIC_OFFSET or records[_MAGIC_OFFSET] != 2:
                magic = records[_MAGIC_OFFSET] if len(records) > _MAGIC_OFFSET else None
                raise InvalidRecordError(
                    f"Produce v{version} requires record batches with magic 2, read magic {magic}")
            data = records
            _check_transactional_producer_id(data, topic, partition)
        rm = self.replica_manager
        part = rm.partition(topic, partition)
        replicated = part is not None and part.replicated
        leader_epoch = rm.leader_epoch(topic, partition)
        if replicated and acks == -1:
            # Kafka's appendRecordsToLeader under leaderIsrUpdateLock: an ISR change in flight (its
            # ZooKeeper write) finishes first, and none happens between the check and the append
            with part.lock:
                rm.check_enough_replicas(topic, partition)  # NOT_ENOUGH_REPLICAS: nothing appended
                info = lg.append(data, leader_epoch=leader_epoch)
        else:
            info = lg.append(data, leader_epoch=leader_epoch)
        entry["base_offset"] = info.first_offset
        entry["log_append_time_ms"] = info.log_append_time
        entry["log_start_offset"] = info.log_start_offset
        if not info.duplicate:
            self.purgatory.notify((topic, partition), len(data))
        if not replicated:
            return None
        rm.maybe_increment_high_watermark(part)  # an ISR of the leader alone
        if acks != -1:
            return None
        # a duplicate's offsets were written before: it too waits until they are replicated
        return (topic, partition, info.last_offset + 1, leader_epoch)

    # ------------------------------------------------------------------ acks=all (replication)

    def _produce_status(self, wait):
        """None (keep waiting), 0 or the error of one acks=all append (Kafka's DelayedProduce.tryComplete)."""
        _, topic, partition, required, epoch = wait
        return self.replica_manager.produce_status(topic, partition, required, epoch)

    def _complete_delayed_produce(self, op: DelayedOperation) -> None:
        """The produce purgatory's completion (a follower's Fetch thread, the ISR task, a role
        change, the timer at the request's timeout_ms, or shutdown): answer every partition."""
        request, header, responses, waits = op.payload
        try:
            self._finish_produce(request, header, responses, waits)
        except Exception:  # noqa: BLE001
            log.exception("completing a delayed produce failed")
            if not request.answered:
                request.close_connection()

    def _finish_produce(self, request, header, responses, waits) -> None:
        for w in waits:
            entry = w[0]
            status = self._produce_status(w)
            if status is None:
                status = RequestTimedOutError(
                    f"{w[1]}-{w[2]}: not replicated to the ISR up to offset {w[3]} within the request's timeout")
            if status != 0:
                entry["error_code"] = status.code
                entry["error_message"] = str(status)[:1000]
        if not request.answered:
            self._respond(request, header, {"responses": responses, "throttle_time_ms": 0})

    def _on_high_watermark(self, topic: str, partition: int) -> None:
        """The replica manager moved a high watermark (no lock held): waiting acks=all Produces may
        complete, and consumers' delayed Fetches see new data (they re-read and wait again if short)."""
        self.produce_purgatory.check((topic, partition))
        self.coordinator_appends.check(topic, partition)
        # wake every fetch waiting on it: each re-reads (followers learn the new high watermark at once)
        self.purgatory.notify((topic, partition), _INT32_MAX)

    def _on_partition_role_change(self, topic: str, partition: int) -> None:
        """Leadership or the ISR changed: waiting acks=all Produces re-check (NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND)."""
        self.produce_purgatory.check((topic, partition))
        self.coordinator_appends.check(topic, partition)

    # ------------------------------------------------------------------ Fetch

    def handle_fetch(self, request, header, body):
        if header.api_version >= 13:  # KIP-516: topics by id (flex-data)
            for t in body["topics"]:
                t["topic"] = self._fetch_topic_name(t["topic_id"])
        body_topics = [(t["topic"], [(p["partition"], p["fetch_offset"], p["partition_max_bytes"])
                                     for p in t["partitions"]]) for t in body["topics"]]
        replica_id = body.get("replica_id", -1)
        fetch = (request, header, body_topics, body.get("max_bytes", _INT32_MAX),
                 body.get("isolation_level", 0), replica_id,
                 self._fenced_partitions(body))
        keys = [(t, p) for t, parts in body_topics for p, _, _ in parts]
        moved = self._fetch_moved(keys, fetch)  # marks taken before the read (see _fetch_moved)
        responses, nbytes, errors = self._read_fetch(fetch)
        max_wait = body["max_wait_ms"]
        min_bytes = body["min_bytes"]
        if (max_wait <= 0 or nbytes >= min_bytes or errors or not body_topics or self._shutting_down):
            self._send_fetch(fetch, responses)
            return
        self.purgatory.watch(DelayedOperation(keys, max_wait, min_bytes, nbytes, fetch, ready=moved))

    def _fetch_moved(self, keys, fetch):
        """A predicate for a delayed Fetch: has any of its partitions moved since now (log end offset
        for a follower, high watermark for a consumer)?  Taken BEFORE the read; the purgatory checks
        it once right after the watch is registered, so an append landing between the read and the
        watch (its notify finding no watcher) does not leave the fetch waiting out its max_wait_ms --
        on the acks=all path that would stall such a produce by replica.fetch.wait.max.ms (Kafka's
        DelayedOperation.safeTryCompleteOrElse)."""
        follower = fetch[5] >= 0
        rm = self.replica_manager

        def end(key):
            lg = rm.local_log(*key)
            if lg is None:
                return None
            return lg.log_end_offset if follower else lg.high_watermark

        marks = {k: end(k) for k in keys}
        return lambda: any(end(k) != m for k, m in marks.items())

    def _fenced_partitions(self, body) -> dict:
        """A Fetch's (v9+) ``current_leader_epoch`` checked against this leader's epoch, as Kafka's
        ``Partition.checkCurrentLeaderEpoch``, for followers and consumers alike (KIP-320): older ->
        FENCED_LEADER_EPOCH (the fetcher missed a leader change: a consumer refreshes its metadata
        and validates its position with OffsetsForLeaderEpoch, so it never reads past a truncation
        point from a deposed leader), newer -> UNKNOWN_LEADER_EPOCH (this broker has not seen it yet).
        Returns ``{(topic, partition): error}``; -1 (no epoch) is not checked."""
        out = {}
        rm = self.replica_manager
        for t in body["topics"]:
            for pd in t["partitions"]:
                asked = pd.get("current_leader_epoch", -1)
                if asked is None or asked < 0:
                    continue
                part = rm.partition(t["topic"], pd["partition"])
                if part is None or not part.is_leader:
                    continue  # answered NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION by the read
                if asked < part.leader_epoch:
                    out[(t["topic"], pd["partition"])] = FencedLeaderEpochError(
                        f"{t['topic']}-{pd['partition']}: the follower's leader epoch {asked} is older than "
                        f"{part.leader_epoch}")
                elif asked > part.leader_epoch:
                    out[(t["topic"], pd["partition"])] = UnknownLeaderEpochError(
                        f"{t['topic']}-{pd['partition']}: the follower's leader epoch {asked} is newer than "
                        f"{part.leader_epoch}")
        return out

    def _complete_delayed_fetch(self, op: DelayedOperation) -> None:
        """The purgatory's completion (on the appending thread, the timer thread or at
        shutdown): re-read and answer.  A READ_COMMITTED fetch woken by appends that are all
        above the last stable offset (an open transaction's data) still has fewer than
        ``min_bytes`` to return: it waits again for the rest of its time, so it completes when
        the marker moves the LSO (Kafka's DelayedFetch counts bytes up to the LSO)."""
        fetch = op.payload
        request = fetch[0]
        try:
            moved = self._fetch_moved(op.keys, fetch)  # before the re-read, as in handle_fetch
            responses, nbytes, errors = self._read_fetch(fetch)
            remaining_ms = int((op.deadline - time.monotonic()) * 1000)
            # READ_COMMITTED, or a consumer of a replicated log woken by an append still above
            # the high watermark: fewer than min_bytes readable yet, wait for the rest of the time
            if (nbytes < op.min_bytes and not errors and remaining_ms > 0 and not self._shutting_down
                    and (fetch[4] == 1 or fetch[5] < 0)):
                self.purgatory.watch(DelayedOperation(op.keys, remaining_ms, op.min_bytes, nbytes, fetch,
                                                      ready=moved))
                return
            self._send_fetch(fetch, responses)
        except Exception as e:  # noqa: BLE001
            log.exception("completing a delayed fetch failed")
            if not request.answered:
                header = fetch[1]
                try:
                    err = self._error_body(ApiKey.FETCH, header.api_version, {"topics": [
                        {"topic": t, "partitions": [{"partition": p} for p, _, _ in parts]}
                        for t, parts in fetch[2]]}, _code(e), str(e))
                    self._respond(request, header, err)
                except Exception:  # noqa: BLE001
                    request.close_connection()

    def _read_fetch(self, fetch):
        """Read every requested partition; returns (responses with FetchSlice records, bytes, errors)."""
        _, header, topics, max_bytes, isolation, replica_id, fenced = fetch
        version = header.api_version
        follower = replica_id >= 0  # a follower replica's Fetch: reads up to the log end offset
        soft_limits = version >= 3  # KIP-74: the first non-empty partition returns >= 1 batch
        remaining = max_bytes if version >= 3 else _INT32_MAX
        min_one = soft_limits
        total = 0
        errors = 0
        read_committed = isolation == 1 and version >= 4
        responses = []
        for name, parts in topics:
            out = []
            for p, offset, pmax in parts:
                entry = {"partition_index": p, "error_code": NONE, "high_watermark": -1,
                         "last_stable_offset": -1, "log_start_offset": -1,
                         "aborted_transactions": [] if read_committed else None,
                         "preferred_read_replica": -1, "records": None}
                try:
                    lg = self.replica_manager.leader_log(name, p)
                    if (name, p) in fenced:
                        raise fenced[(name, p)]
                    # read once: the LSO bounds a READ_COMMITTED read and is reported to all
                    lso = lg.last_stable_offset
                    limit = min(pmax, remaining)
                    if follower:
                        bound = None
                    elif read_committed:
                        bound = lso
                    else:  # consumers read only below the high watermark (= log end offset unreplicated)
                        bound = lg.high_watermark
                    in_sync = True
                    if follower:  # the leader's replication throttle (KIP-73, a reassignment's --throttle)
                        part = self.replica_manager.partition(name, p)
                        in_sync = part is None or replica_id in part.isr
                        if self._leader_quota().should_throttle(name, p, in_sync):
                            limit, min_one_here = 0, False
                        else:
                            min_one_here = min_one
                    else:
                        min_one_here = min_one
                    if limit <= 0 and not min_one_here:
                        sl = None
                    else:
                        sl = lg.read(offset, max(limit, 0), min_one=min_one_here, max_offset=bound)
                    if follower and sl is not None:
                        self._leader_quota().record(name, p, in_sync, sl.size)
                    if follower:  # Kafka's updateFollowerFetchState (after a successful read): the
                        # follower's log end offset and caught-up time; may expand the ISR, move the HW
                        self.replica_manager.update_follower_fetch(name, p, replica_id, offset)
                    entry["high_watermark"] = lg.high_watermark
                    entry["last_stable_offset"] = lso
                    entry["log_start_offset"] = lg.log_start_offset
                    if sl is not None and sl.size > 0:
                        entry["records"] = sl
                        total += sl.size
                        remaining -= sl.size
                        min_one = False
                        if read_committed:  # Kafka's addAbortedTransactions
                            entry["aborted_transactions"] = [
                                {"producer_id": pid, "first_offset": first}
                                for pid, first in lg.aborted_transactions(
                                    offset, lg.fetch_upper_bound(sl.first_offset))]
                except OffsetOutOfRangeError as e:
                    errors += 1
                    entry["error_code"] = e.code
                    lg = self.replica_manager.local_log(name, p)
                    if lg is not None:
                        entry["high_watermark"] = lg.high_watermark
                        entry["last_stable_offset"] = lg.last_stable_offset
                        entry["log_start_offset"] = lg.log_start_offset
                except PyklogError as e:
                    errors += 1
                    entry["error_code"] = e.code
                except Exception:  # noqa: BLE001
                    errors += 1
                    log.exception("fetch from %s-%d failed", name, p)
                    entry["error_code"] = UNKNOWN_SERVER_ERROR
                out.append(entry)
            responses.append({"topic": name, "partitions": out})
        return responses, total, errors

    def _leader_quota(self):
        """The leader's replication throttle (:class:`~pyklog.broker.server.replication_quota.
        LeaderReplicationQuota`), made on first use from the dynamic broker config and the topic
        configs.  Request handler threads."""
        q = getattr(self, "_replication_quota", None)
        if q is None:
            from pyklog.broker.server.replication_quota import RATE_CONFIG, LeaderReplicationQuota

            def rate():
                dyn = getattr(self, "dynamic_config", None)
                return dyn.effective_props().get(RATE_CONFIG) if dyn is not None else None

            q = self._replication_quota = LeaderReplicationQuota(self.replica_manager.broker_id, rate,
                                                                 self.cluster.topic_config)
        return q

    def _fetch_topic_name(self, topic_id) -> str:
        """Fetch v13+: the name of the topic ``topic_id`` names, or, for an id no topic has (deleted,
        re-created with a new id, never existed), a placeholder no topic can be named (it has a
        character topic names may not hold): reads of it fail as an unknown topic, and
        :meth:`_fetch_topic_ids` answers UNKNOWN_TOPIC_ID with the id the client sent.  Runs on
        request handler threads; the id -> name cache is a dict used without a lock (each get/set
        is atomic) and every hit is checked against the registry cache."""
        name = self._topic_names_by_id.get(topic_id)
        if name is not None and self.cluster.topic_id(name) == topic_id:  # O(1): still that topic
            return name
        name = self.cluster.topic_name_by_id(topic_id)  # a scan of the registry cache
        if name is None:
            self._topic_names_by_id.pop(topic_id, None)
            return _UNKNOWN_TOPIC_ID_PREFIX + str(topic_id)
        if len(self._topic_names_by_id) > 100_000:
            self._topic_names_by_id.clear()
        self._topic_names_by_id[topic_id] = name  # dict operations are atomic: no lock
        return name

    def _fetch_topic_ids(self, responses) -> None:
        """Fetch v13+: each response topic gets its topic id in place of its name; the partitions of
        an unknown id get UNKNOWN_TOPIC_ID (the client refreshes its metadata)."""
        for t in responses:
            name = t["topic"]
            if name.startswith(_UNKNOWN_TOPIC_ID_PREFIX):
                t["topic_id"] = uuid.UUID(name[len(_UNKNOWN_TOPIC_ID_PREFIX):])
                for entry in t["partitions"]:
                    entry["error_code"] = UNKNOWN_TOPIC_ID
            else:
                t["topic_id"] = self.cluster.topic_id(name) or ZERO_UUID

    def _send_fetch(self, fetch, responses) -> None:
        request, header = fetch[0], fetch[1]
        version = header.api_version
        owned = []
        if version >= 13:
            self._fetch_topic_ids(responses)
        try:
            for t in responses:
                for entry in t["partitions"]:
                    sl = entry["records"]
                    if sl is None:
                        entry["records"] = b""
                    elif version >= 4:
                        fd = OwnedFd(os.dup(sl.file.fileno()))
                        owned.append(fd)
                        entry["records"] = FileRegion(fd, sl.position, sl.size)
                    else:
                        entry["records"] = self._down_convert(sl, 0 if version < 2 else 1)
            chunks = encode_response(ApiKey.FETCH, version, header.correlation_id, {
                "throttle_time_ms": 0, "error_code": NONE, "session_id": 0, "responses": responses})
        except BaseException:
            for fd in owned:
                fd.close()
            raise
        request.send(chunks)

    @staticmethod
    def _down_convert(sl, magic: int) -> bytes:
        from pyklog.broker.record.convert import batches_to_message_set

        return batches_to_message_set(sl.read_bytes(), magic)

    # ------------------------------------------------------------------ ListOffsets

    def handle_list_offsets(self, request, header, body):
        """ListOffsets v0-8: -1 latest (the LSO for READ_COMMITTED), -2 earliest, v7+ -3 the record
        with the largest timestamp (KIP-734), v8+ -4 the earliest local offset (KIP-405; without
        tiered storage the log start offset), else the first record at or after a timestamp.
        Runs on a request handler thread; lock-free reads of the logs."""
        version = header.api_version
        # v2+ READ_COMMITTED: offsets stop at the last stable offset (Kafka's lastFetchableOffset)
        read_committed = version >= 2 and body.get("isolation_level", 0) == 1
        topics = []
        for t in body["topics"]:
            name = t["name"]
            parts = []
            for pd in t["partitions"]:
                p = pd["partition_index"]
                ts = pd["timestamp"]
                entry = {"partition_index": p, "error_code": NONE, "old_style_offsets": [],
                         "timestamp": -1, "offset": -1, "leader_epoch": -1}
                try:
                    lg = self.replica_manager.leader_log(name, p)
                    if version == 0:
                        entry["old_style_offsets"] = list(lg.offsets_before(ts, pd.get("max_num_offsets", 1)))
                    elif ts == -1:
                        # consumers' latest: the high watermark (= log end offset unreplicated)
                        entry["offset"] = lg.last_stable_offset if read_committed else lg.high_watermark
                    elif ts == -2 or ts == -4:  # -4 (v8, KIP-405): the earliest local offset; all is local
                        entry["offset"] = lg.log_start_offset
                    elif ts == -3:  # v7 (KIP-734): the first record with the largest timestamp
                        fetchable = lg.last_stable_offset if read_committed else lg.high_watermark
                        found = self._max_timestamp_offset(lg)
                        if found is not None and found[0] < fetchable:
                            entry["offset"], entry["timestamp"] = found
                    else:
                        lso = lg.last_stable_offset if read_committed else lg.high_watermark
                        found = lg.offset_for_timestamp(ts)
                        if found is not None and (lso is None or found[0] < lso):
                            entry["offset"], entry["timestamp"] = found
                    if version >= 4 and entry["offset"] >= 0:
                        entry["leader_epoch"] = self.replica_manager.leader_epoch(name, p)
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    # ------------------------------------------------------------------ OffsetForLeaderEpoch

    def handle_offset_for_leader_epoch(self, request, header, body):
        """OffsetForLeaderEpoch (key 23, Kafka's ``handleOffsetForLeaderEpochRequest`` and
        ``Partition.lastOffsetForLeaderEpoch``): for each partition led here, where the requested
        leader epoch ends in the leader's log (``Log.end_offset_for_epoch``: the largest epoch <=
        the requested one and the start offset of the next, or the log end offset for the current
        epoch; -1/-1 when undefined).  A returning follower truncates there (KIP-101/279); a KIP-320
        consumer checks that its position is not beyond it after a leader change.

        v2+ ``current_leader_epoch`` (-1: no check) is fenced against this broker's leader epoch:
        older -> FENCED_LEADER_EPOCH, newer -> UNKNOWN_LEADER_EPOCH (the broker has not seen the
        change yet).  Partitions not led here: NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION
        (Kafka answers from the leader only).  ``replica_id`` (v3+) is not needed for the answer.
        Request handler thread; lock-free reads of the log's epoch cache."""
        topics = []
        for t in body["topics"]:
            name = t["topic"]
            parts = []
            for pd in t["partitions"]:
                p = pd["partition"]
                entry = {"partition": p, "error_code": NONE, "leader_epoch": -1, "end_offset": -1}
                try:
                    lg = self.replica_manager.leader_log(name, p)
                    current = self.replica_manager.leader_epoch(name, p)
                    asked = pd.get("current_leader_epoch", -1)
                    if asked >= 0 and asked < current:
                        raise FencedLeaderEpochError(
                            f"{name}-{p}: current leader epoch {asked} is older than the leader's {current}")
                    if asked > current:
                        raise UnknownLeaderEpochError(
                            f"{name}-{p}: current leader epoch {asked} is newer than the leader's {current}")
                    epoch = pd["leader_epoch"]
                    latest = lg.latest_epoch
                    if latest < epoch <= current:
                        # the cache lacks the current epoch (nothing written in it yet and the
                        # ReplicaManager has not assigned it): answer as Kafka's leader, whose cache
                        # always ends with (current epoch, its start): the epoch asked for ends at
                        # the LEO, reported as the current one, the latest known below it, or
                        # itself when none is known
                        found = epoch if epoch == current or latest < 0 else latest
                        entry["leader_epoch"], entry["end_offset"] = found, lg.log_end_offset
                    else:
                        entry["leader_epoch"], entry["end_offset"] = lg.end_offset_for_epoch(epoch)
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"topic": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    @staticmethod
    def _max_timestamp_offset(lg) -> tuple[int, int] | None:
        """ListOffsets v7+ MAX_TIMESTAMP (-3, KIP-734): ``(offset, timestamp)`` of the first record
        holding the largest timestamp of the log (its segments' largest, then the first record at
        or after it), None for a log without records.  Lock-free, as ``offset_for_timestamp``."""
        max_ts = max((seg.max_timestamp for seg in lg.segments), default=-1)
        if max_ts < 0:
            return None
        return lg.offset_for_timestamp(max_ts)

    # ------------------------------------------------------------------ CreateTopics / DeleteTopics

    def handle_create_topics(self, request, header, body):
        """CreateTopics: each topic is checked on its own, then every valid topic is written to
        ZooKeeper in one batch (:meth:`ZkCluster.create_topics`: one multi-op, one read of the
        registry), so 100 topics cost about as much on a broker holding 900 topics as on one
        holding 6.  Request handler thread."""
        validate_only = body.get("validate_only", False)
        timeout_s = min(max(body.get("timeout_ms", 0), 0) / 1000.0, _CREATE_WAIT_S)
        seen: dict[str, int] = {}
        for t in body["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        errors: dict[int, PyklogError] = {}
        specs: list[tuple[int, dict]] = []
        for i, t in enumerate(body["topics"]):
            name = t["name"]
            try:
                if seen[name] > 1:
                    raise InvalidRequestError(f"topic {name!r} appears more than once in the request")
                n = t["num_partitions"]
                rf = t["replication_factor"]
                assignment = None
                if t.get("assignments"):
                    if n != -1 or rf != -1:
                        raise InvalidRequestError(
                            "with a manual replica assignment num_partitions and replication_factor must be -1")
                    assignment = {a["partition_index"]: list(a["broker_ids"]) for a in t["assignments"]}
                    n, rf = len(assignment), len(next(iter(assignment.values())))
                else:
                    n = self.config.num_partitions if n == -1 else n
                    rf = self.config.default_replication_factor if rf == -1 else rf
                    if n > MAX_PARTITIONS_PER_TOPIC:
                        raise InvalidPartitionsError(
                            f"topic {name!r}: {n} partitions requested, at most {MAX_PARTITIONS_PER_TOPIC} allowed")
                configs = {c["name"]: c["value"] for c in t.get("configs") or []}
                specs.append((i, {"name": name, "num_partitions": n, "replication_factor": rf, "configs": configs,
                                  "replica_assignment": assignment}))
            except PyklogError as e:
                errors[i] = e
        if specs:
            try:
                created = self.cluster.create_topics([sp for _, sp in specs], validate_only)
            except PyklogError as e:  # ZooKeeper unreachable & co.: every topic of the batch fails
                created = {sp["name"]: e for _, sp in specs}
            for i, sp in specs:
                outcome = created.get(sp["name"])
                if isinstance(outcome, PyklogError):
                    errors[i] = outcome
                elif not validate_only:
                    self.replica_manager.wait_for_topic(sp["name"], timeout_s)
        spec_of = dict(specs)
        results = []
        for i, t in enumerate(body["topics"]):
            entry = {"name": t["name"], "error_code": NONE, "error_message": None}
            if i in errors:
                entry["error_code"] = errors[i].code
                entry["error_message"] = str(errors[i])[:1000]
            elif header.api_version >= 5 and i in spec_of:  # KIP-525: the created topic's layout and configs
                sp = spec_of[i]
                if header.api_version >= 7 and not validate_only:  # KIP-516
                    entry["topic_id"] = self.cluster.topic_id(sp["name"]) or ZERO_UUID
                entry.update(num_partitions=sp["num_partitions"], replication_factor=sp["replication_factor"],
                             configs=[{"name": k, "value": v, "read_only": False, "config_source": 1,
                                       "is_sensitive": False} for k, v in sorted(sp["configs"].items())])
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "topics": results})

    def handle_delete_topics(self, request, header, body):
        """DeleteTopics v0-6: valid names are deleted from ZooKeeper in one batch
        (:meth:`ZkCluster.delete_topics`), then this broker's logs of them.  v6+ (KIP-516) names
        each topic by name or by id: an id no topic has gets UNKNOWN_TOPIC_ID, both at once
        INVALID_REQUEST, as Kafka; each result carries the topic's name and id.  Request handler
        thread."""
        version = header.api_version
        if version >= 6:
            wanted = [(t.get("name"), t.get("topic_id") or ZERO_UUID) for t in body["topics"]]
        else:
            wanted = [(n, ZERO_UUID) for n in body["topic_names"]]
        errors: dict[int, PyklogError | int] = {}
        names: dict[int, str] = {}
        ids: dict[int, object] = {}
        for i, (name, tid) in enumerate(wanted):
            if name is not None and tid != ZERO_UUID:
                errors[i] = InvalidRequestError("you may not name a topic by both its name and its id")
            elif name is None:
                found = self.cluster.topic_name_by_id(tid) if tid != ZERO_UUID else None
                if found is None:
                    errors[i] = UNKNOWN_TOPIC_ID
                else:
                    names[i], ids[i] = found, tid
            else:
                names[i] = name
                ids[i] = self.cluster.topic_id(name) or ZERO_UUID
        by_name: dict[str, PyklogError] = {}
        todo = []
        for name in dict.fromkeys(names.values()):
            try:
                if not self.config.delete_topic_enable:
                    raise TopicDeletionDisabledError("topic deletion is disabled (delete.topic.enable=false)")
                validate_topic_name(name)
                todo.append(name)
            except PyklogError as e:
                by_name[name] = e
        if todo:
            try:
                outcome = self.cluster.delete_topics(todo)
            except PyklogError as e:
                outcome = {name: e for name in todo}
            for name in todo:
                e = outcome.get(name)
                if e is not None:
                    by_name[name] = e
                else:
                    self.replica_manager.delete_local_logs(name)
        results = []
        for i, (name, tid) in enumerate(wanted):
            err = errors.get(i, by_name.get(names.get(i)))
            code = err if isinstance(err, int) else err.code if err is not None else NONE
            message = None if err is None else (f"no topic has the id {tid}" if isinstance(err, int)
                                                else str(err)[:1000])
            results.append({"name": names.get(i, name), "topic_id": ids.get(i, tid), "error_code": code,
                            "error_message": message})  # v5+
        self._respond(request, header, {"throttle_time_ms": 0, "responses": results})

    # ------------------------------------------------------------------ admin APIs (kafka-admin)

    def handle_create_partitions(self, request, header, body):
        """CreatePartitions v0-3 (Kafka's ``ZkAdminManager.createPartitions``): grow each topic
        through :meth:`ZkCluster.create_partitions`, then wait (up to the request's timeout, at most
        a few seconds) until this broker's registry cache shows the new partitions, so a Metadata
        request right after the answer sees them.  A topic named twice gets INVALID_REQUEST, as Kafka."""
        validate_only = body["validate_only"]
        timeout_s = min(max(body["timeout_ms"], 0) / 1000.0, _CREATE_WAIT_S)
        seen: dict[str, int] = {}
        for t in body["topics"]:
            seen[t["name"]] = seen.get(t["name"], 0) + 1
        results = []
        for t in body["topics"]:
            name = t["name"]
            entry = {"name": name, "error_code": NONE, "error_message": None}
            try:
                if seen[name] > 1:
                    raise InvalidRequestError(f"duplicate topic name {name!r} in the request")
                validate_topic_name(name)
                if name in INTERNAL_TOPICS:
                    # the coordinators map groups and transactional ids onto a fixed partition count
                    raise InvalidRequestError(f"cannot add partitions to the internal topic {name!r}: its "
                                              "coordinators hash keys over the configured partition count")
                count = t["count"]
                if count > MAX_PARTITIONS_PER_TOPIC:
                    raise InvalidPartitionsError(
                        f"topic {name!r}: {count} partitions requested, at most {MAX_PARTITIONS_PER_TOPIC} allowed")
                assignments = t.get("assignments")
                if assignments is not None:
                    assignments = [list(a["broker_ids"]) for a in assignments]
                new = self.cluster.create_partitions(name, count, assignments, validate_only)
                if not validate_only:
                    self._wait_for_partitions(name, max(new) + 1, timeout_s)
            except PyklogError as e:
                entry["error_code"] = e.code
                entry["error_message"] = str(e)[:1000]
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def _config_resource_error(self, rtype: int, name: str, altering: bool) -> None:
        """Raise Kafka's error for a config resource this broker cannot describe or alter."""
        from pyklog.broker.server import config_helper as ch

        if rtype == ch.RESOURCE_TOPIC:
            validate_topic_name(name)
            if self.cluster.topic(name, refresh_if_missing=True) is None:
                raise UnknownTopicOrPartitionError(f"the topic {name!r} does not exist")
        elif rtype == ch.RESOURCE_BROKER:
            if name not in ("", str(self.broker_id)):
                raise InvalidRequestError(
                    f"unexpected broker id, expected {self.broker_id} or empty string, but received {name!r}")
            if altering and getattr(self, "dynamic_config", None) is None:
                raise InvalidRequestError(f"broker {self.broker_id} has no dynamic config (not started by BrokerServer)")
        elif rtype == ch.RESOURCE_BROKER_LOGGER:
            raise InvalidRequestError("pyklog does not describe or alter broker loggers (resource type 8)")
        else:
            raise InvalidRequestError(f"unsupported resource type {rtype}; expected 2 (TOPIC) or 4 (BROKER)")

    def handle_describe_configs(self, request, header, body):
        """DescribeConfigs v0-3 (Kafka's ``ConfigHelper.describeConfigs``, ZooKeeper mode): topic
        resources from ``/config/topics/<topic>`` and the broker's dynamic and static settings, broker
        resources from ``/config/brokers/<id>``, ``/config/brokers/<default>`` and ``server.properties``,
        with sources and synonyms (see :mod:`config_helper`)."""
        from pyklog.broker.server import config_helper as ch
        from pyklog.broker.server.config import SERVER_CONFIG

        include_synonyms = body.get("include_synonyms", False)
        include_doc = body.get("include_documentation", False)
        raw = dict(self.config.raw or {})
        results = []
        for r in body["resources"]:
            rtype, name, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
            entry = {"error_code": NONE, "error_message": None, "resource_type": rtype, "resource_name": name,
                     "configs": []}
            try:
                self._config_resource_error(rtype, name, altering=False)
                if rtype == ch.RESOURCE_TOPIC:
                    entry["configs"] = ch.describe_topic_configs(name, self.cluster.topic_config(name), raw, keys,
                                                                 include_synonyms, include_doc,
                                                                 dynamic=self._dynamic_levels())
                else:
                    entry["configs"] = self._describe_broker(name, raw, keys, include_synonyms, include_doc)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000], configs=[])
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def _dynamic_levels(self):
        """(this broker's dynamic configs, the cluster-wide dynamic defaults), or None."""
        dyn = getattr(self, "dynamic_config", None)
        return None if dyn is None else (dyn.dynamic_broker_configs(), dyn.dynamic_default_configs())

    def _describe_broker(self, name: str, raw: dict, keys, include_synonyms: bool, include_doc: bool) -> list:
        """DescribeConfigs of a broker resource: this broker's id (every setting, with its dynamic,
        static and default sources) or "" (the cluster-wide dynamic defaults only)."""
        from pyklog.broker.server import config_helper as ch
        from pyklog.broker.server.config import SERVER_CONFIG
        from pyklog.broker.server.dynamic_config import DYNAMIC_CONFIGS

        levels = self._dynamic_levels()
        if not name:
            return ch.describe_default_broker_configs(levels[1] if levels else {}, keys, include_synonyms,
                                                      include_doc)
        return ch.describe_broker_configs(raw, SERVER_CONFIG, keys, include_synonyms, include_doc, dynamic=levels,
                                          dynamic_names=DYNAMIC_CONFIGS if levels is not None else frozenset())

    def _alter_broker(self, name: str, configs, incremental: bool, validate_only: bool) -> None:
        """AlterConfigs (``configs`` = [{name, value}], the level is replaced) or
        IncrementalAlterConfigs (``configs`` = the ops) on a broker resource: see
        :meth:`pyklog.broker.server.dynamic_config.DynamicBrokerConfig.alter`."""
        from pyklog.broker.server import config_helper as ch

        dyn = self.dynamic_config
        current = dyn.dynamic_default_configs() if name == "" else dyn.dynamic_broker_configs()
        if incremental:
            to_set, to_delete = ch.incremental_broker_changes(current, configs)
        else:
            to_set = {c["name"]: c["value"] for c in configs if c["value"] is not None}
            to_delete = set(current) - set(to_set)
        dyn.alter(self.cluster, name, to_set, to_delete, validate_only)

    def _alter_topic(self, name: str, to_set: dict, to_delete: set, validate_only: bool) -> None:
        from pyklog.broker.zk.topics import validate_topic_configs

        validate_topic_configs(to_set)  # INVALID_CONFIG naming the key and what it expects
        if not validate_only:
            self.cluster.alter_topic_config(name, to_set, to_delete)
            self.replica_manager.sync_logs()  # this broker's logs take the new config at once

    def handle_alter_configs(self, request, header, body):
        """AlterConfigs v0-2 (Kafka's ``ZkAdminManager.alterConfigs``): a topic's overrides are
        replaced by the request's (null values dropped, as Kafka), written to ``/config/topics/<t>``
        with a change notification, and applied to the live logs of every broker.  Broker resources
        (this broker's id, or "" for the cluster default) replace that dynamic level (KIP-226, see
        :mod:`pyklog.broker.server.dynamic_config`).  ``validate_only`` checks and writes nothing."""
        from pyklog.broker.server import config_helper as ch

        validate_only = body["validate_only"]
        responses = []
        for r in body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            entry = {"error_code": NONE, "error_message": None, "resource_type": rtype, "resource_name": name}
            try:
                names = [c["name"] for c in r["configs"]]
                dups = sorted({n for n in names if names.count(n) > 1})
                if dups:
                    raise InvalidRequestError(f"error due to duplicate config keys {dups}")
                self._config_resource_error(rtype, name, altering=True)
                if rtype == ch.RESOURCE_TOPIC:
                    to_set = {c["name"]: c["value"] for c in r["configs"] if c["value"] is not None}
                    to_delete = set(self.cluster.topic_config(name)) - set(to_set)
                    self._alter_topic(name, to_set, to_delete, validate_only)
                elif rtype == ch.RESOURCE_BROKER:
                    self._alter_broker(name, r["configs"], False, validate_only)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000])
            responses.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "responses": responses})

    def handle_incremental_alter_configs(self, request, header, body):
        """IncrementalAlterConfigs v0-1 (KIP-339, Kafka's ``ConfigAdminManager``): SET, DELETE,
        APPEND and SUBTRACT (list configs only) on a topic's overrides; otherwise as AlterConfigs."""
        from pyklog.broker.server import config_helper as ch

        validate_only = body["validate_only"]
        responses = []
        for r in body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            entry = {"error_code": NONE, "error_message": None, "resource_type": rtype, "resource_name": name}
            try:
                self._config_resource_error(rtype, name, altering=True)
                if rtype == ch.RESOURCE_TOPIC:
                    to_set, to_delete = ch.incremental_changes(self.cluster.topic_config(name), r["configs"])
                    self._alter_topic(name, to_set, to_delete, validate_only)
                elif rtype == ch.RESOURCE_BROKER:
                    self._alter_broker(name, r["configs"], True, validate_only)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000])
            responses.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "responses": responses})

    def handle_delete_records(self, request, header, body):
        """DeleteRecords v0-2 (Kafka's ``ReplicaManager.deleteRecords``): move each partition's log
        start offset up to the requested offset (-1: the high watermark) and answer the new low
        watermark.  OFFSET_OUT_OF_RANGE beyond the high watermark or below -1, POLICY_VIOLATION on a
        topic whose cleanup.policy lacks ``delete``; the whole segments below go with the next
        retention pass.  The log dir's checkpoints are written before the answer, so the new start
        offset survives a crash."""
        from pyklog.broker.errors import PolicyViolationError

        topics = []
        for t in body["topics"]:
            name = t["name"]
            parts = []
            for pd in t["partitions"]:
                p, offset = pd["partition_index"], pd["offset"]
                entry = {"partition_index": p, "low_watermark": -1, "error_code": NONE}
                try:
                    lg = self.replica_manager.leader_log(name, p)
                    if not lg.config.delete:
                        raise PolicyViolationError(f"records of partition {name}-{p} can not be deleted due to "
                                                   f"the configured policy (cleanup.policy={lg.config.cleanup_policy})")
                    hw = lg.high_watermark
                    target = hw if offset == -1 else offset
                    if target < 0 or target > hw:
                        raise OffsetOutOfRangeError(f"cannot delete records of {name}-{p} before offset {offset}: "
                                                    f"expected -1 or an offset in [0, {hw}] (the high watermark)")
                    before = lg.log_start_offset
                    lg.increment_log_start_offset(target)
                    if lg.log_start_offset != before:
                        self.logs.checkpoint_log_start_offset(lg)
                        log.info("DeleteRecords: log start offset of %s-%d moved from %d to %d",
                                 name, p, before, lg.log_start_offset)
                    entry["low_watermark"] = lg.log_start_offset
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    def handle_describe_log_dirs(self, request, header, body):
        """DescribeLogDirs v0-4: each of ``log.dirs`` with the partitions it holds (all, or those
        requested), their size in bytes and offset lag 0 (no future replicas, no replication); v3
        adds the top-level error code (0), v4 the volume's total and usable bytes (KIP-827, from
        ``os.statvfs`` of the log dir, as Kafka's ``FileStore.getTotalSpace``/``getUsableSpace``;
        -1 when the dir cannot be read: it then carries KAFKA_STORAGE_ERROR)."""
        wanted = None
        if body["topics"] is not None:
            wanted = {(t["topic"], p) for t in body["topics"] for p in t["partitions"]}
        by_dir: dict[str, dict[str, list]] = {d: {} for d in self.logs.log_dirs}
        for (t, p), lg in sorted(self.logs.logs().items()):
            if wanted is not None and (t, p) not in wanted:
                continue
            d = os.path.dirname(lg.dir)
            try:
                size = lg.size
            except Exception:  # noqa: BLE001 - a log closed meanwhile
                continue
            by_dir.setdefault(d, {}).setdefault(t, []).append(
                {"partition_index": p, "partition_size": size, "offset_lag": 0, "is_future_key": False})
        results = []
        for d, topics in by_dir.items():
            entry = {"error_code": NONE, "log_dir": d, "topics": [
                {"name": t, "partitions": parts} for t, parts in sorted(topics.items())]}
            if header.api_version >= 4:
                entry["total_bytes"], entry["usable_bytes"] = _volume_bytes(d)
                if entry["total_bytes"] < 0:
                    entry["error_code"] = KafkaStorageError.code
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": NONE, "results": results})

    def handle_delete_groups(self, request, header, body):
        """DeleteGroups v0-1 through :meth:`GroupCoordinator.delete_groups`, and of ZooKeeper groups
        (:meth:`_delete_zookeeper_groups`)."""
        names = body["groups_names"]
        if self.groups is None:
            codes = {g: CoordinatorNotAvailableError.code for g in names}
        else:
            codes = self.groups.delete_groups(names)
            codes = self._delete_zookeeper_groups(codes)
        self._respond(request, header, {"throttle_time_ms": 0, "results": [
            {"group_id": g, "error_code": codes[g]} for g in names]})

    def _delete_zookeeper_groups(self, codes: dict[str, int]) -> dict[str, int]:
        """DeleteGroups of ZooKeeper consumer groups (``/consumers/<group>``, offsets.storage=zookeeper):
        after the coordinator's answer (NONE or GROUP_ID_NOT_FOUND, so only the group's coordinator
        deletes), a ZooKeeper group of that name is deleted too (:meth:`ZkCluster.delete_zookeeper_group`:
        NON_EMPTY_GROUP while a member is registered).  The code is NONE if either kind was deleted."""
        from pyklog.broker.errors import GroupIdNotFoundError

        out = dict(codes)
        for g, code in codes.items():
            if code not in (NONE, GroupIdNotFoundError.code):
                continue
            try:
                if self.cluster.delete_zookeeper_group(g):
                    out[g] = NONE
            except PyklogError as e:
                out[g] = e.code
        return out

    def handle_offset_delete(self, request, header, body):
        """OffsetDelete v0 (KIP-496) through :meth:`GroupCoordinator.delete_offsets`; a topic this
        cluster does not have gets UNKNOWN_TOPIC_OR_PARTITION per partition, as Kafka."""
        group = body["group_id"]
        known, unknown = [], set()
        for t in body["topics"]:
            exists = self.cluster.topic(t["name"], refresh_if_missing=True) is not None
            for pd in t["partitions"]:
                tp = (t["name"], pd["partition_index"])
                if exists:
                    known.append(tp)
                else:
                    unknown.add(tp)
        if self.groups is None:
            code, results = CoordinatorNotAvailableError.code, {}
        else:
            code, results = self.groups.delete_offsets(group, known)
        topics = []
        if code == NONE:
            for t in body["topics"]:
                topics.append({"name": t["name"], "partitions": [
                    {"partition_index": pd["partition_index"],
                     "error_code": UnknownTopicOrPartitionError.code if (t["name"], pd["partition_index"]) in unknown
                     else results.get((t["name"], pd["partition_index"]), NONE)} for pd in t["partitions"]]})
        self._respond(request, header, {"error_code": code, "throttle_time_ms": 0, "topics": topics})

    #: KIP-430 bits of the cluster operations (Kafka's AclOperation codes CREATE 5, ALTER 7, DESCRIBE 8,
    #: CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12): pyklog has no ACLs,
    #: so every client may do all of them
    CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in (5, 7, 8, 9, 10, 11, 12))

    def handle_describe_cluster(self, request, header, body):
        """DescribeCluster v0-1 (KIP-700, flexible): the cluster id, the controller (pyklog's: the
        lowest live broker id) and the live brokers, as Metadata reports them.  v1 endpoint type 2
        (controllers) gets MISMATCHED_ENDPOINT_TYPE, an unknown type UNSUPPORTED_ENDPOINT_TYPE."""
        from pyklog.broker.errors import MismatchedEndpointTypeError, UnsupportedEndpointTypeError

        etype = body.get("endpoint_type", 1)
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "endpoint_type": etype,
                "cluster_id": self.cluster.cluster_id or "", "controller_id": -1, "brokers": [],
                "cluster_authorized_operations": -2147483648}
        if etype == 2:
            resp.update(error_code=MismatchedEndpointTypeError.code, endpoint_type=1,
                        error_message="the request was sent to a broker, but asked for controller endpoints "
                                      "(pyklog has no KRaft controllers)")
        elif etype != 1:
            resp.update(error_code=UnsupportedEndpointTypeError.code, endpoint_type=1,
                        error_message=f"unsupported endpoint type {etype}; expected 1 (brokers)")
        else:
            resp["controller_id"] = self.cluster.controller_id
            resp["brokers"] = [{"broker_id": b, "host": h, "port": p, "rack": None}
                               for b, (h, p) in sorted(self.cluster.live_brokers().items())]
            if body.get("include_cluster_authorized_operations"):
                resp["cluster_authorized_operations"] = self.CLUSTER_AUTHORIZED_OPERATIONS
        self._respond(request, header, resp)

    # ------------------------------------------------------------------ transaction admin APIs (KIP-664)

    def handle_describe_producers(self, request, header, body):
        """DescribeProducers v0 (Kafka's ``ReplicaManager.activeProducerState``): for each partition
        led here, every producer id its log keeps state for (epoch, last sequence, last timestamp,
        coordinator epoch of its last marker, first offset of its open transaction or -1).  Per
        partition: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER (only the leader holds a log
        until replication exists) with a message.  Request thread."""
        topics = []
        for t in body["topics"]:
            parts = []
            for p in t["partition_indexes"]:
                entry = {"partition_index": p, "error_code": NONE, "error_message": None, "active_producers": []}
                try:
                    lg = self.replica_manager.leader_log(t["name"], p)
                    entry["active_producers"] = [
                        {"producer_id": pid, "producer_epoch": epoch, "last_sequence": seq, "last_timestamp": ts,
                         "coordinator_epoch": ce, "current_txn_start_offset": txn}
                        for pid, epoch, seq, ts, ce, txn in lg.active_producers()]
                except PyklogError as e:
                    entry.update(error_code=e.code, error_message=str(e)[:1000])
                parts.append(entry)
            topics.append({"name": t["name"], "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    def handle_describe_transactions(self, request, header, body):
        """DescribeTransactions v0 through :meth:`TransactionCoordinator.describe_transaction`: per
        transactional id its state, timeout, start time, producer id and epoch and the partitions of
        its transaction, or COORDINATOR_NOT_AVAILABLE / NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS
        / TRANSACTIONAL_ID_NOT_FOUND as Kafka.  Request thread."""
        states = []
        for tid in body["transactional_ids"]:
            entry = {"error_code": NONE, "transactional_id": tid, "transaction_state": "",
                     "transaction_timeout_ms": 0, "transaction_start_time_ms": -1, "producer_id": -1,
                     "producer_epoch": -1, "topics": []}
            try:
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                d = self.txn_coordinator.describe_transaction(tid)
                by_topic: dict[str, list[int]] = {}
                for topic, partition in d.partitions:
                    by_topic.setdefault(topic, []).append(partition)
                entry.update(transaction_state=d.state, transaction_timeout_ms=d.timeout_ms,
                             transaction_start_time_ms=d.start_time_ms, producer_id=d.producer_id,
                             producer_epoch=d.producer_epoch,
                             topics=[{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())])
            except PyklogError as e:
                entry["error_code"] = e.code
                log.debug("DescribeTransactions %r: %s", tid, e)
            states.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "transaction_states": states})

    def handle_list_transactions(self, request, header, body):
        """ListTransactions v0-1 through :meth:`TransactionCoordinator.list_transactions`: the
        transactional ids this broker coordinates (COORDINATOR_NOT_AVAILABLE without a coordinator,
        COORDINATOR_LOAD_IN_PROGRESS while one of its partitions loads).  Request thread."""
        resp = {"throttle_time_ms": 0, "error_code": NONE, "unknown_state_filters": [], "transaction_states": []}
        if self.txn_coordinator is None:
            resp["error_code"] = CoordinatorNotAvailableError.code
        else:
            code, unknown, listed = self.txn_coordinator.list_transactions(
                body["state_filters"], body["producer_id_filters"], body.get("duration_filter", -1))
            resp.update(error_code=code, unknown_state_filters=unknown, transaction_states=[
                {"transactional_id": tid, "producer_id": pid, "transaction_state": st} for tid, pid, st in listed])
        self._respond(request, header, resp)

    # ------------------------------------------------------------------ the controller's APIs

    def handle_controlled_shutdown(self, request, header, body):
        """ControlledShutdown v0-3 (a stopping broker to the controller, Kafka's
        ``KafkaApis.handleControlledShutdownRequest``): NOT_CONTROLLER unless this broker is the
        controller; else the partitions the stopping broker still leads, answered when the
        controller's event thread has moved the leaderships (REQUEST_TIMED_OUT after 30 s); the
        request thread does not wait (:meth:`_answer_from_controller`)."""
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        if controller is None or not controller.is_active:
            return self._respond(request, header, {"error_code": NotControllerError.code, "remaining_partitions": []})

        def answer(remaining):
            return {"error_code": NONE, "remaining_partitions": [
                {"topic_name": t, "partition_index": p} for t, p in remaining]}

        self._answer_from_controller(
            request, header, "controlled_shutdown", (int(body["broker_id"]), int(body.get("broker_epoch", -1))),
            30.0, answer, lambda code, msg: {"error_code": code, "remaining_partitions": []})

    def _answer_from_controller(self, request, header, event: str, arg: tuple, timeout_s: float,
                                answer, fail) -> None:
        """Hand ``event`` to the controller's event thread and answer when it is done: ``answer(result)``
        builds the response, ``fail(code, message)`` the error response (the controller's error, or
        REQUEST_TIMED_OUT after ``timeout_s``, whichever comes first: exactly one is sent).  Runs on a
        request handler thread and returns at once, so a slow controller holds no I/O thread (the
        response goes out from the controller's event thread or the timer's thread)."""
        from pyklog.broker.errors import RequestTimedOutError

        lock = threading.Lock()
        sent = []

        def send(build):
            with lock:
                if sent:
                    return
                sent.append(True)
            timer.cancel()
            try:
                resp = build()
            except Exception as e:  # noqa: BLE001 - never leave the client without an answer
                log.exception("building the %s answer failed", event)
                resp = fail(UNKNOWN_SERVER_ERROR, str(e))
            try:
                self._respond(request, header, resp)
            except Exception:  # noqa: BLE001
                log.exception("sending the %s answer failed", event)

        def done(fut):
            def build():
                try:
                    result = fut.result()
                except PyklogError as e:
                    return fail(e.code, str(e))
                return answer(result)
            send(build)

        timer = threading.Timer(timeout_s, lambda: send(lambda: fail(
            RequestTimedOutError.code, f"the controller did not finish {event} within {timeout_s:.0f} s")))
        timer.daemon = True
        try:
            fut = self.controller.submit(event, arg)
        except PyklogError as e:
            return self._respond(request, header, fail(e.code, str(e)))
        timer.start()
        fut.add_done_callback(done)

    def handle_elect_leaders(self, request, header, body):
        """ElectLeaders v0-2 (KIP-183/KIP-460; the admin client sends it to the controller):
        NOT_CONTROLLER unless this broker is the controller; else each partition's result
        (ELECTION_NOT_NEEDED, PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
        UNKNOWN_TOPIC_OR_PARTITION).  Null partitions: every partition.  Election type 0 preferred,
        1 unclean (v1+)."""
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        version = header.api_version
        resp = {"throttle_time_ms": 0, "error_code": NONE, "replica_election_results": []}

        def fail(code):
            if version >= 1:
                resp["error_code"] = code
            else:  # v0 has no top-level error: every partition carries it
                resp["replica_election_results"] = [
                    {"topic": t["topic"], "partition_result": [
                        {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]]}
                    for t in body.get("topic_partitions") or []]
            self._respond(request, header, resp)

        etype = body.get("election_type", 0)
        if etype not in (0, 1):
            return fail(InvalidRequestError.code)
        if controller is None or not controller.is_active:
            return fail(NotControllerError.code)
        wanted = body.get("topic_partitions")
        tps = None if wanted is None else [(t["topic"], p) for t in wanted for p in t["partitions"]]
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def error_body(code, _msg=None):
            out = dict(resp)
            if version >= 1:
                out["error_code"] = code
            else:
                out["replica_election_results"] = [
                    {"topic": t["topic"], "partition_result": [
                        {"partition_id": p, "error_code": code, "error_message": None} for p in t["partitions"]]}
                    for t in body.get("topic_partitions") or []]
            return out

        def answer(results):
            by_topic: dict[str, list] = {}
            for (t, p), err in sorted(results.items()):
                by_topic.setdefault(t, []).append({"partition_id": p, "error_code": NONE if err is None else err.code,
                                                   "error_message": None if err is None else str(err)})
            return dict(resp, replica_election_results=[{"topic": t, "partition_result": r}
                                                        for t, r in by_topic.items()])

        self._answer_from_controller(request, header, "elect_leaders", (tps, int(etype)), timeout_s, answer,
                                     error_body)

    def handle_alter_partition_reassignments(self, request, header, body):
        """AlterPartitionReassignments v0 (KIP-455; the admin client sends it to the controller):
        NOT_CONTROLLER (top level) unless this broker is the controller; else per partition NONE
        (started, or cancelled for null replicas), UNKNOWN_TOPIC_OR_PARTITION,
        INVALID_REPLICA_ASSIGNMENT or NO_REASSIGNMENT_IN_PROGRESS.  The controller's event thread
        starts the moves; this request thread waits only for that, not for the data to move."""
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "responses": []}

        def fail(code, msg):
            resp.update(error_code=code, error_message=msg)
            self._respond(request, header, resp)

        if controller is None or not controller.is_active:
            return fail(NotControllerError.code, "This is not the correct controller for this cluster.")
        changes = {}
        for t in body.get("topics") or []:
            for p in t.get("partitions") or []:
                changes[(t["name"], p["partition_index"])] = p.get("replicas")
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def answer(results):
            by_topic: dict[str, list] = {}
            for (t, p), err in sorted(results.items()):
                by_topic.setdefault(t, []).append({"partition_index": p,
                                                   "error_code": NONE if err is None else err.code,
                                                   "error_message": None if err is None else str(err)})
            return dict(resp, responses=[{"name": t, "partitions": r} for t, r in by_topic.items()])

        self._answer_from_controller(request, header, "alter_reassignments", (changes,), timeout_s, answer,
                                     lambda code, msg: dict(resp, error_code=code, error_message=msg))

    def handle_list_partition_reassignments(self, request, header, body):
        """ListPartitionReassignments v0 (KIP-455): the controller's reassignments in progress, each
        with its full replica set (target then original replicas), adding and removing replicas;
        null topics: all of them.  NOT_CONTROLLER unless this broker is the controller."""
        from pyklog.broker.errors import NotControllerError

        controller = self.controller
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "topics": []}
        if controller is None or not controller.is_active:
            resp.update(error_code=NotControllerError.code,
                        error_message="This is not the correct controller for this cluster.")
            return self._respond(request, header, resp)
        wanted = body.get("topics")
        tps = None if wanted is None else [(t["name"], p) for t in wanted for p in t.get("partition_indexes") or []]
        timeout_s = max(1.0, min(body.get("timeout_ms", 60000), 300000) / 1000.0)

        def answer(found):
            by_topic: dict[str, list] = {}
            for (t, p), (replicas, adding, removing) in sorted(found.items()):
                by_topic.setdefault(t, []).append({"partition_index": p, "replicas": replicas,
                                                   "adding_replicas": adding, "removing_replicas": removing})
            return dict(resp, topics=[{"name": t, "partitions": r} for t, r in by_topic.items()])

        self._answer_from_controller(request, header, "list_reassignments", (tps,), timeout_s, answer,
                                     lambda code, msg: dict(resp, error_code=code, error_message=msg))

    def _wait_for_partitions(self, name: str, count: int, timeout_s: float) -> bool:
        """Poll this broker's registry cache until ``name`` has ``count`` partitions (request thread)."""
        deadline = time.monotonic() + timeout_s
        while True:
            parts = self.cluster.topic(name, refresh_if_missing=False) or {}
            if len(parts) >= count:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    # ------------------------------------------------------------------ InitProducerId

    def handle_init_producer_id(self, request, header, body):
        """InitProducerId v0-4 (Kafka's handleInitProducerIdRequest).  With a transactional id the
        transaction coordinator answers; v3+ carries the producer's current id and epoch (KIP-360),
        so a producer recovering from an abortable error gets its epoch bumped instead of a new
        identity, and a stale one PRODUCER_FENCED -- INVALID_PRODUCER_EPOCH below v4, which does
        not know that code.  Without a transactional id (an idempotent producer) every request
        gets a new producer id with epoch 0, as in Kafka.  Runs on a request handler thread."""
        resp = {"throttle_time_ms": 0, "error_code": NONE, "producer_id": -1, "producer_epoch": -1}
        if body.get("transactional_id") is not None:
            expected = None
            if header.api_version >= 3 and body.get("producer_id", -1) >= 0:
                expected = (body["producer_id"], body.get("producer_epoch", -1))
            try:
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                resp["producer_id"], resp["producer_epoch"] = self.txn_coordinator.init_producer_id(
                    body["transactional_id"], body.get("transaction_timeout_ms", 60000), expected)
            except PyklogError as e:
                resp["error_code"] = self._txn_error_code(e)
                if resp["error_code"] == _PRODUCER_FENCED and header.api_version < 4:
                    resp["error_code"] = _INVALID_PRODUCER_EPOCH
                log.debug("InitProducerId %r from %s: %s", body["transactional_id"], request.peer, e)
        else:
            try:
                resp["producer_id"] = self.producer_ids.generate_producer_id()
                resp["producer_epoch"] = 0
            except PyklogError as e:
                resp["error_code"] = e.code if e.code != UNKNOWN_SERVER_ERROR else CoordinatorNotAvailableError.code
        self._respond(request, header, resp)

    # ------------------------------------------------------------------ transactions (KIP-98)

    @staticmethod
    def _txn_error_code(e: PyklogError) -> int:
        """Kafka's codes for the transaction APIs: a local failure without a wire code (ZooKeeper
        trouble) is COORDINATOR_NOT_AVAILABLE (retriable); UNKNOWN_SERVER_ERROR stays what it is."""
        if e.code == UNKNOWN_SERVER_ERROR and not isinstance(e, UnknownServerError):
            return CoordinatorNotAvailableError.code
        return e.code

    def handle_add_partitions_to_txn(self, request, header, body):
        """AddPartitionsToTxn v0-2: one error for every partition; partitions of unknown topics get
        UNKNOWN_TOPIC_OR_PARTITION, of internal topics INVALID_TOPIC_EXCEPTION (as Produce: only the
        coordinators write there; AddOffsetsToTxn adds __consumer_offsets) and the others
        OPERATION_NOT_ATTEMPTED (55), as in Kafka."""
        wanted = [(t["name"], p) for t in body["v3_and_below_topics"] for p in t["partitions"]]
        codes: dict[tuple[str, int], int] = {}
        unknown = set()
        for name in {t for t, _ in wanted}:
            try:
                parts = self.cluster.topic(name)
            except PyklogError:
                parts = None
            unknown.update((t, p) for t, p in wanted if t == name and (parts is None or p not in parts))
        internal = {tp for tp in wanted if tp[0] in INTERNAL_TOPICS}
        if unknown or internal:
            codes = {tp: UnknownTopicOrPartitionError.code if tp in unknown else
                     InvalidTopicError.code if tp in internal else 55 for tp in wanted}
        else:
            code = NONE
            try:
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                self.txn_coordinator.add_partitions_to_txn(
                    body["v3_and_below_transactional_id"], body["v3_and_below_producer_id"],
                    body["v3_and_below_producer_epoch"], wanted, version=header.api_version)
            except PyklogError as e:
                code = self._txn_error_code(e)
                log.debug("AddPartitionsToTxn %r: %s", body["v3_and_below_transactional_id"], e)
            codes = {tp: code for tp in wanted}
        results: dict[str, list] = {}
        for t, p in wanted:
            results.setdefault(t, []).append({"partition_index": p, "partition_error_code": codes[(t, p)]})
        self._respond(request, header, {"throttle_time_ms": 0, "results_by_topic_v3_and_below": [
            {"name": t, "results_by_partition": ps} for t, ps in results.items()]})

    def handle_add_offsets_to_txn(self, request, header, body):
        code = NONE
        try:
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            self.txn_coordinator.add_offsets_to_txn(body["transactional_id"], body["producer_id"],
                                                    body["producer_epoch"], body["group_id"],
                                                    version=header.api_version)
        except PyklogError as e:
            code = self._txn_error_code(e)
            log.debug("AddOffsetsToTxn %r: %s", body["transactional_id"], e)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": code})

    def handle_end_txn(self, request, header, body):
        """EndTxn v0-2 from any connection presenting the id's producer id and epoch."""
        code = NONE
        try:
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            self.txn_coordinator.end_txn(body["transactional_id"], body["producer_id"], body["producer_epoch"],
                                         body["committed"], version=header.api_version)
        except PyklogError as e:
            code = self._txn_error_code(e)
            log.debug("EndTxn %r: %s", body["transactional_id"], e)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": code})

    # ------------------------------------------------------------------ group coordination (offsets)

    def handle_find_coordinator(self, request, header, body):
        """FindCoordinator v0-4 (Kafka's handleFindCoordinatorRequest): key type 0 = a group (the
        offset manager's partition leader), 1 = a transactional id (the transaction coordinator).
        v4+ (KIP-699) carries a batch of keys of one type and answers each key on its own (error
        code and message per key).  Runs on a request handler thread; no lock of its own."""
        key_type = body.get("key_type", 0)
        if header.api_version >= 4:
            coordinators = []
            for key in body["coordinator_keys"]:
                result = {"key": key, "node_id": -1, "host": "", "port": -1, "error_code": NONE,
                          "error_message": None}
                try:
                    result["node_id"], (result["host"], result["port"]) = self._find_coordinator(key, key_type)
                except PyklogError as e:
                    result["error_code"], result["error_message"] = e.code, str(e)[:1000]
                coordinators.append(result)
            self._respond(request, header, {"throttle_time_ms": 0, "coordinators": coordinators})
            return
        resp = {"throttle_time_ms": 0, "error_code": NONE, "error_message": None, "node_id": -1,
                "host": "", "port": -1}
        try:
            resp["node_id"], (resp["host"], resp["port"]) = self._find_coordinator(body["key"], key_type)
        except PyklogError as e:
            resp["error_code"] = e.code
            resp["error_message"] = str(e)[:1000]
        self._respond(request, header, resp)

    def _find_coordinator(self, key: str, key_type: int) -> tuple[int, tuple[str, int]]:
        """``(node id, (host, port))`` of the coordinator of ``key``; raises the PyklogError to answer."""
        if key_type == 1:
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            node = self.txn_coordinator.coordinator_for(key)
            addr = self.cluster.live_brokers().get(node) if node is not None else None
            if addr is None:
                raise CoordinatorNotAvailableError(f"the coordinator of transactional id {key!r} is not available")
            return node, addr
        if key_type != 0:
            raise InvalidRequestError(f"unknown coordinator key type {key_type}")
        if self.offsets is None:
            raise CoordinatorNotAvailableError("the offset manager is not running")
        node = self.offsets.coordinator_for(key)
        addr = self.cluster.live_brokers().get(node) if node is not None else None
        if addr is None:
            raise CoordinatorNotAvailableError(f"the coordinator of group {key!r} is not available")
        return node, addr

    def handle_offset_commit(self, request, header, body):
        group = body["group_id"]
        wanted = {}
        stamps: dict = {}  # OffsetCommit v1's per-partition commit timestamp (-1: now), as Kafka
        for t in body["topics"]:
            for p in t["partitions"]:
                wanted[(t["name"], p["partition_index"])] = (
                    p["committed_offset"], p.get("committed_leader_epoch", -1), p.get("committed_metadata") or "")
                stamps[(t["name"], p["partition_index"])] = p.get("commit_timestamp", -1)
        topics_of = body["topics"]

        def respond(codes: dict) -> None:
            topics = []
            for t in topics_of:
                topics.append({"name": t["name"], "partitions": [
                    {"partition_index": p["partition_index"],
                     "error_code": codes.get((t["name"], p["partition_index"]), NONE)} for p in t["partitions"]]})
            if not request.answered:
                self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

        if header.api_version == 0:
            respond(self.zk_offsets.commit(group, wanted))
            return
        try:
            if self.offsets is None:
                raise CoordinatorNotAvailableError("the offset manager is not running")
            if self.groups is not None:  # generation >= 0: a group member's commit (ILLEGAL_GENERATION & co.)
                self.groups.validate_offset_commit(group, body.get("generation_id_or_member_epoch", -1),
                                                   body.get("member_id", ""), body.get("group_instance_id"))
            # one append per distinct timestamp (usually one); answered when every one is replicated
            # (acks=all, OffsetManager.commit_async: from the completing thread, none waits here)
            batches = [(ts, {k: v for k, v in wanted.items() if stamps[k] == ts}) for ts in sorted(set(stamps.values()))]
            if not batches:
                respond({})
                return
            gathered: dict = {}
            remaining = [len(batches)]
            gather_lock = threading.Lock()

            def one_done(codes: dict) -> None:
                with gather_lock:
                    gathered.update(codes)
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    respond(gathered)

            for ts, part in batches:
                try:
                    self.offsets.commit_async(group, part, one_done, commit_timestamp=ts if ts >= 0 else None)
                except PyklogError as e:
                    one_done({k: e.code for k in part})
        except PyklogError as e:
            respond({k: e.code for k in wanted})

    def handle_offset_fetch(self, request, header, body):
        """OffsetFetch v0-9 (Kafka's handleOffsetFetchRequest).  v0 reads ZooKeeper's offsets;
        v1+ the offsets topic.  v7+ RequireStable (KIP-447): a partition for which an open
        transaction holds a pending offset of the group is answered UNSTABLE_OFFSET_COMMIT with
        offset -1 (the client retries until the marker).  v8+ (KIP-709) asks for several groups:
        each group gets its own result, a coordinator error (NOT_COORDINATOR & co.) as that group's
        error code.  v9's member id and epoch (KIP-848) concern consumer-protocol groups only;
        classic groups (all pyklog has) ignore them, as Kafka's ClassicGroup.validateOffsetFetch.
        Runs on a request handler thread; no lock of its own."""
        version = header.api_version
        if version >= 8:
            groups = [self._offset_fetch_group(version, g["group_id"], g.get("topics"),
                                               bool(body.get("require_stable")))
                      for g in body["groups"]]
            self._respond(request, header, {"throttle_time_ms": 0, "groups": groups})
            return
        result = self._offset_fetch_group(version, body["group_id"], body.get("topics"),
                                          version >= 7 and bool(body.get("require_stable")))
        self._respond(request, header, {"throttle_time_ms": 0, "topics": result["topics"],
                                        "error_code": result["error_code"]})

    def _offset_fetch_group(self, version: int, group: str, req_topics, require_stable: bool) -> dict:
        """One group's OffsetFetch result: ``{"group_id", "topics", "error_code"}`` (the v8 group
        layout; v0-7 take its topics and error code)."""
        wanted = None if req_topics is None else [
            (t["name"], p) for t in req_topics for p in t["partition_indexes"]]
        top_error = NONE
        part_error = NONE
        unstable: set = set()
        try:
            if version == 0:
                found = self.zk_offsets.fetch(group, wanted or [])
            else:
                if self.offsets is None:
                    raise CoordinatorNotAvailableError("the offset manager is not running")
                if require_stable:
                    found, unstable = self.offsets.fetch_stable(group, wanted)
                else:
                    found = self.offsets.fetch(group, wanted)
        except PyklogError as e:
            found = {}
            if version >= 2:
                top_error = e.code
            part_error = e.code
            if version >= 8:  # Kafka: the group's error only, no partitions
                return {"group_id": group, "topics": [], "error_code": e.code}
        if wanted is None:
            wanted = sorted(found)
        by_topic: dict[str, list] = {}
        for (t, p) in wanted:
            if (t, p) in unstable:
                by_topic.setdefault(t, []).append({
                    "partition_index": p, "committed_offset": -1, "committed_leader_epoch": -1,
                    "metadata": "", "error_code": UNSTABLE_OFFSET_COMMIT})
                continue
            offset, epoch, metadata = found.get((t, p), (-1, -1, ""))
            by_topic.setdefault(t, []).append({
                "partition_index": p, "committed_offset": offset, "committed_leader_epoch": epoch,
                "metadata": metadata if metadata is not None else "", "error_code": part_error})
        if unstable:
            log.debug("OffsetFetch of group %r: pending transactional offsets on %s", group, sorted(unstable))
        return {"group_id": group, "topics": [{"name": t, "partitions": parts} for t, parts in by_topic.items()],
                "error_code": top_error}

    def handle_txn_offset_commit(self, request, header, body):
        """TxnOffsetCommit v0-3 (Kafka's handleTxnOffsetCommitRequest): a transactional producer's
        consumed offsets, stored pending in the group's ``__consumer_offsets`` partition until the
        transaction's marker (:meth:`broker.coordinator.OffsetManager.commit_transactional`).
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / INVALID_GROUP_ID for every partition;
        OFFSET_METADATA_TOO_LARGE / UNKNOWN_TOPIC_OR_PARTITION per partition.  v3+ (KIP-447) names
        the consumer group member whose offsets these are: a member that is not the group's current
        one gets ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for every partition
        (:meth:`broker.group_coordinator.GroupCoordinator.validate_txn_offset_commit`).  No ACLs: Kafka's
        TRANSACTIONAL_ID WRITE, GROUP READ and TOPIC READ checks always pass."""
        group = body["group_id"]
        wanted = {}
        for t in body["topics"]:
            for p in t["partitions"]:
                wanted[(t["name"], p["partition_index"])] = (
                    p["committed_offset"], p.get("committed_leader_epoch", -1), p.get("committed_metadata") or "")
        try:
            if self.offsets is None:
                raise CoordinatorNotAvailableError("the offset manager is not running")
            if header.api_version >= 3 and self.groups is not None:  # KIP-447: the member's generation
                self.groups.validate_txn_offset_commit(group, body.get("generation_id", -1), body.get("member_id", ""),
                                                       body.get("group_instance_id"))
            # acks=all: answered once the ISR has the batch (OffsetManager.commit_transactional_async)
            self.offsets.commit_transactional_async(group, body["producer_id"], body["producer_epoch"], wanted,
                                                    lambda codes: self._answer_txn_offset_commit(
                                                        request, header, body, codes))
        except PyklogError as e:
            log.debug("TxnOffsetCommit of group %r (transactional id %r) refused: %s", group,
                      body.get("transactional_id"), e)
            self._answer_txn_offset_commit(request, header, body, {k: e.code for k in wanted})

    def _answer_txn_offset_commit(self, request, header, body, codes: dict) -> None:
        """TxnOffsetCommit's response from the per-partition error codes (any thread)."""
        topics = [{"name": t["name"], "partitions": [
            {"partition_index": p["partition_index"],
             "error_code": codes.get((t["name"], p["partition_index"]), NONE)} for p in t["partitions"]]}
            for t in body["topics"]]
        if not request.answered:
            self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    # ------------------------------------------------------------------ WriteTxnMarkers

    def handle_write_txn_markers(self, request, header, body):
        """WriteTxnMarkers v0 (Kafka's handleWriteTxnMarkersRequest): the transaction coordinator
        asks this broker, the leader of the listed partitions, to append each transaction's COMMIT
        or ABORT control batch (:meth:`broker.log.log.Log.append_control_marker`, with the
        partition's leader epoch).  Per partition: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER
        when not led here, the log's INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED, or
        NONE.  After an append, long-polling fetches of the partition are woken (read_committed
        ones see the new last stable offset), and on a ``__consumer_offsets`` partition the
        producer's pending transactional offsets are completed (committed or dropped) -- only
        once the marker is in the log.  Kafka authorises this as CLUSTER_ACTION; without ACLs it
        is accepted from anyone, as here.  Runs on a request handler thread; holds no lock of its own."""
        markers = []
        waits = []  # (partition entry, topic, partition, producer id, commit, ReplicaWait)
        for m in body["markers"]:
            pid = m["producer_id"]
            commit = bool(m["transaction_result"])
            topics = []
            for t in m["topics"]:
                name = t["name"]
                parts = []
                for p in t["partition_indexes"]:
                    code, wait = self._write_marker(name, p, pid, m["producer_epoch"], commit, m["coordinator_epoch"])
                    entry = {"partition_index": p, "error_code": code}
                    parts.append(entry)
                    if code == NONE:
                        waits.append((entry, name, p, pid, commit, wait))
                topics.append({"name": name, "partitions": parts})
            markers.append({"producer_id": pid, "topics": topics})
        self._await_markers(request, header, markers, waits)

    def _await_markers(self, request, header, markers: list, waits: list) -> None:
        """WriteTxnMarkers with acks=all (Kafka's handleWriteTxnMarkersRequest appends with
        requiredAcks -1): each written marker waits for its partition's ISR (no thread waits:
        :class:`~pyklog.broker.server.coordinator_appends.CoordinatorAppends`), then a marker on a
        ``__consumer_offsets`` partition completes the producer's pending offsets there, and the
        response goes out once every marker is settled.  A marker not replicated gets its
        partition's error (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT):
        the marker sender retries it (appending a marker twice is harmless)."""
        remaining = [len(waits)]
        lock = threading.Lock()

        def finish() -> None:
            if not request.answered:
                self._respond(request, header, {"markers": markers})

        if not waits:
            finish()
            return

        def settled(w, error) -> None:
            entry, topic, partition, pid, commit, _ = w
            if error is not None:
                entry["error_code"] = error.code
                log.info("%s marker of producer %d on %s-%d not replicated: %s", "COMMIT" if commit else "ABORT",
                         pid, topic, partition, error)
            elif topic == OFFSETS_TOPIC and self.offsets is not None:
                try:
                    self.offsets.complete_transaction(partition, pid, commit)
                except Exception:  # noqa: BLE001 - the marker is in the log: a reload applies it
                    log.exception("completing the transactional offsets of producer %d on %s-%d failed",
                                  pid, topic, partition)
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                finish()

        for w in waits:
            self.coordinator_appends.await_replicated(w[5], lambda error, w=w: settled(w, error))

    def _write_marker(self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int):
        """Append one transaction marker; returns ``(error code, ReplicaWait | None)``."""
        try:
            rm = self.replica_manager
            lg = rm.leader_log(topic, partition)
            part = rm.partition(topic, partition)
            if part is not None and part.replicated:
                # acks=all: the ISR check and the append under the partition's lock, as a Produce
                with part.lock:
                    if not part.is_leader:
                        raise NotLeaderOrFollowerError(f"broker {self.broker_id} no longer leads {topic}-{partition}")
                    rm.check_enough_replicas(topic, partition)
                    epoch = part.leader_epoch
                    info = lg.append_control_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                                    leader_epoch=epoch)
                wait = ReplicaWait(topic, partition, info.last_offset + 1, epoch)
            else:
                lg.append_control_marker(producer_id, producer_epoch, commit, coordinator_epoch,
                                         leader_epoch=rm.leader_epoch(topic, partition))
                wait = None
        except PyklogError as e:
            log.info("%s marker of producer %d epoch %d on %s-%d refused: %s", "COMMIT" if commit else "ABORT",
                     producer_id, producer_epoch, topic, partition, e)
            return e.code, None
        except Exception:  # noqa: BLE001 - one partition's failure does not fail the others
            log.exception("%s marker of producer %d on %s-%d failed", "COMMIT" if commit else "ABORT",
                          producer_id, topic, partition)
            return UNKNOWN_SERVER_ERROR, None
        self.purgatory.notify((topic, partition), _MARKER_BYTES)
        return NONE, wait

    def handle_group_membership(self, request, header, body):
        """JoinGroup/SyncGroup/Heartbeat/LeaveGroup/ListGroups/DescribeGroups: broker.group_coordinator
        answers now or later (a waiting JoinGroup/SyncGroup holds no handler thread)."""
        if self.groups is None:
            from pyklog.broker.coordinator.group import error_response

            self._respond(request, header, error_response(header.api_key, header.api_version, body,
                                                          CoordinatorNotAvailableError.code))
            return
        respond = lambda resp: self._respond(request, header, resp)  # noqa: E731
        if (header.api_key == ApiKey.JOIN_GROUP and header.api_version >= 7) or (
                header.api_key == ApiKey.SYNC_GROUP and header.api_version >= 5):
            respond = self._with_group_protocol(request, header, body, respond)
            if respond is None:
                return
        elif header.api_key == ApiKey.LIST_GROUPS and header.api_version >= 4:
            respond = self._with_group_states(body, respond)
        self.groups.handle(header.api_key, header.api_version, body, header.client_id, request.peer, respond)

    def _with_group_states(self, body, respond):
        """ListGroups v4+ (KIP-518): each group's state, and only the groups whose state is in the
        request's ``states_filter`` (compared case-insensitively, as Kafka parses them) if any."""
        wanted = {s.lower() for s in body.get("states_filter") or ()}

        def respond_with_states(resp):
            groups = []
            for g in resp.get("groups", ()):
                state = self.groups.group_state(g["group_id"])
                if not wanted or state.lower() in wanted:
                    groups.append(dict(g, group_state=state))
            respond(dict(resp, groups=groups))
        return respond_with_states

    def _with_group_protocol(self, request, header, body, respond):
        """JoinGroup v7+ / SyncGroup v5+ (KIP-559): the responses name the group's protocol type and
        name; a SyncGroup naming another type or name than the group's is answered
        INCONSISTENT_GROUP_PROTOCOL (as Kafka's GroupCoordinator.handleSyncGroup does).  Returns the
        respond function to pass on, or None when the request was answered here."""
        group_id = body["group_id"]
        if header.api_key == ApiKey.SYNC_GROUP:
            summary = self.groups.group_summary(group_id)
            if summary is not None:
                for key, have in (("protocol_type", summary["protocol_type"]), ("protocol_name", summary["protocol"])):
                    want = body.get(key)
                    if want is not None and have is not None and want != have:
                        self._respond(request, header, {"throttle_time_ms": 0, "error_code": 23, "assignment": b""})
                        return None

        def respond_with_protocol(resp):
            if resp.get("error_code") == NONE:
                summary = self.groups.group_summary(group_id) or {}
                resp = dict(resp, protocol_type=summary.get("protocol_type"))
                if header.api_key == ApiKey.SYNC_GROUP:
                    resp["protocol_name"] = summary.get("protocol")
            respond(resp)
        return respond_with_protocol

    # ------------------------------------------------------------------ error responses

    def _error_body(self, api_key: ApiKey, version: int, body: dict, code: int, message: str = "") -> dict | None:
        """A response to ``body`` with ``code`` everywhere an error code fits (None: close instead)."""
        msg = (message or "")[:1000] or None
        if api_key == ApiKey.PRODUCE:
            if body.get("acks") == 0:
                return None
            return {"responses": [{"name": t["name"], "partition_responses": [
                {"index": p["index"], "error_code": code, "base_offset": -1, "error_message": msg}
                for p in t["partition_data"]]} for t in body["topic_data"]]}
        if api_key == ApiKey.FETCH:
            return {"error_code": NONE, "session_id": 0, "responses": [{
                "topic": t.get("topic", ""), "topic_id": t.get("topic_id", ZERO_UUID), "partitions": [
                {"partition_index": p["partition"], "error_code": code, "high_watermark": -1, "records": b""}
                for p in t["partitions"]]} for t in body["topics"]]}
        if api_key == ApiKey.LIST_OFFSETS:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
                for t in body["topics"]]}
        if api_key == ApiKey.METADATA:
            return {"brokers": [], "controller_id": -1, "topics": [
                {"error_code": code, "name": t["name"], "partitions": []} for t in body.get("topics") or []]}
        if api_key == ApiKey.OFFSET_COMMIT:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
                for t in body["topics"]]}
        if api_key == ApiKey.OFFSET_FETCH:
            if version >= 8:
                return {"groups": [{"group_id": g["group_id"], "topics": [], "error_code": code}
                                   for g in body["groups"]]}
            return {"error_code": code, "topics": [{"name": t["name"], "partitions": [
                {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                for p in t["partition_indexes"]]} for t in body.get("topics") or []]}
        if api_key == ApiKey.FIND_COORDINATOR and version >= 4:
            return {"coordinators": [{"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code,
                                      "error_message": msg} for k in body["coordinator_keys"]]}
        if api_key in (ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.API_VERSIONS):
            return {"error_code": code, "error_message": msg, "node_id": -1, "host": "", "port": -1}
        if api_key == ApiKey.TXN_OFFSET_COMMIT:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]]}
                for t in body["topics"]]}
        if api_key == ApiKey.WRITE_TXN_MARKERS:
            return {"markers": [{"producer_id": m["producer_id"], "topics": [{"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": code} for p in t["partition_indexes"]]} for t in m["topics"]]}
                for m in body["markers"]]}
        if api_key == ApiKey.CREATE_TOPICS:
            return {"topics": [{"name": t["name"], "error_code": code, "error_message": msg} for t in body["topics"]]}
        if api_key == ApiKey.DELETE_TOPICS:
            if version >= 6:
                return {"responses": [{"name": t.get("name"), "topic_id": t.get("topic_id") or ZERO_UUID,
                                       "error_code": code, "error_message": msg} for t in body["topics"]]}
            return {"responses": [{"name": n, "error_code": code} for n in body["topic_names"]]}
        if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
            return {"results_by_topic_v3_and_below": [{"name": t["name"], "results_by_partition": [
                {"partition_index": p, "partition_error_code": code} for p in t["partitions"]]}
                for t in body["v3_and_below_topics"]]}
        if api_key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
            return {"error_code": code}
        if api_key == ApiKey.DESCRIBE_CONFIGS:
            return {"results": [{"error_code": code, "error_message": msg, "resource_type": r["resource_type"],
                                 "resource_name": r["resource_name"], "configs": []} for r in body["resources"]]}
        if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
            return {"responses": [{"error_code": code, "error_message": msg, "resource_type": r["resource_type"],
                                   "resource_name": r["resource_name"]} for r in body["resources"]]}
        if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            return {"topics": [{"topic": t["topic"], "partitions": [
                {"partition": p["partition"], "error_code": code} for p in t["partitions"]]}
                for t in body["topics"]]}
        if api_key == ApiKey.DELETE_RECORDS:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": code}
                for p in t["partitions"]]} for t in body["topics"]]}
        if api_key == ApiKey.DESCRIBE_LOG_DIRS:
            return {"error_code": code, "results": []}
        if api_key == ApiKey.DELETE_GROUPS:
            return {"results": [{"group_id": g, "error_code": code} for g in body["groups_names"]]}
        if api_key == ApiKey.OFFSET_DELETE:
            return {"error_code": code, "topics": []}
        if api_key == ApiKey.DESCRIBE_CLUSTER:
            return {"error_code": code, "error_message": msg, "cluster_id": "", "brokers": []}
        if api_key == ApiKey.CREATE_PARTITIONS:
            return {"results": [{"name": t["name"], "error_code": code, "error_message": msg} for t in body["topics"]]}
        if api_key == ApiKey.DESCRIBE_PRODUCERS:
            return {"topics": [{"name": t["name"], "partitions": [
                {"partition_index": p, "error_code": code, "error_message": msg, "active_producers": []}
                for p in t["partition_indexes"]]} for t in body["topics"]]}
        if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
            return {"transaction_states": [{"error_code": code, "transactional_id": tid, "transaction_state": "",
                                            "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                                            "producer_id": -1, "producer_epoch": -1, "topics": []}
                                           for tid in body["transactional_ids"]]}
        if api_key == ApiKey.LIST_TRANSACTIONS:
            return {"error_code": code, "unknown_state_filters": [], "transaction_states": []}
        if api_key == ApiKey.CONTROLLED_SHUTDOWN:
            return {"error_code": code, "remaining_partitions": []}
        if api_key == ApiKey.ELECT_LEADERS:
            return {"error_code": code, "replica_election_results": []}
        if api_key == ApiKey.ALTER_PARTITION_REASSIGNMENTS:
            return {"error_code": code, "error_message": msg, "responses": []}
        if api_key == ApiKey.LIST_PARTITION_REASSIGNMENTS:
            return {"error_code": code, "error_message": msg, "topics": []}
        return None

    # ------------------------------------------------------------------ lifecycle

    def begin_shutdown(self) -> None:
        """Answer every waiting fetch now; later fetches are answered at once."""
        self._shutting_down = True
        self.purgatory.complete_all()
        self.produce_purgatory.complete_all()  # acks=all Produces still waiting: REQUEST_TIMED_OUT
        self.coordinator_appends.shutdown()
        self.replica_manager.shutdown()  # fetcher threads and the ISR task stop before the logs close
        if self.groups is not None:
            self.groups.shutdown()  # waiting JoinGroup/SyncGroup get NOT_COORDINATOR


__all__ = ["INTERNAL_TOPICS", "KafkaApis", "MAX_PARTITIONS_PER_TOPIC"]
