"""``pyklog-dump-log``: print the contents of log segments and indexes, offline (Kafka's
kafka-dump-log.sh, DumpLogSegments).

    pyklog-dump-log --files 00000000000000000000.log[,...] [--deep-iteration] [--print-data-log]
                    [--verify-index-only] [--index-sanity-check] [--max-bytes N]

Reads the files with pyklog's record and log codecs; needs no broker (run it on a copy, or on a
stopped broker's directory).  For a ``.log``: one line per record batch (transactional and control
batches included) with its CRC-32C check (``isvalid``), and with ``--deep-iteration`` or
``--print-data-log`` one ``| offset: ...`` line per record (``--print-data-log`` adds key and
payload; control records show ``endTxnMarker``).  Bytes after the last whole, valid batch are
reported as ``Found N invalid bytes at the end of FILE`` (what an operator checks after a crash).
For ``.index`` / ``.timeindex``: the entries, checked against the .log of the same base offset
(``--verify-index-only`` prints only the mismatches).  For ``.txnindex``: the aborted transactions.
For a producer state ``.snapshot``: one line per producer id (producerId, producerEpoch,
coordinatorEpoch, currentTxnFirstOffset, lastTimestamp, and its last batch's firstSequence,
lastSequence, lastOffset, offsetDelta, timestamp).  For a ``leader-epoch-checkpoint``: its entries.

Exit code 0 once the files were read (as Kafka's tool; a damaged batch is reported in the output),
1 on a usage error or a file that cannot be read.

Example::

    pyklog-dump-log --files /var/lib/pyklog/orders-0/00000000000000000000.log --deep-iteration
"""

from __future__ import annotations

import argparse
import os
import sys

from pyklog.broker.common.cli import reports_errors, require, tool_parser
from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.log.index import OFFSET_ENTRY, TIME_ENTRY
from pyklog.broker.log.txn_index import decode_entries
from pyklog.broker.record.batch import decode_batch, decode_control_record
from pyklog.broker.record.compression import codec_name
from pyklog.broker.record.header import HEADER_SIZE, LOG_OVERHEAD, compute_crc, parse_header, peek_size_and_magic


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(
        "pyklog-dump-log",
        "Dump log segments (.log), indexes (.index, .timeindex), transaction indexes (.txnindex), "
        "producer snapshots (.snapshot) and leader-epoch-checkpoint files, offline.",
        "example:\n  pyklog-dump-log --files /data/orders-0/00000000000000000000.log --deep-iteration --print-data-log",
    )
    p.add_argument("--files", required=False, metavar="FILE[,FILE...]", help="REQUIRED: the files to dump")
    p.add_argument("--deep-iteration", action="store_true", help="print every record, not only the batches")
    p.add_argument("--print-data-log", action="store_true", help="print keys and payloads (implies deep iteration)")
    p.add_argument("--verify-index-only", action="store_true", help="only check the indexes against the log")
    p.add_argument("--index-sanity-check", action="store_true", help="only check that the indexes are well formed")
    p.add_argument("--max-bytes", type=int, default=2**31 - 1, help="read at most this many bytes of a .log")
    p.add_argument("--max-message-size", type=int, default=5 * 1024 * 1024, help="accepted for compatibility")
    return p


def _text(b) -> str:
    return "null" if b is None else bytes(b).decode("utf-8", errors="replace")


def scan_log(buf, max_bytes: int):
    """Yield ``(position, header, valid, batch|None)`` for each whole batch; stops at the first
    batch that cannot be framed; the caller reports the bytes left."""
    pos = 0
    end = min(len(buf), max_bytes)
    while pos + LOG_OVERHEAD <= end:
        peek = peek_size_and_magic(buf, pos)
        if peek is None:
            return
        _, size, magic = peek
        if size < HEADER_SIZE or pos + size > len(buf) or magic != 2:
            return
        h = parse_header(buf, pos)
        valid = compute_crc(buf, pos, h.size) == h.crc
        batch = None
        try:
            batch = decode_batch(buf, pos, validate_crc=False)
        except CorruptRecordError:
            valid = False
        yield pos, h, valid, batch
        pos += h.size


def dump_log(path: str, a, out) -> None:
    with open(path, "rb") as f:
        buf = f.read()
    deep = a.deep_iteration or a.print_data_log
    base = int(os.path.basename(path).split(".")[0]) if os.path.basename(path).split(".")[0].isdigit() else 0
    out(f"Log starting offset: {base}")
    end = 0
    invalid = 0
    for pos, h, valid, batch in scan_log(buf, a.max_bytes):
        end = pos + h.size
        invalid += not valid
        ts_name = "LogAppendTime" if h.timestamp_type else "CreateTime"
        out(
            f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
            f"baseSequence: {h.base_sequence} lastSequence: {h.last_sequence} producerId: {h.producer_id} "
            f"producerEpoch: {h.producer_epoch} partitionLeaderEpoch: {h.partition_leader_epoch} "
            f"isTransactional: {str(h.is_transactional).lower()} isControl: {str(h.is_control).lower()} "
            f"deleteHorizonMs: OptionalLong.empty position: {pos} {ts_name}: {h.max_timestamp} size: {h.size} "
            f"magic: {h.magic} compresscodec: {codec_name(h.compression)} crc: {h.crc} "
            f"isvalid: {str(valid).lower()}"
        )
        if not deep or batch is None:
            continue
        for r in batch.records:
            seq = h.base_sequence + (r.offset - h.base_offset) if h.base_sequence >= 0 else -1
            line = (
                f"| offset: {r.offset} {ts_name}: {r.timestamp} keySize: {-1 if r.key is None else len(r.key)} "
                f"valueSize: {-1 if r.value is None else len(r.value)} sequence: {seq} "
                f"headerKeys: [{','.join(k for k, _ in r.headers)}]"
            )
            if h.is_control:
                try:
                    ctype, epoch = decode_control_record(r)
                    line += f" endTxnMarker: {'COMMIT' if ctype == 1 else 'ABORT'} coordinatorEpoch: {epoch}"
                except CorruptRecordError as e:
                    line += f" unreadable control record: {e}"
            elif a.print_data_log:
                if r.key is not None:
                    line += f" key: {_text(r.key)}"
                line += f" payload: {_text(r.value)}"
            out(line)
    limit = min(len(buf), a.max_bytes)
    if end < limit:
        out(f"Found {limit - end} invalid bytes at the end of {os.path.basename(path)}")
    if invalid:
        out(f"Found {invalid} batch(es) with an invalid CRC in {os.path.basename(path)}")


def _log_batches(index_path: str):
    """``[(position, last_offset, max_timestamp)]`` of the .log next to an index, or None."""
    log_path = index_path.rsplit(".", 1)[0] + ".log"
    if not os.path.exists(log_path):
        return None, log_path
    with open(log_path, "rb") as f:
        buf = f.read()
    return [(pos, h.last_offset, h.max_timestamp) for pos, h, _, _ in scan_log(buf, len(buf))], log_path


def _index_entries(path: str, entry, out) -> tuple[int, list[tuple]]:
    """The base offset (from the file name) and the whole ``entry``-sized entries of an index file;
    a partial entry at the end is reported as corruption and left out."""
    base = int(os.path.basename(path).split(".")[0])
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) % entry.size:
        out(f"{os.path.basename(path)}: {len(raw)} bytes is not a multiple of {entry.size}: index is corrupt")
    return base, list(entry.iter_unpack(raw[: len(raw) - len(raw) % entry.size]))


def dump_offset_index(path: str, a, out) -> None:
    base, raw_entries = _index_entries(path, OFFSET_ENTRY, out)
    entries = [(base + rel, position) for rel, position in raw_entries]
    if a.index_sanity_check:
        bad = [
            i
            for i in range(1, len(entries))
            if entries[i][0] <= entries[i - 1][0] or entries[i][1] <= entries[i - 1][1]
        ]
        out(f"{path} passed sanity check." if not bad else f"{path}: entries {bad} are not increasing")
        return
    batches, log_path = _log_batches(path)
    by_pos = {pos: last for pos, last, _ in batches} if batches is not None else {}
    mismatches = []
    for off, position in entries:
        if batches is not None:
            last = by_pos.get(position)
            if last is None:
                mismatches.append((off, position, "no batch starts at this position"))
            elif last != off:
                mismatches.append((off, position, f"log offset: {last}"))
        if not a.verify_index_only:
            out(f"offset: {off} position: {position}")
    if batches is None:
        out(f"no {os.path.basename(log_path)} next to the index: entries not verified")
    elif mismatches:
        out(f"Mismatches in :{path}")
        for off, position, what in mismatches:
            out(f"  Index offset: {off}, position: {position}, {what}")
    elif a.verify_index_only:
        out(f"{path}: all {len(entries)} entries match {os.path.basename(log_path)}")


def dump_time_index(path: str, a, out) -> None:
    base, raw_entries = _index_entries(path, TIME_ENTRY, out)
    entries = [(ts, base + rel) for ts, rel in raw_entries]
    if a.index_sanity_check:
        bad = [
            i for i in range(1, len(entries)) if entries[i][0] < entries[i - 1][0] or entries[i][1] < entries[i - 1][1]
        ]
        out(f"{path} passed sanity check." if not bad else f"{path}: entries {bad} are not increasing")
        return
    batches, log_path = _log_batches(path)
    by_last = {last: ts for _, last, ts in batches} if batches is not None else {}
    max_upto: dict = {}
    running = -1
    for _, last, ts in batches or []:
        running = max(running, ts)
        max_upto[last] = running
    mismatches = []
    for ts, off in entries:
        if batches is not None:
            if off not in by_last:
                mismatches.append(f"  Index timestamp: {ts}, offset: {off}: no batch ends at this offset")
            elif max_upto[off] != ts:
                mismatches.append(f"  Index timestamp: {ts}, log timestamp: {max_upto[off]}")
        if not a.verify_index_only:
            out(f"timestamp: {ts} offset: {off}")
    if batches is None:
        out(f"no {os.path.basename(log_path)} next to the index: entries not verified")
    elif mismatches:
        out(f"Mismatches in :{path}")
        for m in mismatches:
            out(m)
    elif a.verify_index_only:
        out(f"{path}: all {len(entries)} entries match {os.path.basename(log_path)}")


def dump_txn_index(path: str, a, out) -> None:
    with open(path, "rb") as f:
        raw = f.read()
    for e in decode_entries(raw, path):
        out(
            f"version: 0 producerId: {e.producer_id} firstOffset: {e.first_offset} lastOffset: {e.last_offset} "
            f"lastStableOffset: {e.last_stable_offset}"
        )


def dump_producer_snapshot(path: str, a, out) -> None:
    """A producer state ``.snapshot`` (Kafka's DumpLogSegments.dumpProducerIdSnapshot): one line per
    producer id; the batch fields are those of its last batch (the snapshot keeps one)."""
    from pyklog.broker.log.producer_state import read_snapshot

    with open(path, "rb") as f:
        raw = f.read()
    for e in read_snapshot(raw, path):
        txn = "OptionalLong.empty" if e.current_txn_first_offset < 0 else f"OptionalLong[{e.current_txn_first_offset}]"
        line = (
            f"producerId: {e.producer_id} producerEpoch: {e.epoch} coordinatorEpoch: {e.coordinator_epoch} "
            f"currentTxnFirstOffset: {txn} lastTimestamp: {e.timestamp} "
        )
        if e.batches:
            b = e.batches[0]
            line += (
                f"firstSequence: {b.first_seq} lastSequence: {b.last_seq} lastOffset: {b.last_offset} "
                f"offsetDelta: {b.last_offset - b.first_offset} timestamp: {b.timestamp}"
            )
        out(line)


def dump_leader_epoch_checkpoint(path: str, a, out) -> None:
    """A ``leader-epoch-checkpoint`` (Kafka's LeaderEpochCheckpointFile: a version line ``0``, a count
    line, then ``epoch startOffset`` lines): ``version: 0`` then one ``epoch: E startOffset: O`` line per
    entry.  ValueError for a malformed file (a count that does not match, a bad line)."""
    with open(path, encoding="utf-8") as f:
        lines = [ln.strip() for ln in f.read().splitlines()]
    if len(lines) < 2 or lines[0] != "0" or not lines[1].isdigit():
        raise ValueError(f"expected a version line '0' and a count line, read {lines[:2]!r}")
    entries = [ln for ln in lines[2:] if ln]
    if len(entries) != int(lines[1]):
        raise ValueError(f"the count line says {lines[1]} entries, the file has {len(entries)}")
    out("version: 0")
    for ln in entries:
        parts = ln.split()
        if len(parts) != 2 or not all(p.lstrip("-").isdigit() for p in parts):
            raise ValueError(f"expected 'epoch startOffset', read {ln!r}")
        out(f"epoch: {int(parts[0])} startOffset: {int(parts[1])}")


DUMPERS = {
    ".log": dump_log,
    ".index": dump_offset_index,
    ".timeindex": dump_time_index,
    ".txnindex": dump_txn_index,
    ".snapshot": dump_producer_snapshot,
}
#: files recognised by their whole name
NAMED_DUMPERS = {"leader-epoch-checkpoint": dump_leader_epoch_checkpoint}


@reports_errors()
def main(argv=None) -> int:
    a = build_parser().parse_args(argv)
    require(a, "files")
    rc = 0
    for path in [p for p in a.files.split(",") if p]:
        ext = os.path.splitext(path)[1]
        dumper = NAMED_DUMPERS.get(os.path.basename(path)) or DUMPERS.get(ext)
        print(f"Dumping {path}")
        if dumper is None:
            print(f"Ignoring unknown file {path}", file=sys.stderr)
            continue
        try:
            dumper(path, a, print)
        except (OSError, CorruptRecordError, ValueError) as e:
            print(f"Error: {path}: {e}", file=sys.stderr)
            rc = 1
    return rc


if __name__ == "__main__":
    sys.exit(main())
