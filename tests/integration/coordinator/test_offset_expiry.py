"""Offset expiry (Kafka's offsets.retention.minutes, offsets.retention.check.interval.ms, KIP-211).

What expires and what is kept is counted in every test: a group with members, or an offset
committed within the retention, never loses anything; pending transactional offsets stay.

* A real broker process with offsets.retention.minutes=1 and a 200 ms check interval: offsets
  committed (OffsetCommit v1, whose per-partition commit timestamp Kafka honours) two minutes ago
  expire with one tombstone each in __consumer_offsets, their group leaves ListGroups, recent ones
  stay, a live member's old offsets stay; after a restart the same holds.
* An in-process broker whose coordinator's clean-up runs with a chosen clock: KIP-211 (an emptied
  group's clock starts when it becomes empty), pending transactional offsets, ZooKeeper groups.
"""

from __future__ import annotations

import time
import uuid

import pytest

from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.reader import iter_batches
from pyklog.broker.zk import paths
from pyklog.broker.zk.server import free_port
from tests.support import Wire, create_topic, wait_for

MINUTE = 60_000


def _now() -> int:
    return int(time.time() * 1000)


def _coordinator_ready(w: Wire, group: str) -> bool:
    r = w.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
    if r["error_code"] != 0:
        return False
    f = w.request(ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [{"name": "x", "partition_indexes": [0]}]})
    return f["topics"][0]["partitions"][0]["error_code"] == 0


def _commit_v1(
    w: Wire, group: str, topic: str, offsets: dict, *, ts: int = -1, generation: int = -1, member: str = ""
) -> list[int]:
    r = w.request(
        ApiKey.OFFSET_COMMIT,
        1,
        {
            "group_id": group,
            "generation_id_or_member_epoch": generation,
            "member_id": member,
            "topics": [
                {
                    "name": topic,
                    "partitions": [
                        {"partition_index": p, "committed_offset": o, "commit_timestamp": ts, "committed_metadata": ""}
                        for p, o in sorted(offsets.items())
                    ],
                }
            ],
        },
    )
    return [p["error_code"] for p in r["topics"][0]["partitions"]]


def _committed(w: Wire, group: str, topic: str, partitions=(0, 1, 2)) -> dict:
    r = w.request(
        ApiKey.OFFSET_FETCH, 1, {"group_id": group, "topics": [{"name": topic, "partition_indexes": list(partitions)}]}
    )
    return {
        p["partition_index"]: p["committed_offset"] for p in r["topics"][0]["partitions"] if p["committed_offset"] >= 0
    }


def _listed(w: Wire) -> set[str]:
    r = w.request(ApiKey.LIST_GROUPS, 2, {})
    assert r["error_code"] == 0
    return {g["group_id"] for g in r["groups"]}


def _tombstones(w: Wire) -> list[tuple[str, str, int]]:
    """(group, topic, partition) of every tombstone in __consumer_offsets-0."""
    from pyklog.broker.coordinator.offsets import decode_offset_key

    r = w.request(
        ApiKey.FETCH,
        4,
        {
            "replica_id": -1,
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 50 << 20,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": "__consumer_offsets",
                    "partitions": [{"partition": 0, "fetch_offset": 0, "partition_max_bytes": 50 << 20}],
                }
            ],
        },
    )
    part = r["responses"][0]["partitions"][0]
    assert part["error_code"] == 0
    out = []
    for b in iter_batches(bytes(part["records"] or b"")):
        if b.is_control:
            continue
        for rec in b.records:
            if rec.value is None:
                out.append(decode_offset_key(bytes(rec.key)))
    return out


def _join_and_sync(w: Wire, group: str) -> tuple[str, int]:
    r = w.request(
        ApiKey.JOIN_GROUP,
        3,
        {
            "group_id": group,
            "session_timeout_ms": 30000,
            "rebalance_timeout_ms": 30000,
            "member_id": "",
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b""}],
        },
    )
    assert r["error_code"] == 0, r
    member, gen = r["member_id"], r["generation_id"]
    s = w.request(
        ApiKey.SYNC_GROUP,
        2,
        {
            "group_id": group,
            "generation_id": gen,
            "member_id": member,
            "assignments": [{"member_id": member, "assignment": b""}],
        },
    )
    assert s["error_code"] == 0
    return member, gen


# ------------------------------------------------------------------ a real broker process


def test_old_offsets_expire_with_tombstones_recent_and_members_are_kept(broker_factory):
    props = {
        "offsets.retention.minutes": "1",
        "offsets.retention.check.interval.ms": "200",
        "offsets.topic.num.partitions": "1",
        "group.initial.rebalance.delay.ms": "0",
    }
    b = broker_factory(0, **{k.replace(".", "_"): v for k, v in props.items()})
    topic = "exp-" + uuid.uuid4().hex[:8]
    old, fresh, mixed, member_g = (f"{n}-{uuid.uuid4().hex[:6]}" for n in ("old", "fresh", "mixed", "member"))
    long_ago = _now() - 2 * MINUTE
    with Wire(b.port) as w:
        assert create_topic(w, topic, 3)["error_code"] == 0
        wait_for(lambda: _coordinator_ready(w, old), message="the group coordinator")
        member, gen = _join_and_sync(w, member_g)
        assert _commit_v1(w, member_g, topic, {0: 7, 1: 8}, ts=long_ago, generation=gen, member=member) == [0, 0]
        assert _commit_v1(w, fresh, topic, {0: 1, 1: 2, 2: 3}) == [0, 0, 0]
        assert _commit_v1(w, mixed, topic, {1: 11}) == [0]
        assert _commit_v1(w, mixed, topic, {0: 10}, ts=long_ago) == [0]
        assert _commit_v1(w, old, topic, {0: 4, 1: 5, 2: 6}, ts=long_ago) == [0, 0, 0]

        def expired():
            w.request(ApiKey.HEARTBEAT, 2, {"group_id": member_g, "generation_id": gen, "member_id": member})
            return old not in _listed(w) and 0 not in _committed(w, mixed, topic)

        wait_for(expired, timeout=30, message="the old offsets to expire")
        # a few more checks run; nothing else may go
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline:
            assert (
                w.request(ApiKey.HEARTBEAT, 2, {"group_id": member_g, "generation_id": gen, "member_id": member})[
                    "error_code"
                ]
                == 0
            )
            time.sleep(0.2)
        assert _committed(w, old, topic) == {}
        assert _committed(w, fresh, topic) == {0: 1, 1: 2, 2: 3}
        assert _committed(w, mixed, topic) == {1: 11}
        assert _committed(w, member_g, topic) == {0: 7, 1: 8}  # old, but the group has a member
        assert {fresh, mixed, member_g} <= _listed(w) and old not in _listed(w)
        tomb = _tombstones(w)
        assert sorted(tomb) == sorted([(old, topic, 0), (old, topic, 1), (old, topic, 2), (mixed, topic, 0)])
    assert b.stop() == 0
    # after a restart the tombstones are replayed: expired stays expired, kept stays kept
    b.start()
    with Wire(b.port) as w:
        wait_for(lambda: _coordinator_ready(w, old), message="the group coordinator after restart")
        assert _committed(w, old, topic) == {}
        assert _committed(w, fresh, topic) == {0: 1, 1: 2, 2: 3}
        assert _committed(w, mixed, topic) == {1: 11}
        assert old not in _listed(w) and {fresh, mixed} <= _listed(w)
    assert "Traceback" not in b.output(), b.output()[-20000:]


# ------------------------------------------------------------------ an in-process broker, a chosen clock


@pytest.fixture
def server(zk_chroot, tmp_path):
    from pyklog.broker.server.config import ServerConfig
    from pyklog.broker.server.main import BrokerServer

    port = free_port()
    cfg = ServerConfig.from_properties(
        {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "log.dirs": str(tmp_path / "data"),
            "zookeeper.connect": zk_chroot,
            "num.partitions": "3",
            "offsets.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            "offsets.retention.minutes": "1",
            # the periodic check stays out of the way: the tests call the clean-up with their own clock
            "offsets.retention.check.interval.ms": str(3_600_000),
        }
    )
    srv = BrokerServer(cfg).startup()
    srv.test_port = port
    try:
        yield srv
    finally:
        srv.shutdown()


def test_kip211_an_emptied_group_expires_a_retention_after_it_became_empty(server):
    gc = server.apis.groups
    topic, group = "k211-" + uuid.uuid4().hex[:8], "k211-" + uuid.uuid4().hex[:6]
    with Wire(server.test_port) as w:
        assert create_topic(w, topic, 3)["error_code"] == 0
        wait_for(lambda: _coordinator_ready(w, group), message="the group coordinator")
        member, gen = _join_and_sync(w, group)
        ten_min_ago = _now() - 10 * MINUTE
        assert _commit_v1(w, group, topic, {0: 5, 1: 6}, ts=ten_min_ago, generation=gen, member=member) == [0, 0]
        # with a member: never expired, whatever the clock says
        r = gc.cleanup_group_metadata(_now() + 60 * MINUTE)
        assert r["expired_offsets"] == 0 and _committed(w, group, topic) == {0: 5, 1: 6}
        assert w.request(ApiKey.LEAVE_GROUP, 1, {"group_id": group, "member_id": member})["error_code"] == 0
        wait_for(lambda: gc.group_state(group) == "Empty", message="the group to become empty")
        left_at = _now()
        # the commits are 10 minutes old, but the group has been empty for less than the retention
        r = gc.cleanup_group_metadata(left_at + 30_000)
        assert r == {"expired_offsets": 0, "removed_groups": [], "removed_zookeeper_groups": []}
        assert _committed(w, group, topic) == {0: 5, 1: 6} and group in _listed(w)
        r = gc.cleanup_group_metadata(left_at + MINUTE + 5_000)
        assert r["expired_offsets"] == 2 and r["removed_groups"] == [group]
        assert _committed(w, group, topic) == {} and group not in _listed(w)
        assert gc.group_state(group) == "Dead"
        # the group can be used again at once
        member, gen = _join_and_sync(w, group)
        assert _commit_v1(w, group, topic, {2: 9}, generation=gen, member=member) == [0]
        assert _committed(w, group, topic) == {2: 9}


def test_pending_transactional_offsets_are_never_expired(server):
    om, gc = server.apis.offsets, server.apis.groups
    topic, group = "txn-exp-" + uuid.uuid4().hex[:8], "txn-exp-" + uuid.uuid4().hex[:6]
    with Wire(server.test_port) as w:
        assert create_topic(w, topic, 3)["error_code"] == 0
        wait_for(lambda: _coordinator_ready(w, group), message="the group coordinator")
        assert _commit_v1(w, group, topic, {0: 1, 1: 2}, ts=_now() - 10 * MINUTE) == [0, 0]
        codes = om.commit_transactional(group, 4242, 0, {(topic, 0): (50, -1, "")})
        assert codes == {(topic, 0): 0}
        r = gc.cleanup_group_metadata(_now() + 2 * MINUTE)
        assert r["expired_offsets"] == 1 and r["removed_groups"] == []  # (topic, 1) only
        assert _committed(w, group, topic) == {0: 1}
        assert om.pending_offsets(group, 4242) == {(topic, 0): om.pending_offsets(group, 4242)[(topic, 0)]}
        assert om.complete_transaction(om.partition_for(group), 4242, True) == 1
        assert _committed(w, group, topic) == {0: 50}
        assert group in _listed(w)


def test_abandoned_zookeeper_groups_are_listed_then_deleted_live_ones_kept(server, zk):
    gc = server.apis.groups
    topic = "zkg-" + uuid.uuid4().hex[:8]
    abandoned, live, fresh = (f"spark-pyklog-source-{n}-{uuid.uuid4().hex[:6]}" for n in ("gone", "live", "fresh"))
    for g in (abandoned, live, fresh):
        for p in range(2):
            zk.create(paths.consumer_offset(g, topic, p), b"%d" % (10 + p), makepath=True)
        zk.ensure_path(paths.consumer_ids(g))
    zk.create(paths.consumer_id(live, "c1"), b"{}", ephemeral=True)
    with Wire(server.test_port) as w:
        wait_for(lambda: _coordinator_ready(w, "any"), message="the group coordinator")
        assert {abandoned, live, fresh} <= _listed(w)  # visible to kafka-cli --list
        r = gc.cleanup_group_metadata(_now() + 10_000)  # nothing is older than the retention yet
        assert r["removed_zookeeper_groups"] == []
        r = gc.cleanup_group_metadata(_now() + 2 * MINUTE)
        # the member's group stays; the two without members expire
        assert sorted(r["removed_zookeeper_groups"]) == sorted([abandoned, fresh])
        assert zk.exists(paths.consumer_group(abandoned)) is None and zk.exists(paths.consumer_group(fresh)) is None
        assert [zk.get(paths.consumer_offset(live, topic, p))[0] for p in range(2)] == [b"10", b"11"]
        listed = _listed(w)
        assert live in listed and abandoned not in listed and fresh not in listed


# ------------------------------------------------------------------ a Spark query without group.id


def test_spark_query_without_group_id_leaves_no_group_behind(spark, broker, zk_chroot, zk):
    """A query without group.id commits under a generated ZooKeeper group (spark-pyklog-source-<uuid>);
    stopping it deletes that group.  A query with group.id keeps its group and offsets."""
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer

    topic = "nogroup-" + uuid.uuid4().hex[:8]
    named = "named-" + uuid.uuid4().hex[:6]
    with ClusterClient(broker.bootstrap) as c:
        c.create_topic(topic, 2)
    with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5}) as p:
        for i in range(10):
            p.produce(topic, b"v%d" % i, partition=i % 2)
        p.flush()
    zk.ensure_path(paths.CONSUMERS)
    before = set(zk.get_children(paths.CONSUMERS))

    def start(**extra):
        r = spark.readStream.format("pyklog")
        for k, v in {
            "zookeeper.connect": zk_chroot,
            "subscribe": topic,
            "startingOffsets": "earliest",
            "zookeeper.session.timeout.ms": "30000",
            **extra,
        }.items():
            r = r.option(k, v)
        return r.load().writeStream.format("noop").trigger(processingTime="500 milliseconds").start()

    def committed(group):
        try:
            return {
                int(p): int(zk.get(paths.consumer_offset(group, topic, int(p)))[0])
                for p in zk.get_children(paths.consumer_offsets(group, topic))
            }
        except Exception:  # noqa: BLE001 - not committed yet
            return {}

    q1, q2 = start(), start(**{"group.id": named})
    try:

        def generated():
            return [g for g in set(zk.get_children(paths.CONSUMERS)) - before if g.startswith("spark-pyklog-source-")]

        wait_for(
            lambda: (
                len(generated()) == 1 and committed(generated()[0]) == {0: 5, 1: 5} and committed(named) == {0: 5, 1: 5}
            ),
            timeout=120,
            interval=0.5,
            message="both queries' commits",
        )
        gen = generated()[0]
    finally:
        q1.stop()
        q2.stop()
    assert q1.exception() is None and q2.exception() is None
    wait_for(
        lambda: zk.exists(paths.consumer_group(gen)) is None,
        timeout=30,
        interval=0.3,
        message="the generated group to be deleted at stop",
    )
    assert committed(named) == {0: 5, 1: 5}  # an explicit group.id keeps its offsets
