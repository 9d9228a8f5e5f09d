"""The transaction coordinator (KIP-98): Kafka's ``kafka.coordinator.transaction`` package.

* :mod:`.log`            ``__transaction_state`` record codecs (``TransactionLogKey`` / ``TransactionLogValue``)
* :mod:`.metadata`       :class:`TransactionMetadata` and its state machine (``TransactionState``)
* :mod:`.state_manager`  :class:`TransactionStateManager`: the ``__transaction_state`` partitions this
                         broker leads, their loading and appends
* :mod:`.marker_channel` :class:`TransactionMarkerChannelManager`: WriteTxnMarkers to partition leaders
* :mod:`.coordinator`    :class:`TransactionCoordinator`: InitProducerId, AddPartitionsToTxn,
                         AddOffsetsToTxn, EndTxn, timeouts and expiration
"""

from pyklog.broker.coordinator.transaction.coordinator import TransactionCoordinator
from pyklog.broker.coordinator.transaction.log import TRANSACTION_STATE_TOPIC
from pyklog.broker.coordinator.transaction.metadata import TransactionMetadata, TxnState

__all__ = ["TRANSACTION_STATE_TOPIC", "TransactionCoordinator", "TransactionMetadata", "TxnState"]
