"""Spark's discovery hook for the ``pyklog`` data source.

PySpark looks up installed top-level modules whose names start with ``pyspark_`` and registers the
``DefaultSource`` each exposes (``pyspark/sql/worker/lookup_data_sources.py``), so in a Python where
pyklog is installed ``spark.readStream.format("pyklog")`` works with no registration call.
"""

from pyklog.connector.spark.source import PyklogDataSource as DefaultSource

__all__ = ["DefaultSource"]
