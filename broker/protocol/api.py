"""Request/response framing over the compiled schemas.

Frames on the wire::

    size      int32   bytes that follow
    request header v1:  api_key int16, api_version int16, correlation_id int32,
                        client_id string (int16 length, -1 = null)
    request header v2:  header v1, then a tagged field section (flexible versions; the
                        client_id stays an int16-length string, KIP-482)
    response header v0: correlation_id int32
    response header v1: correlation_id int32, then a tagged field section (flexible versions)
    body      the message for (api_key, api_version)

A flexible version (``version >= FLEXIBLE[api_key]``, Kafka's ``flexibleVersions``) uses request
header v2 and response header v1, except that an ApiVersions response always uses header v0
(KIP-511: a client that does not know the broker's versions must still read it).  Functions
taking a ``frame`` expect it WITHOUT the 4-byte size prefix; functions producing frames
include it.  Everything here is pure and thread-safe.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, cast

from pyklog.broker.errors import InvalidRequestError, PyklogError, UnsupportedVersionError
from pyklog.broker.protocol.messages import FLEXIBLE, SCHEMAS, SUPPORTED, ApiKey, api_name
from pyklog.broker.protocol.schema import (
    Field,
    compile_decoder,
    compile_encoder,
    explain_encode_error,
    wrap_decode_error,
)
from pyklog.broker.protocol.types import FileRegion, read_uvarint

_HEADER_V1 = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_SIZE = struct.Struct(">i")
_SIZE_CORR = struct.Struct(">ii")

Chunk = bytes | bytearray | memoryview | FileRegion


def is_flexible(api_key: int, version: int) -> bool:
    """Whether ``version`` of the API is a flexible version (KIP-482)."""
    first = FLEXIBLE.get(api_key)
    return first is not None and version >= first


def request_header_version(api_key: int, version: int) -> int:
    """Kafka's request header version for a request: 2 in flexible versions, else 1; 0 (no
    client_id, Kafka 0.8's) for ControlledShutdown v0."""
    if api_key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
        return 0
    return 2 if is_flexible(api_key, version) else 1


def response_header_version(api_key: int, version: int) -> int:
    """Kafka's response header version: 1 in flexible versions, else 0; ApiVersions always 0."""
    return 1 if is_flexible(api_key, version) and api_key != ApiKey.API_VERSIONS else 0


class RequestHeader(NamedTuple):
    """Request header v1 or v2 (the tagged fields of v2 are skipped: Kafka defines none a
    broker must read).  ``api_key`` is an :class:`ApiKey` when known, else the raw int."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None

    @property
    def api_name(self) -> str:
        return api_name(self.api_key)


class _Lazy:
    """The codec of each version of one API message, compiled on first use (compiling every
    codec at import costs ~0.4 s in every process, e.g. each Spark Python worker).  Thread-safe:
    two threads may compile the same codec at once, and either result is kept."""

    __slots__ = ("_compile", "_args", "_min", "_cache", "_flex")

    def __init__(
        self,
        compile_fn: Callable[..., Callable[..., Any]],
        name: str,
        schema: Sequence[Field],
        min_version: int,
        max_version: int,
        flexible_from: int | None,
        **kw: Any,
    ) -> None:
        self._compile = compile_fn
        self._args = (name, schema, kw)
        self._min = min_version
        self._flex = 1 << 30 if flexible_from is None else flexible_from
        self._cache: list[Callable[..., Any] | None] = [None] * (max_version - min_version + 1)

    def __len__(self) -> int:
        return len(self._cache)

    def __getitem__(self, i: int) -> Callable[..., Any]:
        fn = self._cache[i]
        if fn is None:
            name, schema, kw = self._args
            v = self._min + i
            fn = self._cache[i] = self._compile(name, schema, v, flexible=v >= self._flex, **kw)
        return fn


class _Api:
    """Codecs of one API for every supported version (each compiled on first use)."""

    __slots__ = (
        "key",
        "name",
        "min_version",
        "max_version",
        "req_dec",
        "req_enc",
        "resp_dec",
        "resp_enc",
        "req_dec_checked",
        "resp_dec_checked",
        "flexible_from",
    )

    def __init__(self, key: ApiKey) -> None:
        name, req, resp = SCHEMAS[key]
        lo, hi = SUPPORTED[key]
        self.key = key
        self.name = name
        self.min_version = lo
        self.max_version = hi
        fx = self.flexible_from = FLEXIBLE.get(key)
        # fast decoders (struct's own bounds checks) + checked twins that name the broken field
        self.req_dec = _Lazy(compile_decoder, f"{name}Request", req, lo, hi, fx, checked=False)
        self.req_dec_checked = _Lazy(compile_decoder, f"{name}Request", req, lo, hi, fx)
        self.req_enc = _Lazy(compile_encoder, f"{name}Request", req, lo, hi, fx)
        self.resp_dec = _Lazy(compile_decoder, f"{name}Response", resp, lo, hi, fx, checked=False)
        self.resp_dec_checked = _Lazy(compile_decoder, f"{name}Response", resp, lo, hi, fx)
        self.resp_enc = _Lazy(compile_encoder, f"{name}Response", resp, lo, hi, fx)


_APIS: dict[int, _Api] = {int(k): _Api(k) for k in SUPPORTED}


def _api(api_key: int, version: int) -> _Api:
    api = _APIS.get(int(api_key))
    if api is None:
        raise InvalidRequestError(f"unknown or unsupported api key {int(api_key)} ({api_name(api_key)})")
    if not api.min_version <= version <= api.max_version:
        raise UnsupportedVersionError(
            f"{api.name} v{version} is not supported (supported versions {api.min_version}-{api.max_version})"
        )
    return api


def _as_view(frame: Any) -> memoryview:
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


# ------------------------------------------------------------------------------- requests


def encode_request_chunks(
    api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict
) -> list[Chunk]:
    """Like :func:`encode_request` but returns the frame as chunks (size prefix included)
    without joining them, so large ``records`` values are never copied (``socket.sendmsg``)."""
    api = _api(api_key, version)
    if api.key == ApiKey.METADATA and version == 0 and body.get("topics", ()) is None:
        body = dict(body, topics=[])  # v0 has no null: an empty array means all topics
    out = bytearray(_HEADER_V1.size + 4)
    if client_id is None:
        cid = b""
        clen = -1
    elif isinstance(client_id, str):
        cid = client_id.encode("utf-8")
        clen = len(cid)
    else:
        raise InvalidRequestError(
            f"cannot encode request header: client_id must be str or None, got {type(client_id).__name__}"
        )
    try:
        _HEADER_V1.pack_into(out, 4, int(api_key), version, correlation_id, clen)
    except (struct.error, TypeError) as e:
        raise InvalidRequestError(f"cannot encode request header: {e} (correlation_id={correlation_id!r})") from None
    out += cid
    if request_header_version(api_key, version) == 0:
        del out[4 + _HEADER_V1.size - 2 :]  # header v0: no client_id at all
    if api.flexible_from is not None and version >= api.flexible_from:
        out += b"\x00"  # request header v2: no tagged fields
    return _encode_body(api, version, body, out, request=True)


def encode_request(api_key: int, version: int, correlation_id: int, client_id: str | None, body: dict) -> bytes:
    """The whole request frame (size prefix included) as bytes."""
    chunks = encode_request_chunks(api_key, version, correlation_id, client_id, body)
    # only a response's records may be a FileRegion: a request's chunks are all bytes-like
    return bytes(chunks[0]) if len(chunks) == 1 else b"".join(cast(list[bytes], chunks))


def decode_request_header(frame: Any) -> tuple[RequestHeader, int]:
    """Parse request header v1 or v2 from ``frame`` (without the size prefix).

    Returns the header and the offset of the body.  Any api key decodes (unknown keys stay
    ints, read as header v1) so the server can answer or close; ``decode_request`` then rejects
    them.  A known API at a flexible version (also one pyklog does not serve, e.g. a newer
    ApiVersions) is read as header v2: its tagged fields are skipped.
    """
    n = len(frame) if not isinstance(frame, memoryview) else frame.nbytes
    if n < _HEADER_V1.size:
        raise InvalidRequestError(f"malformed request header: expected at least {_HEADER_V1.size} bytes, got {n}")
    key, version, corr, clen = _HEADER_V1.unpack_from(frame, 0)
    pos = _HEADER_V1.size
    if key == ApiKey.CONTROLLED_SHUTDOWN and version == 0:
        return RequestHeader(ApiKey.CONTROLLED_SHUTDOWN, 0, corr, None), _HEADER_V1.size - 2  # header v0
    if clen == -1:
        client_id = None
    elif clen < 0:
        raise InvalidRequestError(f"malformed request header: client_id length {clen} (expected -1 or >= 0)")
    elif pos + clen > n:
        raise InvalidRequestError(f"malformed request header: client_id length {clen} but only {n - pos} bytes left")
    else:
        client_id = str(frame[pos : pos + clen], "utf-8", "replace")
        pos += clen
    try:
        key = ApiKey(key)
    except ValueError:
        pass
    else:
        if is_flexible(key, version):
            pos = _skip_tagged_fields(frame, pos, n, "request header v2")
    return RequestHeader(key, version, corr, client_id), pos


def _skip_tagged_fields(frame: Any, pos: int, end: int, what: str) -> int:
    """Skip a tagged field section (count, then tag, size, value each) of a header."""
    try:
        count, pos = read_uvarint(frame, pos, end)
        for _ in range(count):
            _tag, pos = read_uvarint(frame, pos, end)
            size, pos = read_uvarint(frame, pos, end)
            if size > end - pos:
                raise ValueError(f"tagged field of {size} bytes, only {end - pos} left")
            pos += size
    except ValueError as e:
        raise InvalidRequestError(f"malformed {what}: tagged fields: {e}") from None
    return pos


def decode_request(header: RequestHeader, frame: Any, body_offset: int) -> dict:
    """Decode the request body of ``frame`` (without size prefix) starting at ``body_offset``.

    Raises InvalidRequestError (unknown api key, truncated/garbage/trailing bytes) or
    UnsupportedVersionError (version outside SUPPORTED).  ``records`` values are memoryview
    slices of ``frame`` (zero copy): keep ``frame`` alive and unmodified while they are used.
    """
    api = _api(header.api_key, header.api_version)
    mv = _as_view(frame)
    version = header.api_version
    # Kafka's broker does not check that a request's bytes were all read, and librdkafka 2.x relies
    # on it in flexible versions (an all-topics Metadata v12 request carries 3 stray zero bytes after
    # the null topic array's count): bytes after a flexible request's body are ignored, as Kafka does.
    lenient = api.flexible_from is not None and version >= api.flexible_from
    return _decode_body(api, version, mv, body_offset, mv.nbytes, "Request", trailing_ok=lenient)


# ------------------------------------------------------------------------------- responses


def _encode_body(api: _Api, version: int, body: dict, out: bytearray, *, request: bool) -> list[Chunk]:
    """Append ``body`` to ``out`` (the frame's size prefix and header) with the request or
    response encoder of ``api`` v``version``; return the finished chunks (see :func:`_finish`)."""
    chunks: list[Chunk] = []
    enc = (api.req_enc if request else api.resp_enc)[version - api.min_version]
    try:
        out = enc(body, out, chunks)
    except PyklogError:
        raise
    except Exception as e:  # noqa: BLE001 - a bad value in body: explain which field
        kind, schema = ("Request", SCHEMAS[api.key][1]) if request else ("Response", SCHEMAS[api.key][2])
        raise explain_encode_error(f"{api.name}{kind}", schema, version, body, e) from None
    if out or not chunks:
        chunks.append(out)
    _finish(chunks)
    return chunks


def _finish(chunks: list[Chunk]) -> None:
    """Patch the size prefix (first 4 bytes of chunks[0]) with the frame length and turn the
    encoder's own bytearrays into bytes.  Encoders append (encoded part, records value) pairs and
    then the last encoded part, so encoded parts sit at even indexes and the caller's records
    values (left as given, never copied) at odd ones."""
    _SIZE.pack_into(cast(bytearray, chunks[0]), 0, encoded_size(chunks) - 4)  # the encoder's own
    for i in range(0, len(chunks), 2):
        chunks[i] = bytes(chunks[i])


def encoded_size(chunks: list[Chunk]) -> int:
    """Total bytes of ``chunks`` (FileRegion counts its ``size``)."""
    total = 0
    for c in chunks:
        if c.__class__ is FileRegion:
            total += c.size
        elif c.__class__ is memoryview:
            total += c.nbytes
        else:
            total += len(c)
    return total


def encode_response(api_key: int, version: int, correlation_id: int, body: dict) -> list[Chunk]:
    """The response frame (size prefix + header v0/v1 + body) as a list of chunks.

    Chunks are ``bytes`` for the encoded parts, ``records`` values of at least 1 KiB exactly as
    given (not copied: bytes, or whatever bytes-like object the caller passed) and
    :class:`FileRegion` objects (send with ``os.sendfile``).  Without FileRegions
    ``b"".join(chunks)`` is the frame.
    """
    api = _api(api_key, version)
    out = bytearray(8)
    _SIZE_CORR.pack_into(out, 0, 0, correlation_id)
    if api.flexible_from is not None and version >= api.flexible_from and api.key != ApiKey.API_VERSIONS:
        out += b"\x00"  # response header v1: no tagged fields
    return _encode_body(api, version, body, out, request=False)


def decode_response(api_key: int, version: int, frame: Any) -> tuple[int, dict]:
    """Decode a response frame (without size prefix): ``(correlation_id, body)``.

    An ApiVersions response carrying UNSUPPORTED_VERSION (35) is decoded in the v0 layout
    whatever ``version`` was requested (KIP-511: brokers answer unknown versions that way).
    """
    api = _api(api_key, version)
    mv = _as_view(frame)
    end = mv.nbytes
    if end < 4:
        raise InvalidRequestError(
            f"malformed {api.name}Response v{version}: frame of {end} bytes has no correlation id"
        )
    corr = _SIZE.unpack_from(mv, 0)[0]
    if api.key == ApiKey.API_VERSIONS and version > 0:
        # KIP-511: a broker answers an ApiVersions version it does not know in the v0 layout
        # (error 35); like Kafka's client, fall back to v0 when the requested layout does not fit.
        if end >= 6 and struct.unpack_from(">h", mv, 4)[0] == UnsupportedVersionError.code:
            version = 0
        else:
            try:
                return corr, _decode_body(api, version, mv, 4, end, "Response")
            except InvalidRequestError as first:
                try:
                    return corr, _decode_body(api, 0, mv, 4, end, "Response")
                except InvalidRequestError:
                    raise first from None
    pos = 4
    if api.flexible_from is not None and version >= api.flexible_from:
        pos = _skip_tagged_fields(mv, pos, end, f"{api.name}Response v{version} header v1")
    return corr, _decode_body(api, version, mv, pos, end, "Response")


def _decode_body(
    api: _Api, version: int, mv: memoryview, pos: int, end: int, kind: str, trailing_ok: bool = False
) -> dict:
    """Decode with the fast decoder; on a low-level error re-run the checked one for the message.
    ``end`` must be ``mv.nbytes`` (the fast decoders rely on struct's bounds checks)."""
    i = version - api.min_version
    dec = api.req_dec[i] if kind == "Request" else api.resp_dec[i]
    start = pos
    try:
        body, pos = dec(mv, pos, end)
    except PyklogError:
        raise
    except Exception as e:  # noqa: BLE001 - any failure of the fast decoder: the checked one says where
        checked = api.req_dec_checked[i] if kind == "Request" else api.resp_dec_checked[i]
        try:
            checked(mv, start, end)
        except PyklogError:
            raise
        except Exception as e2:  # noqa: BLE001 - wrapped into the protocol's decode error
            raise wrap_decode_error(f"{api.name}{kind} v{version}", e2) from None
        raise wrap_decode_error(f"{api.name}{kind} v{version}", e) from None
    if pos != end and not trailing_ok:
        raise InvalidRequestError(f"malformed {api.name}{kind} v{version}: {end - pos} trailing bytes after the body")
    return body


# ------------------------------------------------------------------------------- ApiVersions


def api_versions_body(error_code: int = 0, throttle_time_ms: int = 0) -> dict:
    """An ApiVersions response body advertising SUPPORTED (sorted by api key)."""
    return {
        "error_code": error_code,
        "api_keys": [
            {"api_key": int(k), "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(SUPPORTED.items())
        ],
        "throttle_time_ms": throttle_time_ms,
    }


_API_VERSIONS_ERROR = b"".join(
    cast(list[bytes], encode_response(ApiKey.API_VERSIONS, 0, 0, api_versions_body(UnsupportedVersionError.code)))
)


def api_versions_error_response(correlation_id: int) -> bytes:
    """The whole frame (size prefix included) answering an ApiVersions request of a version
    pyklog does not support: v0 layout, error UNSUPPORTED_VERSION (35), our ranges (KIP-511)."""
    frame = bytearray(_API_VERSIONS_ERROR)
    _SIZE.pack_into(frame, 4, correlation_id)
    return bytes(frame)
