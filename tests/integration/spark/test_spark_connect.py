"""pyklog through a real Spark Connect server: a client script that registers pyklog, reads,
writes and runs a consumer-group query, then ends without ``spark.stop()``, exits on its own.

PySpark's Connect client runs its streaming query listener bus on a non-daemon thread that waits on
the server for as long as a listener is registered; ``pyklog.register`` adds one (the batch-end
relay), so before pyklog released it at exit such a script never ended.  The test also checks the
script's results: 10,000 rows read, 1,000 written (read back here), the group query's rows and its
committed offsets in ZooKeeper.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from kazoo.client import KazooClient

from pyklog.broker.zk import paths
from pyklog.connector.consumer import SimpleConsumer
from tests.integration.spark.support import make_topic, produce
from tests.support import port_open, stable_port

HERE = os.path.dirname(os.path.abspath(__file__))
EXIT_WITHIN_S = 180  # a generous bound for a loaded machine; a script that hangs never exits


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A Spark Connect server (``SparkConnectServer`` through spark-submit, as start-connect-server.sh
    runs it) whose Python workers use this interpreter; its URL."""
    import pyspark

    home = os.path.dirname(pyspark.__file__)
    port = stable_port()
    work = tmp_path_factory.mktemp("connect")
    log_path = work / "server.log"
    env = dict(os.environ, SPARK_HOME=home, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_DIRS=str(work))
    cmd = [
        os.path.join(home, "bin", "spark-submit"),
        "--class",
        "org.apache.spark.sql.connect.service.SparkConnectServer",
        "--name",
        "pyklog-connect-tests",
        "--master",
        "local[2]",
        "--conf",
        f"spark.connect.grpc.binding.port={port}",
        "--conf",
        "spark.ui.enabled=false",
        "--conf",
        "spark.sql.shuffle.partitions=2",
    ]
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=work, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not port_open(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the Spark Connect server did not start:\n{log_path.read_text()[-4000:]}")
            time.sleep(0.5)
        yield f"sc://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_a_connect_script_that_does_not_stop_spark_exits(connect_server, broker, zk_chroot, tmp_path):
    boot = broker.bootstrap
    source, target, group = f"cin-{uuid.uuid4().hex[:6]}", f"cout-{uuid.uuid4().hex[:6]}", "connect-g"
    make_topic(boot, source, 2)
    make_topic(boot, target, 1)
    produce(boot, source, 10_000, 2)
    args = [sys.executable, os.path.join(HERE, "connect_client_proc.py"), connect_server, boot, zk_chroot]
    args += [source, target, group, str(tmp_path / "checkpoint")]
    started = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=EXIT_WITHIN_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the script did not exit within {EXIT_WITHIN_S} s; its output:\n{out}\n{err[-4000:]}")
    print(f"\nthe Connect client script exited after {time.monotonic() - started:.1f} s")
    assert proc.returncode == 0, err[-4000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert result == {"read": 10_000, "streamed": 10_000}, result

    with SimpleConsumer(boot) as c:
        written = list(c.iter_records(target, 0, 0))
    assert len(written) == 1000

    kc = KazooClient(hosts=zk_chroot)
    kc.start(timeout=30)
    try:
        committed = {p: int(kc.get(paths.consumer_offset(group, source, p))[0]) for p in range(2)}
    finally:
        kc.stop()
        kc.close()
    assert committed == {0: 5000, 1: 5000}, committed
