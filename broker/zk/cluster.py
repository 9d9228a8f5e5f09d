"""The broker's ZooKeeper side: cluster id, broker registration, topic registry, metadata cache.

Kafka's ZooKeeper layout (the seed's "ZooKeeper Directories", paths from :mod:`pyklog.broker.zk.paths`,
every node's data encoded and decoded by :mod:`pyklog.broker.zk.znodes`):

* ``/cluster/id`` -> ``{"version":"1","id":"<22 chars of URL-safe base64>"}``, created by the first
  broker that starts and read by every later one.
* ``/brokers/ids/[id]`` (ephemeral) -> Kafka's broker registration JSON (``host``, ``port``,
  ``endpoints``, ``listener_security_protocol_map``, ``jmx_port``, ``rack``, ``timestamp``, ``version``).
  A second broker with the same id fails with :class:`BrokerIdInUseError`.  After a session expiry
  the registration is created again as soon as a new session is up.
* ``/brokers/topics/[topic]`` -> ``{"version":1,"partitions":{"0":[replicas]}}`` and
  ``/brokers/topics/[topic]/partitions/[p]/state`` -> ``{"controller_epoch","leader","version",
  "leader_epoch","isr"}``; ``/config/topics/[topic]`` -> ``{"version":1,"config":{...}}``.  A topic's
  nodes are created (and deleted) in one ZooKeeper multi-op, so no reader sees half a topic.
* ``/admin/delete_topics/[topic]``: deletion requests as Kafka's old tools write them; the controller
  (the live broker with the lowest id) carries them out.
* ``/config/changes/config_change_[seq]`` -> ``{"version":2,"entity_path":"topics/<topic>"}``: written
  after a topic's config changes (:meth:`ZkCluster.alter_topic_config`, or Kafka's kafka-configs);
  every broker drops its cached topic configs and tells its listeners, which re-apply them to the logs.
* ``/latest_producer_id_block`` -> ``{"version":1,"broker":id,"block_start":"0","block_end":"999"}``.
* ``/admin/deleted_topics/[topic]`` (pyklog's own): written in the multi-op that deletes a topic,
  removed when the name is created again.  A broker deletes its log of a topic missing from the
  registry only if this record exists (:meth:`ZkCluster.topic_deletion_recorded`); Kafka's
  controller tells its brokers with StopReplica(deletePartitions=true) instead.

Losing ZooKeeper's data never deletes a log: ``cluster_id_check`` (the broker's meta.properties,
Kafka's InconsistentClusterIdException) runs before anything is written, so a broker with data
refuses an empty ZooKeeper; a new session after an expiry re-checks ``/cluster/id`` before
registering again; and while disconnected a watchdog asks the servers for their last zxid
(``srvr``): a ZooKeeper that came back empty refuses the broker's session for ever, so when every
server is behind the zxid the broker has seen, ``on_fatal`` stops the broker with an ERROR.

A topic's partitions are created with their first replica as leader (epoch 0) and every replica in
the ISR, as Kafka's controller writes them.  Replication (issue 12): each registering broker
watches the state znodes of the partitions it caches (one read of the changed node per change,
re-armed after a connection loss) and tells its partition-state listeners (the ReplicaManager);
a partition's leader changes only the ISR (:meth:`ZkCluster.update_isr`, conditional on the node's
version, then ``/isr_change_notification/isr_change_<seq>``); leader and epoch are the
controller's.  Metadata reports leader -1 for a partition whose leader is not a live broker (as
Kafka does once the controller finds no live ISR member).

Every ZooKeeper call goes through ``client.retry`` (connection loss and session moves are retried up
to a deadline); a caller sees :class:`ZooKeeperError` when ZooKeeper stays unreachable.  The cache of
live brokers and topics is refreshed by watches (kazoo's ChildrenWatch, which re-arms itself after a
reconnect or a new session).

Thread-safety: :class:`ZkCluster` is thread-safe.  Reads (``live_brokers``, ``topics``, ...) return
snapshots taken under a lock; watch callbacks and listeners run on kazoo's callback thread.
"""
from __future__ import annotations

import base64
import functools
import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable, Iterable, NamedTuple

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NoNodeError,
    NodeExistsError,
    NotEmptyError,
    RolledBackError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.recipe.watchers import ChildrenWatch
from kazoo.retry import KazooRetry, RetryFailedError

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import (
    BrokerIdInUseError,
    InvalidConfigError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    PyklogError,
    ReassignmentInProgressError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperError,
)
from pyklog.broker.zk import paths
from pyklog.broker.zk.server import four_letter_word
from pyklog.broker.zk.znodes import (
    BrokerRegistration,
    LeaderAndIsr,
    ProducerIdBlock,
    decode_broker_registration,
    decode_cluster_id,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic_assignment,
    decode_topic_config,
    decode_topic_id,
    encode_broker_registration,
    encode_cluster_id,
    encode_config_change,
    encode_isr_change_notification,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic_assignment,
    encode_topic_config,
    new_topic_id,
    with_topic_id,
)
from pyklog.broker.zk.topics import (
    TOPIC_CONFIGS,
    assign_replicas,
    placement_racks,
    collides,
    validate_topic_configs,
    validate_topic_name,
)

log = logging.getLogger(__name__)

CONTROLLER_EPOCH = 1


#: operations per ZooKeeper multi-op when topics are created or deleted in batches (a multi is one
#: request and must stay under ZooKeeper's jute.maxbuffer, 1 MiB by default)
MAX_OPS_PER_MULTI = 2000


def _chunks(names, ops_of) -> list[list[str]]:
    """Split ``names`` into lists whose ``ops_of(name)`` sum stays under :data:`MAX_OPS_PER_MULTI`
    (a single larger topic gets a list of its own)."""
    out: list[list[str]] = []
    current: list[str] = []
    count = 0
    for n in names:
        k = ops_of(n)
        if current and count + k > MAX_OPS_PER_MULTI:
            out.append(current)
            current, count = [], 0
        current.append(n)
        count += k
    if current:
        out.append(current)
    return out


class _DataLost(Exception):
    """Every ZooKeeper server that answers is behind the zxid this client has seen."""

    def __init__(self, seen: int, zxids: dict):
        super().__init__(f"servers at {zxids} behind zxid {seen:#x}")
        self.seen, self.zxids = seen, zxids


class _ClusterIdChanged(Exception):
    def __init__(self, now: str | None):
        super().__init__(f"cluster id now {now}")
        self.now = now


class PartitionState(NamedTuple):
    """A partition as metadata reports it.  ``leader`` is -1 when the leader broker is not live."""

    leader: int
    leader_epoch: int
    isr: list
    replicas: list


@dataclass
class _TopicEntry:
    czxid: int
    mzxid: int
    replicas: dict = field(default_factory=dict)  # partition -> [broker ids]
    states: dict = field(default_factory=dict)  # partition -> (leader, leader_epoch, isr)
    topic_id: uuid.UUID | None = None  # KIP-516 (None: the node has none and none could be written)


def split_connect_string(zk_connect: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")`` (chroot ``""`` if none)."""
    if not zk_connect or not isinstance(zk_connect, str):
        raise ZooKeeperError(f"zookeeper.connect must be host:port[,host:port...][/chroot], got {zk_connect!r}")
    slash = zk_connect.find("/")
    if slash < 0:
        return zk_connect, ""
    hosts, chroot = zk_connect[:slash], zk_connect[slash:].rstrip("/")
    if not hosts:
        raise ZooKeeperError(f"zookeeper.connect has no host:port before the chroot: {zk_connect!r}")
    return hosts, chroot


def new_cluster_id() -> str:
    """22 characters of URL-safe base64 without padding, from a random UUID (as Kafka)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode("ascii")


def _watch_callback(fn):
    """A ChildrenWatch function that returns False (kazoo then drops the watch) when it runs while
    or after :meth:`ZkCluster.stop` closes the client, instead of failing on the client set to None."""

    @functools.wraps(fn)
    def watch(self, children):
        if self._stopping:
            return False
        try:
            return fn(self, children)
        except Exception:  # noqa: BLE001 - only swallowed when stop() pulled the client away
            if self._stopping or self.zk is None:
                return False
            raise

    return watch



def _reassigning_partitions(data: bytes) -> list[int]:
    """The partitions of a ``/brokers/topics/<t>`` node with KIP-455 ``adding_replicas`` or
    ``removing_replicas`` (a reassignment in progress), sorted; [] for v1/v2 nodes."""
    try:
        obj = json.loads(data)
    except ValueError:
        return []
    out: set[int] = set()
    for key in ("adding_replicas", "removing_replicas"):
        for p, replicas in (obj.get(key) or {}).items() if isinstance(obj, dict) else ():
            if replicas and str(p).isdigit():
                out.add(int(p))
    return sorted(out)

class ZkCluster:
    """One broker's (or an admin tool's) view of the cluster in ZooKeeper.

    ``ZkCluster(zk_connect, broker_id, host, port)``; ``broker_id=None`` makes an admin client that
    reads and administers topics without registering (used by ``pyklog-topics``).  ``listeners``
    are the registration's endpoints (default ``["PLAINTEXT://host:port"]``).
    """

    def __init__(self, zk_connect: str, broker_id: int | None, host: str | None = None, port: int | None = None,
                 *, session_timeout_ms: int = 18000, listeners: Iterable[str] | None = None,
                 connect_timeout_s: float | None = None, rack: str | None = None,
                 cluster_id_check: Callable[[str | None], None] | None = None,
                 on_fatal: Callable[[str], None] | None = None):
        self.zk_connect = zk_connect
        # called with ZooKeeper's /cluster/id (None if absent) before it is created and before the
        # broker registers: raising there stops start() with nothing written (meta.properties check)
        self._cluster_id_check = cluster_id_check
        # called once (on a kazoo thread) when ZooKeeper is found to have lost its data under us
        self._on_fatal = on_fatal
        self._fatal_reported = False
        self._watchdog_running = False
        self._hosts, self._chroot = split_connect_string(zk_connect)
        self.broker_id = None if broker_id is None else int(broker_id)
        self.host = host
        self.port = None if port is None else int(port)
        if self.broker_id is not None and (host is None or port is None):
            raise ValueError("a registering broker needs host and port")
        self.listeners = list(listeners) if listeners else (
            [f"PLAINTEXT://{host}:{self.port}"] if self.broker_id is not None else [])
        self.rack = rack
        self.session_timeout_s = session_timeout_ms / 1000.0
        self.connect_timeout_s = connect_timeout_s if connect_timeout_s is not None else max(
            10.0, self.session_timeout_s)
        self.zk: KazooClient | None = None
        self.cluster_id: str | None = None
        self._lock = threading.RLock()
        self._brokers: dict[int, tuple[str, int]] = {}
        self._topics: dict[str, _TopicEntry] = {}
        self._configs: dict[str, dict[str, str]] = {}
        self._listeners: list[Callable[[], None]] = []
        self._session_lost = False
        self._stopping = False
        self._registered = threading.Event()
        self._watches: list[ChildrenWatch] = []
        self._last_full_topic_refresh = time.monotonic()
        # replication: listeners told of each changed partition state, and the watch re-arm after a
        # connection loss (see "partition states" below)
        self._state_listeners: list[Callable[[str, int], None]] = []
        self._state_rearm_pending = False
        # the newest state read of each partition, by its node's (czxid, version): a topic entry
        # read before a state change must not be installed over it (see _with_newest_states)
        self._newest_states: dict[tuple[str, int], tuple[tuple[int, int], tuple]] = {}

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> "ZkCluster":
        """Connect, read or create the cluster id, register the broker, start the watches.

        Raises :class:`ZooKeeperError` if ZooKeeper cannot be reached within ``connect_timeout_s``
        and :class:`BrokerIdInUseError` if a live broker already holds this broker id.
        """
        self._stopping = False
        command_retry = KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0,
                           deadline=max(self.connect_timeout_s, self.session_timeout_s))
        if self._chroot:
            self._ensure_chroot()
        self.zk = KazooClient(hosts=self.zk_connect, timeout=self.session_timeout_s,
                              connection_retry=KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0),
                              command_retry=command_retry)
        try:
            self.zk.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            self._close_client()
            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self.zk_connect} within {self.connect_timeout_s:g}s") from None
        try:
            self.zk.add_listener(self._on_state)
            # the cluster id first: a broker whose meta.properties names another cluster stops here,
            # before anything is written into this ZooKeeper
            self.cluster_id = self._get_or_create_cluster_id()
            for p in (paths.BROKER_IDS, paths.BROKER_TOPICS, paths.CONFIG_TOPICS, paths.CONFIG_CHANGES,
                      paths.ADMIN_DELETE_TOPICS, paths.ADMIN_DELETED_TOPICS):
                self._retry(self.zk.ensure_path, p)
            if self.broker_id is not None:
                self._register()
            self._watches.append(ChildrenWatch(self.zk, paths.BROKER_IDS, self._on_broker_ids))
            self._watches.append(ChildrenWatch(self.zk, paths.BROKER_TOPICS, self._on_topic_names))
            if self.broker_id is not None:
                self._watches.append(ChildrenWatch(self.zk, paths.ADMIN_DELETE_TOPICS, self._on_delete_requests))
                self._watches.append(ChildrenWatch(self.zk, paths.CONFIG_CHANGES, self._on_config_changes))
        except BaseException:
            self._close_client()
            raise
        log.info("ZooKeeper %s: cluster id %s%s", self.zk_connect, self.cluster_id,
                 f", registered broker {self.broker_id} at {self.listeners}" if self.broker_id is not None else "")
        return self

    def stop(self) -> None:
        """Delete our own registration (if this session holds it) and close the session."""
        self._stopping = True
        if self.zk is None:
            return
        if self.broker_id is not None and self.zk.connected:
            path = paths.broker_id(self.broker_id)
            try:
                _, stat = self.zk.get(path)
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    self.zk.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            except KazooException as e:
                log.warning("could not delete %s on stop: %s", path, e)
        self._registered.clear()
        self._close_client()

    close = stop

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def _close_client(self) -> None:
        self._stopping = True
        zk, self.zk = self.zk, None
        if zk is not None:
            try:
                zk.stop()
            finally:
                zk.close()

    def _ensure_chroot(self) -> None:
        root = KazooClient(hosts=self._hosts, timeout=self.session_timeout_s)
        try:
            root.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            root.close()
            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self._hosts} within {self.connect_timeout_s:g}s") from None
        try:
            if self.broker_id is None:  # an admin tool never conjures up a cluster under a mistyped chroot
                if root.retry(root.exists, self._chroot) is None:
                    raise ZooKeeperError(
                        f"ZooKeeper at {self._hosts} has no chroot {self._chroot}: no pyklog cluster there "
                        "(brokers create it on their first start)")
            else:
                root.retry(root.ensure_path, self._chroot)
        finally:
            root.stop()
            root.close()

    def _retry(self, fn, *args, **kwargs):
        """``client.retry(fn, ...)``, with an unreachable ZooKeeper turned into :class:`ZooKeeperError`."""
        zk = self.zk
        if zk is None:
            raise ZooKeeperError(f"ZkCluster for {self.zk_connect} is not started (or stopped)")
        try:
            return zk.retry(fn, *args, **kwargs)
        except RetryFailedError as e:
            raise ZooKeeperError(f"ZooKeeper at {self.zk_connect} unreachable: {e}") from None

    # ------------------------------------------------------------------ cluster id, registration

    def _get_or_create_cluster_id(self) -> str:
        while True:
            try:
                data, _ = self._retry(self.zk.get, paths.CLUSTER_ID)
            except NoNodeError:
                if self._cluster_id_check is not None:
                    self._cluster_id_check(None)  # a broker with data refuses an empty ZooKeeper
                cid = new_cluster_id()
                try:
                    self._retry(self.zk.create, paths.CLUSTER_ID, encode_cluster_id(cid), makepath=True)
                    log.info("created cluster id %s at %s", cid, paths.CLUSTER_ID)
                    return cid
                except NodeExistsError:
                    continue  # another broker won the race: read its id
            cid = decode_cluster_id(data, paths.CLUSTER_ID)
            if self._cluster_id_check is not None:
                self._cluster_id_check(cid)
            return cid

    def broker_registration(self) -> BrokerRegistration:
        """The registration this broker writes at ``/brokers/ids/<id>`` (fresh timestamp, version
        :data:`~pyklog.broker.zk.znodes.BROKER_INFO_VERSION`)."""
        return BrokerRegistration.for_listeners(self.listeners, self.host, self.port, rack=self.rack,
                                                timestamp_ms=int(time.time() * 1000))

    def registration(self) -> dict:
        """The registration as the JSON object Kafka writes (see :meth:`broker_registration`)."""
        return self.broker_registration().to_json()

    def _register(self) -> None:
        """Create our ephemeral ``/brokers/ids/<id>``.

        NodeExists held by our own session (a retried create that had succeeded) is success.  A node
        held by another session that advertises the very same endpoints is the registration of a
        crashed predecessor of this broker (a live broker cannot be listening on our address): we wait
        up to one session timeout for ZooKeeper to expire it.  Any other holder is a live broker with
        our id: :class:`BrokerIdInUseError`.
        """
        path = paths.broker_id(self.broker_id)
        data = encode_broker_registration(self.broker_registration())
        deadline = Deadline.after(self.session_timeout_s + 2.0)
        wait_for_expiry = Backoff.constant(0.25)
        while True:
            try:
                self._retry(self.zk.create, path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    held, stat = self._retry(self.zk.get, path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == self.zk.client_id[0]:
                    break
                try:
                    held_endpoints = [e.connection_string() for e in decode_broker_registration(held, path).endpoints]
                except ZooKeeperError:
                    held_endpoints = []
                same_address = sorted(held_endpoints) == sorted(self.listeners)
                if same_address and not deadline.expired():
                    log.info("%s is held by an older session (0x%x) with our endpoints; waiting for it to expire",
                             path, stat.ephemeralOwner)
                    time.sleep(min(wait_for_expiry.next(), deadline.remaining()))
                    continue
                raise BrokerIdInUseError(
                    f"broker.id {self.broker_id} is already registered in ZooKeeper ({self.zk_connect}{path}) by "
                    f"another live broker at {held_endpoints or held!r} (session 0x{stat.ephemeralOwner:x}); "
                    "each broker needs a unique broker.id") from None
        self._registered.set()
        log.info("registered broker %d at %s (session 0x%x)", self.broker_id, path, self.zk.client_id[0])

    @property
    def registered(self) -> bool:
        """True while this broker's registration node is believed to exist (False after a session loss)."""
        return self._registered.is_set()

    def wait_registered(self, timeout: float | None = None) -> bool:
        return self._registered.wait(timeout)

    @property
    def session_id(self) -> int | None:
        zk = self.zk
        return zk.client_id[0] if zk is not None and zk.client_id else None

    def _on_state(self, state) -> None:
        # Called on kazoo's connection thread: no blocking ZooKeeper calls here.
        if state == KazooState.LOST:
            self._session_lost = True
            self._registered.clear()
            if self._stopping:
                return
            log.warning("ZooKeeper session lost (%s): registration gone until a new session is up", self.zk_connect)
        elif state == KazooState.SUSPENDED:
            log.info("ZooKeeper connection suspended (%s)", self.zk_connect)
            if self.broker_id is not None and not self._stopping and not self._watchdog_running:
                self._watchdog_running = True
                zk = self.zk
                if zk is not None:
                    zk.handler.spawn(self._watch_disconnection, zk)
        elif state == KazooState.CONNECTED and self._session_lost and not self._stopping:
            self._session_lost = False
            if self.broker_id is not None and self.zk is not None:
                self.zk.handler.spawn(self._reregister)

    # while disconnected: probe the servers this often, and how many probes in a row must find
    # every answering server behind the zxid this client has seen before the broker gives up
    WATCHDOG_PROBE_S = 1.0
    WATCHDOG_LOST_PROBES = 3

    def _watch_disconnection(self, zk: KazooClient) -> None:
        """While the connection is down (a kazoo handler thread): notice a ZooKeeper that came
        back without its data, and say at WARNING, at growing intervals (5 s doubling up to 60 s),
        how long the broker has had no connection.

        A ZooKeeper server refuses a session from a client that has seen a newer zxid than its own
        ("Refusing session request ... client must try another server"), so after a restart with an
        empty data directory kazoo would retry forever.  The servers are asked for their last zxid
        (the ``srvr`` four-letter word, on ZooKeeper's default whitelist); when every server that
        answers is behind this client's last zxid on :attr:`WATCHDOG_LOST_PROBES` probes in a row,
        ``on_fatal`` is called with what happened and what to do (the broker stops, keeping its
        logs).  Without ``on_fatal`` (admin tools) it is logged at ERROR and the retry goes on."""
        waited = Deadline.never()
        warn_backoff = Backoff(5.0, multiplier=2.0, max_s=60.0, jitter=0.0)
        next_warning = warn_backoff.next()
        behind = 0

        class _StillDisconnected(Exception):
            pass

        def check() -> None:
            nonlocal behind, next_warning
            if self._stopping or self.zk is not zk or zk.connected:
                return
            seen = zk.last_zxid or 0
            zxids = self._probe_server_zxids()
            if zxids and seen and all(z < seen for z in zxids.values()):
                behind += 1
            else:
                behind = 0
            if behind >= self.WATCHDOG_LOST_PROBES:
                raise _DataLost(seen, zxids)
            if waited.elapsed() >= next_warning:
                next_warning = waited.elapsed() + warn_backoff.next()
                log.warning("no ZooKeeper connection to %s for %.0fs (kazoo keeps reconnecting; servers' "
                            "last zxids: %s)", self.zk_connect, waited.elapsed(),
                            {h: hex(z) for h, z in zxids.items()} or "no answer")
            raise _StillDisconnected()

        try:
            retry(check, deadline=Deadline.never(), backoff=Backoff.constant(self.WATCHDOG_PROBE_S),
                  retriable=lambda e: isinstance(e, _StillDisconnected), what="ZooKeeper reconnection")
            if not self._stopping and self.zk is zk and zk.connected and waited.elapsed() >= 5.0:
                log.info("ZooKeeper connection to %s back after %.0fs", self.zk_connect, waited.elapsed())
        except _DataLost as e:
            message = (f"ZooKeeper at {self.zk_connect} lost its data: every server that answers is at zxid "
                       f"{', '.join(f'{h}={hex(z)}' for h, z in sorted(e.zxids.items()))}, older than the "
                       f"{hex(e.seen)} this broker has already seen, so it refuses this broker's session for ever "
                       "(it was restarted without its data directory?). The broker's logs are kept. Restore "
                       "ZooKeeper's data directory and restart ZooKeeper, then the broker")
            self._report_fatal(message)
        finally:
            self._watchdog_running = False

    def _report_fatal(self, message: str) -> None:
        """A condition the broker cannot serve through: hand it to ``on_fatal`` once (the broker
        stops); without a handler, or after the first report, log it at ERROR."""
        if self._on_fatal is not None and not self._fatal_reported:
            self._fatal_reported = True
            self._on_fatal(message)
        else:
            log.error("%s", message)

    def _probe_server_zxids(self) -> dict[str, int]:
        """``{"host:port": last zxid}`` of the servers that answer ``srvr`` (1 s each)."""
        out = {}
        for hp in self._hosts.split(","):
            host, _, port = hp.strip().rpartition(":")
            try:
                text = four_letter_word(host or "127.0.0.1", int(port), "srvr", timeout=1.0)
            except (OSError, ValueError):
                continue
            m = re.search(r"^Zxid:\s*(0x[0-9a-fA-F]+)", text, re.MULTILINE)
            if m:
                out[hp.strip()] = int(m.group(1), 16)
        return out

    def _check_cluster_id_unchanged(self) -> None:
        """After a new session: ZooKeeper must still hold the cluster id this broker joined."""
        try:
            data, _ = self._retry(self.zk.get, paths.CLUSTER_ID)
            now = decode_cluster_id(data, paths.CLUSTER_ID)
        except NoNodeError:
            now = None
        if now != self.cluster_id:
            raise _ClusterIdChanged(now)

    def _reregister(self) -> None:
        """Register again after a new session is up (on a kazoo handler thread): retried every
        second, with no deadline, while the new session holds and the broker is not stopping.
        Each ZooKeeper call inside goes through kazoo's ``client.retry``; this loop only covers a
        registration that failed as a whole."""
        def attempt() -> None:
            if self._stopping or self._session_lost:
                return
            self._check_cluster_id_unchanged()
            self._register()
            self._notify()

        def retriable(e: BaseException) -> bool:
            return (isinstance(e, (ZooKeeperError, KazooException))
                    and not self._stopping and not self._session_lost)

        def on_retry(e: BaseException, attempts: int, delay_s: float) -> None:
            log.warning("re-registration of broker %s failed, retrying: %s", self.broker_id, e)

        try:
            retry(attempt, deadline=Deadline.never(), backoff=Backoff.constant(1.0), retriable=retriable,
                  what=f"re-registration of broker {self.broker_id}", on_retry=on_retry)
        except BrokerIdInUseError as e:
            log.error("cannot register again after a session expiry: %s", e)
        except _ClusterIdChanged as e:
            found = f"cluster id {e.now}" if e.now else "no cluster id (an empty ZooKeeper)"
            message = (f"after a new ZooKeeper session, {self.zk_connect} holds {found}, not this broker's cluster "
                       f"id {self.cluster_id}: ZooKeeper lost its data or was replaced. The broker does not "
                       "register there; its logs are kept. Restore ZooKeeper's data directory, then restart "
                       "the broker")
            self._report_fatal(message)
        except (ZooKeeperError, KazooException) as e:  # stopping, or the new session was lost too
            log.info("re-registration of broker %s abandoned: %s", self.broker_id, e)

    # ------------------------------------------------------------------ watches and cache

    def add_listener(self, fn: Callable[[], None]) -> None:
        """Call ``fn()`` (on kazoo's callback thread) whenever live brokers or topics change."""
        with self._lock:
            self._listeners.append(fn)

    def remove_listener(self, fn: Callable[[], None]) -> None:
        with self._lock:
            if fn in self._listeners:
                self._listeners.remove(fn)

    def _notify(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for fn in listeners:
            try:
                fn()
            except Exception:
                log.exception("cluster listener %r failed", fn)

    @_watch_callback
    def _on_broker_ids(self, children) -> bool | None:
        try:
            brokers = self._read_brokers(children)
        except (PyklogError, KazooException) as e:
            log.warning("could not read broker registrations: %s", e)
            return None
        with self._lock:
            changed = brokers != self._brokers
            self._brokers = brokers
        if changed:
            log.info("live brokers: %s", sorted(brokers))
            self._notify()
            if self.broker_id is not None and self.controller_id == self.broker_id:
                self._process_delete_requests()
        return None

    def _read_brokers(self, children) -> dict[int, tuple[str, int]]:
        def read():
            pending = [(c, self.zk.get_async(f"{paths.BROKER_IDS}/{c}")) for c in children if c.isdigit()]
            out = {}
            for c, res in pending:
                try:
                    data, _ = res.get()
                except NoNodeError:
                    continue
                try:
                    path = paths.broker_id(int(c))
                    out[int(c)] = decode_broker_registration(data, path).address(path=path)
                except (ZooKeeperError, ValueError) as e:
                    log.warning("ignoring unreadable broker registration %s: %s", c, e)
            return out

        return self._retry(read)

    #: the topic-names watch re-reads every cached topic's node (to see one deleted and re-created
    #: between two watch events) at most this often; otherwise it reads only the new names
    FULL_TOPIC_REFRESH_S = 30.0

    @_watch_callback
    def _on_topic_names(self, children) -> bool | None:
        """kazoo's callback thread, on every change of ``/brokers/topics``' children.  Reads only the
        topics that appeared (Kafka's controller does the same on a TopicChange): creating or
        deleting one topic among N costs O(1) ZooKeeper reads, not N (a CreateTopics of 100 topics on
        a broker holding ~900 used to re-read every topic 100 times).  Every
        :attr:`FULL_TOPIC_REFRESH_S` seconds one event re-reads them all (a topic re-created under
        the same name elsewhere between two events changes its czxid)."""
        try:
            full = time.monotonic() - self._last_full_topic_refresh >= self.FULL_TOPIC_REFRESH_S
            changed = self._refresh_topics(children, only_new=not full)
            if full:
                self._last_full_topic_refresh = time.monotonic()
        except (PyklogError, KazooException) as e:
            log.warning("could not read the topic registry: %s", e)
            return None
        if changed:
            self._notify()
        return None

    def _refresh_topics(self, names, *, only_new: bool = False) -> bool:
        """Re-read the topics whose registry node is new or changed (``only_new``: the new ones only,
        cached entries of names still present are kept); True if the cache changed."""
        with self._lock:
            cached = dict(self._topics)

        def read():
            # a data watch on each topic node read: CreatePartitions (or Kafka's tools) rewrite its
            # assignment in place, which the children watch of /brokers/topics does not see
            out = {}
            todo = names
            if only_new:
                out = {n: cached[n] for n in names if n in cached}
                todo = [n for n in names if n not in cached]
            pending = [(n, self.zk.get_async(paths.topic(n), watch=self._on_topic_data)) for n in todo]
            for n, res in pending:
                try:
                    data, stat = res.get()
                except NoNodeError:
                    continue
                old = cached.get(n)
                if old is not None and old.czxid == stat.czxid and old.mzxid == stat.mzxid:
                    out[n] = old
                    continue
                entry = self._read_topic_entry(n, data, stat)
                if entry is not None:
                    out[n] = entry
            return out

        topics = self._retry(read)
        with self._lock:
            changed = set(topics) != set(self._topics) or any(
                topics[n] is not self._topics.get(n) for n in topics)
            for name in list(self._configs):
                old = self._topics.get(name)
                if name not in topics or (old is not None and old.czxid != topics[name].czxid):
                    del self._configs[name]  # deleted or re-created: read its config again
            self._topics = {n: self._with_newest_states(n, e) for n, e in topics.items()}
            self._newest_states = {k: v for k, v in self._newest_states.items() if k[0] in topics}
        return changed

    def _on_topic_data(self, event) -> None:
        """Data watch of ``/brokers/topics/<topic>`` (kazoo's callback thread): the assignment changed
        (partitions added); re-read that topic on another kazoo thread and tell the listeners.
        A deletion is left to the children watch, but the node is looked at again: a topic created
        again under the same name at once (the children watch may see no change of names) is read
        now, with its data watch, instead of at the next full refresh.  One-shot:
        :meth:`_reload_topic` re-arms it."""
        if self._stopping or self.zk is None or event.path is None:
            return
        name = event.path.rsplit("/", 1)[-1]
        self.zk.handler.spawn(self._reload_topic, name)

    def _reload_topic(self, name: str) -> bool:
        """Re-read one topic's assignment and partition states into the cache (re-arming its data
        watch); True if the cached entry changed, and then the listeners are told.  Any thread."""
        if self._stopping or self.zk is None:
            return False
        try:
            data, stat = self._retry(self.zk.get, paths.topic(name), watch=self._on_topic_data)
        except NoNodeError:
            return False
        except (PyklogError, KazooException) as e:
            log.warning("could not re-read topic %s: %s", name, e)
            return False
        entry = self._read_topic_entry(name, data, stat)
        if entry is None:
            return False
        with self._lock:
            old = self._topics.get(name)
            if old is not None and old.czxid == entry.czxid and old.mzxid == entry.mzxid \
                    and old.states.keys() == entry.states.keys():
                return False
            if old is not None and old.czxid != entry.czxid:
                self._configs.pop(name, None)  # created again: read its config again
            self._topics[name] = self._with_newest_states(name, entry)
        self._notify()
        return True

    def _read_topic_entry(self, name: str, data: bytes, stat) -> _TopicEntry | None:
        path = paths.topic(name)
        try:
            replicas = decode_topic_assignment(data, path)
        except ZooKeeperError as e:
            log.warning("ignoring topic %s with an unreadable assignment: %s", name, e)
            return None
        watch = self._on_partition_state_data if self.broker_id is not None else None
        pending = [(p, self.zk.get_async(paths.partition_state(name, p), watch=watch)) for p in replicas]
        states = {}
        for p, res in pending:
            try:
                sdata, sstat = res.get()
                s = decode_partition_state(sdata, paths.partition_state(name, p))
                states[p] = (s.leader, s.leader_epoch, list(s.isr))
                self._note_state(name, p, sstat, states[p])
            except NoNodeError:
                # Assignment written without state (e.g. by another tool): the first replica leads.
                first = replicas[p][0] if replicas[p] else -1
                states[p] = (first, 0, [first] if first >= 0 else [])
            except ZooKeeperError as e:
                log.warning("unreadable partition state %s-%d: %s", name, p, e)
                states[p] = (-1, 0, [])
        try:
            topic_id = decode_topic_id(data, path)
        except ZooKeeperError as e:
            log.warning("topic %s: %s", name, e)
            topic_id = None
        if topic_id is None and self.broker_id is not None:
            topic_id = self._assign_topic_id(name, data, stat)
        return _TopicEntry(stat.czxid, stat.mzxid, replicas, states, topic_id)

    def _assign_topic_id(self, name: str, data: bytes, stat):
        """Give a topic created without an id (by an older pyklog or Kafka before 2.8) one, as
        Kafka's controller does on first sight: a conditional write of ``/brokers/topics/<t>``, so
        when several brokers race the first write wins and the others read it back.  Runs on the
        registry refresh (a kazoo or caller thread), no lock held.  Returns the id or None."""
        path = paths.topic(name)
        tid = new_topic_id()
        try:
            self.zk.set(path, with_topic_id(data, path, tid), version=stat.version)
            log.info("assigned topic id %s to topic %s", tid, name)
            return tid
        except BadVersionError:
            try:
                return decode_topic_id(self.zk.get(path)[0], path)
            except (NoNodeError, ZooKeeperError):
                return None
        except (NoNodeError, ZooKeeperError, KazooException) as e:
            log.warning("could not assign a topic id to topic %s: %s", name, e)
            return None

    def topic_id(self, name: str) -> uuid.UUID | None:
        """The topic's id (KIP-516) from the registry cache; None if unknown or it has none."""
        with self._lock:
            entry = self._topics.get(name)
        return None if entry is None else entry.topic_id

    def topic_name_by_id(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic whose id is ``topic_id`` (from the registry cache), None if none."""
        with self._lock:
            entries = list(self._topics.items())
        for name, entry in entries:
            if entry.topic_id == topic_id:
                return name
        return None

    def refresh(self) -> None:
        """Re-read live brokers and the topic registry now (watches do this on every change)."""
        brokers = self._read_brokers(self._retry(self.zk.get_children, paths.BROKER_IDS))
        with self._lock:
            self._brokers = brokers
        self._refresh_topics(self._retry(self.zk.get_children, paths.BROKER_TOPICS))

    # ------------------------------------------------------------------ reads

    def live_brokers(self) -> dict[int, tuple[str, int]]:
        """``{broker_id: (host, port)}`` of the registered brokers."""
        with self._lock:
            return dict(self._brokers)

    @property
    def controller_id(self) -> int:
        """The broker holding ``/controller`` as the broker's controller (pyklog.broker.controller)
        last saw it and it is live; else (no controller known yet, an admin client) the lowest live
        broker id; -1 if no broker is live."""
        with self._lock:
            cid = getattr(self, "_active_controller_id", None)
            if cid is not None and cid in self._brokers:
                return cid
            return min(self._brokers) if self._brokers else -1

    def set_controller_id(self, broker_id: int | None) -> None:
        """Called by the broker's controller (a kazoo or controller thread) with the broker holding
        ``/controller`` (None: nobody).  The newly elected controller carries out pending topic
        deletion requests."""
        with self._lock:
            before = getattr(self, "_active_controller_id", None)
            self._active_controller_id = broker_id
        if broker_id is not None and broker_id != before and broker_id == self.broker_id \
                and not self._stopping and self.zk is not None:
            self.zk.handler.spawn(self._process_delete_requests)

    @staticmethod
    def _partition_states(entry: _TopicEntry, live) -> dict[int, PartitionState]:
        parts = {}
        for p, replicas in sorted(entry.replicas.items()):
            leader, epoch, isr = entry.states.get(p, (-1, 0, []))
            parts[p] = PartitionState(leader if leader in live else -1, epoch, list(isr), list(replicas))
        return parts

    def topics(self) -> dict[str, dict[int, PartitionState]]:
        """``{topic: {partition: PartitionState}}``; leader -1 where the leader broker is not live."""
        with self._lock:
            live = set(self._brokers)
            entries = dict(self._topics)
        return {name: self._partition_states(e, live) for name, e in entries.items()}

    def topic(self, name: str, *, refresh_if_missing: bool = True) -> dict[int, PartitionState] | None:
        """One topic's partitions, read from ZooKeeper if the cache does not have it yet (else None)."""
        with self._lock:
            entry = self._topics.get(name)
            live = set(self._brokers)
        if entry is None and refresh_if_missing:
            try:
                validate_topic_name(name)  # never build a ZooKeeper path from an illegal name
            except InvalidTopicError:
                return None
            try:
                data, stat = self._retry(self.zk.get, paths.topic(name))
            except NoNodeError:
                return None
            fresh = self._read_topic_entry(name, data, stat)
            if fresh is None:
                return None
            with self._lock:
                entry = self._topics.setdefault(name, self._with_newest_states(name, fresh))
        return None if entry is None else self._partition_states(entry, live)

    def topic_config(self, topic: str) -> dict[str, str]:
        """The topic-level config overrides stored at ``/config/topics/<topic>`` (``{}`` if none)."""
        with self._lock:
            cached = self._configs.get(topic)
            known = topic in self._topics
        if cached is not None:
            return dict(cached)
        validate_topic_name(topic)
        try:
            data, _ = self._retry(self.zk.get, paths.topic_config(topic))
            config = decode_topic_config(data, paths.topic_config(topic))
        except NoNodeError:
            config = {}
        if known:
            with self._lock:
                self._configs[topic] = config
        return dict(config)

    def partitions_hosted_by(self, broker_id: int) -> set[tuple[str, int]]:
        """Partitions that have ``broker_id`` among their replicas (leader or follower)."""
        with self._lock:
            entries = dict(self._topics)
        return {(name, p) for name, e in entries.items() for p, r in e.replicas.items() if broker_id in r}

    def partition_states_as_written(self, topic: str) -> dict[int, PartitionState] | None:
        """One topic's partitions from the cache with the state znodes' leaders as written (not -1
        for a leader that is not live, unlike :meth:`topic`); None if the topic is not cached.
        What a replica follows: a dead leader is still the leader until the controller says otherwise."""
        with self._lock:
            entry = self._topics.get(topic)
        if entry is None:
            return None
        return {p: PartitionState(*entry.states.get(p, (-1, 0, [])), list(r)) for p, r in sorted(entry.replicas.items())}

    def partition_replicas(self, topic: str, partition: int) -> list[int]:
        """The assigned replicas of a partition from the cache ([] if unknown)."""
        with self._lock:
            entry = self._topics.get(topic)
        return list(entry.replicas.get(partition, ())) if entry is not None else []

    def partitions_led_by(self, broker_id: int) -> set[tuple[str, int]]:
        """Partitions whose (fixed) leader is ``broker_id``."""
        with self._lock:
            entries = dict(self._topics)
        return {(name, p) for name, e in entries.items() for p, (leader, _, _) in e.states.items()
                if leader == broker_id}

    # ------------------------------------------------------------------ topic administration

    def create_topic(self, name: str, num_partitions: int, replication_factor: int = 1,
                     configs: dict | None = None, validate_only: bool = False, *,
                     replica_assignment: dict[int, list[int]] | None = None,
                     rack_aware: bool = True) -> dict[int, list[int]]:
        """Create a topic spread over the live brokers; return its assignment ``{partition: [replicas]}``.
        Rack-aware (Kafka's ``RackAwareMode.Enforced``, :func:`~pyklog.broker.zk.topics.assign_replicas`)
        when every live broker registered a ``broker.rack``, unless ``rack_aware`` is false
        (``--disable-rack-aware``); InvalidReplicaAssignmentError when only some did.

        Raises InvalidTopicError (illegal name, or a name colliding with an existing topic by
        ``.``/``_``), TopicAlreadyExistsError, InvalidPartitionsError, InvalidReplicationFactorError
        (more replicas than live brokers), InvalidConfigError, InvalidReplicaAssignmentError (a
        ``replica_assignment`` {partition: [broker ids]} with gaps, duplicates, uneven replica counts
        or brokers that are not live).  Nothing is written if ``validate_only``.  All nodes are
        created in one multi-op; the leader of each partition is its first replica.
        """
        existing = self._retry(self.zk.get_children, paths.BROKER_TOPICS)
        live = sorted(int(c) for c in self._retry(self.zk.get_children, paths.BROKER_IDS) if c.isdigit())
        assignment, config = self._plan_topic(name, num_partitions, replication_factor, configs,
                                              replica_assignment, existing, live,
                                              racks=lambda: placement_racks(self.broker_racks(live), rack_aware))
        if validate_only:
            return assignment
        self._write_topic(name, assignment, config)
        # Make the new topic visible to this process at once (the watch follows).
        self.topic(name, refresh_if_missing=True)
        with self._lock:
            self._configs[name] = dict(config)
        log.info("created topic %s with %d partition(s): %s", name, len(assignment), assignment)
        return assignment

    def create_topics(self, specs: list[dict], validate_only: bool = False) -> dict[str, object]:
        """CreateTopics of many topics at once: ``specs`` are dicts with ``name``, ``num_partitions``,
        ``replication_factor``, ``configs`` and optionally ``replica_assignment`` (as
        :meth:`create_topic`).  Returns ``{name: assignment or the PyklogError refusing it}``.

        Request handler thread.  The ZooKeeper work is batched: the topic names, live brokers,
        stale config nodes and deletion records are read once for the whole batch, every valid
        topic is written in ONE multi-op (Kafka's controller also writes a batch of topics
        together), and the cache learns each new topic once.  A multi that fails (a topic created
        meanwhile elsewhere) is retried topic by topic so each topic gets its own answer."""
        existing = set(self._retry(self.zk.get_children, paths.BROKER_TOPICS))
        live = sorted(int(c) for c in self._retry(self.zk.get_children, paths.BROKER_IDS) if c.isdigit())
        planned: dict[str, tuple] = {}
        out: dict[str, object] = {}
        taken = set(existing)
        rack_map: list = []  # the live brokers' racks, read once when a topic needs placing

        def racks():
            if not rack_map:
                rack_map.append(self.broker_racks(live))
            return placement_racks(rack_map[0])

        for spec in specs:
            name = spec["name"]
            try:
                assignment, config = self._plan_topic(
                    name, spec["num_partitions"], spec["replication_factor"], spec.get("configs"),
                    spec.get("replica_assignment"), taken, live, racks=racks)
            except PyklogError as e:
                out[name] = e
                continue
            planned[name] = (assignment, config)
            taken.add(name)
            out[name] = assignment
        if validate_only or not planned:
            return out
        try:
            stale_configs = set(self._retry(self.zk.get_children, paths.CONFIG_TOPICS))
        except NoNodeError:
            stale_configs = set()
        try:
            deleted = set(self._retry(self.zk.get_children, paths.ADMIN_DELETED_TOPICS))
        except NoNodeError:
            deleted = set()

        def write(chunk):
            t = self.zk.transaction()
            for name in chunk:
                assignment, config = planned[name]
                self._add_topic_ops(t, name, assignment, config, name in stale_configs, name in deleted)
            return t.commit()

        for chunk in _chunks(planned, lambda n: 4 + 2 * len(planned[n][0])):
            results = self._retry(write, chunk)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failures:
                log.info("creating %d topics in one multi-op failed (%r); creating them one by one",
                         len(chunk), failures[0])
                for name in chunk:
                    try:
                        self._write_topic(name, *planned[name])
                    except PyklogError as e:
                        out[name] = e
        for name, (assignment, config) in planned.items():
            if isinstance(out[name], PyklogError):
                continue
            self.topic(name, refresh_if_missing=True)
            with self._lock:
                self._configs[name] = dict(config)
            log.info("created topic %s with %d partition(s): %s", name, len(assignment), assignment)
        return out

    def _plan_topic(self, name, num_partitions, replication_factor, configs, replica_assignment,
                    existing, live, racks=None) -> tuple[dict[int, list[int]], dict[str, str]]:
        """Validate one topic against ``existing`` topic names and ``live`` broker ids; return its
        (assignment, config).  Raises as :meth:`create_topic`."""
        validate_topic_name(name)
        config = validate_topic_configs(configs)
        if name in existing:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        clash = collides(name, existing)
        if clash:
            raise InvalidTopicError(
                f"topic {name!r} collides with existing topic(s) {clash} ('.' and '_' are the same in metric names)")
        if replica_assignment is not None:
            assignment = {int(p): [int(b) for b in r] for p, r in replica_assignment.items()}
            if not assignment or sorted(assignment) != list(range(len(assignment))):
                raise InvalidReplicaAssignmentError(
                    f"replica assignment must cover partitions 0..n-1, got partitions {sorted(assignment)}")
            if any(not r or len(set(r)) != len(r) for r in assignment.values()):
                raise InvalidReplicaAssignmentError(
                    f"replica assignment has empty or duplicate replica lists: {assignment}")
            if len({len(r) for r in assignment.values()}) != 1:
                raise InvalidReplicaAssignmentError(
                    f"all partitions must have the same number of replicas: {assignment}")
            unknown = sorted({b for r in assignment.values() for b in r} - set(live))
            if unknown:
                raise InvalidReplicaAssignmentError(
                    f"unknown broker(s) {unknown} in replica assignment (live brokers {live})")
        else:
            assignment = assign_replicas(live, num_partitions, replication_factor,
                                         racks=racks() if racks is not None else None)
        return assignment, config

    def broker_racks(self, ids) -> dict[int, str | None]:
        """``{broker id: broker.rack or None}`` of the registrations of ``ids`` read from ZooKeeper
        now (a broker gone meanwhile is left out).  Any thread but a kazoo handler thread."""
        def read():
            pending = [(b, self.zk.get_async(paths.broker_id(int(b)))) for b in ids]
            out = {}
            for b, res in pending:
                try:
                    data, _ = res.get()
                except NoNodeError:
                    continue
                try:
                    out[int(b)] = decode_broker_registration(data, paths.broker_id(int(b))).rack or None
                except (ZooKeeperError, ValueError) as e:
                    log.warning("ignoring unreadable broker registration %s: %s", b, e)
            return out

        return self._retry(read)

    def _write_topic(self, name: str, assignment: dict[int, list[int]], config: dict[str, str]) -> None:
        def write():
            t = self.zk.transaction()
            self._add_topic_ops(t, name, assignment, config,
                                bool(self.zk.exists(paths.topic_config(name))),
                                bool(self.zk.exists(paths.deleted_topic_record(name))))
            return t.commit()

        results = self._retry(write)
        failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
        if failures:
            if any(isinstance(r, NodeExistsError) for r in failures):
                raise TopicAlreadyExistsError(f"topic {name!r} already exists")
            raise ZooKeeperError(f"creating topic {name!r} in ZooKeeper failed: {failures[0]!r}")

    @staticmethod
    def _add_topic_ops(t, name: str, assignment: dict[int, list[int]], config: dict[str, str],
                       stale_config: bool, deletion_recorded: bool) -> None:
        """Add one topic's nodes to the multi-op ``t``: its config (over a stale config node of a
        deleted topic), assignment, partition states; removes its deletion record (the name is in
        use again)."""
        config_data = encode_topic_config(config)
        if stale_config:
            t.set_data(paths.topic_config(name), config_data)
        else:
            t.create(paths.topic_config(name), config_data)
        t.create(paths.topic(name), encode_topic_assignment(assignment, new_topic_id()))
        if deletion_recorded:
            t.delete(paths.deleted_topic_record(name))
        t.create(paths.topic_partitions(name), b"")
        for p, replicas in sorted(assignment.items()):
            t.create(paths.partition(name, p), b"")
            t.create(paths.partition_state(name, p), encode_partition_state(
                LeaderAndIsr(replicas[0], 0, tuple(replicas), CONTROLLER_EPOCH)))

    def create_partitions(self, name: str, count: int, assignments: list | None = None,
                          validate_only: bool = False) -> dict[int, list[int]]:
        """Grow a topic to ``count`` partitions; return the new partitions' assignment.

        Kafka's ``AdminZkClient.createPartitions`` (ZkAdminManager): only an increase is allowed
        (InvalidPartitionsError naming the current and requested counts); ``assignments`` (one
        list of broker ids per new partition) must have as many entries as partitions added, the
        topic's replication factor, no duplicates and only live brokers
        (InvalidReplicaAssignmentError); without them the new replicas are placed as at creation,
        continuing the topic's layout (start index = the position of partition 0's leader among
        the sorted live brokers, Kafka's ``fixedStartIndex``).  UnknownTopicOrPartitionError if the
        topic does not exist.  Nothing is written if ``validate_only``.

        One multi-op (checked against the topic node's version, retried after a concurrent change)
        rewrites ``/brokers/topics/<topic>`` and creates each new partition's ``state`` node (its
        first replica leads, epoch 0): pyklog has no controller, so the writer does what Kafka's
        controller does on the partition-modification event.  Every broker's data watch then
        re-reads the topic and its leaders create the new logs.  Thread-safe.
        """
        validate_topic_name(name)
        for _attempt in range(5):
            try:
                data, stat = self._retry(self.zk.get, paths.topic(name))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
            existing = decode_topic_assignment(data, paths.topic(name))
            moving = _reassigning_partitions(data)
            if moving:
                # Kafka's ZkAdminManager refuses too: the rewrite would drop adding/removing_replicas
                raise ReassignmentInProgressError(
                    f"a partition reassignment is in progress for topic {name!r} (partitions "
                    f"{', '.join(str(p) for p in moving)}); add partitions once it is complete or cancelled")
            old = len(existing)
            if count < old:
                raise InvalidPartitionsError(
                    f"topic {name!r} currently has {old} partitions, which is higher than the requested {count}")
            if count == old:
                raise InvalidPartitionsError(f"topic {name!r} already has {old} partitions")
            rf = len(existing[0]) if existing.get(0) else 1
            live = sorted(int(c) for c in self._retry(self.zk.get_children, paths.BROKER_IDS) if c.isdigit())
            added = count - old
            if assignments is not None:
                if len(assignments) != added:
                    raise InvalidReplicaAssignmentError(
                        f"increasing the number of partitions of {name!r} by {added} but "
                        f"{len(assignments)} assignments provided")
                new = {}
                for i, brokers in enumerate(assignments):
                    brokers = [int(b) for b in brokers]
                    p = old + i
                    if len(set(brokers)) != len(brokers):
                        raise InvalidReplicaAssignmentError(
                            f"duplicate brokers not allowed in the replica assignment of partition {p}: {brokers}")
                    if len(brokers) != rf:
                        raise InvalidReplicaAssignmentError(
                            f"inconsistent replication factor: partition 0 of {name!r} has {rf} replica(s), "
                            f"the assignment of partition {p} has {len(brokers)}")
                    unknown = sorted(set(brokers) - set(live))
                    if unknown:
                        raise InvalidReplicaAssignmentError(
                            f"unknown broker(s) {unknown} in the replica assignment of partition {p} "
                            f"(live brokers {live})")
                    new[p] = brokers
            else:
                if not live:
                    raise InvalidReplicationFactorError(f"no live brokers to place new partitions of {name!r}")
                leader0 = existing[0][0] if existing.get(0) else live[0]
                start = next((i for i, b in enumerate(live) if b >= leader0), 0)
                full = assign_replicas(live, count, rf, start_index=start, replica_shift=start,
                                       racks=placement_racks(self.broker_racks(live)))
                new = {p: full[p] for p in range(old, count)}
            if validate_only:
                return new
            assignment = dict(existing)
            assignment.update(new)
            try:  # the topic keeps its id (KIP-516): clients would take a new one for a re-created topic
                topic_id = decode_topic_id(data, paths.topic(name))
            except ZooKeeperError:
                topic_id = None

            def write():
                t = self.zk.transaction()
                t.check(paths.topic(name), stat.version)
                t.set_data(paths.topic(name), encode_topic_assignment(assignment, topic_id))
                for p, replicas in sorted(new.items()):
                    if self.zk.exists(paths.partition(name, p)) is None:
                        t.create(paths.partition(name, p), b"")
                    t.create(paths.partition_state(name, p), encode_partition_state(
                        LeaderAndIsr(replicas[0], 0, tuple(replicas), CONTROLLER_EPOCH)))
                return t.commit()

            results = self._retry(write)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                log.info("added partitions %d..%d to topic %s: %s", old, count - 1, name, new)
                self._reload_topic(name)  # this process sees them at once; other brokers by their watch
                return new
            if not any(isinstance(r, (BadVersionError, NodeExistsError, NoNodeError)) for r in failures):
                raise ZooKeeperError(f"adding partitions to topic {name!r} in ZooKeeper failed: {failures[0]!r}")
            # the topic changed under us (another CreatePartitions): read it again
        raise ZooKeeperError(f"adding partitions to topic {name!r}: its assignment kept changing")

    def delete_topic(self, name: str) -> None:
        """Delete the topic's registry nodes and its config (one multi-op).  UnknownTopicOrPartitionError
        if it does not exist.  Brokers delete their local logs from their listeners."""
        validate_topic_name(name)
        for attempt in range(5):
            try:
                tree = self._subtree(paths.topic(name))
            except NoNodeError:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None

            def delete():
                t = self.zk.transaction()
                for p in tree:
                    t.delete(p)
                if self.zk.exists(paths.topic_config(name)):
                    t.delete(paths.topic_config(name))
                if self.zk.exists(paths.delete_topic_request(name)):
                    t.delete(paths.delete_topic_request(name))
                # the record that lets every broker delete its logs of this topic (see paths)
                if self.zk.exists(paths.ADMIN_DELETED_TOPICS) is None:
                    self.zk.ensure_path(paths.ADMIN_DELETED_TOPICS)
                if self.zk.exists(paths.deleted_topic_record(name)) is None:
                    t.create(paths.deleted_topic_record(name), b"")
                return t.commit()

            results = self._retry(delete)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if not failures:
                with self._lock:
                    self._topics.pop(name, None)
                    self._configs.pop(name, None)
                log.info("deleted topic %s", name)
                self._notify()
                return
            if not any(isinstance(r, (NotEmptyError, NoNodeError)) for r in failures):
                raise ZooKeeperError(f"deleting topic {name!r} in ZooKeeper failed: {failures[0]!r}")
            # The tree changed under us (a concurrent create/delete): look again.
        raise ZooKeeperError(f"deleting topic {name!r}: its nodes kept changing")

    def delete_topics(self, names: list[str]) -> dict[str, PyklogError | None]:
        """DeleteTopics of many topics at once; ``{name: None (deleted) or the error}``.

        Request handler thread.  Reads each topic's subtree, then deletes every found topic in ONE
        multi-op per :data:`MAX_OPS_PER_MULTI` operations (with its config, deletion request and a
        deletion record, as :meth:`delete_topic`), updates the cache and notifies the listeners
        once.  A multi that fails (a topic changed meanwhile) is retried topic by topic."""
        out: dict[str, PyklogError | None] = {}
        trees: dict[str, list[str]] = {}
        for name in dict.fromkeys(names):
            try:
                validate_topic_name(name)
                trees[name] = self._subtree(paths.topic(name))
            except NoNodeError:
                out[name] = UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            except PyklogError as e:
                out[name] = e
        if not trees:
            return out

        def children(path):
            try:
                return set(self._retry(self.zk.get_children, path))
            except NoNodeError:
                return set()

        configs, requests = children(paths.CONFIG_TOPICS), children(paths.ADMIN_DELETE_TOPICS)
        if self._retry(self.zk.exists, paths.ADMIN_DELETED_TOPICS) is None:
            self._retry(self.zk.ensure_path, paths.ADMIN_DELETED_TOPICS)
        recorded = children(paths.ADMIN_DELETED_TOPICS)

        def delete(chunk):
            t = self.zk.transaction()
            for name in chunk:
                for p in trees[name]:
                    t.delete(p)
                if name in configs:
                    t.delete(paths.topic_config(name))
                if name in requests:
                    t.delete(paths.delete_topic_request(name))
                if name not in recorded:
                    t.create(paths.deleted_topic_record(name), b"")
            return t.commit()

        for chunk in _chunks(trees, lambda n: len(trees[n]) + 3):
            results = self._retry(delete, chunk)
            failures = [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]
            if failures:
                log.info("deleting %d topics in one multi-op failed (%r); deleting them one by one",
                         len(chunk), failures[0])
                for name in chunk:
                    try:
                        self.delete_topic(name)
                        out[name] = None
                    except PyklogError as e:
                        out[name] = e
                continue
            with self._lock:
                for name in chunk:
                    self._topics.pop(name, None)
                    self._configs.pop(name, None)
            for name in chunk:
                out[name] = None
                log.info("deleted topic %s", name)
        self._notify()
        return out

    def topic_deletion_recorded(self, name: str) -> bool:
        """True if ``name`` was deleted by request (DeleteTopics, ``pyklog-topics --delete``,
        ``/admin/delete_topics``) and not created again since: only then may a broker delete its
        local logs of a topic missing from the registry.  A topic whose znodes vanished otherwise
        (ZooKeeper restarted empty, nodes removed by hand) has no record."""
        validate_topic_name(name)
        return self._retry(self.zk.exists, paths.deleted_topic_record(name)) is not None

    def _subtree(self, root: str) -> list[str]:
        """Every node under ``root`` and ``root`` itself, children before parents."""
        out: list[str] = []

        def walk(path):
            for c in self._retry(self.zk.get_children, path):
                walk(f"{path}/{c}")
            out.append(path)

        walk(root)
        return out

    @_watch_callback
    def _on_delete_requests(self, children) -> bool | None:
        if children and self.controller_id == self.broker_id:
            self.zk.handler.spawn(self._process_delete_requests)
        return None

    def _process_delete_requests(self) -> None:
        """Carry out ``/admin/delete_topics/<topic>`` requests (only on the controller)."""
        try:
            requests = self._retry(self.zk.get_children, paths.ADMIN_DELETE_TOPICS)
        except (PyklogError, KazooException) as e:
            log.warning("could not read deletion requests: %s", e)
            return
        for name in requests:
            try:
                self.delete_topic(name)
            except (UnknownTopicOrPartitionError, InvalidTopicError):
                try:
                    self._retry(self.zk.delete, paths.delete_topic_request(name))
                except NoNodeError:
                    pass
            except (PyklogError, KazooException) as e:
                log.warning("deletion request for topic %s failed: %s", name, e)

    # ------------------------------------------------------------------ ZooKeeper consumer groups (expiry)

    def zookeeper_consumer_groups(self) -> list[str]:
        """Groups under ``/consumers`` (the ZooKeeper consumers' groups, offsets.storage=zookeeper)."""
        try:
            return sorted(self._retry(self.zk.get_children, paths.CONSUMERS))
        except NoNodeError:
            return []

    def delete_expired_zookeeper_group(self, group: str, now_ms: int, retention_ms: int) -> bool:
        """Delete ``/consumers/[group]`` when it has no registered member (``ids`` has no child) and
        no node under it was created or changed within ``retention_ms`` (offsets, owners, fences:
        their ``mtime``); True if it was deleted.

        Kafka's ZooKeeper consumers had no offset expiry; pyklog applies the broker's
        ``offsets.retention.minutes`` to them as well, so groups of finished queries do not pile up.
        One multi-op deletes the subtree, children first, each offset node at the version read: a
        member registering or a commit landing meanwhile makes it fail (NotEmpty / BadVersion) and
        the group is kept.  Runs on the group coordinator's scheduler thread of the controller."""
        try:
            if self._retry(self.zk.get_children, paths.consumer_ids(group)):
                return False  # a registered member: the group is alive
        except NoNodeError:
            pass
        try:
            nodes, newest = self._read_subtree(paths.consumer_group(group))
        except NoNodeError:
            return False  # changed under us: look again at the next check
        if now_ms - newest < retention_ms:
            return False
        failures = self._delete_subtree_at_versions(nodes)
        if failures:
            log.info("ZooKeeper group %s changed while expiring it (%r): kept", group, failures[0])
            return False
        log.info("deleted ZooKeeper consumer group %s: no member and nothing written for %d ms (%d nodes)",
                 group, now_ms - newest, len(nodes))
        return True

    def _read_subtree(self, root: str) -> tuple[list[tuple[str, int]], int]:
        """The nodes under ``root`` (itself included) as ``(path, version)``, children before their
        parent, and the newest mtime/ctime among them.  NoNodeError if a node goes away meanwhile."""
        nodes: list[tuple[str, int]] = []
        newest = 0

        def walk(path: str) -> None:
            nonlocal newest
            _, stat = self._retry(self.zk.get, path)
            newest = max(newest, stat.mtime, stat.ctime)
            for c in self._retry(self.zk.get_children, path):
                walk(f"{path}/{c}")
            nodes.append((path, stat.version))

        walk(root)
        return nodes, newest

    def _delete_subtree_at_versions(self, nodes: list[tuple[str, int]]) -> list[Exception]:
        """Delete ``nodes`` (from :meth:`_read_subtree`) in one multi-op, each at the version read;
        return the failures (empty: all deleted; otherwise nothing was, as a multi-op is atomic)."""
        def delete():
            t = self.zk.transaction()
            for path, version in nodes:
                t.delete(path, version=version)
            return t.commit()

        results = self._retry(delete)
        return [r for r in results if isinstance(r, Exception) and not isinstance(r, RolledBackError)]

    def delete_zookeeper_group(self, group: str) -> bool:
        """DeleteGroups of a ZooKeeper consumer group: delete ``/consumers/[group]`` when no member is
        registered; False if there is no such group.  NonEmptyGroupError while ``ids`` has a child.

        One multi-op deletes the subtree, children first, each node at the version read: a member
        registering, an owner claimed or an offset committed meanwhile makes it fail (NotEmpty /
        BadVersion / NoNode) and nothing is deleted; it is read and tried again a few times, then
        NonEmptyGroupError (a member) or the ZooKeeper error is raised.  Request handler thread."""
        from pyklog.broker.errors import NonEmptyGroupError

        if not group or "/" in group or group in (".", ".."):
            return False
        root = paths.consumer_group(group)
        for _ in range(5):
            try:
                members = self._retry(self.zk.get_children, paths.consumer_ids(group))
            except NoNodeError:
                members = []
            if members:
                raise NonEmptyGroupError(f"ZooKeeper consumer group {group!r} has {len(members)} registered "
                                         f"member(s) ({', '.join(sorted(members)[:5])}); stop them before deleting it")
            try:
                nodes, _ = self._read_subtree(root)
            except NoNodeError:
                if self._retry(self.zk.exists, root) is None:
                    return False
                continue  # changed under us
            failures = self._delete_subtree_at_versions(nodes)
            if not failures:
                log.info("deleted ZooKeeper consumer group %s (%d nodes)", group, len(nodes))
                return True
            log.info("ZooKeeper group %s changed while deleting it (%r): reading it again", group, failures[0])
        raise ZooKeeperError(f"ZooKeeper consumer group {group!r} kept changing while being deleted; try again")

    # ------------------------------------------------------------------ topic config changes

    def alter_topic_config(self, name: str, set_configs: dict | None = None,
                           delete_configs: Iterable[str] = ()) -> dict[str, str]:
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
            raise InvalidConfigError(f"cannot delete unknown topic config(s) {unknown}; "
                                     f"expected names such as retention.ms, cleanup.policy, segment.bytes")
        path = paths.topic_config(name)
        while True:
            if self._retry(self.zk.exists, paths.topic(name)) is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            try:
                data, stat = self._retry(self.zk.get, path)
                config = decode_topic_config(data, path)
            except NoNodeError:
                data, stat, config = None, None, {}
            for k in removals:
                config.pop(k, None)
            config.update(updates)
            new = encode_topic_config(config)
            try:
                if stat is None:
                    self._retry(self.zk.create, path, new, makepath=True)
                else:
                    self._retry(self.zk.set, path, new, version=stat.version)
                break
            except (BadVersionError, NodeExistsError):
                continue  # a concurrent change: read again
        self._retry(self.zk.create, paths.CONFIG_CHANGE_PREFIX,
                    encode_config_change(f"topics/{name}"), sequence=True, makepath=True)
        with self._lock:
            if name in self._topics:
                self._configs[name] = dict(config)
        log.info("altered config of topic %s: %s", name, config)
        return dict(config)

    @_watch_callback
    def _on_config_changes(self, children) -> bool | None:
        if not children:
            return None
        with self._lock:
            self._configs.clear()  # re-read lazily by topic_config()
        self._notify()
        if self.controller_id == self.broker_id:
            self.zk.handler.spawn(self._purge_config_changes, list(children))
        return None

    def _purge_config_changes(self, children, max_age_ms: int = 15 * 60 * 1000) -> None:
        """The controller removes notifications older than 15 minutes (Kafka's changeExpirationMs)."""
        now = time.time() * 1000
        for c in children:
            path = f"{paths.CONFIG_CHANGES}/{c}"
            try:
                stat = self._retry(self.zk.exists, path)
                if stat is not None and now - stat.ctime > max_age_ms:
                    self._retry(self.zk.delete, path)
            except NoNodeError:
                pass
            except (PyklogError, KazooException) as e:
                log.debug("could not purge %s: %s", path, e)
                return

    # ------------------------------------------------------------------ dynamic broker configs (KIP-226)

    def broker_config(self, entity: str | int) -> tuple[dict[str, str], int]:
        """The dynamic configs stored at ``/config/brokers/<entity>`` (``entity`` a broker id, or ``""``
        / ``"<default>"`` for the cluster-wide defaults) and the node's version (-1: no node)."""
        path = paths.broker_config(entity)
        try:
            data, stat = self._retry(self.zk.get, path)
        except NoNodeError:
            return {}, -1
        return (decode_topic_config(data, path) if data else {}), stat.version

    def alter_broker_config(self, entity: str | int, set_configs: dict | None = None,
                            delete_configs: Iterable[str] = (),
                            validate: Callable[[dict[str, str]], None] | None = None) -> tuple[dict[str, str], int]:
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
        while True:
            try:
                data, stat = self._retry(self.zk.get, path)
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
                    self._retry(self.zk.create, path, new, makepath=True)
                    version = 0
                else:
                    version = self._retry(self.zk.set, path, new, version=stat.version).version
                break
            except (BadVersionError, NodeExistsError):
                continue  # a concurrent change: read again
        self._retry(self.zk.create, paths.CONFIG_CHANGE_PREFIX,
                    encode_config_change(f"brokers/{name}"), sequence=True, makepath=True)
        log.info("altered dynamic config of brokers/%s: %s", name, config)
        return dict(config), version

    def watch_broker_config(self, entity: str | int,
                            fn: Callable[[dict[str, str], int], None]) -> None:
        """Call ``fn(config, version)`` (on kazoo's callback thread) now and whenever
        ``/config/brokers/<entity>`` is created, changed or deleted (``({}, -1)``); the watch re-arms
        itself after reconnects (kazoo's DataWatch) and ends with :meth:`stop`.  Kafka's brokers
        follow the change notifications instead; watching the node itself also sees a change written
        without one.  Data that cannot be decoded is logged at ERROR and ignored."""
        from kazoo.recipe.watchers import DataWatch

        path = paths.broker_config(entity)

        def on_data(data, stat, *_):
            if self._stopping:
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

        DataWatch(self.zk, path, on_data)

    # ------------------------------------------------------------------ producer ids

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
                data, stat = self._retry(self.zk.get, path)
            except NoNodeError:
                data, stat = None, None
            if data:
                start = decode_producer_id_block(data, path).block_end + 1
            else:
                start = 0
            end = start + block_size - 1
            if end >= 2**63 - 1:
                raise ZooKeeperError(f"producer ids exhausted: next block would end at {end}")
            new = encode_producer_id_block(ProducerIdBlock(
                self.broker_id if self.broker_id is not None else -1, start, end))
            try:
                if stat is None:
                    self._retry(self.zk.create, path, new)
                else:
                    self._retry(self.zk.set, path, new, version=stat.version)
            except (BadVersionError, NodeExistsError):
                continue
            log.debug("allocated producer id block [%d, %d]", start, end)
            return range(start, end + 1)

    # ------------------------------------------------------------------ partition states (replication)
    #
    # Kafka's brokers learn leaders and ISRs from the controller's LeaderAndIsr requests; pyklog's
    # brokers follow the state znodes ``/brokers/topics/<t>/partitions/<p>/state`` through one-shot
    # data watches instead (armed whenever a state node is read by a registering broker,
    # :meth:`_read_topic_entry`), so a change costs one read of the changed node on each broker.
    # The controller alone changes leader and leader_epoch; a partition's leader changes the ISR
    # (:meth:`update_isr`), both conditionally on the node's version.

    def add_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        """Call ``fn(topic, partition)`` (on a kazoo handler thread) after a partition's state node
        changed and the cache holds the new state (see :meth:`partition_state`)."""
        with self._lock:
            self._state_listeners.append(fn)

    def remove_partition_state_listener(self, fn: Callable[[str, int], None]) -> None:
        with self._lock:
            if fn in self._state_listeners:
                self._state_listeners.remove(fn)

    def _on_partition_state_data(self, event) -> None:
        """One-shot data watch of a state node (kazoo's callback thread: no blocking call here).
        A connection loss fires every watch with no path (kazoo drops them): re-arm them all once
        the connection is back."""
        if self._stopping or self.zk is None:
            return
        if event.path is None:
            with self._lock:
                if self._state_rearm_pending:
                    return
                self._state_rearm_pending = True
            self.zk.handler.spawn(self._rearm_partition_state_watches)
            return
        if event.type == "DELETED":
            return  # the topic is being deleted: the registry's children watch handles it
        parts = event.path.split("/")  # ['', 'brokers', 'topics', t, 'partitions', p, 'state']
        if len(parts) != 7 or not parts[5].isdigit():
            return
        self.zk.handler.spawn(self._reload_partition_state, parts[3], int(parts[5]))

    def _reload_partition_state(self, topic: str, partition: int) -> None:
        """Re-read one state node (re-arming its watch), update the cache, tell the listeners."""
        if self._stopping or self.zk is None:
            return
        path = paths.partition_state(topic, partition)
        try:
            data, stat = self._retry(self.zk.get, path, watch=self._on_partition_state_data)
            s = decode_partition_state(data, path)
        except NoNodeError:
            return
        except (PyklogError, KazooException) as e:
            log.warning("could not re-read partition state %s-%d: %s", topic, partition, e)
            return
        self._cache_partition_state(topic, partition, s.leader, s.leader_epoch, list(s.isr), stat)

    def _note_state(self, topic: str, partition: int, stat, state: tuple) -> bool:
        """Under or outside ``_lock``: remember ``state`` as the partition's newest if its node's
        ``(czxid, version)`` is newer than the one remembered; True if it was."""
        if stat is None:
            return True
        key = (stat.czxid, stat.version)
        with self._lock:
            seen = self._newest_states.get((topic, partition))
            if seen is not None and seen[0] >= key:
                return seen[0] == key
            self._newest_states[(topic, partition)] = (key, state)
            return True

    def _with_newest_states(self, name: str, entry: _TopicEntry) -> _TopicEntry:
        """Under ``_lock``: ``entry`` with each partition's newest state seen.  A topic entry is read
        (its states with their watches) before it is installed: a state change in between fires the
        watch, whose re-read finds no entry to update yet (a broker starting while the controller
        elects it) or updates one the install then replaces; the watch is spent, so without this the
        cache kept the older state for good (a restarted broker stayed "follower of -1" of a
        partition it had been elected to lead)."""
        states = None
        for p in entry.replicas:
            seen = self._newest_states.get((name, p))
            # a state node created before the topic node belongs to an earlier topic of that name
            # (deleted and created again): never carried over
            if seen is not None and seen[0][0] >= entry.czxid and entry.states.get(p) != seen[1]:
                states = dict(entry.states) if states is None else states
                states[p] = seen[1]
        if states is None:
            return entry
        return _TopicEntry(entry.czxid, entry.mzxid, entry.replicas, states, entry.topic_id)

    def _cache_partition_state(self, topic: str, partition: int, leader: int, leader_epoch: int, isr: list,
                               stat=None) -> None:
        state = (leader, leader_epoch, list(isr))
        with self._lock:
            if not self._note_state(topic, partition, stat, state):
                return  # an older read than the state cached (two re-reads overtaking each other)
            entry = self._topics.get(topic)
            if entry is not None and partition in entry.replicas:
                states = dict(entry.states)
                states[partition] = state
                self._topics[topic] = _TopicEntry(entry.czxid, entry.mzxid, entry.replicas, states, entry.topic_id)
            listeners = list(self._state_listeners)
        for fn in listeners:
            try:
                fn(topic, partition)
            except Exception:  # noqa: BLE001
                log.exception("partition state listener %r failed", fn)

    def _rearm_partition_state_watches(self) -> None:
        """After a connection loss (kazoo handler thread): wait for the connection, then re-read
        every cached partition's state with its watch, and tell the listeners of each (a change
        made while disconnected was missed).  Retried every second while not stopping."""
        try:
            while not self._stopping:
                zk = self.zk
                if zk is None:
                    return
                if not zk.connected:
                    time.sleep(0.2)
                    continue
                with self._lock:
                    self._state_rearm_pending = False
                    names = list(self._topics)
                try:
                    for name in names:
                        with self._lock:
                            entry = self._topics.get(name)
                        if entry is None:
                            continue
                        pending = [(p, zk.get_async(paths.partition_state(name, p),
                                                    watch=self._on_partition_state_data)) for p in entry.replicas]
                        for p, res in pending:
                            try:
                                data, stat = res.get()
                                s = decode_partition_state(data, paths.partition_state(name, p))
                            except NoNodeError:
                                continue
                            except ZooKeeperError as e:
                                log.warning("unreadable partition state %s-%d: %s", name, p, e)
                                continue
                            self._cache_partition_state(name, p, s.leader, s.leader_epoch, list(s.isr), stat)
                    return
                except KazooException as e:
                    log.info("re-arming the partition state watches failed (%s); retrying", e)
                    time.sleep(1.0)
        except Exception:  # noqa: BLE001
            log.exception("re-arming the partition state watches failed")

    def partition_state(self, topic: str, partition: int) -> tuple[LeaderAndIsr, int] | None:
        """The state node of a partition read from ZooKeeper now, with its version (Kafka's
        ``getTopicPartitionState``/``zkVersion``); None if it does not exist."""
        path = paths.partition_state(topic, partition)
        try:
            data, stat = self._retry(self.zk.get, path)
        except NoNodeError:
            return None
        return decode_partition_state(data, path), stat.version

    def update_isr(self, topic: str, partition: int, leader_epoch: int, isr: Iterable[int],
                   zk_version: int) -> int | None:
        """The leader's ISR change (Kafka's ``Partition.updateIsr`` through ``KafkaZkClient.
        conditionalUpdatePath``): write ``isr`` into the state node if its version is still
        ``zk_version``, keeping leader and leader_epoch, then a ``/isr_change_notification/isr_change_``
        node.  Returns the node's new version, or None if this broker is no longer the leader at
        ``leader_epoch`` (the controller moved leadership: we were deposed; write nothing).

        On a version conflict the node is read again: same leader and epoch (a retried write that
        had succeeded, or a concurrent ISR write of our own) -> write again at the new version;
        otherwise None.  Any thread; blocking."""
        path = paths.partition_state(topic, partition)
        isr = tuple(int(b) for b in isr)
        # the node keeps the controller epoch of the controller that wrote it (Kafka's leader writes
        # the controllerEpoch it learned with its leadership), never a constant
        now = self.partition_state(topic, partition)
        if now is None:
            return None
        controller_epoch = now[0].controller_epoch
        for _attempt in range(10):
            data = encode_partition_state(LeaderAndIsr(self.broker_id, leader_epoch, isr, controller_epoch))
            try:
                stat = self._retry(self.zk.set, path, data, version=zk_version)
                break
            except NoNodeError:
                return None
            except BadVersionError:
                now = self.partition_state(topic, partition)
                if now is None:
                    return None
                state, version = now
                controller_epoch = state.controller_epoch
                if state.leader != self.broker_id or state.leader_epoch != leader_epoch:
                    log.info("%s-%d: not updating the ISR to %s: the state node now says leader %d epoch %d "
                             "(ours: leader %d epoch %d)", topic, partition, list(isr), state.leader,
                             state.leader_epoch, self.broker_id, leader_epoch)
                    return None
                if tuple(state.isr) == isr:
                    stat = None
                    zk_version = version
                    break
                zk_version = version
        else:
            raise ZooKeeperError(f"updating the ISR of {topic}-{partition}: its state node kept changing")
        new_version = stat.version if stat is not None else zk_version
        try:
            self._retry(self.zk.create, paths.ISR_CHANGE_PREFIX,
                        encode_isr_change_notification([(topic, partition)]), sequence=True, makepath=True)
        except (PyklogError, KazooException) as e:  # the ISR is written; the notification is advisory
            log.warning("could not write the ISR change notification of %s-%d: %s", topic, partition, e)
        with self._lock:
            entry = self._topics.get(topic)
            state = (self.broker_id, leader_epoch, list(isr))
            if entry is not None and partition in entry.replicas and self._note_state(topic, partition, stat, state):
                states = dict(entry.states)
                states[partition] = state
                self._topics[topic] = _TopicEntry(entry.czxid, entry.mzxid, entry.replicas, states, entry.topic_id)
        log.info("%s-%d: ISR now %s (leader %d, epoch %d, zk version %d)", topic, partition, list(isr),
                 self.broker_id, leader_epoch, new_version)
        return new_version
