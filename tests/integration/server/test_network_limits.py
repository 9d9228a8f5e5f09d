"""The socket server's resource bounds on a real broker process: ``queued.max.request.bytes`` (Kafka's
MemoryPool: memory for a request is reserved when its size prefix is read, and the network threads
stop reading while the pool is exhausted), ``max.connections.per.ip`` and ``max.connections``
(Kafka's ``ConnectionQuotas``).  Each test counts what was served and refused, and ends by checking
that the broker is alive and answers a stock client."""

from __future__ import annotations

import socket
import struct
import threading
import time
import uuid

from pyklog.broker.protocol import ApiKey, decode_response
from tests.support import Wire, wait_for

MiB = 1024 * 1024


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


def _api_versions_ok(port: int, timeout: float = 10.0) -> bool:
    try:
        with Wire(port, timeout=timeout) as w:
            return w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
    except (OSError, ConnectionError):
        return False


def _assert_alive_and_serving(b) -> None:
    assert b.proc.poll() is None, f"broker exited with {b.proc.returncode}"
    assert _api_versions_ok(b.port), "broker does not answer ApiVersions"


def _produce_consume(bootstrap: str, n: int = 20) -> tuple[int, int]:
    """Produce ``n`` records with confluent-kafka (acks=all) and read them back: (acknowledged, read)."""
    from confluent_kafka import Consumer, Producer

    topic = f"bounds-{uuid.uuid4().hex[:8]}"
    acked = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 30000})
    for i in range(n):
        p.produce(
            topic, value=b"v%d" % i, on_delivery=lambda err, msg: acked.append(msg.value()) if err is None else None
        )
    p.flush(40)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": topic,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + 40
    while len(got) < len(acked) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert sorted(got) == sorted(acked), f"acked {len(acked)}, read {len(got)}"
    return len(acked), len(got)


def stall_half_sent_requests(
    port: int, pid: int, connections: int = 8, request_size: int = 100_000_000, body_bytes: int = 20 * MiB
) -> dict:
    """Open ``connections`` sockets that each send the size prefix of a ``request_size`` request and
    then up to ``body_bytes`` of its body, and stall.  Returns the bytes each one got into the
    broker (or its socket buffers), the broker's RSS before and the highest RSS seen while the
    requests stall, and the open sockets (the caller closes them)."""
    base = _rss_kib(pid)
    socks = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(connections)]
    sent = [0] * connections
    chunk = b"\x00" * MiB

    def feed(i: int) -> None:
        s = socks[i]
        s.settimeout(2.0)  # a muted connection stops taking bytes once the socket buffers are full
        try:
            s.sendall(struct.pack(">i", request_size))
            while sent[i] < body_bytes:
                sent[i] += s.send(chunk[: min(len(chunk), body_bytes - sent[i])])
        except (TimeoutError, OSError):
            pass

    threads = [threading.Thread(target=feed, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    peak = base
    while any(t.is_alive() for t in threads):
        peak = max(peak, _rss_kib(pid))
        time.sleep(0.05)
    for _ in range(40):  # the broker may still be copying what is in its socket buffers
        peak = max(peak, _rss_kib(pid))
        time.sleep(0.05)
    return {"base_kib": base, "peak_kib": peak, "sent": sent, "socks": socks}


def test_queued_max_request_bytes_bounds_half_sent_requests(broker_factory):
    b = broker_factory(0, socket_request_max_bytes=200 * 1000 * 1000, queued_max_request_bytes=32 * MiB)
    _assert_alive_and_serving(b)
    r = stall_half_sent_requests(b.port, b.proc.pid)
    growth_mib = (r["peak_kib"] - r["base_kib"]) / 1024
    print(
        f"queued.max.request.bytes=32MiB: 8 half-sent 100 MB requests, client bytes sent "
        f"{sum(r['sent']) // MiB} MiB ({[s // MiB for s in r['sent']]}), broker RSS "
        f"{r['base_kib'] // 1024} -> peak {r['peak_kib'] // 1024} MiB (+{growth_mib:.0f} MiB)"
    )
    assert b.proc.poll() is None
    assert growth_mib < 120, f"broker RSS grew by {growth_mib:.0f} MiB"
    # a new client is not read while the pool is exhausted (its connection is muted) ...
    waiting = Wire(b.port, timeout=10)
    cid = waiting.send(ApiKey.API_VERSIONS, 0, {})
    waiting.sock.settimeout(2.0)
    try:
        early = waiting.sock.recv(1)
    except TimeoutError:
        early = None
    assert early is None, "answered while queued.max.request.bytes was exhausted"
    for s in r["socks"]:
        s.close()
    # ... and is served once the stalled requests' memory is released
    waiting.sock.settimeout(10.0)
    got_cid, resp = decode_response(ApiKey.API_VERSIONS, 0, waiting.recv_frame())
    waiting.close()
    assert (got_cid, resp["error_code"]) == (cid, 0)
    print("a client muted while the pool was exhausted: 0 answers during the stall, 1 after release")
    acked, read = _produce_consume(b.bootstrap)
    print(f"after closing the stalled connections: {acked} produced and acknowledged, {read} read back")
    assert acked == 20 and read == 20
    _assert_alive_and_serving(b)


def _open_served(port: int, n: int) -> list[Wire]:
    wires = []
    for _ in range(n):
        w = Wire(port, timeout=10)
        assert w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        wires.append(w)
    return wires


def test_max_connections_per_ip_closes_the_extra_connections(broker_factory):
    b = broker_factory(0, max_connections_per_ip=5)
    first = _open_served(b.port, 5)
    refused = 0
    for _ in range(3):  # the 6th, 7th, 8th connection from 127.0.0.1
        w = Wire(b.port, timeout=10)
        if w.is_closed(timeout=5):
            refused += 1
        w.close()
    still_served = sum(1 for w in first if w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0)
    lines = [ln for ln in b.output().splitlines() if "refused" in ln and "127.0.0.1" in ln]
    print(
        f"max.connections.per.ip=5: 5 served, {refused} of 3 extra connections closed by the broker, "
        f"{still_served} of the first 5 still served, {len(lines)} log line(s) for the refusals"
    )
    assert refused == 3 and still_served == 5
    assert len(lines) == 1, lines  # one line per address per interval, not one per connection
    first.pop().close()  # a slot frees up: a new connection is served again
    wait_for(lambda: _api_versions_ok(b.port, timeout=5), timeout=15, message="a new connection served")
    for w in first:
        w.close()
    acked, read = _produce_consume(b.bootstrap)
    assert acked == read == 20
    _assert_alive_and_serving(b)


def test_max_connections_makes_the_acceptor_wait(broker_factory):
    b = broker_factory(0, max_connections=10)
    ten = _open_served(b.port, 10)
    eleventh = Wire(b.port, timeout=10)  # completes in the kernel's listen backlog
    cid = eleventh.send(ApiKey.API_VERSIONS, 0, {})
    eleventh.sock.settimeout(2.0)
    try:
        early = eleventh.sock.recv(1)
    except TimeoutError:
        early = None
    assert early is None, "the 11th connection was served while 10 were open"
    ten.pop(0).close()  # a slot frees up: the acceptor takes the waiting connection
    eleventh.sock.settimeout(10.0)
    got_cid, resp = decode_response(ApiKey.API_VERSIONS, 0, eleventh.recv_frame())
    assert (got_cid, resp["error_code"]) == (cid, 0)
    still = sum(1 for w in ten if w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0)
    print(
        f"max.connections=10: 10 served, the 11th waited (0 answers in 2 s) and was served after one "
        f"closed; {still} of the other 9 still served"
    )
    assert still == 9
    for w in ten + [eleventh]:
        w.close()
    acked, read = _produce_consume(b.bootstrap)
    assert acked == read == 20
    _assert_alive_and_serving(b)
