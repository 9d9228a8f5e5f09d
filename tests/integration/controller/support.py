"""Helpers shared by the tests of this directory (and the fault scenarios that build on them)."""

from __future__ import annotations

import json
import uuid

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.znodes import (
    decode_controller,
)
from tests.integration.replication_support import REPL_PROPS
from tests.support import wait_for


def controller_of(zk) -> tuple[int, int]:
    """(controller broker id or -1, controller epoch or 0)."""
    try:
        cid = decode_controller(zk.get(paths.CONTROLLER)[0]).broker_id
    except Exception:  # noqa: BLE001
        cid = -1
    try:
        epoch = int(zk.get(paths.CONTROLLER_EPOCH)[0])
    except Exception:  # noqa: BLE001
        epoch = 0
    return cid, epoch


def create_topic(zk_chroot, assignment: dict[int, list[int]], name=None, configs=None) -> str:
    name = name or f"ctl-{uuid.uuid4().hex[:8]}"
    admin = ZkCluster(zk_chroot, None).start()
    try:
        admin.create_topic(
            name, len(assignment), len(next(iter(assignment.values()))), configs, replica_assignment=assignment
        )
    finally:
        admin.stop()
    return name


def start_cluster(broker_factory, zk, ids=(0, 1, 2)):
    # a quick controlled shutdown at teardown (the controller stops first; the others retry soon)
    brokers = {i: broker_factory(i, **REPL_PROPS, **{"controlled.shutdown.retry.backoff.ms": "300"}) for i in ids}
    wait_for(
        lambda: sorted(int(c) for c in zk.get_children(paths.BROKER_IDS)) == sorted(ids), message="brokers registered"
    )
    wait_for(lambda: controller_of(zk)[0] in ids, message="a controller elected")
    return brokers


def assignment(zk, topic, p=0) -> list[int]:
    return json.loads(zk.get(paths.topic(topic))[0])["partitions"][str(p)]
