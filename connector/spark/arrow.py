"""Bulk decoding of fetched record batches into ``pyarrow.RecordBatch``es with Spark's Kafka schema.

Spark's Kafka source rows (as Arrow, exactly what ``to_arrow_schema`` of the Spark schema gives)::

    key            binary                 null for a null key
    value          binary                 null for a null value
    topic          string
    partition      int32
    offset         int64
    timestamp      timestamp[us, tz=UTC]  record timestamp (ms on the wire) * 1000
    timestampType  int32                  0 CreateTime, 1 LogAppendTime
    headers        list<struct<key: string, value: binary>>   only with includeHeaders; null when
                                          a record has no headers (as Spark's Kafka source)

How the decoder keeps Python out of the per-byte work
-----------------------------------------------------
A fetch response holds whole v2 batches back to back.  :func:`decode_fetch` walks the 61-byte
batch headers (one Python step per batch), validates each CRC (C code), decompresses compressed
record sections (C code) and joins all record sections of the fetch into ONE buffer, in batch
order.  Then, for the common case of header-less records that come in runs of one size (a
producer sending fixed-size values), the *run-layout* fast path (``_uniform_runs``): one record
is decoded in Python, the records after it are compared with its layout as rows of that size
(8 bytes per record and check, as strided uint64 views over the buffer: same length, key length,
value length and field widths, no headers), timestampDelta/offsetDelta are read as columns of
the leading run of matching rows, and key/value bytes are copied run by run as fixed-size
elements (one memcpy per record, in C).  Anything else (varied sizes, headers, an odd encoding)
takes the general path, which also reports malformed records:

1. record boundaries (the only sequential dependency in the format: a record starts where the
   previous one ends) are found by guess and verify in numpy, one round per run of equally sized
   records; batches of varied sizes fall back to one tight Python step per record that reads
   only the length varint (see ``_record_starts``);
2. every other field is decoded with numpy for all records of the fetch at once: attributes,
   timestampDelta, offsetDelta, key length, value length, header count (a vectorised varint
   decoder over an array of positions);
3. key and value columns are never materialised as Python ``bytes``: an Arrow binary array is laid
   over the joined buffer with offsets ``[start0, end0, start1, end1, ...]`` (element ``2i`` is
   record ``i``'s value, element ``2i+1`` the gap to the next record, so the offsets are monotonic),
   and ``take`` of the even elements copies the values into a compact array in C;
4. only records that carry headers are walked again in Python (for their headers).

Control batches (transaction markers) and, for ``read_committed``, batches of aborted
transactions produce no rows but advance the next fetch offset.  Legacy (v0/v1) entries, which a
Fetch v4+ response never holds, fall back to ``pyklog.broker.record.reader.iter_batches``.

Pure code (bytes in, Arrow out), thread-safe.  Runs on Spark executors inside ``read()``.
Malformed input raises :class:`broker.errors.CorruptRecordError` naming the batch/record.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record import compression as _compression
from pyklog.broker.record.header import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    compute_crc,
    parse_header,
)
from pyklog.broker.record.varint import decode_varint

__all__ = [
    "HEADER_TYPE",
    "SCHEMA_FIELDS",
    "arrow_schema",
    "spark_schema_ddl",
    "decode_fetch",
    "DecodedFetch",
    "AbortedTransactions",
    "empty_batch",
    "complete_batches_end",
]

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

SCHEMA_FIELDS = [
    ("key", pa.binary(), "binary"),
    ("value", pa.binary(), "binary"),
    ("topic", pa.string(), "string"),
    ("partition", pa.int32(), "int"),
    ("offset", pa.int64(), "long"),
    ("timestamp", TIMESTAMP_TYPE, "timestamp"),
    ("timestampType", pa.int32(), "int"),
]
HEADERS_FIELD = ("headers", HEADER_TYPE, "array<struct<key:string,value:binary>>")


def spark_schema_ddl(include_headers: bool) -> str:
    """The Spark schema of the source as DDL (the same as Spark's Kafka source)."""
    fields = SCHEMA_FIELDS + ([HEADERS_FIELD] if include_headers else [])
    return ", ".join(f"{name} {ddl}" for name, _, ddl in fields)


def arrow_schema(include_headers: bool) -> pa.Schema:
    fields = SCHEMA_FIELDS + ([HEADERS_FIELD] if include_headers else [])
    return pa.schema([(name, typ) for name, typ, _ in fields])


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist([], schema=arrow_schema(include_headers))


_COMMON = struct.Struct(">qiib")  # baseOffset, length, partitionLeaderEpoch, magic
_PEEK = _COMMON.size  # 17
_PAD = b"\x00" * 16  # lets the vectorised varint reader look past the last record safely
_CONTROL_KEY = struct.Struct(">hh")  # version, type (0 abort, 1 commit)
_I32_MAX = (1 << 31) - 1


class AbortedTransactions:
    """Filters records of aborted transactions for ``read_committed`` (Kafka's consumer logic).

    ``aborted`` is the Fetch response's list of ``(producer_id, first_offset)``.  A transactional
    batch of producer P is dropped when an aborted transaction of P started at or before it and
    its abort marker has not been passed yet.  Not thread-safe: one per fetch.
    """

    def __init__(self, aborted):
        self._pending = sorted((int(first), int(pid)) for pid, first in (aborted or ()))
        self._active: set[int] = set()

    def skip(
        self, base_offset: int, producer_id: int, is_transactional: bool, is_control: bool, control_type: int | None
    ) -> bool:
        while self._pending and self._pending[0][0] <= base_offset:
            self._active.add(self._pending.pop(0)[1])
        if is_control:
            if control_type == 0:  # the abort marker ends the aborted transaction
                self._active.discard(producer_id)
            return True
        return is_transactional and producer_id in self._active


@dataclass
class DecodedFetch:
    """Result of :func:`decode_fetch`.

    ``batch``: the rows with ``start <= offset < end`` (None when there are none);
    ``next_offset``: the offset after the last complete batch in the buffer (None if the buffer
    held no complete batch), where the next fetch continues;
    ``first_offset``: offset of the first row returned (None without rows).
    """

    batch: pa.RecordBatch | None
    next_offset: int | None
    first_offset: int | None
    last_offset: int | None


def _varints(a: np.ndarray, pos: np.ndarray, strict: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Decode one zigzag varint at each position of ``pos`` in the uint8 array ``a``.

    Returns ``(values int64, positions after them)``.  ``a`` must be padded so ``pos + 10``
    stays inside it for the records being decoded.  With ``strict=False`` (speculative positions)
    an over-long varint gives a meaningless value instead of raising.
    """
    b0 = a[pos]
    hi0 = b0 >= 0x80
    if not hi0.any():  # every varint is one byte (small values): the common case
        v = b0.astype(np.int64)
        return (v >> 1) ^ -(v & 1), pos + 1
    b1 = a[pos + 1]
    if not (hi0 & (b1 >= 0x80)).any():  # at most two bytes
        v = b0.astype(np.int64)
        u = np.where(hi0, (v & 0x7F) | (b1.astype(np.int64) << 7), v)
        return (u >> 1) ^ -(u & 1), pos + 1 + hi0
    b = b0
    u = (b & 0x7F).astype(np.uint64)
    n = np.ones(len(pos), dtype=np.int64)
    idx = np.flatnonzero(b & 0x80)
    shift = 7
    while idx.size:
        if shift >= 70:
            if not strict:
                break
            raise CorruptRecordError(
                "record field varint: expected at most 10 bytes, read 10 bytes that all have the continuation bit set"
            )
        bb = a[pos[idx] + n[idx]]
        u[idx] |= (bb & 0x7F).astype(np.uint64) << np.uint64(shift)
        n[idx] += 1
        idx = idx[(bb & 0x80) != 0]
        shift += 7
    vals = (u >> np.uint64(1)).astype(np.int64) ^ -((u & np.uint64(1)).astype(np.int64))
    return vals, pos + n


def _binary_column(data_buf: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, take: np.ndarray) -> pa.Array:
    """Arrow binary array of the slices ``[starts[i], starts[i] + lengths[i])`` of ``data_buf``
    for the records in ``take`` (indices); a length of -1 is a null."""
    n = len(starts)
    nulls = lengths < 0
    if nulls.all():
        return pa.nulls(len(take), type=pa.binary())
    lens = np.maximum(lengths, 0)
    offsets = np.empty(2 * n + 1, dtype=np.int32)
    offsets[0 : 2 * n : 2] = starts
    offsets[1 : 2 * n : 2] = starts + lens
    offsets[2 * n] = offsets[2 * n - 1]
    validity = None
    if nulls.any():
        valid = np.ones(2 * n, dtype=bool)
        valid[0::2] = ~nulls
        validity = pa.py_buffer(np.packbits(valid, bitorder="little"))
    interleaved = pa.Array.from_buffers(pa.binary(), 2 * n, [validity, pa.py_buffer(offsets), data_buf])
    return interleaved.take(pa.array(take * 2, type=pa.int64()))


def _string_column(value: str, n: int) -> pa.Array:
    raw = value.encode("utf-8")
    offsets = np.arange(n + 1, dtype=np.int32) * len(raw)
    return pa.Array.from_buffers(pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)])


def _headers_column(
    buf: bytes, rows: np.ndarray, hpos: np.ndarray, hcount: np.ndarray, ends: np.ndarray, offsets: np.ndarray
) -> tuple[pa.Array, np.ndarray]:
    """Headers of the records ``rows`` (indices into all records); returns the list array for
    ``rows`` and the end position of each of those records' headers (to check framing)."""
    list_offsets = [0]
    keys: list[str] = []
    values: list[bytes | None] = []
    header_ends = np.empty(len(rows), dtype=np.int64)
    nulls = np.zeros(len(rows), dtype=bool)
    for j, i in enumerate(rows.tolist()):
        count = int(hcount[i])
        pos = int(hpos[i])
        end = int(ends[i])
        if count == 0:
            nulls[j] = True
            list_offsets.append(list_offsets[-1])
            header_ends[j] = pos
            continue
        if count < 0 or count > end - pos:
            raise CorruptRecordError(
                f"record at offset {int(offsets[i])}: expected a header count between 0 and {end - pos}, read {count}"
            )
        for _ in range(count):
            kl, pos = decode_varint(buf, pos)
            if kl < 0 or pos + kl > end:
                raise CorruptRecordError(
                    f"record at offset {int(offsets[i])}: expected a header key length between 0 "
                    f"and {end - pos}, read {kl}"
                )
            try:
                keys.append(buf[pos : pos + kl].decode("utf-8"))
            except UnicodeDecodeError as e:
                raise CorruptRecordError(
                    f"record at offset {int(offsets[i])}: expected a UTF-8 header key, read invalid bytes ({e})"
                ) from None
            pos += kl
            vl, pos = decode_varint(buf, pos)
            if vl < 0:
                values.append(None)
            else:
                if pos + vl > end:
                    raise CorruptRecordError(
                        f"record at offset {int(offsets[i])}: header value of {vl} bytes runs past the record's end"
                    )
                values.append(buf[pos : pos + vl])
                pos += vl
        list_offsets.append(list_offsets[-1] + count)
        header_ends[j] = pos
    struct_values = pa.StructArray.from_arrays(
        [pa.array(keys, type=pa.string()), pa.array(values, type=pa.binary())], names=["key", "value"]
    )
    arr = pa.ListArray.from_arrays(
        pa.array(list_offsets, type=pa.int32()),
        struct_values,
        type=HEADER_TYPE,
        mask=pa.array(nulls) if nulls.any() else None,
    )
    return arr, header_ends


def _empty_headers(n: int) -> pa.Array:
    return pa.nulls(n, type=HEADER_TYPE)


_LAST_DELTA = struct.Struct(">i")
_LAST_DELTA_OFFSET = 23  # lastOffsetDelta in the v2 header


def complete_batches_end(buf) -> int | None:
    """The offset after the last complete v2 batch of ``buf`` (header walk only, no CRC, no
    records), or None when there is none or an entry is not a plain v2 batch.  Lets a reader ask
    for the next fetch before decoding this one; :func:`decode_fetch` does the real checks."""
    mv = memoryview(buf)
    n = len(mv)
    pos = 0
    nxt = None
    while n - pos >= HEADER_SIZE:
        base_offset, length, _epoch, magic = _COMMON.unpack_from(mv, pos)
        if magic != 2 or length < HEADER_SIZE - LOG_OVERHEAD:
            return None
        size = LOG_OVERHEAD + length
        if pos + size > n:
            break
        nxt = base_offset + _LAST_DELTA.unpack_from(mv, pos + _LAST_DELTA_OFFSET)[0] + 1
        pos += size
    return nxt


def decode_fetch(
    buf,
    topic: str,
    partition: int,
    start: int,
    end: int,
    *,
    include_headers: bool = False,
    validate_crc: bool = True,
    aborted: AbortedTransactions | None = None,
) -> DecodedFetch:
    """Decode every complete batch of ``buf`` (a fetch response's record bytes) into one Arrow
    batch holding the rows with ``start <= offset < end``.  See the module docstring."""
    mv = memoryview(buf)
    n = len(mv)
    pos = 0
    sections: list = []
    counts: list[int] = []
    bases: list[int] = []
    first_ts: list[int] = []
    max_ts: list[int] = []
    ts_types: list[int] = []
    next_offset = None
    legacy = False
    while n - pos >= _PEEK:
        base_offset, length, _epoch, magic = _COMMON.unpack_from(mv, pos)
        size = LOG_OVERHEAD + length
        if magic != 2:
            if magic in (0, 1):
                legacy = True
                break
            raise CorruptRecordError(
                f"{topic}-{partition}: entry at offset {base_offset} (position {pos}): expected "
                f"magic 0, 1 or 2, read {magic}"
            )
        if length < HEADER_SIZE - LOG_OVERHEAD:
            raise CorruptRecordError(
                f"{topic}-{partition}: batch at offset {base_offset} (position {pos}): expected a "
                f"batchLength of at least {HEADER_SIZE - LOG_OVERHEAD}, read {length}"
            )
        if pos + size > n:
            break  # a partial trailing batch: the fetch was cut at max_bytes
        if base_offset >= end:
            if next_offset is None:
                next_offset = base_offset  # nothing left below ``end`` (e.g. compacted away)
            break
        h = parse_header(mv, pos)
        if validate_crc:
            actual = compute_crc(mv, pos, size)
            if actual != h.crc:
                raise CorruptRecordError(
                    f"{topic}-{partition}: batch at offset {base_offset} (position {pos}): CRC-32C "
                    f"mismatch, stored {h.crc:#010x}, computed {actual:#010x}"
                )
        attrs = h.attributes
        batch_next = base_offset + h.last_offset_delta + 1
        skip = batch_next <= start or h.records_count == 0
        is_control = bool(attrs & CONTROL_MASK)
        if aborted is not None:
            ctype = None
            if is_control:
                ctype = _control_type(mv, pos, h)
            if aborted.skip(base_offset, h.producer_id, bool(attrs & TRANSACTIONAL_MASK), is_control, ctype):
                skip = True
        elif is_control:
            skip = True
        if not skip:
            codec = attrs & COMPRESSION_MASK
            body = mv[pos + HEADER_SIZE : pos + size]
            if codec:
                body = _compression.decompress(codec, body)
            sections.append(body)
            counts.append(h.records_count)
            bases.append(base_offset)
            first_ts.append(h.first_timestamp)
            max_ts.append(h.max_timestamp)
            ts_types.append(1 if attrs & TIMESTAMP_TYPE_MASK else 0)
        next_offset = batch_next
        pos += size
    if legacy:
        return _decode_legacy(buf, topic, partition, start, end, include_headers, validate_crc)
    if not sections:
        return DecodedFetch(None, next_offset, None, None)
    return _decode_sections(
        sections, counts, bases, first_ts, max_ts, ts_types, topic, partition, start, end, include_headers, next_offset
    )


def _control_type(mv, pos: int, h) -> int | None:
    try:
        data = mv[pos + HEADER_SIZE : pos + h.size]
        codec = h.attributes & COMPRESSION_MASK
        if codec:
            data = _compression.decompress(codec, data)
        data = bytes(data)
        p = 0
        _len, p = decode_varint(data, p)
        p += 1  # attributes
        _, p = decode_varint(data, p)  # timestampDelta
        _, p = decode_varint(data, p)  # offsetDelta
        kl, p = decode_varint(data, p)
        if kl < _CONTROL_KEY.size:
            return None
        return _CONTROL_KEY.unpack_from(data, p)[1]
    except (CorruptRecordError, struct.error, IndexError):
        raise CorruptRecordError(
            f"control batch at offset {h.base_offset}: expected a control record with a 4-byte key"
        ) from None


def _decode_sections(
    sections, counts, bases, first_ts, max_ts, ts_types, topic, partition, start, end, include_headers, next_offset
) -> DecodedFetch:
    sections.append(_PAD)
    buf = b"".join(sections)
    total_len = len(buf) - len(_PAD)
    if total_len > _I32_MAX:
        raise CorruptRecordError(
            f"{topic}-{partition}: fetched {total_len} bytes of records in one response; expected "
            f"less than 2 GiB (lower kafka.max.partition.fetch.bytes)"
        )
    total = sum(counts)
    a = np.frombuffer(buf, dtype=np.uint8)
    per_batch = np.array(counts, dtype=np.int64)
    base_rep = np.repeat(np.array(bases, dtype=np.int64), per_batch)
    # runs never span batches, and _uniform_runs gives up once runs average under 32 records: with
    # many small batches (a producer lingering a millisecond) it would only cost its attempt
    small_batches = len(counts) > 16 and total < 32 * len(counts)
    fast = None if small_batches else _uniform_runs(buf, a, sections, counts)
    if fast is not None:
        # header-less records in runs of one layout (see _uniform_runs): every field is checked
        ts_delta, off_delta, runs = fast
        offsets = base_rep + off_delta
        keep = _keep(offsets, start, end, topic, partition)
        headers_arr = None
    else:
        (ts_delta, offsets, key_start, key_len, value_start, value_len, keep, headers_arr, rows) = _general_fields(
            buf, a, sections, counts, bases, base_rep, topic, partition, start, end, include_headers
        )
    nrows = int(keep.size)
    if nrows == 0:
        return DecodedFetch(None, next_offset, None, None)
    ts_type_rep = np.repeat(np.array(ts_types, dtype=np.int32), per_batch)
    ts = np.repeat(np.array(first_ts, dtype=np.int64), per_batch) + ts_delta
    if any(ts_types):
        lat = ts_type_rep == 1
        ts[lat] = np.repeat(np.array(max_ts, dtype=np.int64), per_batch)[lat]
    all_rows = nrows == total
    sel = keep
    if fast is not None:  # keep is one slice of the records
        i0 = int(sel[0])
        keys = _runs_binary(buf, runs, 0).slice(i0, nrows)
        values = _runs_binary(buf, runs, 1).slice(i0, nrows)
    else:
        data_buf = pa.py_buffer(buf)
        keys = _binary_column(data_buf, key_start, key_len, sel)
        values = _binary_column(data_buf, value_start, value_len, sel)
    columns = [
        keys,
        values,
        _string_column(topic, nrows),
        pa.Array.from_buffers(pa.int32(), nrows, [None, pa.py_buffer(np.full(nrows, partition, np.int32))]),
        pa.Array.from_buffers(pa.int64(), nrows, [None, pa.py_buffer(offsets if all_rows else offsets[sel])]),
        pa.Array.from_buffers(TIMESTAMP_TYPE, nrows, [None, pa.py_buffer((ts if all_rows else ts[sel]) * 1000)]),
        pa.Array.from_buffers(pa.int32(), nrows, [None, pa.py_buffer(ts_type_rep if all_rows else ts_type_rep[sel])]),
    ]
    if include_headers:
        if headers_arr is None:
            columns.append(_empty_headers(nrows))
        else:
            # headers_arr is aligned with ``rows`` (sorted union); pick the kept rows
            pos_in_rows = np.searchsorted(rows, sel)
            columns.append(headers_arr.take(pa.array(pos_in_rows, type=pa.int64())))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
    first = int(offsets[sel[0]])
    last = int(offsets[sel[-1]])
    return DecodedFetch(batch, next_offset, first, last)


_MAX_TS_WIDTH = 8  # read as one uint64 window (56 bits)
_MAX_OD_WIDTH = 5  # an int32 offsetDelta


def _record_layout(buf: bytes, p: int, sec_end: int):
    """Decode the record at ``p`` in Python: ``(size, column checks, field columns)`` or None
    when it is not a plain header-less record that ends exactly at its length (the general path
    then decodes, or reports, it).

    Column checks are ``(column, mask, expected)``: a record at another position has the same
    layout (same size, same field positions and widths, same key/value lengths, no headers) iff
    ``byte[column] & mask == expected`` for every check.  The length, key length, value length and
    header count bytes must equal this record's (mask 0xff); the timestampDelta and offsetDelta
    varints must have the same width (continuation bit set on all but their last byte)."""
    try:
        length, q = decode_varint(buf, p)
        if length < 6 or q + length > sec_end:
            return None
        w_len = q - p
        c_ts = q + 1 - p  # after the attributes byte
        _, r = decode_varint(buf, p + c_ts)
        w_ts = r - p - c_ts
        c_od = r - p
        _, r = decode_varint(buf, r)
        w_od = r - p - c_od
        c_kl = r - p
        kl, r = decode_varint(buf, r)
        c_key = r - p
        if kl < -1 or w_ts > _MAX_TS_WIDTH or w_od > _MAX_OD_WIDTH:
            return None
        c_vl = c_key + max(kl, 0)
        vl, r = decode_varint(buf, p + c_vl)
        c_val = r - p
        if vl < -1:
            return None
        c_hc = c_val + max(vl, 0)
        hc, r = decode_varint(buf, p + c_hc)
        if hc != 0 or r != q + length or r != p + c_hc + 1:
            return None
    except (CorruptRecordError, IndexError):
        return None
    size = q + length - p
    checks = [(c, 0xFF, buf[p + c]) for c in range(w_len)]
    checks += [(c, 0x80, 0x80 if c < c_ts + w_ts - 1 else 0) for c in range(c_ts, c_ts + w_ts)]
    checks += [(c, 0x80, 0x80 if c < c_od + w_od - 1 else 0) for c in range(c_od, c_od + w_od)]
    checks += [(c, 0xFF, buf[p + c]) for c in range(c_kl, c_key)]
    checks += [(c, 0xFF, buf[p + c]) for c in range(c_vl, c_val)]
    checks.append((c_hc, 0xFF, 0))
    return size, checks, (c_ts, w_ts, c_od, w_od, c_key, kl, c_val, vl)


def _window(buf: bytes, pos: int, n: int, stride: int) -> np.ndarray:
    """The 8 bytes at ``pos + i * stride`` (i < n) as little-endian uint64s (a strided view, no
    copy).  ``buf`` is padded (``_PAD``) so a window may start on any byte of the last record."""
    return np.ndarray((n,), dtype="<u8", buffer=buf, offset=pos, strides=(stride,))


def _rows_matching(buf: bytes, p: int, m: int, size: int, checks) -> int:
    """How many of the ``m`` records of ``size`` bytes from ``p`` have the first one's layout,
    in a leading run (the first record always does): every check of :func:`_record_layout`,
    eight columns at a time as one uint64 per record."""
    if m <= 1:
        return m
    ok = None
    i = 0
    while i < len(checks):
        w = checks[i][0]
        mask = want = 0
        while i < len(checks) and checks[i][0] < w + 8:
            c, mk, e = checks[i]
            mask |= mk << (8 * (c - w))
            want |= e << (8 * (c - w))
            i += 1
        r = (_window(buf, p + size + w, m - 1, size) & np.uint64(mask)) == np.uint64(want)
        ok = r if ok is None else ok & r
    return m if ok.all() else 1 + int(np.argmin(ok))


def _column_varint(buf: bytes, pos: int, n: int, stride: int, width: int) -> np.ndarray:
    """Zigzag varints of ``width`` (<= 8) bytes at ``pos + i * stride`` for i < n."""
    x = _window(buf, pos, n, stride)
    u = (x & np.uint64(0x7F)).astype(np.int64)
    for j in range(1, width):
        u |= ((x >> np.uint64(8 * j)) & np.uint64(0x7F)).astype(np.int64) << (7 * j)
    return (u >> 1) ^ -(u & 1)


def _runs_binary(buf: bytes, runs, which: int) -> pa.Array:
    """Binary column (key ``which=0`` or value ``which=1``) of every record of the runs
    ``(p, g, size, c_key, key_len, c_val, value_len)``, copied run by run with numpy (each run has
    one length: a strided copy of fixed-size elements)."""
    lens = [(r[4] if which == 0 else r[6]) for r in runs]
    if all(n < 0 for n in lens):
        return pa.nulls(sum(r[1] for r in runs), type=pa.binary())
    total = sum(r[1] * max(n, 0) for r, n in zip(runs, lens))
    out = np.empty(total, dtype=np.uint8)
    o = 0
    for (p, g, size, c_key, _kl, c_val, _vl), n in zip(runs, lens):
        if n > 0:  # one fixed-size (void) element per record: a memcpy each
            item = np.dtype((np.void, n))
            src = np.ndarray((g,), dtype=item, buffer=buf, offset=p + (c_key if which == 0 else c_val), strides=(size,))
            out[o : o + g * n].view(item)[:] = src
            o += g * n
    reps = np.array([r[1] for r in runs], dtype=np.int64)
    per = np.repeat(np.array(lens, dtype=np.int64), reps)
    count = len(per)
    offsets = np.empty(count + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(np.maximum(per, 0), out=offsets[1:])
    validity = None
    if min(lens) < 0:
        validity = pa.py_buffer(np.packbits(per >= 0, bitorder="little"))
    return pa.Array.from_buffers(pa.binary(), count, [validity, pa.py_buffer(offsets), pa.py_buffer(out)])


def _uniform_runs(buf: bytes, a: np.ndarray, sections, counts):
    """Fast path for header-less records that come in runs of one layout (fixed-size values, the
    common case): returns ``(ts_delta, off_delta, runs)`` for every record (``runs`` as
    :func:`_runs_binary` takes them), or None to use the general path (varied sizes, headers,
    anything odd).

    From a record decoded in Python (:func:`_record_layout`), the following records of the batch
    are taken as rows of that record size and compared with its layout in a few vectorised steps
    (:func:`_rows_matching`); the leading run of matching rows is exact by construction (each
    row's length varint equals the first one's, so each record ends where the next row starts,
    and its fields sit at the same columns with the same widths, key/value lengths and no
    headers).  The next run starts after it.  Only timestampDelta and offsetDelta differ between
    rows and are read as columns.  Each batch must end exactly at its records section's end."""
    ts_parts, od_parts, runs = [], [], []
    done = 0
    sec_start = 0
    for sec, count in zip(sections, counts):
        sec_end = sec_start + len(sec)
        k = 0
        p = sec_start
        while k < count:
            lay = _record_layout(buf, p, sec_end)
            if lay is None:
                return None
            size, checks, cols = lay
            g = _rows_matching(buf, p, min(count - k, (sec_end - p) // size), size, checks)
            c_ts, w_ts, c_od, w_od, c_key, kl, c_val, vl = cols
            ts_parts.append(_column_varint(buf, p + c_ts, g, size, w_ts))
            od_parts.append(_column_varint(buf, p + c_od, g, size, w_od))
            runs.append((p, g, size, c_key, kl, c_val, vl))
            k += g
            p += g * size
            done += g
            if len(runs) > 16 and done < len(runs) * 32:
                return None  # sizes vary too much for runs to pay off: the general path
        if p != sec_end:
            return None
        sec_start = sec_end
    if len(runs) == 1:
        return ts_parts[0], od_parts[0], runs
    return np.concatenate(ts_parts), np.concatenate(od_parts), runs


def _keep(offsets: np.ndarray, start: int, end: int, topic: str, partition: int) -> np.ndarray:
    """Indices of the records with ``start <= offset < end`` (offsets must increase)."""
    if len(offsets) > 1 and not (offsets[1:] > offsets[:-1]).all():
        j = int(np.flatnonzero(offsets[1:] <= offsets[:-1])[0])
        raise CorruptRecordError(
            f"{topic}-{partition}: record offsets must increase, read {int(offsets[j])} then {int(offsets[j + 1])}"
        )
    return np.arange(np.searchsorted(offsets, start), np.searchsorted(offsets, end), dtype=np.int64)


def _general_fields(buf, a, sections, counts, bases, base_rep, topic, partition, start, end, include_headers):
    """Every record field for any layout (varied sizes, headers): see the module docstring."""
    # 1. record boundaries: the only sequential step (see _record_starts)
    V, E = _record_starts(buf, a, sections, counts, bases, topic, partition)
    length, P = _varints(a, V)
    bad = (length < 6) | (P + length != E)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CorruptRecordError(
            f"{topic}-{partition}: batch at offset {bases[counts_index(counts, j)]}: expected a "
            f"record length between 6 and {int(E[j] - P[j])} (up to the next record), read "
            f"{int(length[j])}"
        )
    # 2. all other fields, vectorised over every record of the fetch
    ts_delta, p2 = _varints(a, P + 1)  # +1 skips the attributes byte
    off_delta, p3 = _varints(a, p2)
    key_len, key_start = _varints(a, p3)
    offsets = base_rep + off_delta
    bad = (key_len < -1) | (key_start + np.maximum(key_len, 0) > E)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CorruptRecordError(
            f"{topic}-{partition}: record at offset {int(offsets[j])}: expected a key length between "
            f"-1 and {int(E[j] - key_start[j])}, read {int(key_len[j])}"
        )
    value_len, value_start = _varints(a, key_start + np.maximum(key_len, 0))
    bad = (value_len < -1) | (value_start + np.maximum(value_len, 0) > E)
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CorruptRecordError(
            f"{topic}-{partition}: record at offset {int(offsets[j])}: expected a value length "
            f"between -1 and {int(E[j] - value_start[j])}, read {int(value_len[j])}"
        )
    hcount, hpos = _varints(a, value_start + np.maximum(value_len, 0))
    keep = _keep(offsets, start, end, topic, partition)
    has_headers = np.flatnonzero(hcount != 0)
    if has_headers.size:
        rows = np.union1d(keep, has_headers) if include_headers else has_headers
        headers_arr, header_ends = _headers_column(buf, rows, hpos, hcount, E, offsets)
        ends_check = hpos.copy()
        ends_check[rows] = header_ends
    else:
        headers_arr = None
        ends_check = hpos
    bad = ends_check != E
    if bad.any():
        j = int(np.flatnonzero(bad)[0])
        raise CorruptRecordError(
            f"{topic}-{partition}: record at offset {int(offsets[j])}: expected the record to end "
            f"at its length ({int(E[j] - P[j])} bytes), its fields end {int(ends_check[j] - E[j])} "
            f"bytes away from that"
        )
    if headers_arr is None:
        rows = None
    return ts_delta, offsets, key_start, key_len, value_start, value_len, keep, headers_arr, rows


def _record_starts(buf: bytes, a: np.ndarray, sections, counts, bases, topic, partition):
    """Positions of every record's length varint (``V``) and of every record's end (``E``).

    Record boundaries depend on each other (each record starts where the previous one ends), so
    they are found by *guess and verify* in numpy: guess that the records from the current one on
    all have its size, decode the length varint at every guessed position at once, and keep the
    leading run of guesses that each end exactly where the next guess starts (correct by
    induction).  Fixed-size records take one round per batch, records whose size changes now and
    then a few rounds; when rounds stop paying off (varied sizes) the rest of the batch is walked
    with one Python step per record.  Small batches (at most ``_LOCKSTEP_MAX`` records, what a
    producer lingering a millisecond sends) are walked all together instead, record ``j`` of every
    one of them in one numpy step (:func:`_lockstep_starts`): a fetch of a hundred 5-record batches
    takes 5 steps, not a hundred rounds.  The caller checks every length against ``E`` again.
    """
    counts_arr = np.array(counts, dtype=np.int64)
    sec_len = np.array([len(sec) for sec, _ in zip(sections, counts)], dtype=np.int64)
    sec_ends = np.cumsum(sec_len)
    first_rec = np.cumsum(counts_arr) - counts_arr
    V_all = np.empty(int(counts_arr.sum()), dtype=np.int64)
    small = (counts_arr > 0) & (counts_arr <= _LOCKSTEP_MAX)
    if small.sum() > 1:
        _lockstep_starts(
            a,
            V_all,
            np.flatnonzero(small),
            counts_arr,
            sec_ends - sec_len,
            sec_ends,
            first_rec,
            bases,
            topic,
            partition,
        )
    else:
        small[:] = False
    sec_start = 0
    for s, (sec, count) in enumerate(zip(sections, counts)):
        sec_end = sec_start + len(sec)
        if count == 0 or small[s]:
            sec_start = sec_end
            continue
        V = V_all[first_rec[s] : first_rec[s] + count]
        k = 0
        p = sec_start
        try:
            while k < count:
                if p >= sec_end:
                    raise CorruptRecordError("records run past the section")
                length, q = decode_varint(buf, p)
                stride = (q - p) + length
                if stride <= 0:
                    raise CorruptRecordError(f"a record length of {length}")
                cand = p + np.arange(count - k, dtype=np.int64) * stride
                cand = cand[cand < sec_end]
                lens, after = _varints(a, cand, strict=False)
                nxt = after + lens
                bad = np.flatnonzero(nxt[:-1] != cand[1:])
                good = int(bad[0]) if bad.size else len(cand) - 1
                V[k : k + good + 1] = cand[: good + 1]
                k += good + 1
                p = int(nxt[good])
                if good < 16 and k < count:
                    k, p = _walk_records(buf, V, k, count, p)
        except (IndexError, CorruptRecordError) as e:
            raise CorruptRecordError(
                f"{topic}-{partition}: batch at offset {bases[s]}: "
                f"expected {count} records filling its {len(sec)}-byte records section, read {e}"
            ) from None
        if p != sec_end:
            raise CorruptRecordError(
                f"{topic}-{partition}: batch at offset {bases[s]}: "
                f"expected its {count} records to fill the {len(sec)}-byte records section exactly, "
                f"they end {sec_end - p} bytes before its end"
            )
        sec_start = sec_end
    V = V_all
    # a record ends where the next one starts; the last record of a section at the section's end
    E = np.empty(len(V), dtype=np.int64)
    E[:-1] = V[1:]
    nz = counts_arr > 0
    E[(first_rec + counts_arr - 1)[nz]] = sec_ends[nz]
    return V, E


_LOCKSTEP_MAX = 32  # batches of at most this many records are walked together (_lockstep_starts)


def _lockstep_starts(
    a: np.ndarray,
    V: np.ndarray,
    secs: np.ndarray,
    counts: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    first_rec: np.ndarray,
    bases,
    topic,
    partition,
) -> None:
    """Record positions of the small batches ``secs`` (indices), written into ``V`` at each
    batch's records (``first_rec``): step ``j`` reads the length varint of record ``j`` of every
    batch that has one and moves each to the record after it.  Every record must lie inside its
    batch's records section (``starts``/``ends``) and the last one must end exactly at its end."""
    pos = starts[secs].copy()
    cnt = counts[secs]
    end = ends[secs]
    first = first_rec[secs]

    def corrupt(k: int, what: str):
        s = int(secs[k])
        return CorruptRecordError(
            f"{topic}-{partition}: batch at offset {bases[s]}: expected {int(counts[s])} records "
            f"filling its {int(ends[s] - starts[s])}-byte records section, {what}"
        )

    act = np.arange(len(secs))
    for j in range(int(cnt.max())):
        if j:
            act = act[cnt[act] > j]
        p = pos[act]
        V[first[act] + j] = p
        # strict=False: an over-long varint gives a meaningless value, refused just below
        lens, after = _varints(a, p, strict=False)
        nxt = after + lens
        bad = (lens < 0) | (after - p > 5) | (nxt > end[act])
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise corrupt(
                int(act[i]),
                f"read a length of {int(lens[i])} for its record {j} at "
                f"position {int(p[i] - starts[secs[act[i]]])}, which runs past it",
            )
        pos[act] = nxt
    short = np.flatnonzero(pos != end)
    if short.size:
        k = int(short[0])
        raise corrupt(k, f"they end {int(end[k] - pos[k])} bytes before its end")


def _walk_records(buf: bytes, V: np.ndarray, k: int, count: int, p: int) -> tuple[int, int]:
    """One Python step per record from record ``k`` at position ``p``; returns (count, end)."""
    out = []
    app = out.append
    for _ in range(count - k):
        app(p)
        b = buf[p]
        if b < 0x80:
            p += 1 + (b >> 1)
        else:
            b2 = buf[p + 1]
            if b2 < 0x80:
                p += 2 + (((b & 0x7F) | (b2 << 7)) >> 1)
            else:
                length, p = decode_varint(buf, p)
                p += max(length, 0)
    V[k:count] = out
    return count, p


def counts_index(counts, record_index: int) -> int:
    """Index of the batch holding record number ``record_index`` (for error messages)."""
    acc = 0
    for j, c in enumerate(counts):
        acc += c
        if record_index < acc:
            return j
    return len(counts) - 1


def _decode_legacy(buf, topic, partition, start, end, include_headers, validate_crc) -> DecodedFetch:
    """Slow path for buffers holding legacy v0/v1 entries (converted by broker.record.reader)."""
    from pyklog.broker.record.reader import iter_batches

    rows = []
    next_offset = None
    for rb in iter_batches(buf, validate_crc=validate_crc):
        next_offset = (
            rb.header.next_offset
            if rb.header.magic == 2
            else (rb.records[-1].offset + 1 if rb.records else next_offset)
        )
        if rb.header.is_control:
            continue
        tstype = rb.header.timestamp_type
        for r in rb.records:
            if start <= r.offset < end:
                rows.append((r, tstype))
    if not rows:
        return DecodedFetch(None, next_offset, None, None)
    data = {
        "key": [r.key for r, _ in rows],
        "value": [r.value for r, _ in rows],
        "topic": [topic] * len(rows),
        "partition": [partition] * len(rows),
        "offset": [r.offset for r, _ in rows],
        "timestamp": [r.timestamp * 1000 for r, _ in rows],
        "timestampType": [t for _, t in rows],
    }
    if include_headers:
        data["headers"] = [[{"key": k, "value": v} for k, v in r.headers] or None for r, _ in rows]
    schema = arrow_schema(include_headers)
    arrays = [pa.array(data[f.name], type=f.type if f.name != "timestamp" else pa.int64()) for f in schema]
    arrays[5] = arrays[5].cast(TIMESTAMP_TYPE)
    batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
    return DecodedFetch(batch, next_offset, rows[0][0].offset, rows[-1][0].offset)
