"""Offline log dirs without a server: the failure channel (one ERROR per dir and cause, each dir
queued once), the LogManager (the dir's logs leave, are never re-created elsewhere, get nothing
written; the other dir keeps working) and the ReplicaManager (the partitions answer
KAFKA_STORAGE_ERROR, the controller is told through a log dir event znode, the broker halts when no
dir is left).  Real logs in temporary directories; the I/O error is an OSError handed to the
channel, as a failing write hands it."""

from __future__ import annotations

import errno
import json
import logging
import os
import time

import pytest

from pyklog.broker.errors import KafkaStorageError
from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.log.dir_failure import LogDirFailureChannel
from pyklog.broker.log.manager import CLEAN_SHUTDOWN_FILE
from pyklog.broker.record.batch import build_batch
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.server.fetch import FetchParams
from pyklog.broker.server.replica_manager import ReplicaManager
from pyklog.broker.zk import paths

ENOSPC = OSError(errno.ENOSPC, "No space left on device")
EIO = OSError(errno.EIO, "Input/output error")


def batch(n=2):
    return build_batch([(b"k", b"x" * 10, 1_000_000, ())] * n)


def test_channel_logs_once_per_dir_and_cause_and_queues_each_dir_once(caplog):
    ch = LogDirFailureChannel()
    with caplog.at_level(logging.INFO, logger="pyklog.broker.log.dir_failure"):
        for _ in range(50):
            ch.maybe_add_offline_log_dir("/d1", "/d1/t-0/0.log", "write", ENOSPC)
        ch.maybe_add_offline_log_dir("/d1", "/d1/t-1/0.log", "flush", EIO)
        ch.maybe_add_offline_log_dir("/d2", "/d2/t-2/0.log", "write", ENOSPC)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 3, errors  # (d1, ENOSPC), (d1, EIO), (d2, ENOSPC)
    assert "/d1" in errors[0] and "/d1/t-0/0.log" in errors[0] and "ENOSPC" in errors[0]
    assert ch.failures("/d1") == 51
    assert ch.offline_log_dirs == {"/d1", "/d2"}
    assert [ch.take(0), ch.take(0), ch.take(0)] == ["/d1", "/d2", None]
    with pytest.raises(KafkaStorageError, match="offline"):
        ch.check_online("/d1", "t-0")
    ch.check_online("/d3", "t-3")


@pytest.fixture
def two_dirs(tmp_path):
    dirs = [str(tmp_path / "a"), str(tmp_path / "b")]
    logs = LogManager(dirs, LogConfig(), background=False)
    logs.startup()
    yield logs, dirs
    logs.shutdown()


def test_log_manager_takes_the_offline_dirs_logs_out_and_keeps_the_other_dir(two_dirs):
    logs, (a, b) = two_dirs
    la = logs.get_or_create_log("t", 0)
    lb = logs.get_or_create_log("t", 1)
    assert (la.log_dir, lb.log_dir) == (a, b)  # placement: the dir with the fewest logs
    la.append(batch())
    logs.failure_channel.maybe_add_offline_log_dir(a, la.dir, "write", ENOSPC)
    with pytest.raises(KafkaStorageError):  # at once, before the handler runs (Kafka's hasOfflineLogDir)
        la.append(batch())
    assert logs.handle_log_dir_failure(a) == [("t", 0)]
    assert logs.get_log("t", 0) is None and logs.offline_log_dir_of("t", 0) == a
    assert logs.live_log_dirs == [b]
    with pytest.raises(KafkaStorageError, match="offline"):
        logs.get_or_create_log("t", 0)  # never re-created empty in the other dir
    with pytest.raises(KafkaStorageError, match="offline"):
        logs.get_or_create_log("t", 2)  # nor any other until a restart (it may have been in the failed dir)
    assert logs.get_or_create_log("t", 1) is lb
    lb.append(batch())
    logs.checkpoint()
    logs.shutdown()
    assert os.path.exists(os.path.join(b, CLEAN_SHUTDOWN_FILE))
    assert not os.path.exists(os.path.join(a, CLEAN_SHUTDOWN_FILE))  # nothing written to a failed dir


class _Zk:
    def __init__(self):
        self.created = []

    def create(self, path, data, sequence=False, makepath=False):
        self.created.append((path, json.loads(data)))


class _Cluster:
    """What the replica manager reads of the cluster: one replica (this broker) per partition."""

    def __init__(self):
        self.zk = _Zk()
        self.controller_id = 1
        self.offline_reported = []  # report_offline_replicas calls (Metadata's offline_replicas)

    def topics(self):
        return {"t": {}}

    def partitions_hosted_by(self, broker_id):
        return {("t", 0), ("t", 1)}

    def partition_states_as_written(self, topic):
        return None

    def add_partition_state_listener(self, fn):
        pass

    def remove_partition_state_listener(self, fn):
        pass

    def partition_replicas(self, topic, partition):
        return [1]

    def topic_config(self, topic):
        return {}

    def topic_id(self, name):
        return None

    def topic(self, name, refresh_if_missing=False):
        return {0: None, 1: None}

    def retry(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)

    def topics_being_deleted(self):
        return frozenset()

    def report_offline_replicas(self, partitions):
        self.offline_reported.append(sorted(partitions))


def wait_until(predicate, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_replica_manager_offline_partitions_answer_storage_error_tell_the_controller_and_halt(two_dirs):
    logs, (a, b) = two_dirs
    config = ServerConfig.from_properties(
        {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "auto.create.topics.enable": "false"}
    )
    cluster = _Cluster()
    halted = []
    rm = ReplicaManager(config, logs, cluster, default_log_config=LogConfig(), halt=halted.append)
    try:
        rm.become_leader("t", 0, 0, [1], None)
        rm.become_leader("t", 1, 0, [1], None)
        assert (logs.get_log("t", 0).log_dir, logs.get_log("t", 1).log_dir) == (a, b)

        # a failing write reports to the channel; the handler thread takes the dir's partitions offline
        logs.failure_channel.maybe_add_offline_log_dir(a, a, "write", ENOSPC)
        wait_until(lambda: cluster.zk.created)
        assert rm.offline_partitions == {("t", 0)}
        assert rm.handle_log_dir_failure(a) == []  # handled once
        got = []
        rm.append_records(1000, 1, [("t", 0, batch()), ("t", 1, batch())], got.append)
        (r0, r1) = got[0]
        assert isinstance(r0.error, KafkaStorageError) and r1.error is None
        with pytest.raises(KafkaStorageError):
            rm.leader_log("t", 0)
        params = FetchParams(
            request_version=12, replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        fetched = []
        rm.fetch_messages(params, [("t", [(0, 0, 1 << 20, -1), (1, 0, 1 << 20, -1)])], None, fetched.append)
        (f0, f1) = [data for _, data in fetched[0][0][1]]
        assert isinstance(f0.error, KafkaStorageError) and f1.error is None and f1.records is not None
        (path, data) = cluster.zk.created[0]
        assert path == paths.LOG_DIR_EVENT_PREFIX
        assert data == {"version": 1, "broker": 1, "event": 1, "partitions": [{"topic": "t", "partition": 0}]}
        assert halted == []
        assert cluster.offline_reported == [[("t", 0)]]  # every broker's Metadata names it offline
        rm.sync_logs()
        assert len(cluster.zk.created) == 1  # the controller knows
        cluster.controller_id = 2  # a new controller: told again at the next sync
        rm.sync_logs()
        assert [c[1]["partitions"] for c in cluster.zk.created] == [[{"topic": "t", "partition": 0}]] * 2
        assert halted == []

        logs.failure_channel.maybe_add_offline_log_dir(b, b, "checkpoint", EIO)
        wait_until(lambda: halted)
        assert rm.offline_partitions == {("t", 0), ("t", 1)}
        assert len(halted) == 1 and "all log dirs in" in halted[0] and a in halted[0] and b in halted[0]
        assert len(cluster.zk.created) == 2  # halting instead: the lost session tells the controller
    finally:
        rm.complete_delayed_operations()
        rm.shutdown()
