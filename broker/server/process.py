"""A broker child process (``python -m pyklog.broker server.properties``) for tests, examples, the demo,
notebooks and benchmarks: writes the properties file, starts the process with its output in
``<log_dir>/broker.out``, waits for the ready line, stops it with a signal.

Not thread-safe: one owner starts and stops it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time

from pyklog.broker.server.main import READY_MESSAGE
from pyklog.broker.zk.server import free_port

# the broker logs READY_MESSAGE ("pyklog broker started (broker.id=N, listener=host:port)") when serving
READY_LINE = READY_MESSAGE.split(" (")[0]


class BrokerProcess:
    """One broker child process.  ``props`` override server.properties entries."""

    def __init__(
        self,
        zk_connect: str,
        broker_id: int = 0,
        log_dir: str | None = None,
        port: int | None = None,
        log_level: str | None = None,
        **props,
    ):
        self.broker_id = broker_id
        self.log_level = log_level  # the broker's --log-level (None: its default, INFO)
        self.port = port or free_port()
        self.log_dir = log_dir or tempfile.mkdtemp(prefix=f"pyklog-broker{broker_id}-")
        os.makedirs(self.log_dir, exist_ok=True)
        self.zk_connect = zk_connect
        self.props = {
            "broker.id": str(broker_id),
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "log.dirs": os.path.join(self.log_dir, "data"),
            "zookeeper.connect": zk_connect,
            "num.partitions": "1",
            "offsets.topic.num.partitions": "4",
            "zookeeper.session.timeout.ms": "6000",
        }
        self.props.update({k.replace("_", "."): str(v) for k, v in props.items()})
        self.proc: subprocess.Popen | None = None
        self.stdout_path = os.path.join(self.log_dir, "broker.out")

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def write_config(self) -> str:
        path = os.path.join(self.log_dir, "server.properties")
        with open(path, "w") as f:
            for k, v in self.props.items():
                f.write(f"{k}={v}\n")
        return path

    def start(self, timeout: float = 60.0, expect_ready: bool = True) -> BrokerProcess:
        cfg = self.write_config()
        self._out = open(self.stdout_path, "ab")  # noqa: SIM115 - the child writes to it until stop() closes it
        self._mark = self._out.tell()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        argv = [sys.executable, "-m", "pyklog.broker", cfg]
        if self.log_level:
            argv += ["--log-level", self.log_level]
        self.proc = subprocess.Popen(
            argv, stdout=self._out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
        if expect_ready:
            self.wait_ready(timeout)
        return self

    def output(self) -> str:
        try:
            with open(self.stdout_path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"broker {self.broker_id} exited with {self.proc.returncode}:\n{self.output()[-8000:]}"
                )
            with open(self.stdout_path, "rb") as f:
                f.seek(self._mark)
                if READY_LINE.encode() in f.read():
                    return
            time.sleep(0.05)
        raise RuntimeError(f"broker {self.broker_id} not ready within {timeout}s:\n{self.output()[-8000:]}")

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.proc.wait(timeout)

    def stop(self, sig=signal.SIGTERM, timeout: float = 30.0) -> int | None:
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_out", None):
            self._out.close()
            self._out = None
        return self.proc.returncode

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self, timeout: float = 60.0) -> BrokerProcess:
        self.stop()
        return self.start(timeout)
