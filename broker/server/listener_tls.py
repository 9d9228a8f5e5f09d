"""A TLS listener's keystore and truststore changed without a restart (KIP-226's dynamic
``listener.name.<listener>.ssl.*`` configs, Kafka's ``SslFactory.reconfigure``).

The reconfigurable settings are Kafka's ``SslConfigs.RECONFIGURABLE_CONFIGS`` (:data:`RECONFIGURABLE`),
stored per broker with the listener prefix (validation refuses them without it).  A change:

* is validated before it is stored (:meth:`ListenerTls.validate`): the listener's new server context
  is built from the settings it would have; a store that cannot be read, a wrong password, a key that
  does not match its certificate, an expired certificate is refused with INVALID_CONFIG naming the
  setting (never a password), and the listener keeps its old context.  As Kafka's
  ``CertificateEntries.ensureCompatible``, a new certificate whose subject DN or subject alternative
  names differ from the current one's is refused unless ``ssl.allow.dn.changes`` /
  ``ssl.allow.san.changes`` (KIP-771, read-only: ``server.properties``, per listener or not) is true;
* is applied (:meth:`ListenerTls.reconfigure`, after every change of the dynamic configs): the new
  context serves the listener's next connections; open connections keep theirs.

A keystore or truststore file rewritten at the same path is read again when the broker's dynamic
configs change next (altering the setting to the same value is enough), as Kafka's
``reloadUpdatedFilesWithoutConfigChange``: each listener remembers its settings and the files'
modification times and sizes, and rebuilds its context when either differs.

Thread-safety: :class:`ListenerTls` is thread-safe (request handler threads validate, the thread
that applied a config change reconfigures; one lock).
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
from collections.abc import Callable, Mapping

from pyklog.broker.errors import ConfigError, InvalidConfigError
from pyklog.broker.server.config import SSL_STORE_KEYS

log = logging.getLogger(__name__)

#: Kafka's SslConfigs.RECONFIGURABLE_CONFIGS: what a running listener takes without a restart
RECONFIGURABLE = SSL_STORE_KEYS
_FILES = ("ssl.keystore.location", "ssl.truststore.location")


def props_getter(props: Mapping[str, str], listener_name: str):
    """``(get, name)`` for one listener's settings in ``props``: the value
    (``listener.name.<lower-case listener>.<key>`` over ``<key>``) and the key it was read from."""
    prefix = f"listener.name.{listener_name.lower()}."

    def get(key: str) -> str | None:
        value = props.get(prefix + key)
        return props.get(key) if value is None else value

    def name(key: str) -> str:
        return prefix + key if prefix + key in props else key

    return get, name


def _fingerprint(get) -> tuple:
    """The listener's reconfigurable settings and the state of the files they name."""
    files = []
    for key in _FILES:
        path = (get(key) or "").strip()
        try:
            st = os.stat(path) if path else None
        except OSError:
            st = None
        files.append(None if st is None else (st.st_mtime_ns, st.st_size, st.st_ino))
    return tuple(get(k) for k in RECONFIGURABLE), tuple(files)


def _identity(cert) -> tuple[str, tuple[str, ...]]:
    """A certificate's subject DN and its subject alternative names (sorted)."""
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        names = tuple(sorted(f"{type(g).__name__}:{g.value}" for g in san))
    except x509.ExtensionNotFound:
        names = ()
    return cert.subject.rfc4514_string(), names


def _true(value: str | None) -> bool:
    return (value or "").strip().lower() == "true"


class _Listener:
    __slots__ = ("name", "fingerprint", "identity")

    def __init__(self, name: str, fingerprint: tuple, identity):
        self.name = name
        self.fingerprint = fingerprint
        self.identity = identity


class ListenerTls:
    """The TLS listeners of one broker and the settings their contexts were built from.
    ``install(listener_name, context)`` hands a new server context to the socket server;
    ``client_side(listener_name, props)``, if given, then rebuilds what the broker's own connections
    to other brokers use (for the inter-broker listener: the certificate the broker presents, the
    truststore it checks the others with)."""

    def __init__(
        self,
        listener_names,
        static_props: Mapping[str, str],
        install: Callable[[str, ssl.SSLContext], None],
        client_side: Callable[[str, Mapping[str, str]], None] | None = None,
    ):
        from pyklog.broker.security.ssl_factory import load_keystore

        self._install = install
        self._client_side = client_side
        self._lock = threading.Lock()
        self._listeners: dict[str, _Listener] = {}
        for listener in listener_names:
            get, name = props_getter(static_props, listener)
            keystore = load_keystore(get, name)
            identity = _identity(keystore[1][0]) if keystore else None
            self._listeners[listener] = _Listener(listener, _fingerprint(get), identity)

    def _build(self, listener: _Listener, props: Mapping[str, str]):
        """(new context, its certificate's identity) for ``props``; ConfigError naming the setting."""
        from pyklog.broker.security.ssl_factory import load_keystore, server_context

        get, name = props_getter(props, listener.name)
        context = server_context(get, name)
        keystore = load_keystore(get, name)
        identity = _identity(keystore[1][0]) if keystore else None
        if listener.identity is not None and identity is not None:
            (old_dn, old_san), (new_dn, new_san) = listener.identity, identity
            if old_dn != new_dn and not _true(get("ssl.allow.dn.changes")):
                raise ConfigError(
                    f"{name('ssl.keystore.location')}: the new certificate's subject {new_dn!r} differs from "
                    f"the current one's {old_dn!r} (Keystore DistinguishedName does not match); set "
                    f"{name('ssl.allow.dn.changes')}=true in server.properties to allow it"
                )
            if old_san != new_san and not _true(get("ssl.allow.san.changes")):
                raise ConfigError(
                    f"{name('ssl.keystore.location')}: the new certificate's subject alternative names "
                    f"{list(new_san)} differ from the current one's {list(old_san)} (Keystore "
                    f"SubjectAltNames do not match); set {name('ssl.allow.san.changes')}=true in "
                    "server.properties to allow it"
                )
        return context, identity

    def validate(self, props: Mapping[str, str]) -> None:
        """Before a change is stored: every TLS listener whose settings (or files) would change builds
        its new context from ``props`` (the merged settings after the change).  InvalidConfigError
        naming the setting when one cannot; nothing is installed."""
        with self._lock:
            for listener in self._listeners.values():
                get, _ = props_getter(props, listener.name)
                if _fingerprint(get) == listener.fingerprint:
                    continue
                try:
                    self._build(listener, props)
                except ConfigError as e:
                    raise InvalidConfigError(f"listener {listener.name}: {e}") from None

    def reconfigure(self, props: Mapping[str, str]) -> None:
        """After a change of the dynamic configs (``props``: the merged settings): a listener whose
        settings or files changed gets a new context for its next connections.  One that cannot be
        built (a file changed on disk, or a change stored by another broker) is logged at ERROR naming
        the setting, and the listener keeps its context."""
        with self._lock:
            for listener in self._listeners.values():
                get, _ = props_getter(props, listener.name)
                fingerprint = _fingerprint(get)
                if fingerprint == listener.fingerprint:
                    continue
                try:
                    context, identity = self._build(listener, props)
                except ConfigError as e:
                    listener.fingerprint = fingerprint  # logged once, not at every later change
                    log.error("listener %s keeps its TLS keystore and truststore: %s", listener.name, e)
                    continue
                self._install(listener.name, context)
                listener.fingerprint, listener.identity = fingerprint, identity
                if self._client_side is not None:
                    try:
                        self._client_side(listener.name, props)
                    except ConfigError as e:
                        log.error(
                            "listener %s: the broker's own connections keep their TLS settings: %s", listener.name, e
                        )
                log.info(
                    "listener %s: new TLS keystore/truststore in use for new connections (certificate %s)",
                    listener.name,
                    identity[0] if identity else "none",
                )


__all__ = ["RECONFIGURABLE", "ListenerTls", "props_getter"]
