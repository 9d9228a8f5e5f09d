"""Schema types and compatibility levels: one entry point over the Avro, JSON Schema and Protobuf rules.

:func:`parse_schema` checks a schema of a type (``AVRO`` when none is given, ``JSON``, ``PROTOBUF``)
with the texts of its references and returns a :class:`ParsedSchema`; :func:`check_compatibility`
applies a level to a new schema and the subject's live versions (oldest first):

====================  ==========================================================
BACKWARD              the new schema reads data written with the latest version
BACKWARD_TRANSITIVE   ... with every version
FORWARD               the latest version reads data written with the new schema
FORWARD_TRANSITIVE    every version reads data written with the new schema
FULL                  BACKWARD and FORWARD
FULL_TRANSITIVE       BACKWARD_TRANSITIVE and FORWARD_TRANSITIVE
NONE                  no check
====================  ==========================================================

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyklog.connector.schema_registry import avro, json_schema, protobuf

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")
LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)
DEFAULT_LEVEL = "BACKWARD"


class InvalidSchemaError(ValueError):
    """The schema does not parse as its type (the registry answers 42201)."""


@dataclass
class ParsedSchema:
    schema_type: str
    text: str
    value: object  # Avro/JSON: the JSON value; Protobuf: a protobuf.ProtoFile
    references: list = field(default_factory=list)  # the referenced schemas' values (Avro)


def parse_schema(schema_type: str | None, text: str, reference_texts: list | None = None) -> ParsedSchema:
    """``reference_texts``: the texts of the referenced schemas, dependencies first."""
    schema_type = (schema_type or "AVRO").upper()
    if schema_type not in SCHEMA_TYPES:
        raise InvalidSchemaError(f"unknown schema type {schema_type!r}, expected one of {', '.join(SCHEMA_TYPES)}")
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchemaError("the schema is empty")
    try:
        if schema_type == "AVRO":
            refs = [avro.parse(t, None) for t in reference_texts or []]
            return ParsedSchema(schema_type, text, avro.parse(text, refs), refs)
        if schema_type == "JSON":
            return ParsedSchema(schema_type, text, json_schema.parse(text))
        return ParsedSchema(schema_type, text, protobuf.parse(text))
    except (avro.AvroSchemaError, json_schema.JsonSchemaError, protobuf.ProtobufSchemaError) as e:
        raise InvalidSchemaError(str(e)) from None


def can_read(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    """The reasons ``reader`` cannot read what ``writer`` wrote (empty: it can)."""
    if reader.schema_type != writer.schema_type:
        return [f"{{errorType:'SCHEMA_TYPE_CHANGED', description:'{writer.schema_type} -> {reader.schema_type}'}}"]
    if reader.schema_type == "AVRO":
        return avro.check(reader.value, writer.value, reader.references, writer.references)
    if reader.schema_type == "JSON":
        return json_schema.check(reader.value, writer.value)
    return protobuf.check(reader.value, writer.value)  # type: ignore[arg-type]


def check_compatibility(level: str, new: ParsedSchema, previous: list[ParsedSchema]) -> list[str]:
    """The reasons ``new`` breaks ``level`` against ``previous`` (live versions, oldest first)."""
    level = level.upper()
    if level == "NONE" or not previous:
        return []
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    errors: list[str] = []
    for old in reversed(against):
        if level.startswith(("BACKWARD", "FULL")):
            errors += can_read(new, old)
        if level.startswith(("FORWARD", "FULL")):
            errors += can_read(old, new)
        if errors:
            break
    return errors
