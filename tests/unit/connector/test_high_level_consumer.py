"""The high-level ConsumerConnector against a real broker and ZooKeeper: a group of consumer
processes (one closes, one is SIGKILLed) consumes everything exactly once past the last commit;
topic filters pick up new topics; offsets reset/commit; pyklog-consumer-groups."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.high_level import ConsumerConnector


def test_bad_settings():
    with pytest.raises(ConfigError, match="zookeeper.connect is required"):
        ConsumerConnector({"group.id": "g"})
    with pytest.raises(ConfigError, match=r"unknown consumer settings \['auto.commit.enabled'\]"):
        ConsumerConnector({"zookeeper.connect": "x", "group.id": "g", "auto.commit.enabled": True})
    with pytest.raises(
        ConfigError, match="auto.offset.reset must be smallest, largest, earliest, latest or none; got 'first'"
    ):
        ConsumerConnector({"zookeeper.connect": "x", "group.id": "g", "auto.offset.reset": "first"})
    # typed settings (CONSUMER_CONFIG): checked before any connection is made
    with pytest.raises(ConfigError, match="auto.commit.enable must be true or false; got 'maybe'"):
        ConsumerConnector({"zookeeper.connect": "x", "group.id": "g", "auto.commit.enable": "maybe"})
    with pytest.raises(ConfigError, match="rebalance.max.retries must be an integer >= 1; got 0"):
        ConsumerConnector({"zookeeper.connect": "x", "group.id": "g", "rebalance.max.retries": "0"})
    with pytest.raises(ConfigError, match="fetch.wait.max.ms must be an integer; got 'soon'"):
        ConsumerConnector({"zookeeper.connect": "x", "group.id": "g", "fetch.wait.max.ms": "soon"})
