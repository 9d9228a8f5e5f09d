"""Codecs of the ZooKeeper records pyklog reads and writes: one encoder and one decoder per znode.

Pure functions and dataclasses, bytes in -> objects out and back; no ZooKeeper calls, no path
building (paths come from :mod:`pyklog.broker.zk.paths`; a decoder takes the path only to name it
in its error).  Malformed data raises :class:`ZkDataError`, which names the path, what was expected
and what was read.  Every reader and writer of these nodes (the broker's
:class:`~pyklog.broker.zk.cluster.ZkCluster` and request handlers, the connector's client, consumer
group and offset store, the CLIs) goes through this module.

The JSON forms are Kafka's, as documented in Kafka's "ZooKeeper Directories" section and written
by Kafka's ``ZkData`` znode classes (``BrokerIdZNode``, ``TopicZNode``, ``TopicPartitionStateZNode``,
``ConfigEntityZNode``, ``ConfigEntityChangeNotificationSequenceZNode``, ``ProducerIdBlockZNode``,
``ClusterIdZNode``) and by the 0.8 consumer's ``ZookeeperConsumerConnector``:

==========================================================  =================================================
node                                                        form (version)
==========================================================  =================================================
``/cluster/id``                                             ``{"version":"1","id":"<22 chars>"}``
``/brokers/ids/<id>`` (ephemeral)                           ``{"listener_security_protocol_map":{"PLAINTEXT":
                                                            "PLAINTEXT"},"endpoints":["PLAINTEXT://h:9092"],
                                                            "rack":null,"jmx_port":-1,"host":"h",
                                                            "timestamp":"1700000000000","port":9092,
                                                            "version":4}``; v5 adds ``"features":{}``;
                                                            v1 has only host/port/jmx_port/timestamp;
                                                            v2 adds ``endpoints`` (listener name = security
                                                            protocol), v3 ``rack``, v4 the protocol map.
``/brokers/topics/<t>``                                     ``{"version":1,"partitions":{"0":[1,2]}}``; v2 adds
                                                            ``adding_replicas``/``removing_replicas`` (KIP-455),
                                                            v3 ``topic_id`` (KIP-516: Kafka's Uuid as 22
                                                            chars of URL-safe base64), which pyklog writes
                                                            at creation and adds to older nodes.
``/brokers/topics/<t>/partitions/<p>/state``                ``{"controller_epoch":1,"leader":1,"version":1,
                                                            "leader_epoch":0,"isr":[1,2]}``
``/config/topics/<t>``                                      ``{"version":1,"config":{"cleanup.policy":"compact"}}``
``/config/changes/config_change_<seq>``                     ``{"version":2,"entity_path":"topics/<t>"}``
``/consumers/<g>/ids/<consumer id>`` (ephemeral)            ``{"version":1,"subscription":{"t":1},
                                                            "pattern":"static","timestamp":"1700000000000"}``
``/consumers/<g>/offsets/<t>/<p>``                          the next offset to consume as decimal text: ``42``
``/latest_producer_id_block``                               ``{"version":1,"broker":0,"block_start":"0",
                                                            "block_end":"999"}``
==========================================================  =================================================

Choosing a broker's address (:meth:`BrokerRegistration.address`), as Kafka's ``BrokerIdZNode.decode``
and ``Broker.node(listenerName)``: the ``endpoints`` take precedence over ``host``/``port`` (which
v2+ fill only for a PLAINTEXT listener, ``host`` null and ``port`` -1 otherwise); the endpoint is the
one of the listener the client uses: a named listener, else the listener whose security protocol is
PLAINTEXT (pyklog's clients speak only PLAINTEXT), never simply the first endpoint, which may be SSL.
Only a v1 registration (no ``endpoints``) falls back to ``host``/``port``.

Thread-safety: stateless; every function may be called from any thread.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.security.acl import (
    AccessControlEntry,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from pyklog.broker.zk import paths

#: Version of the broker registration written (Kafka 2.x writes 4: endpoints, rack, protocol map).
BROKER_INFO_VERSION = 4
#: Version of the consumer registration written (the 0.8 consumer's).
CONSUMER_REGISTRATION_VERSION = 1
CONSUMER_PATTERNS = ("static", "white_list", "black_list")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


class ZkDataError(ZooKeeperError, ValueError):
    """A znode holds data that is not the expected record (not retriable: reading again gives the
    same bytes).  ``path`` is the node, ``data`` the bytes read.  Also a ValueError, so callers that
    treated unreadable data as a ValueError keep working."""

    retriable = False

    def __init__(self, path: str, expected: str, data: bytes | None, *, read: str | None = None, detail: str = ""):
        self.path = path
        self.data = data
        shown = repr(data[:200] if isinstance(data, (bytes, bytearray)) else data)
        what = shown if read is None else f"{read} in {shown}"
        super().__init__(f"{path}: expected {expected}, read {what}" + (f" ({detail})" if detail else ""))


def _dumps(obj) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode("utf-8")


def _object(data: bytes, path: str, expected: str) -> dict:
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, TypeError) as e:
        raise ZkDataError(path, f"JSON {expected}", data, detail=str(e)) from None
    if not isinstance(obj, dict):
        raise ZkDataError(path, f"a JSON object {expected}", data)
    return obj


def _int(value, path: str, what: str, data: bytes) -> int:
    """An int field; Kafka writes some longs as strings ("block_end":"999"), accept both."""
    if isinstance(value, bool):
        raise ZkDataError(path, f"an integer {what}", data)
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ZkDataError(path, f"an integer {what}", data) from None


def _int_list(value, path: str, what: str, data: bytes) -> list[int]:
    if not isinstance(value, list):
        raise ZkDataError(path, f"a list of broker ids as {what}", data)
    return [_int(b, path, f"broker id in {what}", data) for b in value]


# ---------------------------------------------------------------------------- /cluster/id


def encode_cluster_id(cluster_id: str) -> bytes:
    return _dumps({"version": "1", "id": cluster_id})


def decode_cluster_id(data: bytes, path: str = paths.CLUSTER_ID) -> str:
    obj = _object(data, path, '{"version":"1","id":...}')
    cid = obj.get("id")
    if not isinstance(cid, str) or not cid:
        raise ZkDataError(path, '{"version":"1","id":...}', data)
    return cid


# ---------------------------------------------------------------------------- /brokers/ids/<id>


@dataclass(frozen=True)
class EndPoint:
    """One advertised listener: ``<listener_name>://<host>:<port>`` and its security protocol."""

    listener_name: str
    host: str
    port: int
    security_protocol: str

    def connection_string(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.listener_name}://{host}:{self.port}"


@dataclass(frozen=True)
class BrokerRegistration:
    """A broker registration, Kafka's ``BrokerInfo`` (v1-v5).  ``host`` may be None and ``port`` -1
    (v2+ without a PLAINTEXT listener); ``timestamp`` is milliseconds as text, as Kafka writes it."""

    endpoints: tuple = ()
    host: str | None = None
    port: int = -1
    rack: str | None = None
    jmx_port: int = -1
    timestamp: str = "0"
    version: int = BROKER_INFO_VERSION
    features: dict | None = None

    @classmethod
    def for_listeners(
        cls,
        listeners,
        host: str | None,
        port: int | None,
        *,
        rack: str | None = None,
        timestamp_ms: int = 0,
        protocol_map: Mapping[str, str] | None = None,
    ) -> BrokerRegistration:
        """A v4 registration of ``listeners`` (``["PLAINTEXT://h:9092", ...]``); each listener's security
        protocol comes from ``protocol_map`` (``listener.security.protocol.map``), else a listener named
        after a security protocol has that one and any other is PLAINTEXT."""
        eps = []
        for ep in listeners:
            name, _, addr = ep.partition("://")
            h, _, p = addr.rpartition(":")
            proto = (protocol_map or {}).get(name) or (name if name in SECURITY_PROTOCOLS else "PLAINTEXT")
            eps.append(EndPoint(name, h.strip("[]"), int(p), proto))
        return cls(tuple(eps), host, -1 if port is None else int(port), rack, -1, str(int(timestamp_ms)))

    def to_json(self) -> dict:
        out = {
            "listener_security_protocol_map": {e.listener_name: e.security_protocol for e in self.endpoints},
            "endpoints": [e.connection_string() for e in self.endpoints],
            "rack": self.rack,
            "jmx_port": self.jmx_port,
            "host": self.host,
            "timestamp": self.timestamp,
            "port": self.port,
            "version": self.version,
        }
        if self.version >= 5:
            out["features"] = dict(self.features or {})
        return out

    def endpoint(self, listener_name: str | None = None, security_protocol: str = "PLAINTEXT") -> EndPoint | None:
        """The endpoint of listener ``listener_name``, else the first one speaking ``security_protocol``."""
        for e in self.endpoints:
            if listener_name is not None and e.listener_name == listener_name:
                return e
        if listener_name is None:
            for e in self.endpoints:
                if e.security_protocol == security_protocol:
                    return e
        return None

    def address(self, listener_name: str | None = None, path: str = paths.broker_id_placeholder()) -> tuple[str, int]:
        """(host, port) a PLAINTEXT client (or one of listener ``listener_name``) connects to.
        ZkDataError if the registration advertises no such listener."""
        e = self.endpoint(listener_name)
        if e is not None:
            return e.host, e.port
        if not self.endpoints and listener_name is None and self.host is not None and self.port >= 0:
            return self.host, self.port  # v1: no endpoints, host/port is the PLAINTEXT address
        raise ZkDataError(
            path, f"an endpoint of listener {listener_name or 'PLAINTEXT'}", encode_broker_registration(self)
        )


def encode_broker_registration(reg: BrokerRegistration) -> bytes:
    return _dumps(reg.to_json())


def decode_broker_registration(data: bytes, path: str = paths.broker_id_placeholder()) -> BrokerRegistration:
    """Kafka's registration JSON, any version 1-5.  An endpoint's security protocol comes from
    ``listener_security_protocol_map`` (v4+), else it is the listener name (v2/v3)."""
    obj = _object(data, path, "broker registration")
    version = _int(obj.get("version", 1), path, "version", data)
    protocols = obj.get("listener_security_protocol_map") or {}
    if not isinstance(protocols, dict):
        raise ZkDataError(path, "listener_security_protocol_map as an object", data)
    raw_eps = obj.get("endpoints") or []
    if not isinstance(raw_eps, list):
        raise ZkDataError(path, "endpoints as a list of listener://host:port", data)
    eps = []
    for ep in raw_eps:
        if not isinstance(ep, str) or "://" not in ep:
            raise ZkDataError(path, "endpoints as listener://host:port", data, read=repr(ep))
        name, _, addr = ep.partition("://")
        h, sep, p = addr.rpartition(":")
        if not sep or not p.isdigit():
            raise ZkDataError(path, "endpoints as listener://host:port", data, read=repr(ep))
        eps.append(EndPoint(name, h.strip("[]"), int(p), str(protocols.get(name, name))))
    host = obj.get("host")
    if host is not None and not isinstance(host, str):
        raise ZkDataError(path, "host as a string or null", data)
    port = obj.get("port")
    port = -1 if port is None else _int(port, path, "port", data)
    if not eps and (host is None or port < 0):
        raise ZkDataError(path, "endpoints or host and port", data)
    rack = obj.get("rack")
    jmx = obj.get("jmx_port")
    features = obj.get("features")
    return BrokerRegistration(
        tuple(eps),
        host,
        port,
        None if rack is None else str(rack),
        -1 if jmx is None else _int(jmx, path, "jmx_port", data),
        str(obj.get("timestamp", "0")),
        version,
        dict(features) if isinstance(features, dict) else None,
    )


# ---------------------------------------------------------------------------- topics


def topic_id_str(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes, no padding (22 chars)."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """Kafka's ``Uuid.fromString``; ValueError unless 22 chars of URL-safe base64 for 16 bytes."""
    if not isinstance(text, str) or len(text) != 22:
        raise ValueError(f"a topic id is 22 chars of URL-safe base64, got {text!r}")
    return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))


def new_topic_id() -> uuid.UUID:
    """A random topic id, never the zero Uuid nor one whose string starts with ``-`` (Kafka's
    ``Uuid.randomUuid`` rules, so the id is never mistaken for a command-line flag)."""
    while True:
        u = uuid.uuid4()
        if u.int != 0 and not topic_id_str(u).startswith("-"):
            return u


def encode_topic_assignment(assignment: Mapping[int, list], topic_id: uuid.UUID | None = None) -> bytes:
    """``/brokers/topics/<t>`` v1, or v3 with ``topic_id`` (and KIP-455's empty reassignment maps)."""
    parts = {str(p): [int(b) for b in r] for p, r in sorted(assignment.items())}
    if topic_id is None:
        return _dumps({"version": 1, "partitions": parts})
    return _dumps(
        {
            "version": 3,
            "topic_id": topic_id_str(topic_id),
            "partitions": parts,
            "adding_replicas": {},
            "removing_replicas": {},
        }
    )


def decode_topic_id(data: bytes, path: str) -> uuid.UUID | None:
    """The ``topic_id`` of a ``/brokers/topics/<t>`` node, None if it has none (v1/v2)."""
    obj = _object(data, path, '{"version":3,"topic_id":"<22 chars>","partitions":{...}}')
    text = obj.get("topic_id")
    if text is None:
        return None
    try:
        return parse_topic_id(text)
    except ValueError as e:
        raise ZkDataError(path, "topic_id as 22 chars of URL-safe base64", data, read=repr(text)) from e


def with_topic_id(data: bytes, path: str, topic_id: uuid.UUID) -> bytes:
    """The ``/brokers/topics/<t>`` node ``data`` given ``topic_id`` (version 3), other fields kept."""
    obj = dict(_object(data, path, '{"version":1,"partitions":{...}}'))
    obj.update(version=3, topic_id=topic_id_str(topic_id))
    obj.setdefault("adding_replicas", {})
    obj.setdefault("removing_replicas", {})
    return _dumps(obj)


def decode_topic_assignment(data: bytes, path: str) -> dict[int, list[int]]:
    """``{partition: [replica broker ids]}`` of ``/brokers/topics/<t>`` (v1-v3; extra fields ignored)."""
    expected = '{"version":1,"partitions":{"0":[...],...}}'
    obj = _object(data, path, expected)
    parts = obj.get("partitions")
    if not isinstance(parts, dict):
        raise ZkDataError(path, expected, data)
    out = {}
    for p, replicas in parts.items():
        if not isinstance(p, str) or not p.isdigit():
            raise ZkDataError(path, "partition ids as decimal keys", data, read=repr(p))
        out[int(p)] = _int_list(replicas, path, f"replicas of partition {p}", data)
    return dict(sorted(out.items()))


def partition_count(assignment: Mapping[int, list], path: str, data: bytes | None = None) -> int:
    """The number of partitions of an assignment; ZkDataError unless they are 0..n-1."""
    ids = sorted(assignment)
    if ids != list(range(len(ids))):
        raise ZkDataError(path, f"partitions 0..{len(ids) - 1}", data, read=f"partitions {ids}")
    return len(ids)


@dataclass(frozen=True)
class LeaderAndIsr:
    """A partition's state node (Kafka's ``LeaderAndIsr`` as ``TopicPartitionStateZNode`` writes it)."""

    leader: int
    leader_epoch: int = 0
    isr: tuple = ()
    controller_epoch: int = 1
    version: int = 1


def encode_partition_state(state: LeaderAndIsr) -> bytes:
    return _dumps(
        {
            "controller_epoch": state.controller_epoch,
            "leader": state.leader,
            "version": state.version,
            "leader_epoch": state.leader_epoch,
            "isr": list(state.isr),
        }
    )


def decode_partition_state(data: bytes, path: str) -> LeaderAndIsr:
    obj = _object(data, path, "partition state")
    if "leader" not in obj:
        raise ZkDataError(path, '{"leader":...,"leader_epoch":...,"isr":[...]}', data)
    return LeaderAndIsr(
        _int(obj["leader"], path, "leader", data),
        _int(obj.get("leader_epoch", 0), path, "leader_epoch", data),
        tuple(_int_list(obj.get("isr") or [], path, "isr", data)),
        _int(obj.get("controller_epoch", 1), path, "controller_epoch", data),
        _int(obj.get("version", 1), path, "version", data),
    )


def encode_topic_config(config: Mapping[str, str]) -> bytes:
    return _dumps({"version": 1, "config": {str(k): str(v) for k, v in config.items()}})


def decode_topic_config(data: bytes, path: str) -> dict[str, str]:
    """The overrides of ``/config/topics/<t>`` (values as text, as Kafka stores them)."""
    obj = _object(data, path, '{"version":1,"config":{...}}')
    config = obj.get("config") or {}
    if not isinstance(config, dict):
        raise ZkDataError(path, '{"version":1,"config":{...}}', data)
    return {str(k): str(v) for k, v in config.items()}


def encode_config_change(entity_path: str) -> bytes:
    """A ``/config/changes/config_change_<seq>`` notification (v2), e.g. ``entity_path="topics/t"``."""
    return _dumps({"version": 2, "entity_path": entity_path})


def decode_config_change(data: bytes, path: str) -> str:
    obj = _object(data, path, '{"version":2,"entity_path":...}')
    entity = obj.get("entity_path")
    if not isinstance(entity, str):
        raise ZkDataError(path, '{"version":2,"entity_path":...}', data)
    return entity


# ---------------------------------------------------------------------------- producer ids


@dataclass(frozen=True)
class ProducerIdBlock:
    """``/latest_producer_id_block``: the last block handed out, ``[block_start, block_end]``."""

    broker: int
    block_start: int
    block_end: int
    version: int = 1


def encode_producer_id_block(block: ProducerIdBlock) -> bytes:
    return _dumps(
        {
            "version": block.version,
            "broker": block.broker,
            "block_start": str(block.block_start),
            "block_end": str(block.block_end),
        }
    )


def decode_producer_id_block(data: bytes, path: str = paths.LATEST_PRODUCER_ID_BLOCK) -> ProducerIdBlock:
    expected = '{"version":1,"broker":...,"block_start":"...","block_end":"..."}'
    obj = _object(data, path, expected)
    if "block_end" not in obj:
        raise ZkDataError(path, expected, data)
    return ProducerIdBlock(
        _int(obj.get("broker", -1), path, "broker", data),
        _int(obj.get("block_start", 0), path, "block_start", data),
        _int(obj["block_end"], path, "block_end", data),
        _int(obj.get("version", 1), path, "version", data),
    )


# ---------------------------------------------------------------------------- ZooKeeper consumer groups


def encode_consumer_offset(offset: int) -> bytes:
    """``/consumers/<g>/offsets/<t>/<p>``: the next offset to consume as decimal text."""
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"a consumer offset must be an int, got {offset!r}")
    return str(offset).encode("ascii")


def decode_consumer_offset(data: bytes, path: str) -> int:
    try:
        return int(bytes(data).decode("ascii").strip())
    except (UnicodeDecodeError, ValueError, TypeError):
        raise ZkDataError(path, "an offset as decimal text", data) from None


@dataclass(frozen=True)
class ConsumerRegistration:
    """``/consumers/<g>/ids/<consumer id>``: ``subscription`` maps a topic (``static``) or a regex
    (``white_list``/``black_list``) to its number of streams."""

    subscription: dict = field(default_factory=dict)
    pattern: str = "static"
    timestamp: str = "0"
    version: int = CONSUMER_REGISTRATION_VERSION


def encode_consumer_registration(reg: ConsumerRegistration) -> bytes:
    return _dumps(
        {
            "version": reg.version,
            "subscription": dict(reg.subscription),
            "pattern": reg.pattern,
            "timestamp": reg.timestamp,
        }
    )


def decode_consumer_registration(data: bytes, path: str = paths.consumer_id("?", "?")) -> ConsumerRegistration:
    try:
        obj = json.loads(bytes(data).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, TypeError):
        raise ZkDataError(path, "registration JSON", data) from None
    if not isinstance(obj, dict) or not isinstance(obj.get("subscription"), dict):
        raise ZkDataError(path, "an object with a 'subscription' object", data)
    pattern = obj.get("pattern", "static")
    if pattern not in CONSUMER_PATTERNS:
        raise ZkDataError(path, "pattern static, white_list or black_list", data, read=repr(pattern))
    sub = {}
    for k, v in obj["subscription"].items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ZkDataError(path, f"a stream count >= 1 for {k!r}", data, read=repr(v))
        sub[str(k)] = v
    return ConsumerRegistration(
        sub,
        pattern,
        str(obj.get("timestamp", "0")),
        _int(obj.get("version", CONSUMER_REGISTRATION_VERSION), path, "version", data),
    )


__all__ = [
    "BROKER_INFO_VERSION",
    "CONSUMER_REGISTRATION_VERSION",
    "BrokerRegistration",
    "ConsumerRegistration",
    "EndPoint",
    "LeaderAndIsr",
    "ProducerIdBlock",
    "ZkDataError",
    "decode_broker_registration",
    "decode_cluster_id",
    "decode_config_change",
    "decode_consumer_offset",
    "decode_consumer_registration",
    "decode_partition_state",
    "decode_producer_id_block",
    "decode_topic_assignment",
    "decode_topic_config",
    "encode_broker_registration",
    "encode_cluster_id",
    "encode_config_change",
    "encode_consumer_offset",
    "encode_consumer_registration",
    "encode_partition_state",
    "encode_producer_id_block",
    "encode_topic_assignment",
    "encode_topic_config",
    "partition_count",
    "decode_topic_id",
    "new_topic_id",
    "parse_topic_id",
    "topic_id_str",
    "with_topic_id",
    "encode_isr_change_notification",
]


# ------------------------------------------------------------------ the controller's znodes


@dataclass(frozen=True)
class ControllerRegistration:
    """``/controller`` (Kafka's ``ControllerZNode``): ``{"version":1,"brokerid":N,"timestamp":"<ms>"}``."""

    broker_id: int
    timestamp_ms: int = 0


def encode_controller(reg: ControllerRegistration) -> bytes:
    return _dumps({"version": 1, "brokerid": reg.broker_id, "timestamp": str(reg.timestamp_ms)})


def decode_controller(data: bytes, path: str = paths.CONTROLLER) -> ControllerRegistration:
    """Also reads Kafka 0.8's bare broker id (``"3"``)."""
    text = (data or b"").decode("utf-8", "replace").strip()
    if text.lstrip("-").isdigit():
        return ControllerRegistration(int(text))
    obj = _object(data, path, '{"version":1,"brokerid":N,"timestamp":"..."}')
    if "brokerid" not in obj:
        raise ZkDataError(path, '{"version":1,"brokerid":N,"timestamp":"..."}', data)
    ts = obj.get("timestamp", 0)
    try:
        ts = int(ts)
    except (TypeError, ValueError):
        ts = 0
    return ControllerRegistration(_int(obj["brokerid"], path, "brokerid", data), ts)


def encode_controller_epoch(epoch: int) -> bytes:
    """``/controller_epoch``: the epoch as decimal text (Kafka's ``ControllerEpochZNode``)."""
    return str(int(epoch)).encode("ascii")


def decode_controller_epoch(data: bytes, path: str = paths.CONTROLLER_EPOCH) -> int:
    text = (data or b"").decode("ascii", "replace").strip()
    if not text.isdigit():
        raise ZkDataError(path, "the controller epoch as decimal text", data)
    return int(text)


def encode_partition_list(partitions) -> bytes:
    """``/admin/preferred_replica_election`` and ``/isr_change_notification/isr_change_<seq>``:
    ``{"version":1,"partitions":[{"topic":"t","partition":0}]}`` (Kafka's JSON)."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": int(p)} for t, p in partitions]})


def decode_partition_list(data: bytes, path: str) -> list[tuple[str, int]]:
    expected = '{"version":1,"partitions":[{"topic":"t","partition":0}]}'
    obj = _object(data, path, expected)
    items = obj.get("partitions")
    if not isinstance(items, list):
        raise ZkDataError(path, expected, data)
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("topic"), str) or "partition" not in item:
            raise ZkDataError(path, expected, data, read=repr(item))
        out.append((item["topic"], _int(item["partition"], path, "partition", data)))
    return out


def encode_replica_deletion(replicas) -> bytes:
    """``/admin/replica_deletions/<topic>`` (pyklog's, the controller's StopReplica(delete=true)):
    ``{"version":1,"replicas":[1,2,3]}``, the brokers holding replicas of the topic being deleted,
    each of which answers by creating a child node named by its id."""
    return _dumps({"version": 1, "replicas": sorted({int(b) for b in replicas})})


def decode_replica_deletion(data: bytes, path: str) -> list[int]:
    """The broker ids of :func:`encode_replica_deletion`, sorted.  ZkDataError if malformed."""
    obj = _object(data, path, '{"version":1,"replicas":[1,2,3]}')
    return sorted(_int_list(obj.get("replicas"), path, "replicas", data))


def encode_reassignment(assignment: Mapping[tuple[str, int], list]) -> bytes:
    """``/admin/reassign_partitions`` and the tools' JSON (Kafka's ``ReassignPartitionsZNode``):
    ``{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}``."""
    return _dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": int(p), "replicas": [int(r) for r in replicas]}
                for (t, p), replicas in sorted(assignment.items())
            ],
        }
    )


def decode_reassignment(data: bytes, path: str) -> dict[tuple[str, int], list[int]]:
    """The target replicas per partition; ``log_dirs`` (Kafka 1.1+) is accepted and ignored when all
    ``"any"``.  ZkDataError on a malformed document or a partition listed twice."""
    expected = '{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}'
    obj = _object(data, path, expected)
    items = obj.get("partitions")
    if not isinstance(items, list):
        raise ZkDataError(path, expected, data)
    out: dict[tuple[str, int], list[int]] = {}
    for item in items:
        if (
            not isinstance(item, dict)
            or not isinstance(item.get("topic"), str)
            or "partition" not in item
            or "replicas" not in item
        ):
            raise ZkDataError(path, expected, data, read=repr(item))
        tp = (item["topic"], _int(item["partition"], path, "partition", data))
        if tp in out:
            raise ZkDataError(path, "each partition once", data, read=f"{tp[0]}-{tp[1]} twice")
        out[tp] = _int_list(item["replicas"], path, f"replicas of {tp[0]}-{tp[1]}", data)
    return out


def encode_isr_change_notification(partitions) -> bytes:
    """Kafka's ``IsrChangeNotificationZNode`` data: ``{"version":1,"partitions":[{"topic":t,"partition":p}]}``
    (``partitions``: (topic, partition) pairs) written by a leader after it changed the ISR."""
    return _dumps({"version": 1, "partitions": [{"topic": t, "partition": int(p)} for t, p in partitions]})


# ---------------------------------------------------------------------------- ACLs (/kafka-acl*)
# Kafka's AclEntry JSON and AclChangeStore formats (ZkData.scala): a resource's ACLs
# {"version":1,"acls":[{"principal":"User:alice","permissionType":"Allow","operation":"Read","host":"*"}]};
# a LITERAL change notification "<TYPE>:<name>" (the Java enum's name, read in any case); an extended
# one {"version":1,"resourceType":"TOPIC","name":"spark-","patternType":"PREFIXED"}.


def encode_acls(entries) -> bytes:
    """A resource's ACL znode from its :class:`~pyklog.broker.security.acl.AccessControlEntry` set."""
    return _dumps(
        {
            "version": 1,
            "acls": [
                {
                    "principal": e.principal,
                    "permissionType": e.permission_type.kafka_name,
                    "operation": e.operation.kafka_name,
                    "host": e.host,
                }
                for e in sorted(entries)
            ],
        }
    )


def decode_acls(data: bytes | None, path: str) -> frozenset:
    """The entries of a resource's ACL znode (empty data: none)."""
    if not data:
        return frozenset()
    obj = _object(data, path, '{"version":1,"acls":[...]}')
    if obj.get("version") != 1 or not isinstance(obj.get("acls"), list):
        raise ZkDataError(path, '{"version":1,"acls":[...]}', data)
    out = set()
    for item in obj["acls"]:
        try:
            out.add(
                AccessControlEntry(
                    str(item["principal"]),
                    str(item["host"]),
                    AclOperation.parse(str(item["operation"])),
                    AclPermissionType.parse(str(item["permissionType"])),
                )
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ZkDataError(
                path, "ACL entries with principal, host, operation, permissionType", data, detail=str(e)
            ) from None
    return frozenset(out)


def encode_acl_change(pattern) -> bytes:
    """The change notification of a :class:`~pyklog.broker.security.acl.ResourcePattern`."""
    if pattern.pattern_type.name == "LITERAL":
        return f"{pattern.resource_type.name}:{pattern.name}".encode()
    return _dumps(
        {
            "version": 1,
            "resourceType": pattern.resource_type.name,
            "name": pattern.name,
            "patternType": pattern.pattern_type.name,
        }
    )


def decode_acl_change(data: bytes, path: str, literal: bool):
    """The :class:`~pyklog.broker.security.acl.ResourcePattern` a change notification names."""
    try:
        if literal:
            kind, sep, name = bytes(data).decode("utf-8").partition(":")
            if not sep:
                raise ValueError("expected <ResourceType>:<name>")
            return ResourcePattern(ResourceType.parse(kind), name, PatternType.LITERAL)
        obj = _object(data, path, "an ACL change event")
        if int(obj.get("version", 0)) > 1:
            raise ValueError(f"unsupported ACL change event version {obj.get('version')}")
        return ResourcePattern(
            ResourceType.parse(str(obj["resourceType"])), str(obj["name"]), PatternType.parse(str(obj["patternType"]))
        )
    except (KeyError, TypeError, ValueError, UnicodeDecodeError) as e:
        raise ZkDataError(path, "an ACL change notification", data, detail=str(e)) from None


#: ``event`` of a log dir event notification: a log dir failed (Kafka's ``LogDirFailureEvent``)
LOG_DIR_FAILURE_EVENT = 1


def encode_log_dir_event(broker_id: int, partitions, event: int = LOG_DIR_FAILURE_EVENT) -> bytes:
    """``/log_dir_event_notification/log_dir_event_<seq>``: Kafka's ``{"version":1,"broker":N,
    "event":1}`` plus pyklog's ``"partitions"`` (the replicas on the failed dir)."""
    return _dumps(
        {
            "version": 1,
            "broker": int(broker_id),
            "event": int(event),
            "partitions": [{"topic": t, "partition": int(p)} for t, p in partitions],
        }
    )


def decode_log_dir_event(data: bytes, path: str) -> tuple[int, int, list[tuple[str, int]] | None]:
    """``(broker, event, partitions)``; ``partitions`` None when the node does not list them (Kafka's)."""
    expected = '{"version":1,"broker":1,"event":1,"partitions":[{"topic":"t","partition":0}]}'
    obj = _object(data, path, expected)
    broker = _int(obj.get("broker"), path, "broker", data)
    event = _int(obj.get("event"), path, "event", data)
    if "partitions" not in obj:
        return broker, event, None
    return broker, event, decode_partition_list(data, path)
