"""The controller (pyklog.broker.controller) with real broker processes in one ZooKeeper chroot.

Until followers replicate (the replica fetcher), these tests put followers into the ISR by writing
the partition state znodes as a partition leader would (conditionally, keeping leader and epoch),
and check every election by reading the state znodes the controller writes.
"""

from __future__ import annotations

import itertools
import json
import signal
import time
import uuid

import tests.support as support
from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import (
    encode_partition_list,
)
from tests.integration.controller.support import controller_of, create_topic
from tests.support import wait_for

SESSION_S = 6.0  # BrokerProcess's zookeeper.session.timeout.ms


# ------------------------------------------------------------------------------ pure algorithms


# ------------------------------------------------------------------------------ helpers


def state(zk, topic, p) -> dict:
    return json.loads(zk.get(paths.partition_state(topic, p))[0])


def set_isr(zk, topic, p, isr) -> None:
    """Put replicas into the ISR as the partition leader does (leader and epoch kept, conditional)."""
    while True:
        data, stat = zk.get(paths.partition_state(topic, p))
        st = json.loads(data)
        st["isr"] = list(isr)
        try:
            zk.set(paths.partition_state(topic, p), json.dumps(st).encode(), version=stat.version)
            return
        except Exception as e:  # noqa: BLE001 - BadVersion: the controller wrote meanwhile
            if type(e).__name__ != "BadVersionError":
                raise


def start_cluster(broker_factory, zk, ids=(0, 1, 2), **props):
    brokers = {i: broker_factory(i, **props) for i in ids}
    wait_for(
        lambda: sorted(int(c) for c in zk.get_children(paths.BROKER_IDS)) == sorted(ids), message="brokers registered"
    )
    wait_for(lambda: controller_of(zk)[0] in ids, message="a controller elected")
    return brokers


# ------------------------------------------------------------------------------ controller election


def test_controller_failover_and_a_stopped_old_controller_writes_nothing(broker_factory, zk, zk_chroot):
    brokers = start_cluster(broker_factory, zk)
    first, epoch = controller_of(zk)
    assert epoch >= 1
    # every broker reports the controller of /controller in Metadata
    for b in brokers.values():
        with support.Wire(b.port) as w:
            md = w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})
            assert md["controller_id"] == first

    topic = create_topic(zk_chroot, {0: [0, 1, 2], 1: [1, 2, 0], 2: [2, 0, 1]})
    for p in range(3):
        set_isr(zk, topic, p, [0, 1, 2])

    # SIGKILL the controller: another broker takes over within the session timeout (+ slack)
    t0 = time.monotonic()
    brokers[first].kill()
    second, epoch2 = wait_for(
        lambda: (c := controller_of(zk)) and c[0] not in (-1, first) and c,
        timeout=SESSION_S + 20,
        message="a new controller",
    )
    took = time.monotonic() - t0
    assert epoch2 == epoch + 1, (epoch, epoch2)
    assert took < SESSION_S + 20
    # ... and it elected new leaders for the dead controller's partitions, from the ISR, epoch+1
    st = wait_for(
        lambda: (s := state(zk, topic, first)) and s["leader"] not in (first, -1) and s,
        timeout=20,
        message="new leader of the dead controller's partition",
    )
    assert st["leader"] in (0, 1, 2) and first not in st["isr"] and st["leader_epoch"] == 1
    assert st["controller_epoch"] == epoch2

    # SIGSTOP the new controller past its session: the third broker takes over (epoch + 2)
    third = next(i for i in brokers if i not in (first, second))
    brokers[second].proc.send_signal(signal.SIGSTOP)
    try:
        wait_for(lambda: controller_of(zk)[0] == third, timeout=SESSION_S + 30, message="third controller")
        assert controller_of(zk)[1] == epoch2 + 1
        # the stopped broker's partitions moved to the third broker by the third controller
        wait_for(lambda: state(zk, topic, second)["leader"] == third, timeout=20, message="failover of p")
        before = {p: zk.get(paths.partition_state(topic, p))[1].mzxid for p in range(3)}
    finally:
        brokers[second].proc.send_signal(signal.SIGCONT)
    # resumed, the old controller finds its session expired and resigns: it writes nothing with its epoch
    wait_for(
        lambda: (
            f"broker {second} stops acting as controller" in brokers[second].output()
            or "no longer acting as controller" in brokers[second].output()
        ),
        timeout=30,
        message="the old controller resigns",
    )
    # it re-registers as a broker; the controller (third) may then shrink/expand nothing for it
    time.sleep(2.0)
    for p in range(3):
        s = state(zk, topic, p)
        assert s["controller_epoch"] != epoch2 or zk.get(paths.partition_state(topic, p))[1].mzxid == before[p], s
    assert controller_of(zk) == (third, epoch2 + 1)
    assert "Traceback" not in brokers[third].output()


# ------------------------------------------------------------------------------ leader failure


def test_leader_sigkilled_rf3_new_leader_from_isr_never_outside(broker_factory, zk, zk_chroot, capsys):
    brokers = start_cluster(broker_factory, zk)
    ctl, _ = controller_of(zk)
    victim = next(i for i in (2, 1, 0) if i != ctl)  # never the controller here: no failover delay
    x = next(i for i in (0, 1, 2) if i not in (ctl, victim))
    # p0: RF 3, every replica in the ISR; p1: RF 2 on the victim and x
    topic = create_topic(zk_chroot, {0: [victim, x, ctl]})
    t1 = create_topic(zk_chroot, {0: [victim, x]})
    # t2 as t1, but its topic config allows unclean leader election
    t2 = create_topic(zk_chroot, {0: [victim, x]}, configs={"unclean.leader.election.enable": "true"})
    wait_for(lambda: sorted(state(zk, topic, 0)["isr"]) == [0, 1, 2], timeout=20, message="p0 ISR complete")
    t0 = time.monotonic()
    brokers[victim].kill()
    s0 = wait_for(
        lambda: (s := state(zk, topic, 0)) and s["leader"] != victim and s,
        timeout=SESSION_S + 20,
        message="new leader of p0",
    )
    took = time.monotonic() - t0
    # the first live ISR replica in assignment order, epoch + 1, the dead one out of the ISR
    assert s0["leader"] == x and s0["leader_epoch"] == 1 and sorted(s0["isr"]) == sorted([x, ctl]), s0
    assert took < SESSION_S + 10, took
    s1 = state(zk, t1, 0)
    assert s1["leader"] == x and s1["leader_epoch"] == 1 and s1["isr"] == [x], s1

    # x dies too: p1 has no live ISR member -> leader -1, the ISR keeps its last member
    brokers[x].kill()
    s1 = wait_for(
        lambda: (s := state(zk, t1, 0)) and s["leader"] == -1 and s, timeout=SESSION_S + 20, message="p1 offline"
    )
    assert s1["isr"] == [x] and s1["leader_epoch"] == 2, s1
    # the victim comes back: live, a replica, but not in the ISR: never elected (unclean disabled)
    brokers[victim].start()
    wait_for(lambda: str(victim) in zk.get_children(paths.BROKER_IDS), timeout=30, message="victim back")
    time.sleep(2.0)
    s1 = state(zk, t1, 0)
    assert s1["leader"] == -1 and s1["isr"] == [x] and s1["leader_epoch"] == 2, s1
    # ... except where the topic allows it: t2 got the returning replica as leader, out of the ISR
    s2 = state(zk, t2, 0)
    assert s2["leader"] == victim and s2["isr"] == [victim] and s2["leader_epoch"] == 3, s2
    # an operator's unclean election (pyklog-leader-election --election-type unclean) elects it
    from pyklog.connector.cli import leader_election

    rc = leader_election.main(
        ["--bootstrap-server", brokers[ctl].bootstrap, "--election-type", "unclean", "--topic", t1, "--partition", "0"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and f"Successfully completed leader election (UNCLEAN) for partitions {t1}-0" in out, out
    s1 = state(zk, t1, 0)
    assert s1["leader"] == victim and s1["isr"] == [victim] and s1["leader_epoch"] == 3, s1
    assert "UNCLEAN leader election of broker" in brokers[ctl].output()


def test_rf1_leader_is_minus_one_while_down_and_back_on_return(broker_factory, zk, zk_chroot):
    brokers = start_cluster(broker_factory, zk, ids=(0, 1))
    ctl, _ = controller_of(zk)
    other = 1 - ctl
    topic = create_topic(zk_chroot, {0: [other]})
    brokers[other].kill()
    s = wait_for(
        lambda: (s := state(zk, topic, 0)) and s["leader"] == -1 and s, timeout=SESSION_S + 20, message="leader -1"
    )
    assert s["isr"] == [other] and s["leader_epoch"] == 1
    brokers[other].start()
    s = wait_for(
        lambda: (s := state(zk, topic, 0)) and s["leader"] == other and s, timeout=SESSION_S + 30, message="leader back"
    )
    assert s["leader_epoch"] == 2 and s["isr"] == [other]


# ------------------------------------------------------------------------------ preferred election


def test_preferred_replica_election_znode_and_tool(broker_factory, zk, zk_chroot, capsys):
    brokers = start_cluster(broker_factory, zk, auto_leader_rebalance_enable="false")
    ctl, _ = controller_of(zk)
    pref = next(i for i in (0, 1, 2) if i != ctl)
    rest = [i for i in (0, 1, 2) if i != pref]
    topic = create_topic(zk_chroot, {0: [pref] + rest, 1: [pref] + rest, 2: [ctl] + [i for i in (0, 1, 2) if i != ctl]})
    wait_for(lambda: all(len(state(zk, topic, p)["isr"]) == 3 for p in range(3)), timeout=20, message="ISRs")
    brokers[pref].kill()
    wait_for(
        lambda: all(state(zk, topic, p)["leader"] not in (pref, -1) for p in (0, 1)),
        timeout=SESSION_S + 20,
        message="leaders moved away",
    )
    brokers[pref].start()
    # it catches up and its leaders put it back into the ISR; no auto rebalance: leadership stays away
    wait_for(lambda: all(pref in state(zk, topic, p)["isr"] for p in (0, 1)), timeout=30, message="back in ISR")
    assert all(state(zk, topic, p)["leader"] != pref for p in (0, 1))

    # Kafka's znode: the controller elects the preferred replica and deletes the znode
    zk.create(paths.ADMIN_PREFERRED_REPLICA_ELECTION, encode_partition_list([(topic, 0)]))
    wait_for(lambda: zk.exists(paths.ADMIN_PREFERRED_REPLICA_ELECTION) is None, timeout=20, message="znode done")
    s = state(zk, topic, 0)
    assert s["leader"] == pref and s["leader_epoch"] == 2, s

    # the tool (ElectLeaders to the controller): p1 elected, p0 and p2 already led by their preferred replica
    from pyklog.connector.cli import leader_election

    any_broker = brokers[ctl].bootstrap
    rc = leader_election.main(
        ["--bootstrap-server", any_broker, "--election-type", "preferred", "--all-topic-partitions"]
    )
    out = capsys.readouterr().out
    assert rc == 0, out
    assert f"Successfully completed leader election (PREFERRED) for partitions {topic}-1" in out, out
    assert "Valid replica already elected for partitions" in out and f"{topic}-0" in out and f"{topic}-2" in out
    assert state(zk, topic, 1)["leader"] == pref
    rc = leader_election.main(
        ["--bootstrap-server", any_broker, "--election-type", "preferred", "--topic", topic, "--partition", "1"]
    )
    out = capsys.readouterr().out
    assert rc == 0 and f"Valid replica already elected for partitions {topic}-1" in out, out


def test_auto_leader_rebalance_moves_leadership_back(broker_factory, zk, zk_chroot):
    brokers = start_cluster(broker_factory, zk, leader_imbalance_check_interval_seconds="1")
    ctl, _ = controller_of(zk)
    pref = next(i for i in (0, 1, 2) if i != ctl)
    rest = [i for i in (0, 1, 2) if i != pref]
    topic = create_topic(zk_chroot, {0: [pref] + rest})
    wait_for(lambda: len(state(zk, topic, 0)["isr"]) == 3, timeout=20, message="ISR")
    brokers[pref].kill()
    wait_for(lambda: state(zk, topic, 0)["leader"] not in (pref, -1), timeout=SESSION_S + 20, message="moved")
    brokers[pref].start()
    # once it is back in the ISR, the imbalance check elects it again
    s = wait_for(
        lambda: (s := state(zk, topic, 0)) and s["leader"] == pref and s, timeout=40, message="rebalanced back"
    )
    assert s["leader_epoch"] == 2 and pref in s["isr"]


def test_sigterm_leader_hands_over_before_it_stops(broker_factory, zk, zk_chroot):
    from kazoo.recipe.watchers import DataWatch

    brokers = start_cluster(broker_factory, zk, controlled_shutdown_retry_backoff_ms="500")
    ctl, _ = controller_of(zk)
    victims = [i for i in (0, 1, 2) if i != ctl]
    victim = victims[0]
    topic = create_topic(zk_chroot, {0: [victim, victims[1], ctl], 1: [ctl, victim, victims[1]]})
    set_isr(zk, topic, 0, [victim, victims[1], ctl])
    set_isr(zk, topic, 1, [ctl, victim, victims[1]])
    seen = []  # (leader, isr, victim still registered) at each change of p0's state

    def on_change(data, stat, event=None):
        if data:
            s = json.loads(data)
            seen.append((s["leader"], s["isr"], zk.exists(paths.broker_id(victim)) is not None))

    DataWatch(zk, paths.partition_state(topic, 0), on_change)
    # the victim follows partition 1 (the partition the controlled shutdown takes it out of)
    wait_for(lambda: f"{topic}-1: follower of broker" in brokers[victim].output(), timeout=20, message="following")
    assert brokers[victim].stop(signal.SIGTERM) == 0
    out = brokers[victim].output()
    assert f"controlled shutdown of broker {victim} succeeded" in out, out[-3000:]
    wait_for(lambda: any(l != victim for l, _, _ in seen), timeout=10, message="p0 change seen")
    moved = next(x for x in seen if x[0] != victim)
    assert moved[0] == victims[1] and victim not in moved[1] and moved[2], seen  # before it deregistered
    s0 = wait_for(lambda: (s := state(zk, topic, 0)) and victim not in s["isr"] and s, timeout=20, message="p0")
    assert s0["leader"] == victims[1] and s0["leader_epoch"] >= 1
    s1 = wait_for(lambda: (s := state(zk, topic, 1)) and victim not in s["isr"] and s, timeout=20, message="p1")
    assert s1["leader"] == ctl and s1["leader_epoch"] >= 1
    # the stopping broker stopped its replicas (Kafka's StopReplica): it fetched from no new leader,
    # and never came back into an ISR
    assert all(victim not in isr for _, isr, _ in seen[seen.index(moved) :]), seen
    # every state the controller wrote for the shutdown (leader epoch 1+) that the victim applied (it
    # may stop following states first) leaves it not fetching
    after = out[out.index("received SIGTERM") :]
    following = [ln for ln in after.splitlines() if ": follower of broker " in ln and " at epoch 0 " not in ln]
    assert all("not fetching" in ln for ln in following), following


# ------------------------------------------------------------------------------ reassignment


def reassign(zk_chroot, tmp_path, target: dict, action: str, capsys) -> str:
    from pyklog.connector.cli import reassign_partitions

    f = tmp_path / f"r-{uuid.uuid4().hex[:6]}.json"
    f.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": t, "partition": p, "replicas": r} for (t, p), r in target.items()]}
        )
    )
    rc = reassign_partitions.main(["--zookeeper", zk_chroot, "--reassignment-json-file", str(f), f"--{action}"])
    out = capsys.readouterr().out
    assert rc == 0, out
    return out


def test_reassignment_rf1_to_rf3_and_back(broker_factory, zk, zk_chroot, tmp_path, capsys):
    brokers = start_cluster(broker_factory, zk)
    ctl, _ = controller_of(zk)
    a = next(i for i in (0, 1, 2) if i != ctl)
    topic = create_topic(zk_chroot, {0: [a]})
    others = [i for i in (0, 1, 2) if i != a]
    sent = [b"r%d" % i for i in range(60)]
    with support.Wire(brokers[a].port) as w:
        wait_for(
            lambda: support.produce(w, topic, support.records(1, prefix=b"probe"))["error_code"] == 0,
            timeout=20,
            message="leader ready",
        )
        for i in range(0, 30, 10):
            assert support.produce(w, topic, build_values(sent[i : i + 10]))["error_code"] == 0

    # --generate proposes an assignment over the broker list, in Kafka's JSON
    from pyklog.connector.cli import reassign_partitions

    tf = tmp_path / "topics.json"
    tf.write_text(json.dumps({"topics": [{"topic": topic}], "version": 1}))
    assert (
        reassign_partitions.main(
            [
                "--zookeeper",
                zk_chroot,
                "--generate",
                "--topics-to-move-json-file",
                str(tf),
                "--broker-list",
                ",".join(map(str, others)),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "Current partition replica assignment"
    assert json.loads(lines[1]) == {
        "version": 1,
        "partitions": [{"topic": topic, "partition": 0, "replicas": [a], "log_dirs": ["any"]}],
    }
    assert lines[3] == "Proposed partition reassignment configuration"
    assert json.loads(lines[4])["partitions"][0]["replicas"][0] in others

    # RF 1 -> RF 3: new replicas added, fetch from the leader, join the ISR; then the znode goes
    target = {(topic, 0): [a] + others}
    out = reassign(zk_chroot, tmp_path, target, "execute", capsys)
    assert "Successfully started reassignment of partitions." in out
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert json.loads(out.split("\n\n")[1]) == {
        "version": 1,
        "partitions": [{"topic": topic, "partition": 0, "replicas": [a], "log_dirs": ["any"]}],
    }  # the rollback JSON
    wait_for(lambda: zk.exists(paths.ADMIN_REASSIGN_PARTITIONS) is None, timeout=60, message="reassignment done")
    assert json.loads(zk.get(paths.topic(topic))[0])["partitions"]["0"] == [a] + others
    s = state(zk, topic, 0)
    assert s["leader"] == a and sorted(s["isr"]) == [0, 1, 2], s
    assert "completed successfully" in reassign(zk_chroot, tmp_path, target, "verify", capsys)
    # the leaders' ISR change notifications were read and deleted by the controller
    wait_for(lambda: not zk.get_children(paths.ISR_CHANGE_NOTIFICATION), timeout=20, message="notifications")
    with support.Wire(brokers[a].port) as w:  # acks=all: on every replica
        for i in range(30, 60, 10):
            assert support.produce(w, topic, build_values(sent[i : i + 10]), acks=-1)["error_code"] == 0

    # and back to RF 1 on another broker: the leader moves into the target set, old replicas leave
    back = {(topic, 0): [others[0]]}
    reassign(zk_chroot, tmp_path, back, "execute", capsys)
    wait_for(lambda: zk.exists(paths.ADMIN_REASSIGN_PARTITIONS) is None, timeout=60, message="back done")
    assert json.loads(zk.get(paths.topic(topic))[0])["partitions"]["0"] == [others[0]]
    s = state(zk, topic, 0)
    assert s["leader"] == others[0] and s["isr"] == [others[0]] and s["leader_epoch"] >= 3, s
    assert "completed successfully" in reassign(zk_chroot, tmp_path, back, "verify", capsys)
    # every record written before and during the moves is on the new broker, once, in order
    last = {}

    def read_all():
        r = support.fetch(w, topic, 0)
        vals = support.values(r["records"])
        last.update(error=r["error_code"], hw=r["high_watermark"], n=len(vals), vals=vals)
        return r["error_code"] == 0 and len(vals) >= 61 and vals

    with support.Wire(brokers[others[0]].port) as w:
        try:
            got = wait_for(read_all, timeout=30, message="records on the new leader")
        except AssertionError as e:
            raise AssertionError(f"{e}: last fetch {last}, state {state(zk, topic, 0)}") from None
    assert [v for v in got if not v.startswith(b"probe")] == sent


def build_values(vals):
    from pyklog.broker.record.batch import build_batch

    return build_batch([(None, v, int(time.time() * 1000), ()) for v in vals])


def test_controlled_shutdown_leaves_an_acks_all_producer_no_leader_gap(broker_factory, zk, zk_chroot):
    """SIGTERM of a leader (RF 3): leadership moves before it stops, so an acks=all producer's
    longest pause between acknowledgements stays far below the session timeout a SIGKILL costs."""
    from confluent_kafka import Producer

    session_ms = 10000
    brokers = start_cluster(
        broker_factory,
        zk,
        zookeeper_session_timeout_ms=str(session_ms),
        min_insync_replicas="2",
        controlled_shutdown_retry_backoff_ms="500",
    )
    ctl, _ = controller_of(zk)
    victim = next(i for i in (0, 1, 2) if i != ctl)
    topic = create_topic(zk_chroot, {0: [victim] + [i for i in (0, 1, 2) if i != victim]})
    wait_for(lambda: len(state(zk, topic, 0)["isr"]) == 3, timeout=30, message="ISR")
    acks, errors = [], []

    def on_delivery(err, msg):
        (errors if err is not None else acks).append((time.monotonic(), str(err) if err else msg.offset()))

    producer = Producer(
        {
            "bootstrap.servers": ",".join(b.bootstrap for b in brokers.values()),
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 2,
            "message.timeout.ms": 60000,
        }
    )
    stop = [False]

    def loop():
        n = 0
        while not stop[0]:
            producer.produce(topic, value=b"%d" % n, partition=0, on_delivery=on_delivery)
            n += 1
            producer.poll(0.005)
        producer.flush(60)

    import threading

    t = threading.Thread(target=loop, daemon=True)
    t.start()
    try:
        wait_for(lambda: len(acks) > 50, timeout=60, message="acks before")
        t0 = time.monotonic()
        assert brokers[victim].stop(signal.SIGTERM) == 0
        stopped = time.monotonic()
        wait_for(lambda: any(a[0] > stopped + 1.0 for a in list(acks)), timeout=60, message="acks after")
    finally:
        stop[0] = True
        t.join(90)
    assert f"controlled shutdown of broker {victim} succeeded" in brokers[victim].output()
    times = [a[0] for a in acks if a[0] >= t0 - 1.0]
    gap = max(b - a for a, b in itertools.pairwise(times))
    print(
        f"\nlongest pause between acknowledgements around the SIGTERM: {gap:.2f}s "
        f"(session timeout {session_ms / 1000:.0f}s), errors {len(errors)}"
    )
    assert not errors, errors[:5]
    assert gap < 5.0, gap
    s = state(zk, topic, 0)
    assert s["leader"] != victim and victim not in s["isr"]
