"""Record format throughput: build and decode v2 batches per codec, legacy conversion, header scan.

Baseline, measured in the same run on the same records: kafka-python's record codec
(``DefaultRecordBatchBuilder`` / ``DefaultRecordBatch``, ``LegacyRecordBatchBuilder`` /
``MemoryRecords``), the pure-Python implementation stock Python clients use.

    .venv/bin/python bench/bench_records.py [--records 10000] [--value-size 100] [--repeat 7]

Figures are CPU time (``time.process_time``, single thread), the best of ``--repeat`` runs: the
machine is shared, and CPU time of the least disturbed run is the steadiest figure.  MB/s counts the records' key + value bytes (uncompressed payload).
"""

from __future__ import annotations

import argparse
import sys
import time

from pyklog.broker.record.batch import build_batch, decode_batch  # noqa: E402
from pyklog.broker.record.compression import CODEC_NAMES  # noqa: E402
from pyklog.broker.record.convert import batches_to_message_set, message_set_to_batches  # noqa: E402
from pyklog.broker.record.legacy import build_message_set  # noqa: E402
from pyklog.broker.record.reader import iter_batches, iter_headers  # noqa: E402


def best_of(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


def make_records(n: int, value_size: int):
    base = 1_700_000_000_000
    filler = (b"0123456789abcdef" * (value_size // 16 + 1))[:value_size]
    return [(b"key-%06d" % i, filler[: value_size - 6] + b"%06d" % i, base + i // 10, ()) for i in range(n)]


def kp_build(records, codec):
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 2**31 - 1)
    for i, (k, v, ts, h) in enumerate(records):
        b.append(i, ts, k, v, h)
    return bytes(b.build())


def kp_decode(raw):
    from kafka.record.default_records import DefaultRecordBatch

    return [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in DefaultRecordBatch(raw)]


def kp_legacy_build(records, magic, codec):
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    b = LegacyRecordBatchBuilder(magic, codec, 2**31 - 1)
    for i, (k, v, ts, _h) in enumerate(records):
        b.append(i, ts, k, v)
    return bytes(b.build())


def kp_legacy_decode(raw):
    from kafka.record.memory_records import MemoryRecords

    mr = MemoryRecords(raw)
    out = []
    while True:
        batch = mr.next_batch()
        if batch is None:
            return out
        out.extend((r.offset, r.timestamp, r.key, r.value) for r in batch)


def row(label, n, payload, ours, base):
    ratio = base / ours if base else float("nan")
    print(
        f"{label:<28} {n / ours:>12,.0f} rec/s {payload / ours / 1e6:>8.1f} MB/s   "
        f"kafka-python {n / base:>10,.0f} rec/s   x{ratio:.1f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    n, rep = args.records, args.repeat
    records = make_records(n, args.value_size)
    payload = sum(len(k) + len(v) for k, v, _, _ in records)
    print(f"{n} records per batch, key 10 B, value {args.value_size} B; python {sys.version.split()[0]}")
    print("v2 record batch (build = records -> bytes incl. compression and CRC; decode incl. CRC check)")
    for codec in range(5):
        name = CODEC_NAMES[codec]
        raw = build_batch(records, compression=codec)
        assert [r.value for r in decode_batch(raw).records] == [v for _, v, _, _ in records]
        row(
            f"build  {name}",
            n,
            payload,
            best_of(lambda: build_batch(records, compression=codec), rep),
            best_of(lambda: kp_build(records, codec), max(2, rep // 3)),
        )
        row(
            f"decode {name}",
            n,
            payload,
            best_of(lambda: decode_batch(raw), rep),
            best_of(lambda: kp_decode(raw), max(2, rep // 3)),
        )

    print("legacy message sets (magic 1)")
    for codec in (0, 1):
        name = CODEC_NAMES[codec]
        legacy = build_message_set([(k, v, ts) for k, v, ts, _ in records], 1, codec)
        row(
            f"build v1 {name}",
            n,
            payload,
            best_of(lambda: build_message_set([(k, v, ts) for k, v, ts, _ in records], 1, codec), rep),
            best_of(lambda: kp_legacy_build(records, 1, codec), max(2, rep // 3)),
        )
        row(
            f"v1 -> v2 {name} (Produce)",
            n,
            payload,
            best_of(lambda: message_set_to_batches(legacy), rep),
            best_of(lambda: kp_legacy_decode(legacy), max(2, rep // 3)),
        )
        v2 = build_batch(records, compression=codec)
        row(
            f"v2 -> v1 {name} (Fetch)",
            n,
            payload,
            best_of(lambda: batches_to_message_set(v2, 1), rep),
            best_of(lambda: kp_legacy_build(records, 1, codec), max(2, rep // 3)),
        )
    print("  (baseline for v1 -> v2: kafka-python decoding the set; for v2 -> v1: building it)")

    # header scan: what the log does on append / recovery (no record decoding)
    small = [build_batch(records[i : i + 100], base_offset=i) for i in range(0, n, 100)]
    buf = b"".join(small)
    t = best_of(lambda: sum(1 for _ in iter_headers(buf)), rep)
    print(f"{'iter_headers (CRC checked)':<28} {len(small) / t:>12,.0f} batches/s {len(buf) / t / 1e6:>8.1f} MB/s")
    t = best_of(lambda: sum(len(b.records) for b in iter_batches(buf)), rep)
    print(f"{'iter_batches (100/batch)':<28} {n / t:>12,.0f} rec/s")


if __name__ == "__main__":
    main()
