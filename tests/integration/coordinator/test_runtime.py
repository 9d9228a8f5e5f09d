"""CoordinatorPartitions (broker/coordinator/runtime.py), the leadership and loading shared by the
offset manager and the transaction state manager, driven by a minimal coordinator of its own over
a real ZkCluster (zk_chroot) and a real LogManager (tmp_path).  Leadership is changed the way the
controller changes it: by rewriting the partition's state znode (leader, leader epoch), which the
ZkCluster's partition-state watch reports.

Checked: load on election with coordinator epoch = leader epoch, unload (hook) on resignation,
reload at a new epoch while still the leader, NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS /
COORDINATOR_NOT_AVAILABLE per request, a stale partition object refused after a reload, a failed
load that does not kill the loader thread.  The key-to-partition hash is in
tests/unit/coordinator/test_runtime.py."""

from __future__ import annotations

import threading

import pytest

from pyklog.broker.coordinator.runtime import (
    FAILED,
    LOADED,
    CoordinatorPartition,
    CoordinatorPartitions,
    partition_for_key,
)
from pyklog.broker.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    NotCoordinatorError,
)
from pyklog.broker.log.config import LogConfig
from pyklog.broker.log.manager import LogManager
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.znodes import (
    LeaderAndIsr,
    decode_partition_state,
    encode_partition_state,
)
from tests.support import wait_for

TOPIC = "__unit_coordinator"
PARTS = 2


class _Part(CoordinatorPartition):
    __slots__ = ("keys",)

    def __init__(self, partition, epoch):
        super().__init__(partition, epoch)
        self.keys: set[bytes] = set()


class MiniCoordinator:
    """A coordinator whose state is the set of keys in its partitions' logs."""

    def __init__(self, lm, cluster, broker_id):
        self.loads: list[tuple[int, int]] = []
        self.unloads: list[tuple[int, int]] = []
        self.gate: threading.Event | None = None  # set: loads block until it is set
        self.fail_next = False
        self.rt = CoordinatorPartitions(
            TOPIC,
            lm,
            cluster,
            broker_id,
            num_partitions=PARTS,
            replication_factor=1,
            topic_configs={"cleanup.policy": "compact"},
            new_partition=_Part,
            load=self._load,
            on_unloaded=self._unloaded,
            loader_name="unit-loader",
        )

    def _load(self, part):
        if self.gate is not None:
            self.gate.wait(30)
        if self.fail_next:
            self.fail_next = False
            raise OSError("disk on fire")
        keys = set()
        lg = self.rt.log(part.partition, apply_config=True)
        for b in iter_batches(lg.read(lg.log_start_offset, 1 << 20).read_bytes()):
            keys.update(r.key for r in b.records)
        if self.rt.mark_loaded(part, lambda: setattr(part, "keys", keys)):
            self.loads.append((part.partition, part.coordinator_epoch))

    def _unloaded(self, part):
        self.unloads.append((part.partition, part.coordinator_epoch))

    def write(self, key: str, value: bytes):
        part = self.rt.partition_for_request(key, repr(key))
        self.rt.log(part.partition).append(build_batch([(key.encode(), value, 0, ())]), from_client=False)
        part.keys.add(key.encode())


def key_on(partition: int) -> str:
    return next(f"k{i}" for i in range(1000) if partition_for_key(f"k{i}", PARTS) == partition)


def move(zk, partition: int, leader: int, epoch: int) -> None:
    """Rewrite the partition's state znode (as the controller does)."""
    path = paths.partition_state(TOPIC, partition)
    old = decode_partition_state(zk.get(path)[0], path)
    zk.set(path, encode_partition_state(LeaderAndIsr(leader, epoch, (leader,), old.controller_epoch)))


@pytest.fixture
def node(zk_chroot, zk, tmp_path):
    # the topic exists before this ZkCluster starts: it reads it (and arms its state watches) at start-up
    first = ZkCluster(zk_chroot, 0, "127.0.0.1", 9290, session_timeout_ms=6000).start()
    first.create_topic(TOPIC, PARTS, configs={"cleanup.policy": "compact"})
    first.stop()
    cluster = ZkCluster(zk_chroot, 0, "127.0.0.1", 9290, session_timeout_ms=6000).start()
    lm = LogManager([str(tmp_path / "b0")], LogConfig(), background=False)
    lm.startup()
    mc = MiniCoordinator(lm, cluster, 0)
    yield mc
    mc.rt.shutdown()
    lm.shutdown()
    cluster.stop()


def test_election_resignation_and_new_epoch(node, zk):
    rt = node.rt
    rt.startup()
    rt.ensure_topic()  # exists: no creation, led partitions loaded
    assert sorted(node.loads) == [(0, 0), (1, 0)]
    k0, k1 = key_on(0), key_on(1)
    node.write(k0, b"a")
    node.write(k1, b"b")
    assert rt.coordinator_for(k0) == 0

    # leader elsewhere (broker 1, not live: leader -1 to clients), epoch 1
    move(zk, 0, 1, 1)
    wait_for(lambda: (0, 0) in node.unloads, timeout=20, message="partition 0 unloaded")
    with pytest.raises(NotCoordinatorError, match="led elsewhere"):
        node.write(k0, b"x")
    assert rt.coordinator_for(k0) is None
    node.write(k1, b"c")  # the other partition is untouched
    assert node.unloads == [(0, 0)]

    # back here at epoch 2: loaded again with the new coordinator epoch and the log's keys
    move(zk, 0, 0, 2)
    wait_for(lambda: (0, 2) in node.loads, timeout=20, message="partition 0 reloaded at epoch 2")
    part = rt.partition_for_request(k0, "k0")
    assert part.coordinator_epoch == 2 and part.keys == {k0.encode()}
    node.write(k0, b"d")

    # new epoch while still the leader (a controller re-election): unload + reload; the old object is stale
    move(zk, 0, 0, 3)
    wait_for(lambda: (0, 3) in node.loads, timeout=20, message="partition 0 reloaded at epoch 3")
    assert (0, 2) in node.unloads
    assert not rt.owns(part) and not rt.is_current(part)
    assert rt.partition_for_request(k0, "k0").coordinator_epoch == 3
    assert rt.get(1).coordinator_epoch == 0 and rt.get(1).keys == {k1.encode()}


def test_loading_and_failed_loads(node, zk):
    rt = node.rt
    rt.startup()
    rt.ensure_topic()
    k0 = key_on(0)
    node.write(k0, b"a")  # non-empty log: the next load goes to the loader thread
    node.gate = threading.Event()
    move(zk, 0, 0, 1)
    wait_for(lambda: rt.is_loading(k0), timeout=20, message="partition 0 loading at epoch 1")
    with pytest.raises(CoordinatorLoadInProgressError):
        node.write(k0, b"x")
    assert rt.is_loading() and not rt.is_loading(key_on(1))
    assert not rt.wait_loaded(0.1)
    node.gate.set()
    assert rt.wait_loaded(20)
    assert rt.get_loaded(0).coordinator_epoch == 1

    node.gate = None
    node.fail_next = True
    move(zk, 0, 0, 2)
    wait_for(lambda: rt.get(0) is not None and rt.get(0).state == FAILED, timeout=20, message="load failed")
    with pytest.raises(CoordinatorNotAvailableError, match="disk on fire"):
        node.write(k0, b"x")
    # the loader thread survived: the next epoch loads
    move(zk, 0, 0, 3)
    wait_for(lambda: rt.get(0) is not None and rt.get(0).state == LOADED, timeout=20, message="loaded at epoch 3")
    assert rt.get(0).coordinator_epoch == 3 and rt.get(0).keys == {k0.encode()}
