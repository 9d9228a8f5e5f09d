"""pyklog's transactional producer (KIP-98) without a server: the config rules, the request bodies
(encoded and decoded by broker.protocol at every version), the state checks of the facade, and a
prepared transaction that pickles.  Against real brokers: tests/integration/connector/test_producer_transactions.py.
"""

from __future__ import annotations

import pickle
import re

import pytest

from pyklog.broker.errors import (
    ConfigError,
)
from pyklog.broker.protocol import SUPPORTED, ApiKey, encode_request
from pyklog.broker.protocol.api import decode_request, decode_request_header
from pyklog.connector.producer import (
    IllegalStateError,
    PreparedTransaction,
    Producer,
    TransactionState,
    complete_transaction,
)
from pyklog.connector.producer.transaction_manager import (
    add_offsets_body,
    add_partitions_body,
    end_txn_body,
    init_producer_id_body,
    txn_offset_commit_body,
)

S = TransactionState


# ------------------------------------------------------------------------------------ no server


@pytest.mark.parametrize(
    "bad,msg",
    [
        ({"acks": 1}, "needs acks=all"),
        ({"enable.idempotence": False}, "needs enable.idempotence=true"),
        ({"max.in.flight.requests.per.connection": 6}, "max.in.flight.requests.per.connection <= 5"),
        ({"retries": 0}, "retries > 0"),
        ({"transactional.id": ""}, "non-empty string"),
        ({"transaction.timeout.ms": 0}, "transaction.timeout.ms"),
    ],
)
def test_contradictory_settings_are_refused(bad, msg):
    with pytest.raises(ConfigError, match=re.escape(msg)):
        Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x", **bad})


def test_transactional_id_implies_idempotence():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x"})
    try:
        assert p.config["enable.idempotence"] is True and p.config["acks"] == -1
        assert p.transaction_state is S.UNINITIALIZED
    finally:
        p.close(0)


def test_calls_out_of_order_say_what_to_do():
    p = Producer({"bootstrap.servers": "127.0.0.1:1", "transactional.id": "x"})
    try:
        with pytest.raises(IllegalStateError, match=r"call init_transactions\(\) first"):
            p.send("t", b"v", partition=0)
        with pytest.raises(IllegalStateError, match=r"UNINITIALIZED.*init_transactions"):
            p.begin_transaction()
        for call in (p.commit_transaction, p.abort_transaction, p.prepare_transaction):
            with pytest.raises(IllegalStateError, match="UNINITIALIZED"):
                call(1)
        with pytest.raises(IllegalStateError, match="UNINITIALIZED"):
            p.send_offsets_to_transaction({("t", 0): 1}, "g")
    finally:
        p.close(0)
    plain = Producer({"bootstrap.servers": "127.0.0.1:1"})
    try:
        with pytest.raises(IllegalStateError, match="no transactional.id"):
            plain.begin_transaction()
    finally:
        plain.close(0)


@pytest.mark.parametrize(
    "api,body",
    [
        (ApiKey.INIT_PRODUCER_ID, init_producer_id_body("tx", 5000)),
        (ApiKey.ADD_PARTITIONS_TO_TXN, add_partitions_body("tx", 7, 3, [("b", 1), ("a", 2), ("b", 0), ("a", 0)])),
        (ApiKey.ADD_OFFSETS_TO_TXN, add_offsets_body("tx", 7, 3, "group")),
        (
            ApiKey.TXN_OFFSET_COMMIT,
            txn_offset_commit_body("tx", "group", 7, 3, {("a", 1): 10, ("a", 0): 5, ("b", 2): 0}),
        ),
        (ApiKey.END_TXN, end_txn_body("tx", 7, 3, True)),
    ],
)
def test_request_bodies_round_trip_at_every_version(api, body):
    lo, hi = SUPPORTED[api]
    for v in range(lo, hi + 1):
        frame = encode_request(api, v, 11, "c", body)[4:]
        header, off = decode_request_header(frame)
        decoded = decode_request(header, frame, off)
        assert (header.api_key, header.api_version) == (api, v)
        for k, want in body.items():
            if k in decoded:
                assert _norm(decoded[k]) == _norm(want), (v, k)


def _norm(v):
    if isinstance(v, list):
        return [_norm(x) for x in v]
    if isinstance(v, dict):
        return {k: _norm(x) for k, x in v.items() if k != "committed_leader_epoch"}
    return v


def test_add_partitions_body_groups_one_drain_by_topic():
    body = add_partitions_body("tx", 7, 3, [("b", 1), ("a", 2), ("b", 0), ("a", 0)])
    assert body["v3_and_below_topics"] == [{"name": "a", "partitions": [0, 2]}, {"name": "b", "partitions": [0, 1]}]
    assert (
        body["v3_and_below_transactional_id"],
        body["v3_and_below_producer_id"],
        body["v3_and_below_producer_epoch"],
    ) == ("tx", 7, 3)


def test_prepared_transaction_pickles_and_complete_checks_its_argument():
    prep = PreparedTransaction("tx", 12, 4)
    assert pickle.loads(pickle.dumps(prep)) == prep and prep.producer_id == 12
    with pytest.raises(TypeError, match="PreparedTransaction"):
        complete_transaction({"bootstrap.servers": "127.0.0.1:1"}, ("tx", 1), commit=True)
    # an empty transaction (nothing reached the coordinator): nothing to do, no connection made
    complete_transaction({"bootstrap.servers": "127.0.0.1:1"}, PreparedTransaction("tx", -1, -1), commit=True)


# ------------------------------------------------------------------------------------ real brokers


# ------------------------------------------------------------------------------------ no transactions
