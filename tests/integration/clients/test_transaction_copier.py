"""Exactly-once consume-transform-produce with stock clients under SIGKILL (Kafka's
tests/kafkatest/tests/core/transactions_test.py criterion).

Input topic A (3 partitions) holds N records with unique values, written before.  The copier
(tests/integration/clients/transaction_copier_proc.py: confluent-kafka read_committed consumer without auto commit, a
transactional producer, ``send_offsets_to_transaction`` with the consumer's group metadata, one
commit per batch) copies A to B partition by partition.  The copier process is SIGKILLed at random
moments and restarted with the same transactional.id; in the second test the broker is SIGKILLed
and restarted once as well.  At the end B read with read_committed must equal A exactly: no
record missing, none duplicated, the same order in every partition.  The counts (copied,
duplicates, missing, restarts) are printed.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.integration.transaction_support import read_confluent_to_eof
from tests.support import Wire, create_topic, stable_port

HERE = os.path.dirname(os.path.abspath(__file__))
COPIER = os.path.join(HERE, "transaction_copier_proc.py")
N = 20_000
PARTITIONS = 3
#: the copier pauses this long between send_offsets_to_transaction and commit_transaction, so a
#: kill "while the offsets are pending" lands there for sure
HOLD_MS = 40


class Copier:
    """One copier process; its stdout lines are collected by a reader thread."""

    def __init__(self, bootstrap, src, dst, group, txn_id, batch, hold_ms=HOLD_MS, subscribe=None):
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                COPIER,
                "--bootstrap",
                bootstrap,
                "--input",
                src,
                "--output",
                dst,
                "--group",
                group,
                "--transactional-id",
                txn_id,
                "--batch",
                str(batch),
                "--hold-before-commit-ms",
                str(hold_ms),
            ]
            + (["--subscribe", subscribe] if subscribe else []),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    def count(self, prefix) -> int:
        return sum(1 for line in self.lines if line.startswith(prefix))

    def wait_count(self, prefix, n, timeout) -> bool:
        """Wait until ``n`` lines start with ``prefix`` (False: timeout or the process ended)."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.count(prefix) < n:
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    return False
                self._changed.wait(min(left, 0.1))
            return True

    def has(self, prefix) -> bool:
        return any(line.startswith(prefix) for line in self.lines)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        self._reader.join(5)

    def wait(self, timeout):
        rc = self.proc.wait(timeout)
        self._reader.join(5)
        return rc


def write_input(bootstrap, topic) -> dict[int, list[bytes]]:
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 20})
    expected: dict[int, list[bytes]] = {q: [] for q in range(PARTITIONS)}
    for i in range(N):
        value = b"rec-%06d" % i
        q = i % PARTITIONS
        expected[q].append(value)
        while True:
            try:
                p.produce(topic, value=value, key=b"%d" % i, partition=q)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    return expected


def compare(expected, got) -> dict:
    copied = sum(len(v) for v in got.values())
    duplicates = missing = out_of_order = 0
    for q in range(PARTITIONS):
        seen: dict[bytes, int] = {}
        for v in got[q]:
            seen[v] = seen.get(v, 0) + 1
        duplicates += sum(n - 1 for n in seen.values())
        missing += sum(1 for v in expected[q] if v not in seen)
        out_of_order += 0 if got[q] == expected[q] else 1
    return {"copied": copied, "duplicates": duplicates, "missing": missing, "partitions_differing": out_of_order}


def run_copy(
    broker,
    kills: int,
    broker_kill_at: int | None,
    seed: int,
    batch: int = 400,
    deadline_s: float = 240,
    subscribe: str | None = None,
):
    """Copy A to B with ``kills`` random SIGKILLs of the copier (and one broker SIGKILL before the
    ``broker_kill_at``-th copier kill); returns (expected, counts)."""
    rng = random.Random(seed)
    src, dst = f"txA-{uuid.uuid4().hex[:6]}", f"txB-{uuid.uuid4().hex[:6]}"
    group, txn_id = f"copier-{uuid.uuid4().hex[:6]}", f"copier-txn-{uuid.uuid4().hex[:6]}"
    with Wire(broker.port) as w:
        assert create_topic(w, src, PARTITIONS)["error_code"] == 0
        assert create_topic(w, dst, PARTITIONS)["error_code"] == 0
    t0 = time.monotonic()
    expected = write_input(broker.bootstrap, src)
    t_input = time.monotonic() - t0
    restarts = copier_kills = exits = broker_kills = pending_kills = 0
    deadline = time.monotonic() + deadline_s
    events = ["copier"] * kills
    if broker_kill_at is not None:
        events.insert(broker_kill_at, "broker")
    copier = Copier(broker.bootstrap, src, dst, group, txn_id, batch, subscribe=subscribe)
    done = False
    try:
        for i, event in enumerate(events):
            if i % 2 == 1:
                # while the offsets are pending: after send_offsets_to_transaction, before the commit
                copier.wait_count("OFFSETS_SENT", rng.choice([1, 2, 3]), 30)
                pending_kills += 1
            else:
                # a random moment: before this instance's first commit, or after a few of them
                copier.wait_count("COMMITTED ", rng.choice([0, 1, 2, 3]), 30)
                time.sleep(rng.uniform(0.0, 0.4))
            if copier.proc.poll() is not None:  # it stopped on its own (an error during a broker outage)
                copier.wait(5)
                assert copier.proc.returncode in (0, 3), copier.lines[-20:]
                if copier.proc.returncode == 0:
                    done = True
                    break
                exits += 1
                restarts += 1
                copier = Copier(broker.bootstrap, src, dst, group, txn_id, batch, subscribe=subscribe)
            if event == "broker":
                broker.kill()
                broker_kills += 1
                broker.start()
                continue
            copier.kill()
            copier_kills += 1
            restarts += 1
            copier = Copier(broker.bootstrap, src, dst, group, txn_id, batch, subscribe=subscribe)
        while not done:
            rc = copier.wait(max(1.0, deadline - time.monotonic()))
            if rc == 0:
                break
            assert rc == 3, copier.lines[-20:]
            assert time.monotonic() < deadline, f"copy did not finish; last output: {copier.lines[-20:]}"
            exits += 1
            restarts += 1
            copier = Copier(broker.bootstrap, src, dst, group, txn_id, batch, subscribe=subscribe)
    finally:
        copier.kill()
    t_copy = time.monotonic() - t0 - t_input
    got = read_confluent_to_eof(broker.bootstrap, dst, PARTITIONS, timeout=60)
    counts = compare(expected, got)
    counts.update(
        mode="subscribe" if subscribe else "assign",
        restarts=restarts,
        copier_kills=copier_kills,
        kills_while_offsets_pending=pending_kills,
        copier_error_exits=exits,
        broker_kills=broker_kills,
        input_s=round(t_input, 1),
        copy_s=round(t_copy, 1),
    )
    uncommitted = read_confluent_to_eof(broker.bootstrap, dst, PARTITIONS, "read_uncommitted", timeout=60)
    counts["aborted_or_open_records_in_log"] = sum(len(v) for v in uncommitted.values()) - counts["copied"]
    print(f"\ncopier counts: {counts}")
    return expected, got, counts


def _check(expected, got, counts):
    assert counts["missing"] == 0 and counts["duplicates"] == 0, counts
    assert counts["copied"] == N, counts
    for q in range(PARTITIONS):
        assert got[q] == expected[q], f"partition {q} differs (order): {counts}"


@pytest.mark.parametrize("mode", ["assign", "subscribe"])
def test_copier_sigkilled_five_times_copies_exactly_once(broker_factory, mode):
    broker = broker_factory(0, port=stable_port())
    expected, got, counts = run_copy(
        broker, kills=6, broker_kill_at=None, seed=1, subscribe="copier-1" if mode == "subscribe" else None
    )
    assert counts["copier_kills"] >= 5, counts
    _check(expected, got, counts)


def test_copier_with_a_broker_sigkill_copies_exactly_once(broker_factory):
    broker = broker_factory(0, port=stable_port())
    expected, got, counts = run_copy(broker, kills=5, broker_kill_at=3, seed=2)
    assert counts["broker_kills"] == 1 and counts["copier_kills"] >= 5, counts
    _check(expected, got, counts)
