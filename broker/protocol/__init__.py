"""Kafka wire protocol codec (flexible versions of KIP-482 included), pure code.

Bodies are plain dicts keyed by the snake_case of the field names in Kafka's JSON message
schemas (see :mod:`pyklog.broker.protocol.messages` for the transcribed schemas and the field names
that changed across Kafka releases); arrays are lists of dicts.  Encoding: a missing field
takes the schema default, fields absent from the version are ignored.  Decoding: only the
version's fields appear; ``records`` values are zero-copy memoryview slices of the frame.
Malformed input raises :class:`broker.errors.InvalidRequestError`, a version outside
:data:`SUPPORTED` :class:`broker.errors.UnsupportedVersionError`.

Example::

    frame = encode_request(ApiKey.METADATA, 8, 7, "me", {"topics": None})
    header, off = decode_request_header(frame[4:])
    body = decode_request(header, frame[4:], off)
"""

from pyklog.broker.protocol.api import (
    RequestHeader,
    api_versions_body,
    api_versions_error_response,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_request_chunks,
    encode_response,
    encoded_size,
    is_flexible,
    request_header_version,
    response_header_version,
)
from pyklog.broker.protocol.messages import API_NAMES, FLEXIBLE, SCHEMAS, SUPPORTED, ApiKey, api_name
from pyklog.broker.protocol.schema import Field, snake_case
from pyklog.broker.protocol.types import FileRegion

__all__ = [
    "API_NAMES",
    "FLEXIBLE",
    "ApiKey",
    "Field",
    "FileRegion",
    "RequestHeader",
    "SCHEMAS",
    "SUPPORTED",
    "api_name",
    "api_versions_body",
    "api_versions_error_response",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_request_chunks",
    "encode_response",
    "is_flexible",
    "request_header_version",
    "response_header_version",
    "encoded_size",
    "snake_case",
]
