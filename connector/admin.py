"""AdminClient: the cluster administration calls of Kafka's ``Admin`` over pyklog's ClusterClient.

What the command-line tools need (Kafka's ``kafka.admin`` / ``org.apache.kafka.clients.admin``):

==============================  ==========================================================
groups                          ``list_groups`` (ListGroups to every broker),
                                ``describe_groups`` (DescribeGroups at each coordinator),
                                ``list_group_offsets`` (OffsetFetch), ``alter_group_offsets``
                                (OffsetCommit with generation -1), ``delete_groups`` (DeleteGroups),
                                ``delete_group_offsets`` (OffsetDelete)
offsets                         ``list_offsets`` (ListOffsets: earliest, latest, by timestamp)
topics                          ``create_partitions`` (CreatePartitions), ``delete_records``
                                (DeleteRecords, at each partition leader)
configs                         ``describe_configs`` / ``incremental_alter_configs``
                                (DescribeConfigs / IncrementalAlterConfigs)
transactions                    ``list_transactions`` (ListTransactions to every broker),
                                ``describe_transactions`` (DescribeTransactions at each
                                coordinator), ``describe_producers`` (DescribeProducers at each
                                leader), ``abort_transaction`` (WriteTxnMarkers ABORT at the leader)
==============================  ==========================================================

Every call checks first that the broker advertises the API (ApiVersions) and raises
:class:`UnsupportedVersionError` naming the API and the broker when it does not: a tool against a
broker without the API says so and exits non-zero instead of waiting.  Thread-safe as the
ClusterClient it wraps; it owns that client when it created it.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field
from typing import NamedTuple

from pyklog.broker.errors import (
    PyklogError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pyklog.connector.client import ClusterClient, wire_error
from pyklog.connector.security import as_security

log = logging.getLogger(__name__)

__all__ = [
    "AdminClient",
    "GroupDescription",
    "MemberDescription",
    "GroupListing",
    "decode_consumer_assignment",
    "EARLIEST",
    "LATEST",
    "ProducerState",
    "TransactionDescription",
    "TransactionListing",
]

EARLIEST = -2
LATEST = -1

#: API keys that main's protocol table may not hold yet (the broker side adds them): Kafka's numbers.
(
    DELETE_RECORDS,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    CREATE_PARTITIONS,
    DELETE_GROUPS,
    INCREMENTAL_ALTER_CONFIGS,
    OFFSET_DELETE,
) = 21, 32, 33, 37, 42, 44, 47
#: the transaction admin APIs (KIP-664)
DESCRIBE_PRODUCERS, DESCRIBE_TRANSACTIONS, LIST_TRANSACTIONS = 61, 65, 66


def _api(key: int):
    """The ApiKey member for ``key``, or None when pyklog's codecs do not know the API."""
    try:
        return ApiKey(key)
    except ValueError:
        return None


#: CreateAcls answers these for every creation when the request as a whole is refused
_WHOLE_REQUEST_ACL_ERRORS = {31, 54}  # CLUSTER_AUTHORIZATION_FAILED, SECURITY_DISABLED


def _enum(cls, code: int):
    try:
        return cls(int(code))
    except ValueError:
        return cls.UNKNOWN


def _binding_of(resource: dict, acl: dict) -> AclBinding:
    """An :class:`AclBinding` from a DescribeAcls resource and one of its ACLs (or a DeleteAcls
    matching ACL, which carries both in one dict)."""
    return AclBinding(
        ResourcePattern(
            _enum(ResourceType, resource["resource_type"]),
            resource["resource_name"],
            _enum(PatternType, resource.get("pattern_type", 3)),
        ),
        AccessControlEntry(
            acl["principal"],
            acl["host"],
            _enum(AclOperation, acl["operation"]),
            _enum(AclPermissionType, acl["permission_type"]),
        ),
    )


def _filter_fields(flt: AclBindingFilter) -> dict:
    """DescribeAcls' request / a DeleteAcls filter from an :class:`AclBindingFilter`."""
    return {
        "resource_type_filter": int(flt.pattern.resource_type),
        "resource_name_filter": flt.pattern.name,
        "pattern_type_filter": int(flt.pattern.pattern_type),
        "principal_filter": flt.entry.principal,
        "host_filter": flt.entry.host,
        "operation": int(flt.entry.operation),
        "permission_type": int(flt.entry.permission_type),
    }


@dataclass
class GroupListing:
    group_id: str
    protocol_type: str
    coordinator: int


@dataclass
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list = field(default_factory=list)  # [(topic, partition)]


@dataclass
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    assignment_strategy: str
    coordinator: tuple  # (node id, host, port)
    members: list = field(default_factory=list)


#: Kafka's messages of the DeleteGroups errors (the response carries only the code)
_DELETE_GROUP_REASONS = {
    68: "The group is not empty.",
    69: "The group id does not exist.",
    24: "The configured groupId is invalid.",
}


class TransactionListing(NamedTuple):
    """One ListTransactions row (Kafka's ``TransactionListing``) plus the broker that answered it."""

    transactional_id: str
    producer_id: int
    state: str  # Kafka's state name: "Ongoing", "PrepareAbort", "CompleteCommit", ...
    coordinator: int


class TransactionDescription(NamedTuple):
    """DescribeTransactions of one id (Kafka's ``TransactionDescription``)."""

    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    start_time_ms: int  # -1: no transaction started
    partitions: list  # sorted [(topic, partition)]


class ProducerState(NamedTuple):
    """One DescribeProducers row (Kafka's ``ProducerState``); -1 means "none"."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int


def decode_consumer_assignment(data: bytes) -> list[tuple[str, int]]:
    """Kafka's ConsumerProtocol Assignment (any version: int16 version, [topic string,
    [int32 partition]], user data ...) -> sorted ``[(topic, partition)]``; empty or unreadable
    data gives []."""
    if not data or len(data) < 6:
        return []
    out = []
    try:
        pos = 2
        (n,) = struct.unpack_from(">i", data, pos)
        pos += 4
        for _ in range(max(n, 0)):
            (tl,) = struct.unpack_from(">h", data, pos)
            pos += 2
            topic = bytes(data[pos : pos + tl]).decode("utf-8")
            pos += tl
            (np_,) = struct.unpack_from(">i", data, pos)
            pos += 4
            for _ in range(max(np_, 0)):
                (p,) = struct.unpack_from(">i", data, pos)
                pos += 4
                out.append((topic, p))
    except (struct.error, UnicodeDecodeError):
        log.debug("unreadable consumer assignment (%d bytes)", len(data))
        return sorted(out)
    return sorted(out)


class AdminClient:
    """Kafka's Admin calls for pyklog's tools.  ``bootstrap_servers`` / ``zookeeper_connect`` as
    :class:`ClusterClient`, or ``client=`` an existing one (not closed by :meth:`close`)."""

    def __init__(
        self,
        bootstrap_servers=None,
        zookeeper_connect: str | None = None,
        *,
        client: ClusterClient | None = None,
        client_id: str = "pyklog-admin",
        request_timeout_ms: int = 30000,
        security=None,
    ):
        self._owns = client is None
        self.client = client or ClusterClient(
            bootstrap_servers,
            zookeeper_connect,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=as_security(security),
        )

    def close(self) -> None:
        if self._owns:
            self.client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- helpers ---------------------------------------------------------------------------------
    def _version(self, conn, key: int, name: str) -> int:
        api = _api(key)
        if api is None or int(key) not in conn.api_versions:
            raise UnsupportedVersionError(
                f"UNSUPPORTED_VERSION: broker {conn.host}:{conn.port} does not support {name} (API key {key})"
            )
        return conn.version_for(api)

    def _brokers(self) -> dict:
        return self.client.metadata(None, refresh=True).brokers

    # -- groups ----------------------------------------------------------------------------------
    def list_groups(self, *, timeout_s: float | None = None) -> list[GroupListing]:
        """ListGroups on every broker of the cluster: each broker answers the groups it coordinates."""
        out = {}
        for node in sorted(self._brokers()):

            def attempt(node=node):
                resp = self.client.send_to(node, ApiKey.LIST_GROUPS, {})
                code = int(resp.get("error_code", 0))
                if code:
                    raise error_for_code(code, f"ListGroups on broker {node}")
                return resp

            resp = self.client.retrying(f"ListGroups({node})", attempt, timeout_s)
            for g in resp.get("groups") or []:
                out[g["group_id"]] = GroupListing(g["group_id"], g.get("protocol_type") or "", node)
        return [out[k] for k in sorted(out)]

    def describe_groups(self, groups, *, timeout_s: float | None = None) -> dict[str, GroupDescription]:
        """DescribeGroups at each group's coordinator -> ``{group: GroupDescription}`` (state
        ``Dead`` for a group the coordinator does not know, as Kafka)."""
        out = {}
        for g in groups:

            def call(node, conn, g=g):
                resp = conn.request(ApiKey.DESCRIBE_GROUPS, {"groups": [g], "include_authorized_operations": False})
                entry = (resp.get("groups") or [{}])[0]
                code = int(entry.get("error_code", 0))
                if code:
                    raise error_for_code(code, f"DescribeGroups {g!r}")
                host, port = self.client.broker_address(node)
                members = [
                    MemberDescription(
                        m["member_id"],
                        m.get("group_instance_id"),
                        m.get("client_id", ""),
                        m.get("client_host", ""),
                        decode_consumer_assignment(m.get("member_assignment") or b"")
                        if entry.get("protocol_type") in ("consumer", "")
                        else [],
                    )
                    for m in entry.get("members") or []
                ]
                return GroupDescription(
                    g,
                    entry.get("group_state") or "Dead",
                    entry.get("protocol_type") or "",
                    entry.get("protocol_data") or "",
                    (node, host, port),
                    members,
                )

            out[g] = self.client.coordinator_call(g, "DescribeGroups", call, timeout_s)
        return out

    def list_group_offsets(self, group: str, partitions=None, *, timeout_s: float | None = None) -> dict:
        """OffsetFetch: ``{(t, p): offset}`` of what ``group`` committed (partitions without a
        committed offset left out)."""
        got = self.client.fetch_committed(group, partitions, timeout_s=timeout_s)
        return {tp: off for tp, off in got.items() if off is not None}

    def alter_group_offsets(self, group: str, offsets: dict, *, timeout_s: float | None = None) -> None:
        """OffsetCommit ``{(t, p): offset}`` for an inactive group (generation -1, as Kafka's
        ``alterConsumerGroupOffsets``); an active group answers UNKNOWN_MEMBER_ID and it is raised."""
        self.client.commit_offsets(group, offsets, timeout_s=timeout_s)

    def delete_groups(self, groups, *, timeout_s: float | None = None) -> dict[str, PyklogError | None]:
        """DeleteGroups at each group's coordinator -> ``{group: None | the error}``."""
        out = {}
        for g in groups:

            def call(node, conn, g=g):
                v = self._version(conn, DELETE_GROUPS, "DeleteGroups")
                resp = conn.request(_api(DELETE_GROUPS), {"groups_names": [g]}, v)
                for r in resp.get("results") or []:
                    code = int(r.get("error_code", 0))
                    if code:
                        why = _DELETE_GROUP_REASONS.get(code)
                        return error_for_code(code, f"DeleteGroups {g!r}" + (f": {why}" if why else ""))
                return None

            try:
                out[g] = self.client.coordinator_call(g, "DeleteGroups", call, timeout_s)
            except UnsupportedVersionError:
                raise
            except PyklogError as e:
                out[g] = e
        return out

    def delete_group_offsets(self, group: str, partitions, *, timeout_s: float | None = None):
        """OffsetDelete at the coordinator: ``[(t, p)]`` -> ``(top-level error | None,
        {(t, p): None | the error})``."""
        tps = sorted({(t, int(p)) for t, p in partitions})

        def call(node, conn):
            v = self._version(conn, OFFSET_DELETE, "OffsetDelete")
            topics: dict = {}
            for t, p in tps:
                topics.setdefault(t, []).append({"partition_index": p})
            resp = conn.request(
                _api(OFFSET_DELETE),
                {"group_id": group, "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                v,
            )
            code = int(resp.get("error_code", 0))
            top = error_for_code(code, f"OffsetDelete group {group!r}") if code else None
            if top is not None and top.retriable:
                raise top
            per = {}
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    pc = int(p.get("error_code", 0))
                    per[(t["name"], int(p["partition_index"]))] = (
                        error_for_code(pc, f"{t['name']}-{p['partition_index']}") if pc else None
                    )
            return top, per

        return self.client.coordinator_call(group, "OffsetDelete", call, timeout_s)

    # -- offsets ---------------------------------------------------------------------------------
    def list_offsets(self, specs: dict, *, isolation_level: int = 0, timeout_s: float | None = None) -> dict:
        """``{(t, p): EARLIEST | LATEST | timestamp ms}`` -> ``{(t, p): offset | None}`` (None: no
        record at or after the timestamp)."""
        return self.client.list_offsets(specs, isolation_level=isolation_level, timeout_s=timeout_s)

    def partitions_for(self, topic: str) -> list[int]:
        return self.client.partitions_for(topic)

    # -- topics ----------------------------------------------------------------------------------
    def create_partitions(
        self, counts: dict[str, int], *, validate_only: bool = False, timeout_s: float | None = None
    ) -> None:
        """CreatePartitions at the controller: ``{topic: new total count}``."""
        timeout_ms = int((self.client.request_timeout_s if timeout_s is None else timeout_s) * 1000)

        def call(node, conn):
            v = self._version(conn, CREATE_PARTITIONS, "CreatePartitions")
            resp = conn.request(
                _api(CREATE_PARTITIONS),
                {
                    "topics": [{"name": t, "count": int(n), "assignments": None} for t, n in counts.items()],
                    "timeout_ms": timeout_ms,
                    "validate_only": validate_only,
                },
                v,
            )
            for r in resp.get("results") or []:
                code = int(r.get("error_code", 0))
                if code:
                    raise error_for_code(
                        code, f"CreatePartitions {r.get('name')!r}: {r.get('error_message') or ''}".rstrip(": ")
                    )

        self.client.controller_call("CreatePartitions", call, timeout_s)
        self.client.invalidate()

    def delete_records(self, offsets: dict, *, timeout_s: float | None = None) -> dict:
        """DeleteRecords at each leader: ``{(t, p): offset}`` (-1 = the high watermark) ->
        ``{(t, p): low watermark | the error}``."""
        out: dict = {}
        timeout_ms = int((self.client.request_timeout_s if timeout_s is None else timeout_s) * 1000)
        for node, tps in self.client.by_leader(list(offsets)).items():
            conn = self.client.connection(node)
            v = self._version(conn, DELETE_RECORDS, "DeleteRecords")
            topics: dict = {}
            for t, p in tps:
                topics.setdefault(t, []).append({"partition_index": p, "offset": int(offsets[(t, p)])})
            resp = conn.request(
                _api(DELETE_RECORDS),
                {"topics": [{"name": t, "partitions": ps} for t, ps in topics.items()], "timeout_ms": timeout_ms},
                v,
            )
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = (t["name"], int(p["partition_index"]))
                    code = int(p.get("error_code", 0))
                    out[tp] = (
                        error_for_code(code, f"DeleteRecords {tp[0]}-{tp[1]}")
                        if code
                        else int(p.get("low_watermark", -1))
                    )
        return out

    # -- configs ---------------------------------------------------------------------------------
    # -- SCRAM credentials (KIP-554) -------------------------------------------------------------
    def describe_user_scram_credentials(self, users=None, *, timeout_s: float | None = None) -> dict:
        """DescribeUserScramCredentials: ``{user: [(mechanism name, iterations), ...]}`` of the named
        users (None: every user with a credential); a named user without one raises
        ResourceNotFoundError."""
        from pyklog.broker.security.scram import BY_TYPE_ID

        def attempt():
            conn = self.client.any_connection()
            v = self._version(conn, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "DescribeUserScramCredentials")
            body = {"users": None if users is None else [{"name": u} for u in users]}
            return conn.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, body, v)

        resp = self.client.retrying("DescribeUserScramCredentials", attempt, timeout_s)
        if resp.get("error_code"):
            raise error_for_code(resp["error_code"], resp.get("error_message") or "DescribeUserScramCredentials")
        out = {}
        for r in resp.get("results") or []:
            if r.get("error_code"):
                err = error_for_code(r["error_code"], r.get("error_message") or f"user {r['user']}")
                err.retriable = False
                raise err
            out[r["user"]] = [
                (
                    BY_TYPE_ID[c["mechanism"]].name if c["mechanism"] in BY_TYPE_ID else str(c["mechanism"]),
                    c["iterations"],
                )
                for c in r.get("credential_infos") or []
            ]
        return out

    def alter_user_scram_credentials(self, upsertions=(), deletions=(), *, timeout_s: float | None = None) -> dict:
        """AlterUserScramCredentials: ``upsertions`` = ``[(user, mechanism name, password,
        iterations)]`` (salted here with a random salt: the password never leaves this process),
        ``deletions`` = ``[(user, mechanism name)]``.  Returns ``{user: None or the error}``."""
        from pyklog.broker.security.scram import MECHANISMS, secure_salt

        ups = []
        for user, mech_name, password, iterations in upsertions:
            mech = MECHANISMS[mech_name.upper()]
            salt = secure_salt()
            ups.append(
                {
                    "name": user,
                    "mechanism": mech.type_id,
                    "iterations": iterations,
                    "salt": salt,
                    "salted_password": mech.hi(password.encode("utf-8"), salt, iterations),
                }
            )
        dels = [{"name": u, "mechanism": MECHANISMS[m.upper()].type_id} for u, m in deletions]

        def attempt():
            conn = self.client.any_connection()
            v = self._version(conn, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "AlterUserScramCredentials")
            return conn.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, {"deletions": dels, "upsertions": ups}, v)

        resp = self.client.retrying("AlterUserScramCredentials", attempt, timeout_s)
        return {
            r["user"]: (error_for_code(r["error_code"], r.get("error_message") or "") if r["error_code"] else None)
            for r in resp.get("results") or []
        }

    def describe_configs(self, resources, *, include_synonyms: bool = False, timeout_s: float | None = None) -> dict:
        """DescribeConfigs: ``[(resource_type, name)]`` (2 topic, 4 broker) -> ``{(type, name):
        [config entry dicts: name, value, read_only, config_source, is_sensitive, synonyms]}``.
        Broker resources go to that broker, topic resources to any broker."""
        out: dict = {}
        for rtype, name in resources:

            def attempt(rtype=rtype, name=name):
                if rtype == 4 and name not in ("", None):
                    node = int(name)
                    conn = self.client.connection(node)
                else:
                    conn = self.client.any_connection()
                v = self._version(conn, DESCRIBE_CONFIGS, "DescribeConfigs")
                resp = conn.request(
                    _api(DESCRIBE_CONFIGS),
                    {
                        "resources": [{"resource_type": rtype, "resource_name": str(name), "configuration_keys": None}],
                        "include_synonyms": include_synonyms,
                        "include_documentation": False,
                    },
                    v,
                )
                for r in resp.get("results") or []:
                    code = int(r.get("error_code", 0))
                    if code:
                        err = error_for_code(
                            code, f"DescribeConfigs {name!r}: {r.get('error_message') or ''}".rstrip(": ")
                        )
                        if code == 3:  # a topic that does not exist: final for an admin call
                            err.retriable = False
                        raise err
                    return r.get("configs") or []
                return []

            out[(rtype, str(name))] = self.client.retrying("DescribeConfigs", attempt, timeout_s)
        return out

    def incremental_alter_configs(self, rtype: int, name: str, ops: list, *, timeout_s: float | None = None) -> None:
        """IncrementalAlterConfigs of one resource: ``ops`` = ``[(key, op, value)]`` with op 0 SET,
        1 DELETE, 2 APPEND, 3 SUBTRACT."""

        def attempt():
            if rtype == 4 and name not in ("", None):
                conn = self.client.connection(int(name))
            else:
                conn = self.client.any_connection()
            v = self._version(conn, INCREMENTAL_ALTER_CONFIGS, "IncrementalAlterConfigs")
            resp = conn.request(
                _api(INCREMENTAL_ALTER_CONFIGS),
                {
                    "resources": [
                        {
                            "resource_type": rtype,
                            "resource_name": str(name),
                            "configs": [{"name": k, "config_operation": op, "value": val} for k, op, val in ops],
                        }
                    ],
                    "validate_only": False,
                },
                v,
            )
            for r in resp.get("responses") or []:
                code = int(r.get("error_code", 0))
                if code:
                    raise error_for_code(
                        code, f"IncrementalAlterConfigs {name!r}: {r.get('error_message') or ''}".rstrip(": ")
                    )

        self.client.retrying("IncrementalAlterConfigs", attempt, timeout_s)

    def alter_configs(self, rtype: int, name: str, configs: dict, *, timeout_s: float | None = None) -> None:
        """AlterConfigs (the legacy, whole-set call): the resource's dynamic configs become exactly
        ``configs`` (``{key: value}``)."""

        def attempt():
            if rtype == 4 and name not in ("", None):
                conn = self.client.connection(int(name))
            else:
                conn = self.client.any_connection()
            v = self._version(conn, ALTER_CONFIGS, "AlterConfigs")
            resp = conn.request(
                _api(ALTER_CONFIGS),
                {
                    "resources": [
                        {
                            "resource_type": rtype,
                            "resource_name": str(name),
                            "configs": [{"name": k, "value": val} for k, val in configs.items()],
                        }
                    ],
                    "validate_only": False,
                },
                v,
            )
            for r in resp.get("responses") or []:
                code = int(r.get("error_code", 0))
                if code:
                    raise error_for_code(code, f"AlterConfigs {name!r}: {r.get('error_message') or ''}".rstrip(": "))

        self.client.retrying("AlterConfigs", attempt, timeout_s)

    # -- transactions (KIP-664: Kafka's Admin listTransactions / describeTransactions /
    # describeProducers / abortTransaction, the calls kafka-transactions.sh makes) ----------------
    def list_transactions(
        self,
        *,
        state_filters=(),
        producer_id_filters=(),
        duration_filter_ms: int = -1,
        broker_ids=None,
        timeout_s: float | None = None,
    ) -> dict[int, list[TransactionListing]]:
        """ListTransactions on every broker (or ``broker_ids``): each answers the transactional ids
        it coordinates -> ``{broker id: [TransactionListing]}`` (sorted).  ``duration_filter_ms >= 0``
        needs ListTransactions v1 (KIP-994) and raises UnsupportedVersionError on an older broker.
        A broker's error (COORDINATOR_LOAD_IN_PROGRESS is retried) is raised."""
        out: dict[int, list[TransactionListing]] = {}
        nodes = sorted(self._brokers()) if broker_ids is None else sorted(int(b) for b in broker_ids)
        for node in nodes:

            def attempt(node=node):
                conn = self.client.connection(node)
                v = self._version(conn, LIST_TRANSACTIONS, "ListTransactions")
                if duration_filter_ms >= 0 and v < 1:
                    raise UnsupportedVersionError(
                        f"broker {node} does not support ListTransactions v1 (the duration filter, KIP-994)"
                    )
                resp = conn.request(
                    _api(LIST_TRANSACTIONS),
                    {
                        "state_filters": list(state_filters),
                        "producer_id_filters": [int(p) for p in producer_id_filters],
                        "duration_filter": int(duration_filter_ms),
                    },
                    v,
                )
                code = int(resp.get("error_code", 0))
                if code:
                    raise error_for_code(code, f"ListTransactions on broker {node}")
                return resp

            resp = self.client.retrying(f"ListTransactions({node})", attempt, timeout_s)
            out[node] = sorted(
                TransactionListing(s["transactional_id"], int(s["producer_id"]), s["transaction_state"], node)
                for s in resp.get("transaction_states") or []
            )
        return out

    def describe_transactions(
        self, transactional_ids, *, timeout_s: float | None = None
    ) -> dict[str, TransactionDescription | PyklogError]:
        """DescribeTransactions at each id's transaction coordinator -> ``{id: TransactionDescription
        | the error}`` (TRANSACTIONAL_ID_NOT_FOUND among them; coordinator moves are retried)."""
        out: dict = {}
        for tid in transactional_ids:

            def call(node, conn, tid=tid):
                v = self._version(conn, DESCRIBE_TRANSACTIONS, "DescribeTransactions")
                resp = conn.request(_api(DESCRIBE_TRANSACTIONS), {"transactional_ids": [tid]}, v)
                (s,) = resp["transaction_states"]
                code = int(s.get("error_code", 0))
                if code:
                    err = error_for_code(code, f"DescribeTransactions {tid!r} at broker {node}")
                    if err.retriable:
                        raise err
                    return err
                return TransactionDescription(
                    tid,
                    node,
                    s["transaction_state"],
                    int(s["producer_id"]),
                    int(s["producer_epoch"]),
                    int(s["transaction_timeout_ms"]),
                    int(s["transaction_start_time_ms"]),
                    sorted((t["topic"], int(p)) for t in s.get("topics") or [] for p in t["partitions"]),
                )

            try:
                out[tid] = self.client.coordinator_call(tid, "DescribeTransactions", call, timeout_s, key_type=1)
            except UnsupportedVersionError:
                raise
            except PyklogError as e:
                out[tid] = e
        return out

    def describe_producers(
        self, partitions, *, broker_id: int | None = None, timeout_s: float | None = None
    ) -> dict[tuple, list[ProducerState] | PyklogError]:
        """DescribeProducers at each partition's leader (or at ``broker_id``) -> ``{(t, p):
        [ProducerState] | the error}``."""
        tps = sorted({(t, int(p)) for t, p in partitions})
        out: dict = {}
        if broker_id is None:
            # a partition the cluster does not have fails at once (no leader look-up retried for it)
            md = self.client.metadata(sorted({t for t, _ in tps}), refresh=True)
            for t, p in tps:
                tm = md.topics.get(t)
                if tm is None or tm.error_code or p not in tm.partitions:
                    code = tm.error_code if tm is not None and tm.error_code else UnknownTopicOrPartitionError.code
                    out[(t, p)] = error_for_code(code, f"DescribeProducers {t}-{p}: the cluster has no such partition")
            tps = [tp for tp in tps if tp not in out]
        by_node = {int(broker_id): tps} if broker_id is not None else self.client.by_leader(tps)
        for node, group in by_node.items():
            conn = self.client.connection(node)
            v = self._version(conn, DESCRIBE_PRODUCERS, "DescribeProducers")
            topics: dict = {}
            for t, p in group:
                topics.setdefault(t, []).append(p)
            resp = conn.request(
                _api(DESCRIBE_PRODUCERS),
                {"topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]},
                v,
            )
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = (t["name"], int(p["partition_index"]))
                    code = int(p.get("error_code", 0))
                    if code:
                        out[tp] = error_for_code(
                            code,
                            f"DescribeProducers {tp[0]}-{tp[1]} at broker {node}: "
                            f"{p.get('error_message') or ''}".rstrip(": "),
                        )
                    else:
                        out[tp] = [
                            ProducerState(
                                int(a["producer_id"]),
                                int(a["producer_epoch"]),
                                int(a["last_sequence"]),
                                int(a["last_timestamp"]),
                                int(a["coordinator_epoch"]),
                                int(a["current_txn_start_offset"]),
                            )
                            for a in p.get("active_producers") or []
                        ]
        return out

    def abort_transaction(
        self,
        topic: str,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        *,
        timeout_s: float | None = None,
    ) -> None:
        """Kafka's ``Admin.abortTransaction``: an ABORT marker for ``producer_id`` (at
        ``producer_epoch``, ``coordinator_epoch``) written by the partition's leader (WriteTxnMarkers),
        which closes a hanging transaction and lets the last stable offset move on.  The leader's
        error (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED, ...) is raised."""
        tp = (topic, int(partition))

        def attempt():
            node = self.client.leader_for(topic, int(partition), timeout_s=timeout_s)
            conn = self.client.connection(node)
            v = self._version(conn, int(ApiKey.WRITE_TXN_MARKERS), "WriteTxnMarkers")
            resp = conn.request(
                ApiKey.WRITE_TXN_MARKERS,
                {
                    "markers": [
                        {
                            "producer_id": int(producer_id),
                            "producer_epoch": int(producer_epoch),
                            "transaction_result": False,
                            "topics": [{"name": topic, "partition_indexes": [int(partition)]}],
                            "coordinator_epoch": int(coordinator_epoch),
                        }
                    ]
                },
                v,
            )
            for m in resp.get("markers") or []:
                for t in m.get("topics") or []:
                    for p in t.get("partitions") or []:
                        code = int(p.get("error_code", 0))
                        if code:
                            err = error_for_code(code, f"abort of producer {producer_id} on {tp[0]}-{tp[1]}")
                            if err.retriable:
                                self.client.invalidate()
                            raise err

        self.client.retrying(f"AbortTransaction({tp[0]}-{tp[1]})", attempt, timeout_s)

    # -- partition reassignment (KIP-455) ---------------------------------------------------------
    # -- ACLs ------------------------------------------------------------------------------------
    def create_acls(self, bindings, *, timeout_s: float | None = None) -> list[PyklogError | None]:
        """CreateAcls (API key 30) at any broker: one result per :class:`AclBinding` (None: made;
        else the error, e.g. INVALID_REQUEST).  A whole-request error (CLUSTER_AUTHORIZATION_FAILED,
        SECURITY_DISABLED) is raised."""
        bindings = list(bindings)
        creations = [
            {
                "resource_type": int(b.pattern.resource_type),
                "resource_name": b.pattern.name,
                "resource_pattern_type": int(b.pattern.pattern_type),
                "principal": b.entry.principal,
                "host": b.entry.host,
                "operation": int(b.entry.operation),
                "permission_type": int(b.entry.permission_type),
            }
            for b in bindings
        ]

        def attempt():
            conn = self.client.any_connection()
            v = self._version(conn, ApiKey.CREATE_ACLS, "CreateAcls")
            if v == 0 and any(b.pattern.pattern_type != PatternType.LITERAL for b in bindings):
                raise UnsupportedVersionError("the broker's CreateAcls v0 cannot create PREFIXED ACLs")
            resp = conn.request(ApiKey.CREATE_ACLS, {"creations": creations}, v)
            out: list[PyklogError | None] = []
            for r in resp.get("results") or []:
                code = int(r.get("error_code", 0))
                err = wire_error(code, f"CreateAcls: {r.get('error_message') or ''}") if code else None
                if err is not None and code in _WHOLE_REQUEST_ACL_ERRORS:
                    raise err
                out.append(err)
            return out

        return self.client.retrying("CreateAcls", attempt, timeout_s)

    def describe_acls(self, flt: AclBindingFilter, *, timeout_s: float | None = None) -> list[AclBinding]:
        """DescribeAcls (API key 29) at any broker: the ACLs ``flt`` selects; an error is raised."""
        body = _filter_fields(flt)

        def attempt():
            conn = self.client.any_connection()
            v = self._version(conn, ApiKey.DESCRIBE_ACLS, "DescribeAcls")
            resp = conn.request(ApiKey.DESCRIBE_ACLS, body, v)
            code = int(resp.get("error_code", 0))
            if code:
                raise wire_error(code, f"DescribeAcls: {resp.get('error_message') or ''}")
            return sorted(_binding_of(r, a) for r in resp.get("resources") or [] for a in r.get("acls") or [])

        return self.client.retrying("DescribeAcls", attempt, timeout_s)

    def delete_acls(self, filters, *, timeout_s: float | None = None) -> list[list[AclBinding]]:
        """DeleteAcls (API key 31) at any broker: per filter, the ACLs it removed.  An error (of the
        request or of a filter) is raised."""
        filters = list(filters)

        def attempt():
            conn = self.client.any_connection()
            v = self._version(conn, ApiKey.DELETE_ACLS, "DeleteAcls")
            resp = conn.request(ApiKey.DELETE_ACLS, {"filters": [_filter_fields(f) for f in filters]}, v)
            out = []
            for r in resp.get("filter_results") or []:
                code = int(r.get("error_code", 0))
                if code:
                    raise wire_error(code, f"DeleteAcls: {r.get('error_message') or ''}")
                out.append(sorted(_binding_of(m, m) for m in r.get("matching_acls") or []))
            return out

        return self.client.retrying("DeleteAcls", attempt, timeout_s)

    def alter_partition_reassignments(
        self, reassignments: dict, *, timeout_s: float | None = None
    ) -> dict[tuple[str, int], PyklogError | None]:
        """AlterPartitionReassignments (API key 45) at the controller: ``{(topic, partition): [target
        replicas] or None (cancel)}`` -> ``{(topic, partition): None (accepted) or the error}``
        (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS, UNKNOWN_TOPIC_OR_PARTITION).  A
        top-level error (NOT_CONTROLLER is retried on the new controller) is raised.  Runs on the
        caller's thread; returns once the controller has started the moves, not when they are done."""
        timeout_ms = int((self.client.request_timeout_s if timeout_s is None else timeout_s) * 1000)
        by_topic: dict[str, list] = {}
        for (t, p), r in sorted(reassignments.items()):
            by_topic.setdefault(t, []).append(
                {"partition_index": int(p), "replicas": None if r is None else [int(b) for b in r]}
            )

        def call(node, conn):
            v = self._version(conn, ApiKey.ALTER_PARTITION_REASSIGNMENTS, "AlterPartitionReassignments")
            resp = conn.request(
                ApiKey.ALTER_PARTITION_REASSIGNMENTS,
                {"timeout_ms": timeout_ms, "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
                v,
            )
            code = int(resp.get("error_code", 0))
            if code:
                raise error_for_code(code, f"AlterPartitionReassignments: {resp.get('error_message') or ''}")
            out = {}
            for t in resp.get("responses") or []:
                for p in t.get("partitions") or []:
                    c = int(p.get("error_code", 0))
                    out[(t["name"], int(p["partition_index"]))] = (
                        error_for_code(c, p.get("error_message") or "") if c else None
                    )
            return out

        result = self.client.controller_call("AlterPartitionReassignments", call, timeout_s)
        self.client.invalidate()
        return result

    def list_partition_reassignments(
        self, partitions=None, *, timeout_s: float | None = None
    ) -> dict[tuple[str, int], dict[str, list[int]]]:
        """ListPartitionReassignments (API key 46) at the controller: the reassignments in progress
        (of ``partitions`` [(topic, partition)] only, if given) as ``{(topic, partition): {"replicas",
        "adding_replicas", "removing_replicas"}}``."""
        timeout_ms = int((self.client.request_timeout_s if timeout_s is None else timeout_s) * 1000)
        topics = None
        if partitions is not None:
            grouped: dict[str, list[int]] = {}
            for t, p in partitions:
                grouped.setdefault(t, []).append(int(p))
            topics = [{"name": t, "partition_indexes": ps} for t, ps in sorted(grouped.items())]

        def call(node, conn):
            v = self._version(conn, ApiKey.LIST_PARTITION_REASSIGNMENTS, "ListPartitionReassignments")
            resp = conn.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": timeout_ms, "topics": topics}, v)
            code = int(resp.get("error_code", 0))
            if code:
                raise error_for_code(code, f"ListPartitionReassignments: {resp.get('error_message') or ''}")
            return {
                (t["name"], int(p["partition_index"])): {
                    "replicas": list(p["replicas"]),
                    "adding_replicas": list(p["adding_replicas"]),
                    "removing_replicas": list(p["removing_replicas"]),
                }
                for t in resp.get("topics") or []
                for p in t.get("partitions") or []
            }

        return self.client.controller_call("ListPartitionReassignments", call, timeout_s)
