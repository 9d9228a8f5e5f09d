"""kafka.security.protocol / kafka.ssl.* / kafka.sasl.* reach the Spark source's and sink's clients,
pickle with the options, and stay out of the options' text."""

from __future__ import annotations

import pickle

from pyklog.connector.spark.input_partition import PyklogInputPartition
from pyklog.connector.spark.options import parse_sink_options, parse_source_options
from pyklog.connector.spark.read_task import task_consumer_kwargs

SECRET = "spark-ts-Secret-9"
OPTS = {
    "kafka.bootstrap.servers": "127.0.0.1:9093",
    "kafka.security.protocol": "SSL",
    "kafka.ssl.truststore.location": "/etc/ca.p12",
    "kafka.ssl.truststore.password": SECRET,
    "kafka.ssl.endpoint.identification.algorithm": "",
}


def test_source_options_carry_the_security_settings_without_showing_them():
    opts = parse_source_options({**OPTS, "subscribe": "t"}, streaming=True)
    sec = opts.cluster.security
    assert sec.uses_tls and sec.ssl_setting("ssl.truststore.password") == SECRET
    assert sec.ssl_setting("ssl.endpoint.identification.algorithm") == ""
    assert SECRET not in repr(opts) and SECRET not in str(opts)
    again = pickle.loads(pickle.dumps(opts))
    assert again.cluster.security == sec
    kwargs = task_consumer_kwargs(opts, PyklogInputPartition("t", 0, 0, 10, "127.0.0.1:9093", 0))
    assert kwargs["security"] == sec


def test_sink_options_keep_passwords_out_of_producer_config():
    from pyklog.connector.spark.sink import _SinkWriter

    opts = parse_sink_options({**OPTS, "topic": "t", "kafka.acks": "all"})
    assert all(k != "ssl.truststore.password" for k, _ in opts.producer_config)
    assert SECRET not in repr(opts)
    writer = _SinkWriter.__new__(_SinkWriter)
    writer.opts = opts
    cfg = writer._producer_config()
    assert cfg["security.protocol"] == "SSL" and cfg["ssl.truststore.password"] == SECRET and cfg["acks"] == "all"
