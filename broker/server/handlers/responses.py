"""What every request handler family shares: the error codes and internal topic names they answer
with, how a response is sent, the per-topic grouping of per-partition results, and the error body
of each API (what :meth:`~pyklog.broker.server.apis.KafkaApis.handle` answers when a handler raised).

Pure functions and constants; no state, no locks.  Any thread.
"""

from __future__ import annotations

from pyklog.broker.errors import PyklogError
from pyklog.broker.protocol import ApiKey, encode_response
from pyklog.broker.protocol.schema import ZERO_UUID
from pyklog.broker.zk.topics import OFFSETS_TOPIC

#: Kafka's ``Topic.INTERNAL_TOPICS``: written only by the broker's own coordinators, which append
#: through the log directly (:class:`broker.coordinator.offsets.OffsetManager`), never through Produce.
#: ``__transaction_state`` is written by the transaction coordinator (:mod:`broker.coordinator.transaction`).
TRANSACTION_STATE_TOPIC = "__transaction_state"
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})

UNKNOWN_SERVER_ERROR = -1
NONE = 0
#: Kafka's UNKNOWN_TOPIC_ID (KIP-516): Fetch v13+ / DeleteTopics v6 naming an id no topic has
UNKNOWN_TOPIC_ID = 100
#: CreateTopics refuses more partitions per topic (INVALID_PARTITIONS): a topic's ZooKeeper nodes
#: are written in one multi-op, bounded by ZooKeeper's jute.maxbuffer (1 MiB by default), and a
#: request must not make the broker build billions of assignments.
MAX_PARTITIONS_PER_TOPIC = 10_000


def error_code_of(e: BaseException) -> int:
    """The wire error code of an exception: its Kafka code, UNKNOWN_SERVER_ERROR for anything else."""
    return e.code if isinstance(e, PyklogError) else UNKNOWN_SERVER_ERROR


def respond(request, header, body: dict) -> None:
    """Encode ``body`` as the response to ``header``'s request and send it (any thread)."""
    request.send(encode_response(header.api_key, header.api_version, header.correlation_id, body))


def group_by_topic(results, topic_key: str, partitions_key: str) -> list:
    """``[((topic, partition), entry), ...]`` sorted -> the response's per-topic list
    ``[{topic_key: topic, partitions_key: [entry, ...]}, ...]``, topics in first-seen order."""
    by_topic: dict[str, list] = {}
    for (t, _), entry in results:
        by_topic.setdefault(t, []).append(entry)
    return [{topic_key: t, partitions_key: r} for t, r in by_topic.items()]


def outcome_fields(err: PyklogError | None) -> dict:
    """``error_code`` and ``error_message`` of one partition's outcome (None: success)."""
    return {"error_code": NONE if err is None else err.code, "error_message": None if err is None else str(err)}


class RequestHandlers:
    """Base of the handler families (:mod:`pyklog.broker.server.handlers`): each family's
    ``handle_*(request, header, body)`` translates one API's request into calls on the broker's
    components and their results into the response, nothing else."""

    @staticmethod
    def _respond(request, header, body: dict) -> None:
        respond(request, header, body)


def requested_offsets(body: dict) -> dict[tuple[str, int], tuple[int, int, str]]:
    """OffsetCommit's and TxnOffsetCommit's partitions: (topic, partition) -> (committed offset,
    committed leader epoch or -1, metadata or "")."""
    return {
        (t["name"], p["partition_index"]): (
            p["committed_offset"],
            p.get("committed_leader_epoch", -1),
            p.get("committed_metadata") or "",
        )
        for t in body["topics"]
        for p in t["partitions"]
    }


def transaction_state_entry(transactional_id: str, code: int = NONE) -> dict:
    """DescribeTransactions' entry of one transactional id before (or instead of) its state."""
    return {
        "error_code": code,
        "transactional_id": transactional_id,
        "transaction_state": "",
        "transaction_timeout_ms": 0,
        "transaction_start_time_ms": -1,
        "producer_id": -1,
        "producer_epoch": -1,
        "topics": [],
    }


def error_body(api_key: ApiKey, version: int, body: dict, code: int, message: str = "") -> dict | None:
    """A response to ``body`` with ``code`` everywhere an error code fits (None: close instead)."""
    msg = (message or "")[:1000] or None
    if api_key == ApiKey.PRODUCE:
        if body.get("acks") == 0:
            return None
        return {
            "responses": [
                {
                    "name": t["name"],
                    "partition_responses": [
                        {"index": p["index"], "error_code": code, "base_offset": -1, "error_message": msg}
                        for p in t["partition_data"]
                    ],
                }
                for t in body["topic_data"]
            ]
        }
    if api_key == ApiKey.FETCH:
        return {
            "error_code": NONE,
            "session_id": 0,
            "responses": [
                {
                    "topic": t.get("topic", ""),
                    "topic_id": t.get("topic_id", ZERO_UUID),
                    "partitions": [
                        {"partition_index": p["partition"], "error_code": code, "high_watermark": -1, "records": b""}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ],
        }
    # one error code per requested partition
    if api_key in (ApiKey.LIST_OFFSETS, ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT):
        return {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "error_code": code} for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }
    if api_key == ApiKey.METADATA:
        return {
            "brokers": [],
            "controller_id": -1,
            "topics": [{"error_code": code, "name": t["name"], "partitions": []} for t in body.get("topics") or []],
        }
    if api_key == ApiKey.OFFSET_FETCH:
        if version >= 8:
            return {"groups": [{"group_id": g["group_id"], "topics": [], "error_code": code} for g in body["groups"]]}
        return {
            "error_code": code,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p, "committed_offset": -1, "metadata": "", "error_code": code}
                        for p in t["partition_indexes"]
                    ],
                }
                for t in body.get("topics") or []
            ],
        }
    if api_key == ApiKey.FIND_COORDINATOR and version >= 4:
        return {
            "coordinators": [
                {"key": k, "node_id": -1, "host": "", "port": -1, "error_code": code, "error_message": msg}
                for k in body["coordinator_keys"]
            ]
        }
    if api_key in (ApiKey.FIND_COORDINATOR, ApiKey.INIT_PRODUCER_ID, ApiKey.API_VERSIONS):
        return {"error_code": code, "error_message": msg, "node_id": -1, "host": "", "port": -1}
    if api_key == ApiKey.WRITE_TXN_MARKERS:
        return {
            "markers": [
                {
                    "producer_id": m["producer_id"],
                    "topics": [
                        {
                            "name": t["name"],
                            "partitions": [{"partition_index": p, "error_code": code} for p in t["partition_indexes"]],
                        }
                        for t in m["topics"]
                    ],
                }
                for m in body["markers"]
            ]
        }
    if api_key == ApiKey.CREATE_TOPICS:
        return {"topics": [{"name": t["name"], "error_code": code, "error_message": msg} for t in body["topics"]]}
    if api_key == ApiKey.DELETE_TOPICS:
        if version >= 6:
            return {
                "responses": [
                    {
                        "name": t.get("name"),
                        "topic_id": t.get("topic_id") or ZERO_UUID,
                        "error_code": code,
                        "error_message": msg,
                    }
                    for t in body["topics"]
                ]
            }
        return {"responses": [{"name": n, "error_code": code} for n in body["topic_names"]]}
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        return {
            "results_by_topic_v3_and_below": [
                {
                    "name": t["name"],
                    "results_by_partition": [
                        {"partition_index": p, "partition_error_code": code} for p in t["partitions"]
                    ],
                }
                for t in body["v3_and_below_topics"]
            ]
        }
    if api_key in (ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN):
        return {"error_code": code}
    if api_key == ApiKey.DESCRIBE_CONFIGS:
        return {
            "results": [
                {
                    "error_code": code,
                    "error_message": msg,
                    "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"],
                    "configs": [],
                }
                for r in body["resources"]
            ]
        }
    if api_key in (ApiKey.ALTER_CONFIGS, ApiKey.INCREMENTAL_ALTER_CONFIGS):
        return {
            "responses": [
                {
                    "error_code": code,
                    "error_message": msg,
                    "resource_type": r["resource_type"],
                    "resource_name": r["resource_name"],
                }
                for r in body["resources"]
            ]
        }
    if api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
        return {
            "topics": [
                {
                    "topic": t["topic"],
                    "partitions": [{"partition": p["partition"], "error_code": code} for p in t["partitions"]],
                }
                for t in body["topics"]
            ]
        }
    if api_key == ApiKey.DELETE_RECORDS:
        return {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p["partition_index"], "low_watermark": -1, "error_code": code}
                        for p in t["partitions"]
                    ],
                }
                for t in body["topics"]
            ]
        }
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
        return {
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        {"partition_index": p, "error_code": code, "error_message": msg, "active_producers": []}
                        for p in t["partition_indexes"]
                    ],
                }
                for t in body["topics"]
            ]
        }
    if api_key == ApiKey.DESCRIBE_TRANSACTIONS:
        return {"transaction_states": [transaction_state_entry(tid, code) for tid in body["transactional_ids"]]}
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
    if api_key == ApiKey.DESCRIBE_ACLS:
        return {"error_code": code, "error_message": msg, "resources": []}
    if api_key == ApiKey.CREATE_ACLS:
        return {"results": [{"error_code": code, "error_message": msg} for _ in body["creations"]]}
    if api_key == ApiKey.DELETE_ACLS:
        return {
            "filter_results": [{"error_code": code, "error_message": msg, "matching_acls": []} for _ in body["filters"]]
        }
    return None


__all__ = [
    "INTERNAL_TOPICS",
    "MAX_PARTITIONS_PER_TOPIC",
    "NONE",
    "RequestHandlers",
    "TRANSACTION_STATE_TOPIC",
    "UNKNOWN_SERVER_ERROR",
    "UNKNOWN_TOPIC_ID",
    "error_body",
    "error_code_of",
    "group_by_topic",
    "outcome_fields",
    "respond",
]
