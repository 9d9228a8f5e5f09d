"""JSON Schema and Protobuf: parsing both forms, and the compatibility rules the registry applies."""

from __future__ import annotations

import base64
import json

import pytest

from pyklog.connector.schema_registry import json_schema, protobuf
from pyklog.connector.schema_registry.compatibility import InvalidSchemaError, check_compatibility, parse_schema


def obj(props, required=(), closed=False):
    out = {"type": "object", "properties": props, "required": list(required)}
    if closed:
        out["additionalProperties"] = False
    return out


def kinds(errors):
    return [e.split("'")[1] for e in errors]


def test_json_schema_parse():
    assert parse_schema("JSON", json.dumps(obj({"a": {"type": "string"}}))).schema_type == "JSON"
    for bad in ('{"type": 12}', "[1]", "{nope", '{"properties": {"a": {"type": "strin"}}}'):
        with pytest.raises(InvalidSchemaError):
            parse_schema("JSON", bad)


def test_json_schema_content_models():
    a = {"type": "string"}
    open_ab = obj({"a": a, "b": {"type": "integer"}})
    open_a = obj({"a": a})
    closed_a = obj({"a": a}, closed=True)
    closed_ab = obj({"a": a, "b": {"type": "integer"}}, closed=True)
    # reader, writer
    assert json_schema.check(open_a, open_ab) == []  # an open reader takes the extra property
    assert kinds(json_schema.check(closed_a, closed_ab)) == ["PROPERTY_REMOVED_FROM_CLOSED_CONTENT_MODEL"]
    assert kinds(json_schema.check(open_ab, open_a)) == ["PROPERTY_ADDED_TO_OPEN_CONTENT_MODEL"]
    assert json_schema.check(closed_ab, closed_a) == []  # the closed writer never wrote b
    assert kinds(json_schema.check(obj({"a": a}, ["a"]), open_a)) == ["REQUIRED_PROPERTY_ADDED"]
    assert kinds(json_schema.check(obj({"a": {"type": "integer"}}), open_a)) == ["TYPE_NARROWED"]
    assert json_schema.check(obj({"n": {"type": "number"}}), obj({"n": {"type": "integer"}})) == []
    assert kinds(json_schema.check(obj({"n": {"type": "integer"}}), obj({"n": {"type": "number"}}))) == [
        "TYPE_NARROWED"
    ]
    assert kinds(json_schema.check({"enum": ["x"]}, {"enum": ["x", "y"]})) == ["ENUM_ARRAY_NARROWED"]
    items_old = {"type": "array", "items": {"type": "integer"}}
    items_new = {"type": "array", "items": {"type": "string"}}
    assert kinds(json_schema.check(items_new, items_old)) == ["TYPE_NARROWED"]
    new = parse_schema("JSON", json.dumps(closed_a))
    old = parse_schema("JSON", json.dumps(closed_ab))
    assert check_compatibility("BACKWARD", new, [old]) != [] and check_compatibility("FORWARD", new, [old]) == []


PROTO_V1 = """
syntax = "proto3";
package demo;
import "google/protobuf/timestamp.proto";
// an order
message Order {
  string id = 1;
  int32 qty = 2;
  Customer customer = 3;
  map<string, string> tags = 4;
  oneof payment { string card = 5; string iban = 6; }
  repeated Line lines = 7 [packed = true];
  message Line { string sku = 1; }
  enum State { NEW = 0; PAID = 1; }
  State state = 8;
  reserved 20 to 25;
}
message Customer { string name = 1; }
"""


def test_protobuf_text_and_descriptor_forms():
    text = protobuf.parse(PROTO_V1)
    assert text.package == "demo" and text.imports == ["google/protobuf/timestamp.proto"]
    order = text.messages["demo.Order"]
    assert (order[2].name, order[2].type) == ("qty", "int32")
    assert order[4].type == "map<string,string>" and order[6].name == "iban" and order[7].label == "repeated"
    assert "demo.Order.Line" in text.messages and text.enums["demo.Order.State"] == ["NEW", "PAID"]

    from google.protobuf import descriptor_pb2

    fdp = descriptor_pb2.FileDescriptorProto(name="o.proto", package="demo", syntax="proto3")
    m = fdp.message_type.add(name="Order")
    m.field.add(name="id", number=1, type=9, label=1)
    m.field.add(name="qty", number=2, type=5, label=1)
    encoded = base64.b64encode(fdp.SerializeToString()).decode()
    desc = parse_schema("PROTOBUF", encoded).value
    assert desc.serialized and desc.messages["demo.Order"][2].type == "int32"
    # the text and the descriptor of the same message are compatible both ways
    assert set(kinds(protobuf.check(desc, text))) == {"MESSAGE_REMOVED"}  # Customer, Order.Line
    assert protobuf.check(text, desc) == []


@pytest.mark.parametrize(
    "bad", ["message {", "message A { string a = x; }", "syntax = 'proto3';", "message A { int32 a = 1; int32 b = 1; }"]
)
def test_protobuf_invalid(bad):
    with pytest.raises(InvalidSchemaError):
        parse_schema("PROTOBUF", bad)


def _msg(body, syntax="proto3"):
    return protobuf.parse(f'syntax = "{syntax}"; package p; message M {{ {body} }} message N {{ string x = 1; }}')


def test_protobuf_rules():
    base = _msg("string a = 1; int32 b = 2; N n = 3;")
    assert protobuf.check(_msg("string a = 1; int32 b = 2; N n = 3; bool c = 4;"), base) == []  # added
    assert protobuf.check(_msg("string a = 1; N n = 3;"), base) == []  # removed
    assert protobuf.check(_msg("string renamed = 1; int64 b = 2; N n = 3;"), base) == []  # wire-compatible
    assert kinds(protobuf.check(_msg("string a = 1; sint32 b = 2; N n = 3;"), base)) == ["FIELD_SCALAR_KIND_CHANGED"]
    assert kinds(protobuf.check(_msg("string a = 1; int32 b = 2; string n = 3;"), base)) == ["FIELD_KIND_CHANGED"]
    assert kinds(protobuf.check(_msg("string a = 1; int32 b = 2; M n = 3;"), base)) == ["FIELD_NAMED_TYPE_CHANGED"]
    assert protobuf.check(_msg("bytes a = 1; int32 b = 2; N n = 3;"), base) == []
    only_m = protobuf.parse('syntax = "proto3"; package p; message M { string a = 1; }')
    assert kinds(protobuf.check(only_m, base)) == ["MESSAGE_REMOVED"]
    req = _msg("required string a = 1; optional int32 b = 2;", "proto2")
    opt = _msg("optional string a = 1; optional int32 b = 2;", "proto2")
    assert kinds(protobuf.check(_msg("optional int32 b = 2;", "proto2"), req)) == ["REQUIRED_FIELD_REMOVED"]
    assert kinds(protobuf.check(req, opt)) == []  # same number, label change not compared
    assert kinds(protobuf.check(_msg("optional int32 b = 2; required int32 c = 3;", "proto2"), opt)) == [
        "REQUIRED_FIELD_ADDED"
    ]


def test_protobuf_text_to_descriptor_builds_working_messages():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fdp = descriptor_pb2.FileDescriptorProto.FromString(protobuf.to_descriptor(PROTO_V1.replace("import", "// import")))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.Order"))
    m = order(id="o1", qty=2, tags={"k": "v"}, iban="DE00", state=1)
    m.lines.add(sku="s1")
    m.customer.name = "ann"
    back = order.FromString(m.SerializeToString())
    assert back == m and back.WhichOneof("payment") == "iban" and back.lines[0].sku == "s1"
    # a base64 descriptor comes back as it was
    encoded = base64.b64encode(fdp.SerializeToString()).decode()
    assert protobuf.to_descriptor(encoded) == fdp.SerializeToString()


def test_protobuf_descriptor_rendered_as_text_and_back():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    source = PROTO_V1.replace("import", "// import").replace(
        "oneof payment", "optional string memo = 9;\n  oneof payment"
    )
    fdp = descriptor_pb2.FileDescriptorProto.FromString(protobuf.to_descriptor(source))
    encoded = base64.b64encode(fdp.SerializeToString()).decode()
    text = protobuf.to_text(encoded)
    assert "map<string, string> tags = 4;" in text and "oneof payment {" in text and "optional string memo = 9;" in text
    # the rendered text parses to the same model and builds the same messages
    assert protobuf.parse(text).messages.keys() == protobuf.parse(source).messages.keys()
    again = descriptor_pb2.FileDescriptorProto.FromString(protobuf.to_descriptor(text))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(again)
    order = message_factory.GetMessageClass(pool.FindMessageTypeByName("demo.Order"))
    m = order(id="x", tags={"a": "b"}, card="c", memo="m")
    m.customer.name = "n"
    back = order.FromString(m.SerializeToString())
    assert back == m and back.HasField("memo") and back.WhichOneof("payment") == "card"
    assert protobuf.to_text(PROTO_V1) == PROTO_V1  # text stays as registered
    # the two forms of one schema are the same schema to the rules
    as_text, as_descriptor = protobuf.parse(source), protobuf.parse(encoded)
    assert protobuf.check(as_text, as_descriptor) == [] and protobuf.check(as_descriptor, as_text) == []
    assert as_descriptor.messages["demo.Order"][4].type == "map<string,string>"
