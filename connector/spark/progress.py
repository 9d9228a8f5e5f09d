"""What Spark's Kafka source shows in a streaming query's progress, for pyklog sources.

Spark's Kafka source names itself in ``query.lastProgress["sources"][i]["description"]``
(``KafkaV2[Subscribe[topicA]]``) and reports ``metrics`` with ``minOffsetsBehindLatest``,
``maxOffsetsBehindLatest`` and ``avgOffsetsBehindLatest`` (``ReportsSourceMetrics``).  A Python data
source can do neither in PySpark 4.x: the JVM wraps it in ``PythonMicroBatchStream``, which does not
override ``toString`` (so the description is the wrapper's class and hash, e.g.
``org.apache.spark.sql.execution.datasources.v2.python.PythonMicroBatchStreamWithTriggerAvailableNow@3187c5ee``) and does not implement ``ReportsSourceMetrics`` (so ``metrics`` is
empty); the Python worker protocol (``pyspark/sql/streaming/python_streaming_source_runner.py``)
has no call for either.

What a pyklog source does report is enough to compute the same figures: ``endOffset`` (where the
batch ended) and ``latestOffset`` (the log end offsets it saw when it planned the batch, from
``reportLatestOffset``).  :func:`source_progress` turns a progress into the sources as Spark's Kafka
source would show them.  Pure functions; run anywhere (the user's driver process, typically).
"""

from __future__ import annotations

import json
import re

__all__ = ["offsets_behind_latest", "describe", "source_progress", "is_pyklog_source"]

_PYTHON_STREAM = re.compile(r"(^|\.)PythonMicroBatchStream\w*@")


def _offsets(value) -> dict:
    """``{topic: {partition: offset}}`` from a progress' offset JSON (text or dict), keys that are no
    topic (pyklog's own entries such as ``pyklog:batchEnd``; ``:`` is not legal in a topic) left out."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, dict):
        return {}
    out = {}
    for topic, parts in value.items():
        if ":" in topic or not isinstance(parts, dict):
            continue
        try:
            out[topic] = {str(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            return {}
    return out


def is_pyklog_source(source: dict) -> bool:
    """Whether a progress' source entry looks like a pyklog source: a Python stream whose offsets are
    Kafka's ``{topic: {partition: offset}}``."""
    desc = str(source.get("description", ""))
    return bool(_PYTHON_STREAM.search(desc) or desc.startswith("pyklog[")) and bool(
        _offsets(source.get("endOffset")) or _offsets(source.get("latestOffset"))
    )


def offsets_behind_latest(source: dict) -> dict[str, str]:
    """Spark's Kafka source metrics for one progress source entry: for every partition in
    ``latestOffset``, the latest offset minus the batch's ``endOffset`` (what the batch left
    unread, e.g. under maxOffsetsPerTrigger), as ``{"avgOffsetsBehindLatest": "2.5",
    "maxOffsetsBehindLatest": "5", "minOffsetsBehindLatest": "0"}`` (strings, as Spark reports them);
    ``{}`` when the source reported no latest offset."""
    latest = _offsets(source.get("latestOffset"))
    end = _offsets(source.get("endOffset"))
    behind = []
    for topic, parts in latest.items():
        for p, off in parts.items():
            consumed = end.get(topic, {}).get(p)
            if consumed is not None:
                behind.append(off - consumed)
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "minOffsetsBehindLatest": str(min(behind)),
    }


def describe(source: dict) -> str:
    """A stable, readable name: ``pyklog[topicA,topicB]`` (the topics the source read or saw)."""
    topics = set(_offsets(source.get("endOffset"))) | set(_offsets(source.get("latestOffset")))
    return f"pyklog[{','.join(sorted(topics))}]"


def source_progress(progress) -> list[dict]:
    """The ``sources`` of a progress (``query.lastProgress``, a ``StreamingQueryProgress``, a JSON
    text, or a StreamingQuery whose last progress is taken), each pyklog source with ``description``
    made readable (:func:`describe`) and ``metrics`` filled in (:func:`offsets_behind_latest`);
    other sources unchanged.  ``[]`` when there is no progress yet."""
    if hasattr(progress, "lastProgress") and not isinstance(progress, dict):
        progress = progress.lastProgress
    if progress is None:
        return []
    if isinstance(progress, str):
        progress = json.loads(progress)
    elif not isinstance(progress, dict):
        raw = getattr(progress, "json", None)
        progress = json.loads(raw) if isinstance(raw, str) else dict(progress)
    out = []
    for src in progress.get("sources") or []:
        src = dict(src)
        if is_pyklog_source(src):
            src["description"] = describe(src)
            metrics = dict(src.get("metrics") or {})
            metrics.update(offsets_behind_latest(src))
            src["metrics"] = metrics
        out.append(src)
    return out
