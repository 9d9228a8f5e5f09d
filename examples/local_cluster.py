"""A throwaway local pyklog cluster for the examples, the demo and the notebook: ZooKeeper from
pyspark's jars (broker.zk.server.ZooKeeperServer) and one broker process (``python -m broker``) on a
temporary directory.  ``with LocalCluster() as c: c.bootstrap, c.zookeeper``; everything is stopped
and deleted on exit.  Not thread-safe (one owner starts and stops it).
"""
from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from broker.zk.server import ZooKeeperServer, free_port

READY = "pyklog broker started"


class LocalCluster:
    def __init__(self, partitions: int = 3, chroot: str = "/pyklog", quiet: bool = True):
        self.dir = tempfile.mkdtemp(prefix="pyklog-local-")
        self.partitions = partitions
        self.chroot = chroot
        self.quiet = quiet
        self.zk: ZooKeeperServer | None = None
        self.proc: subprocess.Popen | None = None
        self.port = free_port()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def zookeeper(self) -> str:
        """The connect string with the cluster's chroot (what brokers and consumers use)."""
        return self.zk.connect_string + self.chroot

    def start(self, timeout: float = 90.0) -> "LocalCluster":
        atexit.register(self.stop)  # a notebook kernel or script that dies early still cleans up
        self.zk = ZooKeeperServer(data_dir=os.path.join(self.dir, "zookeeper"))
        self.zk.start()
        from kazoo.client import KazooClient

        kc = KazooClient(hosts=self.zk.connect_string)
        kc.start(timeout=30)
        kc.ensure_path(self.chroot)
        kc.stop()
        kc.close()
        cfg = os.path.join(self.dir, "server.properties")
        with open(cfg, "w") as f:
            f.write(f"broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{self.port}\n"
                    f"log.dirs={os.path.join(self.dir, 'logs')}\nzookeeper.connect={self.zookeeper}\n"
                    f"num.partitions={self.partitions}\noffsets.topic.num.partitions=4\n")
        self.log_path = os.path.join(self.dir, "broker.out")
        out = open(self.log_path, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "broker", cfg], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the broker exited with {self.proc.returncode}:\n{self._log()[-4000:]}")
            if READY in self._log():
                return self
            time.sleep(0.1)
        raise RuntimeError(f"the broker did not start within {timeout}s:\n{self._log()[-4000:]}")

    def _log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        if self.zk is not None:
            self.zk.stop()
            self.zk = None
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
