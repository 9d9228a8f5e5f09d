"""pyklog-dump-log on segments written by pyklog's own Log (offline, no broker): batch lines in
Kafka's DumpLogSegments layout, records, transactional and control batches, indexes checked
against the log, the CRC check after damage, the aborted-transaction index."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pyklog.broker.log import Log, LogConfig
from pyklog.broker.record.batch import build_batch

BIN = os.path.dirname(sys.executable)


def dump(*args):
    return subprocess.run([os.path.join(BIN, "pyklog-dump-log"), *args], capture_output=True, text=True, timeout=60)


@pytest.fixture
def segment(tmp_path):
    lg = Log(str(tmp_path / "orders-0"), LogConfig(index_interval_bytes=1, segment_ms=2**62))
    lg.append(build_batch([(b"k0", b"v0", 1000, None), (None, b"v1", 1001, [("h", b"x")])]))
    lg.append(build_batch([(b"k2", b"v2", 1002, None)], compression="gzip"))
    # a transaction that aborts, then one that commits
    lg.append(
        build_batch(
            [(None, b"t0", 1003, None)], producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True
        )
    )
    lg.append_control_marker(7, 0, False, 3)
    lg.append(
        build_batch(
            [(None, b"t1", 1005, None)], producer_id=7, producer_epoch=0, base_sequence=1, is_transactional=True
        )
    )
    lg.append_control_marker(7, 0, True, 3)
    lg.flush()
    lg.close()
    return os.path.join(str(tmp_path / "orders-0"), "00000000000000000000")


def test_help_version_usage():
    r = dump("--help")
    assert r.returncode == 0 and "example:" in r.stdout and "--deep-iteration" in r.stdout
    assert dump("--version").stdout.startswith("pyklog-dump-log (pyklog ")
    r = dump()
    assert r.returncode == 1 and 'Missing required argument "[files]"' in r.stderr


def test_batches_records_and_markers(segment):
    r = dump("--files", segment + ".log")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == f"Dumping {segment}.log" and lines[1] == "Log starting offset: 0"
    batches = lines[2:]
    assert len(batches) == 6 and not any(ln.startswith("|") for ln in batches)
    assert batches[0].startswith(
        "baseOffset: 0 lastOffset: 1 count: 2 baseSequence: -1 lastSequence: -1 "
        "producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false "
        "isControl: false deleteHorizonMs: OptionalLong.empty position: 0 CreateTime: 1001 "
    )
    assert batches[0].endswith(
        "magic: 2 compresscodec: none crc: " + batches[0].split("crc: ")[1].split()[0] + " isvalid: true"
    )
    assert "compresscodec: gzip" in batches[1]
    assert (
        "baseOffset: 3 lastOffset: 3 count: 1 baseSequence: 0 lastSequence: 0 producerId: 7 producerEpoch: 0"
        in batches[2]
        and "isTransactional: true isControl: false" in batches[2]
    )
    assert "isTransactional: true isControl: true" in batches[3]
    assert all("isvalid: true" in b for b in batches)

    r = dump("--files", segment + ".log", "--print-data-log")
    recs = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    assert (
        recs[0]
        == "| offset: 0 CreateTime: 1000 keySize: 2 valueSize: 2 sequence: -1 headerKeys: [] key: k0 payload: v0"
    )
    assert recs[1] == "| offset: 1 CreateTime: 1001 keySize: -1 valueSize: 2 sequence: -1 headerKeys: [h] payload: v1"
    assert recs[2].endswith("key: k2 payload: v2")
    assert recs[3] == "| offset: 3 CreateTime: 1003 keySize: -1 valueSize: 2 sequence: 0 headerKeys: [] payload: t0"
    assert recs[4].startswith("| offset: 4 ") and recs[4].endswith("endTxnMarker: ABORT coordinatorEpoch: 3")
    assert recs[6].startswith("| offset: 6 ") and recs[6].endswith("endTxnMarker: COMMIT coordinatorEpoch: 3")
    r = dump("--files", segment + ".log", "--deep-iteration")
    recs = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    assert len(recs) == 7 and "payload" not in recs[0]


def test_indexes_and_txn_index(segment):
    r = dump("--files", segment + ".index")
    assert r.returncode == 0, r.stderr
    entries = [ln for ln in r.stdout.splitlines() if ln.startswith("offset: ")]
    # an entry for every batch once more than index.interval.bytes (1) were written since the last
    assert entries == [
        "offset: 2 position: 85",
        "offset: 3 position: 177",
        "offset: 4 position: 247",
        "offset: 5 position: 325",
        "offset: 6 position: 395",
    ]
    r = dump("--files", segment + ".index", "--verify-index-only")
    assert r.returncode == 0 and "all" in r.stdout and "match 00000000000000000000.log" in r.stdout
    assert "offset: " not in r.stdout
    r = dump("--files", segment + ".timeindex")
    assert r.returncode == 0 and r.stdout.splitlines()[1:3] == [
        "timestamp: 1002 offset: 2",
        "timestamp: 1003 offset: 3",
    ]
    assert dump("--files", segment + ".timeindex", "--verify-index-only").stdout.count("Mismatches") == 0
    r = dump("--files", segment + ".index", "--index-sanity-check")
    assert "passed sanity check." in r.stdout
    r = dump("--files", segment + ".txnindex")
    assert r.returncode == 0
    assert r.stdout.splitlines()[1:] == ["version: 0 producerId: 7 firstOffset: 3 lastOffset: 4 lastStableOffset: 5"]
    # a damaged index: an entry pointing into the middle of a batch
    with open(segment + ".index", "r+b") as f:
        f.seek(4)
        f.write((7).to_bytes(4, "big"))
    r = dump("--files", segment + ".index", "--verify-index-only")
    assert f"Mismatches in :{segment}.index" in r.stdout
    assert "  Index offset: 2, position: 7, no batch starts at this position" in r.stdout


def test_crc_check_after_damage(segment):
    path = segment + ".log"
    size = os.path.getsize(path)
    with open(path, "r+b") as f:  # flip a byte inside the first batch's records
        f.seek(70)
        b = f.read(1)
        f.seek(70)
        f.write(bytes([b[0] ^ 0xFF]))
    with open(path, "ab") as f:  # and a torn write at the end
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x09\x00\x00\x01")
    r = dump("--files", path)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "isvalid: false" in lines[2] and all("isvalid: true" in ln for ln in lines[3:8])
    assert "Found 11 invalid bytes at the end of 00000000000000000000.log" in lines
    assert "Found 1 batch(es) with an invalid CRC in 00000000000000000000.log" in lines
    assert os.path.getsize(path) == size + 11  # read only
