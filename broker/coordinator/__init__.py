"""The coordinators: the broker's side of consumer groups, committed offsets and transactions.

Kafka keeps them under one roof (``group-coordinator/``, ``transaction-coordinator/``,
``coordinator-common/``); so does pyklog:

* :mod:`.runtime`: :class:`~.runtime.CoordinatorPartitions`, the leadership, loading and per-request
  NOT_COORDINATOR / COORDINATOR_LOAD_IN_PROGRESS checks every coordinator shares for its internal
  topic's partitions, and the hashing that maps a key (group, transactional id) to a partition.
* :mod:`.partition_writer`: the acks=all append path a coordinator writes through, declared as a
  Protocol (:class:`~.partition_writer.CoordinatorPartitionWriter`); the server implements it.
* :mod:`.offsets`: :class:`~.offsets.OffsetManager`, committed offsets in ``__consumer_offsets``.
* :mod:`.group`: :class:`~.group.GroupCoordinator`, Kafka's classic group membership protocol, with
  the group state machine in :mod:`.group.state`.
* :mod:`.transaction`: :class:`~.transaction.TransactionCoordinator`, its state in ``__transaction_state``
  and the marker channel.
* :mod:`.producer_id`: :class:`~.producer_id.ProducerIdManager`, cluster-unique producer ids in blocks.

Import direction: the server imports the coordinators, the coordinators import the log, record
formats, protocol and ``zk`` helpers, never ``pyklog.broker.server``; what they need from the server
(settings, the append path) comes in as constructor arguments.  Nothing is imported here, so
importing one coordinator does not load the others.
"""
