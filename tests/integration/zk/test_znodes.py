"""Codecs of the ZooKeeper records (pyklog.broker.zk.znodes): golden JSON in Kafka's exact forms
(written by hand from Kafka's documentation and the ZkData znode descriptions), round trips, malformed
data, and the broker/client agreement on which endpoint of a registration to use."""

from __future__ import annotations

from pyklog.broker.zk import paths

# Kafka's BrokerIdZNode examples, one per version.
V1 = b'{"version":1,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666"}'
# v4 with custom listener names: the first endpoint speaks SSL, the PLAINTEXT one comes second.
V4 = (
    b'{"version":4,"host":"localhost","port":9092,"jmx_port":9999,"timestamp":"2233345666",'
    b'"endpoints":["CLIENT://host1:9092","REPLICATION://host1:9093"],'
    b'"listener_security_protocol_map":{"CLIENT":"SSL","REPLICATION":"PLAINTEXT"},"rack":"dc1"}'
)
# v2+ without a PLAINTEXT listener: host null, port -1
SSL_ONLY = (
    b'{"version":4,"host":null,"port":-1,"jmx_port":-1,"timestamp":"2233345666",'
    b'"endpoints":["SSL://host1:9093"],"listener_security_protocol_map":{"SSL":"SSL"},"rack":null}'
)


# ---------------------------------------------------------------------------- broker registration


# ---------------------------------------------------------------------------- topics


# ---------------------------------------------------------------------------- ZooKeeper consumer groups


# ---------------------------------------------------------------------------- readers agree (real ZooKeeper)


def test_broker_and_client_read_a_registration_alike(zk_chroot, zk):
    """A v4 registration whose first endpoint is SSL: the broker's cluster view and the client's
    ZooKeeper discovery both use the PLAINTEXT endpoint.  An SSL-only broker is live for the
    cluster view (liveness and replica placement do not depend on what a broker advertises; its
    first endpoint stands for it) and left out by a PLAINTEXT client's discovery."""
    from pyklog.broker.zk.cluster import ZkCluster
    from pyklog.connector.client import ClusterClient

    zk.create(paths.broker_id(4), V4, makepath=True)
    zk.create(paths.broker_id(6), SSL_ONLY, makepath=True)
    zk.create(paths.broker_id(8), V1, makepath=True)
    admin = ZkCluster(zk_chroot, None, session_timeout_ms=10000).start()
    client = ClusterClient(zookeeper_connect=zk_chroot)
    try:
        expected = {4: ("host1", 9093), 8: ("localhost", 9092)}
        assert admin.live_brokers() == {**expected, 6: ("host1", 9093)}
        assert client._zk_brokers() == expected
    finally:
        client.close()
        admin.stop()
