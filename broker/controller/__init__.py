"""The controller (Kafka's ``KafkaController`` in ZooKeeper mode).

:mod:`.election` holds the pure leader election algorithms (Kafka's
``PartitionLeaderElectionAlgorithms``); :mod:`.controller` the controller itself
(:class:`~pyklog.broker.controller.controller.KafkaController`), which every broker runs and which
acts only while this broker holds ``/controller``; :mod:`.channel` the broker-to-controller requests
(ControlledShutdown).
"""
