"""``partition.metadata``: the id of the topic a partition directory belongs to (KIP-516).

Kafka's format, two lines::

    version: 0
    topic_id: <the topic id, Kafka's Uuid text: URL-safe base64 of its 16 bytes, no padding>

A topic deleted and created again under the same name gets a new id, so a directory left behind
by the deleted topic (a broker that had not removed it yet) is recognised and never serves the new
topic.  Written with a temporary file, fsync and rename (a crash leaves the old file or the new one).
Pure file I/O; callers serialise writes per directory (the log manager's lock).
"""

from __future__ import annotations

import base64
import os
import uuid

from pyklog.broker.errors import CorruptRecordError

from .checkpoint import replace_file, replace_file_durably

FILE_NAME = "partition.metadata"
VERSION = 0


def topic_id_text(topic_id: uuid.UUID) -> str:
    """Kafka's ``Uuid.toString``: URL-safe base64 of the 16 bytes without ``=`` padding."""
    return base64.urlsafe_b64encode(topic_id.bytes).decode("ascii").rstrip("=")


def parse_topic_id(text: str) -> uuid.UUID:
    """The inverse of :func:`topic_id_text`; ValueError for anything else."""
    raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if len(raw) != 16:
        raise ValueError(f"a topic id is 16 bytes, read {len(raw)}")
    return uuid.UUID(bytes=raw)


def read_topic_id(log_dir: str) -> uuid.UUID | None:
    """The topic id recorded in ``log_dir`` (None: no file, as for a log written before topic ids).
    CorruptRecordError for a file that is not Kafka's format."""
    path = os.path.join(log_dir, FILE_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        return None
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    try:
        if int(fields["version"].strip()) != VERSION:
            raise ValueError(f"unsupported version {fields['version'].strip()}")
        return parse_topic_id(fields["topic_id"].strip())
    except (KeyError, ValueError) as e:
        raise CorruptRecordError(
            f"{path}: expected 'version: 0' and 'topic_id: <id>', read {text[:100]!r} ({e})"
        ) from None


def write_topic_id(log_dir: str, topic_id: uuid.UUID, *, sync: bool = True) -> None:
    """Record ``topic_id`` in ``log_dir`` (``sync``: durably; else the caller makes it durable
    later, with :func:`~pyklog.broker.log.checkpoint.fsync_file_quietly` and the directory's fsync,
    as Kafka flushes a new partition.metadata on its scheduler rather than in the creation path)."""
    write = replace_file_durably if sync else replace_file
    write(os.path.join(log_dir, FILE_NAME), f"version: {VERSION}\ntopic_id: {topic_id_text(topic_id)}\n".encode())
