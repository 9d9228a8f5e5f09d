"""SIGTERM in the source's planner process: close the planners before the process dies.

PySpark sends SIGTERM to the planner worker instead of calling ``stop()`` on ``query.stop()``: the
handler installed here (in a PySpark worker's main thread only) closes every planner registered
with :func:`install_sigterm` with ``close(fast=True)``, which commits the batches reported complete
(waiting briefly for the last one), then closes the ZooKeeper session, so the group rebalances at
once; then the process dies as SIGTERM would (or the previous handler runs).  A second SIGTERM
during the handler is ignored (it would kill the process before the session is closed).

Driver side (planner process).  Knows the planners only as objects with ``close(fast=...)``: it
never imports the planner module.  The list of planners is changed from the planner thread; the
handler runs on that same (main) thread.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Protocol

log = logging.getLogger(__name__)

__all__ = ["install_sigterm", "forget", "in_planner_worker"]


class Closable(Protocol):
    def close(self, *, fast: bool = False) -> None: ...


_SIGTERM_DRIVERS: list = []  # the open planners of this process, closed by the handler
_SIGTERM_INSTALLED = False


def in_planner_worker() -> bool:
    """Whether this process is a PySpark Python worker (where SIGTERM means "query stopped"),
    rather than a user's process that happens to call the reader (tests, notebooks)."""
    if os.environ.get("PYKLOG_SPARK_SIGTERM") == "1":
        return True
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", None) or getattr(main, "__file__", None) or ""
    return "pyspark" in name and ("worker" in name or "runner" in name or "daemon" in name)


def install_sigterm(driver: Closable) -> None:
    """PySpark stops a planner worker with SIGTERM (stop() is not called): close the driver state
    (ZooKeeper session first, so the group rebalances at once), then die as SIGTERM would."""
    global _SIGTERM_INSTALLED
    _SIGTERM_DRIVERS.append(driver)
    if _SIGTERM_INSTALLED:
        return
    if not in_planner_worker():
        log.debug("pyklog: not in a PySpark worker; no SIGTERM handler installed")
        return
    try:
        previous = signal.getsignal(signal.SIGTERM)

        def handler(signum, frame):
            # PySpark may send SIGTERM more than once; a second one arriving while this handler runs
            # would re-enter it and kill the process before the ZooKeeper session is closed
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            for d in list(_SIGTERM_DRIVERS):
                try:
                    d.close(fast=True)
                except Exception:  # noqa: BLE001
                    pass
            if callable(previous):
                previous(signum, frame)
                return
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        signal.signal(signal.SIGTERM, handler)
        _SIGTERM_INSTALLED = True
    except ValueError:  # not the main thread (e.g. a test calling the reader directly)
        log.debug("pyklog: cannot install a SIGTERM handler outside the main thread")


def forget(driver: Closable) -> None:
    """``driver`` is closed: the handler no longer closes it (from its ``close``)."""
    if driver in _SIGTERM_DRIVERS:
        _SIGTERM_DRIVERS.remove(driver)
