"""Avro records of a whole Arrow batch decoded column-wise with numpy, one schema field at a time.

fastavro's reader costs a Python-level call per record (about 3 us for a 6-field record), more than
the whole raw read of the record.  The records of an Arrow binary column lie back to back in one
buffer and their offsets say where each starts and ends, so all of them can be decoded at once:
the decoder keeps one read position per record (a numpy array) and walks the schema once, each
field decoded for every record by a few vectorised numpy operations (a varint of every record,
8 bytes of every record, a string of every record gathered into one Arrow buffer), building the
Arrow arrays directly.  A record that does not decode (a varint too long, a length past the
record's end, a union or enum index out of range, bytes left over, invalid UTF-8) is marked, not
raised, and the caller's per-record decoder (fastavro) decodes the marked ones again: their values
or their errors are exactly what fastavro makes of them.

Schemas walked here (:func:`supported`): records (nested too), the primitive types, enums, fixed,
unions of null and one type, arrays and maps (item k of every record decoded in one round; a value
with more than 64 items in a block or 16 blocks is redone record by record), named references, and
time logical types already turned into their numbers (the caller strips them and converts columns
afterwards).  Anything else (unions of several types, decimals and other logical types) is left to
the per-record decoder.
``avro-confluent`` records are grouped by schema id: a writer schema whose parsing canonical form
is the reader's decodes here; other writers (schema evolution) go to the per-record decoder, which
resolves them into the reader schema by Avro's rules.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["bulk_decode", "supported"]

_PRIMITIVES = ("boolean", "int", "long", "float", "double", "bytes", "string")
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1
_PAD = 16  # zero bytes after the data: a read runs at most 10 bytes past a record's end


class _Unsupported(Exception):
    pass


def _check(schema, named: dict) -> None:
    """Raise _Unsupported unless :func:`_decode` can walk ``schema``."""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return
        if schema in named:
            return
        raise _Unsupported(schema)
    if isinstance(schema, list):
        members = [m for m in schema if m != "null"]
        if len(members) != 1 or len(schema) > 2:
            raise _Unsupported("union of several types")
        _check(members[0], named)
        return
    if not isinstance(schema, dict) or "logicalType" in schema:
        raise _Unsupported("logical type")
    t = schema.get("type")
    if t == "record":
        named[schema["name"]] = schema
        for f in schema["fields"]:
            _check(f["type"], named)
    elif t in ("enum", "fixed"):
        named[schema["name"]] = schema
    elif t == "array":
        _check(schema["items"], named)
    elif t == "map":
        _check(schema["values"], named)
    elif t in _PRIMITIVES:
        return
    else:
        raise _Unsupported(str(t))


_SUPPORTED: dict = {}


def supported(schema) -> bool:
    """Whether ``schema`` (fastavro-parsed) is decoded here (cached per schema object)."""
    key = id(schema)
    got = _SUPPORTED.get(key)
    if got is None:
        try:
            _check(schema, {})
            got = True
        except _Unsupported:
            got = False
        _SUPPORTED[key] = (got, schema)  # the schema kept alive: its id stays its own
        return got
    return got[0]


class _Rows:
    """Read positions, ends and bad marks of the records being decoded (one entry each)."""

    __slots__ = ("bad", "end", "pos")

    def __init__(self, pos: np.ndarray, end: np.ndarray, bad: np.ndarray):
        self.pos, self.end, self.bad = pos, end, bad

    def advance(self, n) -> None:
        """Move every position by ``n``; a position past its record's end marks the record bad
        and stays at the end (later reads of a bad record stay inside the buffer)."""
        pos = self.pos + n
        over = pos > self.end
        if over.any():
            self.bad |= over
            pos = np.minimum(pos, self.end)
        self.pos = pos


def _varint(data: np.ndarray, rows: _Rows) -> np.ndarray:
    """The zig-zag varint at every position (int64), positions moved past it."""
    p = rows.pos
    b = data[p]
    val = (b & 0x7F).astype(np.uint64)
    size = np.ones(len(p), dtype=np.int64)
    more = np.flatnonzero(b & 0x80)
    shift = 7
    while more.size:
        if shift > 63:  # longer than 10 bytes
            rows.bad[more] = True
            break
        b = data[p[more] + size[more]]
        val[more] |= (b & 0x7F).astype(np.uint64) << np.uint64(shift)
        size[more] += 1
        more = more[(b & 0x80) != 0]
        shift += 7
    rows.advance(size)
    return (val >> np.uint64(1)).astype(np.int64) ^ -(val & np.uint64(1)).astype(np.int64)


def _fixed_bytes(data: np.ndarray, rows: _Rows, size: int) -> np.ndarray:
    """``size`` bytes at every position, as an (n, size) uint8 array."""
    out = data[rows.pos[:, None] + np.arange(size)]
    rows.advance(size)
    return out


def _gather(data: np.ndarray, rows: _Rows, lengths: np.ndarray, typ: pa.DataType) -> pa.Array:
    """The ``lengths`` bytes at every position as one binary or string array; positions moved."""
    start = rows.pos
    rows.advance(lengths)
    lengths = np.where(rows.bad, 0, lengths)  # a bad record's bytes are not gathered
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    if total:
        index = np.repeat(start - offsets[:-1], lengths) + np.arange(total, dtype=np.int64)
        body = data[index]
    else:
        body = np.zeros(0, dtype=np.uint8)
    if total < (1 << 31):
        return pa.Array.from_buffers(
            typ, len(lengths), [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(body)]
        )
    large = pa.large_binary() if typ == pa.binary() else pa.large_string()
    return pa.Array.from_buffers(large, len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(body)]).cast(typ)


def _string(data: np.ndarray, rows: _Rows, typ: pa.DataType) -> pa.Array:
    lengths = _varint(data, rows)
    negative = lengths < 0
    if negative.any():
        rows.bad |= negative
        lengths = np.where(negative, 0, lengths)
    arr = _gather(data, rows, lengths, typ)
    if typ == pa.string():
        invalid = _invalid_utf8(arr, 0, len(arr))
        if invalid:
            rows.bad[invalid] = True
            mask = np.zeros(len(arr), dtype=bool)
            mask[invalid] = True
            arr = pc.if_else(pa.array(mask), pa.scalar(None, pa.string()), arr)  # nulls in their place
    return arr


def _invalid_utf8(arr: pa.Array, start: int, stop: int) -> list[int]:
    """The rows in ``[start, stop)`` of a string array that are not valid UTF-8 (halving the
    range while one is in it: a few full validations per bad row)."""
    try:
        arr.slice(start, stop - start).validate(full=True)
        return []
    except pa.ArrowInvalid:
        if stop - start == 1:
            return [start]
        middle = (start + stop) // 2
        return _invalid_utf8(arr, start, middle) + _invalid_utf8(arr, middle, stop)


def _decode(schema, data: np.ndarray, rows: _Rows, named: dict) -> pa.Array:
    """Every record's value of ``schema`` at its position, as one Arrow array (a bad record's
    entry is junk or null: the caller replaces it)."""
    n = len(rows.pos)
    if isinstance(schema, str):
        if schema in named:
            return _decode(named[schema], data, rows, named)
        if schema == "boolean":
            b = data[rows.pos]
            rows.bad |= b > 1
            rows.advance(1)
            return pa.array(b == 1, type=pa.bool_())
        if schema == "int":
            v = _varint(data, rows)
            rows.bad |= (v < _INT32_MIN) | (v > _INT32_MAX)
            return pa.array(v.astype(np.int32), type=pa.int32())
        if schema == "long":
            return pa.array(_varint(data, rows), type=pa.int64())
        if schema == "float":
            return pa.array(_fixed_bytes(data, rows, 4).view("<f4").reshape(n), type=pa.float32())
        if schema == "double":
            return pa.array(_fixed_bytes(data, rows, 8).view("<f8").reshape(n), type=pa.float64())
        if schema == "string":
            return _string(data, rows, pa.string())
        if schema == "bytes":
            return _string(data, rows, pa.binary())
        raise _Unsupported(schema)
    if isinstance(schema, list):
        return _union(schema, data, rows, named)
    t = schema["type"]
    if t == "record":
        named[schema["name"]] = schema
        fields = schema["fields"]
        children = [_decode(f["type"], data, rows, named) for f in fields]
        return pa.StructArray.from_arrays(children, names=[f["name"] for f in fields])
    if t == "enum":
        named[schema["name"]] = schema
        symbols = schema["symbols"]
        index = _varint(data, rows)
        out_of_range = (index < 0) | (index >= len(symbols))
        rows.bad |= out_of_range
        index = np.where(out_of_range, 0, index)
        return pa.array(symbols, type=pa.string()).take(pa.array(index))
    if t == "fixed":
        named[schema["name"]] = schema
        return _gather(data, rows, np.full(n, int(schema["size"]), dtype=np.int64), pa.binary())
    if t == "array":
        offsets, (items,) = _blocks(data, rows, named, (schema["items"],))
        return pa.ListArray.from_arrays(pa.array(offsets), items)
    if t == "map":
        offsets, (keys, values) = _blocks(data, rows, named, ("string", schema["values"]))
        if keys.null_count:  # a bad record's keys: placeholders (the record is redone)
            keys = keys.fill_null("")
        return pa.MapArray.from_arrays(pa.array(offsets), keys, values)
    return _decode(t, data, rows, named)


#: arrays and maps: the most items in one block, and blocks in one value, decoded here; a record
#: with more is redone by the per-record decoder (each item is one round over the records)
_MAX_BLOCK_ITEMS = 64
_MAX_BLOCKS = 16


def _sub(rows: _Rows, sel: np.ndarray) -> _Rows:
    return _Rows(rows.pos[sel], rows.end[sel], rows.bad[sel])


def _put(rows: _Rows, sel: np.ndarray, sub: _Rows) -> None:
    rows.pos[sel] = sub.pos
    rows.bad[sel] = sub.bad


def _blocks(data: np.ndarray, rows: _Rows, named: dict, schemas: tuple) -> tuple[np.ndarray, list[pa.Array]]:
    """The items of an array or map value of every record (Avro's blocks: a count, its byte size
    when the count is negative, the items; a zero count ends the value): the list offsets (int32)
    and, per schema of ``schemas`` (the item, or the key and the value), the items of all records
    in order.  Item k of every record is decoded in one round."""
    n = len(rows.pos)
    counts = np.zeros(n, dtype=np.int64)
    owners: list[np.ndarray] = []  # per round: the record and the item's ordinal within it
    ordinals: list[np.ndarray] = []
    pieces: list[list[pa.Array]] = [[] for _ in schemas]
    active = np.flatnonzero(~rows.bad)
    for _ in range(_MAX_BLOCKS):
        if not active.size:
            break
        sub = _sub(rows, active)
        count = _varint(data, sub)
        sized = np.flatnonzero(count < 0)
        if sized.size:  # a negative count is followed by the block's size in bytes
            inner = _sub(sub, sized)
            _varint(data, inner)
            _put(sub, sized, inner)
            count = np.abs(count)
        too_many = count > _MAX_BLOCK_ITEMS
        sub.bad |= too_many
        count = np.where(sub.bad, 0, count)
        for k in range(int(count.max(initial=0))):
            has = np.flatnonzero(count > k)
            item = _sub(sub, has)
            for j, schema in enumerate(schemas):
                pieces[j].append(_decode(schema, data, item, named))
            _put(sub, has, item)
            owners.append(active[has])
            ordinals.append(counts[active[has]] + k)
        counts[active] += count
        _put(rows, active, sub)
        active = active[(count > 0) & ~sub.bad]
    else:
        rows.bad[active] = True  # more blocks than decoded here
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    if offsets[-1] >= (1 << 31):
        raise _Unsupported("more list items than an int32 offset holds")
    if not owners:
        items = [_decode_empty(schema, named) for schema in schemas]
        return offsets.astype(np.int32), items
    order = np.lexsort((np.concatenate(ordinals), np.concatenate(owners)))
    index = pa.array(order)
    items = [pa.concat_arrays(p).take(index) if len(p) > 1 else p[0].take(index) for p in pieces]
    return offsets.astype(np.int32), items


def _decode_empty(schema, named: dict) -> pa.Array:
    """An empty array of ``schema``'s decoded type."""
    return _decode(
        schema, np.zeros(_PAD, dtype=np.uint8), _Rows(*(np.zeros(0, dtype=np.int64),) * 2, np.zeros(0, bool)), named
    )


def _union(schema: list, data: np.ndarray, rows: _Rows, named: dict) -> pa.Array:
    """A union of null and one type: the type's values where the index names it, null elsewhere."""
    index = _varint(data, rows)
    rows.bad |= (index < 0) | (index >= len(schema))
    member = next(i for i, m in enumerate(schema) if m != "null")
    present = index == member
    if len(schema) == 1:
        return _decode(schema[0], data, rows, named)
    if present.all():
        return _decode(schema[member], data, rows, named)
    sub = np.flatnonzero(present)
    inner = _Rows(rows.pos[sub], rows.end[sub], rows.bad[sub])
    values = _decode(schema[member], data, inner, named)
    rows.pos[sub] = inner.pos
    rows.bad[sub] = inner.bad
    take = np.cumsum(present) - 1
    return values.take(pa.array(take, mask=~present))


_CANONICAL: dict = {}


def _canonical(schema) -> str:
    """The parsing canonical form of a parsed schema (cached per schema object)."""
    got = _CANONICAL.get(id(schema))
    if got is None:
        from fastavro.schema import to_parsing_canonical_form

        got = _CANONICAL[id(schema)] = (to_parsing_canonical_form(schema), schema)
    return got[0]


def _fast_writer(reader, schema_id: int, writer_schema):
    """The writer schema of ``schema_id`` when its records decode here into ``reader`` (the same
    schema), else None; a registry error is left to the per-record decoder to report."""
    try:
        writer = writer_schema(schema_id)  # cached by the caller
    except Exception:  # noqa: BLE001 - the per-record decoder reports it, per record
        return None
    if writer is reader or (supported(writer) and _canonical(writer) == _canonical(reader)):
        return writer
    return None


def bulk_decode(
    reader,
    column: pa.Array,
    decode_type: pa.DataType,
    per_record: Callable[[list], tuple[list, list]],
    *,
    confluent: bool = False,
    writer_schema: Callable[[int], object] | None = None,
) -> tuple[pa.Array, list] | None:
    """``(values, errors)`` of a binary ``column`` of Avro records of the parsed schema ``reader``:
    ``values`` an Arrow array of ``decode_type`` (the type of ``reader``), ``errors`` one error
    message or None per record.  None when ``reader`` is not :func:`supported` (the caller decodes
    record by record).  ``per_record(values)`` decodes a list of records one by one (``(values,
    errors)``, fastavro); it gets the records that do not decode here.  ``confluent``: records in
    Confluent's wire format, ``writer_schema(schema_id)`` their parsed writer schema."""
    if not supported(reader) or column.type not in (pa.binary(), pa.large_binary()):
        return None
    n = len(column)
    validity, offsets_buf, data_buf = column.buffers()
    width = np.int32 if column.type == pa.binary() else np.int64
    offsets = np.frombuffer(offsets_buf, dtype=width)[column.offset : column.offset + n + 1].astype(np.int64)
    size = data_buf.size if data_buf is not None else 0
    data = np.zeros(size + _PAD, dtype=np.uint8)
    if size:
        data[:size] = np.frombuffer(data_buf, dtype=np.uint8)
    starts, ends = offsets[:-1], offsets[1:]
    live = ~np.asarray(column.is_null().to_numpy(zero_copy_only=False)) if validity is not None else np.ones(n, bool)

    groups: list[tuple[np.ndarray, object, int]] = []  # (rows, writer schema, header bytes)
    slow: list[np.ndarray] = []  # rows for the per-record decoder
    if confluent:
        framed = live & (ends - starts >= 5) & (data[starts] == 0)
        slow.append(np.flatnonzero(live & ~framed))
        rows = np.flatnonzero(framed)
        s = starts[rows]
        ids = (
            (data[s + 1].astype(np.int64) << 24)
            | (data[s + 2].astype(np.int64) << 16)
            | (data[s + 3].astype(np.int64) << 8)
            | data[s + 4].astype(np.int64)
        )
        for schema_id in np.unique(ids):
            sel = rows[ids == schema_id]
            writer = _fast_writer(reader, int(schema_id), writer_schema)
            if writer is None:
                slow.append(sel)
            else:
                groups.append((sel, writer, 5))
    else:
        groups.append((np.flatnonzero(live), reader, 0))

    pieces: list[pa.Array] = []
    piece_rows: list[np.ndarray] = []
    for sel, writer, header in groups:
        if not sel.size:
            continue
        rows_ = _Rows(starts[sel] + header, ends[sel].copy(), np.zeros(len(sel), dtype=bool))
        try:
            arr = _decode(writer, data, rows_, {})
        except Exception:  # noqa: BLE001 - whatever goes wrong here, the per-record decoder decides
            slow.append(sel)
            continue
        rows_.bad |= rows_.pos != rows_.end  # bytes left after the record
        if arr.type != decode_type:
            arr = arr.cast(decode_type)
        if rows_.bad.any():
            good = ~rows_.bad
            arr = arr.filter(pa.array(good))
            slow.append(sel[rows_.bad])
            sel = sel[good]
        pieces.append(arr)
        piece_rows.append(sel)

    errors: list = [None] * n
    redo = np.sort(np.concatenate(slow)) if slow else np.zeros(0, dtype=np.int64)
    if redo.size:
        values, errs = per_record(column.take(pa.array(redo)).to_pylist())
        for j, e in zip(redo.tolist(), errs):
            errors[j] = e
        pieces.append(pa.array(values, type=decode_type))
        piece_rows.append(redo)

    if len(pieces) == 1 and len(piece_rows[0]) == n:
        return pieces[0], errors  # every row in order (rows are kept sorted)
    order = np.full(n, -1, dtype=np.int64)
    if pieces:
        placed = np.concatenate(piece_rows)
        order[placed] = np.arange(len(placed))
        merged = pa.concat_arrays(pieces)
    else:
        merged = pa.nulls(0, decode_type)
    return merged.take(pa.array(order, mask=order < 0)), errors
