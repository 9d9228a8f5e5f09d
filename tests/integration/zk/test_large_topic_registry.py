"""A topic whose nodes do not fit in one ZooKeeper multi-op (``jute.maxbuffer``, 1 MiB), grown and
deleted through :class:`ZkCluster` without a controller: written and removed in parts, nodes left by
an earlier failed attempt taken over, nothing left behind."""

from __future__ import annotations

import uuid

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.znodes import LeaderAndIsr, decode_partition_state, encode_partition_state

PARTITIONS = 2600  # with a 180-character name: about 1.7 MB of nodes to create, 1.3 MB to delete


def test_a_large_topic_grows_and_is_deleted_in_parts(zk_chroot, zk):
    broker = ZkCluster(zk_chroot, 0, "127.0.0.1", 9400, session_timeout_ms=6000).start()
    try:
        name = ("big-" + uuid.uuid4().hex) * 6
        name = name[:180]
        broker.create_topic(name, 1, 1)
        # an earlier attempt wrote partition 7's nodes, then its assignment write failed
        zk.create(paths.partition(name, 7), b"")
        zk.create(paths.partition_state(name, 7), encode_partition_state(LeaderAndIsr(5, 3, (5,), 1)))

        new = broker.create_partitions(name, PARTITIONS)
        assert sorted(new) == list(range(1, PARTITIONS))
        assert len(zk.get_children(paths.topic_partitions(name))) == PARTITIONS
        for p in (1, 7, 1500, PARTITIONS - 1):
            st = decode_partition_state(zk.get(paths.partition_state(name, p))[0], "")
            assert (st.leader, st.leader_epoch, list(st.isr)) == (0, 0, [0]), (p, st)
        assert len(broker.topics()[name]) == PARTITIONS

        broker.delete_topic(name)
        for path in (paths.topic(name), paths.topic_config(name), paths.replica_deletion(name)):
            assert not zk.exists(path), path
        assert zk.exists(paths.deleted_topic_record(name))
        assert name not in broker.topics()
        broker.create_topic(name, 1, 1)  # the name is free again
        assert zk.get_children(paths.topic_partitions(name)) == ["0"]
    finally:
        broker.stop()
