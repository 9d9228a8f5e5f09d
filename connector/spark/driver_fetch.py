"""The ``fetchOnDriver`` source mode: the planner fetches each micro-batch's records itself.

Runs on the driver, in the Python process PySpark keeps for a streaming Python data source (its
"streaming source runner").  PySpark calls ``DataSource.simpleStreamReader`` when ``streamReader``
raises ``PySparkNotImplementedError`` and wraps the result (``_SimpleStreamReaderWrapper``): Spark's
``latestOffset`` calls :meth:`PyklogDriverStreamReader.read`, which plans the next batch exactly as
the ordinary reader does (:class:`~pyklog.connector.spark.stream_reader.PyklogStreamReader`: the same
offsets JSON, group membership, commits, failOnDataLoss) and has the batch's records right there, as
Arrow record batches: the planner asks each leader one Fetch at the query's positions, whose answer
gives both each partition's end (its high watermark, or last stable offset for read_committed: what
ListOffsets would say) and the records from there on (``SourcePlanner.latest_by_fetch``); only what that
Fetch did not reach (more than maxPartitionFetchBytes of a partition) is fetched again.  Where the
Fetch answers an error (a position outside the log...), that trigger asks ListOffsets as the ordinary
reader does, which reports the case.  PySpark sends them to the JVM with the
plan, which keeps them in its block manager: the batch's one input partition is read from there by
the JVM, with no Python read task.

Why: on a 2-core machine a Python read task costs Spark ~55-60 ms of worker round trip whatever the
source does (bench/README.md, "The last levers"), once per partition per trigger; with few records
per trigger that round trip is most of a record's latency.  The trade-off: every record passes
through the driver (one Python process, sequential fetches over the partitions), so this mode is for
low-latency streams of modest volume; there are no read limits (maxOffsetsPerTrigger and friends are
refused: PySpark's simple reader has none) and Spark replays a batch after a restart through
:meth:`readBetweenOffsets`, which fetches the same offset range again (in a Python task).

What the ordinary reader does that this mode cannot: PySpark's wrapper does not pass
``reportLatestOffset`` through, so pyklog's batch-end relay (``pyklog.register(spark)``) does not see
this source's batches; a group's offsets are committed at Spark's ``commit`` of the batch (the next
trigger) instead of at once.  The wrapper has no ``stop()`` either: the planner's group membership
and ZooKeeper session are closed when the runner process exits (``atexit``) or on SIGTERM.
"""

from __future__ import annotations

import atexit
import logging
import weakref

from pyspark.sql.datasource import SimpleDataSourceStreamReader
from pyspark.sql.streaming.datasource import ReadAllAvailable, SupportsTriggerAvailableNow

from pyklog.connector.spark import offsets as _offsets
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import SourceOptions
from pyklog.connector.spark.read_task import decode_raw, read_range
from pyklog.connector.spark.stream_reader import PyklogStreamReader

log = logging.getLogger(__name__)


class PyklogDriverStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """``SimpleDataSourceStreamReader`` over the ordinary planner (driver, the streaming source
    runner's one thread: PySpark calls these methods one at a time)."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._planner = PyklogStreamReader(opts)
        self._planner.latest_by_fetch = True  # one Fetch per trigger gives the ends and the records
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref()._stop())

    def initialOffset(self) -> dict:
        return self._planner.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self._planner.prepareForTriggerAvailableNow()

    def read(self, start: dict):
        """Spark's ``latestOffset``: plan the next batch from ``start`` and fetch its records.
        Returns ``(iterator of pyarrow.RecordBatch, end offset)``; ``start`` itself when there is
        nothing new (PySpark then runs no batch)."""
        end = self._planner.latestOffset(start, ReadAllAvailable())
        if _offsets.from_json(end) == _offsets.from_json(start):
            return iter(()), start
        batches = self._fetch(start, end)
        # PySpark copies this iterator for each planning of the batch: a list iterator copies
        return iter(batches), end

    def readBetweenOffsets(self, start: dict, end: dict):
        """A batch whose records are not in the planner's memory: one planned before a restart
        (Spark's offset log), or the query's first batch.  Runs in a Python task on an executor, on
        a copy that holds only the options: it must not start a planner there (that would join the
        query's group as a second member), so the task's consumer finds each leader itself."""
        rngs = _offsets.ranges(_offsets.from_json(start), _offsets.from_json(end))
        return iter(self._read([PyklogInputPartition(t, p, a, b, None, None) for t, p, a, b in rngs]))

    def commit(self, end: dict) -> None:
        self._planner.commit(end)

    def _fetch(self, start: dict, end: dict) -> list:
        """Driver: the batch's records, as few Arrow record batches as :func:`coalesce` makes of
        them.  What the planner's Fetch at the batch's start brought (``latest_by_fetch``) is decoded
        here; what it did not reach (a batch larger than maxPartitionFetchBytes, or no such Fetch
        this trigger) is read from the leader the planner knows."""
        rngs = _offsets.ranges(_offsets.from_json(start), _offsets.from_json(end))
        prefetched, self._planner.prefetched = self._planner.prefetched, {}
        if not rngs:
            return []
        out: list = []
        rest = []
        for t, p, a, b in rngs:
            r = prefetched.get((t, p))
            if r is not None and r.offset == a:
                a = self._decode(r, t, p, a, b, out)
            if a < b:
                rest.append((t, p, a, b))
        if rest:
            out.extend(self._read(self._planner.ensure_planner().input_partitions(rest)))
        return coalesce(out)

    def _decode(self, r, topic: str, partition: int, start: int, end: int, out: list) -> int:
        """The rows ``[start, end)`` of a prefetched Fetch answer appended to ``out`` (decoded as a
        read task decodes, :func:`pyklog.connector.spark.read_task.decode_raw`); returns the offset
        reading goes on from (``start`` when the answer holds no complete batch)."""
        d = decode_raw(self.opts, r, topic, partition, start, end)
        if d.batch is not None and d.batch.num_rows:
            if self.opts.formats:  # typed key / value columns, as read_range gives them
                from pyklog.connector.spark.typed import convert_batch

                out.append(convert_batch(d.batch, self.opts.formats))
            else:
                out.append(d.batch)
        if d.next_offset is not None and d.next_offset > start:
            return min(d.next_offset, end)
        return start

    def _read(self, parts) -> list:
        out: list = []
        for part in parts:
            out.extend(read_range(self.opts, part))
        return out

    def _stop(self) -> None:
        try:
            self._planner.stop()
        except Exception:  # noqa: BLE001 - at exit: say so, never raise
            log.exception("pyklog fetchOnDriver: closing the planner at exit failed")


COALESCE_MAX_BYTES = 64 << 20


def coalesce(batches: list, max_bytes: int = COALESCE_MAX_BYTES) -> list:
    """Consecutive record batches joined into one (into several of at most about ``max_bytes``
    when they hold more), rows in the same order.

    Why: the planner reads one Arrow batch per partition and fetch, each built over its own fetch
    buffer.  Measured (bench/README.md, "10,000 records/s with fetchOnDriver"): at 10,000
    records/s over 2 partitions, a trigger took 95-116 ms with the batches joined against 112-137 ms
    without (p50 latency 157-164 against 186-195 ms, two interleaved pairs of runs).  Two batches as such cost Spark
    nothing measurable (the benchmark's no-I/O floor with ``+split``), so what the join saves is in
    how Spark takes the planner's batches apart, not found.  Joining costs a copy of the rows (~50 KB
    there, well under a millisecond)."""
    if len(batches) < 2:
        return batches
    out, group, size = [], [], 0
    for b in batches:
        n = b.nbytes
        if group and size + n > max_bytes:
            out.append(_concat(group))
            group, size = [], 0
        group.append(b)
        size += n
    out.append(_concat(group))
    return out


def _concat(group: list):
    if len(group) == 1:
        return group[0]
    import pyarrow as pa

    if hasattr(pa, "concat_batches"):  # pyarrow >= 19
        return pa.concat_batches(group)
    return pa.Table.from_batches(group).combine_chunks().to_batches()[0]
