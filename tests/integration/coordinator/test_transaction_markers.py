"""The partition-leader side of transactions over the wire, against a real broker process:
Produce with a transactional id, WriteTxnMarkers (v0) and TxnOffsetCommit (v0-2).

The transaction coordinator is played by the test (it sends the markers itself), so each rule of
the leader is checked on its own: what is appended, what a read_committed fetch sees, when a long
poll wakes up, and what OffsetFetch answers before and after the marker across SIGKILLs.
"""

from __future__ import annotations

import threading
import time
import uuid

from pyklog.broker.coordinator.offsets import partition_for_group
from pyklog.broker.protocol import ApiKey
from pyklog.broker.record.batch import build_batch
from pyklog.broker.record.reader import iter_batches
from tests.support import Wire, create_topic, stable_port, wait_for

OFFSETS = "__consumer_offsets"


def init_pid(w: Wire) -> tuple[int, int]:
    r = w.request(ApiKey.INIT_PRODUCER_ID, 1, {"transactional_id": None, "transaction_timeout_ms": 60000})
    assert r["error_code"] == 0, r
    return r["producer_id"], r["producer_epoch"]


def txn_batch(pid, epoch, seq, n, prefix=b"tx", transactional=True):
    now = int(time.time() * 1000)
    return build_batch(
        [(None, prefix + b"%d" % (seq + i), now, ()) for i in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )


def produce(w: Wire, topic, data, transactional_id=None, partition=0, version=8, acks=-1):
    r = w.request(
        ApiKey.PRODUCE,
        version,
        {
            "transactional_id": transactional_id,
            "acks": acks,
            "timeout_ms": 5000,
            "topic_data": [{"name": topic, "partition_data": [{"index": partition, "records": data}]}],
        },
    )
    return r["responses"][0]["partition_responses"][0]


def markers(w: Wire, pid, epoch, commit, parts: dict, coordinator_epoch=0) -> dict:
    """WriteTxnMarkers v0 for one producer; returns {(topic, partition): error_code}."""
    r = w.request(
        ApiKey.WRITE_TXN_MARKERS,
        0,
        {
            "markers": [
                {
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "transaction_result": commit,
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in parts.items()],
                    "coordinator_epoch": coordinator_epoch,
                }
            ]
        },
    )
    (m,) = r["markers"]
    assert m["producer_id"] == pid
    return {(t["name"], p["partition_index"]): p["error_code"] for t in m["topics"] for p in t["partitions"]}


def fetch(w: Wire, topic, offset, isolation=0, partition=0, max_wait_ms=0, min_bytes=0):
    r = w.request(
        ApiKey.FETCH,
        11,
        {
            "replica_id": -1,
            "max_wait_ms": max_wait_ms,
            "min_bytes": min_bytes,
            "max_bytes": 1 << 20,
            "isolation_level": isolation,
            "session_id": 0,
            "session_epoch": -1,
            "rack_id": "",
            "topics": [
                {
                    "topic": topic,
                    "partitions": [
                        {
                            "partition": partition,
                            "fetch_offset": offset,
                            "partition_max_bytes": 1 << 20,
                            "current_leader_epoch": -1,
                            "log_start_offset": -1,
                        }
                    ],
                }
            ],
            "forgotten_topics_data": [],
        },
    )
    return r["responses"][0]["partitions"][0]


def data_values(raw) -> list[bytes]:
    return [r.value for b in iter_batches(bytes(raw or b"")) if not b.is_control for r in b.records]


from pyklog.broker.protocol import SUPPORTED  # noqa: E402


def test_api_versions_advertise_the_leader_side(broker):
    with Wire(broker.port) as w:
        r = w.request(ApiKey.API_VERSIONS, 2, {})
        ranges = {k["api_key"]: (k["min_version"], k["max_version"]) for k in r["api_keys"]}
        assert ranges[27] == SUPPORTED[ApiKey.WRITE_TXN_MARKERS] and ranges[27][0] == 0, ranges  # v0: between brokers
        assert ranges[28] == SUPPORTED[ApiKey.TXN_OFFSET_COMMIT] and ranges[28][1] >= 2, ranges


def test_produce_transactional_batches(broker):
    with Wire(broker.port) as w:
        assert create_topic(w, "tp", 1)["error_code"] == 0
        pid, epoch = init_pid(w)
        # transactional batches without the request's transactional id: refused, nothing appended
        r = produce(w, "tp", txn_batch(pid, epoch, 0, 3))
        assert r["error_code"] == 53, r
        assert fetch(w, "tp", 0)["high_watermark"] == 0
        # a transactional batch without a producer id: INVALID_RECORD
        r = produce(w, "tp", txn_batch(-1, -1, -1, 1), transactional_id="tx-1")
        assert r["error_code"] == 87, r
        # with the transactional id: appended, transactional bit and producer fields kept
        r = produce(w, "tp", txn_batch(pid, epoch, 0, 3), transactional_id="tx-1")
        assert r["error_code"] == 0 and r["base_offset"] == 0, r
        # a transactional id with non-transactional batches is accepted (as in Kafka)
        pid2, epoch2 = init_pid(w)
        r = produce(w, "tp", txn_batch(pid2, epoch2, 0, 2, transactional=False), transactional_id="tx-2")
        assert r["error_code"] == 0, r
        got = fetch(w, "tp", 0)
        batches = list(iter_batches(bytes(got["records"])))
        assert [(b.is_transactional, b.producer_id, b.producer_epoch, len(b)) for b in batches] == [
            (True, pid, epoch, 3),
            (False, pid2, epoch2, 2),
        ]
        # acks=0 with a refused transactional batch: the broker closes the connection
        w.send(
            ApiKey.PRODUCE,
            8,
            {
                "transactional_id": None,
                "acks": 0,
                "timeout_ms": 5000,
                "topic_data": [
                    {"name": "tp", "partition_data": [{"index": 0, "records": txn_batch(pid, epoch, 3, 1)}]}
                ],
            },
        )
        assert w.is_closed()


def test_write_txn_markers_commit_abort_and_errors(broker):
    with Wire(broker.port) as w:
        assert create_topic(w, "tm", 2)["error_code"] == 0
        pid, epoch = init_pid(w)
        assert produce(w, "tm", txn_batch(pid, epoch, 0, 3, b"a"), "tx", partition=0)["error_code"] == 0
        assert produce(w, "tm", txn_batch(pid, epoch, 0, 2, b"b"), "tx", partition=1)["error_code"] == 0
        # read_committed sees nothing of the open transaction
        assert data_values(fetch(w, "tm", 0, isolation=1)["records"]) == []
        codes = markers(w, pid, epoch, True, {"tm": [0, 1, 7], "nope": [0]})
        assert codes == {("tm", 0): 0, ("tm", 1): 0, ("tm", 7): 3, ("nope", 0): 3}, codes
        p0 = fetch(w, "tm", 0, isolation=1)
        assert data_values(p0["records"]) == [b"a0", b"a1", b"a2"]
        assert p0["last_stable_offset"] == p0["high_watermark"] == 4  # 3 records + the marker
        batches = list(iter_batches(bytes(p0["records"])))
        assert batches[-1].is_control and batches[-1].control_type == 1 and batches[-1].producer_id == pid
        # next transaction, aborted: read_committed skips it, read_uncommitted shows it
        assert produce(w, "tm", txn_batch(pid, epoch, 3, 2, b"x"), "tx", partition=0)["error_code"] == 0
        assert markers(w, pid, epoch, False, {"tm": [0]}) == {("tm", 0): 0}
        committed = fetch(w, "tm", 0, isolation=1)
        # the broker sends the batches up to the LSO and names the aborted transaction; the client drops it
        assert [(a["producer_id"], a["first_offset"]) for a in committed["aborted_transactions"]] == [(pid, 4)]
        assert committed["last_stable_offset"] == committed["high_watermark"] == 7
        assert data_values(fetch(w, "tm", 0)["records"]) == [b"a0", b"a1", b"a2", b"x3", b"x4"]
        # a marker with an older producer epoch is fenced (INVALID_PRODUCER_EPOCH), nothing appended
        end = fetch(w, "tm", 0)["high_watermark"]
        assert markers(w, pid, epoch - 1 if epoch > 0 else -1, True, {"tm": [0]})[("tm", 0)] in (47,), end
        assert fetch(w, "tm", 0)["high_watermark"] == end


def test_marker_wakes_a_read_committed_long_poll(broker):
    with Wire(broker.port) as w, Wire(broker.port) as coord:
        assert create_topic(w, "lp", 1)["error_code"] == 0
        pid, epoch = init_pid(w)
        assert produce(w, "lp", txn_batch(pid, epoch, 0, 4), "tx")["error_code"] == 0
        result = {}

        def poll():
            t0 = time.monotonic()
            result["resp"] = fetch(w, "lp", 0, isolation=1, max_wait_ms=20000, min_bytes=1)
            result["elapsed"] = time.monotonic() - t0

        t = threading.Thread(target=poll)
        t.start()
        time.sleep(0.5)  # the fetch is parked in the purgatory (nothing below the LSO)
        assert "resp" not in result
        assert markers(coord, pid, epoch, True, {"lp": [0]}) == {("lp", 0): 0}
        t.join(25)
        assert result["elapsed"] < 5.0, result
        assert data_values(result["resp"]["records"]) == [b"tx0", b"tx1", b"tx2", b"tx3"]


def _offset_fetch(w, group, topic, parts):
    def attempt():
        r = w.request(
            ApiKey.OFFSET_FETCH, 5, {"group_id": group, "topics": [{"name": topic, "partition_indexes": parts}]}
        )
        return None if r["error_code"] in (14, 15, 16) else r

    r = wait_for(attempt, 30, message="the group coordinator")
    assert r["error_code"] == 0, r
    return {p["partition_index"]: (p["committed_offset"], p["metadata"]) for t in r["topics"] for p in t["partitions"]}


def _txn_offset_commit(w, group, pid, epoch, topic, offsets: dict, version=2):
    def attempt():
        r = w.request(
            ApiKey.TXN_OFFSET_COMMIT,
            version,
            {
                "transactional_id": "tx-offsets",
                "group_id": group,
                "producer_id": pid,
                "producer_epoch": epoch,
                "topics": [
                    {
                        "name": topic,
                        "partitions": [
                            {
                                "partition_index": p,
                                "committed_offset": o,
                                "committed_leader_epoch": -1,
                                "committed_metadata": f"m{o}",
                            }
                            for p, o in offsets.items()
                        ],
                    }
                ],
            },
        )
        codes = {p["partition_index"]: p["error_code"] for t in r["topics"] for p in t["partitions"]}
        return None if set(codes.values()) & {14, 15, 16} else codes

    return wait_for(attempt, 30, message="TxnOffsetCommit past the coordinator's loading")


def test_txn_offset_commit_survives_broker_sigkill_before_and_after_the_marker(broker_factory):
    """TxnOffsetCommit, SIGKILL, restart: still pending (OffsetFetch shows the old offsets); the
    marker after the restart commits them; SIGKILL again: still committed.  Counts: offsets
    exposed before the marker (must be 0) and lost after it (must be 0)."""
    broker = broker_factory(0, port=stable_port())
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Wire(broker.port) as w:
        assert create_topic(w, "src", 3)["error_code"] == 0
        r = wait_for(
            lambda: (lambda x: x if x["error_code"] == 0 else None)(
                w.request(ApiKey.FIND_COORDINATOR, 1, {"key": group, "key_type": 0})
            ),
            30,
            message="coordinator",
        )
        assert r["node_id"] == 0
        pid, epoch = init_pid(w)
        assert _txn_offset_commit(w, group, pid, epoch, "src", {0: 10, 1: 11}, version=0) == {0: 0, 1: 0}
        assert _txn_offset_commit(w, group, pid, epoch, "src", {2: 12, 9: 1}) == {2: 0, 9: 3}
        assert _offset_fetch(w, group, "src", [0, 1, 2]) == {0: (-1, ""), 1: (-1, ""), 2: (-1, "")}
        assert (
            w.request(
                ApiKey.TXN_OFFSET_COMMIT,
                2,
                {
                    "transactional_id": "t",
                    "group_id": "",
                    "producer_id": pid,
                    "producer_epoch": epoch,
                    "topics": [
                        {
                            "name": "src",
                            "partitions": [
                                {
                                    "partition_index": 0,
                                    "committed_offset": 1,
                                    "committed_leader_epoch": -1,
                                    "committed_metadata": "",
                                }
                            ],
                        }
                    ],
                },
            )["topics"][0]["partitions"][0]["error_code"]
            == 24
        )  # INVALID_GROUP_ID
        meta = w.request(
            ApiKey.METADATA,
            8,
            {
                "topics": [{"name": OFFSETS}],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            },
        )
        n_offsets = len(meta["topics"][0]["partitions"])
    offsets_partition = partition_for_group(group, n_offsets)
    broker.kill()
    broker.restart()
    with Wire(broker.port) as w:
        exposed = _offset_fetch(w, group, "src", [0, 1, 2])
        assert exposed == {0: (-1, ""), 1: (-1, ""), 2: (-1, "")}, f"pending offsets exposed: {exposed}"
        assert markers(w, pid, epoch, True, {OFFSETS: [offsets_partition]}) == {(OFFSETS, offsets_partition): 0}
        assert _offset_fetch(w, group, "src", [0, 1, 2]) == {0: (10, "m10"), 1: (11, "m11"), 2: (12, "m12")}
        # an aborted transaction of the same producer changes nothing
        assert _txn_offset_commit(w, group, pid, epoch, "src", {0: 99}) == {0: 0}
        assert markers(w, pid, epoch, False, {OFFSETS: [offsets_partition]}) == {(OFFSETS, offsets_partition): 0}
        assert _offset_fetch(w, group, "src", [0])[0] == (10, "m10")
    broker.kill()
    broker.restart()
    with Wire(broker.port) as w:
        got = _offset_fetch(w, group, "src", [0, 1, 2])
        lost = [p for p, (o, _) in got.items() if o == -1]
        print(f"\ntxn offsets after SIGKILL: exposed before marker 0, lost after marker {len(lost)}")
        assert got == {0: (10, "m10"), 1: (11, "m11"), 2: (12, "m12")}
