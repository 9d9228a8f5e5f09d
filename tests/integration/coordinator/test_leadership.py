"""Leadership of the coordinator partitions changing at run time, on a real broker process.

The state znodes of ``__consumer_offsets-0`` and ``__transaction_state-0`` are rewritten by hand
as the controller will rewrite them (leader elsewhere at epoch +1, back here at epoch +1 again;
and a new epoch with the same leader), while a kafka-python consumer commits offsets of a group
in a loop and a kafka-python transactional producer runs transactions with
``send_offsets_to_transaction``.  The broker learns of each rewrite through its partition-state
watch, as it learns of the controller's elections.

Counted: offset commits acknowledged vs the committed offsets read back (nothing acknowledged is
lost), transactions committed / aborted vs the records a read_committed consumer reads (each
committed transaction's records exactly once, nothing of an aborted one) and the transactional
group's committed offset; the same again after a SIGKILL and restart (reload from the logs).
"""

from __future__ import annotations

import threading
import time

from pyklog.broker.zk import paths
from pyklog.broker.zk.znodes import (
    LeaderAndIsr,
    decode_partition_state,
    encode_partition_state,
)
from tests.support import Wire, create_topic, kazoo_client, wait_for

OFFSETS, TXN_STATE = "__consumer_offsets", "__transaction_state"
IN_PARTS = 3
PER_TXN = 3


def move(zk, topic: str, leader: int, epoch: int) -> None:
    path = paths.partition_state(topic, 0)
    old = decode_partition_state(zk.get(path)[0], path)
    zk.set(path, encode_partition_state(LeaderAndIsr(leader, epoch, (leader,), old.controller_epoch)))


def epoch_of(zk, topic: str) -> int:
    path = paths.partition_state(topic, 0)
    return decode_partition_state(zk.get(path)[0], path).leader_epoch


class Committer(threading.Thread):
    """Commits offset i to every partition of ``in`` for group ``cg``, i = 1, 2, ...; counts acks."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop_ev = threading.Event()
        self.attempted = self.acked = self.errors = 0

    def run(self):
        from kafka import KafkaConsumer, TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        c = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id="cg", enable_auto_commit=False)
        try:
            i = 0
            while not self.stop_ev.is_set():
                i += 1
                self.attempted = i
                try:
                    c.commit({TopicPartition("in", p): OffsetAndMetadata(i, "", -1) for p in range(IN_PARTS)})
                    self.acked = i
                except KafkaError:
                    self.errors += 1
                    time.sleep(0.1)
                time.sleep(0.02)
        finally:
            c.close()


class Transactor(threading.Thread):
    """Transaction n: PER_TXN records ``n-j`` to ``out`` and offset n of ``in``-0 for group ``tg``."""

    def __init__(self, bootstrap):
        super().__init__(daemon=True)
        self.bootstrap = bootstrap
        self.stop_ev = threading.Event()
        self.committed: list[int] = []
        self.aborted: list[int] = []
        self.errors: list[str] = []
        self.fatal: BaseException | None = None

    def run(self):
        from kafka import KafkaProducer, TopicPartition
        from kafka.errors import KafkaError
        from kafka.structs import OffsetAndMetadata

        p = KafkaProducer(bootstrap_servers=self.bootstrap, transactional_id="tx-lead", transaction_timeout_ms=60000)
        try:
            p.init_transactions()
            n = 0
            while not self.stop_ev.is_set():
                n += 1
                p.begin_transaction()
                try:
                    for j in range(PER_TXN):
                        p.send("out", f"{n}-{j}".encode())
                    p.send_offsets_to_transaction({TopicPartition("in", 0): OffsetAndMetadata(n, "", -1)}, "tg")
                    p.commit_transaction()
                    self.committed.append(n)
                except KafkaError as e:
                    self.errors.append(repr(e))
                    p.abort_transaction()
                    self.aborted.append(n)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.fatal = e
        finally:
            p.close(10)


def committed_offsets(bootstrap, group, parts) -> list[int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        return [tp.offset for tp in c.committed([TopicPartition("in", p) for p in range(parts)], timeout=30)]
    finally:
        c.close()


def read_committed(bootstrap) -> list[str]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "reader",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    c.assign([TopicPartition("out", 0, OFFSET_BEGINNING)])
    out, deadline = [], time.monotonic() + 60
    try:
        while True:
            assert time.monotonic() < deadline, "timed out reading out"
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                raise AssertionError(m.error())
            out.append(m.value().decode())
    finally:
        c.close()


def check(b, committer, tx):
    offs = committed_offsets(b.bootstrap, "cg", IN_PARTS)
    # every acknowledged commit is there; a later one may be there too (written, answer lost)
    assert len(set(offs)) == 1 and committer.acked <= offs[0] <= committer.attempted, (
        offs,
        committer.acked,
        committer.attempted,
    )
    values = read_committed(b.bootstrap)
    want = [f"{n}-{j}" for n in tx.committed for j in range(PER_TXN)]
    assert sorted(values) == sorted(want) and len(values) == len(set(values)), (len(values), len(want))
    assert committed_offsets(b.bootstrap, "tg", 1) == [max(tx.committed)]


def test_coordinator_leadership_moves_while_committing(broker_factory, zk_chroot):
    b = broker_factory(
        0,
        offsets_topic_num_partitions=1,
        transaction_state_log_num_partitions=1,
        transaction_state_log_replication_factor=1,
        group_initial_rebalance_delay_ms=0,
    )
    with Wire(b.port) as w:
        assert create_topic(w, "in", IN_PARTS)["error_code"] == 0
        assert create_topic(w, "out", 1)["error_code"] == 0
    # both coordinator topics created on first use, then a restart (their logs are reloaded)
    assert committed_offsets(b.bootstrap, "cg", 1) == [-1001]
    from confluent_kafka import Producer

    warm = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "warm-up"})
    warm.init_transactions(60)
    del warm
    b.stop()
    b.start()

    zk = kazoo_client(zk_chroot)
    committer, tx = Committer(b.bootstrap), Transactor(b.bootstrap)
    committer.start()
    tx.start()
    try:
        wait_for(
            lambda: (committer.acked >= 5 and len(tx.committed) >= 2) or tx.fatal,
            timeout=60,
            message=f"workers running (commits {committer.acked}/{committer.attempted}, txns {tx.committed}, "
            f"errors {tx.errors[-3:]})",
        )
        assert tx.fatal is None, repr(tx.fatal)
        for _cycle in range(2):
            for topic, gone in (
                (OFFSETS, f"no longer the coordinator of {OFFSETS}-0 at epoch"),
                (TXN_STATE, f"no longer the transaction coordinator of {TXN_STATE}-0 at epoch"),
            ):
                e = epoch_of(zk, topic)
                loaded = b.output().count(f"loaded {topic}-0")
                dropped = b.output().count(gone)
                move(zk, topic, 1, e + 1)  # led by broker 1 (not live): no coordinator
                wait_for(lambda: b.output().count(gone) > dropped, timeout=30, message=f"{topic} unloaded")
                acked, txns = committer.acked, len(tx.committed)
                time.sleep(1.0)  # the clients meet NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE meanwhile
                move(zk, topic, 0, e + 2)  # back here at a new epoch
                wait_for(
                    lambda: b.output().count(f"loaded {topic}-0") > loaded, timeout=30, message=f"{topic} reloaded"
                )
                wait_for(
                    lambda: (committer.acked > acked + 3 and len(tx.committed) > txns + 1) or tx.fatal,
                    timeout=90,
                    message=f"progress after {topic} moved back "
                    f"(commits acked {acked} -> {committer.acked}, txns {txns} -> {len(tx.committed)})",
                )
                assert tx.fatal is None, repr(tx.fatal)
        # a new epoch with the same leader (a re-election): reload in place
        for topic in (OFFSETS, TXN_STATE):
            loaded = b.output().count(f"loaded {topic}-0")
            acked, txns = committer.acked, len(tx.committed)
            move(zk, topic, 0, epoch_of(zk, topic) + 1)
            wait_for(
                lambda: b.output().count(f"loaded {topic}-0") > loaded, timeout=30, message=f"{topic} reloaded in place"
            )
            wait_for(
                lambda: (committer.acked > acked + 3 and len(tx.committed) > txns + 1) or tx.fatal,
                timeout=90,
                message=f"progress after {topic}'s new epoch",
            )
    finally:
        committer.stop_ev.set()
        tx.stop_ev.set()
        committer.join(60)
        tx.join(120)
        zk.stop()
        zk.close()
    assert tx.fatal is None, repr(tx.fatal)
    assert not committer.is_alive() and not tx.is_alive()
    check(b, committer, tx)
    # and after a crash: everything reloaded from the logs at the current epochs
    b.kill()
    b.start()
    check(b, committer, tx)
    assert "Traceback" not in b.output(), b.output()[-5000:]
    print(
        f"commits acked {committer.acked} of {committer.attempted} ({committer.errors} refused); "
        f"transactions committed {len(tx.committed)}, aborted {len(tx.aborted)}"
    )
