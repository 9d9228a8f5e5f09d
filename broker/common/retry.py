"""Deadlines, exponential backoff and a retry loop (Kafka's ``Timer`` and ``ExponentialBackoff``).

:class:`Deadline` is a point on a monotonic clock (``time.monotonic`` unless another clock is
given, e.g. a test's fake clock).  :class:`Backoff` is Kafka's ``ExponentialBackoff``
(``retry.backoff.ms`` / ``retry.backoff.max.ms``, KIP-580): ``initial * multiplier ** n`` for the
n-th retry, times a random factor in ``[1 - jitter, 1 + jitter]``, never above ``max``.
:func:`retry` calls a function until it succeeds, raises an error that is not retriable, or the
deadline passes.

Thread-safety: a :class:`Deadline` is immutable and may be shared; a :class:`Backoff` counts
attempts and belongs to one loop (one thread) at a time; :func:`retry` runs in the caller's thread
and keeps no state between calls.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import TypeVar

from pyklog.broker.errors import PyklogError, RequestTimedOutError

__all__ = ["Deadline", "Backoff", "retry", "is_retriable"]

T = TypeVar("T")
Clock = Callable[[], float]


class Deadline:
    """A moment ``expires_at`` on the monotonic ``clock`` (seconds).  Immutable; thread-safe."""

    __slots__ = ("expires_at", "clock", "started_at")

    def __init__(self, expires_at: float, *, clock: Clock = time.monotonic):
        self.clock = clock
        self.started_at = clock()
        self.expires_at = float(expires_at)

    @classmethod
    def after(cls, seconds: float | None, *, clock: Clock = time.monotonic) -> Deadline:
        """The deadline ``seconds`` from now (``None`` or ``math.inf``: never)."""
        if seconds is None or seconds == math.inf:
            return cls.never(clock=clock)
        if seconds != seconds:  # NaN
            raise ValueError("a deadline needs a number of seconds, read NaN")
        return cls(clock() + max(0.0, float(seconds)), clock=clock)

    @classmethod
    def never(cls, *, clock: Clock = time.monotonic) -> Deadline:
        """A deadline that never expires (``remaining()`` is ``math.inf``)."""
        return cls(math.inf, clock=clock)

    def remaining(self) -> float:
        """Seconds left, never negative (``math.inf`` for :meth:`never`)."""
        return max(0.0, self.expires_at - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.expires_at

    def elapsed(self) -> float:
        """Seconds since this deadline was made."""
        return self.clock() - self.started_at

    def __repr__(self) -> str:
        return f"Deadline(remaining={self.remaining():.3f}s)"


class Backoff:
    """Exponential backoff with jitter and a cap (Kafka's ``ExponentialBackoff``, KIP-580).

    :meth:`next` returns the delay in seconds before the next attempt and counts the attempt:
    ``min(max_s, initial_s * multiplier ** attempts * U(1 - jitter, 1 + jitter))``.
    :meth:`reset` starts again from ``initial_s`` (after a success).  Not thread-safe: one
    instance per retry loop.  ``rng`` may be a seeded ``random.Random`` for tests.
    """

    def __init__(
        self,
        initial_s: float,
        *,
        multiplier: float = 2.0,
        max_s: float | None = None,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ):
        if initial_s < 0:
            raise ValueError(f"backoff initial_s must be >= 0, read {initial_s}")
        if multiplier < 1:
            raise ValueError(f"backoff multiplier must be >= 1, read {multiplier}")
        if not 0 <= jitter < 1:
            raise ValueError(f"backoff jitter must be in [0, 1), read {jitter}")
        max_s = initial_s if max_s is None else max_s
        if max_s < initial_s:
            raise ValueError(f"backoff max_s must be >= initial_s, read {max_s} < {initial_s}")
        self.initial_s = float(initial_s)
        self.multiplier = float(multiplier)
        self.max_s = float(max_s)
        self.jitter = float(jitter)
        self.attempts = 0
        self._rng = rng or random.Random()
        # the exponent past which the cap always wins (avoids float overflow after many retries)
        if self.initial_s > 0 and self.multiplier > 1 and self.max_s > self.initial_s:
            self._exp_max = math.ceil(math.log(self.max_s / self.initial_s) / math.log(self.multiplier)) + 1
        else:
            self._exp_max = 0

    @classmethod
    def constant(cls, seconds: float) -> Backoff:
        """The same delay every time (Kafka's ``retry.backoff.ms`` without a max)."""
        return cls(seconds, multiplier=1.0, max_s=seconds, jitter=0.0)

    def next(self) -> float:
        """The delay (seconds) before the next attempt; counts one attempt."""
        term = self.initial_s * self.multiplier ** min(self.attempts, self._exp_max)
        self.attempts += 1
        if self.jitter:
            term *= self._rng.uniform(1.0 - self.jitter, 1.0 + self.jitter)
        return min(term, self.max_s)

    def reset(self) -> None:
        self.attempts = 0

    def __repr__(self) -> str:
        return (
            f"Backoff(initial_s={self.initial_s}, multiplier={self.multiplier}, max_s={self.max_s}, "
            f"jitter={self.jitter}, attempts={self.attempts})"
        )


def is_retriable(error: BaseException) -> bool:
    """The default predicate: a :class:`PyklogError` whose ``retriable`` flag is set."""
    return isinstance(error, PyklogError) and bool(error.retriable)


def retry(
    fn: Callable[[], T],
    *,
    deadline: Deadline,
    backoff: Backoff,
    retriable: Callable[[BaseException], bool] = is_retriable,
    what: str = "operation",
    on_retry: Callable[[BaseException, int, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    raise_last: bool = False,
) -> T:
    """Call ``fn()`` until it returns, then return its value.

    * An exception for which ``retriable(e)`` is false is re-raised as is, at once.
    * After a retriable one, ``on_retry(error, attempt, delay_s)`` is called (if given), then
      ``sleep(delay_s)`` with ``delay_s = backoff.next()``, and ``fn`` is called again.
    * The loop never sleeps past ``deadline``: when the next delay would end after it, the loop
      gives up and raises :class:`RequestTimedOutError` ("<what> timed out after N attempts in
      X.XXs: <last error>", chained ``from`` the last error), or the last error itself when
      ``raise_last`` is true.
    ``fn`` is always called at least once, even with an expired deadline.  ``backoff`` is reset
    first.  Only ``Exception`` is caught (KeyboardInterrupt and the like pass through).
    Runs in the caller's thread.
    """
    backoff.reset()
    attempts = 0
    while True:
        attempts += 1
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - the predicate decides
            if not retriable(e):
                raise
            last = e
        delay = backoff.next()
        if delay >= deadline.remaining() or deadline.expired():
            if raise_last:
                raise last
            raise RequestTimedOutError(
                f"{what} timed out after {attempts} attempt{'s' if attempts != 1 else ''} in "
                f"{deadline.elapsed():.2f}s: {type(last).__name__}: {last}"
            ) from last
        if on_retry is not None:
            on_retry(last, attempts, delay)
        sleep(delay)
