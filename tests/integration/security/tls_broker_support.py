"""What the TLS integration tests share: the certificates (made once per session) and a broker with
a PLAINTEXT and an SSL listener."""

from __future__ import annotations

import pytest

from pyklog.broker.security.jaas import PLAIN_LOGIN_MODULE, jaas_text
from pyklog.broker.zk.server import free_port
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD, Certs, make_certificates

SECRETS = (KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD)


@pytest.fixture(scope="session")
def tls_certs(tmp_path_factory) -> Certs:
    return make_certificates(str(tmp_path_factory.mktemp("tls-certs")))


def start_tls_broker(broker_factory, certs: Certs, broker_id: int = 0, *, start: bool = True, **props):
    """A broker listening on PLAINTEXT and SSL (PKCS12 keystore); ``b.ssl_port`` is the SSL port."""
    ssl_port = free_port()
    plain_port = free_port()
    settings = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{ssl_port}",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": certs.broker_p12,
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.truststore.location": certs.ca_pem,
        "ssl.truststore.type": "PEM",
    }
    settings.update(props)
    b = broker_factory(broker_id, start=False, port=plain_port, **settings)
    b.ssl_port = ssl_port
    b.ssl_bootstrap = f"127.0.0.1:{ssl_port}"
    if start:
        b.start()
    return b


def start_sasl_ssl_broker(
    broker_factory,
    certs: Certs,
    broker_id: int = 0,
    *,
    plain_users: dict,
    mechanisms: str = "PLAIN,SCRAM-SHA-512",
    start: bool = True,
    **props,
):
    """A broker whose only listener is SASL_SSL (PKCS12 keystore, the test CA as truststore); brokers
    log in to each other with PLAIN.  ``plain_users``: the PLAIN login module's options (``username`` /
    ``password``: the broker's own login, ``user_<name>``: the accepted users); ``props``: more
    broker settings (Kafka's dotted names)."""
    port = free_port()
    settings = {
        "listeners": f"SASL_SSL://127.0.0.1:{port}",
        "security.inter.broker.protocol": "SASL_SSL",
        "sasl.enabled.mechanisms": mechanisms,
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "ssl.keystore.type": "PKCS12",
        "ssl.keystore.location": certs.broker_p12,
        "ssl.keystore.password": KEYSTORE_PASSWORD,
        "ssl.truststore.location": certs.ca_pem,
        "ssl.truststore.type": "PEM",
    }
    settings.update(props)
    b = broker_factory(broker_id, start=False, port=port, **settings)
    # set after the factory: its keyword arguments turn "_" into "." (the listener name has one)
    b.props["listener.name.sasl_ssl.plain.sasl.jaas.config"] = jaas_text(PLAIN_LOGIN_MODULE, plain_users)
    if start:
        b.start()
    return b


def assert_no_secret_logged(*brokers) -> None:
    for b in brokers:
        out = b.output()
        for secret in SECRETS:
            assert secret not in out, f"a password reached broker {b.broker_id}'s log"
