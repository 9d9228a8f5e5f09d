"""SimpleConsumer's decoding rules (pure, no server): records below the fetch offset and a partial
trailing batch skipped, control batches never returned, aborted transactions dropped under
read_committed.  Fetches against real brokers are in tests/integration/connector/test_simple_consumer.py."""

from __future__ import annotations

from pyklog.connector.consumer import READ_COMMITTED, decode_records
from tests.support import batch_at, control_batch_at


def test_decode_skips_records_below_offset_and_partial_trailing_batch():
    buf = batch_at(0, [b"a", b"b", b"c"]) + batch_at(3, [b"d", b"e"]) + batch_at(5, [b"f"])[:-7]
    recs, nxt = decode_records("t", 0, buf, 1)
    assert [(r.offset, r.value) for r in recs] == [(1, b"b"), (2, b"c"), (3, b"d"), (4, b"e")]
    assert nxt == 5  # the cut batch is fetched again next time
    assert all(r.topic == "t" and r.partition == 0 and r.timestamp_type == 0 for r in recs)
    # only a partial batch: nothing decoded, position unchanged
    recs, nxt = decode_records("t", 0, batch_at(5, [b"f"])[:30], 5)
    assert recs == [] and nxt == 5


def test_decode_control_batches_never_returned():
    pid = 7
    buf = (
        batch_at(0, [b"x", b"y"], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True)
        + control_batch_at(2, 1, pid)
        + batch_at(3, [b"z"])
    )
    recs, nxt = decode_records("t", 0, buf, 0)
    assert [r.value for r in recs] == [b"x", b"y", b"z"]
    assert nxt == 4


def test_read_committed_drops_aborted_transactions():
    a, b = 11, 12
    buf = (
        batch_at(0, [b"plain"])
        + batch_at(1, [b"a1", b"a2"], producer_id=a, producer_epoch=0, base_sequence=0, is_transactional=True)
        + batch_at(3, [b"b1"], producer_id=b, producer_epoch=0, base_sequence=0, is_transactional=True)
        + control_batch_at(4, 0, a)  # abort a
        + batch_at(5, [b"a3"], producer_id=a, producer_epoch=0, base_sequence=2, is_transactional=True)
        + control_batch_at(6, 1, b)  # commit b
        + control_batch_at(7, 1, a)  # commit a's second transaction
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
