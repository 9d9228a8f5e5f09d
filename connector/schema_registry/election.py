"""Choosing the primary among several registry instances: a group on the pyklog cluster.

As Karapace (and Confluent's Kafka-based leader election) do, every instance joins one group
(``kafkastore.group.id``, default ``schema-registry``) with its own protocol type ``sr``; the group
coordinator picks one member as the group's leader, which reads every member's metadata
(``{"url": ..., "eligible": ...}``, this instance's advertised URL and ``leader.eligibility``),
chooses the primary (the current primary while it is still a member, else the eligible member
with the smallest URL) and hands the answer to every member in SyncGroup.  Members heartbeat every second; when an
instance stops or its session times out, the coordinator starts a rebalance and the members
rejoin, and a new primary is chosen.  While a rebalance is in progress no instance is primary:
writes then answer 50003 until the group settles.

Only the primary writes to the topic (it alone hands out ids and versions); the others forward
writes to the primary's URL.  A new primary reads the topic to its end before it takes writes.

Thread-safe: the answers (:meth:`is_primary`, :meth:`primary_url`) are read under a lock; the
protocol runs on one daemon thread.
"""

from __future__ import annotations

import json
import logging
import threading

from pyklog.broker.errors import PyklogError
from pyklog.broker.protocol import ApiKey
from pyklog.connector.client import ClusterClient

log = logging.getLogger(__name__)

PROTOCOL_TYPE = "sr"
PROTOCOL_NAME = "v0"
_MEMBER_ID_REQUIRED = 79
_REJOIN = {22, 25, 27}  # ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, REBALANCE_IN_PROGRESS


def choose_primary(members: list[tuple[str, dict]], current: str | None = None) -> dict | None:
    """The primary among ``(member id, metadata)``: the ``current`` primary while it is an eligible
    member (a new instance does not take the role over), else the eligible member with the
    smallest URL."""
    eligible = sorted(
        (m.get("url", ""), member_id) for member_id, m in members if m.get("eligible", True) and m.get("url")
    )
    if not eligible:
        return None
    url, member_id = next(((u, mid) for u, mid in eligible if u == current), eligible[0])
    return {"primary": url, "primary_member": member_id}


class GroupElection:
    """See the module docstring.  ``on_primary()`` runs on the election thread each time this
    instance becomes the primary, before it answers ``is_primary()`` true."""

    def __init__(
        self,
        bootstrap_servers,
        group_id: str,
        url: str,
        *,
        eligible: bool = True,
        security=None,
        session_timeout_ms: int = 10000,
        heartbeat_interval_ms: int = 1000,
        on_primary=None,
    ):
        self.group_id = group_id
        self.url = url
        self.eligible = eligible
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_s = heartbeat_interval_ms / 1000.0
        self.on_primary = on_primary
        self.client = ClusterClient(
            bootstrap_servers,
            client_id="pyklog-schema-registry-election",
            request_timeout_ms=session_timeout_ms + 20000,
            security=security,
        )
        self._lock = threading.Lock()
        self._primary: str | None = None
        self._last_primary: str | None = None
        self._member_id = ""
        self._generation = -1
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="pyklog-schema-registry-election", daemon=True)

    def start(self) -> GroupElection:
        self._thread.start()
        return self

    def is_primary(self) -> bool:
        with self._lock:
            return self._primary == self.url

    def primary_url(self) -> str | None:
        with self._lock:
            return self._primary

    def _set_primary(self, url: str | None) -> None:
        with self._lock:
            changed = url != self._primary
            self._primary = url
            if url is not None:
                self._last_primary = url  # what the next election keeps, while it is a member
        if changed:
            log.info("primary: %s%s", url, " (this instance)" if url == self.url else "")

    # -- the protocol ------------------------------------------------------------------------------
    def _call(self, api: int, body: dict, version: int) -> dict:
        return self.client.coordinator_attempt(
            self.group_id, lambda node, conn: conn.request(api, body, min(version, conn.version_for(api)))
        )

    def _join(self) -> bool:
        meta = json.dumps({"url": self.url, "eligible": self.eligible}).encode()
        resp = self._call(
            ApiKey.JOIN_GROUP,
            {
                "group_id": self.group_id,
                "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.session_timeout_ms,
                "member_id": self._member_id,
                "group_instance_id": None,
                "protocol_type": PROTOCOL_TYPE,
                "protocols": [{"name": PROTOCOL_NAME, "metadata": meta}],
                "reason": None,
            },
            5,
        )
        code = resp["error_code"]
        if code == _MEMBER_ID_REQUIRED:
            self._member_id = resp["member_id"]
            return False
        if code:
            if code in (25,):
                self._member_id = ""
            raise PyklogError(f"JoinGroup {self.group_id!r}: error code {code}")
        self._member_id = resp["member_id"]
        self._generation = resp["generation_id"]
        assignments = []
        if resp["leader"] == self._member_id:
            members = []
            for m in resp.get("members") or []:
                try:
                    members.append((m["member_id"], json.loads(bytes(m["metadata"]))))
                except ValueError:
                    continue
            answer = json.dumps(choose_primary(members, self._last_primary)).encode()
            assignments = [{"member_id": mid, "assignment": answer} for mid, _ in members]
        sync = self._call(
            ApiKey.SYNC_GROUP,
            {
                "group_id": self.group_id,
                "generation_id": self._generation,
                "member_id": self._member_id,
                "group_instance_id": None,
                "protocol_type": PROTOCOL_TYPE,
                "protocol_name": PROTOCOL_NAME,
                "assignments": assignments,
            },
            4,
        )
        if sync["error_code"]:
            if sync["error_code"] == 25:
                self._member_id = ""
            raise PyklogError(f"SyncGroup {self.group_id!r}: error code {sync['error_code']}")
        answer = json.loads(bytes(sync["assignment"]) or b"null") or {}
        primary = answer.get("primary")
        if primary == self.url and self.on_primary is not None:
            self.on_primary()
        self._set_primary(primary)
        return True

    def _heartbeat(self) -> int:
        resp = self._call(
            ApiKey.HEARTBEAT,
            {
                "group_id": self.group_id,
                "generation_id": self._generation,
                "member_id": self._member_id,
                "group_instance_id": None,
            },
            3,
        )
        return resp["error_code"]

    def _run(self) -> None:
        backoff = 0.2
        while not self._stopping.is_set():
            try:
                if not self._join():
                    continue
                backoff = 0.2
                while not self._stopping.wait(self.heartbeat_s):
                    code = self._heartbeat()
                    if code == 25:
                        self._member_id = ""
                    if code:
                        # a rebalance (or this member was dropped): no primary until the group settles
                        self._set_primary(None)
                        if code not in _REJOIN:
                            log.warning("heartbeat of %s: error code %d", self.group_id, code)
                        break
            except Exception as e:  # noqa: BLE001 - the cluster may be down: keep trying
                log.warning("the election in group %s failed: %s", self.group_id, e)
                self._set_primary(None)
                self._stopping.wait(backoff)
                backoff = min(backoff * 2, 2.0)

    def close(self) -> None:
        self._stopping.set()
        if self._member_id:
            try:
                self._call(
                    ApiKey.LEAVE_GROUP,
                    {
                        "group_id": self.group_id,
                        "member_id": self._member_id,
                        "members": [{"member_id": self._member_id, "group_instance_id": None, "reason": None}],
                    },
                    3,
                )
            except Exception:  # noqa: BLE001 - leaving is best effort: the session times out anyway
                log.debug("LeaveGroup failed", exc_info=True)
        self._thread.join(2)
        self.client.close()
