"""Unit tests of broker.log's small parts: indexes, config, checkpoints, producer state."""

import os
import struct

import pytest

from pyklog.broker.errors import (
    ConfigError,
    CorruptRecordError,
    InvalidProducerEpochError,
    OutOfOrderSequenceError,
)
from pyklog.broker.log.checkpoint import OffsetCheckpointFile
from pyklog.broker.log.config import LogConfig
from pyklog.broker.log.index import OffsetIndex, TimeIndex
from pyklog.broker.log.producer_state import ProducerStateManager
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.header import parse_header


def test_offset_index_format_lookup_and_reload(tmp_path):
    path = str(tmp_path / "00000000000000000100.index")
    idx = OffsetIndex(path, 100)
    idx.append(109, 4200)
    idx.append(130, 9000)
    idx.append(130, 9500)  # not increasing: ignored as Kafka does
    idx.close()
    raw = open(path, "rb").read()
    assert raw == struct.pack(">ii", 9, 4200) + struct.pack(">ii", 30, 9000)
    again = OffsetIndex(path, 100)
    again.load()
    assert len(again) == 2
    assert again.lookup(100) == (100, 0)  # before the first entry: start of the segment
    assert again.lookup(109) == (109, 4200)
    assert again.lookup(129) == (109, 4200)
    assert again.lookup(10_000) == (130, 9000)
    assert again.lookup_position(8999) == 4200
    assert again.lookup_position(9000) == 9000
    again.truncate_to_position(9000)
    assert open(path, "rb").read() == struct.pack(">ii", 9, 4200)


def test_offset_index_rejects_garbage(tmp_path):
    path = tmp_path / "00000000000000000000.index"
    path.write_bytes(b"\x00" * 7)
    with pytest.raises(CorruptRecordError, match="multiple of 8"):
        OffsetIndex(str(path), 0).load()
    path.write_bytes(struct.pack(">ii", 5, 100) + struct.pack(">ii", 3, 200))
    with pytest.raises(CorruptRecordError, match="does not increase"):
        OffsetIndex(str(path), 0).load()


def test_time_index_monotonic_and_lookup(tmp_path):
    path = str(tmp_path / "00000000000000000000.timeindex")
    ti = TimeIndex(path, 0)
    ti.maybe_append(1000, 4)
    ti.maybe_append(1000, 9)  # same timestamp: ignored
    ti.maybe_append(900, 12)  # older: ignored
    ti.maybe_append(2000, 20)
    ti.close()
    assert open(path, "rb").read() == struct.pack(">qi", 1000, 4) + struct.pack(">qi", 2000, 20)
    ti = TimeIndex(path, 0)
    ti.load()
    assert ti.lookup_below(1000) is None
    assert ti.lookup_below(1001) == 4
    assert ti.lookup_below(5000) == 20
    assert ti.last_entry() == (2000, 20)
    ti.truncate_to_offset(20)
    assert ti.last_entry() == (1000, 4)


def test_config_from_properties_and_overrides():
    cfg = LogConfig.from_properties(
        {
            "log.segment.bytes": "1000",
            "log.retention.hours": "2",
            "log.retention.minutes": "5",
            "log.flush.interval.messages": "10",
            "message.max.bytes": "5000",
            "log.cleanup.policy": "delete, compact",
            "unrelated.key": "x",
        }
    )
    assert cfg.segment_bytes == 1000
    assert cfg.retention_ms == 5 * 60_000  # minutes win over hours
    assert cfg.flush_interval_messages == 10
    assert cfg.max_message_bytes == 5000
    assert cfg.cleanup_policy == "compact,delete" and cfg.compact and cfg.delete
    topic = cfg.with_overrides({"segment.bytes": "2000", "cleanup.policy": "compact", "retention.ms": "-1"})
    assert (topic.segment_bytes, topic.cleanup_policy, topic.retention_ms) == (2000, "compact", -1)
    assert not topic.delete
    with pytest.raises(ConfigError, match="log.segment.bytes must be an integer, got 'big'"):
        LogConfig.from_properties({"log.segment.bytes": "big"})
    with pytest.raises(ConfigError, match="cleanup.policy"):
        cfg.with_overrides({"cleanup.policy": "shred"})


def test_checkpoint_round_trip_and_errors(tmp_path):
    cp = OffsetCheckpointFile(str(tmp_path / "recovery-point-offset-checkpoint"))
    assert cp.read() == {}
    cp.write({("b", 1): 7, ("a", 0): 42})
    assert open(cp.path).read() == "0\n2\na 0 42\nb 1 7\n"
    assert cp.read() == {("a", 0): 42, ("b", 1): 7}
    assert not os.path.exists(cp.path + ".tmp")
    with open(cp.path, "w") as f:
        f.write("0\n3\na 0 42\n")
    with pytest.raises(CorruptRecordError, match="expected 3 entries, read 1"):
        cp.read()
    with open(cp.path, "w") as f:
        f.write("1\n0\n")
    with pytest.raises(CorruptRecordError, match="expected version 0"):
        cp.read()


def _hdr(pid, epoch, seq, n=1, base_offset=0):
    recs = [(b"k", b"v", 1000, ())] * n
    return parse_header(
        build_batch(recs, base_offset=base_offset, producer_id=pid, producer_epoch=epoch, base_sequence=seq), 0
    )


def test_producer_state_rules_and_snapshot(tmp_path):
    ps = ProducerStateManager(str(tmp_path))
    h0 = _hdr(7, 0, 0, n=3)
    assert ps.check(h0) is None
    ps.update(h0, 0, 2, 1000)
    assert ps.check(h0).first_offset == 0  # duplicate
    with pytest.raises(OutOfOrderSequenceError, match="expected sequence 3, read 5"):
        ps.check(_hdr(7, 0, 5))
    ps.update(_hdr(7, 0, 3, n=2), 3, 4, 1000)
    with pytest.raises(OutOfOrderSequenceError, match="must start at sequence 0"):
        ps.check(_hdr(7, 1, 4))
    ps.update(_hdr(7, 2, 0), 5, 5, 1000)
    with pytest.raises(InvalidProducerEpochError, match="epoch 1 is older than the current epoch 2"):
        ps.check(_hdr(7, 1, 1))
    assert ps.check(_hdr(99, 0, 12)) is None  # unknown producer: accepted at any sequence
    ps.take_snapshot(6)
    again = ProducerStateManager(str(tmp_path))
    assert again.load_latest(10) == 6
    e = again.get(7)
    assert e.epoch == 2 and e.last_seq == 0 and e.last_offset == 5
    # a corrupt snapshot is ignored (state then comes from the log)
    path = os.path.join(str(tmp_path), f"{6:020d}.snapshot")
    raw = bytearray(open(path, "rb").read())
    raw[-1] ^= 1
    open(path, "wb").write(raw)
    assert ProducerStateManager(str(tmp_path)).load_latest(10) is None


def test_offset_index_remembers_batch_ends_in_memory_only(tmp_path):
    path = str(tmp_path / "00000000000000000000.index")
    idx = OffsetIndex(path, 0)
    idx.append(9, 4096, 8192)
    assert idx.lookup_entry(12) == (0, 9, 4096, 8192)
    assert idx.lookup_entry(3) == (-1, 0, 0, -1)
    idx.close()
    assert os.path.getsize(path) == 8  # the end is not part of Kafka's on-disk format
    again = OffsetIndex(path, 0)
    again.load()
    assert again.lookup_entry(12) == (0, 9, 4096, -1)
    again.learn_end(0, 4096, 8192)
    again.learn_end(0, 1234, 9999)  # a stale position is ignored
    assert again.lookup_entry(12)[3] == 8192
