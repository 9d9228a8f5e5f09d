"""Avro records decoded column-wise in bulk (``avro_bulk``) give exactly what the per-record decoder
(fastavro, one call per record) gives: the same values, the same nulls, the same errors for the same
bad records, on well-formed, random and damaged records, plain and in Confluent's wire format."""

from __future__ import annotations

import io
import json
import random
import re
import struct

import pyarrow as pa
import pytest
from fastavro import parse_schema, schemaless_writer

from pyklog.connector.spark import typed
from pyklog.connector.spark.avro_bulk import bulk_decode, supported
from pyklog.connector.spark.options import parse_source_options
from pyklog.connector.spark.typed import RecordDecodeError, convert_batch

SCHEMA = {
    "type": "record",
    "name": "Reading",
    "namespace": "bench",
    "fields": [
        {"name": "sensor", "type": "string"},
        {"name": "site", "type": "int"},
        {"name": "count", "type": "long"},
        {"name": "celsius", "type": "double"},
        {"name": "ratio", "type": "float"},
        {"name": "ok", "type": "boolean"},
        {"name": "blob", "type": "bytes"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "level", "type": [{"type": "enum", "name": "Level", "symbols": ["LOW", "MID", "HIGH"]}, "null"]},
        {"name": "digest", "type": {"type": "fixed", "name": "Digest", "size": 4}},
        {
            "name": "where",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Place",
                    "fields": [{"name": "lat", "type": "double"}, {"name": "name", "type": ["null", "string"]}],
                },
            ],
        },
        {"name": "alt_level", "type": "Level"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": ["null", "double"]}},
        {
            "name": "history",
            "type": {
                "type": "array",
                "items": {"type": "record", "name": "Step", "fields": [{"name": "v", "type": "long"}]},
            },
        },
    ],
}


def _record(rnd: random.Random, i: int) -> dict:
    return {
        "sensor": rnd.choice(["s", "sensor-é", "", "x" * rnd.randint(0, 300)]),
        "site": rnd.choice([0, -1, 1, 2**31 - 1, -(2**31), rnd.randint(-1000, 1000)]),
        "count": rnd.choice([0, 2**63 - 1, -(2**63), rnd.randint(-(10**12), 10**12)]),
        "celsius": rnd.uniform(-50, 50),
        "ratio": rnd.choice([0.5, -2.25, 1e10]),
        "ok": rnd.random() < 0.5,
        "blob": bytes(rnd.randrange(256) for _ in range(rnd.randint(0, 5))),
        "at": 1_700_000_000_000 + i,
        "day": 20_000 + i % 50,
        "note": rnd.choice([None, "checked", ""]),
        "level": rnd.choice([None, "LOW", "HIGH"]),
        "digest": bytes([i % 256, 1, 2, 3]),
        "where": rnd.choice([None, {"lat": 1.5, "name": None}, {"lat": -3.0, "name": f"p{i}"}]),
        "alt_level": "MID",
        "tags": [f"t{j}" for j in range(rnd.choice([0, 1, 3, 70]))],  # 70: more than a round's bound
        "attrs": {f"k{j}": rnd.choice([None, j * 0.5]) for j in range(rnd.choice([0, 2]))},
        "history": [{"v": i * j} for j in range(rnd.choice([0, 2]))],
    }


def _encode(rec, schema=SCHEMA) -> bytes:
    buf = io.BytesIO()
    schemaless_writer(buf, parse_schema(schema), rec)
    return buf.getvalue()


def _batch(values: list, binary: pa.DataType | None = None) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_pydict(
        {
            "key": pa.array([None] * n, pa.binary()),
            "value": pa.array(values, binary or pa.binary()),
            "topic": pa.array(["t"] * n),
            "partition": pa.array([0] * n, pa.int32()),
            "offset": pa.array(range(100, 100 + n), pa.int64()),
        }
    )


def _formats(mode="FAILFAST"):
    opts = parse_source_options(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "t",
            "valueFormat": "avro",
            "valueSchema": json.dumps(SCHEMA),
            "mode": mode,
        },
        streaming=False,
    )
    return opts.formats


def _both(batch, formats, monkeypatch):
    """convert_batch in bulk, and record by record (the bulk path switched off), as Python values."""
    bulk = convert_batch(batch, formats)
    with monkeypatch.context() as m:
        m.setattr(typed, "_bulk_decode", lambda *a: None)
        reference = convert_batch(batch, formats)
    return bulk, reference


def _plain(t: pa.DataType) -> pa.DataType:
    """``t`` with timestamps and dates as their numbers (damaged records can hold any)."""
    if pa.types.is_timestamp(t):
        return pa.int64()
    if pa.types.is_date32(t):
        return pa.int32()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_plain(f.type)) for f in t])
    return t


def _rows(batch: pa.RecordBatch) -> list:
    """The batch as Python rows, error messages without object addresses (fastavro names its stream)."""
    i = batch.schema.get_field_index("value")
    batch = batch.set_column(i, "value", batch.column(i).cast(_plain(batch.column(i).type)))
    rows = batch.to_pylist()
    for r in rows:
        if r.get("valueError"):
            r["valueError"] = re.sub(r" at 0x[0-9a-f]+", "", r["valueError"])
    return rows


def _rows_text(error) -> str:
    return re.sub(r" at 0x[0-9a-f]+", "", str(error.value))


def _damage(rnd: random.Random, value: bytes) -> bytes:
    kind = rnd.randrange(4)
    if kind == 0 and value:
        return value[: rnd.randrange(len(value))]  # truncated
    if kind == 1:
        return value + bytes([rnd.randrange(256)])  # a byte left over
    b = bytearray(value)
    for _ in range(rnd.randint(1, 3)):  # bytes changed
        if b:
            b[rnd.randrange(len(b))] = rnd.randrange(256)
    return bytes(b)


def test_the_schemas_it_walks():
    assert supported(typed._parsed_schema(json.dumps(SCHEMA)))
    for other in (
        {"type": "array", "items": ["int", "string"]},
        {"type": "map", "values": {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}},
        ["null", "int", "string"],
        {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1},
    ):
        assert not supported(parse_schema(other))


def test_good_records_decode_as_the_per_record_decoder_decodes_them(monkeypatch):
    rnd = random.Random(7)
    values = [_encode(_record(rnd, i)) for i in range(300)]
    values[5] = None  # a tombstone
    redone: list = []
    per_record = typed._decode_values
    monkeypatch.setattr(typed, "_decode_values", lambda fmt, vals: redone.extend(vals) or per_record(fmt, vals))
    bulk = convert_batch(_batch(values), _formats())
    long_lists = [v for v in values if v is not None and b"t69" in v]
    assert sorted(redone) == sorted(long_lists)  # only records with lists longer than a round's bound
    bulk, reference = _both(_batch(values), _formats(), monkeypatch)
    assert bulk.schema == reference.schema
    assert bulk.to_pylist() == reference.to_pylist()
    # and with the column sliced out of a larger buffer, and as large_binary
    sliced = _batch(values).slice(17, 100)
    bulk, reference = _both(sliced, _formats(), monkeypatch)
    assert bulk.to_pylist() == reference.to_pylist()
    bulk, reference = _both(_batch(values, pa.large_binary()), _formats(), monkeypatch)
    assert bulk.column("value").to_pylist() == reference.column("value").to_pylist()


def test_damaged_records_get_the_per_record_decoders_values_and_errors(monkeypatch):
    rnd = random.Random(11)
    good = [_encode(_record(rnd, i)) for i in range(400)]
    values = [_damage(rnd, v) if i % 3 == 0 else v for i, v in enumerate(good)]
    values += [b"", b"\xff" * 12, None, good[1] + good[2]]
    redone: list = []
    per_record = typed._decode_values
    monkeypatch.setattr(typed, "_decode_values", lambda fmt, vals: redone.extend(vals) or per_record(fmt, vals))
    bulk, reference = _both(_batch(values), _formats("PERMISSIVE"), monkeypatch)
    assert _rows(bulk) == _rows(reference)
    redone_by_bulk = len(redone) - len(values)  # the reference decodes every record
    assert redone_by_bulk < 134 + 4 + 110  # the damaged records, the 4 others, the records with 70 tags
    assert redone_by_bulk > 100
    errors = bulk.column("valueError").to_pylist()
    assert sum(e is not None for e in errors) > 100  # most damage is caught
    assert errors[-4] is not None and errors[-2] is None and errors[-1] is not None
    # FAILFAST names the first bad record as the per-record decoder does
    with pytest.raises(RecordDecodeError) as bulk_error:
        convert_batch(_batch(values), _formats())
    with monkeypatch.context() as m:
        m.setattr(typed, "_bulk_decode", lambda *a: None)
        with pytest.raises(RecordDecodeError) as reference_error:
            convert_batch(_batch(values), _formats())
    assert _rows_text(bulk_error) == _rows_text(reference_error)
    assert "t-0 at offset 100" in str(bulk_error.value)


def test_confluent_records_group_by_writer_schema_and_only_the_others_go_record_by_record():
    rnd = random.Random(3)
    reader = typed._parsed_schema(json.dumps(SCHEMA))
    older = {**SCHEMA, "fields": [f for f in SCHEMA["fields"] if f["name"] != "note"]}
    writers = {1: reader, 2: typed._parsed_schema(json.dumps(older))}

    def writer_schema(schema_id):
        if schema_id not in writers:
            raise ValueError(f"schema id {schema_id} is not known")
        return writers[schema_id]

    recs = [{**r, "tags": r["tags"][:3]} for r in (_record(rnd, i) for i in range(200))]  # no long lists
    values = []
    for i, r in enumerate(recs):
        if i % 10 == 3:
            values.append(b"\x00" + struct.pack(">I", 2) + _encode(r, older))
        elif i % 10 == 4:
            values.append(b"\x00" + struct.pack(">I", 9) + _encode(r))
        elif i == 5:
            values.append(b"\x01" + struct.pack(">I", 1) + _encode(r))
        else:
            values.append(b"\x00" + struct.pack(">I", 1) + _encode(r))
    seen: list = []

    def per_record(vals):
        seen.extend(vals)
        fmt = typed.ColumnFormat("value", "avro-confluent", json.dumps(SCHEMA), True, "http://unused")
        with pytest.MonkeyPatch.context() as m:
            m.setattr(typed, "_writer_schema", lambda url, sid: writer_schema(sid))
            return typed._decode_values(fmt, vals)

    plan_type = typed._types(reader, {})[0]
    arr, errors = bulk_decode(
        reader, pa.array(values, pa.binary()), plan_type, per_record, confluent=True, writer_schema=writer_schema
    )
    assert len(seen) == 20 + 20 + 1  # the older writer's, the unknown id's, the bad magic byte
    got = arr.to_pylist()
    for i, r in enumerate(recs):
        if i % 10 == 4:
            assert got[i] is None and "not known" in errors[i]
        elif i == 5:
            assert got[i] is None and "wire format" in errors[i]
        else:
            assert errors[i] is None
            assert got[i]["sensor"] == r["sensor"] and got[i]["where"] == r["where"]
            assert got[i]["note"] == (None if i % 10 == 3 else r["note"])
