"""Replication between real broker processes: followers fetch from the leader,
the leader tracks them, the high watermark follows the ISR, the ISR shrinks and expands in the
partition state znode, acks=all waits for the ISR and min.insync.replicas refuses writes; a deposed
leader truncates what was never replicated; transactions and the log start offset replicate.

Three brokers, replication factor 3.  Faults are real: SIGKILL, SIGSTOP/SIGCONT, restarts.  Every
test counts what was acknowledged and what is read back (lost, duplicated).  The followers SIGKILLed
under continuous load are in tests/faults/test_replication_followers.py.
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import socket
import struct
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from tests.integration.replication_support import (
    LAG_MS,
    assert_replicas_identical,
    batches_on_disk,
    consume_all,
    create_topic,
    list_latest,
    log_end_offset,
    partition_dir,
    produce_acks_all,
    produce_raw,
    start_brokers,
    state,
)
from tests.support import wait_for


def test_acks_all_records_are_byte_identical_on_every_replica(broker_factory, zk):
    brokers = start_brokers(broker_factory, **{"default.replication.factor": 3})
    topic = f"repl-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=2)
    assert all(sorted(r) == [0, 1, 2] for r in assignment.values())  # distinct brokers
    assert all(state(zk, topic, p)["isr"] == assignment[p] for p in assignment)
    # every replica has a log, before any record
    wait_for(
        lambda: all(os.path.isdir(partition_dir(b, topic, p)) for b in brokers for p in assignment),
        message="a log on every replica",
    )
    acked, errors = [], []
    for p in assignment:
        a, e = produce_acks_all(brokers[1].bootstrap, topic, [b"r%d-%05d" % (p, i) for i in range(1000)], partition=p)
        acked += a
        errors += e
    assert not errors and len(acked) == 2000
    # acknowledged with acks=all: on every ISR member already, byte for byte
    for p in assignment:
        n = sum(1 for a in acked if a[0] == p)
        leader = next(b for b in brokers if b.broker_id == assignment[p][0])
        assert list_latest(leader.port, topic, p) == n  # high watermark = everything acknowledged
        wait_for(
            lambda p=p, n=n: all(log_end_offset(b, topic, p) == n for b in brokers),
            message="followers at the leader's log end offset",
        )
        batches = assert_replicas_identical(brokers, topic, p)
        assert batches[-1][1] + 1 == n
    # Metadata: replicas, ISR and no offline replica, from any broker
    with support.Wire(brokers[2].port) as w:
        md = w.request(ApiKey.METADATA, 5, {"topics": [{"name": topic}], "allow_auto_topic_creation": False})
    for part in md["topics"][0]["partitions"]:
        assert part["replica_nodes"] == assignment[part["partition_index"]]
        assert sorted(part["isr_nodes"]) == [0, 1, 2] and part["offline_replicas"] == []
    got = consume_all(brokers[0].bootstrap, topic, list(assignment), len(acked))
    assert sorted(got) == sorted(acked)  # 0 lost, 0 duplicated
    # pyklog-topics --replication-factor 3, and a topic auto-created with default.replication.factor=3:
    # replicas on distinct brokers, a log on each, records replicated
    from pyklog.connector.cli.topics import main as topics_main

    cli_topic, auto_topic = f"cli-{uuid.uuid4().hex[:6]}", f"auto-{uuid.uuid4().hex[:6]}"
    assert (
        topics_main(
            [
                "--zookeeper",
                brokers[0].zk_connect,
                "--create",
                "--topic",
                cli_topic,
                "--partitions",
                "3",
                "--replication-factor",
                "3",
            ]
        )
        == 0
    )
    with support.Wire(brokers[0].port) as w:  # Metadata auto-creates it (auto.create.topics.enable)
        w.request(ApiKey.METADATA, 5, {"topics": [{"name": auto_topic}], "allow_auto_topic_creation": True})
    auto_leader = next(
        b
        for b in brokers
        if b.broker_id
        == wait_for(lambda: zk.exists(paths.partition_state(auto_topic, 0)) and state(zk, auto_topic, 0)["leader"] + 1)
        - 1
    )
    wait_for(
        lambda: produce_raw(auto_leader.port, auto_topic, 0, b"auto")["error_code"] == 0,
        message="auto-created topic accepts an acks=all write",
    )
    for t, count in ((cli_topic, 3), (auto_topic, 1)):
        layout = {int(p): r for p, r in json.loads(zk.get(paths.topic(t))[0])["partitions"].items()}
        assert len(layout) == count and all(sorted(r) == [0, 1, 2] for r in layout.values())
        wait_for(
            lambda t=t, layout=layout: all(os.path.isdir(partition_dir(b, t, p)) for b in brokers for p in layout),
            message=f"logs of {t} on every replica",
        )
    wait_for(lambda: all(log_end_offset(b, auto_topic, 0) == 1 for b in brokers), message="auto topic replicated")
    for b in brokers:
        assert "Traceback" not in b.output(), b.output()[-5000:]


def test_follower_killed_isr_shrinks_min_insync_refuses_then_followers_rejoin(broker_factory, zk):
    brokers = start_brokers(broker_factory)
    topic = f"isr-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1)
    leader_id, f1_id, f2_id = assignment[0]
    leader, f1, f2 = (next(b for b in brokers if b.broker_id == i) for i in (leader_id, f1_id, f2_id))
    acked_all = []
    acked, errors = produce_acks_all(leader.bootstrap, topic, [b"a%04d" % i for i in range(300)], partition=0)
    assert not errors
    acked_all += acked

    # one follower SIGKILLed: it leaves the ISR after replica.lag.time.max.ms; writes go on (ISR 2 >= 2)
    f1.kill()
    t0 = time.monotonic()
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == sorted([leader_id, f2_id]),
        timeout=LAG_MS / 1000 + 30,
        message="the killed follower leaves the ISR",
    )
    shrink_s = time.monotonic() - t0
    st = state(zk, topic, 0)
    # the leader changes only the ISR (epoch 0); under load the controller may remove the dead
    # follower first, when its ZooKeeper session expires (epoch + 1, as Kafka 2.x's controller).
    # Kafka's isr_change notifications are read and deleted by the controller (tests/integration/controller/test_controller.py)
    assert st["leader"] == leader_id and st["leader_epoch"] in (0, 1)
    acked, errors = produce_acks_all(leader.bootstrap, topic, [b"b%04d" % i for i in range(300)], partition=0)
    assert not errors
    acked_all += acked

    # the second follower killed: ISR = the leader alone < min.insync.replicas -> NOT_ENOUGH_REPLICAS,
    # nothing appended
    f2.kill()
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == [leader_id],
        timeout=LAG_MS / 1000 + 30,
        message="the second follower leaves the ISR",
    )
    leo_before = log_end_offset(leader, topic, 0)
    resp = produce_raw(leader.port, topic, 0, b"refused")
    assert resp["error_code"] == 19, resp  # NOT_ENOUGH_REPLICAS
    assert log_end_offset(leader, topic, 0) == leo_before
    # acks=1 still works (Kafka: min.insync.replicas applies to acks=all only) and is readable: HW moves
    # with the ISR of the leader alone
    resp = produce_raw(leader.port, topic, 0, b"one-ack", acks=1)
    assert resp["error_code"] == 0, resp
    acked_all.append((0, resp["base_offset"], b"one-ack0"))

    # followers restarted: they truncate (nothing to cut), catch up and rejoin the ISR
    f1.start()
    f2.start()
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == sorted([leader_id, f1_id, f2_id]),
        timeout=60,
        message="both followers rejoin the ISR",
    )
    acked, errors = produce_acks_all(leader.bootstrap, topic, [b"c%04d" % i for i in range(300)], partition=0)
    assert not errors
    acked_all += acked
    n = len(acked_all)
    assert list_latest(leader.port, topic, 0) == n
    wait_for(lambda: all(log_end_offset(b, topic, 0) == n for b in brokers), message="all replicas caught up")
    assert_replicas_identical(brokers, topic, 0)
    got = consume_all(leader.bootstrap, topic, [0], n)
    assert sorted(got) == sorted(acked_all), (len(got), n)  # 0 lost, 0 duplicated, in order
    assert [o for _, o, _ in got] == list(range(n))
    print(f"acknowledged {n}, read back {len(got)}, lost 0, duplicated 0; ISR shrank {shrink_s:.1f}s after the kill")


def test_stopped_follower_holds_the_high_watermark_until_it_leaves_the_isr(broker_factory, zk):
    brokers = start_brokers(broker_factory)
    topic = f"stop-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1, **{"min.insync.replicas": 1})
    leader_id, f1_id, f2_id = assignment[0]
    leader, f1 = (next(b for b in brokers if b.broker_id == i) for i in (leader_id, f1_id))
    for i in range(10):
        assert produce_raw(leader.port, topic, 0, b"x%d" % i)["error_code"] == 0
    assert list_latest(leader.port, topic, 0) == 10
    f1.proc.send_signal(signal.SIGSTOP)
    try:
        # acks=1 writes: the leader's log end offset moves, the high watermark does not (f1 is in the ISR)
        for i in range(5):
            assert produce_raw(leader.port, topic, 0, b"y%d" % i, acks=1)["error_code"] == 0
        assert log_end_offset(leader, topic, 0) == 15
        hw = list_latest(leader.port, topic, 0)
        with support.Wire(leader.port) as w:
            above = support.fetch(w, topic, 10)
            below = support.fetch(w, topic, 0)
        # read after the figures: the leader writes a shrunk ISR to ZooKeeper before its high watermark
        # passes the follower, so while ZooKeeper still lists f1 the figures above were taken with f1
        # in the ISR (on a machine loaded past replica.lag.time.max.ms it may already have left)
        if f1_id in state(zk, topic, 0)["isr"]:
            assert hw == 10
            assert above["high_watermark"] == 10 and support.values(above["records"]) == []  # nothing at/above HW
            assert len(support.values(below["records"])) == 10
        # past replica.lag.time.max.ms: f1 leaves the ISR, the high watermark reaches 15
        wait_for(
            lambda: state(zk, topic, 0)["isr"] == sorted([leader_id, f2_id]),
            timeout=LAG_MS / 1000 + 30,
            message="the stopped follower leaves the ISR",
        )
        wait_for(lambda: list_latest(leader.port, topic, 0) == 15, message="HW passes the stopped follower")
    finally:
        f1.proc.send_signal(signal.SIGCONT)
    # resumed: it catches up and rejoins
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == sorted([leader_id, f1_id, f2_id]),
        timeout=60,
        message="the resumed follower rejoins the ISR",
    )
    wait_for(lambda: log_end_offset(f1, topic, 0) == 15, message="the resumed follower caught up")
    assert_replicas_identical(brokers, topic, 0)


def test_a_waiting_acks_all_produce_lets_the_connections_next_request_in(broker_factory, zk):
    """One connection, two Produce requests sent back to back (as librdkafka sends one per
    partition): the first, acks=all, waits for a stopped follower still in the ISR; the second is
    appended meanwhile -- before, it waited behind the first answer, so N such requests on a
    connection were N replication round trips in a row.  The answers still come in request order,
    the acks=all one only once the follower has the record; nothing is lost or written twice."""
    from pyklog.broker.protocol.api import decode_response

    brokers = start_brokers(broker_factory, n=2, **{"replica.lag.time.max.ms": "60000"})
    topic = f"pipe-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1, rf=2, **{"min.insync.replicas": 1})
    leader_id, follower_id = assignment[0]
    leader, follower = (next(b for b in brokers if b.broker_id == i) for i in (leader_id, follower_id))
    assert produce_raw(leader.port, topic, 0, b"first")["error_code"] == 0

    def produce(value: bytes, acks: int) -> dict:
        return {
            "transactional_id": None,
            "acks": acks,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": topic, "partition_data": [{"index": 0, "records": support.records(1, prefix=value)}]}
            ],
        }

    follower.proc.send_signal(signal.SIGSTOP)
    try:
        with support.Wire(leader.port, timeout=60) as w:
            waiting = w.send(ApiKey.PRODUCE, 8, produce(b"waits", -1))
            behind = w.send(ApiKey.PRODUCE, 8, produce(b"behind", 1))
            # the second request's record is written while the first still waits for the follower:
            # the log end offset is read first, then the socket looked at, so "appended and not
            # answered" means appended before the answer (before, the answer always came first: the
            # follower's ZooKeeper session expired, the ISR shrank, then the second was handled)
            deadline = time.monotonic() + 30
            while True:
                appended = log_end_offset(leader, topic, 0) == 3
                w.sock.settimeout(0.05)
                try:
                    answered = w.sock.recv(1, socket.MSG_PEEK) != b""
                except TimeoutError:
                    answered = False
                assert not answered, "the second Produce was handled only after the first one's answer"
                if appended:
                    break
                assert time.monotonic() < deadline, "the second Produce was not appended"
            w.sock.settimeout(60)
            follower.proc.send_signal(signal.SIGCONT)
            answers = [decode_response(ApiKey.PRODUCE, 8, w.recv_frame()) for _ in range(2)]
    finally:
        follower.proc.send_signal(signal.SIGCONT)
    assert [cid for cid, _ in answers] == [waiting, behind]  # in request order
    parts = [a["responses"][0]["partition_responses"][0] for _, a in answers]
    assert [(p["error_code"], p["base_offset"]) for p in parts] == [(0, 1), (0, 2)]
    wait_for(lambda: log_end_offset(follower, topic, 0) == 3, message="the follower caught up")
    got = consume_all(leader.bootstrap, topic, [0], 3)
    assert [v for _, _, v in got] == [b"first0", b"waits0", b"behind0"]  # none lost, none twice


def test_new_leader_written_by_a_controller_old_leader_truncates_its_unreplicated_records(broker_factory, zk):
    """The test plays the controller (repl-controller's job): it moves leadership by writing the state
    znode with a bumped leader epoch.  The old leader held records no follower had (acks=1 while the
    followers were stopped); back as a follower it truncates them (OffsetsForLeaderEpoch, or its high
    watermark when the leader does not serve it) and ends byte-identical to the new leader."""
    brokers = start_brokers(broker_factory)
    topic = f"epoch-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1, **{"min.insync.replicas": 1})
    a_id, b_id, c_id = assignment[0]
    a, b, c = (next(x for x in brokers if x.broker_id == i) for i in (a_id, b_id, c_id))
    acked, errors = produce_acks_all(a.bootstrap, topic, [b"e0-%03d" % i for i in range(10)], partition=0)
    assert not errors and len(acked) == 10
    wait_for(
        lambda: log_end_offset(b, topic, 0) == 10 and log_end_offset(c, topic, 0) == 10, message="followers caught up"
    )
    for x in (b, c):
        x.proc.send_signal(signal.SIGSTOP)
    try:
        for i in range(5):  # acks=1: on the leader only, never acknowledged to an acks=all producer
            assert produce_raw(a.port, topic, 0, b"lost%d" % i, acks=1)["error_code"] == 0
        assert log_end_offset(a, topic, 0) == 15
        a.kill()
        # the "controller": b leads at epoch 1 with ISR [b, c] (conditional on the node's version)
        path = paths.partition_state(topic, 0)
        data, stat = zk.get(path)
        st = json.loads(data)
        st.update(leader=b_id, leader_epoch=st["leader_epoch"] + 1, isr=sorted([b_id, c_id]))
        zk.set(path, json.dumps(st).encode(), version=stat.version)
    finally:
        for x in (b, c):
            x.proc.send_signal(signal.SIGCONT)
    wait_for(
        lambda: produce_raw(b.port, topic, 0, b"probe")["error_code"] == 0,
        message="b accepts Produce as the new leader",
    )
    acked_values = [v for _, _, v in acked] + [b"probe0"]
    acked, errors = produce_acks_all(b.bootstrap, topic, [b"e1-%03d" % i for i in range(20)], partition=0)
    assert not errors and len(acked) == 20
    acked_values += [v for _, _, v in acked]
    a.start()  # the old leader comes back as a follower of b at epoch 1
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == sorted([a_id, b_id, c_id]),
        timeout=60,
        message="the old leader rejoins the ISR",
    )
    # the acknowledged records, plus the acks=1 records the new leader had fetched before its SIGSTOP
    n = log_end_offset(b, topic, 0)
    extra = n - len(acked_values)
    assert 0 <= extra <= 4
    wait_for(lambda: all(log_end_offset(x, topic, 0) == n for x in brokers), message="all replicas at n")
    batches = assert_replicas_identical(brokers, topic, 0)  # a's unreplicated records are gone
    assert b"lost4" not in b"".join(x[2] for x in batches)
    # KIP-101/279: the old leader asked the new one where its epoch 0 ends (OffsetsForLeaderEpoch)
    assert re.search(
        rf"truncating from log end offset 15 to {10 + extra} \(leader's end offset of epoch 0 is "
        rf"{10 + extra}\)",
        a.output(),
    ), a.output()[-3000:]
    got = consume_all(b.bootstrap, topic, [0], n)
    values = [v for _, _, v in got]
    assert [o for _, o, _ in got] == list(range(n))
    assert sorted(v for v in values if not v.startswith(b"lost")) == sorted(acked_values)  # 0 lost, 0 dup
    assert values[10 : 10 + extra] == [b"lost%d0" % i for i in range(extra)]  # kept: the new leader had them
    # the new leader's epoch is in the batches it wrote (partitionLeaderEpoch, bytes 12..15)
    epoch_of = {o: struct.unpack_from(">i", raw, 12)[0] for base, last, raw in batches for o in range(base, last + 1)}
    assert [epoch_of[o] for o in range(10)] == [0] * 10
    assert [epoch_of[o] for o in range(10 + extra, n)] == [1] * 21


def test_transactions_on_a_replicated_topic(broker_factory, zk):
    """A transactional producer (confluent-kafka) on a replication-factor-3 topic: markers and aborted
    batches are replicated byte for byte; read_committed reads exactly the committed records (LSO
    bounded by the high watermark), read_uncommitted everything below the high watermark."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    brokers = start_brokers(broker_factory)
    topic = f"txn-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1)
    leader = next(b for b in brokers if b.broker_id == assignment[0][0])
    p = Producer({"bootstrap.servers": leader.bootstrap, "transactional.id": f"t-{topic}", "acks": "all"})
    p.init_transactions(30)
    committed = []
    for round_, commit in enumerate((True, False, True, False, True)):
        p.begin_transaction()
        vals = [b"%s-%d-%d" % (b"c" if commit else b"a", round_, i) for i in range(50)]
        for v in vals:
            p.produce(topic, v, partition=0)
        if commit:
            p.commit_transaction(30)
            committed += vals
        else:
            p.flush(30)  # on the log before the abort (librdkafka purges unsent records on abort)
            p.abort_transaction(30)
    n = 250 + 5  # 250 records, 5 markers (written by the coordinator after EndTxn)
    wait_for(lambda: log_end_offset(leader, topic, 0) == n, message="every marker on the leader")
    wait_for(lambda: all(log_end_offset(b, topic, 0) == n for b in brokers), message="markers replicated")
    assert_replicas_identical(brokers, topic, 0)
    for b in brokers:  # the aborted transactions are indexed on every replica
        txn = glob.glob(os.path.join(partition_dir(b, topic, 0), "*.txnindex"))
        assert txn and sum(os.path.getsize(f) for f in txn) == 2 * 34, b.broker_id  # two AbortedTxn entries
    wait_for(lambda: list_latest(leader.port, topic, 0) == n, message="high watermark at the last marker")
    c = Consumer(
        {
            "bootstrap.servers": leader.bootstrap,
            "group.id": f"g-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < len(committed) and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == committed


def read_offset_checkpoint(path) -> dict:
    with open(path) as f:
        lines = f.read().split("\n")
    return {(t, int(p)): int(o) for t, p, o in (ln.split() for ln in lines[2:] if ln.strip())}


def test_log_start_offset_follows_the_leader_and_a_wiped_follower_restarts_at_it(broker_factory, zk):
    """DeleteRecords on the leader: the followers' log start offsets follow (from the Fetch answers).
    A follower whose disk is wiped asks for offset 0, below the leader's log start: it restarts its
    log at the leader's log start offset (Kafka's truncateFullyAndStartAt), catches up, rejoins."""
    brokers = start_brokers(broker_factory, **{"log.flush.offset.checkpoint.interval.ms": 300})
    topic = f"start-{uuid.uuid4().hex[:6]}"
    assignment = create_topic(zk, brokers, topic, partitions=1)
    leader_id, f1_id, f2_id = assignment[0]
    leader, f1 = (next(b for b in brokers if b.broker_id == i) for i in (leader_id, f1_id))
    with support.Wire(leader.port) as w:
        for i in range(150):  # one batch per record: batch boundaries at every offset
            assert support.produce(w, topic, support.records(1, prefix=b"s%03d-" % i), acks=-1)["error_code"] == 0
        resp = w.request(
            ApiKey.DELETE_RECORDS,
            1,
            {"topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 100}]}], "timeout_ms": 5000},
        )
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0, resp
    for b in brokers:  # every replica's log-start-offset-checkpoint says 100
        wait_for(
            lambda b=b: (
                read_offset_checkpoint(os.path.join(b.props["log.dirs"], "log-start-offset-checkpoint")).get((topic, 0))
                == 100
            ),
            message=f"log start offset 100 on broker {b.broker_id}",
        )
    f1.kill()
    import shutil

    shutil.rmtree(f1.props["log.dirs"])
    f1.start()
    wait_for(lambda: log_end_offset(f1, topic, 0) == 150, timeout=60, message="the wiped follower caught up")
    assert "restarting the log there" in f1.output()
    wait_for(
        lambda: state(zk, topic, 0)["isr"] == sorted([leader_id, f1_id, f2_id]),
        timeout=60,
        message="the wiped follower rejoins the ISR",
    )
    mine = batches_on_disk(f1, topic, 0)
    assert mine[0][0] == 100
    assert mine == [x for x in batches_on_disk(leader, topic, 0) if x[0] >= 100]  # byte-identical from 100
    got = consume_all(leader.bootstrap, topic, [0], 50)
    assert [o for _, o, _ in got] == list(range(100, 150))
