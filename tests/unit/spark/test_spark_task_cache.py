"""The per-worker cache of task clients (:class:`pyklog.connector.spark.task_cache.TaskClientCache`)
as the sink's producers use it (one idle per key) and with a ``usable`` check: no server."""

from __future__ import annotations

from pyklog.connector.spark.task_cache import TaskClientCache


class Client:
    def __init__(self):
        self.closed = False

    def close(self):
        self.closed = True


def test_one_idle_client_per_key_as_the_sink_producers():
    cache = TaskClientCache("producer", max_idle_per_key=1)
    a, b = cache.take("k", Client), cache.take("k", Client)
    assert cache.created == 2 and cache.reused == 0
    cache.give("k", a, ok=True)
    cache.give("k", b, ok=True)  # one idle already: closed
    assert b.closed and not a.closed
    assert cache.take("k", Client) is a and cache.reused == 1
    cache.give("k", a, ok=False)  # a failed task closes its client
    assert a.closed
    c = cache.take("k", Client)
    assert c is not a and cache.created == 3
    cache.give("k", c, ok=True)
    cache.clear()
    assert c.closed and cache.created == 0 and cache.reused == 0


def test_an_idle_client_that_is_not_usable_is_closed_and_replaced():
    verdict = {"ok": False}
    cache = TaskClientCache("consumer", max_idle_per_key=2, usable=lambda c: verdict["ok"])
    a = cache.take("k", Client)
    cache.give("k", a, ok=True)
    b = cache.take("k", Client)
    assert b is not a and a.closed and cache.created == 2 and cache.reused == 0
    verdict["ok"] = True
    cache.give("k", b, ok=True)
    assert cache.take("k", Client) is b and cache.reused == 1


def test_a_forked_child_starts_with_an_empty_cache(monkeypatch):
    import os

    cache = TaskClientCache("producer")
    a = cache.take("k", Client)
    cache.give("k", a, ok=True)
    parent = os.getpid()
    monkeypatch.setattr(os, "getpid", lambda: parent + 1)
    b = cache.take("k", Client)
    assert b is not a and not a.closed  # the parent's client is left alone, not closed from the child
