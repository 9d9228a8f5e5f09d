"""The part of the Log the cleaner uses: ``producer_last_offsets`` (a copy taken under the lock)
and ``replace_segments`` (the swap, refused when the segment list moved on or the log is closed).
Real segment files, no server."""

import pytest

from pyklog.broker.errors import KafkaStorageError
from pyklog.broker.log import Log, LogConfig
from pyklog.broker.record.batch import build_batch


def _batch(n, **kw):
    return build_batch([(b"k%d" % i, b"v", 1_000_000, ()) for i in range(n)], **kw)


def test_producer_last_offsets_is_a_copy_of_each_producers_last_batch(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig())
    lg.append(_batch(2, producer_id=7, producer_epoch=0, base_sequence=0))  # offsets 0-1
    lg.append(_batch(3))  # 2-4, no producer id
    lg.append(_batch(1, producer_id=8, producer_epoch=0, base_sequence=0))  # 5
    lg.append(_batch(2, producer_id=7, producer_epoch=0, base_sequence=2))  # 6-7
    last = lg.producer_last_offsets()
    assert last == {7: 7, 8: 5}
    last[7] = 0
    assert lg.producer_last_offsets() == {7: 7, 8: 5}
    lg.close()


def test_replace_segments_refuses_a_stale_segment_list_and_a_closed_log(tmp_path):
    lg = Log(str(tmp_path / "t-0"), LogConfig(file_delete_delay_ms=0))
    for _ in range(3):
        lg.append(_batch(2))
        lg.roll()
    sealed = list(lg.segments[:-1])
    assert len(sealed) == 3
    lg.replace_segments(sealed[:1], None)  # drop the first sealed segment
    assert lg.segments[0] is sealed[1]
    with pytest.raises(KafkaStorageError, match="segment list changed"):
        lg.replace_segments([sealed[1], sealed[0]], None)
    lg.close()
    with pytest.raises(KafkaStorageError, match="closed"):
        lg.replace_segments(sealed[1:2], None)
