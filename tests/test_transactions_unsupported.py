"""Transactional clients get a fast, fatal error instead of retrying forever (no transaction
coordinator yet).

FindCoordinator(key_type=1) and a transactional InitProducerId answer
TRANSACTIONAL_ID_AUTHORIZATION_FAILED (53) with "transactions are not supported by this broker yet":
librdkafka (confluent-kafka) and kafka-python treat it as fatal.  Before this change the broker
answered COORDINATOR_NOT_AVAILABLE (retriable): ``init_transactions(10)`` ran into its 10 s timeout
and kafka-python's ``KafkaProducer(transactional_id=...)`` blocked for max.block.ms.
"""
from __future__ import annotations

import time
import uuid

import pytest

from support import Wire

pytestmark = pytest.mark.integration

_FAST_S = 5.0  # well under the clients' own timeouts (10 s here, 60 s max.block.ms by default)


def test_find_coordinator_and_init_producer_id_refuse_transactions(broker):
    with Wire(broker.port) as w:
        r = w.request(10, 1, {"key": "tx-1", "key_type": 1})
        assert r["error_code"] == 53 and r["error_message"] == "transactions are not supported by this broker yet", r
        r = w.request(22, 1, {"transactional_id": "tx-1", "transaction_timeout_ms": 60000})
        assert r["error_code"] == 53 and r["producer_id"] == -1, r
        r = w.request(22, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
        assert r["error_code"] == 0 and r["producer_id"] >= 0, r  # idempotent producers unchanged
        r = w.request(10, 1, {"key": "some-group", "key_type": 0})
        assert r["error_code"] in (0, 14, 15), r  # group coordinator unchanged (may still be loading)


def test_confluent_kafka_init_transactions_fails_fast(broker):
    from confluent_kafka import KafkaException, Producer

    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{uuid.uuid4().hex[:8]}"})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as ei:
        p.init_transactions(10)
    elapsed = time.monotonic() - t0
    err = ei.value.args[0]
    assert elapsed < _FAST_S, f"init_transactions took {elapsed:.1f}s: {err}"
    assert not err.retriable(), err
    assert err.fatal() or "not supported" in err.str(), err
    assert "transactions are not supported by this broker yet" in err.str() or err.code() == 53, err


def test_kafka_python_transactional_producer_fails_fast(broker):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    t0 = time.monotonic()
    with pytest.raises(KafkaError) as ei:
        p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=f"tx-{uuid.uuid4().hex[:8]}",
                          max_block_ms=30000)
        try:
            p.init_transactions()
        finally:
            p.close(timeout=5)
    elapsed = time.monotonic() - t0
    assert elapsed < _FAST_S, f"took {elapsed:.1f}s: {ei.value!r}"
    assert not getattr(ei.value, "retriable", False), repr(ei.value)
