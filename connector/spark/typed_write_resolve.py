"""Driver side of the sink's JSON Schema and Protobuf columns: the schema (given or derived), its
registration or the pinned one (as for Avro: ``auto.register.schemas``, ``<column>SchemaId``,
``<column>SchemaVersion``, ``use.latest.version``), and the column's type checked against it, before
any task runs.  A Protobuf schema importing ``google/protobuf/*.proto`` registers the import under
a subject of the file's name and references it, as Confluent's serializers do."""

from __future__ import annotations

import base64
import json

from pyklog.broker.errors import ConfigError


def _json_schema(column: str, field, opts: dict) -> tuple[str, str | None]:
    """The JSON Schema text and its title (the record name of the record strategies)."""
    from pyklog.connector.spark.typed_write_formats import json_schema_for

    given = opts.get(f"{column}schema")
    if given:
        try:
            parsed = json.loads(given)
        except ValueError as e:
            raise ConfigError(f"option {column}Schema is not a JSON Schema (not JSON): {e}") from e
        if not isinstance(parsed, dict):
            raise ConfigError(f"option {column}Schema is not a JSON Schema (not an object)")
    else:
        record = (opts.get(f"{column}recordname") or "topLevelRecord").strip()
        parsed = json_schema_for(field.dataType, False, record, column)
    title = parsed.get("title") if isinstance(parsed.get("title"), str) else None
    return json.dumps(parsed), title


def _proto_text(column: str, field, opts: dict) -> str:
    from pyklog.connector.spark.typed_write_formats import proto_for

    given = opts.get(f"{column}schema")
    if given:
        return given
    record = (opts.get(f"{column}recordname") or "topLevelRecord").strip()
    ns, _, name = record.rpartition(".")
    return proto_for(field.dataType, name, ns)


def _proto_plan(text_or_files, message: str | None) -> tuple[str, str, tuple]:
    """``(schema text for the executors, the message's full name, its message indexes)``."""
    from pyklog.connector.spark.typed_protobuf import _reader, schema_text, text_files
    from pyklog.connector.spark.typed_write_formats import message_indexes

    files = text_files(text_or_files) if isinstance(text_or_files, str) else text_or_files
    text = schema_text(files, message)
    desc = _reader(text)[0]
    return text, desc.full_name, tuple(message_indexes(desc))


def _references(client, text: str, register: bool) -> list:
    """The references of the ``google/protobuf/*.proto`` imports of ``text``: their descriptors
    (base64, as Confluent's serializers register them) registered under the file's name, or (not
    ``register``) looked up there."""
    from pyklog.connector.schema_registry.protobuf import parse
    from pyklog.connector.spark.typed_protobuf import _well_known_file

    refs = []
    for dep in parse(text).imports:
        if not dep.startswith("google/protobuf/"):
            raise ConfigError(
                f"the Protobuf schema imports {dep!r}: the sink registers only protobuf's own imports; "
                "register the schema with its references and pin it (SchemaId / SchemaVersion)"
            )
        body = base64.b64encode(_well_known_file(dep)).decode()
        if register:
            client.register(dep, body, "PROTOBUF")
        version = int(client.lookup(dep, body, "PROTOBUF")["version"])
        refs.append({"name": dep, "subject": dep, "version": version})
    return refs


def resolve_json_or_protobuf(column: str, field, opts: dict, topic: str | None, fmt: str):
    """The WriteFormat of a ``json`` / ``json-confluent`` / ``protobuf`` / ``protobuf-confluent`` column."""
    from pyklog.connector.spark.typed import _client, subject_for
    from pyklog.connector.spark.typed_protobuf import _reader, registry_files
    from pyklog.connector.spark.typed_write_formats import WriteFormat, _flag, check_json_writable, check_proto_writable

    kind = "JSON" if fmt.startswith("json") else "PROTOBUF"
    message = opts.get(f"{column}messagename")
    if message and kind == "JSON":
        raise ConfigError(f"option {column}MessageName is for the Protobuf formats, not {fmt}")

    def checked(schema: str, schema_id=None, subject=None, indexes=None):
        if kind == "JSON":
            check_json_writable(field.dataType, json.loads(schema), column)
        else:
            check_proto_writable(field.dataType, _reader(schema)[0], column)
        return WriteFormat(column, fmt, schema, schema_id, subject, indexes)

    if not fmt.endswith("-confluent"):
        if kind == "JSON":
            return checked(_json_schema(column, field, opts)[0])
        try:
            text, _name, _indexes = _proto_plan(_proto_text(column, field, opts), message)
        except ConfigError as e:
            raise ConfigError(f"option {column}Schema: {e}") from e
        return checked(text)

    option = f"{column}Format"
    url = opts.get("schema.registry.url")
    if not url:
        raise ConfigError(f"option {option}={fmt} needs option schema.registry.url")
    from pyklog.connector.schema_registry.errors import SchemaRegistryError

    client = _client(url)
    subject = None
    pinned_id = opts.get(f"{column}schemaid")
    version = opts.get(f"{column}schemaversion")
    latest = _flag(opts, "use.latest.version", False)
    register = _flag(opts, "auto.register.schemas", True)

    def from_registry(found: dict, schema_id: int, what: str):
        got = found.get("schemaType", "AVRO")
        if got != kind:
            raise ConfigError(f"{what} is a {got} schema, not {kind}")
        if kind == "JSON":
            return checked(json.dumps(json.loads(found["schema"])), schema_id, subject)
        files: dict = {}
        registry_files(url, schema_id, found.get("references") or [], f"schema-{schema_id}.proto", files)
        text, _name, indexes = _proto_plan(files, message)
        return checked(text, schema_id, subject, indexes)

    try:
        if pinned_id is not None:
            try:
                schema_id = int(pinned_id)
            except ValueError:
                raise ConfigError(
                    f"option {column}SchemaId: expected a schema id (an int), read {pinned_id!r}"
                ) from None
            return from_registry(client.get_schema(schema_id), schema_id, f"schema id {schema_id}")
        if kind == "JSON":
            schema, record = _json_schema(column, field, opts)
            refs: list = []
        else:
            schema = _proto_text(column, field, opts)
            try:
                _text, record, _indexes = _proto_plan(schema, message)
            except ConfigError as e:
                raise ConfigError(f"option {column}Schema: {e}") from e
        subject = opts.get(f"{column}subject") or subject_for(
            column,
            (topic,) if topic else (),
            opts.get(f"{column}.subject.name.strategy"),
            record,
            sink=True,
        )
        if version is not None or latest:
            found = client.get_version(subject, version or "latest")
            return from_registry(found, int(found["id"]), f"subject {subject!r}")
        # the column's type against the schema before it is registered
        if kind == "JSON":
            check_json_writable(field.dataType, json.loads(schema), column)
        else:
            check_proto_writable(field.dataType, _reader(_text)[0], column)
            refs = _references(client, schema, register)
        if register:
            schema_id = client.register(subject, schema, kind, refs)
        else:
            schema_id = int(client.lookup(subject, schema, kind, refs)["id"])
        return from_registry(client.get_schema(schema_id), schema_id, f"schema id {schema_id}")
    except SchemaRegistryError as e:
        of = f" of subject {subject!r}" if subject else ""
        said = str(e) if url in str(e) else f"the schema registry at {url} answered error {e.error_code}: {e}"
        raise ConfigError(f"pyklog sink: the {column} schema{of}: {said}; nothing was written") from e
