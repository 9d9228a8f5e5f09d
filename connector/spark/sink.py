"""The ``pyklog`` sink: ``df.write.format("pyklog")`` and ``df.writeStream.format("pyklog")``.

Columns, as Spark's Kafka sink reads them::

    value      string | binary                 required (null = a tombstone)
    key        string | binary                 optional (null key: the producer's sticky partitioner)
    topic      string                          optional; the ``topic`` option wins when both are given
    partition  int                             optional (otherwise murmur2 of the key, as Kafka)
    headers    array<struct<key:string, value:binary>>   optional

Other columns are ignored.  Strings are written as UTF-8.  With ``keyFormat`` / ``valueFormat``
(``avro``, ``avro-confluent``, ``json``, ``json-confluent``, ``protobuf``, ``protobuf-confluent``)
the column may be a struct or any type the format takes, encoded by
:mod:`pyklog.connector.spark.typed_write` (its schema resolved with the registry on the
driver when the writer is created).  Producer settings pass through as
``kafka.*`` options (``kafka.acks``, ``kafka.compression.type``, ``kafka.linger.ms``,
``kafka.batch.size``, ...) to :class:`connector.producer.Producer`.

``deliveryGuarantee=at-least-once`` (the default): each task flushes its producer and raises if
any record was not acknowledged, so Spark fails the task (and retries it, then aborts the job)
instead of committing; a retried task may write its records again.  ``commit(messages, batchId)``
only logs what was written, so calling it twice is harmless.

``deliveryGuarantee=exactly-once``: each task writes its rows in a Kafka transaction that it
prepares (flushed, left open) and does not commit; the driver's ``commit`` completes them all,
``abort`` aborts them.  For streaming queries the driver first records the batch's prepared
transactions in a commit record (:mod:`pyklog.connector.spark.sink_log`: the cluster's
``__pyklog_spark_sinks`` topic, or ZooKeeper when the sink is given ``zookeeper.connect``), so a
driver killed halfway through the completions is finished by the replay of the batch after a restart; the design, with the
transaction timeout rules, is in docs/spark-connector.md ("Exactly-once writes").

Where the code runs: the writer is created and validated on the driver, pickled to executors for
``write()`` (which opens its own producer); ``commit``/``abort`` run on the driver in a fresh
worker (a new instance: nothing survives from ``write``, everything travels in the commit
messages and the commit record).  Not thread-safe (one Spark task uses one writer copy).
"""

from __future__ import annotations

import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from pyklog.broker.errors import (
    ConfigError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    PyklogError,
)
from pyklog.connector.spark.options import SinkOptions
from pyklog.connector.spark.sink_log import CommitRecord, SinkTransactionLog, open_sink_log
from pyklog.connector.spark.task_cache import TaskClientCache

log = logging.getLogger(__name__)

__all__ = [
    "PyklogBatchWriter",
    "PyklogStreamWriter",
    "PyklogCommitMessage",
    "SinkWriteError",
    "SinkTransactionError",
    "SinkTransactionLog",
    "TaskIdentity",
    "check_transaction_age",
]

#: Test hook (fault tests only): a file path; the driver's exactly-once commit creates it after
#: completing the first of two or more transactions and then sleeps, so a test can SIGKILL the
#: driver halfway through committing a micro-batch.
COMMIT_PAUSE_ENV = "PYKLOG_TEST_SINK_COMMIT_PAUSE_FILE"


class SinkWriteError(PyklogError):
    """Records a sink task wrote were not acknowledged by the brokers (the task fails)."""


class SinkTransactionError(PyklogError):
    """An exactly-once micro-batch could not be committed as decided (a transaction the driver
    had to commit was aborted, in practice by the brokers' transaction timeout)."""


@dataclass
class PyklogCommitMessage(WriterCommitMessage):
    """What one task wrote: ``records`` per topic.  With exactly-once also the task's prepared
    transaction ``(transactional_id, producer_id, producer_epoch)`` (None when the task had no
    rows), the streaming query id and batch id the task ran for, its Spark partition id and the
    wall-clock time its transaction began.  Plain picklable values only."""

    records: int = 0
    per_topic: dict = field(default_factory=dict)
    transaction: tuple | None = None
    query_id: str | None = None
    batch_id: int | None = None
    partition: int | None = None
    started_at: float | None = None


def check_transaction_age(elapsed_s: float, timeout_ms: int, what: str, *, fail: bool = True) -> None:
    """Raise SinkTransactionError (``fail``, else log an ERROR) when a transaction is older than
    ``kafka.transaction.timeout.ms`` (the brokers abort it then, so committing it later would lose
    its rows); warn past half of it."""
    timeout_s = timeout_ms / 1000.0
    if elapsed_s >= timeout_s and not fail:
        log.error(
            "pyklog sink: %s %.1fs, longer than kafka.transaction.timeout.ms=%d: the brokers have probably aborted it",
            what,
            elapsed_s,
            timeout_ms,
        )
        return
    if elapsed_s >= timeout_s:
        raise SinkTransactionError(
            f"pyklog sink: {what} {elapsed_s:.1f}s, longer than kafka.transaction.timeout.ms={timeout_ms}: "
            "the brokers abort a transaction that stays open that long.  Raise "
            "kafka.transaction.timeout.ms (up to the brokers' transaction.max.timeout.ms, 900000 by "
            "default) or make micro-batches shorter (maxOffsetsPerTrigger, more partitions)"
        )
    if elapsed_s >= timeout_s / 2:
        log.warning(
            "pyklog sink: %s %.1fs, more than half of kafka.transaction.timeout.ms=%d; a batch "
            "that takes longer than the timeout fails",
            what,
            elapsed_s,
            timeout_ms,
        )


@dataclass(frozen=True)
class TaskIdentity:
    """Who a sink task is, read on the executor from Spark's TaskContext.

    Spark puts the streaming query's id (``sql.streaming.queryId``, stable across restarts from
    the same checkpoint, a fresh UUID for a new query) and the micro-batch id
    (``streaming.sql.batchId``) into every task's local properties; PySpark hands them to the
    Python worker.  The transactional id is
    ``<prefix>-<batch id>-<partition>-<attempt>-<8 random hex digits>``: the prefix
    (``transactionalIdPrefix``, else ``pyklog-spark-<query id>``) keeps two queries apart, the
    batch, partition and attempt say which task wrote it, and the random part makes every
    execution of a task, including one replayed by a restarted driver, use an id of its own."""

    query_id: str | None
    batch_id: int | None
    partition: int
    attempt: int
    prefix: str
    token: str

    @classmethod
    def current(cls, *, streaming: bool, prefix: str | None) -> TaskIdentity:
        from pyspark import TaskContext

        tc = TaskContext.get()
        partition = tc.partitionId() if tc is not None else 0
        attempt = tc.attemptNumber() if tc is not None else 0
        query_id = batch_id = None
        if streaming:
            query_id = tc.getLocalProperty("sql.streaming.queryId") if tc is not None else None
            batch = tc.getLocalProperty("streaming.sql.batchId") if tc is not None else None
            if not query_id or batch is None:
                raise SinkTransactionError(
                    "pyklog sink: deliveryGuarantee=exactly-once could not read the streaming query id "
                    "and batch id from the task's context (sql.streaming.queryId, streaming.sql.batchId)"
                )
            batch_id = int(batch)
        if prefix is None:
            prefix = f"pyklog-spark-{query_id}" if query_id else "pyklog-spark-batch"
        return cls(query_id, batch_id, partition, attempt, prefix, uuid.uuid4().hex[:8])

    def transactional_id(self) -> str:
        batch = "w" if self.batch_id is None else str(self.batch_id)
        return f"{self.prefix}-{batch}-{self.partition}-{self.attempt}-{self.token}"


#: the producer's ``partitioner`` settings the bulk encoder reproduces (Kafka's default: murmur2
#: of the key, sticky for null keys); any other partitioner takes the row path
_BULK_PARTITIONERS = (None, "default", "murmur2", "sticky", "murmur2_random")
#: Arrow input gathered before one bulk encode (each partition then gets full batches)
_GATHER_BYTES = 4 << 20


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


def validate_sink_schema(schema, opts: SinkOptions, typed: tuple = ()) -> dict:
    """Check the DataFrame's columns (driver side); return ``{column: kind}`` for the columns used.
    ``typed``: the columns written with a format (``keyFormat`` / ``valueFormat``), of any type
    the format takes (checked by :mod:`.typed_write`).  Raises ConfigError naming the column and
    the expected type."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name.lower(): f for f in schema.fields} if schema is not None else {}
    plan = {}
    value = fields.get("value")
    if value is None:
        raise ConfigError(
            "pyklog sink: required column 'value' not found (expected a string or binary "
            f"column named 'value'; the DataFrame has {[f.name for f in schema.fields]})"
        )
    for name in ("key", "value"):
        f = fields.get(name)
        if f is None:
            continue
        if name not in typed and not isinstance(f.dataType, (StringType, BinaryType)):
            raise ConfigError(
                f"pyklog sink: column '{name}' must be string or binary, read {_type_name(f.dataType)} "
                f"(or set {name}Format=avro / avro-confluent to encode it)"
            )
        plan[name] = f.name
    topic = fields.get("topic")
    if topic is not None:
        if not isinstance(topic.dataType, StringType):
            raise ConfigError(f"pyklog sink: column 'topic' must be a string, read {_type_name(topic.dataType)}")
        if opts.topic is None:
            plan["topic"] = topic.name
    elif opts.topic is None:
        raise ConfigError(
            "pyklog sink: option 'topic' is required when the DataFrame has no 'topic' column "
            "(.option('topic', 'name') or add a string column 'topic')"
        )
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
            raise ConfigError(
                f"pyklog sink: column 'headers' must be array<struct<key:string,value:binary>>, read {_type_name(dt)}"
            )
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
    def attach(cls) -> _FirstDeliveryFailure:
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


#: this process's cache of at-least-once write tasks' producers (see :mod:`.task_cache`): one idle
#: producer at most per configuration.  Exactly-once tasks never use it (a transactional id per task).
TASK_PRODUCERS = TaskClientCache("producer", max_idle_per_key=1)


class _SinkWriter:
    """Shared by the batch and the stream writer."""

    def __init__(self, opts: SinkOptions, schema):
        self.opts = opts
        #: ``{column: WriteFormat}`` of typed key / value columns, resolved here on the driver (the
        #: registry registers or finds the schema before any task runs)
        self.formats: dict = {}
        if opts.typed_options:
            from pyklog.connector.spark.typed_write import resolve_write_formats

            self.formats = resolve_write_formats(schema, dict(opts.typed_options), opts.topic)
        self.plan = validate_sink_schema(schema, opts, tuple(self.formats))

    def _producer_config(self) -> dict:
        # the security settings by their Kafka names (not in SinkOptions.producer_config, whose repr
        # would show the passwords)
        cfg = {
            "client.id": self.opts.cluster.client_id,
            **self.opts.producer_dict(),
            **self.opts.cluster.security.to_config(),
        }
        if self.opts.cluster.bootstrap_servers:
            cfg["bootstrap.servers"] = self.opts.cluster.bootstrap_servers
        else:
            cfg["zookeeper.connect"] = self.opts.cluster.zookeeper_connect
            if self.opts.cluster.zookeeper_credentials is not None:
                cfg["zookeeper.jaas.config"] = self.opts.cluster.zookeeper_credentials.jaas_entry()
        return cfg

    def _prefix(self, query_id: str) -> str:
        """The query's transactional-id prefix (:class:`TaskIdentity`'s rule)."""
        return self.opts.transactional_id_prefix or f"pyklog-spark-{query_id}"

    def _sink_log(self, prefix: str):
        """The store of this stream's commit records (:func:`open_sink_log`); the driver's writes
        to the topic store use ``<prefix>-sink-log`` as their transactional id."""
        return open_sink_log(self.opts.cluster, self._producer_config(), f"{prefix}-sink-log")

    def _producer(self, **extra):
        from pyklog.connector.producer import Producer

        return Producer({**self._producer_config(), **extra})

    def _send_batches(self, producer, iterator, per_topic: dict) -> None:
        """Executor side: encode the rows in bulk (:class:`ArrowRecordEncoder`: partitions, batches
        and record bytes from the Arrow columns, no Python object per row) and queue the batches
        with ``Producer.send_sections``; Arrow batches are gathered up to ``_GATHER_BYTES`` first so
        each partition gets full batches.  Stops early once a record failed for good.  Counts rows
        into ``per_topic``.  A custom ``kafka.partitioner`` takes the row path
        (:meth:`_send_rows`)."""
        if self.formats:
            iterator = self._encoded(iterator)
        if producer.config.get("partitioner") not in _BULK_PARTITIONERS:
            return self._send_rows(producer, iterator, per_topic)
        from pyklog.connector.spark.arrow_encode import ArrowRecordEncoder

        encoder = ArrowRecordEncoder(producer.config["batch.size"])
        nparts: dict = {}
        pending: list = []
        held = 0
        for batch in iterator:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
            if batch is None or batch.num_rows == 0:
                continue
            pending.append(batch)
            held += batch.nbytes
            if held >= _GATHER_BYTES:
                self._send_bulk(producer, encoder, pending, nparts, per_topic)
                pending, held = [], 0
                if producer.failed_records:
                    return
        if pending:
            self._send_bulk(producer, encoder, pending, nparts, per_topic)

    def _encoded(self, iterator):
        """Executor side: the Arrow batches with their typed key / value columns encoded
        (:func:`.typed_write.encode_batch`: fastavro's C writer per record); RecordEncodeError for
        a row that does not fit the schema fails the task before the rest is sent."""
        from pyklog.connector.spark.typed_write import encode_batch

        for batch in iterator:
            if isinstance(batch, pa.Table):
                batch = batch.combine_chunks().to_batches()[0] if batch.num_rows else None
            if batch is None or batch.num_rows == 0:
                continue
            yield encode_batch(batch, self.formats, self.plan)

    def _send_bulk(self, producer, encoder, batches: list, nparts: dict, per_topic: dict) -> None:
        """Executor side: encode ``batches`` (Arrow, one schema) and queue them, per topic."""
        if len(batches) == 1:
            batch = batches[0]
        else:
            batch = pa.Table.from_batches(batches).combine_chunks().to_batches()[0]
        names = batch.schema.names
        col = {name: batch.column(names.index(src)) for name, src in self.plan.items()}
        if self.opts.topic is not None:
            groups = [(self.opts.topic, None)]
        else:
            topics = col["topic"]
            if topics.null_count:
                i = int(np.flatnonzero(topics.is_null().to_numpy(zero_copy_only=False))[0])
                raise ConfigError(
                    f"pyklog sink: null topic in row {i} of a batch; set the 'topic' option or fill the column"
                )
            uniq = pc.unique(topics).to_pylist()
            groups = [(uniq[0], None)] if len(uniq) == 1 else [(t, pc.equal(topics, t)) for t in uniq]
        for topic, mask in groups:
            cols = col if mask is None else {k: pc.filter(v, mask) for k, v in col.items()}
            n = nparts.get(topic)
            if n is None:
                n = nparts[topic] = len(producer.partitions_for(topic))
            sections = encoder.encode(
                topic, n, cols["value"], cols.get("key"), cols.get("partition"), cols.get("headers")
            )
            count = producer.send_sections(topic, sections)
            per_topic[topic] = per_topic.get(topic, 0) + count

    def _send_rows(self, producer, iterator, per_topic: dict) -> None:
        """Executor side, with a custom partitioner: queue each Arrow batch with
        ``Producer.send_many`` (one call per topic per batch); stops early once a record failed
        for good.  Counts rows into ``per_topic``."""
        plan = self.plan
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
                headers = [[(e["key"], e["value"]) for e in h] if h else None for h in col["headers"].to_pylist()]
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
                            raise ConfigError(
                                "pyklog sink: null topic in row "
                                f"{i} of a batch; set the 'topic' option or fill the column"
                            )
                        rows = rows_by_topic[t] = []
                    rows.append(i)
                for t, rows in rows_by_topic.items():
                    if len(rows) == n:
                        producer.send_many(t, parts, keys, values, headers)
                    else:

                        def pick(seq, rows=rows):
                            return None if seq is None else [seq[i] for i in rows]

                        producer.send_many(t, pick(parts), pick(keys), [values[i] for i in rows], pick(headers))
                    per_topic[t] = per_topic.get(t, 0) + len(rows)
            if producer.failed_records:
                break

    def _delivery_error(self, failed: int, first_failure) -> SinkWriteError:
        # the producer logged each failure (topic, partition, Kafka error) in the executor log
        c = self.opts.cluster
        where = (
            f"brokers {c.bootstrap_servers} (kafka.bootstrap.servers)"
            if c.bootstrap_servers
            else f"the brokers registered in ZooKeeper {c.zookeeper_connect} (zookeeper.connect)"
        )
        timeout = self.opts.producer_dict().get("delivery.timeout.ms", "120000")
        return SinkWriteError(
            f"pyklog sink: {failed} record(s) were not acknowledged by {where} within "
            f"kafka.delivery.timeout.ms={timeout}; first failure: {first_failure.message or 'see this executor log'}"
            "; the task fails so Spark retries it or aborts the write"
        )

    def write(self, iterator) -> PyklogCommitMessage:
        """Executor side.  At-least-once: queue the rows, flush, raise if any record failed.
        Exactly-once: the same inside a transaction that is prepared, not committed (see
        :meth:`_write_transactional`)."""
        if self.opts.exactly_once:
            return self._write_transactional(iterator)
        per_topic: dict = {}
        key = tuple(sorted(self._producer_config().items())) if self.opts.producer_cache else None
        producer = TASK_PRODUCERS.take(key, self._producer) if key is not None else self._producer()
        failed_before = producer.failed_records
        first_failure = _FirstDeliveryFailure.attach()
        ok = False
        try:
            self._send_batches(producer, iterator, per_topic)
            producer.flush()
            failed = producer.failed_records - failed_before
            ok = not failed
        finally:
            if key is not None:
                TASK_PRODUCERS.give(key, producer, ok)
            else:
                producer.close()
            first_failure.detach()
        if failed:
            raise self._delivery_error(failed, first_failure)
        return PyklogCommitMessage(records=sum(per_topic.values()), per_topic=per_topic)

    # -- exactly-once: the task's side -------------------------------------------------------------
    def _task_identity(self) -> TaskIdentity:
        """Executor side: who this task is (overridden by the stream writer)."""
        return TaskIdentity.current(streaming=False, prefix=self.opts.transactional_id_prefix)

    def _write_transactional(self, iterator) -> PyklogCommitMessage:
        """Executor side: write the task's rows in one transaction and PREPARE it (flushed, left
        open; closing the producer does not abort it).  The driver's ``commit`` completes it.

        The transactional id is new for every task attempt (see :class:`TaskIdentity`), so a
        replayed batch never fences a prepared transaction of an earlier attempt.  Streaming tasks
        register the id in the commit-record store BEFORE the transaction starts, so the driver finds and aborts
        the transactions of attempts that never reached a commit (killed executors, speculative
        losers, a driver that died before ``commit``).  A failure inside the task aborts its
        transaction before the task fails."""
        ident = self._task_identity()
        it = iter(iterator)
        first = None
        for batch in it:
            if batch is not None and batch.num_rows:
                first = batch
                break
        if first is None:  # nothing to write: no transaction at all
            return PyklogCommitMessage(query_id=ident.query_id, batch_id=ident.batch_id, partition=ident.partition)
        tid = ident.transactional_id()
        if ident.query_id is not None:
            with self._sink_log(ident.prefix) as tlog:
                tlog.register(ident.query_id, ident.batch_id, tid, ident.partition, ident.attempt)
        timeout_s = self.opts.transaction_timeout_ms / 1000.0
        per_topic: dict = {}
        producer = self._producer(**{"transactional.id": tid})
        first_failure = _FirstDeliveryFailure.attach()
        began = None
        try:
            try:
                producer.init_transactions()
            except InvalidTransactionTimeoutError as e:
                raise ConfigError(
                    f"pyklog sink: the brokers refused kafka.transaction.timeout.ms="
                    f"{self.opts.transaction_timeout_ms}: it must not exceed the brokers' "
                    f"transaction.max.timeout.ms ({e})"
                ) from e
            producer.begin_transaction()
            began = time.monotonic()
            started_at = time.time()
            self._send_batches(producer, itertools.chain([first], it), per_topic)
            producer.flush()
            if producer.failed_records:
                raise self._delivery_error(producer.failed_records, first_failure)
            elapsed = time.monotonic() - began
            check_transaction_age(
                elapsed, self.opts.transaction_timeout_ms, f"task {ident.partition} (attempt {ident.attempt}) wrote for"
            )
            prepared = producer.prepare_transaction(timeout_s=max(1.0, timeout_s - elapsed))
        except BaseException:
            if began is not None:
                try:
                    producer.abort_transaction()
                except Exception as e:  # noqa: BLE001 - the original error matters more
                    log.warning(
                        "pyklog sink: could not abort transaction %s after a failure (the "
                        "driver or the transaction timeout aborts it): %s",
                        tid,
                        e,
                    )
            raise
        finally:
            producer.close()
            first_failure.detach()
        txn = (prepared.transactional_id, int(prepared.producer_id), int(prepared.producer_epoch))
        if txn[1] < 0:  # nothing reached the transaction (producer id -1): nothing to complete
            txn = None
        log.info(
            "pyklog sink: task %s of batch %s prepared transaction %s (%d records)",
            ident.partition,
            ident.batch_id,
            txn,
            sum(per_topic.values()),
        )
        return PyklogCommitMessage(
            records=sum(per_topic.values()),
            per_topic=per_topic,
            transaction=txn,
            query_id=ident.query_id,
            batch_id=ident.batch_id,
            partition=ident.partition,
            started_at=started_at,
        )

    # -- exactly-once: the driver's side -----------------------------------------------------------
    def _complete(self, txn, commit: bool) -> None:
        """Driver side: EndTxn for a prepared transaction of a task (any process may do it)."""
        from pyklog.connector import producer as producer_mod

        prepared = producer_mod.PreparedTransaction(*txn)
        producer_mod.complete_transaction(
            self._producer_config(), prepared, commit, timeout_s=self.opts.cluster.request_timeout_s * 2
        )

    def _complete_all(self, txns, batch_id, *, pause: str | None = None) -> tuple[list, list]:
        """Driver side: commit every transaction of ``txns``; returns (committed, aborted), where
        aborted ones are those the coordinator had already aborted.  Any other error is raised
        (after the other completions ran: they are idempotent, the replay repeats them).

        The first one is completed alone (then the test hook ``pause`` may stop the driver there),
        the others in parallel threads: each is one EndTxn to a coordinator, with its own
        connections."""
        committed, aborted, errors = [], [], []

        def one(txn):
            try:
                self._complete(txn, commit=True)
                return txn, None
            except Exception as e:  # noqa: BLE001 - sorted below
                return txn, e

        def record(txn, e):
            if e is None:
                committed.append(txn)
            elif _is_aborted_error(e):
                log.error(
                    "pyklog sink: transaction %s of batch %s was aborted before the driver committed it: %s",
                    txn[0],
                    batch_id,
                    e,
                )
                aborted.append(txn)
            else:
                errors.append(e)

        txns = list(txns)
        if txns:
            record(*one(txns[0]))
        if pause and len(txns) > 1:
            with open(pause, "w") as f:
                f.write(f"{batch_id}\n")
            log.warning("pyklog sink: test hook %s: pausing between two completions", COMMIT_PAUSE_ENV)
            time.sleep(3600)
        rest = txns[1:]
        if len(rest) == 1:
            record(*one(rest[0]))
        elif rest:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(max_workers=min(8, len(rest)), thread_name_prefix="pyklog-sink-commit") as ex:
                for txn, e in ex.map(one, rest):
                    record(txn, e)
        if errors:
            raise errors[0]
        return committed, aborted

    def _abort_quietly(self, txns, why: str) -> int:
        """Driver side: abort each of ``txns``; failures are logged (the transaction timeout, or
        the next commit's clean-up, ends them).  Returns how many were aborted."""
        done = 0
        for txn in txns:
            try:
                self._complete(txn, commit=False)
                done += 1
            except Exception as e:  # noqa: BLE001
                log.warning(
                    "pyklog sink: could not abort transaction %s (%s): %s; it ends at "
                    "kafka.transaction.timeout.ms at the latest",
                    txn[0],
                    why,
                    e,
                )
        return done

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


def _is_aborted_error(e: Exception) -> bool:
    """complete_transaction's answer when the transaction was aborted (by the brokers' timeout, or
    by someone fencing its transactional id) instead of committed."""
    return isinstance(e, (ProducerFencedError, InvalidTxnStateError))


class PyklogBatchWriter(_SinkWriter, DataSourceArrowWriter):
    """``df.write.format("pyklog")``.

    Exactly-once: each task prepares one transaction; ``commit(messages)`` (driver, after every
    task succeeded) commits them all, ``abort(messages)`` (the job failed) aborts the prepared
    ones, so a failed job leaves nothing visible to read_committed readers and re-running it writes
    every row once.  Spark's batch ``commit`` has no job id a re-run could find, so a driver that
    dies between two completions leaves that write partly committed (see docs)."""

    def commit(self, messages) -> None:
        total, per = self._summary(messages)
        if self.opts.exactly_once:
            txns = [m.transaction for m in messages or [] if isinstance(m, PyklogCommitMessage) and m.transaction]
            committed, aborted = self._complete_all(txns, "(batch write)")
            if aborted:
                raise SinkTransactionError(
                    f"pyklog sink: {len(aborted)} of the write's {len(txns)} transactions were aborted before the "
                    f"driver committed them ({', '.join(t[0] for t in aborted)}; {len(committed)} were committed): "
                    f"kafka.transaction.timeout.ms={self.opts.transaction_timeout_ms} is shorter than the write took"
                )
        log.info("pyklog sink: wrote %d records %s (%s)", total, per, self.opts.delivery_guarantee)

    def abort(self, messages) -> None:
        total, per = self._summary(messages)
        if self.opts.exactly_once:
            txns = [m.transaction for m in messages or [] if isinstance(m, PyklogCommitMessage) and m.transaction]
            n = self._abort_quietly(txns, "write aborted")
            log.error(
                "pyklog sink: write aborted; aborted %d of the %d prepared transactions of its "
                "successful tasks (%d records, none visible to read_committed readers)",
                n,
                len(txns),
                total,
            )
            return
        log.error(
            "pyklog sink: write aborted; %d records of the successful tasks were already written (at-least-once) %s",
            total,
            per,
        )


class PyklogStreamWriter(_SinkWriter, DataSourceStreamArrowWriter):
    """``df.writeStream.format("pyklog")``: at-least-once (idempotent commit), or exactly-once.

    Exactly-once, per micro-batch N (recovery design in docs/spark-connector.md):

    * executors (``write``): each task registers a fresh transactional id under
      ``transactions/N`` of the commit-record store (:mod:`~pyklog.connector.spark.sink_log`),
      writes its rows in a transaction and prepares it; the commit
      message carries ``(transactional_id, producer_id, producer_epoch)``.
    * driver (``commit(messages, N)``, a fresh instance in a new driver worker): creates
      ``commits/N`` listing the prepared transactions BEFORE completing any of them; if it already
      exists (batch N is a replay of a batch whose commit began), the recorded transactions are the
      batch and this attempt's are aborted.  Then it commits every recorded transaction
      (idempotent), marks the record committed, aborts registered transactions that are not part of
      any decision (attempts that never reached a commit) and forgets records of earlier batches.
    * ``abort(messages, N)`` aborts this attempt's transactions except those recorded in
      ``commits/N`` (a commit that failed half way is finished by the replay, never undone).
    """

    def _task_identity(self) -> TaskIdentity:
        return TaskIdentity.current(streaming=True, prefix=self.opts.transactional_id_prefix)

    @staticmethod
    def _eos_messages(messages) -> tuple[str | None, list, float | None]:
        msgs = [m for m in messages or [] if isinstance(m, PyklogCommitMessage)]
        query_id = next((m.query_id for m in msgs if m.query_id), None)
        txns = tuple(sorted(m.transaction for m in msgs if m.transaction))
        starts = [m.started_at for m in msgs if m.started_at is not None]
        return query_id, txns, (min(starts) if starts else None)

    def commit(self, messages, batchId) -> None:
        total, per = self._summary(messages)
        if not self.opts.exactly_once:
            log.info("pyklog sink: micro-batch %s wrote %d records %s", batchId, total, per)
            return
        query_id, mine, started_at = self._eos_messages(messages)
        if query_id is None:
            log.info("pyklog sink: micro-batch %s had no tasks; nothing to commit", batchId)
            return
        with self._sink_log(self._prefix(query_id)) as tlog:
            record, version, created = tlog.decide(CommitRecord(query_id, batchId, mine, "prepared", started_at))
            if not created:
                log.warning(
                    "pyklog sink: micro-batch %s is a replay: its commit began before (%s, %d "
                    "transactions); completing those and aborting this attempt's %d",
                    batchId,
                    record.state,
                    len(record.transactions),
                    len(mine),
                )
            if record.state != "committed":
                record, version = self._commit_recorded(tlog, record, version, created, mine)
            chosen = set(record.transactions)
            extra = [t for t in mine if t not in chosen]
            if extra:
                self._abort_quietly(extra, f"replay of micro-batch {batchId}")
            self._clean_up(tlog, query_id, batchId, {t[0] for t in chosen})
        log.info(
            "pyklog sink: micro-batch %s committed (%d transactions; this attempt wrote %d records %s)",
            batchId,
            len(record.transactions),
            total,
            per,
        )

    def _commit_recorded(
        self, tlog, record: CommitRecord, version: int, created: bool, mine: tuple
    ) -> tuple[CommitRecord, int]:
        """Driver side: commit every transaction of ``record`` (idempotent), then mark it committed.

        If a transaction turns out aborted (the brokers' transaction timeout ran out before the
        driver got to it): when NONE of the record's transactions was committed and this attempt
        has its own, the record is switched to this attempt's transactions (nothing of the batch was
        visible, so the replay's rows are the batch); otherwise the batch is partly lost and the
        commit fails with SinkTransactionError."""
        if record.started_at is not None:
            check_transaction_age(
                time.time() - record.started_at,
                self.opts.transaction_timeout_ms,
                f"micro-batch {record.batch_id}'s oldest transaction has been open for",
                fail=False,
            )
        pause = os.environ.get(COMMIT_PAUSE_ENV)
        committed, aborted = self._complete_all(record.transactions, record.batch_id, pause=pause)
        if aborted:
            if not committed and not created and mine:
                fresh = CommitRecord(record.query_id, record.batch_id, mine, "prepared", None)
                version = tlog.replace(fresh, version)
                log.warning(
                    "pyklog sink: micro-batch %s: none of the %d recorded transactions was "
                    "committed (all aborted); committing this attempt's %d instead",
                    record.batch_id,
                    len(record.transactions),
                    len(mine),
                )
                return self._commit_recorded(tlog, fresh, version, True, mine)
            raise SinkTransactionError(
                f"pyklog sink: micro-batch {record.batch_id} cannot be committed exactly once: "
                f"{len(aborted)} of its {len(record.transactions)} prepared transactions were aborted "
                f"before the driver committed them ({', '.join(t[0] for t in aborted)}), "
                f"{len(committed)} were committed.  The rows of the aborted ones are lost unless the "
                f"batch is rewritten.  kafka.transaction.timeout.ms={self.opts.transaction_timeout_ms} must "
                "exceed the time from a task's start to the driver's commit, including a driver restart"
            )
        done = CommitRecord(record.query_id, record.batch_id, record.transactions, "committed", record.started_at)
        version = tlog.replace(done, version)
        return done, version

    def _clean_up(self, tlog, query_id: str, batch_id: int, chosen: set) -> None:
        """Driver side, after batch N is committed: abort (by fencing their transactional ids)
        registered transactions of batches <= N that are not part of N's decision (earlier batches'
        decisions were committed before N ran), then forget their registrations and the commit
        records of batches before N (Spark never replays a batch before the last committed one)."""
        registered = tlog.registered(query_id, batch_id)
        for b, tids in sorted(registered.items()):
            stray = [t for t in tids if not (b == batch_id and t in chosen)]
            if b < batch_id:
                earlier, _ = tlog.read(query_id, b)
                if earlier is not None:
                    stray = [t for t in stray if t not in {x[0] for x in earlier.transactions}]
            for tid in stray:
                self._fence(tid)
            tlog.forget_registered(query_id, b, tids)
        tlog.forget_commits_before(query_id, batch_id)

    def _fence(self, tid: str) -> None:
        """Driver side: abort whatever transaction ``tid`` left open by initialising a producer with
        that transactional id (the coordinator bumps its epoch and aborts an open transaction)."""
        try:
            p = self._producer(**{"transactional.id": tid})
            try:
                p.init_transactions()
            finally:
                p.close()
            log.info("pyklog sink: aborted lingering transaction %s", tid)
        except Exception as e:  # noqa: BLE001 - the transaction timeout ends it anyway
            log.warning(
                "pyklog sink: could not abort lingering transaction %s: %s; it ends at "
                "kafka.transaction.timeout.ms at the latest",
                tid,
                e,
            )

    def abort(self, messages, batchId) -> None:
        total, per = self._summary(messages)
        if not self.opts.exactly_once:
            log.error(
                "pyklog sink: micro-batch %s aborted; %d records of its successful tasks were already "
                "written (at-least-once) %s",
                batchId,
                total,
                per,
            )
            return
        query_id, mine, _ = self._eos_messages(messages)
        if query_id is None or not mine:
            return
        try:
            with self._sink_log(self._prefix(query_id)) as tlog:
                record, _ = tlog.read(query_id, batchId)
        except Exception as e:  # noqa: BLE001 - without the record, aborting could undo a commit
            log.error(
                "pyklog sink: micro-batch %s aborted; cannot read its commit record (%s): leaving its "
                "%d transactions to the replay's commit or the transaction timeout",
                batchId,
                e,
                len(mine),
            )
            return
        recorded = set(record.transactions) if record is not None else set()
        keep = [t for t in mine if t in recorded]
        n = self._abort_quietly([t for t in mine if t not in recorded], f"micro-batch {batchId} aborted")
        log.error(
            "pyklog sink: micro-batch %s aborted: aborted %d prepared transactions, left %d that its "
            "commit record holds to the replay's commit",
            batchId,
            n,
            len(keep),
        )
