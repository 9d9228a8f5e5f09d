"""The transaction coordinator in-process over real parts (a ZooKeeper chroot, a registered
ZkCluster, a LogManager on disk): what the wire tests cannot reach quickly -- epoch exhaustion
rotating the producer id, the two-step write (a failed append changes nothing in memory), reload
from ``__transaction_state`` -- plus the server settings' defaults and checks."""

from __future__ import annotations

import pytest

from pyklog.broker.coordinator.transaction import TransactionCoordinator, TxnState
from pyklog.broker.coordinator.transaction.log import TRANSACTION_STATE_TOPIC
from pyklog.broker.errors import (
    ConcurrentTransactionsError,
    CoordinatorNotAvailableError,
    InvalidTxnStateError,
)
from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.zk.cluster import ZkCluster
from tests.support import wait_for


class Node:
    def __init__(self, zk_connect, data_dir):
        self.cluster = ZkCluster(zk_connect, 0, "127.0.0.1", 9300, session_timeout_ms=6000).start()
        self.data_dir = data_dir
        self.pids = iter(range(1000, 2000))
        self.open()

    def open(self):
        self.lm = LogManager([self.data_dir], LogConfig(), background=False)
        self.lm.startup()
        self.tc = TransactionCoordinator(
            self.lm, self.cluster, 0, producer_id_allocator=lambda: next(self.pids), num_partitions=2
        )
        self.tc.startup()

    def reopen(self):
        self.tc.shutdown()
        self.lm.shutdown()
        self.open()

    def close(self):
        self.tc.shutdown()
        self.lm.shutdown()
        self.cluster.stop()


@pytest.fixture
def node(zk_chroot, tmp_path):
    n = Node(zk_chroot, str(tmp_path / "data"))
    yield n
    n.close()


def _md(node, tid):
    return node.tc.state_manager.get_transaction_state(tid)[1]


def test_epoch_exhaustion_rotates_the_producer_id_and_survives_reload(node):
    tc = node.tc
    pid, epoch = tc.init_producer_id("tx-a", 60000)
    assert epoch == 0
    md = _md(node, "tx-a")
    with md.lock:
        md.producer_epoch = 32765  # as after 32765 InitProducerId calls
    assert tc.init_producer_id("tx-a", 60000) == (pid, 32766)
    new_pid, new_epoch = tc.init_producer_id("tx-a", 60000)  # 32766 is exhausted: a new producer id
    assert new_pid != pid and new_epoch == 0
    node.reopen()
    wait_for(lambda: not node.tc.state_manager.is_loading(), message="loaded")
    assert node.tc.init_producer_id("tx-a", 60000) == (new_pid, 1)


def test_a_failed_write_changes_nothing_in_memory(node):
    tc = node.tc
    pid, epoch = tc.init_producer_id("tx-b", 60000)
    tc.add_partitions_to_txn("tx-b", pid, epoch, [("t", 0)])
    md = _md(node, "tx-b")
    lg = node.lm.get_log(TRANSACTION_STATE_TOPIC, tc.state_manager.partition_for("tx-b"))
    lg.close()  # the next append raises KafkaStorageError
    with pytest.raises(CoordinatorNotAvailableError, match="cannot write"):
        tc.end_txn("tx-b", pid, epoch, True)
    assert (md.state, md.pending_state, md.partitions) == (TxnState.ONGOING, None, {("t", 0)})


def test_prepare_states_answer_concurrent_transactions_and_wrong_results(node):
    tc = node.tc
    pid, epoch = tc.init_producer_id("tx-c", 60000)
    tc.add_partitions_to_txn("tx-c", pid, epoch, [("no-such-topic", 0)])
    md = _md(node, "tx-c")
    # stop the marker channel so the transaction stays in PrepareCommit
    node.tc.marker_channel.shutdown()
    tc.end_txn("tx-c", pid, epoch, True)
    assert md.state == TxnState.PREPARE_COMMIT
    with pytest.raises(ConcurrentTransactionsError):
        tc.end_txn("tx-c", pid, epoch, True)
    with pytest.raises(InvalidTxnStateError):
        tc.end_txn("tx-c", pid, epoch, False)
    with pytest.raises(ConcurrentTransactionsError):
        tc.init_producer_id("tx-c", 60000)
    with pytest.raises(ConcurrentTransactionsError):
        tc.add_partitions_to_txn("tx-c", pid, epoch, [("t", 1)])
