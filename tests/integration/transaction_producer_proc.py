"""A pyklog transactional producer in its own process, for tests that SIGKILL it.

txn_producer_proc.py open     BOOTSTRAP TOPIC TRANSACTIONAL_ID N TIMEOUT_MS
    init_transactions, begin, N records over the topic's partitions, flush, prints
    "flushed <n acknowledged>", then waits to be killed (the transaction stays open).
txn_producer_proc.py prepare  BOOTSTRAP TOPIC TRANSACTIONAL_ID N TIMEOUT_MS
    the same, then prepare_transaction(): prints "prepared <transactional_id> <pid> <epoch>" and
    waits to be killed.
txn_producer_proc.py complete BOOTSTRAP TRANSACTIONAL_ID PID EPOCH commit|abort
    complete_transaction() from this process: prints "completed" or "error <class> <message>".
"""

from __future__ import annotations

import sys
import time


def main() -> int:
    mode, bootstrap = sys.argv[1], sys.argv[2]
    from pyklog.connector.producer import (
        PreparedTransaction,
        Producer,
        complete_transaction,
    )

    if mode == "complete":
        tid, pid, epoch, what = sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
        try:
            complete_transaction(
                {"bootstrap.servers": bootstrap},
                PreparedTransaction(tid, pid, epoch),
                commit=what == "commit",
                timeout_s=30,
            )
        except Exception as e:  # noqa: BLE001 - reported to the test
            print(f"error {type(e).__name__} {e}", flush=True)
            return 1
        print("completed", flush=True)
        return 0
    topic, tid, n, timeout_ms = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6])
    p = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": tid, "transaction.timeout.ms": timeout_ms, "linger.ms": 5}
    )
    p.init_transactions(30)
    p.begin_transaction()
    parts = p.partitions_for(topic)
    futs = [p.send(topic, f"{tid}-{i}".encode(), partition=parts[i % len(parts)]) for i in range(n)]
    p.flush(30)
    acked = sum(1 for f in futs if f.exception() is None)
    print(f"flushed {acked}", flush=True)
    if mode == "prepare":
        prep = p.prepare_transaction(30)
        print(f"prepared {prep.transactional_id} {prep.producer_id} {prep.producer_epoch}", flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
