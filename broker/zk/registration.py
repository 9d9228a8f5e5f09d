"""A broker's registration in ZooKeeper: the ephemeral ``/brokers/ids/[id]`` node.

The node holds Kafka's broker registration JSON (``host``, ``port``, ``endpoints``,
``listener_security_protocol_map``, ``jmx_port``, ``rack``, ``timestamp``, ``version``; encoded by
:mod:`pyklog.broker.zk.znodes`).  A second broker with the same id fails with
:class:`BrokerIdInUseError`.  After a session expiry the registration is created again as soon as a
new session is up (:meth:`BrokerRegistrar.reregister`), once ZooKeeper is seen to still hold the
cluster id this broker joined.

Thread-safety: :meth:`BrokerRegistrar.register` runs on the starting thread, :meth:`reregister` on
a kazoo handler thread, :meth:`on_session_lost` on kazoo's connection thread; the registered state
is a :class:`threading.Event`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError

from pyklog.broker.common.retry import Backoff, Deadline, retry
from pyklog.broker.errors import BrokerIdInUseError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.session import ClusterIdChangedError, ZkSession
from pyklog.broker.zk.znodes import BrokerRegistration, decode_broker_registration, encode_broker_registration

log = logging.getLogger(__name__)


class BrokerRegistrar:
    """Creates, re-creates and deletes one broker's ``/brokers/ids/<broker_id>``.

    ``listeners`` are the registration's endpoints; ``on_registered_again()`` is called after a
    re-registration on a new session (the metadata cache tells its listeners).
    """

    def __init__(
        self,
        session: ZkSession,
        broker_id: int,
        host: str,
        port: int,
        listeners: list[str],
        rack: str | None,
        *,
        on_registered_again: Callable[[], None] | None = None,
        protocol_map: dict[str, str] | None = None,
    ):
        #: ``listener.security.protocol.map`` (each endpoint's security protocol in the registration)
        self.protocol_map = dict(protocol_map or {})
        self.session = session
        self.broker_id = broker_id
        self.host = host
        self.port = port
        self.listeners = listeners
        self.rack = rack
        self._on_registered_again = on_registered_again
        self._registered = threading.Event()

    def broker_registration(self) -> BrokerRegistration:
        """The registration this broker writes at ``/brokers/ids/<id>`` (fresh timestamp, version
        :data:`~pyklog.broker.zk.znodes.BROKER_INFO_VERSION`)."""
        return BrokerRegistration.for_listeners(
            self.listeners,
            self.host,
            self.port,
            rack=self.rack,
            timestamp_ms=int(time.time() * 1000),
            protocol_map=self.protocol_map,
        )

    def register(self) -> None:
        """Create our ephemeral ``/brokers/ids/<id>``.

        NodeExists held by our own session (a retried create that had succeeded) is success.  A node
        held by another session that advertises the very same endpoints is the registration of a
        crashed predecessor of this broker (a live broker cannot be listening on our address): we wait
        up to one session timeout for ZooKeeper to expire it.  Any other holder is a live broker with
        our id: :class:`BrokerIdInUseError`.
        """
        session = self.session
        path = paths.broker_id(self.broker_id)
        data = encode_broker_registration(self.broker_registration())
        deadline = Deadline.after(session.session_timeout_s + 2.0)
        wait_for_expiry = Backoff.constant(0.25)
        while True:
            try:
                session.retry(session.zk.create, path, data, ephemeral=True, makepath=True)
                break
            except NodeExistsError:
                try:
                    held, stat = session.retry(session.zk.get, path)
                except NoNodeError:
                    continue
                if stat.ephemeralOwner == session.zk.client_id[0]:
                    break
                try:
                    held_endpoints = [e.connection_string() for e in decode_broker_registration(held, path).endpoints]
                except ZooKeeperError:
                    held_endpoints = []
                same_address = sorted(held_endpoints) == sorted(self.listeners)
                if same_address and not deadline.expired():
                    log.info(
                        "%s is held by an older session (0x%x) with our endpoints; waiting for it to expire",
                        path,
                        stat.ephemeralOwner,
                    )
                    time.sleep(min(wait_for_expiry.next(), deadline.remaining()))
                    continue
                raise BrokerIdInUseError(
                    f"broker.id {self.broker_id} is already registered in ZooKeeper ({session.zk_connect}{path}) by "
                    f"another live broker at {held_endpoints or held!r} (session 0x{stat.ephemeralOwner:x}); "
                    "each broker needs a unique broker.id"
                ) from None
        self._registered.set()
        log.info("registered broker %d at %s (session 0x%x)", self.broker_id, path, session.zk.client_id[0])

    def deregister(self) -> None:
        """Delete our registration if this session holds it (on stop; a connected client only)."""
        zk = self.session.zk
        if zk is not None and zk.connected:
            path = paths.broker_id(self.broker_id)
            try:
                _, stat = zk.get(path)
                if stat.ephemeralOwner == zk.client_id[0]:
                    zk.delete(path, version=stat.version)
            except (NoNodeError, BadVersionError):
                pass
            except KazooException as e:
                log.warning("could not delete %s on stop: %s", path, e)
        self._registered.clear()

    @property
    def registered(self) -> bool:
        """True while this broker's registration node is believed to exist (False after a session loss)."""
        return self._registered.is_set()

    def wait_registered(self, timeout: float | None = None) -> bool:
        return self._registered.wait(timeout)

    def on_session_lost(self) -> None:
        """kazoo's connection thread: the ephemeral node went with the session."""
        self._registered.clear()

    def reregister(self) -> None:
        """Register again after a new session is up (on a kazoo handler thread): retried every
        second, with no deadline, while the new session holds and the broker is not stopping.
        Each ZooKeeper call inside goes through kazoo's ``client.retry``; this loop only covers a
        registration that failed as a whole."""
        session = self.session

        def attempt() -> None:
            if session.stopping or session.session_lost:
                return
            session.check_cluster_id_unchanged()
            self.register()
            if self._on_registered_again is not None:
                self._on_registered_again()

        def retriable(e: BaseException) -> bool:
            return isinstance(e, (ZooKeeperError, KazooException)) and not session.stopping and not session.session_lost

        def on_retry(e: BaseException, attempts: int, delay_s: float) -> None:
            log.warning("re-registration of broker %s failed, retrying: %s", self.broker_id, e)

        try:
            retry(
                attempt,
                deadline=Deadline.never(),
                backoff=Backoff.constant(1.0),
                retriable=retriable,
                what=f"re-registration of broker {self.broker_id}",
                on_retry=on_retry,
            )
        except BrokerIdInUseError as e:
            log.error("cannot register again after a session expiry: %s", e)
        except ClusterIdChangedError as e:
            found = f"cluster id {e.now}" if e.now else "no cluster id (an empty ZooKeeper)"
            message = (
                f"after a new ZooKeeper session, {session.zk_connect} holds {found}, not this broker's "
                f"cluster id {session.cluster_id}: ZooKeeper lost its data or was replaced. The broker does "
                "not register there; its logs are kept. Restore ZooKeeper's data directory, then restart "
                "the broker"
            )
            session.report_fatal(message)
        except (ZooKeeperError, KazooException) as e:  # stopping, or the new session was lost too
            log.info("re-registration of broker %s abandoned: %s", self.broker_id, e)
