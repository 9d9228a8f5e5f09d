"""Cluster-unique producer id blocks: Kafka's ``/latest_producer_id_block``
(``{"version":1,"broker":id,"block_start":"0","block_end":"999"}``, :mod:`pyklog.broker.zk.znodes`).

Thread-safety: thread-safe (a versioned write; a concurrent allocator makes it read again).
"""

from __future__ import annotations

import logging

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.session import ZkSession
from pyklog.broker.zk.znodes import ProducerIdBlock, decode_producer_id_block, encode_producer_id_block

log = logging.getLogger(__name__)


class ZkProducerIdManager:
    """Allocates producer id blocks for broker ``broker_id`` (None: an admin client, written as -1)."""

    def __init__(self, session: ZkSession, broker_id: int | None):
        self.session = session
        self.broker_id = broker_id

    def allocate_producer_ids(self, block_size: int = 1000) -> range:
        """A cluster-unique block of ``block_size`` producer ids (Kafka's ``/latest_producer_id_block``).

        Read the last block, write the next one with a versioned set; retry when another broker wrote
        in between.
        """
        if block_size <= 0:
            raise ValueError(f"block_size must be positive, got {block_size}")
        path = paths.LATEST_PRODUCER_ID_BLOCK
        while True:
            try:
                data, stat = self.session.retry(self.session.zk.get, path)
            except NoNodeError:
                data, stat = None, None
            if data:
                start = decode_producer_id_block(data, path).block_end + 1
            else:
                start = 0
            end = start + block_size - 1
            if end >= 2**63 - 1:
                raise ZooKeeperError(f"producer ids exhausted: next block would end at {end}")
            new = encode_producer_id_block(
                ProducerIdBlock(self.broker_id if self.broker_id is not None else -1, start, end)
            )
            try:
                if stat is None:
                    self.session.retry(self.session.zk.create, path, new)
                else:
                    self.session.retry(self.session.zk.set, path, new, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue
            log.debug("allocated producer id block [%d, %d]", start, end)
            return range(start, end + 1)
