"""The producer (Kafka's KafkaProducer and its internals), one module per part.

* :mod:`.producer` -- :class:`Producer`, the facade: send / produce / send_sync / send_batch /
  send_many / flush / close / partitions_for;
* :mod:`.config` -- the table of producer settings and :func:`~.config.parse_config`;
* :mod:`.future` -- :class:`RecordMetadata`, :class:`FutureRecordMetadata`;
* :mod:`.accumulator` -- RecordAccumulator: per-partition batches, buffer.memory, linger.ms;
* :mod:`.sender` -- Sender: the background thread, Produce requests, retries;
* :mod:`.transaction_manager` -- TransactionManager: producer id, epoch, sequences, states.
"""
from pyklog.connector.producer.config import PRODUCER_DEFAULTS
from pyklog.connector.producer.future import FutureRecordMetadata, RecordMetadata
from pyklog.connector.producer.producer import Producer

__all__ = ["Producer", "RecordMetadata", "FutureRecordMetadata", "PRODUCER_DEFAULTS"]
