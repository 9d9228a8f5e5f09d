"""Kafka's record formats as pure codecs (bytes in, objects out, no I/O).

* ``header``: the 61-byte v2 batch header (CRC-32C check, in-place offset rewrite).
* ``varint``: protobuf varints / zigzag.
* ``compression``: gzip, snappy (xerial framing + raw), lz4 (Kafka's frame), zstd.
* ``batch``: record batch v2 with records and headers, control batches.
* ``legacy``: magic 0/1 message sets and wrappers.
* ``reader``: walk a buffer of concatenated batches / messages (uses ``legacy``).
* ``convert``: v0/v1 <-> v2 conversions for old Produce / Fetch versions (uses ``legacy`` and
  ``reader``).

Every wire format is documented at the top of its module.  All functions are thread-safe.
"""

from pyklog.broker.record.batch import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    Record,
    RecordBatch,
    build_batch,
    build_batch_from_records,
    build_control_batch,
    decode_batch,
    decode_control_record,
)
from pyklog.broker.record.compression import CODECS, codec_id, compress, decompress
from pyklog.broker.record.convert import batches_to_message_set, message_set_to_batches
from pyklog.broker.record.header import BatchHeader, parse_header
from pyklog.broker.record.legacy import LegacyMessage, build_message_set, decode_message_set
from pyklog.broker.record.reader import iter_batches, iter_headers
from pyklog.broker.record.varint import decode_varint, encode_varint, size_of_varint

__all__ = [
    "BatchHeader",
    "CODECS",
    "CONTROL_ABORT",
    "CONTROL_COMMIT",
    "LegacyMessage",
    "Record",
    "RecordBatch",
    "batches_to_message_set",
    "build_batch",
    "build_batch_from_records",
    "build_control_batch",
    "build_message_set",
    "codec_id",
    "compress",
    "decode_batch",
    "decode_control_record",
    "decode_message_set",
    "decode_varint",
    "decompress",
    "encode_varint",
    "iter_batches",
    "iter_headers",
    "message_set_to_batches",
    "parse_header",
    "size_of_varint",
]
