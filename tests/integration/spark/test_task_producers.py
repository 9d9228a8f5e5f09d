"""The sink's at-least-once write tasks reuse their Python worker's producer (``producerCache.enabled``,
default true), counted on the broker side and by reading every record back.

Tasks run in this process as an executor's Python worker runs them, one after the other.  The
broker runs at DEBUG (one log line per accepted connection and per request).  A task after the
first opens no connection and sends no Metadata/InitProducerId; a leader that was SIGKILLed and
restarted between two tasks costs the next task a reconnection, not a record; a failed task's
producer is closed, never given to the next task."""

from __future__ import annotations

import re

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink import (
    TASK_PRODUCERS,
    PyklogBatchWriter,
    SinkWriteError,
)

SCHEMA = StructType([StructField("value", BinaryType())])
_ACCEPTED = re.compile(r"accepted connection (\d+) from ")
INIT_PRODUCER_ID, METADATA = 22, 3


@pytest.fixture(autouse=True)
def _empty_producer_cache():
    TASK_PRODUCERS.clear()
    yield
    TASK_PRODUCERS.clear()


def _task(writer, values) -> int:
    """One write task (executor side): the commit message's record count."""
    return writer.write(iter([pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], names=["value"])])).records


def _values(bootstrap, topic, partitions) -> list:
    out = []
    with SimpleConsumer(bootstrap) as c:
        for p in range(partitions):
            out += [r.value for r in c.iter_records(topic, p, 0)]
    return out


def _requests(output: str, api_key: int) -> int:
    return len(re.findall(rf"request api_key={api_key} ", output))


def test_write_tasks_of_one_worker_share_a_producer(broker_factory):
    b = broker_factory(0, log_level="DEBUG")
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("pc", 2)
        c.wait_for_topic("pc", 2)
    w = PyklogBatchWriter(
        parse_sink_options({"kafka.bootstrap.servers": b.bootstrap, "topic": "pc", "kafka.linger.ms": "0"}), SCHEMA
    )
    assert _task(w, [b"a%d" % i for i in range(100)]) == 100
    mark = len(b.output())
    for t in range(1, 5):
        assert _task(w, [b"%d-%d" % (t, i) for i in range(100)]) == 100
    after = b.output()[mark:]
    assert not _ACCEPTED.search(after), after[-3000:]  # no new connection
    assert _requests(after, INIT_PRODUCER_ID) == 0 and _requests(after, METADATA) == 0
    assert TASK_PRODUCERS.created == 1 and TASK_PRODUCERS.reused == 4
    got = _values(b.bootstrap, "pc", 2)
    assert len(got) == 500 and len(set(got)) == 500  # none lost, none twice


def test_without_the_cache_each_write_task_has_its_own_producer(broker_factory):
    b = broker_factory(0, log_level="DEBUG")
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("nc", 1)
        c.wait_for_topic("nc", 1)
    w = PyklogBatchWriter(
        parse_sink_options({"kafka.bootstrap.servers": b.bootstrap, "topic": "nc", "producerCache.enabled": "false"}),
        SCHEMA,
    )
    mark = len(b.output())
    for t in range(3):
        assert _task(w, [b"%d-%d" % (t, i) for i in range(10)]) == 10
    assert len(_ACCEPTED.findall(b.output()[mark:])) >= 3
    assert TASK_PRODUCERS.created == 0
    assert len(_values(b.bootstrap, "nc", 1)) == 30


def test_a_cached_producer_survives_a_leader_restart(broker_factory):
    """SIGKILL and restart the broker (same port) between two tasks: the cached producer
    reconnects; every acknowledged record is there, none twice."""
    b = broker_factory(0)
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("pr", 2)
        c.wait_for_topic("pr", 2)
    w = PyklogBatchWriter(
        parse_sink_options({"kafka.bootstrap.servers": b.bootstrap, "topic": "pr", "kafka.linger.ms": "0"}), SCHEMA
    )
    acked = _task(w, [b"before-%d" % i for i in range(200)])
    b.kill()
    b.start()
    with ClusterClient(b.bootstrap) as c:
        c.wait_for_topic("pr", 2)
    acked += _task(w, [b"after-%d" % i for i in range(200)])
    assert TASK_PRODUCERS.reused == 1
    got = _values(b.bootstrap, "pr", 2)
    want = {b"before-%d" % i for i in range(200)} | {b"after-%d" % i for i in range(200)}
    assert acked == 400 and set(got) == want and len(got) == 400, (acked, len(got))


def test_a_failed_write_task_closes_its_producer(broker_factory):
    b = broker_factory(0)
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("pf", 1)
        c.wait_for_topic("pf", 1)
    opts = {
        "kafka.bootstrap.servers": b.bootstrap,
        "topic": "pf",
        "kafka.linger.ms": "0",
        "kafka.delivery.timeout.ms": "1500",
        "kafka.request.timeout.ms": "1000",
        "kafka.max.block.ms": "1000",
    }
    w = PyklogBatchWriter(parse_sink_options(opts), SCHEMA)
    assert _task(w, [b"ok-%d" % i for i in range(10)]) == 10
    b.kill()
    with pytest.raises((SinkWriteError, Exception)):
        _task(w, [b"lost-%d" % i for i in range(10)])
    b.start()
    with ClusterClient(b.bootstrap) as c:
        c.wait_for_topic("pf", 1)
    assert _task(w, [b"again-%d" % i for i in range(10)]) == 10
    assert TASK_PRODUCERS.created == 2  # the failed task's producer was not reused
    got = _values(b.bootstrap, "pf", 1)
    assert {v for v in got if not v.startswith(b"lost")} == {b"ok-%d" % i for i in range(10)} | {
        b"again-%d" % i for i in range(10)
    }
