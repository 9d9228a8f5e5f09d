"""A schema registry child process for the integration tests (``pyklog-schema-registry``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

from pyklog.broker.zk.server import free_port

CT = "application/vnd.schemaregistry.v1+json"


class RegistryProcess:
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
        while "Server started" not in self.output()[seen:]:
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


def call(url: str, method: str, path: str, body=None, timeout: float = 30.0) -> tuple[int, object]:
    """``(status, JSON body)`` of one request to the registry."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url + path, data=data, method=method, headers={"Content-Type": CT})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")
