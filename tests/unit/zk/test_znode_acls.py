"""ZooKeeper credentials (JAAS Client entries and files, KAFKA_OPTS) and the znode ACL policy."""

from __future__ import annotations

import base64
import hashlib

import pytest
from kazoo.security import Permissions, make_digest_acl_credential

from pyklog.broker.errors import ConfigError
from pyklog.broker.server.config import ServerConfig
from pyklog.broker.zk import znode_acls as acls
from pyklog.broker.zk.znode_acls import ZkCredentials, ZkCredentialsError

SECRET = "s3cr3t-Pa55"
ENTRY = f'org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="{SECRET}";'


def test_digest_id_is_zookeepers():
    expected = "kafka:" + base64.b64encode(hashlib.sha1(f"kafka:{SECRET}".encode()).digest()).decode()
    assert acls.digest_id("kafka", SECRET) == expected
    assert acls.digest_id("kafka", SECRET) == make_digest_acl_credential("kafka", SECRET)


def test_parse_client_entry():
    c = acls.parse_client_jaas(ENTRY)
    assert (c.username, c.password) == ("kafka", SECRET)
    assert c.auth_data == [("digest", f"kafka:{SECRET}")]
    assert SECRET not in repr(c) and SECRET not in str(c)


@pytest.mark.parametrize(
    "text",
    [
        "",
        f'org.apache.zookeeper.server.auth.DigestLoginModule required username="kafka" password="{SECRET}"',
        f'org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="{SECRET}";',
        f'org.apache.zookeeper.server.auth.DigestLoginModule maybe username="u" password="{SECRET}";',
        'org.apache.zookeeper.server.auth.DigestLoginModule required username="u";',
        f'org.apache.zookeeper.server.auth.DigestLoginModule required username="u" password="{SECRET};',
        f'org.apache.zookeeper.server.auth.DigestLoginModule required username="a:b" password="{SECRET}";',
    ],
)
def test_bad_entries_are_refused_without_the_password(text):
    with pytest.raises(ZkCredentialsError) as e:
        acls.parse_client_jaas(text)
    assert SECRET not in str(e.value)
    assert isinstance(e.value, ConfigError)


JAAS_FILE = f"""
// the brokers' JAAS file
KafkaServer {{
  org.apache.kafka.common.security.plain.PlainLoginModule required
    username="admin" password="other";
}};
Client {{
  /* ZooKeeper */
  org.apache.zookeeper.server.auth.DigestLoginModule required
  username="kafka"
  password="{SECRET}";
}};
"""


def test_credentials_from_kafka_opts(tmp_path):
    f = tmp_path / "jaas.conf"
    f.write_text(JAAS_FILE)
    env = {"KAFKA_OPTS": f"-Xmx1g -Djava.security.auth.login.config={f} -Dother=1"}
    c = acls.credentials_from_environment(env)
    assert (c.username, c.password) == ("kafka", SECRET)
    assert acls.credentials_from_environment({}) is None
    # another section name, as zookeeper.sasl.clientconfig picks it
    env["KAFKA_OPTS"] += " -Dzookeeper.sasl.clientconfig=Missing"
    assert acls.credentials_from_environment(env) is None
    with pytest.raises(ZkCredentialsError, match="No such file"):
        acls.credentials_from_environment({"KAFKA_OPTS": f"-Djava.security.auth.login.config={tmp_path}/nope"})


def test_policy():
    c = ZkCredentials("kafka", SECRET)
    owner = (Permissions.ALL, "digest", c.digest_id)
    world_read = (Permissions.READ, "world", "anyone")
    world_all = (Permissions.ALL, "world", "anyone")

    def key(path, secure=True):
        return acls.acl_key(acls.default_acls(path, c, secure))

    assert key("/brokers/ids/1") == {owner, world_read}
    assert key("/") == {owner, world_read}
    assert key("/config/topics/t") == {owner, world_read}
    assert key("/config/users") == {owner}
    assert key("/config/users/alice") == {owner}
    assert key("/config/brokers/<default>") == {owner}
    assert key("/config/usersX") == {owner, world_read}
    assert key("/consumers") == {world_all}
    assert key("/consumers/g/offsets/t/0") == {world_all}
    assert key("/pyklog_spark_sinks/q") == {world_all}
    assert key("/brokers/ids/1", secure=False) == {world_all}
    assert acls.default_acls("/brokers", None, True) == list(acls.OPEN_ACL)
    assert acls.world_writable(acls.OPEN_ACL)
    assert not acls.world_writable(acls.default_acls("/brokers", c, True))


def _props(**extra):
    return {"broker.id": "0", "zookeeper.connect": "127.0.0.1:2181", **extra}


def test_broker_settings():
    cfg = ServerConfig.from_properties(_props(**{"zookeeper.set.acl": "true", "zookeeper.jaas.config": ENTRY}))
    creds, set_acl = cfg.zookeeper_security(environ={})
    assert set_acl and creds.username == "kafka"
    assert SECRET not in repr(cfg)
    with pytest.raises(ConfigError, match="zookeeper.set.acl=true needs ZooKeeper credentials"):
        ServerConfig.from_properties(_props(**{"zookeeper.set.acl": "true"})).zookeeper_security(environ={})
    with pytest.raises(ConfigError) as e:
        ServerConfig.from_properties(_props(**{"zookeeper.jaas.config": ENTRY[:-1]}))
    assert SECRET not in str(e.value)
    # without set.acl, credentials only authenticate
    creds, set_acl = ServerConfig.from_properties(_props(**{"zookeeper.jaas.config": ENTRY})).zookeeper_security({})
    assert creds is not None and not set_acl


def test_jaas_entry_round_trip():
    c = ZkCredentials("etl", 'p"a\\ss word;')
    assert acls.parse_client_jaas(c.jaas_entry()) == c


def test_the_session_client_gives_each_multi_op_create_its_paths_acl():
    from pyklog.broker.zk.session import ZkSession

    s = ZkSession(
        "127.0.0.1:1/chroot",
        session_timeout_s=5,
        connect_timeout_s=1,
        registering=False,
        credentials=ZkCredentials("kafka", SECRET),
        set_acl=True,
    )
    client = s.new_client(s.zk_connect)
    try:
        t = client.transaction()
        t.create("/config/users/alice", b"{}")
        t.create("/brokers/topics/t", b"{}")
        t.create("/consumers/g/offsets/t/0", b"0")
        owner = (Permissions.ALL, "digest", acls.digest_id("kafka", SECRET))
        got = [acls.acl_key(op.acl) for op in t.operations]
        assert got == [
            {owner},
            {owner, (Permissions.READ, "world", "anyone")},
            {(Permissions.ALL, "world", "anyone")},
        ]
        assert SECRET not in repr(s.credentials)
    finally:
        client.close()
    with pytest.raises(ConfigError, match="no ZooKeeper credentials"):
        ZkSession("127.0.0.1:1", session_timeout_s=5, connect_timeout_s=1, registering=False, set_acl=True)


def test_kazoo_debug_logs_never_hold_the_password(caplog):
    import logging

    from kazoo.protocol.serialization import Auth

    acls.kazoo_kwargs(ZkCredentials("kafka", SECRET))
    with caplog.at_level(logging.DEBUG, logger="kazoo.client"):
        logging.getLogger("kazoo.client").debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", f"kafka:{SECRET}"))
    assert "Sending request" in caplog.text and "digest" in caplog.text
    assert SECRET not in caplog.text


def test_zookeeper_launcher_auth_options(tmp_path, capsys):
    from pyklog.broker.zk.server import ZooKeeperServer, main

    zk = ZooKeeperServer(
        data_dir=str(tmp_path), port=1, require_auth=True, super_digest=acls.digest_id("admin", SECRET)
    )
    cfg = open(zk._write_config()).read()
    assert "enforce.auth.enabled=true" in cfg and "enforce.auth.schemes=digest" in cfg
    assert SECRET not in cfg and SECRET not in (zk.super_digest or "")
    with pytest.raises(SystemExit) as e:
        main(["--ephemeral", "--super-digest", f"admin:{SECRET}"])  # a password, not a digest
    assert e.value.code == 2 and SECRET not in capsys.readouterr().err
