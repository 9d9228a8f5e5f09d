"""Broker connections and cluster metadata: the client side of Kafka's wire protocol.

* :class:`BrokerConnection`: one blocking TCP connection to one broker.  On connect it negotiates
  versions with ``ApiVersions`` and afterwards sends every request at the highest version both
  sides support (or the one asked for).  Requests can be pipelined: :meth:`BrokerConnection.send`
  writes a request and returns its correlation id, :meth:`BrokerConnection.receive` waits for that
  id's response (responses arrive in request order; a thread that reads a frame belonging to another
  caller parks it for that caller).  Any I/O failure closes the connection and raises
  :class:`~broker.errors.NetworkError` to every waiter; a closed connection is never reused.
* :class:`ClusterClient`: broker discovery (a bootstrap list or the ZooKeeper registry
  ``/brokers/ids``), the metadata cache (partitions, leaders, controller), one connection per node,
  and the calls every other client part needs: ``list_offsets``, ``offsets_before``,
  ``find_coordinator`` / ``commit_offsets`` / ``fetch_committed`` (the group coordinator's offset
  storage), ``create_topic`` / ``delete_topic``, ``init_producer_id``.  Metadata is refreshed when a
  broker answers NOT_LEADER_OR_FOLLOWER / UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE, on a
  connection error, when the ZooKeeper registry's broker list changes, and after
  ``metadata_max_age_ms``.

Both classes are thread-safe.
"""

from __future__ import annotations

import logging
import random
import re
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    ConfigError,
    CoordinatorNotAvailableError,
    LeaderNotAvailableError,
    NetworkError,
    NotControllerError,
    NotCoordinatorError,
    NotLeaderOrFollowerError,
    PyklogError,
    RequestTimedOutError,
    UnknownServerError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
    ZooKeeperError,
    error_for_code,
)
from pyklog.broker.protocol import SUPPORTED, ApiKey, decode_response, encode_request
from pyklog.broker.security import ssl_factory
from pyklog.connector.sasl_client import SaslCredentials
from pyklog.connector.security import PLAINTEXT as PLAINTEXT_SECURITY
from pyklog.connector.security import ClientSecurityConfig, SslAuthenticationError

log = logging.getLogger(__name__)

_T = TypeVar("_T")  # what a retried call returns

__all__ = [
    "BrokerConnection",
    "ClusterClient",
    "ClusterMetadata",
    "TopicMetadata",
    "PartitionMetadata",
    "parse_bootstrap",
    "wire_error",
    "retriable_wire_error",
    "EARLIEST",
    "LATEST",
]

EARLIEST = -2  # ListOffsets timestamp: the log start offset
LATEST = -1  # ListOffsets timestamp: the log end offset (high watermark)
MAX_TIMESTAMP = -3  # ListOffsets v7+ (KIP-734): the offset of the record with the largest timestamp
EARLIEST_LOCAL = -4  # ListOffsets v8+ (KIP-405): the earliest offset on local disk (= EARLIEST here)

_SIZE = struct.Struct(">i")
_CID = struct.Struct(">i")

# errors after which the metadata (leaders, partitions) is stale
REFRESH_METADATA_CODES = frozenset(
    {
        NotLeaderOrFollowerError.code,
        UnknownTopicOrPartitionError.code,
        LeaderNotAvailableError.code,
        NetworkError.code,
        74,  # FENCED_LEADER_EPOCH
        75,  # UNKNOWN_LEADER_EPOCH
    }
)


def parse_bootstrap(servers) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or a list of ``"host:port"`` / ``(host, port)`` -> [(host, port)]."""
    if servers is None:
        return []
    if isinstance(servers, str):
        items = [s.strip() for s in servers.split(",") if s.strip()]
    else:
        items = list(servers)
    out = []
    for item in items:
        if isinstance(item, (tuple, list)):
            out.append((str(item[0]), int(item[1])))
            continue
        s = str(item)
        if "://" in s:
            s = s.split("://", 1)[1]
        host, sep, port = s.rpartition(":")
        if not sep or not port.isdigit():
            raise ConfigError(f"bootstrap.servers: expected host:port, got {item!r}")
        out.append((host.strip("[]") or "localhost", int(port)))
    return out


#: The client's own highest version where it is below what the broker side implements (SUPPORTED):
#: Fetch v13+ names topics by id, and the consumer fetches by name (its metadata cache and leader
#: hints carry no topic ids).
CLIENT_MAX: dict[int, int] = {int(ApiKey.FETCH): 12}


def wire_error(code: int, what: str) -> PyklogError:
    """The :class:`PyklogError` for Kafka error ``code``, its message ``"<NAME> (<code>): <what>"``."""
    return error_for_code(code, f"{error_for_code(code).name} ({code}): {what}")


def retriable_wire_error(code: int, what: str) -> PyklogError:
    """The error for ``code``, raised at once unless it is retriable (then returned, to retry after)."""
    e = wire_error(code, what)
    if not e.retriable:
        raise e
    return e


# ---------------------------------------------------------------------------------------------
# one connection
# ---------------------------------------------------------------------------------------------
def _software_version() -> str:
    """pyklog's version as KIP-511 wants it (letters, digits, '.', '-'; starting and ending alphanumeric)."""
    try:
        from importlib.metadata import version

        v = version("pyklog")
    except Exception:  # noqa: BLE001 - not installed as a distribution
        v = "0"
    v = re.sub(r"[^A-Za-z0-9.-]", "-", v).strip(".-")
    return v or "0"


_SOFTWARE_VERSION = _software_version()


class BrokerConnection:
    """A blocking connection to one broker, with ApiVersions negotiation.  Thread-safe.

    ``request(api_key, body, version=None) -> dict`` sends and waits.  For pipelining,
    ``send(...) -> correlation_id`` and ``receive(correlation_id) -> dict``; ``send(...,
    expect_response=False)`` (Produce with acks=0) registers no response.
    """

    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "pyklog",
        timeout_s: float = 30,
        node_id: int | None = None,
        ssl_context: ssl.SSLContext | None = None,
        sasl: SaslCredentials | None = None,
    ):
        self.host = host
        #: SASL credentials (:mod:`pyklog.connector.sasl_client`): authenticated after ApiVersions
        self.sasl = sasl
        self._reauth_at: float | None = None  # time.monotonic() of the next re-authentication
        self.port = int(port)
        self.node_id = node_id
        self.client_id = client_id
        self.timeout_s = timeout_s
        self._send_lock = threading.Lock()
        self._recv_lock = threading.Lock()
        self._pending: dict[int, tuple[int, int]] = {}
        self._stash: dict[int, bytearray] = {}
        self._cid = 0
        self._closed = False
        self._error: Exception | None = None
        try:
            # TLS (SSL / SASL_SSL): the handshake is done here, the broker's certificate checked
            self._sock = ssl_factory.connect(host, self.port, timeout_s, ssl_context)
        except ssl.SSLError as e:
            raise SslAuthenticationError(
                f"TLS handshake with broker {self._name()} failed: {getattr(e, 'verify_message', None) or e.reason or e}"
            ) from None
        except OSError as e:
            raise NetworkError(f"cannot connect to broker {self._name()}: {e}") from e
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.api_versions: dict[int, tuple[int, int]] = {}
        try:
            self._negotiate()
            if sasl is not None:
                self._authenticate(self.request)
        except BaseException:
            self.close()
            raise

    def _name(self) -> str:
        node = f"node {self.node_id} " if self.node_id is not None else ""
        return f"{node}{self.host}:{self.port}"

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"BrokerConnection({self._name()}, {state})"

    @property
    def closed(self) -> bool:
        return self._closed

    def fileno(self) -> int:
        return self._sock.fileno()

    def buffered(self) -> bool:
        """True when TLS holds decrypted bytes not read yet: a selector on :meth:`fileno` would not
        report them, so a caller that waits on the fd reads first."""
        pending = getattr(self._sock, "pending", None)
        return bool(pending and not self._closed and pending())

    # -- versions ------------------------------------------------------------------------------
    def _negotiate(self) -> None:
        lo, hi = SUPPORTED[ApiKey.API_VERSIONS]
        version = hi
        for _attempt in range(3):
            # an unsupported ApiVersions version is answered in the v0 layout with error 35
            # and the broker's ranges (KIP-511); decode_response handles that layout
            # v3+ (KIP-511) names the client; Kafka answers INVALID_REQUEST to an empty name or version
            resp = self.request(
                ApiKey.API_VERSIONS,
                {"client_software_name": "pyklog", "client_software_version": _SOFTWARE_VERSION},
                version,
            )
            code = resp.get("error_code", 0)
            ranges = {
                int(k["api_key"]): (int(k["min_version"]), int(k["max_version"])) for k in resp.get("api_keys") or []
            }
            if code == UnsupportedVersionError.code and ApiKey.API_VERSIONS in ranges:
                version = min(version - 1, ranges[ApiKey.API_VERSIONS][1])
                if version < lo:
                    break
                continue
            if code:
                raise wire_error(code, f"ApiVersions from broker {self._name()}")
            self.api_versions = ranges
            return
        raise UnsupportedVersionError(f"broker {self._name()}: no common ApiVersions version")

    # -- SASL --------------------------------------------------------------------------------------
    def _authenticate(self, exchange) -> None:
        from pyklog.connector.sasl_client import authenticate, reauth_delay_s

        try:
            lifetime_ms = authenticate(exchange, self.sasl, self.api_versions)
        except PyklogError as e:
            raise type(e)(f"SASL authentication with broker {self._name()} failed: {e}") from None
        delay = reauth_delay_s(lifetime_ms)
        self._reauth_at = None if delay is None else time.monotonic() + delay

    def _maybe_reauthenticate(self) -> None:
        """KIP-368: re-authenticate on this connection once the session nears its end, when no
        request is in flight (else at a later request).  Called by :meth:`send` without its lock."""
        with self._send_lock, self._recv_lock:
            if self._reauth_at is None or time.monotonic() < self._reauth_at or self._pending or self._stash:
                return
            self._check_open()
            try:
                self._authenticate(self._roundtrip_locked)
            except BaseException as e:  # the broker closes the connection too: so do we
                self._error = e
                self.close()
                raise
            log.debug("re-authenticated with broker %s", self._name())

    def _roundtrip_locked(self, api_key: int, body: dict, version: int) -> dict:
        """One request and its response, both locks held and nothing else in flight."""
        self._cid = cid = (self._cid + 1) & 0x7FFFFFFF
        try:
            self._sock.sendall(encode_request(api_key, version, cid, self.client_id, body))
        except OSError as e:
            raise self._fail(e) from e
        got, frame = self._read_frame()
        if got != cid:
            raise self._fail(NetworkError(f"broker {self._name()}: response for unknown correlation id {got}"))
        return decode_response(api_key, version, frame)[1]

    def version_for(self, api_key: int) -> int:
        """The highest version of ``api_key`` both pyklog's client (SUPPORTED, capped by
        :data:`CLIENT_MAX`) and this broker support."""
        ours = SUPPORTED.get(api_key)
        if ours is not None and int(api_key) in CLIENT_MAX:
            ours = (ours[0], min(ours[1], CLIENT_MAX[int(api_key)]))
        theirs = self.api_versions.get(int(api_key))
        if ours is None or theirs is None:
            raise UnsupportedVersionError(
                f"broker {self._name()} does not support API {ApiKey(api_key).name} (ours {ours}, broker's {theirs})"
            )
        v = min(ours[1], theirs[1])
        if v < max(ours[0], theirs[0]):
            raise UnsupportedVersionError(
                f"broker {self._name()}: no common version of {ApiKey(api_key).name} (ours {ours}, broker's {theirs})"
            )
        return v

    # -- I/O -----------------------------------------------------------------------------------
    def _fail(self, exc: Exception) -> NetworkError:
        if not self._closed:
            log.info("connection to broker %s failed: %s", self._name(), exc)
        self._error = exc
        self.close()
        if isinstance(exc, NetworkError):
            return exc
        if isinstance(exc, ssl.SSLError) and not isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError)):
            # a TLS alert after the handshake (TLS 1.3: the broker wants a client certificate)
            return SslAuthenticationError(
                f"TLS with broker {self._name()} failed: {getattr(exc, 'reason', None) or exc}"
            )
        return NetworkError(f"connection to broker {self._name()} failed: {exc}")

    def _check_open(self) -> None:
        if self._closed:
            raise NetworkError(
                f"connection to broker {self._name()} is closed" + (f" ({self._error})" if self._error else "")
            )

    def send(self, api_key: int, body: dict, version: int | None = None, expect_response: bool = True) -> int:
        """Write one request; return its correlation id (wait with :meth:`receive`)."""
        if version is None:
            version = self.version_for(api_key)
        if self._reauth_at is not None and time.monotonic() >= self._reauth_at:
            self._maybe_reauthenticate()
        with self._send_lock:
            self._check_open()
            self._cid = cid = (self._cid + 1) & 0x7FFFFFFF
            frame = encode_request(api_key, version, cid, self.client_id, body)
            if expect_response:
                self._pending[cid] = (int(api_key), version)
            try:
                self._sock.sendall(frame)
            except OSError as e:
                self._pending.pop(cid, None)
                raise self._fail(e) from e
        return cid

    def _read_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        recv_into = self._sock.recv_into
        while got < n:
            r = recv_into(view[got:], n - got)
            if not r:
                raise NetworkError(f"broker {self._name()} closed the connection")
            got += r
        return buf

    def _read_frame(self) -> tuple[int, bytearray]:
        try:
            size = _SIZE.unpack(self._read_exact(4))[0]
            if size < 4:
                raise NetworkError(
                    f"broker {self._name()}: expected a response frame of at least 4 bytes, read size {size}"
                )
            frame = self._read_exact(size)
        except (OSError, NetworkError) as e:
            raise self._fail(e) from e
        return _CID.unpack_from(frame, 0)[0], frame

    def receive(self, cid: int) -> dict:
        """Wait for the response to request ``cid`` and decode it."""
        while True:
            with self._recv_lock:
                frame = self._stash.pop(cid, None)
                if frame is None:
                    self._check_open()
                    if cid not in self._pending:
                        raise ValueError(f"no request with correlation id {cid} is waiting for a response")
                    got, frame = self._read_frame()
                    if got != cid:
                        if got not in self._pending:
                            raise self._fail(
                                NetworkError(f"broker {self._name()}: response for unknown correlation id {got}")
                            )
                        self._stash[got] = frame
                        continue
                api_key, version = self._pending.pop(cid)
            try:
                _cid, body = decode_response(api_key, version, frame)
            except PyklogError as e:
                raise self._fail(
                    NetworkError(f"broker {self._name()}: undecodable {ApiKey(api_key).name} v{version} response: {e}")
                ) from e
            return body

    def has_response(self, cid: int) -> bool:
        """True when the response to ``cid`` was already read by another caller."""
        return cid in self._stash

    def request(self, api_key: int, body: dict, version: int | None = None) -> dict:
        """Send one request and return the decoded response body."""
        return self.receive(self.send(api_key, body, version))

    def in_flight(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._sock.close()
        except OSError:
            pass


# ---------------------------------------------------------------------------------------------
# metadata
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PartitionMetadata:
    partition: int
    leader: int  # -1 when no leader
    leader_epoch: int = -1
    replicas: tuple = ()
    isr: tuple = ()
    error_code: int = 0


@dataclass(frozen=True)
class TopicMetadata:
    name: str
    partitions: dict  # {partition: PartitionMetadata}
    error_code: int = 0
    is_internal: bool = False


@dataclass
class ClusterMetadata:
    """A snapshot of the cluster: brokers, controller and the topics asked for."""

    brokers: dict = field(default_factory=dict)  # node_id -> (host, port)
    controller_id: int = -1
    cluster_id: str | None = None
    topics: dict = field(default_factory=dict)  # name -> TopicMetadata
    updated: float = 0.0


class ClusterClient:
    """Discovery, metadata and per-node connections for one Kafka(-compatible) cluster.

    ``bootstrap_servers`` ("host:port,...") or ``zookeeper_connect`` (the brokers' registry,
    ``/brokers/ids/<id>`` JSON with ``endpoints``/``host``/``port``).  Thread-safe: the cache and the
    connection table are guarded by a lock; each connection has its own.
    """

    def __init__(
        self,
        bootstrap_servers=None,
        zookeeper_connect: str | None = None,
        *,
        client_id: str = "pyklog",
        request_timeout_ms: int = 30000,
        retry_backoff_ms: int = 100,
        metadata_max_age_ms: int = 300000,
        zk_session_timeout_ms: int = 10000,
        security: ClientSecurityConfig | None = None,
        zookeeper_credentials=None,
    ):
        if not bootstrap_servers and not zookeeper_connect:
            raise ConfigError("expected bootstrap.servers or zookeeper.connect, got neither")
        #: security.protocol and the ssl.* / sasl.* settings of every connection
        self.security = security or PLAINTEXT_SECURITY
        self._ssl_context = self.security.ssl_context()  # ConfigError here for a bad truststore/keystore
        self.client_id = client_id
        #: SASL credentials every connection of this client authenticates with (None: no SASL),
        #: from security.protocol SASL_* and the sasl.* settings
        self.sasl = self.security.sasl_credentials()
        self.request_timeout_s = request_timeout_ms / 1000.0
        self.retry_backoff_s = retry_backoff_ms / 1000.0
        self.metadata_max_age_s = metadata_max_age_ms / 1000.0
        self._bootstrap = parse_bootstrap(bootstrap_servers)
        self._zk_connect = zookeeper_connect
        self._zk_timeout_s = zk_session_timeout_ms / 1000.0
        self._zk_credentials = zookeeper_credentials  # ZkCredentials or None (then KAFKA_OPTS' JAAS file)
        self._zk = None
        self._lock = threading.RLock()
        self._refresh_lock = threading.Lock()
        self._conns: dict[int, BrokerConnection] = {}
        self._boot_conn: BrokerConnection | None = None
        self._md = ClusterMetadata()
        self._stale = True
        self._coordinators: dict = {}  # group, or ("txn", transactional id) -> node id
        self._closed = False
        if zookeeper_connect:
            self._start_zk()

    # -- discovery -----------------------------------------------------------------------------
    def _start_zk(self) -> None:
        from kazoo.client import KazooClient
        from kazoo.handlers.threading import KazooTimeoutError

        from pyklog.broker.zk import paths
        from pyklog.broker.zk.znode_acls import client_credentials, kazoo_kwargs

        zk = KazooClient(
            hosts=self._zk_connect,
            timeout=self._zk_timeout_s,
            **kazoo_kwargs(client_credentials(self._zk_credentials)),
        )
        try:
            zk.start(timeout=self._zk_timeout_s)
        except KazooTimeoutError as e:
            zk.close()
            raise ZooKeeperError(f"cannot connect to ZooKeeper at {self._zk_connect}: {e}") from e
        self._zk = zk

        def on_brokers(children):
            if self._closed:
                return False
            with self._lock:
                self._stale = True
            return True

        try:
            zk.ChildrenWatch(paths.BROKER_IDS, on_brokers)
        except Exception:  # noqa: BLE001 - the path may not exist before the first broker: check on refresh
            log.debug("no %s yet in %s", paths.BROKER_IDS, self._zk_connect)

    def _zk_brokers(self) -> dict[int, tuple[str, int]]:
        from kazoo.exceptions import NoNodeError

        from pyklog.broker.zk import paths
        from pyklog.broker.zk.znodes import decode_broker_registration

        zk = self._zk
        out = {}
        try:
            ids = zk.retry(zk.get_children, paths.BROKER_IDS)
        except NoNodeError:
            return out
        except Exception as e:
            raise ZooKeeperError(f"reading {paths.BROKER_IDS} from {self._zk_connect}: {e}") from e
        for bid in ids:
            try:
                path = paths.broker_id(int(bid))
                data, _ = zk.retry(zk.get, path)
                # the PLAINTEXT listener's endpoint (one codec for the broker and the client)
                out[int(bid)] = decode_broker_registration(data, path).address(path=path)
            except NoNodeError:
                continue
            except ValueError as e:  # a ZkDataError, or a non-numeric child name
                log.warning("ignoring unreadable broker registration %s/%s: %s", paths.BROKER_IDS, bid, e)
        return out

    def _candidates(self) -> list[tuple[int | None, str, int]]:
        """Brokers to ask for metadata: known nodes (random order), then the registry/bootstrap."""
        with self._lock:
            known = [(nid, h, p) for nid, (h, p) in self._md.brokers.items()]
        random.shuffle(known)
        out = list(known)
        if self._zk is not None:
            zkb = list(self._zk_brokers().items())
            random.shuffle(zkb)
            out += [(nid, h, p) for nid, (h, p) in zkb]
        boot = list(self._bootstrap)
        random.shuffle(boot)
        out += [(None, h, p) for h, p in boot]
        seen = set()
        uniq = []
        for c in out:
            if (c[1], c[2]) not in seen:
                seen.add((c[1], c[2]))
                uniq.append(c)
        return uniq

    def any_connection(self) -> BrokerConnection:
        """A connection to some live broker (an existing one when possible), for a request any
        broker answers (DescribeConfigs, AlterConfigs...).  Thread-safe."""
        with self._lock:
            for conn in self._conns.values():
                if not conn.closed:
                    return conn
            if self._boot_conn is not None and not self._boot_conn.closed:
                return self._boot_conn
        errors = []
        tls_failed = True
        for nid, host, port in self._candidates():
            try:
                if nid is not None:
                    return self.connection(nid, _address=(host, port))
                conn = self._connect(host, port)
                with self._lock:
                    if self._boot_conn is not None:
                        self._boot_conn.close()
                    self._boot_conn = conn
                return conn
            except (NetworkError, OSError) as e:
                errors.append(f"{host}:{port}: {e}")
                tls_failed = tls_failed and isinstance(e, SslAuthenticationError)
        where = self._zk_connect if self._zk is not None else self._bootstrap
        # every broker refused the TLS handshake: a configuration error, not retried
        error = SslAuthenticationError if errors and tls_failed else NetworkError
        raise error(f"no broker reachable (from {where}): " + ("; ".join(errors) or "no brokers registered"))

    # -- metadata ------------------------------------------------------------------------------
    def metadata(self, topics=None, refresh: bool = False, *, auto_create: bool = False) -> ClusterMetadata:
        """Cluster metadata.  ``topics`` None = every topic.  Served from the cache unless
        ``refresh``, the cache is stale, older than metadata_max_age_ms, or lacks a topic asked for."""
        if isinstance(topics, str):
            topics = [topics]
        with self._lock:
            md = self._md
            fresh = not self._stale and md.updated and time.monotonic() - md.updated < self.metadata_max_age_s
            if fresh and not refresh and topics is not None and all(t in md.topics for t in topics):
                return md
        return self._refresh(topics, auto_create)

    def _refresh(self, topics, auto_create: bool) -> ClusterMetadata:
        with self._refresh_lock:
            last = None
            for _attempt in range(3):
                conn = self.any_connection()
                try:
                    return self._refresh_from(conn, topics, auto_create)
                except NetworkError as e:
                    last = e
                    continue
            raise last

    def _refresh_from(self, conn: BrokerConnection, topics, auto_create: bool) -> ClusterMetadata:
        version = conn.version_for(ApiKey.METADATA)
        if topics is None:
            req_topics = [] if version == 0 else None
        else:
            req_topics = [{"name": t} for t in topics]
        resp = conn.request(
            ApiKey.METADATA,
            {
                "topics": req_topics,
                "allow_auto_topic_creation": bool(auto_create),
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
            version,
        )
        brokers = {int(b["node_id"]): (b["host"], int(b["port"])) for b in resp.get("brokers") or []}
        new_topics = {}
        for t in resp.get("topics") or []:
            parts = {}
            for p in t.get("partitions") or []:
                pm = PartitionMetadata(
                    partition=int(p["partition_index"]),
                    leader=int(p.get("leader_id", -1)),
                    leader_epoch=int(p.get("leader_epoch", -1)),
                    replicas=tuple(p.get("replica_nodes") or ()),
                    isr=tuple(p.get("isr_nodes") or ()),
                    error_code=int(p.get("error_code", 0)),
                )
                parts[pm.partition] = pm
            new_topics[t["name"]] = TopicMetadata(
                t["name"], parts, int(t.get("error_code", 0)), bool(t.get("is_internal", False))
            )
        with self._lock:
            old = self._md
            if topics is None:
                merged = {}
            else:
                merged = dict(old.topics)
            for name, tm in new_topics.items():
                if tm.error_code == UnknownTopicOrPartitionError.code or (tm.error_code and not tm.partitions):
                    merged.pop(name, None)
                    if topics is not None:
                        merged[name] = tm  # keep the error visible for the caller
                else:
                    merged[name] = tm
            md = ClusterMetadata(
                brokers=brokers or dict(old.brokers),
                controller_id=int(resp.get("controller_id", -1)),
                cluster_id=resp.get("cluster_id"),
                topics=merged,
                updated=time.monotonic(),
            )
            self._md = md
            self._stale = False
            # drop connections to brokers that left or moved
            for nid, c in list(self._conns.items()):
                if nid not in brokers or brokers[nid] != (c.host, c.port):
                    if brokers:
                        c.close()
                        del self._conns[nid]
        return md

    def invalidate(self) -> None:
        """Mark the metadata stale (next lookup refreshes)."""
        with self._lock:
            self._stale = True

    def _topic(self, topic: str, auto_create: bool = False) -> TopicMetadata:
        md = self.metadata([topic], auto_create=auto_create)
        tm = md.topics.get(topic)
        if tm is None or tm.error_code == UnknownTopicOrPartitionError.code:
            md = self.metadata([topic], refresh=True, auto_create=auto_create)
            tm = md.topics.get(topic)
        if tm is None or not tm.partitions:
            code = tm.error_code if tm is not None and tm.error_code else UnknownTopicOrPartitionError.code
            raise wire_error(code, f"topic {topic!r} has no partitions in the cluster metadata")
        return tm

    def partitions_for(self, topic: str, *, auto_create: bool = False) -> list[int]:
        """Sorted partition ids of ``topic``; UnknownTopicOrPartitionError if it does not exist."""
        return sorted(self._topic(topic, auto_create).partitions)

    def available_partitions_for(self, topic: str) -> list[int]:
        """Partitions of ``topic`` that currently have a leader."""
        return sorted(p for p, pm in self._topic(topic).partitions.items() if pm.leader >= 0)

    def leader_for(self, topic: str, partition: int, *, timeout_s: float | None = None) -> int:
        """Node id of the leader of ``topic``/``partition``; refreshes metadata (with backoff,
        up to ``timeout_s``, default request.timeout.ms) while there is none."""
        refresh = False

        def attempt() -> int:
            nonlocal refresh
            md = self.metadata([topic], refresh=refresh)
            refresh = True  # a retry looks at fresh metadata
            tm = md.topics.get(topic)
            if tm is None or (tm.error_code and not tm.partitions):
                code = tm.error_code if tm is not None and tm.error_code else UnknownTopicOrPartitionError.code
                raise wire_error(code, f"topic {topic!r}")
            pm = tm.partitions.get(partition)
            if pm is None:
                raise UnknownTopicOrPartitionError(
                    f"UNKNOWN_TOPIC_OR_PARTITION: topic {topic!r} has partitions "
                    f"{sorted(tm.partitions)}, not {partition}"
                )
            if pm.leader >= 0 and pm.leader in md.brokers:
                return pm.leader
            raise LeaderNotAvailableError(f"LEADER_NOT_AVAILABLE: {topic}-{partition} has no leader")

        return retry(
            attempt,
            deadline=self._deadline(timeout_s),
            backoff=self._backoff(),
            what=f"leader lookup {topic}-{partition}",
            raise_last=True,
        )

    def cached_leader(self, topic: str, partition: int) -> int | None:
        """The leader of ``topic``/``partition`` in the cached metadata when that metadata is fresh
        (not marked stale, younger than metadata_max_age_ms) and names a live broker as leader; None
        otherwise (the caller then asks :meth:`metadata` with ``refresh=True``).  No request and no
        lock: it reads the current metadata object once, for the producer's sender thread, which
        calls it for every batch."""
        md = self._md
        tm = md.topics.get(topic)
        if tm is not None:
            pm = tm.partitions.get(partition)
            if (
                pm is not None
                and pm.leader >= 0
                and pm.leader in md.brokers
                and not self._stale
                and time.monotonic() - md.updated < self.metadata_max_age_s
            ):
                return pm.leader
        return None

    def leader_epoch(self, topic: str, partition: int) -> int:
        """The leader epoch of ``topic``/``partition`` in the cached metadata (no request), -1 when
        unknown.  Sent as ``current_leader_epoch`` in Fetch v9+ and ListOffsets v4+ (KIP-320): a broker
        that is not at that epoch answers FENCED_LEADER_EPOCH (it is newer: the metadata is stale) or
        UNKNOWN_LEADER_EPOCH (it is older: it has not learned of the election yet), both of which
        refresh the metadata and are retried, so a deposed leader never serves the request."""
        with self._lock:
            tm = self._md.topics.get(topic)
        pm = tm.partitions.get(int(partition)) if tm is not None else None
        return -1 if pm is None else int(pm.leader_epoch)

    def broker_address(self, node_id: int) -> tuple[str, int]:
        with self._lock:
            addr = self._md.brokers.get(node_id)
        if addr is None:
            addr = self.metadata(None, refresh=True).brokers.get(node_id)
        if addr is None:
            raise NetworkError(f"broker {node_id} is not in the cluster metadata")
        return addr

    def connection(self, node_id: int, *, _address=None) -> BrokerConnection:
        """The (shared) connection to broker ``node_id``, opened on first use and after failures."""
        with self._lock:
            conn = self._conns.get(node_id)
            if conn is not None and not conn.closed:
                return conn
        host, port = _address or self.broker_address(node_id)
        conn = self._connect(host, port, node_id)
        with self._lock:
            old = self._conns.get(node_id)
            if old is not None and not old.closed:
                conn.close()
                return old
            self._conns[node_id] = conn
        return conn

    def new_connection(self, node_id: int) -> BrokerConnection:
        """A private (unshared) connection to ``node_id``; the caller closes it."""
        host, port = self.broker_address(node_id)
        return self._connect(host, port, node_id)

    def _connect(self, host: str, port: int, node_id: int | None = None) -> BrokerConnection:
        """A new connection with this client's settings (TLS per ``security.protocol``)."""
        return BrokerConnection(
            host,
            port,
            client_id=self.client_id,
            timeout_s=self.request_timeout_s,
            node_id=node_id,
            ssl_context=self._ssl_context,
            sasl=self.sasl,
        )

    def send_to(self, node_id: int, api_key: int, body: dict, version: int | None = None) -> dict:
        """One request to ``node_id``; a connection error invalidates the metadata and is raised."""
        conn = self.connection(node_id)
        try:
            return conn.request(api_key, body, version)
        except NetworkError:
            self.invalidate()
            raise

    # -- retry helper ----------------------------------------------------------------------------
    def _deadline(self, timeout_s: float | None) -> Deadline:
        """The deadline of one call: ``timeout_s`` from now, default request.timeout.ms."""
        return Deadline.after(self.request_timeout_s if timeout_s is None else timeout_s)

    def _backoff(self) -> Backoff:
        """retry.backoff.ms doubling up to 1 s, without jitter (the client's timings as before;
        Kafka's ``ExponentialBackoff``, KIP-580, with jitter 0)."""
        return Backoff(self.retry_backoff_s, multiplier=2.0, max_s=max(1.0, self.retry_backoff_s), jitter=0.0)

    def retrying(
        self, what: str, fn: Callable[[], _T], timeout_s: float | None = None, *, deadline: Deadline | None = None
    ) -> _T:
        """``fn()`` retried on retriable errors with :meth:`_backoff` until ``deadline`` (default:
        ``timeout_s`` from now); the last error is raised as is when time runs out.  An error whose
        code asks for fresh metadata (REFRESH_METADATA_CODES) invalidates the cached metadata."""

        def attempt():
            try:
                return fn()
            except PyklogError as e:
                if e.retriable and e.code in REFRESH_METADATA_CODES:
                    self.invalidate()
                raise

        def on_retry(e, attempts, delay_s):
            log.debug("%s: retrying in %.3fs after attempt %d: %s", what, delay_s, attempts, e)

        try:
            return retry(
                attempt,
                deadline=deadline or self._deadline(timeout_s),
                backoff=self._backoff(),
                what=what,
                on_retry=on_retry,
                raise_last=True,
            )
        except PyklogError as e:
            if e.retriable:
                log.info("%s: giving up after retries: %s", what, e)
            raise

    # -- offsets -------------------------------------------------------------------------------
    def by_leader(
        self, tps: Iterable[tuple[str, int]], deadline: Deadline | None = None
    ) -> dict[int, list[tuple[str, int]]]:
        """``{leader node: [tp]}``; each leader look-up retries at most until ``deadline`` (the
        caller's, so one call's bound is not multiplied by nested retry loops)."""
        groups: dict[int, list] = {}
        for tp in tps:
            timeout_s = None if deadline is None else deadline.remaining()
            groups.setdefault(self.leader_for(*tp, timeout_s=timeout_s), []).append(tp)
        return groups

    def offsets_for_times(self, timestamps: dict, *, isolation_level: int = 0, timeout_s: float | None = None) -> dict:
        """ListOffsets v1+: ``{(t, p): timestamp}`` (-1 latest, -2 earliest, -3 the record with the
        largest timestamp (v7+), -4 the earliest local offset (v8+), else ms) ->
        ``{(t, p): (offset, timestamp) | None}`` (None: no record at or after the timestamp)."""
        result: dict = {}
        pending = dict(timestamps)
        deadline = self._deadline(timeout_s)

        def attempt():
            for node, tps in self.by_leader(list(pending), deadline).items():
                conn = self.connection(node)
                version = conn.version_for(ApiKey.LIST_OFFSETS)
                if version < 1:
                    raise UnsupportedVersionError(f"broker {node} has no ListOffsets v1 (timestamps)")
                for spec, need, what in (
                    (MAX_TIMESTAMP, 7, "max-timestamp (-3), KIP-734"),
                    (EARLIEST_LOCAL, 8, "earliest-local (-4), KIP-405"),
                ):
                    if version < need and any(pending[tp] == spec for tp in tps):
                        raise UnsupportedVersionError(
                            f"UNSUPPORTED_VERSION: broker {node} serves ListOffsets up to v{version}; "
                            f"{what} needs v{need}"
                        )
                resp = self._request(
                    node,
                    conn,
                    ApiKey.LIST_OFFSETS,
                    {
                        "replica_id": -1,
                        "isolation_level": isolation_level,
                        "topics": _group_topics(
                            tps,
                            lambda tp: {
                                "partition_index": tp[1],
                                "current_leader_epoch": self.leader_epoch(*tp),
                                "timestamp": pending[tp],
                            },
                        ),
                    },
                    version,
                )
                failed = None
                for t in resp.get("topics") or []:
                    for p in t.get("partitions") or []:
                        tp = (t["name"], int(p["partition_index"]))
                        code = int(p.get("error_code", 0))
                        if code:
                            failed = retriable_wire_error(code, f"ListOffsets {tp[0]}-{tp[1]} on broker {node}")
                            continue
                        off = int(p.get("offset", -1))
                        result[tp] = None if off < 0 else (off, int(p.get("timestamp", -1)))
                        pending.pop(tp, None)
                if failed is not None:
                    raise failed
            return result

        return self.retrying("ListOffsets", attempt, deadline=deadline)

    def list_offsets(self, timestamps: dict, *, isolation_level: int = 0, timeout_s: float | None = None) -> dict:
        """``{(t, p): timestamp}`` -> ``{(t, p): offset | None}`` (ListOffsets v1+; -1 latest,
        -2 earliest)."""
        r = self.offsets_for_times(timestamps, isolation_level=isolation_level, timeout_s=timeout_s)
        return {tp: (None if v is None else v[0]) for tp, v in r.items()}

    def offsets_before(
        self, topic: str, partition: int, time_ms: int, max_num_offsets: int = 1, *, timeout_s: float | None = None
    ) -> list[int]:
        """ListOffsets v0 (the seed's getOffsetsBefore): up to ``max_num_offsets`` offsets before
        ``time_ms`` (-1 latest, -2 earliest), descending."""

        def attempt():
            node = self.leader_for(topic, partition)
            conn = self.connection(node)
            resp = self._request(
                node,
                conn,
                ApiKey.LIST_OFFSETS,
                {
                    "replica_id": -1,
                    "topics": [
                        {
                            "name": topic,
                            "partitions": [
                                {"partition_index": partition, "timestamp": time_ms, "max_num_offsets": max_num_offsets}
                            ],
                        }
                    ],
                },
                0,
            )
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    code = int(p.get("error_code", 0))
                    if code:
                        raise wire_error(code, f"ListOffsets v0 {topic}-{partition} on broker {node}")
                    return [int(o) for o in p.get("old_style_offsets") or []]
            raise UnknownTopicOrPartitionError(f"ListOffsets v0: no answer for {topic}-{partition}")

        return self.retrying("ListOffsets v0", attempt, timeout_s)

    def _request(self, node: int, conn: BrokerConnection, api_key, body, version=None) -> dict:
        try:
            return conn.request(api_key, body, version)
        except NetworkError:
            self.invalidate()
            raise

    # -- coordinators (group: key_type 0; transaction: key_type 1) ----------------------------
    def find_coordinator(
        self, group: str, *, refresh: bool = False, timeout_s: float | None = None, key_type: int = 0
    ) -> int:
        """Node id of the coordinator of ``group`` (FindCoordinator v0-2), cached; retried with
        backoff up to ``timeout_s`` (default request.timeout.ms).  ``key_type`` 1 asks for the
        transaction coordinator of transactional id ``group`` (FindCoordinator v1+)."""
        ck = _coordinator_cache_key(group, key_type)
        if not refresh:
            with self._lock:
                nid = self._coordinators.get(ck)
            if nid is not None:
                return nid
        return self.retrying(
            f"FindCoordinator({group})", lambda: self._find_coordinator_once(group, key_type), timeout_s
        )

    def _find_coordinator_once(self, group: str, key_type: int = 0) -> int:
        """One FindCoordinator request (no retry); caches the answer."""
        conn = self.any_connection()
        version = min(conn.version_for(ApiKey.FIND_COORDINATOR), 2)
        if key_type and version < 1:
            raise UnsupportedVersionError(
                f"UNSUPPORTED_VERSION: broker {conn.host}:{conn.port} has no FindCoordinator v1 "
                f"(transaction coordinators): it does not support transactions"
            )
        what = "group" if key_type == 0 else "transactional id"
        try:
            resp = conn.request(ApiKey.FIND_COORDINATOR, {"key": group, "key_type": key_type}, version)
        except NetworkError:
            self.invalidate()
            raise
        code = int(resp.get("error_code", 0))
        if code:
            raise wire_error(
                code, f"FindCoordinator for {what} {group!r}: {resp.get('error_message') or ''}".rstrip(": ")
            )
        nid = int(resp["node_id"])
        with self._lock:
            self._coordinators[_coordinator_cache_key(group, key_type)] = nid
            if nid not in self._md.brokers:
                self._md.brokers[nid] = (resp["host"], int(resp["port"]))
        return nid

    def forget_coordinator(self, group: str, key_type: int = 0) -> None:
        """Drop the cached coordinator of ``group`` (after NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE
        or a network error): the next call looks it up again."""
        with self._lock:
            self._coordinators.pop(_coordinator_cache_key(group, key_type), None)

    def coordinator_attempt(self, group: str, fn, key_type: int = 0):
        """ONE attempt of ``fn(node, connection)`` on the coordinator of ``group``: the cached
        coordinator, or one FindCoordinator (no retry loop of its own); NOT_COORDINATOR /
        COORDINATOR_NOT_AVAILABLE / a network error drop the cached coordinator before being
        raised, so the caller's next attempt looks it up again."""
        with self._lock:
            node = self._coordinators.get(_coordinator_cache_key(group, key_type))
        try:
            if node is None:
                node = self._find_coordinator_once(group, key_type)
            return fn(node, self.connection(node))
        except (NotCoordinatorError, CoordinatorNotAvailableError, NetworkError):
            self.forget_coordinator(group, key_type)
            raise

    def coordinator_call(
        self,
        group: str,
        what: str,
        fn: Callable[[int, BrokerConnection], _T],
        timeout_s: float | None,
        key_type: int = 0,
    ) -> _T:
        """``fn(node, connection)`` on the coordinator of ``group``, in ONE retry loop bounded by
        ``timeout_s``: each attempt is :meth:`coordinator_attempt`."""
        return self.retrying(f"{what}({group})", lambda: self.coordinator_attempt(group, fn, key_type), timeout_s)

    def commit_offsets(self, group: str, offsets: dict, metadata: str = "", *, timeout_s: float | None = None) -> None:
        """OffsetCommit for a group without members (generation -1, member ""): ``{(t, p): offset}``
        (a value may also be ``(offset, metadata)``).  Retries COORDINATOR_LOAD_IN_PROGRESS /
        NOT_COORDINATOR (rediscovering the coordinator) with backoff, up to ``timeout_s``."""
        items = {}
        for tp, v in offsets.items():
            off, md = v if isinstance(v, tuple) else (v, metadata)
            items[(tp[0], int(tp[1]))] = (int(off), md)
        if not items:
            return

        def call(node, conn):
            version = conn.version_for(ApiKey.OFFSET_COMMIT)
            body = {
                "group_id": group,
                "generation_id_or_member_epoch": -1,
                "member_id": "",
                "group_instance_id": None,
                "retention_time_ms": -1,
                "topics": _group_topics(
                    items,
                    lambda tp: {
                        "partition_index": tp[1],
                        "committed_offset": items[tp][0],
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": items[tp][1],
                    },
                ),
            }
            resp = conn.request(ApiKey.OFFSET_COMMIT, body, version)
            first = None
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    code = int(p.get("error_code", 0))
                    if code:
                        e = wire_error(code, f"OffsetCommit group {group!r} {t['name']}-{p['partition_index']}")
                        if first is None or (e.retriable and not first.retriable):
                            first = e
            if first is not None:
                raise first

        self.coordinator_call(group, "OffsetCommit", call, timeout_s)

    def fetch_committed(self, group: str, partitions=None, *, timeout_s: float | None = None) -> dict:
        """OffsetFetch: ``[(t, p)]`` (None = all the group committed) -> ``{(t, p): offset | None}``."""
        tps = None if partitions is None else [(t, int(p)) for t, p in partitions]

        def call(node, conn):
            version = conn.version_for(ApiKey.OFFSET_FETCH)
            if tps is None:
                if version < 2:
                    raise UnsupportedVersionError("OffsetFetch of all partitions needs v2+")
                topics = None
            else:
                topics = [{"name": t, "partition_indexes": ps} for t, ps in _group_partitions(tps).items()]
            if version >= 8:  # KIP-709: a batch of groups (here one); the group's result has v7's shape
                resp = conn.request(
                    ApiKey.OFFSET_FETCH,
                    {"groups": [{"group_id": group, "topics": topics}], "require_stable": False},
                    version,
                )
                resp = next((g for g in resp.get("groups") or [] if g.get("group_id") == group), None)
                if resp is None:
                    raise UnknownServerError(f"OffsetFetch v{version}: no result for group {group!r}")
            else:
                resp = conn.request(
                    ApiKey.OFFSET_FETCH, {"group_id": group, "topics": topics, "require_stable": False}, version
                )
            code = int(resp.get("error_code", 0))
            if code:
                raise wire_error(code, f"OffsetFetch group {group!r}")
            out = {} if tps is None else dict.fromkeys(tps)
            for t in resp.get("topics") or []:
                for p in t.get("partitions") or []:
                    tp = (t["name"], int(p["partition_index"]))
                    pcode = int(p.get("error_code", 0))
                    if pcode and pcode != UnknownTopicOrPartitionError.code:
                        raise wire_error(pcode, f"OffsetFetch group {group!r} {tp[0]}-{tp[1]}")
                    off = int(p.get("committed_offset", -1))
                    out[tp] = None if off < 0 else off
            return out

        return self.coordinator_call(group, "OffsetFetch", call, timeout_s)

    # -- topics ---------------------------------------------------------------------------------
    def controller_call(self, what: str, fn: Callable[[int, BrokerConnection], _T], timeout_s: float | None) -> _T:
        """``fn(node, connection)`` on the controller (any broker when the metadata names none),
        retried as :meth:`retrying` until ``timeout_s``; NOT_CONTROLLER and network errors refresh
        the metadata before the next attempt."""

        def attempt():
            md = self.metadata(None, refresh=self._stale)
            node = md.controller_id if md.controller_id in md.brokers else next(iter(md.brokers), None)
            if node is None:
                raise LeaderNotAvailableError("no broker in the cluster metadata")
            try:
                return fn(node, self.connection(node))
            except (NotControllerError, NetworkError):
                self.invalidate()
                raise

        return self.retrying(what, attempt, timeout_s)

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        configs: dict | None = None,
        *,
        replication_factor: int = 1,
        validate_only: bool = False,
        wait: bool = True,
        timeout_s: float | None = None,
    ) -> None:
        """CreateTopics for one topic; with ``wait`` also waits until every partition has a leader
        in the metadata.  TopicAlreadyExistsError / InvalidPartitionsError / ... as the broker says."""
        timeout_ms = int((self.request_timeout_s if timeout_s is None else timeout_s) * 1000)

        def call(node, conn):
            version = conn.version_for(ApiKey.CREATE_TOPICS)
            resp = conn.request(
                ApiKey.CREATE_TOPICS,
                {
                    "topics": [
                        {
                            "name": name,
                            "num_partitions": int(partitions),
                            "replication_factor": int(replication_factor),
                            "assignments": [],
                            "configs": [
                                {"name": str(k), "value": None if v is None else str(v)}
                                for k, v in (configs or {}).items()
                            ],
                        }
                    ],
                    "timeout_ms": timeout_ms,
                    "validate_only": validate_only,
                },
                version,
            )
            for t in resp.get("topics") or []:
                code = int(t.get("error_code", 0))
                if code:
                    raise wire_error(code, f"CreateTopics {name!r}: {t.get('error_message') or ''}")

        self.controller_call(f"CreateTopics({name})", call, timeout_s)
        if wait and not validate_only:
            self.wait_for_topic(name, partitions, timeout_s=timeout_ms / 1000.0)

    def wait_for_topic(self, name: str, partitions: int | None = None, *, timeout_s: float = 30.0) -> None:
        """Wait until ``name`` has ``partitions`` partitions (any if None), each with a leader.

        Polls the metadata every retry.backoff.ms (at most 100 ms): a client has no event to wait
        on (Kafka's AdminClient polls Metadata the same way)."""
        deadline = Deadline.after(timeout_s)
        poll = Backoff.constant(min(self.retry_backoff_s, 0.1))
        while True:
            md = self.metadata([name], refresh=True)
            tm = md.topics.get(name)
            if (
                tm is not None
                and tm.partitions
                and not tm.error_code
                and (partitions is None or len(tm.partitions) >= partitions)
                and all(pm.leader >= 0 and pm.leader in md.brokers for pm in tm.partitions.values())
            ):
                return
            if deadline.expired():
                raise RequestTimedOutError(
                    f"REQUEST_TIMED_OUT: topic {name!r} has no leader for every "
                    f"partition after {timeout_s}s (metadata: {tm})"
                )
            time.sleep(min(poll.next(), deadline.remaining()))

    def delete_topic(self, name: str, *, timeout_s: float | None = None) -> None:
        """DeleteTopics for one topic."""
        timeout_ms = int((self.request_timeout_s if timeout_s is None else timeout_s) * 1000)

        def call(node, conn):
            version = conn.version_for(ApiKey.DELETE_TOPICS)
            if version >= 6:  # KIP-516: by name or by id; pyklog names it
                body = {"topics": [{"name": name}], "timeout_ms": timeout_ms}
            else:
                body = {"topic_names": [name], "timeout_ms": timeout_ms}
            resp = conn.request(ApiKey.DELETE_TOPICS, body, version)
            for t in resp.get("responses") or []:
                code = int(t.get("error_code", 0))
                if code:
                    raise wire_error(code, f"DeleteTopics {name!r}")

        self.controller_call(f"DeleteTopics({name})", call, timeout_s)
        self.invalidate()

    # -- producer ids --------------------------------------------------------------------------
    def init_producer_id(
        self,
        *,
        transactional_id: str | None = None,
        transaction_timeout_ms: int = 60000,
        timeout_s: float | None = None,
    ) -> tuple[int, int]:
        """InitProducerId (idempotent producer): ``(producer_id, producer_epoch)``."""

        def attempt():
            conn = self.any_connection()
            try:
                resp = conn.request(
                    ApiKey.INIT_PRODUCER_ID,
                    {
                        "transactional_id": transactional_id,
                        "transaction_timeout_ms": transaction_timeout_ms,
                        "producer_id": -1,
                        "producer_epoch": -1,
                    },
                )
            except NetworkError:
                self.invalidate()
                raise
            code = int(resp.get("error_code", 0))
            if code:
                raise wire_error(code, "InitProducerId")
            return int(resp["producer_id"]), int(resp["producer_epoch"])

        return self.retrying("InitProducerId", attempt, timeout_s)

    def close_dead_connections(self) -> int:
        """Close the shared broker connections that are readable while idle: an idle Kafka
        connection is never readable, so readable means the broker closed it (EOF) or sent bytes
        nobody asked for.  The next request to that broker opens a new one.  Returns how many were
        closed.  Only for a client no other thread uses at the moment (a pooled consumer between
        tasks): a connection waiting for a response is readable too.  Thread-safe as to the
        connection table."""
        import select

        with self._lock:
            items = list(self._conns.items())
        closed = 0
        for nid, conn in items:
            try:
                dead = conn.closed or bool(select.select([conn.fileno()], [], [], 0)[0])
            except (OSError, ValueError):
                dead = True
            if dead:
                with self._lock:
                    if self._conns.get(nid) is conn:
                        del self._conns[nid]
                try:
                    conn.close()
                except Exception:  # noqa: BLE001
                    pass
                closed += 1
        return closed

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        """Close every connection and the ZooKeeper session.  Idempotent."""
        self._closed = True
        with self._lock:
            conns = list(self._conns.values())
            self._conns.clear()
            if self._boot_conn is not None:
                conns.append(self._boot_conn)
                self._boot_conn = None
        for c in conns:
            c.close()
        zk, self._zk = self._zk, None
        if zk is not None:
            try:
                zk.stop()
                zk.close()
            except Exception:  # noqa: BLE001 - best effort on shutdown
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _coordinator_cache_key(key: str, key_type: int):
    return key if key_type == 0 else ("txn", key)


def _group_partitions(tps) -> dict:
    out: dict = {}
    for t, p in tps:
        out.setdefault(t, []).append(int(p))
    return out


def _group_topics(tps, partition_body) -> list:
    """[(t, p)] -> [{"name": t, "partitions": [partition_body((t, p)), ...]}], topic order kept."""
    out: dict = {}
    for tp in tps:
        out.setdefault(tp[0], []).append(partition_body(tp))
    return [{"name": t, "partitions": ps} for t, ps in out.items()]
