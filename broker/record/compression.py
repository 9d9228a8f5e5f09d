"""Compression codecs of Kafka's record formats: gzip, snappy, lz4, zstd.

The codec id lives in bits 0-2 of a batch's (or legacy wrapper message's) attributes::

    0 none   1 gzip   2 snappy   3 lz4   4 zstd (magic 2 only)

What each codec's bytes look like on the wire, and what this module writes / accepts:

gzip
    An RFC 1952 gzip member (Java's ``GZIPOutputStream``).  Written at level 6 (zlib's default,
    Kafka's ``compression.gzip.level=-1``); read with concatenated members allowed.
snappy
    Kafka's Java client wraps snappy in the *xerial* framing of ``snappy-java``'s
    ``SnappyOutputStream``::

        magic            8 bytes  0x82 'S' 'N' 'A' 'P' 'P' 'Y' 0x00
        version          int32    1
        compatible       int32    1
        then repeated:   int32 compressed length, one raw snappy block
                         (each block holds at most 32 KiB of input)

    librdkafka and some old clients send a bare raw snappy block instead.  Written: xerial
    framing (what the Java client writes and every client reads).  Read: both, told apart by the
    8-byte magic.
lz4
    An LZ4 frame (lz4 frame format 1.5), written as Kafka's ``KafkaLZ4BlockOutputStream`` does:
    64 KiB independent blocks, no content size, no block or content checksums.  Magic-0 messages
    carry Kafka 0.8's broken frame-descriptor checksum (xxhash32 computed over the 4 magic bytes
    too, KAFKA-3160); ``compress(LZ4, data, legacy_lz4=True)`` writes that variant and
    ``decompress`` accepts both.
zstd
    A zstd frame (Kafka's default level 3).  Frames without a content size (written by streaming
    encoders such as zstd-jni) and concatenated frames are accepted.

Pure functions.  Thread-safe: zstd contexts are kept per thread.  A damaged payload raises
:class:`broker.errors.CorruptRecordError` naming the codec and what went wrong.
"""

from __future__ import annotations

import struct
import threading
import zlib

import lz4.block
import lz4.frame
import snappy
import zstandard

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.header import GZIP, LZ4, NO_COMPRESSION, SNAPPY, ZSTD, BytesLike

CODECS = {"none": NO_COMPRESSION, "gzip": GZIP, "snappy": SNAPPY, "lz4": LZ4, "zstd": ZSTD}
CODEC_NAMES = {v: k for k, v in CODECS.items()}
# Kafka also accepts "uncompressed" and "producer" as topic-level compression.type values; they
# are broker policies, not codecs, and are the caller's business.

__all__ = ["CODECS", "CODEC_NAMES", "codec_id", "codec_name", "compress", "decompress"]

GZIP_DEFAULT_LEVEL = 6
ZSTD_DEFAULT_LEVEL = 3

# -- xerial snappy framing ------------------------------------------------------------------
XERIAL_MAGIC = b"\x82SNAPPY\x00"
XERIAL_HEADER = struct.Struct(">8sii")  # magic, version, compatible version
XERIAL_HEADER_BYTES = XERIAL_HEADER.pack(XERIAL_MAGIC, 1, 1)
XERIAL_BLOCK_LENGTH = struct.Struct(">i")  # compressed length in front of each raw block
XERIAL_BLOCK_SIZE = 32 * 1024  # uncompressed bytes per block, as snappy-java

# -- lz4 frame ------------------------------------------------------------------------------
LZ4_FRAME_MAGIC = b"\x04\x22\x4d\x18"


def codec_id(name_or_id: int | str) -> int:
    """Codec id for a name ("gzip"), an id (1), or a numeric string ("1")."""
    if isinstance(name_or_id, bool):
        raise ValueError(f"expected a compression codec name or id, got {name_or_id!r}")
    if isinstance(name_or_id, int):
        if name_or_id in CODEC_NAMES:
            return name_or_id
        raise ValueError(f"expected a compression codec id 0-4, got {name_or_id}")
    if isinstance(name_or_id, str):
        key = name_or_id.strip().lower()
        if key in CODECS:
            return CODECS[key]
        if key == "uncompressed":
            return NO_COMPRESSION
        if key.isdigit() and int(key) in CODEC_NAMES:
            return int(key)
    raise ValueError(f"expected a compression codec ({', '.join(CODECS)}) or id 0-4, got {name_or_id!r}")


def codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


# -- zstd per-thread contexts -----------------------------------------------------------------
_local = threading.local()


def _zstd_compressor(level: int) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "zc", None)
    if cache is None:
        cache = _local.zc = {}
    c = cache.get(level)
    if c is None:
        c = cache[level] = zstandard.ZstdCompressor(level=level)
    return c


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "zd", None)
    if d is None:
        d = _local.zd = zstandard.ZstdDecompressor()
    return d


# -- xxhash32 (only for lz4's frame-descriptor checksum, a handful of bytes) -------------------
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def xxh32(data: bytes, seed: int = 0) -> int:
    """xxHash32 of ``data`` (used for lz4 frame-descriptor checksums, so inputs are tiny)."""
    n = len(data)
    p = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed
        v4 = (seed - _P1) & _M32
        while p + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, p)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            p += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while p + 4 <= n:
        (w,) = struct.unpack_from("<I", data, p)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        p += 4
    while p < n:
        h = (_rotl((h + data[p] * _P5) & _M32, 11) * _P1) & _M32
        p += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


def _lz4_descriptor_end(frame: BytesLike) -> int:
    """Position of the header-checksum byte of an lz4 frame (after FLG, BD and options)."""
    if len(frame) < 7 or bytes(frame[:4]) != LZ4_FRAME_MAGIC:
        raise CorruptRecordError(
            f"lz4: expected a frame starting with magic {LZ4_FRAME_MAGIC.hex()}, "
            f"read {bytes(frame[:4]).hex()} ({len(frame)} bytes)"
        )
    flg = frame[4]
    end = 6
    if flg & 0x08:  # content size present
        end += 8
    if flg & 0x01:  # dictionary id present
        end += 4
    return end


def _lz4_fix_legacy_checksum(frame: bytes) -> bytes:
    """Rewrite Kafka 0.8's broken descriptor checksum into the correct one."""
    hc = _lz4_descriptor_end(frame)
    good = (xxh32(bytes(frame[4:hc])) >> 8) & 0xFF
    return bytes(frame[:hc]) + bytes((good,)) + bytes(frame[hc + 1 :])


def _lz4_break_checksum(frame: bytes) -> bytes:
    """Rewrite a correct descriptor checksum into Kafka 0.8's (hash over magic too)."""
    hc = _lz4_descriptor_end(frame)
    bad = (xxh32(bytes(frame[:hc])) >> 8) & 0xFF
    return frame[:hc] + bytes((bad,)) + frame[hc + 1 :]


def _lz4_compress(data: BytesLike) -> bytes:
    return lz4.frame.compress(
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )


def _lz4_decompress(data: BytesLike) -> bytes:
    # lz4 raises RuntimeError on a damaged frame, MemoryError when a damaged header claims a
    # huge content size; both mean the payload is corrupt.
    try:
        return lz4.frame.decompress(data)
    except (RuntimeError, MemoryError, ValueError) as first:
        # Maybe a magic-0 message with the broken header checksum: patch it and retry.
        try:
            fixed = _lz4_fix_legacy_checksum(bytes(data))
        except CorruptRecordError:
            raise CorruptRecordError(f"lz4: cannot decompress {len(data)} bytes: {first}") from None
        try:
            return lz4.frame.decompress(fixed)
        except (RuntimeError, MemoryError, ValueError):
            raise CorruptRecordError(f"lz4: cannot decompress {len(data)} bytes: {first}") from None


# -- snappy ------------------------------------------------------------------------------------
def _snappy_compress_xerial(data: BytesLike) -> bytes:
    mv = memoryview(data)
    n = len(mv)
    parts = [XERIAL_HEADER_BYTES]
    pack = XERIAL_BLOCK_LENGTH.pack
    compress_raw = snappy.compress
    for start in range(0, n, XERIAL_BLOCK_SIZE):
        block = compress_raw(mv[start : start + XERIAL_BLOCK_SIZE])
        parts.append(pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data: BytesLike) -> bytes:
    mv = memoryview(data)
    if bytes(mv[:8]) != XERIAL_MAGIC:
        try:
            return snappy.decompress(mv)
        except Exception as e:  # noqa: BLE001 - snappy raises its own error types (cramjam / UncompressError)
            raise CorruptRecordError(f"snappy: cannot decompress a raw block of {len(mv)} bytes: {e}") from None
    n = len(mv)
    if n < XERIAL_HEADER.size:
        raise CorruptRecordError(f"snappy: expected a {XERIAL_HEADER.size}-byte xerial header, read {n} bytes")
    pos = XERIAL_HEADER.size
    parts = []
    unpack_from = XERIAL_BLOCK_LENGTH.unpack_from
    decompress_raw = snappy.decompress
    while pos < n:
        if n - pos < 4:
            raise CorruptRecordError(
                f"snappy (xerial): expected a 4-byte block length at position {pos}, read {n - pos} bytes"
            )
        (length,) = unpack_from(mv, pos)
        pos += 4
        if length < 0 or pos + length > n:
            raise CorruptRecordError(
                f"snappy (xerial): block at position {pos - 4} claims {length} bytes, {n - pos} remain"
            )
        try:
            parts.append(decompress_raw(mv[pos : pos + length]))
        except Exception as e:  # noqa: BLE001 - as above
            raise CorruptRecordError(f"snappy (xerial): cannot decompress block at position {pos - 4}: {e}") from None
        pos += length
    return b"".join(parts)


# -- public API --------------------------------------------------------------------------------
def compress(
    codec: int | str, data: bytes | bytearray | memoryview, *, level: int | None = None, legacy_lz4: bool = False
) -> bytes:
    """Compress ``data`` with ``codec`` (id or name) in the on-wire form described above.

    ``level`` overrides the codec's default level (gzip 1-9, zstd 1-22; ignored by snappy/lz4).
    ``legacy_lz4`` writes the broken frame checksum magic-0 messages carry.
    """
    c = codec if type(codec) is int else codec_id(codec)
    if c == NO_COMPRESSION:
        return bytes(data)
    if c == GZIP:
        co = zlib.compressobj(GZIP_DEFAULT_LEVEL if level is None else level, zlib.DEFLATED, 31)
        return co.compress(data) + co.flush()
    if c == SNAPPY:
        return _snappy_compress_xerial(data)
    if c == LZ4:
        out = _lz4_compress(data)
        return _lz4_break_checksum(out) if legacy_lz4 else out
    if c == ZSTD:
        return _zstd_compressor(ZSTD_DEFAULT_LEVEL if level is None else level).compress(data)
    raise ValueError(f"expected a compression codec id 0-4, got {codec!r}")


def decompress(codec: int | str, data: BytesLike) -> bytes:
    """Decompress a payload written by any Kafka client with ``codec`` (id or name)."""
    c = codec if type(codec) is int else codec_id(codec)
    if c == NO_COMPRESSION:
        return bytes(data)
    if c == GZIP:
        try:
            d = zlib.decompressobj(47)  # 32 + 15: gzip or zlib header, auto-detected
            out = d.decompress(data)
            if not d.eof:
                raise CorruptRecordError(
                    f"gzip: expected a complete gzip stream, read {len(data)} bytes that end inside it"
                )
            rest = d.unused_data
            if rest:
                parts = [out]
                while rest:
                    d = zlib.decompressobj(47)
                    parts.append(d.decompress(rest))
                    if not d.eof:
                        raise CorruptRecordError(
                            "gzip: expected a complete gzip member after the first, read a truncated one"
                        )
                    rest = d.unused_data
                out = b"".join(parts)
            return out
        except zlib.error as e:
            raise CorruptRecordError(f"gzip: cannot decompress {len(data)} bytes: {e}") from None
    if c == SNAPPY:
        return _snappy_decompress(data)
    if c == LZ4:
        return _lz4_decompress(data)
    if c == ZSTD:
        try:
            dctx = _zstd_decompressor()
            rest = bytes(data)
            parts = []
            while rest:
                o = dctx.decompressobj()
                parts.append(o.decompress(rest))
                if not o.eof:
                    raise CorruptRecordError(
                        f"zstd: expected a complete frame, read {len(data)} bytes that end inside one"
                    )
                rest = o.unused_data
            return parts[0] if len(parts) == 1 else b"".join(parts)
        except zstandard.ZstdError as e:
            raise CorruptRecordError(f"zstd: cannot decompress {len(data)} bytes: {e}") from None
    raise CorruptRecordError(f"expected a compression codec id 0-4, read {codec!r}")
