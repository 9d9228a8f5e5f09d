"""RecordAccumulator: batching by batch.size and linger.ms, buffer.memory, flush (pure, no server).

The sender is stood in for by a small waker that records wakeups: the accumulator does no I/O and
only needs the sender's ``idle`` flag and ``wakeup()``.
"""

from __future__ import annotations

import random
import threading
import time

import pytest

from pyklog.broker.errors import RequestTimedOutError
from pyklog.connector.partitioner import DefaultPartitioner
from pyklog.connector.producer.accumulator import BATCH_OVERHEAD, RecordAccumulator
from pyklog.connector.producer.future import FutureRecordMetadata


class _Waker:
    def __init__(self, idle=True):
        self.idle = idle
        self.wakeups = 0

    def wakeup(self):
        self.wakeups += 1


def _acc(batch_size=1000, linger_s=60.0, buffer_memory=1 << 20, max_block_s=1.0, idle=True):
    topic_info = {"t": (3, [0, 1, 2])}
    acc = RecordAccumulator(
        batch_size, linger_s, buffer_memory, max_block_s, DefaultPartitioner(random.Random(1)), topic_info
    )
    acc.waker = _Waker(idle)
    return acc


def _rec(n=100):
    return (None, b"v" * n, 1, ())


def test_batch_closes_at_batch_size_and_wakes_an_idle_sender():
    acc = _acc(batch_size=BATCH_OVERHEAD + 300)
    futs = [acc.append("t", 0, _rec(), 100, False, True, None, False) for _ in range(2)]
    assert all(isinstance(f, FutureRecordMetadata) for f in futs)
    assert acc.waker.wakeups == 0 and acc.drain(time.monotonic(), False)[0] == []  # still lingering
    acc.append("t", 0, _rec(), 100, False, False, None, False)  # reaches batch.size: closed
    assert acc.waker.wakeups == 1
    acc.append("t", 0, _rec(), 100, False, False, None, False)  # opens the next batch
    taken, _ = acc.drain(time.monotonic(), False)
    assert len(taken) == 1 and len(taken[0].records) == 3 and (taken[0].topic, taken[0].partition) == ("t", 0)
    assert [f._idx for f in futs] == [0, 1] and taken[0].futures == futs
    assert list(acc._open) == [("t", 0)]


def test_busy_sender_is_not_woken():
    acc = _acc(batch_size=BATCH_OVERHEAD + 100, idle=False)
    acc.append("t", 0, _rec(), 100, False, False, None, False)
    assert acc.waker.wakeups == 0 and len(acc._ready) == 1


def test_linger_and_close_all():
    acc = _acc(linger_s=0.05)
    acc.append("t", 1, _rec(), 100, False, False, None, False)
    now = time.monotonic()
    taken, next_wake = acc.drain(now, False)
    assert taken == [] and now < next_wake <= now + 0.05 + 1e-3
    taken, _ = acc.drain(now + 0.06, False)
    assert len(taken) == 1
    acc.append("t", 2, _rec(), 100, False, False, None, False)
    assert len(acc.drain(time.monotonic(), True)[0]) == 1  # closing: everything goes


def test_urgent_record_closes_its_batch():
    acc = _acc()
    acc.append("t", 0, _rec(), 100, False, True, None, True)
    assert len(acc._ready) == 1 and not acc._open and acc.waker.wakeups == 1


def test_append_many_fills_batches_in_order():
    acc = _acc(batch_size=BATCH_OVERHEAD + 250)
    recs = [(None, b"%d" % i, 1, ()) for i in range(10)]
    acc.append_many("t", 2, recs, [100] * 10, False, None)
    taken, _ = acc.drain(time.monotonic(), True)
    assert [len(b.records) for b in taken] == [2, 2, 2, 2, 2]
    assert [r for b in taken for r in b.records] == recs and {b.partition for b in taken} == {2}
    assert acc._buffered == 10 * 100 + 5 * BATCH_OVERHEAD


def test_sticky_append_many_moves_on_when_a_batch_fills():
    acc = _acc(batch_size=BATCH_OVERHEAD + 200)
    recs = [(None, b"x", 1, ()) for _ in range(6)]
    acc.append_many("t", None, recs, [100] * 6, True, (3, [0, 1, 2]))
    taken, _ = acc.drain(time.monotonic(), True)
    assert [len(b.records) for b in taken] == [2, 2, 2]
    parts = [b.partition for b in taken]
    assert parts[0] != parts[1] and parts[1] != parts[2]  # a new sticky partition per batch


def test_deallocate_releases_memory_and_flush_waits_for_it():
    acc = _acc()
    acc.append("t", 0, _rec(), 100, False, False, None, False)
    acc.append("t", 1, _rec(), 100, False, False, None, False)
    assert acc._buffered == 2 * (100 + BATCH_OVERHEAD) and len(acc._unfinished) == 2
    done = threading.Event()

    def sender():  # drains what flush closes and completes it a little later
        while not acc.has_ready():
            time.sleep(0.005)
        taken, _ = acc.drain(time.monotonic(), False)
        time.sleep(0.05)
        for b in taken:
            acc.deallocate(b)
        done.set()

    th = threading.Thread(target=sender)
    th.start()
    acc.flush(5, lambda: True)
    assert done.is_set() and acc._buffered == 0 and not acc._unfinished
    th.join()


def test_flush_times_out_and_reports_a_dead_sender():
    acc = _acc()
    acc.append("t", 0, _rec(), 100, False, False, None, False)
    with pytest.raises(RequestTimedOutError, match="1 batches still unacknowledged"):
        acc.flush(0.05, lambda: True)
    with pytest.raises(RuntimeError, match="sender thread died"):
        acc.flush(1, lambda: False)


def test_buffer_memory_blocks_for_max_block_ms():
    acc = _acc(buffer_memory=300, max_block_s=0.1)
    acc.append("t", 0, _rec(), 200, False, False, None, False)
    t0 = time.monotonic()
    with pytest.raises(RequestTimedOutError, match="buffer.memory=300 exhausted"):
        acc.append("t", 0, _rec(), 200, False, False, None, False)
    assert time.monotonic() - t0 >= 0.09
    assert len(acc._ready) == 1 and acc.waker.wakeups >= 1  # the open batch was handed over


def test_abort_undrained_takes_open_and_ready():
    acc = _acc(batch_size=BATCH_OVERHEAD + 100)
    acc.append("t", 0, _rec(), 100, False, False, None, False)  # closed
    acc.append("t", 1, _rec(50), 50, False, False, None, False)  # open
    assert len(acc.abort_undrained()) == 2
    assert not acc._open and not acc._ready


def test_append_section_closes_the_open_batch_first_and_keeps_order():
    """A pre-built records section (the Spark sink's bulk encoder) is a closed batch of its own,
    queued after the partition's open batch so the partition's order (and sequence numbers, given
    by the sender in drain order) follow the calls; its bytes count against buffer.memory until
    deallocated."""
    from pyklog.broker.record.bulk import RecordsSection

    acc = _acc()
    acc.append("t", 1, _rec(), 108, False, False, None, False)
    sec = RecordsSection(b"\x00" * 40, 3, 1)
    acc.append_section("t", 1, sec, sec.nbytes)
    acc.append("t", 1, _rec(), 108, False, False, None, False)  # a new open batch after the section
    drained, _ = acc.drain(time.monotonic(), close_all=True)
    assert [type(b.records) for b in drained] == [list, RecordsSection, list]
    assert [len(b.records) for b in drained] == [1, 3, 1]
    assert drained[0].bid < drained[1].bid < drained[2].bid
    assert acc._buffered == sum(b.size for b in drained)
    for b in drained:
        acc.deallocate(b)
    assert acc._buffered == 0 and not acc._unfinished
