"""ReplicaManager's Produce and Fetch paths without a server: ``append_records`` and
``fetch_messages`` answer through their callbacks, at once or after a long poll in the fetch
purgatory.  A real LogManager in a temporary directory; the cluster is a stand-in for a partition
with a single replica led here (no ZooKeeper)."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import (
    FencedLeaderEpochError,
    InvalidRecordError,
    InvalidTopicError,
    UnknownTopicOrPartitionError,
)
from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.record.batch import build_batch
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.server.fetch import FetchParams
from pyklog.broker.server.replica_manager import ReplicaManager

TOPIC = "t"


def batch(i, n=2):
    return build_batch([(b"k%04d" % i, b"x" * 100, 1_000_000 + i, ())] * n)


class OneBrokerCluster:
    """What the replica manager reads of the cluster for a topic with one replica on broker 1."""

    def add_partition_state_listener(self, fn):
        pass

    def remove_partition_state_listener(self, fn):
        pass

    def partition_replicas(self, topic, partition):
        return [1]

    def topic_config(self, topic):
        return {}

    def topic_id(self, name):
        return None  # a registry without topic ids

    def topic(self, name, refresh_if_missing=False):
        return None  # any partition not led here is unknown

    def partition_state_as_written(self, topic, partition):
        return None


@pytest.fixture
def rm(tmp_path):
    logs = LogManager([str(tmp_path / "logs")], LogConfig(), background=False)
    config = ServerConfig.from_properties(
        {"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181", "auto.create.topics.enable": "false"}
    )
    manager = ReplicaManager(config, logs, OneBrokerCluster(), default_log_config=LogConfig())
    manager.become_leader(TOPIC, 0, 3, [1], None)
    yield manager
    manager.complete_delayed_operations()
    manager.shutdown()
    logs.shutdown()


def consumer_fetch(max_wait_ms=0, min_bytes=1, version=12):
    return FetchParams(
        request_version=version,
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=1 << 20,
        isolation_level=0,
    )


def produce(rm, *entries, acks=1):
    got = []
    rm.append_records(1000, acks, list(entries), got.append)
    assert len(got) == 1, "acks 1 on a single replica answers at once"
    return got[0]


def test_append_answers_each_entry_in_order(rm):
    results = produce(rm, (TOPIC, 0, batch(0)), (TOPIC, 7, batch(1)), (TOPIC, 0, batch(2)))
    assert [r.error is None for r in results] == [True, False, True]
    assert isinstance(results[1].error, UnknownTopicOrPartitionError) and results[1].info is None
    assert results[0].info.first_offset == 0 and results[2].info.first_offset == 2


def test_client_appends_are_checked_before_the_log(rm):
    """Kafka's appendToLocalLog: internal topics refused (unless allowed), records that are not
    batches v2 refused for Produce v3+; the other entries are appended."""
    legacy = bytearray(batch(0))
    legacy[16] = 1  # magic 1
    results = produce(rm, ("__consumer_offsets", 0, batch(0)), (TOPIC, 0, bytes(legacy)), (TOPIC, 0, batch(1)))
    assert isinstance(results[0].error, InvalidTopicError) and "internal topic" in str(results[0].error)
    assert isinstance(results[1].error, InvalidRecordError) and "magic 2" in str(results[1].error)
    assert results[2].error is None and results[2].info.first_offset == 0


def test_fetch_reads_below_the_high_watermark(rm):
    produce(rm, (TOPIC, 0, batch(0)))
    got = []
    rm.fetch_messages(consumer_fetch(), [(TOPIC, [(0, 0, 1 << 20, -1)])], None, got.append)
    [[(name, [(p, data)])]] = got
    assert (name, p) == (TOPIC, 0)
    assert data.error is None and data.high_watermark == 2 and data.log_start_offset == 0
    assert data.records is not None and data.records.size > 0
    assert data.aborted_transactions is None  # READ_UNCOMMITTED


def test_long_poll_waits_for_an_append(rm):
    got = []
    rm.fetch_messages(consumer_fetch(max_wait_ms=30_000), [(TOPIC, [(0, 0, 1 << 20, -1)])], None, got.append)
    assert got == [] and len(rm.fetch_purgatory) == 1
    produce(rm, (TOPIC, 0, batch(0)))
    assert len(got) == 1, "the append completes the waiting fetch on the appending thread"
    [(_, [(_, data)])] = got[0]
    assert data.records is not None and data.high_watermark == 2


def test_no_waiting_after_begin_shutdown(rm):
    rm.begin_shutdown()
    got = []
    rm.fetch_messages(consumer_fetch(max_wait_ms=30_000), [(TOPIC, [(0, 0, 1 << 20, -1)])], None, got.append)
    assert len(got) == 1 and len(rm.fetch_purgatory) == 0


def test_an_older_leader_epoch_is_fenced(rm):
    got = []
    rm.fetch_messages(consumer_fetch(max_wait_ms=30_000), [(TOPIC, [(0, 0, 1 << 20, 2)])], None, got.append)
    [[(_, [(_, data)])]] = got  # an error answers at once
    assert isinstance(data.error, FencedLeaderEpochError)


class TwoReplicaCluster(OneBrokerCluster):
    """The partition has replicas [1, 2], led here on broker 1, both registered."""

    def partition_replicas(self, topic, partition):
        return [1, 2]

    def live_brokers(self):
        return {1: ("127.0.0.1", 1), 2: ("127.0.0.1", 2)}


def test_a_delayed_follower_fetch_completes_without_moving_the_follower_state(tmp_path):
    """Kafka's DelayedFetch.onComplete re-reads without updateFollowerFetchState: the follower's
    state is what its request said when it arrived (its broker may have stopped since)."""
    logs = LogManager([str(tmp_path / "logs")], LogConfig(), background=False)
    config = ServerConfig.from_properties({"broker.id": "1", "zookeeper.connect": "127.0.0.1:2181"})
    rm = ReplicaManager(config, logs, TwoReplicaCluster(), default_log_config=LogConfig())
    try:
        rm.become_leader(TOPIC, 0, 3, [1, 2], 0)  # as its state znode (version 0) says
        produce(rm, (TOPIC, 0, batch(0)))  # log end offset 2
        follower = FetchParams(
            request_version=12, replica_id=2, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0
        )
        got = []
        rm.fetch_messages(follower, [(TOPIC, [(0, 2, 1 << 20, 3)])], None, got.append)
        assert got == [] and len(rm.fetch_purgatory) == 1, "caught up: the follower's fetch waits"
        fs = rm.partition(TOPIC, 0).followers[2]
        assert (fs.log_end_offset, fs.last_fetch_leader_leo) == (2, 2)  # the arriving request's read
        produce(rm, (TOPIC, 0, batch(1)))  # log end offset 4: completes the waiting fetch
        [[(_, [(_, data)])]] = got
        assert data.error is None and data.records is not None and data.records.size > 0
        assert (fs.log_end_offset, fs.last_fetch_leader_leo) == (2, 2), "the re-read moved the follower state"
    finally:
        rm.complete_delayed_operations()
        rm.shutdown()
        logs.shutdown()
