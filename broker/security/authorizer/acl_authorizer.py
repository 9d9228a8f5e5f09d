"""The ZooKeeper-backed ACL authorizer: Kafka's ``kafka.security.authorizer.AclAuthorizer``.

Each broker keeps every ACL in memory (an :class:`~pyklog.broker.security.acl.AclIndex`), loaded
from ZooKeeper at start (:class:`~pyklog.broker.zk.acls.ZkAclStore`) and kept
live by the change notifications (``/kafka-acl-changes``, ``/kafka-acl-extended-changes``): a
notification names a resource pattern, whose ACLs the broker reads again.  Whoever writes ACLs
(CreateAcls / DeleteAcls on any broker, ``pyklog-acls``, Kafka's ``kafka-acls.sh --authorizer-properties``)
writes a notification, so every broker follows within a ZooKeeper round trip.  Notifications older
than 15 minutes are deleted by the brokers that read them (Kafka's ``ZkNodeChangeNotificationListener``).

Decisions are :func:`pyklog.broker.security.acl.authorize` on the cache (no I/O on the request
path).  Denials are logged at INFO and allowed actions at DEBUG on the logger
``kafka.authorizer.logger`` (Kafka's audit logger name; ``log_if_denied=False`` for the checks
that only filter, as Kafka's), in Kafka's words: ``Principal = User:alice is Denied operation =
READ from host = 10.0.0.1 on resource = Topic:LITERAL:orders``.

Thread-safety: thread-safe.  Decisions read the cache without a lock (each lookup sees whole
entries); writers of the cache (the notification handler on kazoo's thread, CreateAcls/DeleteAcls
after their ZooKeeper write) hold ``_lock``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch

from pyklog.broker.errors import InvalidRequestError, PyklogError, UnknownServerError
from pyklog.broker.security import acl
from pyklog.broker.security.acl import (
    SUPPORTED_OPERATIONS,
    AclBinding,
    AclBindingFilter,
    AclIndex,
    AclOperation,
    ResourcePattern,
    ResourceType,
)
from pyklog.broker.security.authorizer_settings import AuthorizerSettings, authorizer_settings
from pyklog.broker.security.principal import KafkaPrincipal
from pyklog.broker.zk import paths
from pyklog.broker.zk.acls import STORED_PATTERN_TYPES, ZkAclStore
from pyklog.broker.zk.znodes import ZkDataError, decode_acl_change

log = logging.getLogger(__name__)
#: Kafka's audit logger (kafka.authorizer.logger in Kafka's log4j.properties)
audit = logging.getLogger("kafka.authorizer.logger")

#: change notifications older than this are deleted (Kafka's ZkNodeChangeNotificationListener)
NOTIFICATION_EXPIRY_S = 15 * 60


def _seq(child: str) -> int:
    try:
        return int(child.rpartition("_")[2])
    except ValueError:
        return -1


class AclAuthorizer:
    """Authorizes actions against the ACLs in ZooKeeper.  ``client`` is a started KazooClient (the
    broker's session), ``settings`` the broker's :class:`AuthorizerSettings`.  :meth:`start` loads
    the ACLs and follows the notifications; :meth:`stop` stops following."""

    def __init__(self, client: KazooClient, settings: AuthorizerSettings):
        self.store = ZkAclStore(client)
        self.client = client
        self.super_users = settings.super_users
        self.allow_everyone_if_no_acl_found = settings.allow_everyone_if_no_acl_found
        self._index = AclIndex()
        # guards the cache's writes and _seen; reentrant: kazoo may call the first watch callback on
        # the thread that starts the watch, inside start()
        self._lock = threading.RLock()
        self._seen: dict[str, int] = {}  # change path -> highest sequence processed
        self._stopped = False
        self._watches: list[ChildrenWatch] = []

    @classmethod
    def from_config(cls, client: KazooClient, props: dict[str, str]) -> AclAuthorizer | None:
        """The authorizer ``authorizer.class.name`` asks for, or None (no authorizer)."""
        settings = authorizer_settings(props)
        return cls(client, settings) if settings.enabled else None

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> AclAuthorizer:
        self.store.ensure_paths()
        with self._lock:
            # watch first (the first call marks what exists as seen), then load: a change written
            # in between is both loaded and re-read, never missed
            for pt in STORED_PATTERN_TYPES:
                change_path = paths.acl_changes(pt.name)
                self._watches.append(
                    ChildrenWatch(
                        self.client,
                        change_path,
                        lambda children, cp=change_path, lit=pt.name == "LITERAL": self._on_changes(cp, lit, children),
                    )
                )
            self._index = self.store.load_all()
        log.info(
            "ACL authorizer started: %d ACLs on %d resource patterns, super.users=%s, "
            "allow.everyone.if.no.acl.found=%s",
            len(self._index),
            len(self._index.patterns()),
            ";".join(sorted(self.super_users)) or "(none)",
            self.allow_everyone_if_no_acl_found,
        )
        return self

    def stop(self) -> None:
        self._stopped = True

    def _on_changes(self, change_path: str, literal: bool, children) -> bool | None:
        """ChildrenWatch callback (kazoo's thread): re-read the resources named by the notifications
        not processed yet; delete the expired ones."""
        if self._stopped:
            return False  # stops the watch
        children = sorted(children or (), key=_seq)
        with self._lock:
            last = self._seen.get(change_path)
            if last is None:  # the first call: what exists now is covered by the load that follows
                self._seen[change_path] = max((_seq(c) for c in children), default=-1)
                self._purge_expired(change_path, children)
                return None
            for child in children:
                seq = _seq(child)
                if seq <= last:
                    continue
                node = paths.child(change_path, child)
                try:
                    data, stat = self.client.retry(self.client.get, node)
                    pattern = decode_acl_change(data, node, literal)
                    self._index.set(pattern, self.store.read(pattern)[0])
                    log.debug("ACLs of %s reloaded after %s", pattern, node)
                    if time.time() - stat.ctime / 1000.0 > NOTIFICATION_EXPIRY_S:
                        self.client.retry(self.client.delete, node)
                except NoNodeError:
                    pass
                except (ZkDataError, KazooException) as e:
                    log.error("cannot process ACL change notification %s: %s", node, e)
                self._seen[change_path] = max(self._seen[change_path], seq)
        return None

    def _purge_expired(self, change_path: str, children) -> None:
        """Delete the notifications older than :data:`NOTIFICATION_EXPIRY_S` (every broker may; a
        notification another broker deleted first is simply gone)."""
        now = time.time()
        for child in children:
            node = paths.child(change_path, child)
            try:
                stat = self.client.retry(self.client.exists, node)
                if stat is not None and now - stat.ctime / 1000.0 > NOTIFICATION_EXPIRY_S:
                    self.client.retry(self.client.delete, node)
            except NoNodeError:
                pass
            except KazooException as e:
                log.info("cannot delete the expired ACL change notification %s: %s", node, e)
                return

    # ------------------------------------------------------------------ decisions

    def authorize(
        self,
        principal: KafkaPrincipal | str,
        host: str,
        operation: AclOperation,
        resource_type: ResourceType,
        name: str,
        *,
        log_if_denied: bool = True,
        log_if_allowed: bool = True,
    ) -> bool:
        ok = acl.authorize(
            self._index,
            principal,
            host,
            operation,
            resource_type,
            name,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
        )
        if (log_if_allowed and ok and audit.isEnabledFor(logging.DEBUG)) or (log_if_denied and not ok):
            audit.log(
                logging.DEBUG if ok else logging.INFO,
                "Principal = %s is %s operation = %s from host = %s on resource = %s:LITERAL:%s",
                principal,
                "Allowed" if ok else "Denied",
                operation.name,
                host,
                resource_type.kafka_name,
                name,
            )
        return ok

    def authorize_by_resource_type(
        self, principal: KafkaPrincipal | str, host: str, operation: AclOperation, resource_type: ResourceType
    ) -> bool:
        return acl.authorize_by_resource_type(
            self._index,
            principal,
            host,
            operation,
            resource_type,
            super_users=self.super_users,
            allow_everyone_if_no_acl_found=self.allow_everyone_if_no_acl_found,
        )

    def authorized_operations(
        self, principal: KafkaPrincipal | str, host: str, resource_type: ResourceType, name: str
    ) -> int:
        """The authorized-operations bit field of one resource: the supported operations allowed."""
        ops = [
            op
            for op in SUPPORTED_OPERATIONS[resource_type]
            if self.authorize(principal, host, op, resource_type, name, log_if_denied=False, log_if_allowed=False)
        ]
        return acl.operations_bitfield(ops)

    # ------------------------------------------------------------------ the ACL APIs

    def describe_acls(self, flt: AclBindingFilter) -> list[AclBinding]:
        return self._index.bindings(flt)

    def _reload(self, patterns: Iterable[ResourcePattern]) -> None:
        with self._lock:
            for p in patterns:
                self._index.set(p, self.store.read(p)[0])

    def create_acls(self, bindings: list[AclBinding]) -> list[PyklogError | None]:
        """Add ACLs; one result per binding (InvalidRequestError for an ACL Kafka refuses)."""
        results: list[PyklogError | None] = []
        valid = []
        for b in bindings:
            try:
                b.validate()
            except ValueError as e:
                results.append(InvalidRequestError(str(e)))
                continue
            results.append(None)
            valid.append(b)
        if valid:
            try:
                self.store.add(valid)
            except (KazooException, PyklogError) as e:
                err = UnknownServerError(f"cannot write ACLs to ZooKeeper: {e}")
                return [r if r is not None else err for r in results]
            self._reload({b.pattern for b in valid})
        return results

    def delete_acls(self, filters: list[AclBindingFilter]) -> list[tuple[PyklogError | None, list[AclBinding]]]:
        """Remove the ACLs each filter selects; per filter (error, the ACLs it removed)."""
        out: list[tuple[PyklogError | None, list[AclBinding]]] = []
        for flt in filters:
            try:
                flt.validate()
            except ValueError as e:
                out.append((InvalidRequestError(str(e)), []))
                continue
            matched = self._index.bindings(flt)
            try:
                self.store.remove(matched)
            except (KazooException, PyklogError) as e:
                out.append((UnknownServerError(f"cannot delete ACLs in ZooKeeper: {e}"), []))
                continue
            self._reload({b.pattern for b in matched})
            out.append((None, matched))
        return out


__all__ = ["AclAuthorizer", "NOTIFICATION_EXPIRY_S"]
