"""A registry child process (``python -m pyklog.connector.schema_registry.main``), for the tests,
the demo and tools: :class:`RegistryProcess` writes its properties file, starts it, waits for its
ready line (``Server started``), stops it with a signal.  Its output goes to ``<workdir>/<name>.out``.
Not thread-safe (one owner starts and stops it).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

READY_LINE = "Server started"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the registry binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class RegistryProcess:
    """``bootstrap``: the cluster; ``props``: more registry settings (Confluent's names)."""

    def __init__(self, bootstrap: str, workdir, name: str = "sr", port: int | None = None, **props):
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config = os.path.join(str(workdir), f"{name}.properties")
        self.out_path = os.path.join(str(workdir), f"{name}.out")
        settings = {
            "listeners": self.url,
            "kafkastore.bootstrap.servers": bootstrap,
            "kafkastore.timeout.ms": "6000",
            **props,
        }
        with open(self.config, "w") as f:
            f.writelines(f"{k}={v}\n" for k, v in settings.items())
        self.proc: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> RegistryProcess:
        seen = len(self.output())  # a restart appends to the same file
        self._out = open(self.out_path, "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pyklog.connector.schema_registry.main", self.config],
            stdout=self._out,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + timeout
        while READY_LINE not in self.output()[seen:]:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the registry exited with {self.proc.returncode}:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the registry did not start:\n{self.output()[-3000:]}")
            time.sleep(0.1)
        return self

    def output(self) -> str:
        try:
            with open(self.out_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, sig=signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self._out.close()
        self.proc = None
