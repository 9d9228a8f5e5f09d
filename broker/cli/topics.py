"""``pyklog-topics``: create, list, describe, alter and delete topics (Kafka's kafka-topics.sh).

    pyklog-topics --bootstrap-server HOST:PORT --create --topic T --partitions N [--config k=v ...]
    pyklog-topics --bootstrap-server ... --list | --describe [--topic T] | --delete --topic T
    pyklog-topics --bootstrap-server ... --alter --topic T --partitions N
    pyklog-topics --zookeeper host:port[/chroot] --create --topic T --partitions N
                  [--replication-factor 1] [--config k=v ...] [--if-not-exists]
    pyklog-topics --zookeeper ... --list [--exclude-internal]
    pyklog-topics --zookeeper ... --describe [--topic T]
    pyklog-topics --zookeeper ... --delete --topic T [--if-exists]
    pyklog-topics --zookeeper ... --alter --topic T [--config k=v ...] [--delete-config k ...]

With ``--bootstrap-server`` the tool talks to the brokers (CreateTopics, DeleteTopics, Metadata,
DescribeConfigs, CreatePartitions), as Kafka 3's tool; with ``--zookeeper`` topics are written in Kafka's
ZooKeeper layout (:mod:`pyklog.broker.zk.cluster`), partitions spread over the live brokers, and
``--alter --partitions`` goes to the brokers registered there (CreatePartitions).  Errors print one line
``Error: ...`` on stderr and exit with 1.  The console script is :mod:`pyklog.connector.cli.topics`,
which adds the broker API side (the broker package never imports the client).

``--describe`` prints Kafka 3's lines::

    Topic: orders\tTopicId: 4zZ1bQpGRmmXw0sQx3sY8A\tPartitionCount: 2\tReplicationFactor: 1\tConfigs: cleanup.policy=compact
    \tTopic: orders\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0

(``TopicId`` is the id in ZooKeeper, KIP-516; ``Configs`` are, with ``--bootstrap-server``, every config
that is not a default, as Kafka 3's tool: overrides, dynamic broker configs, server.properties; with
``--zookeeper``, the topic's overrides.)

Example::

    pyklog-topics --bootstrap-server localhost:9092 --alter --topic orders --partitions 8
"""

from __future__ import annotations

import argparse
import logging
import sys

from pyklog.broker.common.cli import UsageError, print_error, reports_errors, tool_parser
from pyklog.broker.errors import TopicAlreadyExistsError, UnknownTopicOrPartitionError, ZooKeeperError
from pyklog.broker.zk import paths
from pyklog.broker.zk.cluster import ZkCluster
from pyklog.broker.zk.topics import is_internal


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-topics",
        "Create, list, describe, alter and delete pyklog topics.",
        "example:\n  pyklog-topics --bootstrap-server localhost:9092 --create --topic orders "
        "--partitions 4\n  pyklog-topics --bootstrap-server localhost:9092 --alter --topic orders "
        "--partitions 8",
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--bootstrap-server", metavar="HOST:PORT", help="the brokers to talk to")
    p.add_argument(
        "--command-config",
        metavar="FILE",
        help="with --bootstrap-server: client properties file (security.protocol, ssl.*, sasl.*)",
    )
    where.add_argument("--zookeeper", metavar="HOST:PORT[/CHROOT]", help="ZooKeeper connect string of the cluster")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true", help="partitions, leaders, replicas, ISR")
    action.add_argument("--delete", action="store_true", help="delete a topic")
    action.add_argument(
        "--alter", action="store_true", help="add partitions (--partitions) or change config overrides (--zookeeper)"
    )
    p.add_argument("--topic", help="topic name")
    p.add_argument("--partitions", type=int, help="number of partitions (--create; --alter: the new total)")
    p.add_argument(
        "--replication-factor", type=int, default=1, help="replicas per partition, at most the live brokers (default 1)"
    )
    p.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="topic config override, repeatable (e.g. cleanup.policy=compact)",
    )
    p.add_argument(
        "--delete-config",
        action="append",
        default=[],
        metavar="KEY",
        help="--alter: remove a topic config override, repeatable",
    )
    p.add_argument(
        "--disable-rack-aware",
        action="store_true",
        help="--create with --zookeeper: place replicas ignoring broker.rack",
    )
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error if the topic exists")
    p.add_argument("--if-exists", action="store_true", help="--delete/--describe: no error if the topic is missing")
    p.add_argument("--exclude-internal", action="store_true", help="--list/--describe: skip __consumer_offsets")
    p.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for ZooKeeper (default 15)")
    return p


def config_overrides(items: list[str]) -> dict[str, str]:
    """``--config KEY=VALUE`` arguments as ``{key: value}`` (both stripped); UsageError for an item
    without ``=`` or with an empty key.  Shared with the connector's ``kafka-topics``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--config expects KEY=VALUE, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def id_list(ids) -> str:
    """Broker ids as ``--describe`` prints them (``Replicas: 1,2,3``)."""
    return ",".join(str(i) for i in ids)


def topic_line(name: str, topic_id, partition_count: int, replication_factor: int, configs: dict) -> str:
    """Kafka 3's first ``--describe`` line of a topic (``TopicId`` is Kafka's ``Uuid.toString``; a
    topic without an id shows the zero id, as Kafka)."""
    import uuid as _uuid

    from pyklog.broker.zk.znodes import topic_id_str

    tid = topic_id_str(topic_id if topic_id is not None else _uuid.UUID(int=0))
    return (
        f"Topic: {name}\tTopicId: {tid}\tPartitionCount: {partition_count}\tReplicationFactor: "
        f"{replication_factor}\tConfigs: " + ",".join(f"{k}={v}" for k, v in sorted(configs.items()))
    )


def _registry_topic(cluster: ZkCluster, name: str):
    """``(topic id, {partition: PartitionState})`` of ``name`` read from ZooKeeper now (a topic being
    deleted is hidden from the metadata cache); None if the topic node does not exist.  A partition
    without a state node has leader -1 and an empty ISR (Kafka's tool prints ``none``)."""
    from kazoo.exceptions import NoNodeError

    from pyklog.broker.zk.metadata_cache import PartitionState
    from pyklog.broker.zk.znodes import decode_partition_state, decode_topic_assignment, decode_topic_id

    path = paths.topic(name)
    try:
        data, _ = cluster.retry(cluster.zk.get, path)
    except NoNodeError:
        return None
    assignment = decode_topic_assignment(data, path)

    def read():
        pending = [(p, cluster.zk.get_async(paths.partition_state(name, p))) for p in sorted(assignment)]
        out = {}
        for p, res in pending:
            try:
                out[p] = decode_partition_state(res.get()[0], paths.partition_state(name, p))
            except NoNodeError:
                pass
        return out

    states = cluster.retry(read)
    parts = {}
    for p, replicas in assignment.items():
        st = states.get(p)
        parts[p] = PartitionState(
            st.leader if st else -1, st.leader_epoch if st else -1, list(st.isr) if st else [], list(replicas)
        )
    try:
        topic_id = decode_topic_id(data, path)
    except ZooKeeperError:
        topic_id = None
    return topic_id, parts


def list_lines(cluster: ZkCluster, exclude_internal: bool) -> list[str]:
    """``--list`` with ``--zookeeper`` (Kafka 2.x's ``ZookeeperTopicService.listTopics``): every topic
    in the registry, sorted; a topic marked for deletion as ``<name> - marked for deletion``."""
    names = sorted(cluster.retry(cluster.zk.get_children, paths.BROKER_TOPICS))
    marked = cluster.topic_admin.marked_for_deletion()
    return [
        f"{name} - marked for deletion" if name in marked else name
        for name in names
        if not (exclude_internal and is_internal(name))
    ]


def describe_lines(cluster: ZkCluster, topic: str | None, exclude_internal: bool) -> list[str]:
    """``--describe`` with ``--zookeeper``: Kafka's lines; Configs are the topic's overrides.  A topic
    marked for deletion (read from ZooKeeper: brokers hide it) ends its lines with
    ``\tMarkedForDeletion: true``, as Kafka 2.x's tool with ``--zookeeper``."""
    topics = cluster.topics()
    marked = cluster.topic_admin.marked_for_deletion()
    if topic:
        names = [topic]
    else:
        listed = set(topics) | (marked & set(cluster.retry(cluster.zk.get_children, paths.BROKER_TOPICS)))
        names = sorted(t for t in listed if not (exclude_internal and is_internal(t)))
    lines = []
    for name in names:
        parts = topics.get(name)
        topic_id = cluster.topic_id(name)
        if parts is None or name in marked:
            found = _registry_topic(cluster, name)
            if found is None:
                raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
            topic_id, parts = found
        mark = "\tMarkedForDeletion: true" if name in marked else ""
        rf = max((len(s.replicas) for s in parts.values()), default=0)
        config = cluster.topic_config(name)
        lines.append(topic_line(name, topic_id, len(parts), rf, config) + mark)
        for p, s in sorted(parts.items()):
            leader = str(s.leader) if s.leader >= 0 else "none"
            lines.append(
                f"\tTopic: {name}\tPartition: {p}\tLeader: {leader}\tReplicas: {id_list(s.replicas)}"
                f"\tIsr: {id_list(s.isr)}{mark}"
            )
    return lines


def create_topic(args, create) -> int:
    """``--create`` through ``create()`` (ZooKeeper or CreateTopics): ``Created topic T.``; a topic
    that exists already is an error unless ``--if-not-exists``.  Returns the exit code."""
    try:
        create()
    except TopicAlreadyExistsError:
        if not args.if_not_exists:
            raise
        return 0
    print(f"Created topic {args.topic}.")
    return 0


def delete_topic(args, delete, done: str | None = None) -> int:
    """``--delete`` through ``delete()`` (ZooKeeper or DeleteTopics): prints ``done`` (default
    ``Deleted topic T.``); a
    missing topic is an error unless ``--if-exists``; an internal topic is refused before anything
    is sent, as Kafka's TopicCommand does.  Returns the exit code."""
    from pyklog.broker.errors import InvalidTopicError
    from pyklog.broker.zk.topics import is_protected

    if is_protected(args.topic):
        raise InvalidTopicError(
            f"Topic {args.topic} is a kafka internal topic and is not allowed to be marked for deletion."
        )
    try:
        delete()
    except UnknownTopicOrPartitionError:
        if args.if_exists:
            return 0
        raise
    print(done if done is not None else f"Deleted topic {args.topic}.")
    return 0


def _mark_for_deletion(cluster, topic: str) -> None:
    err = cluster.mark_topics_for_deletion([topic]).get(topic)
    if err is not None:
        raise err


def run(args, broker_api=None) -> int:
    for flag in ("create", "delete", "alter"):
        if getattr(args, flag) and not args.topic:
            raise UsageError(f"--{flag} needs --topic")
    if args.alter and args.partitions is None and not (args.config or args.delete_config):
        raise UsageError("--alter needs --partitions N, --config KEY=VALUE or --delete-config KEY")
    if args.alter and args.partitions is not None and (args.config or args.delete_config):
        raise UsageError("--alter: change the partitions and the configs in two runs")
    if args.create and args.partitions is None:
        raise UsageError("--create needs --partitions")
    if args.bootstrap_server or (args.alter and args.partitions is not None):
        # the brokers' APIs: the client side (pyklog.connector.cli.topics) passes the runner
        if broker_api is None:
            raise UsageError(
                "--bootstrap-server and --alter --partitions need the pyklog-topics console "
                "script (pyklog.connector.cli.topics)"
            )
        return broker_api(args)
    from pyklog.broker.zk.znode_acls import tool_security

    cluster = ZkCluster(args.zookeeper, None, connect_timeout_s=args.timeout, **tool_security())
    cluster.start()
    try:
        if args.create:
            return create_topic(
                args,
                lambda: cluster.create_topic(
                    args.topic,
                    args.partitions,
                    args.replication_factor,
                    config_overrides(args.config),
                    rack_aware=not args.disable_rack_aware,
                ),
            )
        elif args.list:
            for line in list_lines(cluster, args.exclude_internal):
                print(line)
        elif args.describe:
            try:
                lines = describe_lines(cluster, args.topic, args.exclude_internal)
            except UnknownTopicOrPartitionError:
                if args.if_exists:
                    return 0
                raise
            for line in lines:
                print(line)
        elif args.delete:
            # Kafka's TopicCommand with --zookeeper: the controller deletes the marked topic
            return delete_topic(
                args,
                lambda: _mark_for_deletion(cluster, args.topic),
                f"Topic {args.topic} is marked for deletion.\n"
                "Note: This will have no impact if delete.topic.enable is not set to true.",
            )
        elif args.alter:
            config = cluster.alter_topic_config(args.topic, config_overrides(args.config), args.delete_config)
            print(
                f"Updated config of topic {args.topic}: "
                + (",".join(f"{k}={v}" for k, v in sorted(config.items())) or "(no overrides)")
            )
    finally:
        cluster.stop()
    return 0


@reports_errors(usage="{} (see pyklog-topics --help)")
def main(argv=None, *, broker_api=None) -> int:
    """``broker_api(args) -> exit code`` runs the actions that go through the brokers' APIs
    (``--bootstrap-server``, ``--alter --partitions``); the broker side cannot import the client."""
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    try:
        return run(parser.parse_args(argv), broker_api)
    except KeyboardInterrupt:
        return print_error("interrupted")


if __name__ == "__main__":
    sys.exit(main())
