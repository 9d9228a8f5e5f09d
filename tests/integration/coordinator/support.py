"""Helpers shared by the tests of this directory (and the fault scenarios that build on them)."""

from __future__ import annotations

from pyklog.broker.coordinator.offsets import (
    OffsetManager,
)
from pyklog.broker.log.config import LogConfig
from pyklog.broker.log.manager import LogManager
from pyklog.broker.zk.cluster import ZkCluster


class Node:
    """One broker's ZkCluster + LogManager + OffsetManager (no network server)."""

    def __init__(self, zk_connect, broker_id, data_dir, num_partitions=4, **om_kw):
        self.broker_id = broker_id
        self.data_dir = str(data_dir)
        self.zk_connect = zk_connect
        self.num_partitions = num_partitions
        self.om_kw = om_kw
        self.cluster = ZkCluster(zk_connect, broker_id, "127.0.0.1", 9200 + broker_id, session_timeout_ms=6000).start()
        self.lm = self.om = None
        self.open()

    def open(self):
        self.lm = LogManager([self.data_dir], LogConfig(), background=False)
        self.lm.startup()
        self.om = OffsetManager(self.lm, self.cluster, self.broker_id, num_partitions=self.num_partitions, **self.om_kw)
        self.om.startup()
        return self

    def restart(self):
        self.om.shutdown()
        self.lm.shutdown()
        return self.open()

    def close(self):
        self.om.shutdown()
        self.lm.shutdown()
        self.cluster.stop()


def group_on(om, partition, prefix="g"):
    return next(f"{prefix}{i}" for i in range(10000) if om.partition_for(f"{prefix}{i}") == partition)
