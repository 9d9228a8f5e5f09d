"""Offset storage for consumer groups: ``offsets.storage=zookeeper | kafka`` and ``dual.commit.enabled``.

An offset stored is the *next offset to consume* of a partition (Kafka's convention).

* :class:`ZooKeeperOffsetStore`: ``/consumers/[group]/offsets/[topic]/[partition]`` (persistent,
  the offset as decimal text), the seed's "Consumer Offset Tracking" in ZooKeeper.
* :class:`KafkaOffsetStore`: OffsetCommit / OffsetFetch to the group's coordinator (found with
  FindCoordinator) through :class:`connector.client.ClusterClient`, which appends to
  ``__consumer_offsets``.  COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR and COORDINATOR_NOT_AVAILABLE
  are retried with backoff (the coordinator is looked up again) up to ``timeout_s`` in all, in the
  client's one retry loop.
* :class:`DualOffsetStore`: the seed's migration path.  Commits go to both stores; a fetch reads both
  and takes the larger offset per partition.  To migrate from ZooKeeper to Kafka: run with
  ``offsets.storage=kafka`` + ``dual.commit.enabled=true`` (a rolling bounce: offsets only in
  ZooKeeper are still found, and every commit now also lands in Kafka), then with
  ``dual.commit.enabled=false``.  Rolling back works the same with ``offsets.storage=zookeeper``.

:meth:`OffsetStore.create` builds the right one from the two settings.  All stores are thread-safe
(kazoo clients and ClusterClient are).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kazoo.exceptions import NodeExistsError, NoNodeError

from pyklog.broker.errors import ConfigError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import decode_consumer_offset, encode_consumer_offset

log = logging.getLogger(__name__)

STORAGES = ("zookeeper", "kafka")


def _normalize(offsets: Mapping) -> dict:
    out = {}
    for tp, off in offsets.items():
        t, p = tp
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise ValueError(
                f"offset to commit for {t}-{p} must be an int >= 0 (the next offset to consume); got {off!r}"
            )
        out[(t, int(p))] = off
    return out


class OffsetStore:
    """Where a group's consumed offsets live.  ``commit(group, {(t, p): next_offset})``,
    ``fetch(group, [(t, p)]) -> {(t, p): next_offset}`` (partitions never committed are absent)."""

    storage = ""

    def commit(self, group: str, offsets: Mapping) -> None:
        raise NotImplementedError

    def fetch(self, group: str, partitions: Iterable) -> dict:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @staticmethod
    def create(
        storage: str,
        dual_commit: bool = False,
        zk=None,
        cluster_client=None,
        *,
        timeout_s: float = 30.0,
        zk_credentials=None,
    ) -> OffsetStore:
        """The store for ``offsets.storage`` = ``storage`` and ``dual.commit.enabled`` = ``dual_commit``.
        ``zk``: a KazooClient (shared, not closed by the store) or a connect string (the store opens and
        closes its own client, with ``zk_credentials``); ``cluster_client``: a ClusterClient (shared, not closed)."""
        storage = str(storage).lower()
        if storage not in STORAGES:
            raise ConfigError(f"offsets.storage must be 'zookeeper' or 'kafka'; got {storage!r}")
        need_zk = storage == "zookeeper" or dual_commit
        need_kafka = storage == "kafka" or dual_commit
        if need_zk and zk is None:
            raise ConfigError(
                f"offsets.storage={storage} with dual.commit.enabled={str(bool(dual_commit)).lower()} "
                "needs ZooKeeper (zookeeper.connect)"
            )
        if need_kafka and cluster_client is None:
            raise ConfigError(
                f"offsets.storage={storage} with dual.commit.enabled={str(bool(dual_commit)).lower()} "
                "needs brokers (a ClusterClient from bootstrap.servers or zookeeper.connect)"
            )
        zk_store = ZooKeeperOffsetStore(zk, credentials=zk_credentials) if need_zk else None
        kafka_store = KafkaOffsetStore(cluster_client, timeout_s=timeout_s) if need_kafka else None
        if dual_commit:
            primary, secondary = (kafka_store, zk_store) if storage == "kafka" else (zk_store, kafka_store)
            return DualOffsetStore(primary, secondary)
        return zk_store if storage == "zookeeper" else kafka_store


class ZooKeeperOffsetStore(OffsetStore):
    """Offsets as persistent znodes ``/consumers/[group]/offsets/[topic]/[partition]`` (decimal text,
    encoded and decoded by :mod:`pyklog.broker.zk.znodes`, as the broker's OffsetCommit/OffsetFetch v0)."""

    storage = "zookeeper"

    def __init__(self, zk, *, credentials=None):
        if isinstance(zk, str):
            from kazoo.client import KazooClient

            from pyklog.broker.zk.znode_acls import client_credentials, kazoo_kwargs

            client = KazooClient(hosts=zk, **kazoo_kwargs(client_credentials(credentials)))
            try:
                client.start(timeout=30)
            except Exception as e:
                client.close()
                raise ZooKeeperError(f"cannot connect to ZooKeeper at {zk!r}: {e}") from e
            self.zk, self._own = client, True
        else:
            self.zk, self._own = zk, False

    def commit(self, group, offsets):
        zk = self.zk
        for (t, p), off in sorted(_normalize(offsets).items()):
            path = paths.consumer_offset(group, t, p)
            data = encode_consumer_offset(off)
            try:
                zk.retry(zk.set, path, data)
            except NoNodeError:
                try:
                    zk.retry(zk.create, path, data, makepath=True)
                except NodeExistsError:
                    zk.retry(zk.set, path, data)

    def fetch(self, group, partitions):
        zk = self.zk
        out = {}
        # read what the previous owner committed even through a lagging ZooKeeper follower
        try:
            zk.retry(zk.sync, paths.consumer_offsets(group))
        except NoNodeError:
            pass
        for t, p in partitions:
            path = paths.consumer_offset(group, t, int(p))
            try:
                data, _ = zk.retry(zk.get, path)
            except NoNodeError:
                continue
            off = decode_consumer_offset(data, path)  # ZkDataError names the node and what it holds
            if off >= 0:
                out[(t, int(p))] = off
        return out

    def close(self):
        if self._own:
            self.zk.stop()
            self.zk.close()


class KafkaOffsetStore(OffsetStore):
    """Offsets in ``__consumer_offsets`` through the group coordinator (OffsetCommit / OffsetFetch).

    Each commit or fetch is ONE retry loop bounded by ``timeout_s`` in all: the client's
    (:meth:`ClusterClient.commit_offsets` / ``fetch_committed``, paced by its retry.backoff.ms),
    which retries COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and
    network errors and looks the coordinator up again after the last three (as Kafka's
    ``ConsumerCoordinator.commitOffsetsSync`` marks the coordinator unknown and retries within one
    timer).  The store adds no loop of its own around it: a second loop would multiply the bound.
    """

    storage = "kafka"

    def __init__(self, cluster_client, *, timeout_s: float = 30.0):
        self.client = cluster_client
        self.timeout_s = timeout_s

    def commit(self, group, offsets):
        items = _normalize(offsets)
        if not items:
            return
        self.client.commit_offsets(group, items, timeout_s=self.timeout_s)

    def fetch(self, group, partitions):
        tps = [(t, int(p)) for t, p in partitions]
        if not tps:
            return {}
        got = self.client.fetch_committed(group, tps, timeout_s=self.timeout_s)
        return {tp: off for tp, off in got.items() if off is not None and off >= 0}


class DualOffsetStore(OffsetStore):
    """Commit to both stores; fetch the larger offset of the two (dual.commit.enabled=true)."""

    def __init__(self, primary: OffsetStore, secondary: OffsetStore):
        self.primary, self.secondary = primary, secondary
        self.storage = primary.storage

    def commit(self, group, offsets):
        self.primary.commit(group, offsets)
        self.secondary.commit(group, offsets)

    def fetch(self, group, partitions):
        tps = list(partitions)
        a = self.primary.fetch(group, tps)
        b = self.secondary.fetch(group, tps)
        out = dict(b)
        for tp, off in a.items():
            if off >= out.get(tp, -1):
                out[tp] = off
        return out

    def close(self):
        self.primary.close()
        self.secondary.close()
