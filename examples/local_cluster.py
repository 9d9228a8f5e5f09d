"""A throwaway local pyklog cluster for the examples, the demo and the notebook: ZooKeeper from
pyspark's jars (broker.zk.server.ZooKeeperServer) and one broker process (``python -m pyklog.broker``) on a
temporary directory.  ``with LocalCluster() as c: c.bootstrap, c.zookeeper``; everything is stopped
and deleted on exit.  Not thread-safe (one owner starts and stops it).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from pyklog.broker.server.process import BrokerProcess
from pyklog.broker.zk.server import ZooKeeperServer, free_port


class LocalCluster:
    def __init__(self, partitions: int = 3, chroot: str = "/pyklog", quiet: bool = True):
        self.dir = tempfile.mkdtemp(prefix="pyklog-local-")
        self.partitions = partitions
        self.chroot = chroot
        self.quiet = quiet
        self.zk: ZooKeeperServer | None = None
        self.broker: BrokerProcess | None = None
        self.port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def zookeeper(self) -> str:
        """The connect string with the cluster's chroot (what brokers and consumers use)."""
        return self.zk.connect_string + self.chroot

    def start(self, timeout: float = 90.0) -> LocalCluster:
        atexit.register(self.stop)  # a notebook kernel or script that dies early still cleans up
        self.zk = ZooKeeperServer(data_dir=os.path.join(self.dir, "zookeeper"))
        self.zk.start()
        from kazoo.client import KazooClient

        kc = KazooClient(hosts=self.zk.connect_string)
        kc.start(timeout=30)
        kc.ensure_path(self.chroot)
        kc.stop()
        kc.close()
        self.broker = BrokerProcess(self.zookeeper, 0, log_dir=self.dir, port=self.port, num_partitions=self.partitions)
        self.broker.start(timeout)
        return self

    def stop(self) -> None:
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        if self.zk is not None:
            self.zk.stop()
            self.zk = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
