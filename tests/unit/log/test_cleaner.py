"""Compaction: last record per key, offsets and producer sequences kept, tombstones, swap
recovery.  Real segment files; batches from broker.record.batch."""

import os
import shutil

from pyklog.broker.log import Log, LogConfig
from pyklog.broker.record.batch import build_batch, decode_batch


def kv_batch(pairs, ts=1_000_000, **kw):
    return build_batch([(k, v, ts, ()) for k, v in pairs], **kw)


def dump(lg):
    """[(offset, key, value)] of every record, plus the batch headers seen."""
    out, headers, off = [], [], lg.log_start_offset
    while off < lg.log_end_offset:
        data = lg.read(off, 1 << 20).read_bytes()
        pos = 0
        while pos < len(data):
            b = decode_batch(data, pos)
            headers.append(b.header)
            out.extend((r.offset, r.key, r.value) for r in b.records if r.offset >= off)
            pos += b.header.size
            off = b.header.next_offset
    return out, headers


def cfg(**kw):
    base = {
        "cleanup_policy": "compact",
        "segment_bytes": 600,
        "file_delete_delay_ms": 0,
        "min_cleanable_dirty_ratio": 0.0,
    }
    base.update(kw)
    return LogConfig(**base)


def fill(lg):
    # keys a..e updated several times; c deleted (tombstone) at the end
    for rnd in range(4):
        lg.append(kv_batch([(b"a", b"a%d" % rnd), (b"b", b"b%d" % rnd)]))
        lg.append(kv_batch([(b"c", b"c%d" % rnd), (b"d", b"d%d" % rnd), (b"e", b"e%d" % rnd)]))
    lg.append(kv_batch([(b"c", None)]))
    lg.append(kv_batch([(b"z", b"tail")]))


def test_compaction_keeps_last_record_per_key_and_offsets(tmp_path):
    lg = Log(str(tmp_path / "compacted-0"), cfg())
    fill(lg)
    lg.roll()  # everything sealed; the (empty) active segment is never compacted
    before, _ = dump(lg)
    assert len(before) == 22
    stats = lg.compact(now_ms=1_000_000)
    assert stats.segments_cleaned > 0 and stats.records_retained == 6
    after, headers = dump(lg)
    last = {}
    for off, k, v in before:
        last[k] = (off, k, v)
    assert after == sorted(last.values())  # the newest of each key at its original offset
    assert (20, b"c", None) in after  # the tombstone is kept within delete.retention.ms
    assert lg.log_end_offset == 22 and lg.log_start_offset == 0
    # batches keep their first/last offsets although records went
    assert {(h.base_offset, h.last_offset) for h in headers} >= {(15, 16), (17, 19), (20, 20)}
    # reads inside removed ranges land on the next surviving batch
    assert lg.read(2, 1 << 20).first_offset >= 2
    assert lg.offset_for_timestamp(0) == (15, 1_000_000)  # the first surviving record
    lg.close()
    # the compacted log reopens (after a crash too) with the same content
    again = Log(lg.dir, cfg(), clean_shutdown=False)
    assert dump(again)[0] == after and not again.last_recovery.cuts
    again.close()


def test_tombstones_dropped_after_delete_retention(tmp_path):
    lg = Log(str(tmp_path / "tomb-0"), cfg(delete_retention_ms=1000))
    fill(lg)
    lg.roll()
    future = max(s.last_modified_ms for s in lg.segments) + 5000
    lg.compact(now_ms=future, force=True)
    after, _ = dump(lg)
    assert b"c" not in {k for _, k, _ in after}
    assert [k for _, k, _ in after] == [b"a", b"b", b"d", b"e", b"z"]
    lg.close()


def test_active_segment_is_never_compacted(tmp_path):
    lg = Log(str(tmp_path / "active-0"), cfg(segment_bytes=1 << 20))
    fill(lg)
    stats = lg.compact(now_ms=1_000_000)
    assert stats.segments_cleaned == 0 and stats.skipped
    assert len(dump(lg)[0]) == 22
    lg.close()


def test_idempotent_producer_last_batch_survives_as_empty_batch(tmp_path):
    lg = Log(str(tmp_path / "idem-0"), cfg())
    lg.append(kv_batch([(b"k", b"1"), (b"j", b"1")], producer_id=9, producer_epoch=0, base_sequence=0))
    lg.append(kv_batch([(b"k", b"2"), (b"j", b"2")], producer_id=9, producer_epoch=0, base_sequence=2))
    lg.append(kv_batch([(b"k", b"3"), (b"j", b"3")]))  # a plain producer overwrites both keys
    lg.roll()
    lg.compact(now_ms=1_000_000)
    records, headers = dump(lg)
    assert records == [(4, b"k", b"3"), (5, b"j", b"3")]
    empty = [h for h in headers if h.records_count == 0]
    assert len(empty) == 1
    h = empty[0]
    assert (h.producer_id, h.base_offset, h.last_offset, h.base_sequence, h.last_sequence) == (9, 2, 3, 2, 3)
    lg.close()
    # producer state rebuilt from the log (no snapshot) still knows sequence 3
    for f in os.listdir(lg.dir):
        if f.endswith(".snapshot"):
            os.unlink(os.path.join(lg.dir, f))
    again = Log(lg.dir, cfg(), clean_shutdown=True)
    assert again.producer_state(9).last_seq == 3
    retry = kv_batch([(b"k", b"2"), (b"j", b"2")], producer_id=9, producer_epoch=0, base_sequence=2)
    assert again.append(retry).duplicate
    again.close()


def test_startup_completes_an_interrupted_swap(tmp_path):
    d = str(tmp_path / "swap-0")
    lg = Log(d, cfg())
    fill(lg)
    lg.roll()
    lg.close()
    twin = str(tmp_path / "twin" / "swap-0")
    shutil.copytree(d, twin)
    tl = Log(twin, cfg(), clean_shutdown=True)
    tl.compact(now_ms=1_000_000)
    expected = dump(tl)[0]
    first = tl.segments[0]
    tl.close()
    # crash after the cleaned segment became .swap, before the originals were replaced
    for ext in (".log", ".index", ".timeindex"):
        src = first.log_path[:-4] + ext
        shutil.copy(src, os.path.join(d, os.path.basename(src) + ".swap"))
    open(os.path.join(d, "00000000000000000003.log.cleaned"), "wb").write(b"partial")
    open(os.path.join(d, "00000000000000000000.log.deleted"), "wb").write(b"old")
    lg = Log(d, cfg(), clean_shutdown=True)
    assert dump(lg)[0][: len([r for r in expected if r[0] < first.next_offset])] == [
        r for r in expected if r[0] < first.next_offset
    ]
    names = os.listdir(d)
    assert not any(n.endswith((".swap", ".cleaned", ".deleted")) for n in names)
    # records after the swapped range are untouched and the end offset is unchanged
    assert lg.log_end_offset == 22
    lg.close()
