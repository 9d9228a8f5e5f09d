"""One ZooKeeper session of a broker (or an admin tool): the kazoo client, its retry, the cluster id,
and the watchdog that notices a ZooKeeper that came back without its data.

Every ZooKeeper call of :mod:`pyklog.broker.zk` goes through :meth:`ZkSession.retry` (kazoo's
``client.retry``: connection loss and session moves are retried up to a deadline); a caller sees
:class:`ZooKeeperError` when ZooKeeper stays unreachable.

Losing ZooKeeper's data never deletes a log: ``cluster_id_check`` (the broker's meta.properties,
Kafka's InconsistentClusterIdException) runs before anything is written, so a broker with data
refuses an empty ZooKeeper; a new session after an expiry re-checks ``/cluster/id``
(:meth:`ZkSession.check_cluster_id_unchanged`) before registering again; and while disconnected a
watchdog asks the servers for their last zxid (``srvr``): a ZooKeeper that came back empty refuses
the broker's session for ever, so when every server is behind the zxid the broker has seen,
``on_fatal`` stops the broker with an ERROR.

Thread-safety: :meth:`retry` may be called from any thread; :meth:`start` and :meth:`close` by the
owner only.  The connection state callback runs on kazoo's connection thread and never blocks: it
hands the session-loss and new-session events to ``on_session_lost`` (called there, must not block)
and ``on_new_session`` (spawned on a kazoo handler thread).
"""

from __future__ import annotations

import base64
import functools
import logging
import re
import uuid
from collections.abc import Callable
from typing import TypeVar

from kazoo.client import KazooClient, KazooState, TransactionRequest
from kazoo.exceptions import AuthFailedError, NoAuthError, NodeExistsError, NoNodeError, SessionClosedRequireSaslError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.retry import KazooRetry, RetryFailedError

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk import znode_acls as zk_acls
from pyklog.broker.zk.event_queue import ZkEventQueue
from pyklog.broker.zk.server import four_letter_word
from pyklog.broker.zk.znode_acls import ZkCredentials
from pyklog.broker.zk.znodes import decode_cluster_id, encode_cluster_id

log = logging.getLogger(__name__)

T = TypeVar("T")


class _DataLost(Exception):
    """Every ZooKeeper server that answers is behind the zxid this client has seen."""

    def __init__(self, seen: int, zxids: dict):
        super().__init__(f"servers at {zxids} behind zxid {seen:#x}")
        self.seen, self.zxids = seen, zxids


class ZooKeeperNoAuthError(ZooKeeperError):
    """ZooKeeper refused an operation: the znode's ACL does not allow this client (not retriable)."""

    retriable = False


class ClusterIdChangedError(Exception):
    """After a new session, ZooKeeper holds another cluster id (``now``; None: none at all)."""

    def __init__(self, now: str | None):
        super().__init__(f"cluster id now {now}")
        self.now = now


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


class _PerPathAcl(list):
    """The marker kazoo passes down as ``default_acl`` (to ``ensure_path``'s parents and makepath's
    too); :class:`AclKazooClient` replaces it with the policy's ACL of each path it creates."""


class AclKazooClient(KazooClient):
    """A KazooClient that creates every znode (``create``, ``ensure_path``, ``makepath`` parents,
    multi-op creates) with ``acl_policy(path)`` unless the caller names an ACL: one place decides the
    ACLs of everything the broker writes (:func:`pyklog.broker.zk.znode_acls.default_acls`)."""

    def __init__(self, *args, acl_policy: Callable[[str], list], **kwargs):
        self.acl_policy = acl_policy
        super().__init__(*args, default_acl=_PerPathAcl(zk_acls.OPEN_ACL), **kwargs)

    def _create_async_inner(self, path, value, acl, flags, trailing=False, include_data=False):
        if isinstance(acl, _PerPathAcl):
            acl = self.acl_policy(path)
        return super()._create_async_inner(path, value, acl, flags, trailing=trailing, include_data=include_data)

    def transaction(self):
        return _AclTransaction(self)


class _AclTransaction(TransactionRequest):
    def create(self, path, value=b"", acl=None, ephemeral=False, sequence=False):
        if acl is None or isinstance(acl, _PerPathAcl):
            acl = self.client.acl_policy(path)
        return super().create(path, value, acl=acl, ephemeral=ephemeral, sequence=sequence)

    def commit(self):
        """The multi-op's results; a refused operation (NoAuth) raises instead of being one result
        among the others, so that :meth:`ZkSession.retry` reports it as ZooKeeperNoAuthError."""
        results = super().commit()
        if any(isinstance(r, NoAuthError) for r in results):
            raise NoAuthError()
        return results


def describe_no_auth(fn, args) -> str:
    """What a NoAuth answer means, for an error message (a path, never a credential)."""
    what = getattr(fn, "__name__", "operation")
    path = next((a for a in args if isinstance(a, str)), None)
    return f"{what} {path}" if path else what


def watch_callback(fn):
    """A ChildrenWatch method (of an object with a ``session`` attribute, a :class:`ZkSession`) that
    returns False (kazoo then drops the watch) when it runs while or after the session is stopped,
    instead of failing on the client set to None."""

    @functools.wraps(fn)
    def watch(self, children):
        session = self.session
        if session.stopping:
            return False
        try:
            return fn(self, children)
        except Exception:  # noqa: BLE001 - only swallowed when stop() pulled the client away
            if session.stopping or session.zk is None:
                return False
            raise

    return watch


class ZkSession:
    """The kazoo client of one ``zookeeper.connect`` string, with its retry and cluster id.

    ``registering``: a broker's session (creates the chroot if missing, runs the data-loss watchdog
    while disconnected); else an admin tool's (refuses a missing chroot, no watchdog).
    ``cluster_id_check(id or None)`` runs before the cluster id is created and before the broker
    registers (raise to stop :meth:`start` with nothing written); ``on_fatal(message)`` is called
    once, on a kazoo thread, when ZooKeeper is found to have lost its data under us.
    ``on_session_lost()`` runs on kazoo's connection thread when the session expires (no blocking
    call there); ``on_new_session()`` is spawned on a kazoo handler thread when a new session is up
    after one was lost.
    """

    # while disconnected: probe the servers this often, and how many probes in a row must find
    # every answering server behind the zxid this client has seen before the broker gives up
    WATCHDOG_PROBE_S = 1.0
    WATCHDOG_LOST_PROBES = 3

    def __init__(
        self,
        zk_connect: str,
        *,
        session_timeout_s: float,
        connect_timeout_s: float,
        registering: bool,
        cluster_id_check: Callable[[str | None], None] | None = None,
        on_fatal: Callable[[str], None] | None = None,
        on_session_lost: Callable[[], None] | None = None,
        on_new_session: Callable[[], None] | None = None,
        credentials: ZkCredentials | None = None,
        set_acl: bool = False,
    ):
        self.zk_connect = zk_connect
        if set_acl and credentials is None:
            raise zk_acls.ZkCredentialsError(
                "zookeeper.set.acl is true but no ZooKeeper credentials are given: set zookeeper.jaas.config "
                f"or name a JAAS file with a Client section in KAFKA_OPTS (-D{zk_acls.JAAS_FILE_PROPERTY}=...)"
            )
        #: the digest identity this session authenticates as (None: unauthenticated)
        self.credentials = credentials
        #: True: znodes are created with the secure ACLs (:func:`pyklog.broker.zk.znode_acls.default_acls`)
        self.set_acl = set_acl
        self.hosts, self.chroot = split_connect_string(zk_connect)
        self.session_timeout_s = session_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.registering = registering
        self._new_event_queues()
        self._cluster_id_check = cluster_id_check
        self._on_fatal = on_fatal
        self._on_session_lost = on_session_lost
        self._on_new_session = on_new_session
        self._fatal_reported = False
        self._watchdog_running = False
        #: the kazoo client while started (None before :meth:`start` and after :meth:`close`)
        self.zk: KazooClient | None = None
        #: the cluster id read or created by :meth:`start`
        self.cluster_id: str | None = None
        #: True from :meth:`begin_stop` (or :meth:`close`) until the next :meth:`start`
        self.stopping = False
        #: True from a session expiry until a new session is up
        self.session_lost = False

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        """Connect and read or create the cluster id.  Raises :class:`ZooKeeperError` if ZooKeeper
        cannot be reached within ``connect_timeout_s`` (:class:`ZooKeeperNoAuthError` if it requires
        authentication this client lacks); the client is closed on any failure."""
        try:
            self._start()
        except SessionClosedRequireSaslError:
            self.close()
            raise ZooKeeperNoAuthError(
                f"ZooKeeper at {self.zk_connect} requires authentication and this client has no credentials "
                "(zookeeper.jaas.config, or a JAAS file with a Client section in KAFKA_OPTS)"
            ) from None

    def _new_event_queues(self) -> None:
        #: what watches of the registry and partition states ask for (re-reads, applying states)
        self.events = ZkEventQueue("pyklog-zk-events")
        #: the controller duties watches ask for (deletion requests, config change purges): apart,
        #: so a long deletion never delays a partition's new leader
        self.admin_events = ZkEventQueue("pyklog-zk-admin-events")
        #: applying partition states the cache already holds (the replica manager's become-leader /
        #: become-follower): apart, so the reads that keep the cache (what Metadata answers) current
        #: never wait behind the replica manager's lock
        self.state_events = ZkEventQueue("pyklog-zk-state-apply")

    def _start(self) -> None:
        self.stopping = False
        if self.events.stopped:
            self._new_event_queues()
        command_retry = KazooRetry(
            max_tries=-1,
            delay=0.1,
            backoff=2,
            max_delay=2.0,
            deadline=max(self.connect_timeout_s, self.session_timeout_s),
        )
        if self.chroot:
            self._ensure_chroot()
        self.zk = self.new_client(self.zk_connect, command_retry=command_retry)
        try:
            self.zk.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            self.close()
            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self.zk_connect} within {self.connect_timeout_s:g}s"
            ) from None
        except AuthFailedError:
            self.close()
            raise ZooKeeperError(
                f"ZooKeeper at {self.zk_connect} refused the credentials of {self.credentials}"
            ) from None
        try:
            self.zk.add_listener(self._on_state)
            if self.set_acl:
                self.check_identity()
            # the cluster id first: a broker whose meta.properties names another cluster stops here,
            # before anything is written into this ZooKeeper
            self.cluster_id = self._get_or_create_cluster_id()
        except BaseException:
            self.close()
            raise

    def begin_stop(self) -> None:
        """From now on watches and retry loops give up (the owner is about to :meth:`close`)."""
        self.stopping = True

    def close(self) -> None:
        """Close the client (idempotent)."""
        self.stopping = True
        self.events.stop()
        self.admin_events.stop()
        self.state_events.stop()
        zk, self.zk = self.zk, None
        if zk is not None:
            try:
                zk.stop()
            finally:
                zk.close()

    def acls_for(self, path: str) -> list:
        """The ACL this session creates a znode at ``path`` (relative to the chroot) with."""
        return zk_acls.default_acls(path, self.credentials, self.set_acl)

    def new_client(self, hosts: str, **kwargs) -> KazooClient:
        """A (not started) kazoo client with this session's credentials and ACL policy; the chroot
        node itself is ``"/"`` to the policy when ``hosts`` has one, its own path otherwise."""
        chrooted = "/" in hosts
        if self.credentials is not None:
            zk_acls.hide_credentials_in_kazoo_logs()

        def policy(path: str) -> list:
            return self.acls_for(path if chrooted else path[len(self.chroot) :] or "/")

        return AclKazooClient(
            hosts=hosts,
            timeout=self.session_timeout_s,
            auth_data=self.credentials.auth_data if self.credentials else None,
            acl_policy=policy,
            connection_retry=kwargs.pop(
                "connection_retry", KazooRetry(max_tries=-1, delay=0.1, backoff=2, max_delay=2.0)
            ),
            **kwargs,
        )

    def check_identity(self) -> None:
        """With set.acl: ZooKeeper's znodes must be owned by this session's identity.  Digest
        authentication never fails (ZooKeeper only hashes what it is given), so a wrong password
        shows as nodes owned by another identity: refuse to start with a clear error (the user
        name, never the password) instead of failing later on the first write."""
        for path in ("/", paths.CLUSTER_ID):
            try:
                acl, _ = self.retry(self.zk.get_acls, path)
            except NoNodeError:
                continue
            owners = [a for a in acl if a.id.scheme == "digest" and a.perms & zk_acls.Permissions.WRITE]
            if owners and not any(a.id.id == self.credentials.digest_id for a in owners):
                names = zk_acls.owners(acl)
                same_user = self.credentials.username in names
                raise ZooKeeperNoAuthError(
                    f"ZooKeeper at {self.zk_connect}: {path} is writable only by digest user(s) "
                    f"{', '.join(names) or '?'}, not by this broker's credentials ({self.credentials})"
                    + (
                        ": the password differs from the one the znodes were created with"
                        if same_user
                        else ": check zookeeper.jaas.config (or the JAAS file's Client section)"
                    )
                )

    def _ensure_chroot(self) -> None:
        root = self.new_client(self.hosts)
        try:
            root.start(timeout=self.connect_timeout_s)
        except KazooTimeoutError:
            root.close()
            raise ZooKeeperError(
                f"could not connect to ZooKeeper at {self.hosts} within {self.connect_timeout_s:g}s"
            ) from None
        try:
            if not self.registering:  # an admin tool never conjures up a cluster under a mistyped chroot
                if root.retry(root.exists, self.chroot) is None:
                    raise ZooKeeperError(
                        f"ZooKeeper at {self.hosts} has no chroot {self.chroot}: no pyklog cluster there "
                        "(brokers create it on their first start)"
                    )
            else:
                root.retry(root.ensure_path, self.chroot)
        finally:
            root.stop()
            root.close()

    def retry(self, fn: Callable[..., T], *args, **kwargs) -> T:
        """``client.retry(fn, ...)``, with an unreachable ZooKeeper turned into :class:`ZooKeeperError`."""
        zk = self.zk
        if zk is None:
            raise ZooKeeperError(f"ZkCluster for {self.zk_connect} is not started (or stopped)")
        try:
            return zk.retry(fn, *args, **kwargs)
        except RetryFailedError as e:
            raise ZooKeeperError(f"ZooKeeper at {self.zk_connect} unreachable: {e}") from None
        except SessionClosedRequireSaslError:
            raise ZooKeeperNoAuthError(
                f"ZooKeeper at {self.zk_connect} requires authentication and this client has no credentials "
                "(zookeeper.jaas.config, or a JAAS file with a Client section in KAFKA_OPTS)"
            ) from None
        except NoAuthError:
            who = f"credentials {self.credentials}" if self.credentials else "no credentials"
            raise ZooKeeperNoAuthError(
                f"ZooKeeper at {self.zk_connect} refused {describe_no_auth(fn, args)}: the znode's ACL does not "
                f"allow this client ({who}; see zookeeper.set.acl in docs/security.md)"
            ) from None

    @property
    def session_id(self) -> int | None:
        zk = self.zk
        return zk.client_id[0] if zk is not None and zk.client_id else None

    # ------------------------------------------------------------------ cluster id

    def _get_or_create_cluster_id(self) -> str:
        while True:
            try:
                data, _ = self.retry(self.zk.get, paths.CLUSTER_ID)
            except NoNodeError:
                if self._cluster_id_check is not None:
                    self._cluster_id_check(None)  # a broker with data refuses an empty ZooKeeper
                cid = new_cluster_id()
                try:
                    self.retry(self.zk.create, paths.CLUSTER_ID, encode_cluster_id(cid), makepath=True)
                    log.info("created cluster id %s at %s", cid, paths.CLUSTER_ID)
                    return cid
                except NodeExistsError:
                    continue  # another broker won the race: read its id
            cid = decode_cluster_id(data, paths.CLUSTER_ID)
            if self._cluster_id_check is not None:
                self._cluster_id_check(cid)
            return cid

    def check_cluster_id_unchanged(self) -> None:
        """After a new session: ZooKeeper must still hold the cluster id this broker joined
        (:class:`ClusterIdChangedError` otherwise)."""
        try:
            data, _ = self.retry(self.zk.get, paths.CLUSTER_ID)
            now = decode_cluster_id(data, paths.CLUSTER_ID)
        except NoNodeError:
            now = None
        if now != self.cluster_id:
            raise ClusterIdChangedError(now)

    # ------------------------------------------------------------------ connection state, watchdog

    def _on_state(self, state) -> None:
        # Called on kazoo's connection thread: no blocking ZooKeeper calls here.
        if state == KazooState.LOST:
            self.session_lost = True
            if self._on_session_lost is not None:
                self._on_session_lost()
            if self.stopping:
                return
            log.warning("ZooKeeper session lost (%s): registration gone until a new session is up", self.zk_connect)
        elif state == KazooState.SUSPENDED:
            log.info("ZooKeeper connection suspended (%s)", self.zk_connect)
            if self.registering and not self.stopping and not self._watchdog_running:
                self._watchdog_running = True
                zk = self.zk
                if zk is not None:
                    zk.handler.spawn(self._watch_disconnection, zk)
        elif state == KazooState.CONNECTED and self.session_lost and not self.stopping:
            self.session_lost = False
            if self._on_new_session is not None and self.zk is not None:
                self.zk.handler.spawn(self._on_new_session)

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
            if self.stopping or self.zk is not zk or zk.connected:
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
                log.warning(
                    "no ZooKeeper connection to %s for %.0fs (kazoo keeps reconnecting; servers' last zxids: %s)",
                    self.zk_connect,
                    waited.elapsed(),
                    {h: hex(z) for h, z in zxids.items()} or "no answer",
                )
            raise _StillDisconnected()

        try:
            retry(
                check,
                deadline=Deadline.never(),
                backoff=Backoff.constant(self.WATCHDOG_PROBE_S),
                retriable=lambda e: isinstance(e, _StillDisconnected),
                what="ZooKeeper reconnection",
            )
            if not self.stopping and self.zk is zk and zk.connected and waited.elapsed() >= 5.0:
                log.info("ZooKeeper connection to %s back after %.0fs", self.zk_connect, waited.elapsed())
        except _DataLost as e:
            message = (
                f"ZooKeeper at {self.zk_connect} lost its data: every server that answers is at zxid "
                f"{', '.join(f'{h}={hex(z)}' for h, z in sorted(e.zxids.items()))}, older than the "
                f"{hex(e.seen)} this broker has already seen, so it refuses this broker's session for ever "
                "(it was restarted without its data directory?). The broker's logs are kept. Restore "
                "ZooKeeper's data directory and restart ZooKeeper, then the broker"
            )
            self.report_fatal(message)
        finally:
            self._watchdog_running = False

    def report_fatal(self, message: str) -> None:
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
        for hp in self.hosts.split(","):
            host, _, port = hp.strip().rpartition(":")
            try:
                text = four_letter_word(host or "127.0.0.1", int(port), "srvr", timeout=1.0)
            except (OSError, ValueError):
                continue
            m = re.search(r"^Zxid:\s*(0x[0-9a-fA-F]+)", text, re.MULTILINE)
            if m:
                out[hp.strip()] = int(m.group(1), 16)
        return out
