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
"""
from __future__ import annotations

import argparse
import sys
import time

from pyklog.broker.errors import OffsetOutOfRangeError, PyklogError
from pyklog.connector.cli import console_tool_parser, parse_properties, setup_logging, unescape


def build_parser() -> argparse.ArgumentParser:
    ap = console_tool_parser("pyklog-console-consumer", "Print the records of a topic.")
    ap.add_argument("--from-beginning", action="store_true", help="start at the log start offset")
    ap.add_argument("--partition", type=int, default=None, help="read only this partition")
    ap.add_argument("--offset", default=None, help="start offset (number, earliest, latest); needs --partition")
    ap.add_argument("--max-messages", type=int, default=None, help="exit after this many records")
    ap.add_argument("--timeout-ms", type=int, default=None,
                    help="exit when no record arrived for this long")
    ap.add_argument("--property", action="append", default=[], metavar="KEY=VALUE",
                    help="formatter property: print.key, key.separator, print.offset, ...")
    ap.add_argument("--isolation-level", default="read_uncommitted",
                    choices=["read_uncommitted", "read_committed"])
    ap.add_argument("--max-partition-fetch-bytes", type=int, default=1048576)
    return ap


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
            parts.append(("CreateTime:" if r.timestamp_type == 0 else "LogAppendTime:").encode()
                         + str(r.timestamp).encode())
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
        return 2
    fmt = Formatter(parse_properties(args.property))
    from pyklog.connector.consumer import SimpleConsumer

    out = sys.stdout.buffer
    try:
        consumer = SimpleConsumer(args.bootstrap_server, args.zookeeper, client_id="pyklog-console-consumer",
                                  isolation_level=args.isolation_level, max_wait_ms=200)
    except PyklogError as e:
        print(f"pyklog-console-consumer: {e}", file=sys.stderr)
        return 1
    count = 0
    status = 0
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
                    print(f"pyklog-console-consumer: --offset: expected a number, earliest or latest, "
                          f"got {args.offset!r}", file=sys.stderr)
                    return 2
            positions = {(topic, args.partition): start}
        else:
            ts = -2 if args.from_beginning else -1
            positions = consumer.list_offsets({(topic, p): ts for p in parts})
        last_record = time.monotonic()
        mb = args.max_partition_fetch_bytes
        while True:
            results = consumer.multi_fetch({tp: (off, mb) for tp, off in positions.items()},
                                           raise_errors=False)
            got = 0
            for tp, r in sorted(results.items()):
                if isinstance(r, OffsetOutOfRangeError):
                    reset = r.log_start_offset if r.log_start_offset is not None else 0
                    print(f"pyklog-console-consumer: offset {positions[tp]} of {tp[0]}-{tp[1]} out of range, "
                          f"reset to {reset}", file=sys.stderr)
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
                positions[tp] = r.records[-1].offset + 1 if (
                    args.max_messages is not None and count >= args.max_messages and r.records) \
                    else r.next_offset
                if args.max_messages is not None and count >= args.max_messages:
                    break
            out.flush()
            if args.max_messages is not None and count >= args.max_messages:
                break
            now = time.monotonic()
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
        consumer.close()
        print(f"Processed a total of {count} messages", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
