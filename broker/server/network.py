"""The broker's socket server: one acceptor thread per listener, N processor threads, a request handler pool.

The seed's threading model (Kafka's ``SocketServer``):

* Each listener (:class:`ListenerSpec`: a name such as ``PLAINTEXT`` or ``INTERNAL``, its security
  protocol, its address) has an **acceptor** thread that accepts connections and hands each one,
  round robin, to a processor; the connection keeps its listener's name and security protocol, which
  every :class:`Request` carries.
* On a TLS listener (SSL, SASL_SSL) a connection first completes its TLS handshake in its
  processor, without blocking it (``do_handshake`` on the non-blocking socket, resumed on
  readiness); its principal then comes from the client's certificate (the listener's principal
  builder).  A failed handshake closes that connection only; one not finished within
  :data:`TLS_HANDSHAKE_TIMEOUT_S` (or ``connections.max.idle.ms``) is closed.  Over TLS, response
  bytes go through ``SSLSocket.send`` and file regions are read with ``pread`` (no ``sendfile``:
  the bytes must be encrypted); bytes TLS already decrypted (``pending()``) are read without waiting
  for the selector.
* Each **processor** thread owns its connections: non-blocking sockets in a ``selectors`` selector.
  It reads size-prefixed request frames (``int32 size`` + ``size`` bytes) into a per-connection
  receive buffer that is reused from request to request (no per-request allocation for frames that
  fit), and writes responses.  A frame larger than ``socket.request.max.bytes`` (or a negative size)
  closes that connection.
* Complete frames go to a bounded request queue (``queued.max.requests``) served by the
  **request handler pool** (``num.io.threads``).  While a connection has a request in flight the
  processor stops reading it (Kafka "mutes" the channel), so requests are handled one after the
  other and responses go out in request order; the next buffered request is dispatched as soon as
  the response is written.  A handler whose answer waits for something else -- an acks=all Produce
  whose records are appended and now wait for the followers -- may let the connection's next request
  in meanwhile (:meth:`Request.let_next_in`): the answers still go out in request order, each
  waiting for the ones before it.  A client that sends one Produce per partition (librdkafka) then
  has its acks=all waits overlap instead of queueing behind each other; at most
  :data:`MAX_PIPELINED_REQUESTS` requests of one connection wait this way.
* A response is a list of chunks: bytes-like objects and file regions (objects with ``file``,
  ``position`` and ``size``; ``file`` is an ``int`` fd or has ``fileno()``).  File regions are sent with
  ``os.sendfile`` straight from the segment file to the socket (the seed's ``transferTo``), never
  through a Python buffer.  An :class:`OwnedFd` as ``file`` is closed once the response is sent or
  the connection closes.

Resource bounds (Kafka's broker settings of the same names, see Kafka's broker configuration docs):

* ``max.connections`` (:class:`ConnectionQuotas`): at the limit the acceptor stops accepting, as
  Kafka's ``Acceptor`` does (it waits for a connection slot): new connections wait in the listen
  backlog (their TCP handshake completes in the kernel, no request is read) until a connection closes.
* ``max.connections.per.ip`` / ``max.connections.per.ip.overrides``: a new connection from an address
  at its limit is closed at once after accept (Kafka's ``TooManyConnectionsException``); one log
  line per address per :data:`REJECT_LOG_INTERVAL_S`, with the count of refusals since the last one.
* ``queued.max.request.bytes`` (:class:`MemoryPool`, Kafka's ``SimpleMemoryPool`` in its non-strict
  mode): bytes of requests being received plus requests queued or being handled.  A request's size is
  reserved as soon as its 4-byte size prefix is read, so a half-sent request counts in full.  While
  the pool is exhausted a processor stops reading every connection that has no reservation (the
  channel is muted, as in Kafka's ``Selector`` under memory pressure); a connection holding a
  reservation keeps receiving its request.  The reservation is released when the handler has answered
  (or the connection closed) and the waiting connections resume.  Non-strict: a reservation is
  granted whenever any memory is free, so a request larger than the pool (but within
  ``socket.request.max.bytes``) is still served, alone.

Authentication: a SASL listener gives each connection an authenticator (``authenticator_factory``,
:class:`pyklog.broker.security.sasl_server.SaslServerAuthenticator`).  The processor hands it each
complete frame first, on the network thread: it answers the SASL exchange itself (or closes the
connection), sets the connection's principal once authenticated, and passes on to the handler pool
only ApiVersions and the requests of an authenticated, unexpired session.

The handler is ``handler(request: Request) -> None``, called on a handler thread; it must
eventually call exactly one of :meth:`Request.send` (chunks), :meth:`Request.send_nothing` (no
response, e.g. Produce acks=0) or :meth:`Request.close_connection`, now or later from any thread
(a delayed fetch completes from a timer or another handler).  An exception escaping the handler is
logged and closes that one connection; the server keeps serving everyone else.

Thread-safety: :class:`SocketServer` is started and stopped by one owner thread; ``Request``
methods are safe to call from any thread, once.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import queue
import selectors
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from pyklog.broker.errors import ConfigError
from pyklog.broker.security.principal import ANONYMOUS, KafkaPrincipal

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
_MIN_BUFFER = 64 * 1024  # initial receive buffer per connection
_MAX_KEEP_BUFFER = 8 * 1024 * 1024  # buffers above this are dropped when the connection goes idle
_SENDMSG_MAX_BUFFERS = 64
_SENDFILE_CHUNK = 64 * 1024 * 1024
_TLS_WRITE_CHUNK = 256 * 1024  # bytes handed to one SSLSocket.send (file regions are read this much at a time)
#: a TLS handshake not finished this long after accept closes the connection (a client that stops
#: mid-handshake holds nothing for longer; connections.max.idle.ms applies too)
TLS_HANDSHAKE_TIMEOUT_S = 30.0
INT32_MAX = 2**31 - 1
REJECT_LOG_INTERVAL_S = 60.0  # one "too many connections" line per address per interval


class MemoryPool:
    """Kafka's ``SimpleMemoryPool`` (non-strict) for ``queued.max.request.bytes``: a byte budget shared
    by every processor.  ``capacity`` < 0 means unbounded (Kafka's ``MemoryPool.NONE``).

    :meth:`try_allocate` grants any size while the available bytes are positive (so a request larger
    than the pool is still served, alone) and refuses once they are exhausted; :meth:`release` gives
    bytes back and, when the pool goes from exhausted to available, calls every listener (the
    processors' wakeup) so muted connections resume.  Thread-safe."""

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.available = capacity
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []

    def add_listener(self, fn: Callable[[], None]) -> None:
        self._listeners.append(fn)

    def try_allocate(self, size: int) -> bool:
        if self.capacity < 0:
            return True
        with self._lock:
            if self.available <= 0:
                return False
            self.available -= size
            return True

    def release(self, size: int) -> None:
        if self.capacity < 0 or size <= 0:
            return
        with self._lock:
            was_exhausted = self.available <= 0
            self.available += size
            now_available = self.available > 0
        if was_exhausted and now_available:
            for fn in self._listeners:
                fn()

    def clear_listeners(self) -> None:
        self._listeners = []

    def is_out_of_memory(self) -> bool:
        return self.capacity >= 0 and self.available <= 0


class ConnectionQuotas:
    """Kafka's ``ConnectionQuotas``: live connections in total (``max.connections``), per listener
    (``listener.name.<listener>.max.connections``) and per client address (``max.connections.per.ip``,
    ``max.connections.per.ip.overrides`` keyed by address).  A listener at its own limit, or any
    listener but the inter-broker one while the broker is at ``max.connections``, accepts nothing
    until a connection closes (Kafka's ``waitForConnectionSlot``: new connections wait in the listen
    backlog); the inter-broker listener (:attr:`protected_listener`, when there are several
    listeners) is never held back by the broker-wide limit, so replication is not starved by clients.
    Thread-safe: the acceptor counts a connection in, its processor counts it out on close."""

    def __init__(
        self,
        max_connections: int = INT32_MAX,
        max_per_ip: int = INT32_MAX,
        per_ip_overrides: dict[str, int] | None = None,
    ):
        self.max_connections = max_connections
        self.max_per_ip = max_per_ip
        self.overrides = dict(per_ip_overrides or {})
        self.listener_limits: dict[str, int] = {}  # listener name (upper case) -> max connections
        self.protected_listener: str | None = None  # the inter-broker listener's name
        self.listener_names: set[str] = set()
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self._cond = threading.Condition()
        self._rejects: dict[str, list] = {}  # ip -> [last log time, refusals not yet logged]

    def limit_for(self, ip: str) -> int:
        return self.overrides.get(ip, self.max_per_ip)

    def reconfigure(
        self,
        max_connections: int,
        max_per_ip: int,
        per_ip_overrides: dict[str, int],
        per_listener: dict[str, int] | None = None,
    ) -> None:
        """New limits (dynamic broker configs, Kafka's ``DynamicConnectionQuota`` and the listeners'
        ``max.connections``): they apply to the next connection; open connections are kept; an
        acceptor waiting for a slot re-checks at once."""
        with self._cond:
            self.max_connections = max_connections
            self.max_per_ip = max_per_ip
            self.overrides = dict(per_ip_overrides)
            self.listener_limits = {k.upper(): v for k, v in (per_listener or {}).items()}
            self._cond.notify_all()

    def listener_limit(self, listener: str | None) -> int:
        return INT32_MAX if listener is None else self.listener_limits.get(listener.upper(), INT32_MAX)

    def slot_available(self, listener: str | None = None) -> bool:
        """Kafka's ``connectionSlotAvailable``: the listener is below its own limit, and the broker below
        ``max.connections`` unless the listener is the protected inter-broker one."""
        if listener is not None and self.per_listener.get(listener.upper(), 0) >= self.listener_limit(listener):
            return False
        if listener is not None and self._protected(listener):
            return True
        return self.total < self.max_connections

    def _protected(self, listener: str) -> bool:
        return (
            self.protected_listener is not None
            and listener.upper() == self.protected_listener.upper()
            and len(self.listener_names) > 1
        )

    def wait_for_slot(self, timeout: float, listener: str | None = None) -> bool:
        """Block (up to ``timeout`` seconds) while no connection slot is free for ``listener``
        (:meth:`slot_available`); True when one is."""
        with self._cond:
            return self._cond.wait_for(lambda: self.slot_available(listener), timeout)

    def try_inc(self, ip: str, listener: str | None = None) -> bool:
        """Count a new connection from ``ip`` (on ``listener``) in; False (nothing counted) when ``ip``
        is at its limit."""
        with self._cond:
            n = self.per_ip.get(ip, 0)
            if n >= self.limit_for(ip):
                return False
            self.per_ip[ip] = n + 1
            self.total += 1
            if listener is not None:
                key = listener.upper()
                self.per_listener[key] = self.per_listener.get(key, 0) + 1
            return True

    def dec(self, ip: str, listener: str | None = None) -> None:
        with self._cond:
            n = self.per_ip.get(ip, 0) - 1
            if n > 0:
                self.per_ip[ip] = n
            else:
                self.per_ip.pop(ip, None)
            self.total -= 1
            if listener is not None:
                key = listener.upper()
                left = self.per_listener.get(key, 0) - 1
                if left > 0:
                    self.per_listener[key] = left
                else:
                    self.per_listener.pop(key, None)
            self._cond.notify_all()

    def note_rejected(self, ip: str, now: float) -> int | None:
        """Record one refused connection; the number refused since the last log line when one is due
        (at most one per address per :data:`REJECT_LOG_INTERVAL_S`), else None."""
        with self._cond:
            if len(self._rejects) > 4096:  # many addresses: forget those not refused for an interval
                self._rejects = {
                    k: v for k, v in self._rejects.items() if v[0] is not None and now - v[0] < REJECT_LOG_INTERVAL_S
                }
            entry = self._rejects.setdefault(ip, [None, 0])
            entry[1] += 1
            if entry[0] is None or now - entry[0] >= REJECT_LOG_INTERVAL_S:
                n, entry[0], entry[1] = entry[1], now, 0
                return n
            return None

    def wake(self) -> None:
        with self._cond:
            self._cond.notify_all()


class OwnedFd:
    """A file descriptor owned by a response (e.g. ``os.dup`` of a segment file's fd): closed by the
    processor after the response is written or when the connection closes."""

    __slots__ = ("fd",)

    def __init__(self, fd: int):
        self.fd = fd

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError:
                pass

    def __del__(self):  # safety net: a response that never reached a processor
        self.close()


@dataclass(frozen=True)
class ListenerSpec:
    """One listener the socket server binds: Kafka's ``EndPoint`` plus what its connections need.

    ``ssl_context`` (a server-side :class:`ssl.SSLContext`) makes every connection start with a TLS
    handshake (SSL and SASL_SSL listeners); ``principal_builder(der_certificate | None)`` turns the
    client's certificate (None without one) into the connection's principal."""

    name: str
    security_protocol: str
    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None
    principal_builder: Callable[[bytes | None], KafkaPrincipal] | None = None
    #: ``factory(peer)`` -> a new connection's SASL authenticator (SASL_PLAINTEXT / SASL_SSL), or None
    authenticator_factory: Callable[[str], object] | None = None


#: requests of one connection in flight at once when handlers let the next one in
#: (:meth:`Request.let_next_in`); at the limit the connection is read again once the oldest is answered
MAX_PIPELINED_REQUESTS = 1024


class _Slot:
    """One dispatched request's place in its connection's answer order (processor thread only):
    its answer (``action`` 0 until given) and the request memory it holds."""

    __slots__ = ("action", "chunks", "released", "reserved")

    def __init__(self, reserved: int):
        self.action = 0
        self.chunks = None
        self.released = False  # the handler let the next request in (let_next_in)
        self.reserved = reserved  # MemoryPool bytes of the request frame


class Request:
    """One request frame received on a connection.

    ``frame`` is a memoryview of the frame bytes (size prefix excluded).  It points into the
    connection's receive buffer and stays valid until the response is sent: copy anything that
    must outlive the request.
    """

    __slots__ = (
        "frame",
        "connection_id",
        "peer",
        "principal",
        "listener_name",
        "security_protocol",
        "_conn",
        "_done",
        "_slot",
    )

    def __init__(self, conn: _Connection, frame: memoryview, slot: _Slot | None = None):
        self.frame = frame
        self.connection_id = conn.id
        self.peer = conn.peer
        #: who the connection authenticated as (the authorizer's subject)
        self.principal: KafkaPrincipal = conn.principal
        #: the listener the request came in on (e.g. ``PLAINTEXT``) and its security protocol
        self.listener_name: str = conn.listener_name
        self.security_protocol: str = conn.security_protocol
        self._conn = conn
        self._done = False
        self._slot = slot if slot is not None else _Slot(0)

    def _finish(self, action, chunks):
        if self._done:
            raise RuntimeError(f"request on connection {self.connection_id} already answered")
        self._done = True
        conn = self._conn
        self._conn = None
        conn.processor.enqueue_response(conn, action, chunks, self._slot)

    def let_next_in(self) -> None:
        """The handler is done with :attr:`frame` and the answer waits for something else (an
        acks=all Produce waiting for its followers): the connection's next request may be handled
        meanwhile; the answers still go out in request order.  Any thread; nothing once answered."""
        conn = self._conn
        if conn is not None and not self._done:
            conn.processor.enqueue_response(conn, _RELEASE, None, self._slot)

    def send(self, chunks: Iterable) -> None:
        """Queue the response ``chunks`` (bytes-like and file regions, size prefix included)."""
        self._finish(_SEND, chunks)

    def send_nothing(self) -> None:
        """No response (Produce with acks=0): the connection resumes reading."""
        self._finish(_NOOP, None)

    def close_connection(self) -> None:
        """Close the connection without answering (e.g. an unparseable frame)."""
        self._finish(_CLOSE, None)

    @property
    def answered(self) -> bool:
        return self._done


_SEND, _NOOP, _CLOSE, _SEND_AND_CLOSE, _RELEASE = 1, 2, 3, 4, 5
# the authenticator's answers (pyklog.broker.security.sasl_server's PASS, SEND, SEND_AND_CLOSE, CLOSE)
_AUTH_PASS, _AUTH_CLOSE = 0, 3
_AUTH_ACTIONS = {1: _SEND, 2: _SEND_AND_CLOSE, 3: _CLOSE}


class _Region:
    """Progress of one file region being sent with sendfile."""

    __slots__ = ("fd", "pos", "remaining", "owner")

    def __init__(self, chunk):
        f = chunk.file
        self.fd = f if isinstance(f, int) else f.fileno()
        self.pos = chunk.position
        self.remaining = chunk.size
        self.owner = f if isinstance(f, OwnedFd) else None


class _Connection:
    """Processor-private state of one client connection.  Only its processor thread touches it."""

    __slots__ = (
        "id",
        "sock",
        "fd",
        "peer",
        "processor",
        "buf",
        "start",
        "end",
        "muted",
        "out",
        "registered",
        "last_active",
        "closed",
        "slots",
        "ip",
        "reserved",
        "memory_muted",
        "principal",
        "listener_name",
        "security_protocol",
        "listener",
        "tls",
        "handshaking",
        "accepted_at",
        "authenticator",
        "close_after_write",
    )

    def __init__(
        self,
        cid: int,
        sock: socket.socket,
        peer: str,
        processor: Processor,
        ip: str = "",
        listener: ListenerSpec | None = None,
    ):
        self.id = cid
        self.principal = ANONYMOUS  # set by the connection's authentication (TLS client certificate, SASL)
        listener = listener or processor.server.listeners[0]
        self.listener = listener
        self.listener_name = listener.name
        self.security_protocol = listener.security_protocol
        self.tls = isinstance(sock, ssl.SSLSocket)  # reads and writes go through TLS (no sendfile)
        self.handshaking = self.tls  # the TLS handshake is not done yet: no request is read
        self.accepted_at = time.monotonic()
        factory = listener.authenticator_factory
        #: the SASL authenticator of a SASL_PLAINTEXT / SASL_SSL connection (None: no SASL)
        self.authenticator = factory(peer) if factory is not None else None
        self.close_after_write = False  # an authentication failure: close once the answer is out
        self.sock = sock
        self.fd = sock.fileno()
        self.peer = peer
        self.ip = ip  # counted in the server's ConnectionQuotas under this address
        self.reserved = 0  # MemoryPool bytes held for the request being received or handled
        self.memory_muted = False  # waiting for the MemoryPool: not reading
        self.processor = processor
        self.buf = bytearray(_MIN_BUFFER)
        self.start = 0  # first unconsumed byte in buf
        self.end = 0  # end of received bytes in buf
        self.muted = False  # a request is in flight: do not read or dispatch
        self.out: collections.deque = collections.deque()  # pending response chunks
        self.registered = 0  # selector events currently registered (0 = not registered)
        self.last_active = time.monotonic()
        self.closed = False
        #: the dispatched requests not answered on the wire yet, in request order
        self.slots: collections.deque[_Slot] = collections.deque()


class Processor(threading.Thread):
    """One network thread: reads requests from and writes responses to its connections."""

    def __init__(self, server: SocketServer, index: int):
        super().__init__(name=f"pyklog-network-{index}", daemon=True)
        self.server = server
        self.index = index
        self.selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._woken = False
        self.selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._new: collections.deque = collections.deque()
        self._responses: collections.deque = collections.deque()
        self.conns: dict[int, _Connection] = {}
        self.inflight = 0
        self.running = True
        self.draining = False
        self._memory_waiters: dict[int, _Connection] = {}  # muted until the MemoryPool has room
        server.memory_pool.add_listener(self.wakeup)

    # -- called from other threads -------------------------------------------------------
    def wakeup(self) -> None:
        if not self._woken:
            self._woken = True
            try:
                self._wake_w.send(b"\x00")
            except (BlockingIOError, OSError):
                pass

    def add_connection(
        self, sock: socket.socket, peer: str, ip: str = "", listener: ListenerSpec | None = None
    ) -> None:
        """Hand over an accepted socket of ``listener`` (default: the first), already counted in the
        server's quotas under ``ip``."""
        self._new.append((sock, peer, ip, listener))
        self.wakeup()

    def enqueue_response(self, conn: _Connection, action: int, chunks, slot: _Slot) -> None:
        self._responses.append((conn, action, chunks, slot))
        self.wakeup()

    # -- processor thread -----------------------------------------------------------------
    def run(self) -> None:
        next_idle_check = time.monotonic() + 1.0
        while self.running:
            try:
                events = self.selector.select(0.5)
                for key, mask in events:
                    conn = key.data
                    if conn is None:
                        self._drain_wakeups()
                        continue
                    if conn.closed:
                        continue
                    if conn.handshaking:
                        self._handshake(conn)
                        continue
                    if mask & selectors.EVENT_WRITE:
                        self._on_writable(conn)
                    if mask & selectors.EVENT_READ and not conn.closed:
                        self._on_readable(conn)
                self._process_new_connections()
                self._process_responses()
                if self._memory_waiters and not self.server.memory_pool.is_out_of_memory():
                    self._resume_memory_waiters()
                now = time.monotonic()
                if now >= next_idle_check:
                    next_idle_check = now + 1.0
                    self._close_idle(now)
            except Exception:  # never let the network thread die
                log.exception("network processor %d: unexpected error", self.index)
                time.sleep(0.01)
        for conn in list(self.conns.values()):
            self._close(conn, "broker shutting down")
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def _drain_wakeups(self) -> None:
        try:
            while self._wake_r.recv(4096):
                pass
        except (BlockingIOError, InterruptedError):
            pass
        self._woken = False

    def _process_new_connections(self) -> None:
        while self._new:
            sock, peer, ip, listener = self._new.popleft()
            listener = listener or self.server.listeners[0]
            if not self.running or self.draining:
                sock.close()
                self.server.quotas.dec(ip, listener.name)
                continue
            if listener.ssl_context is not None:
                try:  # no I/O yet: the handshake runs in _handshake as the socket becomes ready
                    sock = listener.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
                except (OSError, ValueError) as e:
                    log.info("closing connection from %s on listener %s: %s", peer, listener.name, e)
                    sock.close()
                    self.server.quotas.dec(ip, listener.name)
                    continue
            conn = _Connection(self.server.next_connection_id(), sock, peer, self, ip, listener)
            self.conns[conn.id] = conn
            log.debug("accepted connection %d from %s on listener %s", conn.id, peer, listener.name)
            if conn.handshaking:
                self._handshake(conn)
            else:
                self._set_interest(conn, selectors.EVENT_READ)

    def _handshake(self, conn: _Connection) -> None:
        """Advance the TLS handshake of ``conn`` without blocking; once done, the principal comes from
        the client's certificate and the connection reads requests.  A failed handshake (TLS garbage, an
        unknown client certificate) closes that connection only."""
        sock = conn.sock
        try:
            sock.do_handshake()
        except ssl.SSLWantReadError:
            self._set_interest(conn, selectors.EVENT_READ)
            return
        except ssl.SSLWantWriteError:
            self._set_interest(conn, selectors.EVENT_WRITE)
            return
        except (ssl.SSLError, OSError, ValueError) as e:
            log.info(
                "closing connection %d from %s on listener %s: TLS handshake failed: %s",
                conn.id,
                conn.peer,
                conn.listener_name,
                getattr(e, "reason", None) or e,
            )
            _drain_unread(sock)
            self._close(conn, "TLS handshake failed")
            return
        conn.handshaking = False
        conn.last_active = time.monotonic()
        builder = conn.listener.principal_builder
        if builder is not None:
            try:
                conn.principal = builder(sock.getpeercert(binary_form=True))
            except Exception as e:  # noqa: BLE001 - a bad certificate closes that connection only
                log.info("closing connection %d from %s: no principal for its certificate: %s", conn.id, conn.peer, e)
                self._close(conn, "no principal for the client certificate")
                return
        log.debug(
            "TLS connection %d from %s: %s, %s, principal %s",
            conn.id,
            conn.peer,
            sock.version(),
            (sock.cipher() or ("?",))[0],
            conn.principal,
        )
        self._set_interest(conn, selectors.EVENT_READ)
        if sock.pending():
            self._on_readable(conn)

    def _process_responses(self) -> None:
        while self._responses:
            conn, action, chunks, slot = self._responses.popleft()
            if action == _RELEASE:
                if slot.action or slot.released:
                    continue  # answered meanwhile
                slot.released = True
                self._release_memory(slot)  # the handler is done with the frame's bytes
                if not conn.closed:
                    self._unmute(conn)
                continue
            slot.action, slot.chunks = action, chunks
            self.inflight -= 1
            self._release_memory(slot)
            if conn.closed:
                slot.chunks = None
                _release_chunks(chunks)
                continue
            if conn.slots and conn.slots[0] is slot:
                self._queue_answers(conn)
                if conn.closed or (conn.out and not self._write(conn)):
                    continue  # closed, or waiting for EVENT_WRITE: unmuted once flushed
            self._unmute(conn)

    def _queue_answers(self, conn: _Connection) -> None:
        """Move the answers at the head of the connection's request order to its output (an answer
        waits for every request before it)."""
        slots = conn.slots
        while slots and slots[0].action and not conn.close_after_write:
            slot = slots.popleft()
            action, chunks = slot.action, slot.chunks
            slot.chunks = None
            if action == _CLOSE:
                _release_chunks(chunks)
                self._close(conn, "closed by request handler")
                return
            if action == _SEND_AND_CLOSE:
                conn.close_after_write = True
                action = _SEND
            if action == _SEND:
                for c in chunks:
                    if isinstance(c, (bytes, bytearray)):
                        if c:
                            conn.out.append(memoryview(c))
                    elif isinstance(c, memoryview):
                        if c.nbytes:
                            conn.out.append(c.cast("B") if c.format != "B" or c.ndim != 1 else c)
                    else:
                        r = _Region(c)
                        if r.remaining > 0:
                            conn.out.append(r)
                        elif r.owner is not None:
                            r.owner.close()
        if conn.tls:
            _coalesce(conn.out)

    def _unmute(self, conn: _Connection) -> None:
        """Read and dispatch the connection's next request unless its output is still being written
        or a request is in flight that did not let the next one in (or too many are)."""
        if conn.out:
            return  # _on_writable comes back here once everything is written
        if conn.close_after_write:
            self._close(conn, "authentication failed")
            return
        slots = conn.slots
        if slots and ((not slots[-1].released and not slots[-1].action) or len(slots) >= MAX_PIPELINED_REQUESTS):
            conn.muted = True
            self._set_interest(conn, 0)
            return
        conn.muted = False
        conn.last_active = time.monotonic()
        # the next request may already be buffered (pipelining clients)
        if not self._try_dispatch(conn) and not conn.closed:
            self._set_interest(conn, selectors.EVENT_READ)
            self._read_tls_buffered(conn)

    def _read_tls_buffered(self, conn: _Connection) -> None:
        """Bytes TLS already decrypted (``SSLSocket.pending()``) wake no selector: read them now."""
        if conn.tls and not conn.closed and not conn.muted and not conn.memory_muted and conn.sock.pending():
            self._on_readable(conn)

    def _set_interest(self, conn: _Connection, events: int) -> None:
        if conn.registered == events:
            return
        try:
            if events == 0:
                self.selector.unregister(conn.sock)
            elif conn.registered == 0:
                self.selector.register(conn.sock, events, conn)
            else:
                self.selector.modify(conn.sock, events, conn)
            conn.registered = events
        except (OSError, ValueError, KeyError) as e:
            self._close(conn, f"selector error: {e}")

    def _release_memory(self, holder: _Connection | _Slot) -> None:
        """Give back the MemoryPool bytes ``holder`` reserved: a connection's for the request it is
        receiving, a dispatched request's slot for its frame."""
        reserved, holder.reserved = holder.reserved, 0
        if reserved:
            self.server.memory_pool.release(reserved)

    def _resume_memory_waiters(self) -> None:
        """The MemoryPool has room again: let the waiting connections reserve and read, oldest first
        (one that still finds the pool exhausted goes back to the end of the line)."""
        pool = self.server.memory_pool
        for cid in list(self._memory_waiters):
            if pool.is_out_of_memory():
                return
            conn = self._memory_waiters.pop(cid)
            conn.memory_muted = False
            if conn.closed or conn.muted:
                continue
            if not self._try_dispatch(conn) and not conn.closed and not conn.memory_muted:
                self._set_interest(conn, selectors.EVENT_READ)
                self._read_tls_buffered(conn)

    def _on_readable(self, conn: _Connection) -> None:
        if conn.muted or conn.memory_muted:
            self._set_interest(conn, 0)
            return
        sock = conn.sock
        while True:
            buf = conn.buf
            if conn.end == len(buf):
                self._make_room(conn)
                buf = conn.buf
            space = len(buf) - conn.end
            try:
                n = sock.recv_into(memoryview(buf)[conn.end :], space)
            except (BlockingIOError, InterruptedError, ssl.SSLWantReadError, ssl.SSLWantWriteError):
                return
            except OSError as e:
                self._close(conn, f"receive failed: {e}")
                return
            if n == 0:
                self._close(conn, "closed by peer")
                return
            conn.end += n
            conn.last_active = time.monotonic()
            if self._try_dispatch(conn) or conn.closed:
                return
            if n < space and not (conn.tls and sock.pending()):
                return

    def _make_room(self, conn: _Connection) -> None:
        """Free space at the end of a full receive buffer: compact when the unconsumed bytes fill
        at most half of it, else double it (growth follows the bytes actually received, so a
        huge size prefix alone allocates nothing).  Only called while the connection is not
        muted, so no handler holds a view of the buffer; a grown buffer is a new object.  While
        requests that let the next one in are still in flight a new buffer is taken either way
        (their frames stay as they were)."""
        pending = conn.end - conn.start
        cap = len(conn.buf)
        if conn.slots:
            nb = bytearray(cap if pending <= cap // 2 else cap * 2)
            nb[0:pending] = memoryview(conn.buf)[conn.start : conn.end]
            conn.buf = nb
        elif conn.start > 0 and pending <= cap // 2:
            conn.buf[0:pending] = bytes(memoryview(conn.buf)[conn.start : conn.end])
        else:
            nb = bytearray(cap * 2)
            nb[0:pending] = memoryview(conn.buf)[conn.start : conn.end]
            conn.buf = nb
        conn.start, conn.end = 0, pending

    def _try_dispatch(self, conn: _Connection) -> bool:
        """Dispatch one complete buffered frame, if any; True when a request went out."""
        avail = conn.end - conn.start
        if avail < 4:
            if conn.start == conn.end:
                conn.start = conn.end = 0
            return False
        size = _SIZE.unpack_from(conn.buf, conn.start)[0]
        max_bytes = self.server.max_request_bytes
        auth = conn.authenticator
        if auth is not None and not auth.complete and size > auth.max_receive_size:
            # before authentication a frame is bounded by sasl.server.max.receive.size (Kafka's
            # SaslServerAuthenticator): an unauthenticated client cannot make the broker reserve more
            log.info(
                "closing connection %d from %s: a frame of %d bytes before authentication "
                "(sasl.server.max.receive.size=%d)",
                conn.id,
                conn.peer,
                size,
                auth.max_receive_size,
            )
            self._close(conn, "frame too large before authentication")
            return False
        if size < 0 or size > max_bytes:
            log.warning(
                "closing connection %d from %s: request frame of %d bytes (socket.request.max.bytes=%d)",
                conn.id,
                conn.peer,
                size,
                max_bytes,
            )
            self._close(conn, "frame size out of range")
            return False
        total = 4 + size
        if not conn.reserved:
            # reserve the whole request as soon as its size is known (Kafka's NetworkReceive
            # allocates from the MemoryPool once the size prefix is read)
            if not self.server.memory_pool.try_allocate(total):
                conn.memory_muted = True
                self._memory_waiters[conn.id] = conn
                self._set_interest(conn, 0)
                self.server.note_memory_pressure()
                return True  # stop reading this connection until memory is released
            conn.reserved = total
        if avail < total:
            return False
        if self.draining:
            self._set_interest(conn, 0)
            return True  # stop reading: the broker is shutting down
        frame = memoryview(conn.buf)[conn.start + 4 : conn.start + total]
        if _debug_requests():
            _log_request(conn, frame)
        conn.start += total
        if conn.start == conn.end:
            conn.start = conn.end = 0
        slot = _Slot(conn.reserved)  # the frame's memory goes with its request
        conn.reserved = 0
        conn.slots.append(slot)
        conn.muted = True
        self.inflight += 1
        self._set_interest(conn, 0)
        if auth is not None:
            # SASL (Kafka's SaslServerAuthenticator) runs here, on the network thread, before any
            # request reaches KafkaApis; only what it passes on (ApiVersions, then the requests of an
            # authenticated session) goes to the handler pool
            try:
                action, chunks = auth.on_frame(frame)
            except Exception:  # noqa: BLE001 - a bug here closes this connection, never the thread
                log.exception("SASL authentication of connection %d from %s failed", conn.id, conn.peer)
                action, chunks = _AUTH_CLOSE, None
            if auth.complete:
                conn.principal = auth.principal
            if action != _AUTH_PASS:
                self.enqueue_response(conn, _AUTH_ACTIONS[action], chunks, slot)
                return True
        if not self.server.submit(Request(conn, frame, slot)):
            conn.slots.pop()
            self._release_memory(slot)
            self.inflight -= 1
            self._close(conn, "request queue closed")
        return True

    def _on_writable(self, conn: _Connection) -> None:
        if self._write(conn):
            self._unmute(conn)

    def _write(self, conn: _Connection) -> bool:
        """Write pending chunks; True when everything is written."""
        if conn.tls:
            return self._write_tls(conn)
        out = conn.out
        fd = conn.fd
        sock = conn.sock
        try:
            while out:
                head = out[0]
                if isinstance(head, _Region):
                    n = os.sendfile(fd, head.fd, head.pos, min(head.remaining, _SENDFILE_CHUNK))
                    if n == 0:
                        self._close(conn, "segment file shorter than the fetch response (truncated?)")
                        return False
                    head.pos += n
                    head.remaining -= n
                    if head.remaining:
                        continue
                    out.popleft()
                    if head.owner is not None:
                        head.owner.close()
                    continue
                # gather consecutive byte chunks into one sendmsg
                bufs = []
                for c in out:
                    if isinstance(c, _Region) or len(bufs) >= _SENDMSG_MAX_BUFFERS:
                        break
                    bufs.append(c)
                more = len(bufs) < len(out)
                n = (
                    sock.sendmsg(bufs, (), socket.MSG_MORE if more else 0)
                    if len(bufs) > 1 or more
                    else sock.send(bufs[0])
                )
                partial = n < sum(c.nbytes for c in bufs)
                while n > 0:
                    c = out[0]
                    ln = c.nbytes
                    if n >= ln:
                        out.popleft()
                        n -= ln
                    else:
                        out[0] = c[n:]
                        n = 0
                if partial:  # the socket buffer is full: wait until it is writable
                    self._set_interest(conn, selectors.EVENT_WRITE)
                    return False
        except (BlockingIOError, InterruptedError):
            self._set_interest(conn, selectors.EVENT_WRITE)
            return False
        except OSError as e:
            self._close(conn, f"send failed: {e}")
            return False
        conn.last_active = time.monotonic()
        return True

    def _write_tls(self, conn: _Connection) -> bool:
        """:meth:`_write` through TLS: no sendfile or sendmsg; byte chunks go out in slices of
        :data:`_TLS_WRITE_CHUNK` (a slice retried after SSLWantWrite is the same bytes, as OpenSSL
        requires), a file region is read with ``pread`` a slice at a time (Kafka loses zero-copy
        over TLS too)."""
        out = conn.out
        sock = conn.sock
        try:
            while out:
                head = out[0]
                if isinstance(head, _Region):
                    data = os.pread(head.fd, min(head.remaining, _TLS_WRITE_CHUNK), head.pos)
                    if not data:
                        self._close(conn, "segment file shorter than the fetch response (truncated?)")
                        return False
                    head.pos += len(data)
                    head.remaining -= len(data)
                    if not head.remaining:
                        out.popleft()
                        if head.owner is not None:
                            head.owner.close()
                    out.appendleft(memoryview(data))
                    continue
                piece = head[:_TLS_WRITE_CHUNK]
                n = sock.send(piece)
                if n >= head.nbytes:
                    out.popleft()
                else:
                    out[0] = head[n:]
        except (BlockingIOError, InterruptedError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            self._set_interest(conn, selectors.EVENT_WRITE)
            return False
        except OSError as e:
            self._close(conn, f"send failed: {e}")
            return False
        conn.last_active = time.monotonic()
        return True

    def _close_idle(self, now: float) -> None:
        idle_s = self.server.connections_max_idle_ms / 1000.0
        if idle_s < 0:
            return
        for conn in list(self.conns.values()):
            if conn.handshaking and now - conn.accepted_at > TLS_HANDSHAKE_TIMEOUT_S:
                self._close(conn, "TLS handshake not finished in time")
            elif not conn.slots and not conn.out and now - conn.last_active > idle_s:
                self._close(conn, "idle for longer than connections.max.idle.ms")
            elif (
                not conn.muted
                and conn.start == conn.end
                and len(conn.buf) > _MAX_KEEP_BUFFER
                and now - conn.last_active > 1.0
            ):
                conn.buf = bytearray(_MIN_BUFFER)
                conn.start = conn.end = 0

    def _close(self, conn: _Connection, reason: str) -> None:
        if conn.closed:
            return
        conn.closed = True
        log.debug("closing connection %d from %s: %s", conn.id, conn.peer, reason)
        if conn.registered:
            try:
                self.selector.unregister(conn.sock)
            except (KeyError, ValueError, OSError):
                pass
            conn.registered = 0
        try:
            conn.sock.close()
        except OSError:
            pass
        for c in conn.out:
            if isinstance(c, _Region) and c.owner is not None:
                c.owner.close()
        conn.out.clear()
        self.conns.pop(conn.id, None)
        self._memory_waiters.pop(conn.id, None)
        self.server.quotas.dec(conn.ip, conn.listener.name if conn.listener is not None else None)
        # an in-flight request stays counted (and keeps its memory) until its handler answers
        # (_process_responses); answers given but not sent are dropped; the memory of a
        # half-received request goes back now
        for slot in conn.slots:
            if slot.action:
                chunks, slot.chunks = slot.chunks, None
                _release_chunks(chunks)
        self._release_memory(conn)

    def pending(self) -> int:
        """Requests in flight plus connections with unsent response bytes (approximate)."""
        return self.inflight + len(self._responses) + sum(1 for c in list(self.conns.values()) if c.out)


_REQUEST_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


def _debug_requests() -> bool:
    return log.isEnabledFor(logging.DEBUG)


def _log_request(conn: _Connection, frame: memoryview) -> None:
    """At DEBUG, one line per request frame (the request header of every version starts with
    ``api_key int16, api_version int16, correlation_id int32, client_id nullable string``, see
    Kafka's protocol guide): with the "accepted connection" line, what lets a test or an operator
    count connections and requests per API on the broker side.  Runs on the processor thread."""
    if len(frame) < _REQUEST_HEADER.size:
        return
    api_key, version, cid, n = _REQUEST_HEADER.unpack_from(frame, 0)
    start = _REQUEST_HEADER.size
    client_id = bytes(frame[start : start + n]).decode("utf-8", "replace") if n > 0 else None
    log.debug(
        "request api_key=%d api_version=%d correlation_id=%d client_id=%s connection=%d peer=%s",
        api_key,
        version,
        cid,
        client_id,
        conn.id,
        conn.peer,
    )


def _resolve_overrides(overrides: dict[str, int]) -> dict[str, int]:
    """``max.connections.per.ip.overrides`` keyed by address: a host name counts for each of its
    addresses (Kafka resolves each host with ``InetAddress.getByName``).  An unknown host raises
    ConfigError naming it."""
    out: dict[str, int] = {}
    for host, count in overrides.items():
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except socket.gaierror as e:
            raise ConfigError(f"max.connections.per.ip.overrides: cannot resolve host {host!r}: {e}") from e
        for info in infos:
            out[info[4][0]] = count
    return out


def _drain_unread(sock: socket.socket) -> None:
    """Discard what the peer sent that was not read (e.g. a request sent right after a TLS 1.3
    handshake the broker then refused): closing a socket with unread bytes sends a reset, which can
    reach the client before the TLS alert that says why."""
    try:
        fd = sock.fileno()
        for _ in range(16):
            if not os.read(fd, 65536):
                return
    except OSError:  # BlockingIOError: nothing more to read
        return


def _coalesce(out: collections.deque) -> None:
    """Join runs of small byte chunks (a response's header pieces) so that TLS sends them in one
    record rather than one record each.  Called before any of them is written."""
    merged: collections.deque = collections.deque()
    run: list = []
    size = 0
    for c in out:
        if isinstance(c, _Region) or size + c.nbytes > _TLS_WRITE_CHUNK:
            if run:
                merged.append(memoryview(b"".join(run)) if len(run) > 1 else run[0])
                run, size = [], 0
            if isinstance(c, _Region) or c.nbytes >= _TLS_WRITE_CHUNK:
                merged.append(c)
                continue
        run.append(c)
        size += c.nbytes
    if run:
        merged.append(memoryview(b"".join(run)) if len(run) > 1 else run[0])
    out.clear()
    out.extend(merged)


def _release_chunks(chunks) -> None:
    if not chunks:
        return
    for c in chunks:
        f = getattr(c, "file", None)
        if isinstance(f, OwnedFd):
            f.close()


class _Acceptor:
    """One listener's listening socket and acceptor thread (Kafka's ``Acceptor``)."""

    def __init__(self, spec: ListenerSpec):
        self.spec = spec
        self.port = spec.port
        self.listen: socket.socket | None = None
        self.thread: threading.Thread | None = None
        self.wake_r: socket.socket | None = None
        self.wake_w: socket.socket | None = None
        self.slots_logged = -REJECT_LOG_INTERVAL_S


class SocketServer:
    """Acceptors (one per listener) + processors + request handler pool.

    ``listeners`` (:class:`ListenerSpec`) are the endpoints served; without them, one listener
    ``listener_name`` on ``host``:``port``.  Each connection carries its listener's name and security
    protocol (:class:`Request`); a TLS listener's connections handshake first, in the processor
    threads, without blocking them.  The processors and the handler pool are shared by every listener.

    ``start()`` binds (``port`` 0 picks a free port; see :attr:`port` and :meth:`bound_port`) and starts the threads;
    ``stop()`` stops accepting, lets in-flight requests finish and their responses go out (up to
    ``drain_timeout_s``), then closes every connection.  Owned by one thread.
    """

    def __init__(
        self,
        host: str,
        port: int,
        handler: Callable[[Request], None],
        *,
        num_network_threads: int = 3,
        num_io_threads: int = 8,
        queued_max_requests: int = 500,
        max_request_bytes: int = 100 * 1024 * 1024,
        send_buffer_bytes: int = -1,
        receive_buffer_bytes: int = -1,
        connections_max_idle_ms: int = 600000,
        on_handler_error: Callable[[Request, BaseException], None] | None = None,
        max_connections: int = INT32_MAX,
        max_connections_per_ip: int = INT32_MAX,
        max_connections_per_ip_overrides: dict[str, int] | None = None,
        queued_max_request_bytes: int = -1,
        listener_name: str = "PLAINTEXT",
        security_protocol: str = "PLAINTEXT",
        listeners: Iterable[ListenerSpec] | None = None,
        authenticator_factory: Callable[[str], object] | None = None,
        inter_broker_listener: str | None = None,
    ):
        self.listeners: list[ListenerSpec] = list(
            listeners
            or [ListenerSpec(listener_name, security_protocol, host, port, authenticator_factory=authenticator_factory)]
        )
        first = self.listeners[0]
        self.host = first.host
        self.listener_name = first.name
        self.security_protocol = first.security_protocol
        self.port = first.port
        self._acceptors = [_Acceptor(spec) for spec in self.listeners]
        self.handler = handler
        self.num_network_threads = num_network_threads
        self.num_io_threads = num_io_threads
        self.max_request_bytes = max_request_bytes
        self.send_buffer_bytes = send_buffer_bytes
        self.receive_buffer_bytes = receive_buffer_bytes
        self.connections_max_idle_ms = connections_max_idle_ms
        self.on_handler_error = on_handler_error
        self.quotas = ConnectionQuotas(
            max_connections, max_connections_per_ip, _resolve_overrides(max_connections_per_ip_overrides or {})
        )
        self.quotas.listener_names = {spec.name.upper() for spec in self.listeners}
        self.quotas.protected_listener = inter_broker_listener
        self.memory_pool = MemoryPool(queued_max_request_bytes)
        self._pressure_logged = self._slots_logged = -REJECT_LOG_INTERVAL_S
        self.requests: queue.Queue = queue.Queue(maxsize=queued_max_requests)
        self.processors: list[Processor] = []
        self.handlers: list[threading.Thread] = []
        self._bound = False
        self._started = False
        self._accepting = False
        self._conn_ids = 0
        self._id_lock = threading.Lock()
        self._handlers_running = False

    # -- lifecycle ------------------------------------------------------------------------
    def bind(self) -> SocketServer:
        """Bind and listen on every listener (connections queue in the backlog until :meth:`start`);
        sets :attr:`port` (the first listener's) and each :meth:`bound_port`."""
        if self._bound:
            return self
        try:
            for a in self._acceptors:
                host = a.spec.host or "0.0.0.0"
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                ls = socket.socket(family, socket.SOCK_STREAM)
                a.listen = ls
                ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if self.receive_buffer_bytes > 0:
                    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)
                ls.bind((host, a.spec.port))
                ls.listen(512)
                ls.setblocking(False)
                a.port = ls.getsockname()[1]
        except BaseException:
            for a in self._acceptors:
                if a.listen is not None:
                    a.listen.close()
                    a.listen = None
            raise
        self._bound = True
        self.port = self._acceptors[0].port
        return self

    def bound_port(self, listener_name: str) -> int:
        """The port listener ``listener_name`` is bound to (KeyError if there is no such listener)."""
        for a in self._acceptors:
            if a.spec.name == listener_name:
                return a.port
        raise KeyError(listener_name)

    def set_ssl_context(self, listener_name: str, context: ssl.SSLContext) -> None:
        """A TLS listener's new server context (its keystore or truststore changed): the listener's
        next connections handshake with it; open connections keep theirs (any thread)."""
        for a in self._acceptors:
            if a.spec.name == listener_name:
                if a.spec.ssl_context is None:
                    raise ValueError(f"listener {listener_name} is not a TLS listener")
                a.spec = dataclasses.replace(a.spec, ssl_context=context)
                self.listeners = [a.spec if s.name == listener_name else s for s in self.listeners]
                return
        raise KeyError(listener_name)

    def note_memory_pressure(self) -> None:
        """A connection waits for the MemoryPool: one INFO line per minute at most (any thread)."""
        now = time.monotonic()
        if now - self._pressure_logged >= REJECT_LOG_INTERVAL_S:
            self._pressure_logged = now
            log.info(
                "queued.max.request.bytes=%d exhausted: network threads stop reading new requests until "
                "memory is released (logged at most once a minute)",
                self.memory_pool.capacity,
            )

    def start(self) -> SocketServer:
        """Bind if needed and start the handler pool, the processors and the acceptor."""
        self.bind()
        self._handlers_running = True
        for i in range(self.num_io_threads):
            t = threading.Thread(target=self._handler_loop, name=f"pyklog-request-handler-{i}", daemon=True)
            t.start()
            self.handlers.append(t)
        for i in range(self.num_network_threads):
            p = Processor(self, i)
            p.start()
            self.processors.append(p)
        self._accepting = True
        self._started = True
        for a in self._acceptors:
            a.wake_r, a.wake_w = socket.socketpair()
            a.thread = threading.Thread(
                target=self._accept_loop, args=(a,), name=f"pyklog-acceptor-{a.spec.name}", daemon=True
            )
            a.thread.start()
        return self

    def stop(self, drain_timeout_s: float = 30.0) -> None:
        """Stop accepting, finish in-flight requests (their responses are written), close all."""
        if self._started:
            self._accepting = False
            for a in self._acceptors:
                try:
                    a.wake_w.send(b"\x00")
                except OSError:
                    pass
            self.quotas.wake()
            for a in self._acceptors:
                if a.thread is not None:
                    a.thread.join(5)
                    a.thread = None
            self._started = False
        elif self._bound:
            for a in self._acceptors:  # bound but never started
                if a.listen is not None:
                    a.listen.close()
        for p in self.processors:
            p.draining = True
            p.wakeup()
        deadline = time.monotonic() + drain_timeout_s
        while time.monotonic() < deadline:
            if all(p.pending() == 0 for p in self.processors):
                break
            time.sleep(0.01)
        else:
            log.warning("socket server: requests still in flight after %.1fs, closing anyway", drain_timeout_s)
        for p in self.processors:
            p.running = False
            p.wakeup()
        for p in self.processors:
            p.join(5)
        self._handlers_running = False
        for _ in self.handlers:
            try:
                self.requests.put(None, timeout=1)
            except queue.Full:
                pass
        for t in self.handlers:
            t.join(5)
        self.handlers = []
        self.processors = []
        self.memory_pool.clear_listeners()
        for a in self._acceptors:
            for s in (a.wake_r, a.wake_w):
                if s is not None:
                    s.close()
            a.wake_r = a.wake_w = None

    # -- acceptor -------------------------------------------------------------------------
    def _accept_loop(self, acceptor: _Acceptor) -> None:
        listen = acceptor.listen
        sel = selectors.DefaultSelector()
        sel.register(listen, selectors.EVENT_READ)
        sel.register(acceptor.wake_r, selectors.EVENT_READ)
        rr = 0
        quotas = self.quotas
        listener = acceptor.spec.name
        try:
            while self._accepting:
                if not quotas.slot_available(listener):
                    # Kafka's Acceptor waits for a connection slot: new connections wait in the
                    # listen backlog until one closes
                    now = time.monotonic()
                    if now - acceptor.slots_logged >= REJECT_LOG_INTERVAL_S:
                        acceptor.slots_logged = now
                        at_listener = quotas.per_listener.get(listener.upper(), 0) >= quotas.listener_limit(listener)
                        log.info(
                            "%s reached: listener %s accepts no connection until one closes (logged at "
                            "most once a minute per listener)",
                            f"listener.name.{listener.lower()}.max.connections={quotas.listener_limit(listener)}"
                            if at_listener
                            else f"max.connections={quotas.max_connections}",
                            listener,
                        )
                    while self._accepting and not quotas.wait_for_slot(0.5, listener):
                        pass
                    continue
                try:
                    ready = sel.select(1.0)
                except OSError:
                    continue
                for key, _ in ready:
                    if key.fileobj is not listen:
                        continue
                    while self._accepting and quotas.slot_available(listener):
                        try:
                            sock, addr = listen.accept()
                        except (BlockingIOError, InterruptedError):
                            break
                        except OSError as e:  # EMFILE etc.: back off, keep serving
                            log.warning("accept failed: %s", e)
                            time.sleep(0.1)
                            break
                        ip = addr[0] if isinstance(addr, tuple) else str(addr)
                        if not quotas.try_inc(ip, listener):
                            sock.close()  # Kafka: TooManyConnectionsException, connection closed
                            refused = quotas.note_rejected(ip, time.monotonic())
                            if refused is not None:
                                log.warning(
                                    "refused %d connection(s) from %s: it already has the maximum of "
                                    "%d (max.connections.per.ip / max.connections.per.ip.overrides); "
                                    "logged at most once a minute per address",
                                    refused,
                                    ip,
                                    quotas.limit_for(ip),
                                )
                            continue
                        try:
                            self._configure(sock)
                        except OSError as e:
                            log.debug("cannot configure accepted socket: %s", e)
                            sock.close()
                            quotas.dec(ip, listener)
                            continue
                        peer = f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr)
                        # read per connection: a new TLS context (set_ssl_context) serves the next one
                        self.processors[rr % len(self.processors)].add_connection(sock, peer, ip, acceptor.spec)
                        rr += 1
        finally:
            sel.close()
            listen.close()

    def _configure(self, sock: socket.socket) -> None:
        sock.setblocking(False)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        if self.send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer_bytes)
        if self.receive_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer_bytes)

    def next_connection_id(self) -> int:
        with self._id_lock:
            self._conn_ids += 1
            return self._conn_ids

    # -- request queue --------------------------------------------------------------------
    def submit(self, request: Request) -> bool:
        """Queue a request for the handler pool (blocks while the queue is full, as Kafka does)."""
        while True:
            if not self._handlers_running:
                return False
            try:
                self.requests.put(request, timeout=0.5)
                return True
            except queue.Full:
                continue

    def _handler_loop(self) -> None:
        handler = self.handler
        get = self.requests.get
        while True:
            request = get()
            if request is None:
                return
            try:
                handler(request)
            except BaseException as e:  # noqa: BLE001 - one request must never kill the pool
                log.exception("request handler failed on connection %d from %s", request.connection_id, request.peer)
                if self.on_handler_error is not None:
                    try:
                        self.on_handler_error(request, e)
                    except Exception:
                        log.exception("on_handler_error failed")
                if not request.answered:
                    try:
                        request.close_connection()
                    except RuntimeError:
                        pass
