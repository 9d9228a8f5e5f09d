"""The registry's errors: an HTTP status plus Confluent's ``error_code`` and message.

Confluent's Schema Registry answers every error with ``{"error_code": <int>, "message": <str>}``;
the error code's first three digits are the HTTP status.  The codes clients look at:

=====  ==========================================================================
40101  unauthorized
40401  subject not found
40402  version not found
40403  schema not found
40404  subject soft-deleted (a soft delete of a soft-deleted subject)
40405  subject not soft-deleted (a hard delete before the soft delete)
40407  schema version not soft-deleted
40408  subject-level compatibility not configured
40901  incompatible schema (Confluent answers status 409 with error_code 409)
42201  invalid schema
42202  invalid version
42203  invalid compatibility level
42205  operation not permitted
50001  error in the backend data store
50002  operation timed out
50003  error while forwarding the request to the primary
=====  ==========================================================================
"""

from __future__ import annotations


class SchemaRegistryError(Exception):
    """An error answered to the client: ``status`` (HTTP), ``error_code`` (Confluent's), ``message``."""

    def __init__(self, error_code: int, message: str, status: int | None = None):
        super().__init__(message)
        self.error_code = int(error_code)
        self.message = message
        self.status = status if status is not None else int(str(self.error_code)[:3])

    def body(self) -> dict:
        return {"error_code": self.error_code, "message": self.message}


def subject_not_found(subject: str) -> SchemaRegistryError:
    return SchemaRegistryError(40401, f"Subject '{subject}' not found.")


def version_not_found(subject: str, version) -> SchemaRegistryError:
    return SchemaRegistryError(40402, f"Version {version} not found.")


def schema_not_found(what: str = "Schema not found") -> SchemaRegistryError:
    return SchemaRegistryError(40403, what)


def invalid_schema(why: str) -> SchemaRegistryError:
    return SchemaRegistryError(42201, f"Invalid schema: {why}")


def invalid_version(version) -> SchemaRegistryError:
    return SchemaRegistryError(
        42202,
        f"The specified version '{version}' is not a valid version id. Allowed values are between "
        '[1, 2^31-1] and the string "latest"',
    )


def invalid_compatibility_level(level) -> SchemaRegistryError:
    return SchemaRegistryError(
        42203,
        f"Invalid compatibility level. Valid values are none, backward, forward, full, "
        f"backward_transitive, forward_transitive, and full_transitive (got {level!r})",
    )


def incompatible(subject: str, details: list[str]) -> SchemaRegistryError:
    return SchemaRegistryError(
        409,
        f'Schema being registered is incompatible with an earlier schema for subject "{subject}", details: {details}',
        status=409,
    )


def store_error(why: str) -> SchemaRegistryError:
    return SchemaRegistryError(50001, f"Error in the backend data store: {why}")


def timeout_error(why: str) -> SchemaRegistryError:
    return SchemaRegistryError(50002, f"Operation timed out: {why}")


def forward_error(why: str) -> SchemaRegistryError:
    return SchemaRegistryError(50003, f"Error while forwarding the request to the primary: {why}")
