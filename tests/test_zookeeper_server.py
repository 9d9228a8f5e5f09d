"""The ZooKeeper launcher: a real server from pyspark's jars, bound to loopback, usable by kazoo."""
import subprocess
import sys

from kazoo.client import KazooClient

from pyklog.broker.zk import paths
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


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "pyklog.broker.zk.server", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "ZooKeeper" in out.stdout


def test_paths_are_the_seeds():
    assert paths.broker_id(3) == "/brokers/ids/3"
    assert paths.partition_state("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.consumer_id("g", "h:u") == "/consumers/g/ids/h:u"
    assert paths.consumer_offset("g", "t", 1) == "/consumers/g/offsets/t/1"
    assert paths.partition_owner("g", "t", 1) == "/consumers/g/owners/t/1"
