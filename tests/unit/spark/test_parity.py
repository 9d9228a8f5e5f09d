"""Parity of format("pyklog") with Spark's format("kafka") where no server is needed:
maxRecordsPerPartition splitting offset ranges as Spark does, Spark's rules for per-partition
offsets JSON, kafka.* settings passed through or named in one warning, Overwrite refused by the data
source, and :func:`pyklog.connector.spark.progress.source_progress` computing Spark's figures.

The same parity against real brokers and the shared SparkSession is in tests/integration/spark/test_parity.py.
"""

from __future__ import annotations

import itertools
import json
import logging

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark import offsets as O
from pyklog.connector.spark.options import (
    check_covers,
    parse_sink_options,
    parse_source_options,
)
from pyklog.connector.spark.progress import (
    describe,
    offsets_behind_latest,
    source_progress,
)

BOOT = {"kafka.bootstrap.servers": "localhost:9092"}


# ------------------------------------------------------------------------------------------------
# unit tests: no server
# ------------------------------------------------------------------------------------------------
def test_max_records_per_partition_splits_as_spark():
    rngs = [("t", 0, 0, 25), ("t", 1, 100, 103), ("u", 0, 7, 7)]
    # ceil(25/10) = 3 nearly equal pieces, a small range untouched, an empty one dropped
    assert O.split_ranges(rngs, None, 10) == [("t", 0, 0, 8), ("t", 0, 8, 16), ("t", 0, 16, 25), ("t", 1, 100, 103)]
    # then minPartitions applies to the pieces (4 pieces < 8: split further, proportionally)
    out = O.split_ranges(rngs, 8, 10)
    assert len(out) >= 8
    for tp, lo, hi in ((("t", 0), 0, 25), (("t", 1), 100, 103)):
        mine = sorted((a, b) for t, p, a, b in out if (t, p) == tp)
        assert mine[0][0] == lo and mine[-1][1] == hi and all(x[1] == y[0] for x, y in itertools.pairwise(mine))
    assert all(b - a <= 10 for _, _, a, b in out)
    assert O.split_ranges(rngs, None, None) == rngs[:2]
    o = parse_source_options({**BOOT, "subscribe": "t", "maxRecordsPerPartition": "1000"}, streaming=False)
    assert o.max_records_per_partition == 1000
    for bad in ("0", "-3", "many"):
        with pytest.raises(ConfigError, match="option 'maxRecordsPerPartition'"):
            parse_source_options({**BOOT, "subscribe": "t", "maxRecordsPerPartition": bad}, streaming=False)


def test_offsets_json_follows_spark_rules():
    # start and end JSON must name the same partitions (Spark's checkOffsetLimitValidity)
    with pytest.raises(ConfigError) as ei:
        parse_source_options(
            {**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":1,"1":-2}}', "endingOffsets": '{"t":{"0":5}}'},
            streaming=False,
        )
    assert "must name the same partitions" in str(ei.value) and "t-1" in str(ei.value)
    with pytest.raises(ConfigError, match="t-0 starts at 9, after its end 5"):
        parse_source_options(
            {**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":5}}'},
            streaming=False,
        )
    ok = parse_source_options(
        {**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-2}}', "endingOffsets": '{"t":{"0":-1}}'},
        streaming=False,
    )
    # JSON must name every partition read and no other (checked by the planner against the topics)
    check_covers(ok.starting, "starting", [("t", 0)])
    with pytest.raises(ConfigError) as ei:
        check_covers(ok.starting, "starting", [("t", 0), ("t", 1)])
    assert "option 'startingOffsets' must name every partition" in str(ei.value)
    assert "missing t-1" in str(ei.value) and "-2 for earliest and -1 for latest" in str(ei.value)
    with pytest.raises(ConfigError, match="not read by this query t-0"):
        check_covers(ok.ending, "ending", [("t", 1)])
    check_covers(parse_source_options({**BOOT, "subscribe": "t"}, streaming=True).starting, "starting", [])


def test_kafka_settings_pass_through_or_one_warning(caplog):
    caplog.set_level(logging.WARNING, logger="pyklog.connector.spark.options")
    o = parse_source_options(
        {
            **BOOT,
            "subscribe": "t",
            "kafka.fetch.max.wait.ms": "50",
            "kafka.fetch.min.bytes": "1024",
            "kafka.fetch.max.bytes": "2097152",
            "kafka.retry.backoff.ms": "20",
            "kafka.max.poll.records": "100",
            "kafka.heartbeat.interval.ms": "3000",
            "kafka.no.such.thing": "1",
        },
        streaming=True,
    )
    assert (o.fetch_max_wait_ms, o.fetch_min_bytes, o.fetch_max_bytes, o.retry_backoff_ms) == (50, 1024, 2097152, 20)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    assert "kafka.max.poll.records (" in warnings[0] and "kafka.heartbeat.interval.ms (" in warnings[0]
    assert "unknown options: kafka.no.such.thing" in warnings[0]
    with pytest.raises(ConfigError, match="option 'kafka.fetch.min.bytes'"):
        parse_source_options({**BOOT, "subscribe": "t", "kafka.fetch.min.bytes": "lots"}, streaming=True)
    caplog.clear()
    s = parse_sink_options(
        {
            **BOOT,
            "kafka.max.block.ms": "5000",
            "kafka.metadata.max.age.ms": "1000",
            "kafka.allow.auto.create.topics": "false",
            "kafka.partitioner.class": "x.Y",
        }
    )
    assert dict(s.producer_config) == {
        "max.block.ms": "5000",
        "metadata.max.age.ms": "1000",
        "allow.auto.create.topics": "false",
    }
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "kafka.partitioner.class (" in warnings[0], warnings
    with pytest.raises(ConfigError, match="kafka.allow.auto.create.topics"):
        parse_sink_options({**BOOT, "kafka.allow.auto.create.topics": "perhaps"})


def test_overwrite_refused_by_the_data_source():
    from pyklog.connector.spark.source import PyklogDataSource

    ds = PyklogDataSource({**BOOT, "topic": "t"})
    with pytest.raises(ConfigError) as ei:
        ds.writer(None, True)
    assert "save mode 'overwrite' is not allowed" in str(ei.value) and '.mode("append")' in str(ei.value)


def test_progress_helper_computes_spark_figures():
    src = {
        "description": "org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithAdmissionControl@5e1f",
        "numInputRows": 10,
        "endOffset": json.dumps({"a": {"0": 5, "1": 10}, "b": {"0": 3}}),
        "latestOffset": json.dumps({"a": {"0": 9, "1": 10}, "b": {"0": 7}, "pyklog:batchEnd": "/x/completed.json"}),
        "metrics": {},
    }
    assert offsets_behind_latest(src) == {
        "avgOffsetsBehindLatest": str(8 / 3),
        "maxOffsetsBehindLatest": "4",
        "minOffsetsBehindLatest": "0",
    }
    assert describe(src) == "pyklog[a,b]"
    other = {"description": "RateStreamV2[rowsPerSecond=1]", "endOffset": "5", "latestOffset": None}
    out = source_progress({"sources": [src, other]})
    assert out[0]["description"] == "pyklog[a,b]" and out[0]["metrics"]["maxOffsetsBehindLatest"] == "4"
    assert out[1] == other
    assert source_progress(None) == []
    assert offsets_behind_latest({**src, "latestOffset": None}) == {}
