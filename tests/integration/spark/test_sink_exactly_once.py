"""``deliveryGuarantee=exactly-once`` batch writes against real brokers and real Spark.

* A write whose job fails (one task meets a bad row after writing part of its rows) leaves nothing
  visible to read_committed readers; the re-run writes every row exactly once.
* A prepared transaction no driver completes ends at ``kafka.transaction.timeout.ms``; a late commit
  fails naming the timeout, and a timeout above the brokers' maximum fails the task.

The streaming run with a SIGKILLed driver is in tests/faults/test_spark_sink_exactly_once.py; the
driver's recovery decisions in tests/integration/spark/test_sink_recovery.py; options, transactional ids
and the commit record codec in tests/unit/spark/test_sink_exactly_once.py.
"""

from __future__ import annotations

import time

import pytest

from pyklog.connector.client import ClusterClient
from tests.integration.spark.support import (
    check_broker_read_committed,
    count_duplicates_and_lost,
    log_view,
    open_transactions,
    read_values,
)
from tests.support import wait_for


def _tasks_running(sc, group: str) -> int:
    """Tasks of the job group's stages that have not ended (a cancelled task ends when it stops)."""
    tracker = sc.statusTracker()
    running = 0
    for job_id in tracker.getJobIdsForGroup(group):
        job = tracker.getJobInfo(job_id)
        for stage_id in job.stageIds if job is not None else ():
            stage = tracker.getStageInfo(stage_id)
            running += stage.numActiveTasks if stage is not None else 0
    return running


def test_batch_write_failed_job_leaves_nothing_then_rerun_writes_once(spark, broker):
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("eos-batch", 3)
    n = 4000

    def frame(fail: bool):
        bad = "id = 3999" if fail else "false"
        return spark.range(0, n, numPartitions=4).selectExpr(
            f"CASE WHEN {bad} THEN CAST(NULL AS STRING) ELSE 'eos-batch' END AS topic",
            "CAST(id AS STRING) AS key",
            "CAST(id AS STRING) AS value",
        )

    def write(df):
        (
            df.write.mode("append")
            .format("pyklog")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("deliveryGuarantee", "exactly-once")
            .option("kafka.transaction.timeout.ms", "20000")
            .save()
        )

    prev = spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch")
    spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")  # the failing task writes first
    sc = spark.sparkContext
    try:
        sc.setJobGroup("eos-batch-failing", "the write that fails")
        try:
            with pytest.raises(Exception, match="null topic in row"):
                write(frame(fail=True))
        finally:
            sc.setLocalProperty("spark.jobGroup.id", None)
        # the job fails while Spark may still be cancelling its other tasks: one of them can still
        # write (its transaction, never prepared, ends at its 20 s timeout plus the brokers' 10 s
        # abort check), so the log is looked at once every task of the job ended
        wait_for(lambda: _tasks_running(sc, "eos-batch-failing") == 0, 60, 0.2, "the failed job's tasks to end")
        # nothing visible to read_committed readers (the failed task aborted its own transaction,
        # abort(messages) the successful tasks' ones); the rows were physically written
        # (EndTxn returns once the coordinator decided; the markers follow)
        committed, raw, still_open = wait_for(
            lambda: (v := log_view(broker.bootstrap, "eos-batch", 3))[2] == 0 and v,
            45,
            0.2,
            "the failed job's transactions to end",
        )
        print(
            f"batch: the failed job left {len(raw)} rows in the log, {len(committed)} committed, "
            f"{still_open} in open transactions"
        )
        assert (committed, still_open) == ([], 0) and len(raw) > 0
        first_raw = len(raw)
        write(frame(fail=False))
    finally:
        spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", prev)
    expected = [str(i).encode() for i in range(n)]
    committed, raw, still_open = wait_for(
        lambda: (v := log_view(broker.bootstrap, "eos-batch", 3))[2] == 0 and v, 45, 0.1, "the commit markers"
    )
    dups, lost = count_duplicates_and_lost(expected, committed)
    print(
        f"batch: failed job wrote {first_raw} rows (aborted); re-run: {len(committed)} committed rows, "
        f"{dups} duplicates, {lost} lost, {still_open} in open transactions"
    )
    assert (dups, lost, len(committed), still_open) == (0, 0, n, 0)
    check_broker_read_committed(broker.bootstrap, "eos-batch", 3, committed, raw)


def test_abandoned_transaction_ends_at_its_timeout_and_a_late_commit_fails_clearly(broker_factory):
    """A task's prepared transaction that no driver ever completes (a query killed and never
    restarted) holds read_committed readers back at most kafka.transaction.timeout.ms (plus the
    brokers' abort check interval); committing it later fails with an error naming the timeout.
    A timeout above the brokers' transaction.max.timeout.ms fails the task naming both settings."""
    import pyarrow as pa
    from pyspark.sql.types import BinaryType, StructField, StructType

    from pyklog.broker.errors import ConfigError
    from pyklog.connector.spark.options import parse_sink_options
    from pyklog.connector.spark.sink import PyklogBatchWriter, SinkTransactionError

    b = broker_factory(
        0, transaction_abort_timed_out_transaction_cleanup_interval_ms=200, transaction_max_timeout_ms=60000
    )
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("eos-abandoned", 1)
    schema = StructType([StructField("value", BinaryType())])
    rows = pa.RecordBatch.from_arrays([pa.array([b"r%d" % i for i in range(100)], pa.binary())], names=["value"])

    def writer(timeout_ms: int) -> PyklogBatchWriter:
        return PyklogBatchWriter(
            parse_sink_options(
                {
                    "kafka.bootstrap.servers": b.bootstrap,
                    "topic": "eos-abandoned",
                    "deliveryGuarantee": "exactly-once",
                    "kafka.transaction.timeout.ms": str(timeout_ms),
                }
            ),
            schema,
        )

    with pytest.raises(ConfigError, match="transaction.max.timeout.ms"):
        writer(120000).write(iter([rows]))
    w = writer(3000)
    msg = w.write(iter([rows]))  # prepared; the "driver" never commits
    t0 = time.monotonic()
    committed, raw, still_open = log_view(b.bootstrap, "eos-abandoned", 1)
    assert (committed, len(raw), still_open) == ([], 100, 100)
    assert open_transactions(b.bootstrap, "eos-abandoned", 1) != {}  # read_committed readers wait
    wait_for(
        lambda: open_transactions(b.bootstrap, "eos-abandoned", 1) == {},
        20,
        0.1,
        "the brokers to abort the abandoned transaction",
    )
    ended = time.monotonic() - t0
    print(f"abandoned transaction (timeout 3 s) ended {ended:.1f}s after it was prepared")
    assert ended < 3 + 2
    assert log_view(b.bootstrap, "eos-abandoned", 1)[0] == []
    with pytest.raises(
        SinkTransactionError, match="aborted before the driver committed.*kafka.transaction.timeout.ms=3000"
    ):
        w.commit([msg])
    assert read_values(b.bootstrap, "eos-abandoned", 1, "read_committed") == []
