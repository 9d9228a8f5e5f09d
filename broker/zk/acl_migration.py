"""Set the ACLs of a registry's existing znodes to what :func:`pyklog.broker.zk.znode_acls.default_acls`
says (Kafka's ``ZkSecurityMigrator``).

Used two ways: a broker started with ``zookeeper.set.acl=true`` secures the znodes it owns before it
registers (a registry written without ACLs, or by brokers that ran without set.acl, is fixed at the
first secure start), and ``pyklog-zookeeper-security-migration --zookeeper.acl secure|unsecure``
does it on demand, both ways, as Kafka's tool.

What is walked: the chroot node itself (``/``; only with a chroot, or when asked: without one it is
ZooKeeper's root, shared with other applications), Kafka's secure root paths and their whole
subtrees (:data:`SECURE_ROOTS`), and the open roots (``/consumers``, ``/pyklog_spark_sinks``) as
single nodes: what clients created under them is theirs and stays as it is (Kafka's tool leaves
``/consumers`` alone too).  A node whose ACL already is the wanted one is not written.  A node the
session may not change (owned by another identity) is counted, and logged at WARNING by path.

Thread-safety: runs on the caller's thread with the caller's started kazoo client; the calls of one
tree level are issued together (kazoo's async API) and awaited before the next level.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError, NoNodeError

from pyklog.broker.zk import paths
from pyklog.broker.zk import znode_acls as zk_acls

log = logging.getLogger(__name__)

#: Kafka's ZkData.SecureRootPaths (with ZkAclStore's), and pyklog's own broker-owned roots.
SECURE_ROOTS = (
    paths.ADMIN,
    paths.BROKERS,
    paths.CLUSTER,
    paths.CONFIG,
    paths.CONTROLLER,
    paths.CONTROLLER_EPOCH,
    paths.ISR_CHANGE_NOTIFICATION,
    paths.LATEST_PRODUCER_ID_BLOCK,
    paths.LOG_DIR_EVENT_NOTIFICATION,
    paths.DELEGATION_TOKEN,
    paths.FEATURE,
    paths.MIGRATION,
    *paths.ACL_STORE_ROOTS,
)


@dataclasses.dataclass
class MigrationResult:
    checked: int = 0  # znodes whose ACL was read
    changed: int = 0  # znodes whose ACL was set
    refused: list[str] = dataclasses.field(default_factory=list)  # paths this session may not change


def _join(parent: str, child: str) -> str:
    return f"/{child}" if parent == "/" else f"{parent}/{child}"


def migrate_acls(
    zk: KazooClient,
    acls_for: Callable[[str], list],
    *,
    include_root: bool,
) -> MigrationResult:
    """Give every znode of the walk (see the module doc) ``acls_for(path)``; paths are relative to
    ``zk``'s chroot.  ``include_root``: the chroot node (``/``) too."""
    result = MigrationResult()
    singles = list(zk_acls.OPEN_ROOTS)
    if include_root:
        singles.append("/")
    level = list(SECURE_ROOTS)
    _apply(zk, acls_for, singles, result, recurse=False)
    while level:
        level = _apply(zk, acls_for, level, result, recurse=True)
    if result.refused:
        log.warning(
            "ZooKeeper ACLs: %d znode(s) could not be changed by this identity (owned by another?): %s",
            len(result.refused),
            ", ".join(result.refused[:20]) + (" ..." if len(result.refused) > 20 else ""),
        )
    return result


def _apply(zk: KazooClient, acls_for, level: list[str], result: MigrationResult, *, recurse: bool) -> list[str]:
    """Read and, where needed, set the ACLs of ``level``; return the next level's paths."""
    reads = [(p, zk.get_acls_async(p), zk.get_children_async(p) if recurse else None) for p in level]
    writes = []
    children: list[str] = []
    for path, acl_result, children_result in reads:
        try:
            current, _ = acl_result.get()
        except NoNodeError:
            continue
        result.checked += 1
        if children_result is not None:
            try:
                children.extend(_join(path, c) for c in children_result.get())
            except NoNodeError:
                pass
        wanted = acls_for(path)
        if zk_acls.acl_key(current) != zk_acls.acl_key(wanted):
            writes.append((path, zk.set_acls_async(path, wanted)))
    for path, w in writes:
        try:
            w.get()
            result.changed += 1
        except NoNodeError:
            pass
        except NoAuthError:
            result.refused.append(path)
    return children
