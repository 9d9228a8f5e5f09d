"""The registry process against a real broker, through confluent-kafka's schema registry client and
its Avro, JSON Schema and Protobuf serializers, plus the REST API as clients call it."""

from __future__ import annotations

import base64
import json
import signal

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pb2

from pyklog.connector.schema_registry import wire
from pyklog.connector.schema_registry.client import SchemaRegistryClient as PyklogRegistryClient
from tests.integration.schema_registry.registry_support import RegistryProcess, call, sr_broker
from tests.support import wait_for

__all__ = ["sr_broker"]  # the fixture, used by name

#: the group's smallest session: a killed primary is replaced within about 6 s
FAST_FAILOVER = {"kafkastore.session.timeout.ms": "6000"}
USER_V1 = {
    "type": "record",
    "name": "User",
    "namespace": "demo",
    "fields": [{"name": "name", "type": "string"}, {"name": "age", "type": "int"}],
}
USER_V2 = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "email", "type": ["null", "string"], "default": None}]}
USER_BAD = {**USER_V1, "fields": USER_V1["fields"] + [{"name": "city", "type": "string"}]}  # no default
PERSON_JSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name"],
}


def _proto_message_class():
    """A message type built at run time (no protoc): demo.Order {string id = 1; int64 qty = 2;}."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto(name="order.proto", package="demo", syntax="proto3")
    m = fdp.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=9, label=1)
    m.field.add(name="qty", number=2, type=3, label=1)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.Order"))


def _round_trip(bootstrap, topic, serializer, deserializer, values):
    p = Producer({"bootstrap.servers": bootstrap})
    for v in values:
        p.produce(topic, serializer(v, SerializationContext(topic, MessageField.VALUE)))
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    try:
        for _ in range(200):
            msg = c.poll(0.5)
            if msg is None or msg.error():
                if len(out) == len(values):
                    break
                continue
            out.append(deserializer(msg.value(), SerializationContext(topic, MessageField.VALUE)))
            if len(out) == len(values):
                break
    finally:
        c.close()
    return out


def test_confluent_clients_against_the_registry_and_a_second_instance(sr_broker, tmp_path):
    broker = sr_broker
    a = RegistryProcess(broker.bootstrap, tmp_path, "a", **FAST_FAILOVER).start()
    b = None
    try:
        sr = SchemaRegistryClient({"url": a.url})
        # Avro: the serializer registers the schema, the deserializer looks it up by id
        ser = AvroSerializer(sr, json.dumps(USER_V1))
        de = AvroDeserializer(sr)
        users = [{"name": f"u{i}", "age": i} for i in range(3)]
        assert _round_trip(broker.bootstrap, "users", ser, de, users) == users
        v1 = sr.get_latest_version("users-value")
        assert v1.version == 1 and json.loads(v1.schema.schema_str) == USER_V1
        ctx = SerializationContext("users", MessageField.VALUE)
        assert wire.decode_header(ser(users[0], ctx)) == (v1.schema_id, None, 5)  # the codec reads it

        # ids are global: the same schema under another subject keeps its id; registering again too
        assert sr.register_schema("other-value", Schema(json.dumps(USER_V1), "AVRO")) == v1.schema_id
        assert call(a.url, "POST", "/subjects/users-value/versions", {"schema": json.dumps(USER_V1)}) == (
            200,
            {"id": v1.schema_id},
        )
        _status, found = call(a.url, "GET", f"/schemas/ids/{v1.schema_id}/versions")
        assert found == [{"subject": "other-value", "version": 1}, {"subject": "users-value", "version": 1}]

        # compatibility: BACKWARD refuses a field without a default with 409 and Confluent's message
        with pytest.raises(SchemaRegistryError) as e:
            sr.register_schema("users-value", Schema(json.dumps(USER_BAD), "AVRO"))
        assert e.value.http_status_code == 409 and e.value.error_code == 409
        assert 'incompatible with an earlier schema for subject "users-value"' in e.value.error_message
        assert "READER_FIELD_MISSING_DEFAULT_VALUE" in e.value.error_message
        assert sr.test_compatibility("users-value", Schema(json.dumps(USER_V2), "AVRO"))
        v2_id = sr.register_schema("users-value", Schema(json.dumps(USER_V2), "AVRO"))
        assert v2_id != v1.schema_id and sr.get_versions("users-value") == [1, 2]
        sr.set_compatibility("users-value", "NONE")
        assert sr.get_compatibility("users-value") == "NONE"
        assert call(a.url, "GET", "/config")[1] == {"compatibilityLevel": "BACKWARD"}

        # lookup by schema, errors with Confluent's codes
        assert sr.lookup_schema("users-value", Schema(json.dumps(USER_V2), "AVRO")).version == 2
        assert call(a.url, "GET", "/subjects/nope/versions/1") == (
            404,
            {"error_code": 40401, "message": "Subject 'nope' not found."},
        )
        assert call(a.url, "GET", "/subjects/users-value/versions/9")[1]["error_code"] == 40402
        assert call(a.url, "GET", "/schemas/ids/999")[1]["error_code"] == 40403
        assert call(a.url, "POST", "/subjects/x/versions", {"schema": "{not avro"})[1]["error_code"] == 42201
        assert call(a.url, "GET", "/subjects/users-value/versions/zero")[1]["error_code"] == 42202
        assert call(a.url, "POST", "/subjects/x/versions", {"schema": 5, "schemaType": []})[1]["error_code"] == 42201
        assert call(a.url, "POST", "/subjects/x/versions", ["not", "an", "object"])[0] == 400
        assert call(a.url, "GET", "/no/such/path")[1] == {"error_code": 404, "message": "HTTP 404 Not Found"}

        # JSON Schema and Protobuf through their serializers
        jser = JSONSerializer(json.dumps(PERSON_JSON), sr)
        jde = JSONDeserializer(json.dumps(PERSON_JSON))
        people = [{"name": "ann", "age": 3}, {"name": "bob", "age": 4}]
        assert _round_trip(broker.bootstrap, "people", jser, jde, people) == people
        assert sr.get_latest_version("people-value").schema.schema_type == "JSON"
        order_cls = _proto_message_class()
        pser = ProtobufSerializer(order_cls, sr, {"use.deprecated.format": False})
        pde = ProtobufDeserializer(order_cls, {"use.deprecated.format": False})
        orders = [order_cls(id="o1", qty=2), order_cls(id="o2", qty=5)]
        assert _round_trip(broker.bootstrap, "orders", pser, pde, orders) == orders
        orders_id = sr.get_latest_version("orders-value").schema_id
        framed = pser(orders[0], SerializationContext("orders", MessageField.VALUE))
        schema_id, indexes, start = wire.decode_header(framed, protobuf=True)
        assert (schema_id, indexes) == (orders_id, [0]) and order_cls.FromString(framed[start:]) == orders[0]
        assert sr.get_latest_version("orders-value").schema.schema_type == "PROTOBUF"
        # registered as a base64 descriptor, served as .proto text (and as the descriptor on request)
        served = call(a.url, "GET", "/subjects/orders-value/versions/latest")[1]["schema"]
        assert "message Order {" in served and "int64 qty = 2;" in served

        # a Protobuf schema registered as .proto text is served as a descriptor on ?format=serialized
        proto_text = 'syntax = "proto3"; package demo; message Item { string sku = 1; int32 n = 2; }'
        item_id = sr.register_schema("items-value", Schema(proto_text, "PROTOBUF"))
        assert sr.get_schema(item_id).schema_str == proto_text
        fdp = descriptor_pb2.FileDescriptorProto.FromString(
            base64.b64decode(call(a.url, "GET", f"/schemas/ids/{item_id}?format=serialized")[1]["schema"])
        )
        assert [(f.name, f.number) for f in fdp.message_type[0].field] == [("sku", 1), ("n", 2)]
        ours = PyklogRegistryClient(a.url)
        assert ours.get_schema(item_id)["schema"] == proto_text
        assert base64.b64decode(ours.get_schema(item_id, fmt="serialized")["schema"]) == fdp.SerializeToString()

        listed = call(a.url, "GET", "/schemas?subjectPrefix=users&latestOnly=true")[1]
        assert [(x["subject"], x["version"], x["id"]) for x in listed] == [("users-value", 2, v2_id)]

        # soft, then hard delete
        assert sr.delete_subject("other-value") == [1]
        assert "other-value" not in sr.get_subjects()
        assert call(a.url, "GET", "/subjects?deleted=true")[1].count("other-value") == 1
        assert sr.delete_subject("other-value", permanent=True) == [1]
        assert "other-value" not in call(a.url, "GET", "/subjects?deleted=true")[1]
        # the existing topic was checked at the restart: compacted, one partition
        assert "cannot read the configs" not in a.output() and "cleanup.policy=" not in a.output()

        # a second instance reads the same topic, agrees on the ids and forwards its writes
        b = RegistryProcess(broker.bootstrap, tmp_path, "b", **FAST_FAILOVER).start()
        assert call(b.url, "GET", f"/schemas/ids/{v2_id}")[1]["schema"] == json.dumps(USER_V2)
        wait_for(lambda: call(b.url, "POST", "/subjects/from-b/versions", {"schema": '"string"'})[0] == 200, 30)
        sid = call(b.url, "POST", "/subjects/from-b/versions", {"schema": '"string"'})[1]["id"]
        assert call(a.url, "GET", "/subjects/from-b/versions/latest")[1]["id"] == sid
        assert call(b.url, "GET", "/subjects/from-b/versions/latest")[1]["id"] == sid  # read its own write
        # a write another instance already forwarded is never forwarded again (no loop between two)
        again = call(b.url, "POST", "/subjects/loop/versions", {"schema": '"int"'}, headers={"X-Pyklog-Forwarded": "1"})
        assert again[0] == 500 and again[1]["error_code"] == 50003
        assert sid == max(v1.schema_id, v2_id, sid) and sid not in (v1.schema_id, v2_id)

        # the primary is killed: the other instance takes writes once its session is over; a restart
        # keeps every id
        a.stop(signal.SIGKILL)
        wait_for(lambda: call(b.url, "POST", "/subjects/after/versions", {"schema": '"long"'})[0] == 200, 40)
        a.start()
        assert call(a.url, "GET", "/subjects/users-value/versions/1")[1]["id"] == v1.schema_id
        assert call(a.url, "GET", "/subjects/users-value/versions/2")[1]["id"] == v2_id
        assert call(a.url, "GET", "/subjects/after/versions/1")[1]["schema"] == '"long"'
        assert call(a.url, "GET", "/config/users-value")[1] == {"compatibilityLevel": "NONE"}
        assert "other-value" not in call(a.url, "GET", "/subjects?deleted=true")[1]
        # the existing topic was checked at the restart: compacted, one partition
        assert "cannot read the configs" not in a.output() and "cleanup.policy=" not in a.output()
    finally:
        a.stop()
        if b is not None:
            b.stop()
