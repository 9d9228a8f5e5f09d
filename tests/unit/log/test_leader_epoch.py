"""Leader epochs in the log (KIP-101/279): the leader epoch cache and its
``leader-epoch-checkpoint`` file, Kafka's ``endOffsetFor`` semantics, follower appends
(``Log.append_as_follower``), truncation by epoch with two local logs standing in for leader and
follower, the high watermark and ``replication-offset-checkpoint``.  Real segment files, no
server."""

import itertools
import os

import pytest

from pyklog.broker.errors import CorruptRecordError, OffsetOutOfRangeError
from pyklog.broker.log import Log, LogConfig, LogManager
from pyklog.broker.log.checkpoint import (
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
)
from pyklog.broker.log.leader_epoch import (
    LEADER_EPOCH_CHECKPOINT,
    EpochEntry,
    LeaderEpochCheckpointFile,
    LeaderEpochFileCache,
)
from pyklog.broker.record.batch import build_batch, build_control_batch
from tests.unit.log.support import batch_headers, epoch_model


def batch(n=2, key=b"k", **kw):
    return build_batch([(key, b"v%d" % i, None, ()) for i in range(n)], **kw)


def entries(lg):
    return [tuple(e) for e in lg.leader_epoch_cache.epoch_entries()]


# --------------------------------------------------------------------------- the cache alone


def cache_with(tmp_path, pairs, leo=100):
    c = LeaderEpochFileCache(str(tmp_path), lambda: leo)
    for e, s in pairs:
        c.assign(e, s)
    return c


def test_assign_rules(tmp_path, caplog):
    c = cache_with(tmp_path, [(0, 0), (0, 5), (2, 10)])
    assert [tuple(e) for e in c.epoch_entries()] == [(0, 0), (2, 10)]
    assert c.assign(1, 20) is False  # epoch below the latest: ignored, WARN
    assert c.assign(3, 5) is False  # offset below the latest start: ignored, WARN
    assert c.assign(-1, 30) is False and c.assign(4, -1) is False
    assert c.assign(3, 10) is True  # same start offset: epoch 2 had no data, replaced
    assert [tuple(e) for e in c.epoch_entries()] == [(0, 0), (3, 10)]
    assert c.latest_epoch == 3
    assert sum("ignoring leader epoch" in r.message for r in caplog.records) == 2
    # the file holds exactly the cache, in Kafka's format
    assert open(tmp_path / LEADER_EPOCH_CHECKPOINT).read() == "0\n2\n0 0\n3 10\n"


# Kafka's LeaderEpochFileCacheTest cases for endOffsetFor, cache [(2, 6), (3, 8), (5, 11)], LEO 15
@pytest.mark.parametrize(
    "requested,expected",
    [
        (-1, (-1, -1)),  # UNDEFINED_EPOCH
        (5, (5, 15)),  # the latest epoch: the log end offset
        (6, (-1, -1)),  # above the latest epoch
        (1, (1, 6)),  # below the first epoch: (requested, first start offset)
        (0, (0, 6)),
        (2, (2, 8)),  # a known epoch: start of the next one
        (3, (3, 11)),
        (4, (3, 11)),  # an epoch never seen between 3 and 5: (3, start of 5)
    ],
)
def test_end_offset_for_kafka_cases(tmp_path, requested, expected):
    c = cache_with(tmp_path, [(2, 6), (3, 8), (5, 11)], leo=15)
    assert c.end_offset_for(requested) == expected


def test_end_offset_for_empty_cache(tmp_path):
    c = cache_with(tmp_path, [])
    assert c.end_offset_for(0) == (-1, -1) and c.end_offset_for(-1) == (-1, -1)


def test_truncate_from_end_and_start(tmp_path):
    c = cache_with(tmp_path, [(2, 6), (3, 8), (5, 11)])
    assert c.truncate_from_end(12) == []
    assert [tuple(e) for e in c.truncate_from_end(8)] == [(3, 8), (5, 11)]
    assert [tuple(e) for e in c.epoch_entries()] == [(2, 6)]
    c = cache_with(tmp_path, [(2, 6), (3, 8), (5, 11)])
    assert c.truncate_from_start(9) is True  # (3, 8) -> (3, 9), (2, 6) gone
    assert [tuple(e) for e in c.epoch_entries()] == [(3, 9), (5, 11)]
    assert c.truncate_from_start(11) is True
    assert [tuple(e) for e in c.epoch_entries()] == [(5, 11)]
    assert c.truncate_from_start(5) is False
    assert LeaderEpochCheckpointFile(str(tmp_path / LEADER_EPOCH_CHECKPOINT)).read() == [EpochEntry(5, 11)]


@pytest.mark.parametrize(
    "text",
    [
        "",
        "1\n0\n",
        "0\n2\n0 0\n",
        "0\n1\n0 x\n",
        "0\n2\n3 10\n2 20\n",
        "0\n2\n1 10\n2 10\n",
        "0\n1\n0 0 0\n",
        "\x00\n",
    ],
)
def test_checkpoint_file_rejects_malformed(tmp_path, text):
    p = tmp_path / LEADER_EPOCH_CHECKPOINT
    p.write_bytes(text.encode("latin-1"))
    with pytest.raises(CorruptRecordError):
        LeaderEpochCheckpointFile(str(p)).read()


# --------------------------------------------------------------------------- the cache in a Log


def test_append_assigns_epochs_and_survives_reopen(tmp_path):
    lg = Log(str(tmp_path / "t-0"))
    for e in (0, 0, 1, 1, 3):
        lg.append(batch(2), leader_epoch=e)
    assert entries(lg) == [(0, 0), (1, 4), (3, 8)]
    assert [h[2] for h in batch_headers(lg)] == [0, 0, 1, 1, 3]
    assert lg.end_offset_for_epoch(1) == (1, 8)
    assert lg.end_offset_for_epoch(2) == (1, 8)
    assert lg.end_offset_for_epoch(3) == (3, 10)
    assert lg.end_offset_for_epoch(4) == (-1, -1)
    lg.close()
    lg = Log(str(tmp_path / "t-0"), clean_shutdown=True)
    assert entries(lg) == [(0, 0), (1, 4), (3, 8)]
    lg.close()


@pytest.mark.parametrize("damage", ["delete", "garbage", "flip_epoch", "flip_offset", "stale"])
def test_missing_or_corrupt_checkpoint_is_rebuilt_from_batches(tmp_path, damage, caplog):
    d = tmp_path / "t-0"
    lg = Log(str(d), LogConfig(segment_bytes=250))
    for e in (0, 0, 2, 2, 2, 5, 7, 7):
        lg.append(batch(3), leader_epoch=e)
    want = entries(lg)
    assert want == [(0, 0), (2, 6), (5, 15), (7, 18)] and len(lg.segments) > 2
    before = batch_headers(lg)
    lg.close()
    p = d / LEADER_EPOCH_CHECKPOINT
    if damage == "delete":
        p.unlink()
    elif damage == "garbage":
        p.write_bytes(b"\x00\xff garbage")
    elif damage == "flip_epoch":  # still parses: "2 6" -> "3 6"
        p.write_text(p.read_text().replace("2 6\n", "3 6\n"))
    elif damage == "flip_offset":  # still parses: "5 15" -> "5 16"
        p.write_text(p.read_text().replace("5 15\n", "5 16\n"))
    else:  # a checkpoint that misses the last epoch entirely
        p.write_text("0\n3\n0 0\n2 6\n5 15\n")
    lg = Log(str(d), LogConfig(segment_bytes=250), clean_shutdown=True)
    assert entries(lg) == want
    assert batch_headers(lg) == before  # nothing deleted because of it
    assert any("leader-epoch-checkpoint" in r.message and r.levelname == "ERROR" for r in caplog.records)
    assert LeaderEpochCheckpointFile(str(p)).read() == [EpochEntry(*e) for e in want]
    lg.close()


def test_new_empty_log_writes_no_checkpoint_and_logs_nothing(tmp_path, caplog):
    lg = Log(str(tmp_path / "t-0"))
    assert entries(lg) == [] and not (tmp_path / "t-0" / LEADER_EPOCH_CHECKPOINT).exists()
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    lg.close()


def test_load_drops_epochs_beyond_the_log_end(tmp_path):
    """An epoch assigned (file written) whose batch never reached the disk: dropped at load."""
    d = tmp_path / "t-0"
    lg = Log(str(d))
    lg.append(batch(2), leader_epoch=1)
    lg.assign_epoch_start_offset(4)  # becoming leader in epoch 4 at the LEO, nothing written
    assert entries(lg) == [(1, 0), (4, 2)]
    assert lg.end_offset_for_epoch(4) == (4, 2) and lg.end_offset_for_epoch(1) == (1, 2)
    lg.close()
    lg = Log(str(d), clean_shutdown=True)
    assert entries(lg) == [(1, 0)]
    lg.close()


def test_log_start_offset_moves_truncate_the_cache_from_the_start(tmp_path):
    d = tmp_path / "t-0"
    lg = Log(str(d), LogConfig(segment_bytes=300, file_delete_delay_ms=0))
    for e in (0, 0, 1, 1, 2, 2):
        lg.append(batch(2), leader_epoch=e)
    assert entries(lg) == [(0, 0), (1, 4), (2, 8)]
    lg.increment_log_start_offset(5)  # DeleteRecords
    assert entries(lg) == [(1, 5), (2, 8)]
    lg.increment_log_start_offset(6)
    assert entries(lg) == [(1, 6), (2, 8)]
    n = lg.delete_old_segments()  # the segments wholly below the log start offset go
    assert n >= 1 and lg.segments[0].base_offset == 6
    assert entries(lg)[0][1] == lg.log_start_offset == 6
    lg.close()
    lg = Log(str(d), LogConfig(segment_bytes=300), clean_shutdown=True, log_start_offset=6)
    assert entries(lg) == [(1, 6), (2, 8)]
    lg.close()


def test_compaction_keeps_the_cache(tmp_path):
    cfg = LogConfig(segment_bytes=300, cleanup_policy="compact", min_cleanable_dirty_ratio=0.0, file_delete_delay_ms=0)
    lg = Log(str(tmp_path / "t-0"), cfg)
    for e in (0, 0, 1, 1, 2, 2, 3):
        lg.append(batch(1, key=b"same"), leader_epoch=e)
    before = entries(lg)
    lg.compact(force=True)
    assert len(batch_headers(lg)) < 7
    assert entries(lg) == before
    lg.close()
    lg = Log(str(tmp_path / "t-0"), cfg, clean_shutdown=True)
    assert entries(lg) == before  # the checkpoint still matches the compacted batches
    lg.close()


# --------------------------------------------------------------------------- follower append


def leader_with(tmp_path, name, epochs, n=2, **cfg):
    lg = Log(str(tmp_path / name), LogConfig(**cfg))
    for e in epochs:
        lg.append(batch(n), leader_epoch=e)
    return lg


def test_append_as_follower_copies_offsets_and_epochs(tmp_path):
    leader = leader_with(tmp_path, "l-0", [0, 0, 1, 2, 2])
    pid_batch = build_batch(
        [(b"k", b"t", None, ())], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
    )
    leader.append(pid_batch, leader_epoch=2)
    leader.append_control_marker(7, 0, False, 0, leader_epoch=2)
    follower = Log(str(tmp_path / "f-0"))
    follower.replicated = True
    off = 0
    while off < leader.log_end_offset:  # fetch in small pieces, as a replica fetcher would
        data = leader.read_bytes(off, 150)
        info = follower.append_as_follower(data)
        assert info.first_offset == off
        off = info.last_offset + 1
    assert batch_headers(follower) == batch_headers(leader)
    assert follower.read_bytes(0, 1 << 20) == leader.read_bytes(0, 1 << 20)  # byte for byte
    assert entries(follower) == entries(leader) == [(0, 0), (1, 4), (2, 6)]
    assert follower.collect_aborted_txns(0, 100) == leader.collect_aborted_txns(0, 100)
    assert follower.open_transactions() == {} and follower.producer_state(7).epoch == 0
    assert follower.high_watermark == 0  # the follower's HW comes from the leader
    assert follower.update_high_watermark(5) and follower.high_watermark == 5
    assert follower.last_stable_offset == 5
    # idempotent producer state copied: the follower knows the sequence (no duplicate check)
    assert follower.producer_state(7).last_seq == 0


def test_append_as_follower_refuses_wrong_offsets_and_bad_crc(tmp_path):
    leader = leader_with(tmp_path, "l-0", [0, 0, 1])
    follower = Log(str(tmp_path / "f-0"))
    data = leader.read_bytes(0, 1 << 20)
    bad = bytearray(data)
    bad[-1] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(bad)
    with pytest.raises(CorruptRecordError):
        follower.append_as_follower(data[:-3])  # torn batch
    assert follower.log_end_offset == 0 and entries(follower) == [] and follower.size == 0
    follower.append_as_follower(data)
    with pytest.raises(OffsetOutOfRangeError):  # the same again: below the LEO
        follower.append_as_follower(data)
    with pytest.raises(OffsetOutOfRangeError):  # a batch below the LEO
        follower.append_as_follower(leader.read_bytes(2, 1 << 20))
    # batches out of order inside one append
    first = leader.read_bytes(0, 1)
    with pytest.raises(OffsetOutOfRangeError):
        Log(str(tmp_path / "g-0")).append_as_follower(bytes(first) + bytes(first))
    assert batch_headers(follower) == batch_headers(leader)


def test_append_as_follower_accepts_a_gap_in_the_leaders_log(tmp_path, caplog):
    """A leader whose recovery removed a damaged range has an offset gap; the follower copies the
    batches after it with their offsets (Kafka's rule: only offsets below the LEO are refused) and
    says so at WARNING."""
    leader = leader_with(tmp_path, "l-0", [0, 0, 1])
    follower = Log(str(tmp_path / "f-0"))
    follower.append_as_follower(leader.read_bytes(2, 1 << 20))  # 0-1 missing on the leader
    assert batch_headers(follower) == batch_headers(leader)[1:] and follower.log_end_offset == 6
    assert entries(follower) == [(0, 2), (1, 4)]
    assert any("offset gap" in r.message and r.levelname == "WARNING" for r in caplog.records)


def test_append_as_follower_accepts_compacted_gaps_and_big_fetches(tmp_path):
    cfg = {
        "segment_bytes": 300,
        "cleanup_policy": "compact",
        "min_cleanable_dirty_ratio": 0.0,
        "file_delete_delay_ms": 0,
    }
    leader = Log(str(tmp_path / "l-0"), LogConfig(**cfg))
    for i in range(12):
        leader.append(batch(1, key=b"k%d" % (i % 3)), leader_epoch=i // 4)
    leader.compact(force=True)
    hl = batch_headers(leader)
    assert hl[0][0] > 0 or any(b[0] != a[1] + 1 for a, b in itertools.pairwise(hl))  # there is a gap
    follower = Log(str(tmp_path / "f-0"), LogConfig(**cfg))
    follower.append_as_follower(leader.read_bytes(0, 1 << 20, max_offset=None))
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 1 << 20))
    assert batch_headers(follower) == hl
    assert len(follower.segments) > 1  # more than segment.bytes: written as several appends
    assert entries(follower) == epoch_model(hl)


# --------------------------------------------------------------------------- truncation by epoch (KIP-101/279)


def truncate_follower(leader, follower):
    """What the replica fetcher does on becoming follower: ask the leader (OffsetsForLeaderEpoch)
    where the follower's latest epoch ends, truncate to ``Log.truncation_offset`` of the answer,
    ask again until it says completed.  Returns the rounds it took."""
    rounds = 0
    while True:
        rounds += 1
        epoch = follower.latest_epoch
        if epoch < 0:  # nothing to ask about: Kafka truncates to the high watermark
            follower.truncate_to(min(follower.high_watermark, follower.log_end_offset))
            return rounds
        offset, completed = follower.truncation_offset(*leader.end_offset_for_epoch(epoch))
        follower.truncate_to(offset)
        if completed:
            return rounds


def catch_up(leader, follower):
    while follower.log_end_offset < leader.log_end_offset:
        follower.append_as_follower(leader.read_bytes(follower.log_end_offset, 1 << 20))


def test_kip101_scenario1_leader_change_after_uncommitted_writes(tmp_path):
    """KIP-101 scenario 1: A (leader, epoch 0) writes m1, m2; B replicated m1 only.  A restarts
    (HW 1); B becomes leader in epoch 1 and writes m3.  A returns: without epochs it would keep m2
    at offset 1 and diverge; with them it truncates to B's end offset for epoch 0 (1)."""
    a = Log(str(tmp_path / "a-0"))
    b = Log(str(tmp_path / "b-0"))
    a.append(batch(1), leader_epoch=0)
    b.append_as_follower(a.read_bytes(0, 1 << 20))
    a.append(batch(1), leader_epoch=0)
    b.assign_epoch_start_offset(1)
    b.append(batch(1), leader_epoch=1)
    truncate_follower(b, a)
    assert a.log_end_offset == 1
    catch_up(b, a)
    assert batch_headers(a) == batch_headers(b) == [(0, 0, 0), (1, 1, 1)]
    assert entries(a) == entries(b) == [(0, 0), (1, 1)]


def test_kip101_scenario2_divergent_logs_after_double_failure(tmp_path):
    """KIP-101 scenario 2: both replicas die; B comes back first (epoch 1) and writes; A returns
    with an epoch-0 tail B never had: A truncates to where epoch 0 ends on B."""
    a = Log(str(tmp_path / "a-0"))
    b = Log(str(tmp_path / "b-0"))
    for _ in range(2):
        a.append(batch(2), leader_epoch=0)
    b.append_as_follower(a.read_bytes(0, 1))  # B has the first batch only (offsets 0-1)
    a.append(batch(3), leader_epoch=0)  # A's extra tail: offsets 4-6
    b.assign_epoch_start_offset(1)
    b.append(batch(1), leader_epoch=1)
    b.append(batch(2), leader_epoch=1)
    truncate_follower(b, a)
    assert a.log_end_offset == 2
    catch_up(b, a)
    assert batch_headers(a) == batch_headers(b) and entries(a) == entries(b) == [(0, 0), (1, 2)]


def test_kip279_follower_with_an_epoch_the_leader_never_had(tmp_path):
    """KIP-279: the follower's latest epoch (2) is unknown to the new leader (it answers epoch 1
    and its end for it); the follower truncates to min(leader's end, its own end for epoch 1),
    asks again and ends up exactly at the point of divergence."""
    a = Log(str(tmp_path / "a-0"))  # the returning replica
    b = Log(str(tmp_path / "b-0"))  # the new leader
    a.append(batch(2), leader_epoch=0)
    b.append_as_follower(a.read_bytes(0, 1 << 20))
    a.append(batch(2), leader_epoch=1)  # A led epoch 1 and wrote 2-3; B copied them
    b.append_as_follower(a.read_bytes(2, 1 << 20))
    a.append(batch(2), leader_epoch=2)  # A led epoch 2 (B was away): 4-5, never replicated
    b.assign_epoch_start_offset(3)  # B becomes leader in epoch 3 and writes
    b.append(batch(3), leader_epoch=3)
    assert a.latest_epoch == 2
    assert b.end_offset_for_epoch(2) == (1, 4)
    truncate_follower(b, a)
    assert a.log_end_offset == 4 and entries(a) == [(0, 0), (1, 2)]
    catch_up(b, a)
    assert batch_headers(a) == batch_headers(b) and entries(a) == entries(b) == [(0, 0), (1, 2), (3, 4)]


def test_kip279_two_rounds_when_the_leader_answers_an_epoch_the_follower_never_had(tmp_path):
    """KIP-279's multi-round case.  Leader B: epoch 0 at 0-5, epoch 2 at 6-8, epoch 4 at 9-11.
    Follower A copied only 0-2 of epoch 0, then led epochs 1 (3-7) and 3 (8-10) that B never saw.
    A asks for epoch 3: B answers (2, 9); A's largest epoch <= 2 is 1, so it truncates to its end of
    epoch 1 (8) and asks again for epoch 1: B answers (0, 6); A's epoch 0 ends at 3: the point of
    divergence.  Truncating straight to B's first answer (9) would keep A's epoch-1 records."""
    b = Log(str(tmp_path / "b-0"))
    a = Log(str(tmp_path / "a-0"))
    for epoch in (0, 0, 2, 4):
        b.append(batch(3), leader_epoch=epoch)
    assert entries(b) == [(0, 0), (2, 6), (4, 9)]
    a.append_as_follower(b.read_bytes(0, 1))  # offsets 0-2
    a.append(batch(3), leader_epoch=1)  # 3-5
    a.append(batch(2), leader_epoch=1)  # 6-7
    a.append(batch(3), leader_epoch=3)  # 8-10
    assert entries(a) == [(0, 0), (1, 3), (3, 8)]
    assert a.truncation_offset(*b.end_offset_for_epoch(3)) == (8, False)
    assert truncate_follower(b, a) == 2
    assert a.log_end_offset == 3 and entries(a) == [(0, 0)]
    catch_up(b, a)
    assert batch_headers(a) == batch_headers(b) and entries(a) == entries(b)


def test_truncation_offset_rules(tmp_path):
    f = Log(str(tmp_path / "f-0"), replicated=True)
    for epoch in (1, 1, 3, 5):
        f.append(batch(2), leader_epoch=epoch)
    assert f.high_watermark == 0  # replicated from the start: appends do not move it
    f.update_high_watermark(3)
    assert entries(f) == [(1, 0), (3, 4), (5, 6)] and f.log_end_offset == 8
    assert f.truncation_offset(-1, -1) == (3, True)  # undefined answer: the high watermark
    assert f.truncation_offset(0, 2) == (0, True)  # below our first epoch: (0, our first start 0)
    assert f.truncation_offset(3, 5) == (5, True)  # same epoch: the smaller end
    assert f.truncation_offset(3, 7) == (6, True)
    assert f.truncation_offset(4, 20) == (6, False)  # we never had 4: our end of 3, ask again
    assert f.truncation_offset(5, 99) == (8, True)  # never above our log end offset
    empty = Log(str(tmp_path / "e-0"))
    assert empty.truncation_offset(2, 10) == (0, True)


def test_kip279_fast_leader_change_truncates_mid_epoch(tmp_path):
    """KIP-279's "fast leader change" case: A and B both wrote in epoch 1 but B had less of it
    when it became leader in epoch 2; A must cut its epoch-1 tail B does not have."""
    a = Log(str(tmp_path / "a-0"))
    b = Log(str(tmp_path / "b-0"))
    a.append(batch(2), leader_epoch=1)
    b.append_as_follower(a.read_bytes(0, 1 << 20))
    a.append(batch(2), leader_epoch=1)  # 2-3: B never got these
    b.assign_epoch_start_offset(2)
    b.append(batch(1), leader_epoch=2)
    assert b.end_offset_for_epoch(1) == (1, 2)
    truncate_follower(b, a)
    assert a.log_end_offset == 2
    catch_up(b, a)
    assert batch_headers(a) == batch_headers(b) == [(0, 1, 1), (2, 2, 2)]


def test_truncate_fully_and_start_at(tmp_path):
    d = tmp_path / "t-0"
    lg = Log(str(d), LogConfig(file_delete_delay_ms=0))
    lg.append(batch(2, producer_id=3, producer_epoch=0, base_sequence=0), leader_epoch=1)
    lg.roll()
    lg.append(batch(2), leader_epoch=2)
    lg.replicated = True
    lg.update_high_watermark(4)
    lg.truncate_fully_and_start_at(100)
    assert (lg.log_start_offset, lg.log_end_offset, lg.high_watermark) == (100, 100, 100)
    assert entries(lg) == [] and lg.producer_state(3) is None
    lg.append(batch(1), leader_epoch=5)
    assert entries(lg) == [(5, 100)]
    lg.close()
    lg = Log(str(d), clean_shutdown=True, log_start_offset=100)
    assert (lg.log_start_offset, lg.log_end_offset) == (100, 101)
    assert entries(lg) == [(5, 100)] and lg.producer_state(3) is None
    lg.close()


# --------------------------------------------------------------------------- high watermark


def test_high_watermark_rules(tmp_path):
    lg = Log(str(tmp_path / "t-0"))
    lg.append(batch(5))
    assert lg.high_watermark == 5 and not lg.replicated  # follows the LEO
    lg.replicated = True
    assert lg.high_watermark == 5  # appended while not replicated: HW was the LEO
    lg.append(batch(5))
    assert lg.high_watermark == 5 and lg.log_end_offset == 10
    assert lg.update_high_watermark(7) is True and lg.high_watermark == 7
    assert lg.update_high_watermark(6) is False and lg.high_watermark == 7  # never backwards
    assert lg.update_high_watermark(99) is True and lg.high_watermark == 10  # clamped to the LEO
    lg.append(batch(5))
    lg.truncate_to(12)  # truncation may take it back
    assert lg.log_end_offset == 10 and lg.high_watermark == 10
    lg.truncate_to(5)
    assert lg.high_watermark == 5
    # LSO = min(first unstable offset, HW)
    lg.append(batch(1, producer_id=9, producer_epoch=0, base_sequence=0, is_transactional=True))
    lg.append(batch(2))
    assert lg.last_stable_offset == 5
    lg.update_high_watermark(8)
    assert lg.last_stable_offset == 5
    lg.append_control_marker(9, 0, True, 0)
    assert lg.last_stable_offset == 8  # the HW now bounds it
    with pytest.raises(OffsetOutOfRangeError):  # DeleteRecords beyond the HW
        lg.increment_log_start_offset(9)
    lg.close()


def test_high_watermark_checkpoint_round_trip(tmp_path):
    d = str(tmp_path / "logs")
    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    rep = m.get_or_create_log("r", 0)
    plain = m.get_or_create_log("p", 0)
    for lg in (rep, plain):
        lg.append(batch(10))
    rep.replicated = True
    rep.append(batch(10))
    rep.update_high_watermark(13)
    m.checkpoint()
    hw = OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read()
    assert hw == {("r", 0): 13, ("p", 0): 10}
    m.shutdown()
    text = open(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).read()
    assert text == "0\n2\np 0 10\nr 0 13\n"
    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    rep = m.get_log("r", 0)
    assert rep.high_watermark == 20  # not replicated yet: the LEO
    rep.replicated = True
    assert rep.high_watermark == 13  # the checkpointed value
    m.shutdown()
    # a checkpoint above the LEO (the log lost its tail) is clamped; no entry: 0 when replicated
    OffsetCheckpointFile(os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)).write({("r", 0): 500})
    m = LogManager([d], LogConfig(), background=False)
    m.startup()
    r, p = m.get_log("r", 0), m.get_log("p", 0)
    r.replicated = p.replicated = True
    assert r.high_watermark == 20 and p.high_watermark == 0
    m.shutdown()


def test_control_batch_from_leader_is_copied(tmp_path):
    """A COMMIT marker with no transaction open on the follower is copied and changes nothing."""
    f = Log(str(tmp_path / "f-0"))
    raw = bytearray(build_control_batch(1, 5, 0, coordinator_epoch=3))
    f.append_as_follower(bytes(raw))
    assert f.log_end_offset == 1 and f.open_transactions() == {}


def test_high_watermark_checkpoint_task(tmp_path):
    """The background task writes replication-offset-checkpoint every
    high_watermark_checkpoint_interval_ms, without waiting for the other checkpoints."""
    import time

    d = str(tmp_path / "logs")
    m = LogManager(
        [d],
        LogConfig(flush_offset_checkpoint_interval_ms=3_600_000),
        background=True,
        high_watermark_checkpoint_interval_ms=50,
    )
    m.startup()
    try:
        lg = m.get_or_create_log("r", 0)
        lg.replicated = True
        lg.append(batch(10))
        lg.update_high_watermark(7)
        path = os.path.join(d, REPLICATION_OFFSET_CHECKPOINT)
        deadline = time.monotonic() + 30
        while OffsetCheckpointFile(path).read().get(("r", 0)) != 7:
            assert time.monotonic() < deadline, "the high watermark was never checkpointed"
            time.sleep(0.02)
    finally:
        m.shutdown()


def test_append_without_an_epoch_takes_the_latest(tmp_path):
    """The coordinators append without naming an epoch: their batches carry the log's latest epoch
    (0 on a fresh log), never an older one, and no warning is logged."""
    lg = Log(str(tmp_path / "t-0"))
    lg.append(batch(1))
    lg.assign_epoch_start_offset(4)  # became leader in epoch 4
    lg.append(batch(1))
    lg.append_control_marker(9, 0, True, 0)
    assert [h[2] for h in batch_headers(lg)] == [0, 4, 4]
    assert entries(lg) == [(0, 0), (4, 1)]
    lg.close()
