"""Certificates for the TLS tests, made with ``cryptography``: a CA, a broker certificate for
127.0.0.1 and localhost, client certificates, as PEM and PKCS12 files (no network, no openssl binary).

:func:`make_certificates` writes them into a directory and returns a :class:`Certs` of their paths.
Keys are EC P-256 (fast to make).  Passwords are the constants below: the tests grep the broker's
log for them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

KEYSTORE_PASSWORD = "ks-secret-Pa55"
TRUSTSTORE_PASSWORD = "ts-secret-Pa55"
CLIENT_DN = "CN=alice,OU=eng,O=acme,C=US"


def _name(cn: str, ou: str | None = None, o: str | None = None, c: str | None = None) -> x509.Name:
    attrs = []
    if c:
        attrs.append(x509.NameAttribute(NameOID.COUNTRY_NAME, c))
    if o:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, o))
    if ou:
        attrs.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, ou))
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    return x509.Name(attrs)


def make_ca(cn: str = "pyklog test CA"):
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    name = _name(cn, o="pyklog tests")
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def make_leaf(
    ca,
    subject: x509.Name,
    *,
    dns: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
    server: bool = True,
    expired: bool = False,
):
    ca_key, ca_cert = ca
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    if expired:
        before, after = now - datetime.timedelta(days=10), now - datetime.timedelta(days=1)
    else:
        before, after = now - datetime.timedelta(days=1), now + datetime.timedelta(days=30)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(before)
        .not_valid_after(after)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
    )
    sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    return key, builder.sign(ca_key, hashes.SHA256())


def _pem_cert(cert) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def _pem_key(key, password: bytes | None = None) -> bytes:
    enc = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, enc)


def _write(path: str, data: bytes) -> str:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return path


@dataclass(frozen=True)
class Certs:
    dir: str
    ca_pem: str  # the CA certificate (truststore, PEM)
    ca_p12: str  # the CA certificate as a PKCS12 truststore (TRUSTSTORE_PASSWORD)
    broker_pem: str  # broker key + certificate (SAN 127.0.0.1, localhost), PEM keystore
    broker_p12: str  # the same as PKCS12 (KEYSTORE_PASSWORD)
    broker_cert_pem: str  # the broker's certificate chain alone
    broker_key_pem: str  # the broker's private key alone (unencrypted)
    wrong_host_pem: str  # broker key + certificate for other.example only (hostname check fails)
    expired_pem: str  # an expired broker certificate + key
    client_pem: str  # client key + certificate, subject CLIENT_DN
    client_cert_pem: str
    client_key_pem: str
    client_p12: str  # the client's as PKCS12 (KEYSTORE_PASSWORD)
    other_ca_pem: str  # a CA that signed nothing here (unknown CA)
    other_client_pem: str  # a client certificate signed by the other CA


def make_certificates(directory: str) -> Certs:
    os.makedirs(directory, mode=0o700, exist_ok=True)
    p = lambda name: os.path.join(directory, name)  # noqa: E731
    ca = make_ca()
    other_ca = make_ca("unknown CA")
    bkey, bcert = make_leaf(ca, _name("broker", o="pyklog tests"), dns=("localhost",), ips=("127.0.0.1",))
    wkey, wcert = make_leaf(ca, _name("wrong", o="pyklog tests"), dns=("other.example",))
    ekey, ecert = make_leaf(ca, _name("expired"), dns=("localhost",), ips=("127.0.0.1",), expired=True)
    ckey, ccert = make_leaf(ca, _name("alice", ou="eng", o="acme", c="US"), server=False)
    okey, ocert = make_leaf(other_ca, _name("mallory"), server=False)
    enc = serialization.BestAvailableEncryption
    return Certs(
        dir=directory,
        ca_pem=_write(p("ca.pem"), _pem_cert(ca[1])),
        ca_p12=_write(
            p("truststore.p12"),
            pkcs12.serialize_key_and_certificates(None, None, None, [ca[1]], enc(TRUSTSTORE_PASSWORD.encode())),
        ),
        broker_pem=_write(p("broker.pem"), _pem_key(bkey) + _pem_cert(bcert) + _pem_cert(ca[1])),
        broker_p12=_write(
            p("broker.p12"),
            pkcs12.serialize_key_and_certificates(b"broker", bkey, bcert, [ca[1]], enc(KEYSTORE_PASSWORD.encode())),
        ),
        broker_cert_pem=_write(p("broker-cert.pem"), _pem_cert(bcert) + _pem_cert(ca[1])),
        broker_key_pem=_write(p("broker-key.pem"), _pem_key(bkey)),
        wrong_host_pem=_write(p("wrong-host.pem"), _pem_key(wkey) + _pem_cert(wcert)),
        expired_pem=_write(p("expired.pem"), _pem_key(ekey) + _pem_cert(ecert)),
        client_pem=_write(p("client.pem"), _pem_key(ckey) + _pem_cert(ccert)),
        client_cert_pem=_write(p("client-cert.pem"), _pem_cert(ccert)),
        client_key_pem=_write(p("client-key.pem"), _pem_key(ckey)),
        client_p12=_write(
            p("client.p12"),
            pkcs12.serialize_key_and_certificates(b"alice", ckey, ccert, [ca[1]], enc(KEYSTORE_PASSWORD.encode())),
        ),
        other_ca_pem=_write(p("other-ca.pem"), _pem_cert(other_ca[1])),
        other_client_pem=_write(p("other-client.pem"), _pem_key(okey) + _pem_cert(ocert)),
    )
