"""pyklog.broker.record.reader: walking concatenated batches, partial tails, corruption, legacy entries."""

from __future__ import annotations

import struct

import pytest

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.batch import build_batch, build_control_batch
from pyklog.broker.record.legacy import build_message_set
from pyklog.broker.record.reader import iter_batches, iter_headers


def _log(n_batches=4):
    parts = []
    offset = 0
    for i in range(n_batches):
        recs = [(b"k%d" % j, b"v" * (j + i), 1000 + j, ()) for j in range(i + 1)]
        parts.append(build_batch(recs, base_offset=offset, compression=i % 5))
        offset += len(recs)
    parts.append(build_control_batch(1, 9, 0, base_offset=offset, timestamp_ms=5))
    return b"".join(parts), parts


def test_walks_concatenated_batches():
    buf, parts = _log()
    batches = list(iter_batches(buf))
    assert [b.base_offset for b in batches] == [0, 1, 3, 6, 10]
    assert [len(b.records) for b in batches] == [1, 2, 3, 4, 1]
    assert batches[-1].control_type == 1
    headers = list(iter_headers(memoryview(buf)))
    positions = [0]
    for p in parts[:-1]:
        positions.append(positions[-1] + len(p))
    assert [pos for pos, _ in headers] == positions
    assert [h.size for _, h in headers] == [len(p) for p in parts]
    assert [h.compression for _, h in headers][:4] == [0, 1, 2, 3]


def test_partial_trailing_batch_stops_quietly_at_every_cut():
    buf, parts = _log(3)
    whole = len(parts[0]) + len(parts[1])
    for cut in range(whole, whole + len(parts[2])):
        got = list(iter_batches(buf[:cut]))
        assert [b.base_offset for b in got] == [0, 1]
        assert len(list(iter_headers(buf[:cut]))) == 2
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(buf[:16])) == []


def test_bad_crc_in_the_middle_raises():
    buf, parts = _log(3)
    raw = bytearray(buf)
    raw[len(parts[0]) + 70] ^= 0x01
    with pytest.raises(CorruptRecordError, match=r"batch at offset 1 \(position \d+\): CRC-32C mismatch"):
        list(iter_headers(raw))
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        list(iter_batches(raw))
    assert len(list(iter_headers(raw, validate_crc=False))) == 4


def test_impossible_length_and_magic():
    buf, _ = _log(1)
    short = bytearray(buf)
    struct.pack_into(">i", short, 8, 20)  # v2 batchLength below the 49-byte minimum
    with pytest.raises(CorruptRecordError, match="expected a length of at least 49 for magic 2, read 20"):
        list(iter_batches(short))
    negative = bytearray(buf)
    struct.pack_into(">i", negative, 8, -5)
    with pytest.raises(CorruptRecordError, match="read -5"):
        list(iter_headers(negative))
    magic = bytearray(buf)
    magic[16] = 7
    with pytest.raises(CorruptRecordError, match="expected magic 0, 1 or 2, read 7"):
        list(iter_batches(magic))


def test_legacy_entries_become_batches():
    v1 = build_message_set([(b"a", b"1", 10), (b"b", b"2", 20)], 1, compression="gzip", base_offset=5)
    v0 = build_message_set([(None, b"3", None)], 0, base_offset=7)
    v2 = build_batch([(b"c", b"4", 30, [("h", b"x")])], base_offset=8)
    batches = list(iter_batches(v1 + v0 + v2))
    assert [b.magic for b in batches] == [1, 0, 2]
    w = batches[0]
    assert [(r.offset, r.key, r.value, r.timestamp) for r in w.records] == [(5, b"a", b"1", 10), (6, b"b", b"2", 20)]
    assert (w.base_offset, w.last_offset, w.compression, w.max_timestamp, w.size) == (5, 6, 1, 20, len(v1))
    assert (batches[1].records[0].offset, batches[1].records[0].timestamp) == (7, -1)
    assert batches[2].records[0].headers == (("h", b"x"),)
    with pytest.raises(CorruptRecordError, match="expected a v2 record batch"):
        list(iter_headers(v1))


def test_mutated_input_only_ever_raises_corrupt_record_error():
    """Seeded mutations (byte flips, truncations, insertions) of every kind of entry, CRC checks
    off so the framing code itself meets the damage: either it decodes or it raises
    CorruptRecordError, never IndexError / struct.error / MemoryError / a codec's own error."""
    import random

    from pyklog.broker.record.legacy import decode_message_set

    rnd = random.Random(20240601)
    samples = [
        build_batch(
            [(b"k%d" % i, b"v" * i, 1000 + i, [("h", b"x")] if i % 2 else ()) for i in range(20)], compression=c
        )
        for c in range(5)
    ]
    samples += [
        build_message_set([(b"k%d" % i, b"v" * i, 1000 + i) for i in range(20)], m, c) for m in (0, 1) for c in range(4)
    ]
    samples.append(build_control_batch(0, 3, 0))
    for _ in range(4000):
        s = bytearray(rnd.choice(samples))
        for _ in range(rnd.randint(1, 4)):
            if not s:
                break
            op = rnd.random()
            if op < 0.6:
                s[rnd.randrange(len(s))] = rnd.randrange(256)
            elif op < 0.8:
                del s[rnd.randrange(len(s)) :]
            else:
                s.insert(rnd.randrange(len(s)), rnd.randrange(256))
        data = bytes(s)
        try:
            for _b in iter_batches(data, validate_crc=False):
                pass
            if data[16:17] in (b"\x00", b"\x01"):
                decode_message_set(data, validate_crc=False)
        except CorruptRecordError:
            pass


def _record_imports(module: str) -> set[str]:
    """Modules of pyklog.broker.record that ``module``'s source imports (anywhere in the file,
    function-level imports included)."""
    import ast
    import importlib.util

    path = importlib.util.find_spec(f"pyklog.broker.record.{module}").origin
    tree = ast.parse(open(path, encoding="utf-8").read())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith("pyklog.broker.record."):
                out.add(node.module.rsplit(".", 1)[1])
            elif node.module == "pyklog.broker.record":
                out.update(a.name for a in node.names)
    return out


def test_record_modules_import_one_way():
    """reader -> legacy, convert -> (legacy, reader); never back (no import cycle)."""
    assert "legacy" in _record_imports("reader")
    assert not {"reader", "convert"} & _record_imports("legacy")
    assert "convert" not in _record_imports("reader")
    assert {"legacy", "reader"} <= _record_imports("convert")


def test_package_reexports_conversions():
    import pyklog.broker.record as record
    from pyklog.broker.record import convert

    assert record.message_set_to_batches is convert.message_set_to_batches
    assert record.batches_to_message_set is convert.batches_to_message_set
    raw = build_message_set([(b"k", b"v", 5)], 1)
    assert [r.key for b in iter_batches(record.message_set_to_batches(raw)) for r in b.records] == [b"k"]
