"""Zombie fencing of a ZooKeeper consumer-group member (GroupMember.commit_offsets), with a real
ZooKeeper and a real member process paused with SIGSTOP past its session timeout.

The zombie (tests/integration/connector/group_member_proc.py) takes its assignment, "reads a batch" of 10 records per
partition and commits the batch's end every 100 ms.  It is SIGSTOPped (in the middle of a batch);
another member takes its partitions once its session expires and commits; the zombie is SIGCONTed
and finishes the batch it had in hand.  Counted: which of the zombie's commits landed, whether an
offset ever moved backwards, and how many records the new owner reads again (the zombie's batch in
flight)."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time

from pyklog.broker.zk import paths
from pyklog.connector.group import GroupMember
from pyklog.connector.offsets import ZooKeeperOffsetStore
from tests.support import wait_for

SESSION_MS = 4000  # ZooKeeper's minimum with the test server's tickTime (2 s)
HERE = os.path.dirname(os.path.abspath(__file__))


def create_topic(zk, name, n):
    zk.create(
        paths.topic(name),
        json.dumps({"version": 1, "partitions": {str(p): [0] for p in range(n)}}).encode(),
        makepath=True,
    )


class Proc:
    """A member process whose stdout lines are collected by a thread."""

    def __init__(self, *args):
        self.p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "group_member_proc.py"), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._t = threading.Thread(target=self._pump, daemon=True)
        self._t.start()

    def _pump(self):
        for line in self.p.stdout:
            self.lines.append(line.strip())

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGCONT)
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        return self.p.stderr.read()


class OffsetWatcher:
    """Samples the group's stored offsets every 20 ms and records every value seen, in order."""

    def __init__(self, zk, group, tps):
        self.store = ZooKeeperOffsetStore(zk)
        self.group, self.tps = group, tps
        self.history = {tp: [] for tp in tps}
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        while not self._stop.is_set():
            got = self.store.fetch(self.group, self.tps)
            for tp, off in got.items():
                h = self.history[tp]
                if not h or h[-1] != off:
                    h.append(off)
            time.sleep(0.02)

    def close(self):
        self._stop.set()
        self._t.join(5)

    def backwards(self):
        return {tp: h for tp, h in self.history.items() if any(b < a for a, b in itertools.pairwise(h))}


def run_zombie(zk_chroot, zk, unfenced: bool):
    """SIGSTOP a member mid-batch past its session, let member ``b`` take over and commit, SIGCONT it.
    Returns (the zombie's commits after it resumed, before it noticed it lost its partitions; the
    offsets ``b`` committed; the offset history; the zombie's process)."""
    group, topic = "g", "t"
    create_topic(zk, topic, 2)
    tps = [(topic, 0), (topic, 1)]
    watcher = OffsetWatcher(zk, group, tps)
    z = Proc(
        "--zookeeper",
        zk_chroot,
        "--group",
        group,
        "--topic",
        topic,
        "--consumer-id",
        "z",
        "--session-timeout-ms",
        str(SESSION_MS),
        *(["--unfenced"] if unfenced else []),
    )
    b = None
    try:
        wait_for(lambda: sum(1 for ln in z.lines if ln.startswith("COMMIT")) >= 6, 30, message="z commits")
        os.kill(z.p.pid, signal.SIGSTOP)
        stopped_at = len(z.lines)
        last = {
            tp: max(
                int(ln.split()[2]) for ln in z.lines if ln.startswith(f"COMMIT {tp[1]} ") and ln.endswith("committed")
            )
            for tp in tps
        }
        # z's batch in flight reads [last, last + 10) of each partition; the new owner starts at `last`
        b = GroupMember(
            zk_chroot,
            group,
            topics=[topic],
            consumer_id="b",
            session_timeout_s=SESSION_MS / 1000,
            rebalance_backoff_ms=200,
            rebalance_max_retries=200,
        )
        b.start()
        t0 = time.monotonic()
        wait_for(lambda: b.assignment() == set(tps), 30, message="b to take over once z's session expired")
        takeover_s = time.monotonic() - t0
        start = ZooKeeperOffsetStore(b.zk).fetch(group, tps)
        assert start == last, "b starts where z's last committed batch ended"
        # b reads and commits: 50 records of partition 0, 5 of partition 1
        b_commits = {(topic, 0): start[(topic, 0)] + 50, (topic, 1): start[(topic, 1)] + 5}
        r = b.commit_offsets(b_commits)
        assert r.committed == b_commits, r
        os.kill(z.p.pid, signal.SIGCONT)
        # z notices the expired session, drops everything, registers again and regains one partition
        wait_for(
            lambda: any(ln.startswith("EPOCH 1 ") for ln in z.lines[stopped_at:]),
            30,
            message="z to notice its lost session and rejoin",
        )
        resumed = z.lines[stopped_at:]
        cut = next(i for i, ln in enumerate(resumed) if ln.startswith("EPOCH 1 "))
        zombie_commits = [ln for ln in resumed[:cut] if ln.startswith("COMMIT")]
        b.wait_stable(30)
        wait_for(lambda: len(b.assignment()) == 1, 30, message="z and b to split the partitions")
        time.sleep(0.5)  # a few of z's ticks with its new session
        return zombie_commits, b_commits, last, takeover_s, watcher, z, b
    except BaseException:
        print(z.stop())
        raise
    finally:
        watcher.close()


def test_zombie_commits_are_refused_and_offsets_never_move_backwards(zk_chroot, zk):
    zombie_commits, b_commits, last, takeover_s, watcher, z, b = run_zombie(zk_chroot, zk, unfenced=False)
    try:
        assert zombie_commits, "the zombie finished its batch in flight and tried to commit it"
        # refused (or, the first one, failed with the connection the server closed): none landed
        assert not [ln for ln in zombie_commits if ln.endswith(" committed")], zombie_commits
        assert any(ln.endswith(" refused") for ln in zombie_commits), zombie_commits
        assert watcher.backwards() == {}, watcher.history
        # the zombie's batch in flight, [last, last + 10) of each partition, was read by both
        duplicated = sum(10 for _ in last)
        print(
            f"\nzombie: SIGSTOP past a {SESSION_MS} ms session; b took over after {takeover_s:.1f} s; "
            f"zombie commits after SIGCONT: {zombie_commits}; landed: none; offsets backwards: none; "
            f"records read by both (the zombie's batch in flight): {duplicated}"
        )
        # after rejoining, z owns one partition again and commits it from the group's offset, fenced
        z_owns = {("t", p) for p in (0, 1)} - b.assignment()
        (tp,) = z_owns
        wait_for(
            lambda: any(ln == f"COMMIT {tp[1]} {b_commits[tp] + 10} committed" for ln in z.lines),
            30,
            message="z to commit its regained partition from b's offset",
        )
    finally:
        b.stop()
        z.stop()


def test_without_the_fence_a_zombie_commit_lands(zk_chroot, zk):
    """What the fence prevents: a plain offset write after SIGCONT goes through kazoo's retry on a new
    session and lands on partitions another member owns (partition 0 even moves backwards)."""
    zombie_commits, _b_commits, _last, _, watcher, z, b = run_zombie(zk_chroot, zk, unfenced=True)
    try:
        landed = [ln for ln in zombie_commits if ln.endswith(" committed")]
        assert landed, zombie_commits
        assert ("t", 0) in watcher.backwards(), watcher.history
    finally:
        b.stop()
        z.stop()


def test_high_level_consumer_paused_past_its_session_commits_nothing_after(zk_chroot, broker):
    """tests/integration/connector/group_consumer_proc.py (a ConsumerConnector committing after every record) SIGSTOPped
    while it consumes a topic being written, past its session; another consumer takes over; SIGCONT:
    the paused consumer's commits of the record(s) it had in hand must not land."""
    from pyklog.connector.client import ClusterClient
    from pyklog.connector.producer import Producer

    with ClusterClient(broker.bootstrap) as c:
        c.create_topic("hl", 1)
    stop_producing = threading.Event()
    acked = [0]  # records acknowledged so far (record i is at offset i)

    def produce():
        with Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0}) as p:
            i = 0
            while not stop_producing.is_set():
                p.produce("hl", f"r{i}".encode(), partition=0)
                p.flush()
                i += 1
                acked[0] = i
                time.sleep(0.02)

    def consumer(cid):
        return subprocess.Popen(
            [
                sys.executable,
                os.path.join(HERE, "group_consumer_proc.py"),
                "--zookeeper",
                zk_chroot,
                "--group",
                "hlg",
                "--topics",
                "hl",
                "--consumer-id",
                cid,
                "--session-timeout-ms",
                str(SESSION_MS),
                "--rebalance-backoff-ms",
                "200",
                "--rebalance-max-retries",
                "200",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )

    class Lines:
        def __init__(self, proc):
            self.proc, self.lines = proc, []
            threading.Thread(
                target=lambda: self.lines.extend(ln.rstrip("\n") for ln in proc.stdout), daemon=True
            ).start()

        def offsets(self, kind, since=0):
            return [int(ln.split()[3]) for ln in self.lines[since:] if ln.startswith(kind + " ")]

    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    z = Lines(consumer("z"))
    b = None
    try:
        wait_for(lambda: len(z.offsets("COMMITTED")) >= 20, 30, message="z consuming and committing")
        os.kill(z.proc.pid, signal.SIGSTOP)
        # the reader thread may still be behind on lines z wrote before the pause (a loaded machine):
        # the mark is where z stopped, so it is taken once no line has come for half a second
        settled = [len(z.lines), time.monotonic()]

        def caught_up():
            if len(z.lines) != settled[0]:
                settled[:] = [len(z.lines), time.monotonic()]
            return time.monotonic() - settled[1] > 0.5

        wait_for(caught_up, 10, message="the reader to catch up with the paused consumer")
        mark = len(z.lines)
        written_before_pause = acked[0] + 1  # (one more may be in flight)
        b = Lines(consumer("b"))  # takes the partition once z's session expired
        wait_for(lambda: len(b.offsets("COMMITTED")) >= 20, 30, message="b took over and commits")
        os.kill(z.proc.pid, signal.SIGCONT)
        # z hands out what it had in hand, then drops the partition when it notices its lost session
        seen = [len(z.lines), time.monotonic()]

        def z_quiet():
            if len(z.lines) != seen[0]:
                seen[:] = [len(z.lines), time.monotonic()]
            return time.monotonic() - seen[1] > 1.0

        wait_for(z_quiet, 30, message="z to stop consuming")
        time.sleep(0.5)
    finally:
        stop_producing.set()
        for p in (z.proc, b.proc if b else None):
            if p is not None and p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.terminate()
                p.wait(30)
    zombie_consumed = z.offsets("CONSUMED", mark)
    zombie_reported = z.offsets("COMMITTED", mark)
    twice = sorted(set(z.offsets("CONSUMED")) & set(b.offsets("CONSUMED")))
    # where b began: the group's committed offset when it took the partition over.  z may have been
    # stopped between a commit landing and its COMMITTED line: that line comes after SIGCONT but
    # names an offset b started from (the commit landed before the takeover).  A commit landing after
    # the takeover would name an offset beyond it.
    b_start = min(b.offsets("CONSUMED"))
    zombie_committed = [o for o in zombie_reported if o > b_start]
    print(
        f"\nhigh-level consumer paused past its session: after SIGCONT it handed out offsets {zombie_consumed} "
        f"(records written before the pause: offsets < {written_before_pause}), reported commits "
        f"{zombie_reported} (its successor started at {b_start}); read by both: {len(twice)}"
    )
    assert zombie_committed == [], "a commit of the paused consumer landed after another took over"
    assert all(o == b_start for o in zombie_reported), (zombie_reported, b_start)
    # after SIGCONT it hands out only what it had fetched before the pause, nothing written meanwhile
    assert all(o < written_before_pause for o in zombie_consumed), zombie_consumed
    # read twice: what z handed out after SIGCONT, or the record it had in hand (consumed, its commit
    # not yet written) when it was paused -- at least once, never more than that one
    committed_at_pause = max(z.offsets("COMMITTED") or [0])  # the next offset; none came after the pause
    in_hand = {o for o in set(z.offsets("CONSUMED")) - set(zombie_consumed) if o >= committed_at_pause}
    assert len(in_hand) <= 1, in_hand
    assert set(twice) <= set(zombie_consumed) | in_hand, (twice, zombie_consumed, in_hand)
