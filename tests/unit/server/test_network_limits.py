"""The socket server's resource bounds on a real broker process: ``queued.max.request.bytes`` (Kafka's
MemoryPool: memory for a request is reserved when its size prefix is read, and the network threads
stop reading while the pool is exhausted), ``max.connections.per.ip`` and ``max.connections``
(Kafka's ``ConnectionQuotas``).  Each test counts what was served and refused, and ends by checking
that the broker is alive and answers a stock client."""

from __future__ import annotations

MiB = 1024 * 1024


def test_connection_limit_settings_parse_and_refuse_bad_values():
    from pyklog.broker.errors import ConfigError
    from pyklog.broker.server.config import ServerConfig

    base = {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181"}
    d = ServerConfig.from_properties(base)
    assert (
        d.max_connections,
        d.max_connections_per_ip,
        d.max_connections_per_ip_overrides,
        d.queued_max_request_bytes,
    ) == (2**31 - 1, 2**31 - 1, {}, -1)
    c = ServerConfig.from_properties(
        {
            **base,
            "max.connections": "10",
            "max.connections.per.ip": "0",
            "max.connections.per.ip.overrides": "localhost:3, 10.0.0.1:200,::1:4",
            "queued.max.request.bytes": str(32 * MiB),
        }
    )
    assert c.max_connections_per_ip_overrides == {"localhost": 3, "10.0.0.1": 200, "::1": 4}
    assert c.socket_server_limits()["queued_max_request_bytes"] == 32 * MiB
    for bad in (
        {"max.connections.per.ip": "0"},
        {"max.connections": "-1"},
        {"max.connections.per.ip.overrides": "host"},
        {"max.connections.per.ip.overrides": "h:x"},
        {"queued.max.request.bytes": "-2"},
    ):
        try:
            ServerConfig.from_properties({**base, **bad})
        except ConfigError as e:
            assert next(iter(bad)) in str(e)
        else:
            raise AssertionError(f"accepted {bad}")


def test_listener_limits_and_the_protected_inter_broker_listener():
    from pyklog.broker.errors import ConfigError
    from pyklog.broker.server.dynamic_config import connection_limits
    from pyklog.broker.server.network import ConnectionQuotas

    limits = connection_limits({"max.connections": "3", "listener.name.external.max.connections": "1"})
    assert limits["per_listener"] == {"EXTERNAL": 1}
    for bad in ("-1", "x", "2147483648"):
        try:
            connection_limits({"listener.name.external.max.connections": bad})
        except ConfigError as e:
            assert "listener.name.external.max.connections" in str(e)
        else:
            raise AssertionError(f"accepted {bad}")
    q = ConnectionQuotas()
    q.listener_names = {"INTERNAL", "EXTERNAL", "CLIENT"}
    q.protected_listener = "INTERNAL"
    q.reconfigure(**limits)
    assert q.slot_available("EXTERNAL") and q.try_inc("10.0.0.1", "EXTERNAL")
    assert not q.slot_available("EXTERNAL")  # its own limit
    assert q.try_inc("10.0.0.2", "CLIENT") and q.try_inc("10.0.0.3", "CLIENT")
    assert not q.slot_available("CLIENT")  # the broker's max.connections
    assert q.slot_available("INTERNAL")  # never held back by max.connections
    assert q.try_inc("10.0.0.4", "internal") and q.slot_available("INTERNAL")
    q.dec("10.0.0.1", "EXTERNAL")
    assert not q.slot_available("EXTERNAL")  # the total is still at the limit (INTERNAL counts)
    q.dec("10.0.0.4", "INTERNAL")
    assert q.slot_available("EXTERNAL") and q.wait_for_slot(0.01, "CLIENT")
    q.protected_listener, q.listener_names = "INTERNAL", {"INTERNAL"}  # one listener: nothing protected
    q.try_inc("10.0.0.5", "INTERNAL")
    assert not q.slot_available("INTERNAL")
