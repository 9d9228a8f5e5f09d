"""The producer (Kafka's KafkaProducer and its internals), one module per part.

* :mod:`.producer` -- :class:`Producer`, the facade: send / produce / send_sync / send_batch /
  send_many / flush / close / partitions_for;
* :mod:`.config` -- the table of producer settings and :func:`~.config.parse_config`;
* :mod:`.future` -- :class:`RecordMetadata`, :class:`FutureRecordMetadata`;
* :mod:`.accumulator` -- RecordAccumulator: per-partition batches, buffer.memory, linger.ms;
* :mod:`.sender` -- Sender: the background thread, Produce requests, retries;
* :mod:`.transaction_manager` -- TransactionManager: producer id, epoch, sequences, states,
  transactions (KIP-98) and :class:`PreparedTransaction`;
* :func:`complete_transaction` -- ends a prepared transaction from any process (two-phase commit).
"""

from pyklog.broker.errors import InvalidTxnStateError, ProducerFencedError
from pyklog.connector.producer.config import PRODUCER_DEFAULTS
from pyklog.connector.producer.future import FutureRecordMetadata, RecordMetadata
from pyklog.connector.producer.producer import Producer, complete_transaction
from pyklog.connector.producer.transaction_manager import (
    IllegalStateError,
    PreparedTransaction,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionState,
    TransactionTimedOutError,
)

__all__ = [
    "Producer",
    "RecordMetadata",
    "FutureRecordMetadata",
    "PRODUCER_DEFAULTS",
    "complete_transaction",
    "PreparedTransaction",
    "TransactionState",
    "IllegalStateError",
    "ProducerFencedError",
    "InvalidTxnStateError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "TransactionTimedOutError",
]
