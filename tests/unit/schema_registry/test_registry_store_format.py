"""The records of the ``_schemas`` topic (Confluent's format) and the registry's state rebuilt from
them: ids, versions, soft and hard deletes, configs, references, the errors' codes."""

from __future__ import annotations

import json

import pytest

from pyklog.connector.schema_registry import store
from pyklog.connector.schema_registry.config import RegistryConfig, RegistryConfigError, parse_properties
from pyklog.connector.schema_registry.errors import SchemaRegistryError
from pyklog.connector.schema_registry.registry import SchemaRegistry

S1 = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]})
S2 = json.dumps(
    {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int"}, {"name": "b", "type": "int", "default": 0}],
    }
)
S_BAD = json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "string"}]})


def test_golden_records():
    assert (
        store.encode_key(store.schema_key("t-value", 3))
        == b'{"keytype":"SCHEMA","subject":"t-value","version":3,"magic":1}'
    )
    assert store.encode_key(store.config_key(None)) == b'{"keytype":"CONFIG","subject":null,"magic":0}'
    assert store.encode_key(store.delete_subject_key("s")) == b'{"keytype":"DELETE_SUBJECT","subject":"s","magic":0}'
    assert store.encode_key(store.noop_key()) == b'{"keytype":"NOOP","magic":0}'
    v = store.schema_value("s", 1, 7, '"string"', "AVRO", [], False)
    assert store.encode_value(v) == b'{"subject":"s","version":1,"id":7,"schema":"\\"string\\"","deleted":false}'
    refs = [{"name": "a.proto", "subject": "a", "version": 1}]
    v = store.schema_value("s", 2, 8, "syntax", "PROTOBUF", refs, True)
    assert list(v) == ["subject", "version", "id", "schemaType", "references", "schema", "deleted"]
    assert store.encode_value(None) is None
    key, value = store.decode(store.encode_key(store.schema_key("s", 2)), store.encode_value(v))
    assert key["version"] == 2 and value == v
    assert store.decode(b'{"keytype":"SCHEMA","subject":"s","version":2,"magic":1}', None)[1] is None


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (None, b"{}"),
        (b"nope", b"{}"),
        (b'{"keytype":"OTHER"}', None),
        (b'{"keytype":"SCHEMA"}', b'{"subject":"s"}'),
        (b'{"keytype":"NOOP"}', b"[1]"),
    ],
)
def test_bad_records(key, value):
    with pytest.raises(store.BadRecordError):
        store.decode(key, value)


def in_memory() -> tuple[SchemaRegistry, list]:
    """A registry whose writes are applied at once, as the store's reader applies them (the records
    go through their byte encoding, as in the topic)."""
    log: list = []
    box: list = []

    def write(key, value):
        k, v = store.decode(store.encode_key(key), store.encode_value(value))
        log.append((k, v))
        box[0].apply(k, v, len(log) - 1)
        return len(log) - 1

    box.append(SchemaRegistry(write))
    return box[0], log


def code(fn, *args, **kwargs) -> int:
    with pytest.raises(SchemaRegistryError) as e:
        fn(*args, **kwargs)
    return e.value.error_code


def test_ids_versions_and_compatibility():
    r, log = in_memory()
    assert r.register("a", None, S1, []) == 1
    assert r.register("b", "AVRO", json.dumps(json.loads(S1), indent=2), []) == 1  # same schema: same id
    assert r.register("a", None, S1, []) == 1 and len(log) == 2  # nothing written again
    reordered = json.dumps({"fields": [{"type": "int", "name": "a"}], "name": "R", "type": "record"})
    assert r.register("a", None, reordered, []) == 1 and len(log) == 2  # the same schema
    assert code(r.register, "a", None, S_BAD, []) == 409
    assert r.register("a", None, S2, []) == 2
    assert r.versions("a") == [1, 2] and r.get_version("a", "latest").schema_id == 2
    assert r.lookup("a", None, S1, []).version == 1
    assert code(r.lookup, "a", None, S_BAD, []) == 40403
    assert code(r.lookup, "zz", None, S1, []) == 40401
    assert code(r.get_version, "a", 0) == 42202 and code(r.get_version, "a", 3) == 40402
    assert code(r.register, "a", None, "{bad", []) == 42201
    assert code(r.register, "a", "XML", "<a/>", []) == 42201
    for schema_type, text, refs in ((5, S1, []), (None, 12, []), (None, S1, {"a": 1}), (None, S1, ["x"])):
        assert code(r.register, "a", schema_type, text, refs) == 42201
        assert code(r.lookup, "a", schema_type, text, refs) == 42201
    assert [(v.subject, v.version) for v in r.subject_versions_of_id(1)] == [("a", 1), ("b", 1)]
    assert code(r.get_by_id, 99) == 40403


def test_configs_and_deletes_rebuilt_from_the_records():
    r, log = in_memory()
    r.register("a", None, S1, [])
    assert r.set_config("a", "none") == "NONE" and r.get_config("a") == "NONE"
    assert code(r.set_config, None, "SIDEWAYS") == 42203
    assert code(r.get_config, "b") == 40408 and r.get_config("b", default_to_global=True) == "BACKWARD"
    assert r.register("a", None, S_BAD, []) == 2  # NONE: anything goes
    assert code(r.delete_subject, "a", permanent=True) == 40405  # a hard delete needs the soft one first
    assert r.delete_version("a", 2) == 2 and r.versions("a") == [1] and r.versions("a", deleted=True) == [1, 2]
    assert r.delete_subject("a") == [1]
    assert code(r.versions, "a") == 40401 and r.list_subjects(deleted=True) == ["a"]
    assert code(r.delete_subject, "a") == 40404
    assert r.register("a", None, S1, []) == 1  # a soft-deleted subject takes versions again: version 3
    assert r.versions("a") == [3]
    assert r.delete_subject("a") == [3] and r.delete_subject("a", permanent=True) == [1, 2, 3]
    assert r.list_subjects(deleted=True) == []
    # a second state rebuilt from the same records agrees
    again = SchemaRegistry()
    for i, (k, v) in enumerate(log):
        again.apply(k, v, i)
    assert again.list_subjects(deleted=True) == [] and again.max_id == r.max_id == 2
    assert again.get_config("a", default_to_global=True) == "BACKWARD"  # the subject's config went with it
    assert code(again.register, "x", None, S1, []) == 50003  # a state without a writer


def test_references():
    r, _ = in_memory()
    addr = json.dumps(
        {"type": "record", "name": "Address", "namespace": "d", "fields": [{"name": "s", "type": "string"}]}
    )
    user = json.dumps(
        {"type": "record", "name": "User", "namespace": "d", "fields": [{"name": "home", "type": "d.Address"}]}
    )
    r.register("address", None, addr, [])
    refs = [{"name": "d.Address", "subject": "address", "version": 1}]
    uid = r.register("user", None, user, refs)
    assert r.get_by_id(uid)[2] == refs
    assert r.lookup("user", None, user, refs).schema_id == uid
    assert code(r.register, "user2", None, user, []) == 42201  # unresolved name
    assert code(r.register, "user3", None, user, [{"name": "d.Address", "subject": "address", "version": 5}]) == 42201
    assert code(r.delete_subject, "address") == 42206  # still referenced
    assert (
        code(r.register, "user4", None, user, [{"name": "d.Address", "subject": "address", "version": "latest"}])
        == 42201
    )


def test_properties():
    props = parse_properties(
        "# comment\nlisteners=http://127.0.0.1:8181\nkafkastore.bootstrap.servers = h:9092\n"
        "kafkastore.security.protocol: SASL_SSL\nschema.compatibility.level=full\n"
    )
    c = RegistryConfig.from_properties(props)
    assert (c.host, c.port, c.topic, c.level, c.advertised_url) == (
        "127.0.0.1",
        8181,
        "_schemas",
        "FULL",
        "http://127.0.0.1:8181",
    )
    assert c.kafkastore["security.protocol"] == "SASL_SSL"
    with pytest.raises(RegistryConfigError):
        RegistryConfig.from_properties({"listeners": "http://h:1"})
    with pytest.raises(RegistryConfigError):
        RegistryConfig.from_properties({"kafkastore.bootstrap.servers": "h:1", "schema.compatibility.level": "x"})
