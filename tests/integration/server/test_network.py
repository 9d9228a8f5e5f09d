"""The socket server alone (broker.server.network), with small handlers written here: framing,
request order on pipelined connections, sendfile regions, oversized frames, handler failures."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from pyklog.broker.server.network import OwnedFd, SocketServer
from tests.support import wait_for


class Region:
    def __init__(self, file, position, size):
        self.file, self.position, self.size = file, position, size


def _recv_exact(s: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        b = s.recv(n - len(out))
        if not b:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += b
    return bytes(out)


def _recv_frame(s: socket.socket) -> bytes:
    (size,) = struct.unpack(">i", _recv_exact(s, 4))
    return _recv_exact(s, size)


def _frame(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def _closed(s: socket.socket, timeout: float = 5.0) -> bool:
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.fixture
def server_factory():
    servers = []

    def make(handler, **kw):
        srv = SocketServer("127.0.0.1", 0, handler, **kw).start()
        servers.append(srv)
        return srv

    yield make
    for s in servers:
        s.stop(drain_timeout_s=5)


def echo_reversed(request):
    body = bytes(request.frame)
    if body == b"close":
        request.close_connection()
    elif body == b"nothing":
        request.send_nothing()
    elif body == b"boom":
        raise RuntimeError("handler failure on purpose")
    elif body.startswith(b"sleep"):
        # answer later from another thread, like a delayed fetch
        threading.Timer(0.2, lambda: request.send([_frame(body[::-1])])).start()
    else:
        request.send([_frame(body[::-1])])


def test_pipelined_requests_answer_in_order(server_factory):
    srv = server_factory(echo_reversed, num_network_threads=2, num_io_threads=4)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        bodies = [b"sleep-first"] + [f"req-{i}".encode() * (i + 1) for i in range(200)]
        s.sendall(b"".join(_frame(b) for b in bodies))
        for b in bodies:
            assert _recv_frame(s) == b[::-1]


def test_requests_that_let_the_next_in_overlap_and_are_answered_in_order(server_factory):
    """A handler that lets the connection's next request in (an acks=all Produce waiting for its
    followers) has the next ones handled meanwhile; answered in reverse, they still go out in
    request order, with large answers written in pieces, and the memory of each frame goes back."""
    held, lock = [], threading.Lock()
    n = 300

    def handler(request):
        body = bytes(request.frame)
        if body.startswith(b"wait"):
            with lock:
                held.append((request, body))
                full = len(held) == n
            request.let_next_in()
            if full:  # every one was let in while the others waited: answer newest first
                with lock:
                    for r, b in reversed(held):
                        r.send([_frame(b[::-1] * (2000 if b.endswith(b"7") else 1))])
        else:
            echo_reversed(request)

    srv = server_factory(handler, num_network_threads=1, num_io_threads=2)
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        bodies = [b"wait-%d" % i for i in range(n)] + [b"after"]
        s.sendall(b"".join(_frame(b) for b in bodies))
        for b in bodies[:-1]:
            assert _recv_frame(s) == b[::-1] * (2000 if b.endswith(b"7") else 1)
        assert _recv_frame(s) == b"retfa"
    # a client that goes away while its requests wait: their late answers are dropped
    held.clear()
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(b"".join(_frame(b"wait-gone-%d" % i) for i in range(5)))
        wait_for(lambda: len(held) == 5, message="the five requests are waiting")
    time.sleep(0.2)  # the server notices the close
    for r, b in held:
        r.send([_frame(b)])
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(_frame(b"still"))
        assert _recv_frame(s) == b"llits"
    wait_for(lambda: srv.memory_pool.available == srv.memory_pool.capacity, message="every reservation went back")


def test_large_frame_and_split_writes(server_factory):
    srv = server_factory(echo_reversed, num_network_threads=1, num_io_threads=1)
    body = os.urandom(3 * 1024 * 1024 + 17)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        data = _frame(body)
        for i in range(0, len(data), 100_003):  # dribble the frame in pieces
            s.sendall(data[i : i + 100_003])
        assert _recv_frame(s) == body[::-1]
        s.sendall(_frame(b"abc"))
        assert _recv_frame(s) == b"cba"


def test_oversized_and_negative_frames_close_only_that_connection(server_factory):
    srv = server_factory(echo_reversed, max_request_bytes=1000)
    with socket.create_connection(("127.0.0.1", srv.port)) as good:
        with socket.create_connection(("127.0.0.1", srv.port)) as bad:
            bad.sendall(struct.pack(">i", 1001) + b"x" * 10)
            assert _closed(bad)
        with socket.create_connection(("127.0.0.1", srv.port)) as bad:
            bad.sendall(struct.pack(">i", -5))
            assert _closed(bad)
        good.sendall(_frame(b"x" * 1000))
        assert _recv_frame(good) == b"x" * 1000


def test_handler_failure_close_and_no_response(server_factory):
    srv = server_factory(echo_reversed)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(_frame(b"boom"))
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(_frame(b"close"))
        assert _closed(s)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        s.sendall(_frame(b"nothing") + _frame(b"after"))
        assert _recv_frame(s) == b"retfa"


def test_sendfile_regions_and_owned_fds(server_factory, tmp_path):
    path = tmp_path / "segment.log"
    payload = os.urandom(5 * 1024 * 1024)
    path.write_bytes(payload)
    f = open(path, "rb")
    owned = []

    def handler(request):
        pos, size = struct.unpack(">ii", request.frame)
        fd = OwnedFd(os.dup(f.fileno()))
        owned.append(fd)
        request.send([struct.pack(">i", size + 3), b"hd:", Region(fd, pos, size)])

    srv = server_factory(handler)
    with socket.create_connection(("127.0.0.1", srv.port)) as s:
        for pos, size in [(0, 10), (1234, 4 * 1024 * 1024), (len(payload) - 1, 1), (7, 0)]:
            s.sendall(_frame(struct.pack(">ii", pos, size)))
            assert _recv_frame(s) == b"hd:" + payload[pos : pos + size]
    f.close()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and any(o.fd >= 0 for o in owned):
        time.sleep(0.01)
    assert all(o.fd == -1 for o in owned), "owned fds are closed after the response is sent"


def test_stop_finishes_in_flight_requests(server_factory):
    srv = server_factory(echo_reversed)
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.sendall(_frame(b"sleep-during-stop"))
    time.sleep(0.05)
    stopper = threading.Thread(target=srv.stop, kwargs={"drain_timeout_s": 5})
    stopper.start()
    assert _recv_frame(s) == b"pots-gnirud-peels"
    stopper.join(10)
    assert not stopper.is_alive()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1).close()
    s.close()


def test_idle_connections_are_closed(server_factory):
    srv = server_factory(echo_reversed, connections_max_idle_ms=200)
    with (
        socket.create_connection(("127.0.0.1", srv.port)) as busy,
        socket.create_connection(("127.0.0.1", srv.port)) as idle,
    ):
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.5:  # keep one connection busy
            busy.sendall(_frame(b"ping"))
            assert _recv_frame(busy) == b"gnip"
            time.sleep(0.05)
        assert _closed(idle, timeout=3)
        busy.sendall(_frame(b"still"))
        assert _recv_frame(busy) == b"llits"


def test_memory_pool_mutes_reads_until_a_request_is_answered(server_factory):
    """queued.max.request.bytes: a request larger than the pool is still served (non-strict, as
    Kafka's SimpleMemoryPool in the broker), and while its bytes are held by the handler no other
    connection is read; answering it releases the memory and the waiting request is served."""
    held = []
    got_big = threading.Event()

    def handler(request):
        if len(request.frame) > 1000:
            held.append(request)
            got_big.set()
        else:
            echo_reversed(request)

    srv = server_factory(handler, queued_max_request_bytes=1000)
    big = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    big.sendall(_frame(b"B" * 4000))
    assert got_big.wait(5)
    small = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    small.sendall(_frame(b"abc"))
    small.settimeout(1.0)
    with pytest.raises(socket.timeout):
        small.recv(1)  # muted: the pool is exhausted by the request the handler holds
    held.pop().send([_frame(b"done")])
    assert _recv_frame(big) == b"done"
    small.settimeout(5.0)
    assert _recv_frame(small) == b"cba"
    assert srv.memory_pool.available == 1000  # every reservation went back
    big.close()
    small.close()


def test_connection_quotas_per_ip_and_total(server_factory):
    srv = server_factory(echo_reversed, max_connections_per_ip=2)
    a = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    b = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    for s in (a, b):
        s.sendall(_frame(b"xy"))
        assert _recv_frame(s) == b"yx"
    c = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    assert _closed(c)
    a.close()
    wait_for(lambda: srv.quotas.total == 1, timeout=5, message="the closed connection counted out")
    d = socket.create_connection(("127.0.0.1", srv.port), timeout=5)
    d.sendall(_frame(b"ok"))
    assert _recv_frame(d) == b"ko"
    for s in (b, c, d):
        s.close()
