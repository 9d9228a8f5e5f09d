"""What the SASL integration tests share: a SASL_PLAINTEXT broker with PLAIN and SCRAM enabled,
SCRAM users written to ZooKeeper as pyklog-configs --zookeeper does, the passwords to grep for."""

from __future__ import annotations

from pyklog.broker.security.jaas import PLAIN_LOGIN_MODULE, jaas_text
from pyklog.broker.security.scram import MECHANISMS, ScramCredential
from pyklog.broker.zk.scram_credentials import ZkScramCredentials
from tests.support import kazoo_client

ADMIN_PASSWORD = "admin-secret-Qx7"
ALICE_PASSWORD = "alice-secret-Zp3"
#: every password the tests use: none may appear in a broker log
PASSWORDS = (ADMIN_PASSWORD, ALICE_PASSWORD, "wrong-password-Kd9", "bob-secret-Lm4", "carol-secret-Vw2")
LISTENER = "SASL_PLAINTEXT"
PLAIN_JAAS = jaas_text(
    PLAIN_LOGIN_MODULE,
    {"username": "admin", "password": ADMIN_PASSWORD, "user_admin": ADMIN_PASSWORD, "user_alice": ALICE_PASSWORD},
)


class _Session:
    def __init__(self, zk):
        self.zk = zk

    def retry(self, fn, *args, **kw):
        return self.zk.retry(fn, *args, **kw)

    stopping = False


def add_scram_user(zk_connect: str, user: str, password: str, mechanisms=tuple(MECHANISMS), iterations=4096):
    """Write the user's SCRAM credentials to ZooKeeper (with the change notification)."""
    zk = kazoo_client(zk_connect)
    try:
        store = ZkScramCredentials(_Session(zk))
        store.alter(user, {m: ScramCredential.from_password(MECHANISMS[m], password, iterations) for m in mechanisms})
    finally:
        zk.stop()
        zk.close()


def sasl_broker(broker_factory, mechanisms="PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", start=True, broker_id=0, **extra):
    """A broker whose one listener is SASL_PLAINTEXT (its connections to other brokers log in as
    admin with PLAIN)."""
    b = broker_factory(broker_id, start=False)
    b.props["listeners"] = f"SASL_PLAINTEXT://127.0.0.1:{b.port}"
    b.props["security.inter.broker.protocol"] = "SASL_PLAINTEXT"
    b.props["sasl.mechanism.inter.broker.protocol"] = "PLAIN"
    b.props["sasl.enabled.mechanisms"] = mechanisms
    b.props["listener.name.sasl_plaintext.plain.sasl.jaas.config"] = PLAIN_JAAS
    b.props.update(extra)
    if start:
        b.start()
    return b


def assert_no_password_in_log(broker) -> None:
    out = broker.output()
    for p in PASSWORDS:
        assert p not in out, "a password reached the broker's log"


def sasl_security(creds) -> dict:
    """The client settings of a SASL_PLAINTEXT connection logging in with ``creds``."""
    return {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": creds.mechanism,
        "sasl.username": creds.username,
        "sasl.password": creds.password,
    }
