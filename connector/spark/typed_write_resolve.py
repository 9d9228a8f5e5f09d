"""Driver side of the sink's registered schemas: the registry steps every ``*-confluent`` format
shares (:func:`resolve_registered`: ``auto.register.schemas``, ``<column>SchemaId``,
``<column>SchemaVersion``, ``use.latest.version``, the subject name strategy), and the JSON Schema
and Protobuf schemas (given or derived) with the column's type checked against them, before any
task runs (Avro's are in :mod:`.typed_write`).  A Protobuf schema importing ``google/protobuf/*.proto`` registers the import under
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


class RegistryKind:
    """What resolving a ``*-confluent`` column's schema needs of its schema type (Avro, JSON Schema,
    Protobuf); :func:`resolve_registered` runs the steps they share."""

    #: the registry's ``schemaType``
    name = "AVRO"

    def local(self) -> tuple[str, str | None]:
        """The schema given or derived for the column, and its record's full name (for the record
        strategies)."""
        raise NotImplementedError

    def check_local(self, schema: str) -> None:
        """ConfigError naming the field when the column's type cannot be written with ``schema``."""
        raise NotImplementedError

    def references(self, client, schema: str, register: bool) -> list | None:
        return None

    def from_registry(self, found: dict, schema_id: int, subject: str | None, what: str):
        """The WriteFormat of a schema the registry answered (``found``: its answer)."""
        raise NotImplementedError

    def registered(self, client, schema: str, schema_id: int, subject: str):
        """The WriteFormat of ``schema`` once registered (or found) under ``subject``."""
        raise NotImplementedError


def resolve_registered(column: str, opts: dict, topic: str | None, kind: RegistryKind):
    """The registry steps of every wire format, on the driver before any task runs: a pinned
    ``<column>SchemaId``; a version of the subject (``<column>SchemaVersion`` or
    ``use.latest.version``); else the column's own schema, checked against the column's type, then
    registered under the subject (``auto.register.schemas``: registering is the compatibility check,
    a refusal is the registry's 409) or looked up there.  The subject: ``<column>Subject`` or the
    subject name strategy's.  A registry error is one ConfigError naming the subject and the URL."""
    from pyklog.connector.schema_registry.errors import SchemaRegistryError
    from pyklog.connector.spark.typed import _client, subject_for
    from pyklog.connector.spark.typed_write_formats import _flag

    url = opts.get("schema.registry.url")
    if not url:
        raise ConfigError(f"option {column}Format={opts.get(f'{column}format')} needs option schema.registry.url")
    client = _client(url)
    subject = None
    pinned_id = opts.get(f"{column}schemaid")
    version = opts.get(f"{column}schemaversion")
    latest = _flag(opts, "use.latest.version", False)
    register = _flag(opts, "auto.register.schemas", True)
    try:
        if pinned_id is not None:
            try:
                schema_id = int(pinned_id)
            except ValueError:
                raise ConfigError(
                    f"option {column}SchemaId: expected a schema id (an int), read {pinned_id!r}"
                ) from None
            return kind.from_registry(client.get_schema(schema_id), schema_id, None, f"schema id {schema_id}")
        schema, record = kind.local()
        subject = opts.get(f"{column}subject") or subject_for(
            column, (topic,) if topic else (), opts.get(f"{column}.subject.name.strategy"), record, sink=True
        )
        if version is not None or latest:
            found = client.get_version(subject, version or "latest")
            return kind.from_registry(found, int(found["id"]), subject, f"subject {subject!r}")
        kind.check_local(schema)
        refs = kind.references(client, schema, register)
        if register:
            schema_id = client.register(subject, schema, kind.name, refs)
        else:
            schema_id = int(client.lookup(subject, schema, kind.name, refs)["id"])
        return kind.registered(client, schema, schema_id, subject)
    except SchemaRegistryError as e:
        of = f" of subject {subject!r}" if subject else ""
        # the client's own error when the registry cannot be reached names the URL already
        said = str(e) if url in str(e) else f"the schema registry at {url} answered error {e.error_code}: {e}"
        raise ConfigError(f"pyklog sink: the {column} schema{of}: {said}; nothing was written") from e


def registry_type_check(found: dict, kind: str, what: str) -> None:
    got = found.get("schemaType", "AVRO")
    if got != kind:
        raise ConfigError(f"{what} is a {got} schema, not {kind}")


def resolve_json_or_protobuf(column: str, field, opts: dict, topic: str | None, fmt: str):
    """The WriteFormat of a ``json`` / ``json-confluent`` / ``protobuf`` / ``protobuf-confluent`` column."""
    from pyklog.connector.spark.typed_protobuf import _reader, registry_files
    from pyklog.connector.spark.typed_write_formats import WriteFormat, check_json_writable, check_proto_writable

    json_kind = fmt.startswith("json")
    message = opts.get(f"{column}messagename")
    if message and json_kind:
        raise ConfigError(f"option {column}MessageName is for the Protobuf formats, not {fmt}")

    def checked(schema: str, schema_id=None, subject=None, indexes=None):
        if json_kind:
            check_json_writable(field.dataType, json.loads(schema), column)
        else:
            check_proto_writable(field.dataType, _reader(schema)[0], column)
        return WriteFormat(column, fmt, schema, schema_id, subject, indexes)

    if not fmt.endswith("-confluent"):
        if json_kind:
            return checked(_json_schema(column, field, opts)[0])
        try:
            text, _name, _indexes = _proto_plan(_proto_text(column, field, opts), message)
        except ConfigError as e:
            raise ConfigError(f"option {column}Schema: {e}") from e
        return checked(text)

    class Kind(RegistryKind):
        name = "JSON" if json_kind else "PROTOBUF"

        def local(self):
            if json_kind:
                return _json_schema(column, field, opts)
            schema = _proto_text(column, field, opts)
            try:
                self.plan_text, record, _indexes = _proto_plan(schema, message)
            except ConfigError as e:
                raise ConfigError(f"option {column}Schema: {e}") from e
            return schema, record

        def check_local(self, schema):
            if json_kind:
                check_json_writable(field.dataType, json.loads(schema), column)
            else:
                check_proto_writable(field.dataType, _reader(self.plan_text)[0], column)

        def references(self, client, schema, register):
            return [] if json_kind else _references(client, schema, register)

        def from_registry(self, found, schema_id, subject, what):
            registry_type_check(found, self.name, what)
            if json_kind:
                return checked(json.dumps(json.loads(found["schema"])), schema_id, subject)
            files: dict = {}
            registry_files(
                opts["schema.registry.url"],
                schema_id,
                found.get("references") or [],
                f"schema-{schema_id}.proto",
                files,
            )
            text, _name, indexes = _proto_plan(files, message)
            return checked(text, schema_id, subject, indexes)

        def registered(self, client, schema, schema_id, subject):
            # the registry's text (with its references resolved) is what the executors encode with
            return self.from_registry(client.get_schema(schema_id), schema_id, subject, f"schema id {schema_id}")

    return resolve_registered(column, opts, topic, Kind())
