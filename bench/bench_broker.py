"""Broker ingest and egress with stock clients, next to a raw disk write of the same bytes.

    .venv/bin/python bench/bench_broker.py [--records 3000000] [--size 100] [--dir /tmp]

One run starts a ZooKeeper (pyspark's jars) and one broker process (``python -m pyklog.broker``), then:

1. raw write: the same number of bytes as the produced record batches, written in 1 MiB chunks to a
   file in the broker's log dir (same disk; no fsync, as the broker's default flush policy; best
   of three, since other work on the machine makes single runs stall);
2. ingest: a confluent-kafka Producer (linger.ms=20, batch.size=1000000, acks=1, no compression)
   sends ``--records`` records of ``--size`` bytes to one partition; timed from the first produce()
   to the end of flush();
3. egress: a confluent-kafka Consumer (assign at offset 0, fetch.max.bytes 64 MiB,
   max.partition.fetch.bytes 4 MiB, queued.min.messages 1M and fetch.queue.backoff.ms 1 so
   librdkafka does not pause its fetcher for a second once 100,000 records are queued,
   consume(1000) per call) reads them all back.

Besides the confluent-kafka figures (the Python client's per-record cost dominates them), the
same work is timed with kcat (librdkafka in C) and with pre-encoded requests on a plain socket
(0.9 MB produce batches, 5 in flight; a raw Fetch v11 loop of 16 MiB fetches), which shows what
the broker itself sustains.  Each line gives the broker process's CPU seconds, so on a shared
machine the records per broker CPU-second are the steadier figure.

Prints records/s and MB/s of each, the ratios to the goals (ingest 1,000,000 records/s -- Kafka's
published single-producer figure is 821,557 records/s --, egress 2,000,000 records/s) and to the
raw write, and the CPU seconds the broker process and this client process used, so a reader can
tell whether the broker or the client was the bottleneck on this machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
HERE = os.path.dirname(os.path.abspath(__file__))

KAFKA_SINGLE_PRODUCER = 821_557
GOAL_INGEST = 1_000_000
GOAL_EGRESS = 2_000_000


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime + stime


def self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def children_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def start_broker(zk_connect: str, workdir: str, port: int, extra: dict):
    from pyklog.broker.server.process import BrokerProcess

    broker = BrokerProcess(zk_connect, 0, log_dir=workdir, port=port)
    broker.props.update(
        {
            "offsets.topic.num.partitions": "1",
            "message.max.bytes": str(2 * 1024 * 1024),
            "log.segment.bytes": str(1024 * 1024 * 1024),
            **extra,
        }
    )
    return broker.start()


def raw_write(path: str, total_bytes: int) -> float:
    chunk = os.urandom(1 << 20)
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as f:
        left = total_bytes
        while left > 0:
            n = min(left, len(chunk))
            f.write(chunk[:n] if n < len(chunk) else chunk)
            left -= n
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    return elapsed


def ingest(bootstrap: str, topic: str, n: int, size: int, linger_ms: int) -> float:
    from confluent_kafka import Producer

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": linger_ms,
            "batch.size": 1_000_000,
            "acks": 1,
            "compression.type": "none",
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
            "message.max.bytes": 2_000_000,
            "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 5,
        }
    )
    p.list_topics(topic, timeout=30)  # create the topic, warm the connection
    value = b"x" * size
    produce = p.produce
    t0 = time.perf_counter()
    i = 0
    while i < n:
        try:
            produce(topic, value)
            i += 1
        except BufferError:
            p.poll(0.001)
    left = p.flush(120)
    elapsed = time.perf_counter() - t0
    if left:
        raise SystemExit(f"{left} records not delivered")
    return elapsed


def egress(bootstrap: str, topic: str, n: int) -> float:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 4 * 1024 * 1024,
            "receive.message.max.bytes": 128 * 1024 * 1024,
            "queued.min.messages": 1_000_000,
            "fetch.queue.backoff.ms": 1,
            "fetch.wait.max.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, 0)])
    got = 0
    t0 = time.perf_counter()
    consume = c.consume
    while got < n:
        msgs = consume(1000, 5.0)  # small batches: large lists of Message objects cost more per record
        if not msgs:
            raise SystemExit(f"consumer stalled at {got} of {n}")
        got += len(msgs)
    elapsed = time.perf_counter() - t0
    c.close()
    return elapsed


def kcat_ingest(bootstrap: str, topic: str, path: str, linger_ms: int) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(
        [
            KCAT,
            "-P",
            "-b",
            bootstrap,
            "-t",
            topic,
            "-p",
            "0",
            "-l",
            path,
            "-X",
            f"linger.ms={linger_ms}",
            "-X",
            "batch.size=1000000",
            "-X",
            "acks=1",
            "-X",
            "queue.buffering.max.messages=2000000",
            "-X",
            "queue.buffering.max.kbytes=2000000",
            "-X",
            "message.max.bytes=2000000",
            "-X",
            "enable.idempotence=false",
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"kcat -P failed: {r.stderr[-2000:]}")
    return elapsed


def kcat_egress(bootstrap: str, topic: str, n: int) -> float:
    t0 = time.perf_counter()
    with open(os.devnull, "wb") as devnull:
        r = subprocess.run(
            [
                KCAT,
                "-C",
                "-b",
                bootstrap,
                "-t",
                topic,
                "-p",
                "0",
                "-o",
                "beginning",
                "-e",
                "-q",
                "-c",
                str(n),
                "-f",
                "%s\n",
                "-X",
                "fetch.max.bytes=67108864",
                "-X",
                "max.partition.fetch.bytes=16777216",
                "-X",
                "receive.message.max.bytes=134217728",
                "-X",
                "queued.min.messages=10000000",
                "-X",
                "fetch.wait.max.ms=100",
            ],
            stdout=devnull,
            stderr=subprocess.PIPE,
            text=True,
            timeout=600,
            check=False,
        )
    elapsed = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"kcat -C failed: {r.stderr[-2000:]}")
    return elapsed


class RawWire:
    """Pre-encoded requests on a plain socket: what the broker can take and give when the client
    costs (almost) nothing.  Not a stock client; reported separately as broker capacity."""

    def __init__(self, port: int):
        import socket

        self.sock = socket.create_connection(("127.0.0.1", port))
        self.buf = bytearray(64 * 1024 * 1024)
        self.view = memoryview(self.buf)

    def read_frame(self) -> memoryview:
        import struct

        got = 0
        while got < 4:
            got += self.sock.recv_into(self.view[got:4], 4 - got)
        (size,) = struct.unpack_from(">i", self.buf, 0)
        got = 0
        while got < size:
            n = self.sock.recv_into(self.view[got:size], size - got)
            if n == 0:
                raise SystemExit("broker closed the connection")
            got += n
        return self.view[:size]


def wire_ingest(port: int, topic: str, n: int, size: int, inflight: int = 5) -> float:
    from pyklog.broker.protocol import ApiKey, decode_response, encode_request
    from pyklog.broker.record.batch import build_batch

    per_batch = max(1, 900_000 // (size + 10))
    value = b"x" * size
    now = int(time.time() * 1000)
    batch = build_batch([(None, value, now, ())] * per_batch)
    frame = encode_request(
        ApiKey.PRODUCE,
        8,
        1,
        "bench-wire",
        {
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
        },
    )
    w = RawWire(port)
    meta = encode_request(
        ApiKey.METADATA, 4, 1, "bench-wire", {"topics": [{"name": topic}], "allow_auto_topic_creation": True}
    )
    w.sock.sendall(meta)
    w.read_frame()
    time.sleep(0.5)  # let the leader's log be created
    batches = (n + per_batch - 1) // per_batch
    t0 = time.perf_counter()
    sent = done = 0
    while done < batches:
        while sent < batches and sent - done < inflight:
            w.sock.sendall(frame)
            sent += 1
        _, resp = decode_response(ApiKey.PRODUCE, 8, w.read_frame())
        err = resp["responses"][0]["partition_responses"][0]["error_code"]
        if err:
            raise SystemExit(f"produce failed with error {err}")
        done += 1
    elapsed = time.perf_counter() - t0
    w.sock.close()
    return elapsed, batches * per_batch


def wire_egress(port: int, topic: str, n: int) -> float:
    import struct

    from pyklog.broker.protocol import ApiKey, encode_request

    w = RawWire(port)
    offset = 0
    got = 0
    t0 = time.perf_counter()
    while offset < n:
        w.sock.sendall(
            encode_request(
                ApiKey.FETCH,
                11,
                1,
                "bench-wire",
                {
                    "replica_id": -1,
                    "max_wait_ms": 100,
                    "min_bytes": 1,
                    "max_bytes": 64 << 20,
                    "isolation_level": 0,
                    "topics": [
                        {
                            "topic": topic,
                            "partitions": [{"partition": 0, "fetch_offset": offset, "partition_max_bytes": 16 << 20}],
                        }
                    ],
                },
            )
        )
        frame = w.read_frame()
        # walk only the record batch headers to find the next offset (no record decoding)
        (rsize,) = struct.unpack_from(">i", frame, RECORDS_SIZE_POS_V11 + len(topic))
        pos = RECORDS_SIZE_POS_V11 + len(topic) + 4
        end = pos + rsize
        while pos + 61 <= end:
            base, length = struct.unpack_from(">qi", frame, pos)
            (last_delta,) = struct.unpack_from(">i", frame, pos + 23)
            got_next = base + last_delta + 1
            pos += 12 + length
            got = got_next
        if got <= offset:
            raise SystemExit(f"fetch at {offset} returned nothing")
        offset = got
    elapsed = time.perf_counter() - t0
    w.sock.close()
    return elapsed


# Fetch v11 response layout up to the records of the first partition (one topic, one partition):
# correlation_id 4, throttle 4, error 2, session 4, topics count 4, topic name 2+len,
# partitions count 4, partition 4, error 2, hw 8, lso 8, log start 8, aborted count 4,
# preferred replica 4, then records size 4.
RECORDS_SIZE_POS_V11 = 4 + 4 + 2 + 4 + 4 + 2 + 4 + 4 + 2 + 8 + 8 + 8 + 4 + 4


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=3_000_000)
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes")
    ap.add_argument("--linger-ms", type=int, default=20)
    ap.add_argument("--dir", default=None, help="work directory (default: a temp dir)")
    ap.add_argument("--io-threads", type=int, default=8)
    ap.add_argument("--network-threads", type=int, default=3)
    args = ap.parse_args()

    from pyklog.broker.zk.server import ZooKeeperServer, free_port

    workdir = tempfile.mkdtemp(prefix="pyklog-bench-", dir=args.dir)
    zk = ZooKeeperServer(data_dir=os.path.join(workdir, "zk"))
    zk.start()
    broker = None
    try:
        port = free_port()
        broker = start_broker(
            zk.connect_string + "/bench",
            workdir,
            port,
            {"num.io.threads": str(args.io_threads), "num.network.threads": str(args.network_threads)},
        )
        bootstrap = f"127.0.0.1:{port}"
        n, size = args.records, args.size
        topic = "bench"

        pid = broker.proc.pid
        data_dir = broker.props["log.dirs"]

        def log_size(t):
            return sum(
                os.path.getsize(os.path.join(dp, f))
                for dp, _, fs in os.walk(os.path.join(data_dir, f"{t}-0"))
                for f in fs
                if f.endswith(".log")
            )

        def line(label, seconds, records, bcpu, ccpu=None, disk=None):
            rps = records / seconds
            extra = f"  {disk / 1e6 / seconds:8,.1f} MB/s log" if disk else ""
            print(
                f"  {label:<46} {seconds:7.2f} s {rps:12,.0f} records/s {records * size / 1e6 / seconds:8,.1f} MB/s"
                f"{extra}   broker CPU {bcpu:5.2f} s ({records / max(bcpu, 1e-9) / 1e6:5.1f} M records/CPU-s)"
                + (f", client CPU {ccpu:5.2f} s" if ccpu is not None else "")
            )
            return rps

        print(
            f"pyklog broker benchmark: {n:,} records of {size} bytes, one partition, "
            f"{os.cpu_count()} CPUs shared with everything else on the machine, Python {sys.version.split()[0]}"
        )
        try:
            with open("/proc/loadavg") as f:
                load = f.read().split()[:3]
            print(f"  load average at start: {' '.join(load)}")
        except OSError:
            pass
        print("ingest:")
        b0, c0 = cpu_seconds(pid), self_cpu()
        t_in = ingest(bootstrap, topic, n, size, args.linger_ms)
        b1, c1 = cpu_seconds(pid), self_cpu()
        log_bytes = log_size(topic)
        rin = line(f"confluent-kafka Producer (linger {args.linger_ms} ms)", t_in, n, b1 - b0, c1 - c0, log_bytes)
        raw_times = [raw_write(os.path.join(data_dir, "raw-write.bin"), log_bytes) for _ in range(3)]
        t_raw = min(raw_times)  # the best of three: the disk's (page cache's) capacity, not a stall
        print(
            f"  {'raw write of the same bytes (1 MiB writes)':<46} {t_raw:7.2f} s {n / t_raw:12,.0f} records/s "
            f"{log_bytes / 1e6 / t_raw:8,.1f} MB/s of log bytes (best of 3: "
            f"{', '.join(f'{log_bytes / 1e6 / t:,.0f}' for t in raw_times)} MB/s)"
        )
        rin_k = None
        if KCAT:
            lines_path = os.path.join(workdir, "records.txt")
            with open(lines_path, "wb") as f:
                row = b"y" * size + b"\n"
                for _ in range(n // 10_000):
                    f.write(row * 10_000)
                f.write(row * (n % 10_000))
            b0, k0 = cpu_seconds(pid), children_cpu()
            t_k = kcat_ingest(bootstrap, topic + "-kcat", lines_path, args.linger_ms)
            rin_k = line(
                "kcat -P (librdkafka in C, same settings)",
                t_k,
                n,
                cpu_seconds(pid) - b0,
                children_cpu() - k0,
                disk=log_size(topic + "-kcat"),
            )
            os.unlink(lines_path)
        b0, c0 = cpu_seconds(pid), self_cpu()
        t_w, n_w = wire_ingest(port, topic + "-wire", n, size)
        rin_w = line(
            "pre-encoded 0.9 MB batches, 5 in flight",
            t_w,
            n_w,
            cpu_seconds(pid) - b0,
            self_cpu() - c0,
            log_size(topic + "-wire"),
        )
        print("egress:")
        b0, c0 = cpu_seconds(pid), self_cpu()
        t_out = egress(bootstrap, topic, n)
        rout = line(
            "confluent-kafka Consumer (assign, consume(1000))", t_out, n, cpu_seconds(pid) - b0, self_cpu() - c0
        )
        rout_k = None
        if KCAT:
            b0, k0 = cpu_seconds(pid), children_cpu()
            t_k = kcat_egress(bootstrap, topic, n)
            rout_k = line("kcat -C (librdkafka in C) > /dev/null", t_k, n, cpu_seconds(pid) - b0, children_cpu() - k0)
        b0, c0 = cpu_seconds(pid), self_cpu()
        t_w = wire_egress(port, topic, n)
        rout_w = line("raw Fetch v11 loop, 16 MiB per fetch", t_w, n, cpu_seconds(pid) - b0, self_cpu() - c0)

        print("ratios:")
        print("  ingest goal 1,000,000 records/s (Kafka's published single producer: 821,557):")
        print(
            f"    confluent-kafka {rin / GOAL_INGEST:.2f}x"
            + (f", kcat {rin_k / GOAL_INGEST:.2f}x" if rin_k else "")
            + f", pre-encoded {rin_w / GOAL_INGEST:.2f}x;  vs Kafka's figure: confluent-kafka "
            f"{rin / KAFKA_SINGLE_PRODUCER:.2f}x" + (f", kcat {rin_k / KAFKA_SINGLE_PRODUCER:.2f}x" if rin_k else "")
        )
        raw_rps = n / t_raw
        print(
            f"    vs the raw write of the same bytes: confluent-kafka {rin / raw_rps:.2f}x"
            + (f", kcat {rin_k / raw_rps:.2f}x" if rin_k else "")
            + f", pre-encoded {rin_w / raw_rps:.2f}x"
        )
        print(
            f"  egress goal 2,000,000 records/s: confluent-kafka {rout / GOAL_EGRESS:.2f}x"
            + (f", kcat {rout_k / GOAL_EGRESS:.2f}x" if rout_k else "")
            + f", raw fetch {rout_w / GOAL_EGRESS:.2f}x"
        )
    finally:
        if broker is not None:
            rc = broker.stop(timeout=60)
            if rc != 0:
                print(f"broker exited with {rc}:\n" + broker.output()[-3000:])
        zk.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
