"""Confluent's subject name strategies, as the connector's registry client names subjects."""

from __future__ import annotations

import pickle

import pytest

from pyklog.connector.schema_registry.client import SchemaRegistryClient, subject_name


def test_strategies():
    assert subject_name("TopicNameStrategy", "orders", is_key=False) == "orders-value"
    assert subject_name("", "orders", is_key=True) == "orders-key"
    assert subject_name("RecordNameStrategy", "orders", False, "demo.Order") == "demo.Order"
    java = "io.confluent.kafka.serializers.subject.TopicRecordNameStrategy"
    assert subject_name(java, "orders", True, "demo.Order") == "orders-demo.Order"
    with pytest.raises(ValueError, match="needs the record"):
        subject_name("RecordNameStrategy", "orders", False)
    with pytest.raises(ValueError, match="unknown subject name strategy"):
        subject_name("TopicNameStrategyy", "orders", False)


def test_client_pickles_and_keeps_its_secret_out_of_repr():
    c = SchemaRegistryClient("http://127.0.0.1:1/", basic_auth=("fred", "pw-secret"), retries=5)
    back = pickle.loads(pickle.dumps(c))
    assert (back.url, back.retries) == ("http://127.0.0.1:1", 5)
    assert "pw-secret" not in repr(c) and "pw-secret" not in repr(back)
