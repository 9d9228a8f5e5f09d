"""A group member that "consumes" and commits, for the zombie test: ``python tests/integration/connector/group_member_proc.py
--zookeeper ZK --group G --topic T --consumer-id ID [--unfenced]``.

Every tick it takes its assignment, "reads a batch" (its position of each owned partition advances
by 10) and commits the batch's end, either through :meth:`GroupMember.commit_offsets` (fenced) or,
with ``--unfenced``, through a plain :class:`ZooKeeperOffsetStore` on the member's session (what a
commit without a fence does).  It prints ``EPOCH <n> OWNS <p,...>`` when its assignment changes and
``COMMIT <p> <offset> committed|refused|ahead`` for each partition of each commit, flushed.  A
partition it (re)gains starts at the group's committed offset.  SIGTERM stops it.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
import time

from pyklog.connector.group import GroupMember
from pyklog.connector.offsets import ZooKeeperOffsetStore


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zookeeper", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--consumer-id", required=True)
    ap.add_argument("--session-timeout-ms", type=int, default=4000)
    ap.add_argument("--unfenced", action="store_true")
    ap.add_argument("--tick-ms", type=int, default=100)
    args = ap.parse_args(argv)
    logging.basicConfig(level="WARNING", stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    m = GroupMember(
        args.zookeeper,
        args.group,
        topics=[args.topic],
        consumer_id=args.consumer_id,
        session_timeout_s=args.session_timeout_ms / 1000.0,
        rebalance_backoff_ms=200,
    )
    m.start()
    m.wait_stable(30)
    plain = ZooKeeperOffsetStore(m.zk)
    position: dict = {}
    seen = None
    while not stop.is_set():
        epoch, owned = m.epoch, sorted(m.assignment())
        if (epoch, owned) != seen:
            if seen is not None and epoch != seen[0]:
                position.clear()  # ownership was dropped: whatever we regain starts at the group's offset
            seen = (epoch, owned)
            print(f"EPOCH {epoch} OWNS " + ",".join(str(p) for _, p in owned), flush=True)
        fresh = [tp for tp in owned if tp not in position]
        if fresh:
            got = plain.fetch(args.group, fresh)
            for tp in fresh:
                position[tp] = got.get(tp, 0)
        batch = {tp: position[tp] + 10 for tp in owned}  # "read" ten records of each partition
        time.sleep(args.tick_ms / 1000.0)  # the batch is processed (SIGSTOP lands here)
        if not batch:
            continue
        if args.unfenced:
            try:
                plain.commit(args.group, batch)
                outcome = dict.fromkeys(batch, "committed")
            except Exception as e:  # noqa: BLE001
                outcome = {tp: f"error:{type(e).__name__}" for tp in batch}
        else:
            try:
                r = m.commit_offsets(batch)
            except Exception as e:  # noqa: BLE001
                outcome = {tp: f"error:{type(e).__name__}" for tp in batch}
            else:
                outcome = {
                    **dict.fromkeys(r.committed, "committed"),
                    **dict.fromkeys(r.refused, "refused"),
                    **dict.fromkeys(r.ahead, "ahead"),
                }
        for tp, what in sorted(outcome.items()):
            print(f"COMMIT {tp[1]} {batch[tp]} {what}", flush=True)
            if what == "committed":
                position[tp] = batch[tp]
    m.stop()
    print("CLOSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
