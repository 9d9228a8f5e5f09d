"""``pyklog-consumer-perf-test``: Kafka's kafka-consumer-perf-test.sh (ConsumerPerformance).

    pyklog-consumer-perf-test --bootstrap-server HOST:PORT --topic T --messages N
                              [--group G] [--from-latest] [--fetch-size B] [--timeout MS]
                              [--reporting-interval MS] [--show-detailed-stats] [--hide-header]

Reads N records of every partition of T with pyklog's SimpleConsumer (one Fetch per round for all
partitions) from the group's committed offsets (``--group``, committed back at the end), else the
log start (``--from-latest``: the log end).  Prints Kafka's header and result line::

    start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    2026-01-01 10:00:00:000, 2026-01-01 10:00:01:234, 9.5367, 7.7282, 10000, 8103.7277, 0, 1234, 7.7282, 8103.7277

(rebalance.time.ms is 0: no group membership) and, with ``--show-detailed-stats``, one line per
``--reporting-interval`` while running.  Exit code 0; 1 on a usage error, on an unreachable broker, or
(as Kafka's) never for a timeout: a timeout prints a WARNING and the figures so far.

Example::

    pyklog-consumer-perf-test --bootstrap-server localhost:9092 --topic perf --messages 100000
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime

from pyklog.broker.common.cli import reports_errors, require, tool_parser
from pyklog.broker.errors import OffsetOutOfRangeError, PyklogError
from pyklog.connector.cli import client_security, setup_logging

HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)
DETAILED_HEADER = (
    "time, threadId, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-consumer-perf-test",
        "Measure the consumer's throughput.",
        "example:\n  pyklog-consumer-perf-test --bootstrap-server localhost:9092 --topic perf --messages 100000",
    )
    p.add_argument("--bootstrap-server", "--broker-list", dest="bootstrap_server", help="REQUIRED: the brokers")
    p.add_argument("--topic", help="REQUIRED: the topic")
    p.add_argument("--messages", type=int, help="REQUIRED: records to consume")
    p.add_argument("--group", help="commit the end offsets for this group and start from its committed ones")
    p.add_argument("--from-latest", action="store_true", help="start at the log end when nothing is committed")
    p.add_argument("--fetch-size", type=int, default=1048576, help="bytes per partition per fetch")
    p.add_argument(
        "--timeout",
        type=int,
        default=10000,
        metavar="MS",
        help="stop when no record arrived for this long (default 10000)",
    )
    p.add_argument("--reporting-interval", type=int, default=5000, metavar="MS")
    p.add_argument("--show-detailed-stats", action="store_true", help="a line per reporting interval")
    p.add_argument("--hide-header", action="store_true", help="no header line")
    p.add_argument("--date-format", default="%Y-%m-%d %H:%M:%S:%f", help="strftime format of times")
    p.add_argument("--print-metrics", action="store_true", help="accepted for compatibility")
    p.add_argument(
        "--consumer.config",
        dest="consumer_config",
        metavar="FILE",
        help="consumer configs file: its security settings (security.protocol, ssl.*, sasl.*) are used",
    )
    return p


def _fmt_time(ms: float, fmt: str) -> str:
    s = datetime.fromtimestamp(ms / 1000.0).strftime(fmt)
    return s[:-3] if fmt.endswith("%f") else s  # Kafka's SSS: milliseconds


@reports_errors()
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    require(a, "bootstrap-server", "topic", "messages")
    from pyklog.connector.consumer import SimpleConsumer

    consumer = SimpleConsumer(
        a.bootstrap_server,
        None,
        client_id="pyklog-consumer-perf-test",
        max_wait_ms=100,
        security=client_security(a.consumer_config, "--consumer.config"),
    )
    out = lambda s: print(s, flush=True)  # noqa: E731
    count = nbytes = 0
    try:
        parts = consumer.partitions_for(a.topic)
        tps = [(a.topic, p) for p in parts]
        positions = consumer.list_offsets(dict.fromkeys(tps, -1 if a.from_latest else -2))
        if a.group:
            committed = consumer.client.fetch_committed(a.group, tps, timeout_s=10)
            positions.update({tp: off for tp, off in committed.items() if off is not None})
        if a.show_detailed_stats and not a.hide_header:
            out(DETAILED_HEADER)
        start_ms = time.time() * 1000
        last_record = time.monotonic()
        w_start, w_count, w_bytes = time.monotonic(), 0, 0
        timed_out = False
        while count < a.messages:
            results = consumer.multi_fetch(
                {tp: (off, a.fetch_size) for tp, off in positions.items()}, raise_errors=False
            )
            got = 0
            for tp, r in sorted(results.items()):
                if isinstance(r, OffsetOutOfRangeError):
                    positions[tp] = r.log_start_offset if r.log_start_offset is not None else 0
                    continue
                if isinstance(r, Exception):
                    raise r
                for rec in r.records:
                    if count >= a.messages:
                        break
                    size = (len(rec.key) if rec.key is not None else 0) + (len(rec.value) if rec.value else 0)
                    count += 1
                    nbytes += size
                    w_count += 1
                    w_bytes += size
                    got += 1
                    positions[tp] = rec.offset + 1
                if count < a.messages:
                    positions[tp] = max(positions[tp], r.next_offset)
            now = time.monotonic()
            if got:
                last_record = now
            elif (now - last_record) * 1000 >= a.timeout:
                timed_out = True
                break
            if a.show_detailed_stats and (now - w_start) * 1000 >= a.reporting_interval:
                el = now - w_start
                mb = w_bytes / 1024 / 1024
                out(
                    "%s, %d, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f"
                    % (
                        _fmt_time(time.time() * 1000, a.date_format),
                        0,
                        nbytes / 1024 / 1024,
                        mb / el,
                        count,
                        w_count / el,
                        0,
                        int(el * 1000),
                        mb / el,
                        w_count / el,
                    )
                )
                w_start, w_count, w_bytes = now, 0, 0
        end_ms = time.time() * 1000
        if timed_out:
            print(
                f"WARNING: Exiting before consuming the expected number of messages: timeout ({a.timeout} ms) "
                f"exceeded. You can use the --timeout option to increase the timeout.",
                file=sys.stderr,
            )
        if a.group:
            consumer.client.commit_offsets(a.group, positions, timeout_s=10)
    except KeyboardInterrupt:
        end_ms = time.time() * 1000
    except PyklogError:
        consumer.close()
        raise
    consumer.close()
    el = max((end_ms - start_ms) / 1000.0, 1e-9)
    mb = nbytes / 1024 / 1024
    if not a.show_detailed_stats:
        if not a.hide_header:
            out(HEADER)
        out(
            "%s, %s, %.4f, %.4f, %d, %.4f, %d, %d, %.4f, %.4f"
            % (
                _fmt_time(start_ms, a.date_format),
                _fmt_time(end_ms, a.date_format),
                mb,
                mb / el,
                count,
                count / el,
                0,
                int(el * 1000),
                mb / el,
                count / el,
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
