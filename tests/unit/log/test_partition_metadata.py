"""partition.metadata (KIP-516): Kafka's file format, and the log manager deleting a log left by an
earlier topic of the same name instead of serving it."""

from __future__ import annotations

import os
import uuid

import pytest

from pyklog.broker.errors import CorruptRecordError
from pyklog.broker.log import LogConfig, LogManager
from pyklog.broker.log.partition_metadata import (
    FILE_NAME,
    parse_topic_id,
    read_topic_id,
    topic_id_text,
    write_topic_id,
)
from pyklog.broker.record.batch import build_batch


def test_format_is_kafkas(tmp_path):
    tid = uuid.UUID("7b3c4e59-1d2a-4f6b-9c0d-0123456789ab")
    write_topic_id(str(tmp_path), tid)
    text = (tmp_path / FILE_NAME).read_text()
    assert text == f"version: 0\ntopic_id: {topic_id_text(tid)}\n"
    assert len(topic_id_text(tid)) == 22 and "=" not in topic_id_text(tid)  # Kafka's Uuid.toString
    assert read_topic_id(str(tmp_path)) == tid and parse_topic_id(topic_id_text(tid)) == tid
    assert read_topic_id(str(tmp_path / "missing")) is None


def test_a_damaged_file_is_reported(tmp_path):
    (tmp_path / FILE_NAME).write_text("version: 7\ntopic_id: x\n")
    with pytest.raises(CorruptRecordError, match="partition.metadata"):
        read_topic_id(str(tmp_path))


def test_a_log_of_an_earlier_topic_with_the_same_name_is_deleted(tmp_path):
    logs = LogManager([str(tmp_path)], LogConfig(), background=False)
    try:
        old_id, new_id = uuid.uuid4(), uuid.uuid4()
        lg = logs.get_or_create_log("t", 0, topic_id=old_id)
        lg.append(build_batch([(b"k", b"from the deleted topic", 1, ())]), leader_epoch=0)
        assert logs.get_or_create_log("t", 0, topic_id=old_id) is lg  # same topic: kept
        fresh = logs.get_or_create_log("t", 0, topic_id=new_id)
        assert fresh is not lg and fresh.log_end_offset == 0, "the new topic starts empty"
        assert read_topic_id(fresh.dir) == new_id
        left = sorted(d for d in os.listdir(tmp_path) if d.startswith("t-0") and not d.endswith("-delete"))
        assert left == ["t-0"], left
    finally:
        logs.shutdown()


def test_a_log_written_before_topic_ids_is_kept_and_gets_the_id(tmp_path):
    logs = LogManager([str(tmp_path)], LogConfig(), background=False)
    try:
        lg = logs.get_or_create_log("t", 0)
        lg.append(build_batch([(b"k", b"v", 1, ())]), leader_epoch=0)
        tid = uuid.uuid4()
        assert logs.get_or_create_log("t", 0, topic_id=tid) is lg and lg.log_end_offset == 1
        assert read_topic_id(lg.dir) == tid
    finally:
        logs.shutdown()
