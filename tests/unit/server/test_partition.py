"""Partition's own decisions (no server, no ZooKeeper): role changes, follower fetch states, the ISR
expand / shrink decisions, the high watermark and the acks=all completion check.  The log is a
small stand-in holding offsets; the ZooKeeper ISR write is a recording ``alter_isr`` callback."""

from __future__ import annotations

import threading

import pytest

from pyklog.broker.errors import NotEnoughReplicasAfterAppendError, NotLeaderOrFollowerError
from pyklog.broker.server.partition import Partition

LEADER = 1


class FakeLog:
    """Only the offsets and calls Partition uses."""

    def __init__(self, log_end_offset: int = 0):
        self.log_end_offset = log_end_offset
        self.high_watermark = 0
        self.log_start_offset = 0
        self.replicated = False
        self.epochs: list[tuple[int, int]] = []

    def assign_epoch_start_offset(self, epoch: int, offset: int) -> None:
        self.epochs.append((epoch, offset))

    def update_high_watermark(self, hw: int) -> bool:
        self.high_watermark = hw
        return True

    def append_as_follower(self, data):
        self.log_end_offset += len(data)
        return len(data)

    def increment_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = offset


class RecordingAlterIsr:
    """The replica manager's ISR write: adopts the new ISR (as a successful write does)."""

    def __init__(self):
        self.calls: list[tuple[list[int], str, bool]] = []

    def __call__(self, part: Partition, new_isr, why: str) -> None:
        # is the partition lock held (by the caller)? another thread cannot take it then
        got = []

        def try_lock():
            ok = part.lock.acquire(blocking=False)
            if ok:
                part.lock.release()
            got.append(ok)

        t = threading.Thread(target=try_lock)
        t.start()
        t.join()
        held = not got[0]
        self.calls.append((sorted(new_isr), why, held))
        part.isr = frozenset(new_isr)


def leader_partition(leo: int = 10, isr=(1, 2, 3), now_ms: int = 1000) -> Partition:
    part = Partition("t", 0, FakeLog(leo), (1, 2, 3))
    part.make_leader(LEADER, 5, isr, 7, now_ms)
    return part


class TestRoles:
    def test_make_leader_tracks_followers_and_assigns_the_epoch(self):
        part = leader_partition(isr=(1, 2))
        assert part.is_leader and part.leader == LEADER and part.leader_epoch == 5
        assert part.isr == {1, 2} and part.zk_version == 7
        assert set(part.followers) == {2, 3}
        assert part.followers[2].last_caught_up_ms == 1000  # in the ISR: caught up now
        assert part.followers[3].last_caught_up_ms == 0
        assert part.log.replicated and part.log.epochs == [(5, 10)]
        assert part.leader_epoch_start_offset == 10

    def test_make_leader_always_includes_itself(self):
        part = leader_partition(isr=(2,))
        assert LEADER in part.isr

    def test_make_follower_clears_leader_state(self):
        part = leader_partition()
        part.make_follower(2, 6)
        assert not part.is_leader and part.leader == 2 and part.leader_epoch == 6
        assert part.isr == frozenset() and part.followers == {}

    def test_update_assigned_replicas_keeps_known_followers(self):
        part = leader_partition()
        known = part.followers[2]
        part.replicas = (1, 2, 4)
        part.update_assigned_replicas(LEADER)
        assert set(part.followers) == {2, 4} and part.followers[2] is known


class TestFollowersAndIsr:
    def test_fetch_state_of_an_unassigned_replica_is_not_tracked(self):
        part = leader_partition()
        assert part.update_follower_fetch_state(9, 10, 2000) is False

    def test_fetch_at_the_log_end_offset_is_caught_up(self):
        part = leader_partition()
        assert part.update_follower_fetch_state(3, 10, 2000) is True
        assert part.followers[3].log_end_offset == 10 and part.followers[3].last_caught_up_ms == 2000

    def test_expand_waits_for_the_high_watermark(self):
        part = leader_partition(isr=(1, 2))
        part.log.high_watermark = 8
        alter = RecordingAlterIsr()
        part.update_follower_fetch_state(3, 5, 2000)
        part.maybe_expand_isr(3, alter)
        assert alter.calls == []
        part.update_follower_fetch_state(3, 10, 2100)
        part.maybe_expand_isr(3, alter)
        assert alter.calls == [([1, 2, 3], "expand", True)]
        assert part.isr == {1, 2, 3}

    def test_expand_waits_for_the_epoch_start_offset(self):
        part = leader_partition(isr=(1, 2))  # the epoch starts at 10
        alter = RecordingAlterIsr()
        part.update_follower_fetch_state(3, 9, 2000)  # above the high watermark (0), below 10
        part.maybe_expand_isr(3, alter)
        assert alter.calls == []

    def test_shrink_drops_lagging_followers_under_the_lock(self):
        part = leader_partition(now_ms=1000)
        part.update_follower_fetch_state(2, 10, 5000)
        alter = RecordingAlterIsr()
        out = part.maybe_shrink_isr(LEADER, 5000, 3000, alter)
        assert out == {3}
        assert alter.calls == [([1, 2], "shrink", True)]

    def test_shrink_with_all_in_sync_writes_nothing(self):
        part = leader_partition(now_ms=1000)
        alter = RecordingAlterIsr()
        assert part.maybe_shrink_isr(LEADER, 2000, 3000, alter) == set()
        assert alter.calls == []

    def test_shrink_as_follower_is_none(self):
        part = leader_partition()
        part.make_follower(2, 6)
        assert part.maybe_shrink_isr(LEADER, 99999, 1, RecordingAlterIsr()) is None


class TestHighWatermark:
    def test_is_the_smallest_log_end_offset_of_the_isr(self):
        part = leader_partition(leo=10, isr=(1, 2, 3))
        part.update_follower_fetch_state(2, 7, 2000)
        assert part.maybe_increment_high_watermark(LEADER) is False  # follower 3 unknown: held
        part.update_follower_fetch_state(3, 9, 2000)
        assert part.maybe_increment_high_watermark(LEADER) is True
        assert part.log.high_watermark == 7

    def test_acks_all_completion(self):
        part = leader_partition(isr=(1, 2, 3))
        part.log.high_watermark = 5
        assert part.check_enough_replicas_reach_offset(LEADER, 6, 5, lambda: 2) is None
        assert part.check_enough_replicas_reach_offset(LEADER, 5, 5, lambda: 2) == 0
        assert isinstance(part.check_enough_replicas_reach_offset(LEADER, 5, 4, lambda: 2), NotLeaderOrFollowerError)
        part.isr = frozenset({1})
        assert isinstance(
            part.check_enough_replicas_reach_offset(LEADER, 5, 5, lambda: 2), NotEnoughReplicasAfterAppendError
        )


class TestFollowerSide:
    def test_append_moves_high_watermark_and_log_start_offset(self):
        part = Partition("t", 0, FakeLog(0), (1, 2))
        part.make_follower(2, 3)
        assert part.append_records_to_follower(b"xxxx", 10, 3, 2) == 4
        assert part.log.log_end_offset == 4 and part.log.high_watermark == 4 and part.log.log_start_offset == 2

    def test_other_epoch_is_refused(self):
        part = Partition("t", 0, FakeLog(0), (1, 2))
        part.make_follower(2, 3)
        with pytest.raises(NotLeaderOrFollowerError):
            part.append_records_to_follower(b"xx", 10, 4)
        with pytest.raises(NotLeaderOrFollowerError):
            part.run_as_follower(2, lambda lg: None)
        assert part.run_as_follower(3, lambda lg: lg.log_end_offset) == 0
