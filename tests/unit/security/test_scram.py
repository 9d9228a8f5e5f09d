"""SCRAM (RFC 5802 / 7677) and Kafka's credential format, pure."""

import base64

import pytest

from pyklog.broker.security import scram
from pyklog.broker.security.scram import (
    SCRAM_SHA_256,
    SCRAM_SHA_512,
    ScramClient,
    ScramCredential,
    ScramError,
    ScramServer,
)

# RFC 7677 section 3: user "user", password "pencil", 4096 iterations
RFC_CLIENT_NONCE = "rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC_SERVER_FIRST = b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
RFC_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


@pytest.fixture(scope="module")
def rfc_credential():
    return ScramCredential.from_password(SCRAM_SHA_256, "pencil", 4096, salt=RFC_SALT)


def test_rfc7677_client_messages():
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    assert client.first_message() == RFC_CLIENT_FIRST
    assert client.final_message(RFC_SERVER_FIRST) == RFC_CLIENT_FINAL
    client.verify_server_final(RFC_SERVER_FINAL)


def test_rfc7677_server_messages(rfc_credential):
    server = ScramServer(SCRAM_SHA_256, {"user": rfc_credential}.get, server_nonce=RFC_SERVER_NONCE)
    assert server.evaluate(RFC_CLIENT_FIRST) == RFC_SERVER_FIRST
    assert not server.complete
    assert server.evaluate(RFC_CLIENT_FINAL) == RFC_SERVER_FINAL
    assert server.complete and server.username == "user"


def test_client_refuses_a_server_that_does_not_know_the_credential(rfc_credential):
    client = ScramClient(SCRAM_SHA_256, "user", "pencil", client_nonce=RFC_CLIENT_NONCE)
    client.final_message(RFC_SERVER_FIRST)
    with pytest.raises(ScramError, match="signature"):
        client.verify_server_final(b"v=" + base64.b64encode(b"x" * 32))


@pytest.mark.parametrize("mech", [SCRAM_SHA_256, SCRAM_SHA_512])
def test_round_trip_and_wrong_password(mech):
    cred = ScramCredential.from_password(mech, "alice-secret", 4096)
    lookup = {"alice": cred}.get
    client, server = ScramClient(mech, "alice", "alice-secret"), ScramServer(mech, lookup)
    final = server.evaluate(client.final_message(server.evaluate(client.first_message())))
    client.verify_server_final(final)
    assert server.complete
    bad, server2 = ScramClient(mech, "alice", "wrong"), ScramServer(mech, lookup)
    with pytest.raises(ScramError, match="Invalid client credentials"):
        server2.evaluate(bad.final_message(server2.evaluate(bad.first_message())))
    assert not server2.complete


def test_unknown_user_fails_like_a_wrong_password():
    server = ScramServer(SCRAM_SHA_256, {}.get)
    client = ScramClient(SCRAM_SHA_256, "mallory", "x")
    server_first = server.evaluate(client.first_message())  # no hint yet: a salt and iterations come back
    assert b",s=" in server_first and b",i=4096" in server_first
    with pytest.raises(ScramError, match="^Invalid client credentials$"):
        server.evaluate(client.final_message(server_first))


def test_credential_kafka_format_round_trip_and_repr_hides_keys():
    cred = ScramCredential.from_password(SCRAM_SHA_512, "pw", 4096, salt=b"salt-bytes")
    text = cred.to_kafka_string()
    assert text.startswith("salt=c2FsdC1ieXRlcw==,stored_key=") and text.endswith(",iterations=4096")
    assert ScramCredential.from_kafka_string(text) == cred
    assert base64.b64encode(cred.stored_key).decode() not in repr(cred)
    assert "server_key" not in repr(cred) and "salt" not in str(cred)


def test_credential_from_salted_password_matches_from_password():
    salted = SCRAM_SHA_256.hi(b"pw", b"s", 4096)
    assert ScramCredential.from_salted_password(SCRAM_SHA_256, salted, b"s", 4096) == ScramCredential.from_password(
        SCRAM_SHA_256, "pw", 4096, salt=b"s"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "salt=AA==",
        "salt=!!,stored_key=AA==,server_key=AA==,iterations=4096",
        "salt=AA==,stored_key=AA==,server_key=AA==,iterations=x",
    ],
)
def test_malformed_credential_text(text):
    with pytest.raises(ScramError):
        ScramCredential.from_kafka_string(text)


def test_iterations_bounds():
    scram.check_iterations(4096)
    scram.check_iterations(16384)
    for n in (4095, 16385):
        with pytest.raises(ScramError, match="4096..16384"):
            scram.check_iterations(n)


def test_username_escaping():
    assert scram.escape_username("a=b,c") == "a=3Db=2Cc"
    assert scram.unescape_username("a=3Db=2Cc") == "a=b,c"
    with pytest.raises(ScramError):
        scram.unescape_username("a=4")
    cred = ScramCredential.from_password(SCRAM_SHA_256, "pw", 4096)
    server = ScramServer(SCRAM_SHA_256, {"a=b,c": cred}.get)
    client = ScramClient(SCRAM_SHA_256, "a=b,c", "pw")
    server.evaluate(client.final_message(server.evaluate(client.first_message())))
    assert server.complete and server.username == "a=b,c"


@pytest.mark.parametrize(
    "first",
    [b"", b"\xff\xfe", b"garbage", b"n,,", b"n,,r=abc", b"x,,n=user,r=abc", b"n,,n=,r=abc", b"n,a=other,n=user,r=abc"],
)
def test_malformed_client_first(first):
    with pytest.raises(ScramError):
        ScramServer(SCRAM_SHA_256, {}.get).evaluate(first)


def test_client_final_with_another_nonce_or_no_proof(rfc_credential):
    for final in (b"c=biws,r=other,p=AAAA", b"c=biws,r=x", b"\x00\x01"):
        server = ScramServer(SCRAM_SHA_256, {"user": rfc_credential}.get, server_nonce=RFC_SERVER_NONCE)
        server.evaluate(RFC_CLIENT_FIRST)
        with pytest.raises(ScramError):
            server.evaluate(final)
        with pytest.raises(ScramError):  # failed: nothing more accepted
            server.evaluate(RFC_CLIENT_FINAL)
