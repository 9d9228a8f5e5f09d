"""``__transaction_state`` records: Kafka's ``TransactionLog`` (TransactionLogKey / TransactionLogValue).

Pure codecs, no I/O, thread-safe.  Layout (big-endian; strings int16 length + UTF-8; arrays int32
count, -1 = null), version 0 of Kafka's message schemas ``TransactionLogKey.json`` and
``TransactionLogValue.json``::

    key   v0: version int16 = 0, transactional_id string
    value v0: version int16 = 0,
              producer_id int64, producer_epoch int16, transaction_timeout_ms int32,
              transaction_status int8                      (TxnState id: Empty 0 .. PrepareEpochFence 7)
              transaction_partitions [topic string, partition_ids [int32]] | null (null for Empty)
              transaction_last_update_timestamp_ms int64,
              transaction_start_timestamp_ms int64

A null value is a tombstone: the transactional id expired (Kafka's Dead state) and compaction
removes it.  Value version 1 (flexible, KIP-890 tagged fields) is not written by pyklog; reading it
raises ``ValueError`` like any other unknown version, and the loader skips such a record with a warning.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from pyklog.broker.zk.topics import TRANSACTION_STATE_TOPIC

__all__ = ["TRANSACTION_STATE_TOPIC", "TxnLogValue", "decode_key", "decode_value", "encode_key", "encode_value"]
KEY_VERSION = 0
VALUE_VERSION = 0

_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_VALUE_HEAD = struct.Struct(">hqhib")  # version, producer_id, producer_epoch, timeout_ms, status


class TxnLogValue(NamedTuple):
    """One ``TransactionLogValue`` (v0).  ``partitions`` is a sorted tuple of ``(topic, partition)``;
    ``partitions_null`` says whether the field was written as null (Kafka writes null for Empty)."""

    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    state: int
    partitions: tuple
    last_update_timestamp_ms: int
    start_timestamp_ms: int


def _str(s: str) -> bytes:
    b = s.encode("utf-8")
    if len(b) > 0x7FFF:
        raise ValueError(f"string of {len(b)} bytes does not fit an int16 length: {s[:40]!r}...")
    return _I16.pack(len(b)) + b


def _read_str(buf, pos: int, what: str) -> tuple[str, int]:
    if pos + 2 > len(buf):
        raise ValueError(f"{what}: expected an int16 length at byte {pos}, the record has {len(buf)} bytes")
    (n,) = _I16.unpack_from(buf, pos)
    pos += 2
    if n < 0:
        raise ValueError(f"{what}: expected a string, read a null (length {n}) at byte {pos - 2}")
    if pos + n > len(buf):
        raise ValueError(f"{what}: string of {n} bytes at byte {pos} runs past the {len(buf)}-byte record")
    return bytes(buf[pos : pos + n]).decode("utf-8"), pos + n


def encode_key(transactional_id: str) -> bytes:
    """``TransactionLogKey`` v0 of ``transactional_id``."""
    return _I16.pack(KEY_VERSION) + _str(transactional_id)


def decode_key(buf) -> str:
    """The transactional id of a ``TransactionLogKey``; ValueError naming what was read otherwise."""
    if buf is None or len(buf) < 2:
        raise ValueError(f"transaction log key: expected at least a 2-byte version, read {buf!r}")
    (version,) = _I16.unpack_from(buf, 0)
    if version != KEY_VERSION:
        raise ValueError(f"transaction log key: expected version 0, read {version}")
    tid, pos = _read_str(buf, 2, "transaction log key transactional_id")
    if pos != len(buf):
        raise ValueError(f"transaction log key: {len(buf) - pos} trailing bytes after the transactional id")
    return tid


def encode_value(value: TxnLogValue, *, null_partitions: bool = False) -> bytes:
    """``TransactionLogValue`` v0.  ``null_partitions`` writes the partition array as null (Empty)."""
    out = [
        _VALUE_HEAD.pack(
            VALUE_VERSION, value.producer_id, value.producer_epoch, value.transaction_timeout_ms, value.state
        )
    ]
    if null_partitions:
        out.append(_I32.pack(-1))
    else:
        by_topic: dict[str, list[int]] = {}
        for topic, p in sorted(value.partitions):
            by_topic.setdefault(topic, []).append(p)
        out.append(_I32.pack(len(by_topic)))
        for topic, parts in by_topic.items():
            out.append(_str(topic))
            out.append(_I32.pack(len(parts)))
            out.append(b"".join(_I32.pack(p) for p in parts))
    out.append(_I64.pack(value.last_update_timestamp_ms))
    out.append(_I64.pack(value.start_timestamp_ms))
    return b"".join(out)


def decode_value(buf) -> TxnLogValue:
    """Decode a ``TransactionLogValue`` v0 (a null partition array reads as no partitions)."""
    if buf is None:
        raise ValueError("transaction log value: a tombstone has no value to decode")
    n = len(buf)
    if n < _VALUE_HEAD.size:
        raise ValueError(f"transaction log value: expected at least {_VALUE_HEAD.size} bytes, read {n}")
    version, pid, epoch, timeout, status = _VALUE_HEAD.unpack_from(buf, 0)
    if version != VALUE_VERSION:
        raise ValueError(f"transaction log value: expected version 0, read {version}")
    pos = _VALUE_HEAD.size
    if pos + 4 > n:
        raise ValueError(f"transaction log value: expected the partition array count at byte {pos}, record has {n}")
    (count,) = _I32.unpack_from(buf, pos)
    pos += 4
    partitions = []
    if count > 0:
        if count > (n - pos) // 6:
            raise ValueError(f"transaction log value: {count} topics cannot fit in the {n - pos} bytes left")
        for i in range(count):
            topic, pos = _read_str(buf, pos, f"transaction log value partitions[{i}].topic")
            if pos + 4 > n:
                raise ValueError(f"transaction log value partitions[{i}]: expected a partition count at byte {pos}")
            (k,) = _I32.unpack_from(buf, pos)
            pos += 4
            if k < 0 or pos + 4 * k > n:
                raise ValueError(
                    f"transaction log value partitions[{i}]: {k} partition ids at byte {pos} "
                    f"do not fit the {n}-byte record"
                )
            partitions.extend((topic, p) for p in struct.unpack_from(f">{k}i", buf, pos))
            pos += 4 * k
    elif count < -1:
        raise ValueError(f"transaction log value: expected a partition count >= -1, read {count}")
    if pos + 16 != n:
        raise ValueError(
            f"transaction log value: expected two int64 timestamps at byte {pos} ending the record, "
            f"the record has {n} bytes"
        )
    (last_update,) = _I64.unpack_from(buf, pos)
    (start,) = _I64.unpack_from(buf, pos + 8)
    if not 0 <= status <= 7:
        raise ValueError(f"transaction log value: unknown transaction status {status}")
    return TxnLogValue(pid, epoch, timeout, status, tuple(sorted(partitions)), last_update, start)
