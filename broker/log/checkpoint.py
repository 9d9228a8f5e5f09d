"""Offset checkpoint files in Kafka's text format (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``, ``replication-offset-checkpoint``
(the high watermarks))::

    0                       version
    2                       number of entries
    my-topic 0 1234         topic, partition, offset
    my-topic 1 99

Written to ``<file>.tmp``, fsynced, renamed over the file, then the directory is fsynced, so a
crash leaves either the old or the new file.  Thread safety: each instance serialises its own
writes with a lock; reads are plain file reads.
"""

from __future__ import annotations

import os
import threading

from pyklog.broker.errors import CorruptRecordError

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
REPLICATION_OFFSET_CHECKPOINT = "replication-offset-checkpoint"  # Kafka's high-watermark checkpoint
CHECKPOINT_VERSION = 0


class OffsetCheckpointFile:
    """One checkpoint file mapping ``(topic, partition) -> offset``.  Thread-safe writes."""

    def __init__(self, path: str):
        self.path = path
        self._lock = threading.Lock()

    def write(self, offsets: dict[tuple[str, int], int]) -> None:
        lines = [str(CHECKPOINT_VERSION), str(len(offsets))]
        for (topic, partition), offset in sorted(offsets.items()):
            lines.append(f"{topic} {partition} {offset}")
        data = ("\n".join(lines) + "\n").encode()
        with self._lock:
            replace_file_durably(self.path, data)

    def read(self) -> dict[tuple[str, int], int]:
        """The entries, or {} when the file does not exist.  Raises CorruptRecordError with the
        line number and what was expected on a malformed file."""
        try:
            with open(self.path, encoding="utf-8") as f:
                text = f.read()
        except FileNotFoundError:
            return {}
        lines = text.splitlines()
        if not lines:
            raise CorruptRecordError(f"{self.path}: empty checkpoint file, expected a version line")
        if lines[0].strip() != str(CHECKPOINT_VERSION):
            raise CorruptRecordError(f"{self.path}: line 1: expected version {CHECKPOINT_VERSION}, read {lines[0]!r}")
        try:
            count = int(lines[1])
        except (IndexError, ValueError):
            raise CorruptRecordError(
                f"{self.path}: line 2: expected the entry count, read {lines[1] if len(lines) > 1 else 'end of file'!r}"
            ) from None
        entries = [ln for ln in lines[2:] if ln.strip()]
        if len(entries) != count:
            raise CorruptRecordError(f"{self.path}: expected {count} entries, read {len(entries)}")
        out: dict[tuple[str, int], int] = {}
        for i, ln in enumerate(entries, start=3):
            parts = ln.split()
            if len(parts) != 3:
                raise CorruptRecordError(f"{self.path}: line {i}: expected 'topic partition offset', read {ln!r}")
            try:
                out[(parts[0], int(parts[1]))] = int(parts[2])
            except ValueError:
                raise CorruptRecordError(
                    f"{self.path}: line {i}: expected integer partition and offset, read {ln!r}"
                ) from None
        return out


def _fsync_quietly(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_dir_quietly(path: str) -> None:
    """fsync the directory ``path`` so that a rename or a new file in it is durable; best effort
    (a directory that cannot be opened or synced is left as it is, as Kafka's ``flushDir`` callers
    tolerate)."""
    _fsync_quietly(path)


def fsync_file_quietly(path: str) -> None:
    """fsync the file ``path``; best effort (a file gone or not syncable is left as it is)."""
    _fsync_quietly(path)


def replace_file(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename, with no fsync: readers
    never see a half-written file, but a crash may leave the old content, the new one or (on some
    filesystems) an empty file.  For files whose loss a loader detects and repairs from the data
    (the leader epoch checkpoint); :func:`replace_file_durably` makes it durable later."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def replace_file_durably(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a crash leaves the old content or the new one: a temporary
    file beside it, fsync, rename over ``path``, fsync of the directory (best effort)."""
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir_quietly(os.path.dirname(path) or ".")
