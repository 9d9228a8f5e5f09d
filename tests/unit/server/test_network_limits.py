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
