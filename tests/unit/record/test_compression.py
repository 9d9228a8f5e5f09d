"""pyklog.broker.record.compression: every codec's wire form, what other clients write, bad payloads."""

from __future__ import annotations

import gzip
import os
import struct
import zlib

import lz4.frame
import pytest
import snappy
import zstandard
from crc32c import crc32c

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.record.compression import (
    CODECS,
    XERIAL_MAGIC,
    codec_id,
    compress,
    decompress,
    xxh32,
)

PAYLOADS = [b"", b"x", os.urandom(1000), b"kafka " * 20000 + os.urandom(70000)]


def test_checksum_golden_vectors():
    # the standard check values of both CRCs over the ASCII digits
    assert crc32c(b"123456789") == 0xE3069283  # CRC-32C (Castagnoli): v2 batches
    assert zlib.crc32(b"123456789") == 0xCBF43926  # CRC32 (IEEE): v0/v1 messages
    # xxHash32 reference values (lz4 frame descriptor checksums)
    assert xxh32(b"") == 0x02CC5D05
    assert xxh32(b"a") == 0x550D7456
    assert xxh32(b"abcdefghijklmnopqrstuvwxyz") == 0x63A14D5F


def test_codec_ids():
    assert CODECS == {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
    assert codec_id("GZIP") == 1 and codec_id(3) == 3 and codec_id("4") == 4
    assert codec_id("uncompressed") == 0
    for bad in ("brotli", 7, -1, None, True):
        with pytest.raises(ValueError, match="expected a compression codec"):
            codec_id(bad)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
@pytest.mark.parametrize("size_index", range(len(PAYLOADS)))
def test_round_trip(codec, size_index):
    data = PAYLOADS[size_index]
    packed = compress(codec, data)
    assert decompress(codec, packed) == data
    assert decompress(codec, memoryview(packed)) == data


def test_gzip_is_a_gzip_member():
    data = PAYLOADS[3]
    packed = compress("gzip", data)
    assert packed[:2] == b"\x1f\x8b"  # gzip magic
    assert gzip.decompress(packed) == data
    # what Java's GZIPOutputStream / other clients write; concatenated members too
    other = gzip.compress(data, compresslevel=1)
    assert decompress("gzip", other) == data
    assert decompress("gzip", other + gzip.compress(b"tail")) == data + b"tail"


def test_snappy_writes_xerial_framing_in_32k_blocks():
    data = PAYLOADS[3]  # 190000 bytes -> 6 blocks
    packed = compress("snappy", data)
    magic, version, compatible = struct.unpack_from(">8sii", packed)
    assert (magic, version, compatible) == (b"\x82SNAPPY\x00", 1, 1) and magic == XERIAL_MAGIC
    pos, blocks, out = 16, 0, []
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        out.append(snappy.decompress(packed[pos + 4 : pos + 4 + n]))
        pos += 4 + n
        blocks += 1
    assert b"".join(out) == data
    assert blocks == -(-len(data) // 32768)
    assert all(len(b) == 32768 for b in out[:-1])


def test_snappy_reads_raw_blocks_and_kafka_python_xerial():
    from kafka.codec import snappy_encode

    data = PAYLOADS[3]
    assert decompress("snappy", snappy.compress(data)) == data  # raw (librdkafka)
    assert decompress("snappy", snappy_encode(data, xerial_compatible=True)) == data
    assert decompress("snappy", snappy_encode(data, xerial_compatible=False)) == data


def test_lz4_frame_as_kafka_writes_it():
    data = PAYLOADS[3]
    packed = compress("lz4", data)
    assert packed[:4] == b"\x04\x22\x4d\x18"  # lz4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 0b01  # version 1
    assert flg & 0x20  # independent blocks
    assert not flg & 0x08  # no content size
    assert not flg & 0x04  # no content checksum
    assert not flg & 0x10  # no block checksums
    assert (bd >> 4) & 0x7 == 4  # 64 KiB maximum block size
    # the descriptor checksum is the correct one: second byte of xxh32(FLG, BD)
    assert packed[6] == (xxh32(packed[4:6]) >> 8) & 0xFF
    assert lz4.frame.decompress(packed) == data
    # frames written by other encoders (content size, checksums, linked blocks)
    assert decompress("lz4", lz4.frame.compress(data, store_size=True, content_checksum=True)) == data


def test_lz4_legacy_broken_checksum():
    data = PAYLOADS[2]
    good = compress("lz4", data)
    bad = compress("lz4", data, legacy_lz4=True)
    assert bad[:6] == good[:6] and bad[7:] == good[7:]
    assert bad[6] == (xxh32(bad[0:6]) >> 8) & 0xFF  # hash over the magic too (KAFKA-3160)
    assert bad[6] != good[6]
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(bad)  # a strict decoder rejects it ...
    assert decompress("lz4", bad) == data  # ... we accept it, as Kafka does for magic 0


def test_zstd_frames_without_content_size_and_concatenated():
    data = PAYLOADS[3]
    packed = compress("zstd", data)
    assert packed[:4] == b"\x28\xb5\x2f\xfd"
    streamed = zstandard.ZstdCompressor(write_content_size=False).compress(data)
    assert decompress("zstd", streamed) == data
    assert decompress("zstd", packed + streamed) == data + data


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_damaged_payload_is_corrupt_record(codec):
    packed = compress(codec, PAYLOADS[3])
    for damaged in (packed[: len(packed) // 2], b"\x00" * 40):
        with pytest.raises(CorruptRecordError, match=codec):
            decompress(codec, damaged)
