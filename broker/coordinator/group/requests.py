"""The group membership APIs on the wire: a decoded JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups or DescribeGroups body in, a call of the :class:`~pyklog.broker.coordinator.group.coordinator.GroupCoordinator`'s
public methods, and the response body out (Kafka's ``KafkaApis.handleJoinGroupRequest`` & co.).
What depends on the request version lives here (v1+ rebalance timeout, v4+ MEMBER_ID_REQUIRED, the
v3+ LeaveGroup batch, KIP-800's client reasons, logged); the protocol itself is the coordinator's.

Pure translation, no state of its own; :func:`handle_request` runs on the request handler thread
that calls :meth:`GroupCoordinator.handle <pyklog.broker.coordinator.group.coordinator.GroupCoordinator.handle>`.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pyklog.broker.coordinator.group.metadata import Respond, join_result, sync_result
from pyklog.broker.errors import PyklogError
from pyklog.broker.protocol import ApiKey

if TYPE_CHECKING:
    from pyklog.broker.coordinator.group.coordinator import GroupCoordinator

log = logging.getLogger(__name__)

UNKNOWN_SERVER_ERROR = -1

#: the APIs :meth:`GroupCoordinator.handle` answers
GROUP_API_KEYS = frozenset(
    {
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.DESCRIBE_GROUPS,
        ApiKey.LIST_GROUPS,
    }
)


def client_host(peer: str | None) -> str:
    """Kafka's form of the client address (``InetAddress.toString``): ``/127.0.0.1``."""
    if not peer:
        return ""
    host = peer.rpartition(":")[0] if ":" in peer else peer
    return "/" + host.strip("[]")


def error_response(api_key: int, version: int, body: dict, code: int) -> dict:
    """A response body to the group request ``body`` with error ``code`` (e.g. no coordinator running)."""
    api_key = int(api_key)
    if api_key == ApiKey.JOIN_GROUP:
        return join_result(body.get("member_id", ""), code)
    if api_key == ApiKey.SYNC_GROUP:
        return sync_result(code)
    if api_key == ApiKey.HEARTBEAT:
        return {"throttle_time_ms": 0, "error_code": code}
    if api_key == ApiKey.LEAVE_GROUP:
        members = [
            {"member_id": m.get("member_id", ""), "group_instance_id": m.get("group_instance_id"), "error_code": code}
            for m in body.get("members") or []
        ]
        return {"throttle_time_ms": 0, "error_code": code, "members": members}
    if api_key == ApiKey.LIST_GROUPS:
        return {"throttle_time_ms": 0, "error_code": code, "groups": []}
    if api_key == ApiKey.DESCRIBE_GROUPS:
        return {
            "throttle_time_ms": 0,
            "groups": [
                {
                    "error_code": code,
                    "group_id": g,
                    "group_state": "",
                    "protocol_type": "",
                    "protocol_data": "",
                    "members": [],
                }
                for g in body.get("groups") or []
            ],
        }
    raise ValueError(f"api key {api_key} is not a group membership API")


def handle_request(
    coordinator: GroupCoordinator,
    api_key: int,
    version: int,
    body: dict,
    client_id: str | None,
    peer: str | None,
    respond: Respond,
) -> None:
    """Serve one decoded group request with ``coordinator``; ``respond(response_body)`` is called
    now or later (from another thread), exactly once.  Never raises: failures are answered with an
    error (UNKNOWN_SERVER_ERROR for anything not a :class:`PyklogError`)."""
    api_key = int(api_key)
    try:
        if api_key == ApiKey.JOIN_GROUP:
            protocols = [(p["name"], bytes(p.get("metadata") or b"")) for p in body.get("protocols") or []]
            if body.get("reason"):  # v8+ (KIP-800): why the client (re)joins, for the operator
                log.info(
                    "member %r (client %r) joins group %s: client reason: %s",
                    body.get("member_id", ""),
                    client_id,
                    body["group_id"],
                    body["reason"],
                )
            coordinator.join_group(
                body["group_id"],
                body.get("member_id", ""),
                client_id=client_id or "",
                client_host=client_host(peer),
                session_timeout_ms=body["session_timeout_ms"],
                rebalance_timeout_ms=body.get("rebalance_timeout_ms", -1) if version >= 1 else -1,
                protocol_type=body.get("protocol_type", ""),
                protocols=protocols,
                respond=respond,
                require_known_member_id=version >= 4,
                group_instance_id=body.get("group_instance_id"),
            )
        elif api_key == ApiKey.SYNC_GROUP:
            assignments = {a["member_id"]: bytes(a.get("assignment") or b"") for a in body.get("assignments") or []}
            coordinator.sync_group(
                body["group_id"],
                body["generation_id"],
                body["member_id"],
                assignments,
                respond,
                body.get("group_instance_id"),
            )
        elif api_key == ApiKey.HEARTBEAT:
            code = coordinator.heartbeat(
                body["group_id"], body["generation_id"], body["member_id"], body.get("group_instance_id")
            )
            respond({"throttle_time_ms": 0, "error_code": code})
        elif api_key == ApiKey.LEAVE_GROUP:
            if version >= 3:  # v5+ (KIP-800): each member's reason, logged
                members = [
                    (m["member_id"], m.get("group_instance_id"), m.get("reason")) for m in body.get("members") or []
                ]
            else:
                members = [(body.get("member_id", ""), None)]
            top, codes = coordinator.leave_group(body["group_id"], members)
            if version >= 3:
                respond(
                    {
                        "throttle_time_ms": 0,
                        "error_code": top,
                        "members": [
                            {"member_id": m, "group_instance_id": gi, "error_code": c}
                            for (m, gi, _), c in zip(members, codes)
                        ],
                    }
                )
            else:
                respond({"throttle_time_ms": 0, "error_code": top or codes[0], "members": []})
        elif api_key == ApiKey.LIST_GROUPS:
            code, groups = coordinator.list_groups()
            respond(
                {
                    "throttle_time_ms": 0,
                    "error_code": code,
                    "groups": [{"group_id": g, "protocol_type": pt} for g, pt in groups],
                }
            )
        elif api_key == ApiKey.DESCRIBE_GROUPS:
            include_ops = bool(body.get("include_authorized_operations"))
            respond(
                {
                    "throttle_time_ms": 0,
                    "groups": [
                        coordinator.describe_group(g, include_authorized_operations=include_ops) for g in body["groups"]
                    ],
                }
            )
        else:
            raise ValueError(f"api key {api_key} is not a group membership API")
    except Exception as e:  # noqa: BLE001 - answer rather than leave the client waiting
        log.exception("group request (api key %d v%d) failed", api_key, version)
        code = e.code if isinstance(e, PyklogError) else UNKNOWN_SERVER_ERROR
        try:
            respond(error_response(api_key, version, body, code))
        except Exception:  # noqa: BLE001 - answered already
            pass


__all__ = ["GROUP_API_KEYS", "client_host", "error_response", "handle_request"]
