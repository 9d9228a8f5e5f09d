"""A broker at a few thousand partitions: its thread count stays bounded by its configuration while
partitions are created and while a burst of partition-state changes (what a controller election
writes) arrives, and every change is applied.

A broker used to start one thread per fired state watch: a burst over N partitions meant ~N threads
at once (3,026 at 3,000 partitions), all queued on one lock, and it took minutes to apply."""

from __future__ import annotations

import resource
import threading
import time

from pyklog.broker.protocol.messages import ApiKey
from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import LeaderAndIsr, encode_partition_state
from tests.support import Wire, create_topic, produce, records, wait_for

TOPICS = 3
PARTITIONS = 1000  # per topic
#: what the configuration allows: network, request handler, scheduler, fetcher and ZooKeeper
#: threads (about 30 with the defaults), whatever the number of partitions
MAX_THREADS = 100


class ThreadSampler:
    """Samples /proc/<pid>/status Threads of the broker every 10 ms, keeps the maximum."""

    def __init__(self, pid: int):
        self.pid = pid
        self.max = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            try:
                with open(f"/proc/{self.pid}/status") as f:
                    for line in f:
                        if line.startswith("Threads:"):
                            self.max = max(self.max, int(line.split()[1]))
                            break
            except OSError:
                pass
            self._stop.wait(0.01)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.max


def _leader_lines(broker, epoch: int) -> int:
    return broker.output().count(f": leader at epoch {epoch} ")


def test_threads_stay_bounded_through_creation_and_a_burst_of_state_changes(broker_factory, zk):
    b = broker_factory(0)
    sampler = ThreadSampler(b.proc.pid)
    t0 = time.monotonic()
    with Wire(b.port, timeout=120) as w:
        for i in range(TOPICS):
            assert create_topic(w, f"scale-{i}", partitions=PARTITIONS)["error_code"] == 0
    total = TOPICS * PARTITIONS
    wait_for(lambda: _leader_lines(b, 0) >= total, timeout=120, interval=0.2, message="every partition led")
    created_s = time.monotonic() - t0

    # the controller's burst: every state node rewritten (leader epoch 1) in a few multi-ops, as
    # KafkaController writes them; each write fires the broker's state watch
    t1 = time.monotonic()
    state = encode_partition_state(LeaderAndIsr(leader=0, leader_epoch=1, isr=(0,), controller_epoch=1))
    for i in range(TOPICS):
        for start in range(0, PARTITIONS, 250):
            tx = zk.transaction()
            for p in range(start, start + 250):
                tx.set_data(paths.partition_state(f"scale-{i}", p), state)
            assert all(r is True or hasattr(r, "version") for r in tx.commit())
    wait_for(lambda: _leader_lines(b, 1) >= total, timeout=60, interval=0.2, message="every new state applied")
    burst_s = time.monotonic() - t1
    most = sampler.stop()
    assert most < MAX_THREADS, f"{most} threads at {total} partitions"

    # the broker serves at the new epoch (a Produce answered by the partition's leader)
    with Wire(b.port) as w:
        r = w.request(
            ApiKey.LIST_OFFSETS,
            4,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "scale-2",
                        "partitions": [{"partition_index": PARTITIONS - 1, "current_leader_epoch": 1, "timestamp": -1}],
                    }
                ],
            },
        )
    part = r["topics"][0]["partitions"][0]
    assert part["error_code"] == 0 and part["leader_epoch"] == 1
    print(f"{total} partitions: created in {created_s:.1f}s, burst applied in {burst_s:.1f}s, max {most} threads")


def test_running_out_of_file_descriptors_creating_logs_is_reported_and_survived(broker_factory, zk):
    """A broker whose descriptor limit is too small for a new topic's logs: one ERROR per log sync
    naming the limit and what to do (it logged a traceback per partition, every 10 s), and the rest
    of the broker goes on: it stays registered in ZooKeeper and keeps serving its other partitions."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))  # the broker process inherits it
    try:
        b = broker_factory(0)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    with Wire(b.port) as w:
        assert create_topic(w, "small", partitions=1)["error_code"] == 0
        wait_for(lambda: _leader_lines(b, 0) >= 1, message="small led")
        assert create_topic(w, "big", partitions=400)["error_code"] == 0
        wait_for(lambda: "too many open files (the broker's limit is 300" in b.output(), message="the ERROR")
        assert b.output().count("Traceback") == 0
        assert zk.exists(paths.broker_id(0)) is not None
        assert produce(w, "small", records(3))["error_code"] == 0  # the other partitions are served
    assert b.proc.poll() is None


#: partitions of one topic whose nodes (``partitions/<p>`` and its ``state``) no longer fit in one
#: ZooKeeper request (``jute.maxbuffer``, 1 MiB by default: about 3,500 partitions' nodes)
HUGE_TOPIC_PARTITIONS = 4000


def test_a_topic_too_large_for_one_zookeeper_request_is_created_and_served(broker_factory, zk):
    """CreateTopics of a topic whose nodes pass ZooKeeper's request size limit: created (in several
    multi-ops), every state node written, every partition led and served.  It used to fail with
    UNKNOWN_SERVER_ERROR while the broker's ZooKeeper session reconnected in a loop (ZooKeeper
    closes a connection that sends a request over jute.maxbuffer)."""
    b = broker_factory(0)
    t0 = time.monotonic()
    with Wire(b.port, timeout=120) as w:
        r = create_topic(w, "huge", partitions=HUGE_TOPIC_PARTITIONS)
        assert r["error_code"] == 0, r
        assert len(zk.get_children(paths.topic_partitions("huge"))) == HUGE_TOPIC_PARTITIONS
        for p in (0, HUGE_TOPIC_PARTITIONS // 2, HUGE_TOPIC_PARTITIONS - 1):
            assert zk.exists(paths.partition_state("huge", p)) is not None
        wait_for(
            lambda: _leader_lines(b, 0) >= HUGE_TOPIC_PARTITIONS,
            timeout=120,
            interval=0.2,
            message="every partition led",
        )
        for p in (0, HUGE_TOPIC_PARTITIONS - 1):
            assert produce(w, "huge", records(2), partition=p)["error_code"] == 0
    assert "Connection dropped" not in b.output()
    print(f"{HUGE_TOPIC_PARTITIONS} partitions in one topic: created and led in {time.monotonic() - t0:.1f}s")
