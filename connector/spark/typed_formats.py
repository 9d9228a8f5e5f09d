"""What the typed formats beyond Avro share: Spark DDL of an Arrow type, the reader schema's subject,
and writer schema lookups by id that tell a bad record from a registry that cannot be reached.

:func:`spark_ddl_of` renders any Arrow type the typed columns produce as Spark DDL.
:func:`registry_version` answers the reader schema's version of a subject (driver side, a
ConfigError naming the registry and the subject when there is none).  :class:`IdLookup` looks writer
schemas up by id once per batch and id: an id the registry does not know (40403) is a property of
the record (FAILFAST names it, PERMISSIVE reads the record as a bad row), a registry that cannot be
reached after the client's bounded retries fails the read in every mode, naming the URL.
"""

from __future__ import annotations

import pyarrow as pa

from pyklog.broker.errors import ConfigError, PyklogError

TIMESTAMP = pa.timestamp("us", tz="UTC")


class RegistryUnavailable(PyklogError):
    """The schema registry could not answer (after the client's retries): not a bad record."""


def _quote(name: str) -> str:
    return name.replace("`", "``")


def spark_ddl_of(t: pa.DataType) -> str:
    """The Spark DDL of an Arrow type (the types the typed columns produce)."""
    if pa.types.is_struct(t):
        fields = (t.field(i) for i in range(t.num_fields))
        return "struct<" + ",".join(f"`{_quote(f.name)}`:{spark_ddl_of(f.type)}" for f in fields) + ">"
    if pa.types.is_map(t):
        return f"map<{spark_ddl_of(t.key_type)},{spark_ddl_of(t.item_type)}>"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return f"array<{spark_ddl_of(t.value_type)}>"
    if pa.types.is_decimal(t):
        return f"decimal({t.precision},{t.scale})"
    if pa.types.is_timestamp(t):
        return "timestamp"
    simple = {
        pa.bool_(): "boolean",
        pa.int32(): "int",
        pa.int64(): "bigint",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.binary(): "binary",
        pa.date32(): "date",
    }
    if t in simple:
        return simple[t]
    raise ConfigError(f"no Spark type for the Arrow type {t}")


def default_subject(column: str, subject: str | None, topics: tuple) -> str:
    if subject:
        return subject
    if len(topics) != 1:
        raise ConfigError(
            f"option {column}Subject is needed: the default subject (TopicNameStrategy, "
            f"<topic>-{column}) needs exactly one topic in 'subscribe'"
        )
    return f"{topics[0]}-{column}"


_CLIENTS: dict = {}


def client(url: str):
    """One registry client per URL and process (its caches shared by the worker's tasks)."""
    c = _CLIENTS.get(url)
    if c is None:
        from pyklog.connector.schema_registry.client import SchemaRegistryClient

        c = _CLIENTS[url] = SchemaRegistryClient(url)
    return c


def registry_version(column: str, url: str, subject: str | None, version: str | None, topics: tuple, kind: str) -> dict:
    """The registry's answer for the reader schema's version (``{"id", "schema", "schemaType"?,
    "references"?}``), checked to be of ``kind`` (``PROTOBUF`` / ``JSON``)."""
    from pyklog.connector.schema_registry.errors import SchemaRegistryError

    subject = default_subject(column, subject, topics)
    try:
        found = client(url).get_version(subject, version or "latest")
    except SchemaRegistryError as e:
        raise ConfigError(f"the schema registry at {url} has no usable schema for subject {subject!r}: {e}") from e
    got = found.get("schemaType", "AVRO")
    if got != kind:
        raise ConfigError(f"subject {subject!r} holds a {got} schema, not {kind}")
    return found


def unknown_id_message(url: str, schema_id: int, e) -> str:
    return f"schema id {schema_id} is not in the schema registry at {url} (error {e.error_code}: {e.message})"


class IdLookup:
    """Writer schema lookups of one batch: each id asked once; ``get(id)`` returns the registry's
    answer, raises ValueError for an id it does not know (a bad record) or RegistryUnavailable."""

    def __init__(self, url: str, kind: str, fmt: str | None = None):
        self.url, self.kind, self.fmt = url, kind, fmt
        self._seen: dict = {}

    def get(self, schema_id: int) -> dict:
        got = self._seen.get(schema_id)
        if got is None:
            got = self._seen[schema_id] = self._ask(schema_id)
        if isinstance(got, Exception):
            raise got
        return got

    def _ask(self, schema_id: int):
        from pyklog.connector.schema_registry.errors import SchemaRegistryError

        try:
            found = client(self.url).get_schema(schema_id, self.fmt)
        except SchemaRegistryError as e:
            if e.status >= 500 or e.status in (401, 403):
                raise RegistryUnavailable(
                    f"the schema registry at {self.url} did not answer for schema id {schema_id}: {e}"
                ) from None
            return ValueError(unknown_id_message(self.url, schema_id, e))
        got = found.get("schemaType", "AVRO")
        if got != self.kind:
            return ValueError(f"schema id {schema_id} is a {got} schema, not {self.kind}")
        return found
