"""Unit tests of pyklog.broker.common.scheduler (real thread, short real timings, generous bounds)."""

import itertools
import logging
import threading
import time

import pytest

from pyklog.broker.common.scheduler import Scheduler


@pytest.fixture
def sched():
    s = Scheduler("test-scheduler")
    yield s
    s.shutdown()


def test_one_shot_runs_in_due_order_on_one_thread(sched):
    out, threads, done = [], set(), threading.Event()

    def rec(tag):
        out.append(tag)
        threads.add(threading.current_thread().name)
        if len(out) == 3:
            done.set()

    sched.schedule(0.15, rec, "c")
    sched.schedule(0.05, rec, "a")
    sched.schedule(0.10, rec, "b")
    assert done.wait(5)
    assert out == ["a", "b", "c"] and threads == {"test-scheduler"}


def test_delay_is_respected(sched):
    ran = threading.Event()
    t0 = time.monotonic()
    sched.schedule(0.2, ran.set)
    assert not ran.wait(0.1)
    assert ran.wait(5) and time.monotonic() - t0 >= 0.2


def test_cancel_prevents_run(sched):
    ran, later = threading.Event(), threading.Event()
    h = sched.schedule(0.1, ran.set, name="cancelled")
    h.cancel()
    sched.schedule(0.2, later.set)
    assert later.wait(5) and not ran.is_set() and h.cancelled


def test_periodic_runs_repeatedly_until_cancelled(sched):
    runs = []
    h = sched.schedule_periodic("tick", 0.03, lambda: runs.append(time.monotonic()), initial_delay_s=0)
    deadline = time.monotonic() + 5
    while len(runs) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(runs) >= 4
    assert all(b - a >= 0.03 * 0.9 for a, b in itertools.pairwise(runs))
    h.cancel()
    time.sleep(0.1)
    n = len(runs)
    time.sleep(0.15)
    assert len(runs) == n


def test_failing_task_is_logged_and_thread_survives(sched, caplog):
    ok = threading.Event()
    periodic_runs = []

    def boom():
        raise RuntimeError("kaput")

    def flaky():
        periodic_runs.append(1)
        raise ValueError("again")

    with caplog.at_level(logging.ERROR, logger="pyklog.broker.common.scheduler"):
        sched.schedule(0, boom, name="exploding-task")
        sched.schedule_periodic("flaky-periodic", 0.02, flaky, initial_delay_s=0)
        sched.schedule(0.1, ok.set)
        assert ok.wait(5)
        deadline = time.monotonic() + 5
        while len(periodic_runs) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert len(periodic_runs) >= 2  # the periodic task kept its schedule
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert any("exploding-task" in m for m in msgs) and any("flaky-periodic" in m for m in msgs)


def test_shutdown_drops_pending_and_waits_for_running():
    s = Scheduler("test-shutdown")
    started, finished, dropped = threading.Event(), threading.Event(), threading.Event()

    def slow():
        started.set()
        time.sleep(0.2)
        finished.set()

    s.schedule(0, slow)
    s.schedule(0.05, dropped.set)
    assert started.wait(5)
    s.shutdown(wait=True)
    assert finished.is_set()  # wait=True joined the running task
    time.sleep(0.1)
    assert not dropped.is_set() and s.pending() == 0
    with pytest.raises(RuntimeError, match="shut down"):
        s.schedule(0, print)
    s.shutdown()  # idempotent


def test_schedule_from_a_task_and_current_task(sched):
    got = []
    done = threading.Event()

    def second():
        got.append(sched.current_task().name)
        done.set()

    def first():
        got.append(sched.current_task().name)
        sched.schedule(0, second, name="second")

    sched.schedule(0, first, name="first")
    assert done.wait(5) and got == ["first", "second"]
    assert sched.current_task() is None


def test_fake_clock():
    now = [0.0]
    s = Scheduler("test-fake-clock", clock=lambda: now[0])
    try:
        ran = threading.Event()
        s.schedule(10, ran.set)
        assert not ran.wait(0.1)
        now[0] = 10.0
        s.wakeup()
        assert ran.wait(5)
    finally:
        s.shutdown()


def test_periodic_rejects_non_positive_interval(sched):
    with pytest.raises(ValueError):
        sched.schedule_periodic("bad", 0, print)


def test_schedule_at_with_fake_clock_keeps_exact_when():
    now = [50.0]
    s = Scheduler("test-schedule-at", clock=lambda: now[0])
    try:
        out = []
        done = threading.Event()
        late = s.schedule_at(60.0, lambda: (out.append("late"), done.set()))
        s.schedule_at(55.0, out.append, "early")
        s.schedule_at(10.0, out.append, "past")  # in the past: runs at once
        assert late.when == 60.0
        time.sleep(0.1)
        assert out == ["past"]
        now[0] = 61.0
        s.wakeup()
        assert done.wait(5) and out == ["past", "early", "late"]
    finally:
        s.shutdown()
