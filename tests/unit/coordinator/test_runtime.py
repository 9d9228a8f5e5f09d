"""The coordinators' key-to-partition rule (broker/coordinator/runtime.py): Java's String.hashCode and
``partition_for_key`` as Kafka computes them; no server.  CoordinatorPartitions' leadership and loading
over a real ZooKeeper and LogManager are in tests/integration/coordinator/test_runtime.py."""

from __future__ import annotations

from pyklog.broker.coordinator.runtime import (
    java_string_hash,
    partition_for_key,
)


def test_hash_is_javas():
    assert java_string_hash("hello") == 99162322 and partition_for_key("polygenelubricants", 50) == 0
