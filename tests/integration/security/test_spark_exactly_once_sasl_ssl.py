"""The exactly-once Spark sink over SASL_SSL with the authorizer on.

One broker whose only listener is SASL_SSL (SCRAM-SHA-512 for the query, PLAIN for the broker's own
super user ``admin``), certificates the tests make.  A streaming query logging in as ``spark`` holds
exactly the ACLs docs/security.md lists for it ("The ACLs a Spark query needs"): READ on its input
topic and group, WRITE on its output topic, WRITE on its transactional-id prefix (its producers
are transactional: Kafka authorizes them by their transactional id, no IDEMPOTENT_WRITE needed) and
READ, WRITE and CREATE on ``__pyklog_spark_sinks``, where a sink given bootstrap servers alone keeps
its commit records.  Its output read back with read_committed equals its input (0 lost, 0
duplicated); with the transactional-id ACL removed the query fails with an authorization error that
names the transactional id.  Neither the query's password nor the stores' passwords reach the
broker's log, Spark's log, the plan, the progress or any file of the checkpoint."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from pyklog.broker.security.acl import (
    AccessControlEntry,
    AccessControlEntryFilter,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from pyklog.connector.spark.sink_log import SINK_LOG_TOPIC
from tests.integration.security.sasl_support import ADMIN_PASSWORD, add_scram_user
from tests.integration.security.tls_broker_support import start_sasl_ssl_broker, tls_certs
from tests.integration.spark.support import count_duplicates_and_lost
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD

__all__ = ["tls_certs"]  # the session fixture, used by name

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

SPARK_PASSWORD = f"spark-secret-{uuid.uuid4().hex[:10]}"
SECRETS = (SPARK_PASSWORD, ADMIN_PASSWORD, KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD)
PREFIX = "etl-sink"


def _sasl_ssl_broker(broker_factory, certs, zk_chroot):
    add_scram_user(zk_chroot, "spark", SPARK_PASSWORD, mechanisms=("SCRAM-SHA-512",))
    return start_sasl_ssl_broker(
        broker_factory,
        certs,
        plain_users={"username": "admin", "password": ADMIN_PASSWORD, "user_admin": ADMIN_PASSWORD},
        **{
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.num.partitions": "1",
        },
    )


def _admin_security(certs) -> dict:
    return {
        "security.protocol": "SASL_SSL",
        "ssl.truststore.location": certs.ca_pem,
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": ADMIN_PASSWORD,
    }


def _query_options(b, certs) -> dict:
    """What a Spark user writes: the truststore as a PKCS12 file with a password."""
    return {
        "kafka.bootstrap.servers": b.bootstrap,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.ssl.truststore.type": "PKCS12",
        "kafka.ssl.truststore.location": certs.ca_p12,
        "kafka.ssl.truststore.password": TRUSTSTORE_PASSWORD,
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            "org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="spark" password="{SPARK_PASSWORD}";'
        ),
    }


def _allow(rtype, name, op, pattern_type=PatternType.LITERAL) -> AclBinding:
    return AclBinding(
        ResourcePattern(rtype, name, pattern_type),
        AccessControlEntry("User:spark", "*", op, AclPermissionType.ALLOW),
    )


def _committed(b, certs, topic: str, partitions: int) -> list[bytes]:
    from pyklog.connector.consumer import SimpleConsumer

    with SimpleConsumer(b.bootstrap, isolation_level="read_committed", security=_admin_security(certs)) as c:
        return [r.value for p in range(partitions) for r in c.iter_records(topic, p, 0)]


def _spark_log(spark) -> str:
    """What Spark's JVM (and the Python workers it started, whose output it copies) wrote to its
    standard error so far: pytest captures it in a file the JVM inherited."""
    proc = getattr(spark.sparkContext._gateway, "proc", None)
    if proc is None:
        return ""
    path = f"/proc/{proc.pid}/fd/2"
    try:
        if not os.path.isfile(os.path.realpath(path)) and "(deleted)" not in os.readlink(path):
            return ""
        with open(path, "rb") as f:
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _wait(predicate, timeout: float, what: str, q=None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if q is not None and q.exception() is not None:
            raise AssertionError(f"the query failed waiting for {what}: {q.exception()}")
        v = predicate()
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}")


def test_exactly_once_sink_over_sasl_ssl_with_the_documented_acls(
    spark, broker_factory, zk_chroot, tls_certs, tmp_path
):
    from pyklog.connector.admin import AdminClient
    from pyklog.connector.producer import Producer

    b = _sasl_ssl_broker(broker_factory, tls_certs, zk_chroot)
    src, out, group = f"in-{uuid.uuid4().hex[:6]}", f"out-{uuid.uuid4().hex[:6]}", f"etl-{uuid.uuid4().hex[:6]}"
    admin_sec = _admin_security(tls_certs)
    txn_acl = _allow(ResourceType.TRANSACTIONAL_ID, PREFIX, AclOperation.WRITE, PatternType.PREFIXED)
    with AdminClient(b.bootstrap, security=admin_sec) as admin:
        admin.client.create_topic(src, 2, timeout_s=30)
        admin.client.create_topic(out, 2, timeout_s=30)
        assert (
            admin.create_acls(
                [
                    _allow(ResourceType.TOPIC, src, AclOperation.READ),
                    _allow(ResourceType.GROUP, group, AclOperation.READ),
                    _allow(ResourceType.TOPIC, out, AclOperation.WRITE),
                    txn_acl,
                    # the stream's commit records (kafka.bootstrap.servers alone: no ZooKeeper)
                    _allow(ResourceType.TOPIC, SINK_LOG_TOPIC, AclOperation.READ),
                    _allow(ResourceType.TOPIC, SINK_LOG_TOPIC, AclOperation.WRITE),
                    _allow(ResourceType.TOPIC, SINK_LOG_TOPIC, AclOperation.CREATE),
                ]
            )
            == [None] * 7
        )
    expected = [f"v{i}".encode() for i in range(40)]
    with Producer({"bootstrap.servers": b.bootstrap, **admin_sec}) as p:
        for i, v in enumerate(expected):
            p.send(src, value=v, key=f"k{i}".encode())
        p.flush()

    opts = _query_options(b, tls_certs)
    reader = (
        spark.readStream.format("pyklog")
        .options(**opts)
        .option("subscribe", src)
        .option("group.id", group)
        .option("startingOffsets", "earliest")
        .load()
    )
    chk = tmp_path / "chk"
    q = (
        reader.select("key", "value")
        .writeStream.format("pyklog")
        .options(**opts)
        .option("topic", out)
        .option("deliveryGuarantee", "exactly-once")
        .option("transactionalIdPrefix", PREFIX)
        .option("kafka.transaction.timeout.ms", "60000")
        .option("checkpointLocation", str(chk))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        got = _wait(
            lambda: (v := _committed(b, tls_certs, out, 2)) and len(v) >= len(expected) and v,
            150,
            "the query's output",
            q,
        )
        # the batch's progress (reported once its commit returned)
        _wait(lambda: q.lastProgress is not None, 30, "the batch's progress", q)
        got = _committed(b, tls_certs, out, 2)
        assert count_duplicates_and_lost(expected, got) == (0, 0) and len(got) == len(expected)
        progress = str(q.recentProgress) + str(q.lastProgress)
        plan = q._jsq.explainInternal(True) + reader._jdf.queryExecution().toString()

        # the transactional-id ACL removed: the next batch's tasks are refused
        with AdminClient(b.bootstrap, security=admin_sec) as admin:
            [removed] = admin.delete_acls(
                [
                    AclBindingFilter(
                        ResourcePatternFilter(ResourceType.TRANSACTIONAL_ID, PREFIX, PatternType.PREFIXED),
                        AccessControlEntryFilter(principal="User:spark"),
                    )
                ]
            )
            assert removed == [txn_acl]
        time.sleep(0.5)  # the ACL change notification reaches the broker
        with Producer({"bootstrap.servers": b.bootstrap, **admin_sec}) as p:
            for i in range(5):
                p.send(src, value=f"late{i}".encode(), key=b"late")
            p.flush()
        _wait(lambda: q.exception() is not None or not q.isActive, 120, "the query to fail")
        error = str(q.exception())
    finally:
        q.stop()
    print(f"the query's error: {error[:600]}")
    assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in error or "Transactional Id authorization failed" in error
    assert PREFIX in error, "the error does not name the transactional id"
    # nothing of the refused batch became visible
    assert sorted(_committed(b, tls_certs, out, 2)) == sorted(expected)

    spark_log = _spark_log(spark)
    if spark_log:  # pytest captures the JVM's standard error (not with -s): it holds the task's error
        assert "TRANSACTIONAL_ID_AUTHORIZATION_FAILED" in spark_log
    texts = {
        "broker log": b.output(),
        "Spark log": spark_log,
        "progress": progress,
        "plan": plan,
        "error": error,
    }
    for name, text in texts.items():
        for s in SECRETS:
            assert s not in text, f"a password reached the {name}"
    files = [p for p in chk.rglob("*") if p.is_file()]
    assert files, "the checkpoint is empty"
    for path in files:
        data = path.read_bytes()
        for s in SECRETS:
            assert s.encode() not in data, f"a password reached the checkpoint file {path}"
