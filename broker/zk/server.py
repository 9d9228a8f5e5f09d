"""Run a real ZooKeeper server from the jars bundled with pyspark (``pyklog-zookeeper``).

The server is ``org.apache.zookeeper.server.ZooKeeperServerMain`` with a config file bound to
127.0.0.1 (the short ``PORT DIR`` form would listen on every interface), admin server off.

:class:`ZooKeeperServer` is used by tests, the demo and notebooks (without ``data_dir`` it uses a
temporary directory removed on stop); ``main()`` is the console script, which keeps its data in a
persistent directory by default (:func:`default_data_dir`), because a ZooKeeper that comes back
empty has forgotten every topic and the cluster id (Kafka's quickstart keeps ZooKeeper's
``dataDir`` for the same reason).  ``--ephemeral`` asks for a throwaway directory.
``--require-auth`` (``require_auth``) makes ZooKeeper refuse clients that did not authenticate
with the digest scheme (ZooKeeper 3.7+'s ``enforce.auth``; pyspark bundles 3.9), and
``--super-digest`` (``super_digest``) names a super user by its digest, never its password.
Not thread-safe: one owner starts and stops it.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from pyklog.broker.common.cli import add_version_argument

log = logging.getLogger(__name__)


def pyspark_jars_dir() -> str:
    """The jars directory of the installed pyspark package, found without importing pyspark (the
    broker never imports it: only ZooKeeper's jars are borrowed)."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("pyspark is not installed: ZooKeeper's jars come from its jars directory")
    jars = os.path.join(next(iter(spec.submodule_search_locations)), "jars")
    if not os.path.isdir(jars):
        raise RuntimeError(f"pyspark's jars directory not found at {jars}")
    return jars


def default_data_dir(port: int) -> str:
    """``$XDG_DATA_HOME/pyklog/zookeeper-<port>`` (``~/.local/share/pyklog/zookeeper-<port>``):
    where ``pyklog-zookeeper`` keeps its data unless told otherwise."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(base, "pyklog", f"zookeeper-{int(port)}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def four_letter_word(host: str, port: int, word: str = "ruok", timeout: float = 1.0) -> str:
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(word.encode())
        chunks = []
        while True:
            b = s.recv(4096)
            if not b:
                break
            chunks.append(b)
    return b"".join(chunks).decode(errors="replace")


class ZooKeeperServer:
    """A ZooKeeper child process on 127.0.0.1.  ``connect_string`` is ``127.0.0.1:<port>``."""

    def __init__(
        self,
        data_dir: str | None = None,
        port: int | None = None,
        log_file: str | None = None,
        tick_time_ms: int = 2000,
        max_session_timeout_ms: int | None = None,
        require_auth: bool = False,
        super_digest: str | None = None,
    ):
        self._own_dir = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="pyklog-zk-")
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.log_file = log_file or os.path.join(self.data_dir, "zookeeper.log")
        self.tick_time_ms = tick_time_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        #: ZooKeeper 3.7+'s enforce.auth: a client must authenticate with the digest scheme before
        #: any request (an unauthenticated session is closed)
        self.require_auth = require_auth
        #: ``user:base64(sha1(user:password))``: that user may do anything, whatever a znode's ACL
        #: (ZooKeeper's DigestAuthenticationProvider.superDigest; pyklog.broker.zk.znode_acls.digest_id)
        self.super_digest = super_digest
        if super_digest is not None and not re.fullmatch(r"[^:\s]+:[A-Za-z0-9+/]{27}=", super_digest):
            raise ValueError("super digest must be user:base64(sha1(user:password)) (28 characters after the ':')")
        self.proc: subprocess.Popen | None = None

    @property
    def connect_string(self) -> str:
        return f"{self.host}:{self.port}"

    def _write_config(self) -> str:
        os.makedirs(os.path.join(self.data_dir, "data"), exist_ok=True)
        cfg = os.path.join(self.data_dir, "zoo.cfg")
        lines = [
            f"tickTime={self.tick_time_ms}",
            f"dataDir={os.path.join(self.data_dir, 'data')}",
            f"clientPort={self.port}",
            "clientPortAddress=127.0.0.1",
            "admin.enableServer=false",
            "4lw.commands.whitelist=ruok,srvr,stat,mntr",
            "maxClientCnxns=0",
        ]
        if self.max_session_timeout_ms:
            lines.append(f"maxSessionTimeout={self.max_session_timeout_ms}")
        if self.require_auth:
            lines += ["enforce.auth.enabled=true", "enforce.auth.schemes=digest"]
        with open(cfg, "w") as f:
            f.write("\n".join(lines) + "\n")
        return cfg

    def start(self, timeout: float = 60.0) -> ZooKeeperServer:
        java = shutil.which("java")
        if not java:
            raise RuntimeError("java not found on PATH: ZooKeeper needs a JRE (Java 17 is expected)")
        cfg = self._write_config()
        cmd = [
            java,
            "-Xmx256m",
            "-XX:+UseSerialGC",
            "-Dlog4j2.configurationFile=classpath:org/apache/spark/log4j2-defaults.properties",
            "-Dzookeeper.admin.enableServer=false",
            *(
                [f"-Dzookeeper.DigestAuthenticationProvider.superDigest={self.super_digest}"]
                if self.super_digest
                else []
            ),
            "-cp",
            os.path.join(pyspark_jars_dir(), "*"),
            "org.apache.zookeeper.server.ZooKeeperServerMain",
            cfg,
        ]
        self._log = open(self.log_file, "ab")  # noqa: SIM115 - ZooKeeper writes to it until stop() closes it
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.proc.returncode}; log:\n{self.read_log()}")
            try:
                if four_letter_word(self.host, self.port, "ruok") == "imok":
                    log.info("ZooKeeper ready on %s", self.connect_string)
                    return self
            except OSError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer ruok within {timeout}s; log:\n{self.read_log()}")

    def read_log(self) -> str:
        try:
            with open(self.log_file, "rb") as f:
                return f.read()[-20000:].decode(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "_log", None):
            self._log.close()
            self._log = None
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="pyklog-zookeeper", description="Start a real ZooKeeper (from pyspark's jars) on 127.0.0.1."
    )
    add_version_argument(p)
    p.add_argument("--port", type=int, default=2181)
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--data-dir",
        default=None,
        help="data directory, kept across restarts (default: $XDG_DATA_HOME/pyklog/zookeeper-PORT, "
        "i.e. ~/.local/share/pyklog/zookeeper-PORT)",
    )
    where.add_argument(
        "--ephemeral",
        action="store_true",
        help="use a temporary data directory, REMOVED on exit: the next start is an empty "
        "ZooKeeper, and brokers with data refuse to join it (their meta.properties names "
        "the old cluster id)",
    )
    p.add_argument(
        "--require-auth",
        action="store_true",
        help="refuse clients that do not authenticate with the digest scheme (ZooKeeper's "
        "enforce.auth.enabled): brokers, tools and consumers then need ZooKeeper credentials",
    )
    p.add_argument(
        "--super-digest",
        metavar="USER:DIGEST",
        help="a super user that may change any znode whatever its ACL, as ZooKeeper's "
        "DigestAuthenticationProvider.superDigest: USER:base64(sha1(USER:PASSWORD)), e.g. from "
        "python -c \"from pyklog.broker.zk.znode_acls import digest_id; print(digest_id('admin', 'PASSWORD'))\"",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    data_dir = None if args.ephemeral else os.path.abspath(args.data_dir or default_data_dir(args.port))
    if data_dir is not None:
        os.makedirs(data_dir, exist_ok=True)
    try:
        zk = ZooKeeperServer(
            data_dir=data_dir, port=args.port, require_auth=args.require_auth, super_digest=args.super_digest
        )
    except ValueError as e:
        p.error(str(e))
    zk.start()
    kind = "temporary, removed on exit" if args.ephemeral else "kept across restarts"
    auth = "; clients must authenticate (digest)" if args.require_auth else ""
    print(
        f"ZooKeeper listening on {zk.connect_string} (data in {zk.data_dir}, {kind}{auth}); Ctrl-C or SIGTERM stops it",
        flush=True,
    )
    stop = []
    signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    try:
        while not stop and zk.proc.poll() is None:
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
