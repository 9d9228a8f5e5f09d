"""A full disk on a partition's leader: its log dir goes offline and the partition leads elsewhere.

Three broker processes, replication factor 3, ``min.insync.replicas=2``; broker 0 leads both
partitions of the topic and its ``log.dirs`` are two real 2 MiB tmpfs (needs root to mount; skipped
otherwise), one partition in each.  An idempotent confluent-kafka producer (acks=all) writes to
both partitions throughout.  Then, in one run:

1. the first dir is filled: that dir goes offline (one ERROR line naming it, the file and ENOSPC),
   broker 0 tells the controller (``/log_dir_event_notification``), the partition's leadership moves
   to another ISR member, and broker 0 keeps serving the partition of its other dir;
   a partition created then gets no log on broker 0 and leads elsewhere too;
2. the second dir is filled: no dir is left, broker 0 halts (a CRITICAL "Shutdown broker because all
   log dirs in ... have failed" line, exit status 1) and the other partition leads elsewhere too.

Counts: each partition's longest gap between acknowledgements (the time it was not writable),
acknowledged records read back (lost 0, duplicated 0, out of order 0), and broker 0's ERROR and
WARNING lines (one per dir and cause).  Before this change the filled dir's partition stayed
unwritable (its leader kept answering KAFKA_STORAGE_ERROR) and the wait for a new leader failed.
"""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import threading
import time
import uuid

import pytest

from pyklog.broker.zk.cluster import ZkCluster
from tests.integration.replication_support import CLUSTER_PROPS, count, read_back, state, wait_full_isr
from tests.support import wait_for

_ERROR_LINE = "storage error in log directory"
_HALT_LINE = "Shutdown broker because all log dirs in"


@pytest.fixture
def two_tiny_disks(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mounted = []
    try:
        for name in ("disk-a", "disk-b"):
            mnt = tmp_path / name
            mnt.mkdir()
            r = subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mnt)], capture_output=True, text=True
            )
            if r.returncode != 0:
                pytest.skip(f"cannot mount a tmpfs: {r.stderr.strip()}")
            mounted.append(str(mnt))
        yield mounted
    finally:
        for mnt in mounted:
            subprocess.run(["umount", "-l", mnt], check=False)


def _fill(disk: str, leave: int = 150 * 1024) -> None:
    with open(os.path.join(disk, "filler"), "wb") as f:
        st = os.statvfs(disk)
        f.write(b"\0" * max(0, st.f_bavail * st.f_frsize - leave))


class _Writer(threading.Thread):
    """An idempotent acks=all producer writing ``<partition>:<seq>`` to both partitions until
    stopped; acknowledgements (seq and time) per partition."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(daemon=True, name="writer")
        from confluent_kafka import Producer

        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 5,
                "message.timeout.ms": 120000,
                "log_level": 0,
            }
        )
        self.topic = topic
        self.acked: dict[int, list[int]] = {0: [], 1: []}
        self.ack_times: dict[int, list[float]] = {0: [], 1: []}
        self.failed: list[str] = []
        self.stop_event = threading.Event()

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed.append(str(err))
            return
        p = msg.partition()
        self.acked[p].append(int(msg.value().decode().split(":")[1]))
        self.ack_times[p].append(time.monotonic())

    def run(self) -> None:
        seq = 0
        pad = "x" * 1000
        while not self.stop_event.is_set():
            for p in (0, 1):
                try:
                    self.producer.produce(
                        self.topic, f"{p}:{seq}:{pad}".encode(), partition=p, on_delivery=self._delivered
                    )
                except BufferError:
                    self.producer.poll(0.1)
            seq += 1
            self.producer.poll(0.01)
        self.producer.flush(120)

    def acks_after(self, p: int, t: float) -> int:
        return sum(1 for x in list(self.ack_times[p]) if x > t)

    def longest_gap(self, p: int) -> float:
        ts = self.ack_times[p]
        return max((b - a for a, b in itertools.pairwise(ts)), default=0.0)


def _offline_replicas(bootstrap: str, topics) -> dict[tuple[str, int], list[int]]:
    """kafka-python's describe_topics: ``{(topic, partition): offline_replicas}``."""
    from kafka.admin import KafkaAdminClient

    kp = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = kp.describe_topics(list(topics))
    finally:
        kp.close()
    return {
        (t["name"], p["partition_index"]): sorted(p["offline_replicas"]) for t in described for p in t["partitions"]
    }


def _problems(out: str) -> list[str]:
    return [ln for ln in out.splitlines() if re.search(r"\] (WARNING|ERROR|CRITICAL) \[", ln)]


def test_full_log_dirs_move_leadership_then_halt_the_broker(broker_factory, zk, zk_chroot, two_tiny_disks):
    a, b = two_tiny_disks
    brokers = {0: broker_factory(0, log_dirs=f"{a},{b}", **CLUSTER_PROPS)}
    brokers.update({i: broker_factory(i, **CLUSTER_PROPS) for i in (1, 2)})
    wait_for(lambda: len(zk.get_children("/brokers/ids")) == 3, timeout=60, message="3 brokers registered")
    topic = f"disk-{uuid.uuid4().hex[:6]}"
    admin = ZkCluster(zk_chroot, None).start()
    try:
        admin.create_topic(topic, 2, 3, replica_assignment={0: [0, 1, 2], 1: [0, 1, 2]})
    finally:
        admin.stop()
    wait_full_isr(zk, topic, 2)

    # one partition in each of broker 0's dirs (a new log goes to the dir holding the fewest)
    def placed(d: str) -> list[int]:
        return [p for p in (0, 1) if os.path.isdir(os.path.join(d, f"{topic}-{p}"))]

    wait_for(lambda: len(placed(a)) == 1 and len(placed(b)) == 1, timeout=30, message="a partition in each dir")
    in_a = placed(a)
    pa, pb = in_a[0], 1 - in_a[0]

    writer = _Writer(",".join(x.bootstrap for x in brokers.values()), topic)
    writer.start()
    try:
        wait_for(lambda: min(len(writer.acked[0]), len(writer.acked[1])) >= 50, timeout=60, message="first acks")

        # 1. the first dir fills: its partition leads elsewhere, broker 0 serves the other dir
        _fill(a)
        wait_for(lambda: _ERROR_LINE in brokers[0].output(), timeout=60, message="the first dir failing")
        t_a = time.monotonic()
        wait_for(
            lambda: state(zk, topic, pa)["leader"] in (1, 2), timeout=30, message="a new leader of the dir's partition"
        )
        wait_for(lambda: writer.acks_after(pa, t_a) >= 20, timeout=30, message="the moved partition writable")
        t_moved = time.monotonic()
        wait_for(lambda: writer.acks_after(pb, t_moved) >= 20, timeout=30, message="the other dir still written")
        assert brokers[0].proc.poll() is None  # broker 0 still runs
        st_b = state(zk, topic, pb)
        assert st_b["leader"] == 0, st_b  # and still leads the partition of its healthy dir
        assert 0 not in state(zk, topic, pa)["isr"]
        # a partition created while a dir is offline gets no log on broker 0 (its log might have been
        # in the failed dir, as Kafka's rule for replicas that are not new): it leads elsewhere
        later = f"{topic}-later"
        admin = ZkCluster(zk_chroot, None).start()
        try:
            admin.create_topic(later, 1, 3, replica_assignment={0: [0, 1, 2]})
        finally:
            admin.stop()
        wait_for(lambda: state(zk, later, 0)["leader"] in (1, 2), timeout=30, message="the new partition led elsewhere")
        assert 0 not in state(zk, later, 0)["isr"]
        assert not os.path.exists(os.path.join(b, f"{later}-0"))
        # a stock client's Metadata (from another broker) names broker 0's replicas on the failed dir
        # offline while broker 0 is live (Kafka's UpdateMetadata offline_replicas)
        assert _offline_replicas(brokers[1].bootstrap, [topic, later]) == {
            (topic, pa): [0],
            (topic, pb): [],
            (later, 0): [0],
        }

        # 2. the second dir fills: no dir left, broker 0 halts, the other partition moves
        _fill(b)
        assert brokers[0].wait_exit(timeout=60) == 1
        t_b = time.monotonic()
        wait_for(lambda: state(zk, topic, pb)["leader"] in (1, 2), timeout=30, message="a new leader after the halt")
        wait_for(lambda: writer.acks_after(pb, t_b) >= 20, timeout=30, message="the second partition writable")
    finally:
        writer.stop_event.set()
        writer.join(150)

    read = read_back(f"{brokers[1].bootstrap},{brokers[2].bootstrap}", topic, 2)
    counts = count(writer.acked, read)
    out = brokers[0].output()
    problems = _problems(out)
    gaps = {"moved_dir_s": round(writer.longest_gap(pa), 2), "halted_broker_s": round(writer.longest_gap(pb), 2)}
    print(f"\nfull disk fail-over: unwritable {gaps}, counts {counts}, delivery failures {len(writer.failed)}")
    print("broker 0 WARNING/ERROR/CRITICAL lines:\n" + "\n".join(ln[:300] for ln in problems))
    for i in (1, 2):
        others = _problems(brokers[i].output())
        print(f"broker {i}: {len(others)} WARNING/ERROR lines\n" + "\n".join(ln[:300] for ln in others))
        assert len(others) <= 3, others  # a follower's fetcher: one WARNING per partition (3), not one per retry
        brokers[i].kill()  # no controlled shutdown of the last brokers (nothing to test there; saves ~10 s)
    assert (counts["lost"], counts["duplicated"], counts["out_of_order"]) == (0, 0, 0), counts
    assert counts["acknowledged"] > 200, counts
    assert not writer.failed, writer.failed[:5]
    errors = [ln for ln in problems if _ERROR_LINE in ln]
    assert len(errors) == 2 and all(" ERROR " in ln and "ENOSPC" in ln for ln in errors), errors  # one per dir
    assert a in errors[0] and b in errors[1], errors
    halt = [ln for ln in problems if _HALT_LINE in ln]
    assert len(halt) == 1 and " CRITICAL " in halt[0], halt
    assert len(problems) <= 4, problems  # nothing repeated per partition or per interval
