"""ListTransactions' filters as Kafka's ``TransactionStateManager.listTransactionStates`` applies
them, on a state manager's cache (no server): state names, producer ids, the v1 duration filter,
Dead ids never listed, COORDINATOR_LOAD_IN_PROGRESS while a partition loads."""

from __future__ import annotations

from pyklog.broker.coordinator.transaction.metadata import TransactionMetadata, TxnState
from pyklog.broker.coordinator.transaction.state_manager import (
    LOADED,
    LOADING,
    TransactionStateManager,
    _TxnPartition,
)

NOW = 1_700_000_000_000


def _manager(*metadata, loading=False) -> TransactionStateManager:
    m = TransactionStateManager(None, None, 0, num_partitions=2)
    loaded = _TxnPartition(0, 3)
    loaded.state = LOADED
    loaded.cache = {md.transactional_id: md for md in metadata}
    m._partitions[0] = loaded
    if loading:
        other = _TxnPartition(1, 1)
        other.state = LOADING
        m._partitions[1] = other
    return m


def _md(tid, pid, state, started=-1):
    return TransactionMetadata(
        tid, pid, 0, 60000, state, (("t", 0),) if state == TxnState.ONGOING else (), started, started
    )


def test_filters_as_kafka():
    m = _manager(
        _md("a", 1, TxnState.ONGOING, NOW - 10_000),
        _md("b", 2, TxnState.EMPTY),
        _md("c", 3, TxnState.COMPLETE_COMMIT, NOW - 50_000),
        _md("d", 4, TxnState.DEAD),
        _md("e", 5, TxnState.PREPARE_EPOCH_FENCE, NOW - 1_000),
    )
    everything = m.list_transaction_states([], [], now_ms=NOW)
    assert everything == (
        0,
        [],
        [("a", 1, "Ongoing"), ("b", 2, "Empty"), ("c", 3, "CompleteCommit"), ("e", 5, "PrepareEpochFence")],
    )  # Dead is being expired: never listed
    assert m.list_transaction_states(["Ongoing", "Nope"], [], now_ms=NOW) == (0, ["Nope"], [("a", 1, "Ongoing")])
    assert m.list_transaction_states(["Nope"], [], now_ms=NOW) == (0, ["Nope"], [])  # matches nothing
    assert m.list_transaction_states(["Dead"], [], now_ms=NOW) == (0, [], [])
    assert m.list_transaction_states([], [3, 4, 99], now_ms=NOW) == (0, [], [("c", 3, "CompleteCommit")])
    assert m.list_transaction_states(["Ongoing"], [3], now_ms=NOW)[2] == []  # both filters apply
    # KIP-994: only transactions running longer than the filter (an id with no start time counts as old)
    assert [t for t, _, _ in m.list_transaction_states([], [], 20_000, now_ms=NOW)[2]] == ["b", "c"]
    assert [t for t, _, _ in m.list_transaction_states([], [], 10_000, now_ms=NOW)[2]] == ["b", "c"]
    assert [t for t, _, _ in m.list_transaction_states([], [], 9_999, now_ms=NOW)[2]] == ["a", "b", "c"]


def test_load_in_progress():
    m = _manager(_md("a", 1, TxnState.ONGOING, NOW), loading=True)
    assert m.list_transaction_states([], [], now_ms=NOW) == (14, [], [])
    assert m.list_transaction_states(["Bogus"], [], now_ms=NOW) == (14, [], [])  # as Kafka: the error alone
