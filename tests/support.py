"""Real servers for tests: a broker child process (``python -m pyklog.broker server.properties``),
ZooKeeper chroots and sessions, a raw Kafka-protocol connection (:class:`Wire`) and the
conversions for byte-for-byte cross-checks against kafka-python's protocol classes.

Modelled on kafka-python's integration fixtures: free port, readiness wait on the broker's
"started" log line, log dump on failure.  ZooKeeper comes from broker.zk.server.ZooKeeperServer.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import struct
import time
import uuid

from pyklog.broker.protocol import ApiKey, decode_response, encode_request
from pyklog.broker.protocol.schema import active_fields
from pyklog.broker.record.batch import build_batch, build_control_batch
from pyklog.broker.record.header import set_base_offset
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.server.process import READY_LINE, BrokerProcess  # noqa: F401  (re-exported for tests)


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.1, message: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; return it, or fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message} (last: {last!r})")


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def stable_port() -> int:
    """A free port below Linux's ephemeral range (32768+), so a broker restarting on it does not
    find it taken by some other process's outgoing connection meanwhile."""
    for _ in range(200):
        port = random.randint(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 20000-32000")


def clean_user_env(**extra) -> dict[str, str]:
    """The environment of a user who did not set anything for Spark: no PYSPARK_*, a PATH whose
    ``python3`` is the system's (which does not have pyklog), and no PYTHONPATH; ``extra`` on top."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PYSPARK_") and k not in ("PYTHONPATH", "SPARK_HOME", "VIRTUAL_ENV")
    }
    env["PATH"] = "/usr/local/bin:/usr/bin:/bin"
    env.update(extra)
    return env


@contextlib.contextmanager
def running_broker(zookeeper: str, log_dir: str, **props):
    """One broker (id 0) in a fresh chroot of ``zookeeper``, for a module-scoped fixture; on exit it
    must stop cleanly (exit status 0) and must not have logged a Traceback."""
    b = BrokerProcess(new_chroot(zookeeper), 0, log_dir=log_dir, **props)
    b.start()
    yield b
    assert b.stop() == 0, b.output()[-5000:]
    assert "Traceback" not in b.output(), b.output()[-20000:]


# ------------------------------------------------------------------------------------ ZooKeeper


def kazoo_client(hosts: str):
    """A started KazooClient (the caller stops and closes it)."""
    from kazoo.client import KazooClient

    kc = KazooClient(hosts=hosts)
    kc.start(timeout=30)
    return kc


def new_chroot(zookeeper: str) -> str:
    """``zookeeper`` + a fresh ``/pyklog-<uuid>`` chroot, created so clients can use it at once."""
    root = f"/pyklog-{uuid.uuid4().hex[:12]}"
    kc = kazoo_client(zookeeper)
    kc.ensure_path(root)
    kc.stop()
    kc.close()
    return zookeeper + root


def expire_session(zk_connect: str, client) -> None:
    """Expire ``client``'s ZooKeeper session for real: attach a second client to the same session
    and close that one (what kazoo's testing harness does)."""
    from kazoo.client import KazooClient

    hosts = zk_connect.split("/", 1)[0]
    other = KazooClient(hosts=hosts, client_id=client.client_id)
    other.start(timeout=30)
    other.stop()
    other.close()


# ------------------------------------------------------------------------------------ raw wire


class Wire:
    """A raw Kafka-protocol connection for tests (broker.protocol frames on a blocking socket)."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = 30.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.cid = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, api, version, body, client_id="pyklog-test") -> int:
        self.cid += 1
        self.sock.sendall(encode_request(api, version, self.cid, client_id, body))
        return self.cid

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            b = self.sock.recv(n - len(out))
            if not b:
                raise ConnectionError(f"connection closed after {len(out)} of {n} bytes")
            out += b
        return bytes(out)

    def request(self, api, version, body, client_id="pyklog-test") -> dict:
        cid = self.send(api, version, body, client_id)
        got_cid, resp = decode_response(api, version, self.recv_frame())
        assert got_cid == cid
        return resp

    def is_closed(self, timeout: float = 10.0) -> bool:
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True


def records(n: int, prefix: bytes = b"v", compression: int = 0, **kw) -> bytes:
    now = int(time.time() * 1000)
    return build_batch([(b"k%d" % i, prefix + b"%d" % i, now, ()) for i in range(n)], compression=compression, **kw)


def batch_at(base: int, values, **kw) -> bytes:
    """A record batch of ``values`` (no keys, timestamps 1000, 1001, ...) whose base offset is ``base``."""
    buf = bytearray(build_batch([(None, v, 1000 + i, ()) for i, v in enumerate(values)], **kw))
    set_base_offset(buf, 0, base)
    return bytes(buf)


def control_batch_at(base: int, ctype: int, pid: int, epoch: int = 0) -> bytes:
    """A control batch (``ctype`` 0 = ABORT, 1 = COMMIT) of producer ``pid`` whose base offset is ``base``."""
    buf = bytearray(build_control_batch(ctype, pid, epoch))
    set_base_offset(buf, 0, base)
    return bytes(buf)


def produce(w: Wire, topic: str, data: bytes, version: int = 8, acks: int = 1, partition: int = 0) -> dict:
    resp = w.request(
        ApiKey.PRODUCE,
        version,
        {
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
        },
    )
    return resp["responses"][0]["partition_responses"][0]


def fetch(
    w: Wire,
    topic: str,
    offset: int,
    version: int = 11,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    partition_max_bytes: int = 1 << 20,
    max_bytes: int = 50 << 20,
    partition: int = 0,
) -> dict:
    resp = w.request(
        ApiKey.FETCH,
        version,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {"partition": partition, "fetch_offset": offset, "partition_max_bytes": partition_max_bytes}
                    ],
                }
            ],
        },
    )
    if version >= 7:
        assert resp["error_code"] == 0 and resp["session_id"] == 0
    return resp["responses"][0]["partitions"][0]


def values(raw) -> list[bytes]:
    return [r.value for b in iter_batches(bytes(raw or b"")) for r in b.records]


def log_start_and_end_offsets(port: int, topic: str) -> tuple[int, int]:
    """(log start offset, log end offset) of ``topic``-0 on the broker at ``port``, through ListOffsets v1."""
    out = []
    with Wire(port) as w:
        for ts in (-2, -1):
            r = w.request(
                ApiKey.LIST_OFFSETS,
                1,
                {
                    "replica_id": -1,
                    "topics": [{"name": topic, "partitions": [{"partition_index": 0, "timestamp": ts}]}],
                },
            )
            out.append(r["topics"][0]["partitions"][0]["offset"])
    return out[0], out[1]


def create_topic(w: Wire, name: str, partitions: int = 1, version: int = 4, **extra) -> dict:
    resp = w.request(
        ApiKey.CREATE_TOPICS,
        version,
        {
            "topics": [
                dict(
                    {
                        "name": name,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [],
                    },
                    **extra,
                )
            ],
            "timeout_ms": 10000,
            "validate_only": False,
        },
    )
    return resp["topics"][0]


# ----------------------------------------------------------------- kafka-python cross-checks


def norm(value):
    """memoryviews -> bytes, recursively (decoded records are zero-copy views)."""
    if isinstance(value, dict):
        return {k: norm(v) for k, v in value.items()}
    if isinstance(value, list):
        return [norm(v) for v in value]
    if isinstance(value, (memoryview, bytearray)):
        return bytes(value)
    return value


# kafka-python renames Metadata's *_authorized_operations to authorized_operations and
# represents it as a set of bit positions (None for Kafka's "not requested" -2**31).
KP_RENAME = {
    "cluster_authorized_operations": "authorized_operations",
    "topic_authorized_operations": "authorized_operations",
    "authorized_operations": "authorized_operations",
}  # DescribeGroups v3+


def _ops_to_kp(v):
    bits = {i for i in range(32) if (v & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def _ops_from_kp(bits):
    if bits is None:
        return -(1 << 31)
    v = sum(1 << i for i in bits)
    return v - (1 << 32) if v & (1 << 31) else v


def to_kp(cls, d, version):
    """Our dict layout -> an instance of kafka-python's protocol class ``cls``."""
    kwargs = {}
    for key, v in d.items():
        name = KP_RENAME.get(key, key)
        f = cls._struct.fields[name]
        if f.is_struct_array() and v is not None:
            sub = getattr(cls, f.type_str.removeprefix("[]"))
            v = [to_kp(sub, x, version) for x in v]
        elif name == "authorized_operations":
            v = _ops_to_kp(v)
        kwargs[name] = v
    return cls(**kwargs, version=version)


def from_kp(d, fields, version):
    """kafka-python's to_dict(json=False) -> our dict layout (names, bitfields, bytes)."""
    out = {}
    for f in active_fields(fields, version):
        v = d[KP_RENAME.get(f.key, f.key)]
        if f.fields and v is not None:
            v = [from_kp(x, f.fields, version) for x in v]
        elif f.key in KP_RENAME:
            v = _ops_from_kp(v)
        elif f.type == "uuid" and v is None:  # kafka-python decodes Kafka's zero Uuid as None
            v = uuid.UUID(int=0)
        out[f.key] = norm(v)
    return out
