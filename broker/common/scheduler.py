"""One daemon thread running delayed and periodic tasks (Kafka's ``KafkaScheduler``).

:meth:`Scheduler.schedule` runs ``fn(*args)`` once after a delay (:meth:`Scheduler.schedule_at`: at
a time on the scheduler's clock); :meth:`Scheduler.schedule_periodic`
runs it again and again, ``interval_s`` after the end of the previous run (fixed delay: a slow run
pushes the next one back instead of piling runs up).  Both return a :class:`ScheduledTask` whose
:meth:`~ScheduledTask.cancel` drops the runs that have not started.

All tasks run one after the other on the scheduler's single daemon thread, in the order of their
due time (ties: the order they were scheduled), so a long task delays the others: keep tasks short
or give a slow job its own scheduler.  A task that raises is logged at ERROR with its name and the
traceback; the thread goes on (a periodic task keeps its schedule).

:meth:`Scheduler.shutdown` stops the thread.  One-shot tasks that have not started are DROPPED,
never run (as Kafka's ``KafkaScheduler``, whose executor does not run delayed tasks after
shutdown); with ``wait=True`` it waits for the running task to end.  Scheduling after shutdown
raises ``RuntimeError``.

Thread-safe: every method may be called from any thread, including from a task.  ``clock`` is a
monotonic clock in seconds (``time.monotonic``; tests may pass a fake one and call
:meth:`Scheduler.wakeup` after moving it).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Scheduler", "ScheduledTask"]

log = logging.getLogger(__name__)


class ScheduledTask:
    """A handle on one scheduled task.  ``when`` is its next due time on the scheduler's clock.
    Thread-safe."""

    __slots__ = ("name", "fn", "args", "when", "interval_s", "cancelled", "_scheduler")

    def __init__(
        self,
        scheduler: Scheduler,
        name: str,
        fn: Callable[..., Any],
        args: tuple,
        when: float,
        interval_s: float | None,
    ):
        self._scheduler = scheduler
        self.name = name
        self.fn = fn
        self.args = args
        self.when = when
        self.interval_s = interval_s
        self.cancelled = False

    @property
    def periodic(self) -> bool:
        return self.interval_s is not None

    def cancel(self) -> None:
        """Drop the runs that have not started (a run in progress finishes).  Idempotent."""
        self.cancelled = True
        self._scheduler.wakeup()

    def __repr__(self) -> str:
        kind = f"every {self.interval_s}s" if self.periodic else "once"
        return f"ScheduledTask({self.name!r}, {kind}, cancelled={self.cancelled})"


def _task_name(name: str | None, fn: Callable[..., Any]) -> str:
    """The name given, else the function's."""
    return name if name else str(getattr(fn, "__name__", "task"))


class Scheduler:
    """Delayed and periodic tasks on one daemon thread (started at construction).  Thread-safe."""

    def __init__(self, name: str = "pyklog-scheduler", *, clock: Callable[[], float] = time.monotonic):
        self.name = name
        self._clock = clock
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, ScheduledTask]] = []
        self._seq = itertools.count()
        self._running = True
        self._current: ScheduledTask | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ scheduling
    def schedule(self, delay_s: float, fn: Callable[..., Any], *args: Any, name: str | None = None) -> ScheduledTask:
        """Run ``fn(*args)`` once, ``delay_s`` seconds from now (<= 0: as soon as possible)."""
        return self._add(_task_name(name, fn), fn, args, max(0.0, float(delay_s)), None)

    def schedule_at(self, when: float, fn: Callable[..., Any], *args: Any, name: str | None = None) -> ScheduledTask:
        """Run ``fn(*args)`` once at ``when`` on the scheduler's clock (in the past: as soon as
        possible); the handle's ``when`` is exactly ``when``."""
        return self._add(_task_name(name, fn), fn, args, None, None, when=float(when))

    def schedule_periodic(
        self, name: str, interval_s: float, fn: Callable[..., Any], *args: Any, initial_delay_s: float | None = None
    ) -> ScheduledTask:
        """Run ``fn(*args)`` every ``interval_s`` seconds (after the end of each run); the first run
        after ``initial_delay_s`` (default: ``interval_s``)."""
        if not interval_s > 0:
            raise ValueError(f"periodic task {name!r}: interval_s must be > 0, read {interval_s}")
        first = interval_s if initial_delay_s is None else max(0.0, float(initial_delay_s))
        return self._add(name, fn, args, first, float(interval_s))

    def _add(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        delay_s: float | None,
        interval_s: float | None,
        when: float | None = None,
    ) -> ScheduledTask:
        with self._cond:
            if not self._running:
                raise RuntimeError(f"scheduler {self.name} is shut down: cannot schedule {name!r}")
            if when is None:
                assert delay_s is not None, "a delay or a time"
                when = self._clock() + delay_s
            task = ScheduledTask(self, name, fn, args, when, interval_s)
            heapq.heappush(self._heap, (task.when, next(self._seq), task))
            if self._heap[0][2] is task:
                self._cond.notify()
            return task

    def wakeup(self) -> None:
        """Make the thread look at the heap again (after a cancel, or after moving a fake clock)."""
        with self._cond:
            self._cond.notify()

    # ------------------------------------------------------------------ state
    def current_task(self) -> ScheduledTask | None:
        """The task running now on the scheduler thread (None between tasks).  A task may call it
        to learn its own handle."""
        return self._current

    def pending(self) -> int:
        """The number of tasks waiting (not cancelled)."""
        with self._cond:
            return sum(1 for _, _, t in self._heap if not t.cancelled)

    @property
    def running(self) -> bool:
        return self._running

    def shutdown(self, wait: bool = True, timeout_s: float | None = 60.0) -> None:
        """Stop: pending one-shot and periodic tasks are dropped (never run).  With ``wait``, join
        the thread (a task in progress finishes; up to ``timeout_s``).  Idempotent; may be called
        from a task (it does not join itself then)."""
        with self._cond:
            self._running = False
            for _, _, t in self._heap:
                t.cancelled = True
            self._heap.clear()
            self._cond.notify()
        if wait and threading.current_thread() is not self._thread:
            self._thread.join(timeout_s)

    # ------------------------------------------------------------------ the thread
    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    if not self._running:
                        return
                    while self._heap and self._heap[0][2].cancelled:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    wait = self._heap[0][0] - self._clock()
                    if wait > 0:
                        # bounded so a fake clock moved without wakeup() is noticed soon enough
                        self._cond.wait(min(wait, 1.0))
                        continue
                    _, _, task = heapq.heappop(self._heap)
                    self._current = task
                    break
            try:
                task.fn(*task.args)
            except Exception:  # noqa: BLE001 - one failing task never stops the others
                log.exception("scheduled task %r failed", task.name)
            finally:
                self._current = None
            if task.interval_s is not None:  # periodic
                with self._cond:
                    if self._running and not task.cancelled:
                        task.when = self._clock() + task.interval_s
                        heapq.heappush(self._heap, (task.when, next(self._seq), task))
