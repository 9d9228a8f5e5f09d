"""Spark's ``format("pyklog")`` over SASL_PLAINTEXT with the options Spark users write
(``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config``): a batch write,
a batch read and a streaming query; the password reaches no plan and no log."""

from __future__ import annotations

import uuid

import pytest

from tests.integration.security.sasl_support import (
    ALICE_PASSWORD,
    add_scram_user,
    assert_no_password_in_log,
    sasl_broker,
)

pytestmark = pytest.mark.spark


@pytest.fixture
def broker(broker_factory, zk_chroot):
    add_scram_user(zk_chroot, "alice", ALICE_PASSWORD, ("SCRAM-SHA-512",))
    return sasl_broker(broker_factory)


def _options(b, password=ALICE_PASSWORD):
    return {
        "kafka.bootstrap.servers": b.bootstrap,
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": (
            f'org.apache.kafka.common.security.scram.ScramLoginModule required username="alice" password="{password}";'
        ),
    }


def test_spark_batch_write_and_read_and_stream_over_sasl(spark, broker, tmp_path):
    topic = f"t-{uuid.uuid4().hex[:8]}"
    df = spark.createDataFrame([(f"k{i}", f"v{i}") for i in range(20)], ["key", "value"])
    df.write.format("pyklog").mode("append").options(**_options(broker)).option("topic", topic).save()
    read = spark.read.format("pyklog").options(**_options(broker)).option("subscribe", topic).load()
    plan = read._jdf.queryExecution().toString()
    assert ALICE_PASSWORD not in plan
    got = sorted(r.value.decode() for r in read.select("value").collect())
    assert got == sorted(f"v{i}" for i in range(20))

    q = (
        spark.readStream.format("pyklog")
        .options(**_options(broker))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .writeStream.format("memory")
        .queryName(f"sasl_{uuid.uuid4().hex[:6]}")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        q.processAllAvailable()
        assert spark.sql(f"select count(*) from {q.name}").collect()[0][0] == 20
        assert ALICE_PASSWORD not in str(q.lastProgress)
    finally:
        q.stop()
    for path in (tmp_path / "ckpt").rglob("*"):
        if path.is_file():
            assert ALICE_PASSWORD.encode() not in path.read_bytes(), path
    assert_no_password_in_log(broker)


def test_spark_wrong_password_fails_clearly(spark, broker):
    with pytest.raises(Exception) as info:
        spark.read.format("pyklog").options(**_options(broker, "wrong-password-Kd9")).option(
            "subscribe", "anything"
        ).load().collect()
    text = str(info.value)
    assert "invalid credentials" in text or "SASL_AUTHENTICATION_FAILED" in text or "Authentication failed" in text
    assert "wrong-password-Kd9" not in text
