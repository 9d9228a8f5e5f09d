"""Helpers of the transaction tests: read a topic to its end with confluent-kafka or pyklog, with
either isolation level, and a transactional pyklog producer in a child process
(tests/integration/transaction_producer_proc.py) that a test can SIGKILL."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
TXN_PROPS = {"transaction.state.log.num.partitions": "4"}


def child_parser(*required: str) -> argparse.ArgumentParser:
    """The parser of a child process of these tests (tests/integration/clients/transaction_copier_proc.py,
    tests/integration/spark/sink_exactly_once_driver.py): each of ``required`` a string option it cannot run without."""
    ap = argparse.ArgumentParser()
    for option in required:
        ap.add_argument(option, required=True)
    return ap


def two_brokers(broker_factory, **props):
    """Brokers 0 and 1 (``props`` on top of the defaults) on ports that survive a restart, once
    broker 0's Metadata lists both: ``(b0, b1)``."""
    from pyklog.broker.protocol import ApiKey
    from tests.support import Wire, stable_port, wait_for

    b0 = broker_factory(0, port=stable_port(), **props)
    b1 = broker_factory(1, port=stable_port(), **props)
    with Wire(b0.port) as w:
        wait_for(
            lambda: (
                len(w.request(ApiKey.METADATA, 5, {"topics": [], "allow_auto_topic_creation": False})["brokers"]) == 2
            ),
            message="two brokers",
        )
    return b0, b1


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
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "enable.partition.eof": True,
        }
    )
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


def read_confluent_to_eof(
    bootstrap: str, topic: str, partitions: int, isolation: str = "read_committed", timeout: float = 30.0
) -> dict[int, list[bytes]]:
    """A confluent-kafka (librdkafka) consumer assigned every partition of ``topic`` from the
    beginning, read until each partition reports EOF (its high watermark; for read_committed its
    last stable offset): ``{partition: [value, ...]}`` in offset order.  Fails the test when a
    partition has not reached its end within ``timeout``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"eof-{uuid.uuid4().hex[:6]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    eof: set[int] = set()
    deadline = time.monotonic() + timeout
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        while len(eof) < partitions:
            assert time.monotonic() < deadline, (
                f"reading {topic} ({isolation}) timed out: no EOF on {sorted(set(got) - eof)} within {timeout}s"
            )
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error():
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise AssertionError(m.error())
                eof.discard(m.partition())
                got[m.partition()].append(m.value())
    finally:
        c.close()
    return got


def read_committed_values(bootstrap: str, topic: str, partitions: int, timeout: float = 30.0) -> list[bytes]:
    """What a confluent-kafka read_committed consumer delivers up to the last stable offset of every
    partition, one list (partition by partition, each in offset order)."""
    got = read_confluent_to_eof(bootstrap, topic, partitions, "read_committed", timeout)
    return [v for p in sorted(got) for v in got[p]]


_OPEN_TRANSACTION = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    bootstrap, tid, topic, timeout_ms = sys.argv[1:5]
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid,
                  "transaction.timeout.ms": int(timeout_ms), "linger.ms": 5})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(25):
        p.produce(topic, value=b"open%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    print("produced", flush=True)
    sys.stdin.read()   # wait to be killed
""")


def sigkill_in_open_transaction(bootstrap: str, tid: str, topic: str, transaction_timeout_ms: int) -> None:
    """A confluent-kafka transactional producer in a child process writes ``open0`` .. ``open24``
    (alternately to partitions 0 and 1 of ``topic``) in a transaction, is acknowledged, and is
    SIGKILLed before it ends the transaction: the transaction stays open until the coordinator
    aborts it after ``transaction_timeout_ms``."""
    proc = subprocess.Popen(
        [sys.executable, "-c", _OPEN_TRANSACTION, bootstrap, tid, topic, str(transaction_timeout_ms)],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
    )
    try:
        assert proc.stdout.readline().strip() == b"produced"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()


class ProducerProc:
    """tests/integration/transaction_producer_proc.py in a child process; its stdout lines are collected."""

    def __init__(self, *args):
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "transaction_producer_proc.py"), *map(str, args)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
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
