"""TLS contexts from Kafka's ``ssl.*`` settings (Kafka's ``DefaultSslEngineFactory``), for the broker's
listeners, the broker's own connections to other brokers and pyklog's clients.

Settings (Kafka's names; ``get(key)`` resolves each, e.g. a listener's ``listener.name.<name>.ssl.*``
override first)::

    ssl.keystore.type            PKCS12 | PEM (JKS and other Java formats cannot be read without Java:
                                 a clear error; unset: PEM or PKCS12 as the file's content says)
    ssl.keystore.location        the keystore file: PKCS12, or PEM holding the private key and the
                                 certificate chain
    ssl.keystore.password        PKCS12: the store's password
    ssl.key.password             the private key's password (an encrypted PEM key; PKCS12 when it differs)
    ssl.keystore.certificate.chain, ssl.keystore.key
                                 PEM text inline instead of a file (KIP-651, ssl.keystore.type=PEM)
    ssl.truststore.type          PKCS12 | PEM (unset: as the file's content says)
    ssl.truststore.location      the certificates to trust (PEM file, or a PKCS12 store)
    ssl.truststore.password      PKCS12 truststore's password
    ssl.truststore.certificates  PEM text inline (KIP-651)
    ssl.client.auth              none | requested | required (server side)
    ssl.enabled.protocols        TLSv1.2,TLSv1.3 (the TLS versions allowed)
    ssl.protocol                 TLSv1.3 (accepted; ssl.enabled.protocols decides the versions)
    ssl.cipher.suites            "" (all of OpenSSL's defaults); IANA names (TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256)
                                 or OpenSSL names of TLS 1.2 suites (TLS 1.3's cannot be restricted here)
    ssl.endpoint.identification.algorithm
                                 https (client side: the server's certificate must name the host
                                 connected to); "" turns the check off

Without a truststore the system's CAs are trusted.  Python's ``ssl`` reads keys and certificates only
from PEM files: a PKCS12 store or inline PEM is read with ``cryptography`` and handed to OpenSSL
through a file that only this user can read (mode 0600 in a 0700 temporary directory, the key
encrypted with a random one-time password), deleted right after loading.  Passwords and keys never
appear in an exception or a log line: errors name the setting, never its value.  An expired
certificate, a key that does not match its certificate, a wrong password or an unreadable store is a
:class:`~pyklog.broker.errors.ConfigError` naming the setting.

Thread-safety: the functions are; the contexts they return are safe to share between threads.
"""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import socket
import ssl
import tempfile
from collections.abc import Callable

from pyklog.broker.errors import ConfigError

Getter = Callable[[str], "str | None"]

CLIENT_AUTH_MODES = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}
_TLS_VERSIONS = {
    "TLSV1": ssl.TLSVersion.TLSv1,
    "TLSV1.1": ssl.TLSVersion.TLSv1_1,
    "TLSV1.2": ssl.TLSVersion.TLSv1_2,
    "TLSV1.3": ssl.TLSVersion.TLSv1_3,
}
_PROTOCOL_NAMES = {"TLS", "TLSV1", "TLSV1.1", "TLSV1.2", "TLSV1.3", "SSL", "SSLV3", "DTLS"}
_JAVA_STORES = {"JKS", "JCEKS", "BKS", "DKS", "PKCS11"}


def _cryptography():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.serialization import pkcs12
    except ImportError as e:  # pragma: no cover - an install requirement
        raise ConfigError("TLS keystores need the 'cryptography' package (pip install cryptography)") from e
    return x509, serialization, pkcs12


def _read_file(path: str, setting: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ConfigError(f"{setting}: cannot read {path!r}: {e.strerror or e}") from None


def _store_type(declared: str | None, data: bytes | None, setting: str) -> str:
    kind = (declared or "").strip().upper()
    if kind in _JAVA_STORES or (not kind and data is not None and data[:4] == b"\xfe\xed\xfe\xed"):
        raise ConfigError(
            f"{setting}: a {kind or 'JKS'} store needs Java and cannot be read by pyklog; convert it to PKCS12 "
            "(keytool -importkeystore -deststoretype PKCS12) or PEM"
        )
    if kind in ("PKCS12", "PEM"):
        return kind
    if kind:
        raise ConfigError(f"{setting}: PKCS12 or PEM, read {declared!r}")
    if data is not None and b"-----BEGIN" in data[:4096]:
        return "PEM"
    return "PKCS12"


def _password(value: str | None) -> bytes | None:
    return None if value is None or value == "" else value.encode("utf-8")


def _check_validity(certs, setting: str) -> None:
    now = datetime.datetime.now(datetime.UTC)
    for cert in certs:
        after = cert.not_valid_after_utc
        before = cert.not_valid_before_utc
        subject = cert.subject.rfc4514_string()
        if after < now:
            raise ConfigError(f"{setting}: the certificate {subject} expired on {after.isoformat()}")
        if before > now:
            raise ConfigError(f"{setting}: the certificate {subject} is not valid before {before.isoformat()}")


def load_keystore(get: Getter, name: Callable[[str], str] = str) -> tuple[object, list] | None:
    """The private key and certificate chain (``cryptography`` objects, the leaf first) of the
    ``ssl.keystore.*`` settings; None when no keystore is configured.  ``name(key)`` is the setting's
    name in messages (a listener override's full name)."""
    _x509, _serialization, pkcs12 = _cryptography()
    location = (get("ssl.keystore.location") or "").strip()
    chain_pem = get("ssl.keystore.certificate.chain")
    key_pem = get("ssl.keystore.key")
    declared = get("ssl.keystore.type")
    key_password = _password(get("ssl.key.password"))
    if chain_pem or key_pem:
        if location:
            raise ConfigError(
                f"{name('ssl.keystore.location')} and {name('ssl.keystore.certificate.chain')}: "
                "set a keystore file or inline PEM, not both"
            )
        if (declared or "PEM").strip().upper() != "PEM":
            raise ConfigError(f"{name('ssl.keystore.type')}: must be PEM with inline certificates (KIP-651)")
        if not chain_pem or not key_pem:
            missing = "ssl.keystore.key" if chain_pem else "ssl.keystore.certificate.chain"
            raise ConfigError(f"{name(missing)}: required with PEM keystore settings inline, not set")
        return _pem_key_and_chain(
            key_pem.encode(),
            chain_pem.encode(),
            key_password,
            name("ssl.keystore.key"),
            name("ssl.keystore.certificate.chain"),
        )
    if not location:
        return None
    if declared:
        _store_type(declared, None, name("ssl.keystore.type"))  # JKS: say so before reading the file
    data = _read_file(location, name("ssl.keystore.location"))
    kind = _store_type(declared, data, name("ssl.keystore.type"))
    if kind == "PEM":
        return _pem_key_and_chain(
            data, data, key_password, name("ssl.keystore.location"), name("ssl.keystore.location")
        )
    store_password = _password(get("ssl.keystore.password"))
    try:
        key, cert, extra = pkcs12.load_key_and_certificates(data, store_password)
    except (ValueError, TypeError):
        if key_password is not None and key_password != store_password:
            try:
                key, cert, extra = pkcs12.load_key_and_certificates(data, key_password)
            except (ValueError, TypeError):
                key = None
        else:
            key = None
        if key is None:
            raise ConfigError(
                f"{name('ssl.keystore.location')}: cannot read the PKCS12 keystore {location!r}: wrong "
                f"{name('ssl.keystore.password')} or not a PKCS12 file"
            ) from None
    if key is None or cert is None:
        raise ConfigError(
            f"{name('ssl.keystore.location')}: the PKCS12 keystore {location!r} holds no private key entry"
        )
    chain = [cert, *(extra or [])]
    _check_validity(chain[:1], name("ssl.keystore.location"))
    return key, chain


def _pem_key_and_chain(key_data: bytes, chain_data: bytes, key_password, key_setting: str, chain_setting: str):
    x509, serialization, _ = _cryptography()
    try:
        chain = x509.load_pem_x509_certificates(chain_data)
    except ValueError:
        raise ConfigError(f"{chain_setting}: no PEM certificate could be read") from None
    try:
        key = serialization.load_pem_private_key(_pem_block(key_data, key_setting), key_password)
    except TypeError:
        raise ConfigError(f"{key_setting}: the private key is encrypted and ssl.key.password is not set") from None
    except ValueError:
        raise ConfigError(
            f"{key_setting}: cannot read the PEM private key (wrong ssl.key.password or not a key)"
        ) from None
    _check_validity(chain[:1], chain_setting)
    return key, chain


def _pem_block(data: bytes, setting: str) -> bytes:
    """The private key's PEM block in ``data`` (which may also hold certificates)."""
    start = data.find(b"-----BEGIN")
    while start >= 0:
        end_marker = data.find(b"-----END", start)
        if end_marker < 0:
            break
        end = data.find(b"-----", end_marker + 8)
        block = data[start : end + 5]
        if b"PRIVATE KEY" in block.split(b"\n", 1)[0]:
            return block
        start = data.find(b"-----BEGIN", end + 5)
    raise ConfigError(f"{setting}: no PEM private key found")


def load_trusted_certificates(get: Getter, name: Callable[[str], str] = str) -> str | None:
    """The trusted certificates of the ``ssl.truststore.*`` settings as PEM text; None when none
    are configured (the system's CAs are then trusted)."""
    x509, serialization, pkcs12 = _cryptography()
    inline = get("ssl.truststore.certificates")
    location = (get("ssl.truststore.location") or "").strip()
    if inline:
        if location:
            raise ConfigError(
                f"{name('ssl.truststore.location')} and {name('ssl.truststore.certificates')}: set one, not both"
            )
        data, setting, kind = inline.encode(), name("ssl.truststore.certificates"), "PEM"
    elif location:
        data = _read_file(location, name("ssl.truststore.location"))
        setting = name("ssl.truststore.location")
        kind = _store_type(get("ssl.truststore.type"), data, name("ssl.truststore.type"))
    else:
        return None
    if kind == "PEM":
        try:
            certs = x509.load_pem_x509_certificates(data)
        except ValueError:
            raise ConfigError(f"{setting}: no PEM certificate could be read") from None
    else:
        try:
            store = pkcs12.load_pkcs12(data, _password(get("ssl.truststore.password")))
        except (ValueError, TypeError):
            raise ConfigError(
                f"{setting}: cannot read the PKCS12 truststore: wrong {name('ssl.truststore.password')} or not a PKCS12 file"
            ) from None
        certs = [c.certificate for c in store.additional_certs]
        if store.cert is not None:
            certs.append(store.cert.certificate)
        if not certs:
            raise ConfigError(f"{setting}: the PKCS12 truststore holds no certificate")
    return "".join(c.public_bytes(serialization.Encoding.PEM).decode("ascii") for c in certs)


def _install_key(ctx: ssl.SSLContext, key, chain, setting: str) -> None:
    """Give OpenSSL the key and chain through a private temporary file (see the module docstring)."""
    _, serialization, _ = _cryptography()
    one_time = secrets.token_urlsafe(32).encode()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(one_time),
    ) + b"".join(c.public_bytes(serialization.Encoding.PEM) for c in chain)
    directory = tempfile.mkdtemp(prefix="pyklog-tls-")  # mode 0700
    try:
        path = os.path.join(directory, "keystore.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        try:
            ctx.load_cert_chain(path, password=one_time)
        except ssl.SSLError as e:
            raise ConfigError(f"{setting}: OpenSSL refused the key and certificate ({e.reason or 'invalid'})") from None
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def _iana_to_openssl(suite: str) -> str:
    """``TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256`` -> ``ECDHE-RSA-AES128-GCM-SHA256`` (TLS 1.2 suites)."""
    if not suite.startswith("TLS_") or "_WITH_" not in suite:
        return suite
    kx, _, cipher = suite[4:].partition("_WITH_")
    kx = kx.replace("_", "-")
    cipher = (
        cipher.replace("AES_128_", "AES128-")
        .replace("AES_256_", "AES256-")
        .replace("CHACHA20_POLY1305_SHA256", "CHACHA20-POLY1305")
        .replace("_", "-")
    )
    if kx == "RSA":
        return cipher
    return f"{kx}-{cipher}"


def _protocols_and_ciphers(ctx: ssl.SSLContext, get: Getter, name: Callable[[str], str]) -> None:
    proto = (get("ssl.protocol") or "TLSv1.3").strip()
    if proto.upper() not in _PROTOCOL_NAMES:
        raise ConfigError(f"{name('ssl.protocol')}: one of TLSv1.2, TLSv1.3, TLS, read {proto!r}")
    enabled = [p.strip() for p in (get("ssl.enabled.protocols") or "TLSv1.2,TLSv1.3").split(",") if p.strip()]
    versions = []
    for p in enabled:
        v = _TLS_VERSIONS.get(p.upper())
        if v is None:
            raise ConfigError(f"{name('ssl.enabled.protocols')}: TLS versions among TLSv1.2, TLSv1.3, read {p!r}")
        versions.append(v)
    if not versions:
        raise ConfigError(f"{name('ssl.enabled.protocols')}: at least one TLS version, read nothing")
    ctx.minimum_version = min(versions)
    ctx.maximum_version = max(versions)
    suites = [c.strip() for c in (get("ssl.cipher.suites") or "").split(",") if c.strip()]
    tls12 = [_iana_to_openssl(c) for c in suites if not c.startswith("TLS_AES_") and not c.startswith("TLS_CHACHA20_")]
    if tls12:
        try:
            ctx.set_ciphers(":".join(tls12))
        except ssl.SSLError:
            raise ConfigError(f"{name('ssl.cipher.suites')}: no usable cipher suite in {', '.join(suites)}") from None


def server_context(get: Getter, name: Callable[[str], str] = str) -> ssl.SSLContext:
    """A server-side context for an SSL / SASL_SSL listener (its keystore is required)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _protocols_and_ciphers(ctx, get, name)
    keystore = load_keystore(get, name)
    if keystore is None:
        raise ConfigError(
            f"{name('ssl.keystore.location')}: a TLS listener needs a keystore (ssl.keystore.location, or "
            "ssl.keystore.type=PEM with ssl.keystore.certificate.chain and ssl.keystore.key), not set"
        )
    _install_key(ctx, keystore[0], keystore[1], name("ssl.keystore.location"))
    auth = (get("ssl.client.auth") or "none").strip().lower()
    if auth not in CLIENT_AUTH_MODES:
        raise ConfigError(f"{name('ssl.client.auth')}: one of none, requested, required, read {auth!r}")
    ctx.verify_mode = CLIENT_AUTH_MODES[auth]
    if auth != "none":
        trusted = load_trusted_certificates(get, name)
        if trusted is None:
            ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        else:
            ctx.load_verify_locations(cadata=trusted)
    return ctx


def client_context(get: Getter, name: Callable[[str], str] = str) -> ssl.SSLContext:
    """A client-side context: the server's certificate is verified against the truststore (the
    system's CAs without one) and, unless ``ssl.endpoint.identification.algorithm`` is empty, must
    name the host; the keystore (if any) is the client's certificate (mutual TLS)."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    _protocols_and_ciphers(ctx, get, name)
    algorithm = get("ssl.endpoint.identification.algorithm")
    algorithm = "https" if algorithm is None else algorithm.strip().lower()
    if algorithm not in ("https", ""):
        raise ConfigError(f"{name('ssl.endpoint.identification.algorithm')}: https or empty, read {algorithm!r}")
    ctx.check_hostname = algorithm == "https"
    ctx.verify_mode = ssl.CERT_REQUIRED
    trusted = load_trusted_certificates(get, name)
    if trusted is None:
        ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
    else:
        ctx.load_verify_locations(cadata=trusted)
    keystore = load_keystore(get, name)
    if keystore is not None:
        _install_key(ctx, keystore[0], keystore[1], name("ssl.keystore.location"))
    return ctx


def connect(host: str, port: int, timeout_s: float | None, context: ssl.SSLContext | None) -> socket.socket:
    """A connected blocking socket to ``host:port``, TLS-wrapped (handshake done, the server's name
    checked) when ``context`` is given.  OSError / ssl.SSLError when that fails."""
    sock = socket.create_connection((host, port), timeout=timeout_s)
    if context is None:
        return sock
    try:
        return context.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise
