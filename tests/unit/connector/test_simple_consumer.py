"""SimpleConsumer: decoding rules (pure) and fetches against real brokers."""

from __future__ import annotations

from pyklog.broker.record.batch import build_batch, build_control_batch
from pyklog.broker.record.header import set_base_offset
from pyklog.connector.consumer import READ_COMMITTED, decode_records


def _batch(base, values, **kw):
    buf = bytearray(build_batch([(None, v, 1000 + i, ()) for i, v in enumerate(values)], **kw))
    set_base_offset(buf, 0, base)
    return bytes(buf)


def _control(base, ctype, pid, epoch=0):
    buf = bytearray(build_control_batch(ctype, pid, epoch))
    set_base_offset(buf, 0, base)
    return bytes(buf)


def test_decode_skips_records_below_offset_and_partial_trailing_batch():
    buf = _batch(0, [b"a", b"b", b"c"]) + _batch(3, [b"d", b"e"]) + _batch(5, [b"f"])[:-7]
    recs, nxt = decode_records("t", 0, buf, 1)
    assert [(r.offset, r.value) for r in recs] == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert nxt == 5  # the cut batch is fetched again next time
    assert all(r.topic == "t" and r.partition == 0 and r.timestamp_type == 0 for r in recs)
    # only a partial batch: nothing decoded, position unchanged
    recs, nxt = decode_records("t", 0, _batch(5, [b"f"])[:30], 5)
    assert recs == [] and nxt == 5


def test_decode_control_batches_never_returned():
    pid = 7
    buf = (
        _batch(0, [b"x", b"y"], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
        + _control(2, 1, pid)
        + _batch(3, [b"z"])
    )
    recs, nxt = decode_records("t", 0, buf, 0)
    assert [r.value for r in recs] == [b"x", b"y", b"z"]
    assert nxt == 4


def test_read_committed_drops_aborted_transactions():
    a, b = 11, 12
    buf = (
        _batch(0, [b"plain"])
        + _batch(1, [b"a1", b"a2"], producer_id=a, producer_epoch=0, base_sequence=0, is_transactional=True)
        + _batch(3, [b"b1"], producer_id=b, producer_epoch=0, base_sequence=0, is_transactional=True)
        + _control(4, 0, a)  # abort a
        + _batch(5, [b"a3"], producer_id=a, producer_epoch=0, base_sequence=2, is_transactional=True)
        + _control(6, 1, b)  # commit b
        + _control(7, 1, a)  # commit a's second transaction
    )
    aborted = [(a, 1)]
    recs, nxt = decode_records(
        "t", 0, buf, 0, isolation_level=READ_COMMITTED, aborted_transactions=aborted, last_stable_offset=8
    )
    assert [r.value for r in recs] == [b"plain", b"b1", b"a3"]
    assert nxt == 8
    # read_uncommitted sees everything except the markers
    recs, _ = decode_records("t", 0, buf, 0, aborted_transactions=aborted)
    assert [r.value for r in recs] == [b"plain", b"a1", b"a2", b"b1", b"a3"]
    # nothing at or beyond the last stable offset is returned in read_committed
    recs, nxt = decode_records(
        "t", 0, buf, 0, isolation_level=READ_COMMITTED, aborted_transactions=aborted, last_stable_offset=3
    )
    assert [r.value for r in recs] == [b"plain"] and nxt == 3


# ---------------------------------------------------------------------------------------------
# against real brokers
# ---------------------------------------------------------------------------------------------
