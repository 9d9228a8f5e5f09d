"""KIP-455 partition reassignment through the APIs (AlterPartitionReassignments 45,
ListPartitionReassignments 46), served by the controller, with real broker processes in one
ZooKeeper chroot and kafka-python's admin client as a user would call it.

Faults are real: a follower SIGSTOPped keeps a reassignment in progress, the controller SIGKILLed
hands it to the next controller (the KIP-455 ``adding_replicas``/``removing_replicas`` of the topic
znode).  Every record acknowledged (acks=all, idempotent confluent-kafka producer running during the
moves) is counted and read back: lost and duplicated records are asserted to be none.
A long controller event holding no request handler thread is in
tests/faults/test_reassign_controller_events.py.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import threading
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.integration.controller.support import (
    assignment,
    controller_of,
    create_topic,
    start_cluster,
)
from tests.integration.replication_support import (
    assert_replicas_identical,
    consume_all,
    log_end_offset,
    partition_dir,
)
from tests.support import wait_for


def state(zk, topic, p=0) -> dict:
    return json.loads(zk.get(paths.partition_state(topic, p))[0])


def admin(bootstrap):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=30000)


class BackgroundProducer:
    """confluent-kafka, acks=all + idempotence, unique values, until :meth:`stop`; counts acks."""

    def __init__(self, bootstrap, topic, prefix: bytes):
        from confluent_kafka import Producer

        self.acked: list[bytes] = []
        self.errors: list = []
        self._stop = threading.Event()
        self._p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        self._topic, self._prefix = topic, prefix
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _on_delivery(self, err, msg):
        (self.errors.append(err) if err is not None else self.acked.append(msg.value()))

    def _run(self):
        i = 0
        while not self._stop.is_set():
            try:
                self._p.produce(
                    self._topic, value=b"%s-%06d" % (self._prefix, i), partition=0, on_delivery=self._on_delivery
                )
                i += 1
            except BufferError:
                pass
            self._p.poll(0.005)

    def stop(self):
        self._stop.set()
        self._t.join(30)
        assert self._p.flush(150) == 0, "records still unacknowledged"
        return self.acked


def test_rf1_to_rf3_and_back_to_rf1_through_the_api_under_produce(broker_factory, zk, zk_chroot):
    from kafka import TopicPartition

    brokers = start_cluster(broker_factory, zk)
    ctl = controller_of(zk)[0]
    a = next(i for i in brokers if i != ctl)
    others = [i for i in sorted(brokers) if i != a]
    topic = create_topic(zk_chroot, {0: [a]})
    tp = TopicPartition(topic, 0)
    bootstrap = ",".join(b.bootstrap for b in brokers.values())
    ad = admin(bootstrap)
    try:
        prod = BackgroundProducer(bootstrap, topic, b"one")
        wait_for(lambda: len(prod.acked) >= 50, timeout=60, message="records acknowledged before the move")
        # RF 1 -> 3 through AlterPartitionReassignments while the producer runs
        assert ad.alter_partition_reassignments({tp: [a] + others}) == {tp: None}
        wait_for(
            lambda: not ad.list_partition_reassignments() and assignment(zk, topic) == [a] + others,
            timeout=90,
            message="RF 3 reached",
        )
        s = state(zk, topic)
        assert s["leader"] == a and sorted(s["isr"]) == [0, 1, 2], s
        n_before = len(prod.acked)
        wait_for(lambda: len(prod.acked) >= n_before + 50, timeout=60, message="records acknowledged at RF 3")
        first = prod.stop()
        # every replica holds the same batches, byte for byte
        wait_for(
            lambda: len({log_end_offset(b, topic, 0) for b in brokers.values()}) == 1,
            timeout=30,
            message="followers caught up",
        )
        batches = assert_replicas_identical(list(brokers.values()), topic, 0)
        assert batches and batches[-1][1] + 1 >= len(first)

        # RF 3 -> 1 on another broker: the leader moves into the target, the others leave
        prod = BackgroundProducer(bootstrap, topic, b"two")
        wait_for(lambda: len(prod.acked) >= 50, timeout=60, message="records acknowledged before the move back")
        new = others[0]
        assert ad.alter_partition_reassignments({tp: [new]}) == {tp: None}
        wait_for(
            lambda: not ad.list_partition_reassignments() and assignment(zk, topic) == [new],
            timeout=90,
            message="RF 1 on the new broker",
        )
        wait_for(lambda: state(zk, topic)["leader"] == new, timeout=30, message="new leader")
        # the removed replicas stop (no longer leader or follower) and their logs are deleted
        removed = [i for i in brokers if i != new]
        wait_for(
            lambda: not any(glob.glob(partition_dir(brokers[i], topic, 0) + "*") for i in removed),
            timeout=30,
            message="the removed replicas' logs deleted (no -delete dir left either)",
        )
        for i in removed:
            assert f"{topic}-0: replica removed from broker {i}" in brokers[i].output()
            with support.Wire(brokers[i].port) as w:
                r = support.produce(w, topic, support.records(1, prefix=b"stale"))
            assert r["error_code"] == 6, r  # NOT_LEADER_OR_FOLLOWER: no stale leader accepts writes
        n_before = len(prod.acked)
        wait_for(lambda: len(prod.acked) >= n_before + 50, timeout=60, message="records acknowledged after")
        second = prod.stop()
        assert not prod.errors, prod.errors[:3]
    finally:
        ad.close()
    acked = first + second
    got = consume_all(brokers[new].bootstrap, topic, [0], len(acked), timeout=60)
    values = [v for _, _, v in got]
    lost = set(acked) - set(values)
    dup = len(values) - len(set(values))
    assert not lost and dup == 0, f"{len(acked)} acknowledged, {len(lost)} lost, {dup} duplicated"
    assert s["leader_epoch"] >= 1


def test_list_in_progress_errors_controller_failover_and_cancel(broker_factory, zk, zk_chroot):
    from kafka import TopicPartition
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    brokers = start_cluster(broker_factory, zk)
    ctl = controller_of(zk)[0]
    a, b = [i for i in sorted(brokers) if i != ctl]
    topic = create_topic(zk_chroot, {0: [a], 1: [a]})
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with support.Wire(brokers[a].port) as w:
        wait_for(
            lambda: support.produce(w, topic, support.records(5, prefix=b"before"))["error_code"] == 0,
            timeout=30,
            message="leader ready",
        )

        # a broker that is not the controller answers NOT_CONTROLLER (41) at the top level
        r = w.request(
            ApiKey.ALTER_PARTITION_REASSIGNMENTS,
            0,
            {
                "timeout_ms": 5000,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "replicas": [a, b]}]}],
            },
        )
        assert r["error_code"] == 41 and r["responses"] == [], r
        r = w.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, 0, {"timeout_ms": 5000, "topics": None})
        assert r["error_code"] == 41 and r["topics"] == [], r

    ad = admin(brokers[ctl].bootstrap)
    assert ad.list_partition_reassignments() == {}  # (kafka-python finds the controller before b stops)
    brokers[b].proc.send_signal(signal.SIGSTOP)  # the new replica cannot catch up
    try:
        try:
            assert ad.alter_partition_reassignments({tp0: [a, b]}) == {tp0: None}
            assert ad.alter_partition_reassignments({tp1: None}) == {tp1: NoReassignmentInProgressError}
            assert ad.alter_partition_reassignments({tp1: [a, 42]}) == {tp1: InvalidReplicationAssignmentError}
            assert ad.alter_partition_reassignments({TopicPartition(topic, 7): [a]}) == {
                TopicPartition(topic, 7): UnknownTopicOrPartitionError
            }
            expected = {tp0: {"replicas": [a, b], "adding_replicas": [b], "removing_replicas": []}}
            assert ad.list_partition_reassignments() == expected
            assert ad.list_partition_reassignments([tp1]) == {}
        finally:
            ad.close()
        assert assignment(zk, topic) == [a, b]
        znode = json.loads(zk.get(paths.topic(topic))[0])
        assert znode["adding_replicas"] == {"0": [b]} and znode["removing_replicas"] == {}, znode
        # adding partitions meanwhile is refused (REASSIGNMENT_IN_PROGRESS, 60), as Kafka: the
        # rewrite of the topic znode would drop the reassignment's adding_replicas
        with support.Wire(brokers[a].port) as w:
            r = w.request(
                ApiKey.CREATE_PARTITIONS,
                1,
                {
                    "topics": [{"name": topic, "count": 3, "assignments": None}],
                    "timeout_ms": 5000,
                    "validate_only": False,
                },
            )
        assert r["results"][0]["error_code"] == 60, r
        assert json.loads(zk.get(paths.topic(topic))[0]) == znode

        # the controller dies: the next one (a; b is stopped) resumes the reassignment from the znode
        brokers[ctl].proc.send_signal(signal.SIGKILL)
        brokers[ctl].proc.wait()
        wait_for(lambda: controller_of(zk)[0] == a, timeout=60, message="broker a is the controller")
        ad = admin(brokers[a].bootstrap)
        try:
            wait_for(
                lambda: ad.list_partition_reassignments() == expected,
                timeout=30,
                message="the new controller lists the reassignment",
            )
            # cancel: back to the original replicas, the adding replica dropped
            assert ad.alter_partition_reassignments({tp0: None}) == {tp0: None}
            wait_for(lambda: ad.list_partition_reassignments() == {}, timeout=30, message="cancelled")
        finally:
            ad.close()
        assert assignment(zk, topic) == [a]
        znode = json.loads(zk.get(paths.topic(topic))[0])
        assert znode["adding_replicas"] == {} and znode["removing_replicas"] == {}, znode
        s = state(zk, topic)
        assert s["leader"] == a and s["isr"] == [a], s
    finally:
        brokers[b].proc.send_signal(signal.SIGCONT)
    with support.Wire(brokers[a].port) as w:
        assert support.produce(w, topic, support.records(5, prefix=b"after"))["error_code"] == 0
        vals = support.values(support.fetch(w, topic, 0)["records"])
    assert len(vals) == 10 and len(set(vals)) == 10, vals


def test_reassign_tool_through_the_bootstrap_server(broker_factory, zk, zk_chroot, tmp_path, capsys):
    """``pyklog-reassign-partitions --bootstrap-server`` --execute/--verify/--cancel (Kafka 2.4+'s
    tool) over the KIP-455 APIs: no ZooKeeper access needed."""
    from pyklog.connector.cli import reassign_partitions

    brokers = start_cluster(broker_factory, zk)
    ctl = controller_of(zk)[0]
    a, b = [i for i in sorted(brokers) if i != ctl]
    topic = create_topic(zk_chroot, {0: [a]})
    bootstrap = brokers[a].bootstrap
    f = tmp_path / f"r-{uuid.uuid4().hex[:6]}.json"

    def run(target, *action) -> tuple[int, str]:
        f.write_text(
            json.dumps(
                {
                    "version": 1,
                    "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in target.items()],
                }
            )
        )
        rc = reassign_partitions.main(["--bootstrap-server", bootstrap, "--reassignment-json-file", str(f), *action])
        cap = capsys.readouterr()
        return rc, cap.out + cap.err

    brokers[b].proc.send_signal(signal.SIGSTOP)
    try:
        rc, out = run({(topic, 0): [a, b]}, "--execute")
        assert rc == 0 and "Successfully started partition reassignment for " + f"{topic}-0" in out, out
        assert json.loads(out.split("\n\n")[1])["partitions"][0]["replicas"] == [a]  # the rollback JSON
        rc, out = run({(topic, 0): [a, b]}, "--verify")
        assert rc == 0 and f"Reassignment of partition {topic}-0 is still in progress." in out, out
        rc, out = run({(topic, 0): [a, b]}, "--cancel")
        assert rc == 0 and f"Successfully cancelled partition reassignment for: {topic}-0" in out, out
        wait_for(lambda: assignment(zk, topic) == [a], timeout=30, message="cancelled")
    finally:
        brokers[b].proc.send_signal(signal.SIGCONT)
    rc, out = run({(topic, 0): [a, b]}, "--execute")
    assert rc == 0, out
    wait_for(
        lambda: "is complete" in run({(topic, 0): [a, b]}, "--verify")[1], timeout=60, message="verify says complete"
    )
    assert assignment(zk, topic) == [a, b] and sorted(state(zk, topic)["isr"]) == sorted([a, b])


def test_deleting_a_replicated_topic_stops_every_replica_and_a_recreated_topic_starts_clean(broker_factory, zk):
    from confluent_kafka.admin import AdminClient, NewTopic

    brokers = start_cluster(broker_factory, zk)
    blist = [brokers[i] for i in sorted(brokers)]
    bootstrap = ",".join(b.bootstrap for b in blist)
    topic = f"del-{uuid.uuid4().hex[:6]}"
    ad = AdminClient({"bootstrap.servers": bootstrap})

    def create():
        ad.create_topics([NewTopic(topic, num_partitions=2, replication_factor=3)])[topic].result(30)
        wait_for(
            lambda: all(os.path.isdir(partition_dir(b, topic, p)) for b in blist for p in (0, 1)),
            timeout=30,
            message="every replica created",
        )

    create()
    from tests.integration.replication_support import produce_acks_all

    acked, errors = produce_acks_all(bootstrap, topic, [b"old-%d" % i for i in range(200)])
    assert len(acked) == 200 and not errors
    ad.delete_topics([topic])[topic].result(30)
    wait_for(
        lambda: not any(glob.glob(os.path.join(b.props["log.dirs"], f"{topic}-*")) for b in blist),
        timeout=60,
        message="every replica's log deleted",
    )
    wait_for(lambda: not zk.exists(paths.delete_topic_request(topic)), timeout=30, message="the deletion completed")
    # nothing fetches the deleted topic any more: a fetcher still at it would log "fetch from broker
    # N answered error 3" for it every replica.fetch.backoff.ms (200 ms); watch for 1.5 s (absence
    # cannot be polled for)
    marks = {b.broker_id: len(b.output()) for b in blist}
    time.sleep(1.5)
    for b in blist:
        later = b.output()[marks[b.broker_id] :]
        assert topic not in later, later[-2000:]
    marks = {b.broker_id: len(b.output()) for b in blist}
    create()  # same name at once: the new replicas start from offset 0, nothing of the old topic
    acked, errors = produce_acks_all(bootstrap, topic, [b"new-%d" % i for i in range(20)], partition=0)
    assert len(acked) == 20 and not errors and sorted(o for _, o, _ in acked) == list(range(20)), acked
    wait_for(lambda: len({log_end_offset(b, topic, 0) for b in blist}) == 1, timeout=30, message="caught up")
    batches = assert_replicas_identical(blist, topic, 0)
    assert batches[-1][1] == 19
    assert log_end_offset(blist[0], topic, 1) == 0
    got = consume_all(bootstrap, topic, [0, 1], 20, timeout=30)
    assert sorted(v for _, _, v in got) == sorted(b"new-%d" % i for i in range(20))
    for b in blist:
        later = b.output()[marks[b.broker_id] :]
        assert "Traceback" not in later and "ERROR" not in later, later[-2000:]
