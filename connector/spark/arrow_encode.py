"""Bulk encoding of Arrow rows into v2 record batches: the Spark sink's write path.

The mirror of :mod:`.arrow` (the reader's bulk decode).  The sink's Arrow writer receives
``pyarrow.RecordBatch``es; :class:`ArrowRecordEncoder` turns their columns into
:class:`broker.record.bulk.RecordsSection`s (the records of one v2 batch each, the header left to
the producer's sender, which numbers it) without a Python object per row:

1. partitions, as Kafka's default partitioner: an explicit ``partition`` column wins; else a
   non-null key goes to ``toPositive(murmur2(key)) % partitions``, with murmur2 run over the key
   column vectorised (:func:`connector.partitioner.murmur2_array`, one numpy pass per key length);
   null keys are *sticky* (KIP-480): consecutive keyless rows fill one batch's worth of bytes on a
   partition chosen at random, then move on to another;
2. rows are grouped by partition with a stable ``argsort`` (order within a partition kept) and cut
   into batches of at most ``batch.size`` bytes (one ``searchsorted`` per batch on the cumulative
   record sizes);
3. every varint of every record (length, offsetDelta, keyLength, valueLength, header counts and
   lengths) is computed as a numpy column and laid out as a fixed-width byte matrix whose unused
   bytes are masked out, so one boolean compaction gives the varint bytes of all rows back to back;
4. the record bodies are assembled by Arrow in C: ``binary_join_element_wise`` of the columns
   ``[prefix varints, key, valueLength, value, headers]`` gives one binary array whose data buffer
   IS the records of every batch back to back, in batch order; each batch is a zero-copy slice of
   that buffer (headers are encoded per header the same way, then joined per row with
   ``binary_join``).

Record layout (``broker/record/batch.py``): ``length, attributes (0), timestampDelta (0: one
timestamp per call), offsetDelta, keyLength, key, valueLength, value, headersCount, headers``.

Pure code (Arrow in, bytes out); an encoder keeps only the sticky partitioner's state and is not
thread-safe (one per Spark task).  Runs on executors inside the sink's ``write()``.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyklog.broker.errors import ConfigError, UnknownTopicOrPartitionError
from pyklog.broker.record.bulk import RecordsSection
from pyklog.broker.record.header import HEADER_SIZE
from pyklog.connector.partitioner import murmur2_array

__all__ = ["ArrowRecordEncoder", "as_binary", "varint_bytes"]

_SLOT = 5  # bytes reserved per varint in the prefix matrix: zigzag of a 32-bit value
_MAX_JOIN_BYTES = 1 << 30  # Arrow binary offsets are int32: encode larger inputs in parts


def as_binary(arr: pa.Array) -> pa.Array:
    """A string / binary / large column as ``binary`` (strings are their UTF-8 bytes; a cast
    from string to binary copies nothing)."""
    t = arr.type
    if pa.types.is_binary(t):
        return arr
    if pa.types.is_string(t):
        return arr.cast(pa.binary())
    if pa.types.is_large_string(t):
        arr = arr.cast(pa.large_binary())
    return arr.cast(pa.binary())


def _zigzag(v: np.ndarray) -> np.ndarray:
    v = v.astype(np.int64, copy=False)
    return ((v << 1) ^ (v >> 63)).astype(np.uint64)


def _widths(u: np.ndarray) -> np.ndarray:
    """Bytes of the unsigned varint of each value of ``u`` (uint64)."""
    w = np.ones(len(u), dtype=np.int64)
    for j in range(1, 10):
        more = u >= np.uint64(1 << (7 * j))
        if not more.any():
            break
        w += more
    return w


def varint_width(v: np.ndarray) -> np.ndarray:
    """Bytes of the zigzag varint of each value of ``v`` (Kafka's sizeOfVarint)."""
    return _widths(_zigzag(v))


def _fill_varints(mat: np.ndarray, mask: np.ndarray, col: int, v: np.ndarray, slot: int = _SLOT) -> np.ndarray:
    """Write the zigzag varint of each ``v`` into ``mat[:, col:col + slot]`` and mark its bytes in
    ``mask``; returns the widths."""
    u = _zigzag(v)
    w = _widths(u)
    if len(w) and int(w.max()) > slot:
        raise ValueError(f"varint of {int(v[np.argmax(w)])} needs {int(w.max())} bytes, more than {slot}")
    for j in range(slot):
        b = ((u >> np.uint64(7 * j)) & np.uint64(0x7F)).astype(np.uint8)
        cont = w > j + 1
        b[cont] |= 0x80
        mat[:, col + j] = b
        mask[:, col + j] = w > j
    return w


def _binary_from(mat: np.ndarray, mask: np.ndarray, widths: np.ndarray) -> pa.Array:
    """The masked bytes of each row of ``mat`` as a binary array (one boolean compaction)."""
    data = mat[mask]
    offsets = np.empty(len(widths) + 1, dtype=np.int32)
    offsets[0] = 0
    np.cumsum(widths, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), len(widths), [None, pa.py_buffer(offsets), pa.py_buffer(data)])


def varint_bytes(v) -> pa.Array:
    """The zigzag varint of each value of ``v`` as a binary array (values of up to 64 bits)."""
    v = np.asarray(v, dtype=np.int64)
    mat = np.zeros((len(v), 10), dtype=np.uint8)
    mask = np.zeros((len(v), 10), dtype=bool)
    w = _fill_varints(mat, mask, 0, v, 10)
    return _binary_from(mat, mask, w)


def _lengths(arr: pa.Array) -> np.ndarray:
    """Byte length of each element of a binary array, -1 for a null (int64)."""
    return pc.binary_length(arr).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)


def _headers_section(headers: pa.Array) -> pa.Array:
    """Each row's ``headersCount`` varint and headers as one binary value (a null or empty list:
    count 0)."""
    counts = pc.list_value_length(headers).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    entries = headers.flatten()  # the entries of non-null lists, slicing taken care of
    if len(entries):
        hk = pc.struct_field(entries, "key")
        hv = pc.struct_field(entries, "value")
        if hk.null_count:
            raise ConfigError("pyklog sink: a header with a null key (header keys must be strings)")
        hk = as_binary(hk)
        hv = as_binary(hv)
        m = len(entries)
        mat = np.zeros((m, 2 * _SLOT), dtype=np.uint8)
        mask = np.zeros((m, 2 * _SLOT), dtype=bool)
        wk = _fill_varints(mat, mask, 0, _lengths(hk))
        klen = _binary_from(mat[:, :_SLOT], mask[:, :_SLOT], wk)
        mat2 = np.zeros((m, _SLOT), dtype=np.uint8)
        mask2 = np.zeros((m, _SLOT), dtype=bool)
        wv = _fill_varints(mat2, mask2, 0, _lengths(hv))
        vlen = _binary_from(mat2, mask2, wv)
        pieces = pc.binary_join_element_wise(klen, hk, vlen, hv.fill_null(b""), b"")
        offsets = np.zeros(len(counts) + 1, dtype=np.int32)
        np.cumsum(counts, out=offsets[1:])
        per_row = pc.binary_join(pa.ListArray.from_arrays(pa.array(offsets), pieces), b"")
    else:
        per_row = pa.scalar(b"", pa.binary())
    return pc.binary_join_element_wise(varint_bytes(counts), per_row, b"")


class ArrowRecordEncoder:
    """Encodes Arrow columns into per-partition :class:`RecordsSection`s (see the module
    docstring).  ``batch_size``: the producer's batch.size (a batch's bytes, header included,
    unless one record alone is larger).  ``rng``: the sticky partitioner's randomness.  Not
    thread-safe; executor side."""

    def __init__(self, batch_size: int, rng: random.Random | None = None):
        self.batch_size = max(int(batch_size), HEADER_SIZE + 1)
        self._rng = rng or random.Random()
        self._sticky: dict[str, int] = {}

    # -- partitions ---------------------------------------------------------------------------
    def _next_sticky(self, topic: str, num_partitions: int) -> int:
        prev = self._sticky.get(topic)
        if num_partitions > 1 and prev is not None and prev < num_partitions:
            p = self._rng.randrange(num_partitions - 1)
            p = p + 1 if p >= prev else p
        else:
            p = self._rng.randrange(num_partitions)
        self._sticky[topic] = p
        return p

    def partitions(
        self,
        topic: str,
        num_partitions: int,
        key: pa.Array | None,
        key_len: np.ndarray | None,
        partition: pa.Array | None,
        est: np.ndarray,
    ) -> np.ndarray:
        """The partition of every row (int64): explicit, murmur2 of the key, or sticky."""
        n = len(est)
        part = np.full(n, -1, dtype=np.int64)
        if partition is not None:
            explicit = partition.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
            bad = (explicit >= num_partitions) | (explicit < -1)
            if bad.any():
                p = int(explicit[np.argmax(bad)])
                raise UnknownTopicOrPartitionError(
                    f"UNKNOWN_TOPIC_OR_PARTITION: partition {p} of topic {topic!r} does not exist "
                    f"(expected 0..{num_partitions - 1})"
                )
            part = explicit
        if key is not None:
            hashed = np.flatnonzero((part < 0) & (key_len >= 0))
            if hashed.size:
                data = key.buffers()[2]
                data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(1, np.uint8)
                offsets = np.frombuffer(key.buffers()[1], dtype=np.int32)[key.offset : key.offset + n]
                h = murmur2_array(data, offsets[hashed], key_len[hashed])
                part[hashed] = (h.astype(np.int64) & 0x7FFFFFFF) % num_partitions
        sticky = np.flatnonzero(part < 0)
        if sticky.size:
            # consecutive keyless rows fill one batch on a partition, then the next partition
            room = self.batch_size - HEADER_SIZE
            cum = np.cumsum(est[sticky])
            pos, done = 0, 0
            while pos < sticky.size:
                end = int(np.searchsorted(cum, done + room, side="right"))
                end = max(end, pos + 1)
                part[sticky[pos:end]] = self._next_sticky(topic, num_partitions)
                done = int(cum[end - 1])
                pos = end
        return part

    # -- encoding -----------------------------------------------------------------------------
    def encode(
        self,
        topic: str,
        num_partitions: int,
        value: pa.Array,
        key: pa.Array | None = None,
        partition: pa.Array | None = None,
        headers: pa.Array | None = None,
        timestamp_ms: int | None = None,
    ) -> list[tuple[int, RecordsSection]]:
        """Encode the rows (``value`` required; ``key`` / ``value`` string or binary, nulls
        allowed; ``partition`` int32 with nulls for "choose"; ``headers``
        ``list<struct<key: string, value: binary>>``) into ``[(partition, RecordsSection)]``,
        batches of a partition in row order.  ``timestamp_ms``: every record's CreateTime
        (default: now)."""
        n = len(value)
        if n == 0:
            return []
        ts = int(time.time() * 1000) if timestamp_ms is None else int(timestamp_ms)
        value = as_binary(value)
        key = as_binary(key) if key is not None else None
        vl = _lengths(value)
        kl = _lengths(key) if key is not None else np.full(n, -1, dtype=np.int64)
        hsec = _headers_section(headers) if headers is not None and headers.null_count < n else None
        hbytes = _lengths(hsec) if hsec is not None else 1
        # bytes of each record after its length varint, except the offsetDelta varint
        s0 = 2 + varint_width(kl) + np.maximum(kl, 0) + varint_width(vl) + np.maximum(vl, 0) + hbytes
        if int(s0.sum()) + 16 * n > _MAX_JOIN_BYTES and n > 1:
            half = n // 2

            def sl(a, i, j):
                return None if a is None else a.slice(i, j - i)

            return self.encode(
                topic,
                num_partitions,
                value.slice(0, half),
                sl(key, 0, half),
                sl(partition, 0, half),
                sl(headers, 0, half),
                ts,
            ) + self.encode(
                topic,
                num_partitions,
                value.slice(half),
                sl(key, half, n),
                sl(partition, half, n),
                sl(headers, half, n),
                ts,
            )
        w_od = int(varint_width(np.array([n]))[0])  # an upper bound of every offsetDelta's width
        est = s0 + w_od
        est = est + varint_width(est)
        room = self.batch_size - HEADER_SIZE
        if (key is None or key.null_count == n) and (partition is None or partition.null_count == n):
            # every row sticky: each run of rows on one partition is one batch, in row order
            return self._encode_sorted(
                topic, n, ts, None, self._sticky_runs(topic, num_partitions, est), s0, kl, vl, key, value, hsec
            )
        part = self.partitions(topic, num_partitions, key, kl, partition, est)

        # group by partition (stable: row order kept within a partition), cut batches
        if num_partitions == 1 or (part[0] == part).all():
            order = None
            bounds = [(int(part[0]), 0, n)]
        else:
            order = np.argsort(part, kind="stable")
            sp = part[order]
            cuts = np.flatnonzero(sp[1:] != sp[:-1]) + 1
            starts = np.concatenate(([0], cuts))
            ends = np.concatenate((cuts, [n]))
            bounds = [(int(sp[a]), int(a), int(b)) for a, b in zip(starts, ends)]
            s0, est, kl, vl = s0[order], est[order], kl[order], vl[order]
        cum = np.cumsum(est)
        batches = []  # (partition, first row, end row) in sorted order
        for p, a, b in bounds:
            pos = a
            while pos < b:
                before = int(cum[pos - 1]) if pos else 0
                end = int(np.searchsorted(cum, before + room, side="right"))
                end = min(max(end, pos + 1), b)
                batches.append((p, pos, end))
                pos = end
        return self._encode_sorted(topic, n, ts, order, batches, s0, kl, vl, key, value, hsec)

    def _sticky_runs(self, topic: str, num_partitions: int, est: np.ndarray) -> list:
        """Batches ``(partition, first row, end row)`` for rows that are all sticky."""
        room = self.batch_size - HEADER_SIZE
        cum = np.cumsum(est)
        runs = []
        pos, n = 0, len(est)
        while pos < n:
            before = int(cum[pos - 1]) if pos else 0
            end = min(max(int(np.searchsorted(cum, before + room, side="right")), pos + 1), n)
            runs.append((self._next_sticky(topic, num_partitions), pos, end))
            pos = end
        return runs

    @staticmethod
    def _encode_sorted(topic, n, ts, order, batches, s0, kl, vl, key, value, hsec):
        """The records of ``batches`` (``(partition, first, end)`` over the rows taken in
        ``order``; ``s0``, ``kl``, ``vl`` already in that order) as RecordsSections."""
        # exact offsetDeltas and lengths
        firsts = np.array([a for _, a, _ in batches], dtype=np.int64)
        counts = np.array([b - a for _, a, b in batches], dtype=np.int64)
        od = np.arange(n, dtype=np.int64) - np.repeat(firsts, counts)
        inner = s0 + varint_width(od)
        # prefix: length, attributes, timestampDelta, offsetDelta, keyLength
        width = 3 * _SLOT + 2
        mat = np.zeros((n, width), dtype=np.uint8)
        mask = np.zeros((n, width), dtype=bool)
        w = _fill_varints(mat, mask, 0, inner)
        mask[:, _SLOT : _SLOT + 2] = True  # attributes 0, timestampDelta 0
        w = w + 2 + _fill_varints(mat, mask, _SLOT + 2, od)
        w = w + _fill_varints(mat, mask, 2 * _SLOT + 2, kl)
        prefix = _binary_from(mat, mask, w)
        mat = np.zeros((n, _SLOT), dtype=np.uint8)
        mask = np.zeros((n, _SLOT), dtype=bool)
        mid = _binary_from(mat, mask, _fill_varints(mat, mask, 0, vl))
        if order is not None:
            take = pa.array(order)
            value = value.take(take)
            key = key.take(take) if key is not None else None
            hsec = hsec.take(take) if hsec is not None else None
        key_col = pa.scalar(b"", pa.binary()) if key is None or key.null_count == n else key.fill_null(b"")
        value_col = value.fill_null(b"") if value.null_count else value
        tail = hsec if hsec is not None else pa.scalar(b"\x00", pa.binary())
        joined = pc.binary_join_element_wise(prefix, key_col, mid, value_col, tail, b"")
        offsets = np.frombuffer(joined.buffers()[1], dtype=np.int32)[joined.offset : joined.offset + n + 1]
        data = memoryview(joined.buffers()[2])
        return [(p, RecordsSection(data[int(offsets[a]) : int(offsets[b])], b - a, ts)) for p, a, b in batches]
