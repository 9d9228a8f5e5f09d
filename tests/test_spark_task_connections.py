"""What a Spark read task costs the brokers, counted on the broker side.

The brokers run at DEBUG, where their socket server logs one line per accepted connection and one
per request (API key, connection id).  A task whose partition carries the leader planned by the
driver must open exactly one connection, to that leader, do one ApiVersions handshake on it and
then only fetch (no Metadata request, no bootstrap connection).  When the planned leader is wrong
or gone the task looks the leader up, logs it, and still returns every record."""
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
from pyklog.connector.spark.source import PyklogBatchReader, PyklogInputPartition, read_range

pytestmark = pytest.mark.integration

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
        for line in self.broker.output()[self.pos:].splitlines():
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
    return [(p, o, v) for b in batches for p, o, v in zip(b.column("partition").to_pylist(),
                                                          b.column("offset").to_pylist(),
                                                          b.column("value").to_pylist())]


def test_a_task_opens_one_connection_to_the_planned_leader(two_brokers):
    b0, b1 = two_brokers
    leaders = _topic(b0.bootstrap, "one", 4, 300)
    assert set(leaders.values()) == {0, 1}
    opts = {"kafka.bootstrap.servers": f"{b0.bootstrap},{b1.bootstrap}", "subscribe": "one",
            "minPartitions": "8", "kafka.max.partition.fetch.bytes": "2048"}  # several fetches a task
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
    for node, lg in logs.items():
        conns = lg.connections()
        tasks = sum(1 for part in parts if part.leader_id == node)
        assert len(conns) == tasks, conns  # one connection per task, none to the other broker
        for apis in conns.values():
            assert apis[0] == API_VERSIONS and apis.count(API_VERSIONS) == 1, apis
            assert METADATA not in apis, apis
            assert set(apis[1:]) == {FETCH} and len(apis) >= 3, apis


def test_spark_read_costs_one_connection_per_task(spark, two_brokers):
    b0, b1 = two_brokers
    _topic(b0.bootstrap, "sparkone", 4, 200)
    logs = [BrokerLog(b0), BrokerLog(b1)]
    for lg in logs:
        lg.mark()
    df = (spark.read.format("pyklog").option("kafka.bootstrap.servers", b0.bootstrap)
          .option("subscribe", "sparkone").option("minPartitions", "8").load())
    assert df.count() == 800
    task_conns, other_conns = [], []
    for lg in logs:
        for apis in lg.connections().values():
            (task_conns if FETCH in apis else other_conns).append(apis)
    assert len(task_conns) == 8, task_conns  # one per Spark task (two per partition)
    for apis in task_conns:
        assert apis[0] == API_VERSIONS and apis.count(API_VERSIONS) == 1 and METADATA not in apis, apis
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
        assert any("known in advance" in r.getMessage() and "moved-%d" % p in r.getMessage()
                   for r in caplog.records), caplog.text
        wrong_apis = [a for apis in lg[wrong].connections().values() for a in apis]
        assert FETCH in wrong_apis and METADATA in wrong_apis  # asked it, then asked it who leads


def test_a_task_whose_planned_leader_is_unreachable_looks_it_up(two_brokers, caplog):
    b0, b1 = two_brokers
    leaders = _topic(b0.bootstrap, "gone", 1, 120)
    leader = (b0, b1)[leaders[0]]
    opts = parse_source_options({"kafka.bootstrap.servers": f"{b0.bootstrap},{b1.bootstrap}",
                                 "subscribe": "gone"}, streaming=False)
    # planned on a broker id that is now nowhere to be reached
    part = PyklogInputPartition("gone", 0, 0, 120, f"127.0.0.1:{free_port()}", leaders[0])
    with caplog.at_level(logging.INFO, logger="pyklog.connector.consumer"):
        rows = _rows(read_range(opts, part))
    assert [o for _, o, _ in rows] == list(range(120))
    assert "cannot be reached" in caplog.text and "known in advance" in caplog.text
    assert "request api_key=1 " in leader.output()  # the leader served the fetches
