"""What a Spark read task costs the brokers, counted on the broker side.

The brokers run at DEBUG, where their socket server logs one line per accepted connection and one
per request (API key, connection id).  A task whose partition carries the leader planned by the
driver sends no Metadata request and opens no bootstrap connection: it fetches from that leader at
once.  Tasks in one process (a PySpark Python worker) share their connections through the worker's
consumer cache (``consumerCache.enabled``, default true): at most one connection per leader and
process, with one ApiVersions handshake each, however many tasks ran; a connection the broker
closed meanwhile is dropped and reopened.  With the cache off, each task opens exactly one
connection.  When the planned leader is wrong or gone the task looks the leader up, logs it, and
still returns every record."""

from __future__ import annotations

import logging
import pickle
import re

import pytest

from pyklog.broker.server.process import BrokerProcess
from pyklog.broker.zk.server import free_port
from pyklog.connector.client import ClusterClient
from pyklog.connector.producer import Producer
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.source import (
    TASK_CONSUMERS,
    PyklogBatchReader,
    PyklogInputPartition,
    read_range,
)


@pytest.fixture(autouse=True)
def _empty_consumer_cache():
    """Each test starts (and leaves) this process's task-consumer cache empty."""
    TASK_CONSUMERS.clear()
    yield
    TASK_CONSUMERS.clear()


API_VERSIONS, METADATA, FETCH = 18, 3, 1
_ACCEPTED = re.compile(r"accepted connection (\d+) from ")
_REQUEST = re.compile(r"request api_key=(\d+) api_version=\d+ correlation_id=\d+ client_id=(.*) connection=(\d+) ")


class BrokerLog:
    """Connections and requests a broker logged after :meth:`mark` (its output at DEBUG)."""

    def __init__(self, broker: BrokerProcess):
        self.broker = broker
        self.pos = 0

    def mark(self) -> None:
        self.pos = len(self.broker.output())

    def connections(self) -> dict:
        """``{connection id: [api_key, ...]}`` in request order, for connections accepted since the mark."""
        conns: dict = {}
        for line in self.broker.output()[self.pos :].splitlines():
            m = _ACCEPTED.search(line)
            if m:
                conns[int(m.group(1))] = []
                continue
            m = _REQUEST.search(line)
            if m:
                conns.setdefault(int(m.group(3)), []).append(int(m.group(1)))
        return conns


@pytest.fixture
def two_brokers(broker_factory):
    b0 = broker_factory(0, log_level="DEBUG")
    b1 = broker_factory(1, log_level="DEBUG")
    return b0, b1


def _topic(boot: str, name: str, partitions: int, per_partition: int) -> dict:
    """Create and fill ``name``; return ``{partition: leader broker id}``."""
    with ClusterClient(boot) as c:
        c.create_topic(name, partitions)
        c.wait_for_topic(name, partitions)
        leaders = {p: c.leader_for(name, p) for p in range(partitions)}
    with Producer({"bootstrap.servers": boot, "linger.ms": 20}) as prod:
        for i in range(per_partition):
            for p in range(partitions):
                prod.produce(name, f"{p}-{i}".encode(), partition=p)
            if i % 25 == 24:
                prod.flush()  # many small record batches: a task needs several fetches
        prod.flush()
    return leaders


def _rows(batches) -> list:
    return [
        (p, o, v)
        for b in batches
        for p, o, v in zip(
            b.column("partition").to_pylist(), b.column("offset").to_pylist(), b.column("value").to_pylist()
        )
    ]


def _read_planned(b0, b1, topic: str, cache: bool):
    """Plan ``topic`` (4 partitions x 300 records, 8 tasks of several fetches each) on the driver,
    run every task in this process as an executor would, and return (parts, leaders, broker logs)."""
    leaders = _topic(b0.bootstrap, topic, 4, 300)
    assert set(leaders.values()) == {0, 1}
    opts = {
        "kafka.bootstrap.servers": f"{b0.bootstrap},{b1.bootstrap}",
        "subscribe": topic,
        "minPartitions": "8",
        "kafka.max.partition.fetch.bytes": "2048",  # several fetches a task
        "consumerCache.enabled": str(cache).lower(),
    }
    reader = PyklogBatchReader(parse_source_options(opts, streaming=False))
    parts = reader.partitions()  # the driver planner
    assert len(parts) == 8
    for part in parts:
        assert part.leader_id == leaders[part.partition]
        assert part.leader == (b0 if part.leader_id == 0 else b1).bootstrap
    logs = {0: BrokerLog(b0), 1: BrokerLog(b1)}
    for lg in logs.values():
        lg.mark()
    rows = []
    executor_reader = pickle.loads(pickle.dumps(reader))  # what an executor gets
    for part in parts:
        rows += _rows(executor_reader.read(pickle.loads(pickle.dumps(part))))
    assert sorted((p, o) for p, o, _ in rows) == [(p, o) for p in range(4) for o in range(300)]
    return parts, logs


def test_without_the_cache_a_task_opens_one_connection_to_the_planned_leader(two_brokers):
    b0, b1 = two_brokers
    parts, logs = _read_planned(b0, b1, "one", cache=False)
    for node, lg in logs.items():
        conns = lg.connections()
        tasks = sum(1 for part in parts if part.leader_id == node)
        assert len(conns) == tasks, conns  # one connection per task, none to the other broker
        for apis in conns.values():
            assert apis[0] == API_VERSIONS and apis.count(API_VERSIONS) == 1, apis
            assert METADATA not in apis, apis
            assert set(apis[1:]) == {FETCH} and len(apis) >= 3, apis
    assert TASK_CONSUMERS.created == 0


def test_tasks_of_one_worker_share_one_connection_per_leader(two_brokers):
    b0, b1 = two_brokers
    created, reused = TASK_CONSUMERS.created, TASK_CONSUMERS.reused
    parts, logs = _read_planned(b0, b1, "shared", cache=True)
    for node, lg in logs.items():
        conns = lg.connections()
        tasks = sum(1 for part in parts if part.leader_id == node)
        assert tasks >= 2
        assert len(conns) == 1, conns  # 4 tasks on this leader, one connection, no other broker
        (apis,) = conns.values()
        assert apis[0] == API_VERSIONS and apis.count(API_VERSIONS) == 1 and METADATA not in apis, apis
        assert set(apis[1:]) == {FETCH} and len(apis) >= 1 + 2 * tasks, apis
    assert TASK_CONSUMERS.created - created == 2 and TASK_CONSUMERS.reused - reused == 6


def test_a_cached_connection_the_broker_closed_is_reopened(broker_factory):
    """The leader restarts (SIGKILL, same port) between two tasks of one worker: the cached
    consumer's connection is dead; the next task notices before it fetches, reconnects to the
    same leader and reads every record, without a metadata lookup."""
    b0 = broker_factory(0, log_level="DEBUG")
    _topic(b0.bootstrap, "restart", 1, 200)
    opts = parse_source_options({"kafka.bootstrap.servers": b0.bootstrap, "subscribe": "restart"}, streaming=False)
    part = PyklogInputPartition("restart", 0, 0, 100, b0.bootstrap, 0)
    assert [o for _, o, _ in _rows(read_range(opts, part))] == list(range(100))
    assert TASK_CONSUMERS.created == 1
    b0.kill()
    b0.start()
    with ClusterClient(b0.bootstrap) as c:
        c.wait_for_topic("restart", 1)
    lg = BrokerLog(b0)
    lg.mark()
    part = PyklogInputPartition("restart", 0, 100, 200, b0.bootstrap, 0)
    rows = _rows(read_range(opts, part))
    assert [o for _, o, _ in rows] == list(range(100, 200))
    assert [v for _, _, v in rows] == [f"0-{o}".encode() for o in range(100, 200)]
    assert TASK_CONSUMERS.created == 1 and TASK_CONSUMERS.reused == 1  # the same consumer
    conns = lg.connections()
    assert len(conns) == 1, conns
    (apis,) = conns.values()
    assert apis[0] == API_VERSIONS and METADATA not in apis, apis  # reconnected, no lookup


def test_a_failed_task_does_not_give_its_consumer_back(two_brokers):
    b0, _ = two_brokers
    _topic(b0.bootstrap, "fails", 1, 10)
    opts = parse_source_options(
        {"kafka.bootstrap.servers": b0.bootstrap, "subscribe": "fails", "kafkaConsumer.pollTimeoutMs": "300"},
        streaming=False,
    )
    part = PyklogInputPartition("fails", 0, 0, 50, b0.bootstrap, 0)  # 40 records that never come
    with pytest.raises(Exception):
        list(read_range(opts, part))
    assert TASK_CONSUMERS.created == 1
    assert [o for _, o, _ in _rows(read_range(opts, PyklogInputPartition("fails", 0, 0, 10, b0.bootstrap, 0)))] == list(
        range(10)
    )
    assert TASK_CONSUMERS.created == 2 and TASK_CONSUMERS.reused == 0  # the failed one was closed


def test_spark_read_connections_are_bounded_by_workers(spark, two_brokers):
    b0, b1 = two_brokers
    _topic(b0.bootstrap, "sparkone", 4, 200)
    logs = [BrokerLog(b0), BrokerLog(b1)]
    for lg in logs:
        lg.mark()
    df = (
        spark.read.format("pyklog")
        .option("kafka.bootstrap.servers", b0.bootstrap)
        .option("subscribe", "sparkone")
        .option("minPartitions", "16")
        .load()
    )
    assert df.count() == 800
    task_conns, other_conns = [], []
    for lg in logs:
        for apis in lg.connections().values():
            (task_conns if FETCH in apis else other_conns).append(apis)
    # 16 Spark tasks (four per partition) on local[2]: at most one connection per Python worker and
    # leader, not one per task (the code before the per-worker cache opened 16).  PySpark's daemon
    # may keep more idle workers than cores from earlier jobs and hand tasks to any of them, so the
    # bound is the workers used (not known here), below the task count
    print(f"{len(task_conns)} task connection(s) for 16 tasks: {task_conns}")
    assert 1 <= len(task_conns) < 16, task_conns
    for apis in task_conns:
        assert apis[0] == API_VERSIONS and apis.count(API_VERSIONS) == 1 and METADATA not in apis, apis
    assert sum(apis.count(FETCH) for apis in task_conns) >= 16
    # the planner's own: one bootstrap connection and one per leader it asked for offsets (at most
    # 3 with two brokers); a task that looked the leader up would add one more each
    assert len(other_conns) <= 3, other_conns


def test_a_task_whose_planned_leader_is_wrong_looks_it_up(two_brokers, caplog):
    b0, b1 = two_brokers
    leaders = _topic(b0.bootstrap, "moved", 2, 250)
    opts = parse_source_options({"kafka.bootstrap.servers": b0.bootstrap, "subscribe": "moved"}, streaming=False)
    by_id = {0: b0, 1: b1}
    lg = {0: BrokerLog(b0), 1: BrokerLog(b1)}
    for p in range(2):
        wrong = 1 - leaders[p]  # the other broker: alive, but not the leader
        for x in lg.values():
            x.mark()
        part = PyklogInputPartition("moved", p, 0, 250, by_id[wrong].bootstrap, wrong)
        with caplog.at_level(logging.INFO, logger="pyklog.connector.consumer"):
            caplog.clear()
            rows = _rows(read_range(opts, part))
        assert [(q, o) for q, o, _ in rows] == [(p, o) for o in range(250)]
        assert [v for _, _, v in rows] == [f"{p}-{o}".encode() for o in range(250)]
        assert any("known in advance" in r.getMessage() and "moved-%d" % p in r.getMessage() for r in caplog.records), (
            caplog.text
        )
        wrong_apis = [a for apis in lg[wrong].connections().values() for a in apis]
        assert FETCH in wrong_apis and METADATA in wrong_apis  # asked it, then asked it who leads


def test_a_task_whose_planned_leader_is_unreachable_looks_it_up(two_brokers, caplog):
    b0, b1 = two_brokers
    leaders = _topic(b0.bootstrap, "gone", 1, 120)
    leader = (b0, b1)[leaders[0]]
    opts = parse_source_options(
        {"kafka.bootstrap.servers": f"{b0.bootstrap},{b1.bootstrap}", "subscribe": "gone"}, streaming=False
    )
    # planned on a broker id that is now nowhere to be reached
    part = PyklogInputPartition("gone", 0, 0, 120, f"127.0.0.1:{free_port()}", leaders[0])
    with caplog.at_level(logging.INFO, logger="pyklog.connector.consumer"):
        rows = _rows(read_range(opts, part))
    assert [o for _, o, _ in rows] == list(range(120))
    assert "cannot be reached" in caplog.text and "known in advance" in caplog.text
    assert "request api_key=1 " in leader.output()  # the leader served the fetches
