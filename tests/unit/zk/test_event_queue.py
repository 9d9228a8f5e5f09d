"""ZkEventQueue: one thread whatever the number of submits, coalescing by key, order kept, a key
submitted while its work runs runs again, a failure does not end the thread."""

from __future__ import annotations

import threading

from pyklog.broker.zk.event_queue import ZkEventQueue


def test_a_burst_runs_on_one_thread_coalesced_in_order_and_a_key_submitted_while_running_runs_again():
    q = ZkEventQueue("test-zk-events")
    gate, started = threading.Event(), threading.Event()
    ran: list = []
    threads: set = set()

    def work(key):
        threads.add(threading.current_thread().name)
        ran.append(key)
        if key == "first":
            started.set()
            gate.wait(5)

    before = threading.active_count()
    q.submit("first", work, "first")
    assert started.wait(5)
    # while "first" runs: a burst of 1,000 submits over 10 keys, and "first" again
    for i in range(1000):
        q.submit(i % 10, work, i % 10)
    q.submit("first", work, "first")
    assert threading.active_count() <= before + 1  # one thread for the queue, whatever was submitted
    assert q.pending() == 11
    gate.set()
    assert q.wait_idle(5)
    assert ran == ["first", *range(10), "first"]  # each key once, in first-submit order
    assert threads == {"test-zk-events"}

    def boom():
        raise RuntimeError("one failed follow-up")

    q.submit("boom", boom)
    q.submit("after", work, "after")
    assert q.wait_idle(5) and ran[-1] == "after"
    q.stop()
    assert not q.submit("late", work, "late") and q.stopped
