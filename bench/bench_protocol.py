"""Benchmark of broker.protocol (the wire codec).

Compares, on the same messages:
  pyklog      the generated per-(api, version) encoders/decoders
  interp      a straightforward interpreter walking the same schema per field per call (the
              design the generated code replaces; defined below, decode only)
  kafka-py    kafka-python 3.0.12's JSON-schema protocol classes (its own generated codecs)

Run: .venv/bin/python bench/bench_protocol.py   (prints one line per case, µs per message)
"""

from __future__ import annotations

import os
import struct
import sys
import time

from pyklog.broker.protocol import (
    SCHEMAS,
    ApiKey,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
)
from pyklog.broker.protocol.schema import active_fields
from pyklog.broker.protocol.types import FIXED, RECORDS, STRING


def interp_decode(fields, version, buf, pos):
    """Schema interpreter: one dispatch per field per call (the baseline)."""
    out = {}
    for f in active_fields(fields, version):
        if f.is_array:
            (n,), pos = struct.unpack_from(">i", buf, pos), pos + 4
            if n < 0:
                out[f.key] = None
                continue
            items = []
            for _ in range(n):
                if f.elem is None:
                    item, pos = interp_decode(f.fields, version, buf, pos)
                else:
                    item, pos = interp_scalar(f.elem, buf, pos)
                items.append(item)
            out[f.key] = items
        else:
            out[f.key], pos = interp_scalar(f.type, buf, pos)
    return out, pos


def interp_scalar(t, buf, pos):
    if t in FIXED:
        code, width = FIXED[t]
        return struct.unpack_from(">" + code, buf, pos)[0], pos + width
    width = 2 if t == STRING else 4
    n = struct.unpack_from(">h" if width == 2 else ">i", buf, pos)[0]
    pos += width
    if n < 0:
        return None, pos
    raw = buf[pos : pos + n]
    return (str(raw, "utf-8") if t == STRING else raw if t == RECORDS else bytes(raw)), pos + n


def timeit(fn, min_time=0.1, repeats=5):
    """Best of ``repeats`` runs of CPU time per call (the machine is shared: wall time is noisy)."""
    n = 1
    while True:
        t0 = time.process_time()
        for _ in range(n):
            fn()
        dt = time.process_time() - t0
        if dt >= min_time:
            break
        n *= 2
    best = dt / n
    for _ in range(repeats - 1):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, (time.process_time() - t0) / n)
    return best * 1e6


def report(case, results):
    base = results.get("kafka-py")
    parts = []
    for name, us in results.items():
        ratio = f" ({base / us:.1f}x kafka-py)" if base and name != "kafka-py" else ""
        parts.append(f"{name} {us:9.1f} us{ratio}")
    print(f"{case:<52} " + " | ".join(parts))


def main():
    from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
    from kafka.protocol.metadata.metadata import MetadataResponse
    from kafka.protocol.producer.produce import ProduceRequest

    print(f"python {sys.version.split()[0]}; best-of-5 CPU microseconds per message (lower is better)")

    # the last non-flexible versions, then the first flexible ones (KIP-482: compact lengths,
    # tagged field sections; the schema interpreter below knows only the non-flexible layout)
    for PV, FV, MV in ((8, 11, 8), (9, 12, 9)):
        FLEX = PV >= 9
        # Produce v{PV} request: 1 topic x 8 partitions x 256 KiB of record batches (2 MiB) ----------
        records = os.urandom(256 * 1024)
        body = {
            "acks": -1,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": "bench-topic", "partition_data": [{"index": p, "records": records} for p in range(8)]}
            ],
        }
        frame = encode_request(ApiKey.PRODUCE, PV, 1, "bench", body)[4:]
        header, off = decode_request_header(frame)
        mv = memoryview(frame)
        report(
            f"decode Produce v{PV} request, 8 x 256 KiB records",
            {
                "pyklog": timeit(lambda: decode_request(header, frame, off)),
                **({} if FLEX else {"interp": timeit(lambda: interp_decode(SCHEMAS[ApiKey.PRODUCE][1], PV, mv, off))}),
                "kafka-py": timeit(lambda: ProduceRequest.decode(frame[off:], version=PV)),
            },
        )

        # Produce v{PV} request with many small partitions (per-field cost dominates) -----------------
        small = os.urandom(100)
        body2 = {
            "acks": 1,
            "timeout_ms": 30000,
            "topic_data": [
                {"name": f"topic-{t}", "partition_data": [{"index": p, "records": small} for p in range(20)]}
                for t in range(10)
            ],
        }
        frame2 = encode_request(ApiKey.PRODUCE, PV, 1, "bench", body2)[4:]
        header2, off2 = decode_request_header(frame2)
        mv2 = memoryview(frame2)
        report(
            f"decode Produce v{PV} request, 10 topics x 20 partitions",
            {
                "pyklog": timeit(lambda: decode_request(header2, frame2, off2)),
                **(
                    {} if FLEX else {"interp": timeit(lambda: interp_decode(SCHEMAS[ApiKey.PRODUCE][1], PV, mv2, off2))}
                ),
                "kafka-py": timeit(lambda: ProduceRequest.decode(frame2[off2:], version=PV)),
            },
        )

        # Fetch v{FV} request decode (the hot consumer path) ---------------------------------------
        fbody = {
            "replica_id": -1,
            "max_wait_ms": 500,
            "min_bytes": 1,
            "max_bytes": 52428800,
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [
                {
                    "topic": "bench-topic",
                    "partitions": [
                        {"partition": p, "fetch_offset": 123456, "partition_max_bytes": 1048576} for p in range(8)
                    ],
                }
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        fframe = encode_request(ApiKey.FETCH, FV, 1, "bench", fbody)[4:]
        fh, foff = decode_request_header(fframe)
        fmv = memoryview(fframe)
        report(
            f"decode Fetch v{FV} request, 8 partitions",
            {
                "pyklog": timeit(lambda: decode_request(fh, fframe, foff)),
                **({} if FLEX else {"interp": timeit(lambda: interp_decode(SCHEMAS[ApiKey.FETCH][1], FV, fmv, foff))}),
                "kafka-py": timeit(lambda: FetchRequest.decode(fframe[foff:], version=FV)),
            },
        )

        # Fetch v{FV} response encode with 8 x 1 MiB records ----------------------------------------
        big = os.urandom(1 << 20)
        rbody = {
            "responses": [
                {
                    "topic": "bench-topic",
                    "partitions": [
                        {
                            "partition_index": p,
                            "high_watermark": 10**6,
                            "last_stable_offset": 10**6,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "records": big,
                        }
                        for p in range(8)
                    ],
                }
            ]
        }
        kp_resp = FetchResponse(
            responses=[
                FetchResponse.FetchableTopicResponse(
                    topic="bench-topic",
                    partitions=[
                        FetchResponse.FetchableTopicResponse.PartitionData(
                            partition_index=p,
                            high_watermark=10**6,
                            last_stable_offset=10**6,
                            log_start_offset=0,
                            aborted_transactions=None,
                            records=big,
                            version=FV,
                        )
                        for p in range(8)
                    ],
                    version=FV,
                )
            ],
            version=FV,
        )
        report(
            f"encode Fetch v{FV} response, 8 x 1 MiB records",
            {
                "pyklog": timeit(lambda: encode_response(ApiKey.FETCH, FV, 1, rbody)),
                "kafka-py": timeit(lambda: kp_resp.encode(version=FV)),
            },
        )

        # Metadata v{MV} response: 100 topics x 10 partitions ----------------------------------------
        mbody = {
            "brokers": [{"node_id": i, "host": f"broker-{i}.example", "port": 9092, "rack": None} for i in range(3)],
            "cluster_id": "abc",
            "controller_id": 0,
            "topics": [
                {
                    "error_code": 0,
                    "name": f"topic-{t}",
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": p % 3,
                            "leader_epoch": 0,
                            "replica_nodes": [p % 3],
                            "isr_nodes": [p % 3],
                            "offline_replicas": [],
                        }
                        for p in range(10)
                    ],
                    "topic_authorized_operations": -2147483648,
                }
                for t in range(100)
            ],
            "cluster_authorized_operations": -2147483648,
        }
        mframe = b"".join(encode_response(ApiKey.METADATA, MV, 1, mbody))
        report(
            f"encode Metadata v{MV} response, 100 topics x 10 partitions",
            {
                "pyklog": timeit(lambda: encode_response(ApiKey.METADATA, MV, 1, mbody)),
            },
        )
        report(
            f"decode Metadata v{MV} response, 100 topics x 10 partitions",
            {
                "pyklog": timeit(lambda: decode_response(ApiKey.METADATA, MV, mframe[4:])),
                **(
                    {}
                    if FLEX
                    else {
                        "interp": timeit(lambda: interp_decode(SCHEMAS[ApiKey.METADATA][2], MV, memoryview(mframe), 8))
                    }
                ),
                "kafka-py": timeit(lambda: MetadataResponse.decode(mframe[8 + (MV >= 9) :], version=MV)),
            },
        )


if __name__ == "__main__":
    main()
