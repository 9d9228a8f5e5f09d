"""SimpleConsumer against real brokers: fetches across brokers, offsets, records written by
confluent-kafka and kcat, and control batches in a real log.  The decoding rules (pure) are in
tests/unit/connector/test_simple_consumer.py."""

from __future__ import annotations

import subprocess
import time

import pytest

from pyklog.broker.errors import OffsetOutOfRangeError
from pyklog.broker.record.reader import iter_batches
from pyklog.connector.client import ClusterClient
from pyklog.connector.consumer import SimpleConsumer
from pyklog.connector.partitioner import partition_for_key
from pyklog.connector.producer import Producer
from tests.support import batch_at, control_batch_at, wait_for


def test_fetch_multi_fetch_and_offsets(broker_factory, zk_chroot):
    b0 = broker_factory(0)
    broker_factory(1)
    with (
        ClusterClient(zookeeper_connect=zk_chroot) as admin,
        Producer(bootstrap_servers=b0.bootstrap, linger_ms=0) as p,
    ):
        wait_for(lambda: len(admin.metadata(None, refresh=True).brokers) == 2, message="2 brokers")
        admin.create_topic("m", 4)
        assert {admin.leader_for("m", q) for q in range(4)} == {0, 1}
        t0 = int(time.time() * 1000) - 60000
        for q in range(4):
            for batch in range(3):  # three batches of 10 per partition
                for i in range(10):
                    p.produce(
                        "m",
                        b"p%d-%d" % (q, batch * 10 + i),
                        key=b"k",
                        partition=q,
                        timestamp_ms=t0 + batch * 1000,
                        headers=[("b", b"%d" % batch)],
                    )
                p.flush()
    with SimpleConsumer(zookeeper_connect=zk_chroot) as c:
        r = c.fetch("m", 2, 0, 1 << 20)
        assert [x.value for x in r.records] == [b"p2-%d" % i for i in range(30)]
        assert (r.high_watermark, r.log_start_offset, r.next_offset) == (30, 0, 30)
        assert r.records[12].headers == (("b", b"1"),) and r.records[12].timestamp == t0 + 1000
        # a fetch from inside a batch skips the records below the offset
        r = c.fetch("m", 2, 15, 1 << 20)
        assert r.records[0].offset == 15 and len(r.records) == 15
        # a small max_bytes returns the first batch (at least one whole batch) and next_offset after it
        one_batch = len(bytes(c.fetch_raw("m", 1, 0, 1 << 20).records)) // 3
        r = c.fetch("m", 1, 0, one_batch + one_batch // 2)
        assert [x.offset for x in r.records] == list(range(10)) and r.next_offset == 10
        # multi_fetch: every partition, one request per leader
        res = c.multi_fetch({("m", q): (5 * q, 1 << 20) for q in range(4)})
        assert {tp: (v.records[0].offset, len(v.records), v.next_offset) for tp, v in res.items()} == {
            ("m", q): (5 * q, 30 - 5 * q, 30) for q in range(4)
        }
        # end of log: empty, position unchanged
        r = c.fetch("m", 0, 30, 1000)
        assert r.records == [] and r.next_offset == 30
        # fetch_raw: bytes for bulk decoders plus the partition fields
        raw = c.fetch_raw("m", 3, 0, 1 << 20)
        assert raw.error_code == 0 and raw.high_watermark == 30 and raw.log_start_offset == 0
        assert sum(len(b.records) for b in iter_batches(bytes(raw.records))) == 30
        # offsets
        assert c.offsets_before("m", 0, -1, 10)[0] == 30
        assert c.offsets_before("m", 0, -2, 1) == [0]
        assert c.earliest_offset("m", 0) == 0 and c.latest_offset("m", 0) == 30
        assert c.offset_for_time("m", 0, t0 + 500) == (10, t0 + 1000)
        assert c.offset_for_time("m", 0, t0 + 10**9) is None
        with pytest.raises(OffsetOutOfRangeError) as ei:
            c.fetch("m", 0, 31, 1000)
        assert (ei.value.log_start_offset, ei.value.log_end_offset) == (0, 30)
        bad = c.multi_fetch({("m", 0): (99, 1000), ("m", 1): (0, 1000)}, raise_errors=False)
        assert isinstance(bad[("m", 0)], OffsetOutOfRangeError) and bad[("m", 1)].records[0].offset == 0


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_records_written_by_confluent_kafka(broker, codec):
    from confluent_kafka import Producer as CProducer

    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("ck", 3)
    p = CProducer(
        {
            "bootstrap.servers": broker.bootstrap,
            "compression.type": codec,
            "partitioner": "murmur2_random",
            "linger.ms": 20,
            "enable.idempotence": True,
        }
    )
    sent = {}
    for i in range(300):
        key = b"user-%d" % (i % 37)
        p.produce("ck", value=b"payload-%d" % i, key=key, headers=[("i", b"%d" % i)] if i % 2 else None)
        sent[b"payload-%d" % i] = key
    assert p.flush(30) == 0
    got = 0
    with SimpleConsumer(broker.bootstrap) as c:
        for q in range(3):
            recs = list(c.iter_records("ck", q, 0))
            assert [r.offset for r in recs] == list(range(len(recs)))
            for r in recs:
                i = int(r.value.split(b"-")[1])
                assert r.key == sent[r.value]
                # librdkafka's murmur2 placement is ours: same key, same partition
                assert q == partition_for_key(r.key, 3)
                assert r.headers == ((("i", b"%d" % i),) if i % 2 else ())
                got += 1
    assert got == 300


def test_records_written_by_kcat(broker):
    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("kc", 1)
    lines = "".join(f"k{i}:line {i}\n" for i in range(50))
    subprocess.run(
        ["kcat", "-P", "-b", broker.bootstrap, "-t", "kc", "-p", "0", "-K:", "-z", "gzip"],
        input=lines.encode(),
        check=True,
        timeout=60,
    )
    with SimpleConsumer(broker.bootstrap) as c:
        recs = list(c.iter_records("kc", 0, 0))
    assert [(r.key, r.value) for r in recs] == [(b"k%d" % i, b"line %d" % i) for i in range(50)]


def test_control_batches_in_a_real_log_are_not_returned(broker):
    """Clients may not write control batches, so they are put into the partition's log directly
    (as a transaction coordinator's markers would be) while the broker is down."""
    import os

    from pyklog.broker.log.log import Log

    with ClusterClient(broker.bootstrap) as admin:
        admin.create_topic("ctl", 1)
    with Producer(bootstrap_servers=broker.bootstrap) as p:
        p.send_sync("ctl", b"before", partition=0)
    broker.stop()
    lg = Log.open(os.path.join(broker.props["log.dirs"], "ctl-0"))
    pid = 4242
    for data in (
        batch_at(0, [b"t1", b"t2"], producer_id=pid, producer_epoch=0, base_sequence=0, is_transactional=True),
        control_batch_at(0, 1, pid),  # COMMIT
        batch_at(0, [b"after"]),
    ):
        lg.append(data, from_client=False)
    lg.close()
    broker.start()
    with SimpleConsumer(broker.bootstrap) as c:
        r = c.fetch("ctl", 0, 0, 1 << 20)
        assert [(x.offset, x.value) for x in r.records] == [(0, b"before"), (1, b"t1"), (2, b"t2"), (4, b"after")]
        assert r.next_offset == 5 == r.high_watermark
        # a fetch starting at the marker returns what follows it
        r = c.fetch("ctl", 0, 3, 1 << 20)
        assert [x.offset for x in r.records] == [4] and r.next_offset == 5
