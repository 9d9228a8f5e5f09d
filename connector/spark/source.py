"""The ``pyklog`` data source: the entry point Spark registers, and a map of the source's modules.

Where the code runs
-------------------
* :class:`PyklogDataSource` is pickled when it is registered; Spark instantiates it with the
  options on the driver (a Python worker) whenever a DataFrame is defined or a query starts.  Spark
  finds it by this module path (``pyspark_pyklog`` re-exports it as ``DefaultSource``;
  :func:`pyklog.register` registers it).  It parses and checks the options and makes the readers
  and writers.
* Driver, planner worker: :mod:`.stream_reader` (``PyklogStreamReader``: the micro-batch reader's
  planning calls), :mod:`.batch_reader` (``PyklogBatchReader.partitions``), :mod:`.planner`
  (``SourcePlanner``: the cluster client, the group member and the offset store of one query, with
  the outage bound), :mod:`.group_commits` (the group's offset store adapter and the batch-end
  watcher), :mod:`.end_offsets` (a trigger's end offsets from what the look-ups returned: pure),
  :mod:`.planner_signals` (SIGTERM closes the planners), :mod:`.driver_fetch` (``fetchOnDriver``).
* Executors, read tasks: :mod:`.read_task` (``read_range``, the per-worker consumer cache) with
  :mod:`.input_partition` (``PyklogInputPartition``, what a task reads) and :mod:`.arrow`.
  Unpickling a reader or an input partition imports only these and the reader's module.
* Both: :mod:`.task_cache` (the per-worker cache of task consumers and producers), :mod:`.tracing`.

Imports point one way: data source -> readers -> planner -> group commits / read task's shared
Fetch helpers -> input partition, options, offsets, arrow.  The names tests, examples and docs
import from here (the readers, the input partition, ``read_range``, ``TASK_CONSUMERS``,
``ClusterUnreachableError``...) are re-exported from their modules.

Offsets and the consumer group: see :mod:`.stream_reader`, :mod:`pyklog.connector.spark.offsets` and
docs/spark-connector.md.  PySpark sends SIGTERM to the planner worker instead of calling ``stop()``
on ``query.stop()``: see :mod:`.planner_signals`.

Thread-safety: readers are used by one thread at a time (Spark's call protocol); each module says
what else holds.
"""

from __future__ import annotations

import logging

from pyspark.sql.datasource import DataSource

from pyklog.broker.errors import ConfigError
from pyklog.connector.spark import arrow as _arrow
from pyklog.connector.spark import typed as _typed
from pyklog.connector.spark.batch_reader import PyklogBatchReader
from pyklog.connector.spark.driver_fetch import PyklogDriverStreamReader
from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import (
    BOOLEAN_OPTIONS,
    lower_keys,
    parse_sink_options,
    parse_source_options,
)
from pyklog.connector.spark.planner import ClusterUnreachableError
from pyklog.connector.spark.read_task import (
    TASK_CONSUMERS,
    decode_raw,
    log_end_reaches,
    read_range,
    readable_end,
)
from pyklog.connector.spark.stream_reader import PyklogStreamReader

log = logging.getLogger(__name__)

__all__ = [
    "PyklogDataSource",
    "PyklogStreamReader",
    "PyklogBatchReader",
    "PyklogInputPartition",
    "ClusterUnreachableError",
    "OVERWRITE_REFUSED",
    "TASK_CONSUMERS",
    "read_range",
    "decode_raw",
    "readable_end",
    "log_end_reaches",
]


class PyklogDataSource(DataSource):
    """``spark.readStream.format("pyklog")`` / ``spark.read.format("pyklog")`` and the writers.

    Found by Spark through ``pyspark_pyklog`` when pyklog is installed, or registered with ``pyklog.register(spark)``.  Runs on the driver (Python workers); picklable
    (it holds only the option strings)."""

    @classmethod
    def name(cls) -> str:
        return "pyklog"

    def schema(self):
        # Called when a reading DataFrame is defined: validate the source options now, so a wrong
        # option fails at load() with a message naming it (batch/stream-only checks run at start).
        keys = {str(k).lower() for k in dict(self.options or {})}
        if (
            keys & {"subscribe", "subscribepattern", "assign", "kafka.bootstrap.servers", "zookeeper.connect"}
            and "topic" not in keys
        ):
            return _source_ddl(parse_source_options(self.options, streaming=None))
        return _arrow.spark_schema_ddl(_bool_option(self.options, "includeHeaders"))

    def reader(self, schema):
        opts = parse_source_options(self.options, streaming=False)
        _check_schema(schema, opts)
        return PyklogBatchReader(opts)

    def streamReader(self, schema):
        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, opts)
        if opts.fetch_on_driver:
            # PySpark then asks simpleStreamReader (its documented fallback)
            from pyspark.errors import PySparkNotImplementedError

            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader with fetchOnDriver"}
            )
        return PyklogStreamReader(opts)

    def simpleStreamReader(self, schema):
        """Source option ``fetchOnDriver=true``: see :mod:`pyklog.connector.spark.driver_fetch`."""
        opts = parse_source_options(self.options, streaming=True)
        _check_schema(schema, opts)
        return PyklogDriverStreamReader(opts)

    def writer(self, schema, overwrite: bool):
        """Batch write (driver).  Spark hands a Python data source only Append (``overwrite``
        False) and Overwrite (True); it refuses ErrorIfExists, its default, and Ignore itself
        (UNSUPPORTED_DATA_SOURCE_SAVE_MODE) before this is called, so ``df.write.format("pyklog")``
        needs ``.mode("append")``.  Overwrite is refused here, as Spark's Kafka sink refuses it:
        a topic cannot be truncated, so "overwrite" would silently append."""
        from pyklog.connector.spark.sink import PyklogBatchWriter

        opts = parse_sink_options(self.options)
        if overwrite:
            raise ConfigError(OVERWRITE_REFUSED)
        return PyklogBatchWriter(opts, schema)

    def streamWriter(self, schema, overwrite: bool):
        """Streaming write (driver).  ``overwrite`` is True in the Complete output mode; as Spark's
        Kafka sink (whose ``truncate()`` does nothing) every micro-batch's whole result is then
        appended to the topic."""
        from pyklog.connector.spark.sink import PyklogStreamWriter

        return PyklogStreamWriter(parse_sink_options(self.options), schema)


#: the error of ``df.write.format("pyklog").mode("overwrite")`` (Spark's Kafka sink refuses it too)
OVERWRITE_REFUSED = (
    "pyklog sink: save mode 'overwrite' is not allowed: a Kafka topic cannot be truncated, so the rows "
    'would be appended to what the topic holds. Use .mode("append") (as Spark\'s Kafka sink, which '
    "allows only Append and ErrorIfExists; PySpark refuses ErrorIfExists and Ignore for every Python "
    'data source, so .mode("append") is the one mode that writes)'
)


def _bool_option(options, name: str) -> bool:
    """Boolean option ``name`` (any case) of Spark's options, as the options module reads it
    (ConfigError naming the option for a value other than true/false).  Driver side."""
    return BOOLEAN_OPTIONS.parse_value(name.lower(), lower_keys(options).get(name.lower()))


def _base_fields(include_headers: bool) -> list:
    return _arrow.SCHEMA_FIELDS + ([_arrow.HEADERS_FIELD] if include_headers else [])


def _source_ddl(opts) -> str:
    """The source's schema for ``opts``: Spark's Kafka schema, with typed key / value columns
    (:mod:`pyklog.connector.spark.typed`) when a format is given."""
    return _typed.source_ddl(_base_fields(opts.include_headers), opts.formats)


def _check_schema(schema, opts) -> None:
    """The source has a fixed schema (as Spark's Kafka source): refuse a user-specified other one."""
    if schema is None:
        return
    try:
        names = [f.name for f in schema.fields]
    except AttributeError:
        return
    expected = [n for n, _, _ in _base_fields(opts.include_headers)]
    expected += [n for f in opts.formats for n, _, _ in _typed.extra_fields(f)]
    if names != expected:
        raise ConfigError(
            f"the pyklog source has a fixed schema ({_source_ddl(opts)}) and "
            f"cannot be read with a user-specified one; read columns {names}"
        )
