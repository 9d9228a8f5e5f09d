"""pyklog's consumer and leader epochs (KIP-320) against a real broker: a Fetch carries the cached
metadata's leader epoch, and a poisoned cache is noticed and refreshed.

pyklog's producer and consumers across SIGKILLed and restarted leaders are in
tests/faults/test_replication_clients.py.
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
