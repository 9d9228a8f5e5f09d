"""Consumer offsets in ZooKeeper for OffsetCommit / OffsetFetch v0, as Kafka 0.8.2 kept them.

Kafka 0.8.2's ``KafkaApis`` answered version 0 of OffsetCommit and OffsetFetch from ZooKeeper
(``ZkUtils.updatePersistentPath`` on ``/consumers/<group>/offsets/<topic>/<partition>``), version 1+
from the offsets topic; pyklog does the same.  The node holds the next offset to consume as decimal
text (codec: :func:`pyklog.broker.zk.znodes.encode_consumer_offset` / ``decode_consumer_offset``, the
same one the connector's ``ZooKeeperOffsetStore`` uses), so a 0.8 consumer's offsets, the
connector's and those committed through the broker are interchangeable.  The leader epoch and the
metadata string of a commit are not stored (v0 has neither): a fetch answers epoch -1 and ``""``.

Errors are per partition, as the responses carry them: an empty group id is INVALID_REQUEST, an
illegal topic name INVALID_TOPIC_EXCEPTION, ZooKeeper trouble COORDINATOR_NOT_AVAILABLE on commit;
a fetch leaves out a partition whose node is missing, unreadable (logged) or unreachable (logged).

Runs on the request handler threads.  Thread-safety: thread-safe and lock-free; every ZooKeeper call
goes through the cluster's kazoo client (itself thread-safe) with ``client.retry``.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NodeExistsError, NoNodeError

from pyklog.broker.errors import CoordinatorNotAvailableError, InvalidRequestError, PyklogError
from pyklog.broker.zk import paths
from pyklog.broker.zk.topics import validate_topic_name
from pyklog.broker.zk.znodes import ZkDataError, decode_consumer_offset, encode_consumer_offset

log = logging.getLogger(__name__)

NONE = 0


class ZkOffsetStore:
    """Offsets of ZooKeeper-based consumer groups, read and written through ``cluster``'s session
    (a started :class:`~pyklog.broker.zk.cluster.ZkCluster`)."""

    def __init__(self, cluster):
        self.cluster = cluster

    def commit(self, group: str, wanted: dict) -> dict:
        """Store ``{(topic, partition): (offset, leader_epoch, metadata)}``; return
        ``{(topic, partition): error code}`` (0 when stored)."""
        zk = self.cluster.zk
        codes = {}
        for (t, p), (offset, _epoch, _meta) in wanted.items():
            try:
                if not group:
                    raise InvalidRequestError("group id is empty")
                validate_topic_name(t)
                path = paths.consumer_offset(group, t, p)
                data = encode_consumer_offset(offset)

                def write(path=path, data=data):
                    try:
                        zk.set(path, data)
                    except NoNodeError:
                        try:
                            zk.create(path, data, makepath=True)
                        except NodeExistsError:
                            zk.set(path, data)

                zk.retry(write)
                codes[(t, p)] = NONE
            except PyklogError as e:
                codes[(t, p)] = e.code
            except Exception:  # noqa: BLE001 - ZooKeeper trouble
                log.exception("OffsetCommit v0 to ZooKeeper failed for %s %s-%d", group, t, p)
                codes[(t, p)] = CoordinatorNotAvailableError.code
        return codes

    def fetch(self, group: str, wanted: list) -> dict:
        """``{(topic, partition): (offset, -1, "")}`` of the partitions in ``wanted`` that have an offset."""
        zk = self.cluster.zk
        found = {}
        for t, p in wanted:
            try:
                path = paths.consumer_offset(group, t, p)
                data, _ = zk.retry(zk.get, path)
                found[(t, p)] = (decode_consumer_offset(data, path), -1, "")
            except NoNodeError:
                pass
            except ZkDataError as e:
                log.warning("unreadable offset in ZooKeeper for %s %s-%d: %s", group, t, p, e)
            except Exception:  # noqa: BLE001 - ZooKeeper trouble: report no offset, log why
                log.exception("OffsetFetch v0 from ZooKeeper failed for %s %s-%d", group, t, p)
        return found


__all__ = ["ZkOffsetStore"]
