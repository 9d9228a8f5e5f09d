"""Config overrides in ZooKeeper: topic configs, dynamic broker configs (KIP-226) and the config
change notifications.

* ``/config/topics/[topic]`` -> ``{"version":1,"config":{...}}``; ``/config/brokers/[id]`` and
  ``/config/brokers/<default>`` the same shape.
* ``/config/changes/config_change_[seq]`` -> ``{"version":2,"entity_path":"topics/<topic>"}`` (or
  ``brokers/<entity>``): written after a config changes (here, or by Kafka's kafka-configs); every
  broker drops its cached topic configs and tells its listeners, which re-apply them to the logs.
  The controller removes notifications older than 15 minutes.

Thread-safety: thread-safe (versioned writes, read again after a concurrent change); watch
callbacks run on kazoo's threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from pyklog.broker.errors import InvalidConfigError, InvalidTopicError, PyklogError, UnknownTopicOrPartitionError
from pyklog.broker.zk import paths
from pyklog.broker.zk.metadata_cache import ZkMetadataCache
from pyklog.broker.zk.session import ZkSession, watch_callback
from pyklog.broker.zk.topics import TOPIC_CONFIGS, validate_topic_configs, validate_topic_name
from pyklog.broker.zk.znodes import decode_topic_config, encode_config_change, encode_topic_config

log = logging.getLogger(__name__)


class ZkConfigs:
    """Reads, changes and follows config overrides.  ``cache`` (optional: None for a tool that only
    writes) is told of topic config changes; ``broker_id`` decides who purges old notifications."""

    def __init__(self, session: ZkSession, cache: ZkMetadataCache | None, broker_id: int | None):
        self.session = session
        self.cache = cache
        self.broker_id = broker_id

    def watch_config_changes(self) -> ChildrenWatch:
        """Start the ChildrenWatch of ``/config/changes`` (a registering broker's)."""
        return ChildrenWatch(self.session.zk, paths.CONFIG_CHANGES, self._on_config_changes)

    def alter_topic_config(
        self, name: str, set_configs: dict | None = None, delete_configs: Iterable[str] = ()
    ) -> dict[str, str]:
        """Change a topic's config overrides; return the new overrides.

        Writes ``/config/topics/<topic>`` with a versioned set, then a change notification
        ``/config/changes/config_change_<seq>`` (``{"version":2,"entity_path":"topics/<topic>"}``) as
        Kafka's kafka-configs does; every broker re-reads the config and applies it to its logs.
        UnknownTopicOrPartitionError if the topic does not exist, InvalidConfigError for bad values.
        """
        validate_topic_name(name)
        updates = validate_topic_configs(set_configs)
        removals = set(delete_configs or ())
        unknown = sorted(removals - set(TOPIC_CONFIGS))
        if unknown:
            raise InvalidConfigError(
                f"cannot delete unknown topic config(s) {unknown}; "
                f"expected names such as retention.ms, cleanup.policy, segment.bytes"
            )

        def topic_exists() -> None:
            if self.session.retry(self.session.zk.exists, paths.topic(name)) is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")

        config, _ = self._change_config_node(
            paths.topic_config(name), f"topics/{name}", removals, updates, before_read=topic_exists
        )
        if self.cache is not None:
            self.cache.set_topic_config(name, config, only_cached_topic=True)
        log.info("altered config of topic %s: %s", name, config)
        return dict(config)

    def _change_config_node(
        self,
        path: str,
        entity_path: str,
        removals: set[str],
        updates: dict[str, str],
        *,
        validate: Callable[[dict[str, str]], None] | None = None,
        before_read: Callable[[], None] | None = None,
    ) -> tuple[dict[str, str], int]:
        """Read-modify-write one entity's config node (``{"version":1,"config":{...}}``) with a
        versioned set, read again after a concurrent change, then write the change notification
        ``/config/changes/config_change_<seq>`` naming ``entity_path`` (``topics/<t>``,
        ``brokers/<id>``).  ``before_read()`` runs before each read and ``validate(new_config)`` on
        the complete new config before it is written (either may raise to refuse).  Returns the new
        config and the node's version."""
        while True:
            if before_read is not None:
                before_read()
            try:
                data, stat = self.session.retry(self.session.zk.get, path)
                config = decode_topic_config(data, path) if data else {}
            except NoNodeError:
                stat, config = None, {}
            for k in removals:
                config.pop(k, None)
            config.update(updates)
            if validate is not None:
                validate(dict(config))
            new = encode_topic_config(config)
            try:
                if stat is None:
                    self.session.retry(self.session.zk.create, path, new, makepath=True)
                    version = 0
                else:
                    version = self.session.retry(self.session.zk.set, path, new, version=stat.version).version
                break
            except (BadVersionError, NodeExistsError):
                continue  # a concurrent change: read again
        self.session.retry(
            self.session.zk.create,
            paths.CONFIG_CHANGE_PREFIX,
            encode_config_change(entity_path),
            sequence=True,
            makepath=True,
        )
        return config, version

    @watch_callback
    def _on_config_changes(self, children) -> bool | None:
        if not children:
            return None
        self.cache.clear_topic_configs()  # re-read lazily by topic_config()
        self.cache.notify()
        if self.cache.controller_id == self.broker_id:
            self.session.admin_events.submit("purge-config-changes", self._purge_config_changes, list(children))
        return None

    def _purge_config_changes(self, children, max_age_ms: int = 15 * 60 * 1000) -> None:
        """The controller removes notifications older than 15 minutes (Kafka's changeExpirationMs)."""
        now = time.time() * 1000
        for c in children:
            path = paths.child(paths.CONFIG_CHANGES, c)
            try:
                stat = self.session.retry(self.session.zk.exists, path)
                if stat is not None and now - stat.ctime > max_age_ms:
                    self.session.retry(self.session.zk.delete, path)
            except NoNodeError:
                pass
            except (PyklogError, KazooException) as e:
                log.debug("could not purge %s: %s", path, e)
                return

    # ------------------------------------------------------------------ reads for tools (no cache)

    def topic_names(self) -> list[str]:
        """The topics in the registry (``/brokers/topics``' children), sorted."""
        try:
            return sorted(self.session.retry(self.session.zk.get_children, paths.BROKER_TOPICS))
        except NoNodeError:
            return []

    def topic_exists(self, name: str) -> bool:
        """True if ``/brokers/topics/<name>`` exists (False for an illegal name)."""
        try:
            validate_topic_name(name)  # never build a ZooKeeper path from an illegal name
        except InvalidTopicError:
            return False
        return self.session.retry(self.session.zk.exists, paths.topic(name)) is not None

    def read_topic_config(self, name: str) -> dict[str, str]:
        """The overrides stored at ``/config/topics/<name>`` read now (``{}`` if none); the broker
        reads them through its metadata cache instead."""
        validate_topic_name(name)
        try:
            data, _ = self.session.retry(self.session.zk.get, paths.topic_config(name))
        except NoNodeError:
            return {}
        return decode_topic_config(data, paths.topic_config(name))

    # ------------------------------------------------------------------ dynamic broker configs (KIP-226)

    def broker_config(self, entity: str | int) -> tuple[dict[str, str], int]:
        """The dynamic configs stored at ``/config/brokers/<entity>`` (``entity`` a broker id, or ``""``
        / ``"<default>"`` for the cluster-wide defaults) and the node's version (-1: no node)."""
        path = paths.broker_config(entity)
        try:
            data, stat = self.session.retry(self.session.zk.get, path)
        except NoNodeError:
            return {}, -1
        return (decode_topic_config(data, path) if data else {}), stat.version

    def alter_broker_config(
        self,
        entity: str | int,
        set_configs: dict | None = None,
        delete_configs: Iterable[str] = (),
        validate: Callable[[dict[str, str]], None] | None = None,
    ) -> tuple[dict[str, str], int]:
        """Change the dynamic configs of one broker (or of ``""``/``"<default>"``, every broker) as
        Kafka's ``AdminZkClient.changeBrokerConfig``: write ``/config/brokers/<entity>``
        (``{"version":1,"config":{...}}``) with a versioned set, then the notification
        ``/config/changes/config_change_<seq>`` (``{"version":2,"entity_path":"brokers/<entity>"}``).
        ``validate(new_config)`` runs on the complete new config before anything is written (raise to
        refuse).  Returns the new config and its node version."""
        path = paths.broker_config(entity)
        name = path.rsplit("/", 1)[1]
        removals = set(delete_configs or ())
        updates = {str(k): str(v) for k, v in (set_configs or {}).items()}
        config, version = self._change_config_node(path, f"brokers/{name}", removals, updates, validate=validate)
        log.info("altered dynamic config of brokers/%s: %s", name, sorted(config))  # names: values may be secret
        return dict(config), version

    def watch_broker_config(self, entity: str | int, fn: Callable[[dict[str, str], int], None]) -> None:
        """Call ``fn(config, version)`` (on kazoo's callback thread) now and whenever
        ``/config/brokers/<entity>`` is created, changed or deleted (``({}, -1)``); the watch re-arms
        itself after reconnects (kazoo's DataWatch) and ends with the session.  Kafka's brokers
        follow the change notifications instead; watching the node itself also sees a change written
        without one.  Data that cannot be decoded is logged at ERROR and ignored."""
        path = paths.broker_config(entity)

        def on_data(data, stat, *_):
            if self.session.stopping:
                return False
            if stat is None:
                fn({}, -1)
                return None
            try:
                config = decode_topic_config(data, path) if data else {}
            except Exception as e:  # noqa: BLE001 - bad data written by hand: keep the last good one
                log.error("ignoring the dynamic broker config at %s: %s", path, e)
                return None
            fn(config, stat.version)
            return None

        DataWatch(self.session.zk, path, on_data)
