"""Small shared utilities of the broker and the connector (no I/O of their own).

* :mod:`.retry`: :class:`~.retry.Deadline`, :class:`~.retry.Backoff` and :func:`~.retry.retry`
  (Kafka's ``Timer`` and ``ExponentialBackoff``).
* :mod:`.scheduler`: :class:`~.scheduler.Scheduler`, one daemon thread running delayed and
  periodic tasks (Kafka's ``KafkaScheduler``).
* :mod:`.config_def`: :class:`~.config_def.ConfigDef`, a typed table of settings (Kafka's
  ``ConfigDef``).

These modules import nothing of pyklog but :mod:`pyklog.broker.errors`; the connector may use them,
they never import the connector or pyspark.
"""
