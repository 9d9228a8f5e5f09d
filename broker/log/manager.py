"""LogManager: every partition log under ``log.dirs``, plus the background work.

Start-up (:meth:`LogManager.startup`): each log dir is locked (``.lock``, ``fcntl.flock``, so two
brokers cannot share it), its checkpoints are read (``recovery-point-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint`` and the high watermarks'
``replication-offset-checkpoint``, Kafka's ``highWatermarkCheckpoints``), and every ``<topic>-<partition>`` directory is loaded in a
small thread pool.  If the dir holds the clean-shutdown marker ``.kafka_cleanshutdown`` the logs
are opened without revalidation; otherwise each log recovers from its checkpointed recovery
point.  The marker is removed once loading is done.  Directories that are not a legal
``<topic>-<partition>`` are logged and ignored; ``*-delete`` directories (an interrupted topic
deletion) are removed.

Background (``background=True``): one :class:`pyklog.broker.common.scheduler.Scheduler` (Kafka's
``KafkaScheduler``, thread ``log-scheduler``) owned by the manager runs five periodic tasks, each
``interval`` after the end of its previous run: ``log-flush`` (time-based flushes,
``log.flush.interval.ms``, checked every ``log.flush.scheduler.interval.ms``), ``log-retention``
(every ``log.retention.check.interval.ms``), ``log-checkpoint`` (every
``log.flush.offset.checkpoint.interval.ms``), ``log-cleaner`` (compacts logs whose policy includes
``compact`` every ``log.cleaner.backoff.ms``) and ``highwatermark-checkpoint`` (the high watermarks'
``replication-offset-checkpoint``, every ``high_watermark_checkpoint_interval_ms``).  The same scheduler (created before the logs are
loaded) is passed to every Log for its one-shot jobs: the fsync of a segment sealed by a roll and
the delayed deletes of ``file.delete.delay.ms``; without ``background`` the logs use
:mod:`~pyklog.broker.log.log`'s fallback scheduler.  They share the one thread, so a long compaction
delays a flush check (time-based flushes are a lower bound anyway; Kafka gives its cleaner its own
threads).  A task that fails is logged and runs again at its next interval.

Shutdown (:meth:`shutdown`): stop the scheduler (waiting for a running task; compaction stops
between logs), close every log (flush + producer snapshot), write the checkpoints and then the
clean-shutdown marker.

Failed log dirs (:mod:`~pyklog.broker.log.dir_failure`): every Log reports its I/O errors to the
manager's :attr:`LogManager.failure_channel`, which takes the dir offline; the owner of the channel's
queue (the ReplicaManager) calls :meth:`LogManager.handle_log_dir_failure`, which drops the dir's
logs.  An offline dir gets no checkpoint, no new log and no clean-shutdown marker.

Thread-safe: the log table is guarded by a lock; each Log is thread-safe itself.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from pyklog.broker.common.scheduler import Scheduler
from pyklog.broker.errors import (
    CorruptRecordError,
    InvalidTopicError,
    KafkaStorageError,
    PyklogError,
)

from .checkpoint import (
    CLEANER_OFFSET_CHECKPOINT,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    REPLICATION_OFFSET_CHECKPOINT,
    OffsetCheckpointFile,
    fsync_dir_quietly,
    fsync_file_quietly,
)
from .config import LogConfig
from .dir_failure import LogDirFailureChannel
from .log import DELETE_DIR_SUFFIX, Log, parse_topic_partition
from .partition_metadata import FILE_NAME as PARTITION_METADATA_FILE
from .partition_metadata import read_topic_id, topic_id_text, write_topic_id

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
LOCK_FILE = ".lock"


class LogManager:
    """All partition logs of a broker.  Thread-safe."""

    def __init__(
        self,
        log_dirs: list[str] | str,
        default_config: LogConfig | None = None,
        *,
        background: bool = True,
        recovery_threads: int = 2,
        topic_config: Callable[[str], dict | None] | None = None,
        hold_cleaning: bool = False,
        high_watermark_checkpoint_interval_ms: int = 5000,
    ):
        """``high_watermark_checkpoint_interval_ms``: how often ``replication-offset-checkpoint`` is
        written (Kafka's ``replica.high.watermark.checkpoint.interval.ms``, default 5 s); the
        other checkpoints follow ``log.flush.offset.checkpoint.interval.ms``."""
        if isinstance(log_dirs, str):
            log_dirs = [d for d in log_dirs.split(",") if d.strip()]
        if not log_dirs:
            raise KafkaStorageError("expected at least one log dir in log.dirs, read none")
        self.log_dirs = [os.path.abspath(d.strip()) for d in log_dirs]
        self.default_config = default_config or LogConfig()
        self.background = background
        self.recovery_threads = max(1, recovery_threads)
        self._topic_config = topic_config
        self.high_watermark_checkpoint_interval_ms = high_watermark_checkpoint_interval_ms
        self._logs: dict[tuple[str, int], Log] = {}
        #: the topic id (KIP-516) each open log was checked against (its partition.metadata), so the
        #: file is read once per log, not at every call
        self._topic_ids: dict[tuple[str, int], uuid.UUID] = {}
        # new logs' partition.metadata written without fsync, made durable together soon after on
        # the scheduler (:meth:`sync_partition_metadata`): creating N partitions waits for no disk
        self._metadata_unsynced: set[str] = set()
        self._metadata_sync_scheduled = False
        self._lock = threading.RLock()
        # one writer of the checkpoint files at a time (the scheduler's log-checkpoint task and
        # DeleteRecords, which checkpoints a moved log start offset at once)
        self._checkpoint_lock = threading.Lock()
        # each checkpoint file's entries as this process last wrote them (under _checkpoint_lock):
        # a file whose entries did not change is not written again (an idle broker holding
        # thousands of partitions rewrote and fsynced its high watermarks every 5 s)
        self._checkpoints_written: dict[str, dict] = {}
        self._stop = threading.Event()
        self._scheduler: Scheduler | None = None
        self._lock_fds: list[int] = []
        self._started = False
        self.stray_dirs: list[str] = []
        self.load_errors: dict[str, str] = {}
        # (topic, partition) whose retention and compaction are paused (Kafka's LogCleanerManager
        # "abortAndPauseCleaning"): the logs of topics missing from the registry, whose config is
        # unknown.  None: every log paused, until the owner first says which (``hold_cleaning``).
        self._cleaning_paused: frozenset | None = None if hold_cleaning else frozenset()
        #: I/O errors turn a log dir offline here (every Log of this manager reports to it)
        self.failure_channel = LogDirFailureChannel()
        #: (topic, partition) -> log dir, of the logs in offline dirs: never created again elsewhere
        self._offline_logs: dict[tuple[str, int], str] = {}

    @property
    def scheduler(self) -> Scheduler | None:
        """The background scheduler (thread ``log-scheduler``) while started with ``background``."""
        return self._scheduler

    # ---------------------------------------------------------------- config
    def config_for(self, topic: str) -> LogConfig:
        """The default config with the topic's overrides (from ``topic_config``) applied."""
        if self._topic_config is None:
            return self.default_config
        try:
            overrides = self._topic_config(topic)
        except PyklogError as e:
            log.warning("could not read the config of topic %s, using defaults: %s", topic, e)
            overrides = None
        return self.default_config.with_overrides(overrides)

    # ---------------------------------------------------------------- start-up
    def startup(self) -> None:
        """Lock and load every log dir, then start the background threads."""
        if self._started:
            return
        for d in self.log_dirs:
            os.makedirs(d, exist_ok=True)
            self._lock_dir(d)
        if self.background and self._scheduler is None:
            # before loading: the logs take it for their sealed-segment flushes and delayed deletes
            self._scheduler = Scheduler("log-scheduler")
        t0 = time.monotonic()
        try:
            for d in self.log_dirs:
                try:
                    self._load_dir(d)
                except OSError as e:  # Kafka: a dir that cannot be loaded is offline from the start
                    self.failure_channel.maybe_add_offline_log_dir(d, e.filename or d, "loading", e)
            if not self.live_log_dirs:
                raise KafkaStorageError(f"all log dirs in {','.join(self.log_dirs)} have failed")
        except BaseException:
            if self._scheduler is not None:  # no thread left behind by a failed start-up
                self._scheduler.shutdown(wait=False)
                self._scheduler = None
            raise
        log.info("loaded %d log(s) from %s in %.2fs", len(self._logs), ",".join(self.log_dirs), time.monotonic() - t0)
        self._started = True
        self._stop.clear()
        if self.background and self._scheduler is not None:  # with background, created above
            self._start_threads(self._scheduler)

    def _lock_dir(self, d: str) -> None:
        fd = os.open(os.path.join(d, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise KafkaStorageError(f"log dir {d} is locked by another process (is another broker using it?)") from None
        self._lock_fds.append(fd)

    def _read_checkpoint(self, d: str, name: str) -> dict:
        try:
            return OffsetCheckpointFile(os.path.join(d, name)).read()
        except (CorruptRecordError, OSError) as e:
            log.warning("%s: ignoring unreadable checkpoint %s (full recovery instead): %s", d, name, e)
            return {}

    def _load_dir(self, d: str) -> None:
        marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(marker)
        recovery_points = self._read_checkpoint(d, RECOVERY_POINT_CHECKPOINT)
        start_offsets = self._read_checkpoint(d, LOG_START_OFFSET_CHECKPOINT)
        cleaner_offsets = self._read_checkpoint(d, CLEANER_OFFSET_CHECKPOINT)
        high_watermarks = self._read_checkpoint(d, REPLICATION_OFFSET_CHECKPOINT)
        jobs = []
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if not os.path.isdir(path):
                continue
            if name.endswith(DELETE_DIR_SUFFIX):
                log.info("%s: removing %s (an interrupted topic deletion)", d, name)
                shutil.rmtree(path, ignore_errors=True)
                continue
            try:
                tp = parse_topic_partition(name)
            except InvalidTopicError as e:
                log.error("%s: ignoring stray directory %s: %s", d, name, e)
                self.stray_dirs.append(path)
                continue
            jobs.append((tp, path))

        def load(job: tuple[tuple[str, int], str]) -> tuple[tuple[str, int], str, Log]:
            tp, path = job
            lg = Log(
                path,
                self.config_for(tp[0]),
                recovery_point=recovery_points.get(tp, 0),
                log_start_offset=start_offsets.get(tp, 0),
                clean_shutdown=clean,
                scheduler=self._scheduler,
                high_watermark=high_watermarks.get(tp),
                failure_channel=self.failure_channel,
            )
            lg.cleaner_checkpoint = min(cleaner_offsets.get(tp, 0), lg.log_end_offset)
            return tp, path, lg

        if not jobs:
            _unlink(marker)
            return
        with ThreadPoolExecutor(
            max_workers=min(self.recovery_threads, len(jobs)), thread_name_prefix="log-recovery"
        ) as pool:
            futures = [(job, pool.submit(load, job)) for job in jobs]
            for job, fut in futures:
                try:
                    tp, path, lg = fut.result()
                except Exception as e:  # one bad partition must not stop the broker
                    log.exception("%s: could not load log %s: %s", d, job[1], e)
                    self.load_errors[job[1]] = str(e)
                    continue
                with self._lock:
                    if tp in self._logs:
                        log.error(
                            "duplicate log directories for %s-%d: %s and %s; ignoring the second",
                            tp[0],
                            tp[1],
                            self._logs[tp].dir,
                            path,
                        )
                        lg.close()
                        self.stray_dirs.append(path)
                        continue
                    self._logs[tp] = lg
        _unlink(marker)
        # checkpoint at once so a crash right after start-up does not redo this recovery
        self.checkpoint_dir(d)

    # ---------------------------------------------------------------- access
    def get_log(self, topic: str, partition: int) -> Log | None:
        return self._logs.get((topic, partition))

    def get_or_create_log(
        self, topic: str, partition: int, config: LogConfig | None = None, *, topic_id: uuid.UUID | None = None
    ) -> Log:
        """The log of ``topic``-``partition``, creating it (in the log dir holding the fewest
        logs) when missing.  A given ``config`` replaces the log's config.  While a log dir is
        offline no log is created (KafkaStorageError).

        ``topic_id`` (the registry's, KIP-516) is checked against the directory's
        ``partition.metadata``: a log recorded under another id belongs to a topic of the same
        name that was deleted (its directory not yet removed here) and is deleted now, so it never
        serves the new topic; a log without the file (written before topic ids) gets it."""
        key = (topic, partition)
        with self._lock:
            lg = self._logs.get(key)
            if lg is not None and topic_id is not None and self._topic_ids.get(key) != topic_id:
                lg = self._check_topic_id(key, lg, topic_id)
            if lg is not None:
                if config is not None and config is not lg.config and config != lg.config:
                    lg.config = config
                return lg
            if partition < 0:
                raise InvalidTopicError(f"partition must be >= 0, got {partition}")
            offline = self.failure_channel.offline_log_dirs
            if offline:
                # Kafka creates only new replicas while a dir is offline; a missing log may have been
                # in the failed dir (lost to a failure at start-up), and an empty log in its place
                # could be elected and lose what was acknowledged: none is created until a restart
                raise KafkaStorageError(
                    f"cannot create the log of {topic}-{partition} while log dir(s) {','.join(sorted(offline))} "
                    f"are offline (until a restart)"
                )
            if len(self.log_dirs) == 1:
                d = self.log_dirs[0]  # nothing to choose: no count of what exists
            else:
                counts = dict.fromkeys(self.log_dirs, 0)
                for other in self._logs.values():
                    parent = os.path.dirname(other.dir)
                    if parent in counts:
                        counts[parent] += 1
                d = min(self.log_dirs, key=lambda x: (counts[x], self.log_dirs.index(x)))
            path = os.path.join(d, f"{topic}-{partition}")
            parse_topic_partition(path)  # validates the topic name
            lg = Log.open(
                path,
                config or self.config_for(topic),
                clean_shutdown=True,
                scheduler=self._scheduler,
                failure_channel=self.failure_channel,
            )
            self._logs[key] = lg
            if topic_id is not None:
                self._write_new_topic_id(lg.dir, topic_id)
                self._topic_ids[key] = topic_id
            log.info("created log %s-%d in %s", topic, partition, d)
            return lg

    def _write_new_topic_id(self, log_dir: str, topic_id: uuid.UUID) -> None:
        """Under the lock: a new log's partition.metadata, durable at once without a scheduler,
        else soon after by :meth:`sync_partition_metadata` (one task for every log created
        meanwhile).  A crash before then may leave no file, which the next start treats as a log
        written before topic ids (the registry's id is recorded)."""
        if self._scheduler is None:
            write_topic_id(log_dir, topic_id)
            return
        write_topic_id(log_dir, topic_id, sync=False)
        self._metadata_unsynced.add(log_dir)
        if not self._metadata_sync_scheduled:
            self._metadata_sync_scheduled = True
            try:
                self._scheduler.schedule(0.5, self.sync_partition_metadata, name="flush-partition-metadata")
            except RuntimeError:  # shutting down: shutdown() syncs them
                pass

    def sync_partition_metadata(self) -> None:
        """fsync the partition.metadata files written without (and their directories)."""
        with self._lock:
            dirs, self._metadata_unsynced = self._metadata_unsynced, set()
            self._metadata_sync_scheduled = False
        for d in sorted(dirs):
            fsync_file_quietly(os.path.join(d, PARTITION_METADATA_FILE))
            fsync_dir_quietly(d)

    def _check_topic_id(self, key: tuple[str, int], lg: Log, topic_id: uuid.UUID) -> Log | None:
        """Under the lock: the log if it belongs to ``topic_id`` (recording the id in a log that has
        none), else None after deleting it (a deleted topic's log)."""
        try:
            recorded = read_topic_id(lg.dir)
        except CorruptRecordError as e:
            log.warning("%s; recording the registry's topic id %s", e, topic_id_text(topic_id))
            recorded = None
        if recorded is None:
            write_topic_id(lg.dir, topic_id)
        elif recorded != topic_id:
            log.warning(
                "the log %s belongs to an earlier topic %s (topic id %s; the registry's is %s): that topic was "
                "deleted and created again before this broker removed its log; deleting it so that it never "
                "serves the new topic",
                lg.dir,
                key[0],
                topic_id_text(recorded),
                topic_id_text(topic_id),
            )
            del self._logs[key]
            self._topic_ids.pop(key, None)
            lg.delete()
            return None
        self._topic_ids[key] = topic_id
        return lg

    def delete_log(self, topic: str, partition: int) -> bool:
        """Close and remove a partition's log; returns whether it existed."""
        with self._lock:
            self._topic_ids.pop((topic, partition), None)
            lg = self._logs.pop((topic, partition), None)
        if lg is None:
            return False
        lg.delete()
        log.info("deleted log %s-%d", topic, partition)
        return True

    # ---------------------------------------------------------------- offline log dirs
    @property
    def live_log_dirs(self) -> list[str]:
        """The log dirs not offline, in ``log.dirs`` order."""
        offline = self.failure_channel.offline_log_dirs
        return [d for d in self.log_dirs if d not in offline]

    def handle_log_dir_failure(self, d: str) -> list[tuple[str, int]]:
        """Kafka's ``LogManager.handleLogDirFailure``: take the logs of the offline dir ``d`` out of
        the manager and close their files without writing; their partitions are never created again
        in another dir (until a restart).  Returns their ``(topic, partition)`` keys, sorted.  Any
        thread."""
        with self._lock:
            gone = {k: lg for k, lg in self._logs.items() if lg.log_dir == d}
            for k in gone:
                del self._logs[k]
                self._topic_ids.pop(k, None)
                self._offline_logs[k] = d
        for lg in gone.values():
            try:
                lg.close_handlers()
            except Exception as e:  # noqa: BLE001 - every handle is closed, whatever one raises
                log.warning("closing the files of %s failed: %s", lg, e)
        return sorted(gone)

    def offline_log_dir_of(self, topic: str, partition: int) -> str | None:
        """The offline log dir that held this partition's log, None if it is not offline."""
        return self._offline_logs.get((topic, partition))

    def logs(self) -> dict[tuple[str, int], Log]:
        with self._lock:
            return dict(self._logs)

    def set_cleaning_paused(self, keys: Iterable[tuple[str, int]]) -> None:
        """Pause retention and compaction of exactly these ``(topic, partition)`` logs (replacing the
        previous set): logs kept while their topic is missing from the registry must not lose
        segments to a default retention their real topic config would not have allowed."""
        self._cleaning_paused = frozenset(keys)

    def _cleanable(self) -> list:
        paused = self._cleaning_paused
        if paused is None:
            return []
        return [lg for key, lg in self.logs().items() if key not in paused]

    # ---------------------------------------------------------------- periodic work
    def flush_dirty_logs(self, now_ms: int | None = None) -> int:
        n = 0
        for lg in self.logs().values():
            try:
                if lg.maybe_flush(now_ms):
                    n += 1
            except (OSError, KafkaStorageError):  # reported once per log dir and cause by the log
                pass
            except Exception as e:  # noqa: BLE001 - one log's failure never stops the others
                log.error("flush of %s failed: %s", lg, e)
        return n

    def cleanup_logs(self, now_ms: int | None = None) -> int:
        """Run retention on every log (except those paused); returns the segments deleted."""
        n = 0
        for lg in self._cleanable():
            try:
                n += lg.delete_old_segments(now_ms)
                lg.expire_producers(now_ms)
            except Exception as e:  # noqa: BLE001 - one log's failure never stops the others
                log.error("retention of %s failed: %s", lg, e)
        return n

    def compact_logs(self, now_ms: int | None = None) -> int:
        """Compact every log whose policy includes ``compact`` (except those paused); returns logs compacted."""
        n = 0
        for lg in self._cleanable():
            if self._stop.is_set():
                break
            if not lg.config.compact or lg.closed:
                continue
            try:
                stats = lg.compact(now_ms)
                if stats is not None and stats.segments_cleaned:
                    n += 1
            except Exception as e:
                log.exception("compaction of %s failed: %s", lg, e)
        return n

    def checkpoint_dir(self, d: str) -> None:
        """Write the checkpoints of log dir ``d`` (nothing if it is offline; an I/O error takes it
        offline)."""
        if self.failure_channel.has_offline_log_dir(d):
            return
        with self._checkpoint_lock:
            try:
                self._checkpoint_dir(d)
            except OSError as e:
                self.failure_channel.maybe_add_offline_log_dir(d, e.filename or d, "checkpoint", e)
                raise

    def checkpoint_log_start_offset(self, lg: Log) -> None:
        """Write the checkpoints of ``lg``'s log dir now (DeleteRecords: a moved log start offset
        survives a crash, not only a clean shutdown).  Any thread."""
        self.checkpoint_dir(os.path.dirname(lg.dir))

    def _checkpoint_dir(self, d: str) -> None:
        logs = [lg for lg in self.logs().values() if os.path.dirname(lg.dir) == d]
        self._write_checkpoint(
            os.path.join(d, RECOVERY_POINT_CHECKPOINT), {(lg.topic, lg.partition): lg.recovery_point for lg in logs}
        )
        self._write_checkpoint(
            os.path.join(d, LOG_START_OFFSET_CHECKPOINT),
            {(lg.topic, lg.partition): lg.log_start_offset for lg in logs},
        )
        self._write_checkpoint(
            os.path.join(d, CLEANER_OFFSET_CHECKPOINT),
            {(lg.topic, lg.partition): lg.cleaner_checkpoint for lg in logs if lg.config.compact},
        )
        self._checkpoint_high_watermarks(d, logs)

    def _write_checkpoint(self, path: str, offsets: dict) -> None:
        """Under ``_checkpoint_lock``: write one checkpoint file, unless it holds these entries
        already (written so by this process and still there)."""
        if self._checkpoints_written.get(path) == offsets and os.path.exists(path):
            return
        self._checkpoints_written.pop(path, None)
        OffsetCheckpointFile(path).write(offsets)
        self._checkpoints_written[path] = offsets

    def _checkpoint_high_watermarks(self, d: str, logs: Iterable[Log]) -> None:
        """Under ``_checkpoint_lock``: every log's high watermark into ``d``'s
        ``replication-offset-checkpoint`` (Kafka's ``checkpointHighWatermarks``)."""
        self._write_checkpoint(
            os.path.join(d, REPLICATION_OFFSET_CHECKPOINT), {(lg.topic, lg.partition): lg.high_watermark for lg in logs}
        )

    def checkpoint_high_watermarks(self) -> None:
        """Write the ``replication-offset-checkpoint`` of every log dir (the scheduler's
        ``highwatermark-checkpoint`` task; any thread)."""
        for d in self.live_log_dirs:
            try:
                with self._checkpoint_lock:
                    self._checkpoint_high_watermarks(
                        d, [lg for lg in self.logs().values() if os.path.dirname(lg.dir) == d]
                    )
            except OSError as e:  # reported once per dir and cause; the dir goes offline
                self.failure_channel.maybe_add_offline_log_dir(d, e.filename or d, "checkpoint", e)

    def checkpoint(self) -> None:
        """Write both checkpoint files of every log dir."""
        for d in self.live_log_dirs:
            try:
                self.checkpoint_dir(d)
            except OSError:  # reported once per dir and cause; the dir goes offline
                pass

    def _start_threads(self, sched: Scheduler) -> None:
        cfg = self.default_config

        def every(ms: int) -> float:
            return max(0.01, ms / 1000.0)

        sched.schedule_periodic("log-flush", every(cfg.flush_scheduler_interval_ms), self.flush_dirty_logs)
        sched.schedule_periodic("log-retention", every(cfg.retention_check_interval_ms), self.cleanup_logs)
        sched.schedule_periodic("log-checkpoint", every(cfg.flush_offset_checkpoint_interval_ms), self.checkpoint)
        sched.schedule_periodic("log-cleaner", every(cfg.cleaner_backoff_ms), self.compact_logs)
        sched.schedule_periodic(
            "highwatermark-checkpoint",
            every(self.high_watermark_checkpoint_interval_ms),
            self.checkpoint_high_watermarks,
        )

    # ---------------------------------------------------------------- shutdown
    def shutdown(self) -> None:
        """Stop background work, close every log, write checkpoints and the clean-shutdown
        marker in each log dir."""
        self._stop.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=True, timeout_s=60)
            self._scheduler = None
        self.sync_partition_metadata()
        with self._lock:
            logs = list(self._logs.values())
        failed = False

        def close(lg: Log) -> bool:
            if lg.offline:  # its dir went offline: nothing is written there any more
                lg.close_handlers()
                return True
            try:
                lg.close(sync=False)  # made durable below, one file-system sync per log dir
                return True
            except Exception as e:  # noqa: BLE001 - every log is closed, whatever one of them raises
                log.error("closing %s failed: %s", lg, e)
                return False

        # as Kafka: num.recovery.threads.per.data.dir threads per log dir flush and close the logs
        # (the fsyncs of one log overlap with the next's)
        workers = self.recovery_threads * len(self.log_dirs)
        t0 = time.monotonic()
        if workers > 1 and len(logs) > 1:
            with ThreadPoolExecutor(max_workers=min(workers, len(logs)), thread_name_prefix="log-close") as pool:
                failed = not all(pool.map(close, logs))
        else:
            closed = [close(lg) for lg in logs]  # every one, whatever an earlier one raised
            failed = not all(closed)
        # the logs' writes reach the disk in one syncfs per log dir instead of an fsync or more per
        # log (a broker closing 5,000 logs spent 30 s in fsyncs); the recovery points, then the
        # clean-shutdown marker, are written only after it
        t1 = time.monotonic()
        synced = {d: _sync_file_system(d) for d in self.live_log_dirs}
        t2 = time.monotonic()
        log.info("closed %d log(s) in %.2fs (file-system sync %.2fs)", len(logs), t2 - t0, t2 - t1)
        for d in self.live_log_dirs:  # an offline dir gets nothing written (recovery at restart)
            if synced.get(d) is not None:
                log.error(
                    "%s: making the closed logs durable failed: %s (the logs are recovered at the next start)",
                    d,
                    synced[d],
                )
                continue
            try:
                self.checkpoint_dir(d)
                if not failed:
                    with open(os.path.join(d, CLEAN_SHUTDOWN_FILE), "wb") as f:
                        os.fsync(f.fileno())
            except OSError as e:
                log.error("%s: writing checkpoints / clean-shutdown marker failed: %s", d, e)
        for fd in self._lock_fds:
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
        self._lock_fds = []
        with self._lock:
            self._logs.clear()
        self._started = False
        log.info("log manager shut down (%d logs)", len(logs))


def _sync_file_system(path: str) -> OSError | None:
    """Write every dirty page and inode of the file system holding ``path`` to disk and wait
    (Linux ``syncfs(2)``; ``sync(2)`` where it is missing).  The error, or None."""
    import ctypes

    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as e:
        return e
    try:
        syncfs = getattr(ctypes.CDLL(None, use_errno=True), "syncfs", None)
        if syncfs is None:
            os.sync()
        elif syncfs(fd) != 0:
            err = ctypes.get_errno()
            return OSError(err, os.strerror(err), path)
        return None
    except OSError as e:
        return e
    finally:
        os.close(fd)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
