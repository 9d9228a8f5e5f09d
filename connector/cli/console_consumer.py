"""pyklog-console-consumer: print the records of a topic to stdout.

    pyklog-console-consumer --bootstrap-server 127.0.0.1:9092 --topic events --from-beginning
    pyklog-console-consumer --zookeeper 127.0.0.1:2181 --topic events --partition 0 --offset 42 \\
        --max-messages 10 --property print.key=true

Reads with the low-level :class:`~connector.consumer.SimpleConsumer` (no group, no committed
offsets): every partition of the topic (or only ``--partition``), from the log end (default),
the log start (``--from-beginning``) or ``--offset`` (a number, ``earliest`` or ``latest``; needs
``--partition``).  Stops after ``--max-messages`` records, or when no record arrived for
``--timeout-ms``; otherwise runs until interrupted.  Properties as Kafka's console consumer's
formatter: ``print.key``, ``print.value`` (true), ``print.offset``, ``print.partition``,
``print.timestamp``, ``print.headers``, ``key.separator`` (tab), ``line.separator`` (newline),
``null.literal`` ("null").  Values are written as their raw bytes.

``--group G`` (or ``--consumer-property group.id=G``) starts each partition at the group's committed
offset (OffsetFetch at the group coordinator; ``--from-beginning`` / ``auto.offset.reset`` only where
the group has none) and commits the positions every ``auto.commit.interval.ms`` (5000) and at exit,
unless ``enable.auto.commit=false``.  The console consumer reads every partition itself: it commits
for the group without joining it (the group shows as Empty in pyklog-consumer-groups).
``--consumer-property`` / ``--consumer.config`` take Kafka's consumer settings: ``group.id``,
``client.id``, ``auto.offset.reset``, ``enable.auto.commit``, ``auto.commit.interval.ms``,
``isolation.level``, ``max.partition.fetch.bytes``; others are reported and ignored.
"""

from __future__ import annotations

import argparse
import sys
import time

from pyklog.broker.errors import OffsetOutOfRangeError, PyklogError
from pyklog.connector.cli import client_properties, console_tool_parser, parse_properties, setup_logging, unescape
from pyklog.connector.security import ClientSecurityConfig, is_security_key


def build_parser() -> argparse.ArgumentParser:
    ap = console_tool_parser("pyklog-console-consumer", "Print the records of a topic.")
    ap.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    ap.add_argument("--partition", type=int, default=None, help="read only this partition")
    ap.add_argument("--offset", default=None, help="start offset (number, earliest, latest); needs --partition")
    ap.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    ap.add_argument("--timeout-ms", type=int, default=None, help="exit when no record arrived for this long")
    ap.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="formatter property: print.key, key.separator, print.offset, ...",
    )
    ap.add_argument("--isolation-level", default="read_uncommitted", choices=["read_uncommitted", "read_committed"])
    ap.add_argument("--max-partition-fetch-bytes", type=int, default=None)
    ap.add_argument("--group", help="the consumer group: start at its committed offsets and commit")
    ap.add_argument(
        "--consumer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="consumer config (group.id, auto.offset.reset, enable.auto.commit, ...)",
    )
    ap.add_argument("--consumer.config", dest="consumer_config", metavar="FILE", help="consumer configs file")
    return ap


KNOWN_CONSUMER_PROPS = {
    "group.id",
    "client.id",
    "auto.offset.reset",
    "enable.auto.commit",
    "auto.commit.interval.ms",
    "isolation.level",
    "max.partition.fetch.bytes",
    "bootstrap.servers",
}


def consumer_settings(args) -> dict:
    """--consumer.config, then --consumer-property, then the dedicated flags; ValueError on a
    contradiction or a bad value."""
    props: dict = {}
    props.update(client_properties(args.consumer_config, "--consumer.config"))
    props.update(parse_properties(args.consumer_property, "--consumer-property"))
    for k in sorted(k for k in set(props) - KNOWN_CONSUMER_PROPS if not is_security_key(k)):
        print(f"WARN The configuration '{k}' was supplied but isn't a known config.", file=sys.stderr)
    if args.group:
        if props.get("group.id") not in (None, args.group):
            raise ValueError(
                f"Option [group] cannot be set along with a different group.id "
                f"({props['group.id']!r}) in the consumer properties"
            )
        props["group.id"] = args.group
    if props.get("auto.offset.reset", "latest") not in ("earliest", "latest", "none"):
        raise ValueError(f"auto.offset.reset: expected earliest, latest or none, got {props['auto.offset.reset']!r}")
    if args.from_beginning:
        props["auto.offset.reset"] = "earliest"
    if args.isolation_level != "read_uncommitted" or "isolation.level" not in props:
        props["isolation.level"] = args.isolation_level
    if props["isolation.level"] not in ("read_uncommitted", "read_committed"):
        raise ValueError(
            f"isolation.level: expected read_uncommitted or read_committed, got {props['isolation.level']!r}"
        )
    if args.max_partition_fetch_bytes is not None:
        props["max.partition.fetch.bytes"] = str(args.max_partition_fetch_bytes)
    for k in ("max.partition.fetch.bytes", "auto.commit.interval.ms"):
        if k in props and not str(props[k]).isdigit():
            raise ValueError(f"{k}: expected an integer, got {props[k]!r}")
    if props.get("enable.auto.commit", "true").lower() not in ("true", "false"):
        raise ValueError(f"enable.auto.commit: expected true or false, got {props['enable.auto.commit']!r}")
    if "group.id" in props and args.offset is not None:
        raise ValueError(
            "Options --group (group.id) and --offset cannot be used together: the group's committed offsets decide"
        )
    return props


class Formatter:
    def __init__(self, props: dict[str, str]):
        b = lambda k, d: props.get(k, d).lower() == "true"  # noqa: E731
        self.print_key = b("print.key", "false")
        self.print_value = b("print.value", "true")
        self.print_offset = b("print.offset", "false")
        self.print_partition = b("print.partition", "false")
        self.print_timestamp = b("print.timestamp", "false")
        self.print_headers = b("print.headers", "false")
        self.key_sep = unescape(props.get("key.separator", "\t")).encode()
        self.line_sep = unescape(props.get("line.separator", "\n")).encode()
        self.null = props.get("null.literal", "null").encode()

    def format(self, r) -> bytes:
        parts = []
        if self.print_timestamp:
            parts.append(
                ("CreateTime:" if r.timestamp_type == 0 else "LogAppendTime:").encode() + str(r.timestamp).encode()
            )
        if self.print_partition:
            parts.append(b"Partition:" + str(r.partition).encode())
        if self.print_offset:
            parts.append(b"Offset:" + str(r.offset).encode())
        if self.print_headers:
            hs = b",".join(k.encode() + b":" + (self.null if v is None else bytes(v)) for k, v in r.headers)
            parts.append(hs if r.headers else b"NO_HEADERS")
        if self.print_key:
            parts.append(self.null if r.key is None else bytes(r.key))
        if self.print_value:
            parts.append(self.null if r.value is None else bytes(r.value))
        return self.key_sep.join(parts) + self.line_sep


def main(argv=None) -> int:
    setup_logging()
    args = build_parser().parse_args(argv)
    if args.offset is not None and args.partition is None:
        print("pyklog-console-consumer: --offset needs --partition", file=sys.stderr)
        return 1
    try:
        props = consumer_settings(args)
    except (ValueError, OSError) as e:
        print(f"pyklog-console-consumer: {e}", file=sys.stderr)
        return 1
    fmt = Formatter(parse_properties(args.property))
    from pyklog.connector.consumer import SimpleConsumer

    group = props.get("group.id")
    auto_commit = group is not None and props.get("enable.auto.commit", "true").lower() == "true"
    commit_every = int(props.get("auto.commit.interval.ms", 5000)) / 1000.0
    out = sys.stdout.buffer
    try:
        consumer = SimpleConsumer(
            args.bootstrap_server,
            args.zookeeper,
            client_id=props.get("client.id", "pyklog-console-consumer"),
            isolation_level=props["isolation.level"],
            max_wait_ms=200,
            security=ClientSecurityConfig.from_config(props),
        )
    except PyklogError as e:
        print(f"pyklog-console-consumer: {e}", file=sys.stderr)
        return 1
    count = 0
    status = 0
    positions: dict = {}
    committed_at: dict = {}
    try:
        topic = args.topic
        parts = [args.partition] if args.partition is not None else consumer.partitions_for(topic)
        if args.offset is not None:
            o = args.offset.strip().lower()
            if o == "earliest":
                start = consumer.earliest_offset(topic, args.partition)
            elif o == "latest":
                start = consumer.latest_offset(topic, args.partition)
            else:
                try:
                    start = int(o)
                except ValueError:
                    print(
                        f"pyklog-console-consumer: --offset: expected a number, earliest or latest, "
                        f"got {args.offset!r}",
                        file=sys.stderr,
                    )
                    return 1
            positions = {(topic, args.partition): start}
        else:
            tps = [(topic, p) for p in parts]
            if group is not None:
                committed = consumer.client.fetch_committed(group, tps, timeout_s=30)
                positions = {tp: off for tp, off in committed.items() if off is not None}
                committed_at = dict(positions)
            missing = [tp for tp in tps if tp not in positions]
            if missing and props.get("auto.offset.reset") == "none":
                raise PyklogError(
                    f"NoOffsetForPartitionException: undefined offset with no reset policy for "
                    f"partitions: {', '.join(f'{t}-{p}' for t, p in missing)}"
                )
            ts = -2 if props.get("auto.offset.reset") == "earliest" else -1
            if missing:
                positions.update(consumer.list_offsets(dict.fromkeys(missing, ts)))
        last_record = time.monotonic()
        last_commit = time.monotonic()
        mb = int(props.get("max.partition.fetch.bytes", 1048576))
        while True:
            results = consumer.multi_fetch({tp: (off, mb) for tp, off in positions.items()}, raise_errors=False)
            got = 0
            for tp, r in sorted(results.items()):
                if isinstance(r, OffsetOutOfRangeError):
                    reset = r.log_start_offset if r.log_start_offset is not None else 0
                    print(
                        f"pyklog-console-consumer: offset {positions[tp]} of {tp[0]}-{tp[1]} out of range, "
                        f"reset to {reset}",
                        file=sys.stderr,
                    )
                    positions[tp] = reset
                    continue
                if isinstance(r, Exception):
                    raise r
                for rec in r.records:
                    out.write(fmt.format(rec))
                    count += 1
                    got += 1
                    if args.max_messages is not None and count >= args.max_messages:
                        break
                positions[tp] = (
                    r.records[-1].offset + 1
                    if (args.max_messages is not None and count >= args.max_messages and r.records)
                    else r.next_offset
                )
                if args.max_messages is not None and count >= args.max_messages:
                    break
            out.flush()
            if args.max_messages is not None and count >= args.max_messages:
                break
            now = time.monotonic()
            if auto_commit and now - last_commit >= commit_every:
                committed_at = _commit(consumer, group, positions, committed_at)
                last_commit = now
            if got:
                last_record = now
            elif args.timeout_ms is not None and (now - last_record) * 1000 >= args.timeout_ms:
                break
    except KeyboardInterrupt:
        pass
    except PyklogError as e:
        print(f"pyklog-console-consumer: {e}", file=sys.stderr)
        status = 1
    finally:
        if auto_commit and positions and status == 0:
            try:
                _commit(consumer, group, positions, committed_at)
            except PyklogError as e:
                print(
                    f"pyklog-console-consumer: committing the offsets of group {group!r} failed: {e}", file=sys.stderr
                )
                status = 1
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return status


def _commit(consumer, group, positions, committed_at) -> dict:
    changed = {tp: off for tp, off in positions.items() if committed_at.get(tp) != off}
    if changed:
        consumer.client.commit_offsets(group, changed, timeout_s=30)
    return dict(positions)


if __name__ == "__main__":
    sys.exit(main())
