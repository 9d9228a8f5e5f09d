"""``pyklog-leader-election``: elect partition leaders (Kafka's kafka-leader-election.sh,
LeaderElectionCommand), through the ElectLeaders API (key 43) at the controller.

    pyklog-leader-election --bootstrap-server HOST:PORT --election-type preferred|unclean
        (--topic T --partition P | --all-topic-partitions | --path-to-json-file FILE)

The JSON file is Kafka's: ``{"partitions": [{"topic": "t", "partition": 0}]}``.  ``preferred``
makes each partition's first replica its leader when it is live and in the ISR; ``unclean`` elects
a live replica for a partition that has no leader, also from outside the ISR (records may be lost).
Output as Kafka's tool::

    Successfully completed leader election (PREFERRED) for partitions t-0, t-1
    Valid replica already elected for partitions t-2
    Error completing leader election (PREFERRED) for partition: t-3: ...

Exit code 1 on bad arguments, an unreachable cluster, or when a partition could not be elected.
"""

from __future__ import annotations

import argparse
import sys

from pyklog.broker.common.cli import UsageError, json_list_document, read_option_file, tool_parser
from pyklog.broker.errors import ElectionNotNeededError, PyklogError, error_for_code
from pyklog.broker.protocol import ApiKey
from pyklog.connector.cli import add_command_config, client_security, setup_logging

ELECTION_TYPES = {"preferred": 0, "unclean": 1}


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-leader-election",
        "Elect the preferred replica, or a live replica out of the ISR (unclean), as leader.",
        "example:\n  pyklog-leader-election --bootstrap-server localhost:9092 --election-type preferred "
        "--all-topic-partitions",
    )
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="REQUIRED: the brokers")
    add_command_config(p)
    p.add_argument("--election-type", metavar="TYPE", help="REQUIRED: preferred or unclean")
    p.add_argument("--topic", help="the topic (with --partition)")
    p.add_argument("--partition", type=int, help="the partition (with --topic)")
    p.add_argument("--all-topic-partitions", action="store_true", help="every partition of every topic")
    p.add_argument("--path-to-json-file", metavar="FILE", help='{"partitions": [{"topic": ..., "partition": ...}]}')
    p.add_argument("--admin.config", dest="admin_config", help="accepted for compatibility (no security settings)")
    return p


def parse_partitions_json(text: str) -> list[tuple[str, int]]:
    """Kafka's partitions JSON -> ``[(topic, partition)]``; ValueError names what is wrong."""
    doc, _ = json_list_document(text, "JSON file", "partitions", '{"partitions": [{"topic": ..., "partition": ...}]}')
    out = []
    for i, e in enumerate(doc["partitions"]):
        if not isinstance(e, dict) or not isinstance(e.get("topic"), str) or not isinstance(e.get("partition"), int):
            raise ValueError(f"partitions[{i}]: expected topic (string) and partition (integer), got {e!r}")
        if (e["topic"], e["partition"]) in out:
            raise ValueError(f"Replica election data contains duplicate partitions: {e['topic']}-{e['partition']}")
        out.append((e["topic"], e["partition"]))
    return out


def elect_leaders(client, partitions, election_type: int, timeout_s: float = 30.0) -> dict:
    """ElectLeaders at the controller (``client``: a ClusterClient): ``{(t, p): None or the error}``;
    ``partitions`` None means every partition."""

    def call(node, conn):
        if int(ApiKey.ELECT_LEADERS) not in conn.api_versions:
            raise error_for_code(
                35, f"UNSUPPORTED_VERSION: broker {conn.host}:{conn.port} does not support ElectLeaders (API key 43)"
            )
        v = conn.version_for(ApiKey.ELECT_LEADERS)
        if v < 1 and election_type != 0:
            raise error_for_code(35, "the broker's ElectLeaders v0 has no unclean election")
        topics: dict = {}
        for t, p in partitions or ():
            topics.setdefault(t, []).append(int(p))
        resp = conn.request(
            ApiKey.ELECT_LEADERS,
            {
                "election_type": election_type,
                "timeout_ms": int(timeout_s * 1000),
                "topic_partitions": None
                if partitions is None
                else [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            },
            v,
        )
        if resp.get("error_code"):
            raise error_for_code(resp["error_code"], "ElectLeaders")
        out = {}
        for r in resp.get("replica_election_results") or []:
            for pr in r.get("partition_result") or []:
                code = pr.get("error_code", 0)
                out[(r["topic"], pr["partition_id"])] = (
                    None if not code else error_for_code(code, pr.get("error_message") or "")
                )
        return out

    return client.controller_call("ElectLeaders", call, timeout_s)


def main(argv=None) -> int:
    setup_logging()
    try:
        a = build_parser().parse_args(argv)
        if not a.bootstrap_server:
            raise UsageError("Missing required option(s) [bootstrap-server]")
        if not a.election_type:
            raise UsageError("Missing required option(s) [election-type]")
        etype_name = a.election_type.lower()
        if etype_name not in ELECTION_TYPES:
            raise UsageError(f"Unknown election type {a.election_type!r}: expected preferred or unclean")
        sources = sum([a.topic is not None, a.all_topic_partitions, a.path_to_json_file is not None])
        if sources != 1:
            raise UsageError(
                "One and only one of the following options is required: all-topic-partitions, topic, path-to-json-file"
            )
        if (a.topic is None) != (a.partition is None):
            raise UsageError("--topic and --partition go together")
        partitions = None
        if a.topic is not None:
            partitions = [(a.topic, a.partition)]
        elif a.path_to_json_file:
            partitions = read_option_file(a.path_to_json_file, parse_partitions_json)
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    from pyklog.connector.client import ClusterClient

    label = etype_name.upper()
    try:
        client = ClusterClient(
            a.bootstrap_server,
            client_id="pyklog-leader-election",
            request_timeout_ms=30000,
            security=client_security(a.command_config),
        )
        try:
            results = elect_leaders(client, partitions, ELECTION_TYPES[etype_name])
        finally:
            client.close()
    except PyklogError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    succeeded = [tp for tp, e in results.items() if e is None]
    noop = [tp for tp, e in results.items() if isinstance(e, ElectionNotNeededError)]
    failed = {tp: e for tp, e in results.items() if e is not None and not isinstance(e, ElectionNotNeededError)}

    def names(tps):
        return ", ".join(f"{t}-{p}" for t, p in sorted(tps))

    if succeeded:
        print(f"Successfully completed leader election ({label}) for partitions {names(succeeded)}")
    if noop:
        print(f"Valid replica already elected for partitions {names(noop)}")
    if failed:
        for (t, p), e in sorted(failed.items()):
            print(f"Error completing leader election ({label}) for partition: {t}-{p}: {e.name}: {e}")
        print(f"Error: {len(failed)} replica(s) could not be elected", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
