"""format("pyklog") over an SSL listener: df.write and spark.read with the options Spark users write
(kafka.security.protocol, kafka.ssl.truststore.*, kafka.ssl.keystore.* against a broker requiring
client certificates); the passwords stay out of the plan and the broker's log."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from pyklog.connector.client import ClusterClient
from tests.integration.security.tls_broker_support import (  # noqa: F401 - fixture
    assert_no_secret_logged,
    start_tls_broker,
    tls_certs,
)
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD

pytestmark = pytest.mark.timeout(300)


def test_spark_write_and_read_over_mutual_tls(spark, broker_factory, tls_certs):
    b = start_tls_broker(broker_factory, tls_certs, **{"ssl.client.auth": "required"})
    with ClusterClient(b.bootstrap) as c:
        c.create_topic("tls-spark", 2)
    ssl_options = {
        "kafka.bootstrap.servers": b.ssl_bootstrap,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": tls_certs.ca_p12,
        "kafka.ssl.truststore.password": TRUSTSTORE_PASSWORD,
        "kafka.ssl.keystore.type": "PKCS12",
        "kafka.ssl.keystore.location": tls_certs.client_p12,
        "kafka.ssl.keystore.password": KEYSTORE_PASSWORD,
    }
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(50)], "key string, value string")
    df.write.mode("append").format("pyklog").options(**ssl_options).option("topic", "tls-spark").save()
    reader = spark.read.format("pyklog").options(**ssl_options).option("subscribe", "tls-spark").load()
    back = reader.select(F.col("key").cast("string").alias("k"), F.col("value").cast("string").alias("v"))
    assert sorted((r.k, r.v) for r in back.collect()) == sorted((f"k{i}", f"v{i}") for i in range(50))
    plan = reader._jdf.queryExecution().toString()
    assert KEYSTORE_PASSWORD not in plan and TRUSTSTORE_PASSWORD not in plan
    # without a client certificate the broker refuses the read
    no_cert = {k: v for k, v in ssl_options.items() if "keystore" not in k}
    with pytest.raises(Exception) as ei:  # noqa: PT011 - the Python worker's error, wrapped by Spark
        spark.read.format("pyklog").options(**no_cert).option("kafka.request.timeout.ms", "5000").option(
            "subscribe", "tls-spark"
        ).load().collect()
    assert KEYSTORE_PASSWORD not in str(ei.value) and TRUSTSTORE_PASSWORD not in str(ei.value)
    assert_no_secret_logged(b)
