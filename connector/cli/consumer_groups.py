"""``pyklog-consumer-groups``: list ZooKeeper consumer groups and describe their offsets and owners
(Kafka's kafka-consumer-groups.sh / ConsumerOffsetChecker for ZooKeeper-based groups).

    pyklog-consumer-groups --zookeeper host:port[/chroot] --list
    pyklog-consumer-groups --zookeeper ... [--bootstrap-server host:port] --describe --group G
                           [--offsets-storage zookeeper|kafka]

``--describe`` prints one row per partition of every topic the group consumes (its members'
subscriptions, its owner registry and its committed offsets)::

    TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  OWNER

CURRENT-OFFSET is the committed next offset to consume ("-" if none), LOG-END-OFFSET comes from the
partition leader (ListOffsets; brokers found through ``--bootstrap-server`` or the ZooKeeper
registry), OWNER is the consumer id holding the partition's owner node ("-" if none).  Errors print
one line ``Error: ...`` on stderr and exit with 1.
"""
from __future__ import annotations

import argparse
import logging
import sys

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from pyklog.broker.cli import add_version_argument
from pyklog.broker.errors import PyklogError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.connector.group import parse_registration, partition_count, topics_of


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="pyklog-consumer-groups", description="List and describe ZooKeeper consumer groups.")
    add_version_argument(p)
    p.add_argument("--zookeeper", required=True, metavar="HOST:PORT[/CHROOT]", help="ZooKeeper of the cluster")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="brokers (default: from ZooKeeper)")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list the groups registered in /consumers")
    action.add_argument("--describe", action="store_true", help="offsets, log end offsets, lag and owners")
    p.add_argument("--group", help="the group to describe")
    p.add_argument("--offsets-storage", choices=("zookeeper", "kafka"), default="zookeeper",
                   help="where the group commits offsets (offsets.storage)")
    return p


def _children(zk, path):
    try:
        return sorted(zk.retry(zk.get_children, path))
    except NoNodeError:
        return []


def list_groups(zk) -> list[str]:
    return _children(zk, paths.CONSUMERS)


def describe_group(zk, group: str, offsets_storage: str = "zookeeper", client=None) -> list[tuple]:
    """Rows ``(topic, partition, current_offset|None, log_end_offset|None, lag|None, owner|None)``."""
    if zk.retry(zk.exists, paths.consumer_group(group)) is None and offsets_storage == "zookeeper":
        raise ZooKeeperError(f"consumer group {group!r} does not exist (no {paths.consumer_group(group)})")
    all_topics = _children(zk, paths.BROKER_TOPICS)
    topics = set(_children(zk, paths.partition_owners(group)))
    topics.update(_children(zk, paths.consumer_offsets(group)))
    for cid in _children(zk, paths.consumer_ids(group)):
        try:
            data, _ = zk.retry(zk.get, paths.consumer_id(group, cid))
            pattern, sub = parse_registration(data, paths.consumer_id(group, cid))
            topics.update(topics_of(pattern, sub, all_topics))
        except (NoNodeError, ValueError, PyklogError):
            continue
    committed_kafka = {}
    if offsets_storage == "kafka":
        if client is None:
            raise PyklogError("--offsets-storage kafka needs a reachable broker")
        committed_kafka = client.fetch_committed(group, None)
        topics.update(t for t, _ in committed_kafka)
    counts = {}
    for t in sorted(topics):
        try:
            data, _ = zk.retry(zk.get, paths.topic(t))
            counts[t] = partition_count(data, t)
        except (NoNodeError, ValueError):
            counts[t] = 0
    tps = [(t, p) for t in sorted(counts) for p in range(counts[t])]
    # committed offsets
    if offsets_storage == "kafka":
        committed = {tp: off for tp, off in committed_kafka.items() if off is not None}
    else:
        from pyklog.connector.offsets import ZooKeeperOffsetStore

        stored = set(tps)
        for t in counts:  # also offsets of partitions the topic no longer has
            stored.update((t, int(p)) for p in _children(zk, paths.consumer_offsets(group, t)) if p.isdigit())
        committed = ZooKeeperOffsetStore(zk).fetch(group, sorted(stored))
    log_end = {}
    if client is not None and tps:
        from pyklog.connector.client import LATEST

        try:
            got = client.list_offsets({tp: LATEST for tp in tps}, timeout_s=10)
            log_end = {tp: off for tp, off in got.items() if off is not None}
        except PyklogError as e:
            print(f"Warning: log end offsets unavailable: {e}", file=sys.stderr)
    rows = []
    for tp in sorted(set(tps) | set(committed)):
        t, p = tp
        try:
            owner = zk.retry(zk.get, paths.partition_owner(group, t, p))[0].decode(errors="replace")
        except NoNodeError:
            owner = None
        cur = committed.get(tp)
        end = log_end.get(tp)
        lag = end - cur if cur is not None and end is not None else None
        rows.append((t, p, cur, end, lag, owner))
    return rows


def format_rows(rows) -> str:
    header = ("TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "OWNER")
    table = [header] + [tuple("-" if v is None else str(v) for v in r) for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in table)


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection retries are reported as one Error line
    try:
        args = build_parser().parse_args(argv)
        if args.describe and not args.group:
            raise _UsageError("--describe needs --group")
    except _UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    zk = KazooClient(hosts=args.zookeeper)
    try:
        zk.start(timeout=15)
    except Exception as e:
        print(f"Error: cannot connect to ZooKeeper at {args.zookeeper}: {e}", file=sys.stderr)
        zk.close()
        return 1
    client = None
    try:
        if args.list:
            for g in list_groups(zk):
                print(g)
            return 0
        from pyklog.connector.client import ClusterClient

        try:
            client = ClusterClient(args.bootstrap_server or None,
                                   None if args.bootstrap_server else args.zookeeper,
                                   client_id="pyklog-consumer-groups", request_timeout_ms=10000)
        except PyklogError as e:
            if args.offsets_storage == "kafka":
                raise
            print(f"Warning: no broker client ({e}); log end offsets unavailable", file=sys.stderr)
        rows = describe_group(zk, args.group, args.offsets_storage, client)
        print(format_rows(rows))
        return 0
    except PyklogError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    finally:
        if client is not None:
            client.close()
        zk.stop()
        zk.close()


if __name__ == "__main__":
    sys.exit(main())
