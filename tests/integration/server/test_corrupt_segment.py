"""End to end: a flipped byte in a middle segment after a SIGKILL costs only the damaged batch.

A real broker (small ``log.segment.bytes``), 20,000 records acknowledged (acks=all) by a stock
client (confluent-kafka), SIGKILL, one byte flipped inside a batch in the middle of segment 2 of
4, restart, then everything consumed from the beginning by a stock consumer.  Counts
acknowledged / lost / duplicated: lost must be exactly the damaged batch's records (before this
change recovery truncated segment 2 there and deleted segments 3 and 4: about half the records)."""

from __future__ import annotations

import os
import uuid

from pyklog.broker.record.header import HEADER, LOG_OVERHEAD
from tests.support import Wire, create_topic

N = 20_000


def _batches(path):
    """(position, size, base offset, last offset, record count) of each batch of a .log."""
    raw = open(path, "rb").read()
    out, pos = [], 0
    while pos < len(raw):
        f = HEADER.unpack_from(raw, pos)
        base, length, last_delta, count = f[0], f[1], f[6], f[12]
        out.append((pos, LOG_OVERHEAD + length, base, base + last_delta, count))
        pos += LOG_OVERHEAD + length
    return out


def test_flipped_byte_in_segment_2_of_4_loses_only_that_batch(broker_factory):
    from confluent_kafka import Consumer, Producer, TopicPartition

    b = broker_factory(0, log_segment_bytes=600_000)
    topic = f"corrupt-{uuid.uuid4().hex[:6]}"
    with Wire(b.port) as w:
        assert create_topic(w, topic, 1)["error_code"] == 0

    acked: set[bytes] = set()
    failed = []

    def on_delivery(err, msg):
        if err is None:
            acked.add(msg.key())
        else:
            failed.append(err)

    p = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 16384,
            "compression.type": "none",
        }
    )
    for i in range(N):
        while True:
            try:
                p.produce(topic, key=b"%06d" % i, value=b"v%06d-" % i + b"x" * 80, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    assert p.flush(60) == 0
    assert len(acked) == N and not failed

    b.kill()
    part = os.path.join(b.props["log.dirs"], f"{topic}-0")
    segs = sorted(f for f in os.listdir(part) if f.endswith(".log"))
    assert len(segs) == 4, segs
    seg2 = os.path.join(part, segs[1])
    batches = _batches(seg2)
    pos, size, first, last, count = batches[len(batches) // 2]  # a batch in the middle
    with open(seg2, "r+b") as f:
        f.seek(pos + size - 10)  # a byte inside the last record's value
        byte = f.read(1)
        f.seek(pos + size - 10)
        f.write(bytes([byte[0] ^ 0x01]))
    damaged = {b"%06d" % o for o in range(first, last + 1)}  # keys equal offsets: one producer

    before = len(b.output())
    b.start()

    c = Consumer(
        {
            "bootstrap.servers": b.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    try:
        _low, high = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=30)
        c.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        last_offset = -1
        idle = 0
        while last_offset < high - 1 and idle < 20:
            msg = c.poll(1.0)
            if msg is None:
                idle += 1
                continue
            assert msg.error() is None, msg.error()
            idle = 0
            seen.append(msg.key())
            last_offset = msg.offset()
    finally:
        c.close()

    lost = acked - set(seen)
    duplicated = len(seen) - len(set(seen))
    print(
        f"acknowledged {len(acked)}, lost {len(lost)}, duplicated {duplicated}, "
        f"damaged batch {first}..{last} ({count} records)"
    )
    assert duplicated == 0
    assert lost == damaged and len(lost) == count
    out = b.output()[before:]
    line = next((ln for ln in out.splitlines() if "ERROR" in ln and segs[1] in ln), "")
    assert f"offsets {first}..{last} lost" in line and f"{count} records" in line, out[-3000:]
    assert f"[{pos}, {pos + size})" in line
