"""A protected ZooKeeper: brokers with ``zookeeper.set.acl=true`` and digest credentials.

The shared ZooKeeper does not require authentication, so each test's chroot shows what an
unauthenticated client (anyone who reaches ZooKeeper) can do: read the registry, change nothing under
``/brokers``, ``/config``, ``/controller``, ``/admin``, read nothing under ``/config/users``.  The
cluster keeps working (topics, config changes, controller failover, a ZooKeeper consumer group);
a registry written without ACLs is secured by the first broker started with them; a wrong password
stops the broker with a clear error that does not hold the password.
"""

from __future__ import annotations

import json
import uuid

import pytest
from kazoo.exceptions import NoAuthError

from pyklog.broker.zk import paths
from pyklog.broker.zk.session import ZkSession
from pyklog.broker.zk.znode_acls import OPEN_ACL, ZkCredentials
from tests.support import kazoo_client, wait_for

SECRET = f"zk-{uuid.uuid4().hex[:12]}"
JAAS = f'org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="{SECRET}";'
CREDS = ZkCredentials("kafka", SECRET)


def _secure(broker_factory, broker_id, **props):
    return broker_factory(broker_id, zookeeper_set_acl="true", zookeeper_jaas_config=JAAS, **props)


def _create_topic(bootstrap, name, partitions=2, config=None):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    fs = admin.create_topics([NewTopic(name, partitions, 1, config=config or {})], operation_timeout=10)
    fs[name].result(30)
    return admin


def _produce(bootstrap, topic, n):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        p.produce(topic, value=f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0


def _refused(fn, *args, **kwargs):
    with pytest.raises(NoAuthError):
        fn(*args, **kwargs)


def _assert_nobody_can_change_the_registry(zk_chroot, topic, brokers_running=True):
    anon = kazoo_client(zk_chroot)
    try:
        # anyone may read the registry (clients discover brokers in /brokers/ids) ...
        assert anon.get_children(paths.BROKER_IDS) or not brokers_running
        assignment, _ = anon.get(paths.topic(topic))
        # ... and change nothing the brokers act on
        _refused(anon.create, paths.broker_id(99), b'{"version":4,"host":"evil","port":1,"endpoints":[]}')
        _refused(anon.set, paths.topic(topic), b'{"version":1,"partitions":{"0":[99],"1":[99]}}')
        _refused(anon.set, paths.partition_state(topic, 0), b'{"leader":99,"isr":[99],"leader_epoch":9}')
        _refused(anon.delete, paths.partition_state(topic, 0))
        _refused(anon.set, paths.topic_config(topic), b'{"version":1,"config":{"retention.ms":"1"}}')
        _refused(anon.create, paths.topic_config("other"), b'{"version":1,"config":{}}')
        _refused(anon.create, paths.CONFIG_CHANGE_PREFIX, b'{"version":2,"entity_path":"topics/x"}', sequence=True)
        _refused(anon.create, paths.broker_config("<default>"), b'{"version":1,"config":{}}', makepath=True)
        _refused(anon.create, paths.delete_topic_request(topic), b"")
        _refused(anon.create, paths.ADMIN_REASSIGN_PARTITIONS, b'{"version":1,"partitions":[]}')
        _refused(anon.set, paths.CONTROLLER_EPOCH, b"999")
        _refused(anon.delete, paths.CONTROLLER)
        _refused(anon.create, "/evil", b"")
        _refused(anon.set_acls, paths.BROKER_TOPICS, list(OPEN_ACL))
        assert anon.get(paths.topic(topic))[0] == assignment
        assert not anon.exists(paths.broker_id(99))
    finally:
        anon.stop()
        anon.close()


def test_an_unauthenticated_client_changes_nothing_and_the_cluster_works(zk_chroot, broker_factory):
    from confluent_kafka import Consumer
    from confluent_kafka.admin import ConfigResource

    b0 = _secure(broker_factory, 0)
    b1 = _secure(broker_factory, 1)
    topic = f"sec-{uuid.uuid4().hex[:6]}"
    admin = _create_topic(b0.bootstrap, topic, config={"retention.ms": "86400000"})
    _produce(b0.bootstrap, topic, 20)
    _assert_nobody_can_change_the_registry(zk_chroot, topic)

    # the brokers' own writes still work: a config change, through AlterConfigs
    res = ConfigResource("topic", topic, set_config={"retention.bytes": "123456789"})
    admin.alter_configs([res])[res].result(30)
    # the credentials are a sensitive setting: DescribeConfigs answers them with a null value
    broker_res = ConfigResource("broker", "0")
    described = admin.describe_configs([broker_res])[broker_res].result(30)
    entry = described["zookeeper.jaas.config"]
    assert entry.value is None and entry.is_sensitive
    kc = kazoo_client(zk_chroot)
    try:
        data, _ = kc.get(paths.topic_config(topic))
        assert json.loads(data)["config"]["retention.bytes"] == "123456789"
        # ACLs as Kafka's: the brokers' identity ALL, everyone READ (ZooKeeper shows the digest to
        # those who hold ADMIN on the node only)
        acl, _ = kc.get_acls(paths.topic(topic))
        assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {("digest", "kafka:x", 31), ("world", "anyone", 1)}
        kc.add_auth("digest", f"kafka:{SECRET}")
        acl, _ = kc.get_acls(paths.topic(topic))
        assert {(a.id.scheme, a.id.id, a.perms) for a in acl} == {
            ("digest", CREDS.digest_id, 31),
            ("world", "anyone", 1),
        }
        # a ZooKeeper consumer group under the open /consumers
        from pyklog.connector.high_level import ConsumerConnector

        conn = ConsumerConnector(
            {
                "zookeeper.connect": zk_chroot,
                "group.id": "g-secure",
                "auto.offset.reset": "smallest",
                "consumer.timeout.ms": 200,
                "zookeeper.session.timeout.ms": 4000,
            }
        )
        try:
            [stream] = conn.create_message_streams({topic: 1})[topic]
            got = []
            wait_for(lambda: got.extend(r.offset for r in stream) or len(got) >= 20, 30, message="20 records")
            conn.commit_offsets()
            assert kc.get_children(paths.consumer_offsets("g-secure", topic))
        finally:
            conn.shutdown()

        # controller failover: the other broker takes over and its writes are allowed
        ctl = json.loads(kc.get(paths.CONTROLLER)[0])["brokerid"]
        first, second = (b0, b1) if ctl == 0 else (b1, b0)
        first.stop()
        wait_for(
            lambda: kc.exists(paths.CONTROLLER) and json.loads(kc.get(paths.CONTROLLER)[0])["brokerid"] != ctl,
            30,
            message="a new controller",
        )
        # topic deletion through the surviving broker
        from confluent_kafka.admin import AdminClient

        admin2 = AdminClient({"bootstrap.servers": second.bootstrap})
        admin2.delete_topics([topic], operation_timeout=20)[topic].result(30)
        # the stopped broker holds a replica: the deletion waits for it (Kafka's controller too)
        wait_for(lambda: kc.exists(paths.replica_deletion(topic)), 30, message="the deletion started")
        assert kc.exists(paths.topic(topic))
        first.start()
        wait_for(lambda: not kc.exists(paths.topic(topic)), 30, message="topic deleted")
        c = Consumer({"bootstrap.servers": second.bootstrap, "group.id": "x"})
        assert topic not in c.list_topics(timeout=10).topics
        c.close()
    finally:
        kc.stop()
        kc.close()
    for b in (b0, b1):
        assert SECRET not in b.output()


def test_scram_credentials_are_readable_only_by_their_owner(zk_chroot, broker_factory):
    _secure(broker_factory, 0)
    # a tool with the same credentials (how Kafka's ZooKeeper mode creates the inter-broker user)
    tool = ZkSession(
        zk_chroot, session_timeout_s=10, connect_timeout_s=10, registering=False, credentials=CREDS, set_acl=True
    )
    tool.start()
    try:
        tool.retry(tool.zk.create, "/config/users/alice", b'{"version":1,"config":{}}', makepath=True)
        acl, _ = tool.zk.get_acls("/config/users/alice")
        assert [(a.id.scheme, a.id.id) for a in acl] == [("digest", CREDS.digest_id)]
    finally:
        tool.close()
    anon = kazoo_client(zk_chroot)
    try:
        _refused(anon.get, "/config/users/alice")
        _refused(anon.get_children, paths.CONFIG_USERS)
        _refused(anon.set, "/config/users/alice", b"{}")
        _refused(anon.create, "/config/users/mallory", b"{}")
    finally:
        anon.stop()
        anon.close()


def test_a_registry_written_without_acls_is_secured_at_the_first_secure_start(
    zk_chroot, broker_factory, monkeypatch, tmp_path
):
    b = broker_factory(0)
    topic = f"mig-{uuid.uuid4().hex[:6]}"
    _create_topic(b.bootstrap, topic, config={"retention.ms": "86400000"})
    _produce(b.bootstrap, topic, 10)
    anon = kazoo_client(zk_chroot)
    try:
        acl, _ = anon.get_acls(paths.topic(topic))
        assert [(a.id.scheme, a.perms) for a in acl] == [("world", 31)]  # open: anyone could rewrite it
        b.stop()
        # the same broker restarted with set.acl, its credentials from a JAAS file named in KAFKA_OPTS
        jaas = tmp_path / "jaas.conf"
        jaas.write_text(f"Client {{\n  {JAAS}\n}};\n")
        monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
        b.props["zookeeper.set.acl"] = "true"
        b.start()
        assert "secured" in b.output()
        _assert_nobody_can_change_the_registry(zk_chroot, topic)
        for path in ("/", paths.CLUSTER_ID, paths.partition_state(topic, 1), paths.CONFIG_CHANGES):
            acl, _ = anon.get_acls(path)
            assert {(a.id.scheme, a.perms) for a in acl} == {("digest", 31), ("world", 1)}, path
        acl, _ = anon.get_acls(paths.CONSUMERS)
        assert [(a.id.scheme, a.perms) for a in acl] == [("world", 31)]
        # the data is all there
        from confluent_kafka import Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "m"})
        _, hi = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
        c.close()
        assert hi == 5
    finally:
        anon.stop()
        anon.close()
    assert SECRET not in b.output()


def test_a_wrong_password_stops_the_broker_with_a_clear_error(zk_chroot, broker_factory):
    _secure(broker_factory, 0)
    wrong = "not-the-password-" + uuid.uuid4().hex[:6]
    b1 = broker_factory(
        1,
        start=False,
        log_level="DEBUG",  # kazoo logs every request it sends at DEBUG, the digest credentials too
        zookeeper_set_acl="true",
        zookeeper_jaas_config=JAAS.replace(SECRET, wrong),
    )
    b1.start(expect_ready=False)
    assert b1.wait_exit(60) == 1
    out = b1.output()
    assert "writable only by digest user(s) kafka" in out and "password differs" in out, out[-3000:]
    assert wrong not in out and SECRET not in out
    # and set.acl without any credentials is a configuration error
    b2 = broker_factory(2, start=False, zookeeper_set_acl="true")
    b2.start(expect_ready=False)
    assert b2.wait_exit(60) == 2
    assert "zookeeper.set.acl=true needs ZooKeeper credentials" in b2.output()
    # a broker without credentials (and without set.acl) cannot join a secured registry
    b3 = broker_factory(3, start=False)
    b3.start(expect_ready=False)
    assert b3.wait_exit(60) == 1
    assert "refused create /brokers/ids/3" in b3.output() and "no credentials" in b3.output()


def test_a_zookeeper_that_requires_authentication(tmp_path, broker_factory):
    """pyklog-zookeeper --require-auth (ZooKeeper's enforce.auth, digest) and a super user: brokers
    with credentials work, a client without any is refused, the super user may change anything."""
    from kazoo.client import KazooClient
    from kazoo.exceptions import SessionClosedRequireSaslError

    from pyklog.broker.errors import ZooKeeperError
    from pyklog.broker.zk.server import ZooKeeperServer
    from pyklog.broker.zk.znode_acls import digest_id

    admin_pw = f"adm-{uuid.uuid4().hex[:8]}"
    with ZooKeeperServer(require_auth=True, super_digest=digest_id("admin", admin_pw)) as server:
        connect = f"{server.connect_string}/auth"
        b = _secure(broker_factory, 0, zk_connect=connect)
        topic = f"auth-{uuid.uuid4().hex[:6]}"
        _create_topic(b.bootstrap, topic)
        _produce(b.bootstrap, topic, 4)
        anon = KazooClient(hosts=connect)
        try:
            with pytest.raises(SessionClosedRequireSaslError):
                anon.start(timeout=30)  # kazoo's first request (does the chroot exist?) is refused
        finally:
            anon.stop()
            anon.close()
        # a pyklog tool without credentials says what is missing
        tool = ZkSession(connect, session_timeout_s=10, connect_timeout_s=10, registering=False)
        with pytest.raises(ZooKeeperError, match="requires authentication"):
            tool.start()
        tool.close()
        # another identity may read (world READ) but not write; the super user may
        other = KazooClient(hosts=connect, auth_data=[("digest", "mallory:pw")])
        root = KazooClient(hosts=connect, auth_data=[("digest", f"admin:{admin_pw}")])
        other.start(timeout=30)
        root.start(timeout=30)
        try:
            assert other.get(paths.topic(topic))[0]
            _refused(other.set, paths.topic_config(topic), b"{}")
            root.set_acls(paths.topic_config(topic), list(OPEN_ACL))
            other.set(paths.topic_config(topic), b'{"version":1,"config":{}}')
        finally:
            for c in (other, root):
                c.stop()
                c.close()
        # a ZooKeeper consumer group with its own credentials (the connector's zookeeper.jaas.config)
        from pyklog.connector.high_level import ConsumerConnector

        member_jaas = JAAS.replace('"kafka"', '"consumer"').replace(SECRET, "consumer-pw")
        conn = ConsumerConnector(
            {
                "zookeeper.connect": connect,
                "zookeeper.jaas.config": member_jaas,
                "group.id": "g-auth",
                "auto.offset.reset": "smallest",
                "consumer.timeout.ms": 200,
                "zookeeper.session.timeout.ms": 4000,
            }
        )
        try:
            assert "consumer-pw" not in repr(conn.config)
            [stream] = conn.create_message_streams({topic: 1})[topic]
            got = []
            wait_for(lambda: got.extend(r.offset for r in stream) or len(got) >= 4, 30, message="4 records")
            conn.commit_offsets()
        finally:
            conn.shutdown()
        b.stop()
        assert SECRET not in b.output() and admin_pw not in server.read_log()


def test_the_tools_zookeeper_mode_takes_kafkas_jaas_file(zk_chroot, broker_factory, monkeypatch, tmp_path, capsys):
    """pyklog-topics --zookeeper on a secure registry: without credentials a create is refused with
    a clear error; with KAFKA_OPTS naming a JAAS file (Kafka's way) it works, with the secure ACLs."""
    from pyklog.connector.cli.topics import main

    b = _secure(broker_factory, 0)
    topic = f"tool-{uuid.uuid4().hex[:6]}"
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    assert main(["--zookeeper", zk_chroot, "--create", "--topic", topic, "--partitions", "1"]) == 1
    err = capsys.readouterr().err
    assert "refused" in err and "no credentials" in err, err
    jaas = tmp_path / "client_jaas.conf"
    jaas.write_text(f"Client {{ {JAAS} }};")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    assert main(["--zookeeper", zk_chroot, "--create", "--topic", topic, "--partitions", "1"]) == 0
    assert SECRET not in capsys.readouterr().out
    anon = kazoo_client(zk_chroot)
    try:
        acl, _ = anon.get_acls(paths.topic(topic))
        assert {(a.id.scheme, a.perms) for a in acl} == {("digest", 31), ("world", 1)}
    finally:
        anon.stop()
        anon.close()
    # the broker serves the topic the tool created
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce(topic, b"x")
    assert p.flush(30) == 0


def test_the_security_migration_tool_both_ways(zk_chroot, broker_factory, monkeypatch, tmp_path, capsys):
    from pyklog.broker.cli.zookeeper_security_migration import main

    b = _secure(broker_factory, 0)
    topic = f"tool-{uuid.uuid4().hex[:6]}"
    _create_topic(b.bootstrap, topic)
    b.stop()
    monkeypatch.delenv("KAFKA_OPTS", raising=False)
    assert main(["--zookeeper.acl", "unsecure", "--zookeeper.connect", zk_chroot]) == 1
    assert "No JAAS configuration file" in capsys.readouterr().err
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(f"Client {{ {JAAS} }};")
    monkeypatch.setenv("KAFKA_OPTS", f"-Djava.security.auth.login.config={jaas}")
    anon = kazoo_client(zk_chroot)
    try:
        assert main(["--zookeeper.acl", "unsecure", "--zookeeper.connect", zk_chroot]) == 0
        assert "unsecure:" in capsys.readouterr().out
        for path in ("/", paths.topic(topic), paths.partition_state(topic, 1), paths.BROKER_IDS):
            assert [(a.id.scheme, a.perms) for a in anon.get_acls(path)[0]] == [("world", 31)], path
        anon.set(paths.topic_config(topic), b'{"version":1,"config":{}}')  # open again: anyone may
        assert main(["--zookeeper.acl", "secure", "--zookeeper.connect", zk_chroot]) == 0
        out = capsys.readouterr().out
        assert "secure:" in out and SECRET not in out
        _assert_nobody_can_change_the_registry(zk_chroot, topic, brokers_running=False)
    finally:
        anon.stop()
        anon.close()
