"""Connection limits per listener on a real broker, with real sockets (Kafka's ``ConnectionQuotas``):
``listener.name.<listener>.max.connections`` holds one listener's new connections in the listen
backlog while it has that many open; ``max.connections`` holds every listener but the inter-broker
one, which is never starved; both change at runtime (IncrementalAlterConfigs), taking the waiting
connections at once."""

from __future__ import annotations

from pyklog.broker.protocol import ApiKey, decode_response
from pyklog.broker.zk.server import free_port
from pyklog.connector.admin import AdminClient
from tests.support import Wire

SET = 0


def _served(port: int, n: int) -> list[Wire]:
    out = []
    for _ in range(n):
        w = Wire(port, timeout=10)
        assert w.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        out.append(w)
    return out


def _waiting(port: int) -> tuple[Wire, int]:
    """A connection that completes in the kernel's backlog and sends ApiVersions: (it, correlation id)."""
    w = Wire(port, timeout=10)
    return w, w.send(ApiKey.API_VERSIONS, 0, {})


def _answered(w: Wire, cid: int, timeout: float) -> bool:
    w.sock.settimeout(timeout)
    try:
        got, resp = decode_response(ApiKey.API_VERSIONS, 0, w.recv_frame())
    except TimeoutError:
        return False
    assert (got, resp["error_code"]) == (cid, 0)
    return True


def test_listener_and_broker_connection_limits_spare_the_inter_broker_listener(broker_factory):
    inter, external, client = free_port(), free_port(), free_port()
    b = broker_factory(0, start=False, port=inter)
    b.props.update(
        {
            "listeners": f"PLAINTEXT://127.0.0.1:{inter},EXTERNAL://127.0.0.1:{external},CLIENT://127.0.0.1:{client}",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,EXTERNAL:PLAINTEXT,CLIENT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.name.external.max.connections": "2",
            "max.connections": "5",
        }
    )
    b.start()
    opened = []
    try:
        # EXTERNAL: two served, the third waits for its listener's limit, and is taken when one closes
        opened += _served(external, 2)
        ext3, ext3_cid = _waiting(external)
        opened.append(ext3)
        assert not _answered(ext3, ext3_cid, 1.5), "EXTERNAL served a connection over its max.connections"
        opened.remove(first := opened[0])
        first.close()
        assert _answered(ext3, ext3_cid, 10), "the waiting EXTERNAL connection was not taken after one closed"

        # CLIENT (no limit of its own): served until the broker has max.connections open
        served = 0
        while True:
            w, cid = _waiting(client)
            opened.append(w)
            if not _answered(w, cid, 1.0):
                cl_wait, cl_cid = w, cid
                break
            served += 1
            assert served <= 3, "CLIENT served more than max.connections allows"
        assert served >= 1
        # the inter-broker listener is never held back by max.connections (its connections count in
        # the total: while they are open, the other listeners wait)
        for w in _served(inter, 4):
            w.close()

        # dynamic: a higher max.connections lets CLIENT's waiting connection in; EXTERNAL's own limit
        # still holds until it rises too
        ext4, ext4_cid = _waiting(external)
        opened.append(ext4)
        with AdminClient(b.bootstrap) as admin:
            admin.incremental_alter_configs(4, "0", [("max.connections", SET, "20")])
            assert _answered(cl_wait, cl_cid, 10), "CLIENT's waiting connection not taken after max.connections rose"
            assert not _answered(ext4, ext4_cid, 1.0), "EXTERNAL's own limit no longer held"
            admin.incremental_alter_configs(4, "0", [("listener.name.external.max.connections", SET, "3")])
            assert _answered(ext4, ext4_cid, 10), "EXTERNAL's waiting connection not taken after its limit rose"
            entries = admin.describe_configs([(4, "0")])[(4, "0")]
            described = {c["name"]: c["value"] for c in entries if c["name"].endswith("max.connections")}
            assert described["listener.name.external.max.connections"] == "3", described
        print(f"max.connections=5: EXTERNAL limited to 2, CLIENT served {served} then waited, inter-broker served 4")
    finally:
        for w in opened:
            w.close()
    assert b.proc.poll() is None
