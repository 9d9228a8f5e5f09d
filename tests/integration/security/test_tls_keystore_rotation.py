"""A listener's certificate changed on a running broker (KIP-226 dynamic ``listener.name.<l>.ssl.*``).

The SSL listener's keystore is replaced through IncrementalAlterConfigs by one whose certificate a
second CA signed: a client trusting only the new CA connects after the change and not before, a
producer connected before the change keeps producing throughout (every acknowledged record read
back).  A keystore with a wrong password, and a certificate with another subject DN, are refused
with INVALID_CONFIG naming the setting (never the password) while the old certificate keeps being
served.  A keystore file rewritten at the same path is read again when the setting is altered to the
same value.  No password reaches the broker's log."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from cryptography.hazmat.primitives.serialization import BestAvailableEncryption, pkcs12

from pyklog.broker.errors import InvalidConfigError
from pyklog.connector.admin import AdminClient
from pyklog.connector.client import ClusterClient
from pyklog.connector.security import ClientSecurityConfig, SslAuthenticationError
from tests.integration.security.tls_broker_support import start_tls_broker, tls_certs
from tests.tls_support import KEYSTORE_PASSWORD, _name, _pem_cert, _pem_key, _write, make_ca, make_leaf

__all__ = ["tls_certs"]  # the session fixture, used by name

pytestmark = pytest.mark.timeout(180)

NEW_PASSWORD = f"new-ks-{uuid.uuid4().hex[:10]}"
WRONG_PASSWORD = f"wrong-ks-{uuid.uuid4().hex[:10]}"
ENCODER_SECRET = f"encoder-{uuid.uuid4().hex[:10]}"
SET = 0  # IncrementalAlterConfigs op


def _broker_keystore(path: str, ca, cn: str = "broker") -> str:
    """A PKCS12 keystore whose certificate ``ca`` signed, with the test broker's subject and names."""
    key, cert = make_leaf(ca, _name(cn, o="pyklog tests"), dns=("localhost",), ips=("127.0.0.1",))
    data = pkcs12.serialize_key_and_certificates(
        b"broker", key, cert, [ca[1]], BestAvailableEncryption(NEW_PASSWORD.encode())
    )
    return _write(path, data)


def _can_connect(b, ca_pem: str) -> bool:
    sec = ClientSecurityConfig.from_config({"security.protocol": "SSL", "ssl.truststore.location": ca_pem})
    try:
        with ClusterClient(b.ssl_bootstrap, security=sec, request_timeout_ms=5000) as c:
            c.metadata(None, refresh=True)
        return True
    except SslAuthenticationError:
        return False


def test_listener_certificate_rotated_without_restart(broker_factory, tls_certs, tmp_path):
    from pyklog.connector.producer import Producer

    b = start_tls_broker(broker_factory, tls_certs, **{"password.encoder.secret": ENCODER_SECRET})
    new_ca = make_ca("second test CA")
    new_ca_pem = _write(str(tmp_path / "new-ca.pem"), _pem_cert(new_ca[1]))
    rotated = _broker_keystore(str(tmp_path / "rotated.p12"), new_ca)
    renamed = _broker_keystore(str(tmp_path / "renamed.p12"), new_ca, cn="not-the-broker")
    topic = f"rot-{uuid.uuid4().hex[:6]}"
    with ClusterClient(b.bootstrap) as c:
        c.create_topic(topic, 1)

    # a producer connected over TLS before the change keeps producing throughout
    acked: list[bytes] = []
    failed: list[BaseException] = []
    stop = threading.Event()
    producer = Producer(
        {"bootstrap.servers": b.ssl_bootstrap, "security.protocol": "SSL", "ssl.truststore.location": tls_certs.ca_pem}
    )
    producer.send(topic, value=b"first").result(30)
    acked.append(b"first")

    def produce():
        i = 0
        while not stop.is_set():
            v = b"r%d" % i
            try:
                producer.send(topic, value=v).result(30)
                acked.append(v)
            except Exception as e:  # noqa: BLE001 - counted
                failed.append(e)
            i += 1
            time.sleep(0.01)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    prefix = "listener.name.ssl."
    try:
        assert _can_connect(b, tls_certs.ca_pem)
        assert not _can_connect(b, new_ca_pem), "a client trusting only the new CA connected before the change"
        with AdminClient(b.bootstrap) as admin:
            # a wrong password: refused, naming the setting, not the password; the old one still served
            with pytest.raises(InvalidConfigError) as ei:
                admin.incremental_alter_configs(
                    4,
                    "0",
                    [
                        (prefix + "ssl.keystore.location", SET, rotated),
                        (prefix + "ssl.keystore.password", SET, WRONG_PASSWORD),
                    ],
                )
            print(f"wrong password: {ei.value}")
            assert prefix + "ssl.keystore" in str(ei.value) and WRONG_PASSWORD not in str(ei.value)
            # another subject DN: refused (ssl.allow.dn.changes is false)
            with pytest.raises(InvalidConfigError) as ei:
                admin.incremental_alter_configs(
                    4,
                    "0",
                    [
                        (prefix + "ssl.keystore.location", SET, renamed),
                        (prefix + "ssl.keystore.password", SET, NEW_PASSWORD),
                    ],
                )
            print(f"other subject: {ei.value}")
            assert "ssl.allow.dn.changes" in str(ei.value) and NEW_PASSWORD not in str(ei.value)
            assert _can_connect(b, tls_certs.ca_pem) and not _can_connect(b, new_ca_pem)

            # the certificate the second CA signed: new connections get it at once
            n_before = len(acked)
            admin.incremental_alter_configs(
                4,
                "0",
                [
                    (prefix + "ssl.keystore.location", SET, rotated),
                    (prefix + "ssl.keystore.password", SET, NEW_PASSWORD),
                ],
            )
            assert _can_connect(b, new_ca_pem), "a client trusting the new CA cannot connect after the change"
            assert not _can_connect(b, tls_certs.ca_pem)
            deadline = time.monotonic() + 20
            while len(acked) < n_before + 20 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert len(acked) >= n_before + 20, "the producer connected before the change stopped"

            # the same path rewritten with a certificate a third CA signed, then the setting altered
            # to the same value: the file is read again
            third_ca = make_ca("third test CA")
            third_ca_pem = _write(str(tmp_path / "third-ca.pem"), _pem_cert(third_ca[1]))
            _broker_keystore(rotated, third_ca)
            assert _can_connect(b, new_ca_pem), "the file was read again before the config was altered"
            admin.incremental_alter_configs(4, "0", [(prefix + "ssl.keystore.location", SET, rotated)])
            assert _can_connect(b, third_ca_pem) and not _can_connect(b, new_ca_pem)
    finally:
        stop.set()
        t.join(30)
        producer.close()
    assert not failed, failed[:3]
    from pyklog.connector.consumer import SimpleConsumer

    with SimpleConsumer(b.bootstrap) as c:
        got = [r.value for r in c.iter_records(topic, 0, 0)]
    lost = set(acked) - set(got)
    print(f"rotation: {len(acked)} acknowledged, {len(lost)} lost")
    assert not lost and len(got) == len(acked)
    out = b.output()
    for secret in (NEW_PASSWORD, WRONG_PASSWORD, KEYSTORE_PASSWORD, ENCODER_SECRET):
        assert secret not in out, "a password reached the broker's log"
    assert "new TLS keystore/truststore in use" in out


def test_inter_broker_connections_follow_the_listener_truststore(tls_certs, tmp_path):
    """The broker's own connections to other brokers (``inter_broker_connector``) take the
    inter-broker listener's new truststore: a broker whose certificate the second CA signed is
    refused before ``reload`` and reached after it (a TLS server on a local socket stands in for it)."""
    import socket
    import ssl

    from pyklog.broker.server.config import ServerConfig
    from pyklog.broker.server.main import inter_broker_connector

    new_ca = make_ca("second test CA")
    new_ca_pem = _write(str(tmp_path / "new-ca.pem"), _pem_cert(new_ca[1]))
    key, cert = make_leaf(new_ca, _name("broker", o="pyklog tests"), dns=("localhost",), ips=("127.0.0.1",))
    other = _write(str(tmp_path / "other-broker.pem"), _pem_key(key) + _pem_cert(cert))
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(other)
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        while True:
            try:
                raw, _ = listener.accept()
            except OSError:
                return
            try:
                with server_ctx.wrap_socket(raw, server_side=True) as s:
                    s.recv(1)
            except (OSError, ssl.SSLError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    props = {
        "broker.id": "0",
        "zookeeper.connect": "127.0.0.1:2181",
        "listeners": "SSL://127.0.0.1:0",
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.location": tls_certs.broker_pem,
        "ssl.truststore.location": tls_certs.ca_pem,
    }
    connect = inter_broker_connector(ServerConfig.from_properties(props))
    try:
        with pytest.raises(ssl.SSLError):
            connect("127.0.0.1", port, 5).close()
        connect.reload({**props, "listener.name.ssl.ssl.truststore.location": new_ca_pem})
        connect("127.0.0.1", port, 5).close()
    finally:
        listener.close()
