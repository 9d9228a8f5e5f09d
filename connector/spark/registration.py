"""Registering the ``pyklog`` data source with a SparkSession, and checking that Spark's Python
workers can import pyklog.  Runs on the driver.

Spark runs a Python data source in worker processes started with ``SparkContext.pythonExec``
(``PYSPARK_PYTHON``, else ``python3`` from PATH).  When that interpreter cannot import pyklog the
query fails deep in a worker traceback; :func:`register` finds that out at once and either points
a local session at the driver's own interpreter or raises an error that says what to set.
"""

from __future__ import annotations

import functools
import logging
import os
import subprocess
import sys

from pyklog.errors import PyklogSetupError

log = logging.getLogger(__name__)

__all__ = ["register", "worker_python_problem"]


@functools.lru_cache(maxsize=8)
def worker_python_problem(python: str) -> str | None:
    """None when ``python`` can import pyklog, else what went wrong (one line).  Cached per path."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return None
    try:
        r = subprocess.run([python, "-c", "import pyklog"], check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return f"cannot run {python!r}: {e}"
    if r.returncode == 0:
        return None
    last = (r.stderr.strip().splitlines() or ["exit status %d" % r.returncode])[-1]
    return f"{python!r} cannot import pyklog ({last})"


def register(spark) -> None:
    """See :func:`pyklog.register`."""
    from pyklog.connector.spark.source import PyklogDataSource  # imports pyspark: at registration only

    sc = getattr(spark, "sparkContext", None)
    python = getattr(sc, "pythonExec", None) if sc is not None else None
    if python:
        problem = worker_python_problem(python)
        if problem is not None:
            master = sc.master or ""
            if master.startswith("local"):
                # Local mode: the workers run on this machine, so the driver's own interpreter (which
                # imports pyklog, or we would not be here) is the right one.
                log.warning(
                    "Spark's Python workers would run %s; using the driver's interpreter %s "
                    "instead (set PYSPARK_PYTHON to choose)",
                    problem,
                    sys.executable,
                )
                sc.pythonExec = sys.executable
            else:
                raise PyklogSetupError(
                    f"Spark's Python workers run {problem}. Install pyklog in the workers' Python, or "
                    f"set PYSPARK_PYTHON to a Python that has it (here: PYSPARK_PYTHON={sys.executable}) "
                    f"before the SparkSession is created, or pass --conf spark.pyspark.python=... to "
                    f"spark-submit."
                )
    spark.dataSource.register(PyklogDataSource)
