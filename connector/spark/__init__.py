"""The PySpark data source ``pyklog`` (Spark's Kafka source and sink options and schema, plus
ZooKeeper consumer groups).  Importing this package imports pyspark and pyarrow.

* :mod:`pyklog.connector.spark.options`  option parsing and validation (Spark's Kafka option names)
* :mod:`pyklog.connector.spark.offsets`  offset JSON, ranges, rate limiting
* :mod:`pyklog.connector.spark.arrow`    bulk decoding of fetched record batches to Arrow
* :mod:`pyklog.connector.spark.source`   PyklogDataSource (the entry point; a map of the source's modules)
* :mod:`pyklog.connector.spark.stream_reader`, :mod:`~pyklog.connector.spark.batch_reader`  the readers
* :mod:`pyklog.connector.spark.planner`  the driver side of a query (client, group member, offsets)
* :mod:`pyklog.connector.spark.read_task`  the executor side: one read task
* :mod:`pyklog.connector.spark.sink`     stream and batch writers
* :mod:`pyklog.connector.spark.progress` Spark's Kafka description and offsets-behind-latest figures
  computed from a query's progress (PySpark does not let a Python source report them)
"""

from pyklog.connector.spark.source import PyklogDataSource

__all__ = ["PyklogDataSource"]
