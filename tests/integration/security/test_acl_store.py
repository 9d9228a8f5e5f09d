"""The ZooKeeper ACL store and the authorizer's cache, in-process on a real ZooKeeper: versioned
writes never lose a concurrent writer's ACL, every change is announced, a running authorizer
follows the announcements, and expired announcements are deleted."""

from __future__ import annotations

import threading

from pyklog.broker.security import acl
from pyklog.broker.security.acl import (
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pyklog.broker.security.authorizer import AclAuthorizer, AuthorizerSettings, ZkAclStore
from pyklog.broker.security.authorizer import acl_authorizer as acl_authorizer_module
from tests.support import kazoo_client, wait_for

TOPIC = ResourcePattern(ResourceType.TOPIC, "orders")


def entry(principal, op=AclOperation.READ):
    return AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW)


def test_concurrent_writers_lose_nothing(zk_chroot):
    clients = [kazoo_client(zk_chroot) for _ in range(4)]
    try:
        stores = [ZkAclStore(c) for c in clients]
        stores[0].ensure_paths()

        def write(i):
            for j in range(10):
                stores[i].add([AclBinding(TOPIC, entry(f"User:u{i}-{j}"))])

        threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        got, version = stores[0].read(TOPIC)
        assert len(got) == 40 and version is not None
        # one notification per write that changed something
        assert len(clients[0].get_children("/kafka-acl-changes")) == 40
        first = sorted(clients[0].get_children("/kafka-acl-changes"))[0]
        data, _ = clients[0].get("/kafka-acl-changes/" + first)
        assert data == b"TOPIC:orders"
        stores[1].remove([AclBinding(TOPIC, e) for e in got])
        assert not clients[0].exists("/kafka-acl/Topic/orders")
    finally:
        for c in clients:
            c.stop()
            c.close()


def test_authorizer_follows_changes_and_purges_expired_notifications(zk_chroot, monkeypatch):
    writer_client, broker_client = kazoo_client(zk_chroot), kazoo_client(zk_chroot)
    try:
        writer = ZkAclStore(writer_client)
        writer.ensure_paths()
        prefixed = ResourcePattern(ResourceType.GROUP, "spark-", PatternType.PREFIXED)
        writer.add([AclBinding(prefixed, entry("User:spark"))])  # before the authorizer starts: loaded
        monkeypatch.setattr(acl_authorizer_module, "NOTIFICATION_EXPIRY_S", -1)  # every notification is expired
        authorizer = AclAuthorizer(broker_client, AuthorizerSettings(True, frozenset(), False)).start()
        # the notification found at start was deleted
        wait_for(lambda: writer_client.get_children("/kafka-acl-extended-changes") == [], 10, message="purged")
        assert authorizer.authorize("User:spark", "1.2.3.4", AclOperation.READ, ResourceType.GROUP, "spark-q1")
        assert not authorizer.authorize("User:other", "1.2.3.4", AclOperation.READ, ResourceType.GROUP, "spark-q1")
        writer.add([AclBinding(TOPIC, entry("User:alice", AclOperation.WRITE))])
        wait_for(
            lambda: authorizer.authorize("User:alice", "h", AclOperation.DESCRIBE, ResourceType.TOPIC, "orders"),
            10,
            message="a new ACL followed",
        )
        writer.remove([AclBinding(prefixed, entry("User:spark"))])
        wait_for(
            lambda: not authorizer.authorize("User:spark", "h", AclOperation.READ, ResourceType.GROUP, "spark-q1"),
            10,
            message="a removed ACL followed",
        )
        assert authorizer.authorized_operations("User:alice", "h", ResourceType.TOPIC, "orders") == (
            acl.operations_bitfield([AclOperation.WRITE, AclOperation.DESCRIBE])
        )
        authorizer.stop()
    finally:
        for c in (writer_client, broker_client):
            c.stop()
            c.close()
