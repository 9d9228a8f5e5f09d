"""Two brokers with the ACL authorizer replicate: the brokers' own requests to each other (the
follower's Fetch and OffsetForLeaderEpoch) are authorized like any client's, so the brokers'
principal (User:ANONYMOUS while the inter-broker listener does not authenticate) is a super user
here; a client that is not one gets nothing it was not granted."""

from __future__ import annotations

from pyklog.broker.protocol import ApiKey
from pyklog.connector.client import BrokerConnection
from tests.support import records, wait_for

PROPS = {"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer", "super.users": "User:ANONYMOUS"}


def test_replication_under_the_authorizer(broker_factory):
    b0, b1 = broker_factory(0, **PROPS), broker_factory(1, **PROPS)
    conn = BrokerConnection("127.0.0.1", b0.port)
    try:
        wait_for(lambda: len(conn.request(ApiKey.METADATA, {"topics": []})["brokers"]) == 2, 30, message="2 brokers")

        def created():
            r = conn.request(
                ApiKey.CREATE_TOPICS,
                {"topics": [{"name": "replicated", "num_partitions": 1, "replication_factor": 2}], "timeout_ms": 5000},
            )
            return r["topics"][0]["error_code"] in (0, 36)

        wait_for(created, 30, message="topic created")

        def isr():
            md = conn.request(ApiKey.METADATA, {"topics": [{"name": "replicated"}]})
            parts = md["topics"][0]["partitions"]
            return sorted(parts[0]["isr_nodes"]) if parts else []

        wait_for(lambda: isr() == [0, 1], 30, message="both replicas in the ISR")
        md = conn.request(ApiKey.METADATA, {"topics": [{"name": "replicated"}]})
        leader = md["topics"][0]["partitions"][0]["leader_id"]
        port = {0: b0.port, 1: b1.port}[leader]
        lc = BrokerConnection("127.0.0.1", port)
        try:
            r = lc.request(
                ApiKey.PRODUCE,
                {
                    "acks": -1,
                    "timeout_ms": 10000,
                    "topic_data": [{"name": "replicated", "partition_data": [{"index": 0, "records": records(5)}]}],
                },
            )
            assert r["responses"][0]["partition_responses"][0]["error_code"] == 0
        finally:
            lc.close()
        # the follower fetched it: both replicas stay in the ISR after an acks=all write
        assert isr() == [0, 1]
        for b in (b0, b1):
            assert "is Denied operation = CLUSTER_ACTION" not in b.output()
    finally:
        conn.close()
