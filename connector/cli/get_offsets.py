"""``pyklog-get-offsets``: offsets of topic partitions (Kafka's kafka-get-offsets.sh, GetOffsetShell).

    pyklog-get-offsets --bootstrap-server HOST:PORT [--topic REGEX] [--partitions 0,2-4]
                       [--topic-partitions T:0,U:1-3,...]
                       [--time latest|earliest|max-timestamp|earliest-local|-1|-2|-3|-4|TIMESTAMP_MS]
                       [--exclude-internal-topics]

Prints ``topic:partition:offset`` per partition, sorted by topic then partition, as Kafka's tool:
``--time -1``/``latest`` (default) the log end offset, ``-2``/``earliest`` the log start offset,
``-3``/``max-timestamp`` the offset of the record with the largest timestamp (ListOffsets v7,
KIP-734; empty for an empty partition), ``-4``/``earliest-local`` the earliest offset on the
broker's disk (ListOffsets v8; the log start offset, pyklog has no tiered storage), a timestamp in
ms the first offset whose timestamp is at or after it (empty when there is none).
Exit code 0, or 1 with one ``Error: ...`` line.

Example::

    pyklog-get-offsets --bootstrap-server localhost:9092 --topic 'orders.*' --time earliest
"""

from __future__ import annotations

import argparse
import re
import sys

from pyklog.broker.common.cli import UsageError, reports_errors, require, tool_parser
from pyklog.connector.cli import add_command_config, client_security, setup_logging

INTERNAL = ("__consumer_offsets", "__transaction_state")


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-get-offsets",
        "Offsets of topic partitions.",
        "example:\n  pyklog-get-offsets --bootstrap-server localhost:9092 --topic orders --time -2",
    )
    p.add_argument(
        "--bootstrap-server",
        "--broker-list",
        dest="bootstrap_server",
        metavar="HOST:PORT",
        help="REQUIRED: the brokers",
    )
    p.add_argument("--topic", metavar="REGEX", help="topics (a regular expression; default all)")
    p.add_argument("--partitions", metavar="LIST", help="comma-separated partition ids or ranges (0,2-4)")
    p.add_argument(
        "--topic-partitions",
        metavar="T:P,...",
        help="topic/partition patterns: TOPIC_REGEX:PARTITIONS, comma-separated, e.g. t:0,u:1-3,v",
    )
    p.add_argument(
        "--time",
        default="latest",
        metavar="TIME",
        help="latest (-1, default), earliest (-2), max-timestamp (-3), earliest-local (-4) or a timestamp in ms",
    )
    p.add_argument("--exclude-internal-topics", action="store_true", help="skip the internal topics")
    add_command_config(p)
    return p


def parse_partitions(spec: str) -> list[tuple[int, int | None]] | None:
    """``"0,2-4,7-"`` -> ``[(0, 0), (2, 4), (7, None)]`` (None: open range); None for no filter."""
    if not spec:
        return None
    out = []
    for part in spec.split(","):
        part = part.strip()
        m = re.fullmatch(r"(\d+)(?:(-)(\d*))?", part)
        if not m:
            raise UsageError(f"Invalid partition '{part}' specified in partition list '{spec}'")
        lo = int(m.group(1))
        out.append((lo, lo) if not m.group(2) else (lo, int(m.group(3)) if m.group(3) else None))
    return out


def _matches(ranges, p: int) -> bool:
    return ranges is None or any(lo <= p and (hi is None or p <= hi) for lo, hi in ranges)


def parse_time(s: str) -> int:
    """Kafka 3.x GetOffsetShell's spellings: ``latest``/``-1``, ``earliest``/``-2``,
    ``max-timestamp``/``-3``, ``earliest-local``/``-4``, or a timestamp in ms (>= 0)."""
    v = s.strip().lower()
    named = {"latest": -1, "earliest": -2, "max-timestamp": -3, "earliest-local": -4}
    if v in named:
        return named[v]
    try:
        t = int(v)
    except ValueError:
        t = None
    if t is None or t < -4:
        raise UsageError(
            f"Malformed time argument {s}. Please use -1 or latest / -2 or earliest / "
            f"-3 or max-timestamp / -4 or earliest-local, or a timestamp in ms"
        )
    return t


@reports_errors(re.error)
def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)
    require(a, "bootstrap-server")
    if a.topic_partitions and (a.topic or a.partitions):
        raise UsageError("--topic-partitions cannot be used with --topic or --partitions")
    ts = parse_time(a.time)
    filters = []  # (topic regex, partitions set | None)
    if a.topic_partitions:
        for item in _split_topic_partitions(a.topic_partitions):
            t, sep, ps = item.partition(":")
            filters.append((re.compile(t or ".*"), parse_partitions(ps) if sep else None))
    else:
        filters.append((re.compile(a.topic or ".*"), parse_partitions(a.partitions)))
    from pyklog.connector.admin import AdminClient

    with AdminClient(
        a.bootstrap_server,
        client_id="pyklog-get-offsets",
        request_timeout_ms=15000,
        security=client_security(a.command_config),
    ) as admin:
        md = admin.client.metadata(None, refresh=True)
        tps = []
        for name, tm in md.topics.items():
            if a.exclude_internal_topics and (tm.is_internal or name in INTERNAL):
                continue
            for rx, parts in filters:
                if rx.fullmatch(name):
                    tps += [(name, p) for p in tm.partitions if _matches(parts, p)]
        tps = sorted(set(tps))
        got = admin.list_offsets(dict.fromkeys(tps, ts), timeout_s=15) if tps else {}
    for t, p in tps:
        off = got.get((t, p))
        print(f"{t}:{p}:{'' if off is None else off}")
    return 0


def _split_topic_partitions(s: str) -> list[str]:
    """``t:0,1-2,u:3,v`` -> ``["t:0,1-2", "u:3", "v"]``: a comma starts a new item unless what
    follows is a partition (digits or a range)."""
    items: list[str] = []
    for piece in s.split(","):
        if items and ":" in items[-1] and re.fullmatch(r"\d+(-\d*)?", piece.strip()):
            items[-1] += "," + piece
        else:
            items.append(piece)
    return [i for i in items if i.strip()]


if __name__ == "__main__":
    sys.exit(main())
