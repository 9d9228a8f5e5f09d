"""Helpers of the transaction tests: read a topic to its end with confluent-kafka or pyklog, with
either isolation level, and a transactional pyklog producer in a child process
(tests/txn_producer_proc.py) that a test can SIGKILL."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TXN_PROPS = {"transaction.state.log.num.partitions": "4"}


def end_offsets(bootstrap: str, topic: str) -> dict:
    """``{partition: high watermark}``."""
    from pyklog.connector.client import LATEST, ClusterClient

    with ClusterClient(bootstrap) as c:
        parts = c.partitions_for(topic)
        return {p: off for (_t, p), off in c.list_offsets({(topic, p): LATEST for p in parts}).items()}


def visible_now(bootstrap: str, topic: str) -> dict:
    """What a read_committed reader can see at this moment (pyklog, up to the LSO)."""
    return read_pyklog(bootstrap, topic, "read_committed", to_lso=True)


def read_confluent(bootstrap: str, topic: str, isolation: str, timeout: float = 30.0) -> dict:
    """Every record of ``topic`` read by a confluent-kafka consumer with ``isolation`` (assigned
    partitions, from the beginning, until its position reaches the high watermark of each):
    ``{partition: [value, ...]}`` in offset order."""
    from confluent_kafka import Consumer, TopicPartition

    ends = end_offsets(bootstrap, topic)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "isolation.level": isolation, "enable.partition.eof": True})
    try:
        c.assign([TopicPartition(topic, p, 0) for p in ends])
        out: dict = {p: [] for p in ends}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out[m.partition()].append(m.value())
            pos = {tp.partition: tp.offset for tp in c.position([TopicPartition(topic, p) for p in ends])}
            if all(pos[p] >= ends[p] or (ends[p] == 0) for p in ends):
                return out
        raise AssertionError(f"confluent-kafka {isolation} did not reach {ends} in {timeout}s (at {pos})")
    finally:
        c.close()


def read_pyklog(bootstrap: str, topic: str, isolation: str, timeout: float = 30.0, *, to_lso: bool = False) -> dict:
    """The same with pyklog's SimpleConsumer: ``{partition: [value, ...]}``.  ``to_lso``: read only
    what is stable now (up to the last stable offset: an open transaction stops it)."""
    from pyklog.connector.consumer import SimpleConsumer

    ends = end_offsets(bootstrap, topic)
    out: dict = {p: [] for p in ends}
    with SimpleConsumer(bootstrap, isolation_level=isolation) as c:
        deadline = time.monotonic() + timeout
        for p, end in ends.items():
            off = 0
            while off < end:
                if time.monotonic() > deadline:
                    raise AssertionError(f"pyklog {isolation} did not reach {end} on partition {p}")
                r = c.fetch(topic, p, off)
                out[p].extend(rec.value for rec in r.records)
                if to_lso and r.next_offset >= r.last_stable_offset:
                    break
                if r.next_offset == off:
                    time.sleep(0.05)  # nothing stable yet (an open transaction holds the LSO)
                off = r.next_offset
    return out


class ProducerProc:
    """tests/txn_producer_proc.py in a child process; its stdout lines are collected."""

    def __init__(self, *args):
        self.lines: list[str] = []
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "txn_producer_proc.py"), *map(str, args)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_line(self, prefix: str, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines:
                if line.startswith(prefix):
                    return line
            if self.proc.poll() is not None and not any(line.startswith(prefix) for line in self.lines):
                self._reader.join(5)
                break
            time.sleep(0.02)
        raise AssertionError(f"no line {prefix!r} from the producer process: {self.lines[-30:]}")

    def wait(self, timeout: float = 60.0) -> int:
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(30)
        self._reader.join(5)
