"""The replication parts of ZkCluster against a real ZooKeeper: partition-state watches (one read of
the changed node per change, re-armed after a connection loss or session expiry) and the leader's
conditional ISR writes with Kafka's isr_change notification."""
from __future__ import annotations

import json
import threading

import pytest

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from support import expire_session, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture
def brokers(zk_chroot):
    made = []

    def make(broker_id):
        c = ZkCluster(zk_chroot, broker_id, "127.0.0.1", 9500 + broker_id, session_timeout_ms=6000).start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.stop()


def test_state_watch_reports_only_the_changed_partition_and_updates_the_cache(brokers, zk):
    b0, b1 = brokers(0), brokers(1)
    b0.create_topic("w", 3, 2, replica_assignment={0: [0, 1], 1: [1, 0], 2: [0, 1]})
    # created with every replica in the ISR (Kafka's controller: the live replicas)
    assert json.loads(zk.get(paths.partition_state("w", 1))[0])["isr"] == [1, 0]
    wait_for(lambda: b1.topic("w", refresh_if_missing=False) is not None, message="b1 sees the topic")
    b1.topic("w")  # reads the states: arms the watches
    seen, lock = [], threading.Lock()

    def listener(t, p):
        with lock:
            seen.append((t, p))

    b1.add_partition_state_listener(listener)
    reads = []
    real_get = b1.zk.get

    def counting_get(path, *a, **kw):
        reads.append(path)
        return real_get(path, *a, **kw)

    b1.zk.get = counting_get
    # the "controller" moves the leader of partition 1 (epoch bump)
    path = paths.partition_state("w", 1)
    zk.set(path, json.dumps({"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 1,
                             "isr": [0]}).encode())
    wait_for(lambda: ("w", 1) in seen, message="the listener hears of partition 1")
    assert b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 1
    assert b1.topic("w", refresh_if_missing=False)[1].isr == [0]
    assert set(seen) == {("w", 1)} and reads == [path]  # one read, of the changed node only
    # the watch was re-armed: a second change is seen too
    zk.set(path, json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 2,
                             "isr": [1, 0]}).encode())
    wait_for(lambda: b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 2, message="second change")
    # after a session expiry the watches come back (changes made meanwhile are read)
    expire_session(b1.zk_connect, b1.zk)
    wait_for(lambda: b1.registered, timeout=30, message="b1 registered again")
    zk.set(path, json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 3,
                             "isr": [1]}).encode())
    wait_for(lambda: b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 3, timeout=30,
             message="a change after the session expiry")


def test_update_isr_is_conditional_and_stops_when_deposed(brokers, zk):
    b0 = brokers(0)
    brokers(1)
    b0.create_topic("i", 1, 2, replica_assignment={0: [0, 1]})
    state, version = b0.partition_state("i", 0)
    assert (state.leader, state.leader_epoch, list(state.isr), version) == (0, 0, [0, 1], 0)
    v = b0.update_isr("i", 0, 0, [0], version)
    assert v == 1
    st = json.loads(zk.get(paths.partition_state("i", 0))[0])
    assert st == {"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0]}
    notes = zk.get_children(paths.ISR_CHANGE_NOTIFICATION)
    assert len(notes) == 1 and notes[0].startswith("isr_change_")
    assert json.loads(zk.get(f"{paths.ISR_CHANGE_NOTIFICATION}/{notes[0]}")[0]) == {
        "version": 1, "partitions": [{"topic": "i", "partition": 0}]}
    # a stale version with the same leader and epoch: read again, written at the new version
    assert b0.update_isr("i", 0, 0, [0, 1], 0) == 2
    assert json.loads(zk.get(paths.partition_state("i", 0))[0])["isr"] == [0, 1]
    # the controller moved leadership (epoch 1): the old leader's write is refused, nothing written
    zk.set(paths.partition_state("i", 0), json.dumps({"controller_epoch": 1, "leader": 1, "version": 1,
                                                      "leader_epoch": 1, "isr": [1]}).encode())
    assert b0.update_isr("i", 0, 0, [0], 2) is None
    assert json.loads(zk.get(paths.partition_state("i", 0))[0])["isr"] == [1]
