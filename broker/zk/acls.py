"""ACLs in ZooKeeper, in the layout of Kafka's ``AclAuthorizer`` (ZooKeeper mode, ``ZkData.scala``), so
``kafka-acls.sh --authorizer-properties zookeeper.connect=...`` and pyklog read each other's ACLs:

* a LITERAL pattern's ACLs at ``/kafka-acl/<ResourceType>/<name>``, a PREFIXED one's at
  ``/kafka-acl-extended/prefixed/<ResourceType>/<name>``, as
  ``{"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]}``
  (:func:`pyklog.broker.zk.znodes.encode_acls`); a pattern left without ACLs loses its znode;
* every change is followed by a sequential notification, ``/kafka-acl-changes/acl_changes_<seq>``
  (``TOPIC:orders``) or ``/kafka-acl-extended-changes/acl_changes_<seq>`` (JSON), which every
  broker's :class:`~pyklog.broker.security.authorizer.AclAuthorizer` follows.

Writes are conditional on the znode's version (read, change, write with the version read; again on
a concurrent change), as Kafka's ``updateResourceAcls``.

Thread-safety: thread-safe (no state but the client; every call through ``client.retry``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, NotEmptyError

from pyklog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclIndex,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import ZkDataError, decode_acls, encode_acl_change, encode_acls

log = logging.getLogger(__name__)

#: the pattern types stored (Kafka's ZkAclStore.stores)
STORED_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)


def resource_path(pattern: ResourcePattern) -> str:
    return paths.acl_resource(pattern.pattern_type.name, pattern.resource_type.kafka_name, pattern.name)


class ZkAclStore:
    """Reads and writes ACLs with ``client`` (a started KazooClient, the broker's or a tool's)."""

    def __init__(self, client: KazooClient):
        self.client = client

    def ensure_paths(self) -> None:
        """The roots Kafka's authorizer creates at start (the change paths must exist to be watched)."""
        c = self.client
        for p in (
            paths.ACL_LITERAL,
            paths.acl_store("PREFIXED"),
            paths.ACL_LITERAL_CHANGES,
            paths.ACL_EXTENDED_CHANGES,
        ):
            c.retry(c.ensure_path, p)

    def read(self, pattern: ResourcePattern) -> tuple[frozenset[AccessControlEntry], int | None]:
        """The ACLs of ``pattern`` and their znode's version (None: no znode)."""
        path = resource_path(pattern)
        try:
            data, stat = self.client.retry(self.client.get, path)
        except NoNodeError:
            return frozenset(), None
        return decode_acls(data, path), stat.version

    def load_all(self) -> AclIndex:
        """Every ACL stored.  An unreadable znode is logged and skipped (its resource then has no
        ACLs here, which denies unless allow.everyone.if.no.acl.found)."""
        c = self.client
        index = AclIndex()
        for pt in STORED_PATTERN_TYPES:
            root = paths.acl_store(pt.name)
            try:
                type_names = c.retry(c.get_children, root)
            except NoNodeError:
                continue
            for type_name in type_names:
                try:
                    rtype = ResourceType.parse(type_name)
                except ValueError:
                    log.warning("ignoring unknown ACL resource type znode %s/%s", root, type_name)
                    continue
                try:
                    names = c.retry(c.get_children, f"{root}/{type_name}")
                except NoNodeError:
                    continue
                for name in names:
                    pattern = ResourcePattern(rtype, name, pt)
                    try:
                        index.set(pattern, self.read(pattern)[0])
                    except ZkDataError as e:
                        log.error("ignoring unreadable ACLs: %s", e)
        return index

    def update(
        self, pattern: ResourcePattern, change: Callable[[frozenset[AccessControlEntry]], Iterable[AccessControlEntry]]
    ) -> frozenset[AccessControlEntry]:
        """Replace ``pattern``'s ACLs by ``change(current)``, conditionally on the version read
        (again after a concurrent change), then announce the change.  Returns the ACLs written."""
        c = self.client
        path = resource_path(pattern)
        while True:
            current, version = self.read(pattern)
            new = frozenset(change(current))
            if new == current:
                return current
            try:
                if not new:
                    c.retry(c.delete, path, version=version)
                elif version is None:
                    c.retry(c.create, path, encode_acls(new), makepath=True)
                else:
                    c.retry(c.set, path, encode_acls(new), version=version)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError):
                continue  # changed under us: read again
            self.notify(pattern)
            return new

    def notify(self, pattern: ResourcePattern) -> None:
        """Write the change notification of ``pattern`` (every broker re-reads its ACLs)."""
        c = self.client
        c.retry(
            c.create,
            paths.acl_change(pattern.pattern_type.name),
            encode_acl_change(pattern),
            sequence=True,
            makepath=True,
        )

    def add(self, bindings: Iterable[AclBinding]) -> None:
        """Add ACLs (already validated), one conditional write per pattern."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            self.update(pattern, lambda cur, entries=entries: cur | entries)

    def remove(self, bindings: Iterable[AclBinding]) -> None:
        """Remove ACLs, one conditional write per pattern (a pattern left empty loses its znode)."""
        by_pattern: dict[ResourcePattern, set[AccessControlEntry]] = {}
        for b in bindings:
            by_pattern.setdefault(b.pattern, set()).add(b.entry)
        for pattern, entries in by_pattern.items():
            self.update(pattern, lambda cur, entries=entries: cur - entries)


__all__ = ["STORED_PATTERN_TYPES", "ZkAclStore", "resource_path"]
