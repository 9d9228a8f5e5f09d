"""Produce, Fetch, ListOffsets and OffsetForLeaderEpoch: the data path of the request handlers.

The Produce and Fetch handlers translate: they check and decode the request, call
:meth:`ReplicaManager.append_records` / :meth:`ReplicaManager.fetch_messages` (which append, read,
track followers and own the purgatories where acks=all Produces and long polls wait), and encode
what the replica manager's callback returns.  What each API does, as seen on the wire:

* Produce v3-9 (record batch v2, appended without decoding records) and v0-2 (v0/v1 message sets,
  up-converted to v2); acks 0 / 1 / -1.  acks=-1 (all) on a replicated partition: NOT_ENOUGH_REPLICAS
  before appending when the ISR is smaller than ``min.insync.replicas``, then the answer waits in the
  replica manager's produce purgatory until the high watermark passes the append (REQUEST_TIMED_OUT after the
  request's timeout_ms, NOT_ENOUGH_REPLICAS_AFTER_APPEND if the ISR shrank below the minimum,
  NOT_LEADER_OR_FOLLOWER if leadership moved); with one replica it is answered like 1.  acks=0 with an
  error closes the connection, as Kafka does, so the producer notices.  Produce to an internal topic
  (``__consumer_offsets``, ``__transaction_state``) gets INVALID_TOPIC_EXCEPTION per partition and
  appends nothing: only the broker's own offset manager writes there, through the log.
  Transactional batches (KIP-98) need the request's ``transactional_id`` (else
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED, as Kafka answers) and a producer id; the log tracks the
  producer's open transaction.
* Fetch v4-16 (v13+: topics by id, KIP-516), record bytes sent with ``os.sendfile`` from a dup of
  the segment's fd; v0-3 down-convert to v0/v1 message sets.  v7+: incremental fetch sessions
  (KIP-227, :mod:`~pyklog.broker.server.fetch_session`): full and incremental fetches, the session
  cache, FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH; sessionless (session id 0, epoch
  -1) fetches are answered in full with session id 0.
  ``max_wait_ms`` / ``min_bytes`` long polls wait in the replica manager's fetch purgatory and
  complete when data arrives or the wait expires, without holding a handler thread.  A follower's
  Fetch (replica_id >= 0) reads up to the log end offset and tells the replica manager the
  follower's position; consumers (replica_id -1) read only below the high watermark (= the log end
  offset on a partition with one replica).  v9+ ``current_leader_epoch`` is fenced for both
  (FENCED_LEADER_EPOCH / UNKNOWN_LEADER_EPOCH, KIP-320).  Every v4+ answer carries the last stable
  offset (the first offset of the oldest open transaction).  isolation_level 1 (READ_COMMITTED)
  reads only up to the last stable offset and answers the aborted transactions overlapping what it
  returns (``Log.aborted_transactions``); v0-3 (no isolation level) read uncommitted, as Kafka.
* ListOffsets v0-8 (v0: the seed's getOffsetsBefore with max_num_offsets; v1+: by timestamp,
  -1 latest = the high watermark, -2 earliest, v7 -3 max timestamp, v8 -4 earliest local).  v2+
  with isolation_level 1: latest is the last stable offset and a timestamp lookup finds only offsets
  below it (Kafka's ``lastFetchableOffset``).
* OffsetForLeaderEpoch v0-4 (``Log.end_offset_for_epoch``).

Authorization (Kafka's KafkaApis): Produce needs WRITE on each topic (else TOPIC_AUTHORIZATION_FAILED
for its partitions) and, for transactional batches, WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition); a consumer's Fetch READ on each topic; a
follower's Fetch CLUSTER_ACTION on the cluster (else every partition TOPIC_AUTHORIZATION_FAILED);
ListOffsets DESCRIBE on each topic; OffsetForLeaderEpoch CLUSTER_ACTION on the cluster or DESCRIBE
on each topic.  A Produce to a missing topic creates it (``auto.create.topics.enable``) only with
CREATE on the cluster or the topic.  Denied partitions get their error and the others are served.

Thread-safety: the handlers run concurrently on every request handler thread; the answers of
delayed operations are encoded on the thread completing them (an appending thread, the timer,
shutdown), through the replica manager's callbacks.  No lock of its own: the replica manager, its
purgatories and the logs guard their own state.  The Fetch v13+
topic-id cache is a dict used without a lock (each get/set is atomic).
"""

from __future__ import annotations

import logging
import os
import time
import uuid

from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidRequiredAcksError,
    NotLeaderOrFollowerError,
    PyklogError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.protocol import ApiKey, FileRegion, encode_response
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.security.acl import AclOperation, ResourceType
from pyklog.broker.server.fetch import FetchParams
from pyklog.broker.server.fetch_session import SessionError
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper
from pyklog.broker.server.handlers.responses import (
    NONE,
    UNKNOWN_SERVER_ERROR,
    UNKNOWN_TOPIC_ID,
    RequestHandlers,
    error_body,
    error_code_of,
)
from pyklog.broker.server.network import OwnedFd
from pyklog.broker.server.produce_validation import has_transactional_batch

log = logging.getLogger(__name__)

#: Fetch v13+: the stand-in name of a topic id no topic has (":" and "/" are never in topic names)
_UNKNOWN_TOPIC_ID_PREFIX = "/unknown-topic-id:"
_CORRUPT_MESSAGE = CorruptRecordError.code
INT32_MAX = 0x7FFFFFFF


class ProduceFetchApis(RequestHandlers):
    """Produce, Fetch, ListOffsets and OffsetForLeaderEpoch of one broker.

    ``replica_manager`` (:class:`~pyklog.broker.server.replica_manager.ReplicaManager`) appends and
    reads the partitions and owns the purgatories where long-polling Fetches and acks=all Produces
    wait; ``dynamic_config`` (or None) gives the leader's replication throttle rate (the quota this
    handler makes and passes to each follower Fetch, as Kafka's KafkaApis does).
    """

    def __init__(self, config, cluster, replica_manager, dynamic_config=None, *, auth: AuthHelper = ALLOW_ALL):
        self.auth = auth
        self.config = config
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.dynamic_config = dynamic_config
        #: Fetch v13+ (flex-data): topic id -> name, checked against the registry on every use
        self._topic_names_by_id: dict = {}
        self._replication_quota = None  # made on first use (_leader_quota)

    def begin_shutdown(self) -> None:
        """From now on Fetches and acks=all Produces are answered at once, never delayed (the
        replica manager's :meth:`~pyklog.broker.server.replica_manager.ReplicaManager.begin_shutdown`)."""
        self.replica_manager.begin_shutdown()

    def handle_produce(self, request, header, body):
        """Produce: the request-wide checks here (acks, the transactional id), then every partition
        handed to :meth:`ReplicaManager.append_records` (internal topics, leadership and
        auto-creation, the records' format and the appends), whose callback (at once, or after an
        acks=all wait) gives the answer."""
        version = header.api_version
        acks = body["acks"]
        responses = []
        failed = False
        ack_error = acks not in (0, 1, -1)
        tx_error = self._check_transactional_produce(body, version)
        if tx_error is None and self.auth.enabled and body.get("transactional_id") is not None:
            if self._has_transactional_batches(body) and not self.auth.authorize(
                request, AclOperation.WRITE, ResourceType.TRANSACTIONAL_ID, body["transactional_id"]
            ):
                tx_error = TransactionalIdAuthorizationFailedError("Transactional Id authorization failed.")
        may_write = self.auth.filter_authorized(
            request, AclOperation.WRITE, ResourceType.TOPIC, (td["name"] for td in body["topic_data"])
        )
        appends = []  # (entry, topic, partition, records): what goes to the replica manager
        for td in body["topic_data"]:
            name = td["name"]
            parts = []
            for pd in td["partition_data"]:
                idx = pd["index"]
                entry = {
                    "index": idx,
                    "error_code": NONE,
                    "base_offset": -1,
                    "log_append_time_ms": -1,
                    "log_start_offset": -1,
                    "record_errors": [],
                    "error_message": None,
                }
                try:
                    if ack_error:
                        raise InvalidRequiredAcksError(f"acks must be -1, 0 or 1, got {acks}")
                    if tx_error is not None:
                        raise tx_error
                    if name not in may_write:
                        raise TopicAuthorizationFailedError("Topic authorization failed.")
                    appends.append((entry, name, idx, pd["records"]))
                except Exception as e:  # noqa: BLE001
                    failed = True
                    self._produce_error(entry, e, name, idx, version)
                parts.append(entry)
            responses.append({"name": name, "partition_responses": parts})

        def answer(results) -> None:
            nonlocal failed
            for (entry, name, idx, _), result in zip(appends, results, strict=True):
                if result.info is not None:
                    entry["base_offset"] = result.info.first_offset
                    entry["log_append_time_ms"] = result.info.log_append_time
                    entry["log_start_offset"] = result.info.log_start_offset
                if result.error is not None:
                    failed = True
                    self._produce_error(entry, result.error, name, idx, version)
            if acks == 0:
                if failed:
                    request.close_connection()  # Kafka closes so an acks=0 producer notices
                else:
                    request.send_nothing()
            elif not request.answered:
                self._respond(request, header, {"responses": responses, "throttle_time_ms": 0})

        def answer_failed(_e) -> None:
            if not request.answered:
                request.close_connection()

        if not appends:
            answer([])
            return
        self.replica_manager.append_records(
            body.get("timeout_ms", 30000),
            acks,
            [(name, idx, records) for _, name, idx, records in appends],
            answer,
            answer_failed,
            produce_version=version,
            may_auto_create=lambda topic: self._may_auto_create(request, topic),
        )
        if not request.answered:
            # appended, waiting for the followers: the connection's next request is handled
            # meanwhile (a client sending one Produce per partition has its waits overlap); the
            # answers still go out in request order
            request.let_next_in()

    @staticmethod
    def _produce_error(entry: dict, e: BaseException, topic: str, partition: int, version: int) -> None:
        """One Produce partition's error into its answer (KIP-467 record errors; CORRUPT_MESSAGE for
        INVALID_RECORD before v8; UNKNOWN_SERVER_ERROR, logged with its traceback, for anything
        unexpected)."""
        if not isinstance(e, PyklogError):
            log.error("produce to %s-%d failed", topic, partition, exc_info=e)
            entry["error_code"] = UNKNOWN_SERVER_ERROR
            entry["error_message"] = f"{type(e).__name__}: {e}"[:1000]
            return
        entry["error_code"] = e.code
        entry["error_message"] = str(e)[:1000]
        if getattr(e, "record_errors", None):  # a per-record rule refused (KIP-467)
            entry["record_errors"] = [{"batch_index": i, "batch_index_error_message": m} for i, m in e.record_errors]
            if version < 8:  # INVALID_RECORD is unknown before v8: CORRUPT_MESSAGE
                entry["error_code"] = _CORRUPT_MESSAGE
        if e.code != UnknownTopicOrPartitionError.code and e.code != NotLeaderOrFollowerError.code:
            log.debug("produce to %s-%d failed: %s", topic, partition, e)

    @staticmethod
    def _check_transactional_produce(body, version: int) -> PyklogError | None:
        """Kafka's KafkaApis.handleProduceRequest: a request holding transactional batches must name
        its transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition, as
        Kafka answers when the id is missing or not authorised).  A transactional id with
        non-transactional batches is accepted, as in Kafka.  Runs on the request handler thread;
        reads only the batch headers (the log validates the rest)."""
        if version < 3 or body.get("transactional_id") is not None:
            return None  # v0-2 message sets have no transactional bit
        if ProduceFetchApis._has_transactional_batches(body):
            return TransactionalIdAuthorizationFailedError(
                "transactional record batches need the request's transactional_id"
            )
        return None

    @staticmethod
    def _has_transactional_batches(body) -> bool:
        return any(has_transactional_batch(pd["records"]) for td in body["topic_data"] for pd in td["partition_data"])

    def _may_auto_create(self, request, topic: str) -> bool:
        """Creating a topic for a Produce needs what Metadata's auto-creation needs: CREATE on the
        cluster or on the topic (else the partition stays UNKNOWN_TOPIC_OR_PARTITION)."""
        if request is None or not self.auth.enabled:
            return True
        return self.auth.authorize_cluster(request, AclOperation.CREATE, log_if_denied=False) or self.auth.authorize(
            request, AclOperation.CREATE, ResourceType.TOPIC, topic
        )

    def handle_fetch(self, request, header, body):
        """Fetch: the request (v13+: topic ids resolved to names) handed to
        :meth:`ReplicaManager.fetch_messages`, whose callback (at once, or when a long poll
        completes) gives the per-partition results this encodes: topic ids, record bytes as
        ``sendfile`` file regions (v4+) or down-converted message sets (v0-3)."""
        version = header.api_version
        if version >= 13:  # KIP-516: topics by id (flex-data)
            for t in body["topics"]:
                t["topic"] = self._fetch_topic_name(t["topic_id"])
            for t in body.get("forgotten_topics_data") or ():
                t["topic"] = self._fetch_topic_name(t["topic_id"])
        if version >= 7 and (body.get("session_id", 0) != 0 or body.get("session_epoch", -1) != -1):
            self._handle_session_fetch(request, header, body)
            return
        fetch_infos = [
            (
                t["topic"],
                [
                    (p["partition"], p["fetch_offset"], p["partition_max_bytes"], p.get("current_leader_epoch", -1))
                    for p in t["partitions"]
                ],
            )
            for t in body["topics"]
        ]
        denied: list = []  # (topic, [partition, ...]) answered TOPIC_AUTHORIZATION_FAILED
        if self.auth.enabled:
            if body.get("replica_id", -1) >= 0:  # a follower: the cluster's CLUSTER_ACTION
                if not self.auth.authorize_cluster(request, AclOperation.CLUSTER_ACTION):
                    denied = [(t, [p[0] for p in parts]) for t, parts in fetch_infos]
                    fetch_infos = []
            else:
                names = [t for t, _ in fetch_infos if not t.startswith(_UNKNOWN_TOPIC_ID_PREFIX)]
                may_read = self.auth.filter_authorized(request, AclOperation.READ, ResourceType.TOPIC, names)
                denied = [
                    (t, [p[0] for p in parts])
                    for t, parts in fetch_infos
                    if t not in may_read and not t.startswith(_UNKNOWN_TOPIC_ID_PREFIX)
                ]
                fetch_infos = [
                    (t, parts) for t, parts in fetch_infos if t in may_read or t.startswith(_UNKNOWN_TOPIC_ID_PREFIX)
                ]
            if not fetch_infos:
                self._send_fetch(request, header, [], denied)
                return
        params = FetchParams(
            request_version=version,
            replica_id=body.get("replica_id", -1),
            max_wait_ms=body["max_wait_ms"],
            min_bytes=body["min_bytes"],
            max_bytes=body.get("max_bytes", INT32_MAX),
            isolation_level=body.get("isolation_level", 0),
        )
        self.replica_manager.fetch_messages(
            params,
            fetch_infos,
            self._leader_quota() if params.is_follower else None,
            lambda results: self._send_fetch(request, header, results, denied),
            lambda e: self._fetch_failed(request, header, fetch_infos, e),
        )

    def _handle_session_fetch(self, request, header, body) -> None:
        """A Fetch v7+ in a fetch session (KIP-227, :mod:`~pyklog.broker.server.fetch_session`): a
        full fetch that opens one, or an incremental fetch that reads only what changed and answers
        only the partitions with something new.  An unknown session or a wrong epoch is the whole
        answer's error (FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH, no partitions).
        Authorization as a sessionless Fetch, for the partitions read each time."""
        version = header.api_version
        replica_id = body.get("replica_id", -1)
        requested = {
            (t["topic"], p["partition"]): (
                p["fetch_offset"],
                p["partition_max_bytes"],
                p.get("current_leader_epoch", -1),
                p.get("log_start_offset", -1),
            )
            for t in body["topics"]
            for p in t["partitions"]
        }
        forgotten = [(t["topic"], p) for t in body.get("forgotten_topics_data") or () for p in t["partitions"]]
        now_ms = int(time.monotonic() * 1000)
        try:
            context = self.replica_manager.fetch_sessions.new_context(
                body.get("session_id", 0),
                body.get("session_epoch", -1),
                requested,
                forgotten,
                replica_id >= 0,
                replica_id,
                now_ms,
            )
        except SessionError as e:
            log.debug("fetch session refused: %s", e)
            self._respond(
                request, header, {"throttle_time_ms": 0, "error_code": e.code, "session_id": 0, "responses": []}
            )
            return
        params = FetchParams(
            request_version=version,
            replica_id=replica_id,
            max_wait_ms=body["max_wait_ms"],
            min_bytes=body["min_bytes"],
            max_bytes=body.get("max_bytes", INT32_MAX),
            isolation_level=body.get("isolation_level", 0),
        )
        authorize = None
        if self.auth.enabled:
            if params.is_follower:
                if not self.auth.authorize_cluster(request, AclOperation.CLUSTER_ACTION):
                    authorize = lambda infos: ([], [(t, [p[0] for p in parts]) for t, parts in infos])  # noqa: E731
            else:

                def authorize(infos):
                    names = [t for t, _ in infos if not t.startswith(_UNKNOWN_TOPIC_ID_PREFIX)]
                    may_read = self.auth.filter_authorized(request, AclOperation.READ, ResourceType.TOPIC, names)
                    ok = [(t, ps) for t, ps in infos if t in may_read or t.startswith(_UNKNOWN_TOPIC_ID_PREFIX)]
                    allowed = {t for t, _ in ok}
                    denied = [(t, [p[0] for p in ps]) for t, ps in infos if t not in allowed]
                    return ok, denied

        read_committed = params.read_committed

        def answer(results, denied) -> None:
            session_id, results = context.finish(results, read_committed, int(time.monotonic() * 1000))
            self._send_fetch(request, header, results, denied, session_id=session_id)

        self.replica_manager.fetch_messages(
            params,
            None,
            self._leader_quota() if params.is_follower else None,
            answer,
            lambda e: self._fetch_failed(request, header, context.plan(), e),
            context=context,
            authorize=authorize,
        )

    def _fetch_failed(self, request, header, fetch_infos, e: BaseException) -> None:
        """A delayed Fetch could not be completed: answer the error for every partition (or close
        the connection if even that fails)."""
        if request.answered:
            return
        try:
            err = error_body(
                ApiKey.FETCH,
                header.api_version,
                {
                    "topics": [
                        {"topic": t, "partitions": [{"partition": p[0]} for p in parts]} for t, parts in fetch_infos
                    ]
                },
                error_code_of(e),
                str(e),
            )
            self._respond(request, header, err)
        except Exception:  # noqa: BLE001
            request.close_connection()

    def _leader_quota(self):
        """The leader's replication throttle (:class:`~pyklog.broker.server.replication_quota.
        LeaderReplicationQuota`), made on first use from the dynamic broker config and the topic
        configs.  Request handler threads."""
        q = self._replication_quota
        if q is None:
            from pyklog.broker.server.replication_quota import RATE_CONFIG, LeaderReplicationQuota

            def rate():
                dyn = self.dynamic_config
                return dyn.effective_props().get(RATE_CONFIG) if dyn is not None else None

            q = self._replication_quota = LeaderReplicationQuota(
                self.replica_manager.broker_id, rate, self.cluster.topic_config
            )
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
                t["topic_id"] = uuid.UUID(name[len(_UNKNOWN_TOPIC_ID_PREFIX) :])
                for entry in t["partitions"]:
                    entry["error_code"] = UNKNOWN_TOPIC_ID
            else:
                t["topic_id"] = self.cluster.topic_id(name) or ZERO_UUID

    def _send_fetch(self, request, header, results, denied=(), session_id: int = 0) -> None:
        """Encode and send the answer to a Fetch from :meth:`ReplicaManager.fetch_messages`' results:
        v13+ topic ids, record bytes as a ``sendfile`` region of a dup of the segment's fd (v4+) or
        down-converted to v0/v1 message sets (v0-3).  Any thread (the callback's)."""
        version = header.api_version
        responses = []
        for name, parts in results:
            out = []
            for p, d in parts:
                aborted = d.aborted_transactions
                out.append(
                    {
                        "partition_index": p,
                        "error_code": NONE if d.error is None else error_code_of(d.error),
                        "high_watermark": d.high_watermark,
                        "last_stable_offset": d.last_stable_offset,
                        "log_start_offset": d.log_start_offset,
                        "aborted_transactions": None
                        if aborted is None
                        else [{"producer_id": pid, "first_offset": first} for pid, first in aborted],
                        "preferred_read_replica": -1,
                        "records": d.records,
                    }
                )
            responses.append({"topic": name, "partitions": out})
        for name, parts in denied:
            responses.append(
                {
                    "topic": name,
                    "partitions": [
                        {
                            "partition_index": p,
                            "error_code": TopicAuthorizationFailedError.code,
                            "high_watermark": -1,
                            "last_stable_offset": -1,
                            "log_start_offset": -1,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": None,
                        }
                        for p in parts
                    ],
                }
            )
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
            chunks = encode_response(
                ApiKey.FETCH,
                version,
                header.correlation_id,
                {"throttle_time_ms": 0, "error_code": NONE, "session_id": session_id, "responses": responses},
            )
        except BaseException:
            for fd in owned:
                fd.close()
            raise
        request.send(chunks)

    @staticmethod
    def _down_convert(sl, magic: int) -> bytes:
        from pyklog.broker.record.convert import batches_to_message_set

        return batches_to_message_set(sl.read_bytes(), magic)

    def handle_list_offsets(self, request, header, body):
        """ListOffsets v0-8: -1 latest (the LSO for READ_COMMITTED), -2 earliest, v7+ -3 the record
        with the largest timestamp (KIP-734), v8+ -4 the earliest local offset (KIP-405; without
        tiered storage the log start offset), else the first record at or after a timestamp.
        The offsets are :meth:`ReplicaManager.fetch_offset_for_timestamp`'s (v0:
        :meth:`ReplicaManager.legacy_fetch_offsets_before`); this translates.  Runs on a request
        handler thread; lock-free reads of the logs."""
        version = header.api_version
        # v2+ READ_COMMITTED: offsets stop at the last stable offset (Kafka's lastFetchableOffset)
        read_committed = version >= 2 and body.get("isolation_level", 0) == 1
        may_describe = self.auth.filter_authorized(
            request, AclOperation.DESCRIBE, ResourceType.TOPIC, (t["name"] for t in body["topics"])
        )
        topics = []
        for t in body["topics"]:
            name = t["name"]
            parts = []
            for pd in t["partitions"]:
                p = pd["partition_index"]
                ts = pd["timestamp"]
                entry = {
                    "partition_index": p,
                    "error_code": NONE,
                    "old_style_offsets": [],
                    "timestamp": -1,
                    "offset": -1,
                    "leader_epoch": -1,
                }
                try:
                    if name not in may_describe:
                        raise TopicAuthorizationFailedError("Topic authorization failed.")
                    rm = self.replica_manager
                    if version == 0:
                        entry["old_style_offsets"] = rm.legacy_fetch_offsets_before(
                            name, p, ts, pd.get("max_num_offsets", 1)
                        )
                    else:
                        entry["offset"], entry["timestamp"] = rm.fetch_offset_for_timestamp(name, p, ts, read_committed)
                    if version >= 4 and entry["offset"] >= 0:
                        entry["leader_epoch"] = rm.leader_epoch(name, p)
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"name": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})

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
        The answer is :meth:`ReplicaManager.last_offset_for_leader_epoch`'s; this translates.  Request
        handler thread; lock-free reads of the log's epoch cache."""
        if self.auth.enabled and not self.auth.authorize_cluster(
            request, AclOperation.CLUSTER_ACTION, log_if_denied=False
        ):
            may_describe = self.auth.filter_authorized(
                request, AclOperation.DESCRIBE, ResourceType.TOPIC, (t["topic"] for t in body["topics"])
            )
        else:
            may_describe = None  # all
        topics = []
        for t in body["topics"]:
            name = t["topic"]
            parts = []
            for pd in t["partitions"]:
                p = pd["partition"]
                entry = {"partition": p, "error_code": NONE, "leader_epoch": -1, "end_offset": -1}
                try:
                    if may_describe is not None and name not in may_describe:
                        raise TopicAuthorizationFailedError("Topic authorization failed.")
                    entry["leader_epoch"], entry["end_offset"] = self.replica_manager.last_offset_for_leader_epoch(
                        name, p, pd.get("current_leader_epoch", -1), pd["leader_epoch"]
                    )
                except PyklogError as e:
                    entry["error_code"] = e.code
                parts.append(entry)
            topics.append({"topic": name, "partitions": parts})
        self._respond(request, header, {"throttle_time_ms": 0, "topics": topics})
