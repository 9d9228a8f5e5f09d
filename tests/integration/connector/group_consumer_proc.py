"""A consumer process for group tests: ``python tests/integration/connector/group_consumer_proc.py --zookeeper ZK --group G
--topics a,b [...]``.

It runs a :class:`connector.high_level.ConsumerConnector` with one stream per topic, iterates the
streams in one thread (``consumer.timeout.ms`` switches between them), and for every record prints
``CONSUMED <topic> <partition> <offset> <value>`` (flushed) and then commits synchronously
(auto commit is off), printing ``COMMITTED <topic> <partition> <next offset>`` for what the commit
wrote.  It prints ``READY`` once it is registered, ``OWNS <t-p,...>`` whenever its
assignment changes, and ``CLOSED`` after a graceful shutdown on SIGTERM.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from pyklog.connector.high_level import ConsumerConnector  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--zookeeper", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topics", required=True, help="comma-separated")
    ap.add_argument("--consumer-id")
    ap.add_argument("--strategy", default="range")
    ap.add_argument("--offsets-storage", default="zookeeper")
    ap.add_argument("--session-timeout-ms", type=int, default=4000)
    ap.add_argument("--rebalance-backoff-ms", type=int, default=500)
    ap.add_argument("--rebalance-max-retries", type=int, default=20)
    ap.add_argument("--log-level", default="WARNING")
    args = ap.parse_args(argv)
    logging.basicConfig(
        level=args.log_level, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    conn = ConsumerConnector(
        {
            "zookeeper.connect": args.zookeeper,
            "group.id": args.group,
            "consumer.id": args.consumer_id,
            "partition.assignment.strategy": args.strategy,
            "offsets.storage": args.offsets_storage,
            "auto.commit.enable": False,
            "auto.offset.reset": "smallest",
            "consumer.timeout.ms": 100,
            "zookeeper.session.timeout.ms": args.session_timeout_ms,
            "rebalance.backoff.ms": args.rebalance_backoff_ms,
            "rebalance.max.retries": args.rebalance_max_retries,
        }
    )
    streams = conn.create_message_streams(dict.fromkeys(args.topics.split(","), 1))
    out = sys.stdout
    print("READY", flush=True)
    owned = None
    while not stop.is_set():
        now = conn.assignment()
        if now != owned:
            owned = now
            print("OWNS " + ",".join(f"{t}-{p}" for t, p in sorted(now)), flush=True)
        for topic in sorted(streams):
            for record in streams[topic][0]:
                value = (record.value or b"").decode(errors="replace")
                out.write(f"CONSUMED {record.topic} {record.partition} {record.offset} {value}\n")
                out.flush()
                for (t, p), off in sorted(conn.commit_offsets().items()):
                    out.write(f"COMMITTED {t} {p} {off}\n")
                out.flush()
                if stop.is_set():
                    break
    conn.shutdown()
    print("CLOSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
