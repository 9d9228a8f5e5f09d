"""The ``pyklog`` sink: ``df.write.format("pyklog")`` and ``df.writeStream.format("pyklog")``.

Columns, as Spark's Kafka sink reads them::

    value      string | binary                 required (null = a tombstone)
    key        string | binary                 optional (null key: the producer's sticky partitioner)
    topic      string                          optional; the ``topic`` option wins when both are given
    partition  int                             optional (otherwise murmur2 of the key, as Kafka)
    headers    array<struct<key:string, value:binary>>   optional

Other columns are ignored.  Strings are written as UTF-8.  Producer settings pass through as
``kafka.*`` options (``kafka.acks``, ``kafka.compression.type``, ``kafka.linger.ms``,
``kafka.batch.size``, ...) to :class:`connector.producer.Producer`.

Delivery is at-least-once: each task flushes its producer and raises if any record was not
acknowledged, so Spark fails the task (and retries it, then aborts the job) instead of committing;
a retried task may write its records again.  ``commit(messages, batchId)`` only logs what was
written, so calling it twice is harmless.

Where the code runs: the writer is created and validated on the driver, pickled to executors for
``write()`` (which opens its own producer); ``commit``/``abort`` run on the driver in a fresh
worker.  Not thread-safe (one Spark task uses one writer copy).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pyklog.broker.errors import ConfigError, PyklogError
from pyklog.connector.spark.options import SinkOptions

log = logging.getLogger(__name__)

__all__ = ["PyklogBatchWriter", "PyklogStreamWriter", "PyklogCommitMessage", "SinkWriteError"]


class SinkWriteError(PyklogError):
    """Records a sink task wrote were not acknowledged by the brokers (the task fails)."""


@dataclass
class PyklogCommitMessage(WriterCommitMessage):
    """What one task wrote: ``records`` per topic."""

    records: int = 0
    per_topic: dict = field(default_factory=dict)


def _bytes_list(arr) -> list:
    """An Arrow string / binary column as a list of ``bytes`` (None for nulls); strings are
    reinterpreted as binary (their UTF-8 bytes) in Arrow, without a Python str per row."""
    t = arr.type
    if pa.types.is_string(t):
        arr = arr.cast(pa.binary())
    elif pa.types.is_large_string(t):
        arr = arr.cast(pa.large_binary())
    elif getattr(pa.types, "is_string_view", lambda _t: False)(t):
        arr = arr.cast(pa.binary())
    return arr.to_pylist()


def _type_name(dt) -> str:
    return getattr(dt, "simpleString", lambda: str(dt))()


def validate_sink_schema(schema, opts: SinkOptions) -> dict:
    """Check the DataFrame's columns (driver side); return ``{column: kind}`` for the columns used.
    Raises ConfigError naming the column and the expected type."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name.lower(): f for f in schema.fields} if schema is not None else {}
    plan = {}
    value = fields.get("value")
    if value is None:
        raise ConfigError("pyklog sink: required column 'value' not found (expected a string or binary "
                          f"column named 'value'; the DataFrame has {[f.name for f in schema.fields]})")
    for name in ("key", "value"):
        f = fields.get(name)
        if f is None:
            continue
        if not isinstance(f.dataType, (StringType, BinaryType)):
            raise ConfigError(f"pyklog sink: column '{name}' must be string or binary, read "
                              f"{_type_name(f.dataType)}")
        plan[name] = f.name
    topic = fields.get("topic")
    if topic is not None:
        if not isinstance(topic.dataType, StringType):
            raise ConfigError(f"pyklog sink: column 'topic' must be a string, read {_type_name(topic.dataType)}")
        if opts.topic is None:
            plan["topic"] = topic.name
    elif opts.topic is None:
        raise ConfigError("pyklog sink: option 'topic' is required when the DataFrame has no 'topic' column "
                          "(.option('topic', 'name') or add a string column 'topic')")
    part = fields.get("partition")
    if part is not None:
        if not isinstance(part.dataType, IntegerType):
            raise ConfigError(f"pyklog sink: column 'partition' must be an int, read {_type_name(part.dataType)}")
        plan["partition"] = part.name
    headers = fields.get("headers")
    if headers is not None:
        dt = headers.dataType
        ok = isinstance(dt, ArrayType) and isinstance(dt.elementType, StructType)
        if ok:
            names = {sf.name.lower(): sf.dataType for sf in dt.elementType.fields}
            ok = isinstance(names.get("key"), StringType) and isinstance(names.get("value"), BinaryType)
        if not ok:
            raise ConfigError("pyklog sink: column 'headers' must be array<struct<key:string,value:binary>>, "
                              f"read {_type_name(dt)}")
        plan["headers"] = headers.name
    return plan


class _FirstDeliveryFailure(logging.Handler):
    """Keeps the first "failed to deliver" line the producer's sender logs while one task writes,
    so the task's error says what failed (topic-partition, Kafka error, delivery.timeout.ms).
    Executor side; attached for the duration of one ``write()``."""

    _LOGGER = "pyklog.connector.producer.sender"

    def __init__(self):
        super().__init__(logging.WARNING)
        self.message: str | None = None

    @classmethod
    def attach(cls) -> "_FirstDeliveryFailure":
        h = cls()
        logging.getLogger(cls._LOGGER).addHandler(h)
        return h

    def detach(self) -> None:
        logging.getLogger(self._LOGGER).removeHandler(self)

    def emit(self, record) -> None:
        if self.message is None:
            try:
                msg = record.getMessage()
            except Exception:  # noqa: BLE001 - a log record that does not format
                return
            if msg.startswith("failed to deliver"):
                self.message = msg


class _SinkWriter:
    """Shared by the batch and the stream writer."""

    def __init__(self, opts: SinkOptions, schema):
        self.opts = opts
        self.plan = validate_sink_schema(schema, opts)

    def _producer(self):
        from pyklog.connector.producer import Producer

        cfg = {"client.id": self.opts.cluster.client_id, **self.opts.producer_dict()}
        if self.opts.cluster.bootstrap_servers:
            cfg["bootstrap.servers"] = self.opts.cluster.bootstrap_servers
        else:
            cfg["zookeeper.connect"] = self.opts.cluster.zookeeper_connect
        return Producer(cfg)

    def write(self, iterator) -> PyklogCommitMessage:
        """Executor side: queue each Arrow batch with ``Producer.send_many`` (one call per topic
        per batch), flush, raise if any record failed."""
        plan = self.plan
        per_topic: dict = {}
        producer = self._producer()
        first_failure = _FirstDeliveryFailure.attach()
        try:
            for batch in iterator:
                if isinstance(batch, pa.Table):
                    batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
                if batch is None or batch.num_rows == 0:
                    continue
                n = batch.num_rows
                names = batch.schema.names
                col = {name: batch.column(names.index(src)) for name, src in plan.items()}
                values = _bytes_list(col["value"])
                keys = _bytes_list(col["key"]) if "key" in col else None
                parts = col["partition"].to_pylist() if "partition" in col else None
                headers = None
                if "headers" in col:
                    headers = [[(e["key"], e["value"]) for e in h] if h else None
                               for h in col["headers"].to_pylist()]
                if self.opts.topic is not None:
                    producer.send_many(self.opts.topic, parts, keys, values, headers)
                    per_topic[self.opts.topic] = per_topic.get(self.opts.topic, 0) + n
                else:
                    topics = col["topic"].to_pylist()
                    rows_by_topic: dict = {}
                    for i, t in enumerate(topics):
                        rows = rows_by_topic.get(t)
                        if rows is None:
                            if t is None:
                                raise ConfigError("pyklog sink: null topic in row "
                                                  f"{i} of a batch; set the 'topic' option or fill the column")
                            rows = rows_by_topic[t] = []
                        rows.append(i)
                    for t, rows in rows_by_topic.items():
                        if len(rows) == n:
                            producer.send_many(t, parts, keys, values, headers)
                        else:
                            pick = (lambda seq: None if seq is None else [seq[i] for i in rows])
                            producer.send_many(t, pick(parts), pick(keys), [values[i] for i in rows],
                                               pick(headers))
                        per_topic[t] = per_topic.get(t, 0) + len(rows)
                if producer.failed_records:
                    break
            producer.flush()
            failed = producer.failed_records
        finally:
            producer.close()
            first_failure.detach()
        if failed:
            # the producer logged each failure (topic, partition, Kafka error) in the executor log
            c = self.opts.cluster
            where = (f"brokers {c.bootstrap_servers} (kafka.bootstrap.servers)" if c.bootstrap_servers
                     else f"the brokers registered in ZooKeeper {c.zookeeper_connect} (zookeeper.connect)")
            timeout = self.opts.producer_dict().get("delivery.timeout.ms", "120000")
            raise SinkWriteError(
                f"pyklog sink: {failed} record(s) were not acknowledged by {where} within "
                f"kafka.delivery.timeout.ms={timeout}; first failure: {first_failure.message or 'see this executor log'}"
                "; the task fails so Spark retries it or aborts the write")
        return PyklogCommitMessage(records=sum(per_topic.values()), per_topic=per_topic)

    @staticmethod
    def _summary(messages) -> tuple[int, dict]:
        total = 0
        per: dict = {}
        for m in messages or []:
            if isinstance(m, PyklogCommitMessage):
                total += m.records
                for t, c in m.per_topic.items():
                    per[t] = per.get(t, 0) + c
        return total, per


class PyklogBatchWriter(_SinkWriter, DataSourceArrowWriter):
    """``df.write.format("pyklog")``."""

    def commit(self, messages) -> None:
        total, per = self._summary(messages)
        log.info("pyklog sink: wrote %d records %s", total, per)

    def abort(self, messages) -> None:
        total, per = self._summary(messages)
        log.error("pyklog sink: write aborted; %d records of the successful tasks were already written "
                  "(at-least-once) %s", total, per)


class PyklogStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("pyklog")``: at-least-once, idempotent commit."""

    def commit(self, messages, batchId) -> None:
        total, per = self._summary(messages)
        log.info("pyklog sink: micro-batch %s wrote %d records %s", batchId, total, per)

    def abort(self, messages, batchId) -> None:
        total, per = self._summary(messages)
        log.error("pyklog sink: micro-batch %s aborted; %d records of its successful tasks were already "
                  "written (at-least-once) %s", batchId, total, per)
