"""Conversions between legacy message sets (magic 0/1) and v2 record batches.

* :func:`message_set_to_batches`: Produce v0-2 request data -> one v2 batch (offsets 0..n-1 from
  ``base_offset``; the log assigns the real ones), keeping the wrappers' codec (Kafka's
  ``compression.type=producer``).
* :func:`batches_to_message_set`: log data (v2) -> magic 0/1 for Fetch v0-3 (Kafka's
  down-conversion, ``LazyDownConversionRecords``), keeping offsets and timestamps, dropping
  record headers and control batches (old clients know neither), and compressing each converted
  batch as one wrapper with the batch's codec where the magic allows.

The wire formats are documented in :mod:`pyklog.broker.record.batch` (v2) and
:mod:`pyklog.broker.record.legacy` (v0/v1).  Dependencies point one way: this module uses
``legacy`` (message codec), ``batch`` (v2 codec) and ``reader`` (walking mixed log data), and
``reader`` uses ``legacy`` for legacy entries; nothing below imports this module.

Pure functions, thread-safe.  Bad input raises :class:`broker.errors.CorruptRecordError`.
"""

from __future__ import annotations

from pyklog.broker.record import compression as _compression
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.header import NO_COMPRESSION, TIMESTAMP_TYPE_MASK, ZSTD, BytesLike
from pyklog.broker.record.legacy import (
    LEGACY_CODECS,
    NO_TIMESTAMP,
    SetInfo,
    check_magic,
    encode_message,
    scan_message_set,
    wrap_message_set,
)
from pyklog.broker.record.reader import iter_batches

__all__ = ["message_set_to_batches", "batches_to_message_set"]


def message_set_to_batches(buf: BytesLike, *, compression: int | str | None = None, base_offset: int = 0) -> bytes:
    """Convert a Produce v0-2 message set into one v2 batch (bytes; b"" for an empty set).

    Records get offsets ``base_offset`` + 0..n-1 (the offsets in a produce request mean nothing;
    the log assigns them), magic-1 timestamps (magic 0: -1), no headers.  The batch is compressed
    with ``compression`` or, when None, with the codec of the set's first compressed wrapper
    (Kafka's ``compression.type=producer``).  The whole set must be complete: a partial trailing
    message raises CorruptRecordError, so nothing a producer sent is silently dropped.
    """
    msgs: list = []
    info = SetInfo()
    scan_message_set(buf, msgs, strict=True, validate_crc=True, info=info)
    if not msgs:
        return b""
    codec = info.first_codec if compression is None else _compression.codec_id(compression)
    return build_batch(
        [(m[5], m[6], m[3], ()) for m in msgs],
        base_offset=base_offset,
        compression=codec,
        timestamp_type=1 if info.log_append_time else 0,
    )


def batches_to_message_set(buf: BytesLike, magic: int) -> bytes:
    """Down-convert v2 batches (and any legacy entries) to a magic 0/1 message set (Fetch v0-3).

    Offsets and timestamps are kept; headers are dropped; control batches and empty batches are
    skipped.  A compressed batch becomes one wrapper with the same codec when ``magic`` supports
    it (gzip, snappy, lz4); zstd batches are written uncompressed.  A partial trailing batch is
    ignored, as the reader does.
    """
    check_magic(magic)
    parts: list = []
    for batch in iter_batches(buf):
        if batch.header.is_control or not batch.records:
            continue
        records = batch.records
        codec = batch.header.compression
        lat = batch.header.timestamp_type == 1
        if codec == ZSTD or codec not in LEGACY_CODECS[magic]:
            codec = NO_COMPRESSION
        if codec == NO_COMPRESSION:
            attributes = TIMESTAMP_TYPE_MASK if (magic == 1 and lat) else 0
            for r in records:
                encode_message(
                    parts, r.offset, magic, attributes, r.timestamp if magic else NO_TIMESTAMP, r.key, r.value
                )
            continue
        inner: list = []
        first = records[0].offset
        for r in records:
            encode_message(
                inner,
                r.offset if magic == 0 else r.offset - first,
                magic,
                0,
                r.timestamp if magic else NO_TIMESTAMP,
                r.key,
                r.value,
            )
        wrapper_ts = max(r.timestamp for r in records) if magic else NO_TIMESTAMP
        if magic == 1 and lat:
            wrapper_ts = batch.header.max_timestamp
        wrap_message_set(parts, b"".join(inner), magic, codec, records[-1].offset, wrapper_ts, lat)
    return b"".join(parts)
