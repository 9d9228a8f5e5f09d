"""The exactly-once sink without a server: the ``deliveryGuarantee`` option, where its commit records are kept,
transactional ids unique per task execution, the commit record codec and the transaction-age check.

The driver's recovery decisions against both real stores are in tests/integration/spark/test_sink_recovery.py;
batch writes against real brokers in tests/integration/spark/test_sink_exactly_once.py."""

from __future__ import annotations

import json
import logging

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from pyklog.broker.errors import ConfigError, ZooKeeperError
from pyklog.connector.spark.options import parse_sink_options
from pyklog.connector.spark.sink import (
    CommitRecord,
    PyklogStreamWriter,
    SinkTransactionError,
    TaskIdentity,
    check_transaction_age,
)

SCHEMA = StructType([StructField("value", BinaryType())])


def test_delivery_guarantee_option():
    base = {"kafka.bootstrap.servers": "h:1", "topic": "t"}
    assert parse_sink_options(base).delivery_guarantee == "at-least-once"
    assert not parse_sink_options(base).exactly_once
    assert "transaction.timeout.ms" not in parse_sink_options(base).producer_dict()
    eos = parse_sink_options({**base, "deliveryGuarantee": "Exactly-Once"})
    assert eos.exactly_once and eos.transaction_timeout_ms == 900000
    assert eos.producer_dict() == {"acks": "all", "enable.idempotence": "true", "transaction.timeout.ms": "900000"}
    eos = parse_sink_options(
        {
            **base,
            "deliveryGuarantee": "exactly-once",
            "kafka.transaction.timeout.ms": "120000",
            "transactionalIdPrefix": "etl-1",
        }
    )
    assert eos.transaction_timeout_ms == 120000 and eos.transactional_id_prefix == "etl-1"
    with pytest.raises(
        ConfigError, match="option 'deliveryGuarantee': expected 'at-least-once' or 'exactly-once', read 'once'"
    ):
        parse_sink_options({**base, "deliveryGuarantee": "once"})
    with pytest.raises(ConfigError, match="did you mean 'deliveryGuarantee'"):
        parse_sink_options({**base, "deliveryGuarante": "exactly-once"})
    with pytest.raises(ConfigError, match="transactionalIdPrefix"):
        parse_sink_options({**base, "transactionalIdPrefix": "a/b"})
    with pytest.raises(ConfigError, match="kafka.transactional.id.*transactionalIdPrefix"):
        parse_sink_options({**base, "kafka.transactional.id": "x"})
    with pytest.raises(ConfigError, match="needs acks=all"):
        parse_sink_options({**base, "deliveryGuarantee": "exactly-once", "kafka.acks": "1"})
    with pytest.raises(ConfigError, match="need the idempotent producer"):
        parse_sink_options({**base, "deliveryGuarantee": "exactly-once", "kafka.enable.idempotence": "false"})
    with pytest.raises(ConfigError, match="kafka.transaction.timeout.ms.*>= 1000"):
        parse_sink_options({**base, "deliveryGuarantee": "exactly-once", "kafka.transaction.timeout.ms": "10"})


def test_exactly_once_stream_keeps_its_records_in_the_cluster_or_in_zookeeper():
    from pyklog.broker.zk.topics import SPARK_SINK_LOG_TOPIC, is_protected
    from pyklog.connector.spark.sink_log import SINK_LOG_TOPIC, KafkaSinkTransactionLog, SinkTransactionLog

    assert SINK_LOG_TOPIC == SPARK_SINK_LOG_TOPIC and is_protected(SINK_LOG_TOPIC)  # the brokers protect it

    eos = {"topic": "t", "deliveryGuarantee": "exactly-once"}
    kafka = PyklogStreamWriter(parse_sink_options({"kafka.bootstrap.servers": "h:1", **eos}), SCHEMA)
    store = kafka._sink_log("pyklog-spark-q1")  # nothing is connected before the store is entered
    assert isinstance(store, KafkaSinkTransactionLog) and store._tid == "pyklog-spark-q1-sink-log"
    both = {"kafka.bootstrap.servers": "h:1", "zookeeper.connect": "z:2181/c", **eos}
    assert isinstance(PyklogStreamWriter(parse_sink_options(both), SCHEMA)._sink_log("p"), SinkTransactionLog)


def test_transactional_ids_are_unique_per_task_execution():
    a = TaskIdentity("q1", 7, 3, 0, "pyklog-spark-q1", "0123abcd")
    assert a.transactional_id() == "pyklog-spark-q1-7-3-0-0123abcd"
    assert (
        TaskIdentity(None, None, 2, 1, "pyklog-spark-batch", "ffff0000").transactional_id()
        == "pyklog-spark-batch-w-2-1-ffff0000"
    )
    # outside a Spark task (no TaskContext): partition 0, attempt 0, a fresh token each time
    ids = {TaskIdentity.current(streaming=False, prefix="p").transactional_id() for _ in range(50)}
    assert len(ids) == 50 and all(i.startswith("p-w-0-0-") for i in ids)
    with pytest.raises(SinkTransactionError, match="sql.streaming.queryId"):
        TaskIdentity.current(streaming=True, prefix=None)


def test_commit_record_codec():
    r = CommitRecord("q", 4, (("t-1", 7, 0), ("t-2", 8, 1)), "prepared", 12.5)
    data = r.encode()
    assert json.loads(data) == {
        "version": 1,
        "query_id": "q",
        "batch_id": 4,
        "state": "prepared",
        "started_at": 12.5,
        "transactions": [["t-1", 7, 0], ["t-2", 8, 1]],
    }
    assert CommitRecord.decode(data, "/p") == r
    with pytest.raises(ZooKeeperError, match="unreadable exactly-once sink record /p"):
        CommitRecord.decode(b'{"state": "odd"}', "/p")


def test_transaction_age_check(caplog):
    check_transaction_age(10, 60000, "task wrote for")
    with caplog.at_level(logging.WARNING, "pyklog.connector.spark.sink"):
        check_transaction_age(31, 60000, "task wrote for")
    assert "more than half of kafka.transaction.timeout.ms=60000" in caplog.text
    with pytest.raises(
        SinkTransactionError,
        match=r"task wrote for 61.0s, longer than kafka.transaction.timeout.ms=60000.*transaction.max.timeout.ms",
    ):
        check_transaction_age(61, 60000, "task wrote for")
    check_transaction_age(61, 60000, "batch open for", fail=False)  # logged, not raised
