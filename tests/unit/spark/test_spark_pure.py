"""Unit tests of the pyklog data source's pure parts: options, offsets JSON, rate limiting, and the
bulk Arrow decoder (against batches built by broker.record.batch).  No servers, no SparkSession."""

from __future__ import annotations

import itertools
import json
import pickle
import random

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pyklog.broker.errors import ConfigError, CorruptRecordError
from pyklog.broker.record.batch import build_batch, build_control_batch
from pyklog.broker.record.header import LOG_APPEND_TIME
from pyklog.connector.spark import arrow as A
from pyklog.connector.spark import offsets as O
from pyklog.connector.spark.options import (
    parse_duration_ms,
    parse_sink_options,
    parse_source_options,
)

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


# ------------------------------------------------------------------------------------------ options
def src(streaming=True, **kw):
    opts = dict(BOOT, subscribe="t")
    opts.update({k.replace("__", "."): v for k, v in kw.items()})
    opts = {k: v for k, v in opts.items() if v is not None}
    return parse_source_options(opts, streaming=streaming)


def test_defaults_match_spark_kafka():
    o = src()
    assert o.starting.kind == "latest" and o.ending is None
    assert o.fail_on_data_loss is True and o.include_headers is False
    assert o.max_trigger_delay_ms == 15 * 60 * 1000
    assert o.isolation_level == "read_uncommitted"
    assert o.offsets_storage == "kafka"  # no zookeeper.connect
    b = src(streaming=False)
    assert b.starting.kind == "earliest" and b.ending.kind == "latest"
    z = parse_source_options({"zookeeper.connect": "h:2181/x", "subscribe": "a,b"}, streaming=True)
    assert z.offsets_storage == "zookeeper" and z.uses_group
    assert z.subscription.topics == ("a", "b")


def test_every_option_parses():
    o = parse_source_options(
        {
            "zookeeper.connect": "h:2181",
            "kafka.bootstrap.servers": "a:1,b:2",
            "subscribePattern": "ev.*",
            "startingOffsets": '{"ev1":{"0":23,"1":-2},"ev2":{"0":-1}}',
            "failOnDataLoss": "false",
            "maxOffsetsPerTrigger": "1000",
            "minOffsetsPerTrigger": "10",
            "maxTriggerDelay": "30s",
            "minPartitions": "8",
            "includeHeaders": "true",
            "isolation.level": "read_committed",
            "group.id": "g1",
            "offsets.storage": "kafka",
            "dual.commit.enabled": "true",
            "partition.assignment.strategy": "sticky",
            "kafka.max.partition.fetch.bytes": "65536",
            "kafka.client.id": "me",
        },
        streaming=True,
    )
    assert o.subscription.kind == "subscribePattern" and o.subscription.matches("ev1")
    assert not o.subscription.matches("xev1")
    assert o.starting.offsets_dict() == {("ev1", 0): 23, ("ev1", 1): -2, ("ev2", 0): -1}
    assert (o.fail_on_data_loss, o.max_offsets_per_trigger, o.min_offsets_per_trigger) == (False, 1000, 10)
    assert o.max_trigger_delay_ms == 30000 and o.min_partitions == 8 and o.include_headers
    assert o.isolation_level == "read_committed" and o.group_id == "g1"
    assert (o.offsets_storage, o.dual_commit, o.assignment_strategy) == ("kafka", True, "sticky")
    assert o.max_partition_fetch_bytes == 65536 and o.cluster.client_id == "me"
    assert pickle.loads(pickle.dumps(o)) == o
    a = src(subscribe=None, assign='{"t":[1,0],"u":[2]}')
    assert a.subscription.partitions == (("t", 0), ("t", 1), ("u", 2)) and not a.uses_group
    ts = src(startingTimestamp="1700000000000", startingOffsetsByTimestamp='{"t":{"0":5}}')
    assert ts.starting.kind == "timestamp" and ts.starting.timestamp == 1700000000000  # wins, as Spark
    bt = src(startingOffsetsByTimestamp='{"t":{"0":5}}', startingOffsetsByTimestampStrategy="latest")
    assert bt.starting.kind == "timestamps" and bt.starting.strategy == "latest"
    e = src(streaming=False, endingOffsets='{"t":{"0":50,"1":-1}}', endingTimestamp=None)
    assert e.ending.offsets_dict() == {("t", 0): 50, ("t", 1): -1}
    assert src(**{"kafka.group.id": "kg"}).group_id == "kg"
    assert src(**{"kafka.isolation.level": "read_committed"}).isolation_level == "read_committed"


@pytest.mark.parametrize(
    "opts, needle",
    [
        ({"subscribe": "t"}, "'kafka.bootstrap.servers' or 'zookeeper.connect'"),
        ({**BOOT}, "exactly one of the options 'subscribe', 'subscribePattern' or 'assign'"),
        ({**BOOT, "subscribe": "t", "assign": '{"t":[0]}'}, "read subscribe, assign"),
        ({**BOOT, "subscribe": "bad topic!"}, "option 'subscribe'"),
        ({**BOOT, "subscribePattern": "("}, "option 'subscribePattern'"),
        ({**BOOT, "assign": '{"t":"0"}'}, "option 'assign'"),
        ({**BOOT, "assign": "[1]"}, "option 'assign'"),
        ({**BOOT, "subscribe": "t", "startingOffsets": "first"}, "option 'startingOffsets'"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"0":-3}}'}, "option 'startingOffsets'"),
        ({**BOOT, "subscribe": "t", "startingOffsets": '{"t":{"x":1}}'}, "option 'startingOffsets'"),
        ({**BOOT, "subscribe": "t", "endingOffsets": "latest"}, "'endingOffsets' is not valid in streaming"),
        ({**BOOT, "subscribe": "t", "failOnDataLoss": "yes"}, "option 'failOnDataLoss'"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, "option 'maxOffsetsPerTrigger'"),
        ({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "ten"}, "option 'maxOffsetsPerTrigger'"),
        (
            {**BOOT, "subscribe": "t", "minOffsetsPerTrigger": "9", "maxOffsetsPerTrigger": "5"},
            "'minOffsetsPerTrigger'",
        ),
        ({**BOOT, "subscribe": "t", "maxTriggerDelay": "soon"}, "option 'maxTriggerDelay'"),
        ({**BOOT, "subscribe": "t", "minPartitions": "-1"}, "option 'minPartitions'"),
        ({**BOOT, "subscribe": "t", "includeHeaders": "1"}, "option 'includeHeaders'"),
        ({**BOOT, "subscribe": "t", "isolation.level": "serializable"}, "option 'isolation.level'"),
        ({**BOOT, "subscribe": "t", "offsets.storage": "redis"}, "option 'offsets.storage'"),
        ({**BOOT, "subscribe": "t", "offsets.storage": "zookeeper"}, "'zookeeper.connect' is not set"),
        ({**BOOT, "subscribe": "t", "dual.commit.enabled": "true"}, "'dual.commit.enabled' needs"),
        ({**BOOT, "subscribe": "t", "partition.assignment.strategy": "cooperative"}, "'partition.assignment.strategy'"),
        ({**BOOT, "subscribe": "t", "group.id": "a/b"}, "option 'group.id'"),
        ({**BOOT, "subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "'kafka.auto.offset.reset'"),
        ({**BOOT, "subscribe": "t", "kafka.value.deserializer": "x"}, "'kafka.value.deserializer'"),
        ({**BOOT, "subscribe": "t", "kafka.security.protocol": "TLS"}, "kafka.security.protocol"),
        ({**BOOT, "subscribe": "t", "kafka.security.protocol": "SASL_PLAINTEXT"}, "sasl.mechanism"),
        (
            {**BOOT, "subscribe": "t", "kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"},
            "user name",
        ),
        ({**BOOT, "subscribe": "t", "startingOffset": "earliest"}, "did you mean 'startingOffsets'"),
        ({"kafka.bootstrap.servers": "nohostport", "subscribe": "t"}, "option 'kafka.bootstrap.servers'"),
    ],
)
def test_bad_source_options_name_the_option(opts, needle):
    with pytest.raises(ConfigError) as ei:
        parse_source_options(opts, streaming=True)
    assert needle in str(ei.value)


@pytest.mark.parametrize(
    "opts, needle",
    [
        ({"startingOffsets": "latest"}, "'latest' is not valid for batch"),
        ({"startingOffsets": '{"t":{"0":-1}}'}, "-1 (latest) is not valid"),
        ({"endingOffsets": "earliest"}, "'earliest' is not valid for batch"),
        ({"endingOffsets": '{"t":{"0":-2}}'}, "-2 (earliest) is not valid"),
    ],
)
def test_bad_batch_options(opts, needle):
    with pytest.raises(ConfigError) as ei:
        parse_source_options({**BOOT, "subscribe": "t", **opts}, streaming=False)
    assert needle in str(ei.value)


def test_sink_options():
    s = parse_sink_options(
        {
            **BOOT,
            "topic": "out",
            "kafka.acks": "all",
            "kafka.compression.type": "zstd",
            "kafka.linger.ms": "10",
            "kafka.batch.size": "65536",
            "checkpointLocation": "/x",
        }
    )
    assert s.topic == "out"
    assert s.producer_dict() == {"acks": "all", "compression.type": "zstd", "linger.ms": "10", "batch.size": "65536"}
    for bad, needle in [
        ({"kafka.acks": "2"}, "kafka.acks"),
        ({"kafka.compression.type": "brotli"}, "compression.type"),
        ({"kafka.linger.ms": "x"}, "kafka.linger.ms"),
        ({"topic": "a b"}, "option 'topic'"),
        ({"kafka.value.serializer": "x"}, "kafka.value.serializer"),
    ]:
        with pytest.raises(ConfigError) as ei:
            parse_sink_options({**BOOT, **bad})
        assert needle in str(ei.value)
    with pytest.raises(ConfigError, match="kafka.bootstrap.servers"):
        parse_sink_options({"topic": "x"})


def test_durations():
    assert parse_duration_ms("15m", "x") == 900000
    assert parse_duration_ms("2 s", "x") == 2000
    assert parse_duration_ms("250", "x") == 250
    assert parse_duration_ms("1h", "x") == 3600000


# ------------------------------------------------------------------------------------------ offsets
def test_offsets_json_sorted_and_stable():
    a = O.to_json({("b", 10): 5, ("a", 2): 1, ("b", 2): 7, ("a", 1): 0})
    assert json.dumps(a) == '{"a": {"1": 0, "2": 1}, "b": {"2": 7, "10": 5}}'
    # the same content in another order gives the same text
    b = O.to_json(dict(reversed(list(O.from_json(a).items()))))
    assert json.dumps(a) == json.dumps(b)
    assert O.from_json(json.loads(json.dumps(a))) == {("a", 1): 0, ("a", 2): 1, ("b", 2): 7, ("b", 10): 5}


def test_ranges_and_new_partitions():
    start = {("t", 0): 5, ("t", 1): 3, ("gone", 0): 9}
    end = {("t", 0): 10, ("t", 1): 3, ("t", 2): 40}
    assert O.ranges(start, end) == [("t", 0, 5, 10)]  # t-2 is new: nothing read this batch


def test_split_ranges_min_partitions():
    rngs = [("t", 0, 0, 100), ("t", 1, 0, 10)]
    assert O.split_ranges(rngs, None) == rngs
    out = O.split_ranges(rngs, 10)
    assert sum(b - a for _, _, a, b in out) == 110
    assert len([r for r in out if r[1] == 0]) == 9 and len([r for r in out if r[1] == 1]) == 1
    # contiguous, no gap or overlap
    zero = sorted((a, b) for t, p, a, b in out if p == 0)
    assert zero[0][0] == 0 and zero[-1][1] == 100 and all(x[1] == y[0] for x, y in itertools.pairwise(zero))


@given(
    st.dictionaries(
        st.tuples(st.sampled_from("ab"), st.integers(0, 5)),
        st.tuples(st.integers(0, 1000), st.integers(0, 1000)),
        min_size=1,
    ),
    st.integers(1, 3000),
)
@settings(max_examples=200, deadline=None)
def test_rate_limit_exact(parts, limit):
    start = {tp: min(a, b) for tp, (a, b) in parts.items()}
    latest = {tp: max(a, b) for tp, (a, b) in parts.items()}
    out = O.rate_limit(start, latest, limit)
    total = sum(latest[tp] - start[tp] for tp in start)
    admitted = sum(out[tp] - start[tp] for tp in start)
    assert admitted == min(total, limit)
    assert all(start[tp] <= out[tp] <= latest[tp] for tp in start)
    assert out == O.rate_limit(dict(reversed(list(start.items()))), latest, limit)  # order-independent


# ------------------------------------------------------------------------------------------ arrow
def rows_of(batch):
    return [
        (r["key"], r["value"], r["offset"], r["timestamp"].timestamp() * 1000, r["timestampType"])
        for r in batch.to_pylist()
    ]


def test_schema_is_spark_kafka_arrow_schema():
    s = A.arrow_schema(True)
    assert str(s.field("timestamp").type) == "timestamp[us, tz=UTC]"
    assert s.field("partition").type == pa.int32() and s.field("offset").type == pa.int64()
    assert s.field("headers").type == A.HEADER_TYPE
    assert A.spark_schema_ddl(False) == (
        "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
    )


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_decode_matches_records(codec):
    rnd = random.Random(codec)
    recs, batches, base = [], [], 100
    for _ in range(5):
        n = rnd.randint(1, 50)
        chunk = [
            (
                None if rnd.random() < 0.2 else rnd.randbytes(rnd.randint(0, 20)),
                None if rnd.random() < 0.1 else rnd.randbytes(rnd.randint(0, 300)),
                1_700_000_000_000 + rnd.randint(0, 10_000),
                (),
            )
            for _ in range(n)
        ]
        batches.append(build_batch(chunk, base_offset=base, compression=codec))
        recs += [(k, v, base + i, ts, 0) for i, (k, v, ts, _) in enumerate(chunk)]
        base += n
    buf = b"".join(batches)
    d = A.decode_fetch(buf, "topic", 3, 0, 10**9)
    assert d.batch.schema == A.arrow_schema(False)
    assert rows_of(d.batch) == recs
    assert set(d.batch.column("topic").to_pylist()) == {"topic"}
    assert set(d.batch.column("partition").to_pylist()) == {3}
    assert d.next_offset == base and d.first_offset == 100 and d.last_offset == base - 1
    # a window inside the data, and a fetch cut in the middle of the last batch
    lo, hi = recs[7][2], recs[-3][2]
    d2 = A.decode_fetch(buf[:-5], "topic", 3, lo, hi)  # the last batch is partial: ignored
    d3 = A.decode_fetch(buf[: len(buf) - len(batches[-1])], "topic", 3, lo, hi)
    assert rows_of(d2.batch) == rows_of(d3.batch)
    assert d2.next_offset == d3.next_offset == base - (len(recs) - sum(1 for r in recs if r[2] < d3.next_offset))
    assert rows_of(d3.batch) == [r for r in recs if lo <= r[2] < min(hi, d3.next_offset)]


def test_range_with_no_records_left_below_end():
    # a compacted log: offsets 5..9 are gone, the next batch starts at 10 >= end
    buf = build_batch([(b"k", b"v", 1, ())] * 3, base_offset=10)
    d = A.decode_fetch(buf, "t", 0, 5, 8)
    assert d.batch is None and d.next_offset == 10


def test_decode_uniform_records_fast_path():
    recs = [(b"k", b"x" * 100, 1_700_000_000_000, ()) for _ in range(300)]
    d = A.decode_fetch(build_batch(recs, base_offset=7), "t", 0, 0, 1000)
    assert d.batch.num_rows == 300 and d.batch.column("offset").to_pylist() == list(range(7, 307))
    assert d.batch.column("value").to_pylist() == [b"x" * 100] * 300


def test_decode_mostly_uniform_records_several_rounds():
    values = [b"y" * (130 if i % 50 == 49 else 100) for i in range(400)]
    d = A.decode_fetch(build_batch([(None, v, 1_700_000_000_000, ()) for v in values]), "t", 0, 0, 1000)
    assert d.batch.column("value").to_pylist() == values
    assert d.batch.column("key").null_count == 400


def test_headers_and_log_append_time():
    recs = [(b"k", b"v", 1_000 + i, (("a", b"1"), ("b", None)) if i % 2 else ()) for i in range(6)]
    buf = build_batch(recs, timestamp_type=LOG_APPEND_TIME)
    d = A.decode_fetch(buf, "t", 0, 1, 100, include_headers=True)
    rows = d.batch.to_pylist()
    assert [r["offset"] for r in rows] == [1, 2, 3, 4, 5]
    assert rows[0]["headers"] == [{"key": "a", "value": b"1"}, {"key": "b", "value": None}]
    assert rows[1]["headers"] is None  # no headers: null, as Spark's Kafka source
    assert {r["timestampType"] for r in rows} == {1}
    assert {r["timestamp"].timestamp() for r in rows} == {1.005}  # LogAppendTime = maxTimestamp
    assert d.batch.schema == A.arrow_schema(True)
    # without includeHeaders the column is absent but headers are still checked for framing
    assert A.decode_fetch(buf, "t", 0, 0, 100).batch.num_columns == 7


def test_control_and_aborted_batches():
    pid = 77
    data = build_batch(
        [(None, b"a", 1, ()), (None, b"b", 1, ())],
        base_offset=0,
        producer_id=pid,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    abort = build_control_batch(0, pid, 0, base_offset=2)
    data2 = build_batch(
        [(None, b"c", 1, ())], base_offset=3, producer_id=pid, producer_epoch=0, base_sequence=2, is_transactional=True
    )
    commit = build_control_batch(1, pid, 0, base_offset=4)
    buf = data + abort + data2 + commit
    d = A.decode_fetch(buf, "t", 0, 0, 100)
    assert d.batch.column("value").to_pylist() == [b"a", b"b", b"c"] and d.next_offset == 5
    d = A.decode_fetch(buf, "t", 0, 0, 100, aborted=A.AbortedTransactions([(pid, 0)]))
    assert d.batch.column("value").to_pylist() == [b"c"] and d.next_offset == 5
    only_markers = A.decode_fetch(abort, "t", 0, 0, 100)
    assert only_markers.batch is None and only_markers.next_offset == 3


def test_corrupt_input_is_reported():
    buf = bytearray(build_batch([(b"k", b"v" * 10, 1, ())] * 3))
    buf[-3] ^= 0xFF
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        A.decode_fetch(bytes(buf), "t", 0, 0, 10)
    # a wrong record length with a valid CRC: re-sign the batch after breaking a length varint
    good = build_batch([(b"k", b"v" * 10, 1, ())] * 3)
    from crc32c import crc32c

    from pyklog.broker.record.header import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE

    bad = bytearray(good)
    bad[HEADER_SIZE] = bad[HEADER_SIZE] + 2  # first record claims one more byte
    bad[CRC_OFFSET : CRC_OFFSET + 4] = crc32c(bytes(bad[ATTRIBUTES_OFFSET:])).to_bytes(4, "big")
    with pytest.raises(CorruptRecordError, match="batch at offset 0"):
        A.decode_fetch(bytes(bad), "t", 0, 0, 10)
    assert A.decode_fetch(good[:30], "t", 0, 0, 10).next_offset is None  # partial: not an error


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=200)),
            st.integers(0, 2**40),
            st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=2),
        ),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from(["none", "lz4"]),
)
@settings(max_examples=60, deadline=None)
def test_decode_round_trip_property(recs, codec):
    buf = build_batch([(k, v, ts, tuple(h)) for k, v, ts, h in recs], base_offset=1000, compression=codec)
    d = A.decode_fetch(buf, "t", 0, 0, 10**9, include_headers=True)
    rows = d.batch.to_pylist()
    assert [(r["key"], r["value"]) for r in rows] == [(k, v) for k, v, _, _ in recs]
    assert [r["offset"] for r in rows] == list(range(1000, 1000 + len(recs)))
    first = recs[0][2]
    assert d.batch.column("timestamp").cast(pa.int64()).to_pylist() == [
        (first + (ts - first)) * 1000 for _, _, ts, _ in recs
    ]
    assert [None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]] for r in rows] == [
        [(k, v) for k, v in h] or None for _, _, _, h in recs
    ]


# ------------------------------------------------- run-layout fast path (arrow._uniform_runs)
def reference_rows(buf, start=0, end=10**12, include_headers=False):
    """The rows decode_fetch must give, from the pure-Python record decoder (broker.record)."""
    from pyklog.broker.record.reader import iter_batches

    out = []
    for rb in iter_batches(buf):
        if rb.header.is_control:
            continue
        for r in rb.records:
            if start <= r.offset < end:
                row = {
                    "key": r.key,
                    "value": r.value,
                    "topic": "t",
                    "partition": 3,
                    "offset": r.offset,
                    "ts": r.timestamp * 1000,
                    "timestampType": rb.header.timestamp_type,
                }
                if include_headers:
                    row["headers"] = [{"key": k, "value": v} for k, v in r.headers] or None
                out.append(row)
    return out


def decoded_rows(d):
    rows = d.batch.to_pylist() if d.batch is not None else []
    for r, ts in zip(rows, d.batch.column("timestamp").cast(pa.int64()).to_pylist() if rows else []):
        del r["timestamp"]
        r["ts"] = ts
    return rows


def re_sign(buf: bytearray, pos: int = 0) -> bytes:
    from crc32c import crc32c

    from pyklog.broker.record.header import ATTRIBUTES_OFFSET, CRC_OFFSET, LOG_OVERHEAD

    size = LOG_OVERHEAD + int.from_bytes(buf[pos + 8 : pos + 12], "big")
    buf[pos + CRC_OFFSET : pos + CRC_OFFSET + 4] = crc32c(bytes(buf[pos + ATTRIBUTES_OFFSET : pos + size])).to_bytes(
        4, "big"
    )
    return bytes(buf)


def test_fast_path_used_and_exact_for_uniform_runs():
    t0 = 1_700_000_000_000
    # record 0: 1-byte deltas; 1..63: 2-byte timestampDelta; 64..: 2-byte offsetDelta and 1-byte
    # timestampDelta (same record size as 1..63, other field widths); keys null and not null
    recs = [
        (
            None if (i // 200) % 2 else b"key%03d" % (i % 10),
            b"v" * 100,
            t0 + (64 if 0 < i < 64 else 0) + (i // 500) * 70_000,
            (),
        )
        for i in range(2000)
    ]
    b1 = build_batch(recs[:1000], base_offset=100)
    b2 = build_batch(recs[1000:], base_offset=1100, compression="lz4")
    ctrl = build_control_batch(1, 5, 0, base_offset=2100)
    b3 = build_batch([(b"k", b"w" * 37, t0, ())] * 5, base_offset=2101, timestamp_type=LOG_APPEND_TIME)
    buf = b1 + b2 + ctrl + b3
    # the fast path accepts these sections (checked directly, then through decode_fetch)
    assert A._uniform_runs(*_sections_of(b1 + b2)) is not None
    for start, end, nxt in ((0, 10**9, 2106), (150, 2103, 2106), (1100, 1101, 2100)):
        for hdrs in (False, True):
            d = A.decode_fetch(buf + b1[:200], "t", 3, start, end, include_headers=hdrs)  # + partial
            assert decoded_rows(d) == reference_rows(buf, start, end, hdrs)
            assert d.next_offset == nxt
    assert A.decode_fetch(buf, "t", 3, 0, 10**9).batch.schema == A.arrow_schema(False)


def _sections_of(buf):
    from pyklog.broker.record.compression import decompress
    from pyklog.broker.record.reader import iter_headers

    secs, counts = [], []
    for pos, h in iter_headers(buf):
        body = buf[pos + 61 : pos + h.size]
        secs.append(decompress(h.compression, body) if h.compression else body)
        counts.append(h.records_count)
    joined = b"".join(secs) + b"\x00" * 16
    import numpy as np

    return joined, np.frombuffer(joined, dtype=np.uint8), secs, counts


@pytest.mark.parametrize("case", ["headers", "sizes", "nulls"])
def test_fast_path_falls_back_for_other_layouts(case):
    t0 = 1_700_000_000_000
    recs = [(b"k", b"x" * 60, t0 + i, ()) for i in range(300)]
    if case == "headers":  # one record in the middle of a run carries headers
        recs[150] = (b"k", b"x" * 60, t0 + 150, (("h", b"1"),))
    elif case == "sizes":  # varied sizes all through the batch
        recs = [(b"k", b"x" * random.Random(i).randrange(0, 300), t0, ()) for i in range(300)]
    else:  # null values in the middle
        recs[10:20] = [(b"k", None, t0, ())] * 10
    buf = build_batch(recs, base_offset=5)
    d = A.decode_fetch(buf, "t", 3, 0, 10**9, include_headers=True)
    assert decoded_rows(d) == reference_rows(buf, include_headers=True)


def test_fast_path_detects_corruption_inside_a_run():
    from pyklog.broker.record.header import HEADER_SIZE

    good = build_batch([(None, b"z" * 50, 1_000, ())] * 40)
    size = 1 + 1 + 1 + 1 + 1 + 1 + 50 + 1  # length, attributes, ts, od, key len, value len, value, hc
    assert good[HEADER_SIZE] == (size - 1) * 2  # zigzag record length of the first record
    bad = bytearray(good)
    bad[HEADER_SIZE + 20 * size + size - 1] = 2  # record 20 claims one header
    with pytest.raises(CorruptRecordError, match="record at offset 20"):
        A.decode_fetch(re_sign(bad), "t", 0, 0, 100)
    bad = bytearray(good)
    bad[HEADER_SIZE + 30 * size] += 2  # record 30 claims one more byte
    with pytest.raises(CorruptRecordError, match="batch at offset 0"):
        A.decode_fetch(re_sign(bad), "t", 0, 0, 100)
    bad = bytearray(good)
    bad[HEADER_SIZE + 7 * size + 5] = 0xC8  # record 7's value length as a 2-byte varint start
    with pytest.raises(CorruptRecordError):
        A.decode_fetch(re_sign(bad), "t", 0, 0, 100)
    assert A.decode_fetch(good, "t", 0, 0, 100).batch.num_rows == 40


# ------------------------------------------- many small batches (arrow._lockstep_starts)
def _small_batches(seed, n_batches=60, max_records=8, big_at=None):
    """Batches of 1..max_records records of varied layouts, as a producer lingering a millisecond
    sends them; returns (buffer, list of (base offset, bytes) per batch)."""
    rnd = random.Random(seed)
    t0, base, out = 1_700_000_000_000, 500, []
    for b in range(n_batches):
        n = 40 if b == big_at else rnd.randint(1, max_records)
        recs = [
            (
                None if rnd.random() < 0.5 else rnd.randbytes(rnd.randint(0, 12)),
                None if rnd.random() < 0.05 else rnd.randbytes(rnd.choice((8, 8, 8, rnd.randint(0, 200)))),
                t0 + b + rnd.randint(0, 3000),
                (("h", b"1"),) if rnd.random() < 0.05 else (),
            )
            for _ in range(n)
        ]
        codec = "lz4" if b % 7 == 3 else "none"
        out.append((base, build_batch(recs, base_offset=base, compression=codec)))
        base += n
    return b"".join(x for _, x in out), out


def test_many_small_batches_decode_exactly_in_lockstep(monkeypatch):
    calls = []
    real = A._lockstep_starts
    monkeypatch.setattr(A, "_lockstep_starts", lambda *a, **k: calls.append(len(a[2])) or real(*a, **k))
    buf, batches = _small_batches(1, big_at=20)
    ctrl = build_control_batch(1, 9, 0, base_offset=batches[-1][0] + 100)
    last = batches[-1][0]
    for start, end in ((0, 10**9), (batches[5][0] + 1, batches[40][0] + 2), (last, last + 1)):
        for hdrs in (False, True):
            d = A.decode_fetch(buf + ctrl[:30], "t", 3, start, end, include_headers=hdrs)  # + partial
            assert decoded_rows(d) == reference_rows(buf, start, end, hdrs)
    assert calls and calls[0] == len(batches) - 1  # every batch but the 40-record one, together
    full = A.decode_fetch(buf + ctrl, "t", 3, 0, 10**9)
    assert full.next_offset == batches[-1][0] + 101


@given(
    st.lists(
        st.lists(
            st.tuples(
                st.one_of(st.none(), st.binary(max_size=20)),
                st.one_of(st.none(), st.binary(max_size=300)),
                st.integers(0, 2**35),
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=2,
        max_size=40,
    )
)
@settings(max_examples=60, deadline=None)
def test_small_batches_round_trip_property(batches):
    parts, base = [], 0
    for recs in batches:
        parts.append(build_batch([(k, v, ts, ()) for k, v, ts in recs], base_offset=base))
        base += len(recs)
    buf = b"".join(parts)
    assert decoded_rows(A.decode_fetch(buf, "t", 3, 0, 10**9)) == reference_rows(buf)


def test_corruption_in_one_small_batch_names_it():
    from pyklog.broker.record.header import HEADER_SIZE

    buf, batches = _small_batches(2, n_batches=30, max_records=4)
    offsets = [0]
    for _, b in batches[:-1]:
        offsets.append(offsets[-1] + len(b))
    k = 16
    assert batches[k][1][22] & 0x7 == 0  # uncompressed: the records section is as built
    pos = offsets[k] + HEADER_SIZE  # the batch's first record's length varint
    for change, what in (
        (lambda b: b.__setitem__(pos, b[pos] + 2), "runs past it|bytes before"),
        (lambda b: b.__setitem__(pos, b[pos] - 2), "bytes before its end|record length"),
        (lambda b: b.__setitem__(pos, 1), "runs past it|record length"),  # -1
        (lambda b: b.__setitem__(slice(pos, pos + 6), b"\xff" * 6), "runs past it"),
    ):
        bad = bytearray(buf)
        change(bad)
        with pytest.raises(CorruptRecordError, match=f"batch at offset {batches[k][0]}") as e:
            A.decode_fetch(re_sign(bad, offsets[k]), "t", 3, 0, 10**9)
        assert e.match(what)
    assert len(decoded_rows(A.decode_fetch(buf, "t", 3, 0, 10**9))) == sum(1 for _ in reference_rows(buf))


def test_bool_option_of_source_schema_uses_the_option_rules():
    from pyklog.broker.errors import ConfigError
    from pyklog.connector.spark.source import _bool_option

    assert _bool_option({"INCLUDEHEADERS": " True "}, "includeHeaders") is True
    assert _bool_option({}, "includeHeaders") is False  # the default of BOOLEAN_OPTIONS
    with pytest.raises(ConfigError, match=r"option 'includeHeaders': expected 'true' or 'false', read 'yes'"):
        _bool_option({"includeHeaders": "yes"}, "includeHeaders")


def test_input_partition_carries_the_planned_leader_through_pickling():
    from pyklog.connector.spark.source import PyklogInputPartition

    part = pickle.loads(pickle.dumps(PyklogInputPartition("t", 3, 10, 20, "127.0.0.1:9093", 1)))
    assert (part.topic, part.partition, part.start, part.end) == ("t", 3, 10, 20)
    assert (part.leader, part.leader_id) == ("127.0.0.1:9093", 1)
    assert "leader=1@127.0.0.1:9093" in repr(part)
    unplanned = pickle.loads(pickle.dumps(PyklogInputPartition("t", 0, 0, 0, None)))
    assert unplanned.leader is None and unplanned.leader_id is None


def test_task_cache_options():
    from pyklog.connector.spark.options import parse_sink_options, parse_source_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}
    assert parse_source_options(base, streaming=True).consumer_cache is True
    assert parse_source_options({**base, "consumerCache.enabled": "FALSE"}, streaming=True).consumer_cache is False
    with pytest.raises(ConfigError, match=r"option 'consumerCache.enabled': expected 'true' or 'false', read 'off'"):
        parse_source_options({**base, "consumercache.enabled": "off"}, streaming=True)
    sink = {"kafka.bootstrap.servers": "127.0.0.1:9092", "topic": "t"}
    assert parse_sink_options(sink).producer_cache is True
    assert parse_sink_options({**sink, "producerCache.enabled": "false"}).producer_cache is False
    with pytest.raises(ConfigError, match=r"option 'producerCache.enabled'"):
        parse_sink_options({**sink, "producercache.enabled": "1"})


def test_consumer_cache_take_give_expire():
    """The per-process cache of read-task consumers (no broker: stand-in consumers with a closed
    flag; the cache's own rules: one task at a time, failed ones closed, idle ones expire)."""
    import time as _time

    from pyklog.connector.spark.read_task import consumer_usable
    from pyklog.connector.spark.task_cache import TaskClientCache

    class Fake:
        def __init__(self):
            self.closed = False
            self.client = type("C", (), {"close_dead_connections": lambda self: 0})()

        def close(self):
            self.closed = True

    cache = TaskClientCache("consumer", max_idle_per_key=2, usable=consumer_usable)  # as TASK_CONSUMERS
    a = cache.take("k", Fake)
    b = cache.take("k", Fake)  # a is in use: a second one
    assert a is not b and cache.created == 2
    cache.give("k", a, ok=True)
    assert cache.take("k", Fake) is a and cache.reused == 1
    cache.give("k", b, ok=False)  # a failed task closes its consumer
    assert b.closed
    cache.give("k", a, ok=True)
    assert cache.take("other", Fake) is not a  # keys never share
    cache.IDLE_TIMEOUT_S = 0.0
    _time.sleep(0.01)
    c = cache.take("k", Fake)  # a expired: closed, a new one made
    assert a.closed and c is not a
    cache.clear()


# ------------------------------------------------ fetchOnDriver: one Arrow batch per micro-batch
@pytest.mark.parametrize("without_concat_batches", [False, True])
def test_driver_fetch_coalesces_batches_in_order(monkeypatch, without_concat_batches):
    from pyklog.connector.spark import driver_fetch as D

    if without_concat_batches:  # pyarrow < 19 (setup.cfg allows 18): the Table route
        monkeypatch.delattr(pa, "concat_batches", raising=False)
    parts = []
    for p in range(3):
        recs = [(None if i % 3 else b"k%d" % i, b"v%d-%d" % (p, i), 1_700_000_000_000 + i, ()) for i in range(50)]
        parts.append(A.decode_fetch(build_batch(recs, base_offset=10), "t", p, 0, 10**9, include_headers=True).batch)
    one = D.coalesce(parts)
    assert len(one) == 1 and one[0].schema == A.arrow_schema(True)
    assert one[0].to_pylist() == [r for b in parts for r in b.to_pylist()]
    # a cap on the bytes per batch: consecutive groups, rows still in order
    capped = D.coalesce(parts, max_bytes=parts[0].nbytes + 1)
    assert len(capped) == 3 and [r for b in capped for r in b.to_pylist()] == one[0].to_pylist()
    assert D.coalesce(parts[:1]) == parts[:1] and D.coalesce([]) == []
