"""DeleteGroups of ZooKeeper consumer groups (``/consumers/<group>``) on a real broker.

The broker deletes a ZooKeeper group only when no member is registered (NON_EMPTY_GROUP otherwise,
every node kept, counted), in one multi-op at the versions read: a member that registers between the
read and the delete (a second, real ZooKeeper session, injected right before the commit) makes the
multi-op fail and nothing is deleted.  ``pyklog-consumer-groups --delete`` (no ``--zookeeper``
needed) and kafka-python's ``delete_consumer_groups`` reach it through DeleteGroups.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from pyklog.broker.errors import NonEmptyGroupError
from pyklog.broker.zk import paths
from tests.support import kazoo_client


def _tool(*args):
    return subprocess.run(
        [sys.executable, "-m", "pyklog.connector.cli.consumer_groups", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _nodes(zk, root) -> list[str]:
    out = []

    def walk(p):
        out.append(p)
        for c in zk.get_children(p):
            walk(f"{p}/{c}")

    if zk.exists(root):
        walk(root)
    return sorted(out)


def _make_group(zk, group: str) -> None:
    zk.ensure_path(paths.consumer_ids(group))
    for p in range(3):
        zk.create(paths.consumer_offset(group, "t", p), str(10 + p).encode(), makepath=True)
    zk.create(paths.partition_owner(group, "t", 0), b"old-owner", makepath=True)


def test_delete_zookeeper_group_only_without_members(broker, zk_chroot):
    from kafka.admin import KafkaAdminClient

    zk = kazoo_client(zk_chroot)
    member = kazoo_client(zk_chroot)  # the member's own session: its registration is ephemeral
    try:
        _make_group(zk, "zg")
        member.create(
            paths.consumer_id("zg", "zg_host-1"),
            b'{"version":1,"subscription":{"t":1},"pattern":"static","timestamp":"1"}',
            ephemeral=True,
        )
        before = _nodes(zk, paths.consumer_group("zg"))
        assert len(before) == 11

        r = _tool("--bootstrap-server", broker.bootstrap, "--delete", "--group", "zg")
        assert r.returncode == 1 and "* Group 'zg' could not be deleted due to: NON_EMPTY_GROUP" in r.stderr, r.stderr
        kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        try:
            res = dict(kp.delete_groups(["zg"]))
            assert res["zg"] == "NonEmptyGroupError", res
        finally:
            kp.close()
        assert _nodes(zk, paths.consumer_group("zg")) == before  # nothing lost

        member.stop()  # the member goes away: its ephemeral registration with it
        member.close()
        r = _tool("--bootstrap-server", broker.bootstrap, "--delete", "--group", "zg")
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "Deletion of requested consumer groups ('zg') was successful."
        assert zk.exists(paths.consumer_group("zg")) is None
        r = _tool("--bootstrap-server", broker.bootstrap, "--delete", "--group", "zg")
        assert r.returncode == 1 and "GROUP_ID_NOT_FOUND" in r.stderr, r.stderr
    finally:
        zk.stop()
        zk.close()


def test_member_registering_during_delete_makes_it_fail_safely(zookeeper, zk_chroot):
    from pyklog.broker.zk.cluster import ZkCluster

    zk = kazoo_client(zk_chroot)
    cluster = ZkCluster(zk_chroot, None, connect_timeout_s=15).start()
    try:
        _make_group(zk, "race")
        before = _nodes(zk, paths.consumer_group("race"))
        real_transaction = cluster.zk.transaction
        joined = []

        def transaction_after_a_member_joins():
            if not joined:  # between the read and the multi-op, a member registers (another session)
                zk.create(paths.consumer_id("race", "race_host-9"), b"{}", ephemeral=True)
                joined.append(1)
            return real_transaction()

        cluster.zk.transaction = transaction_after_a_member_joins
        with pytest.raises(NonEmptyGroupError):
            cluster.delete_zookeeper_group("race")
        after = _nodes(zk, paths.consumer_group("race"))
        assert set(before) <= set(after) and len(after) == len(before) + 1  # every node still there
        assert zk.get(paths.consumer_offset("race", "t", 2))[0] == b"12"

        # an offset committed meanwhile (a version change) also aborts the multi-op; the retry deletes
        zk.delete(paths.consumer_id("race", "race_host-9"))
        commits = []

        def transaction_after_a_commit():
            if not commits:
                zk.set(paths.consumer_offset("race", "t", 1), b"99")
                commits.append(1)
            return real_transaction()

        cluster.zk.transaction = transaction_after_a_commit
        assert cluster.delete_zookeeper_group("race") is True and commits == [1]
        assert zk.exists(paths.consumer_group("race")) is None
        assert cluster.delete_zookeeper_group("race") is False
    finally:
        cluster.stop()
        zk.stop()
        zk.close()
