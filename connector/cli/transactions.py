"""``pyklog-transactions``: inspect transactions and recover from hanging ones (Kafka's
kafka-transactions.sh, ``org.apache.kafka.tools.TransactionsCommand``, KIP-664).

    pyklog-transactions --bootstrap-server HOST:PORT list
    pyklog-transactions --bootstrap-server HOST:PORT describe --transactional-id ID
    pyklog-transactions --bootstrap-server HOST:PORT describe-producers --topic T --partition P [--broker-id B]
    pyklog-transactions --bootstrap-server HOST:PORT find-hanging (--broker-id B | --topic T [--partition P])
                        [--max-transaction-timeout MINUTES]
    pyklog-transactions --bootstrap-server HOST:PORT abort --topic T --partition P --start-offset OFFSET [--force]

Output: Kafka's tab-separated, padded columns (``list``: TransactionalId, Coordinator, ProducerId,
TransactionState; ``describe``: CoordinatorId ... TopicPartitions; ``describe-producers``: ProducerId,
ProducerEpoch, LatestCoordinatorEpoch, LastSequence, LastTimestamp, CurrentTransactionStartOffset;
``find-hanging``: Topic, Partition, ProducerId, ProducerEpoch, CoordinatorEpoch, StartOffset,
LastTimestamp, Duration(min)).

``find-hanging`` is Kafka's definition: a partition's producer state holds an open transaction
(DescribeProducers' current transaction start offset) whose last write is older than
``--max-transaction-timeout`` minutes (default 15, Kafka's ``transaction.max.timeout.ms``), and the
transaction coordinator does not count that partition in the producer's transaction (no
transactional id has that producer id, the id is unknown, or DescribeTransactions does not list the
partition): nobody will ever write its marker, so the partition's last stable offset is stuck and
read_committed consumers stop there.  ``abort`` writes that marker (WriteTxnMarkers ABORT at the
leader) for the transaction starting at ``--start-offset``.  Before writing it, ``abort`` asks the
transaction coordinator (ListTransactions by producer id, DescribeTransactions) and refuses a
transaction that is not hanging: one its coordinator holds as Ongoing, PrepareCommit or PrepareAbort
with that partition.  Kafka's tool writes the marker regardless, and on a live transaction the
partition's records written so far are aborted while the producer's commit still succeeds (silent
loss); ``--force`` (pyklog's flag) does what Kafka's tool does.

Exit codes as Kafka's tool: 0 on success, 1 on a usage error or a failed call (one line on stderr
saying which step failed and the broker's error).

Example::

    pyklog-transactions --bootstrap-server localhost:9092 find-hanging --broker-id 0
    pyklog-transactions --bootstrap-server localhost:9092 abort --topic orders --partition 3 --start-offset 1042
"""

from __future__ import annotations

import argparse
import sys
import time

from pyklog.broker.common.cli import tool_parser
from pyklog.broker.errors import PyklogError, TransactionalIdNotFoundError, error_for_code
from pyklog.connector.cli import client_security, setup_logging

_EPILOG = """examples:
  pyklog-transactions --bootstrap-server localhost:9092 list
  pyklog-transactions --bootstrap-server localhost:9092 describe --transactional-id my-app-0
  pyklog-transactions --bootstrap-server localhost:9092 describe-producers --topic orders --partition 0
  pyklog-transactions --bootstrap-server localhost:9092 find-hanging --broker-id 0
  pyklog-transactions --bootstrap-server localhost:9092 abort --topic orders --partition 0 --start-offset 42"""


class _Failed(Exception):
    """A command failed: the message goes to stderr, the exit code is 1 (Kafka's printErrorAndExit)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(1, f"{self.prog}: error: {message}\n")


def _why(e: PyklogError) -> str:
    """An error as the tool prints it: Kafka's error name, then what failed."""
    return str(e) if str(e).startswith(e.name) else f"{e.name}: {e}"


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-transactions",
        "This tool is used to analyze the transactional state of producers in "
        "the cluster. It can be used to detect and recover from hanging transactions.",
        _EPILOG,
        parser_class=_Parser,
    )
    p.add_argument(
        "--bootstrap-server",
        metavar="host:port",
        required=True,
        help="hostname and port for the broker to connect to (multiple comma-separated entries can be given)",
    )
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="client properties file: security.protocol, ssl.*, sasl.* (Kafka's client settings)",
    )
    sub = p.add_subparsers(dest="command", title="commands", metavar="COMMAND", required=True, parser_class=_Parser)
    sub.add_parser("list", help="list transactions")
    d = sub.add_parser("describe", help="describe the state of an active transactional-id")
    d.add_argument("--transactional-id", required=True, help="transactional id")
    dp = sub.add_parser("describe-producers", help="describe the states of active producers for a topic partition")
    dp.add_argument(
        "--broker-id", type=int, help="optional broker id to describe the producer state on a specific replica"
    )
    dp.add_argument("--topic", required=True, help="topic name")
    dp.add_argument("--partition", type=int, required=True, help="partition number")
    a = sub.add_parser("abort", help="abort a hanging transaction (requires administrative privileges)")
    a.add_argument("--topic", required=True, help="topic name")
    a.add_argument("--partition", type=int, required=True, help="partition number")
    a.add_argument("--start-offset", type=int, help="start offset of the transaction to abort")
    a.add_argument("--producer-id", type=int, help="producer id (brokers older than 3.0)")
    a.add_argument("--producer-epoch", type=int, help="producer epoch (brokers older than 3.0)")
    a.add_argument("--coordinator-epoch", type=int, help="coordinator epoch (brokers older than 3.0)")
    a.add_argument(
        "--force",
        action="store_true",
        help="abort even a transaction its coordinator still holds open with this partition (pyklog's "
        "check; what it wrote so far on the partition is discarded while its producer's commit succeeds)",
    )
    f = sub.add_parser("find-hanging", help="find hanging transactions")
    f.add_argument("--broker-id", type=int, help="broker id to search for hanging transactions")
    f.add_argument(
        "--max-transaction-timeout",
        type=int,
        default=15,
        help="maximum transaction timeout in minutes to limit the scope of the search (default 15)",
    )
    f.add_argument("--topic", help="topic name to limit search to")
    f.add_argument("--partition", type=int, help="partition number")
    return p


def pretty_table(headers, rows, out=None) -> None:
    """Kafka's ``prettyPrintTable``: every column padded to its widest value, each followed by a tab."""
    out = out or sys.stdout
    widths = [len(h) for h in headers]
    for r in rows:
        widths = [max(w, len(v)) for w, v in zip(widths, r)]
    for r in [list(headers)] + [list(r) for r in rows]:
        out.write("".join(v.ljust(w) + "\t" for v, w in zip(r, widths)) + "\n")


def _cmd_list(admin, a) -> None:
    try:
        by_broker = admin.list_transactions()
    except PyklogError as e:
        raise _Failed(f"Failed to list transactions: {_why(e)}") from None
    rows = [
        [t.transactional_id, str(node), str(t.producer_id), t.state]
        for node, listings in sorted(by_broker.items())
        for t in listings
    ]
    pretty_table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)


def _cmd_describe(admin, a) -> None:
    tid = a.transactional_id
    try:
        d = admin.describe_transactions([tid])[tid]
    except PyklogError as e:
        d = e
    if isinstance(d, PyklogError):
        raise _Failed(f"Failed to describe transaction state of transactional-id `{tid}`: {_why(d)}")
    if d.start_time_ms >= 0:
        start, duration = str(d.start_time_ms), str(int(time.time() * 1000) - d.start_time_ms)
    else:
        start = duration = "None"
    pretty_table(
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                str(d.coordinator),
                tid,
                str(d.producer_id),
                str(d.producer_epoch),
                d.state,
                str(d.timeout_ms),
                start,
                duration,
                ",".join(f"{t}-{p}" for t, p in d.partitions),
            ]
        ],
    )


def _describe_one(admin, topic: str, partition: int, broker_id=None):
    where = f"broker {broker_id}" if broker_id is not None else "leader"
    try:
        got = admin.describe_producers([(topic, partition)], broker_id=broker_id)[(topic, partition)]
    except PyklogError as e:
        got = e
    if isinstance(got, PyklogError):
        raise _Failed(f"Failed to describe producers for partition {topic}-{partition} on {where}: {_why(got)}")
    return got


def _cmd_describe_producers(admin, a) -> None:
    states = _describe_one(admin, a.topic, a.partition, a.broker_id)
    rows = [
        [
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.last_sequence),
            str(s.last_timestamp),
            str(s.current_txn_start_offset) if s.current_txn_start_offset >= 0 else "None",
        ]
        for s in states
    ]
    pretty_table(
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        rows,
    )


def _cmd_abort(admin, a) -> None:
    tp = (a.topic, a.partition)
    if a.start_offset is None and a.producer_id is None:
        raise _Failed(
            "The transaction to abort must be identified either with --start-offset (for brokers on 3.0 "
            "or above) or with --producer-id, --producer-epoch, and --coordinator-epoch (for older brokers)"
        )
    if a.start_offset is None:
        if a.producer_epoch is None:
            raise _Failed("Missing required argument --producer-epoch")
        if a.coordinator_epoch is None:
            raise _Failed("Missing required argument --coordinator-epoch")
        pid, epoch, coord_epoch = a.producer_id, a.producer_epoch, max(a.coordinator_epoch, 0)
    else:
        states = _describe_one(admin, *tp)
        found = [s for s in states if s.current_txn_start_offset == a.start_offset]
        if not found:
            raise _Failed(
                f"Could not find any open transactions starting at offset {a.start_offset} on partition {tp[0]}-{tp[1]}"
            )
        # a coordinator epoch of -1 (no marker yet) becomes 0, which no leader epoch is below (as Kafka)
        pid, epoch, coord_epoch = found[0].producer_id, found[0].producer_epoch, max(found[0].coordinator_epoch, 0)
    if not a.force:
        live = live_transaction(admin, tp, pid)
        if live is not None:
            raise _Failed(
                f"Refusing to abort the transaction of producer {pid} on {tp[0]}-{tp[1]}: it is not hanging. "
                f"Its coordinator (broker {live.coordinator}) holds transactional id {live.transactional_id!r} "
                f"as {live.state} with this partition, so its producer will commit or abort it (or the "
                f"coordinator aborts it at its timeout of {live.timeout_ms} ms). Aborting it here would "
                "discard what it wrote so far on this partition while its producer's commit still succeeds. "
                "Use --force to abort it anyway."
            )
    try:
        admin.abort_transaction(tp[0], tp[1], pid, epoch, coord_epoch)
    except PyklogError as e:
        raise _Failed(
            f"Failed to abort transaction of producer {pid} (epoch {epoch}, coordinator epoch "
            f"{coord_epoch}) on {tp[0]}-{tp[1]}: {_why(e)}"
        ) from None


_LIVE_STATES = frozenset({"Ongoing", "PrepareCommit", "PrepareAbort"})


def live_transaction(admin, tp: tuple[str, int], producer_id: int):
    """The coordinator's description of ``producer_id``'s transaction if the coordinator still holds
    it open with partition ``tp`` (Ongoing, PrepareCommit or PrepareAbort: it will write the marker
    itself), else None: the transaction is hanging as Kafka's ``find-hanging`` defines it.  Raises
    _Failed when the coordinator cannot be asked."""
    try:
        listings = admin.list_transactions(producer_id_filters=[producer_id])
        tids = sorted({t.transactional_id for ls in listings.values() for t in ls if t.producer_id == producer_id})
        descriptions = admin.describe_transactions(tids) if tids else {}
    except PyklogError as e:
        raise _Failed(
            f"Failed to check with the transaction coordinator whether the transaction of producer {producer_id} "
            f"is still live: {_why(e)} (use --force to abort without this check)"
        ) from None
    for d in descriptions.values():
        if isinstance(d, PyklogError):
            continue  # unknown to its coordinator: hanging
        if d.producer_id == producer_id and d.state in _LIVE_STATES and tuple(tp) in set(map(tuple, d.partitions)):
            return d
    return None


def find_hanging(
    admin, *, broker_id=None, topic=None, partition=None, max_transaction_timeout_ms=15 * 60000, now_ms=None
) -> list[tuple]:
    """Kafka's ``FindHangingTransactionsCommand`` -> ``[((topic, partition), ProducerState)]``: see the
    module docstring.  Raises _Failed naming the step that failed."""
    if topic is not None and partition is not None:
        tps = [(topic, partition)]
    else:
        try:
            md = admin.client.metadata([topic] if topic is not None else None, refresh=True)
        except PyklogError as e:
            raise _Failed(f"Failed to describe topics: {_why(e)}") from None
        if topic is not None and (topic not in md.topics or md.topics[topic].error_code):
            code = md.topics[topic].error_code if topic in md.topics else 3
            raise _Failed(f"Failed to describe 1 topics: {_why(error_for_code(code, topic))}")
        tps = sorted(
            (t, p)
            for t, tm in md.topics.items()
            for p, pm in tm.partitions.items()
            if broker_id is None or broker_id in (pm.replicas or (pm.leader,))
        )
    if not tps:
        return []
    try:
        producers = admin.describe_producers(tps, broker_id=broker_id)
    except PyklogError as e:
        raise _Failed(
            f"Failed to describe producers for {len(tps)} partitions on broker {broker_id}: {_why(e)}"
        ) from None
    now = int(time.time() * 1000) if now_ms is None else now_ms
    candidates: dict[int, list] = {}
    for tp, states in sorted(producers.items()):
        if isinstance(states, PyklogError):
            raise _Failed(
                f"Failed to describe producers for partition {tp[0]}-{tp[1]} on broker {broker_id}: {_why(states)}"
            )
        for s in states:
            if s.current_txn_start_offset >= 0 and now - s.last_timestamp > max_transaction_timeout_ms:
                candidates.setdefault(s.producer_id, []).append((tp, s))
    if not candidates:
        return []
    try:
        listings = admin.list_transactions(producer_id_filters=sorted(candidates))
    except PyklogError as e:
        raise _Failed(f"Failed to list transactions for {len(candidates)} producers: {_why(e)}") from None
    tids = {t.producer_id: t.transactional_id for ls in listings.values() for t in ls if t.producer_id in candidates}
    try:
        descriptions = admin.describe_transactions(sorted(set(tids.values())))
    except PyklogError as e:
        raise _Failed(f"Failed to describe {len(tids)} transactions: {_why(e)}") from None
    hanging = []
    for pid, opens in sorted(candidates.items()):
        d = descriptions.get(tids.get(pid)) if pid in tids else None
        if isinstance(d, TransactionalIdNotFoundError):
            d = None
        elif isinstance(d, PyklogError):
            raise _Failed(f"Failed to describe transaction {tids[pid]!r}: {_why(d)}")
        for tp, s in opens:
            # the coordinator still counts this partition in the producer's transaction: it will
            # write the marker itself (on commit, abort or timeout), so the transaction is not hanging
            if d is None or tp not in set(map(tuple, d.partitions)):
                hanging.append((tp, s))
    return hanging


def _cmd_find_hanging(admin, a) -> None:
    if a.topic is None and a.broker_id is None:
        raise _Failed(
            "The `find-hanging` command requires either --topic or --broker-id to limit the scope of the search"
        )
    if a.partition is not None and a.topic is None:
        raise _Failed("The --partition argument requires --topic to be provided")
    now = int(time.time() * 1000)
    hanging = find_hanging(
        admin,
        broker_id=a.broker_id,
        topic=a.topic,
        partition=a.partition,
        max_transaction_timeout_ms=a.max_transaction_timeout * 60000,
        now_ms=now,
    )
    rows = [
        [
            tp[0],
            str(tp[1]),
            str(s.producer_id),
            str(s.producer_epoch),
            str(s.coordinator_epoch),
            str(s.current_txn_start_offset),
            str(s.last_timestamp),
            str((now - s.last_timestamp) // 60000),
        ]
        for tp, s in hanging
    ]
    pretty_table(
        [
            "Topic",
            "Partition",
            "ProducerId",
            "ProducerEpoch",
            "CoordinatorEpoch",
            "StartOffset",
            "LastTimestamp",
            "Duration(min)",
        ],
        rows,
    )


_COMMANDS = {
    "list": _cmd_list,
    "describe": _cmd_describe,
    "describe-producers": _cmd_describe_producers,
    "abort": _cmd_abort,
    "find-hanging": _cmd_find_hanging,
}


def main(argv=None) -> int:
    setup_logging()
    a = build_parser().parse_args(argv)  # usage errors exit 1 here
    from pyklog.connector.admin import AdminClient

    try:
        with AdminClient(
            a.bootstrap_server,
            client_id="pyklog-transactions",
            request_timeout_ms=30000,
            security=client_security(a.command_config),
        ) as admin:
            _COMMANDS[a.command](admin, a)
    except _Failed as e:
        print(str(e), file=sys.stderr)
        return 1
    except PyklogError as e:
        print(f"Failed to run {a.command}: {_why(e)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
