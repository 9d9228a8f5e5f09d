"""The batch-end relay's parsing of progress events (connector/spark/batch_end.py).

End to end (a real query's progress relayed through the JVM listener to a group planner) is
tests/integration/spark/test_group_handover.py::test_stop_after_a_batch_hands_over_nothing_to_read_twice;
these pin the shapes: Spark's ``StreamingQueryProgress.json()`` carries each source's offsets as
JSON values (objects), PySpark's converted event as JSON text."""

import json
import os

from pyklog.connector.spark import batch_end


def _progress(batch_id, sources):
    # The fields Spark 4's StreamingQueryProgress.jsonValue writes, trimmed to what matters here.
    return json.dumps(
        {
            "id": "5f0a4c0e-0000-0000-0000-000000000000",
            "runId": "6a1b2c3d-0000-0000-0000-000000000000",
            "name": None,
            "timestamp": "2026-11-24T07:00:00.000Z",
            "batchId": batch_id,
            "numInputRows": 3,
            "durationMs": {"addBatch": 5, "latestOffset": 1, "triggerExecution": 9},
            "stateOperators": [],
            "sources": sources,
            "sink": {"description": "ForeachBatchSink", "numOutputRows": -1},
        }
    )


def test_progress_json_relays_the_end_offsets_of_our_sources_only(tmp_path):
    ch = batch_end.BatchEndChannel()
    try:
        ours = {
            "description": "pyklog",
            "startOffset": {"t": {"0": 2}},
            "endOffset": {"t": {"0": 5}},
            "latestOffset": {batch_end.REPORT_KEY: ch.path, "t": {"0": 5}},
            "numInputRows": 3,
            "inputRowsPerSecond": 1.0,
            "processedRowsPerSecond": 2.0,
        }
        rate = {
            "description": "RateStreamV2",
            "startOffset": 10,
            "endOffset": 12,
            "latestOffset": None,
            "numInputRows": 2,
        }
        foreign = {
            "description": "elsewhere",
            "endOffset": {"t": {"0": 9}},
            "latestOffset": {batch_end.REPORT_KEY: str(tmp_path / batch_end.CHANNEL_FILE)},
        }
        assert batch_end.relay_progress_json(_progress(7, [rate, ours, foreign])) == 1
        assert ch.read_new() == (7, {"t": {"0": 5}})
        assert ch.read_new() is None  # read once
    finally:
        ch.close()


def test_a_completion_with_the_same_size_time_and_inode_is_still_read():
    """Two completions written within the file system's timestamp granularity, of equal size, the
    second on the inode the first one freed: the file's stat is unchanged, its text is not."""
    ch = batch_end.BatchEndChannel()
    try:
        latest = {batch_end.REPORT_KEY: ch.path}
        assert batch_end.relay(11, [(latest, {"t": {"0": 40}})]) == 1
        assert ch.read_new() == (11, {"t": {"0": 40}})
        st = os.stat(ch.path)
        with open(ch.path, "r+", encoding="utf-8") as f:  # same inode, same size
            text = f.read()
            f.seek(0)
            f.write(text.replace("11", "12").replace("40", "47"))
        os.utime(ch.path, ns=(st.st_atime_ns, st.st_mtime_ns))
        now = os.stat(ch.path)
        assert (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)
        assert ch.read_new() == (12, {"t": {"0": 47}})
        assert ch.read_new() is None
    finally:
        ch.close()


def test_relay_takes_pyspark_text_and_parsed_values_alike():
    ch = batch_end.BatchEndChannel()
    try:
        latest = {batch_end.REPORT_KEY: ch.path, "t": {"0": 4}}
        assert batch_end.relay(3, [(json.dumps(latest), json.dumps({"t": {"0": 4}}))]) == 1
        assert ch.read_new() == (3, {"t": {"0": 4}})
        assert batch_end.relay(4, [(latest, {"t": {"0": 6}})]) == 1
        assert ch.read_new() == (4, {"t": {"0": 6}})
        assert batch_end.relay(5, [(latest, None), ("not json", "{}"), (None, None), (17, "{}")]) == 0
    finally:
        ch.close()


def test_the_jvm_callback_never_raises(caplog):
    class BadEvent:
        def progress(self):
            raise RuntimeError("py4j went away")

    class GarbledEvent:
        def progress(self):
            class P:
                def json(self):
                    return "{not json"

            return P()

    relay = batch_end._ProgressJsonRelay()
    relay.onQueryProgress(BadEvent())
    relay.onQueryProgress(GarbledEvent())
    relay.onQueryStarted(None), relay.onQueryIdle(None), relay.onQueryTerminated(None)
    assert sum("relaying a batch completion failed" in r.getMessage() for r in caplog.records) == 2
