"""Purgatory (delayed fetches): completion by enough bytes, by expiry, at shutdown; exactly once.
Unit tests, no server; real short timeouts with generous bounds."""

import threading
import time

from pyklog.broker.server.purgatory import DelayedOperation, Purgatory


class Recorder:
    def __init__(self):
        self.done = []
        self.threads = []
        self.cond = threading.Condition()

    def __call__(self, op):
        with self.cond:
            self.done.append(op.payload)
            self.threads.append(threading.current_thread().name)
            self.cond.notify_all()

    def wait_for(self, n, timeout=5):
        with self.cond:
            return self.cond.wait_for(lambda: len(self.done) >= n, timeout)


def test_enough_bytes_completes_on_the_notifying_thread():
    rec = Recorder()
    p = Purgatory(rec, name="t1")
    try:
        p.watch(DelayedOperation([("t", 0), ("t", 1)], 10_000, 100, 10, "a"))
        p.notify(("t", 0), 50)
        assert rec.done == [] and len(p) == 1
        p.notify(("t", 1), 40)
        assert rec.done == ["a"] and rec.threads == [threading.current_thread().name] and len(p) == 0
        p.notify(("t", 0), 1000)  # already completed: not again
        assert rec.done == ["a"]
    finally:
        p.complete_all()
    assert rec.done == ["a"]


def test_expiry_completes_on_the_timer_thread_once():
    rec = Recorder()
    p = Purgatory(rec, name="t2")
    try:
        t0 = time.monotonic()
        p.watch(DelayedOperation([("t", 0)], 100, 1 << 20, 0, "late"))
        p.watch(DelayedOperation([("t", 0)], 30, 1 << 20, 0, "early"))
        assert rec.wait_for(2)
        assert rec.done == ["early", "late"] and time.monotonic() - t0 >= 0.1
        assert set(rec.threads) == {"pyklog-t2-purgatory"} and len(p) == 0
        p.notify(("t", 0), 1 << 21)
        time.sleep(0.05)
        assert rec.done == ["early", "late"]
    finally:
        p.complete_all()


def test_complete_all_completes_waiting_ops_once_and_later_watches_at_once():
    rec = Recorder()
    p = Purgatory(rec, name="t3")
    p.watch(DelayedOperation([("t", 0)], 60_000, 1 << 20, 0, "x"))
    p.watch(DelayedOperation([("t", 1)], 60_000, 1 << 20, 0, "y"))
    p.complete_all()
    assert sorted(rec.done) == ["x", "y"] and len(p) == 0
    assert "pyklog-t3-purgatory" not in [t.name for t in threading.enumerate()]
    p.watch(DelayedOperation([("t", 0)], 60_000, 1 << 20, 0, "z"))  # after shutdown: completes now
    assert sorted(rec.done) == ["x", "y", "z"]


def test_ready_predicate_checked_at_watch_and_by_check_exactly_once():
    """acks=all Produces (and fetches that must not miss an append racing their watch) carry a
    ``ready`` predicate: checked once when watched, then by check(key) of a watched key."""
    rec = Recorder()
    p = Purgatory(rec, name="t-ready")
    state = {"hw": 0}
    try:
        p.watch(DelayedOperation([("t", 0)], 10_000, 0, 0, "already", ready=lambda: True))
        assert rec.done == ["already"] and len(p) == 0  # ready at watch time: completed at once
        p.watch(DelayedOperation([("t", 0)], 10_000, 0, 0, "hw>=5", ready=lambda: state["hw"] >= 5))
        p.check(("t", 0))
        assert rec.done == ["already"] and len(p) == 1
        state["hw"] = 5
        p.check(("t", 1))  # another key: not looked at
        assert len(p) == 1
        threads = [threading.Thread(target=p.check, args=(("t", 0),)) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert rec.done == ["already", "hw>=5"] and len(p) == 0  # exactly once under concurrent checks
        # a predicate that raises completes the operation (its completer answers the error)
        p.watch(DelayedOperation([("t", 0)], 10_000, 0, 0, "boom", ready=lambda: 1 / 0))
        assert rec.done[-1] == "boom"
        # not ready before the deadline: the timer completes it
        p.watch(DelayedOperation([("t", 2)], 50, 0, 0, "expired", ready=lambda: False))
        assert rec.wait_for(4, timeout=5) and rec.done[-1] == "expired"
    finally:
        p.complete_all()
