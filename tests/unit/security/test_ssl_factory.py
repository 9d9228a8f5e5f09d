"""TLS contexts from Kafka's ssl.* settings: PEM files, inline PEM (KIP-651), PKCS12, and clear
errors that name the setting and never the password."""

from __future__ import annotations

import os
import ssl
import tempfile

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.broker.security import ssl_factory
from tests.tls_support import KEYSTORE_PASSWORD, TRUSTSTORE_PASSWORD, make_certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certificates(str(tmp_path_factory.mktemp("certs")))


def getter(**settings):
    values = {k.replace("_", "."): v for k, v in settings.items()}
    return values.get


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def test_server_context_from_pem_file_pkcs12_and_inline_pem(certs):
    for get in (
        getter(ssl_keystore_location=certs.broker_pem),
        getter(ssl_keystore_location=certs.broker_p12, ssl_keystore_password=KEYSTORE_PASSWORD),
        getter(
            ssl_keystore_type="PEM",
            ssl_keystore_certificate_chain=_read(certs.broker_cert_pem),
            ssl_keystore_key=_read(certs.broker_key_pem),
        ),
    ):
        ctx = ssl_factory.server_context(get)
        assert ctx.verify_mode == ssl.CERT_NONE
        assert ctx.minimum_version == ssl.TLSVersion.TLSv1_2


def test_client_auth_modes_and_truststores(certs):
    base = {"ssl_keystore_location": certs.broker_pem}
    assert ssl_factory.server_context(getter(**base, ssl_client_auth="requested")).verify_mode == ssl.CERT_OPTIONAL
    ctx = ssl_factory.server_context(
        getter(
            **base,
            ssl_client_auth="required",
            ssl_truststore_location=certs.ca_p12,
            ssl_truststore_password=TRUSTSTORE_PASSWORD,
        )
    )
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.cert_store_stats()["x509_ca"] == 1
    with pytest.raises(ConfigError, match="ssl.client.auth"):
        ssl_factory.server_context(getter(**base, ssl_client_auth="maybe"))


def test_client_context_host_name_check(certs):
    ctx = ssl_factory.client_context(getter(ssl_truststore_location=certs.ca_pem))
    assert ctx.check_hostname and ctx.verify_mode == ssl.CERT_REQUIRED
    off = ssl_factory.client_context(
        getter(ssl_truststore_certificates=_read(certs.ca_pem), ssl_endpoint_identification_algorithm="")
    )
    assert not off.check_hostname


def test_wrong_pkcs12_password_names_the_setting_not_the_password(certs):
    with pytest.raises(ConfigError) as ei:
        ssl_factory.server_context(getter(ssl_keystore_location=certs.broker_p12, ssl_keystore_password="Wr0ng-pw!"))
    text = str(ei.value)
    assert "ssl.keystore.location" in text and "ssl.keystore.password" in text
    assert "Wr0ng-pw!" not in text and KEYSTORE_PASSWORD not in text
    assert (ei.value.__cause__ is None and ei.value.__context__ is None) or "Wr0ng" not in repr(ei.value.__context__)


def test_setting_names_come_from_the_name_function(certs):
    name = lambda k: f"listener.name.ssl.{k}"  # noqa: E731
    with pytest.raises(ConfigError, match=r"listener\.name\.ssl\.ssl\.keystore\.location"):
        ssl_factory.server_context(getter(ssl_keystore_location="/no/such/file"), name)


@pytest.mark.parametrize(
    "settings,fragment",
    [
        ({"ssl_keystore_type": "JKS", "ssl_keystore_location": "x"}, "needs Java"),
        ({}, "needs a keystore"),
        ({"ssl_keystore_location": "EXPIRED"}, "expired"),
        ({"ssl_keystore_location": "BROKER", "ssl_enabled_protocols": "SSLv3"}, "ssl.enabled.protocols"),
        ({"ssl_keystore_location": "BROKER", "ssl_cipher_suites": "NO_SUCH_SUITE"}, "ssl.cipher.suites"),
        ({"ssl_keystore_location": "BROKER", "ssl_keystore_key": "x"}, "not both"),
        ({"ssl_keystore_type": "PEM", "ssl_keystore_certificate_chain": "CHAIN"}, "ssl.keystore.key"),
    ],
)
def test_bad_keystore_settings_are_config_errors(certs, settings, fragment):
    subst = {"EXPIRED": certs.expired_pem, "BROKER": certs.broker_pem, "CHAIN": _read(certs.broker_cert_pem)}
    settings = {k: subst.get(v, v) for k, v in settings.items()}
    with pytest.raises(ConfigError) as ei:
        ssl_factory.server_context(getter(**settings))
    assert fragment in str(ei.value)


def test_encrypted_pem_key_needs_ssl_key_password(certs):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(_read(certs.broker_key_pem).encode(), None)
    encrypted = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"key-pw-123"),
    ).decode()
    chain = _read(certs.broker_cert_pem)
    kw = {"ssl_keystore_type": "PEM", "ssl_keystore_certificate_chain": chain, "ssl_keystore_key": encrypted}
    with pytest.raises(ConfigError, match="ssl.key.password"):
        ssl_factory.server_context(getter(**kw))
    ssl_factory.server_context(getter(**kw, ssl_key_password="key-pw-123"))


def test_private_key_file_is_private_and_removed(certs, monkeypatch):
    """The key reaches OpenSSL through a 0600 file in a 0700 directory, gone right after loading."""
    seen = []
    real = ssl.SSLContext.load_cert_chain

    def spy(self, certfile, keyfile=None, password=None):
        st_dir, st_file = os.stat(os.path.dirname(certfile)), os.stat(certfile)
        seen.append((certfile, st_dir.st_mode & 0o777, st_file.st_mode & 0o777))
        with open(certfile, "rb") as f:
            assert b"ENCRYPTED PRIVATE KEY" in f.read()
        return real(self, certfile, keyfile, password)

    monkeypatch.setattr(ssl.SSLContext, "load_cert_chain", spy)
    ssl_factory.server_context(getter(ssl_keystore_location=certs.broker_p12, ssl_keystore_password=KEYSTORE_PASSWORD))
    ((path, dir_mode, file_mode),) = seen
    assert (dir_mode, file_mode) == (0o700, 0o600)
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert os.path.dirname(os.path.dirname(path)) == tempfile.gettempdir()


def test_iana_cipher_names_are_accepted(certs):
    ctx = ssl_factory.server_context(
        getter(
            ssl_keystore_location=certs.broker_pem,
            ssl_cipher_suites="TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
        )
    )
    names = {c["name"] for c in ctx.get_ciphers() if c["protocol"] == "TLSv1.2"}
    assert names == {"ECDHE-ECDSA-AES128-GCM-SHA256"}
