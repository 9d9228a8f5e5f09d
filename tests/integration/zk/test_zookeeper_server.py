"""The ZooKeeper launcher: a real server from pyspark's jars, bound to loopback, usable by kazoo."""

import subprocess
import sys

from kazoo.client import KazooClient

from pyklog.broker.zk.server import four_letter_word


def test_shared_zookeeper_answers_and_stores(zookeeper):
    host, port = zookeeper.split(":")
    assert four_letter_word(host, int(port), "ruok") == "imok"
    kc = KazooClient(hosts=zookeeper)
    kc.start(timeout=30)
    try:
        kc.ensure_path("/pyklog-selftest")
        kc.set("/pyklog-selftest", b"x")
        assert kc.get("/pyklog-selftest")[0] == b"x"
    finally:
        kc.delete("/pyklog-selftest")
        kc.stop()


def _start_console_zookeeper(env, port, *extra):
    import os
    import time

    proc = subprocess.Popen(
        [sys.executable, "-m", "pyklog.broker.zk.server", "--port", str(port), *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    lines = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "ZooKeeper listening on" in line:
            return proc, line
    proc.kill()
    raise AssertionError("pyklog-zookeeper did not start:\n" + "".join(lines) + os.linesep)


def _stop(proc):
    import signal

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
    proc.stdout.close()


def test_console_zookeeper_keeps_its_data_by_default(tmp_path):
    """(d) pyklog-zookeeper without --data-dir keeps its data across a restart (a znode survives),
    prints where; --ephemeral comes back empty.  Old code: a temporary dir, removed on exit."""
    import os

    from pyklog.broker.zk.server import free_port

    env = dict(os.environ, XDG_DATA_HOME=str(tmp_path / "xdg"))
    port = free_port()
    expected = os.path.join(str(tmp_path / "xdg"), "pyklog", f"zookeeper-{port}")
    proc, first_banner = _start_console_zookeeper(env, port)
    kc = KazooClient(hosts=f"127.0.0.1:{port}")
    kc.start(timeout=30)
    kc.create("/survivor", b"still here")
    kc.stop()
    kc.close()
    _stop(proc)

    proc, _ = _start_console_zookeeper(env, port)
    kc = KazooClient(hosts=f"127.0.0.1:{port}")
    kc.start(timeout=30)
    try:
        assert kc.get("/survivor")[0] == b"still here"
    finally:
        kc.stop()
        kc.close()
        _stop(proc)
    assert expected in first_banner and "kept across restarts" in first_banner
    assert os.path.isdir(expected)

    proc, banner = _start_console_zookeeper(env, port, "--ephemeral")
    assert "removed on exit" in banner
    kc = KazooClient(hosts=f"127.0.0.1:{port}")
    kc.start(timeout=30)
    try:
        assert kc.exists("/survivor") is None
    finally:
        kc.stop()
        kc.close()
        _stop(proc)
    from pyklog.broker.zk.server import default_data_dir

    with_home = default_data_dir(2181)
    assert with_home.endswith(os.path.join("pyklog", "zookeeper-2181"))
