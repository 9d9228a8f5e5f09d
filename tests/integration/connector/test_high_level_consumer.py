"""The high-level ConsumerConnector against a real broker and ZooKeeper: a group of consumer
processes (one closes, one is SIGKILLed) consumes everything exactly once past the last commit;
topic filters pick up new topics; offsets reset/commit; pyklog-consumer-groups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from pyklog.broker.errors import OffsetOutOfRangeError
from pyklog.connector.high_level import ConsumerConnector, Whitelist
from tests.support import wait_for

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def client(broker):
    from pyklog.connector.client import ClusterClient

    c = ClusterClient(broker.bootstrap)
    yield c
    c.close()


@pytest.fixture
def producer(broker):
    from pyklog.connector.producer import Producer

    p = Producer(bootstrap_servers=broker.bootstrap, linger_ms=2)
    yield p
    p.close()


def produce(producer, topic, partitions, per_partition, tag):
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, f"{tag}-{topic}-{p}-{i}".encode(), partition=p)
    producer.flush()


class ConsumerProc:
    """tests/integration/connector/group_consumer_proc.py in a child process; stdout collected by a reader thread."""

    def __init__(self, zk, group, topics, cid):
        self.cid = cid
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [
                sys.executable,
                os.path.join(HERE, "group_consumer_proc.py"),
                "--zookeeper",
                zk,
                "--group",
                group,
                "--topics",
                ",".join(topics),
                "--consumer-id",
                cid,
                "--session-timeout-ms",
                "4000",
                "--rebalance-backoff-ms",
                "300",
                "--log-level",
                os.environ.get("PYKLOG_TEST_PROC_LOG", "WARNING"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()
        self._errs: list[str] = []
        self._te = threading.Thread(target=lambda: self._errs.extend(self.proc.stderr), daemon=True)
        self._te.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def consumed(self):
        out = []
        for line in list(self.lines):
            if line.startswith("CONSUMED "):
                _, t, p, o, v = line.split(" ", 4)
                out.append((t, int(p), int(o), v))
        return out

    def stderr(self):
        return "".join(self._errs)[-4000:]

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._t.join(5)


def test_group_of_processes_consumes_everything_once(zk_chroot, broker, client, producer):
    topics = ["ga", "gb"]
    for t in topics:
        client.create_topic(t, 6)
    procs = [ConsumerProc(zk_chroot, "grp", topics, f"proc{i}") for i in range(3)]
    try:

        def owns(p, n):
            return any(line.startswith("OWNS ") and len(line[5:].split(",")) == n for line in p.lines)

        # range over 3 members: 4 partitions each
        wait_for(lambda: all(owns(p, 4) for p in procs), 60, message="each process owns 4 partitions")
        produce(producer, "ga", 6, 20, "p1")
        produce(producer, "gb", 6, 20, "p1")

        def all_consumed():
            return [c for p in procs for c in p.consumed()]

        def expect(n):
            try:
                wait_for(lambda: len({c[:3] for c in all_consumed()}) >= n, 60, message=f"{n} records consumed")
            except AssertionError:
                got = {c[:3] for c in all_consumed()}
                expected = {(t, p, o) for t in topics for p in range(6) for o in range(60)}
                missing = sorted(expected - got)
                gaps = {}
                for t, p, o in missing:
                    gaps.setdefault((t, p), []).append(o)
                raise AssertionError(
                    f"{len(got)} of {n} records consumed; missing (of <= 60 per partition) "
                    f"{ {k: (v[0], v[-1], len(v)) for k, v in gaps.items()} }; "
                    + "; ".join(
                        f"{p.cid}: {[ln for ln in p.lines if not ln.startswith('CONSUMED')]} stderr: {p.stderr()}"
                        for p in procs
                    )
                ) from None

        expect(240)
        assert all(len({(t, p) for t, p, _, _ in proc.consumed()}) == 4 for proc in procs)
        # one consumer closes gracefully: it commits and releases, the others take over
        procs[0].stop(signal.SIGTERM)
        assert procs[0].proc.returncode == 0 and "CLOSED" in procs[0].lines, procs[0].stderr()
        produce(producer, "ga", 6, 10, "p2")
        produce(producer, "gb", 6, 10, "p2")
        expect(360)
        # another is killed (no commit, no release): its session expires, the last one takes over
        produce(producer, "ga", 6, 10, "p3")
        time.sleep(0.3)
        procs[1].stop(signal.SIGKILL)
        produce(producer, "gb", 6, 10, "p3")
        produce(producer, "ga", 6, 10, "p4")
        expect(540)  # ga: 20+10+10+10, gb: 20+10+10 per partition, 6 partitions each
        time.sleep(1.0)  # nothing more may arrive
        everything = all_consumed()
        keys = [c[:3] for c in everything]
        expected = {(t, p, o) for t in topics for p in range(6) for o in range(50 if t == "ga" else 40)}
        assert set(keys) == expected, f"missing {sorted(expected - set(keys))[:10]}"
        # duplicates only for a record the killed process printed but had not committed yet:
        # its last record of that partition
        killed = procs[1].consumed()
        last_of_killed = {}
        for t, p, o, _ in killed:
            last_of_killed[(t, p)] = max(o, last_of_killed.get((t, p), -1))
        seen = set()
        for t, p, o, _ in everything:
            if (t, p, o) in seen:
                assert last_of_killed.get((t, p)) == o, f"{t}-{p}@{o} consumed twice"
            seen.add((t, p, o))
        # values match the offsets they were produced at (order within a partition)
        by_tp = {}
        for t, p, o, v in everything:
            by_tp.setdefault((t, p), {})[o] = v
        for (t, p), offs in by_tp.items():
            values = [offs[o] for o in sorted(offs)]
            assert values[0] == f"p1-{t}-{p}-0" and len(values) == len(set(values))
    finally:
        for p in procs:
            p.stop(signal.SIGKILL)


def test_whitelist_picks_up_topic_created_later(zk_chroot, broker, client, producer, capsys):
    client.create_topic("fa", 2)
    produce(producer, "fa", 2, 3, "x")
    conn = ConsumerConnector(
        {
            "zookeeper.connect": zk_chroot,
            "group.id": "filtered",
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 200,
            "zookeeper.session.timeout.ms": 4000,
        }
    )
    try:
        [stream] = conn.create_message_streams_by_filter(Whitelist("f.*"), 1)
        got = []
        wait_for(lambda: got.extend((r.topic, r.partition, r.offset) for r in stream) or len(got) >= 6, 30)
        client.create_topic("fb", 3)
        client.create_topic("other", 1)
        produce(producer, "fb", 3, 2, "y")
        produce(producer, "other", 1, 2, "z")
        wait_for(
            lambda: got.extend((r.topic, r.partition, r.offset) for r in stream) or len(got) >= 12,
            30,
            message="records of the new topic",
        )
        assert sorted(got) == sorted(
            [("fa", p, o) for p in range(2) for o in range(3)] + [("fb", p, o) for p in range(3) for o in range(2)]
        )
        assert conn.member.streams() == {"fa": 1, "fb": 1}
        conn.commit_offsets()
        # pyklog-consumer-groups sees the committed offsets, log end offsets and owners
        from pyklog.connector.cli.consumer_groups import main

        assert main(["--zookeeper", zk_chroot, "--list"]) == 0
        assert capsys.readouterr().out.split() == ["filtered"]
        assert main(["--zookeeper", zk_chroot, "--describe", "--group", "filtered"]) == 0
        lines = [ln for ln in capsys.readouterr().out.splitlines() if ln]
        assert lines[0].split() == [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
        ]
        rows = [ln.split()[1:7] for ln in lines[1:]]
        cid = conn.consumer_id
        assert rows == [
            ["fa", "0", "3", "3", "0", cid],
            ["fa", "1", "3", "3", "0", cid],
            ["fb", "0", "2", "2", "0", cid],
            ["fb", "1", "2", "2", "0", cid],
            ["fb", "2", "2", "2", "0", cid],
        ]
        produce(producer, "fa", 1, 4, "more")
        assert main(["--zookeeper", zk_chroot, "--describe", "--group", "filtered"]) == 0
        assert capsys.readouterr().out.splitlines()[2].split()[1:7] == ["fa", "0", "3", "7", "4", cid]
        assert main(["--zookeeper", zk_chroot, "--describe", "--group", "nope"]) == 1
        assert "Consumer group 'nope' does not exist" in capsys.readouterr().err
    finally:
        conn.shutdown()
    assert list(stream) == []  # shut down: iteration ends for good


def test_offsets_reset_commit_and_resume(zk_chroot, broker, client, producer, capsys):
    client.create_topic("r", 2)
    produce(producer, "r", 2, 5, "a")
    base = {
        "zookeeper.connect": zk_chroot,
        "group.id": "resume",
        "consumer.timeout.ms": 300,
        "zookeeper.session.timeout.ms": 4000,
        "offsets.storage": "kafka",
        "auto.commit.enable": "false",
    }
    # largest: only what is produced after the consumer started
    c1 = ConsumerConnector(dict(base, **{"auto.offset.reset": "largest"}))
    try:
        streams = c1.create_message_streams({"r": 2})
        assert len(streams["r"]) == 2
        assert c1.wait_stable(30)
        wait_for(lambda: all(i.fetch_offset is not None for i in c1._infos.values()) and len(c1._infos) == 2, 30)
        produce(producer, "r", 2, 1, "b")
        got = []
        wait_for(lambda: [got.extend(s) for s in streams["r"]] and len(got) >= 2, 30)
        assert sorted((r.partition, r.offset) for r in got) == [(0, 5), (1, 5)]
        # each partition is read by exactly one of the two streams
        assert {r.partition for r in streams["r"][0]} & {r.partition for r in streams["r"][1]} == set()
        assert c1.commit_offsets() == {("r", 0): 6, ("r", 1): 6}
        assert c1.commit_offsets() == {}
    finally:
        c1.shutdown()
    assert client.fetch_committed("resume", [("r", 0), ("r", 1)]) == {("r", 0): 6, ("r", 1): 6}
    from pyklog.connector.cli.consumer_groups import main

    assert (
        main(
            [
                "--zookeeper",
                zk_chroot,
                "--bootstrap-server",
                broker.bootstrap,
                "--describe",
                "--group",
                "resume",
                "--offsets-storage",
                "kafka",
            ]
        )
        == 0
    )
    out = [ln for ln in capsys.readouterr().out.splitlines() if ln]
    assert [ln.split()[1:7] for ln in out[1:]] == [["r", "0", "6", "6", "0", "-"], ["r", "1", "6", "6", "0", "-"]]
    produce(producer, "r", 2, 2, "c")
    c2 = ConsumerConnector(
        dict(base, **{"auto.offset.reset": "smallest", "auto.commit.enable": "true", "auto.commit.interval.ms": 200})
    )
    try:
        streams = c2.create_message_streams({"r": 1})
        got = []
        wait_for(lambda: got.extend(streams["r"][0]) or len(got) >= 4, 30)
        assert sorted((r.partition, r.offset) for r in got) == [(0, 6), (0, 7), (1, 6), (1, 7)]
        wait_for(
            lambda: client.fetch_committed("resume", [("r", 0), ("r", 1)]) == {("r", 0): 8, ("r", 1): 8},
            10,
            message="auto commit",
        )
    finally:
        c2.shutdown()
    # auto.offset.reset=none and nothing committed: the reader gets the error
    c3 = ConsumerConnector(dict(base, **{"group.id": "never", "auto.offset.reset": "none"}))
    try:
        [stream] = c3.create_message_streams({"r": 1})["r"]
        with pytest.raises(
            OffsetOutOfRangeError, match="no committed offset in group never and auto.offset.reset=none"
        ):
            wait_for(lambda: list(stream) and False, 20)
    finally:
        c3.shutdown()
