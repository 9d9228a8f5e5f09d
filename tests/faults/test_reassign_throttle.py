"""A throttled reassignment (KIP-73 through ``pyklog-reassign-partitions --throttle``): the leader
answers the new replica at about the rate, the configs are set for the move and removed by
``--verify`` once it is complete."""

from __future__ import annotations

import json
import time
import uuid

from pyklog.broker.zk import paths
from tests.integration.controller.support import (
    assignment,
    controller_of,
    create_topic,
    start_cluster,
)
from tests.integration.replication_support import log_end_offset
from tests.support import wait_for

RATE = 100_000  # bytes/s
SIZE = 1_200_000


def config_node(zk, path) -> dict:
    try:
        return json.loads(zk.get(path)[0]).get("config", {})
    except Exception:  # noqa: BLE001 - no node
        return {}


def test_throttled_reassignment_moves_at_about_the_rate_and_verify_clears_the_throttle(
    broker_factory, zk, zk_chroot, tmp_path, capsys
):
    from confluent_kafka import Producer

    from pyklog.connector.cli import reassign_partitions

    brokers = start_cluster(broker_factory, zk)
    ctl = controller_of(zk)[0]
    a, b = [i for i in sorted(brokers) if i != ctl]
    topic = create_topic(zk_chroot, {0: [a]})
    p = Producer({"bootstrap.servers": brokers[a].bootstrap, "linger.ms": 20, "acks": 1})
    for i in range(SIZE // 1000):
        p.produce(topic, value=b"%06d" % i + b"x" * 994, partition=0)
        p.poll(0)
    assert p.flush(60) == 0
    leo = log_end_offset(brokers[a], topic, 0)
    assert leo == SIZE // 1000

    f = tmp_path / f"r-{uuid.uuid4().hex[:6]}.json"
    f.write_text(json.dumps({"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [a, b]}]}))

    def tool(*action):
        rc = reassign_partitions.main(
            ["--bootstrap-server", brokers[a].bootstrap, "--reassignment-json-file", str(f), *action]
        )
        cap = capsys.readouterr()
        assert rc == 0, cap.out + cap.err
        return cap.out

    started = time.monotonic()
    out = tool("--execute", "--throttle", str(RATE))
    assert f"The inter-broker throttle limit was set to {RATE} B/s" in out
    for i in (a, b):
        cfg = config_node(zk, paths.broker_config(i))
        assert cfg.get("leader.replication.throttled.rate") == str(RATE), cfg
    tcfg = config_node(zk, paths.topic_config(topic))
    assert tcfg.get("leader.replication.throttled.replicas") == f"0:{a}", tcfg
    assert tcfg.get("follower.replication.throttled.replicas") == f"0:{b}", tcfg
    # still copying after a few seconds: the leader holds the follower to about RATE bytes/s
    # (the first fetch gets up to replica.fetch.max.bytes = 1 MB, the rest waits until the
    # 11-second window's average is under RATE: ~10 s for 1.2 MB)
    wait_for(lambda: log_end_offset(brokers[b], topic, 0) > 0, timeout=30, message="copy started")
    time.sleep(max(0.0, started + 4.0 - time.monotonic()))
    assert log_end_offset(brokers[b], topic, 0) < leo, "the copy was not throttled"
    assert "is still in progress" in tool("--verify")
    assert config_node(zk, paths.topic_config(topic)).get("leader.replication.throttled.replicas") == f"0:{a}"
    # --verify until complete (the replica set is [a, b] from the start: RS = target + original)
    out = wait_for(
        lambda: (o := tool("--verify")) and "is complete." in o and o,
        timeout=90,
        interval=0.5,
        message="reassignment complete",
    )
    elapsed = time.monotonic() - started
    assert elapsed >= 5.0, f"{SIZE} bytes moved in {elapsed:.1f} s at a {RATE} B/s throttle"
    assert assignment(zk, topic) == [a, b]
    assert f"Reassignment of partition {topic}-0 is complete." in out
    assert (
        "Clearing broker-level throttles on brokers" in out
        and f"Clearing topic-level throttles on topic {topic}" in out
    )
    for i in brokers:
        cfg = config_node(zk, paths.broker_config(i))
        assert "leader.replication.throttled.rate" not in cfg, cfg
    assert "leader.replication.throttled.replicas" not in config_node(zk, paths.topic_config(topic))
    assert log_end_offset(brokers[b], topic, 0) == leo
