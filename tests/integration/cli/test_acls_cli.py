"""pyklog-acls as a user runs it (a subprocess), against a broker with Kafka's ACL authorizer: Kafka's
kafka-acls.sh flags and output, the ACLs landing in ZooKeeper in Kafka's layout, and its errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pyklog.broker.security.acl import (
    CLUSTER_NAME,
    AccessControlEntry,
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePattern,
    ResourceType,
)
from pyklog.broker.security.authorizer import ZkAclStore
from tests.support import kazoo_client, running_broker, wait_for

BIN = os.path.dirname(sys.executable)
ADMIN = [
    AclBinding(
        ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME),
        AccessControlEntry("User:ANONYMOUS", "*", op, AclPermissionType.ALLOW),
    )
    for op in (AclOperation.ALTER, AclOperation.DESCRIBE)
]


def run(*args, stdin: str = ""):
    return subprocess.run(
        [os.path.join(BIN, "pyklog-acls"), *args], capture_output=True, text=True, timeout=90, input=stdin
    )


@pytest.fixture(scope="module")
def acl_broker(zookeeper, tmp_path_factory):
    with running_broker(
        zookeeper,
        str(tmp_path_factory.mktemp("acl-cli")),
        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer"},
    ) as broker:
        kc = kazoo_client(broker.zk_connect)
        try:
            yield broker, kc
        finally:
            kc.stop()
            kc.close()


def acls_of(kc, path):
    if not kc.exists(path):
        return []
    data, _ = kc.get(path)
    return sorted((a["principal"], a["operation"], a["permissionType"], a["host"]) for a in json.loads(data)["acls"])


def test_add_list_remove_with_kafkas_output(acl_broker):
    broker, kc = acl_broker
    b = ["--bootstrap-server", broker.bootstrap]
    # no rights on the cluster yet: Kafka's error, exit 1
    r = run(*b, "--list")
    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, r
    ZkAclStore(kc).add(ADMIN)
    wait_for(lambda: run(*b, "--list").returncode == 0, 30, message="the grant reached the broker")

    r = run(
        *b,
        "--add",
        "--allow-principal",
        "User:alice",
        "--operation",
        "Read",
        "--operation",
        "Describe",
        "--topic",
        "orders",
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        "Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n \t(principal="
    ), r.stdout
    assert "\t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in r.stdout
    assert acls_of(kc, "/kafka-acl/Topic/orders") == [
        ("User:alice", "Describe", "Allow", "*"),
        ("User:alice", "Read", "Allow", "*"),
    ]

    r = run(*b, "--list", "--topic", "orders")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        "Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n"
    )
    assert r.stdout.count("principal=User:alice") == 2

    # --remove asks first: "n" keeps the ACLs, --force removes them
    r = run(*b, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders", stdin="n\n")
    assert r.returncode == 0 and "Are you sure you want to remove ACLs" in r.stdout
    assert len(acls_of(kc, "/kafka-acl/Topic/orders")) == 2
    r = run(*b, "--remove", "--allow-principal", "User:alice", "--operation", "Read", "--topic", "orders", "--force")
    assert r.returncode == 0, r.stderr
    assert acls_of(kc, "/kafka-acl/Topic/orders") == [("User:alice", "Describe", "Allow", "*")]
    r = run(*b, "--remove", "--topic", "orders", "--force")
    assert r.returncode == 0, r.stderr
    assert not kc.exists("/kafka-acl/Topic/orders")


def test_producer_and_consumer_conveniences(acl_broker):
    broker, kc = acl_broker
    ZkAclStore(kc).add(ADMIN)
    b = ["--bootstrap-server", broker.bootstrap]
    r = run(
        *b,
        "--add",
        "--allow-principal",
        "User:spark",
        "--consumer",
        "--topic",
        "events",
        "--group",
        "spark-",
        "--resource-pattern-type",
        "prefixed",
    )
    assert r.returncode == 0, r.stderr
    assert acls_of(kc, "/kafka-acl-extended/prefixed/Topic/events") == [
        ("User:spark", "Describe", "Allow", "*"),
        ("User:spark", "Read", "Allow", "*"),
    ]
    assert acls_of(kc, "/kafka-acl-extended/prefixed/Group/spark-") == [("User:spark", "Read", "Allow", "*")]
    r = run(
        *b,
        "--add",
        "--allow-principal",
        "User:app",
        "--allow-host",
        "10.0.0.5",
        "--producer",
        "--idempotent",
        "--topic",
        "out",
        "--transactional-id",
        "app-1",
    )
    assert r.returncode == 0, r.stderr
    assert [x[1] for x in acls_of(kc, "/kafka-acl/Topic/out")] == ["Create", "Describe", "Write"]
    assert [x[1] for x in acls_of(kc, "/kafka-acl/TransactionalId/app-1")] == ["Describe", "Write"]
    assert ("User:app", "IdempotentWrite", "Allow", "10.0.0.5") in acls_of(kc, "/kafka-acl/Cluster/kafka-cluster")
    r = run(*b, "--list", "--principal", "User:spark")
    assert r.returncode == 0 and r.stdout.startswith("ACLs for principal `User:spark`\n"), r
    assert "User:app" not in r.stdout and "name=spark-, patternType=PREFIXED" in r.stdout
    r = run(*b, "--list", "--topic", "events-1", "--resource-pattern-type", "match")
    assert "name=events, patternType=PREFIXED" in r.stdout, r


@pytest.mark.parametrize(
    "args,message",
    [
        (["--add", "--topic", "t"], "You must specify one of: --allow-principal, --deny-principal"),
        (
            ["--add", "--allow-principal", "User:a", "--operation", "Write", "--group", "g"],
            "ResourceType Group only supports",
        ),
        (["--add", "--allow-principal", "alice", "--topic", "t"], "a principal is written"),
        (["--add", "--allow-principal", "User:a"], "You must provide at least one resource"),
        (
            ["--add", "--allow-principal", "User:a", "--topic", "t", "--resource-pattern-type", "match"],
            "is not valid when adding",
        ),
        (
            ["--add", "--allow-principal", "User:a", "--consumer", "--topic", "t"],
            "With --consumer you must specify a --group",
        ),
        (["--topic", "t"], "exactly one action"),
    ],
)
def test_bad_options_are_usage_errors(acl_broker, args, message):
    broker, _ = acl_broker
    r = run("--bootstrap-server", broker.bootstrap, *args)
    assert r.returncode == 1 and message in r.stderr, r


def test_authorizer_properties_write_zookeeper_directly(acl_broker):
    """The first administrator granted through ZooKeeper (no broker involved); the running broker
    follows, so that administrator's tool then works through --bootstrap-server."""
    broker, kc = acl_broker
    zk = ["--authorizer-properties", f"zookeeper.connect={broker.zk_connect}"]
    r = run(*zk, "--add", "--allow-principal", "User:ANONYMOUS", "--operation", "Describe", "--cluster")
    assert r.returncode == 0, r.stderr
    assert (
        "Adding ACLs for resource `ResourcePattern(resourceType=CLUSTER, name=kafka-cluster, patternType=LITERAL)`"
        in r.stdout
    )
    assert ("User:ANONYMOUS", "Describe", "Allow", "*") in acls_of(kc, "/kafka-acl/Cluster/kafka-cluster")
    r = run(*zk, "--list", "--cluster")
    assert r.returncode == 0 and "operation=DESCRIBE" in r.stdout, r
    wait_for(
        lambda: run("--bootstrap-server", broker.bootstrap, "--list").returncode == 0, 30, message="the broker followed"
    )
    r = run(*zk, "--remove", "--allow-principal", "User:ANONYMOUS", "--operation", "Describe", "--cluster", "--force")
    assert r.returncode == 0, r.stderr
    assert ("User:ANONYMOUS", "Describe", "Allow", "*") not in acls_of(kc, "/kafka-acl/Cluster/kafka-cluster")
    r = run(*zk, "--bootstrap-server", broker.bootstrap, "--list")
    assert r.returncode == 1 and "Only one of" in r.stderr


def test_brokers_without_an_authorizer_answer_security_disabled(broker):
    r = run("--bootstrap-server", broker.bootstrap, "--list")
    assert r.returncode == 1 and "SECURITY_DISABLED" in r.stderr, r
