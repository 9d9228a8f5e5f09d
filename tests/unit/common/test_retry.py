"""Unit tests of pyklog.broker.common.retry (no server; a fake clock and sleep)."""

import math
import random

import pytest

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    InvalidConfigError,
    NetworkError,
    NotLeaderOrFollowerError,
    RequestTimedOutError,
)


class FakeClock:
    def __init__(self):
        self.now = 100.0
        self.sleeps = []

    def __call__(self):
        return self.now

    def sleep(self, s):
        self.sleeps.append(s)
        self.now += s


def test_deadline_after_remaining_expired():
    clock = FakeClock()
    d = Deadline.after(2.0, clock=clock)
    assert d.remaining() == 2.0 and not d.expired()
    clock.now += 1.5
    assert d.remaining() == pytest.approx(0.5) and d.elapsed() == pytest.approx(1.5)
    clock.now += 1.0
    assert d.remaining() == 0.0 and d.expired()


def test_deadline_never_and_negative():
    clock = FakeClock()
    n = Deadline.never(clock=clock)
    clock.now += 1e9
    assert n.remaining() == math.inf and not n.expired()
    assert Deadline.after(None, clock=clock).remaining() == math.inf
    assert Deadline.after(-5, clock=clock).expired()


def test_backoff_grows_caps_and_resets():
    b = Backoff(0.1, multiplier=2, max_s=1.0, jitter=0)
    assert [round(b.next(), 6) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    for _ in range(2000):  # no overflow after many attempts
        assert b.next() == 1.0
    b.reset()
    assert b.next() == 0.1


def test_backoff_jitter_bounds_and_cap():
    b = Backoff(1.0, multiplier=2, max_s=5.0, jitter=0.2, rng=random.Random(7))
    seen = [b.next() for _ in range(3)]
    for got, base in zip(seen, (1.0, 2.0, 4.0)):
        assert base * 0.8 <= got <= base * 1.2
    assert len(set(seen)) == 3
    assert all(b.next() <= 5.0 for _ in range(50))


def test_backoff_rejects_bad_parameters():
    with pytest.raises(ValueError):
        Backoff(1.0, max_s=0.5)
    with pytest.raises(ValueError):
        Backoff(1.0, jitter=1.0)
    with pytest.raises(ValueError):
        Backoff(1.0, multiplier=0.5)


def test_retry_succeeds_after_retriable_errors():
    clock = FakeClock()
    calls, seen = [], []

    def fn():
        calls.append(clock.now)
        if len(calls) < 3:
            raise NotLeaderOrFollowerError("moved")
        return "ok"

    got = retry(
        fn,
        deadline=Deadline.after(10, clock=clock),
        backoff=Backoff(0.1, max_s=1, jitter=0),
        sleep=clock.sleep,
        on_retry=lambda e, n, d: seen.append((type(e), n, round(d, 6))),
    )
    assert got == "ok" and len(calls) == 3
    assert clock.sleeps == pytest.approx([0.1, 0.2])
    assert seen == [(NotLeaderOrFollowerError, 1, 0.1), (NotLeaderOrFollowerError, 2, 0.2)]


def test_retry_reraises_non_retriable_at_once():
    clock = FakeClock()
    err = InvalidConfigError("bad")

    def fn():
        raise err

    with pytest.raises(InvalidConfigError) as e:
        retry(fn, deadline=Deadline.after(10, clock=clock), backoff=Backoff(0.1, jitter=0), sleep=clock.sleep)
    assert e.value is err and clock.sleeps == []


def test_retry_times_out_with_message_and_cause():
    clock = FakeClock()
    calls = []

    def fn():
        calls.append(1)
        raise NetworkError("connection refused")

    with pytest.raises(RequestTimedOutError) as e:
        retry(
            fn,
            deadline=Deadline.after(1.0, clock=clock),
            backoff=Backoff(0.3, multiplier=1, jitter=0),
            sleep=clock.sleep,
            what="metadata for topic t",
        )
    msg = str(e.value)
    assert "metadata for topic t" in msg and "4 attempts" in msg and "0.90s" in msg
    assert "connection refused" in msg and isinstance(e.value.__cause__, NetworkError)
    assert len(calls) == 4 and sum(clock.sleeps) <= 1.0  # never sleeps past the deadline


def test_retry_raise_last_and_custom_predicate():
    clock = FakeClock()

    def fn():
        raise KeyError("x")

    with pytest.raises(KeyError):
        retry(
            fn,
            deadline=Deadline.after(0.5, clock=clock),
            backoff=Backoff(0.2, multiplier=1, jitter=0),
            sleep=clock.sleep,
            retriable=lambda e: isinstance(e, KeyError),
            raise_last=True,
        )
    assert clock.sleeps == [0.2, 0.2]


def test_retry_calls_once_with_expired_deadline():
    clock = FakeClock()
    d = Deadline.after(0, clock=clock)
    assert retry(lambda: 5, deadline=d, backoff=Backoff(0.1), sleep=clock.sleep) == 5
    with pytest.raises(RequestTimedOutError, match="1 attempt in"):
        retry(lambda: (_ for _ in ()).throw(NetworkError("down")), deadline=d, backoff=Backoff(0.1), sleep=clock.sleep)


def test_retry_real_sleep_short():
    n = []

    def fn():
        n.append(1)
        if len(n) < 2:
            raise NetworkError("once")
        return len(n)

    assert retry(fn, deadline=Deadline.after(5), backoff=Backoff(0.01, jitter=0)) == 2
