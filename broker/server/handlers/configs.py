"""DescribeConfigs v0-4, AlterConfigs v0-2 and IncrementalAlterConfigs v0-1 (Kafka's ZooKeeper-mode
``ConfigHelper`` / ``ZkAdminManager``; the config logic is :mod:`pyklog.broker.server.config_helper`):
topic overrides in ``/config/topics/<t>`` with a ``/config/changes`` notification, applied to the
live logs; dynamic broker configs in ``/config/brokers/<id>`` and ``<default>`` (KIP-226,
:mod:`pyklog.broker.server.dynamic_config`).

Authorization (Kafka's KafkaApis): describing a topic's configs needs DESCRIBE_CONFIGS on the topic
(else TOPIC_AUTHORIZATION_FAILED), a broker's DESCRIBE_CONFIGS on the cluster (else
CLUSTER_AUTHORIZATION_FAILED); altering them ALTER_CONFIGS likewise, per resource.

Thread-safety: stateless; runs on every request handler thread.
"""

from __future__ import annotations

from pyklog.broker.errors import InvalidRequestError, PyklogError, UnknownTopicOrPartitionError
from pyklog.broker.security.acl import AclOperation, ResourceType
from pyklog.broker.server.handlers.authorization import ALLOW_ALL, AuthHelper, denial
from pyklog.broker.server.handlers.responses import NONE, RequestHandlers
from pyklog.broker.zk.topics import validate_topic_name


class ConfigApis(RequestHandlers):
    """The config APIs.  ``dynamic_config`` is the broker's
    :class:`~pyklog.broker.server.dynamic_config.DynamicBrokerConfig`, or None (a broker not started
    by :class:`~pyklog.broker.server.main.BrokerServer`: broker configs cannot be altered)."""

    def __init__(self, config, cluster, replica_manager, dynamic_config=None, *, auth: AuthHelper = ALLOW_ALL):
        self.auth = auth
        self.config = config
        self.broker_id = config.broker_id
        self.cluster = cluster
        self.replica_manager = replica_manager
        self.dynamic_config = dynamic_config

    def _authorize_resource(self, request, rtype: int, name: str, altering: bool) -> None:
        """Raise Kafka's authorization error unless the principal may describe (alter) the configs
        of the resource: a topic's on the topic, a broker's (or broker logger's) on the cluster."""
        from pyklog.broker.server import config_helper as ch

        if not self.auth.enabled:
            return
        op = AclOperation.ALTER_CONFIGS if altering else AclOperation.DESCRIBE_CONFIGS
        if rtype == ch.RESOURCE_TOPIC:
            if not self.auth.authorize(request, op, ResourceType.TOPIC, name):
                raise denial(ResourceType.TOPIC)
        elif rtype in (ch.RESOURCE_BROKER, ch.RESOURCE_BROKER_LOGGER):
            if not self.auth.authorize_cluster(request, op):
                raise denial(ResourceType.CLUSTER)

    def _config_resource_error(self, rtype: int, name: str, altering: bool) -> None:
        """Raise Kafka's error for a config resource this broker cannot describe or alter."""
        from pyklog.broker.server import config_helper as ch

        if rtype == ch.RESOURCE_TOPIC:
            validate_topic_name(name)
            if self.cluster.topic(name, refresh_if_missing=True) is None:
                raise UnknownTopicOrPartitionError(f"the topic {name!r} does not exist")
        elif rtype == ch.RESOURCE_BROKER:
            if name not in ("", str(self.broker_id)):
                raise InvalidRequestError(
                    f"unexpected broker id, expected {self.broker_id} or empty string, but received {name!r}"
                )
            if altering and self.dynamic_config is None:
                raise InvalidRequestError(
                    f"broker {self.broker_id} has no dynamic config (not started by BrokerServer)"
                )
        elif rtype == ch.RESOURCE_BROKER_LOGGER:
            raise InvalidRequestError("pyklog does not describe or alter broker loggers (resource type 8)")
        else:
            raise InvalidRequestError(f"unsupported resource type {rtype}; expected 2 (TOPIC) or 4 (BROKER)")

    def handle_describe_configs(self, request, header, body):
        """DescribeConfigs v0-3 (Kafka's ``ConfigHelper.describeConfigs``, ZooKeeper mode): topic
        resources from ``/config/topics/<topic>`` and the broker's dynamic and static settings, broker
        resources from ``/config/brokers/<id>``, ``/config/brokers/<default>`` and ``server.properties``,
        with sources and synonyms (see :mod:`config_helper`)."""
        from pyklog.broker.server import config_helper as ch

        include_synonyms = body.get("include_synonyms", False)
        include_doc = body.get("include_documentation", False)
        raw = dict(self.config.raw or {})
        results = []
        for r in body["resources"]:
            rtype, name, keys = r["resource_type"], r["resource_name"], r["configuration_keys"]
            entry = {
                "error_code": NONE,
                "error_message": None,
                "resource_type": rtype,
                "resource_name": name,
                "configs": [],
            }
            try:
                self._authorize_resource(request, rtype, name, altering=False)
                self._config_resource_error(rtype, name, altering=False)
                if rtype == ch.RESOURCE_TOPIC:
                    entry["configs"] = ch.describe_topic_configs(
                        name,
                        self.cluster.topic_config(name),
                        raw,
                        keys,
                        include_synonyms,
                        include_doc,
                        dynamic=self._dynamic_levels(),
                    )
                else:
                    entry["configs"] = self._describe_broker(name, raw, keys, include_synonyms, include_doc)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000], configs=[])
            results.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "results": results})

    def _dynamic_levels(self):
        """(this broker's dynamic configs, the cluster-wide dynamic defaults), or None."""
        dyn = self.dynamic_config
        return None if dyn is None else (dyn.dynamic_broker_configs(), dyn.dynamic_default_configs())

    def _describe_broker(self, name: str, raw: dict, keys, include_synonyms: bool, include_doc: bool) -> list:
        """DescribeConfigs of a broker resource: this broker's id (every setting, with its dynamic,
        static and default sources) or "" (the cluster-wide dynamic defaults only)."""
        from pyklog.broker.server import config_helper as ch
        from pyklog.broker.server.config import SERVER_CONFIG
        from pyklog.broker.server.dynamic_config import DYNAMIC_CONFIGS, is_dynamic

        levels = self._dynamic_levels()
        if not name:
            return ch.describe_default_broker_configs(levels[1] if levels else {}, keys, include_synonyms, include_doc)
        return ch.describe_broker_configs(
            raw,
            SERVER_CONFIG,
            keys,
            include_synonyms,
            include_doc,
            dynamic=levels,
            dynamic_names=DYNAMIC_CONFIGS if levels is not None else frozenset(),
            is_dynamic_name=is_dynamic,
        )

    def _alter_broker(self, name: str, configs, incremental: bool, validate_only: bool) -> None:
        """AlterConfigs (``configs`` = [{name, value}], the level is replaced) or
        IncrementalAlterConfigs (``configs`` = the ops) on a broker resource: see
        :meth:`pyklog.broker.server.dynamic_config.DynamicBrokerConfig.alter`."""
        from pyklog.broker.server import config_helper as ch

        dyn = self.dynamic_config
        current = dyn.dynamic_default_configs() if name == "" else dyn.dynamic_broker_configs()
        if incremental:
            to_set, to_delete = ch.incremental_broker_changes(current, configs)
        else:
            to_set = {c["name"]: c["value"] for c in configs if c["value"] is not None}
            to_delete = set(current) - set(to_set)
        dyn.alter(self.cluster, name, to_set, to_delete, validate_only)

    def _alter_topic(self, name: str, to_set: dict, to_delete: set, validate_only: bool) -> None:
        from pyklog.broker.zk.topics import check_internal_topic_configs, is_protected, validate_topic_configs

        validate_topic_configs(to_set)  # INVALID_CONFIG naming the key and what it expects
        if is_protected(name):
            current = self.cluster.topic_config(name)
            check_internal_topic_configs(name, {**{k: v for k, v in current.items() if k not in to_delete}, **to_set})
        if not validate_only:
            self.cluster.alter_topic_config(name, to_set, to_delete)
            self.replica_manager.sync_logs()  # this broker's logs take the new config at once

    def handle_alter_configs(self, request, header, body):
        """AlterConfigs v0-2 (Kafka's ``ZkAdminManager.alterConfigs``): a topic's overrides are
        replaced by the request's (null values dropped, as Kafka), written to ``/config/topics/<t>``
        with a change notification, and applied to the live logs of every broker.  Broker resources
        (this broker's id, or "" for the cluster default) replace that dynamic level (KIP-226, see
        :mod:`pyklog.broker.server.dynamic_config`).  ``validate_only`` checks and writes nothing."""
        from pyklog.broker.server import config_helper as ch

        validate_only = body["validate_only"]
        responses = []
        for r in body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            entry = {"error_code": NONE, "error_message": None, "resource_type": rtype, "resource_name": name}
            try:
                names = [c["name"] for c in r["configs"]]
                dups = sorted({n for n in names if names.count(n) > 1})
                if dups:
                    raise InvalidRequestError(f"error due to duplicate config keys {dups}")
                self._authorize_resource(request, rtype, name, altering=True)
                self._config_resource_error(rtype, name, altering=True)
                if rtype == ch.RESOURCE_TOPIC:
                    to_set = {c["name"]: c["value"] for c in r["configs"] if c["value"] is not None}
                    to_delete = set(self.cluster.topic_config(name)) - set(to_set)
                    self._alter_topic(name, to_set, to_delete, validate_only)
                elif rtype == ch.RESOURCE_BROKER:
                    self._alter_broker(name, r["configs"], False, validate_only)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000])
            responses.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "responses": responses})

    def handle_incremental_alter_configs(self, request, header, body):
        """IncrementalAlterConfigs v0-1 (KIP-339, Kafka's ``ConfigAdminManager``): SET, DELETE,
        APPEND and SUBTRACT (list configs only) on a topic's overrides; otherwise as AlterConfigs."""
        from pyklog.broker.server import config_helper as ch

        validate_only = body["validate_only"]
        responses = []
        for r in body["resources"]:
            rtype, name = r["resource_type"], r["resource_name"]
            entry = {"error_code": NONE, "error_message": None, "resource_type": rtype, "resource_name": name}
            try:
                self._authorize_resource(request, rtype, name, altering=True)
                self._config_resource_error(rtype, name, altering=True)
                if rtype == ch.RESOURCE_TOPIC:
                    to_set, to_delete = ch.incremental_changes(self.cluster.topic_config(name), r["configs"])
                    self._alter_topic(name, to_set, to_delete, validate_only)
                elif rtype == ch.RESOURCE_BROKER:
                    self._alter_broker(name, r["configs"], True, validate_only)
            except PyklogError as e:
                entry.update(error_code=e.code, error_message=str(e)[:1000])
            responses.append(entry)
        self._respond(request, header, {"throttle_time_ms": 0, "responses": responses})
