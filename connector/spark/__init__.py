"""The PySpark data source ``pyklog`` (Spark's Kafka source and sink options and schema, plus
ZooKeeper consumer groups).  Importing this package imports pyspark and pyarrow.

* :mod:`connector.spark.options`  option parsing and validation (Spark's Kafka option names)
* :mod:`connector.spark.offsets`  offset JSON, ranges, rate limiting
* :mod:`connector.spark.arrow`    bulk decoding of fetched record batches to Arrow
* :mod:`connector.spark.source`   PyklogDataSource, stream and batch readers
* :mod:`connector.spark.sink`     stream and batch writers
"""
from connector.spark.source import PyklogDataSource

__all__ = ["PyklogDataSource"]
