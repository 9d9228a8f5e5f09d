"""pyklog's client side: producer, consumers, ZooKeeper consumer groups, and the PySpark data
source ``format("pyklog")``.

``import connector`` stays light (no pyspark import); :func:`register` imports pyspark lazily.
"""
from __future__ import annotations

__all__ = ["register"]


def register(spark) -> None:
    """Register the ``pyklog`` data source with a SparkSession, so ``spark.readStream.format("pyklog")``,
    ``spark.read.format("pyklog")``, ``df.write.format("pyklog")`` and
    ``df.writeStream.format("pyklog")`` work.  Idempotent.  Runs on the driver.

    Spark's Python workers import the data source by module path, so they must use a Python where
    pyklog is installed: set ``PYSPARK_PYTHON`` to it (the Makefile and tests do).
    """
    from connector.spark.source import PyklogDataSource

    spark.dataSource.register(PyklogDataSource)
