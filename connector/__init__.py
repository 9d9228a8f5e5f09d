"""pyklog's client side: producer, consumers, ZooKeeper consumer groups, offset storage, and the
PySpark data source ``format("pyklog")``.

``import pyklog.connector`` stays light (no pyspark import); :func:`pyklog.register` imports pyspark
lazily.
"""

from __future__ import annotations

from pyklog import register

__all__ = ["register"]
