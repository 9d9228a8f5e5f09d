"""``pyklog-consumer-groups``: Kafka's kafka-consumer-groups.sh for broker groups and ZooKeeper groups.

    pyklog-consumer-groups --bootstrap-server HOST:PORT [--zookeeper HOST:PORT[/CHROOT]] --list
    pyklog-consumer-groups --bootstrap-server ... --describe (--group G ... | --all-groups)
                           [--members [--verbose] | --state | --offsets]
    pyklog-consumer-groups --bootstrap-server ... --reset-offsets (--group G | --all-groups)
                           (--topic T[:P,...] ... | --all-topics) (--to-earliest | --to-latest |
                           --to-current | --to-offset N | --shift-by N | --to-datetime DT |
                           --by-duration PnDTnHnMnS | --from-file CSV) [--dry-run | --execute] [--export]
    pyklog-consumer-groups --bootstrap-server ... --delete (--group G ... | --all-groups)
    pyklog-consumer-groups --bootstrap-server ... --delete-offsets --group G --topic T[:P,...] ...

Groups come from two places and are shown together: the brokers' group coordinators (ListGroups,
DescribeGroups, OffsetFetch) and, with ``--zookeeper``, the ZooKeeper consumer groups of
``/consumers`` (pyklog's ConsumerConnector and Spark source).  A ZooKeeper group's committed offsets
are found where they are: ``/consumers/[group]/offsets`` and the group coordinator
(``offsets.storage=kafka`` or ``dual``); the broker's offset wins where both hold one
(``--offsets-storage zookeeper|kafka`` reads only one of them).

``--describe`` prints Kafka's columns::

    GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID HOST CLIENT-ID

"-" where there is no value.  A ZooKeeper group's HOST is the host part of the member's consumer id
(pyklog's ``host:uuid``, Kafka's ``group_host-timestamp-uuid``) and its CLIENT-ID the registration's
``client_id`` if it holds one, else the group id (the old consumer's default ``client.id``).

``--list --type [classic,consumer]`` adds Kafka 3.7's TYPE column: broker groups are ``Classic``
(pyklog has no KIP-848 groups), ZooKeeper groups ``zookeeper``.  ``--reset-offsets --export`` prints
Kafka's CSV (``topic,partition,offset``; ``group,topic,partition,offset`` for several groups) instead
of the table, and ``--from-file`` reads that CSV as the reset plan.

  Exit codes as Kafka's tool: 0 on success, 1 on a usage error or a
failure (one ``Error: ...`` line on stderr).

Example::

    pyklog-consumer-groups --bootstrap-server localhost:9092 --describe --group my-group
"""

from __future__ import annotations

import argparse
import datetime as _dt
import logging
import re
import sys
import time

from kazoo.exceptions import NoNodeError, NotEmptyError

from pyklog.broker.common.cli import UsageError, reports_errors, require, tool_parser
from pyklog.broker.errors import PyklogError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.connector.cli import add_command_config, client_security
from pyklog.connector.group import parse_registration, partition_count, topics_of

log = logging.getLogger(__name__)

MISSING = "-"
EXAMPLE = """example:
  pyklog-consumer-groups --bootstrap-server localhost:9092 --describe --group my-group
  pyklog-consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group my-group \\
      --topic clicks --to-earliest --execute
  pyklog-consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group my-group \\
      --all-topics --to-current --export > plan.csv
  pyklog-consumer-groups --bootstrap-server localhost:9092 --reset-offsets --group my-group \\
      --from-file plan.csv --execute"""


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-consumer-groups",
        "List, describe, reset and delete consumer groups (broker groups and ZooKeeper groups).",
        EXAMPLE,
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED (unless --zookeeper): the brokers")
    add_command_config(p)
    p.add_argument(
        "--zookeeper",
        metavar="HOST:PORT[/CHROOT]",
        help="ZooKeeper of the cluster: also list/describe the ZooKeeper consumer groups",
    )
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="describe consumer group(s)")
    action.add_argument("--reset-offsets", action="store_true", help="reset offsets of consumer group(s)")
    action.add_argument("--delete", action="store_true", help="delete consumer group(s)")
    action.add_argument(
        "--delete-offsets",
        action="store_true",
        help="delete a group's committed offsets of --topic T[:P,...] (OffsetDelete)",
    )
    p.add_argument("--group", action="append", default=[], help="the consumer group (repeatable)")
    p.add_argument("--all-groups", action="store_true", help="apply to all consumer groups")
    p.add_argument("--members", action="store_true", help="with --describe: the group's members")
    p.add_argument(
        "--state",
        nargs="?",
        const="",
        default=None,
        metavar="STATES",
        help="with --describe: the group's state; with --list: each group's state, optionally only "
        "these (comma-separated, e.g. Stable,Empty)",
    )
    p.add_argument("--offsets", action="store_true", help="with --describe: offsets and lag (the default)")
    p.add_argument("--verbose", action="store_true", help="with --describe --members: each member's assignment")
    p.add_argument(
        "--topic", action="append", default=[], help="with --reset-offsets: TOPIC or TOPIC:P1,P2 (repeatable)"
    )
    p.add_argument("--all-topics", action="store_true", help="with --reset-offsets: every topic the group committed")
    sc = p.add_mutually_exclusive_group()
    sc.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    sc.add_argument("--to-latest", action="store_true", help="reset to the latest offset")
    sc.add_argument("--to-current", action="store_true", help="reset to the committed offset")
    sc.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (bounded by the log)")
    sc.add_argument("--shift-by", type=int, metavar="N", help="move the committed offset by N (+/-)")
    sc.add_argument(
        "--to-datetime",
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="reset to the first offset at or after this time (UTC unless a zone is given)",
    )
    sc.add_argument("--by-duration", metavar="PnDTnHnMnS", help="reset to the offset this long ago")
    sc.add_argument(
        "--from-file",
        metavar="CSV",
        help="reset to the offsets of this CSV (topic,partition,offset "
        "or group,topic,partition,offset, as --export writes)",
    )
    p.add_argument("--export", action="store_true", help="with --reset-offsets: print the plan as CSV")
    p.add_argument(
        "--type",
        nargs="?",
        const="",
        default=None,
        metavar="TYPES",
        help="with --list: each group's type, optionally only these (classic,consumer)",
    )
    ex = p.add_mutually_exclusive_group()
    ex.add_argument("--dry-run", action="store_true", help="only show the result (the default)")
    ex.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.add_argument(
        "--offsets-storage",
        choices=("zookeeper", "kafka"),
        default=None,
        help="ZooKeeper groups: read committed offsets only from there (default: both)",
    )
    p.add_argument("--timeout", type=int, default=5000, metavar="MS", help="timeout of each call (ms)")
    return p


# ---------------------------------------------------------------------------------------- time


def parse_datetime(s: str) -> int:
    """Kafka's ``--to-datetime`` forms: ``YYYY-MM-DDTHH:mm:SS[.sss][Z|+hh:mm|-hh:mm]`` -> ms (UTC
    when no zone is given)."""
    txt = s.strip()
    if txt.endswith("Z"):
        txt = txt[:-1] + "+00:00"
    m = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d{1,3})?([+-]\d\d:?\d\d)?", txt)
    if not m:
        raise UsageError(f"--to-datetime: expected YYYY-MM-DDTHH:mm:SS.sss, got {s!r}")
    d = _dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S")
    ms = int((m.group(2) or ".0")[1:].ljust(3, "0"))
    zone = m.group(3)
    if zone:
        zone = zone.replace(":", "")
        off = (int(zone[1:3]) * 60 + int(zone[3:5])) * (1 if zone[0] == "+" else -1)
        tz = _dt.timezone(_dt.timedelta(minutes=off))
    else:
        tz = _dt.UTC
    return int(d.replace(tzinfo=tz).timestamp()) * 1000 + ms


def parse_duration(s: str) -> int:
    """ISO-8601 ``PnDTnHnMn.nS`` (Java's Duration.parse, optional leading '-') -> ms."""
    m = re.fullmatch(r"(-)?P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", s.strip().upper())
    if not m or s.strip().upper() in ("P", "PT", "-P"):
        raise UsageError(f"--by-duration: expected an ISO-8601 duration like PT1H or P1DT2H30M, got {s!r}")
    d, h, mi, sec = (m.group(2), m.group(3), m.group(4), m.group(5))
    ms = int(d or 0) * 86400000 + int(h or 0) * 3600000 + int(mi or 0) * 60000 + int(float(sec or 0) * 1000)
    return -ms if m.group(1) else ms


# ---------------------------------------------------------------------------------------- ZooKeeper groups


def _children(zk, path):
    try:
        return sorted(zk.retry(zk.get_children, path))
    except NoNodeError:
        return []


def list_groups(zk) -> list[str]:
    """The ZooKeeper consumer groups (children of /consumers)."""
    return _children(zk, paths.CONSUMERS)


def zk_group_exists(zk, group: str) -> bool:
    return zk.retry(zk.exists, paths.consumer_group(group)) is not None


def zk_members(zk, group: str) -> list[str]:
    return _children(zk, paths.consumer_ids(group))


def zk_member_host(group: str, consumer_id: str) -> str:
    """The host part of a ZooKeeper consumer id: pyklog's ``host:uuid`` or Kafka's
    ``[group]_[host]-[timestamp]-[uuid8]``; the id itself when it has neither form."""
    m = re.fullmatch(re.escape(group) + r"_(.+)-\d{10,}-[0-9a-f]{8}", consumer_id)
    if m:
        return m.group(1)
    host, sep, rest = consumer_id.rpartition(":")
    if sep and host and re.fullmatch(r"[0-9a-f-]{8,}", rest):
        return host
    return consumer_id


def zk_member_client_id(zk, group: str, consumer_id: str) -> str:
    """The registration's ``client_id`` (or ``client.id``) if it holds one, else the group id (the
    ZooKeeper consumer's default client.id)."""
    import json

    try:
        data, _ = zk.retry(zk.get, paths.consumer_id(group, consumer_id))
        obj = json.loads(data.decode("utf-8"))
        for key in ("client_id", "client.id"):
            if isinstance(obj, dict) and isinstance(obj.get(key), str) and obj[key]:
                return obj[key]
    except (NoNodeError, ValueError, UnicodeDecodeError, AttributeError):
        pass
    return group


def _zk_topics(zk, group: str) -> set:
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
    return topics


def _partition_counts(zk, topics) -> dict:
    counts = {}
    for t in sorted(topics):
        try:
            data, _ = zk.retry(zk.get, paths.topic(t))
            counts[t] = partition_count(data, t)
        except (NoNodeError, ValueError):
            counts[t] = 0
    return counts


def zk_committed(zk, group: str, topics) -> dict:
    """``{(t, p): offset}`` of /consumers/[group]/offsets for ``topics``."""
    from pyklog.connector.offsets import ZooKeeperOffsetStore

    stored = set()
    for t in topics:
        stored.update((t, int(p)) for p in _children(zk, paths.consumer_offsets(group, t)) if p.isdigit())
    return ZooKeeperOffsetStore(zk).fetch(group, sorted(stored)) if stored else {}


def describe_group(zk, group: str, offsets_storage: str | None = None, client=None) -> list[tuple]:
    """A ZooKeeper group's rows ``(topic, partition, current_offset|None, log_end_offset|None,
    lag|None, owner|None)``: committed offsets from ZooKeeper and (``client`` given, unless
    ``offsets_storage == "zookeeper"``) from the group coordinator, the broker's winning."""
    if not zk_group_exists(zk, group) and offsets_storage != "kafka":
        raise ZooKeeperError(f"consumer group {group!r} does not exist (no {paths.consumer_group(group)})")
    topics = _zk_topics(zk, group)
    committed: dict = {}
    if offsets_storage != "kafka":
        committed.update(zk_committed(zk, group, topics))
    if client is not None and offsets_storage != "zookeeper":
        try:
            got = client.fetch_committed(group, None, timeout_s=10)
            committed.update({tp: off for tp, off in got.items() if off is not None})
        except PyklogError as e:
            if offsets_storage == "kafka":
                raise
            log.info("group %s: no offsets from the group coordinator: %s", group, e)
    elif offsets_storage == "kafka":
        raise PyklogError("--offsets-storage kafka needs a reachable broker")
    topics.update(t for t, _ in committed)
    counts = _partition_counts(zk, topics)
    tps = [(t, p) for t in sorted(counts) for p in range(counts[t])]
    log_end = _log_end_offsets(client, tps)
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


def _log_end_offsets(client, tps) -> dict:
    if client is None or not tps:
        return {}
    from pyklog.connector.client import LATEST

    try:
        got = client.list_offsets(dict.fromkeys(tps, LATEST), timeout_s=10)
        return {tp: off for tp, off in got.items() if off is not None}
    except PyklogError as e:
        print(f"Warning: log end offsets unavailable: {e}", file=sys.stderr)
        return {}


# ---------------------------------------------------------------------------------------- the command


class GroupCommand:
    """One run of the tool: a broker admin client (``--bootstrap-server``, or the brokers of
    ``--zookeeper``) and, with ``--zookeeper``, a ZooKeeper session for the ZooKeeper groups."""

    def __init__(self, args):
        self.args = args
        self.timeout_s = max(args.timeout, 1000) / 1000.0
        self.zk = None
        self.admin = None
        if args.zookeeper:
            from kazoo.client import KazooClient

            from pyklog.broker.zk.znode_acls import client_credentials, kazoo_kwargs

            zk = KazooClient(hosts=args.zookeeper, **kazoo_kwargs(client_credentials(None)))
            try:
                zk.start(timeout=15)
            except Exception as e:
                zk.close()
                raise ZooKeeperError(f"cannot connect to ZooKeeper at {args.zookeeper}: {e}") from e
            self.zk = zk
        from pyklog.connector.admin import AdminClient

        try:
            self.admin = AdminClient(
                args.bootstrap_server or None,
                None if args.bootstrap_server else args.zookeeper,
                client_id="pyklog-consumer-groups",
                request_timeout_ms=max(args.timeout, 1000),
                security=client_security(args.command_config),
            )
        except PyklogError:
            if args.bootstrap_server:
                raise
            self.admin = None  # ZooKeeper only: the ZooKeeper groups can still be shown

    def close(self):
        if self.admin is not None:
            self.admin.close()
        if self.zk is not None:
            self.zk.stop()
            self.zk.close()

    # -- groups ------------------------------------------------------------------------------------
    def broker_groups(self) -> list[str]:
        if self.admin is None:
            return []
        try:
            return [
                g.group_id
                for g in self.admin.list_groups(timeout_s=self.timeout_s)
                if g.protocol_type in ("consumer", "")
            ]
        except PyklogError as e:
            if self.args.bootstrap_server:
                raise
            print(f"Warning: broker groups unavailable: {e}", file=sys.stderr)
            return []

    def all_groups(self) -> list[str]:
        groups = set(self.broker_groups())
        if self.zk is not None:
            groups.update(list_groups(self.zk))
        return sorted(groups)

    def target_groups(self) -> list[str]:
        a = self.args
        if a.all_groups:
            return self.all_groups()
        return list(dict.fromkeys(a.group))

    def group_state(self, group: str) -> str:
        if self.is_zk_group(group):
            return "Stable" if zk_members(self.zk, group) else "Empty"
        desc = self._describe_broker(group)
        return "Dead" if desc is None else desc.state

    def group_type(self, group: str) -> str:
        """Kafka 3.7's group type: broker groups are Classic (no KIP-848 groups in pyklog); a
        ZooKeeper group is "zookeeper"."""
        return "zookeeper" if self.is_zk_group(group) else "Classic"

    def list_with_state(self, state_filter: str | None, type_filter: str | None = None) -> int:
        """``--list [--type [T1,T2]] [--state [S1,S2]]``: Kafka's GROUP [TYPE] [STATE] table."""
        wanted = {x.strip().lower() for x in (state_filter or "").split(",") if x.strip()}
        known = {"stable", "empty", "preparingrebalance", "completingrebalance", "dead"}
        bad = sorted(wanted - known)
        if bad:
            raise UsageError(
                f"Invalid state list '{state_filter}'. Valid states are: Stable, Empty, "
                f"PreparingRebalance, CompletingRebalance, Dead"
            )
        types = {x.strip().lower() for x in (type_filter or "").split(",") if x.strip()}
        bad = sorted(types - {"classic", "consumer", "zookeeper"})
        if bad:
            raise UsageError(f"Invalid types list '{type_filter}'. Valid types are: classic, consumer")
        rows = []
        for g in self.all_groups():
            gtype = self.group_type(g)
            if types and gtype.lower() not in types:
                continue
            st = self.group_state(g) if state_filter is not None else None
            if wanted and st.lower() not in wanted:
                continue
            rows.append((g, gtype, st))
        width = max([15] + [len(g) for g, _, _ in rows]) + 10
        show_type, show_state = type_filter is not None, state_filter is not None
        header = (
            ["GROUP".ljust(width)]
            + (["TYPE".ljust(20)] if show_type else [])
            + (["STATE".ljust(20)] if show_state else [])
        )
        print(" ".join(header).rstrip())
        for g, gtype, st in rows:
            cells = [g.ljust(width)] + ([gtype.ljust(20)] if show_type else []) + ([st.ljust(20)] if show_state else [])
            print(" ".join(cells).rstrip())
        return 0

    def is_zk_group(self, group: str) -> bool:
        return self.zk is not None and zk_group_exists(self.zk, group)

    def _describe_broker(self, group):
        if self.admin is None:
            return None
        return self.admin.describe_groups([group], timeout_s=self.timeout_s)[group]

    # -- --describe (offsets) -------------------------------------------------------------------------
    def offsets_of(self, group: str):
        """``(state, rows)``; rows ``(group, topic, partition, current, log_end, lag, consumer_id,
        host, client_id)``; state "Dead" when the group exists nowhere."""
        client = self.admin.client if self.admin is not None else None
        if self.is_zk_group(group):
            rows = describe_group(self.zk, group, self.args.offsets_storage, client)
            state = "Stable" if zk_members(self.zk, group) else "Empty"
            return state, [
                (
                    group,
                    t,
                    p,
                    cur,
                    end,
                    lag,
                    owner,
                    owner and zk_member_host(group, owner),
                    owner and zk_member_client_id(self.zk, group, owner),
                )
                for t, p, cur, end, lag, owner in rows
            ]
        desc = self._describe_broker(group)
        if desc is None or desc.state == "Dead":
            return "Dead", []
        committed = self.admin.list_group_offsets(group, timeout_s=self.timeout_s)
        owner = {}
        for m in desc.members:
            for tp in m.assignment:
                owner[tp] = m
        tps = sorted(set(committed) | set(owner))
        log_end = _log_end_offsets(client, tps)
        rows = []
        for tp in tps:
            cur, end = committed.get(tp), log_end.get(tp)
            lag = end - cur if cur is not None and end is not None else None
            m = owner.get(tp)
            rows.append(
                (group, tp[0], tp[1], cur, end, lag, m and m.member_id, m and m.host.lstrip("/"), m and m.client_id)
            )
        # members without partitions get one row of their own, as Kafka's tool
        for m in desc.members:
            if not m.assignment:
                rows.append((group, None, None, None, None, None, m.member_id, m.host.lstrip("/"), m.client_id))
        return desc.state, rows

    def describe(self) -> int:
        a = self.args
        groups = self.target_groups()
        failed = False
        for g in groups:
            if a.members:
                failed |= not self._print_members(g)
            elif a.state:
                failed |= not self._print_state(g)
            else:
                state, rows = self.offsets_of(g)
                if not self._print_state_warning(g, state, rows):
                    failed = True
                    continue
                _print_table(
                    [
                        "GROUP",
                        "TOPIC",
                        "PARTITION",
                        "CURRENT-OFFSET",
                        "LOG-END-OFFSET",
                        "LAG",
                        "CONSUMER-ID",
                        "HOST",
                        "CLIENT-ID",
                    ],
                    [[_s(v) for v in r] for r in rows],
                    widths=[-15, -15, 10, 15, 15, 15, -15, -15, 0],
                )
        return 1 if failed else 0

    def _print_state_warning(self, group, state, rows=(1,)) -> bool:
        if state == "Dead":
            print(f"Error: Consumer group '{group}' does not exist.", file=sys.stderr)
            return False
        if state == "Empty":
            print(f"\nConsumer group '{group}' has no active members.", file=sys.stderr)
        elif state in ("PreparingRebalance", "CompletingRebalance"):
            print(f"\nWarning: Consumer group '{group}' is rebalancing.", file=sys.stderr)
        return bool(rows)

    def _print_members(self, group) -> bool:
        if self.is_zk_group(group):
            members = []
            owned: dict = {}
            for t in _children(self.zk, paths.partition_owners(group)):
                for p in _children(self.zk, paths.partition_owners(group, t)):
                    try:
                        cid = self.zk.retry(self.zk.get, paths.partition_owner(group, t, int(p)))[0].decode()
                    except (NoNodeError, ValueError):
                        continue
                    owned.setdefault(cid, []).append((t, int(p)))
            for cid in zk_members(self.zk, group):
                members.append(
                    (
                        cid,
                        zk_member_host(group, cid),
                        zk_member_client_id(self.zk, group, cid),
                        sorted(owned.get(cid, [])),
                    )
                )
            state = "Stable" if members else "Empty"
        else:
            desc = self._describe_broker(group)
            state = "Dead" if desc is None else desc.state
            members = (
                []
                if desc is None
                else [(m.member_id, m.host.lstrip("/"), m.client_id, m.assignment) for m in desc.members]
            )
        if not self._print_state_warning(group, state):
            return False
        header = ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS"]
        widths = [-15, -15, -15, -15, -15]
        rows = [[group, cid, host, client, str(len(asg))] for cid, host, client, asg in members]
        if self.args.verbose:
            header.append("ASSIGNMENT")
            widths.append(0)
            for r, (_, _, _, asg) in zip(rows, members):
                r.append(_assignment_string(asg))
        _print_table(header, rows, widths)
        return True

    def _print_state(self, group) -> bool:
        if self.is_zk_group(group):
            n = len(zk_members(self.zk, group))
            state, coord, strategy = ("Stable" if n else "Empty"), f"{self.args.zookeeper}  (zookeeper)", MISSING
        else:
            desc = self._describe_broker(group)
            if desc is None or desc.state == "Dead":
                return self._print_state_warning(group, "Dead")
            node, host, port = desc.coordinator
            state, coord, strategy, n = (
                desc.state,
                f"{host}:{port}  ({node})",
                desc.assignment_strategy or MISSING,
                len(desc.members),
            )
        if state == "Empty":
            self._print_state_warning(group, state)
        cw = max(25, len(coord))
        _print_table(
            ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"],
            [[group, coord, strategy, state, str(n)]],
            [-15, -cw, 20, 20, 0],
        )
        return True

    # -- --reset-offsets ------------------------------------------------------------------------------
    def reset(self) -> int:
        a = self.args
        scenarios = [
            a.to_earliest,
            a.to_latest,
            a.to_current,
            a.to_offset is not None,
            a.shift_by is not None,
            a.to_datetime is not None,
            a.by_duration is not None,
            a.from_file is not None,
        ]
        if not any(scenarios):
            raise UsageError(
                "--reset-offsets needs one of --to-earliest, --to-latest, --to-current, "
                "--to-offset, --shift-by, --to-datetime, --by-duration, --from-file"
            )
        file_plan = read_reset_plan(a.from_file, self.target_groups()) if a.from_file is not None else None
        if not a.topic and not a.all_topics and file_plan is None:
            raise UsageError("--reset-offsets needs --topic or --all-topics")
        if a.topic and a.all_topics:
            raise UsageError("--topic and --all-topics are exclusive")
        if self.admin is None:
            raise PyklogError("--reset-offsets needs a reachable broker")
        ts = None
        if a.to_datetime is not None:
            ts = parse_datetime(a.to_datetime)
        elif a.by_duration is not None:
            ts = int(time.time() * 1000) - parse_duration(a.by_duration)
        if not a.dry_run and not a.execute:
            print(
                "WARN: No action will be performed as the --execute option is missing. "
                "Add --dry-run to keep this behaviour explicitly.",
                file=sys.stderr,
            )
        plan: dict = {}
        failed = False
        for g in self.target_groups():
            zk_group = self.is_zk_group(g)
            if zk_group:
                if zk_members(self.zk, g):
                    print(
                        f"Error: Assignments can only be reset if the group '{g}' is inactive, but the current "
                        f"state is Stable.",
                        file=sys.stderr,
                    )
                    failed = True
                    continue
                zk_offsets = zk_committed(self.zk, g, _zk_topics(self.zk, g))
                try:
                    broker_offsets = self.admin.list_group_offsets(g, timeout_s=self.timeout_s)
                except PyklogError:
                    broker_offsets = {}
                committed = dict(zk_offsets)
                committed.update(broker_offsets)
            else:
                desc = self._describe_broker(g)
                if desc.state not in ("Empty", "Dead"):
                    print(
                        f"Error: Assignments can only be reset if the group '{g}' is inactive, but the current "
                        f"state is {desc.state}.",
                        file=sys.stderr,
                    )
                    failed = True
                    continue
                committed = self.admin.list_group_offsets(g, timeout_s=self.timeout_s)
                zk_offsets, broker_offsets = {}, committed
            if file_plan is not None:
                new = dict(file_plan.get(g, {}))
                self._check_partitions(new)
            else:
                tps = self._partitions_to_reset(committed)
                new = self._prepare(g, tps, committed, ts)
            plan[g] = new
            if a.execute and new:
                if zk_group:
                    from pyklog.connector.offsets import ZooKeeperOffsetStore

                    to_zk = {tp: o for tp, o in new.items() if tp in zk_offsets or tp not in broker_offsets}
                    to_broker = {tp: o for tp, o in new.items() if tp in broker_offsets}
                    if to_zk and self.args.offsets_storage != "kafka":
                        ZooKeeperOffsetStore(self.zk).commit(g, to_zk)
                    if to_broker or self.args.offsets_storage == "kafka":
                        self.admin.alter_group_offsets(g, to_broker or new, timeout_s=self.timeout_s)
                else:
                    self.admin.alter_group_offsets(g, new, timeout_s=self.timeout_s)
        rows = [[g, t, str(p), str(o)] for g in sorted(plan) for (t, p), o in sorted(plan[g].items())]
        if a.export:
            print(export_csv(plan, single_group=len(a.group) == 1))
        elif plan:
            _print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows, [-15, -15, -10, 0])
        return 1 if failed else 0

    def _check_partitions(self, offsets: dict) -> None:
        """Every partition of a --from-file plan must exist (Kafka's checkAllTopicPartitionsValid)."""
        missing = []
        for t in sorted({t for t, _ in offsets}):
            try:
                known = set(self.admin.partitions_for(t))
            except PyklogError:
                known = set()
            missing += [f"{t}-{p}" for tt, p in sorted(offsets) if tt == t and p not in known]
        if missing:
            raise PyklogError(f'The partitions "{", ".join(missing)}" do not exist')

    def _partitions_to_reset(self, committed) -> list:
        a = self.args
        if a.all_topics:
            return sorted(committed)
        out = []
        for spec in a.topic:
            topic, sep, parts = spec.partition(":")
            if sep:
                try:
                    out += [(topic, int(x)) for x in parts.split(",") if x.strip()]
                except ValueError:
                    raise UsageError(f"--topic: expected TOPIC or TOPIC:P1,P2, got {spec!r}") from None
            else:
                out += [(topic, p) for p in self.admin.partitions_for(topic)]
        return sorted(set(out))

    def _prepare(self, group, tps, committed, ts) -> dict:
        from pyklog.connector.admin import EARLIEST, LATEST

        a = self.args
        if not tps:
            return {}
        lo = self.admin.list_offsets(dict.fromkeys(tps, EARLIEST), timeout_s=self.timeout_s)
        hi = self.admin.list_offsets(dict.fromkeys(tps, LATEST), timeout_s=self.timeout_s)

        def clamp(tp, o):
            return max(lo.get(tp) or 0, min(o, hi.get(tp) or 0))

        if a.to_earliest:
            return {tp: lo[tp] for tp in tps}
        if a.to_latest:
            return {tp: hi[tp] for tp in tps}
        if a.to_current:
            return {tp: committed.get(tp, hi[tp]) for tp in tps}
        if a.to_offset is not None:
            return {tp: clamp(tp, a.to_offset) for tp in tps}
        if a.shift_by is not None:
            missing = [f"{t}-{p}" for t, p in tps if (t, p) not in committed]
            if missing:
                raise PyklogError(f"group {group!r} has no committed offset to shift for {', '.join(missing)}")
            return {tp: clamp(tp, committed[tp] + a.shift_by) for tp in tps}
        found = self.admin.list_offsets(dict.fromkeys(tps, ts), timeout_s=self.timeout_s)
        return {tp: (found.get(tp) if found.get(tp) is not None else hi[tp]) for tp in tps}

    # -- --delete-offsets ------------------------------------------------------------------------------
    def delete_offsets(self) -> int:
        """Kafka's ``--delete-offsets``: OffsetDelete of the group's offsets of the given topics."""
        group = self.args.group[0]
        if self.admin is None:
            raise PyklogError("--delete-offsets needs a reachable broker")
        tps, missing = [], []
        for spec in self.args.topic:
            topic, sep, parts = spec.partition(":")
            if sep:
                tps += [(topic, int(x)) for x in parts.split(",") if x.strip().isdigit()]
            else:
                try:
                    tps += [(topic, p) for p in self.admin.partitions_for(topic)]
                except PyklogError as e:
                    missing.append((topic, e))
        top, per = self.admin.delete_group_offsets(group, tps, timeout_s=self.timeout_s) if tps else (None, {})
        failed = top is not None or any(e is not None for e in per.values()) or bool(missing)
        topics = ", ".join(dict.fromkeys(spec.partition(":")[0] for spec in self.args.topic))
        if top is None:
            print(f"Request succeed for deleting offsets with topic {topics} group {group}")
        elif top.name == "GROUP_ID_NOT_FOUND":
            print(f"Error: '{group}' does not exist.", file=sys.stderr)
        elif top.name == "NON_EMPTY_GROUP":
            print(
                f"Error: Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty.",
                file=sys.stderr,
            )
        elif top.name in ("GROUP_SUBSCRIBED_TO_TOPIC", "TOPIC_AUTHORIZATION_FAILED", "UNKNOWN_TOPIC_OR_PARTITION"):
            print("Error: Encounter some partition level error, see the follow-up details:", file=sys.stderr)
        else:
            print(f"Error: Encounter some unknown error: {top}", file=sys.stderr)
        rows = [(t, str(p), "Successful" if e is None else f"Error: {e}") for (t, p), e in sorted(per.items())]
        rows += [(t, "Not Provided", f"Error: {e}") for t, e in missing]
        if rows:
            print("\n%-30s %-15s %-15s" % ("TOPIC", "PARTITION", "STATUS"))
            for r in rows:
                print(("%-30s %-15s %-15s" % r).rstrip())
        return 1 if failed else 0

    # -- --delete -------------------------------------------------------------------------------------
    def delete(self) -> int:
        """DeleteGroups through the brokers, which delete broker groups and ZooKeeper groups
        (``/consumers/<g>``, one multi-op, NON_EMPTY_GROUP while a member is registered); without a
        reachable broker, a ZooKeeper group is deleted from ``--zookeeper`` directly."""
        groups = self.target_groups()
        errors: dict = {}
        broker_side = []
        if self.admin is not None:
            broker_side = list(groups)
            groups_zk = []
        else:
            groups_zk = groups
        for g in groups_zk:
            if self.is_zk_group(g):
                if zk_members(self.zk, g):
                    errors[g] = "NON_EMPTY_GROUP: the group has active members"
                    continue
                try:
                    self.zk.retry(self.zk.delete, paths.consumer_group(g), recursive=True)
                except NotEmptyError as e:  # a member registered meanwhile
                    errors[g] = f"NON_EMPTY_GROUP: {e}"
                    continue
                if self.admin is not None:  # offsets it committed to the broker (offsets.storage=kafka|dual)
                    try:
                        if self.admin.list_group_offsets(g, timeout_s=self.timeout_s):
                            broker_side.append(g)
                    except PyklogError:
                        pass
            else:
                broker_side.append(g)
        if broker_side:
            if self.admin is None:
                raise PyklogError("deleting broker groups needs a reachable broker")
            for g, e in self.admin.delete_groups(broker_side, timeout_s=self.timeout_s).items():
                if e is not None:
                    errors[g] = f"{getattr(e, 'name', None) or type(e).__name__}: {e}"
        ok = [g for g in groups if g not in errors]
        if not errors:
            print("Deletion of requested consumer groups (" + ", ".join(f"'{g}'" for g in ok) + ") was successful.")
            return 0
        print("Error: Deletion of some consumer groups failed:", file=sys.stderr)
        for g, e in errors.items():
            print(f"* Group '{g}' could not be deleted due to: {e}", file=sys.stderr)
        if ok:
            print("\nThese consumer groups were deleted successfully: " + ", ".join(f"'{g}'" for g in ok))
        return 1


def export_csv(plan: dict, single_group: bool) -> str:
    """Kafka's ``--export``: ``topic,partition,offset`` lines for one group, else
    ``group,topic,partition,offset`` (no header; the last line ends with a newline)."""
    lines = []
    for g in sorted(plan):
        for (t, p), o in sorted(plan[g].items()):
            lines.append(f"{t},{p},{o}" if single_group else f"{g},{t},{p},{o}")
    return "".join(line + "\n" for line in lines)


def read_reset_plan(path: str, groups: list[str]) -> dict:
    """Kafka's ``--from-file``: ``{group: {(topic, partition): offset}}`` from the CSV that
    ``--export`` writes.  Three columns apply to every group of the command (Kafka allows that with
    one group only), four name the group.  A usage error for a malformed line."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise PyklogError(f"cannot read --from-file {path!r}: {e.strerror or e}") from None
    plan: dict = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = [c.strip() for c in line.split(",")]
        try:
            if len(cols) == 3:
                if len(groups) != 1:
                    raise ValueError("a line without a group needs exactly one --group")
                g, t, p, o = groups[0], cols[0], int(cols[1]), int(cols[2])
            elif len(cols) == 4:
                g, t, p, o = cols[0], cols[1], int(cols[2]), int(cols[3])
            else:
                raise ValueError("expected topic,partition,offset or group,topic,partition,offset")
            if not t or p < 0 or o < 0:
                raise ValueError("a topic, a partition >= 0 and an offset >= 0")
        except ValueError as e:
            raise UsageError(f"--from-file {path}: line {n} {line!r}: {e}") from None
        plan.setdefault(g, {})[(t, p)] = o
    return plan


def _s(v) -> str:
    return MISSING if v is None else str(v)


def _assignment_string(asg) -> str:
    if not asg:
        return MISSING
    by: dict = {}
    for t, p in asg:
        by.setdefault(t, []).append(p)
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by.items()))


def _print_table(header, rows, widths, fixed: bool = False) -> None:
    """Kafka's printf layout: a blank line, the header, the rows, each column ``%-Ns`` with N the
    larger of its minimum (negative = grows with the values) and the widest value; the last column
    is not padded."""
    cols = []
    for i, w in enumerate(widths):
        if i == len(widths) - 1:
            cols.append(0)
            continue
        n = abs(w)
        if w < 0 and not fixed:
            n = max([n] + [len(r[i]) for r in rows] + [len(header[i])])
        cols.append(n)
    lines = [""]
    for r in [header] + rows:
        lines.append(" ".join(c.ljust(cols[i]) if i < len(cols) - 1 else c for i, c in enumerate(r)))
    print("\n".join(lines))


@reports_errors(failure="Executing consumer group command failed due to {}")
def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("kazoo").setLevel(logging.ERROR)  # connection retries are reported as one Error line
    args = build_parser().parse_args(argv)
    if not args.zookeeper:
        require(args, "bootstrap-server")
    if (
        (args.describe or args.delete or args.reset_offsets or args.delete_offsets)
        and not args.group
        and not args.all_groups
    ):
        raise UsageError("Option [describe|delete|reset-offsets] takes one of these options: [all-groups], [group]")
    if args.group and args.all_groups:
        raise UsageError("--group and --all-groups are exclusive")
    if (args.members or args.offsets) and not args.describe:
        raise UsageError("--members and --offsets need --describe")
    if args.state is not None and not (args.describe or args.list):
        raise UsageError("--state needs --describe or --list")
    if args.describe and args.state:
        raise UsageError("--describe --state takes no value (a state filter goes with --list)")
    args.state_filter, args.state = args.state, args.state is not None
    if sum([args.members, args.state, args.offsets]) > 1:
        raise UsageError("--members, --state and --offsets are exclusive")
    if args.delete_offsets and (len(args.group) != 1 or args.all_groups or not args.topic):
        raise UsageError("--delete-offsets needs exactly one --group and at least one --topic")
    if (args.dry_run or args.execute) and not args.reset_offsets:
        raise UsageError("--dry-run and --execute need --reset-offsets")
    if args.export and not args.reset_offsets:
        raise UsageError("Option [export] takes one of these options: [reset-offsets]")
    if args.type is not None and not args.list:
        raise UsageError("Option [type] takes one of these options: [list]")
    cmd = None
    try:
        cmd = GroupCommand(args)
        if args.list:
            if args.state or args.type is not None:
                return cmd.list_with_state(args.state_filter, args.type)
            for g in cmd.all_groups():
                print(g)
            return 0
        if args.describe:
            return cmd.describe()
        if args.reset_offsets:
            return cmd.reset()
        if args.delete_offsets:
            return cmd.delete_offsets()
        return cmd.delete()
    finally:
        if cmd is not None:
            cmd.close()


if __name__ == "__main__":
    sys.exit(main())
