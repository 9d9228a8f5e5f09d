"""The ZooKeeper launcher: a real server from pyspark's jars, bound to loopback, usable by kazoo."""

import subprocess
import sys

from pyklog.broker.zk import paths


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "pyklog.broker.zk.server", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "ZooKeeper" in out.stdout


def test_paths_are_the_seeds():
    assert paths.broker_id(3) == "/brokers/ids/3"
    assert paths.partition_state("t", 2) == "/brokers/topics/t/partitions/2/state"
    assert paths.consumer_id("g", "h:u") == "/consumers/g/ids/h:u"
    assert paths.consumer_offset("g", "t", 1) == "/consumers/g/offsets/t/1"
    assert paths.partition_owner("g", "t", 1) == "/consumers/g/owners/t/1"
