"""Walk a buffer of concatenated log entries: v2 record batches and legacy v0/v1 messages.

Every entry, whatever its magic, starts with the same 17 bytes::

    offset  field        type
     0      baseOffset   int64   (legacy: the message's offset; a wrapper's is its last inner offset)
     8      length       int32   bytes that follow this field
    12      (v2) partitionLeaderEpoch / (legacy) crc    int32 / uint32
    16      magic        int8    0, 1 or 2

so the reader peeks at ``length`` and ``magic`` and then hands the entry to ``batch.py``
(magic 2) or ``legacy.py`` (magic 0/1).

Framing rules, the same as Kafka's ``ByteBufferLogInputStream``:

* fewer than 17 bytes left, or an entry whose ``length`` runs past the end of the buffer:
  a partial trailing entry (a fetch response cut at ``max_bytes``, a log tail being written).
  Iteration stops quietly, yielding nothing for it.
* a ``length`` below the smallest possible entry of its magic, a magic other than 0-2, or a CRC
  mismatch: :class:`broker.errors.CorruptRecordError` saying what was expected and what was read.

Pure functions over an immutable buffer; thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.batch import RecordBatch, decode_batch_records
from pyklog.broker.record.header import (
    ENTRY_PREFIX,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    BatchHeader,
    BytesLike,
    parse_header,
)
from pyklog.broker.record.header import validate_crc as _check_crc  # the functions' flag is named validate_crc
from pyklog.broker.record.legacy import legacy_entry_to_batch

__all__ = ["iter_batches", "iter_headers", "MIN_ENTRY_LENGTH"]

# smallest value of the length field for each magic (bytes after the length field)
MIN_ENTRY_LENGTH = {
    0: 4 + 1 + 1 + 4 + 4,  # crc, magic, attributes, key length, value length
    1: 4 + 1 + 1 + 8 + 4 + 4,  # + timestamp
    2: HEADER_SIZE - LOG_OVERHEAD,  # 49
}
_PEEK = MAGIC_OFFSET + 1  # 17


def _peek(buf: BytesLike, pos: int, n: int) -> tuple[int, int, int] | None:
    """(base_offset, size, magic) of the entry at ``pos`` or None when it is partial."""
    if n - pos < _PEEK:
        return None
    base_offset, length, _, magic = ENTRY_PREFIX.unpack_from(buf, pos)
    min_length = MIN_ENTRY_LENGTH.get(magic)
    if min_length is None:
        raise CorruptRecordError(
            f"entry at offset {base_offset} (position {pos}): expected magic 0, 1 or 2, read {magic}"
        )
    if length < min_length:
        raise CorruptRecordError(
            f"entry at offset {base_offset} (position {pos}): expected a length of at least "
            f"{min_length} for magic {magic}, read {length}"
        )
    size = LOG_OVERHEAD + length
    if pos + size > n:
        return None
    return base_offset, size, magic


def iter_headers(buf: BytesLike, validate_crc: bool = True) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, BatchHeader)`` of each complete v2 batch in ``buf``.

    Legacy entries are not expected here (the log holds v2 only): one raises
    CorruptRecordError.  Records are not decoded, so this is what the log uses to validate and
    index appended data.
    """
    n = len(buf)
    pos = 0
    while True:
        peek = _peek(buf, pos, n)
        if peek is None:
            return
        base_offset, size, magic = peek
        if magic != 2:
            raise CorruptRecordError(
                f"entry at offset {base_offset} (position {pos}): expected a v2 record batch "
                f"(magic 2), read magic {magic}"
            )
        h = parse_header(buf, pos)
        if validate_crc:
            _check_crc(buf, pos, h)
        yield pos, h
        pos += size


def iter_batches(buf: BytesLike, validate_crc: bool = True) -> Iterator[RecordBatch]:
    """Yield a :class:`RecordBatch` for each complete entry of ``buf``.

    v2 batches decode as they are.  Each legacy top-level message (a plain message or a
    compressed wrapper) becomes one RecordBatch whose header has the legacy ``magic``, ``crc``
    and wrapper compression, ``size`` equal to the entry's bytes, producer fields -1, and whose
    records carry absolute offsets (wrappers flattened) and no headers.
    """
    n = len(buf)
    pos = 0
    while True:
        peek = _peek(buf, pos, n)
        if peek is None:
            return
        _, size, magic = peek
        if magic == 2:
            h = parse_header(buf, pos)
            if validate_crc:
                _check_crc(buf, pos, h)
            yield RecordBatch(h, decode_batch_records(buf, pos, h))
        else:
            yield legacy_entry_to_batch(buf, pos, size, validate_crc)
        pos += size
