"""End-to-end latency of the Spark micro-batch path, with a same-run baseline.

Starts ZooKeeper and one broker (examples/local_cluster.py) and one SparkSession (local[2]).  For each
rate (default 20 and 10,000 records/s) a confluent-kafka producer writes records whose value is the
produce time (8-byte big-endian ns since the epoch; ``linger.ms=0`` at 20/s, 1 ms above) into a
2-partition topic, while a streaming query with ``trigger(processingTime="0 seconds")`` reads it:

* ``pyklog -> foreachBatch``: the pyklog source (``kafka.bootstrap.servers`` only, as Spark's Kafka
  source is used); a record is visible when ``df.select("value").toArrow()`` in the foreachBatch
  function has returned it.  Latency = that time - the produce time.
* ``pyklog group -> foreachBatch``: the same with ``zookeeper.connect`` and ``group.id`` (a
  ZooKeeper consumer group: membership and offset commits).
* ``pyklog -> sink -> consumer`` (Kafka to Kafka, Spark's real-time-mode figure): the query
  writes the value to a second topic with the pyklog sink; a confluent-kafka consumer reads it there.
* levers: a case name followed by ``+LEVER``s (e.g. ``fb+async+shm``; the default set ends with the
  tuned cases ``clock+driver+load+async+shm+rawfs``, ``fb+driver+async+shm+rawfs`` and
  ``group+driver+async+shm+rawfs``):

  - ``async``: Spark's asynchronous progress tracking (the offset and commit logs written off the
    trigger; ``fbasync`` is ``fb+async``);
  - ``shm``: the checkpoint on tmpfs (/dev/shm) instead of the temporary directory's disk;
  - ``rawfs``: Hadoop's raw local file system for the checkpoint (no ``.crc`` side files:
    ``fs.AbstractFileSystem.file.impl=org.apache.hadoop.fs.local.RawLocalFs``,
    ``fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem``, set for that query only);
  - ``nodata``: ``spark.sql.streaming.noDataMicroBatches.enabled=false``;
  - ``nocache``: ``consumerCache.enabled=false`` and ``producerCache.enabled=false`` (pyklog's read
    and write tasks open connections of their own per task instead of the Python worker's cached ones);
  - ``driver``: the source option ``fetchOnDriver=true`` (the planner fetches each batch's records and
    hands them to Spark with the plan: no Python read task);
  - ``nolistener``: without the batch-end listener ``pyklog.register(spark)`` adds to the session
    (removed for that case, added back after): what the listener costs every query of a session;
  - ``load`` (for ``clock``): the same confluent-kafka producer writes the same records to the broker
    meanwhile, read by nobody: Spark's floor with the producer's and the broker's share of the two
    cores taken, as in the pyklog cases (the ratios prefer this baseline when it ran);
  - ``split`` (for ``clock+driver``): the records of each trigger handed to Spark as two Arrow record
    batches instead of one (what the pyklog planner did before it joined its per-partition batches;
    ``connector/spark/driver_fetch.py`` ``coalesce``);
  - ``pylistener``: a plain Python ``StreamingQueryListener`` added for that case, reading each
    event's ``progress`` as PySpark converts it (what pyklog's listener did before it read Spark's
    progress JSON in one call; ``+nolistener+pylistener`` is that "before" in the same run).
* baseline, same run: ``clock``, a Python streaming source without I/O whose records appear at the
  same rate (record i at t0 + i / rate, its value that time): Spark's own floor for a Python source,
  measured exactly as the pyklog cases.  ``clock+driver`` is the floor of the ``+driver`` cases: the
  same records in pyklog's schema handed to Spark with the plan by PySpark's simple stream reader
  (one Arrow record batch per trigger), no read task; ``+load`` adds the producer (above).

The producer runs in a process of its own (``linger.ms=0`` at 20/s, 1 ms above; ``--linger-ms``),
as a user's would: in the driver's process it took the GIL ~10,000 times a second.

Prints p50/p95/p99/max per case, the ratio to the baseline (the ``clock`` case with the same levers,
else the plain one), Spark's per-trigger ``durationMs`` (median
of the triggers that read rows, and the slowest: triggerExecution, latestOffset, queryPlanning,
walCommit, addBatch, commitOffsets) and the pyklog planner's own per-call costs (``latestOffset``,
``partitions``, ``commit``, and each read task: medians and p95, recorded by the planner and the
tasks when ``PYKLOG_PLANNER_TRACE`` names a file: medians, p95 and max).  The load average is
printed with the figures.  Every case first runs unreported for a share of ``--warmup`` seconds (40;
at least 3 s each) at the highest rate: Spark's per-trigger code keeps getting faster for the first
minute or so of a session (a round measured after 6 s of warm-up: p50 137 ms at 10,000/s; the next
round of the same run: 78 ms), and a long-running query lives at the later figure.  The defaults
take about 8 minutes on a quiet machine.  ``--repeat N``
runs the whole set N times, the cases interleaved (an A/B on a 2-core machine needs it: one case's
figures move +-20% from run to run), and reports each case's latencies pooled over the rounds with
the spread of the rounds' medians; ``--conf KEY=VALUE`` sets a SparkSession configuration for the
whole run (e.g. ``spark.serializer=org.apache.spark.serializer.KryoSerializer``).

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_latency.py [--seconds 10] [--rates 20,10000]
        [--cases clock,fb,group,k2k,fbasync,fb+shm+rawfs,k2k+nocache,...] [--repeat 3] [--conf K=V ...]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "examples"))
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # the UI (--task-metrics) and the driver on loopback
warnings.filterwarnings("ignore", category=FutureWarning)

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition, SimpleDataSourceStreamReader  # noqa: E402

from local_cluster import LocalCluster  # noqa: E402
from pyklog.connector.spark import batch_end  # noqa: E402


class _ClockPart(InputPartition):
    def __init__(self, partition, partitions, start, end, t0_ns, rate):
        self.partition, self.partitions, self.start, self.end = partition, partitions, start, end
        self.t0_ns, self.rate = t0_ns, rate


class ClockSource(DataSource):
    """Baseline: a Python streaming source without I/O whose "records" appear at the producer's rate
    (record i at t0 + i / rate, its value that time): what Spark's micro-batch path costs a Python
    source by itself, measured exactly as the pyklog cases are, in the same run."""

    @classmethod
    def name(cls):
        return "bench_clock"

    def schema(self):
        if self.options.get("simple") == "true":
            return (
                "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
                "timestampType int"
            )
        return "value binary"

    def streamReader(self, schema):
        o = self.options
        if o.get("simple") == "true":
            # PySpark falls back to simpleStreamReader when streamReader is not implemented
            from pyspark.errors import PySparkNotImplementedError

            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return ClockReader(int(o["t0_ns"]), float(o["rate"]), int(o["partitions"]))

    def simpleStreamReader(self, schema):
        o = self.options
        return SimpleClockReader(
            int(o["t0_ns"]), float(o["rate"]), int(o["partitions"]), split=o.get("split") == "true"
        )


class ClockReader(DataSourceStreamReader):
    def __init__(self, t0_ns, rate, partitions):
        self.t0_ns, self.rate, self.parts = t0_ns, rate, partitions

    def _now(self):
        return {"n": max(0, int((time.time_ns() - self.t0_ns) * self.rate / 1e9))}

    def initialOffset(self):
        return self._now()

    def latestOffset(self):
        return self._now()

    def partitions(self, start, end):
        return [_ClockPart(p, self.parts, start["n"], end["n"], self.t0_ns, self.rate) for p in range(self.parts)]

    def read(self, part):
        first = part.start + (part.partition - part.start) % part.partitions
        for i in range(first, part.end, part.partitions):
            yield ((part.t0_ns + int(i * 1e9 / part.rate)).to_bytes(8, "big"),)

    def commit(self, end):
        pass


class SimpleClockReader(SimpleDataSourceStreamReader):
    """Baseline of the ``+driver`` cases: the clock's records handed to Spark with the plan, as
    Arrow record batches in pyklog's schema (key, value, topic, partition, offset, timestamp,
    timestampType), by PySpark's simple stream reader: what ``fetchOnDriver`` costs without I/O."""

    def __init__(self, t0_ns, rate, partitions, split=False):
        self.t0_ns, self.rate, self.parts, self.split = t0_ns, rate, partitions, split

    def _now(self):
        return max(0, int((time.time_ns() - self.t0_ns) * self.rate / 1e9))

    def initialOffset(self):
        return {"n": self._now()}

    def read(self, start):
        a, b = start["n"], self._now()
        if b <= a:
            return iter(()), start
        if self.split and b - a > 1:  # +split: two record batches per trigger, as one per partition
            m = (a + b) // 2
            return iter([self._batch(a, m), self._batch(m, b)]), {"n": b}
        return iter([self._batch(a, b)]), {"n": b}

    def readBetweenOffsets(self, start, end):
        if end["n"] <= start["n"]:
            return iter(())
        return iter([self._batch(start["n"], end["n"])])

    def _batch(self, a, b):
        import pyarrow as pa

        n = b - a
        idx = list(range(a, b))
        ts = [self.t0_ns + int(i * 1e9 / self.rate) for i in idx]
        return pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, pa.binary()),
                pa.array([t.to_bytes(8, "big") for t in ts], pa.binary()),
                pa.array(["clock"] * n, pa.string()),
                pa.array([i % self.parts for i in idx], pa.int32()),
                pa.array([i // self.parts for i in idx], pa.int64()),
                pa.array([t // 1000 for t in ts], pa.timestamp("us", tz="UTC")),
                pa.array([0] * n, pa.int32()),
            ],
            names=["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"],
        )

    def commit(self, end):
        pass


CASES = {
    "fb": "pyklog -> foreachBatch",
    "group": "pyklog group -> foreachBatch",
    "k2k": "pyklog -> sink -> consumer",
    "clock": "Python source, no I/O (baseline)",
}
LEVERS = ("async", "shm", "rawfs", "nodata", "nocache", "driver", "nolistener", "pylistener", "load", "split")
# what `make bench` measures: each case as a user first writes it, then with the settings the
# connector's guide recommends for latency (fetchOnDriver and Spark's three checkpoint knobs), each
# against its own same-run floor
DEFAULT_CASES = (
    "clock,fb,group,k2k,clock+driver+load+async+shm+rawfs,fb+driver+async+shm+rawfs,group+driver+async+shm+rawfs"
)
RAWFS = {
    "fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}


def parse_case(name: str):
    """``fb+async+shm`` -> ("fb", {"async", "shm"}); ``fbasync`` is ``fb+async``."""
    if name == "fbasync":
        name = "fb+async"
    base, *levers = name.split("+")
    if base not in CASES or any(lv not in LEVERS for lv in levers):
        raise SystemExit(f"unknown case {name!r}: cases {', '.join(CASES)}; levers +{', +'.join(LEVERS)}")
    return base, set(levers)


def label(name: str) -> str:
    base, levers = parse_case(name)
    return CASES[base] + ("" if not levers else " +" + "+".join(sorted(levers)))


DURATIONS = ("triggerExecution", "latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def pct(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100.0 * len(xs) + 0.5) - 1))]


class Paced:
    """A confluent-kafka producer writing ``rate`` records/s (value: produce time in ns since the
    epoch), in a process of its own, as a user's producer is: it shares the machine's two cores
    with Spark and the broker but not this driver's GIL (a producer thread here took the GIL ~10,000
    times a second, inside the foreachBatch function's process)."""

    def __init__(self, bootstrap, topic, rate, partitions, linger_ms=None):
        import multiprocessing

        if linger_ms is None:
            linger_ms = 0 if rate <= 100 else 1
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._ready = ctx.Event()
        self._sent = ctx.Value("q", 0)
        self._proc = ctx.Process(
            target=_paced_run,
            daemon=True,
            name="bench-producer",
            args=(bootstrap, topic, rate, partitions, linger_ms, self._stop, self._ready, self._sent),
        )

    @property
    def sent(self):
        return self._sent.value

    def start(self):
        """Returns once the process produces (its start-up, ~1-2 s, is not part of the warm-up)."""
        self._proc.start()
        if not self._ready.wait(60):
            raise RuntimeError("the producer process did not start within 60 s")
        return self

    def stop(self):
        self._stop.set()
        self._proc.join(15)
        if self._proc.is_alive():
            self._proc.kill()


LINGER_MS = None  # --linger-ms


def _paced_run(bootstrap, topic, rate, partitions, linger_ms, stop, ready, sent_out):
    """The producer process: records due by now are produced at once, then it sleeps until the
    next one is due (at most 1 ms at high rates: a tick of up to rate/1000 records)."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms, "acks": 1, "enable.idempotence": False})
    produce = p.produce
    sent = 0
    ready.set()
    t0 = time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - t0) * rate) + 1
        while sent < due:
            produce(topic, time.time_ns().to_bytes(8, "big"), partition=sent % partitions)
            sent += 1
        p.poll(0)
        delay = t0 + sent / rate - time.monotonic()
        if delay > 0:
            time.sleep(max(min(delay, 0.05), 0.001))
    p.flush(10)
    sent_out.value = sent


class Collector:
    """foreachBatch target (runs in this process): latency of every row it sees."""

    def __init__(self, column="value"):
        self.lat_ms: list = []
        self.fn_ms: list = []  # the foreachBatch function's own time (the toArrow job)
        self.column = column
        self.active = False
        self.lock = threading.Lock()

    def __call__(self, df, batch_id):
        t0 = time.perf_counter()
        tbl = df.select("value").toArrow()
        now = time.time_ns() / 1e6
        vals = [int.from_bytes(v, "big") / 1e6 for v in tbl.column(0).to_pylist()]
        if self.active:
            with self.lock:
                self.lat_ms.extend(now - v for v in vals)
                if vals:
                    self.fn_ms.append((time.perf_counter() - t0) * 1000)


def consume_latency(bootstrap, topic, stop, out):
    """Kafka to Kafka: a confluent-kafka consumer of the sink's topic."""
    from confluent_kafka import Consumer

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"lat-{time.time_ns()}",
            "auto.offset.reset": "latest",
            "fetch.wait.max.ms": 5,
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    while not stop.is_set():
        msgs = c.consume(1000, 0.05)
        now = time.time_ns() / 1e6
        for m in msgs:
            if m.error() is None and m.value() is not None and len(m.value()) == 8:
                out.append(now - int.from_bytes(m.value(), "big") / 1e6)
    c.close()


def read_trace(path, since):
    """The planner's per-call costs recorded after ``since`` (time.time())."""
    out: dict = {}
    try:
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                if r["t"] >= since:
                    out.setdefault(r["call"], []).append(r["ms"])
    except FileNotFoundError:
        pass
    return out


def _plain_listener_class():
    from pyspark.sql.streaming import StreamingQueryListener

    class PlainListener(StreamingQueryListener):
        """Reads what a user's listener reads: each source's offsets of every progress event."""

        def onQueryStarted(self, event):
            pass

        def onQueryProgress(self, event):
            self.last = [(s.latestOffset, s.endOffset) for s in event.progress.sources]

        def onQueryIdle(self, event):
            pass

        def onQueryTerminated(self, event):
            pass

    return PlainListener


def PlainListener():  # noqa: N802 - a class made on first use (it needs pyspark)
    global _PLAIN
    if _PLAIN is None:
        _PLAIN = _plain_listener_class()
    return _PLAIN()


_PLAIN = None


def run_case(spark, cluster, name, rate, seconds, partitions, tmp, trace, tag=""):
    case, levers = parse_case(name)
    slug = name.replace("+", "-")
    topic = f"lat-{slug}-{rate}{tag}"
    from pyklog.connector.client import ClusterClient

    with ClusterClient(cluster.bootstrap) as c:
        c.create_topic(topic, partitions)
        if case == "k2k":
            c.create_topic(topic + "-out", partitions)
    ck_root = tmp
    if "shm" in levers:
        ck_root = tempfile.mkdtemp(prefix="pyklog-bench-lat-", dir="/dev/shm")
    checkpoint = os.path.join(ck_root, f"ck-{slug}-{rate}{tag}")
    confs = dict(RAWFS) if "rawfs" in levers else {}
    if "nodata" in levers:
        confs["spark.sql.streaming.noDataMicroBatches.enabled"] = "false"
    for k, v in confs.items():
        spark.conf.set(k, v)
    listener = batch_end.installed_listener(spark) if "nolistener" in levers else None
    if listener is not None:
        spark.streams.removeListener(listener)
    pylistener = PlainListener() if "pylistener" in levers else None
    if pylistener is not None:
        spark.streams.addListener(pylistener)
    cache = "false" if "nocache" in levers else "true"
    coll = Collector()
    k2k_lat: list = []
    stop_consumer = threading.Event()
    consumer = None
    if case == "clock":
        df = (
            spark.readStream.format("bench_clock")
            .option("t0_ns", str(time.time_ns() + 10**9))
            .option("rate", str(rate))
            .option("partitions", str(partitions))
            .option("simple", "true" if "driver" in levers else "false")
            .option("split", "true" if "split" in levers else "false")
            .load()
        )
    else:
        r = (
            spark.readStream.format("pyklog")
            .option("subscribe", topic)
            .option("startingOffsets", "latest")
            .option("consumerCache.enabled", cache)
        )
        if "driver" in levers:
            r = r.option("fetchOnDriver", "true")
        if case == "group":
            r = r.option("zookeeper.connect", cluster.zookeeper).option("group.id", f"g-{topic}")
        else:
            r = r.option("kafka.bootstrap.servers", cluster.bootstrap)
        df = r.load()
    if case == "k2k":
        consumer = threading.Thread(
            target=consume_latency, args=(cluster.bootstrap, topic + "-out", stop_consumer, k2k_lat), daemon=True
        )
        consumer.start()
        w = (
            df.select("value")
            .writeStream.format("pyklog")
            .option("kafka.bootstrap.servers", cluster.bootstrap)
            .option("topic", topic + "-out")
            .option("kafka.linger.ms", "0")
            .option("producerCache.enabled", cache)
        )
    else:
        w = df.writeStream.foreachBatch(coll)
    w = w.trigger(processingTime="0 seconds").option("checkpointLocation", checkpoint)
    if "async" in levers:
        # Spark's asynchronous progress tracking: the offset and commit logs are written off the
        # trigger's critical path (neither foreachBatch nor a Python sink is on Spark's list of sinks
        # it allows; the override says the sink tolerates replays, which an idempotent foreachBatch
        # or an at-least-once sink does)
        w = (
            w.option("asyncProgressTrackingEnabled", "true")
            .option("asyncProgressTrackingCheckpointIntervalMs", "1000")
            .option("_asyncProgressTrackingOverrideSinkSupportCheck", "true")
        )
    q = w.start()
    producer = None
    try:
        # warm up: the query's first batches (worker start-up) are not measured
        deadline = time.monotonic() + 60
        while (q.lastProgress is None or q.lastProgress["batchId"] < 1) and time.monotonic() < deadline:
            if q.exception() is not None:
                raise RuntimeError(q.exception())
            time.sleep(0.1)
        if case != "clock" or "load" in levers:
            producer = Paced(cluster.bootstrap, topic, rate, partitions, LINGER_MS).start()
        time.sleep(2.0)  # the first records warm the workers up
        coll.active = True
        k2k_lat.clear()
        since = time.time()
        first_batch = q.lastProgress["batchId"] if q.lastProgress else 0
        time.sleep(seconds)
        load = os.getloadavg()[0]
    finally:
        if producer is not None:
            producer.stop()
        time.sleep(1.0)
        coll.active = False
        progress = [p for p in q.recentProgress if p["batchId"] > first_batch and p["numInputRows"] > 0]
        q.stop()
        stop_consumer.set()
        if consumer is not None:
            consumer.join(5)
        for k in confs:
            spark.conf.unset(k)
        if listener is not None:
            spark.streams.addListener(listener)
        if pylistener is not None:
            spark.streams.removeListener(pylistener)
    crc = sum(1 for _, _, files in os.walk(checkpoint) for f in files if f.endswith(".crc"))
    if ck_root != tmp:
        import shutil

        shutil.rmtree(ck_root, ignore_errors=True)
    if q.exception() is not None:
        raise RuntimeError(q.exception())
    lat = k2k_lat if case == "k2k" else coll.lat_ms
    durs = {
        k: statistics.median([p["durationMs"].get(k, 0) for p in progress]) if progress else float("nan")
        for k in DURATIONS
    }
    planner = read_trace(trace, since) if case != "clock" else {}
    if coll.fn_ms:
        planner["foreachBatch fn"] = coll.fn_ms
    slowest = max(progress, key=lambda p: p["durationMs"].get("triggerExecution", 0))["durationMs"] if progress else {}
    return {
        "lat": lat,
        "durs": durs,
        "slowest": slowest,
        "batches": len(progress),
        "planner": planner,
        "load": load,
        "crc": crc,
        "since": since,
    }


TASK_FIELDS = (
    "duration",
    "schedulerDelay",
    "executorDeserializeTime",
    "executorRunTime",
    "resultSerializationTime",
    "gettingResultTime",
)


def task_metrics(spark, since_ms: float) -> dict:
    """Spark's own per-task figures for the stages submitted after ``since_ms`` (epoch ms), from
    the status REST API of this application's UI (loopback; ``--task-metrics`` turns the UI on):
    ``{field: [ms per task]}`` plus ``stages``."""
    import datetime
    import urllib.request

    url = spark.sparkContext.uiWebUrl
    if not url:
        return {}
    app = spark.sparkContext.applicationId
    with urllib.request.urlopen(
        f"{url}/api/v1/applications/{app}/stages?status=complete&details=true", timeout=30
    ) as f:
        stages = json.load(f)
    out: dict = {k: [] for k in TASK_FIELDS}
    n = 0
    for st in stages:
        sub = st.get("submissionTime")
        if not sub:
            continue
        t = datetime.datetime.strptime(sub.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp() * 1000
        if t < since_ms:
            continue
        n += 1
        for task in (st.get("tasks") or {}).values():
            m = task.get("taskMetrics") or {}
            for k in TASK_FIELDS:
                v = task.get(k, m.get(k))
                if v is not None:
                    out[k].append(float(v))
    out["stages"] = n
    return out


def baseline_for(results, case, rate):
    """The same-run baseline of ``case``: the clock case with the same levers (those that apply to
    it), else the plain clock case."""
    _, levers = parse_case(case)
    want = {lv for lv in levers if lv not in ("nocache", "nolistener", "pylistener", "split")}
    for match in (want | {"load"}, want, want - {"driver"}, set()):
        for (name, r), runs in results.items():
            base, lv = parse_case(name)
            if base == "clock" and r == rate and lv == match and runs:
                return name, runs
    return None, None


def pooled(runs):
    lat = [x for r in runs for x in r["lat"]]
    p50s = [pct(r["lat"], 50) for r in runs if r["lat"]]
    return lat, p50s


def print_run(rate, case, r, tm, rnd):
    lat = r["lat"]
    tag = f"[{rnd + 1}] " if rnd is not None else ""
    print(
        f"  {tag}{rate:>6,}/s {label(case):32s} n={len(lat):6d} p50 {pct(lat, 50):7.1f} ms  "
        f"p95 {pct(lat, 95):7.1f}  p99 {pct(lat, 99):7.1f}  max {max(lat, default=float('nan')):7.1f}"
        f"  ({r['batches']} batches, load {r['load']:.2f}, {r['crc']} .crc files)"
    )
    d = r["durs"]
    print("           Spark durationMs (median per batch): " + ", ".join(f"{k} {d[k]:g}" for k in DURATIONS))
    if r["slowest"]:
        print("           slowest batch durationMs: " + ", ".join(f"{k} {r['slowest'].get(k, 0):g}" for k in DURATIONS))
    if tm.get("duration"):
        print(
            f"           Spark tasks ({tm['stages']} stages, {len(tm['duration'])} tasks) ms "
            "median/p95: "
            + ", ".join(f"{k} {statistics.median(tm[k]):.1f}/{pct(tm[k], 95):.1f}" for k in TASK_FIELDS if tm[k])
        )
    if r["planner"]:
        print(
            "           pyklog planner/task ms (median/p95/max, calls): "
            + ", ".join(
                f"{k} {statistics.median(v):.1f}/{pct(v, 95):.1f}/{max(v):.1f} ({len(v)})"
                for k, v in sorted(r["planner"].items())
            )
        )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per case and rate")
    ap.add_argument("--rates", default="20,10000")
    ap.add_argument(
        "--cases",
        default=DEFAULT_CASES,
        help="comma-separated of "
        + ",".join(CASES)
        + " (with +levers); default: the plain cases, then the tuned ones of docs/spark-connector.md",
    )
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument(
        "--linger-ms", type=int, default=None, help="the producer's linger.ms (default 0 at rates up to 100/s, 1 above)"
    )
    ap.add_argument(
        "--warmup",
        type=float,
        default=40.0,
        help="seconds of unreported warm-up, shared by the cases (at least 3 s each)",
    )
    ap.add_argument("--repeat", type=int, default=1, help="rounds of the whole set, cases interleaved")
    ap.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a SparkSession configuration for the whole run (repeatable)",
    )
    ap.add_argument(
        "--task-metrics",
        action="store_true",
        help="turn Spark's UI on (loopback) and print its per-task figures of each case",
    )
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    global LINGER_MS
    LINGER_MS = args.linger_ms
    cases = list(dict.fromkeys(args.cases.split(",")))
    for c in cases:
        parse_case(c)
    extra = dict(kv.split("=", 1) for kv in args.conf)
    tmp = tempfile.mkdtemp(prefix="pyklog-bench-lat-")
    trace = os.path.join(tmp, "planner-trace.jsonl")
    os.environ["PYKLOG_PLANNER_TRACE"] = trace  # inherited by Spark's Python workers
    print(
        f"pyklog micro-batch latency: trigger processingTime=0, {args.partitions} partitions, local[2], "
        f"{args.seconds:g} s per case, {args.repeat} round(s)"
        f"{'; ' + ', '.join(args.conf) if args.conf else ''}; load average at start {os.getloadavg()[0]:.2f}"
    )
    t_all = time.monotonic()
    with LocalCluster(partitions=args.partitions) as cluster:
        from pyspark.sql import SparkSession

        b = (
            SparkSession.builder.master("local[2]")
            .appName("pyklog-bench-latency")
            .config("spark.ui.enabled", "true" if args.task_metrics else "false")
            .config("spark.ui.port", "0")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.retainedStages", "100000")
            .config("spark.ui.retainedTasks", "1000000")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "2")
            # Spark's stream thread hit a StackOverflowError deep in java.util.regex in some runs
            .config("spark.driver.extraJavaOptions", "-Xss16m")
            .config("spark.sql.streaming.numRecentProgressUpdates", "100000")
        )
        for k, v in extra.items():
            b = b.config(k, v)
        spark = b.getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        import pyklog

        pyklog.register(spark)
        spark.dataSource.register(ClockSource)
        # warm-up (not reported): Spark's first queries of a session pay JIT and worker start-up,
        # and its per-trigger code keeps getting faster for tens of seconds (a case measured first
        # came out 1.5-2x slower than the same case measured again later in the run): every case
        # runs once at the highest rate before anything is measured
        for case in cases:
            try:
                run_case(
                    spark,
                    cluster,
                    case,
                    max(rates),
                    max(3.0, args.warmup / len(cases)),
                    args.partitions,
                    tmp,
                    trace,
                    tag="-warmup",
                )
            except Exception as e:  # noqa: BLE001 - reported when the case is measured
                print(f"  warm-up of {case} failed: {str(e).splitlines()[0][:200]}")
        results: dict = {}
        for rnd in range(args.repeat):
            for rate in rates:
                for case in cases:
                    tag = f"-r{rnd}" if args.repeat > 1 else ""
                    try:
                        r = run_case(spark, cluster, case, rate, args.seconds, args.partitions, tmp, trace, tag=tag)
                    except Exception as e:  # noqa: BLE001 - one failed case does not end the run
                        print(f"  {rate:>6,}/s {label(case):32s} FAILED: {str(e).splitlines()[0][:300]}")
                        continue
                    tm = task_metrics(spark, r["since"] * 1000) if args.task_metrics else {}
                    results.setdefault((case, rate), []).append(r)
                    print_run(rate, case, r, tm, rnd if args.repeat > 1 else None)
        if args.repeat > 1:
            print(f"pooled over {args.repeat} rounds (p50/p95/p99 of all records; the rounds' p50s):")
            for rate in rates:
                for case in cases:
                    lat, p50s = pooled(results.get((case, rate), []))
                    if lat:
                        print(
                            f"  {rate:>6,}/s {label(case):32s} n={len(lat):6d} p50 {pct(lat, 50):7.1f} ms  "
                            f"p95 {pct(lat, 95):7.1f}  p99 {pct(lat, 99):7.1f}   rounds' p50 "
                            + " ".join(f"{x:.0f}" for x in p50s)
                        )
        print(
            "ratios to the same-run baseline (Python source without I/O -> foreachBatch"
            + (", pooled" if args.repeat > 1 else "")
            + "):"
        )
        for rate in rates:
            for case in cases:
                if parse_case(case)[0] == "clock":
                    continue
                bname, base = baseline_for(results, case, rate)
                lat, _ = pooled(results.get((case, rate), []))
                blat, _ = pooled(base or [])
                if not lat or not blat:
                    continue
                print(
                    f"  {rate:>6,}/s {label(case):32s} p50 {pct(lat, 50) / pct(blat, 50):.2f}x  "
                    f"p99 {pct(lat, 99) / pct(blat, 99):.2f}x of {bname}  (goal p50 <= 100 ms, p99 <= 300 ms: "
                    f"{'met' if pct(lat, 50) <= 100 and pct(lat, 99) <= 300 else 'NOT met'})"
                )
        spark.stop()
    print(f"total {time.monotonic() - t_all:.0f} s; load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
