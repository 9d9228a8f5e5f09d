"""The producer: the seed's Producer API with today's Kafka semantics.

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

Thread-safe: any number of threads may call send/produce/flush; one sender thread per producer.
"""
from __future__ import annotations

import collections
import logging
import selectors
import socket
import threading
import time
from concurrent.futures import Future
from concurrent.futures._base import FINISHED, PENDING
from typing import NamedTuple

from pyklog.broker.errors import (
    ConfigError,
    DuplicateSequenceError,
    MessageTooLargeError,
    NetworkError,
    OutOfOrderSequenceError,
    PyklogError,
    RequestTimedOutError,
    UnknownProducerIdError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    error_for_code,
)
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record import compression as _compression
from pyklog.broker.record.batch import build_batch
from pyklog.connector.client import REFRESH_METADATA_CODES, BrokerConnection, ClusterClient
from pyklog.connector.partitioner import DefaultPartitioner, resolve_partitioner

log = logging.getLogger(__name__)

__all__ = ["Producer", "RecordMetadata", "PRODUCER_DEFAULTS"]


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int  # -1 with acks=0 (unknown)
    timestamp: int  # CreateTime given/stamped, or the broker's LogAppendTime


# Kafka's producer config names (python names: dots -> underscores) and their defaults.
PRODUCER_DEFAULTS: dict = {
    "bootstrap.servers": None,
    "zookeeper.connect": None,
    "client.id": "pyklog-producer",
    "acks": -1,
    "compression.type": "none",
    "batch.size": 16384,
    "linger.ms": 5,
    "retries": 2147483647,
    "retry.backoff.ms": 100,
    "delivery.timeout.ms": 120000,
    "enable.idempotence": True,
    "max.in.flight.requests.per.connection": 5,
    "buffer.memory": 33554432,
    "max.block.ms": 60000,
    "max.request.size": 1048576,
    "request.timeout.ms": 30000,
    "metadata.max.age.ms": 300000,
    "key.serializer": None,
    "value.serializer": None,
    "partitioner": None,
    "allow.auto.create.topics": True,
}
_INT = {"batch.size", "linger.ms", "retries", "retry.backoff.ms", "delivery.timeout.ms",
        "max.in.flight.requests.per.connection", "buffer.memory", "max.block.ms", "max.request.size",
        "request.timeout.ms", "metadata.max.age.ms"}
_BOOL = {"enable.idempotence", "allow.auto.create.topics"}
_RECORD_OVERHEAD = 8  # rough per-record bytes beyond key + value (varints, attributes)
_BATCH_OVERHEAD = 61


def _parse_config(config: dict | None, kwargs: dict) -> tuple[dict, set]:
    merged = {}
    explicit = set()
    for src in (config or {}), kwargs:
        for k, v in src.items():
            name = k.replace("_", ".") if k not in PRODUCER_DEFAULTS else k
            if name not in PRODUCER_DEFAULTS:
                raise ConfigError(f"unknown producer config {k!r} (known: {', '.join(sorted(PRODUCER_DEFAULTS))})")
            merged[name] = v
            explicit.add(name)
    cfg = dict(PRODUCER_DEFAULTS)
    cfg.update(merged)
    for k in _INT:
        try:
            cfg[k] = int(cfg[k])
        except (TypeError, ValueError):
            raise ConfigError(f"{k}: expected an integer, got {cfg[k]!r}") from None
        if cfg[k] < 0:
            raise ConfigError(f"{k}: expected a value >= 0, got {cfg[k]}")
    for k in _BOOL:
        v = cfg[k]
        if isinstance(v, str):
            if v.lower() not in ("true", "false"):
                raise ConfigError(f"{k}: expected true or false, got {v!r}")
            v = v.lower() == "true"
        cfg[k] = bool(v)
    acks = cfg["acks"]
    if isinstance(acks, str):
        acks = {"all": -1, "-1": -1, "0": 0, "1": 1}.get(acks.strip().lower(), acks)
    if acks not in (-1, 0, 1):
        raise ConfigError(f"acks: expected 0, 1, -1 or 'all', got {cfg['acks']!r}")
    cfg["acks"] = acks
    try:
        cfg["compression.type"] = _compression.codec_id(cfg["compression.type"] or "none")
    except Exception:
        raise ConfigError(f"compression.type: expected one of none, gzip, snappy, lz4, zstd, "
                          f"got {cfg['compression.type']!r}") from None
    if cfg["max.in.flight.requests.per.connection"] < 1:
        raise ConfigError("max.in.flight.requests.per.connection: expected >= 1, got "
                          f"{cfg['max.in.flight.requests.per.connection']}")
    if cfg["enable.idempotence"]:
        if cfg["acks"] != -1:
            if "enable.idempotence" in explicit:
                raise ConfigError(f"enable.idempotence=true needs acks=all (-1), got acks={cfg['acks']}")
            cfg["enable.idempotence"] = False
        elif cfg["max.in.flight.requests.per.connection"] > 5:
            if "enable.idempotence" in explicit:
                raise ConfigError("enable.idempotence=true needs max.in.flight.requests.per.connection "
                                  f"<= 5, got {cfg['max.in.flight.requests.per.connection']}")
            cfg["enable.idempotence"] = False
        elif cfg["retries"] == 0 and "enable.idempotence" in explicit:
            raise ConfigError("enable.idempotence=true needs retries > 0, got retries=0")
    if cfg["batch.size"] > cfg["max.request.size"]:
        if "batch.size" in explicit:
            raise ConfigError(f"batch.size={cfg['batch.size']} is larger than max.request.size="
                              f"{cfg['max.request.size']}: expected batch.size <= max.request.size (a batch "
                              f"that size could never be sent)")
        cfg["batch.size"] = cfg["max.request.size"]  # the default gives way to a smaller request limit
    for k in ("key.serializer", "value.serializer"):
        if cfg[k] is not None and not callable(cfg[k]):
            raise ConfigError(f"{k}: expected a callable (value -> bytes), got {cfg[k]!r}")
    if not cfg["bootstrap.servers"] and not cfg["zookeeper.connect"]:
        raise ConfigError("expected bootstrap.servers or zookeeper.connect, got neither")
    return cfg, explicit


def _to_bytes(v, what: str):
    t = type(v)
    if t is bytes or v is None:
        return v
    if t is str:
        return v.encode("utf-8")
    if t is bytearray or t is memoryview:
        return bytes(v)
    raise TypeError(f"{what}: expected bytes, str or None (or configure a {what}.serializer), "
                    f"got {t.__name__}")


class FutureRecordMetadata(Future):
    """The Future ``send()`` returns: a :class:`concurrent.futures.Future` resolving to
    :class:`RecordMetadata`.

    Made for bulk use: the futures of one batch share one Condition and are completed together
    under it (one lock round and one ``notify_all`` per batch instead of per record), and the
    RecordMetadata is built only when asked for.  Waiting, ``result()``, ``exception()``,
    ``add_done_callback()`` and ``concurrent.futures.wait`` / ``as_completed`` behave as for any
    Future.  A queued record cannot be cancelled: ``cancel()`` returns False.
    """

    __slots__ = ("_condition", "_state", "_exception", "_w", "_cb", "_idx", "_ts", "_done")

    def __init__(self, condition, idx: int = 0, ts: int = -1):  # noqa: D107 - not calling Future.__init__
        self._condition = condition
        self._state = PENDING
        self._exception = None
        self._w = None
        self._cb = None
        self._idx = idx
        self._ts = ts
        self._done = None  # (topic, partition, base_offset, log_append_time) shared by the batch

    @property
    def _result(self):
        d = self._done
        if d is None or d.__class__ is RecordMetadata:
            return d
        base = d[2]
        return RecordMetadata(d[0], d[1], base + self._idx if base >= 0 else -1,
                              self._ts if d[3] < 0 else d[3])

    @_result.setter
    def _result(self, value):
        self._done = value

    # Future keeps two lists per instance; most record futures never need them
    @property
    def _waiters(self):
        if self._w is None:
            self._w = []
        return self._w

    @property
    def _done_callbacks(self):
        if self._cb is None:
            self._cb = []
        return self._cb

    def cancel(self) -> bool:
        return False


def _resolve_all(cond, futures, done, exc) -> None:
    """Complete the ``futures`` of one batch (they share ``cond``) with the batch's ``done``
    tuple or ``exc``: states under the lock, one notify_all, then done-callbacks outside it (as
    Future.set_result does)."""
    with cond:
        for fut in futures:
            if fut._state != PENDING:
                continue
            if exc is None:
                fut._done = done
            else:
                fut._exception = exc
            fut._state = FINISHED
            if fut._w:
                for w in fut._w:
                    if exc is None:
                        w.add_result(fut)
                    else:
                        w.add_exception(fut)
        cond.notify_all()
    for fut in futures:
        if fut._cb:
            fut._invoke_callbacks()


class _Batch:
    """Records of one partition on their way to the broker (accumulator then sender)."""

    __slots__ = ("topic", "partition", "records", "futures", "callbacks", "size", "created", "data",
                 "base_sequence", "attempts", "retry_at", "producer_id", "producer_epoch", "cond", "bid")

    def __init__(self, topic: str, partition: int, now: float):
        self.topic = topic
        self.partition = partition
        self.records: list = []
        self.futures: list = []  # FutureRecordMetadata of the records sent with send()
        self.callbacks: list = []  # (record index, callback)
        self.size = _BATCH_OVERHEAD
        self.created = now
        self.data: bytes | None = None
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.cond = None  # the Condition the batch's record futures share
        self.bid = 0  # creation order, for flush()


class _InFlight:
    __slots__ = ("cid", "batches", "sent_at")

    def __init__(self, cid, batches, sent_at):
        self.cid = cid
        self.batches = batches
        self.sent_at = sent_at


class Producer:
    """Kafka producer (see the module docstring).  Config as a dict of Kafka names and/or python
    keyword arguments (``linger_ms=5``); unknown names raise ConfigError.  Thread-safe."""

    def __init__(self, config: dict | None = None, **kwargs):
        cfg, self._explicit = _parse_config(config, kwargs)
        self.config = cfg
        self._acks = cfg["acks"]
        self._batch_size = cfg["batch.size"]
        self._linger_s = cfg["linger.ms"] / 1000.0
        self._max_request_size = cfg["max.request.size"]
        self._buffer_memory = cfg["buffer.memory"]
        self._max_block_s = cfg["max.block.ms"] / 1000.0
        self._retries = cfg["retries"]
        self._backoff_s = cfg["retry.backoff.ms"] / 1000.0
        self._delivery_timeout_s = cfg["delivery.timeout.ms"] / 1000.0
        self._request_timeout_ms = cfg["request.timeout.ms"]
        self._max_in_flight = cfg["max.in.flight.requests.per.connection"]
        self._codec = cfg["compression.type"]
        self._idempotent = cfg["enable.idempotence"]
        self._key_ser = cfg["key.serializer"]
        self._value_ser = cfg["value.serializer"]
        self._partitioner = resolve_partitioner(cfg["partitioner"])
        self._auto_create = cfg["allow.auto.create.topics"]
        self.client = ClusterClient(cfg["bootstrap.servers"], cfg["zookeeper.connect"],
                                    client_id=cfg["client.id"], request_timeout_ms=cfg["request.timeout.ms"],
                                    retry_backoff_ms=cfg["retry.backoff.ms"],
                                    metadata_max_age_ms=cfg["metadata.max.age.ms"])
        # accumulator (guarded by _lock)
        self._lock = threading.Lock()
        self._open: dict[tuple, _Batch] = {}
        self._ready: collections.deque = collections.deque()
        self._buffered = 0
        self._unfinished: set = set()  # ids of batches created and not yet completed
        self._batch_ids = 0
        self._done_cond = threading.Condition(self._lock)
        self._flushing = 0
        self._topic_info: dict[str, tuple[int, list]] = {}  # topic -> (num partitions, available)
        self._closed = False
        self.failed_records = 0
        # sender state (sender thread only)
        self._queues: dict[tuple, collections.deque] = {}
        self._tp_inflight: dict[tuple, int] = collections.defaultdict(int)
        self._tp_retrying: set = set()
        self._next_seq: dict[tuple, int] = collections.defaultdict(int)
        self._conns: dict[int, BrokerConnection] = {}
        self._conn_fds: dict[int, int] = {}
        self._inflight: dict[int, collections.deque] = {}
        self._producer_id = -1
        self._producer_epoch = -1
        # a batch numbered under the current producer id failed for good: its sequences are a gap
        # the broker will never fill, so once nothing is in flight the producer takes a new id
        self._reset_pid = False
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._sender_idle = False
        self._running = True
        self._fault_after_send = None  # fault injection hook for tests: fn(node_id, conn)
        self._thread = threading.Thread(target=self._run, name=f"pyklog-producer-{cfg['client.id']}",
                                        daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------------------- user side
    def _num_partitions(self, topic: str) -> tuple[int, list]:
        info = self._topic_info.get(topic)
        if info is not None:
            return info
        deadline = time.monotonic() + self._max_block_s
        backoff = self._backoff_s
        while True:
            try:
                md = self.client.metadata([topic], refresh=True, auto_create=self._auto_create)
                tm = md.topics.get(topic)
                if tm is not None and tm.partitions and not tm.error_code:
                    avail = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
                    info = (len(tm.partitions), avail)
                    self._topic_info[topic] = info
                    return info
                code = tm.error_code if tm is not None and tm.error_code else UnknownTopicOrPartitionError.code
                err = error_for_code(code, f"topic {topic!r} is not in the cluster metadata "
                                           f"({error_for_code(code).name})")
            except PyklogError as e:
                err = e
            if not err.retriable or time.monotonic() + backoff > deadline:
                if err.retriable:
                    raise RequestTimedOutError(f"topic {topic!r} not available after max.block.ms="
                                               f"{int(self._max_block_s * 1000)}: {err}") from err
                raise err
            time.sleep(backoff)
            backoff = min(backoff * 2, 1.0)

    def _append(self, topic, value, key, partition, timestamp_ms, headers, want_future, cb, urgent=False):
        if self._closed:
            raise RuntimeError("send on a closed Producer")
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
        if size + _BATCH_OVERHEAD > self._max_request_size:
            raise MessageTooLargeError(f"MESSAGE_TOO_LARGE: record of about {size} bytes exceeds "
                                       f"max.request.size={self._max_request_size}")
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
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
                        f"exist (expected 0..{n - 1})")
        if self._buffered + size > self._buffer_memory:
            self._wait_for_buffer(size)
        rec = (kb, vb, ts, headers)
        wake = False
        with self._lock:
            tp = (topic, partition)
            b = self._open.get(tp)
            if b is not None and b.size + size > self._batch_size and b.records:
                del self._open[tp]
                self._ready.append(b)
                wake = True
                if sticky:
                    n, avail = self._topic_info.get(topic, (0, None))
                    if n:
                        self._partitioner.on_new_batch(topic, n, partition, avail)
                        partition = self._partitioner.partition(topic, kb, n, avail)
                        tp = (topic, partition)
                b = self._open.get(tp)
            if b is None:
                b = self._open_batch(tp)
            records = b.records
            fut = None
            if want_future:
                cond = b.cond
                if cond is None:
                    cond = b.cond = threading.Condition()  # RLock: wait() locks every future's condition
                fut = FutureRecordMetadata(cond, len(records), ts)
                b.futures.append(fut)
            if cb is not None:
                b.callbacks.append((len(records), cb))
            records.append(rec)
            b.size += size
            self._buffered += size
            if urgent or b.size >= self._batch_size:
                del self._open[tp]
                self._ready.append(b)
                wake = True
        if wake and self._sender_idle:
            self._wakeup()
        return fut

    def send(self, topic: str, value=None, key=None, *, partition: int | None = None,
             timestamp_ms: int | None = None, headers=None, callback=None) -> Future:
        """Queue one record; return a Future resolving to :class:`RecordMetadata` (or raising the
        delivery error).  ``callback(metadata, exception)`` runs on the sender thread."""
        return self._append(topic, value, key, partition, timestamp_ms, headers, True, callback)

    def produce(self, topic: str, value=None, key=None, *, partition: int | None = None,
                timestamp_ms: int | None = None, headers=None, on_delivery=None) -> None:
        """Queue one record without a future (the fast path).  ``on_delivery(metadata,
        exception)`` if given; failures without it are logged and counted."""
        self._append(topic, value, key, partition, timestamp_ms, headers, False, on_delivery)

    def send_sync(self, topic: str, value=None, key=None, *, partition: int | None = None,
                  timestamp_ms: int | None = None, headers=None, timeout: float | None = None) -> RecordMetadata:
        """Send one record now (its batch closes at once) and wait: ``RecordMetadata``."""
        fut = self._append(topic, value, key, partition, timestamp_ms, headers, True, None, urgent=True)
        return fut.result(self._delivery_timeout_s + 5 if timeout is None else timeout)

    def send_batch(self, topic: str, values, *, keys=None, partition: int | None = None) -> None:
        """Queue many values (and optional keys) of one topic; no futures (see :meth:`send_many`)."""
        self.send_many(topic, partition, keys, values)

    def _open_batch(self, tp: tuple[str, int]) -> "_Batch":
        """Start the open batch of partition ``tp``.  Caller holds ``self._lock``."""
        b = _Batch(tp[0], tp[1], time.monotonic())
        self._batch_ids += 1
        b.bid = self._batch_ids
        self._open[tp] = b
        self._unfinished.add(b.bid)
        return b

    def send_many(self, topic: str, partition=None, keys=None, values=None, headers=None,
                  timestamps=None) -> int:
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
            sizes = [_RECORD_OVERHEAD + (0 if k is None else len(k)) + (0 if v is None else len(v))
                     for k, v in zip(ks, vs)]
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
            raise MessageTooLargeError(f"MESSAGE_TOO_LARGE: record {i} of about {sizes[i]} bytes exceeds "
                                       f"max.request.size={self._max_request_size} (nothing was queued)")
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
                        f"exist (expected 0..{nparts - 1}; nothing was queued)")
        # the records, as the accumulator holds them
        if ks is None:
            ks = [None] * n
        if hs is None:
            recs = list(zip(ks, vs, [now] * n if tss is None else tss, [()] * n))
        else:
            recs = list(zip(ks, vs, [now] * n if tss is None else tss, hs))
        # group by partition (order kept within each); null keys without a partition: sticky runs
        if partition is not None:
            self._append_many(topic, partition, recs, sizes, False)
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
            self._append_many(topic, p, recs, sizes, False)
            return n
        for p, idx in groups.items():
            self._append_many(topic, p, [recs[i] for i in idx], [sizes[i] for i in idx], False)
        if sticky_idx:
            if len(sticky_idx) == n:
                self._append_many(topic, None, recs, sizes, True)
            else:
                self._append_many(topic, None, [recs[i] for i in sticky_idx],
                                  [sizes[i] for i in sticky_idx], True)
        return n

    def _append_many(self, topic: str, partition, recs: list, sizes: list, sticky: bool) -> None:
        """Append ``recs`` (validated accumulator tuples) to ``partition``'s batches, one lock
        acquisition per batch filled.  ``sticky``: null-key records, ``partition`` is the
        partitioner's sticky choice, which moves on each time a batch fills."""
        n = len(recs)
        pos = 0
        batch_size = self._batch_size
        wake = False
        info = self._topic_info.get(topic)
        while pos < n:
            if sticky:
                if info is None:
                    info = self._num_partitions(topic)
                partition = self._partitioner.partition(topic, None, info[0], info[1])
            if self._buffered + batch_size > self._buffer_memory:
                self._wait_for_buffer(min(batch_size, sum(sizes[pos:pos + 1024])))
            with self._lock:
                tp = (topic, partition)
                b = self._open.get(tp)
                if b is None:
                    b = self._open_batch(tp)
                bsize = b.size
                start = pos
                empty = not b.records
                while pos < n:
                    sz = sizes[pos]
                    if bsize + sz > batch_size and not (empty and pos == start):
                        break
                    bsize += sz
                    pos += 1
                if pos > start:
                    b.records.extend(recs[start:pos] if start or pos < n else recs)
                    self._buffered += bsize - b.size
                    b.size = bsize
                full = pos < n or bsize >= batch_size
                if full:
                    del self._open[tp]
                    self._ready.append(b)
                    wake = True
            if full and sticky:
                self._partitioner.on_new_batch(topic, info[0], partition, info[1])
            if wake and self._sender_idle:
                self._wakeup()
                wake = False

    def partitions_for(self, topic: str) -> list[int]:
        return list(range(self._num_partitions(topic)[0]))

    def _wait_for_buffer(self, size: int) -> None:
        deadline = time.monotonic() + self._max_block_s
        with self._lock:
            while self._buffered + size > self._buffer_memory and self._buffered > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError(
                        f"buffer.memory={self._buffer_memory} exhausted for max.block.ms="
                        f"{int(self._max_block_s * 1000)} ({self._buffered} bytes waiting)")
                if self._open:  # let the sender take what is buffered
                    self._ready.extend(self._open.values())
                    self._open.clear()
                self._wakeup()
                self._done_cond.wait(min(left, 0.1))

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued so far and wait until each of those records is acknowledged or
        failed (records other threads add meanwhile are not waited for)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            try:
                target = self._batch_ids
                if self._open:
                    self._ready.extend(self._open.values())
                    self._open.clear()
                self._wakeup()
                while self._unfinished and min(self._unfinished) <= target:
                    if not self._thread.is_alive():
                        raise RuntimeError("the producer's sender thread died; see the log")
                    left = None if deadline is None else deadline - time.monotonic()
                    if left is not None and left <= 0:
                        n = sum(1 for bid in self._unfinished if bid <= target)
                        raise RequestTimedOutError(f"flush: {n} batches still unacknowledged after {timeout}s")
                    self._done_cond.wait(0.2 if left is None else min(left, 0.2))
                    stale = [tp for tp, b in self._open.items() if b.bid <= target]
                    if stale:
                        for tp in stale:
                            self._ready.append(self._open.pop(tp))
                        self._wakeup()
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush (up to ``timeout``), stop the sender thread, close connections.  Idempotent;
        records still unsent afterwards fail with RequestTimedOutError."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        except RequestTimedOutError as e:
            log.warning("closing producer with unsent records: %s", e)
        finally:
            self._closed = True
            self._running = False
            self._wakeup()
            self._thread.join(30)
            self._fail_everything(RequestTimedOutError("REQUEST_TIMED_OUT: producer closed before delivery"))
            for c in self._conns.values():
                c.close()
            self._conns.clear()
            self.client.close()
            self._selector.close()
            self._wake_r.close()
            self._wake_w.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _wakeup(self) -> None:
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass

    # ------------------------------------------------------------------------------- completion
    def _complete(self, b: _Batch, base_offset: int, log_append_time: int) -> None:
        if b.futures:
            _resolve_all(b.cond, b.futures, (b.topic, b.partition, base_offset, log_append_time), None)
        if b.callbacks:
            topic, partition, records = b.topic, b.partition, b.records
            for idx, cb in b.callbacks:
                ts = records[idx][2] if log_append_time < 0 else log_append_time
                md = RecordMetadata(topic, partition, base_offset + idx if base_offset >= 0 else -1, ts)
                try:
                    cb(md, None)
                except Exception:
                    log.exception("producer callback raised")
        self._finish(b)

    def _fail(self, b: _Batch, exc: Exception) -> None:
        log.warning("failed to deliver %d records to %s-%d: %s", len(b.records), b.topic, b.partition, exc)
        if b.base_sequence >= 0 and b.producer_id >= 0 and b.producer_id == self._producer_id \
                and not self._reset_pid:
            log.info("idempotent batch %s-%d (sequences %d..) failed: new producer id once the requests "
                     "in flight are answered", b.topic, b.partition, b.base_sequence)
            self._reset_pid = True
        if b.futures:
            _resolve_all(b.cond, b.futures, None, exc)
        for _idx, cb in b.callbacks:
            try:
                cb(None, exc)
            except Exception:
                log.exception("producer callback raised")
        self.failed_records += len(b.records)
        self._finish(b)

    def _finish(self, b: _Batch) -> None:
        b.records = None
        with self._lock:
            self._buffered -= b.size
            self._unfinished.discard(b.bid)
            self._done_cond.notify_all()

    def _fail_everything(self, exc: Exception) -> None:
        with self._lock:
            batches = list(self._open.values()) + list(self._ready)
            self._open.clear()
            self._ready.clear()
        for q in self._queues.values():
            batches.extend(q)
            q.clear()
        for dq in self._inflight.values():
            for inf in dq:
                batches.extend(inf.batches.values())
            dq.clear()
        seen = set()
        for b in batches:
            if id(b) not in seen and b.records is not None:
                seen.add(id(b))
                self._fail(b, exc)

    # ------------------------------------------------------------------------------- sender thread
    def _run(self) -> None:
        try:
            while self._running:
                self._sender_step()
        except BaseException as e:  # noqa: BLE001 - report, fail what is queued
            log.exception("producer sender thread died")
            self._fail_everything(e if isinstance(e, Exception) else RuntimeError(str(e)))
            raise

    def _sender_step(self) -> None:
        now = time.monotonic()
        next_wake = self._drain_accumulator(now)
        self._send_ready(now)
        # wait for responses, the wakeup socket, the next linger deadline or retry time
        timeout = next_wake - time.monotonic()
        retry_at = min((q[0].retry_at for q in self._queues.values() if q and q[0].retry_at), default=None)
        if retry_at is not None:
            timeout = min(timeout, retry_at - time.monotonic())
        pending = any(self._inflight.values())
        if any(q for q in self._queues.values()) and not pending:
            timeout = min(timeout, self._backoff_s)
        timeout = max(0.0, min(timeout, 0.5))
        self._sender_idle = True
        with self._lock:
            if self._ready or (self._flushing and self._open) or not self._running:
                timeout = 0.0
        events = self._selector.select(timeout) if timeout > 0 or pending else []
        self._sender_idle = False
        for key, _mask in events:
            if key.data is None:
                try:
                    while self._wake_r.recv(4096):
                        pass
                except (BlockingIOError, OSError):
                    pass
            else:
                self._read_responses(key.data)
        self._check_timeouts()

    def _drain_accumulator(self, now: float) -> float:
        """Move closed and lingered batches to the per-partition send queues; return when the
        next open batch's linger.ms expires."""
        linger = self._linger_s
        next_wake = now + 0.5
        sticky_closed = []
        with self._lock:
            taken = list(self._ready)
            self._ready.clear()
            if self._open:
                flush = self._flushing or not self._running
                for tp, b in list(self._open.items()):
                    if flush or now - b.created >= linger:
                        del self._open[tp]
                        taken.append(b)
                        sticky_closed.append(tp)
                    elif b.created + linger < next_wake:
                        next_wake = b.created + linger
        for tp in sticky_closed:
            info = self._topic_info.get(tp[0])
            if info:
                self._partitioner.on_new_batch(tp[0], info[0], tp[1], info[1])
        queues = self._queues
        for b in taken:
            tp = (b.topic, b.partition)
            q = queues.get(tp)
            if q is None:
                q = queues[tp] = collections.deque()
            q.append(b)
        return next_wake

    def _ensure_producer_id(self) -> None:
        if not self._idempotent or self._producer_id >= 0:
            return
        try:
            self._producer_id, self._producer_epoch = self.client.init_producer_id()
            log.debug("idempotent producer id %d epoch %d", self._producer_id, self._producer_epoch)
        except UnsupportedVersionError:
            if "enable.idempotence" in self._explicit:
                raise
            log.info("broker has no InitProducerId: idempotence off")
            self._idempotent = False

    def _build(self, b: _Batch) -> None:
        if not self._idempotent:
            b.data = build_batch(b.records, compression=self._codec)
            return
        tp = (b.topic, b.partition)
        seq = self._next_seq[tp]
        # number the batch only once it is built: a batch that cannot be encoded leaves no gap
        b.data = build_batch(b.records, compression=self._codec, producer_id=self._producer_id,
                             producer_epoch=self._producer_epoch, base_sequence=seq)
        b.producer_id, b.producer_epoch, b.base_sequence = self._producer_id, self._producer_epoch, seq
        self._next_seq[tp] = (seq + len(b.records)) & 0x7FFFFFFF

    @staticmethod
    def _unbuild(b: _Batch) -> None:
        """Forget a batch's encoding and numbering (the broker rejected it, so it was not appended):
        it is numbered again, under the next producer id, when it is sent."""
        b.data = None
        b.base_sequence = -1
        b.producer_id = -1
        b.producer_epoch = -1

    def _maybe_reset_producer_id(self) -> bool:
        """After a numbered batch failed: once no request is in flight and no queued batch still
        needs resending under the old producer id, drop the id and every partition's sequence
        (Kafka's epoch bump).  Queued batches are numbered again under the new id, in order.
        Returns True if the reset is still pending."""
        if not self._reset_pid:
            return False
        if any(self._inflight.values()):
            return True
        for q in self._queues.values():
            for b in q:  # in sequence order
                if b.data is None:
                    break  # rejected (or never sent): the broker cannot have appended what follows
                if b.attempts > 0 and b.producer_id == self._producer_id:
                    return True  # sent and unresolved: may be in the log, resend it as it was
        for q in self._queues.values():
            for b in q:
                self._unbuild(b)
        log.info("idempotent producer: dropping producer id %d after a failed batch; sequences restart "
                 "at 0 under a new id", self._producer_id)
        self._producer_id = -1
        self._producer_epoch = -1
        self._next_seq.clear()
        self._tp_retrying.clear()
        self._reset_pid = False
        return False

    def _leader(self, topic: str, partition: int):
        md = self.client._md
        tm = md.topics.get(topic)
        if tm is not None:
            pm = tm.partitions.get(partition)
            if pm is not None and pm.leader >= 0 and pm.leader in md.brokers and not self.client._stale \
                    and time.monotonic() - md.updated < self.client.metadata_max_age_s:
                return pm.leader
        try:
            md = self.client.metadata([topic], refresh=True, auto_create=self._auto_create)
        except PyklogError as e:
            log.debug("metadata refresh failed: %s", e)
            return None
        tm = md.topics.get(topic)
        if tm is not None and tm.partitions and not tm.error_code:
            avail = sorted(p for p, pm in tm.partitions.items() if pm.leader >= 0)
            self._topic_info[topic] = (len(tm.partitions), avail)
            pm = tm.partitions.get(partition)
            if pm is not None and pm.leader >= 0:
                return pm.leader
        return None

    def _connection(self, node: int) -> BrokerConnection | None:
        conn = self._conns.get(node)
        if conn is not None and not conn.closed:
            return conn
        try:
            conn = self.client.new_connection(node)
        except PyklogError as e:
            log.info("cannot connect to broker %d: %s", node, e)
            self.client.invalidate()
            return None
        self._conns[node] = conn
        fd = conn.fileno()
        stale = self._selector.get_map().get(fd)
        if stale is not None:  # a closed connection's fd, reused by the OS
            self._selector.unregister(fd)
        self._selector.register(fd, selectors.EVENT_READ, node)
        self._conn_fds[node] = fd
        self._inflight.setdefault(node, collections.deque())
        return conn

    def _drop_connection(self, node: int, exc: Exception) -> None:
        conn = self._conns.pop(node, None)
        fd = self._conn_fds.pop(node, None)
        if fd is not None:
            try:
                self._selector.unregister(fd)  # by fd: the socket may already be closed
            except (KeyError, ValueError):
                pass
        if conn is not None:
            conn.close()
        self.client.invalidate()
        dq = self._inflight.get(node)
        if dq:
            reqs = list(dq)
            dq.clear()
            for inf in reqs:
                for tp, b in inf.batches.items():
                    self._tp_inflight[tp] -= 1
                    self._retry_or_fail(b, exc)

    def _send_ready(self, now: float) -> None:
        if not any(self._queues.values()):
            return
        if self._reset_pid:
            self._maybe_reset_producer_id()
        if self._idempotent and self._producer_id < 0:
            try:
                self._ensure_producer_id()
            except PyklogError as e:
                if not e.retriable:
                    self._fail_everything(e)
                    return
                log.info("InitProducerId failed, retrying: %s", e)
                return
        by_node: dict[int, list] = {}
        for tp in list(self._queues):
            if not self._sendable(tp, now):
                continue
            node = self._leader(*tp)
            if node is None:
                self._queues[tp][0].retry_at = now + self._backoff_s
                continue
            by_node.setdefault(node, []).append(tp)
        for node, tps in by_node.items():
            while True:
                tps = [tp for tp in tps if self._sendable(tp, now)]
                if not tps:
                    break
                dq = self._inflight.get(node)
                if dq is not None and len(dq) >= self._max_in_flight:
                    break
                conn = self._connection(node)
                if conn is None:
                    for tp in tps:
                        self._queues[tp][0].retry_at = now + self._backoff_s
                    break
                dq = self._inflight[node]
                batches = {}
                size = 0
                for tp in tps:
                    q = self._queues[tp]
                    b = q[0]
                    if b.data is None:
                        try:
                            self._build(b)
                        except Exception as e:  # bad header key etc.: fail this batch only
                            q.popleft()
                            self._fail(b, e if isinstance(e, PyklogError) else
                                       ConfigError(f"cannot encode a record batch for {tp[0]}-{tp[1]}: {e}"))
                            continue
                    bsize = len(b.data) + 64
                    if batches and size + bsize > self._max_request_size:
                        continue
                    q.popleft()
                    batches[tp] = b
                    size += bsize
                if batches:
                    self._send_request(node, conn, dq, batches, now)
                if conn.closed:
                    break

    def _sendable(self, tp, now: float) -> bool:
        q = self._queues.get(tp)
        if not q:
            return False
        b = q[0]
        if b.retry_at and b.retry_at > now:
            return False
        if b.data is None and self._reset_pid:
            return False  # numbered under the next producer id
        if tp in self._tp_retrying and self._tp_inflight[tp] > 0:
            return False  # resend in sequence order once the earlier batches of tp are resolved
        return True

    def _send_request(self, node, conn, dq, batches, now) -> None:
        topics: dict = {}
        for (t, p), b in batches.items():
            b.attempts += 1
            b.retry_at = 0.0
            topics.setdefault(t, []).append({"index": p, "records": b.data})
        body = {"transactional_id": None, "acks": self._acks, "timeout_ms": self._request_timeout_ms,
                "topic_data": [{"name": t, "partition_data": ps} for t, ps in topics.items()]}
        try:
            version = conn.version_for(ApiKey.PRODUCE)
            if version < 3:
                raise UnsupportedVersionError(f"broker {node} has no Produce v3+ (record batch v2)")
            cid = conn.send(ApiKey.PRODUCE, body, version, expect_response=self._acks != 0)
        except NetworkError as e:
            for tp, b in batches.items():
                self._retry_or_fail(b, e)
            self._drop_connection(node, e)
            return
        except UnsupportedVersionError as e:
            for b in batches.values():
                self._fail(b, e)
            return
        if self._acks == 0:
            for b in batches.values():
                self._complete(b, -1, -1)
            return
        for tp in batches:
            self._tp_inflight[tp] += 1
        dq.append(_InFlight(cid, batches, now))
        hook = self._fault_after_send
        if hook is not None:
            hook(node, conn)

    def _read_responses(self, node: int) -> None:
        conn = self._conns.get(node)
        dq = self._inflight.get(node)
        if conn is None or not dq:
            if conn is not None and not dq:
                # readable with nothing in flight: the broker closed the connection
                self._drop_connection(node, NetworkError(f"broker {node} closed an idle connection"))
            return
        inf = dq[0]
        try:
            resp = conn.receive(inf.cid)
        except NetworkError as e:
            self._drop_connection(node, e)
            return
        dq.popleft()
        self._handle_response(node, inf, resp)

    def _handle_response(self, node: int, inf: _InFlight, resp: dict) -> None:
        seen = set()
        for t in resp.get("responses") or []:
            name = t["name"]
            for p in t.get("partition_responses") or []:
                tp = (name, int(p["index"]))
                b = inf.batches.get(tp)
                if b is None or tp in seen:
                    continue
                seen.add(tp)
                self._tp_inflight[tp] -= 1
                code = int(p.get("error_code", 0))
                if code == 0:
                    self._complete(b, int(p["base_offset"]), int(p.get("log_append_time_ms", -1)))
                    self._maybe_end_retrying(tp)
                elif code == DuplicateSequenceError.code:
                    self._complete(b, int(p.get("base_offset", -1)), int(p.get("log_append_time_ms", -1)))
                    self._maybe_end_retrying(tp)
                else:
                    msg = p.get("error_message") or ""
                    exc = error_for_code(code, f"{error_for_code(code).name}: Produce to {tp[0]}-{tp[1]} "
                                               f"on broker {node} {msg}".rstrip())
                    if code in REFRESH_METADATA_CODES:
                        self.client.invalidate()
                    self._retry_or_fail(b, exc)
        for tp, b in inf.batches.items():
            if tp not in seen:
                self._tp_inflight[tp] -= 1
                self._retry_or_fail(b, NetworkError(f"broker {node} did not answer for {tp[0]}-{tp[1]}"))

    def _maybe_end_retrying(self, tp) -> None:
        if tp in self._tp_retrying and self._tp_inflight[tp] == 0:
            q = self._queues.get(tp)
            if not q or q[0].attempts == 0:
                self._tp_retrying.discard(tp)

    def _retry_or_fail(self, b: _Batch, exc: PyklogError) -> None:
        tp = (b.topic, b.partition)
        now = time.monotonic()
        retriable = getattr(exc, "retriable", False)
        if self._idempotent and b.base_sequence >= 0 and isinstance(exc, (OutOfOrderSequenceError,
                                                                           UnknownProducerIdError)):
            if isinstance(exc, UnknownProducerIdError) or self._reset_pid \
                    or b.producer_id != self._producer_id:
                # rejected, so not in the log: an earlier batch of this producer id failed for good
                # (or the broker forgot the id); send it again under the next producer id
                self._reset_pid = self._reset_pid or b.producer_id == self._producer_id
                self._unbuild(b)
                retriable = True
            elif tp in self._tp_retrying:
                retriable = True  # an earlier batch of tp is being resent: this one follows it again
        if retriable and b.attempts <= self._retries and now - b.created < self._delivery_timeout_s:
            log.debug("retrying %s-%d (attempt %d): %s", b.topic, b.partition, b.attempts, exc)
            b.retry_at = now + self._backoff_s
            q = self._queues.setdefault(tp, collections.deque())
            if self._idempotent:
                self._tp_retrying.add(tp)
                # keep the partition's order (creation order = sequence order)
                items = list(q)
                items.append(b)
                items.sort(key=lambda x: x.bid)
                q.clear()
                q.extend(items)
            else:
                q.appendleft(b)
            return
        if retriable and now - b.created >= self._delivery_timeout_s:
            exc = RequestTimedOutError(f"REQUEST_TIMED_OUT: delivery.timeout.ms expired for "
                                       f"{b.topic}-{b.partition} after {b.attempts} attempts: {exc}")
        self._fail(b, exc)

    def _check_timeouts(self) -> None:
        now = time.monotonic()
        limit = self._request_timeout_ms / 1000.0 + 1.0
        for node, dq in list(self._inflight.items()):
            if dq and now - dq[0].sent_at > limit:
                self._drop_connection(node, RequestTimedOutError(
                    f"REQUEST_TIMED_OUT: no Produce response from broker {node} within request.timeout.ms"))
        # batches that cannot be sent (no leader) expire after delivery.timeout.ms
        for tp, q in self._queues.items():
            while q and now - q[0].created >= self._delivery_timeout_s:
                b = q.popleft()
                self._fail(b, RequestTimedOutError(f"REQUEST_TIMED_OUT: {tp[0]}-{tp[1]}: not delivered within "
                                                   f"delivery.timeout.ms after {b.attempts} attempts"))
