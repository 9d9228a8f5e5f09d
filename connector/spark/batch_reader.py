"""The ``pyklog`` source's batch reader (``spark.read.format("pyklog")``).

``partitions()`` runs on the driver: a short-lived :class:`~pyklog.connector.spark.planner.SourcePlanner`
resolves startingOffsets/endingOffsets for every subscribed partition and plans the input partitions
(each with its leader).  ``read()`` runs on executors on a pickled copy that holds only the options
(:func:`pyklog.connector.spark.read_task.read_range`).  Not thread-safe (Spark's call protocol).
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSourceReader

from pyklog.broker.errors import ConfigError, UnknownTopicOrPartitionError
from pyklog.connector.spark import offsets as _offsets
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import EARLIEST, SourceOptions, check_covers
from pyklog.connector.spark.planner import SourcePlanner
from pyklog.connector.spark.read_task import read_range, report_loss

__all__ = ["PyklogBatchReader"]


class PyklogBatchReader(DataSourceReader):
    """``spark.read.format("pyklog")``: ``partitions()`` runs on the driver (resolves
    startingOffsets/endingOffsets for every subscribed partition), ``read()`` on executors."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts

    def partitions(self):
        d = SourcePlanner(self.opts, streaming=False)
        try:
            tps = d.subscribed_partitions()
            if not tps:
                raise UnknownTopicOrPartitionError(
                    f"pyklog: no partitions found for {self.opts.subscription.describe()}"
                )
            check_covers(self.opts.starting, "starting", tps)  # Spark's rule for per-partition JSON
            check_covers(self.opts.ending, "ending", tps)
            start = d.resolve(self.opts.starting, tps, default_kind="earliest")
            end = d.resolve(self.opts.ending, tps, default_kind="latest")
            earliest = d.list_offsets(tps, EARLIEST)
            for tp in tps:
                if start[tp] < earliest[tp]:
                    report_loss(
                        self.opts,
                        tp[0],
                        tp[1],
                        start[tp],
                        earliest[tp],
                        f"startingOffsets asks for offset {start[tp]} but the log starts at {earliest[tp]}",
                    )
                    start[tp] = min(earliest[tp], end[tp])
                if end[tp] < start[tp]:
                    raise ConfigError(
                        f"option 'endingOffsets': {tp[0]}-{tp[1]} ends at {end[tp]}, before its starting offset "
                        f"{start[tp]}"
                    )
            rngs = _offsets.split_ranges(
                _offsets.ranges(start, end), self.opts.min_partitions, self.opts.max_records_per_partition
            )
            parts = d.input_partitions(rngs)
        finally:
            d.close()
        if not parts:
            # Spark needs at least one partition; an empty range reads nothing
            t, p = tps[0]
            parts = [PyklogInputPartition(t, p, 0, 0, None)]
        return parts

    def read(self, partition: PyklogInputPartition):
        return read_range(self.opts, partition)
