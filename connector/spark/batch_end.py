"""Telling a group query's planner that a micro-batch has completed, as soon as it has.

PySpark calls a source's ``commit(end)`` only when it constructs the NEXT batch, so a planner on its
own learns that batch N completed only at trigger N+1: a query stopped or killed before then leaves
batch N's offsets uncommitted, and the member taking over its partitions reads them again.  Spark
does publish the completion: after a batch's commit log entry is written it posts a
``QueryProgressEvent`` whose sources carry the batch's ``endOffset`` and the ``latestOffset`` the
source reported (``reportLatestOffset``).  So:

* the planner (a Python worker on the driver host) creates a :class:`BatchEndChannel`, a private
  temporary directory with one file, and adds the file's path to its ``reportLatestOffset`` under
  :data:`REPORT_KEY` (a key no topic can have: ``:`` is not legal in a topic name);
* :class:`BatchEndListener`, a ``StreamingQueryListener`` that :func:`install` adds to the user's
  SparkSession (``pyklog.register(spark)`` does), runs in the user's driver process; for every
  source of every progress event that names a channel it writes ``{"batchId", "end"}`` to that file
  (write to a temporary name, then rename: the planner never reads half a file); in classic PySpark
  it reads each event as the JSON Spark writes (:class:`_ProgressJsonRelay`: one py4j round trip
  per event, not PySpark's ~200);
* the planner's watcher thread (:class:`pyklog.connector.spark.group_commits.BatchEndWatcher`) reads the
  file and commits the batch's end offsets for the partitions it still owns (fenced, never
  backwards: :meth:`pyklog.connector.group.GroupMember.commit_offsets`).

The listener only relays what Spark reports: it commits nothing itself and touches only files named
:data:`CHANNEL_FILE` in directories named ``pyklog-batch-end-*``.  Both processes run on the driver
host (classic PySpark, or a Spark Connect client on its server's host); where they cannot share
the file (a Connect client elsewhere), nothing is relayed and offsets are committed at the next
trigger as before.  On a Connect session the listener is removed when the interpreter begins to
exit (:func:`_release_at_exit`), so that PySpark's event thread lets a script end.

Thread-safety: :class:`BatchEndChannel` is used by the planner's threads under the caller's lock;
the listener's callback runs on py4j's callback thread and keeps no state.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading

log = logging.getLogger(__name__)

__all__ = [
    "REPORT_KEY",
    "CHANNEL_FILE",
    "BatchEndChannel",
    "BatchEndListener",
    "install",
    "installed_listener",
    "strip_report",
]

REPORT_KEY = "pyklog:batchEnd"
CHANNEL_FILE = "completed.json"
CHANNEL_PREFIX = "pyklog-batch-end-"


def strip_report(offsets: dict) -> dict:
    """``offsets`` without the channel entry (what the report says about the topics)."""
    return {k: v for k, v in offsets.items() if k != REPORT_KEY}


class BatchEndChannel:
    """The planner's end of the relay: a private directory (mode 0700) holding :data:`CHANNEL_FILE`.
    Planner process only."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix=CHANNEL_PREFIX)
        self.path = os.path.join(self.dir, CHANNEL_FILE)
        self._seen = None  # the text of the last completion read

    def read_new(self):
        """``(batch_id, end offsets dict)`` written since the last call, or None.  Compares the
        file's text, not its stat: two completions written within the file system's timestamp
        granularity, of equal size, may reuse the replaced file's inode."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("pyklog: unreadable batch completion in %s: %s", self.path, e)
            return None
        if text == self._seen:
            return None
        self._seen = text
        try:
            msg = json.loads(text)
            return int(msg["batchId"]), dict(msg["end"])
        except (ValueError, KeyError, TypeError) as e:
            log.warning("pyklog: unreadable batch completion in %s: %s", self.path, e)
            return None

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def _channel_path(report_json):
    """The channel file named in a source's reported latest offset (its JSON text, or already
    parsed, as in a progress event's JSON), if it is one of ours."""
    if not report_json:
        return None
    if isinstance(report_json, dict):
        report = report_json
    else:
        try:
            report = json.loads(report_json)
        except (TypeError, ValueError):
            return None
    path = report.get(REPORT_KEY) if isinstance(report, dict) else None
    if not isinstance(path, str) or not os.path.isabs(path):
        return None
    d, name = os.path.split(path)
    if name != CHANNEL_FILE or not os.path.basename(d).startswith(CHANNEL_PREFIX) or not os.path.isdir(d):
        return None  # not ours, or the planner is gone (it removes the directory when it closes)
    return path


def relay(batch_id: int, sources) -> int:
    """Write each pyklog group source's completed ``endOffset`` to its planner's channel; returns how
    many were written.  ``sources``: (latestOffset, endOffset) pairs of one progress event, each the
    offset's JSON text or its parsed value."""
    n = 0
    for latest, end in sources:
        path = _channel_path(latest)
        if path is None or not end:
            continue
        try:
            msg = json.dumps({"batchId": int(batch_id), "end": end if isinstance(end, dict) else json.loads(end)})
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(msg)
            os.replace(tmp, path)
            n += 1
        except (OSError, ValueError) as e:  # the planner went away meanwhile
            log.debug("pyklog: could not relay the completion of batch %s to %s: %s", batch_id, path, e)
    return n


def relay_progress_json(progress_json: str) -> int:
    """:func:`relay` for one ``StreamingQueryProgress`` as Spark's ``progress.json()`` writes it (the
    offsets there are JSON values, not text).  Returns how many completions were written."""
    p = json.loads(progress_json)
    return relay(p["batchId"], [(s.get("latestOffset"), s.get("endOffset")) for s in p.get("sources") or ()])


class _ProgressJsonRelay:
    """The JVM side's view of :class:`BatchEndListener` in classic PySpark: a py4j callback object
    implementing ``org.apache.spark.sql.streaming.PythonStreamingQueryListener`` (what PySpark's own
    ``JStreamingQueryListener`` implements) that asks the JVM for each progress event's JSON, one
    round trip, and relays from that.

    Why not PySpark's own conversion: it rebuilds every event as Python objects field by field,
    walking each Java map (durationMs, eventTime, each source's and the sink's metrics) through
    py4j's iterator, whose end is a Java exception that PySpark's error handler then classifies with
    about ten further round trips, each resolving ``py4j.reflection.TypeUtil`` by name (class look-ups
    that miss through every jar on the class path): some 200 py4j round trips per event, on every
    query of the session, pyklog's or not.  Measured (bench/README.md, micro-batch latency): p50 63 -> 59 ms at
    20 records/s and 211 -> 206 ms at 10,000/s, against 48 and 191 ms with no listener.  Runs on
    the listener bus' py4j callback; never raises."""

    def onQueryStarted(self, jevent):  # noqa: N802 - Java interface
        pass

    def onQueryProgress(self, jevent):  # noqa: N802
        try:
            relay_progress_json(jevent.progress().json())
        except Exception:  # noqa: BLE001 - a listener must not disturb the query
            log.exception("pyklog: relaying a batch completion failed")

    def onQueryIdle(self, jevent):  # noqa: N802
        pass

    def onQueryTerminated(self, jevent):  # noqa: N802
        pass

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]  # noqa: RUF012 - py4j's callback contract


def _listener_class():
    from pyspark.sql.streaming import StreamingQueryListener

    class BatchEndListener(StreamingQueryListener):
        """Relays each completed micro-batch of a pyklog group query to its planner (see the module
        doc).  Runs in the user's driver process, on py4j's callback thread; never raises."""

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            try:
                p = event.progress
                relay(p.batchId, [(s.latestOffset, s.endOffset) for s in p.sources])
            except Exception:  # noqa: BLE001 - a listener must not disturb the query
                log.exception("pyklog: relaying a batch completion failed")

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

        @property
        def _jlistener(self):
            """Classic PySpark registers this JVM object (``StreamingQueryManager.addListener``):
            the JVM's wrapper around :class:`_ProgressJsonRelay` instead of around PySpark's
            converting ``JStreamingQueryListener``.  Spark Connect does not use it (it runs the
            public callbacks above)."""
            jl = self.__dict__.get("_pyklog_jlistener")
            if jl is None:
                from pyspark import SparkContext

                jl = SparkContext._jvm.PythonStreamingQueryListenerWrapper(_ProgressJsonRelay())
                self.__dict__["_pyklog_jlistener"] = jl
            return jl

    return BatchEndListener


BatchEndListener = None  # the class, created on first install() (it needs pyspark)


def installed_listener(spark):
    """The :class:`BatchEndListener` :func:`install` added to ``spark`` (a SparkSession), or None.
    Runs in the user's driver process."""
    return getattr(spark, "_pyklog_batch_end_listener", None)


def install(spark) -> bool:
    """Add the :class:`BatchEndListener` to ``spark`` (a SparkSession) once; True when added now.
    Runs in the user's driver process."""
    global BatchEndListener
    if installed_listener(spark) is not None:
        return False
    if BatchEndListener is None:
        BatchEndListener = _listener_class()
    listener = BatchEndListener()
    spark.streams.addListener(listener)
    spark._pyklog_batch_end_listener = listener
    if _is_connect_session(spark):
        _release_at_exit(spark, listener)
    return True


def _is_connect_session(spark) -> bool:
    """True for a Spark Connect client session (``SparkSession.builder.remote(...)``)."""
    try:
        from pyspark.sql.connect.session import SparkSession as ConnectSession
    except ImportError:  # pyspark without the Connect client's dependencies
        return False
    return isinstance(spark, ConnectSession)


def _release_at_exit(spark, listener) -> None:
    """Let a Spark Connect client's interpreter exit without ``spark.stop()``.

    A Connect session's first listener starts PySpark's query event handler, a non-daemon thread
    that waits on a server stream for as long as a listener is registered; the interpreter joins
    non-daemon threads before it runs :mod:`atexit` handlers, so a script that ends without
    ``spark.stop()`` would wait forever.  ``threading._register_atexit`` runs a function at the
    start of that join (``concurrent.futures`` relies on it the same way): removing the listener
    there asks the server to end the stream and the handler thread returns.  Until the interpreter
    exits the listener relays completions as before.  Never raises."""

    def release():
        try:
            spark.streams.removeListener(listener)
        except Exception:  # noqa: BLE001 - the session may already be stopped or unreachable
            log.debug("pyklog: removing the batch-end listener at exit failed", exc_info=True)

    register_at_exit = getattr(threading, "_register_atexit", None)
    if register_at_exit is None:  # not CPython 3.9+: no hook runs before the join
        log.warning("pyklog: cannot arrange for this Spark Connect client to exit without spark.stop()")
        return
    try:
        register_at_exit(release)
    except RuntimeError:  # the interpreter is already shutting down
        release()
