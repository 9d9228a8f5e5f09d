"""pyklog-configs --entity-type users: the SCRAM --add-config syntax, never echoing a password."""

import pytest

from pyklog.broker.common.cli import UsageError
from pyklog.connector.cli.configs import parse_add_config, parse_scram_configs, read_properties_file
from pyklog.connector.sasl_client import SaslCredentials

SECRET = "s3cret-Pw9"


def test_scram_add_config():
    add = parse_add_config(f"SCRAM-SHA-512=[iterations=8192,password={SECRET}],SCRAM-SHA-256=[password={SECRET}]")
    assert parse_scram_configs(add) == [("SCRAM-SHA-512", SECRET, 8192), ("SCRAM-SHA-256", SECRET, 4096)]


@pytest.mark.parametrize(
    "spec",
    [
        f"SCRAM-SHA-1=[password={SECRET}]",
        "SCRAM-SHA-512=[iterations=8192]",
        f"SCRAM-SHA-512=[iterations=100,password={SECRET}]",
        f"SCRAM-SHA-512=[iterations=x,password={SECRET}]",
        f"SCRAM-SHA-512=[salt=abc,password={SECRET}]",
    ],
)
def test_bad_scram_add_config_never_echoes_the_password(spec):
    with pytest.raises(UsageError) as info:
        parse_scram_configs(parse_add_config(spec))
    assert SECRET not in str(info.value)


def test_malformed_add_config_with_a_password_is_not_echoed():
    with pytest.raises(UsageError) as info:
        parse_add_config(f"SCRAM-SHA-512=[password={SECRET}")
    assert SECRET not in str(info.value)


def test_command_config_file(tmp_path):
    f = tmp_path / "client.properties"
    f.write_text(
        "# admin\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="admin" password="{SECRET}";\n'
    )
    creds = SaslCredentials.from_config(read_properties_file(str(f)))
    assert (creds.mechanism, creds.username, creds.password) == ("SCRAM-SHA-512", "admin", SECRET)
    assert SECRET not in repr(creds)
