"""End-to-end latency of the Spark micro-batch path (issue 13 part 2), with a same-run baseline.

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
* levers, not in the default set: a case name followed by ``+LEVER``s (e.g. ``fb+async+shm``):

  - ``async``: Spark's asynchronous progress tracking (the offset and commit logs written off the
    trigger; ``fbasync`` is ``fb+async``);
  - ``shm``: the checkpoint on tmpfs (/dev/shm) instead of the temporary directory's disk;
  - ``rawfs``: Hadoop's raw local file system for the checkpoint (no ``.crc`` side files:
    ``fs.AbstractFileSystem.file.impl=org.apache.hadoop.fs.local.RawLocalFs``,
    ``fs.file.impl=org.apache.hadoop.fs.RawLocalFileSystem``, set for that query only);
  - ``nodata``: ``spark.sql.streaming.noDataMicroBatches.enabled=false``;
  - ``nocache``: ``consumerCache.enabled=false`` and ``producerCache.enabled=false`` (pyklog's read
    and write tasks open their own connections, as before the per-worker caches);
  - ``driver``: the source option ``fetchOnDriver=true`` (the planner fetches each batch's records and
    hands them to Spark with the plan: no Python read task).
* baseline, same run: ``clock``, a Python streaming source without I/O whose records appear at the
  same rate (record i at t0 + i / rate, its value that time): Spark's own floor for a Python source,
  measured exactly as the pyklog cases.

Prints p50/p95/p99/max per case, the ratio to the baseline, Spark's per-trigger ``durationMs`` (median
of the triggers that read rows, and the slowest: triggerExecution, latestOffset, queryPlanning,
walCommit, addBatch, commitOffsets) and the pyklog planner's own per-call costs (``latestOffset``,
``partitions``, ``commit``, and each read task: medians and p95, recorded by the planner and the
tasks when ``PYKLOG_PLANNER_TRACE`` names a file).  The load average is printed with the figures.
A warm-up query runs first; the defaults take about 3 minutes on a quiet machine.

    PYSPARK_PYTHON=.venv/bin/python .venv/bin/python bench/bench_latency.py [--seconds 10] [--rates 20,10000]
        [--cases clock,fb,group,k2k,fbasync,fb+shm+rawfs,k2k+nocache,...]
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

from local_cluster import LocalCluster  # noqa: E402
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition  # noqa: E402


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
        return "value binary"

    def streamReader(self, schema):
        o = self.options
        return ClockReader(int(o["t0_ns"]), float(o["rate"]), int(o["partitions"]))


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


CASES = {"fb": "pyklog -> foreachBatch", "group": "pyklog group -> foreachBatch",
         "k2k": "pyklog -> sink -> consumer", "clock": "Python source, no I/O (baseline)"}
LEVERS = ("async", "shm", "rawfs", "nodata", "nocache", "driver")
RAWFS = {"fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
         "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem", "fs.file.impl.disable.cache": "true"}


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
    return xs[min(len(xs) - 1, max(0, int(round(q / 100.0 * len(xs) + 0.5)) - 1))]


class Paced:
    """A confluent-kafka producer thread writing ``rate`` records/s (value: produce time in ns)."""

    def __init__(self, bootstrap, topic, rate, partitions):
        from confluent_kafka import Producer

        self.p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if rate <= 100 else 1,
                           "acks": 1, "enable.idempotence": False})
        self.topic, self.rate, self.partitions = topic, rate, partitions
        self.sent = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self._t.start()
        return self

    def _run(self):
        t0 = time.monotonic()
        produce = self.p.produce
        while not self._stop.is_set():
            due = int((time.monotonic() - t0) * self.rate) + 1
            while self.sent < due:
                produce(self.topic, time.time_ns().to_bytes(8, "big"), partition=self.sent % self.partitions)
                self.sent += 1
            self.p.poll(0)
            nxt = t0 + self.sent / self.rate
            delay = nxt - time.monotonic()
            if delay > 0:
                time.sleep(min(delay, 0.05))

    def stop(self):
        self._stop.set()
        self._t.join()
        self.p.flush(10)


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

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lat-{time.time_ns()}",
                  "auto.offset.reset": "latest", "fetch.wait.max.ms": 5, "enable.auto.commit": False})
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


def run_case(spark, cluster, name, rate, seconds, partitions, tmp, trace, tag=""):
    case, levers = parse_case(name)
    slug = name.replace("+", "-")
    topic = f"lat-{slug}-{rate}{tag}"
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.spark.sink import TASK_PRODUCERS
    from pyklog.connector.spark.source import TASK_CONSUMERS

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
    cache = "false" if "nocache" in levers else "true"
    coll = Collector()
    k2k_lat: list = []
    stop_consumer = threading.Event()
    consumer = None
    if case == "clock":
        df = (spark.readStream.format("bench_clock").option("t0_ns", str(time.time_ns() + 10**9))
              .option("rate", str(rate)).option("partitions", str(partitions)).load())
    else:
        r = (spark.readStream.format("pyklog").option("subscribe", topic).option("startingOffsets", "latest")
             .option("consumerCache.enabled", cache))
        if "driver" in levers:
            r = r.option("fetchOnDriver", "true")
        if case == "group":
            r = r.option("zookeeper.connect", cluster.zookeeper).option("group.id", f"g-{topic}")
        else:
            r = r.option("kafka.bootstrap.servers", cluster.bootstrap)
        df = r.load()
    if case == "k2k":
        consumer = threading.Thread(target=consume_latency,
                                    args=(cluster.bootstrap, topic + "-out", stop_consumer, k2k_lat), daemon=True)
        consumer.start()
        w = (df.select("value").writeStream.format("pyklog").option("kafka.bootstrap.servers", cluster.bootstrap)
             .option("topic", topic + "-out").option("kafka.linger.ms", "0").option("producerCache.enabled", cache))
    else:
        w = df.writeStream.foreachBatch(coll)
    w = w.trigger(processingTime="0 seconds").option("checkpointLocation", checkpoint)
    if "async" in levers:
        # Spark's asynchronous progress tracking: the offset and commit logs are written off the
        # trigger's critical path (neither foreachBatch nor a Python sink is on Spark's list of sinks
        # it allows; the override says the sink tolerates replays, which an idempotent foreachBatch
        # or an at-least-once sink does)
        w = (w.option("asyncProgressTrackingEnabled", "true")
             .option("asyncProgressTrackingCheckpointIntervalMs", "1000")
             .option("_asyncProgressTrackingOverrideSinkSupportCheck", "true"))
    q = w.start()
    producer = None
    try:
        # warm up: the query's first batches (worker start-up) are not measured
        deadline = time.monotonic() + 60
        while (q.lastProgress is None or q.lastProgress["batchId"] < 1) and time.monotonic() < deadline:
            if q.exception() is not None:
                raise RuntimeError(q.exception())
            time.sleep(0.1)
        if case != "clock":
            producer = Paced(cluster.bootstrap, topic, rate, partitions).start()
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
    crc = sum(1 for _, _, files in os.walk(checkpoint) for f in files if f.endswith(".crc"))
    if ck_root != tmp:
        import shutil

        shutil.rmtree(ck_root, ignore_errors=True)
    if q.exception() is not None:
        raise RuntimeError(q.exception())
    lat = k2k_lat if case == "k2k" else coll.lat_ms
    durs = {k: statistics.median([p["durationMs"].get(k, 0) for p in progress]) if progress else float("nan")
            for k in DURATIONS}
    planner = read_trace(trace, since) if case != "clock" else {}
    if coll.fn_ms:
        planner["foreachBatch fn"] = coll.fn_ms
    slowest = max(progress, key=lambda p: p["durationMs"].get("triggerExecution", 0))["durationMs"] if progress else {}
    return {"lat": lat, "durs": durs, "slowest": slowest, "batches": len(progress), "planner": planner,
            "load": load, "crc": crc, "since": since}


TASK_FIELDS = ("duration", "schedulerDelay", "executorDeserializeTime", "executorRunTime",
               "resultSerializationTime", "gettingResultTime")


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
    with urllib.request.urlopen(f"{url}/api/v1/applications/{app}/stages?status=complete&details=true",
                                timeout=30) as f:
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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per case and rate")
    ap.add_argument("--rates", default="20,10000")
    ap.add_argument("--cases", default="clock,fb,group,k2k", help="comma-separated of " + ",".join(CASES))
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--task-metrics", action="store_true",
                    help="turn Spark's UI on (loopback) and print its per-task figures of each case")
    args = ap.parse_args()
    rates = [int(r) for r in args.rates.split(",")]
    cases = args.cases.split(",")
    for c in cases:
        parse_case(c)
    tmp = tempfile.mkdtemp(prefix="pyklog-bench-lat-")
    trace = os.path.join(tmp, "planner-trace.jsonl")
    os.environ["PYKLOG_PLANNER_TRACE"] = trace  # inherited by Spark's Python workers
    print(f"pyklog micro-batch latency: trigger processingTime=0, {args.partitions} partitions, local[2], "
          f"{args.seconds:g} s per case; load average at start {os.getloadavg()[0]:.2f}")
    t_all = time.monotonic()
    with LocalCluster(partitions=args.partitions) as cluster:
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("pyklog-bench-latency")
                 .config("spark.ui.enabled", "true" if args.task_metrics else "false")
                 .config("spark.ui.port", "0").config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1").config("spark.ui.retainedStages", "100000")
                 .config("spark.ui.retainedTasks", "1000000").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2")
                 # Spark's stream thread hit a StackOverflowError deep in java.util.regex in some runs
                 .config("spark.driver.extraJavaOptions", "-Xss16m")
                 .config("spark.sql.streaming.numRecentProgressUpdates", "100000").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        import pyklog

        pyklog.register(spark)
        spark.dataSource.register(ClockSource)
        # warm-up (not reported): Spark's first queries of a session pay JIT and worker start-up
        run_case(spark, cluster, "clock", rates[0], 3.0, args.partitions, tmp, trace, tag="-warmup")
        results = {}
        for rate in rates:
            for case in cases:
                try:
                    r = run_case(spark, cluster, case, rate, args.seconds, args.partitions, tmp, trace)
                except Exception as e:  # noqa: BLE001 - one failed case does not end the run
                    print(f"  {rate:>6,}/s {label(case):32s} FAILED: {str(e).splitlines()[0][:300]}")
                    continue
                tm = task_metrics(spark, r["since"] * 1000) if args.task_metrics else {}
                results[(case, rate)] = r
                lat = r["lat"]
                print(f"  {rate:>6,}/s {label(case):32s} n={len(lat):6d} p50 {pct(lat, 50):7.1f} ms  "
                      f"p95 {pct(lat, 95):7.1f}  p99 {pct(lat, 99):7.1f}  max {max(lat, default=float('nan')):7.1f}"
                      f"  ({r['batches']} batches, load {r['load']:.2f}, {r['crc']} .crc files)")
                d = r["durs"]
                print("           Spark durationMs (median per batch): " +
                      ", ".join(f"{k} {d[k]:g}" for k in DURATIONS))
                if r["slowest"]:
                    print("           slowest batch durationMs: " +
                          ", ".join(f"{k} {r['slowest'].get(k, 0):g}" for k in DURATIONS))
                if tm.get("duration"):
                    print(f"           Spark tasks ({tm['stages']} stages, {len(tm['duration'])} tasks) ms "
                          "median/p95: " + ", ".join(f"{k} {statistics.median(tm[k]):.1f}/{pct(tm[k], 95):.1f}"
                                                     for k in TASK_FIELDS if tm[k]))
                if r["planner"]:
                    print("           pyklog planner/task ms (median/p95, calls): " + ", ".join(
                        f"{k} {statistics.median(v):.1f}/{pct(v, 95):.1f} ({len(v)})"
                        for k, v in sorted(r["planner"].items())))
        print("ratios to the same-run baseline (Python source without I/O -> foreachBatch):")
        for rate in rates:
            base = results.get(("clock", rate))
            for case in cases:
                if case == "clock" or base is None or not base["lat"]:
                    continue
                if (case, rate) not in results or not results[(case, rate)]["lat"]:
                    continue
                lat = results[(case, rate)]["lat"]
                print(f"  {rate:>6,}/s {label(case):32s} p50 {pct(lat, 50) / pct(base['lat'], 50):.2f}x  "
                      f"p99 {pct(lat, 99) / pct(base['lat'], 99):.2f}x   (goal p50 <= 100 ms, p99 <= 300 ms: "
                      f"{'met' if pct(lat, 50) <= 100 and pct(lat, 99) <= 300 else 'NOT met'})")
        spark.stop()
    print(f"total {time.monotonic() - t_all:.0f} s; load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
