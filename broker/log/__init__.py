"""On-disk log storage in Kafka's layout: one directory per partition, segments of record
batches named by base offset with sparse offset and time indexes, a log manager over
``log.dirs``.  See docs/ARCHITECTURE.md ("broker.log") for the contract."""

from .config import LogConfig
from .leader_epoch import UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, EpochEntry, LeaderEpochFileCache
from .log import AppendInfo, FetchSlice, Log, RecoveryReport, SegmentCut, parse_topic_partition
from .manager import LogManager

__all__ = [
    "LogConfig",
    "Log",
    "LogManager",
    "AppendInfo",
    "FetchSlice",
    "RecoveryReport",
    "SegmentCut",
    "parse_topic_partition",
    "LeaderEpochFileCache",
    "EpochEntry",
    "UNDEFINED_EPOCH",
    "UNDEFINED_EPOCH_OFFSET",
]
