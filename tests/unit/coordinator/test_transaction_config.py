"""The transaction coordinator in-process over real parts (a ZooKeeper chroot, a registered
ZkCluster, a LogManager on disk): what the wire tests cannot reach quickly -- epoch exhaustion
rotating the producer id, the two-step write (a failed append changes nothing in memory), reload
from ``__transaction_state`` -- plus the server settings' defaults and checks."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import (
    ConfigError,
)
from pyklog.broker.server.config import ServerConfig


def test_server_settings_are_kafkas():
    base = {"broker.id": "0", "zookeeper.connect": "h:1"}
    t = ServerConfig.from_properties(base).transaction_settings()
    assert t == {
        "num_partitions": 50,
        "segment_bytes": 104857600,
        "replication_factor": 1,
        "load_buffer_bytes": 5242880,
        "transaction_max_timeout_ms": 900000,
        "transactional_id_expiration_ms": 604800000,
        "abort_timed_out_interval_ms": 10000,
        "remove_expired_interval_ms": 3600000,
    }
    t = ServerConfig.from_properties(
        dict(
            base,
            **{
                "transaction.max.timeout.ms": "60000",
                "transaction.state.log.replication.factor": "3",
                "transaction.state.log.min.isr": "2",
            },
        )
    ).transaction_settings()
    assert t["transaction_max_timeout_ms"] == 60000 and t["replication_factor"] == 3
    with pytest.raises(ConfigError, match="transactional.id.expiration.ms"):
        ServerConfig.from_properties(dict(base, **{"transactional.id.expiration.ms": "soon"}))
    with pytest.raises(ConfigError, match="transaction.state.log.num.partitions"):
        ServerConfig.from_properties(dict(base, **{"transaction.state.log.num.partitions": "0"}))
