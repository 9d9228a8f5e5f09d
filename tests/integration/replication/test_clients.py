"""pyklog's own clients across leader changes: 3 brokers, replication factor 3,
``min.insync.replicas=2``; the leaders are SIGKILLed (and stopped with SIGTERM, a controlled
shutdown) and restarted while the clients run.

* pyklog's :class:`~connector.producer.Producer` with ``acks=all`` and idempotence: every acknowledged
  record is read back exactly once, in order per partition, and no send fails (every error of a leader
  change is retriable and retried within delivery.timeout.ms);
* pyklog's consumers (:class:`~connector.consumer.SimpleConsumer` and the high-level
  :class:`~connector.high_level.ConsumerConnector`) read while the leaders move: no gap, no duplicate,
  nothing that was not acknowledged (nothing beyond the high watermark), no error raised to the reader.

Every test prints its counts (``-s``): acknowledged, read, lost, duplicated, out of order, phantom.
"""

from __future__ import annotations

import uuid


def test_fetch_sends_current_leader_epoch_from_metadata(broker):
    """KIP-320: a Fetch carries the cached metadata's leader epoch.  A cache claiming a newer epoch
    than the broker's is answered UNKNOWN_LEADER_EPOCH, and the consumer refreshes its metadata and
    retries: the fetch succeeds and the cache holds the broker's epoch again (with -1, the old
    behaviour, the poisoned epoch would never be noticed).  (ListOffsets carries it too, but the
    broker does not check it there yet.)"""
    import dataclasses

    from pyklog.connector.consumer import SimpleConsumer
    from pyklog.connector.producer import Producer

    topic = f"epoch-{uuid.uuid4().hex[:6]}"
    with Producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as p:
        p.client.create_topic(topic, 1)
        for i in range(5):
            p.send(topic, f"0:{i}".encode(), partition=0).result(30)
    with SimpleConsumer(broker.bootstrap, max_wait_ms=10, retry_backoff_ms=10) as c:
        c.client.metadata([topic], refresh=True)
        epoch = c.client.leader_epoch(topic, 0)
        assert epoch >= 0
        md = c.client._md
        tm = md.topics[topic]
        poisoned = dataclasses.replace(tm.partitions[0], leader_epoch=epoch + 7)
        md.topics[topic] = dataclasses.replace(tm, partitions={0: poisoned})
        assert c.client.leader_epoch(topic, 0) == epoch + 7
        assert [r.offset for r in c.fetch(topic, 0, 0).records] == list(range(5))
        assert c.client.leader_epoch(topic, 0) == epoch  # refreshed after the broker's answer
