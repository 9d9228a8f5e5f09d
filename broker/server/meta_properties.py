"""``meta.properties`` of each log dir: Kafka's ``BrokerMetadataCheckpoint`` / ``MetaProperties``.

Format (Kafka's version 0, written by ZooKeeper-mode brokers)::

    #
    #<date>
    version=0
    broker.id=<N>
    cluster.id=<22 chars of URL-safe base64>

Written atomically (temp file, fsync, rename, fsync of the directory) the first time a broker
starts on a log dir, and checked at every start (Kafka's ``KafkaServer.getOrGenerateClusterId``
and ``checkClusterId``):

* every log dir that has the file must agree on broker.id and cluster.id
  (:class:`InconsistentBrokerMetadataError`);
* broker.id must equal the configured ``broker.id`` (:class:`InconsistentBrokerIdError`, Kafka's
  ``InconsistentBrokerIdException``);
* cluster.id must equal ZooKeeper's ``/cluster/id`` (:class:`InconsistentClusterIdError`, Kafka's
  ``InconsistentClusterIdException``): a ZooKeeper that came back empty, or a broker pointed at
  another ensemble, stops the broker before it registers or touches a log.

Not thread-safe: used once at start-up by the broker's main thread.
"""

from __future__ import annotations

import os
import time

from pyklog.broker.errors import PyklogError
from pyklog.broker.log.checkpoint import replace_file_durably

META_PROPERTIES = "meta.properties"
META_VERSION = 0


class InconsistentBrokerMetadataError(PyklogError):
    """meta.properties files disagree with each other or with the configuration."""


class InconsistentClusterIdError(InconsistentBrokerMetadataError):
    """The cluster id stored in the log dirs is not the one ZooKeeper holds."""


class InconsistentBrokerIdError(InconsistentBrokerMetadataError):
    """The broker.id stored in the log dirs is not the configured one."""


def _parse(path: str) -> dict[str, str]:
    props: dict[str, str] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith(("#", "!")):
                continue
            key, sep, value = line.partition("=")
            if not sep:
                raise InconsistentBrokerMetadataError(f"{path}:{lineno}: expected key=value, read {line!r}")
            props[key.strip()] = value.strip()
    return props


def read_meta_properties(log_dir: str) -> dict | None:
    """``{"version": 0, "broker.id": N, "cluster.id": str|None}`` of one log dir, None if it has no
    meta.properties.  A malformed file raises :class:`InconsistentBrokerMetadataError` (never
    rewritten: the operator decides)."""
    path = os.path.join(log_dir, META_PROPERTIES)
    try:
        props = _parse(path)
    except FileNotFoundError:
        return None
    try:
        version = int(props["version"])
        broker_id = int(props["broker.id"])
    except (KeyError, ValueError):
        raise InconsistentBrokerMetadataError(
            f"{path}: expected version=0 and an integer broker.id, read {props}"
        ) from None
    if version != META_VERSION:
        raise InconsistentBrokerMetadataError(
            f"{path}: unsupported meta.properties version {version} (expected {META_VERSION})"
        )
    return {"version": version, "broker.id": broker_id, "cluster.id": props.get("cluster.id") or None}


def write_meta_properties(log_dir: str, broker_id: int, cluster_id: str) -> None:
    """Write ``meta.properties`` atomically: temp file, fsync, rename, fsync of the directory."""
    os.makedirs(log_dir, exist_ok=True)
    path = os.path.join(log_dir, META_PROPERTIES)
    text = (
        f"#\n#{time.strftime('%a %b %d %H:%M:%S %Z %Y')}\n"
        f"version={META_VERSION}\nbroker.id={int(broker_id)}\ncluster.id={cluster_id}\n"
    )
    replace_file_durably(path, text.encode("utf-8"))


def _by_dir(found: dict, key: str) -> str:
    return ", ".join(f"{d}: {m[key]}" for d, m in sorted(found.items()))


def stored_identity(log_dirs: list[str], broker_id: int) -> str | None:
    """Check the meta.properties of every log dir against each other and ``broker_id``; return the
    stored cluster id (None when no dir has one yet: a first start)."""
    found = {}
    for d in log_dirs:
        meta = read_meta_properties(d)
        if meta is not None:
            found[d] = meta
    ids = {m["broker.id"] for m in found.values()}
    if len(ids) > 1:
        raise InconsistentBrokerMetadataError(
            f"the log dirs disagree on broker.id: {_by_dir(found, 'broker.id')}; each log dir belongs to one broker"
        )
    if ids and ids != {broker_id}:
        (stored,) = ids
        raise InconsistentBrokerIdError(
            f"configured broker.id {broker_id} does not match stored broker.id {stored} in meta.properties "
            f"of {sorted(found)}. If you moved your data, make sure your configured broker.id matches. "
            "If you intend to create a new broker, remove all data in your data directories (log.dirs)."
        )
    cluster_ids = {m["cluster.id"] for m in found.values() if m["cluster.id"]}
    if len(cluster_ids) > 1:
        raise InconsistentBrokerMetadataError(f"the log dirs disagree on cluster.id: {_by_dir(found, 'cluster.id')}")
    return next(iter(cluster_ids)) if cluster_ids else None


def check_cluster_id(
    stored: str | None, zookeeper_cluster_id: str | None, zk_connect: str, log_dirs: list[str]
) -> None:
    """Raise :class:`InconsistentClusterIdError` if the log dirs belong to another cluster than
    the one ZooKeeper holds (``zookeeper_cluster_id`` None: ZooKeeper has no ``/cluster/id``)."""
    if stored is None or stored == zookeeper_cluster_id:
        return
    found = f"cluster ID {zookeeper_cluster_id}" if zookeeper_cluster_id else "no cluster ID (an empty ZooKeeper)"
    raise InconsistentClusterIdError(
        f"the cluster ID {stored} stored in meta.properties of {', '.join(log_dirs)} does not match ZooKeeper "
        f"{zk_connect}, which holds {found}. The broker is trying to join the wrong cluster, or ZooKeeper lost "
        "its data (restarted without its data directory?). Nothing was changed: no log was deleted and no "
        "cluster ID was created in ZooKeeper. Restore ZooKeeper's data directory (or point zookeeper.connect at the "
        "right ensemble) and start the broker again. Only if these logs are really meant to join this new "
        "cluster, remove meta.properties from the log dirs."
    )
