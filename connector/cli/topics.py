"""``pyklog-topics``, the console script: :mod:`pyklog.broker.cli.topics` (ZooKeeper mode, the options
and the output) plus the actions that go through the brokers' APIs (``--bootstrap-server``: CreateTopics,
DeleteTopics, Metadata, DescribeConfigs; ``--alter --partitions``: CreatePartitions, in either mode).

Example::

    pyklog-topics --bootstrap-server localhost:9092 --alter --topic orders --partitions 8
"""

from __future__ import annotations

import sys

from pyklog.broker.cli import topics as _zk_topics
from pyklog.broker.cli.topics import config_overrides, create_topic, delete_topic, id_list, topic_line
from pyklog.broker.common.cli import UsageError
from pyklog.broker.errors import (
    InvalidPartitionsError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from pyklog.broker.zk.topics import is_internal
from pyklog.connector.cli import client_security


def topic_ids(client, names) -> dict:
    """``{topic: uuid}`` from Metadata v10+ (KIP-516); ``{}`` from a broker without topic ids."""
    from pyklog.broker.protocol import ApiKey

    if not names:
        return {}
    conn = client.any_connection()
    try:
        v = conn.version_for(ApiKey.METADATA)
    except UnsupportedVersionError:
        return {}
    if v < 10:
        return {}
    resp = conn.request(
        ApiKey.METADATA,
        {
            "topics": [{"name": n} for n in names],
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
        v,
    )
    return {t["name"]: t.get("topic_id") for t in resp.get("topics") or [] if t.get("name") and not t.get("error_code")}


def alter_partitions(args, bootstrap, zookeeper) -> int:
    """CreatePartitions at the brokers (found through ``bootstrap`` or the ZooKeeper registry)."""
    from pyklog.connector.admin import AdminClient

    with AdminClient(
        bootstrap,
        zookeeper,
        client_id="pyklog-topics",
        request_timeout_ms=int(args.timeout * 1000),
        security=client_security(args.command_config),
    ) as admin:
        parts = admin.client.metadata([args.topic], refresh=True).topics.get(args.topic)
        if parts is None or parts.error_code or not parts.partitions:
            raise UnknownTopicOrPartitionError(f"topic {args.topic!r} does not exist")
        current = len(parts.partitions)
        if args.partitions == current:
            raise InvalidPartitionsError(f"Topic already has {current} partitions.")
        if args.partitions < current:
            raise InvalidPartitionsError(
                f"The number of partitions for a topic can only be increased. Topic {args.topic} currently has "
                f"{current} partitions, {args.partitions} would not be an increase."
            )
        admin.create_partitions({args.topic: args.partitions}, timeout_s=args.timeout)
        admin.client.wait_for_topic(args.topic, args.partitions, timeout_s=args.timeout)
    print("Adding partitions succeeded!")
    return 0


def broker_api(args) -> int:
    """The actions through the brokers' APIs (Kafka 3's kafka-topics.sh --bootstrap-server)."""
    from pyklog.connector.admin import AdminClient

    if args.alter and args.partitions is None:
        raise UsageError("--alter --config needs --zookeeper; with --bootstrap-server use pyklog-configs")
    if args.alter:  # --alter --partitions, through the brokers registered in ZooKeeper without --bootstrap-server
        return alter_partitions(args, args.bootstrap_server, None if args.bootstrap_server else args.zookeeper)
    with AdminClient(
        args.bootstrap_server,
        client_id="pyklog-topics",
        request_timeout_ms=int(args.timeout * 1000),
        security=client_security(args.command_config),
    ) as admin:
        client = admin.client
        if args.create:
            return create_topic(
                args,
                lambda: client.create_topic(
                    args.topic,
                    args.partitions,
                    config_overrides(args.config),
                    replication_factor=args.replication_factor,
                    timeout_s=args.timeout,
                ),
            )
        elif args.list:
            md = client.metadata(None, refresh=True)
            for name in sorted(md.topics):
                if not (args.exclude_internal and (md.topics[name].is_internal or is_internal(name))):
                    print(name)
        elif args.describe:
            md = client.metadata([args.topic] if args.topic else None, refresh=True)
            names = (
                [args.topic]
                if args.topic
                else sorted(
                    t
                    for t, tm in md.topics.items()
                    if not (args.exclude_internal and (tm.is_internal or is_internal(t)))
                )
            )
            ids = topic_ids(client, names)
            for name in names:
                tm = md.topics.get(name)
                if tm is None or tm.error_code or not tm.partitions:
                    if args.if_exists:
                        return 0
                    raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
                try:
                    entries = admin.describe_configs([(2, name)], timeout_s=args.timeout)[(2, name)]
                    # Kafka 3's TopicCommand: every config that is not a default (the topic's overrides,
                    # dynamic broker configs, server.properties)
                    shown = {
                        e["name"]: e.get("value")
                        for e in entries
                        if int(e.get("config_source", 5)) != 5 and not e.get("is_default")
                    }
                except UnsupportedVersionError as e:
                    print(f"Warning: configs not shown: {e}", file=sys.stderr)
                    shown = {}
                rf = max((len(pm.replicas) for pm in tm.partitions.values()), default=0)
                print(topic_line(name, ids.get(name), len(tm.partitions), rf, shown))
                for p, pm in sorted(tm.partitions.items()):
                    leader = str(pm.leader) if pm.leader >= 0 else "none"
                    print(
                        f"\tTopic: {name}\tPartition: {p}\tLeader: {leader}\tReplicas: {id_list(pm.replicas)}"
                        f"\tIsr: {id_list(pm.isr)}"
                    )
        elif args.delete:
            return delete_topic(args, lambda: client.delete_topic(args.topic, timeout_s=args.timeout))
    return 0


def main(argv=None) -> int:
    return _zk_topics.main(argv, broker_api=broker_api)


if __name__ == "__main__":
    sys.exit(main())
