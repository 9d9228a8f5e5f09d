"""ListenerTls: a TLS listener's keystore and truststore validated and swapped (no server)."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import InvalidConfigError
from pyklog.broker.server.listener_tls import ListenerTls
from tests.tls_support import _name, _pem_cert, _pem_key, _write, make_ca, make_leaf


def _keystore(path, ca, cn="broker", dns=("localhost",)):
    key, cert = make_leaf(ca, _name(cn, o="t"), dns=dns, ips=("127.0.0.1",))
    return _write(str(path), _pem_key(key) + _pem_cert(cert))


@pytest.fixture
def stores(tmp_path):
    ca, ca2 = make_ca(), make_ca("second")
    return {
        "ks": _keystore(tmp_path / "ks.pem", ca),
        "ks_other_san": _keystore(tmp_path / "san.pem", ca2, dns=("other.example",)),
        "ks_ca2": _keystore(tmp_path / "ks2.pem", ca2),
        "ca": _write(str(tmp_path / "ca.pem"), _pem_cert(ca[1])),
        "ca2": _write(str(tmp_path / "ca2.pem"), _pem_cert(ca2[1])),
    }


def test_changes_are_validated_then_installed_for_the_listener(stores):
    static = {
        "ssl.keystore.location": stores["ks"],
        "ssl.truststore.location": stores["ca"],
        "ssl.client.auth": "required",
    }
    installed, client_side = [], []
    tls = ListenerTls(
        ["SSL"],
        static,
        lambda name, ctx: installed.append((name, ctx)),
        lambda name, props: client_side.append((name, props["listener.name.ssl.ssl.truststore.location"])),
    )
    tls.reconfigure(dict(static))  # nothing changed
    assert installed == []

    # another SAN: refused unless ssl.allow.san.changes; a missing file names the setting
    san = {**static, "listener.name.ssl.ssl.keystore.location": stores["ks_other_san"]}
    with pytest.raises(InvalidConfigError, match="ssl.allow.san.changes"):
        tls.validate(san)
    tls.validate({**san, "ssl.allow.san.changes": "true"})
    with pytest.raises(InvalidConfigError, match="listener.name.ssl.ssl.keystore.location"):
        tls.validate({**static, "listener.name.ssl.ssl.keystore.location": stores["ks"] + ".missing"})
    tls.reconfigure(san)  # applied anyway (another broker stored it): refused, logged, not installed
    assert installed == []

    # a new truststore alone rebuilds the context; then a new keystore signed by another CA
    trust = {**static, "listener.name.ssl.ssl.truststore.location": stores["ca2"]}
    tls.validate(trust)
    tls.reconfigure(trust)
    assert [n for n, _ in installed] == ["SSL"]
    assert client_side == [("SSL", stores["ca2"])]  # the broker's own connections follow
    rotated = {**trust, "listener.name.ssl.ssl.keystore.location": stores["ks_ca2"]}
    tls.validate(rotated)
    tls.reconfigure(rotated)
    assert len(installed) == 2 and installed[1][1] is not installed[0][1]
    tls.reconfigure(rotated)  # the same settings and files: nothing to do
    assert len(installed) == 2
