"""The registry while its cluster is down: reads answered from memory, writes refused with
Confluent's 5xx codes in bounded time, then taken again once the cluster is back; and pyklog's own
registry client (lookups cached, a clear error naming the URL of a registry that is down)."""

from __future__ import annotations

import json
import time

import pytest

from pyklog.connector.client import ClusterClient
from pyklog.connector.schema_registry.client import SchemaRegistryClient
from pyklog.connector.schema_registry.errors import SchemaRegistryError
from tests.integration.schema_registry.registry_support import RegistryProcess, call, sr_broker
from tests.support import wait_for

__all__ = ["sr_broker"]  # the fixture, used by name

EVENT = {"type": "record", "name": "Event", "fields": [{"name": "id", "type": "long"}]}
EVENT_V2 = {**EVENT, "fields": EVENT["fields"] + [{"name": "kind", "type": "string", "default": "x"}]}


def test_cluster_down_then_back_and_the_pyklog_client(sr_broker, tmp_path):
    broker = sr_broker
    # a topic made beforehand with the wrong cleanup policy: the registry uses it and says so
    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("schemas-delete", 1, {"cleanup.policy": "delete"})
    sr = RegistryProcess(broker.bootstrap, tmp_path, "sr", **{"kafkastore.topic": "schemas-delete"}).start()
    assert "the topic schemas-delete has cleanup.policy=delete" in sr.output()
    try:
        client = SchemaRegistryClient(sr.url, retries=2)
        sid = client.register("events-value", json.dumps(EVENT))
        assert client.register("events-value", json.dumps(EVENT)) == sid  # cached, and stable
        assert json.loads(client.get_schema(sid)["schema"]) == EVENT
        latest = client.get_latest("events-value")
        assert (latest["id"], latest["version"]) == (sid, 1)
        assert client.test_compatibility("events-value", json.dumps(EVENT_V2)) == []
        bad = {**EVENT, "fields": [{"name": "id", "type": "string"}]}
        assert "TYPE_MISMATCH" in client.test_compatibility("events-value", json.dumps(bad))[0]
        with pytest.raises(SchemaRegistryError) as e:
            client.get_schema(12345)
        assert e.value.error_code == 40403

        broker.stop()
        # reads come from memory
        assert call(sr.url, "GET", f"/schemas/ids/{sid}")[0] == 200
        assert call(sr.url, "GET", "/subjects")[1] == ["events-value"]
        # a write fails in bounded time with Confluent's store / timeout / forwarding codes
        started = time.monotonic()
        status, body = call(sr.url, "POST", "/subjects/events-value/versions", {"schema": json.dumps(EVENT_V2)})
        assert status >= 500 and body["error_code"] in (50001, 50002, 50003), body
        assert time.monotonic() - started < 25

        broker.start()
        wait_for(
            lambda: call(sr.url, "POST", "/subjects/events-value/versions", {"schema": json.dumps(EVENT_V2)})[0] == 200,
            60,
            message="the registry takes writes again",
        )
        assert call(sr.url, "GET", "/subjects/events-value/versions")[1] == [1, 2]
        assert sr.proc.poll() is None
    finally:
        sr.stop()
    # a registry that is not there: the client's error names the URL
    with pytest.raises(SchemaRegistryError) as e:
        SchemaRegistryClient(sr.url, retries=2).get_schema(sid)
    assert e.value.error_code == 50003 and sr.url in e.value.message
