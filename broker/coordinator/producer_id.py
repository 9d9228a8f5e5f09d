"""Producer ids: cluster-unique, handed out from blocks the cluster reserves for this broker.

Kafka's ``ProducerIdManager`` (ZooKeeper mode: ``ZkProducerIdManager``): a broker reserves a block of
ids at a time (``/latest_producer_id_block``, 1000 ids per block) and hands them out one by one;
when the block is used up it reserves the next.  Ids of a block that was not used up (a restart)
are never handed out again.  Idempotent producers get a new id from InitProducerId without a
transactional id; the transaction coordinator gets one for each new transactional id (and when an
epoch is exhausted).

The reservation itself is the cluster's (:meth:`pyklog.broker.zk.cluster.ZkCluster.allocate_producer_ids`,
a versioned write to ZooKeeper); this module only takes a callable, so it needs no ZooKeeper.

Thread-safety: :class:`ProducerIdManager` is thread-safe; one lock guards the current block and is
held across a reservation (concurrent callers wait for it rather than reserve a block each).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

#: Kafka's ``ProducerIdsBlock.PRODUCER_ID_BLOCK_SIZE``
PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdManager:
    """Hands out producer ids from blocks reserved by ``allocate_block(block_size) -> range`` (a
    cluster-unique range of ids; it raises what the reservation raised, e.g. a ZooKeeper error)."""

    def __init__(self, allocate_block: Callable[[int], range], *, block_size: int = PRODUCER_ID_BLOCK_SIZE):
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        self._allocate_block = allocate_block
        self.block_size = int(block_size)
        self._lock = threading.Lock()
        self._ids = iter(())

    def generate_producer_id(self) -> int:
        """The next unused producer id; reserves a new block first when the current one is used up
        (any thread; may block on the reservation)."""
        with self._lock:
            pid = next(self._ids, None)
            if pid is None:
                self._ids = iter(self._allocate_block(self.block_size))
                pid = next(self._ids)
            return pid


__all__ = ["PRODUCER_ID_BLOCK_SIZE", "ProducerIdManager"]
