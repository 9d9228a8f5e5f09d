"""The producer: the seed's Producer API with today's Kafka semantics (Kafka's KafkaProducer).

::

    with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as p:
        md = p.send_sync("events", b"v", key=b"k")            # RecordMetadata(topic, partition, offset, timestamp)
        fut = p.send("events", b"v2", headers=[("h", b"1")])  # concurrent.futures.Future
        p.produce("events", b"v3", on_delivery=cb)           # no future
        p.send_many("events", None, None, [b"a", b"b"])  # bulk: lists of records
        p.flush()

Data path.  ``send()`` / ``produce()`` serialize the key and value (``key_serializer`` /
``value_serializer``, the seed's Encoder), pick the partition (the partitioner: Kafka's murmur2 of
the key, sticky for null keys) and append a ``(key, value, timestamp, headers)`` tuple to the open
batch of that partition: the only per-record work on the caller's thread.  A batch closes when it
reaches ``batch.size`` bytes or has waited ``linger.ms`` (the seed's batch.size / queue.time).  The
background sender thread turns closed batches into v2 record batches in bulk
(:func:`broker.record.batch.build_batch`, compression on the sender thread), groups them by leader
into Produce requests (one batch per partition per request, at most ``max.request.size``) and
pipelines up to ``max.in.flight.requests.per.connection`` requests per broker.

Delivery.  ``acks`` 0 / 1 / -1 ("all").  Retriable errors (NOT_LEADER_OR_FOLLOWER, a dropped
connection, ...) refresh the metadata and resend the same batch after ``retry.backoff.ms``, up to
``retries`` times and within ``delivery.timeout.ms``.  With idempotence (the default; it needs
acks=all and at most 5 requests in flight) the producer gets a producer id (InitProducerId) and
numbers each partition's batches; a resent batch keeps its producer id, epoch and sequence, so the
broker recognises a batch it already appended and answers with the original offsets: retries
never duplicate and never reorder.  After a retriable failure a partition's later batches wait
until its earlier ones are resolved and are resent in sequence order.  A numbered batch that
fails for good (MESSAGE_TOO_LARGE, retries or delivery.timeout.ms exhausted, ...) leaves a gap the
broker would answer with OUT_OF_ORDER_SEQUENCE_NUMBER forever; so its records fail, the producer
stops numbering new batches, waits until nothing is in flight (resending under the old id what may
already be in the log), then takes a new producer id, and every partition's sequence restarts at 0
(Kafka resets the epoch the same way).  Batches the broker rejected as out of order behind the gap
were not appended: they are renumbered under the new id and sent again, in order.

Results.  ``send()`` returns a :class:`concurrent.futures.Future` resolving to
:class:`RecordMetadata`; ``callback(metadata, exception)`` (one of them None) runs on the sender
thread.  ``produce()`` creates no future; failures go to ``on_delivery`` or are logged and counted in
:attr:`Producer.failed_records`.  ``send_many()`` queues lists of records (the fastest path: one
lock acquisition per batch filled, no futures).

How it is cut (as Kafka's KafkaProducer and its ``internals``): :class:`Producer` is the facade
(serialize, partition, validate, then hand over); :mod:`.config` holds the table of settings;
:mod:`.accumulator` the per-partition batches (RecordAccumulator); :mod:`.sender` the background
thread (Sender); :mod:`.transaction_manager` the producer id, epoch, sequences and the state machine
(TransactionManager); :mod:`.future` what ``send()`` returns.

Thread-safe: any number of threads may call send/produce/flush; one sender thread per producer.
Locking: the facade holds no lock of its own.  The accumulator's lock guards the batches being
filled; the sender thread owns everything after a batch is drained; the transaction manager's lock
guards its state.  The only nesting: the partitioner's lock may be taken inside the accumulator's
(a sticky partition moving on when its batch fills), never the other way round.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import Future

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    MessageTooLargeError,
    NetworkError,
    PyklogError,
    RequestTimedOutError,
    UnknownTopicOrPartitionError,
    error_for_code,
)
from pyklog.connector.client import ClusterClient
from pyklog.connector.partitioner import DefaultPartitioner, resolve_partitioner
from pyklog.connector.producer.accumulator import BATCH_OVERHEAD as _BATCH_OVERHEAD
from pyklog.connector.producer.accumulator import RECORD_OVERHEAD as _RECORD_OVERHEAD
from pyklog.connector.producer.accumulator import RecordAccumulator
from pyklog.connector.producer.config import PRODUCER_DEFAULTS, parse_config
from pyklog.connector.producer.future import RecordMetadata
from pyklog.connector.producer.sender import Sender
from pyklog.connector.producer.transaction_manager import (
    PreparedTransaction,
    TransactionManager,
    TransactionState,
    end_txn,
)
from pyklog.connector.security import ClientSecurityConfig, is_security_key

log = logging.getLogger(__name__)

_wall_clock = time.time  # record timestamps (CreateTime, ms); bound once for the per-record path

__all__ = ["Producer", "RecordMetadata", "PRODUCER_DEFAULTS", "complete_transaction", "PreparedTransaction"]


def _to_bytes(v, what: str):
    t = type(v)
    if t is bytes or v is None:
        return v
    if t is str:
        return v.encode("utf-8")
    if t is bytearray or t is memoryview:
        return bytes(v)
    raise TypeError(f"{what}: expected bytes, str or None (or configure a {what}.serializer), got {t.__name__}")


def _zk_credentials(jaas):
    """``zookeeper.jaas.config`` (a Password) -> ZkCredentials, or None."""
    if jaas is None:
        return None
    from pyklog.broker.zk.znode_acls import parse_client_jaas

    return parse_client_jaas(jaas.value, "zookeeper.jaas.config")


class Producer:
    """Kafka producer (see the module docstring).  Config as a dict of Kafka names and/or python
    keyword arguments (``linger_ms=5``); unknown names raise ConfigError.  Thread-safe.

    The facade (KafkaProducer): serializes, partitions and validates on the caller's thread, then
    hands records to the :class:`RecordAccumulator`; the :class:`Sender` thread delivers them; the
    :class:`TransactionManager` holds the producer id, epoch and sequences."""

    def __init__(self, config: dict | None = None, **kwargs):
        # security.protocol, ssl.* and sasl.* (Kafka's names or python ones) go to the connections
        security = ClientSecurityConfig.from_config({**(config or {}), **kwargs})
        config = {k: v for k, v in (config or {}).items() if not is_security_key(k)}
        kwargs = {k: v for k, v in kwargs.items() if not is_security_key(k)}
        cfg, self._explicit = parse_config(config, kwargs)
        self.config = cfg
        self._max_request_size = cfg["max.request.size"]
        self._max_record_size = self._max_request_size - _BATCH_OVERHEAD  # a record alone in a batch
        self._max_block_s = cfg["max.block.ms"] / 1000.0
        self._backoff_s = cfg["retry.backoff.ms"] / 1000.0
        self._delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000.0
        self._key_ser = cfg["key.serializer"]
        self._value_ser = cfg["value.serializer"]
        self._partitioner = resolve_partitioner(cfg["partitioner"])
        self._auto_create = cfg["allow.auto.create.topics"]
        self._closed = False
        self.client = ClusterClient(
            cfg["bootstrap.servers"],
            cfg["zookeeper.connect"],
            client_id=cfg["client.id"],
            request_timeout_ms=cfg["request.timeout.ms"],
            retry_backoff_ms=cfg["retry.backoff.ms"],
            metadata_max_age_ms=cfg["metadata.max.age.ms"],
            security=security,
            zookeeper_credentials=_zk_credentials(cfg["zookeeper.jaas.config"]),
        )
        # topic -> (number of partitions, partitions with a leader): shared with the accumulator
        # and the sender; entries are replaced whole, so it is read without a lock
        self._topic_info: dict[str, tuple[int, list]] = {}
        self._transactional = cfg["transactional.id"] is not None
        self._txn = TransactionManager(
            cfg["enable.idempotence"],
            "enable.idempotence" in self._explicit,
            transactional_id=cfg["transactional.id"],
            transaction_timeout_ms=cfg["transaction.timeout.ms"],
            retry_backoff_s=self._backoff_s,
        )
        self._accumulator = RecordAccumulator(
            cfg["batch.size"],
            cfg["linger.ms"] / 1000.0,
            cfg["buffer.memory"],
            self._max_block_s,
            self._partitioner,
            self._topic_info,
        )
        self._acc_append = self._accumulator.append
        self._sender = Sender(
            self.client, self._accumulator, self._txn, cfg, self._topic_info, name=f"pyklog-producer-{cfg['client.id']}"
        )
        self._accumulator.waker = self._sender
        self._sender.start()

    @property
    def failed_records(self) -> int:
        """Records that failed for good (counted on the sender thread)."""
        return self._sender.failed_records

    # ------------------------------------------------------------------------------- user side
    def _num_partitions(self, topic: str) -> tuple[int, list]:
        info = self._topic_info.get(topic)
        if info is not None:
            return info

        def lookup() -> tuple[int, list]:
            md = self.client.metadata([topic], refresh=True, auto_create=self._auto_create)
            tm = md.topics.get(topic)
            if tm is not None and tm.partitions and not tm.error_code:
                avail = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
                return len(tm.partitions), avail
            code = tm.error_code if tm is not None and tm.error_code else UnknownTopicOrPartitionError.code
            raise error_for_code(code, f"topic {topic!r} is not in the cluster metadata ({error_for_code(code).name})")

        def on_retry(e, attempts, delay_s):
            # as Kafka's producer: a WARN per failed attempt, not max.block.ms of silence
            # (a wrong port, a topic that does not exist and is not auto-created)
            if isinstance(e, NetworkError):
                log.warning(
                    "[Producer clientId=%s] connection for the metadata of topic %r could not be "
                    "established (attempt %d, retrying in %.1fs): %s. Broker may not be available.",
                    self.config["client.id"],
                    topic,
                    attempts,
                    delay_s,
                    e,
                )
            else:
                log.warning(
                    "[Producer clientId=%s] error while fetching metadata for topic %r (attempt %d, "
                    "retrying in %.1fs): %s",
                    self.config["client.id"],
                    topic,
                    attempts,
                    delay_s,
                    e,
                )

        try:
            info = retry(
                lookup,
                deadline=Deadline.after(self._max_block_s),
                backoff=Backoff(self._backoff_s, max_s=1.0, jitter=0.0),
                what=f"topic {topic!r}",
                raise_last=True,
                on_retry=on_retry,
            )
        except PyklogError as err:
            if err.retriable:
                raise RequestTimedOutError(
                    f"topic {topic!r} not available after max.block.ms={int(self._max_block_s * 1000)}: {err}"
                ) from err
            raise
        self._topic_info[topic] = info
        return info

    def _append(self, topic, value, key, partition, timestamp_ms, headers, want_future, cb, urgent=False):
        if self._closed:
            raise RuntimeError("send on a closed Producer")
        if self._transactional and self._txn.state is not TransactionState.IN_TRANSACTION:
            self._txn.check_can_send()
        kb = key if self._key_ser is None or key is None else self._key_ser(key)
        vb = value if self._value_ser is None or value is None else self._value_ser(value)
        if kb is not None and type(kb) is not bytes:
            kb = _to_bytes(kb, "key")
        if vb is not None and type(vb) is not bytes:
            vb = _to_bytes(vb, "value")
        size = _RECORD_OVERHEAD + (len(kb) if kb is not None else 0) + (len(vb) if vb is not None else 0)
        if headers:
            headers = tuple((k, _to_bytes(v, "header value")) for k, v in headers)
            for k, v in headers:
                size += len(k) + (len(v) if v is not None else 0) + 2
        else:
            headers = ()
        if size > self._max_record_size:
            raise MessageTooLargeError(
                f"MESSAGE_TOO_LARGE: record of about {size} bytes exceeds max.request.size={self._max_request_size}"
            )
        ts = int(_wall_clock() * 1000) if timestamp_ms is None else int(timestamp_ms)
        sticky = False
        if partition is None:
            n, avail = self._topic_info.get(topic) or self._num_partitions(topic)
            partition = self._partitioner.partition(topic, kb, n, avail)
            sticky = kb is None
        else:
            n = (self._topic_info.get(topic) or self._num_partitions(topic))[0]
            if not 0 <= partition < n:
                self._topic_info.pop(topic, None)  # maybe partitions were added: look again
                n = self._num_partitions(topic)[0]
                if not 0 <= partition < n:
                    raise UnknownTopicOrPartitionError(
                        f"UNKNOWN_TOPIC_OR_PARTITION: partition {partition} of topic {topic!r} does not "
                        f"exist (expected 0..{n - 1})"
                    )
        return self._acc_append(topic, partition, (kb, vb, ts, headers), size, sticky, want_future, cb, urgent)

    def send(
        self,
        topic: str,
        value=None,
        key=None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers=None,
        callback=None,
    ) -> Future:
        """Queue one record; return a Future resolving to :class:`RecordMetadata` (or raising the
        delivery error).  ``callback(metadata, exception)`` runs on the sender thread."""
        return self._append(topic, value, key, partition, timestamp_ms, headers, True, callback)

    def produce(
        self,
        topic: str,
        value=None,
        key=None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers=None,
        on_delivery=None,
    ) -> None:
        """Queue one record without a future (the fast path).  ``on_delivery(metadata,
        exception)`` if given; failures without it are logged and counted."""
        self._append(topic, value, key, partition, timestamp_ms, headers, False, on_delivery)

    def send_sync(
        self,
        topic: str,
        value=None,
        key=None,
        *,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers=None,
        timeout: float | None = None,
    ) -> RecordMetadata:
        """Send one record now (its batch closes at once) and wait: ``RecordMetadata``."""
        fut = self._append(topic, value, key, partition, timestamp_ms, headers, True, None, urgent=True)
        return fut.result(self._delivery_timeout_s + 5 if timeout is None else timeout)

    def send_batch(self, topic: str, values, *, keys=None, partition: int | None = None) -> None:
        """Queue many values (and optional keys) of one topic; no futures (see :meth:`send_many`)."""
        self.send_many(topic, partition, keys, values)

    def send_many(self, topic: str, partition=None, keys=None, values=None, headers=None, timestamps=None) -> int:
        """Queue many records of one topic at once: the bulk path (no futures, no callbacks;
        failures are logged and counted in :attr:`failed_records`, as for ``produce()`` without
        ``on_delivery``).  Appends a whole batch's worth of records per lock acquisition.

        ``values``: a sequence (None entries are tombstones).  ``keys``, ``headers`` (each entry
        None or ``[(str, bytes | None)]``), ``timestamps`` (ms; default: now, once per call): None
        or one entry per value.  ``partition``: None (the partitioner: murmur2 of each key; null
        keys fill the sticky partition's batch, then move on), one int for every record, or a
        sequence with an int or None per record.  Every record is checked (types, sizes against
        max.request.size, partitions) before any is queued, so a bad one queues nothing.  Order
        is kept per partition.  Returns the number of records queued.  Thread-safe."""
        if self._closed:
            raise RuntimeError("send on a closed Producer")
        if self._transactional and self._txn.state is not TransactionState.IN_TRANSACTION:
            self._txn.check_can_send()
        if values is None:
            raise TypeError("send_many: expected a sequence of values, got None")
        if not isinstance(values, (list, tuple)):
            values = list(values)
        n = len(values)
        if n == 0:
            return 0
        parts = None
        if partition is not None and not isinstance(partition, int):
            parts = partition if isinstance(partition, (list, tuple)) else list(partition)
            partition = None
        if keys is not None and not isinstance(keys, (list, tuple)):
            keys = list(keys)
        for name, seq in (("keys", keys), ("partition", parts), ("headers", headers), ("timestamps", timestamps)):
            if seq is not None and len(seq) != n:
                raise ValueError(f"send_many: {name} has {len(seq)} entries, expected {n} (one per value)")
        ser = self._value_ser
        vs = values if ser is None else [None if v is None else ser(v) for v in values]
        vs = [v if v is None or v.__class__ is bytes else _to_bytes(v, "value") for v in vs]
        if keys is None:
            ks = None
            sizes = [_RECORD_OVERHEAD if v is None else _RECORD_OVERHEAD + len(v) for v in vs]
        else:
            ser = self._key_ser
            ks = keys if ser is None else [None if k is None else ser(k) for k in keys]
            ks = [k if k is None or k.__class__ is bytes else _to_bytes(k, "key") for k in ks]
            sizes = [
                _RECORD_OVERHEAD + (0 if k is None else len(k)) + (0 if v is None else len(v)) for k, v in zip(ks, vs)
            ]
        if headers is not None:
            hs = []
            for i, h in enumerate(headers):
                if h:
                    h = tuple((k, _to_bytes(v, "header value")) for k, v in h)
                    sizes[i] += sum(len(k) + (len(v) if v is not None else 0) + 2 for k, v in h)
                    hs.append(h)
                else:
                    hs.append(())
        else:
            hs = None
        limit = self._max_request_size - _BATCH_OVERHEAD
        if max(sizes) > limit:
            i = next(i for i, sz in enumerate(sizes) if sz > limit)
            raise MessageTooLargeError(
                f"MESSAGE_TOO_LARGE: record {i} of about {sizes[i]} bytes exceeds "
                f"max.request.size={self._max_request_size} (nothing was queued)"
            )
        if timestamps is None:
            now = int(time.time() * 1000)
            tss = None
        else:
            tss = [int(time.time() * 1000) if t is None else int(t) for t in timestamps]
        nparts, avail = self._topic_info.get(topic) or self._num_partitions(topic)
        if partition is not None or parts is not None:
            wanted = {partition} if parts is None else {p for p in parts if p is not None}
            bad = [p for p in wanted if not isinstance(p, int) or not 0 <= p < nparts]
            if bad:
                self._topic_info.pop(topic, None)  # maybe partitions were added: look again
                nparts, avail = self._num_partitions(topic)
                bad = [p for p in wanted if not isinstance(p, int) or not 0 <= p < nparts]
                if bad:
                    raise UnknownTopicOrPartitionError(
                        f"UNKNOWN_TOPIC_OR_PARTITION: partition {bad[0]!r} of topic {topic!r} does not "
                        f"exist (expected 0..{nparts - 1}; nothing was queued)"
                    )
        # the records, as the accumulator holds them
        if ks is None:
            ks = [None] * n
        if hs is None:
            recs = list(zip(ks, vs, [now] * n if tss is None else tss, [()] * n))
        else:
            recs = list(zip(ks, vs, [now] * n if tss is None else tss, hs))
        append_many = self._accumulator.append_many
        # group by partition (order kept within each); null keys without a partition: sticky runs
        if partition is not None:
            append_many(topic, partition, recs, sizes, False, None)
            return n
        groups: dict = {}
        sticky_idx = []
        sticky = type(self._partitioner) is DefaultPartitioner
        pick = self._partitioner.partition
        for i in range(n):
            p = parts[i] if parts is not None else None
            if p is None:
                k = ks[i]
                if k is None and sticky:
                    sticky_idx.append(i)
                    continue
                p = pick(topic, k, nparts, avail)
            g = groups.get(p)
            if g is None:
                groups[p] = [i]
            else:
                g.append(i)
        if len(groups) == 1 and not sticky_idx:
            (p,) = groups
            append_many(topic, p, recs, sizes, False, None)
            return n
        for p, idx in groups.items():
            append_many(topic, p, [recs[i] for i in idx], [sizes[i] for i in idx], False, None)
        if sticky_idx:
            if len(sticky_idx) == n:
                append_many(topic, None, recs, sizes, True, (nparts, avail))
            else:
                append_many(
                    topic, None, [recs[i] for i in sticky_idx], [sizes[i] for i in sticky_idx], True, (nparts, avail)
                )
        return n

    def send_sections(self, topic: str, sections) -> int:
        """Queue records encoded in bulk: ``sections`` is a list of ``(partition,
        RecordsSection)`` (:mod:`broker.record.bulk`), each sent as one record batch of its own in
        the order given.  The narrow entry point of the Spark sink's bulk encoder: the caller has
        already chosen the partitions (murmur2 of the key as the default partitioner does) and cut
        the batches (at most batch.size each unless a record alone is larger).  Like
        :meth:`send_many`: no futures, failures are logged and counted in :attr:`failed_records`.
        The sender gives each batch its producer id, epoch, sequence and transactional bit when it
        sends it (idempotence and transactions as for any batch).  Every section is checked
        (partition, max.request.size) before any is queued.  Returns the number of records."""
        if self._closed:
            raise RuntimeError("send on a closed Producer")
        if self._transactional and self._txn.state is not TransactionState.IN_TRANSACTION:
            self._txn.check_can_send()
        nparts = (self._topic_info.get(topic) or self._num_partitions(topic))[0]
        sizes = []
        for partition, section in sections:
            if type(partition) is not int or not 0 <= partition < nparts:
                self._topic_info.pop(topic, None)  # maybe partitions were added: look again
                nparts = self._num_partitions(topic)[0]
                if type(partition) is not int or not 0 <= partition < nparts:
                    raise UnknownTopicOrPartitionError(
                        f"UNKNOWN_TOPIC_OR_PARTITION: partition {partition!r} of topic {topic!r} does not "
                        f"exist (expected 0..{nparts - 1}; nothing was queued)"
                    )
            size = section.nbytes
            if size > self._max_request_size and len(section) == 1:
                raise MessageTooLargeError(
                    f"MESSAGE_TOO_LARGE: a record of about {size} bytes exceeds "
                    f"max.request.size={self._max_request_size} (nothing was queued)"
                )
            if size > self._max_request_size:
                raise ValueError(
                    f"send_sections: a batch of {size} bytes ({len(section)} records) exceeds "
                    f"max.request.size={self._max_request_size}; cut batches at batch.size"
                )
            sizes.append(size)
        append = self._accumulator.append_section
        count = 0
        for (partition, section), size in zip(sections, sizes):
            append(topic, partition, section, size)
            count += len(section)
        return count

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._num_partitions(topic)[0]))

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until each of those records is acknowledged or
        failed (records other threads add meanwhile are not waited for)."""
        self._accumulator.flush(timeout, self._sender.is_alive)

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), stop the sender thread, close connections.  Idempotent;
        records still unsent afterwards fail with RequestTimedOutError.  A transactional producer
        first aborts an open transaction (as Kafka's does); a prepared transaction is left open
        for :func:`complete_transaction`."""
        if self._closed:
            return
        st = self._txn.state
        if self._transactional and st in (
            TransactionState.IN_TRANSACTION,
            TransactionState.ABORTABLE_ERROR,
            TransactionState.ABORTING_TRANSACTION,
        ):
            try:
                self.abort_transaction(timeout)
            except PyklogError as e:
                log.warning(
                    "close: could not abort the open transaction of transactional.id %r "
                    "(the coordinator aborts it after transaction.timeout.ms): %s",
                    self._txn.transactional_id,
                    e,
                )
        try:
            self.flush(timeout)
        except RequestTimedOutError as e:
            log.warning("closing producer with unsent records: %s", e)
        finally:
            self._closed = True
            self._sender.close(RequestTimedOutError("REQUEST_TIMED_OUT: producer closed before delivery"))
            self.client.close()

    # ------------------------------------------------------------------------------- transactions
    def _txn_deadline(self, timeout_s: float | None) -> Deadline:
        if self._closed:
            raise RuntimeError("transaction call on a closed Producer")
        return Deadline.after(self._max_block_s if timeout_s is None else timeout_s)

    def _txn_flush(self, deadline: Deadline, op: str) -> None:
        try:
            self._accumulator.flush(deadline.remaining(), self._sender.is_alive)
        except RequestTimedOutError as e:
            raise RequestTimedOutError(
                f"REQUEST_TIMED_OUT: {op}: records of the transaction are not all "
                f"acknowledged within the timeout ({e}); call {op}() again"
            ) from e

    def init_transactions(self, timeout_s: float | None = None) -> None:
        """Find the transaction coordinator of ``transactional.id`` and take a producer id and
        epoch (InitProducerId with transaction.timeout.ms).  Fences older producers with the same
        transactional.id (their open transaction is aborted).  Retries CONCURRENT_TRANSACTIONS,
        COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE within
        ``timeout_s`` (default max.block.ms); RequestTimedOutError after it (call again).  A
        broker without transactions raises a fatal error at once.  Kafka's initTransactions."""
        self._txn.init_transactions(self.client, self._txn_deadline(timeout_s))

    def begin_transaction(self) -> None:
        """Start a transaction (local only: partitions join it as records go to them)."""
        self._txn_deadline(0)
        self._txn.begin()

    def send_offsets_to_transaction(self, offsets: dict, group_id: str, timeout_s: float | None = None) -> None:
        """Make ``offsets`` (``{(topic, partition): next offset to consume}``) the committed
        offsets of consumer group ``group_id`` when, and only if, the transaction commits
        (AddOffsetsToTxn to the transaction coordinator, then TxnOffsetCommit to the group
        coordinator).  Kafka's sendOffsetsToTransaction."""
        deadline = self._txn_deadline(timeout_s)
        if not isinstance(group_id, str) or not group_id:
            raise TypeError(f"send_offsets_to_transaction: expected a group id string, got {group_id!r}")
        clean = {}
        for tp, off in dict(offsets).items():
            if (
                not (isinstance(tp, tuple) and len(tp) == 2 and isinstance(tp[0], str) and isinstance(tp[1], int))
                or not isinstance(off, int)
                or isinstance(off, bool)
                or off < 0
            ):
                raise TypeError(
                    f"send_offsets_to_transaction: expected {{(topic, partition): offset >= 0}}, got {tp!r}: {off!r}"
                )
            clean[tp] = off
        if clean:
            self._txn.add_offsets(self.client, clean, group_id, deadline)

    def commit_transaction(self, timeout_s: float | None = None) -> None:
        """Flush every record of the transaction, then EndTxn(commit); returns once the
        coordinator accepted the commit (the records become visible to read_committed consumers
        as the markers are written).  A record that failed raises TransactionAbortableError (call
        abort_transaction); a fenced producer ProducerFencedError (or TransactionTimedOutError);
        a timeout RequestTimedOutError (call commit_transaction again).  Kafka's commitTransaction."""
        deadline = self._txn_deadline(timeout_s)
        txn = self._txn
        txn.begin_commit()
        self._txn_flush(deadline, "commit_transaction")
        txn.end_transaction(self.client, True, deadline)

    def abort_transaction(self, timeout_s: float | None = None) -> None:
        """Drop the records not yet sent (their futures fail with TransactionAbortedError), wait
        for those in flight, then EndTxn(abort): nothing of the transaction becomes visible to
        read_committed consumers.  Kafka's abortTransaction."""
        deadline = self._txn_deadline(timeout_s)
        txn = self._txn
        txn.begin_abort(self._accumulator.last_batch_id())
        self._sender.wakeup()
        self._txn_flush(deadline, "abort_transaction")
        txn.end_transaction(self.client, False, deadline)

    def prepare_transaction(self, timeout_s: float | None = None) -> PreparedTransaction:
        """First phase of a two-phase commit (in the spirit of KIP-939): flush the open
        transaction until every record is acknowledged and return a picklable
        :class:`PreparedTransaction` ``(transactional_id, producer_id, producer_epoch)`` WITHOUT
        ending it.  Any process then ends it with :func:`complete_transaction` (commit or abort)
        within transaction.timeout.ms of its first record.  Afterwards this producer refuses
        sends, commits and aborts; it may be closed, which does not abort the prepared
        transaction.  A transaction without records or offsets gives producer_id -1 (nothing to
        complete)."""
        deadline = self._txn_deadline(timeout_s)
        txn = self._txn
        txn.begin_prepare()
        self._txn_flush(deadline, "prepare_transaction")
        return txn.prepared_transaction()

    @property
    def transaction_state(self) -> TransactionState:
        """The TransactionManager's state (Kafka's TransactionManager.State)."""
        return self._txn.state

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def complete_transaction(
    config: dict, prepared: PreparedTransaction, commit: bool, timeout_s: float | None = None
) -> None:
    """Second phase of a two-phase commit: end a transaction that ``Producer.prepare_transaction``
    left open, from any process (the preparing producer may be closed or dead).

    ``config``: the cluster options a Producer takes (``bootstrap.servers`` and/or
    ``zookeeper.connect``; other producer settings are accepted, ``request.timeout.ms``,
    ``retry.backoff.ms`` and ``max.block.ms`` used).  Finds the transaction coordinator of
    ``prepared.transactional_id`` and sends EndTxn(transactional_id, producer_id, producer_epoch,
    ``commit``), retrying retriable errors within ``timeout_s`` (default max.block.ms).
    Succeeds when the coordinator completes the transaction, or already completed it with the same
    result (a retried call).  Raises ProducerFencedError when the transaction was aborted because
    it outlived transaction.timeout.ms or a newer producer with the same transactional.id
    initialised (its epoch is newer), InvalidTxnStateError when the coordinator has no such open
    transaction to end this way, RequestTimedOutError when the coordinator could not be reached
    in time.  ``prepared.producer_id`` -1 (an empty transaction): nothing to do.  Runs in the
    caller's thread; opens and closes its own connections."""
    if not isinstance(prepared, tuple) or len(prepared) != 3:
        raise TypeError(f"complete_transaction: expected a PreparedTransaction, got {prepared!r}")
    prepared = PreparedTransaction(*prepared)
    if not isinstance(prepared.transactional_id, str) or not prepared.transactional_id:
        raise TypeError(f"complete_transaction: expected a transactional id, got {prepared.transactional_id!r}")
    if prepared.producer_id < 0:
        return
    # the security settings go to the connections, as a Producer's do
    security = ClientSecurityConfig.from_config(dict(config or {}))
    cfg, _explicit = parse_config({k: v for k, v in (config or {}).items() if not is_security_key(k)}, {})
    deadline = Deadline.after(cfg["max.block.ms"] / 1000.0 if timeout_s is None else timeout_s)
    client = ClusterClient(
        cfg["bootstrap.servers"],
        cfg["zookeeper.connect"],
        client_id=cfg["client.id"],
        request_timeout_ms=cfg["request.timeout.ms"],
        retry_backoff_ms=cfg["retry.backoff.ms"],
        metadata_max_age_ms=cfg["metadata.max.age.ms"],
        security=security,
        zookeeper_credentials=_zk_credentials(cfg["zookeeper.jaas.config"]),
    )
    try:
        end_txn(
            client,
            prepared.transactional_id,
            int(prepared.producer_id),
            int(prepared.producer_epoch),
            bool(commit),
            deadline,
            cfg["retry.backoff.ms"] / 1000.0,
        )
    finally:
        client.close()
    log.info(
        "transactional.id %r: prepared transaction of producer id %d epoch %d %s",
        prepared.transactional_id,
        prepared.producer_id,
        prepared.producer_epoch,
        "committed" if commit else "aborted",
    )
