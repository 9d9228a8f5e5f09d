"""``pyklog-reassign-partitions``: move partition replicas between brokers (Kafka's
kafka-reassign-partitions.sh, ReassignPartitionsCommand, ZooKeeper mode).

    pyklog-reassign-partitions --zookeeper ZK --generate --topics-to-move-json-file F --broker-list 1,2,3
    pyklog-reassign-partitions --zookeeper ZK --reassignment-json-file F --execute
    pyklog-reassign-partitions --zookeeper ZK --reassignment-json-file F --verify

    pyklog-reassign-partitions --bootstrap-server HOST:PORT --reassignment-json-file F --execute|--verify|--cancel
    pyklog-reassign-partitions --bootstrap-server HOST:PORT --list

With ``--bootstrap-server`` (Kafka 2.4+'s tool) ``--execute``, ``--verify``, ``--cancel`` and ``--list``
go through the controller's AlterPartitionReassignments / ListPartitionReassignments (KIP-455) and
print Kafka 2.5+'s messages (``--throttle RATE`` sets the KIP-73 replication throttle for the move,
``--verify`` clears it once complete); with ``--zookeeper`` ``--execute`` writes ``/admin/reassign_partitions``
(Kafka's older path) and ``--verify`` prints the 2.x messages.

Kafka's JSON: the topics file ``{"topics": [{"topic": "foo"}], "version": 1}``; the reassignment
``{"version": 1, "partitions": [{"topic": "foo", "partition": 0, "replicas": [1, 2, 3],
"log_dirs": ["any", "any", "any"]}]}`` (``log_dirs`` optional, only ``"any"``).  ``--execute`` prints
the current assignment (to roll back with) and writes the znode the controller carries out
(pyklog.broker.controller): new replicas added, caught up into the ISR, leader moved if needed,
old replicas removed.  ``--verify`` says per partition ``completed successfully``, ``is still in
progress`` or ``failed``.  Exit code 1 on bad input or when ZooKeeper/brokers cannot be reached.
"""

from __future__ import annotations

import argparse
import json
import sys

from pyklog.broker.common.cli import UsageError, json_list_document, tool_parser
from pyklog.broker.errors import PyklogError
from pyklog.connector.cli import add_command_config, client_security, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-reassign-partitions",
        "Move partition replicas between brokers.",
        "examples:\n  pyklog-reassign-partitions --zookeeper localhost:2181 --generate "
        "--topics-to-move-json-file topics.json --broker-list 0,1,2\n"
        "  pyklog-reassign-partitions --zookeeper localhost:2181 --reassignment-json-file r.json "
        "--execute",
    )
    p.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="ZooKeeper of the cluster")
    p.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the brokers (--generate, --verify)")
    for flag, text in (
        ("--generate", "propose an assignment of the topics over --broker-list"),
        ("--execute", "start the reassignment of --reassignment-json-file"),
        ("--verify", "report the status of --reassignment-json-file"),
        ("--cancel", "cancel the reassignments of --reassignment-json-file (--bootstrap-server)"),
        ("--list", "list the reassignments in progress (--bootstrap-server)"),
        ("--additional", "--execute even when other reassignments are in progress (--bootstrap-server)"),
        ("--preserve-throttles", "--verify: keep the throttles"),
    ):
        p.add_argument(flag, action="store_true", help=text)
    p.add_argument("--timeout", type=int, default=10000, help="ms to wait for the controller (default 10000)")
    p.add_argument("--topics-to-move-json-file", metavar="FILE", help='{"topics": [{"topic": "foo"}], "version": 1}')
    p.add_argument("--broker-list", metavar="IDS", help="brokers to assign to, e.g. 0,1,2")
    p.add_argument("--reassignment-json-file", metavar="FILE", help="Kafka's reassignment JSON")
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="--generate: ignore broker.rack (with --zookeeper racks are read from the registrations)",
    )
    p.add_argument(
        "--throttle",
        type=int,
        default=-1,
        help="--execute with --bootstrap-server: replication throttle in bytes/s for the moving "
        "replicas (leader side), removed by --verify once every reassignment is complete",
    )
    add_command_config(p)
    return p


def _print_rollback(current: dict, target: dict) -> None:
    """Kafka's ``--execute`` preamble: the moved partitions' current assignment, to roll back with."""
    print("Current partition replica assignment")
    print()
    print(format_assignment({tp: current[tp] for tp in target}))
    print()
    print("Save this to use as the --reassignment-json-file option during rollback")


def format_assignment(assignment: dict) -> str:
    """Kafka's reassignment JSON (with ``log_dirs`` of ``"any"``), partitions in order."""
    return json.dumps(
        {
            "version": 1,
            "partitions": [
                {"topic": t, "partition": p, "replicas": list(r), "log_dirs": ["any"] * len(r)}
                for (t, p), r in sorted(assignment.items())
            ],
        },
        separators=(",", ":"),
    )


def parse_reassignment_json(text: str) -> dict[tuple[str, int], list[int]]:
    """Kafka's reassignment JSON -> ``{(topic, partition): [replicas]}``; ValueError names the problem."""
    doc, _ = json_list_document(
        text,
        "reassignment JSON file",
        "partitions",
        '{"version": 1, "partitions": [{"topic": ..., "partition": ..., "replicas": [...]}]}',
    )
    if not doc["partitions"]:
        raise ValueError("Partition reassignment data file is empty")
    out: dict = {}
    for i, e in enumerate(doc["partitions"]):
        if (
            not isinstance(e, dict)
            or not isinstance(e.get("topic"), str)
            or not isinstance(e.get("partition"), int)
            or not isinstance(e.get("replicas"), list)
            or not all(isinstance(r, int) for r in e["replicas"])
        ):
            raise ValueError(
                f"partitions[{i}]: expected topic (string), partition (integer) and replicas "
                f"(list of broker ids), got {e!r}"
            )
        tp = (e["topic"], e["partition"])
        if tp in out:
            raise ValueError(f"Partition reassignment contains duplicate topic partitions: {tp[0]}-{tp[1]}")
        if not e["replicas"]:
            raise ValueError(f"Partition replica list cannot be empty: {tp[0]}-{tp[1]}")
        if len(set(e["replicas"])) != len(e["replicas"]):
            raise ValueError(
                f"Partition replica lists may not contain duplicate entries: {tp[0]}-{tp[1]} contains {e['replicas']}"
            )
        dirs = e.get("log_dirs")
        if dirs is not None and (
            not isinstance(dirs, list) or len(dirs) != len(e["replicas"]) or any(d != "any" for d in dirs)
        ):
            raise ValueError(
                f'{tp[0]}-{tp[1]}: log_dirs must list "any" once per replica '
                "(pyklog does not move replicas between log dirs)"
            )
        out[tp] = list(e["replicas"])
    return out


def parse_topics_json(text: str) -> list[str]:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"the topics JSON file is not valid JSON: {e}") from None
    if (
        not isinstance(doc, dict)
        or not isinstance(doc.get("topics"), list)
        or not all(isinstance(t, dict) and isinstance(t.get("topic"), str) for t in doc["topics"])
    ):
        raise ValueError('the topics JSON must be {"topics": [{"topic": "foo"}], "version": 1}')
    return list(dict.fromkeys(t["topic"] for t in doc["topics"]))


class _Cluster:
    """The current assignment and live brokers, from ZooKeeper or through Metadata."""

    def __init__(self, zookeeper: str | None, bootstrap: str | None, security=None):
        self.zk_cluster = None
        self.client = None
        if zookeeper:
            from pyklog.broker.zk.cluster import ZkCluster
            from pyklog.broker.zk.znode_acls import tool_security

            self.zk_cluster = ZkCluster(zookeeper, None, **tool_security()).start()
        else:
            from pyklog.connector.admin import AdminClient
            from pyklog.connector.client import ClusterClient

            self.client = ClusterClient(bootstrap, client_id="pyklog-reassign-partitions", security=security)
            self.admin = AdminClient(client=self.client)

    def close(self):
        if self.zk_cluster is not None:
            self.zk_cluster.stop()
        if self.client is not None:
            self.client.close()

    def brokers(self) -> set[int]:
        if self.zk_cluster is not None:
            return set(self.zk_cluster.live_brokers())
        return set(self.client.metadata(None, refresh=True).brokers)

    def assignment(self, topics) -> dict[tuple[str, int], list[int]]:
        out = {}
        if self.zk_cluster is not None:
            for t in topics:
                parts = self.zk_cluster.topic(t) or {}
                out.update({(t, p): list(s.replicas) for p, s in parts.items()})
            return out
        md = self.client.metadata(list(topics), refresh=True)
        for t in topics:
            tm = md.topics.get(t)
            if tm is None or tm.error_code:
                continue
            out.update({(t, p): list(pm.replicas) for p, pm in tm.partitions.items()})
        return out

    def in_progress(self) -> dict | None:
        if self.zk_cluster is None:
            return None
        from kazoo.exceptions import NoNodeError

        from pyklog.broker.zk import paths
        from pyklog.broker.zk.znodes import decode_reassignment

        try:
            data, _ = self.zk_cluster.retry(self.zk_cluster.zk.get, paths.ADMIN_REASSIGN_PARTITIONS)
        except NoNodeError:
            return {}
        return decode_reassignment(data, paths.ADMIN_REASSIGN_PARTITIONS)

    def write(self, target: dict) -> bool:
        """Create ``/admin/reassign_partitions``; False if a reassignment is already running."""
        from kazoo.exceptions import NodeExistsError

        from pyklog.broker.zk import paths
        from pyklog.broker.zk.znodes import encode_reassignment

        try:
            self.zk_cluster.retry(
                self.zk_cluster.zk.create, paths.ADMIN_REASSIGN_PARTITIONS, encode_reassignment(target), makepath=True
            )
            return True
        except NodeExistsError:
            return False


def _read(path: str, what: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise UsageError(f"cannot read the {what} {path}: {e}") from None


def main(argv=None) -> int:
    setup_logging()
    try:
        a = build_parser().parse_args(argv)
        actions = [n for n in ("generate", "execute", "verify", "cancel", "list") if getattr(a, n)]
        if len(actions) != 1:
            raise UsageError(
                "Command must include exactly one action: --generate, --execute, --verify, --cancel or --list"
            )
        if bool(a.zookeeper) == bool(a.bootstrap_server):
            raise UsageError("Exactly one of --zookeeper or --bootstrap-server is required")
        action = actions[0]
        if action in ("cancel", "list") and not a.bootstrap_server:
            raise UsageError(f"--{action} needs --bootstrap-server (the KIP-455 APIs)")
        target = None
        if action == "list":
            pass
        elif action == "generate":
            if not a.topics_to_move_json_file or not a.broker_list:
                raise UsageError("--generate needs --topics-to-move-json-file and --broker-list")
            try:
                topics = parse_topics_json(_read(a.topics_to_move_json_file, "topics JSON file"))
                brokers = sorted({int(b) for b in a.broker_list.split(",") if b.strip()})
            except ValueError as e:
                raise UsageError(str(e)) from None
            if not brokers:
                raise UsageError("--broker-list: expected broker ids such as 0,1,2")
        else:
            if not a.reassignment_json_file:
                raise UsageError(f"--{action} needs --reassignment-json-file")
            try:
                target = parse_reassignment_json(_read(a.reassignment_json_file, "reassignment JSON file"))
            except ValueError as e:
                raise UsageError(str(e)) from None
    except UsageError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    try:
        cluster = _Cluster(a.zookeeper, a.bootstrap_server, client_security(a.command_config))
    except PyklogError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    try:
        if action == "generate":
            return _generate(cluster, topics, brokers, not a.disable_rack_aware)
        if cluster.zk_cluster is None:  # KIP-455: through the controller
            timeout_s = max(1.0, a.timeout / 1000.0)
            if action == "execute":
                return _execute_api(cluster, target, a.additional, timeout_s, a.throttle)
            if action == "verify":
                return _verify_api(cluster, target, timeout_s, a.preserve_throttles)
            if action == "cancel":
                return _cancel_api(cluster, target, timeout_s)
            return _list_api(cluster, timeout_s)
        if action == "execute":
            return _execute(cluster, target)
        return _verify(cluster, target)
    except PyklogError as e:
        print(f"Error: {e}", file=sys.stderr)
        return 1
    finally:
        cluster.close()


def _generate(cluster: _Cluster, topics: list[str], brokers: list[int], rack_aware: bool = True) -> int:
    from pyklog.broker.zk.topics import assign_replicas, placement_racks

    current = cluster.assignment(topics)
    missing = [t for t in topics if not any(tp[0] == t for tp in current)]
    if missing:
        print(f"Error: Topic(s) {', '.join(missing)} do(es) not exist", file=sys.stderr)
        return 1
    racks = None
    if cluster.zk_cluster is not None:  # Metadata carries no racks: only the registrations say
        racks = placement_racks(cluster.zk_cluster.broker_racks(brokers), rack_aware)
    proposed = {}
    for t in topics:
        parts = sorted(p for (tt, p) in current if tt == t)
        rf = len(current[(t, parts[0])])
        for p, replicas in assign_replicas(brokers, len(parts), rf, racks=racks).items():
            proposed[(t, p)] = replicas
    print("Current partition replica assignment")
    print(format_assignment(current))
    print()
    print("Proposed partition reassignment configuration")
    print(format_assignment(proposed))
    return 0


def _execute(cluster: _Cluster, target: dict) -> int:
    current = cluster.assignment(sorted({t for t, _ in target}))
    unknown = sorted(tp for tp in target if tp not in current)
    if unknown:
        print(
            "Error: The proposed assignment contains non-existent partitions: "
            + ", ".join(f"{t}-{p}" for t, p in unknown),
            file=sys.stderr,
        )
        return 1
    known = cluster.brokers()
    bad = sorted({r for rs in target.values() for r in rs} - known)
    if bad:
        print(
            f"Error: The proposed assignment contains non-existent brokerIDs: {','.join(map(str, bad))}",
            file=sys.stderr,
        )
        return 1
    _print_rollback(current, target)
    if not cluster.write(target):
        print("Error: There is an existing assignment running.", file=sys.stderr)
        return 1
    print("Successfully started reassignment of partitions.")
    return 0


def _verify(cluster: _Cluster, target: dict) -> int:
    current = cluster.assignment(sorted({t for t, _ in target}))
    running = cluster.in_progress()
    print("Status of partition reassignment:")
    for tp, replicas in sorted(target.items()):
        name = f"{tp[0]}-{tp[1]}"
        if running and tp in running:  # Kafka's order: the znode first (RS+TRS may equal the target)
            print(f"Reassignment of partition {name} is still in progress")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {name} completed successfully")
        elif running is None:
            print(f"Reassignment of partition {name} is still in progress")
        else:
            print(f"Reassignment of partition {name} failed")
    return 0


def _names(tps) -> str:
    return ",".join(f"{t}-{p}" for t, p in sorted(tps))


def _check_target(cluster: _Cluster, target: dict, current: dict) -> str | None:
    unknown = sorted(tp for tp in target if tp not in current)
    if unknown:
        return "The proposed assignment contains non-existent partitions: " + _names(unknown)
    bad = sorted({r for rs in target.values() for r in rs} - cluster.brokers())
    if bad:
        return f"The proposed assignment contains non-existent brokerIDs: {','.join(map(str, bad))}"
    return None


THROTTLE_RATES = ("leader.replication.throttled.rate", "follower.replication.throttled.rate")
THROTTLE_REPLICAS = ("leader.replication.throttled.replicas", "follower.replication.throttled.replicas")
BROKER, TOPIC = 4, 2  # ConfigResource types


def _set_throttles(cluster: _Cluster, target: dict, current: dict, rate: int, timeout_s: float) -> None:
    """Kafka's ``modifyReassignmentThrottle`` + ``modifyTopicThrottles``: the rate on every broker
    of the moves, the current replicas as leader-throttled and the added ones as follower-throttled."""
    brokers = sorted({b for tp in target for b in list(current[tp]) + list(target[tp])})
    for b in brokers:
        cluster.admin.incremental_alter_configs(
            BROKER, str(b), [(k, 0, str(rate)) for k in THROTTLE_RATES], timeout_s=timeout_s
        )
    for topic in sorted({t for t, _ in target}):
        moving = sorted(p for t, p in target if t == topic and current[(t, p)] != target[(t, p)])
        leader = ",".join(f"{p}:{b}" for p in moving for b in current[(topic, p)])
        follower = ",".join(f"{p}:{b}" for p in moving for b in target[(topic, p)] if b not in current[(topic, p)])
        ops = [(THROTTLE_REPLICAS[0], 0, leader)] if leader else []
        ops += [(THROTTLE_REPLICAS[1], 0, follower)] if follower else []
        if ops:
            cluster.admin.incremental_alter_configs(TOPIC, topic, ops, timeout_s=timeout_s)


def _clear_throttles(cluster: _Cluster, topics, timeout_s: float) -> None:
    """Kafka's ``clearAllThrottles``: the rates off every live broker, the replica lists off the topics."""
    brokers = sorted(cluster.brokers())
    print(f"Clearing broker-level throttles on broker{'s' if len(brokers) > 1 else ''} {','.join(map(str, brokers))}")
    for b in brokers:
        cluster.admin.incremental_alter_configs(
            BROKER, str(b), [(k, 1, None) for k in THROTTLE_RATES], timeout_s=timeout_s
        )
    topics = sorted(set(topics))
    print(f"Clearing topic-level throttles on topic{'s' if len(topics) > 1 else ''} {','.join(topics)}")
    for t in topics:
        cluster.admin.incremental_alter_configs(
            TOPIC, t, [(k, 1, None) for k in THROTTLE_REPLICAS], timeout_s=timeout_s
        )


def _execute_api(cluster: _Cluster, target: dict, additional: bool, timeout_s: float, throttle: int = -1) -> int:
    """Kafka 2.5+'s ``executeAssignment`` through AlterPartitionReassignments."""
    current = cluster.assignment(sorted({t for t, _ in target}))
    problem = _check_target(cluster, target, current)
    if problem:
        print(f"Error: {problem}", file=sys.stderr)
        return 1
    if not additional and cluster.admin.list_partition_reassignments(timeout_s=timeout_s):
        print(
            "Error: Cannot execute because there is an existing partition assignment.  Use --additional to "
            "override this and create a new partition assignment in addition to the existing one.",
            file=sys.stderr,
        )
        return 1
    _print_rollback(current, target)
    if throttle >= 0:
        _set_throttles(cluster, target, current, throttle, timeout_s)
        print(
            "Warning: You must run --verify periodically, until the reassignment completes, to ensure the "
            "throttle is removed."
        )
        print(f"The inter-broker throttle limit was set to {throttle} B/s")
    results = cluster.admin.alter_partition_reassignments(target, timeout_s=timeout_s)
    failed = {tp: e for tp, e in results.items() if e is not None}
    if failed:
        for tp, e in sorted(failed.items()):
            print(f"Error reassigning partition(s):\n{tp[0]}-{tp[1]}: {e}", file=sys.stderr)
        return 1
    print(f"Successfully started partition reassignment{'s' if len(target) > 1 else ''} for {_names(target)}")
    return 0


def _verify_api(cluster: _Cluster, target: dict, timeout_s: float, preserve_throttles: bool = False) -> int:
    """Kafka 2.5+'s ``verifyAssignment``: ongoing reassignments from the controller, the rest
    compared with the assignment in the metadata."""
    running = cluster.admin.list_partition_reassignments(list(target), timeout_s=timeout_s)
    current = cluster.assignment(sorted({t for t, _ in target}))
    all_done = not running and all(current.get(tp) == r for tp, r in target.items())
    print("Status of partition reassignment:")
    for tp, replicas in sorted(target.items()):
        name = f"{tp[0]}-{tp[1]}"
        if tp in running:
            print(f"Reassignment of partition {name} is still in progress.")
        elif current.get(tp) == replicas:
            print(f"Reassignment of partition {name} is complete.")
        else:
            print(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{current.get(tp, [])} rather than {replicas}."
            )
    if all_done and not preserve_throttles:  # Kafka: throttles go once nothing is moving any more
        print()
        _clear_throttles(cluster, {t for t, _ in target}, timeout_s)
    return 0


def _cancel_api(cluster: _Cluster, target: dict, timeout_s: float) -> int:
    """Kafka 2.5+'s ``cancelAssignment``: null replicas for the partitions of the file."""
    running = cluster.admin.list_partition_reassignments(list(target), timeout_s=timeout_s)
    todo = [tp for tp in sorted(target) if tp in running]
    results = cluster.admin.alter_partition_reassignments(dict.fromkeys(todo), timeout_s=timeout_s) if todo else {}
    failed = {tp: e for tp, e in results.items() if e is not None}
    for tp, e in sorted(failed.items()):
        print(f"Error cancelling partition reassignment for {tp[0]}-{tp[1]}: {e}", file=sys.stderr)
    done = [tp for tp in todo if tp not in failed]
    if done:
        print(f"Successfully cancelled partition reassignment{'s' if len(done) > 1 else ''} for: {_names(done)}")
    else:
        print("None of the specified partition reassignments are active.")
    return 1 if failed else 0


def _list_api(cluster: _Cluster, timeout_s: float) -> int:
    running = cluster.admin.list_partition_reassignments(timeout_s=timeout_s)
    if not running:
        print("No partition reassignments found.")
        return 0
    print("Current partition reassignments:")
    for (t, p), r in sorted(running.items()):
        print(
            f"{t}-{p}: replicas: {','.join(map(str, r['replicas']))}. adding: "
            f"{','.join(map(str, r['adding_replicas']))}. removing: {','.join(map(str, r['removing_replicas']))}."
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
