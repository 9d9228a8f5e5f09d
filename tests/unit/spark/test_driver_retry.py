"""The Spark source planner's retry options and its bound on a cluster that does not answer (no
broker: a closed port).  The outage tests with a real broker are
tests/integration/spark/test_broker_restart.py."""

from __future__ import annotations

import time

import pytest


def test_driver_retry_options_and_bound_without_a_broker():
    """No server: the options' defaults (Spark's fetchOffset.*, Kafka's default.api.timeout.ms), a
    look-up against a closed port failing after the bound with the address in the message, and a
    commit that gives up quietly (the query goes on)."""
    from pyklog.broker.zk.server import free_port
    from pyklog.connector.spark.options import parse_source_options
    from pyklog.connector.spark.planner import ClusterUnreachableError, SourcePlanner

    boot = f"127.0.0.1:{free_port()}"
    opts = parse_source_options({"kafka.bootstrap.servers": boot, "subscribe": "t"}, streaming=True)
    assert (opts.fetch_offset_retries, opts.fetch_offset_retry_interval_ms, opts.api_timeout_ms) == (3, 10, 60000)
    opts = parse_source_options(
        {"kafka.bootstrap.servers": boot, "subscribe": "t", "kafka.default.api.timeout.ms": "1500"}, streaming=True
    )
    d = SourcePlanner(opts, streaming=True)
    try:
        t0 = time.monotonic()
        with pytest.raises(ClusterUnreachableError) as info:
            d.subscribed_partitions()
        took = time.monotonic() - t0
        assert 0.5 <= took < 10, took
        assert boot in str(info.value) and "kafka.default.api.timeout.ms=1500" in str(info.value)
        # a commit never raises for an outage: fetchOffset.numRetries retries, a WARNING, None
        calls = []

        def commit():
            calls.append(1)
            raise ConnectionRefusedError("broker down")

        d._down_since = None
        assert d.call("OffsetCommit", commit, fatal=False) is None
        assert len(calls) == opts.fetch_offset_retries + 1
    finally:
        d.close()
