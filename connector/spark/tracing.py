"""Wall-time trace of the source's planner calls and read tasks, for bench/bench_latency.py.

When the environment variable ``PYKLOG_PLANNER_TRACE`` names a file, each traced call appends one
JSON line ``{"call", "ms", "t", "pid"}`` to it (Spark's Python workers inherit the driver's
environment); otherwise nothing is recorded.  Runs wherever it is called (planner or task); appends
of one short line from several processes do not interleave.
"""

from __future__ import annotations

import functools
import os
import time

__all__ = ["trace", "traced"]


def trace(name: str, ms: float) -> None:
    """Record one planner call or read task's wall time (see :func:`traced`)."""
    path = os.environ.get("PYKLOG_PLANNER_TRACE")
    if not path:
        return
    try:
        with open(path, "a", encoding="utf-8") as f:
            f.write(f'{{"call": "{name}", "ms": {ms:.3f}, "t": {time.time():.3f}, "pid": {os.getpid()}}}\n')
    except OSError:
        pass


def traced(fn):
    """Planner calls record their wall time (JSON lines ``{"call", "ms", "t"}``) in the file named by
    the environment variable ``PYKLOG_PLANNER_TRACE`` when it is set (bench/bench_latency.py; Spark's
    Python workers inherit the driver's environment).  Otherwise ``fn`` unchanged.  Planner thread."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        path = os.environ.get("PYKLOG_PLANNER_TRACE")
        if not path:
            return fn(*args, **kwargs)
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            trace(name, (time.perf_counter() - t0) * 1000)

    return wrapper
