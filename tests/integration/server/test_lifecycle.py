"""Broker process lifecycle: start-up errors, SIGTERM shutdown, restart with data intact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from pyklog.broker.protocol import ApiKey
from tests.support import (
    BrokerProcess,
    Wire,
    create_topic,
    fetch,
    port_open,
    produce,
    records,
    stable_port,
    values,
)


def _run_broker(tmp_path, lines: list[str], timeout: float = 60) -> subprocess.CompletedProcess:
    cfg = tmp_path / "server.properties"
    cfg.write_text("\n".join(lines) + "\n")
    return subprocess.run(
        [sys.executable, "-m", "pyklog.broker", str(cfg)],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def test_bad_config_exits_non_zero_naming_the_key(tmp_path, zk_chroot):
    base = [
        "broker.id=0",
        f"zookeeper.connect={zk_chroot}",
        f"log.dirs={tmp_path / 'data'}",
        "listeners=PLAINTEXT://127.0.0.1:0",
    ]
    for extra, key in [
        ("no.such.key=1", "no.such.key"),
        ("num.io.threads=lots", "num.io.threads"),
        ("log.segment.bytes=-5", "segment.bytes"),
        ("listeners=SSL://127.0.0.1:0", "listeners"),
        ("log.cleanup.policy=shred", "cleanup.policy"),
    ]:
        r = _run_broker(tmp_path, base + [extra])
        assert r.returncode == 2, (extra, r.stderr[-2000:])
        assert key in r.stderr, (extra, r.stderr[-2000:])
    r = _run_broker(tmp_path, base[1:])
    assert r.returncode == 2 and "broker.id" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "pyklog.broker", str(tmp_path / "missing.properties")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "missing.properties" in r.stderr


def test_unreachable_zookeeper_exits_non_zero(tmp_path):
    from pyklog.broker.zk.server import free_port

    r = _run_broker(
        tmp_path,
        [
            "broker.id=0",
            f"zookeeper.connect=127.0.0.1:{free_port()}",
            f"log.dirs={tmp_path / 'data'}",
            "listeners=PLAINTEXT://127.0.0.1:0",
            "zookeeper.connection.timeout.ms=2000",
            "zookeeper.session.timeout.ms=2000",
        ],
    )
    assert r.returncode == 1, r.stderr[-3000:]
    assert "ZooKeeper" in r.stderr and "Traceback" not in r.stderr, r.stderr[-3000:]


def test_sigterm_shuts_down_cleanly_and_restart_keeps_data(broker_factory, zk_chroot):
    from kazoo.client import KazooClient

    b = broker_factory(0, port=stable_port())
    name = "lifecycle"
    with Wire(b.port) as w:
        assert create_topic(w, name, 2)["error_code"] == 0
        for i in range(5):
            assert produce(w, name, records(10, b"%d-" % i))["error_code"] == 0
        assert produce(w, name, records(3), partition=1)["error_code"] == 0
    kc = KazooClient(hosts=zk_chroot)
    kc.start(timeout=30)
    try:
        assert kc.exists("/brokers/ids/0")
        assert b.stop(signal.SIGTERM) == 0
        out = b.output()
        assert "shut down cleanly" in out
        assert "Traceback" not in out, out[-5000:]
        data = b.props["log.dirs"]
        assert os.path.exists(os.path.join(data, ".kafka_cleanshutdown"))
        assert not kc.exists("/brokers/ids/0")
        assert not port_open(b.port)
        b.start()
        # the clean-shutdown marker skips recovery: the restart's output has no "recovered N segment(s)"
        restart_out = b.output().rsplit("shut down cleanly", 1)[-1]
        assert "pyklog broker started" in restart_out
        assert "recovered" not in restart_out, restart_out[-3000:]
        with Wire(b.port) as w:
            part = fetch(w, name, 0)
            assert part["high_watermark"] == 50
            assert values(part["records"])[:10] == [b"0-%d" % i for i in range(10)]
            assert fetch(w, name, 0, partition=1)["high_watermark"] == 3
            assert produce(w, name, records(1))["base_offset"] == 50
    finally:
        kc.stop()
        kc.close()


def test_sigkill_then_restart_recovers(broker_factory):
    b = broker_factory(0, port=stable_port())
    with Wire(b.port) as w:
        create_topic(w, "crash", 1)
        for i in range(20):
            produce(w, "crash", records(5, b"%d-" % i))
    b.kill()
    before = len(b.output())
    b.start()
    assert "recovered" in b.output()[before:], b.output()[before:][-3000:]  # no marker: recovery ran
    with Wire(b.port) as w:
        part = fetch(w, "crash", 0, partition_max_bytes=1 << 20)
        assert part["high_watermark"] == 100
        assert produce(w, "crash", records(1))["base_offset"] == 100


def test_broker_id_in_use_exits_non_zero(broker_factory):
    first = broker_factory(0, port=stable_port())
    second = broker_factory(0, start=False, port=stable_port())
    second.start(expect_ready=False)
    rc = second.wait_exit(60)
    assert rc == 1
    assert "broker.id" in second.output() or "in use" in second.output().lower()
    with Wire(first.port) as w:
        assert w.request(ApiKey.API_VERSIONS, 2, {})["error_code"] == 0


def test_port_zero_registers_the_bound_port(zk_chroot, tmp_path):
    """``listeners=PLAINTEXT://127.0.0.1:0``: the broker binds a free port and advertises it."""
    b = BrokerProcess(zk_chroot, 7, log_dir=str(tmp_path))
    b.props["listeners"] = "PLAINTEXT://127.0.0.1:0"
    b.start()
    try:
        line = [ln for ln in b.output().splitlines() if "pyklog broker started" in ln][-1]
        port = int(line.rsplit(":", 1)[1].rstrip(")"))
        with Wire(port) as w:
            meta = w.request(ApiKey.METADATA, 8, {"topics": []})
            assert [(x["node_id"], x["port"]) for x in meta["brokers"]] == [(7, port)]
    finally:
        assert b.stop() == 0
