"""pyklog: Kafka's design rebuilt in Python around Spark.

* :mod:`pyklog.broker`     the broker: record formats, log storage, the Kafka wire protocol, the
  socket server, ZooKeeper registration, the offset manager and the group coordinator.
* :mod:`pyklog.connector`  the client side: producer, consumers, ZooKeeper consumer groups, offset
  storage, and the PySpark data source ``format("pyklog")``.

``import pyklog`` is light: it imports neither pyspark nor the broker.  In an installed pyklog,
Spark finds the ``pyklog`` data source by itself (PySpark looks up installed modules named
``pyspark_*``; pyklog ships ``pyspark_pyklog``); :func:`register` does the same explicitly for one
SparkSession, and checks that Spark's Python workers can import pyklog.
"""

from __future__ import annotations

import os
import sys

from pyklog.errors import PyklogSetupError

__version__ = "0.2.0"
__all__ = ["__version__", "register", "PyklogSetupError"]

# Spark's Python workers (data source planning, reads, writes) are started with PYSPARK_PYTHON, or
# "python3" from PATH when it is unset: outside an activated virtualenv that is a Python without
# pyklog, and every query fails in a worker with "No module named 'pyklog'".  A JVM started after
# this import inherits the variable, so naming the interpreter that imported pyklog here makes the
# common case (`.venv/bin/python app.py`) work.  An explicit setting is never overridden, and under
# spark-submit or the pyspark shell (the JVM started first and launched this Python:
# PYSPARK_GATEWAY_PORT is set) the deployment's choice stands: executors on other machines may
# not have this interpreter's path; register() checks the workers' Python there instead.
if not os.environ.get("PYSPARK_PYTHON") and not os.environ.get("PYSPARK_GATEWAY_PORT") and sys.executable:
    os.environ["PYSPARK_PYTHON"] = sys.executable


def register(spark) -> None:
    """Register the ``pyklog`` data source with ``spark`` (a SparkSession), so that
    ``spark.readStream.format("pyklog")``, ``spark.read.format("pyklog")``,
    ``df.write.format("pyklog")`` and ``df.writeStream.format("pyklog")`` work.  Idempotent; runs on
    the driver.  Raises :class:`PyklogSetupError` when Spark's Python workers run an interpreter
    that cannot import pyklog (the message names the variable to set).

    It also adds pyklog's StreamingQueryListener (:mod:`pyklog.connector.spark.batch_end`), which
    tells a consumer-group query's planner that a micro-batch completed, so the group's offsets are
    committed at the end of each batch instead of at the next trigger (a query stopped between two
    triggers then hands over nothing to read twice)."""
    from pyklog.connector.spark.batch_end import install
    from pyklog.connector.spark.registration import register as _register

    _register(spark)
    install(spark)
