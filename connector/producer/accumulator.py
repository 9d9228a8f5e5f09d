"""The record accumulator: per-partition batches between ``send()`` and the sender thread.

Kafka's ``RecordAccumulator`` (``org.apache.kafka.clients.producer.internals``): each partition
has at most one open :class:`ProducerBatch`; records are appended to it as
``(key, value, timestamp, headers)`` tuples (encoded later, on the sender thread).  A batch closes
when it reaches ``batch.size`` bytes (it moves to the ready queue and the sender is woken), when it
has waited ``linger.ms``, or when a flush or close asks for everything.  ``buffer.memory`` bounds
the bytes held (each unfinished batch's ``size``: header and records) from append until the batch
is acknowledged or failed; a caller that would exceed it
waits up to ``max.block.ms``.

No I/O: the sender thread takes closed batches with :meth:`RecordAccumulator.drain` and gives
their memory back with :meth:`RecordAccumulator.deallocate`.

Thread-safety and locking: any number of user threads append, the sender thread drains.
``_lock`` guards ``_open``, ``_ready``, ``_buffered``, ``_unfinished``, ``_batch_ids`` and
``_flushing``; ``_done_cond`` (a Condition on ``_lock``) is notified each time a batch is
deallocated.  Nothing else is called while ``_lock`` is held except the construction of a batch
and, for a null-key record whose sticky batch is full, the partitioner (which takes its own lock:
lock order accumulator, then partitioner).  ``topic_info`` (topic -> (partitions, available)) is a
plain dict shared with the producer and the sender: whole entries are replaced, never mutated, so
it is read without the lock.
"""

from __future__ import annotations

import threading
import time

from pyklog.broker.errors import RequestTimedOutError
from pyklog.connector.producer.future import FutureRecordMetadata

__all__ = ["ProducerBatch", "RecordAccumulator", "RECORD_OVERHEAD", "BATCH_OVERHEAD"]

RECORD_OVERHEAD = 8  # rough per-record bytes beyond key + value (varints, attributes)
BATCH_OVERHEAD = 61  # the v2 record batch header


class ProducerBatch:
    """Records of one partition on their way to the broker (accumulator, then sender).

    Built and appended to under the accumulator's lock; once drained, owned by the sender thread."""

    __slots__ = (
        "topic",
        "partition",
        "records",
        "futures",
        "callbacks",
        "size",
        "created",
        "data",
        "base_sequence",
        "attempts",
        "retry_at",
        "producer_id",
        "producer_epoch",
        "cond",
        "bid",
    )

    def __init__(self, topic: str, partition: int, now: float):
        self.topic = topic
        self.partition = partition
        self.records: list = []
        self.futures: list = []  # FutureRecordMetadata of the records sent with send()
        self.callbacks: list = []  # (record index, callback)
        self.size = BATCH_OVERHEAD
        self.created = now
        self.data: bytes | None = None  # the encoded v2 record batch, once built
        self.base_sequence = -1
        self.attempts = 0
        self.retry_at = 0.0
        self.producer_id = -1
        self.producer_epoch = -1
        self.cond = None  # the Condition the batch's record futures share
        self.bid = 0  # creation order, for flush()

    def reset_numbering(self) -> None:
        """Forget the batch's encoding and numbering (the broker rejected it, so it was not
        appended): it is numbered again, under the next producer id, when it is sent."""
        self.data = None
        self.base_sequence = -1
        self.producer_id = -1
        self.producer_epoch = -1


class RecordAccumulator:
    """Per-partition batches (see the module docstring).  Thread-safe.

    ``waker``: the sender (``idle`` flag, ``wakeup()``), set by the producer once the sender exists."""

    def __init__(
        self, batch_size: int, linger_s: float, buffer_memory: int, max_block_s: float, partitioner, topic_info: dict
    ):
        self.batch_size = batch_size
        self.linger_s = linger_s
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_s
        self.partitioner = partitioner
        self.topic_info = topic_info
        self.waker = None
        self._lock = threading.Lock()
        self._open: dict[tuple, ProducerBatch] = {}
        self._ready: list = []
        self._buffered = 0
        self._unfinished: set = set()  # ids of batches created and not yet deallocated
        self._batch_ids = 0
        self._done_cond = threading.Condition(self._lock)
        self._flushing = 0

    # ------------------------------------------------------------------------------- append
    def _open_batch(self, tp: tuple[str, int]) -> ProducerBatch:
        """Start the open batch of partition ``tp``.  Caller holds ``self._lock``."""
        b = ProducerBatch(tp[0], tp[1], time.monotonic())
        self._batch_ids += 1
        b.bid = self._batch_ids
        self._open[tp] = b
        self._unfinished.add(b.bid)
        self._buffered += b.size  # the batch header: deallocate() gives back the whole b.size
        return b

    def append(
        self, topic: str, partition: int, rec: tuple, size: int, sticky: bool, want_future: bool, cb, urgent: bool
    ):
        """Append one validated record tuple to ``partition``'s open batch; return its
        FutureRecordMetadata if ``want_future``.  ``sticky``: the partitioner chose the partition
        for a null key, so when the open batch is full the record moves to the next sticky
        partition.  ``urgent``: close the batch at once (send_sync)."""
        if self._buffered + size > self.buffer_memory:
            self._wait_for_buffer(size)
        wake = False
        with self._lock:
            tp = (topic, partition)
            b = self._open.get(tp)
            if b is not None and b.size + size > self.batch_size and b.records:
                del self._open[tp]
                self._ready.append(b)
                wake = True
                if sticky:
                    n, avail = self.topic_info.get(topic, (0, None))
                    if n:
                        self.partitioner.on_new_batch(topic, n, partition, avail)
                        partition = self.partitioner.partition(topic, None, n, avail)
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
                fut = FutureRecordMetadata(cond, len(records), rec[2])
                b.futures.append(fut)
            if cb is not None:
                b.callbacks.append((len(records), cb))
            records.append(rec)
            b.size += size
            self._buffered += size
            if urgent or b.size >= self.batch_size:
                del self._open[tp]
                self._ready.append(b)
                wake = True
        if wake and self.waker.idle:
            self.waker.wakeup()
        return fut

    def append_many(self, topic: str, partition, recs: list, sizes: list, sticky: bool, info) -> None:
        """Append ``recs`` (validated record tuples) to ``partition``'s batches, one lock
        acquisition per batch filled.  ``sticky``: null-key records, ``partition`` is the
        partitioner's sticky choice (from ``info`` = (partitions, available)), which moves on each
        time a batch fills."""
        n = len(recs)
        pos = 0
        batch_size = self.batch_size
        partitioner = self.partitioner
        wake = False
        while pos < n:
            if sticky:
                partition = partitioner.partition(topic, None, info[0], info[1])
            if self._buffered + batch_size > self.buffer_memory:
                self._wait_for_buffer(min(batch_size, sum(sizes[pos : pos + 1024])))
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
                partitioner.on_new_batch(topic, info[0], partition, info[1])
            if wake and self.waker.idle:
                self.waker.wakeup()
                wake = False

    def append_section(self, topic: str, partition: int, section, size: int) -> None:
        """Queue one pre-built records section (:class:`broker.record.bulk.RecordsSection`, the
        Spark sink's bulk encoder) as a closed batch of its own for ``partition``.  A batch of
        that partition still open is closed first, so the partition's order (and, idempotent, its
        sequence numbers, given when the sender builds each batch) follows the order of the calls.
        ``size``: the batch's bytes, counted against buffer.memory until it is acknowledged."""
        if self._buffered + size > self.buffer_memory:
            self._wait_for_buffer(size)
        with self._lock:
            tp = (topic, partition)
            b = self._open.pop(tp, None)
            if b is not None:
                self._ready.append(b)
            b = ProducerBatch(topic, partition, time.monotonic())
            self._batch_ids += 1
            b.bid = self._batch_ids
            self._unfinished.add(b.bid)
            b.records = section
            b.size = size
            self._buffered += size
            self._ready.append(b)
        if self.waker.idle:
            self.waker.wakeup()

    def _wait_for_buffer(self, size: int) -> None:
        """Block until ``size`` more bytes fit in buffer.memory (RequestTimedOutError after
        max.block.ms).  Closes the open batches so the sender can free memory."""
        deadline = time.monotonic() + self.max_block_s
        with self._lock:
            while self._buffered + size > self.buffer_memory and self._buffered > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise RequestTimedOutError(
                        f"buffer.memory={self.buffer_memory} exhausted for max.block.ms="
                        f"{int(self.max_block_s * 1000)} ({self._buffered} bytes waiting)"
                    )
                if self._open:  # let the sender take what is buffered
                    self._ready.extend(self._open.values())
                    self._open.clear()
                self.waker.wakeup()
                self._done_cond.wait(min(left, 0.1))

    # ------------------------------------------------------------------------------- flush
    def flush(self, timeout: float | None, sender_alive) -> None:
        """Close every open batch and wait until each batch created so far is deallocated
        (acknowledged or failed); batches created meanwhile are not waited for.
        ``sender_alive()``: False if the sender thread died (RuntimeError)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        waker = self.waker
        with self._lock:
            self._flushing += 1
            try:
                target = self._batch_ids
                if self._open:
                    self._ready.extend(self._open.values())
                    self._open.clear()
                waker.wakeup()
                while self._unfinished and min(self._unfinished) <= target:
                    if not sender_alive():
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
                        waker.wakeup()
            finally:
                self._flushing -= 1

    # ------------------------------------------------------------------------------- sender side
    def has_ready(self) -> bool:
        """True if a batch is closed, or open while a flush waits (the sender must not sleep)."""
        with self._lock:
            return bool(self._ready or (self._flushing and self._open))

    def drain(self, now: float, close_all: bool) -> tuple[list, float]:
        """Take the closed batches and the open ones that waited linger.ms (all open ones while a
        flush waits or if ``close_all``).  Returns ``(batches, next_wake)``: when the next open
        batch's linger.ms expires (at most 0.5 s ahead).  Sender thread."""
        linger = self.linger_s
        next_wake = now + 0.5
        lingered = []
        with self._lock:
            taken = self._ready
            self._ready = []
            if self._open:
                flush = self._flushing or close_all
                for tp, b in list(self._open.items()):
                    if flush or now - b.created >= linger:
                        del self._open[tp]
                        taken.append(b)
                        lingered.append(tp)
                    elif b.created + linger < next_wake:
                        next_wake = b.created + linger
        for tp in lingered:  # the sticky partition moves on when its batch closes
            info = self.topic_info.get(tp[0])
            if info:
                self.partitioner.on_new_batch(tp[0], info[0], tp[1], info[1])
        return taken, next_wake

    def deallocate(self, b: ProducerBatch) -> None:
        """Batch ``b`` is acknowledged or failed: give its bytes back, wake flush() and waiters
        for buffer memory.  Sender thread."""
        b.records = None
        with self._lock:
            self._buffered -= b.size
            self._unfinished.discard(b.bid)
            self._done_cond.notify_all()

    def abort_undrained(self, bound=None) -> list:
        """Take every batch not yet drained (open or closed) whose id is <= ``bound`` (None: all),
        to be failed.  Sender or closing thread."""
        with self._lock:
            if bound is None:
                batches = list(self._open.values()) + self._ready
                self._open.clear()
                self._ready = []
            else:
                batches = [b for b in self._ready if b.bid <= bound]
                if batches:
                    self._ready = [b for b in self._ready if b.bid > bound]
                for tp, b in list(self._open.items()):
                    if b.bid <= bound:
                        batches.append(self._open.pop(tp))
        return batches

    def last_batch_id(self) -> int:
        """The id of the last batch created (batches created later have larger ids).  Any thread."""
        with self._lock:
            return self._batch_ids
