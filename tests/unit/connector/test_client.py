"""BrokerConnection and ClusterClient against real brokers (real ZooKeeper, `python -m pyklog.broker`)."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import (
    ConfigError,
)
from pyklog.connector.client import ClusterClient, parse_bootstrap


def test_parse_bootstrap():
    assert parse_bootstrap("a:1, b:2") == [("a", 1), ("b", 2)]
    assert parse_bootstrap(["PLAINTEXT://h:9092", ("x", 3)]) == [("h", 9092), ("x", 3)]
    with pytest.raises(ConfigError, match="host:port"):
        parse_bootstrap("nohostport")
    with pytest.raises(ConfigError):
        ClusterClient()
