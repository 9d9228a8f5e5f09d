"""Fixtures of the coordinator tests."""

from __future__ import annotations

import pytest

from tests.integration.coordinator.support import Node


@pytest.fixture
def nodes(zk_chroot, tmp_path):
    made = []

    def make(broker_id=0, **kw):
        n = Node(zk_chroot, broker_id, tmp_path / f"b{broker_id}", **kw)
        made.append(n)
        return n

    yield make
    for n in made:
        n.close()
