"""Avro's schema resolution rules as the registry applies them (reader, writer), and the levels."""

from __future__ import annotations

import json

import pytest

from pyklog.connector.schema_registry import avro
from pyklog.connector.schema_registry.compatibility import (
    InvalidSchemaError,
    check_compatibility,
    parse_schema,
)


def rec(*fields, name="R", **extra):
    return {"type": "record", "name": name, "fields": list(fields), **extra}


def f(name, type_, **extra):
    return {"name": name, "type": type_, **extra}


def kinds(reader, writer, reader_refs=None, writer_refs=None):
    return [e.split("'")[1] for e in avro.check(reader, writer, reader_refs, writer_refs)]


PROMOTIONS_OK = [
    ("int", "long"),
    ("int", "float"),
    ("int", "double"),
    ("long", "float"),
    ("long", "double"),
    ("float", "double"),
    ("string", "bytes"),
    ("bytes", "string"),
]
PROMOTIONS_BAD = [("long", "int"), ("double", "float"), ("float", "long"), ("string", "int"), ("boolean", "int")]


@pytest.mark.parametrize(("writer", "reader"), PROMOTIONS_OK)
def test_promotions_read(writer, reader):
    assert avro.check(reader, writer) == []
    assert avro.check(rec(f("a", reader)), rec(f("a", writer))) == []


@pytest.mark.parametrize(("writer", "reader"), PROMOTIONS_BAD)
def test_narrowings_do_not_read(writer, reader):
    assert kinds(rec(f("a", reader)), rec(f("a", writer))) == ["TYPE_MISMATCH"]


def test_fields_added_and_removed():
    old = rec(f("a", "int"))
    with_default = rec(f("a", "int"), f("b", "string", default=""))
    without_default = rec(f("a", "int"), f("b", "string"))
    assert avro.check(with_default, old) == []  # the new reader fills the default
    assert kinds(without_default, old) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    assert avro.check(old, without_default) == []  # a reader skips what it does not know
    # a field removed: old readers need its default
    assert kinds(rec(f("a", "int"), f("b", "string")), rec(f("a", "int"))) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]


def test_aliases_and_names():
    writer = rec(f("old_name", "int"), name="ns.Old")
    assert avro.check(rec(f("new_name", "int", aliases=["old_name"]), name="New", aliases=["ns.Old"]), writer) == []
    assert kinds(rec(f("old_name", "int"), name="Other"), writer) == ["NAME_MISMATCH"]
    assert kinds(rec(f("new_name", "int"), name="Old"), writer) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    # the unqualified name matches across namespaces, as Avro's Java resolution does
    assert avro.check(rec(f("old_name", "int"), name="other.Old"), writer) == []


def test_enums():
    e = {"type": "enum", "name": "Color", "symbols": ["RED", "GREEN"]}
    wider = {**e, "symbols": ["RED", "GREEN", "BLUE"]}
    assert avro.check(wider, e) == []
    assert kinds(e, wider) == ["MISSING_ENUM_SYMBOLS"]
    assert avro.check({**e, "default": "RED"}, wider) == []  # the reader's default takes unknown symbols


def test_unions():
    assert avro.check(["null", "string"], "string") == []
    assert avro.check(["null", "long"], "int") == []  # a branch reads it by promotion
    assert kinds("string", ["null", "string"]) == ["TYPE_MISMATCH"]  # the null branch is unreadable
    assert kinds(["null", "int"], ["null", "string"]) == ["MISSING_UNION_BRANCH"]
    assert avro.check(["null", "string", "int"], ["int", "null"]) == []


def test_fixed_arrays_maps_nested_and_recursive():
    fixed = {"type": "fixed", "name": "H", "size": 16}
    assert avro.check(fixed, fixed) == []
    assert kinds({**fixed, "size": 8}, fixed) == ["FIXED_SIZE_MISMATCH"]
    assert avro.check({"type": "array", "items": "long"}, {"type": "array", "items": "int"}) == []
    assert kinds({"type": "map", "values": "int"}, {"type": "map", "values": "long"}) == ["TYPE_MISMATCH"]
    inner_old = rec(f("x", "int"), name="Inner")
    inner_new = rec(f("x", "int"), f("y", "int"), name="Inner")
    assert kinds(rec(f("in", inner_new)), rec(f("in", inner_old))) == ["READER_FIELD_MISSING_DEFAULT_VALUE"]
    node = rec(f("v", "int"), f("next", ["null", "Node"], default=None), name="Node")
    assert avro.check(node, node) == []  # recursive types terminate
    node2 = rec(f("v", "long"), f("next", ["null", "Node"], default=None), name="Node")
    assert avro.check(node2, node) == [] and kinds(node, node2) == ["TYPE_MISMATCH"]


def test_named_references():
    address = rec(f("street", "string"), name="Address", namespace="demo")
    user = rec(f("home", "demo.Address"), name="User", namespace="demo")
    parsed = parse_schema("AVRO", json.dumps(user), [json.dumps(address)])
    assert parsed.value == user
    with pytest.raises(InvalidSchemaError):
        parse_schema("AVRO", json.dumps(user))  # the reference is missing
    wider = rec(f("street", "string"), f("zip", "string", default=""), name="Address", namespace="demo")
    assert avro.check(user, user, [wider], [address]) == []


@pytest.mark.parametrize(
    "text",
    ['{"type": "record", "name": "R"}', '{"type": "nope"}', "{not json", '{"type":"enum","name":"E","symbols":[1]}'],
)
def test_invalid_schemas(text):
    with pytest.raises(InvalidSchemaError):
        parse_schema("AVRO", text)


def test_levels():
    v1 = parse_schema("AVRO", json.dumps(rec(f("a", "int"))))
    v2 = parse_schema("AVRO", json.dumps(rec(f("a", "int"), f("b", "int", default=0))))
    v3 = parse_schema("AVRO", json.dumps(rec(f("b", "int", default=0))))  # removes a (no default in v1)
    added_required = parse_schema("AVRO", json.dumps(rec(f("a", "int"), f("c", "int"))))
    assert check_compatibility("BACKWARD", v3, [v1, v2]) == []  # reads v2's data
    assert check_compatibility("BACKWARD_TRANSITIVE", v3, [v1, v2]) == []  # b's default fills v1's data
    assert check_compatibility("FORWARD", v3, [v1, v2]) != []  # v2 cannot read it: its a has no default
    assert check_compatibility("FORWARD", v2, [v1]) == []
    assert check_compatibility("FORWARD", added_required, [v1]) == []
    assert check_compatibility("BACKWARD", added_required, [v1]) != []
    assert check_compatibility("FULL", added_required, [v1]) != []
    assert check_compatibility("FULL", v2, [v1]) == []
    assert check_compatibility("NONE", added_required, [v1]) == []
    assert check_compatibility("FORWARD_TRANSITIVE", v3, [v1, v2]) != []  # v1 cannot read it (no a)
    assert check_compatibility("FULL_TRANSITIVE", v3, [v1, v2]) != []
    assert check_compatibility("BACKWARD", added_required, []) == []  # the first version
