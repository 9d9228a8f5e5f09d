"""pyklog-console-producer: read lines from stdin and produce each as one record.

    pyklog-console-producer --bootstrap-server 127.0.0.1:9092 --topic events
    pyklog-console-producer --zookeeper 127.0.0.1:2181/kafka --topic events \\
        --property parse.key=true --property key.separator=: --compression-codec lz4

Properties (as Kafka's kafka-console-producer): ``parse.key`` (default false), ``key.separator``
(default a tab), ``parse.headers`` (default false), ``headers.delimiter`` (tab, ends the headers
part), ``headers.separator`` (","), ``headers.key.separator`` (":"), ``ignore.error`` (skip lines
without a key separator instead of failing), ``null.marker`` (a key/value equal to it is sent as
null).  ``--producer-property k=v`` passes any producer config.  Exit status 1 on a delivery error
or a malformed line (the lines before it are delivered).
"""

from __future__ import annotations

import argparse
import sys

from pyklog.broker.errors import PyklogError
from pyklog.connector.cli import client_properties, console_tool_parser, parse_properties, setup_logging, unescape


def build_parser() -> argparse.ArgumentParser:
    ap = console_tool_parser("pyklog-console-producer", "Read lines from stdin and produce them to a topic.")
    ap.add_argument(
        "--property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="line reader property: parse.key, key.separator, parse.headers, ...",
    )
    ap.add_argument(
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="producer config (Kafka names), e.g. linger.ms=10",
    )
    ap.add_argument(
        "--producer.config",
        dest="producer_config",
        metavar="FILE",
        help="producer configs file (security.protocol, ssl.*, sasl.*, linger.ms, ...)",
    )
    ap.add_argument(
        "--compression-codec",
        nargs="?",
        const="gzip",
        default=None,
        choices=["none", "gzip", "snappy", "lz4", "zstd"],
        help="compression codec (gzip when given without a value)",
    )
    ap.add_argument("--request-required-acks", default=None, help="acks: 0, 1, -1 or all")
    ap.add_argument("--sync", action="store_true", help="send each line synchronously")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--linger-ms", type=int, default=None)
    ap.add_argument("--partition", type=int, default=None, help="send every record to this partition")
    return ap


class LineReader:
    """Turns one input line into ``(key, value, headers)`` following the properties."""

    def __init__(self, props: dict[str, str]):
        self.parse_key = props.get("parse.key", "false").lower() == "true"
        self.key_sep = unescape(props.get("key.separator", "\t"))
        self.parse_headers = props.get("parse.headers", "false").lower() == "true"
        self.headers_delim = unescape(props.get("headers.delimiter", "\t"))
        self.headers_sep = unescape(props.get("headers.separator", ","))
        self.headers_key_sep = unescape(props.get("headers.key.separator", ":"))
        self.ignore_error = props.get("ignore.error", "false").lower() == "true"
        self.null_marker = props.get("null.marker")
        if self.parse_key and not self.key_sep:
            raise SystemExit("--property key.separator must not be empty")

    def _nullable(self, s: str):
        if self.null_marker is not None and s == self.null_marker:
            return None
        return s.encode("utf-8")

    def parse(self, line: str, lineno: int):
        headers = ()
        if self.parse_headers:
            hpart, sep, line = line.partition(self.headers_delim)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"line {lineno}: no headers delimiter {self.headers_delim!r} found")
                hpart, line = "", hpart
            hs = []
            for h in filter(None, hpart.split(self.headers_sep)):
                hk, hsep, hv = h.partition(self.headers_key_sep)
                if not hsep:
                    raise ValueError(f"line {lineno}: header {h!r} has no key separator {self.headers_key_sep!r}")
                hs.append((hk, self._nullable(hv)))
            headers = tuple(hs)
        key = None
        if self.parse_key:
            k, sep, v = line.partition(self.key_sep)
            if not sep:
                if not self.ignore_error:
                    raise ValueError(f"line {lineno}: no key separator {self.key_sep!r} found (parse.key=true)")
                k, v = None, line
            key = None if k is None else self._nullable(k)
            line = v
        return key, self._nullable(line), headers


def main(argv=None) -> int:
    setup_logging()
    args = build_parser().parse_args(argv)
    props = parse_properties(args.property)
    pprops = parse_properties(args.producer_property, "--producer-property")
    reader = LineReader(props)
    from pyklog.connector.producer import Producer

    config = {**client_properties(args.producer_config, "--producer.config"), **pprops}
    config["bootstrap.servers" if args.bootstrap_server else "zookeeper.connect"] = (
        args.bootstrap_server or args.zookeeper
    )
    config.setdefault("client.id", "pyklog-console-producer")
    if args.compression_codec:
        config["compression.type"] = args.compression_codec
    if args.request_required_acks is not None:
        config["acks"] = args.request_required_acks
    if args.batch_size is not None:
        config["batch.size"] = args.batch_size
    if args.linger_ms is not None:
        config["linger.ms"] = args.linger_ms
    errors = []

    def on_delivery(md, exc):
        if exc is not None:
            errors.append(exc)

    try:
        producer = Producer(config)
    except PyklogError as e:
        print(f"pyklog-console-producer: {e}", file=sys.stderr)
        return 1
    status = 0
    try:
        stdin = sys.stdin.buffer
        for lineno, raw in enumerate(stdin, 1):
            line = raw.decode("utf-8", errors="surrogateescape").rstrip("\r\n")
            try:
                key, value, headers = reader.parse(line, lineno)
            except ValueError as e:
                print(f"pyklog-console-producer: {e}", file=sys.stderr)
                status = 1
                break
            if args.sync:
                producer.send_sync(args.topic, value, key, partition=args.partition, headers=headers)
            else:
                producer.produce(
                    args.topic, value, key, partition=args.partition, headers=headers, on_delivery=on_delivery
                )
            if errors:
                break
        producer.flush()
    except KeyboardInterrupt:
        status = 130
    except PyklogError as e:
        print(f"pyklog-console-producer: {e}", file=sys.stderr)
        status = 1
    finally:
        producer.close()
    if errors:
        print(f"pyklog-console-producer: delivery failed: {errors[0]}", file=sys.stderr)
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
