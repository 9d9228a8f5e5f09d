"""ssl.principal.mapping.rules as Kafka's SslPrincipalMapper applies them (cases from Kafka's
SslPrincipalMapperTest), and the principal of a client certificate."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.broker.security.principal import ANONYMOUS, KafkaPrincipal
from pyklog.broker.security.ssl_principal import (
    NoMatchingRuleError,
    SslPrincipalBuilder,
    SslPrincipalMapper,
    distinguished_name,
)

RULES = (
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,"
    "DEFAULT"
)


@pytest.mark.parametrize(
    "dn,name",
    [
        ("CN=kafka1,OU=ServiceUsers,O=Org,C=US", "kafka1"),
        ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US", "duke@javasoft"),
        ("CN=Duke,OU=JavaSoft,O=Sun Microsystems,C=US", "duke"),
        ("OU=JavaSoft,O=Sun Microsystems,C=US", "OU=JavaSoft,O=Sun Microsystems,C=US"),
    ],
)
def test_rules_in_order_first_match_wins(dn, name):
    assert SslPrincipalMapper(RULES).name(dn) == name


def test_default_is_the_whole_distinguished_name():
    assert SslPrincipalMapper(None).name("CN=alice,OU=eng,O=acme,C=US") == "CN=alice,OU=eng,O=acme,C=US"
    assert SslPrincipalMapper("").name("CN=x") == "CN=x"


def test_upper_case_and_new_line_separated_rules():
    mapper = SslPrincipalMapper("RULE:^CN=([^,]*),.*$/$1/U\nDEFAULT")
    assert mapper.name("CN=alice,OU=eng") == "ALICE"
    assert mapper.name("OU=eng") == "OU=eng"


def test_a_name_no_rule_matches_is_refused():
    mapper = SslPrincipalMapper("RULE:^CN=(.*),OU=eng.*$/$1/")
    assert mapper.name("CN=bob,OU=eng,O=acme") == "bob"
    with pytest.raises(NoMatchingRuleError):
        mapper.name("CN=mallory,OU=ops")


def test_replacement_with_escaped_slash_and_literal_text():
    mapper = SslPrincipalMapper(r"RULE:^CN=([a-z]+)$/svc\/$1/")
    assert mapper.name("CN=etl") == "svc/etl"


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*$/$1/", "NOT_A_RULE", "RULE:abc"])
def test_malformed_rules_are_config_errors(rules):
    with pytest.raises(ConfigError) as ei:
        SslPrincipalMapper(rules)
    assert "ssl.principal.mapping.rules" in str(ei.value)


def _client_cert_der() -> bytes:
    from cryptography.hazmat.primitives import serialization

    from tests.tls_support import _name, make_ca, make_leaf

    _, cert = make_leaf(make_ca(), _name("alice", ou="eng", o="acme", c="US"), server=False)
    return cert.public_bytes(serialization.Encoding.DER)


def test_certificate_subject_in_kafka_form_and_principal():
    der = _client_cert_der()
    assert distinguished_name(der) == "CN=alice,OU=eng,O=acme,C=US"
    assert SslPrincipalBuilder()(der) == KafkaPrincipal("User", "CN=alice,OU=eng,O=acme,C=US")
    mapped = SslPrincipalBuilder(SslPrincipalMapper("RULE:^CN=([^,]+),.*$/$1/,DEFAULT"))
    assert str(mapped(der)) == "User:alice"
    assert SslPrincipalBuilder()(None) is ANONYMOUS
