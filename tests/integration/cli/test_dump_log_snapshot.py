"""pyklog-dump-log of a real broker's producer state ``.snapshot`` (Kafka's DumpLogSegments line per
producer id); subprocesses.

An idempotent producer (confluent-kafka) and a transactional one whose transaction is still open
write to one partition; after the broker's clean shutdown the snapshot holds both: the idempotent
one's last sequence and offset, the transactional one's currentTxnFirstOffset.  The values are
checked against the batches pyklog-dump-log reads from the .log.  A damaged snapshot is reported
(exit 1), nothing is printed for it.  The ``leader-epoch-checkpoint`` dump (no broker) is in
tests/unit/cli/test_dump_log_snapshot.py.
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys

BIN = os.path.dirname(sys.executable)


def dump(*args):
    return subprocess.run([os.path.join(BIN, "pyklog-dump-log"), *args], capture_output=True, text=True, timeout=60)


def test_snapshot_of_a_real_broker(broker_factory):
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    b = broker_factory(0)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.create_topics([NewTopic("snap", 1, 1)])["snap"].result(30)
    idem = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True, "linger.ms": 0})
    acked = []
    for i in range(5):
        idem.produce("snap", value=b"i%d" % i, on_delivery=lambda e, m: e is None and acked.append(m.offset()))
        idem.flush(30)
    assert acked == [0, 1, 2, 3, 4]
    txn = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "snap-tx", "linger.ms": 0})
    txn.init_transactions(30)
    txn.begin_transaction()
    txn.produce("snap", value=b"open")
    assert txn.flush(30) == 0
    b.stop()  # clean shutdown: every log writes a snapshot at its log end offset
    log_dir = os.path.join(b.log_dir, "data", "snap-0")
    snaps = sorted(glob.glob(os.path.join(log_dir, "*.snapshot")))
    assert snaps and os.path.basename(snaps[-1]) == "00000000000000000006.snapshot", snaps

    batches = dump("--files", os.path.join(log_dir, "00000000000000000000.log"))
    assert batches.returncode == 0, batches.stderr
    pids = [int(m) for m in re.findall(r"producerId: (\d+)", batches.stdout)]
    idem_pid, txn_pid = pids[0], pids[-1]
    assert pids == [idem_pid] * 5 + [txn_pid] and idem_pid != txn_pid

    r = dump("--files", snaps[-1])
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dumping {snaps[-1]}"
    by_pid = {int(re.match(r"producerId: (\d+)", ln).group(1)): ln for ln in lines[1:]}
    assert set(by_pid) == {idem_pid, txn_pid}
    assert re.fullmatch(
        rf"producerId: {idem_pid} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong.empty "
        r"lastTimestamp: \d{13} firstSequence: 4 lastSequence: 4 lastOffset: 4 offsetDelta: 0 timestamp: \d{13}",
        by_pid[idem_pid],
    ), by_pid[idem_pid]
    assert re.fullmatch(
        rf"producerId: {txn_pid} producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset: OptionalLong\[5\] "
        r"lastTimestamp: \d{13} firstSequence: 0 lastSequence: 0 lastOffset: 5 offsetDelta: 0 timestamp: \d{13}",
        by_pid[txn_pid],
    ), by_pid[txn_pid]

    # a damaged snapshot: CRC mismatch reported, exit 1, no entry printed
    with open(snaps[-1], "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"\xff\xff\xff")
    r = dump("--files", snaps[-1])
    assert r.returncode == 1 and "CRC-32C mismatch" in r.stderr and "producerId" not in r.stdout
