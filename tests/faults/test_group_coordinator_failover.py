"""A consumer group keeps its members, generation and assignment when its coordinator is SIGKILLed.

Three broker processes, ``__consumer_offsets`` with one partition and replication factor 3 (so the
group's coordinator is that partition's leader), a topic of three partitions with replication
factor 3.  An idempotent confluent-kafka producer writes numbered records while a group of three
confluent-kafka consumers (two dynamic members, one static member with ``group.instance.id``,
KIP-345) reads them with auto-commit on.  Once every consumer has consumed, the coordinator's
broker is SIGKILLed; the producer keeps writing through the election.  Counted afterwards:

* rebalances the consumers saw after the kill (``on_assign`` / ``on_revoke`` callbacks): 0 -- the
  new coordinator loaded the group's metadata record and the members kept heartbeating to it;
* member ids (``Consumer.memberid()``): unchanged;
* records consumed twice: 0 (an auto-commit consumer re-reads from its last commit only after a
  rebalance), records acknowledged to the producer but never consumed: 0.

Without the group metadata record the new coordinator knows no member: every consumer gets
UNKNOWN_MEMBER_ID, rejoins with a new member id, and the forced rebalance re-reads what was
consumed since the last auto-commit.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import Counter

from pyklog.broker.protocol import ApiKey
from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from tests.support import Wire, wait_for

OFFSETS = "__consumer_offsets"
PROPS = {
    "min_insync_replicas": "2",
    "default_replication_factor": "3",
    "offsets_topic_replication_factor": "3",
    "offsets_topic_num_partitions": "1",
    "group_initial_rebalance_delay_ms": "0",
    "replica_lag_time_max_ms": "10000",
}


def _state(zk, topic, p=0):
    try:
        return json.loads(zk.get(paths.partition_state(topic, p))[0])
    except Exception:  # noqa: BLE001 - not created yet
        return None


def _coordinator(brokers, group: str) -> int:
    def ask():
        for b in brokers.values():
            if b.proc is None or b.proc.poll() is not None:
                continue
            try:
                with Wire(b.port, timeout=10) as w:
                    r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            except OSError:
                continue
            if r["error_code"] == 0:
                return (r["node_id"],)
        return None

    return wait_for(ask, timeout=60, interval=0.2, message=f"a coordinator for {group!r}")[0]


def _committed_total(port: int, group: str, topic: str) -> int:
    with Wire(port, timeout=10) as w:
        r = w.request(
            ApiKey.OFFSET_FETCH, 2, {"group_id": group, "topics": [{"name": topic, "partition_indexes": [0, 1, 2]}]}
        )
    if r["error_code"] != 0:
        return -1
    return sum(max(p["committed_offset"], 0) for t in r["topics"] for p in t["partitions"])


def _describe(port: int, group: str) -> dict:
    with Wire(port, timeout=10) as w:
        return w.request(ApiKey.DESCRIBE_GROUPS, 0, {"groups": [group]})["groups"][0]


class _Member:
    """One consumer on its own thread: the values it read, its rebalance callbacks, its member id."""

    def __init__(self, name: str, conf: dict, topic: str):
        from confluent_kafka import Consumer

        self.name = name
        self.values: list[int] = []
        self.events: list[tuple[float, str, int]] = []  # (monotonic time, "assign"/"revoke", partitions)
        self.member_id = ""
        self.errors: list[str] = []
        self.consumer = Consumer(conf)
        self.stop = threading.Event()
        self.consumer.subscribe(
            [topic],
            on_assign=lambda c, ps: self.events.append((time.monotonic(), "assign", len(ps))),
            on_revoke=lambda c, ps: self.events.append((time.monotonic(), "revoke", len(ps))),
        )
        self.thread = threading.Thread(target=self._run, name=f"consumer-{name}", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            msg = self.consumer.poll(0.2)
            self.member_id = self.consumer.memberid() or self.member_id
            if msg is None:
                continue
            if msg.error():
                self.errors.append(str(msg.error()))
                continue
            self.values.append(int(msg.value()))
        self.consumer.close()

    def assigned(self) -> bool:
        return bool(self.events) and self.events[-1][1] == "assign" and self.events[-1][2] > 0

    def events_between(self, start: float, end: float) -> list:
        return [e for e in self.events if start <= e[0] < end]


def test_group_survives_coordinator_sigkill_without_rebalance_or_rereads(broker_factory, zk, zk_chroot):
    from confluent_kafka import Producer

    brokers = {i: broker_factory(i, **PROPS) for i in range(3)}
    wait_for(lambda: len(zk.get_children(paths.BROKER_IDS)) == 3, message="3 brokers")
    topic = f"gf-{uuid.uuid4().hex[:8]}"
    admin = ZkCluster(zk_chroot, None).start()
    try:
        admin.create_topic(topic, 3, 3)
    finally:
        admin.stop()
    group = f"g-{uuid.uuid4().hex[:6]}"
    coordinator = _coordinator(brokers, group)  # creates __consumer_offsets
    wait_for(lambda: (s := _state(zk, OFFSETS)) and len(s["isr"]) == 3, timeout=60, message="offsets ISR of 3")
    bootstrap = ",".join(b.bootstrap for b in brokers.values())

    acked: list[int] = []
    stop_producing = threading.Event()

    def produce():
        p = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 60000,
                "topic.metadata.refresh.interval.ms": 1000,
            }
        )

        def delivered(err, msg):
            if err is None:
                acked.append(int(msg.value()))

        i = 0
        while not stop_producing.is_set():
            p.produce(topic, value=str(i).encode(), on_delivery=delivered)
            i += 1
            p.poll(0)
            time.sleep(0.004)
        p.flush(60)

    producer = threading.Thread(target=produce, name="producer", daemon=True)
    producer.start()
    base = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 200,
        # longer than the fail-over (ZooKeeper session 6 s + election + load): librdkafka rejoins on
        # its own when no heartbeat succeeds for a session timeout
        "session.timeout.ms": 30000,
        "heartbeat.interval.ms": 500,
        "topic.metadata.refresh.interval.ms": 1000,
    }
    members = [
        _Member("dynamic-1", base, topic),
        _Member("dynamic-2", base, topic),
        _Member("static", dict(base, **{"group.instance.id": f"inst-{uuid.uuid4().hex[:6]}"}), topic),
    ]
    try:
        # every member assigned, consuming, and its assignment settled (no callback for 2 s)
        def settled():
            if not all(m.assigned() and m.values and m.member_id for m in members):
                return False
            last = max(e[0] for m in members for e in m.events)
            return time.monotonic() - last > 2.0

        wait_for(settled, timeout=90, interval=0.2, message="a stable group of 3 consuming members")
        ids_before = {m.name: m.member_id for m in members}
        coordinator = _coordinator(brokers, group)
        assert coordinator == _state(zk, OFFSETS)["leader"]
        consumed_before = sum(len(m.values) for m in members)
        killed_at = time.monotonic()
        brokers[coordinator].kill()
        wait_for(
            lambda: (s := _state(zk, OFFSETS)) and s["leader"] not in (coordinator, -1),
            timeout=60,
            message="a new leader of __consumer_offsets-0",
        )
        new_coordinator = _coordinator(brokers, group)
        # keep consuming well past the fail-over: commits and heartbeats reach the new coordinator
        wait_for(
            lambda: sum(len(m.values) for m in members) > consumed_before + 1500,
            timeout=90,
            interval=0.2,
            message="consumption after the fail-over",
        )
        time.sleep(3.0)
        stop_producing.set()
        producer.join(90)
        assert not producer.is_alive()
        wait_for(
            lambda: set(acked) <= {v for m in members for v in m.values},
            timeout=60,
            interval=0.2,
            message="every acknowledged record consumed",
        )
        # the new coordinator accepted the members' auto-commits up to the end (a commit from a
        # member it does not know is refused) and describes the group Stable with the same members
        port = brokers[new_coordinator].port
        wait_for(lambda: _committed_total(port, group, topic) >= len(acked), timeout=30, interval=0.2,
                 message="every record's offset committed to the new coordinator")  # fmt: skip
        described = _describe(port, group)
        ids_after = {m.name: m.member_id for m in members}
    finally:
        closed_at = time.monotonic()  # close() revokes: not a rebalance
        stop_producing.set()
        for m in members:
            m.stop.set()
        for m in members:
            m.thread.join(30)
    consumed = Counter(v for m in members for v in m.values)
    twice = sum(n - 1 for n in consumed.values() if n > 1)
    lost = len(set(acked) - set(consumed))
    rebalances = {m.name: m.events_between(killed_at, closed_at) for m in members}
    print(
        f"\nGROUP FAIL-OVER coordinator {coordinator} -> {new_coordinator}: acknowledged={len(acked)} "
        f"consumed={sum(consumed.values())} twice={twice} lost={lost} "
        f"callbacks after kill={ {k: len(v) for k, v in rebalances.items()} } ids kept={ids_before == ids_after}"
    )
    assert described["group_state"] == "Stable", described
    assert {m["member_id"] for m in described["members"]} == set(ids_before.values())
    assert all(not v for v in rebalances.values()), rebalances
    assert ids_after == ids_before
    assert twice == 0
    assert lost == 0
