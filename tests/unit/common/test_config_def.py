"""Unit tests of pyklog.broker.common.config_def (no server)."""

import pytest

from pyklog.broker.common.config_def import (
    INT32_MAX,
    REQUIRED,
    ConfigDef,
    Importance,
    OneOf,
    Password,
    Range,
    Type,
)
from pyklog.broker.errors import ConfigError


def make():
    return (
        ConfigDef()
        .define("broker.id", Type.INT, REQUIRED, Range(0, INT32_MAX), Importance.HIGH, "an integer >= 0")
        .define("enable", Type.BOOLEAN, True)
        .define("num", Type.INT, 1, Range(1, 10))
        .define("num32", Type.INT, 0)
        .define("big", Type.LONG, 2**40)
        .define("ratio", Type.DOUBLE, 0.5, Range(0.0, 1.0))
        .define("name", Type.STRING, None)
        .define("dirs", Type.LIST, "/a,/b")
        .define("policy", Type.STRING, "delete", OneOf("delete", "compact"))
        .define("reset", Type.STRING, "latest", OneOf("earliest", "latest", case_sensitive=False))
        .define("secret", Type.PASSWORD, None)
    )


def test_defaults_and_coercion():
    cfg = make().parse(
        {
            "broker.id": " 7 ",
            "enable": "FALSE",
            "num": 3,
            "big": "9000000000",
            "ratio": "0.25",
            "name": " x ",
            "dirs": " /c , ,/d ",
            "reset": "EARLIEST",
            "secret": "s3cret",
        }
    )
    assert cfg == {
        "broker.id": 7,
        "enable": False,
        "num": 3,
        "big": 9000000000,
        "ratio": 0.25,
        "name": "x",
        "dirs": ["/c", "/d"],
        "policy": "delete",
        "reset": "earliest",
        "num32": 0,
        "secret": Password("s3cret"),
    }
    assert str(cfg["secret"]) == "[hidden]" and cfg["secret"].value == "s3cret"
    d = make().parse({"broker.id": 0})
    assert d["enable"] is True and d["dirs"] == ["/a", "/b"] and d["name"] is None


@pytest.mark.parametrize(
    "key,value,needle",
    [
        ("enable", "yes", "enable: expected true or false, read 'yes'"),
        ("num", "x1", "num: expected an integer, read 'x1'"),
        ("num", "0", "num: expected an integer >= 1, read 0"),
        ("num", 11, "num: expected an integer <= 10, read 11"),
        ("broker.id", str(2**31), "broker.id: expected an integer <= 2147483647, read 2147483648"),
        ("num32", str(2**31), "num32: expected an integer in [-2147483648, 2147483647], read 2147483648"),
        ("big", "1.5", "big: expected an integer, read '1.5'"),
        ("ratio", "half", "ratio: expected a number, read 'half'"),
        ("ratio", "2", "ratio: expected a number <= 1.0, read 2.0"),
        ("policy", "Delete", "policy: expected one of delete, compact, read 'Delete'"),
        ("num", True, "num: expected an integer, read True"),
    ],
)
def test_bad_values_name_key_and_value(key, value, needle):
    props = {"broker.id": 1, key: value}
    with pytest.raises(ConfigError) as e:
        make().parse(props)
    assert needle in str(e.value)


def test_required_missing():
    with pytest.raises(ConfigError, match=r"broker.id: required \(an integer >= 0\), not set"):
        make().parse({})


def test_unknown_keys_reported_separately():
    d = make()
    props = {"broker.id": 1, "zzz": 1, "aaa": 2}
    assert d.parse(props)["broker.id"] == 1  # parse ignores them
    assert d.unknown_keys(props) == ["aaa", "zzz"]
    assert "num" in d and "zzz" not in d


def test_error_format_display_and_expected_overrides():
    d = ConfigDef(
        error_format="option '{name}': expected {expected}, read {value!r}",
        display=lambda n: {"failondataloss": "failOnDataLoss"}.get(n, n),
        expected={Type.BOOLEAN: "'true' or 'false'"},
    ).define("failondataloss", Type.BOOLEAN, True)
    with pytest.raises(ConfigError, match=r"option 'failOnDataLoss': expected 'true' or 'false', read 'maybe'"):
        d.parse({"failondataloss": "maybe"})
    assert d.parse_value("failondataloss", " True ") is True


def test_define_checks():
    d = ConfigDef().define("a", Type.INT, 1)
    with pytest.raises(ValueError):
        d.define("a", Type.INT, 2)
    with pytest.raises(ConfigError):
        ConfigDef().define("b", Type.INT, 0, Range(1))


def test_optional_int_default_none():
    d = ConfigDef().define("x", Type.INT, None, Range(1))
    assert d.parse({}) == {"x": None}
    assert d.parse({"x": "3"}) == {"x": 3}
