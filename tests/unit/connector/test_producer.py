"""Producer tests: murmur2 placement (pure) and the real producer against real brokers."""

from __future__ import annotations

import random

import pytest

from pyklog.connector.partitioner import (
    DefaultPartitioner,
    RoundRobinPartitioner,
    murmur2,
    partition_for_key,
)

# Kafka's UtilsTest.testMurmur2 golden values (Java client).
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_murmur2_java_golden_values():
    for key, expected in JAVA_MURMUR2.items():
        assert murmur2(key) == expected, key


def test_murmur2_matches_kafka_python_default_partitioner():
    from kafka.partitioner.default import murmur2 as kp_murmur2

    rng = random.Random(20240601)
    keys = [b"", b"\x00", b"\xff\xff\xff\xff\xff"]
    keys += [rng.randbytes(rng.randrange(0, 64)) for _ in range(3000)]
    keys += [str(i).encode() for i in range(1000)]
    for key in keys:
        expected = kp_murmur2(key)
        assert murmur2(key) & 0x7FFFFFFF == expected & 0x7FFFFFFF, key
        for n in (1, 2, 3, 7, 12, 50, 1000):
            assert partition_for_key(key, n) == (expected & 0x7FFFFFFF) % n


def test_default_partitioner_keyed_and_sticky_null_keys():
    p = DefaultPartitioner(random.Random(1))
    assert p.partition("t", b"foobar", 12) == (-790332482 & 0x7FFFFFFF) % 12
    first = p.partition("t", None, 12)
    assert all(p.partition("t", None, 12) == first for _ in range(50))  # sticky within a batch
    p.on_new_batch("t", 12, first)
    assert p.partition("t", None, 12) != first  # moves on when the batch closes
    # only partitions with a leader are candidates for null keys
    p2 = DefaultPartitioner(random.Random(2))
    for _i in range(20):
        p2.on_new_batch("u", 8, p2.partition("u", None, 8, available=[3, 5]), available=[3, 5])
        assert p2.partition("u", None, 8, available=[3, 5]) in (3, 5)


def test_round_robin_partitioner():
    p = RoundRobinPartitioner()
    assert [p.partition("t", None, 3) for _ in range(6)] == [0, 1, 2, 0, 1, 2]


# ---------------------------------------------------------------------------------------------
# configuration (no server needed: the producer connects lazily)
# ---------------------------------------------------------------------------------------------
from pyklog.broker.errors import ConfigError  # noqa: E402
from pyklog.connector.producer import Producer  # noqa: E402
from pyklog.connector.producer.config import parse_config  # noqa: E402


def test_config_dotted_and_python_names():
    cfg, _ = parse_config(
        {"bootstrap.servers": "h:1", "linger.ms": "7", "acks": "all"}, {"batch_size": 100, "compression_type": "lz4"}
    )
    assert cfg["linger.ms"] == 7 and cfg["batch.size"] == 100 and cfg["acks"] == -1
    assert cfg["compression.type"] == 3 and cfg["enable.idempotence"] is True


def test_config_errors_name_the_setting():
    with pytest.raises(ConfigError, match="lingerms"):
        parse_config({"bootstrap.servers": "h:1", "lingerms": 5}, {})
    with pytest.raises(ConfigError, match="bogus_option"):
        parse_config(None, {"bootstrap_servers": "h:1", "bogus_option": 1})
    with pytest.raises(ConfigError, match="acks"):
        parse_config({"bootstrap.servers": "h:1", "acks": "2"}, {})
    with pytest.raises(ConfigError, match="compression.type"):
        parse_config({"bootstrap.servers": "h:1", "compression.type": "brotli"}, {})
    with pytest.raises(ConfigError, match="bootstrap.servers or zookeeper.connect"):
        parse_config({}, {})
    # explicit idempotence needs acks=all and <= 5 in flight
    with pytest.raises(ConfigError, match="acks=all"):
        parse_config({"bootstrap.servers": "h:1", "enable.idempotence": True, "acks": 1}, {})
    with pytest.raises(ConfigError, match="<= 5"):
        parse_config(
            {"bootstrap.servers": "h:1", "enable.idempotence": "true", "max.in.flight.requests.per.connection": 6}, {}
        )
    # the default idempotence gives way silently (as Kafka 3.x does)
    cfg, _ = parse_config({"bootstrap.servers": "h:1", "acks": 1}, {})
    assert cfg["enable.idempotence"] is False
    with pytest.raises(ConfigError, match="unknown producer config"):
        Producer({"bootstrap.servers": "h:1", "queue.time": 5})
    # a batch must fit in a request
    with pytest.raises(ConfigError, match=r"batch.size=2000 is larger than max.request.size=1000"):
        Producer({"bootstrap.servers": "h:1", "batch.size": 2000, "max.request.size": 1000})
    cfg, _ = parse_config({"bootstrap.servers": "h:1", "batch.size": 1000, "max.request.size": 1000}, {})
    assert cfg["batch.size"] == 1000
    cfg, _ = parse_config({"bootstrap.servers": "h:1", "max.request.size": 1000}, {})
    assert cfg["batch.size"] == 1000  # the default batch.size (16384) gives way


def test_config_table_types_defaults_and_bounds():
    from pyklog.broker.common.config_def import Range, Type
    from pyklog.connector.producer import PRODUCER_DEFAULTS
    from pyklog.connector.producer.config import PRODUCER_CONFIG

    keys = list(PRODUCER_CONFIG.keys.values())
    assert {k.name for k in keys} == set(PRODUCER_DEFAULTS)
    # Kafka's defaults for the settings Kafka has
    assert PRODUCER_DEFAULTS["acks"] == -1 and PRODUCER_DEFAULTS["batch.size"] == 16384
    assert PRODUCER_DEFAULTS["delivery.timeout.ms"] == 120000 and PRODUCER_DEFAULTS["retries"] == 2147483647
    assert PRODUCER_DEFAULTS["max.in.flight.requests.per.connection"] == 5
    cfg, explicit = parse_config({"bootstrap.servers": "h:1"}, {})
    assert explicit == {"bootstrap.servers"}
    for key in keys:
        if key.type in (Type.INT, Type.LONG):
            assert cfg[key.name] == key.default and type(cfg[key.name]) is int
            assert isinstance(key.validator, Range) and key.validator.min is not None
            # the python name works, strings are coerced, the lower bound is enforced
            py = key.name.replace(".", "_")
            lo = key.validator.min
            with pytest.raises(ConfigError, match=rf"{key.name}: expected an integer >= {lo}, got {lo - 1}"):
                parse_config({"bootstrap.servers": "h:1"}, {py: str(lo - 1)})
            with pytest.raises(ConfigError, match=rf"{key.name}: expected an integer, got 'x'"):
                parse_config({"bootstrap.servers": "h:1", key.name: "x"}, {})
        elif key.type is Type.BOOLEAN:
            assert parse_config({"bootstrap.servers": "h:1", key.name: "FALSE"}, {})[0][key.name] is False
            with pytest.raises(ConfigError, match=rf"{key.name}: expected true or false"):
                parse_config({"bootstrap.servers": "h:1", key.name: "maybe"}, {})
        elif key.name.endswith(".serializer"):
            with pytest.raises(ConfigError, match=rf"{key.name}: expected a callable"):
                parse_config({"bootstrap.servers": "h:1", key.name: 5}, {})
    assert parse_config({"bootstrap.servers": "h:1", "acks": " 1 "}, {})[0]["acks"] == 1


# ---------------------------------------------------------------------------------------------
# against real brokers
# ---------------------------------------------------------------------------------------------
import threading  # noqa: E402

from pyklog.connector.producer import RecordMetadata  # noqa: E402


def test_record_futures_behave_as_futures():
    """The batch-shared futures send() returns: result/wait/as_completed/callbacks/exceptions."""
    import concurrent.futures as cf

    from pyklog.connector.producer import FutureRecordMetadata
    from pyklog.connector.producer.future import resolve_all

    cond = threading.Condition()
    fs = [FutureRecordMetadata(cond, i, 100 + i) for i in range(3)]
    assert isinstance(fs[0], cf.Future) and not fs[0].done() and not fs[0].cancel()
    seen = []
    fs[0].add_done_callback(lambda f: seen.append(f.result()))
    waiter = threading.Thread(target=lambda: seen.append(("waited", fs[1].result(10))))
    waiter.start()
    waiting = threading.Thread(target=lambda: seen.append(("wait", len(cf.wait(fs, timeout=10).done))))
    waiting.start()
    with pytest.raises(cf.TimeoutError):
        fs[2].result(0.05)
    resolve_all(cond, fs, ("t", 1, 10, -1), None)
    waiter.join(10)
    waiting.join(10)
    assert seen[0] == RecordMetadata("t", 1, 10, 100)
    assert sorted(seen[1:], key=str) == [("wait", 3), ("waited", RecordMetadata("t", 1, 11, 101))]
    assert list(cf.as_completed(fs, timeout=1))
    assert fs[2].result() == RecordMetadata("t", 1, 12, 102)
    # log append time replaces the create time; acks=0 has no offsets
    g = [FutureRecordMetadata(cond, 0, 5), FutureRecordMetadata(cond, 1, 6)]
    resolve_all(cond, g, ("t", 0, -1, 999), None)
    assert [x.result() for x in g] == [RecordMetadata("t", 0, -1, 999)] * 2
    bad = FutureRecordMetadata(cond)
    resolve_all(cond, [bad], None, ValueError("boom"))
    assert isinstance(bad.exception(), ValueError)
    with pytest.raises(ValueError, match="boom"):
        bad.result()


def test_record_larger_than_max_request_size_fails_at_once():
    from pyklog.broker.errors import MessageTooLargeError

    with Producer(bootstrap_servers="127.0.0.1:1", max_request_size=1000) as p:
        with pytest.raises(MessageTooLargeError, match="max.request.size=1000"):
            p.send("t", b"x" * 2000, partition=0)
        with pytest.raises(MessageTooLargeError, match="max.request.size=1000"):
            p.produce("t", b"v", key=b"k" * 500, headers=[("h", b"y" * 500)], partition=0)
        assert (
            not p._accumulator._unfinished and not p._accumulator._open and p.failed_records == 0
        )  # nothing was queued
        with pytest.raises(TypeError, match="value: expected bytes"):
            p.send("t", 12345, partition=0)
