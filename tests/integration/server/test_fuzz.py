"""Fuzzing a live broker process with bad frames: random bytes, valid headers with random bodies,
mutated valid requests, flexible (KIP-482) requests with bad varints, huge compact lengths and
broken tagged field sections, truncated frames and huge length prefixes (thousands of cases, seeded).

After each case the same connection carries a valid ApiVersions request: the broker must either
answer it (after any answer to the bad frame) or close the connection -- never hang, never crash.
At the end the broker process is alive, has logged no unexpected handler failure (no Traceback),
and a stock client (confluent-kafka) still produces and consumes.

The same over an SSL listener: random bytes and random TLS records instead of a ClientHello,
truncated and mutated ClientHellos, clients that stop mid-handshake and stay connected, then a
sample of the bad frames above after a valid handshake; a good TLS client is answered after every
group of cases and the broker logs nothing at ERROR.
"""

from __future__ import annotations

import os
import random
import socket
import ssl
import struct
import time
import uuid

from pyklog.broker.protocol import SUPPORTED, ApiKey, encode_request, is_flexible
from tests.integration.security.tls_broker_support import start_tls_broker, tls_certs
from tests.support import Wire, create_topic, records, stable_port

__all__ = ["tls_certs"]  # the session fixture, used by name

SEED = int(os.environ.get("PYKLOG_FUZZ_SEED", "20261122"))
SCALE = float(os.environ.get("PYKLOG_FUZZ_SCALE", "1"))  # multiply the number of cases
REQUEST_MAX = 1 << 20
PROBE_CID = 0x7EADBEEF


def _probe() -> bytes:
    return encode_request(ApiKey.API_VERSIONS, 0, PROBE_CID, "probe", {})


def _valid_requests(topic: str) -> list[bytes]:
    """Well-formed requests of every API, the seeds of the mutation cases."""
    out = []
    bodies = {
        ApiKey.PRODUCE: {
            "acks": 1,
            "timeout_ms": 1000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records(3)}]}],
        },
        ApiKey.FETCH: {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": topic,
                    "topic_id": uuid.UUID(int=0x5EED),
                    "partitions": [  # v13+: by id (unknown here)
                        {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 65536}
                    ],
                }
            ],
        },
        ApiKey.LIST_OFFSETS: {
            "replica_id": -1,
            "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": -1, "max_num_offsets": 3}]}],
        },
        ApiKey.METADATA: {"topics": [{"name": topic}], "allow_auto_topic_creation": False},
        ApiKey.OFFSET_COMMIT: {
            "group_id": "fuzz",
            "topics": [
                {"name": topic, "partitions": [{"partition_index": 0, "committed_offset": 1, "committed_metadata": ""}]}
            ],
        },
        ApiKey.OFFSET_FETCH: {
            "group_id": "fuzz",
            "topics": [{"name": topic, "partition_indexes": [0]}],
            "require_stable": True,
            "groups": [  # v8+
                {"group_id": "fuzz", "topics": [{"name": topic, "partition_indexes": [0, 1]}]},
                {"group_id": "fuzz-2", "topics": None},
            ],
        },
        ApiKey.FIND_COORDINATOR: {"key": "fuzz", "coordinator_keys": ["fuzz", "fuzz-2"]},  # v4+: batched
        ApiKey.API_VERSIONS: {},
        ApiKey.CREATE_TOPICS: {
            "topics": [{"name": "fuzz-created", "num_partitions": 1, "replication_factor": 1}],
            "timeout_ms": 1000,
            "validate_only": True,
        },
        ApiKey.DELETE_TOPICS: {
            "topic_names": ["fuzz-not-there"],
            "timeout_ms": 1000,
            "topics": [  # v6+
                {"name": "fuzz-not-there"},
                {"name": None, "topic_id": uuid.UUID(int=0x5EED)},
            ],
        },
        ApiKey.INIT_PRODUCER_ID: {
            "transactional_id": None,
            "transaction_timeout_ms": 1000,
            "producer_id": 5,
            "producer_epoch": 1,
        },  # v3+ (KIP-360)
    }
    for api, body in bodies.items():
        lo, hi = SUPPORTED[api]
        for v in range(lo, hi + 1):
            b = dict(body)
            if api == ApiKey.PRODUCE and v < 3:
                from pyklog.broker.record.legacy import build_message_set

                b = {
                    "acks": 1,
                    "timeout_ms": 1000,
                    "topic_data": [
                        {
                            "name": topic,
                            "partition_data": [
                                {
                                    "index": 0,
                                    "records": build_message_set([(None, b"legacy", 0)], magic=0 if v < 2 else 1),
                                }
                            ],
                        }
                    ],
                }
            out.append(encode_request(api, v, 1, "fuzz", b))
    return out


def _cases(rng: random.Random, topic: str):
    valid = _valid_requests(topic)
    apis = [int(k) for k in SUPPORTED] + [4, 11, 12, 17, 23, 36, 60, 75, 999, -1, 32767]
    for _ in range(int(700 * SCALE)):  # random bytes with a consistent size prefix
        body = rng.randbytes(rng.choice([0, 1, 3, 7, 8, 9, 20, 100, 1000]))
        yield "random", struct.pack(">i", len(body)) + body
    for _ in range(int(1500 * SCALE)):  # valid header, random body
        api = rng.choice(apis)
        lo, hi = SUPPORTED.get(api, (0, 5))
        version = rng.choice([rng.randint(lo, hi), rng.randint(lo, hi), hi + 1, -1, rng.randint(0, 40)])
        cid = rng.randint(-(2**31), 2**31 - 1)
        client = rng.choice([b"", b"fuzz", rng.randbytes(5)])
        header = struct.pack(">hhih", api & 0xFFFF if api >= 0 else api, version, cid, len(client)) + client
        if api < 0 or api > 32767:
            header = struct.pack(">HhiH", api & 0xFFFF, version, cid, len(client)) + client
        body = rng.randbytes(rng.choice([0, 1, 2, 4, 8, 16, 40, 200]))
        frame = header + body
        yield "header+random", struct.pack(">i", len(frame)) + frame
    for _ in range(int(1500 * SCALE)):  # mutated valid requests (bit flips, overwritten ints, cut or extended)
        frame = bytearray(rng.choice(valid))
        kind = rng.randrange(4)
        if kind == 0:
            for _ in range(rng.randint(1, 4)):
                i = rng.randrange(4, len(frame))
                frame[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            i = rng.randrange(12, len(frame) - 3) if len(frame) > 16 else 8
            frame[i : i + 4] = struct.pack(">i", rng.choice([-1, -2, 0, 1, 2**31 - 1, -(2**31), 65535, 1 << 20]))
        elif kind == 2:
            cut = rng.randrange(14, len(frame)) if len(frame) > 15 else len(frame)
            frame = frame[:cut]
            frame[0:4] = struct.pack(">i", len(frame) - 4)
        else:
            frame += rng.randbytes(rng.randint(1, 10))
            frame[0:4] = struct.pack(">i", len(frame) - 4)
        yield "mutated", bytes(frame)
    flexible = [f for f in valid if is_flexible(*struct.unpack_from(">hh", f, 4))]
    assert flexible
    for _ in range(int(600 * SCALE)):  # flexible versions: bad varints, huge compact lengths, bad tags
        frame = bytearray(rng.choice(flexible))
        hdr_end = 14 + struct.unpack_from(">h", frame, 12)[0] + 1  # size, header v2 and its tag count
        i = rng.randrange(hdr_end - 1, len(frame))
        kind = rng.randrange(5)
        if kind == 0:  # a varint that never ends (or ends after more than 5 bytes)
            frame[i:i] = b"\xff" * rng.randint(1, 9)
        elif kind == 1:  # a huge compact length / count (uvarint 2**32 - 1 .. 2**28)
            frame[i : i + 1] = rng.choice([b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x01", b"\xfe\xff\x03"])
        elif kind == 2:  # a tagged field section that promises more than it has
            frame[-1:] = rng.choice([b"\x01", b"\x01\x05", b"\x01\x05\x10ab", b"\x7f\x00\x00", b"\x02\x01\x00\x00\x00"])
        elif kind == 3:  # the header's tagged field count clobbered
            frame[hdr_end - 1] = rng.choice([1, 0x7F, 0x80, 0xFF])
        else:  # a compact length set to 0 (null) or to 1 + a random amount
            frame[i] = rng.choice([0, 1, 0x7F, 0x80])
        frame[0:4] = struct.pack(">i", len(frame) - 4)
        yield "flexible", bytes(frame)
    for size in (REQUEST_MAX + 1, 2**31 - 1, -1, -(2**31), 2**30):  # huge or negative length prefixes
        yield "huge-prefix", struct.pack(">i", size) + rng.randbytes(100)
    for _ in range(int(100 * SCALE)):  # truncated frames: the prefix promises more than is ever sent
        frame = rng.choice(valid)
        yield "truncated", frame[: rng.randrange(1, len(frame))]


def _run_case(port: int, data: bytes, kind: str, connect=None) -> str:
    """Send one case on a fresh connection (``connect(port)``: a plain socket by default, or a TLS
    one), then the probe; how the broker reacted."""
    s = (connect or (lambda p: socket.create_connection(("127.0.0.1", p), timeout=5)))(port)
    try:
        s.settimeout(5)
        if kind == "truncated":
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)  # the client goes away mid-frame
            try:
                while s.recv(65536):
                    pass
            except (TimeoutError, ConnectionResetError, ssl.SSLError):
                pass
            return "truncated"
        try:
            s.sendall(data + _probe())
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            return "closed"
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, ssl.SSLError):
                return "closed"
            except TimeoutError:
                return "timeout"
            if not chunk:
                return "closed"
            buf += chunk
            # walk complete response frames; stop at the probe's answer
            pos = 0
            while len(buf) - pos >= 8:
                size, cid = struct.unpack_from(">ii", buf, pos)
                if len(buf) - pos - 4 < size:
                    break
                if cid == PROBE_CID:
                    return "answered"
                pos += 4 + size
            buf = buf[pos:]
    finally:
        s.close()


def test_fuzz_live_broker_survives_and_keeps_serving(broker_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = broker_factory(
        0,
        port=stable_port(),
        socket_request_max_bytes=REQUEST_MAX,
        auto_create_topics_enable="false",
        num_network_threads=2,
        num_io_threads=4,
    )
    topic = "fuzz-target"
    with Wire(b.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
    rng = random.Random(SEED)
    outcomes: dict[str, dict[str, int]] = {}
    n = 0
    t0 = time.monotonic()
    for kind, data in _cases(rng, topic):
        result = _run_case(b.port, data, kind)
        outcomes.setdefault(kind, {}).setdefault(result, 0)
        outcomes[kind][result] += 1
        n += 1
        if n % 500 == 0:
            assert b.proc.poll() is None, f"broker died after {n} cases:\n{b.output()[-5000:]}"
    elapsed = time.monotonic() - t0
    print(f"{n} fuzz cases in {elapsed:.1f}s (seed {SEED}): {outcomes}")
    assert n >= 3600 * SCALE
    assert b.proc.poll() is None, b.output()[-5000:]
    timeouts = sum(o.get("timeout", 0) for o in outcomes.values())
    assert timeouts <= n // 100, outcomes  # only long-poll fetches with fuzzed max_wait may wait
    out = b.output()
    assert "Traceback" not in out, out[out.find("Traceback") - 2000 :][:6000]

    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(50):
        p.produce(topic, value=b"after-fuzz-%d" % i)
    assert p.flush(30) == 0
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "after-fuzz", "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            got += [m.value() for m in c.consume(100, 1.0) if m.error() is None]
            if b"after-fuzz-49" in got:
                break
        assert [v for v in got if v.startswith(b"after-fuzz-")] == [b"after-fuzz-%d" % i for i in range(50)]
    finally:
        c.close()
    assert b.stop() == 0


# TLS: the same broker code behind an SSL listener, fed what a broken or hostile TLS client sends.


def _client_hello(ctx: ssl.SSLContext) -> bytes:
    """The bytes of a real ClientHello (what a TLS client sends first)."""
    tls_obj = ctx.wrap_bio(ssl.MemoryBIO(), out := ssl.MemoryBIO(), server_hostname="127.0.0.1")
    try:
        tls_obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def _tls_handshake_cases(rng: random.Random, hello: bytes):
    """What comes instead of a good ClientHello: (kind, bytes, keep the connection open after)."""
    for _ in range(int(60 * SCALE)):  # random bytes
        yield "tls-random", rng.randbytes(rng.choice([1, 5, 16, 100, 1000, 5000])), False
    for _ in range(int(40 * SCALE)):  # random bytes behind a TLS handshake record header
        body = rng.randbytes(rng.choice([0, 4, 40, 400]))
        size = rng.choice([len(body), len(body) + 1, 0xFFFF, 0x4001])
        yield "tls-record-random", b"\x16\x03" + bytes([rng.randint(0, 4)]) + struct.pack(">H", size) + body, False
    for _ in range(int(60 * SCALE)):  # a ClientHello cut short, then the client closes
        yield "tls-truncated-hello", hello[: rng.randrange(1, len(hello))], False
    for _ in range(int(60 * SCALE)):  # a ClientHello with flipped bits, overwritten lengths
        h = bytearray(hello)
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(len(h))
            if rng.random() < 0.5:
                h[i] ^= 1 << rng.randrange(8)
            else:
                h[i] = rng.choice([0x00, 0xFF, 0x7F, 0x80])
        yield "tls-mutated-hello", bytes(h), False
    for _ in range(int(10 * SCALE)):  # a client that stops mid-handshake and stays connected
        yield "tls-stalled", hello[: rng.randrange(0, len(hello))], True


def _send_raw(port: int, data: bytes, keep: bool):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        if data:
            s.sendall(data)
    except (BrokenPipeError, ConnectionResetError):
        pass
    if keep:
        return s
    s.shutdown(socket.SHUT_WR)
    try:
        while s.recv(65536):
            pass
    except (TimeoutError, ConnectionResetError):
        pass
    s.close()
    return None


def _tls_probe(port: int, ctx: ssl.SSLContext) -> None:
    """A good TLS client: handshake, then ApiVersions answered."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(_probe())
        buf = b""
        while len(buf) < 8 or len(buf) - 4 < struct.unpack_from(">i", buf)[0]:
            chunk = s.recv(65536)
            assert chunk, "the broker closed a good TLS client's connection"
            buf += chunk
        assert struct.unpack_from(">i", buf, 4)[0] == PROBE_CID


def test_fuzz_tls_listener_survives_and_keeps_serving(broker_factory, tls_certs):
    """Seeded: random bytes, random TLS records, truncated and mutated ClientHellos and clients that
    stop mid-handshake on an SSL listener, then malformed Kafka frames after a valid handshake.  A good
    TLS client is answered after every group of cases, the broker stays up and logs no ERROR."""
    b = start_tls_broker(
        broker_factory,
        tls_certs,
        **{"socket.request.max.bytes": str(REQUEST_MAX), "auto.create.topics.enable": "false"},
    )
    ctx = ssl.create_default_context(cafile=tls_certs.ca_pem)
    topic = "fuzz-tls-target"
    with Wire(b.port) as w:
        assert create_topic(w, topic)["error_code"] == 0
    rng = random.Random(SEED + 443)
    hello = _client_hello(ctx)
    assert hello[:1] == b"\x16" and len(hello) > 100
    outcomes: dict[str, int] = {}
    stalled = []
    n = 0
    t0 = time.monotonic()
    for kind, data, keep in _tls_handshake_cases(rng, hello):
        s = _send_raw(b.ssl_port, data, keep)
        if s is not None:
            stalled.append(s)
        outcomes[kind] = outcomes.get(kind, 0) + 1
        n += 1
        if n % 20 == 0:
            _tls_probe(b.ssl_port, ctx)  # served while stalled handshakes hang
    _tls_probe(b.ssl_port, ctx)
    for s in stalled:
        s.close()

    def tls_connect(port):
        return ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1")

    frames: dict[str, dict[str, int]] = {}
    # malformed Kafka frames after a valid handshake: a seeded sample of the plaintext cases
    cases = [c for c in _cases(random.Random(SEED + 444), topic) if rng.random() < 0.06]
    for kind, data in cases:
        result = _run_case(b.ssl_port, data, kind, connect=tls_connect)
        frames.setdefault(kind, {}).setdefault(result, 0)
        frames[kind][result] += 1
        n += 1
        if n % 50 == 0:
            assert b.proc.poll() is None, f"broker died after {n} cases:\n{b.output()[-5000:]}"
    _tls_probe(b.ssl_port, ctx)
    print(f"{n} TLS fuzz cases in {time.monotonic() - t0:.1f}s (seed {SEED}): {outcomes} {frames}")
    assert len(cases) >= 150 * SCALE
    assert sum(o.get("timeout", 0) for o in frames.values()) <= len(cases) // 50, frames
    assert b.proc.poll() is None, b.output()[-5000:]
    out = b.output()
    assert "Traceback" not in out, out[out.find("Traceback") - 2000 :][:6000]
    errors = [line for line in out.splitlines() if " ERROR " in line]
    assert not errors, "\n".join(errors[:20])
    assert b.stop() == 0
