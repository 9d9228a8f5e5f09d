"""Blocking socket reads the broker's own connections to other brokers share (replica fetchers,
transaction markers, controlled shutdown, the inter-broker SASL login).  Caller's thread."""

from __future__ import annotations

import socket


def recv_exact(sock: socket.socket, n: int, closed: str) -> bytes:
    """Exactly ``n`` bytes from ``sock`` (a socket timeout propagates); ConnectionError
    ``"<closed> after <k> of <n> bytes"`` when the peer closes first."""
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise ConnectionError(f"{closed} after {got} of {n} bytes")
        got += k
    return bytes(buf)
