"""Topic ids (KIP-516) without a server: the 22-character base64 string form Kafka prints, and the
``topic_id`` in the ``/brokers/topics/<t>`` node (version 3, golden bytes), older nodes gaining one.
Metadata by id and re-created topics against a real broker are in tests/integration/server/test_topic_ids.py."""

from __future__ import annotations

import json
import uuid

import pytest

from pyklog.broker.zk.znodes import (
    ZkDataError,
    decode_topic_assignment,
    decode_topic_id,
    encode_topic_assignment,
    new_topic_id,
    parse_topic_id,
    topic_id_str,
    with_topic_id,
)

# ------------------------------------------------------------------------------ codecs (no server)


def test_topic_id_string_form_is_kafkas_base64():
    u = uuid.UUID("5c6d5b2e-0f4a-4b1e-9a55-0d3c2b1a0f9e")
    assert topic_id_str(u) == "XG1bLg9KSx6aVQ08KxoPng" and parse_topic_id("XG1bLg9KSx6aVQ08KxoPng") == u
    for _ in range(200):
        t = new_topic_id()
        assert t.int != 0 and not topic_id_str(t).startswith("-") and len(topic_id_str(t)) == 22
    with pytest.raises(ValueError, match="22 chars"):
        parse_topic_id("abc")


def test_topic_node_v3_golden_and_older_nodes_gain_an_id():
    u = uuid.UUID(int=1)
    data = encode_topic_assignment({1: [1, 0], 0: [0, 1]}, u)
    assert json.loads(data) == {
        "version": 3,
        "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "partitions": {"0": [0, 1], "1": [1, 0]},
        "adding_replicas": {},
        "removing_replicas": {},
    }
    assert decode_topic_id(data, "/p") == u and decode_topic_assignment(data, "/p") == {0: [0, 1], 1: [1, 0]}
    v1 = encode_topic_assignment({0: [0]})
    assert decode_topic_id(v1, "/p") is None
    upgraded = with_topic_id(b'{"version":2,"partitions":{"0":[0]},"adding_replicas":{"0":[1]}}', "/p", u)
    assert json.loads(upgraded) == {
        "version": 3,
        "topic_id": "AAAAAAAAAAAAAAAAAAAAAQ",
        "partitions": {"0": [0]},
        "adding_replicas": {"0": [1]},
        "removing_replicas": {},
    }
    with pytest.raises(ZkDataError, match="topic_id"):
        decode_topic_id(b'{"version":3,"topic_id":"nope","partitions":{}}', "/brokers/topics/x")


# ------------------------------------------------------------------------------ a live broker
