"""The sink's bulk encoder (``connector/spark/arrow_encode.py``), no server: golden bytes against the
row-by-row batch builder (``build_batch``) and kafka-python's decoder; property tests over random
Arrow tables (nulls, empty values, headers, unicode, explicit partitions) that decode every batch
and check every row lands once, on Kafka's partition, in row order, in batches of at most
batch.size; the vectorised murmur2 against the scalar one."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch

from pyklog.broker.errors import ConfigError, UnknownTopicOrPartitionError
from pyklog.broker.record.batch import build_batch, decode_batch
from pyklog.broker.record.bulk import RecordsSection
from pyklog.connector.partitioner import murmur2, murmur2_array, partition_for_key
from pyklog.connector.spark.arrow_encode import ArrowRecordEncoder, varint_bytes

HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TS = 1_700_000_000_123


def _rows(keys, values, headers):
    def b(x):
        return x.encode() if isinstance(x, str) else x

    return [
        (b(k), b(v), TS, [(e["key"], e["value"]) for e in h] if h else ())
        for k, v, h in zip(keys, values, headers or [None] * len(values))
    ]


def test_golden_bytes_against_build_batch_and_kafka_python():
    values = pa.array(["a", None, "h\u00e9llo \u2603", "", "x" * 300], pa.string())
    keys = pa.array([b"k1", b"", None, b"kk", b"k" * 200], pa.binary())
    headers = pa.array(
        [[{"key": "h", "value": b"1"}], None, [], [{"key": "\u00e9", "value": None}, {"key": "b", "value": b""}], None],
        HEADERS,
    )
    ((p, sec),) = ArrowRecordEncoder(16384).encode("t", 1, values, keys, None, headers, timestamp_ms=TS)
    assert p == 0 and len(sec) == 5
    want = build_batch(
        _rows(keys.to_pylist(), values.to_pylist(), headers.to_pylist()),
        producer_id=7,
        producer_epoch=3,
        base_sequence=11,
        is_transactional=True,
    )
    got = sec.to_batch(producer_id=7, producer_epoch=3, base_sequence=11, is_transactional=True)
    assert got == want
    kb = DefaultRecordBatch(bytearray(got))
    assert kb.validate_crc() and kb.is_transactional and kb.producer_id == 7 and kb.base_sequence == 11
    decoded = [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in kb]
    assert decoded == [
        (0, b"k1", b"a", [("h", b"1")], TS),
        (1, b"", None, [], TS),
        (2, None, "h\u00e9llo \u2603".encode(), [], TS),
        (3, b"kk", b"", [("\u00e9", None), ("b", b"")], TS),
        (4, b"k" * 200, b"x" * 300, [], TS),
    ]


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_section_decodes(codec):
    values = pa.array([b"v%d" % i for i in range(200)])
    ((_, sec),) = ArrowRecordEncoder(1 << 20).encode("t", 1, values, timestamp_ms=TS)
    rb = decode_batch(sec.to_batch(compression=codec))
    assert rb.compression == codec and [r.value for r in rb] == values.to_pylist()


def test_varints_match_the_scalar_encoder():
    from pyklog.broker.record.varint import encode_varint

    vals = [0, -1, 1, 63, 64, -64, -65, 8191, 8192, 1 << 31, -(1 << 31), (1 << 62), -(1 << 63)]
    assert varint_bytes(vals).to_pylist() == [encode_varint(v) for v in vals]


@given(st.lists(st.binary(max_size=40), max_size=300))
@settings(max_examples=60, deadline=None)
def test_murmur2_array_matches_murmur2(keys):
    data = np.frombuffer(b"".join(keys) + b"\0", dtype=np.uint8)
    lengths = np.array([len(k) for k in keys], dtype=np.int64)
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64) if keys else lengths
    assert murmur2_array(data, starts, lengths).tolist() == [murmur2(k) for k in keys]


_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)
_row = st.tuples(
    st.one_of(st.none(), _text),  # key (string column)
    st.one_of(st.none(), st.binary(max_size=60)),  # value
    st.one_of(st.none(), st.integers(0, 3)),  # explicit partition
    st.one_of(
        st.none(), st.lists(st.tuples(_text, st.one_of(st.none(), st.binary(max_size=8))), max_size=3)
    ),  # headers
)


@given(
    rows=st.lists(_row, min_size=1, max_size=200),
    nparts=st.integers(1, 4),
    batch_size=st.sampled_from([62, 200, 1000, 16384]),
    with_key=st.booleans(),
    with_part=st.booleans(),
    with_headers=st.booleans(),
    seed=st.integers(0, 1000),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_tables_round_trip(rows, nparts, batch_size, with_key, with_part, with_headers, seed):
    # every row unique by (key, value), so each decoded record names its row: keys and values get
    # the row's index, a null value only where the key is there
    keys = [None if r[0] is None else f"{r[0]}#{i}" for i, r in enumerate(rows)] if with_key else None
    values = [
        None if r[1] is None and keys is not None and keys[i] is not None else (r[1] or b"") + b"#%d" % i
        for i, r in enumerate(rows)
    ]
    parts = [None if r[2] is None else r[2] % nparts for r in rows] if with_part else None
    headers = (
        [None if r[3] is None else [{"key": k, "value": v} for k, v in r[3]] for r in rows] if with_headers else None
    )
    enc = ArrowRecordEncoder(batch_size, random.Random(seed))
    out = enc.encode(
        "t",
        nparts,
        pa.array(values, pa.binary()),
        None if keys is None else pa.array(keys, pa.string()),
        None if parts is None else pa.array(parts, pa.int32()),
        None if headers is None else pa.array(headers, HEADERS),
        timestamp_ms=TS,
    )
    seen = []  # (partition, row index) in the order written
    by_value = {}
    for i, v in enumerate(values):
        by_value.setdefault((v, None if keys is None else keys[i]), []).append(i)
    want_rows = _rows(keys or [None] * len(values), values, headers)
    for p, sec in out:
        assert 0 <= p < nparts and isinstance(sec, RecordsSection)
        data = sec.to_batch(producer_id=5, producer_epoch=0, base_sequence=0)
        assert len(data) <= batch_size or len(sec) == 1  # batch.size, unless one record alone is larger
        rb = decode_batch(data)
        assert rb.header.records_count == len(sec)
        for r in rb:
            assert r.timestamp == TS
            key = (r.value, None if keys is None else (r.key.decode() if r.key is not None else None))
            (i,) = by_value[key]
            seen.append((p, i))
            assert (r.key, r.value, tuple(r.headers)) == (want_rows[i][0], want_rows[i][1], tuple(want_rows[i][3]))
        # the whole batch equals the row-by-row builder's for the same records
        assert data == build_batch(
            [want_rows[i] for _, i in seen[-len(sec) :]], producer_id=5, producer_epoch=0, base_sequence=0
        )
    assert sorted(i for _, i in seen) == list(range(len(values)))  # every row exactly once
    got_part = {i: p for p, i in seen}
    for i in range(len(values)):
        if parts is not None and parts[i] is not None:
            assert got_part[i] == parts[i]
        elif keys is not None and keys[i] is not None:
            assert got_part[i] == partition_for_key(keys[i].encode(), nparts)
    for p in range(nparts):  # row order kept within each partition
        order = [i for q, i in seen if q == p]
        assert order == sorted(order)


def test_null_keys_are_sticky_for_a_batch_then_move_on():
    enc = ArrowRecordEncoder(1000, random.Random(3))
    out = enc.encode("t", 4, pa.array([b"x" * 50] * 200), timestamp_ms=TS)
    assert len(out) > 5
    assert all(a[0] != b[0] for a, b in itertools.pairwise(out))  # each full batch moves to another partition
    assert all(sec.nbytes <= 1000 for _, sec in out)
    assert len({p for p, _ in out}) > 1


def test_bad_partition_and_null_header_key_fail():
    enc = ArrowRecordEncoder(16384)
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 5"):
        enc.encode("t", 2, pa.array([b"a", b"b"]), partition=pa.array([0, 5], pa.int32()))
    with pytest.raises(ConfigError, match="null key"):
        enc.encode("t", 2, pa.array([b"a"]), headers=pa.array([[{"key": None, "value": b"1"}]], HEADERS))


def test_sliced_input_columns():
    values = pa.array([b"v%d" % i for i in range(50)]).slice(10, 20)
    keys = pa.array(["k%d" % i for i in range(50)]).slice(10, 20)
    headers = pa.array([[{"key": "h", "value": b"%d" % i}] if i % 2 else None for i in range(50)], HEADERS).slice(
        10, 20
    )
    ((_, sec),) = ArrowRecordEncoder(1 << 20).encode("t", 1, values, keys, None, headers, timestamp_ms=TS)
    assert sec.to_batch() == build_batch(_rows(keys.to_pylist(), values.to_pylist(), headers.to_pylist()))


def test_sliced_key_column_partitions_by_its_own_bytes():
    keys = pa.array(["key-%d" % i for i in range(300)]).slice(37, 200)
    values = pa.array([b"v%d" % i for i in range(300)]).slice(37, 200)
    out = ArrowRecordEncoder(1 << 20).encode("t", 5, values, keys, timestamp_ms=TS)
    got = {}
    for p, sec in out:
        for r in decode_batch(sec.to_batch()):
            got[r.key] = p
    assert got == {k.encode(): partition_for_key(k.encode(), 5) for k in keys.to_pylist()}
