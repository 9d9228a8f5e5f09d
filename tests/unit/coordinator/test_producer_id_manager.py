"""ProducerIdManager (no server): ids come from reserved blocks in order, a new block only when the
current one is used up, unique under concurrency, a failed reservation raised to the caller."""

from __future__ import annotations

import threading

import pytest

from pyklog.broker.coordinator.producer_id import PRODUCER_ID_BLOCK_SIZE, ProducerIdManager
from pyklog.broker.errors import ZooKeeperError


class Blocks:
    """The cluster's reservation as ZkCluster.allocate_producer_ids does it: consecutive blocks."""

    def __init__(self, fail: bool = False):
        self.next_start = 0
        self.calls: list[int] = []
        self.fail = fail

    def __call__(self, block_size: int) -> range:
        self.calls.append(block_size)
        if self.fail:
            raise ZooKeeperError("no quorum")
        r = range(self.next_start, self.next_start + block_size)
        self.next_start += block_size
        return r


def test_ids_in_order_one_block_at_a_time():
    blocks = Blocks()
    m = ProducerIdManager(blocks, block_size=3)
    assert [m.generate_producer_id() for _ in range(7)] == list(range(7))
    assert blocks.calls == [3, 3, 3]
    assert PRODUCER_ID_BLOCK_SIZE == 1000 and ProducerIdManager(Blocks()).block_size == 1000


def test_a_failed_reservation_is_raised_and_the_next_call_tries_again():
    blocks = Blocks(fail=True)
    m = ProducerIdManager(blocks, block_size=2)
    with pytest.raises(ZooKeeperError):
        m.generate_producer_id()
    blocks.fail = False
    assert m.generate_producer_id() == 0


def test_unique_under_concurrency():
    m = ProducerIdManager(Blocks(), block_size=7)
    got: list[int] = []
    lock = threading.Lock()

    def take():
        mine = [m.generate_producer_id() for _ in range(200)]
        with lock:
            got.extend(mine)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(1600))


def test_block_size_must_be_positive():
    with pytest.raises(ValueError):
        ProducerIdManager(Blocks(), block_size=0)
