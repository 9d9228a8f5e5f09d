"""The ZooKeeper consumers' groups under ``/consumers/[group]`` (offsets.storage=zookeeper), as the
broker administers them: listing, DeleteGroups, and the expiry of abandoned groups.

Every deletion is one multi-op over the group's subtree, children first, each node at the version
read, so a member registering or a commit landing meanwhile makes it fail and nothing is deleted.

Thread-safety: stateless apart from the session; any thread but a kazoo handler thread.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NoNodeError, RolledBackError

from pyklog.broker.errors import NonEmptyGroupError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.session import ZkSession

log = logging.getLogger(__name__)


class ZkConsumerGroups:
    """Lists, deletes and expires ZooKeeper consumer groups."""

    def __init__(self, session: ZkSession):
        self.session = session

    def zookeeper_consumer_groups(self) -> list[str]:
        """Groups under ``/consumers`` (the ZooKeeper consumers' groups, offsets.storage=zookeeper)."""
        try:
            return sorted(self.session.retry(self.session.zk.get_children, paths.CONSUMERS))
        except NoNodeError:
            return []

    def delete_expired_zookeeper_group(self, group: str, now_ms: int, retention_ms: int) -> bool:
        """Delete ``/consumers/[group]`` when it has no registered member (``ids`` has no child) and
        no node under it was created or changed within ``retention_ms`` (offsets, owners, fences:
        their ``mtime``); True if it was deleted.

        Kafka's ZooKeeper consumers had no offset expiry; pyklog applies the broker's
        ``offsets.retention.minutes`` to them as well, so groups of finished queries do not pile up.
        One multi-op deletes the subtree, children first, each offset node at the version read: a
        member registering or a commit landing meanwhile makes it fail (NotEmpty / BadVersion) and
        the group is kept.  Runs on the group coordinator's scheduler thread of the controller."""
        try:
            if self.session.retry(self.session.zk.get_children, paths.consumer_ids(group)):
                return False  # a registered member: the group is alive
        except NoNodeError:
            pass
        try:
            nodes, newest = self._read_subtree(paths.consumer_group(group))
        except NoNodeError:
            return False  # changed under us: look again at the next check
        if now_ms - newest < retention_ms:
            return False
        failures = self._delete_subtree_at_versions(nodes)
        if failures:
            log.info("ZooKeeper group %s changed while expiring it (%r): kept", group, failures[0])
            return False
        log.info(
            "deleted ZooKeeper consumer group %s: no member and nothing written for %d ms (%d nodes)",
            group,
            now_ms - newest,
            len(nodes),
        )
        return True

    def _read_subtree(self, root: str) -> tuple[list[tuple[str, int]], int]:
        """The nodes under ``root`` (itself included) as ``(path, version)``, children before their
        parent, and the newest mtime/ctime among them.  NoNodeError if a node goes away meanwhile."""
        nodes: list[tuple[str, int]] = []
        newest = 0

        def walk(path: str) -> None:
            nonlocal newest
            _, stat = self.session.retry(self.session.zk.get, path)
            newest = max(newest, stat.mtime, stat.ctime)
            for c in self.session.retry(self.session.zk.get_children, path):
                walk(f"{path}/{c}")
            nodes.append((path, stat.version))

        walk(root)
        return nodes, newest

    def _delete_subtree_at_versions(self, nodes: list[tuple[str, int]]) -> list[Exception]:
        """Delete ``nodes`` (from :meth:`_read_subtree`) in one multi-op, each at the version read;
        return the failures (empty: all deleted; otherwise nothing was, as a multi-op is atomic)."""

        def delete():
            t = self.session.zk.transaction()
            for path, version in nodes:
                t.delete(path, version=version)
            return t.commit()

        results = self.session.retry(delete)
        return [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]

    def delete_zookeeper_group(self, group: str) -> bool:
        """DeleteGroups of a ZooKeeper consumer group: delete ``/consumers/[group]`` when no member is
        registered; False if there is no such group.  NonEmptyGroupError while ``ids`` has a child.

        One multi-op deletes the subtree, children first, each node at the version read: a member
        registering, an owner claimed or an offset committed meanwhile makes it fail (NotEmpty /
        BadVersion / NoNode) and nothing is deleted; it is read and tried again a few times, then
        NonEmptyGroupError (a member) or the ZooKeeper error is raised.  Request handler thread."""
        if not group or "/" in group or group in (".", ".."):
            return False
        root = paths.consumer_group(group)
        for _ in range(5):
            try:
                members = self.session.retry(self.session.zk.get_children, paths.consumer_ids(group))
            except NoNodeError:
                members = []
            if members:
                raise NonEmptyGroupError(
                    f"ZooKeeper consumer group {group!r} has {len(members)} registered "
                    f"member(s) ({', '.join(sorted(members)[:5])}); stop them before deleting it"
                )
            try:
                nodes, _ = self._read_subtree(root)
            except NoNodeError:
                if self.session.retry(self.session.zk.exists, root) is None:
                    return False
                continue  # changed under us
            failures = self._delete_subtree_at_versions(nodes)
            if not failures:
                log.info("deleted ZooKeeper consumer group %s (%d nodes)", group, len(nodes))
                return True
            log.info("ZooKeeper group %s changed while deleting it (%r): reading it again", group, failures[0])
        raise ZooKeeperError(f"ZooKeeper consumer group {group!r} kept changing while being deleted; try again")
