"""The input partition of the ``pyklog`` source: what one Spark read task reads.

Made by the planner on the driver (:meth:`pyklog.connector.spark.planner.SourcePlanner.input_partitions`,
or the batch reader), pickled to the executors with the task.  Plain values only, so unpickling it
imports this module and pyspark's ``InputPartition``, nothing else.
"""

from __future__ import annotations

from pyspark.sql.datasource import InputPartition

__all__ = ["PyklogInputPartition"]


class PyklogInputPartition(InputPartition):
    """One Spark task: rows ``[start, end)`` of ``topic``/``partition``.

    ``leader`` (``host:port``) and ``leader_id`` (its broker id) name the partition's leader when
    the range was planned (driver planner).  With both, the task (executor) opens exactly one
    connection, to that broker, and fetches at once: no metadata request, no bootstrap connection.
    Only if that broker no longer leads the partition or cannot be reached does the task look the
    leader up.  Without ``leader_id`` the task finds the leader through the metadata, with
    ``leader`` as its bootstrap server.  The API versions the planner negotiated are not carried:
    the task's one ApiVersions round trip is also how it learns that the broker is up and what it
    supports now.  Picklable (plain values only)."""

    def __init__(
        self, topic: str, partition: int, start: int, end: int, leader: str | None, leader_id: int | None = None
    ):
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end
        self.leader = leader
        self.leader_id = leader_id

    def __repr__(self) -> str:
        return (
            f"PyklogInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}) "
            f"leader={self.leader_id}@{self.leader})"
        )
