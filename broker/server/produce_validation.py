"""What a Produce partition's records must be before the leader appends them (Kafka's checks in
``ReplicaManager.appendToLocalLog`` and ``LogValidator`` that need no log): record batches v2, or
v0-2 message sets up-converted to them for Produce v0-2, and a producer id on every transactional
batch.  Pure functions over the request's bytes; the log's validator checks the rest (CRCs,
sequences, per-record rules).  Thread-safe.
"""

from __future__ import annotations

from collections.abc import Iterator

from pyklog.broker.errors import InvalidRecordError, PyklogError
from pyklog.broker.record.header import BatchHeader
from pyklog.broker.record.reader import iter_headers

#: where a record batch (or message set entry) holds its magic byte
MAGIC_OFFSET = 16


def batch_headers(records) -> Iterator[BatchHeader]:
    """``BatchHeader`` of each complete v2 batch of a Produce partition's records; stops quietly
    at anything malformed (the log's validator reports it)."""
    if not records or len(records) <= MAGIC_OFFSET:
        return
    try:
        for _, h in iter_headers(records, validate_crc=False):
            yield h
    except PyklogError:
        return


def has_transactional_batch(records) -> bool:
    """True if any complete batch of ``records`` has the transactional bit."""
    return any(h.is_transactional for h in batch_headers(records))


def check_transactional_producer_id(records, topic: str, partition: int) -> None:
    """A transactional batch must carry a producer id (it belongs to that producer's transaction)."""
    for h in batch_headers(records):
        if h.is_transactional and h.producer_id < 0:
            raise InvalidRecordError(
                f"produce to {topic}-{partition}: a transactional record batch needs "
                f"a producer id, read {h.producer_id}"
            )


def records_to_append(topic: str, partition: int, records, version: int):
    """The record batches v2 to append for one Produce v``version`` partition: v0-2 message sets
    up-converted, v3+ required to be magic 2 with a producer id on transactional batches;
    InvalidRecordError otherwise (no records, no complete message, another magic)."""
    if records is None or len(records) == 0:
        raise InvalidRecordError(f"produce to {topic}-{partition} carries no records")
    if version < 3:
        from pyklog.broker.record.convert import message_set_to_batches

        data = message_set_to_batches(records)
        if not data:
            raise InvalidRecordError(f"produce v{version} to {topic}-{partition}: no complete message")
        return data
    if len(records) <= MAGIC_OFFSET or records[MAGIC_OFFSET] != 2:
        magic = records[MAGIC_OFFSET] if len(records) > MAGIC_OFFSET else None
        raise InvalidRecordError(f"Produce v{version} requires record batches with magic 2, read magic {magic}")
    check_transactional_producer_id(records, topic, partition)
    return records
