"""The broker's fetch session cache (KIP-227): full and incremental contexts, what an incremental
fetch reads and answers, the session errors, eviction as Kafka's FetchSessionCache."""

from __future__ import annotations

import pytest

from pyklog.broker.server.fetch import FetchPartitionData
from pyklog.broker.server.fetch_session import (
    FETCH_SESSION_ID_NOT_FOUND,
    INVALID_FETCH_SESSION_EPOCH,
    FetchSessionCache,
    SessionError,
    next_epoch,
)
from pyklog.broker.server.purgatory import DelayedOperation, Purgatory


class _Slice:
    def __init__(self, size):
        self.size = size


def _data(hw, records=0, leo=None, error=None):
    d = FetchPartitionData(False)
    d.high_watermark = hw
    d.last_stable_offset = hw
    d.log_start_offset = 0
    d.log_end_offset = hw if leo is None else leo
    d.records = _Slice(records) if records else None
    d.error = error
    return d


def _results(**by_partition):
    return [("t", [(int(p[1:]), d) for p, d in by_partition.items()])]


def _keys(plan):
    return sorted((t, p[0]) for t, ps in plan for p in ps)


def _open(cache, n=3, privileged=False, now=0, offset=5):
    requested = {("t", p): (offset, 1024, 0, 0) for p in range(n)}
    ctx = cache.new_context(0, 0, requested, [], privileged, 1 if privileged else -1, now)
    assert ctx.kind == "full" and _keys(ctx.plan()) == [("t", p) for p in range(n)]
    sid, out = ctx.finish([("t", [(p, _data(5, leo=5)) for p in range(n)])], False, now)
    assert sid != 0 and len(out[0][1]) == n  # a full fetch answers every partition
    return sid


def test_epochs_wrap_as_kafka():
    assert next_epoch(0) == 1 and next_epoch(41) == 42 and next_epoch(0x7FFFFFFF) == 1 and next_epoch(-1) == -1


def test_incremental_fetch_reads_and_answers_only_what_changed():
    cache = FetchSessionCache(10)
    sid = _open(cache)
    # first incremental: every partition is read once (changes between the full read and the
    # session's creation were told to no session), then those with nothing new go quiet
    ctx = cache.new_context(sid, 1, {}, [], False, -1, 10)
    assert _keys(ctx.plan()) == [("t", 0), ("t", 1), ("t", 2)]
    assert ctx.finish(_results(p0=_data(5), p1=_data(5), p2=_data(5)), False, 10) == (sid, [])
    # idle: nothing read, nothing answered
    ctx = cache.new_context(sid, 2, {}, [], False, -1, 20)
    assert ctx.plan() == []
    assert ctx.finish([], False, 20) == (sid, [])
    # an append to partition 1 marks it: only it is read, and answered (records, new high watermark)
    assert [s.id for s in cache.mark_changed(("t", 1))] == [sid]
    assert cache.mark_changed(("t", 9)) == []
    ctx = cache.new_context(sid, 3, {}, [], False, -1, 30)
    assert _keys(ctx.plan()) == [("t", 1)]
    _, out = ctx.finish(_results(p1=_data(8, records=100)), False, 30)
    assert [(t, [p for p, _ in ps]) for t, ps in out] == [("t", [1])]
    # partition 1 returned records: read again next time (the client moved its offset) until quiet
    ctx = cache.new_context(sid, 4, {("t", 1): (8, 1024, 0, 0)}, [("t", 2)], False, -1, 40)
    assert _keys(ctx.plan()) == [("t", 1)]
    assert ctx.finish(_results(p1=_data(8)), False, 40) == (sid, [])
    assert sorted(cache.get(sid).partitions) == [("t", 0), ("t", 1)]  # partition 2 forgotten
    assert cache.mark_changed(("t", 2)) == []
    # an error is always answered and the partition keeps being read
    ctx = cache.new_context(sid, 5, {}, [], False, -1, 50)
    cache.mark_changed(("t", 0))
    _, out = ctx.finish(_results(p0=_data(-1, error=RuntimeError("x"))), False, 50)
    assert len(out[0][1]) == 1
    assert ("t", 0) in cache.get(sid).active


def test_follower_partition_is_quiet_only_at_the_log_end_offset():
    cache = FetchSessionCache(10)
    sid = _open(cache, n=1, privileged=True)
    ctx = cache.new_context(sid, 1, {}, [], True, 1, 10)
    # the follower is at 5, the leader's log ends at 7 but the read returned nothing (a quota):
    # it stays active even though nothing is answered
    ctx.plan()
    ctx.finish(_results(p0=_data(5, leo=7)), False, 10)
    assert ("t", 0) in cache.get(sid).active
    ctx = cache.new_context(sid, 2, {}, [], True, 1, 20)
    ctx.plan()
    ctx.finish(_results(p0=_data(5, leo=5)), False, 20)
    assert ("t", 0) not in cache.get(sid).active
    assert cache.get(sid).follows(("t", 0)) and cache.get(sid).last_used_ms == 20


def test_session_errors_and_closing():
    cache = FetchSessionCache(10)
    sid = _open(cache)
    with pytest.raises(SessionError) as e:
        cache.new_context(sid + 1, 1, {}, [], False, -1, 0)
    assert e.value.code == FETCH_SESSION_ID_NOT_FOUND
    with pytest.raises(SessionError) as e:
        cache.new_context(sid, 2, {}, [], False, -1, 0)  # the next epoch is 1
    assert e.value.code == INVALID_FETCH_SESSION_EPOCH
    cache.new_context(sid, 1, {}, [], False, -1, 0)
    with pytest.raises(SessionError):
        cache.new_context(sid, 1, {}, [], False, -1, 0)  # an epoch is used once
    # epoch -1 with the id closes it: a sessionless fetch, answered with session id 0
    ctx = cache.new_context(sid, -1, {("t", 0): (0, 1, 0, 0)}, [], False, -1, 0)
    assert ctx.kind == "sessionless" and cache.get(sid) is None
    assert ctx.finish(_results(p0=_data(5)), False, 0)[0] == 0
    with pytest.raises(SessionError) as e:
        cache.new_context(sid, 2, {}, [], False, -1, 0)
    assert e.value.code == FETCH_SESSION_ID_NOT_FOUND
    # no slots: a full fetch stays sessionless
    none = FetchSessionCache(0)
    ctx = none.new_context(0, 0, {("t", 0): (0, 1, 0, 0)}, [], False, -1, 0)
    assert ctx.finish(_results(p0=_data(5)), False, 0)[0] == 0 and len(none) == 0


def test_eviction_as_kafka():
    cache = FetchSessionCache(2, eviction_ms=1000)
    small = _open(cache, n=1, now=0)
    big = _open(cache, n=3, now=0)
    # full and nothing stale or old enough: a consumer's new session gets no slot
    ctx = cache.new_context(0, 0, {("t", 0): (0, 1, 0, 0)}, [], False, -1, 500)
    assert ctx.finish(_results(p0=_data(5)), False, 500)[0] == 0
    # a follower's session evicts a consumer's at once (privileged), the smallest first
    follower = _open(cache, n=2, privileged=True, now=600)
    assert cache.get(small) is None and cache.get(big) is not None and cache.evictions == 1
    # once unused for the eviction time a session is stale and goes first, whatever its worth
    cache.new_context(follower, 1, {}, [], True, 1, 1500)  # the follower keeps its session in use
    _open(cache, n=1, now=1700)
    assert cache.get(big) is None and cache.get(follower) is not None


def test_delayed_fetch_of_a_session_wakes_on_its_key():
    cache = FetchSessionCache(10)
    sid = _open(cache)
    s = cache.get(sid)
    done = []
    purgatory = Purgatory(None, name="test-fetch-session")
    try:
        op = DelayedOperation([s.watch_key], 60_000, 1, 0, None, ready=s.has_changes, on_complete=done.append)
        purgatory.watch(op)
        assert done == [] and len(purgatory) == 1
        for session in cache.mark_changed(("t", 2)):
            purgatory.notify(session.watch_key, 10)
        assert done == [op]
        # a mark landing between the read and the watch completes it at once
        cache.mark_changed(("t", 0))
        op2 = DelayedOperation([s.watch_key], 60_000, 1, 0, None, ready=s.has_changes, on_complete=done.append)
        purgatory.watch(op2)
        assert done == [op, op2]
    finally:
        purgatory.complete_all()


def test_a_check_asks_only_about_the_key_that_changed():
    """An acks=all Produce to N partitions: each high watermark move re-checks one partition, so the
    N moves that complete it cost N checks, not N squared."""
    asked = []
    pending = set(range(500))

    def ready_key(key):
        asked.append(key)
        pending.discard(key)
        return not pending

    done = []
    purgatory = Purgatory(None, name="test-ready-key")
    try:
        op = DelayedOperation(
            list(range(500)),
            60_000,
            0,
            0,
            None,
            ready=lambda: not pending,
            ready_key=ready_key,
            on_complete=done.append,
        )
        purgatory.watch(op)
        for k in range(500):
            purgatory.check(k)
        assert done == [op] and len(asked) == 500 and asked == list(range(500))
    finally:
        purgatory.complete_all()


def test_every_partition_is_read_again_at_the_full_read_interval():
    """The safety net for changes nobody is told of (a log start offset moved by retention)."""
    cache = FetchSessionCache(10, full_read_interval_s=3600)
    sid = _open(cache)
    ctx = cache.new_context(sid, 1, {}, [], False, -1, 10)
    ctx.plan()
    ctx.finish(_results(p0=_data(5), p1=_data(5), p2=_data(5)), False, 10)
    assert cache.new_context(sid, 2, {}, [], False, -1, 20).plan() == []
    cache.full_read_interval_s = 0
    ctx = cache.new_context(sid, 3, {}, [], False, -1, 30)
    assert _keys(ctx.plan()) == [("t", 0), ("t", 1), ("t", 2)]
    moved = _data(5)
    moved.log_start_offset = 3
    _, out = ctx.finish(_results(p0=_data(5), p1=moved, p2=_data(5)), False, 30)
    assert [(t, [p for p, _ in ps]) for t, ps in out] == [("t", [1])]
