"""LogDirFailureChannel: I/O errors of the logs turn their log directory offline (Kafka's
``LogDirFailureChannel``).

Any I/O error (ENOSPC, EIO, EROFS, EFBIG, ...) on a write, roll, flush or checkpoint in a log
directory marks that directory offline: from then on every operation of a log in it fails with
KAFKA_STORAGE_ERROR (:meth:`LogDirFailureChannel.check_online`, as Kafka's ``UnifiedLog``
checks ``hasOfflineLogDir`` first), and the directory is queued once for the broker's handler
(:meth:`take`: the ReplicaManager's ``LogDirFailureHandler`` thread), which takes its partitions
offline, stops their fetchers, tells the controller and halts the broker when no directory is
left.  An offline directory stays offline until the broker restarts (Kafka's rule: nothing is
written to a disk that failed once, whatever it does next).

Logging: one ERROR per directory and cause (errno), naming the directory, the operation, the
file and the errno text; later failures of the same kind are counted, not logged (a full disk
fails every write of every partition in it).

Thread-safe: one lock around the table; :meth:`check_online` reads a frozenset without it.
"""

from __future__ import annotations

import errno
import logging
import queue
import threading

from pyklog.broker.errors import KafkaStorageError

log = logging.getLogger(__name__)


def errno_name(e: OSError) -> str:
    """``ENOSPC`` for an OSError with errno 28 (the exception's class name without an errno)."""
    return errno.errorcode.get(e.errno, str(e.errno)) if e.errno is not None else type(e).__name__


class LogDirFailureChannel:
    """The offline log directories of one broker, and the queue of newly failed ones."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._offline: frozenset[str] = frozenset()  # replaced whole: check_online reads it lock-free
        self._causes: dict[tuple[str, str], int] = {}  # (log dir, errno name) -> failures
        self._queue: queue.Queue[str] = queue.Queue()

    def maybe_add_offline_log_dir(self, log_dir: str, path: str, what: str, e: OSError) -> None:
        """Kafka's ``maybeAddOfflineLogDir``: ``what`` (``write``, ``segment roll``, ``flush``,
        ``checkpoint``...) of ``path`` in ``log_dir`` failed with ``e``.  The first failure of each
        cause in a directory is logged at ERROR; the directory's first failure queues it for
        :meth:`take`."""
        name = errno_name(e)
        with self._lock:
            key = (log_dir, name)
            first_cause = key not in self._causes
            self._causes[key] = self._causes.get(key, 0) + 1
            first_failure = log_dir not in self._offline
            if first_failure:
                self._offline = self._offline | {log_dir}
        if first_cause:
            log.error(
                "storage error in log directory %s: %s of %s failed: %s (%s); the directory is offline "
                "until the broker restarts (logged once per directory and errno)",
                log_dir,
                what,
                path,
                e.strerror or e,
                name,
            )
        if first_failure:
            self._queue.put(log_dir)

    def has_offline_log_dir(self, log_dir: str) -> bool:
        return log_dir in self._offline

    @property
    def offline_log_dirs(self) -> frozenset[str]:
        return self._offline

    def check_online(self, log_dir: str, what: str) -> None:
        """Raise KafkaStorageError if ``log_dir`` is offline (before any operation in it)."""
        if log_dir in self._offline:
            raise KafkaStorageError(f"{what}: log directory {log_dir} is offline")

    def failures(self, log_dir: str) -> int:
        """How many failed operations were seen in ``log_dir`` (logged or counted)."""
        with self._lock:
            return sum(n for (d, _), n in self._causes.items() if d == log_dir)

    def take(self, timeout_s: float | None = None) -> str | None:
        """The next newly offline directory (blocking up to ``timeout_s``), None on timeout."""
        try:
            return self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
