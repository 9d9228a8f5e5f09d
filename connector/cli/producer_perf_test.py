"""``pyklog-producer-perf-test``: Kafka's kafka-producer-perf-test.sh (ProducerPerformance).

    pyklog-producer-perf-test --topic T --num-records N (--record-size B | --payload-file F
                              [--payload-delimiter D]) --throughput R
                              [--bootstrap-server HOST:PORT] [--producer-props k=v ...]
                              [--producer.config FILE] [--transactional-id ID]

Sends N records through pyklog's Producer with a callback per record, at most R records/s
(-1: no limit), and prints Kafka's lines: every 5 s while running ::

    %d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency.

and at the end ::

    %d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency,
    %d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th.

Exit code 0, or 1 on a usage error or when the producer cannot start.

Example::

    pyklog-producer-perf-test --topic perf --num-records 100000 --record-size 100 --throughput -1 \\
        --producer-props bootstrap.servers=localhost:9092 acks=1
"""

from __future__ import annotations

import argparse
import random
import sys
import threading
import time

from pyklog.broker.common.cli import UsageError, reports_errors, tool_parser
from pyklog.broker.errors import PyklogError
from pyklog.connector.cli import client_properties, parse_properties, setup_logging

REPORT_INTERVAL_S = 5.0


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-producer-perf-test",
        "Measure the producer's throughput and latency.",
        "example:\n  pyklog-producer-perf-test --topic perf --num-records 100000 --record-size 100 "
        "--throughput -1 --producer-props bootstrap.servers=localhost:9092",
    )
    p.add_argument("--topic", required=False, help="REQUIRED: the topic")
    p.add_argument("--num-records", type=int, help="REQUIRED: records to send")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--record-size", type=int, help="bytes per record (random printable payload)")
    src.add_argument("--payload-file", help="records' values: the file split by --payload-delimiter")
    p.add_argument("--payload-delimiter", default="\\n", help="delimiter of --payload-file (default \\n)")
    p.add_argument("--throughput", type=float, help="REQUIRED: at most this many records/s (-1: no limit)")
    p.add_argument("--bootstrap-server", help="the brokers (or bootstrap.servers in --producer-props)")
    p.add_argument("--producer-props", nargs="+", default=[], metavar="PROP=VALUE", help="producer configs")
    p.add_argument("--producer.config", dest="producer_config", metavar="FILE", help="producer configs file")
    p.add_argument("--transactional-id", help="send in transactions of --transaction-duration-ms")
    p.add_argument("--transaction-duration-ms", type=int, default=3000)
    p.add_argument("--print-metrics", action="store_true", help="accepted for compatibility")
    p.add_argument(
        "--reporting-interval",
        type=int,
        default=5000,
        metavar="MS",
        help="pyklog: interval of the progress lines (Kafka's is fixed at 5000)",
    )
    return p


class Stats:
    """Kafka's ProducerPerformance.Stats: latencies sampled, windows of REPORT_INTERVAL_S."""

    def __init__(self, num_records: int, out=print, interval_s: float = REPORT_INTERVAL_S):
        self.interval_s = interval_s
        self.start = time.monotonic()
        self.window_start = self.start
        self.lock = threading.Lock()
        self.count = self.bytes = 0
        self.total_latency = 0.0
        self.max_latency = 0.0
        self.w_count = self.w_bytes = 0
        self.w_latency = self.w_max = 0.0
        self.sampling = max(1, num_records // 500000)
        self.latencies: list[int] = []
        self.out = out

    def record(self, i: int, latency_ms: float, size: int) -> None:
        with self.lock:
            self.count += 1
            self.bytes += size
            self.total_latency += latency_ms
            self.max_latency = max(self.max_latency, latency_ms)
            self.w_count += 1
            self.w_bytes += size
            self.w_latency += latency_ms
            self.w_max = max(self.w_max, latency_ms)
            if i % self.sampling == 0:
                self.latencies.append(int(latency_ms))
            now = time.monotonic()
            if now - self.window_start >= self.interval_s:
                self._print_window(now)

    def _print_window(self, now) -> None:
        elapsed = max(now - self.window_start, 1e-9)
        self.out(
            "%d records sent, %.1f records/sec (%.2f MB/sec), %.1f ms avg latency, %.1f ms max latency."
            % (
                self.w_count,
                self.w_count / elapsed,
                self.w_bytes / elapsed / 1024 / 1024,
                self.w_latency / max(self.w_count, 1),
                self.w_max,
            )
        )
        self.window_start = now
        self.w_count = self.w_bytes = 0
        self.w_latency = self.w_max = 0.0

    def total(self) -> None:
        elapsed = max(time.monotonic() - self.start, 1e-9)
        lat = sorted(self.latencies) or [0]

        def pct(p):
            return lat[min(len(lat) - 1, int(p * len(lat)))]

        self.out(
            "%d records sent, %f records/sec (%.2f MB/sec), %.2f ms avg latency, %.2f ms max latency, "
            "%d ms 50th, %d ms 95th, %d ms 99th, %d ms 99.9th."
            % (
                self.count,
                self.count / elapsed,
                self.bytes / elapsed / 1024 / 1024,
                self.total_latency / max(self.count, 1),
                self.max_latency,
                pct(0.5),
                pct(0.95),
                pct(0.99),
                pct(0.999),
            )
        )


def _read_payloads(path: str, delimiter: str) -> list[bytes]:
    """The records' values of ``--payload-file``: its text split by ``--payload-delimiter``."""
    try:
        with open(path, encoding="utf-8") as f:
            delim = delimiter.encode().decode("unicode_escape")
            payloads = [s.encode() for s in f.read().split(delim) if s]
    except OSError as e:
        raise UsageError(e) from None
    if not payloads:
        raise UsageError(f"File is empty: {path}")
    return payloads


@reports_errors()
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    for flag, v in (("topic", a.topic), ("num-records", a.num_records), ("throughput", a.throughput)):
        if v is None:
            raise UsageError(f"argument --{flag} is required")
    if a.record_size is None and a.payload_file is None:
        raise UsageError("Either --record-size or --payload-file must be specified but not both.")
    props = client_properties(a.producer_config, "--producer.config")
    props.update(parse_properties(a.producer_props, "--producer-props"))
    if a.bootstrap_server:
        props["bootstrap.servers"] = a.bootstrap_server
    if "bootstrap.servers" not in props:
        raise UsageError("either --bootstrap-server or --producer-props bootstrap.servers=... is required")
    if a.transactional_id:
        props["transactional.id"] = a.transactional_id
    payloads = _read_payloads(a.payload_file, a.payload_delimiter) if a.payload_file else None
    from pyklog.connector.producer import Producer

    producer = Producer(props)
    payload = (
        bytes(random.choice(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(a.record_size)) if payloads is None else None
    )
    stats = Stats(a.num_records, out=lambda s: print(s, flush=True), interval_s=max(a.reporting_interval, 1) / 1000)
    interval = 1.0 / a.throughput if a.throughput > 0 else 0.0
    start = time.monotonic()
    failed = [0]
    txn_start = None
    try:
        if a.transactional_id:
            producer.init_transactions()
        for i in range(a.num_records):
            if a.transactional_id and txn_start is None:
                producer.begin_transaction()
                txn_start = time.monotonic()
            value = payload if payloads is None else payloads[i % len(payloads)]
            sent = time.monotonic()

            def done(md, exc, i=i, sent=sent, size=len(value)):  # noqa: B008 - binds this record's values
                if exc is not None:
                    failed[0] += 1
                    return
                stats.record(i, (time.monotonic() - sent) * 1000.0, size)

            producer.send(a.topic, value, callback=done)
            if a.transactional_id and (time.monotonic() - txn_start) * 1000 >= a.transaction_duration_ms:
                producer.commit_transaction()
                txn_start = None
            if interval:
                ahead = start + (i + 1) * interval - time.monotonic()
                if ahead > 0:
                    time.sleep(ahead)
        if a.transactional_id and txn_start is not None:
            producer.commit_transaction()
        producer.flush()
    except KeyboardInterrupt:
        pass
    except PyklogError:
        producer.close(timeout=5)
        raise
    producer.close()
    stats.total()
    if failed[0]:
        print(f"{failed[0]} records failed", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
