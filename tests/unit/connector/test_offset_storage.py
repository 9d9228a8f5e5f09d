"""Offset storage: zookeeper, kafka (a real broker's coordinator) and dual commit, including the
seed's migration from ZooKeeper to Kafka."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.offsets import OffsetStore


def test_create_needs_what_the_settings_use():
    with pytest.raises(ConfigError, match="offsets.storage must be 'zookeeper' or 'kafka'; got 'redis'"):
        OffsetStore.create("redis")
    with pytest.raises(ConfigError, match="offsets.storage=kafka with dual.commit.enabled=false needs brokers"):
        OffsetStore.create("kafka", False, zk="127.0.0.1:1")
    with pytest.raises(ConfigError, match="dual.commit.enabled=true needs ZooKeeper"):
        OffsetStore.create("kafka", True, zk=None, cluster_client=object())
