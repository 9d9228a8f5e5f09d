"""SASL/PLAIN and JAAS config text, pure."""

import pytest

from pyklog.broker.security import jaas, plain
from pyklog.broker.security.jaas import JaasError, parse_jaas_config
from pyklog.broker.security.plain import PlainError, PlainServer


def test_plain_login_module_with_users():
    e = parse_jaas_config(
        'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        'password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";'
    )
    assert e.login_module == jaas.PLAIN_LOGIN_MODULE and e.flag == "required"
    assert e.username == "admin" and e.password == "admin-secret"
    assert e.plain_users() == {"admin": "admin-secret", "alice": "alice-secret"}
    assert "secret" not in repr(e) and "secret" not in str(e)


def test_scram_login_module_escapes_and_bare_values():
    e = parse_jaas_config(
        'org.apache.kafka.common.security.scram.ScramLoginModule Required\n username=bob password="a \\"q\\" \\\\ b" ;'
    )
    assert e.login_module == jaas.SCRAM_LOGIN_MODULE
    assert e.username == "bob" and e.password == 'a "q" \\ b'
    assert parse_jaas_config(jaas.jaas_text(jaas.SCRAM_LOGIN_MODULE, e.options)).options == e.options


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Module required",
        "Module sometimes;",
        'Module required username="a";Other required;',
        "Module required username;",
        "Module required username=;",
        'Module required "x"="y";',
        'Module required password="unterminated;',
    ],
)
def test_bad_jaas_text(text):
    with pytest.raises(JaasError) as info:
        parse_jaas_config(text)
    assert "unterminated" not in str(info.value) or "quoted" in str(info.value)


def test_plain_server_accepts_and_refuses():
    check = plain.jaas_check({"alice": "alice-secret"})
    s = PlainServer(check)
    assert s.evaluate(plain.client_token("alice", "alice-secret")) == b""
    assert s.complete and s.username == "alice"
    for token in (plain.client_token("alice", "wrong"), plain.client_token("nobody", "alice-secret")):
        with pytest.raises(PlainError) as info:
            PlainServer(check).evaluate(token)
        assert str(info.value) == plain.INVALID_CREDENTIALS
        assert "wrong" not in str(info.value)


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"alice\0pw", "expected 3 tokens, got 2"),
        (b"\0\0pw", "username not specified"),
        (b"\0alice\0", "password not specified"),
        (b"bob\0alice\0pw", "authorization id that is different"),
        (b"\xff\0a\0b", "not UTF-8"),
    ],
)
def test_plain_malformed_tokens(token, message):
    with pytest.raises(PlainError, match=message):
        PlainServer(lambda u, p: True).evaluate(token)


def test_plain_failing_callback_refuses():
    def boom(u, p):
        raise RuntimeError("backend down")

    with pytest.raises(PlainError, match="Invalid username or password"):
        PlainServer(boom).evaluate(plain.client_token("a", "b"))


def test_load_callback():
    assert plain.load_callback("os.path:isabs") is __import__("os").path.isabs
    for spec in ("os.path", "no_such_module_xyz:f", "os.path:nothing_here"):
        with pytest.raises(ValueError):
            plain.load_callback(spec)
