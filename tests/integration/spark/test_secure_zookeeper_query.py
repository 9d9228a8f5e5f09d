"""A Spark query on a ZooKeeper that requires authentication, with digest ACLs on the registry:
``format("pyklog")`` as a member of a ZooKeeper consumer group and the exactly-once sink, both
given ``zookeeper.jaas.config``; the credentials never show in the query's progress or plan."""

from __future__ import annotations

import uuid

from kazoo.client import KazooClient
from pyspark.sql import functions as F

from pyklog.broker.zk import paths
from pyklog.broker.zk.server import ZooKeeperServer
from pyklog.broker.zk.znode_acls import digest_id
from tests.integration.spark.support import make_topic, produce, read_values, stream, wait_query

SECRET = f"zk-{uuid.uuid4().hex[:12]}"
BROKER_JAAS = f'org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="{SECRET}";'
QUERY_SECRET = f"q-{uuid.uuid4().hex[:12]}"
QUERY_JAAS = f'org.apache.zookeeper.server.auth.DigestLoginModule required username="etl" password="{QUERY_SECRET}";'


def test_group_query_and_exactly_once_sink_with_zookeeper_credentials(spark, broker_factory, tmp_path):
    with ZooKeeperServer(require_auth=True) as server:
        connect = f"{server.connect_string}/secure"
        b = broker_factory(0, zk_connect=connect, zookeeper_set_acl="true", zookeeper_jaas_config=BROKER_JAAS)
        make_topic(b.bootstrap, "sq-in", 2)
        make_topic(b.bootstrap, "sq-out", 2)
        produce(b.bootstrap, "sq-in", 20, 2)
        df = stream(
            spark,
            **{
                "zookeeper.connect": connect,
                "zookeeper.jaas.config": QUERY_JAAS,
                "subscribe": "sq-in",
                "startingOffsets": "earliest",
                "group.id": "secure-etl",
                "zookeeper.session.timeout.ms": "30000",
            },
        ).select(F.col("value"))
        q = (
            df.writeStream.format("pyklog")
            .option("zookeeper.connect", connect)
            .option("zookeeper.jaas.config", QUERY_JAAS)
            .option("topic", "sq-out")
            .option("deliveryGuarantee", "exactly-once")
            .option("checkpointLocation", str(tmp_path / "chk"))
            .trigger(processingTime="1 second")
            .start()
        )
        kc = KazooClient(hosts=connect, auth_data=[("digest", f"etl:{QUERY_SECRET}")])
        kc.start(timeout=30)
        try:

            def committed():
                try:
                    offs = [kc.get(paths.consumer_offset("secure-etl", "sq-in", p))[0] for p in range(2)]
                except Exception:  # noqa: BLE001 - not committed yet
                    return False
                return [int(o) for o in offs] == [10, 10]

            wait_query(q, committed, what="the group's offsets at the log end")
            wait_query(q, lambda: len(read_values(b.bootstrap, "sq-out", 2, "read_committed")) == 20, what="20 out")
            progress = str(q.recentProgress) + str(q.lastProgress)
            # the sink's records are the query's own: its identity ALL, everyone READ
            [query_id] = kc.get_children(paths.SPARK_SINKS)
            acl, _ = kc.get_acls(paths.spark_sink_commits(query_id))
            assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {
                ("digest", digest_id("etl", QUERY_SECRET), 31),
                ("world", "anyone", 1),
            }
        finally:
            q.stop()
            kc.stop()
            kc.close()
        assert q.exception() is None
        assert sorted(read_values(b.bootstrap, "sq-out", 2, "read_committed")) == sorted(
            f"v{i}".encode() for i in range(20)
        )
        assert QUERY_SECRET not in progress and SECRET not in b.output()
