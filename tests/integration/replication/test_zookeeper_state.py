"""The replication parts of ZkCluster against a real ZooKeeper: partition-state watches (one read of
the changed node per change, re-armed after a connection loss or session expiry) and the leader's
conditional ISR writes with Kafka's isr_change notification."""

from __future__ import annotations

import json
import threading

import pytest

from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from tests.support import expire_session, wait_for


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

    real_get_async = b1.zk.get_async

    def counting_get_async(path, *a, **kw):
        reads.append(path)
        return real_get_async(path, *a, **kw)

    b1.zk.get = counting_get
    b1.zk.get_async = counting_get_async  # changed state nodes are re-read in pipelined batches
    # the "controller" moves the leader of partition 1 (epoch bump)
    path = paths.partition_state("w", 1)
    zk.set(path, json.dumps({"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 1, "isr": [0]}).encode())
    wait_for(lambda: ("w", 1) in seen, message="the listener hears of partition 1")
    assert b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 1
    assert b1.topic("w", refresh_if_missing=False)[1].isr == [0]
    assert set(seen) == {("w", 1)} and reads == [path]  # one read, of the changed node only
    # the watch was re-armed: a second change is seen too
    zk.set(
        path, json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 2, "isr": [1, 0]}).encode()
    )
    wait_for(lambda: b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 2, message="second change")
    # after a session expiry the watches come back (changes made meanwhile are read)
    expire_session(b1.zk_connect, b1.zk)
    wait_for(lambda: b1.registered, timeout=30, message="b1 registered again")
    zk.set(path, json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 3, "isr": [1]}).encode())
    wait_for(
        lambda: b1.topic("w", refresh_if_missing=False)[1].leader_epoch == 3,
        timeout=30,
        message="a change after the session expiry",
    )


def test_the_cache_follows_state_changes_while_a_listener_is_held_up(brokers, zk):
    """A burst of leadership moves: the broker's replica manager applies them behind its lock (here
    a listener held on an event), and the cache -- what Metadata answers -- must keep reading the
    next changes meanwhile.  When the reads and the listeners shared one thread, the cache stayed
    at the first change until the listener let go: leaders already moved to a broker that then left
    were answered for seconds."""
    b0, b1 = brokers(0), brokers(1)
    b0.create_topic("held", 2, 2, replica_assignment={0: [0, 1], 1: [0, 1]})
    wait_for(lambda: b1.topic("held", refresh_if_missing=False) is not None, message="b1 sees the topic")
    b1.topic("held")  # arms the watches
    release, heard = threading.Event(), []

    def stuck(t, p):
        heard.append((t, p))
        release.wait(20)  # as the replica manager waiting for its lock while a log sync runs

    b1.add_partition_state_listener(stuck)

    def move(p, leader, epoch):
        state = {"controller_epoch": 1, "leader": leader, "version": 1, "leader_epoch": epoch, "isr": [leader]}
        zk.set(paths.partition_state("held", p), json.dumps(state).encode())

    try:
        move(0, 1, 1)
        wait_for(lambda: heard, message="the listener is told of the first change")
        move(1, 1, 1)  # the next changes arrive while the listener is held up
        move(0, 0, 2)
        wait_for(
            lambda: (
                (s := b1.topic("held", refresh_if_missing=False))[1].leader == 1
                and s[0].leader == 0
                and s[0].leader_epoch == 2
            ),
            timeout=5,
            message="the cache holds the later states while the listener is still held up",
        )
        assert not release.is_set() and heard == [("held", 0)]
    finally:
        release.set()
    wait_for(lambda: set(heard) == {("held", 0), ("held", 1)}, message="then the listener hears of every change")


def test_a_broker_that_leaves_after_its_leaderships_moved_is_never_a_leader_without_being_live(brokers, zk):
    """A controlled shutdown: the controller moves the stopping broker's leaderships, then the broker
    deregisters.  Another broker whose state reads are still queued (here: its event thread held)
    must not answer the moved partitions with a leader that is no longer live: the states of the
    partitions a leaving broker led are read again before it stops counting as live (before, up to
    700 partitions were answered without a leader for seconds)."""
    b0, b1 = brokers(0), brokers(1)
    b0.create_topic("leaving", 3, 2, replica_assignment={0: [1, 0], 1: [1, 0], 2: [0, 1]})
    wait_for(lambda: b0.topic("leaving", refresh_if_missing=False) is not None, message="b0 sees the topic")
    b0.topic("leaving")  # arms the watches
    assert set(b0.live_brokers()) == {0, 1}
    release, held = threading.Event(), threading.Event()

    def busy():
        held.set()
        release.wait(20)  # the event thread busy with a burst of other reads

    b0.session.events.submit("busy", busy)
    try:
        assert held.wait(5)
        for p in (0, 1):  # the "controller" moves partitions 0 and 1 to broker 0
            state = {"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 1, "isr": [0]}
            zk.set(paths.partition_state("leaving", p), json.dumps(state).encode())
        b1.stop()  # then the broker deregisters
        wait_for(lambda: 1 not in b0.live_brokers(), timeout=10, message="b0 sees broker 1 leave")
        states = b0.topic("leaving", refresh_if_missing=False)
        assert [states[p].leader for p in (0, 1, 2)] == [0, 0, 0]
        assert not release.is_set()  # read while the event thread was still busy
    finally:
        release.set()


@pytest.mark.parametrize("install", ["first read", "reload", "full refresh"])
def test_a_state_change_between_reading_a_topic_and_caching_it_is_kept(brokers, zk, install):
    """A broker reads a topic's states (arming their watches) and caches the entry afterwards; a
    controller write in between fires the watch, whose re-read found no entry to update yet (or one
    the install then replaced), and the spent watch never fired again: CI saw a restarted broker
    stay "follower of -1 at epoch 1" of a partition the controller had just given it (epoch 2)."""
    b0, b1 = brokers(0), brokers(1)
    name = f"race-{install.replace(' ', '-')}"
    b0.create_topic(name, 2, 1, replica_assignment={0: [1], 1: [1]})
    path = paths.partition_state(name, 0)
    # b1's own first read (its topic watch) is over before the injected one: a read on kazoo's event
    # thread would hold up the state watch it waits for (the callbacks run one at a time there)
    wait_for(lambda: b1.topic(name, refresh_if_missing=False) is not None, message="b1 caches the topic")
    heard = threading.Event()
    b1.add_partition_state_listener(lambda t, p: (t, p) == (name, 0) and heard.set())
    real_read = b1.metadata_cache._read_topic_entry
    injected = []

    def read_then_controller_writes(n, data, stat):
        entry = real_read(n, data, stat)  # the states as read, their watches armed
        # the read under test: the test's own call, or (reload) the topic watch's
        ours = (threading.current_thread() is threading.main_thread()) != (install == "reload")
        if n == name and ours and not injected:
            injected.append(n)
            zk.set(
                path,
                json.dumps({"controller_epoch": 2, "leader": 1, "version": 1, "leader_epoch": 7, "isr": [1]}).encode(),
            )
            if threading.current_thread().name != "pyklog-zk-events":
                assert heard.wait(10), "the state watch fired"
            # else (reload: the read runs on the session's event thread) the watch's re-read is
            # queued behind this read and runs after the install
        return entry

    b1.metadata_cache._read_topic_entry = read_then_controller_writes
    if install == "first read":
        with b1.metadata_cache._lock:
            b1.metadata_cache._topics.pop(name, None)
        states = b1.topic(name)
    elif install == "reload":
        zk.set(paths.topic(name), zk.get(paths.topic(name))[0])  # the assignment node rewritten
        wait_for(heard.is_set, message="the reload read the topic")
        states = b1.topic(name, refresh_if_missing=False)
    else:
        with b1.metadata_cache._lock:
            b1.metadata_cache._topics.pop(name, None)
        b1.metadata_cache._refresh_topics([name])
        states = b1.topic(name, refresh_if_missing=False)
    b1.metadata_cache._read_topic_entry = real_read
    wait_for(
        lambda: b1.partition_states_as_written(name)[0].leader_epoch == 7,
        timeout=5,
        message="the cache holds the controller's write",
    )
    assert states is not None and b1.partition_states_as_written(name)[1].leader_epoch == 0
    # and an older read never goes over a newer one: the watch's own re-read again, late
    with b1.metadata_cache._lock:
        b1.metadata_cache._pending_state_reloads[(name, 0)] = None
    b1.metadata_cache._reload_pending_partition_states()
    assert b1.partition_states_as_written(name)[0].leader_epoch == 7


def test_a_topic_created_again_does_not_inherit_the_old_topics_states(brokers, zk):
    """The newest state kept per partition (above) belongs to one topic node: a topic deleted and
    written again under the same name, here without state nodes (an assignment written by another
    tool: the first replica leads at epoch 0), must not get the old topic's leader epoch."""
    b0, b1 = brokers(0), brokers(1)
    b0.create_topic("again", 1, 1, replica_assignment={0: [1]})
    zk.set(
        paths.partition_state("again", 0),
        json.dumps({"controller_epoch": 2, "leader": 1, "version": 1, "leader_epoch": 7, "isr": [1]}).encode(),
    )
    wait_for(
        lambda: (
            (b1.topic("again", refresh_if_missing=False) or {}).get(0) is not None
            and b1.partition_states_as_written("again")[0].leader_epoch == 7
        ),
        message="b1 caches epoch 7",
    )
    assignment = zk.get(paths.topic("again"))[0]
    czxid = zk.get(paths.topic("again"))[1].czxid
    # deleted and written again at once: the topic node's data watch sees the deletion, and b1
    # reads the node written meanwhile
    tx = zk.transaction()
    for node in (
        paths.partition_state("again", 0),
        paths.partition("again", 0),
        paths.topic_partitions("again"),
        paths.topic("again"),
    ):
        tx.delete(node)
    tx.create(paths.topic("again"), assignment)
    assert all(r is True or isinstance(r, str) for r in tx.commit())
    wait_for(
        lambda: (
            b1.metadata_cache._topics.get("again") is not None and b1.metadata_cache._topics["again"].czxid != czxid
        ),
        timeout=10,
        message="b1 reads the new topic node",
    )
    assert b1.partition_states_as_written("again")[0].leader_epoch == 0


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
        "version": 1,
        "partitions": [{"topic": "i", "partition": 0}],
    }
    # a stale version with the same leader and epoch: read again, written at the new version
    assert b0.update_isr("i", 0, 0, [0, 1], 0) == 2
    assert json.loads(zk.get(paths.partition_state("i", 0))[0])["isr"] == [0, 1]
    # the controller moved leadership (epoch 1): the old leader's write is refused, nothing written
    zk.set(
        paths.partition_state("i", 0),
        json.dumps({"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 1, "isr": [1]}).encode(),
    )
    assert b0.update_isr("i", 0, 0, [0], 2) is None
    assert json.loads(zk.get(paths.partition_state("i", 0))[0])["isr"] == [1]


def test_update_isr_keeps_the_controller_epoch_of_the_state(brokers, zk):
    """The leader's ISR write keeps the controller epoch the state node carries (the controller that
    elected it), as Kafka's leader writes the controllerEpoch it learned; never a constant."""
    b0 = brokers(0)
    brokers(1)
    b0.create_topic("ce", 1, 2, replica_assignment={0: [0, 1]})
    zk.set(
        paths.partition_state("ce", 0),
        json.dumps({"controller_epoch": 7, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0, 1]}).encode(),
    )
    _, version = b0.partition_state("ce", 0)
    assert b0.update_isr("ce", 0, 0, [0], version) == version + 1
    assert json.loads(zk.get(paths.partition_state("ce", 0))[0]) == {
        "controller_epoch": 7,
        "leader": 0,
        "version": 1,
        "leader_epoch": 0,
        "isr": [0],
    }
    # after a conflict (the controller rewrote the node at epoch 8, same leader and leader epoch)
    zk.set(
        paths.partition_state("ce", 0),
        json.dumps({"controller_epoch": 8, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0]}).encode(),
    )
    assert b0.update_isr("ce", 0, 0, [0, 1], version + 1) == version + 3
    assert json.loads(zk.get(paths.partition_state("ce", 0))[0])["controller_epoch"] == 8


def test_update_isrs_writes_what_it_knows_at_once_and_refuses_what_changed(brokers, zk):
    """The leader's batched ISR writes: a state node whose content at the given version this broker
    read is written conditionally at once, keeping its controller epoch; a version that moved on
    writes nothing (-1: the caller decides again); a partition whose leadership moved answers None
    and writes nothing."""
    b0 = brokers(0)
    brokers(1)
    b0.create_topic("batch", 4, 2, replica_assignment={p: [0, 1] for p in range(4)})

    def node(p):
        return json.loads(zk.get(paths.partition_state("batch", p))[0])

    def put(p, **fields):
        zk.set(paths.partition_state("batch", p), json.dumps({**node(p), **fields}).encode())

    put(1, controller_epoch=7)  # version 1, read by b0's state watch
    put(2, isr=[0])  # version 1; the write below names version 0: moved on
    put(3, leader=1, leader_epoch=1, isr=[1])  # version 1: the controller moved the leadership
    wait_for(
        lambda: (
            [b0.partition_state_as_written("batch", p).leader_epoch for p in range(4)] == [0, 0, 0, 1]
            and b0.partition_state_version("batch", 1, 0, 0, [0, 1]) == 1
        ),
        10,
        0.05,
        "b0 reads the changed states",
    )
    out = b0.update_isrs(
        [("batch", 0, 0, [0], 0), ("batch", 1, 0, [0], 1), ("batch", 2, 0, [0, 1], 0), ("batch", 3, 0, [0], 1)]
    )
    assert out == {("batch", 0): 1, ("batch", 1): 2, ("batch", 2): -1, ("batch", 3): None}
    assert node(0) == {"controller_epoch": 1, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0]}
    assert node(1) == {"controller_epoch": 7, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0]}
    assert node(2)["isr"] == [0] and zk.exists(paths.partition_state("batch", 2)).version == 1
    assert node(3) == {"controller_epoch": 1, "leader": 1, "version": 1, "leader_epoch": 1, "isr": [1]}
    # the cache holds what was written, so the next change of partition 1 is written at once too
    assert b0.partition_state_version("batch", 1, 0, 0, [0]) == 2
    assert b0.update_isrs([("batch", 1, 0, [0, 1], 2)]) == {("batch", 1): 3}
    assert node(1) == {"controller_epoch": 7, "leader": 0, "version": 1, "leader_epoch": 0, "isr": [0, 1]}
