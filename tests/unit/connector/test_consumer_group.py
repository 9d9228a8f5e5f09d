"""ZooKeeper consumer groups against a real ZooKeeper (no broker): registration, watches, rebalance,
the partition owner registry, session loss, manual release (the Spark driver's mode)."""

from __future__ import annotations

import pytest

from pyklog.broker.errors import ConfigError
from pyklog.connector.group import GroupMember, Whitelist, parse_registration, topics_of


def test_bad_configuration_and_registrations():
    with pytest.raises(ConfigError, match="exactly one of topics"):
        GroupMember("127.0.0.1:1", "g")
    with pytest.raises(ConfigError, match="group.id must be a non-empty name without '/'; got 'a/b'"):
        GroupMember("127.0.0.1:1", "a/b", topics=["t"])
    with pytest.raises(ConfigError, match="partition.assignment.strategy"):
        GroupMember("127.0.0.1:1", "g", topics=["t"], strategy="fancy")
    with pytest.raises(ConfigError, match="number of streams for 't' must be an int >= 1; got 0"):
        GroupMember("127.0.0.1:1", "g", topics={"t": 0})
    with pytest.raises(ConfigError, match="invalid topic filter regular expression"):
        Whitelist("(unclosed")
    with pytest.raises(ValueError, match="expected registration JSON"):
        parse_registration(b"not json")
    with pytest.raises(ValueError, match="expected pattern static, white_list or black_list, read 'x'"):
        parse_registration(b'{"subscription":{"t":1},"pattern":"x"}')
    assert topics_of("white_list", {"a.*": 1}, ["ab", "ba", "a"]) == {"ab", "a"}
    assert topics_of("black_list", {"a.*": 1}, ["ab", "ba", "__consumer_offsets"]) == {"ba"}
