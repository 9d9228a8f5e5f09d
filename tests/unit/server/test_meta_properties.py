"""meta.properties (Kafka's BrokerMetadataCheckpoint): format, atomic write, checks.  No server."""

import os

import pytest

from pyklog.broker.server.meta_properties import (
    InconsistentBrokerIdError,
    InconsistentBrokerMetadataError,
    InconsistentClusterIdError,
    check_cluster_id,
    read_meta_properties,
    stored_identity,
    write_meta_properties,
)


def test_round_trip_in_kafkas_format(tmp_path):
    write_meta_properties(str(tmp_path), 3, "AbCdEfGhIjKlMnOpQrStUv")
    text = (tmp_path / "meta.properties").read_text()
    assert "version=0\nbroker.id=3\ncluster.id=AbCdEfGhIjKlMnOpQrStUv\n" in text
    assert not os.path.exists(tmp_path / "meta.properties.tmp")
    assert read_meta_properties(str(tmp_path)) == {"version": 0, "broker.id": 3, "cluster.id": "AbCdEfGhIjKlMnOpQrStUv"}
    assert read_meta_properties(str(tmp_path / "none")) is None


def test_malformed_file_is_a_clear_error_and_left_alone(tmp_path):
    (tmp_path / "meta.properties").write_text("version=0\nbroker.id=abc\n")
    with pytest.raises(InconsistentBrokerMetadataError, match="integer broker.id"):
        read_meta_properties(str(tmp_path))
    (tmp_path / "meta.properties").write_text("version=1\nbroker.id=1\n")
    with pytest.raises(InconsistentBrokerMetadataError, match="version 1"):
        read_meta_properties(str(tmp_path))
    assert (tmp_path / "meta.properties").read_text() == "version=1\nbroker.id=1\n"


def test_checks(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert stored_identity([a, b], 0) is None  # first start
    write_meta_properties(a, 0, "cluster-one")
    assert stored_identity([a, b], 0) == "cluster-one"
    with pytest.raises(InconsistentBrokerIdError, match="does not match stored broker.id 0"):
        stored_identity([a, b], 1)
    write_meta_properties(b, 0, "cluster-two")
    with pytest.raises(InconsistentBrokerMetadataError, match="disagree on cluster.id"):
        stored_identity([a, b], 0)
    check_cluster_id(None, "x", "zk:2181", [a])
    check_cluster_id("x", "x", "zk:2181", [a])
    with pytest.raises(InconsistentClusterIdError, match="no cluster ID"):
        check_cluster_id("x", None, "zk:2181", [a])
    with pytest.raises(InconsistentClusterIdError, match="holds cluster ID y"):
        check_cluster_id("x", "y", "zk:2181", [a])
