"""Transactions and producer ids (KIP-98): InitProducerId, AddPartitionsToTxn, AddOffsetsToTxn,
EndTxn, TxnOffsetCommit, WriteTxnMarkers, and the read-only transaction admin APIs (KIP-664).

* InitProducerId v0-4 (idempotent producers; producer ids in blocks from ZooKeeper; v3+ KIP-360
  epoch bump of the current producer).  FindCoordinator(key_type=1) is in
  :mod:`~pyklog.broker.server.handlers.groups`; a transactional InitProducerId, AddPartitionsToTxn
  v0-3, AddOffsetsToTxn v0-3 and EndTxn v0-3 go to :class:`broker.coordinator.transaction.TransactionCoordinator`
  (``__transaction_state``); COORDINATOR_NOT_AVAILABLE while it is not running.
* TxnOffsetCommit v0-3 (v3: member and generation checked): a transactional producer's offsets,
  pending in ``__consumer_offsets`` until the transaction's marker
  (:meth:`broker.coordinator.offsets.OffsetManager.commit_transactional`).
* WriteTxnMarkers v0-1: the transaction coordinator's COMMIT/ABORT markers appended to the
  partitions led here; on ``__consumer_offsets`` partitions the pending transactional offsets are
  then completed.
* DescribeProducers v0, DescribeTransactions v0, ListTransactions v0-1 (KIP-664, read-only).

Authorization (Kafka's KafkaApis): a transactional InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit need WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an idempotent InitProducerId needs IDEMPOTENT_WRITE on the
cluster or WRITE on some topic (KIP-679; else CLUSTER_AUTHORIZATION_FAILED); AddPartitionsToTxn WRITE
on each topic (a denied topic's partitions TOPIC_AUTHORIZATION_FAILED, the others
OPERATION_NOT_ATTEMPTED); AddOffsetsToTxn and TxnOffsetCommit READ on the group, TxnOffsetCommit READ
on each topic; WriteTxnMarkers CLUSTER_ACTION (or ALTER) on the cluster; DescribeProducers READ on
each topic; DescribeTransactions DESCRIBE on each transactional id; ListTransactions lists only the
transactional ids the principal may DESCRIBE.

Thread-safety: runs on every request handler thread and holds no lock of its own (the producer id
manager guards its block).  Marker completions run on the coordinator appends' completing threads.
"""

from __future__ import annotations

import logging
import threading

from pyklog.broker.errors import (
    ClusterAuthorizationFailedError,
    CoordinatorNotAvailableError,
    GroupAuthorizationFailedError,
    InvalidTopicError,
    PyklogError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import AclOperation, ResourceType
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper
from pyklog.broker.server.handlers.responses import (
    INTERNAL_TOPICS,
    NONE,
    UNKNOWN_SERVER_ERROR,
    RequestHandlers,
    error_body,
    requested_offsets,
    transaction_state_entry,
)
from pyklog.broker.zk.topics import OFFSETS_TOPIC

log = logging.getLogger(__name__)

_INVALID_PRODUCER_EPOCH = 47  # InitProducerId below v4 answers this for PRODUCER_FENCED (90)
_PRODUCER_FENCED = 90


class TransactionApis(RequestHandlers):
    """The transaction APIs.  ``txn_coordinator`` (:class:`broker.coordinator.transaction.TransactionCoordinator`)
    may be None (COORDINATOR_NOT_AVAILABLE); ``offset_manager`` and ``group_coordinator`` serve
    TxnOffsetCommit and the markers of ``__consumer_offsets``; the replica manager appends each
    marker and its coordinator appends wait for the ISR of each.  ``producer_ids`` (a
    :class:`broker.coordinator.producer_id.ProducerIdManager`, shared with the transaction
    coordinator) gives idempotent producers their ids."""

    def __init__(
        self,
        config,
        cluster,
        replica_manager,
        producer_ids,
        offset_manager=None,
        group_coordinator=None,
        txn_coordinator=None,
        *,
        auth: AuthHelper = ALLOW_ALL,
    ):
        self.auth = auth
        self.broker_id = config.broker_id
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.coordinator_appends = replica_manager.coordinator_appends
        self.offsets = offset_manager
        self.groups = group_coordinator
        self.txn_coordinator = txn_coordinator
        self.producer_ids = producer_ids

    def _may_write_txn(self, request, transactional_id) -> bool:
        return self.auth.authorize(request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, transactional_id)

    def handle_init_producer_id(self, request, header, body):
        """InitProducerId v0-4 (Kafka's handleInitProducerIdRequest).  With a transactional id the
        transaction coordinator answers; v3+ carries the producer's current id and epoch (KIP-360),
        so a producer recovering from an abortable error gets its epoch bumped instead of a new
        identity, and a stale one PRODUCER_FENCED -- INVALID_PRODUCER_EPOCH below v4, which does
        not know that code.  Without a transactional id (an idempotent producer) every request
        gets a new producer id with epoch 0, as in Kafka.  Runs on a request handler thread."""
        resp = {"throttle_time_ms": 0, "error_code": NONE, "producer_id": -1, "producer_epoch": -1}
        auth = self.auth
        if auth.enabled:
            tid = body.get("transactional_id")
            if tid is not None and not self._may_write_txn(request, tid):
                resp["error_code"] = TransactionalIdAuthorizationFailedError.code
            elif (
                tid is None
                and not auth.authorize_cluster(request, AclOperation.IDEMPOTENT_WRITE, log_if_denied=False)
                and not auth.authorize_by_resource_type(request, AclOperation.WRITE, ResourceType.TOPIC)
            ):
                resp["error_code"] = ClusterAuthorizationFailedError.code
            if resp["error_code"] != NONE:
                self._respond(request, header, resp)
                return
        if body.get("transactional_id") is not None:
            expected = None
            if header.api_version >= 3 and body.get("producer_id", -1) >= 0:
                expected = (body["producer_id"], body.get("producer_epoch", -1))
            try:
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                resp["producer_id"], resp["producer_epoch"] = self.txn_coordinator.init_producer_id(
                    body["transactional_id"], body.get("transaction_timeout_ms", 60000), expected
                )
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
        denied: set = set()
        if self.auth.enabled:
            if not self._may_write_txn(request, body["v3_and_below_transactional_id"]):
                self._respond(
                    request,
                    header,
                    {
                        "throttle_time_ms": 0,
                        **error_body(
                            ApiKey.ADD_PARTITIONS_TO_TXN,
                            header.api_version,
                            body,
                            TransactionalIdAuthorizationFailedError.code,
                        ),
                    },
                )
                return
            may_write = self.auth.filter_authorized(
                request, AclOperation.WRITE, ResourceType.TOPIC, (t for t, _ in wanted)
            )
            denied = {tp for tp in wanted if tp[0] not in may_write}
        for name in {t for t, _ in wanted}:
            try:
                parts = self.cluster.topic(name)
            except PyklogError:
                parts = None
            unknown.update((t, p) for t, p in wanted if t == name and (parts is None or p not in parts))
        internal = {tp for tp in wanted if tp[0] in INTERNAL_TOPICS}
        if unknown or internal or denied:
            codes = {
                tp: TopicAuthorizationFailedError.code
                if tp in denied
                else UnknownTopicOrPartitionError.code
                if tp in unknown
                else InvalidTopicError.code
                if tp in internal
                else 55
                for tp in wanted
            }
        else:
            code = NONE
            try:
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                self.txn_coordinator.add_partitions_to_txn(
                    body["v3_and_below_transactional_id"],
                    body["v3_and_below_producer_id"],
                    body["v3_and_below_producer_epoch"],
                    wanted,
                    version=header.api_version,
                )
            except PyklogError as e:
                code = self._txn_error_code(e)
                log.debug("AddPartitionsToTxn %r: %s", body["v3_and_below_transactional_id"], e)
            codes = dict.fromkeys(wanted, code)
        results: dict[str, list] = {}
        for t, p in wanted:
            results.setdefault(t, []).append({"partition_index": p, "partition_error_code": codes[(t, p)]})
        self._respond(
            request,
            header,
            {
                "throttle_time_ms": 0,
                "results_by_topic_v3_and_below": [{"name": t, "results_by_partition": ps} for t, ps in results.items()],
            },
        )

    def handle_add_offsets_to_txn(self, request, header, body):
        code = NONE
        try:
            if not self._may_write_txn(request, body["transactional_id"]):
                raise TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
            if not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, body["group_id"]):
                raise GroupAuthorizationFailedError("Group authorization failed.")
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            self.txn_coordinator.add_offsets_to_txn(
                body["transactional_id"],
                body["producer_id"],
                body["producer_epoch"],
                body["group_id"],
                version=header.api_version,
            )
        except PyklogError as e:
            code = self._txn_error_code(e)
            log.debug("AddOffsetsToTxn %r: %s", body["transactional_id"], e)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": code})

    def handle_end_txn(self, request, header, body):
        """EndTxn v0-2 from any connection presenting the id's producer id and epoch."""
        code = NONE
        try:
            if not self._may_write_txn(request, body["transactional_id"]):
                raise TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
            if self.txn_coordinator is None:
                raise CoordinatorNotAvailableError("the transaction coordinator is not running")
            self.txn_coordinator.end_txn(
                body["transactional_id"],
                body["producer_id"],
                body["producer_epoch"],
                body["committed"],
                version=header.api_version,
            )
        except PyklogError as e:
            code = self._txn_error_code(e)
            log.debug("EndTxn %r: %s", body["transactional_id"], e)
        self._respond(request, header, {"throttle_time_ms": 0, "error_code": code})

    def handle_txn_offset_commit(self, request, header, body):
        """TxnOffsetCommit v0-3 (Kafka's handleTxnOffsetCommitRequest): a transactional producer's
        consumed offsets, stored pending in the group's ``__consumer_offsets`` partition until the
        transaction's marker (:meth:`broker.coordinator.offsets.OffsetManager.commit_transactional`).
        NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS / INVALID_GROUP_ID for every partition;
        OFFSET_METADATA_TOO_LARGE / UNKNOWN_TOPIC_OR_PARTITION per partition.  v3+ (KIP-447) names
        the consumer group member whose offsets these are: a member that is not the group's current
        one gets ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID for every partition
        (:meth:`broker.coordinator.group.GroupCoordinator.validate_txn_offset_commit`).  Authorized as
        the module says: the transactional id's and the group's denial fail every partition, a topic's
        its own partitions."""
        group = body["group_id"]
        wanted = requested_offsets(body)
        if self.auth.enabled:
            code = NONE
            if not self._may_write_txn(request, body["transactional_id"]):
                code = TransactionalIdAuthorizationFailedError.code
            elif not self.auth.authorize(request, AclOperation.READ, ResourceType.GROUP, group):
                code = GroupAuthorizationFailedError.code
            if code != NONE:
                self._answer_txn_offset_commit(request, header, body, dict.fromkeys(wanted, code))
                return
            may_read = self.auth.filter_authorized(
                request, AclOperation.READ, ResourceType.TOPIC, (t for t, _ in wanted)
            )
            denied = {tp: TopicAuthorizationFailedError.code for tp in wanted if tp[0] not in may_read}
            if denied:
                wanted = {tp: v for tp, v in wanted.items() if tp not in denied}
                if not wanted:
                    self._answer_txn_offset_commit(request, header, body, denied)
                    return
                answer = self._answer_txn_offset_commit

                def answer_with_denied(request, header, body, codes):
                    answer(request, header, body, {**codes, **denied})

                return self._txn_offset_commit(request, header, body, group, wanted, answer_with_denied)
        self._txn_offset_commit(request, header, body, group, wanted, self._answer_txn_offset_commit)

    def _txn_offset_commit(self, request, header, body, group, wanted, answer) -> None:
        try:
            if self.offsets is None:
                raise CoordinatorNotAvailableError("the offset manager is not running")
            if header.api_version >= 3 and self.groups is not None:  # KIP-447: the member's generation
                self.groups.validate_txn_offset_commit(
                    group, body.get("generation_id", -1), body.get("member_id", ""), body.get("group_instance_id")
                )
            # acks=all: answered once the ISR has the batch (OffsetManager.commit_transactional_async)
            self.offsets.commit_transactional_async(
                group,
                body["producer_id"],
                body["producer_epoch"],
                wanted,
                lambda codes: answer(request, header, body, codes),
            )
        except PyklogError as e:
            log.debug(
                "TxnOffsetCommit of group %r (transactional id %r) refused: %s", group, body.get("transactional_id"), e
            )
            answer(request, header, body, dict.fromkeys(wanted, e.code))

    def _answer_txn_offset_commit(self, request, header, body, codes: dict) -> None:
        """TxnOffsetCommit's response from the per-partition error codes (any thread)."""
        topics = [
            {
                "name": t["name"],
                "partitions": [
                    {
                        "partition_index": p["partition_index"],
                        "error_code": codes.get((t["name"], p["partition_index"]), NONE),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ]
        if not request.answered:
            self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

    def handle_write_txn_markers(self, request, header, body):
        """WriteTxnMarkers v0 (Kafka's handleWriteTxnMarkersRequest): the transaction coordinator
        asks this broker, the leader of the listed partitions, to append each transaction's COMMIT
        or ABORT control batch (:meth:`broker.log.log.Log.append_control_marker`, with the
        partition's leader epoch).  Per partition: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER
        when not led here, the log's INVALID_PRODUCER_EPOCH / TRANSACTION_COORDINATOR_FENCED, or
        NONE.  After an append, long-polling fetches of the partition are woken (read_committed
        ones see the new last stable offset), and on a ``__consumer_offsets`` partition the
        producer's pending transactional offsets are completed (committed or dropped) -- only
        once the marker is in the log.  Needs CLUSTER_ACTION (or ALTER) on the cluster, as in Kafka,
        else CLUSTER_AUTHORIZATION_FAILED for every partition.  Runs on a request handler thread;
        holds no lock of its own."""
        if not self.auth.authorize_cluster(request, AclOperation.ALTER, log_if_denied=False) and not (
            self.auth.authorize_cluster(request, AclOperation.CLUSTER_ACTION)
        ):
            self._respond(
                request,
                header,
                error_body(ApiKey.WRITE_TXN_MARKERS, header.api_version, body, ClusterAuthorizationFailedError.code),
            )
            return
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
                log.info(
                    "%s marker of producer %d on %s-%d not replicated: %s",
                    "COMMIT" if commit else "ABORT",
                    pid,
                    topic,
                    partition,
                    error,
                )
            elif topic == OFFSETS_TOPIC and self.offsets is not None:
                try:
                    self.offsets.complete_transaction(partition, pid, commit)
                except Exception:  # noqa: BLE001 - the marker is in the log: a reload applies it
                    log.exception(
                        "completing the transactional offsets of producer %d on %s-%d failed", pid, topic, partition
                    )
            with lock:
                remaining[0] -= 1
                last = remaining[0] == 0
            if last:
                finish()

        for w in waits:
            self.coordinator_appends.await_replicated(w[5], lambda error, w=w: settled(w, error))

    def _write_marker(
        self, topic: str, partition: int, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ):
        """Append one transaction marker (:meth:`ReplicaManager.append_transaction_marker`); returns
        ``(error code, ReplicaWait | None)``."""
        try:
            wait = self.replica_manager.append_transaction_marker(
                topic, partition, producer_id, producer_epoch, commit, coordinator_epoch
            )
        except PyklogError as e:
            log.info(
                "%s marker of producer %d epoch %d on %s-%d refused: %s",
                "COMMIT" if commit else "ABORT",
                producer_id,
                producer_epoch,
                topic,
                partition,
                e,
            )
            return e.code, None
        except Exception:  # noqa: BLE001 - one partition's failure does not fail the others
            log.exception(
                "%s marker of producer %d on %s-%d failed",
                "COMMIT" if commit else "ABORT",
                producer_id,
                topic,
                partition,
            )
            return UNKNOWN_SERVER_ERROR, None
        return NONE, wait

    def handle_describe_producers(self, request, header, body):
        """DescribeProducers v0 (Kafka's ``ReplicaManager.activeProducerState``): for each partition
        led here, every producer id its log keeps state for (epoch, last sequence, last timestamp,
        coordinator epoch of its last marker, first offset of its open transaction or -1).  Per
        partition: UNKNOWN_TOPIC_OR_PARTITION / NOT_LEADER_OR_FOLLOWER (only the leader holds a log
        until replication exists) with a message.  Request thread."""
        topics = []
        may_read = self.auth.filter_authorized(
            request, AclOperation.READ, ResourceType.TOPIC, (t["name"] for t in body["topics"])
        )
        for t in body["topics"]:
            parts = []
            for p in t["partition_indexes"]:
                entry = {"partition_index": p, "error_code": NONE, "error_message": None, "active_producers": []}
                try:
                    if t["name"] not in may_read:
                        raise TopicAuthorizationFailedError("Topic authorization failed.")
                    lg = self.replica_manager.leader_log(t["name"], p)
                    entry["active_producers"] = [
                        {
                            "producer_id": pid,
                            "producer_epoch": epoch,
                            "last_sequence": seq,
                            "last_timestamp": ts,
                            "coordinator_epoch": ce,
                            "current_txn_start_offset": txn,
                        }
                        for pid, epoch, seq, ts, ce, txn in lg.active_producers()
                    ]
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
            entry = transaction_state_entry(tid)
            try:
                if not self.auth.authorize(request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid):
                    raise TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
                if self.txn_coordinator is None:
                    raise CoordinatorNotAvailableError("the transaction coordinator is not running")
                d = self.txn_coordinator.describe_transaction(tid)
                by_topic: dict[str, list[int]] = {}
                for topic, partition in d.partitions:
                    by_topic.setdefault(topic, []).append(partition)
                entry.update(
                    transaction_state=d.state,
                    transaction_timeout_ms=d.timeout_ms,
                    transaction_start_time_ms=d.start_time_ms,
                    producer_id=d.producer_id,
                    producer_epoch=d.producer_epoch,
                    topics=[{"topic": t, "partitions": ps} for t, ps in sorted(by_topic.items())],
                )
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
                body["state_filters"], body["producer_id_filters"], body.get("duration_filter", -1)
            )
            resp.update(
                error_code=code,
                unknown_state_filters=unknown,
                transaction_states=[
                    {"transactional_id": tid, "producer_id": pid, "transaction_state": st}
                    for tid, pid, st in listed
                    if self.auth.authorize(
                        request, AclOperation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, tid, log_if_denied=False
                    )
                ],
            )
        self._respond(request, header, resp)
