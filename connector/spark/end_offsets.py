"""A trigger's end offsets, computed from what the planner's I/O returned (``latestOffset``).

The stream reader (:class:`pyklog.connector.spark.stream_reader.PyklogStreamReader`) asks the cluster
and the group what it needs for one trigger: which partitions the query owns, where each ends now
(ListOffsets, or fetchOnDriver's Fetch), which partitions restart elsewhere (advanced by another
group member, or past the log end), where newly owned partitions start.  :func:`plan_end_offsets`
turns those answers into the batch's end offsets:

* a partition read before (in ``start``) and not restarting advances to its end (``latest``);
* a new one is recorded at its start position (an empty range in this batch, read from the next);
* Trigger.AvailableNow: never beyond the target taken when the query started;
* admission control (maxOffsetsPerTrigger / minOffsetsPerTrigger with maxTriggerDelay) over the
  continuing partitions, the only ones with rows in this batch.

Pure: no I/O, no clock (the caller passes the time since the last batch), no state; runs on the
driver (planner) and in unit tests.  Offsets are ``{(topic, partition): offset}`` dicts.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from pyklog.connector.spark import offsets as _offsets

__all__ = ["TriggerEnd", "plan_end_offsets", "start_of_owned_partition"]


def start_of_owned_partition(committed: int | None, position: int | None, earliest: int | None) -> int | None:
    """Where a partition this query owns (again) starts, not being in the batch's start offsets.

    ``committed``: the group's committed offset (None: none); ``position``: this query's own position
    when it last read the partition (None: never read it in this process); ``earliest``: its earliest
    offset (needed only when neither is known).  Within one query the checkpoint decides what is
    read: a committed offset older than the query's position (a commit that could not be written,
    e.g. during a ZooKeeper outage) never moves it back; one ahead of it (another member advanced the
    partition meanwhile) is where it resumes.  Pure."""
    if position is not None and (committed is None or committed < position):
        return position
    return committed if committed is not None else earliest


@dataclass(frozen=True)
class TriggerEnd:
    """What :func:`plan_end_offsets` decided for one trigger."""

    #: the batch's end offsets: the continuing partitions, then the new ones (sorted within each)
    end: dict
    #: the partitions read before that go on in this batch (sorted); only they can have rows
    continuing: list
    #: Trigger.AvailableNow's target with the continuing partitions it lacked added at their end
    #: (None without Trigger.AvailableNow)
    target: dict | None

    def advanced(self, start: dict) -> bool:
        """Whether the batch has rows: a continuing partition's end moved past its start."""
        return any(self.end[tp] != start[tp] for tp in self.continuing)


def plan_end_offsets(
    start: dict,
    owned,
    latest: dict,
    new_positions: dict,
    restarting,
    *,
    target: dict | None,
    limit,
    max_offsets_per_trigger: int | None,
    min_offsets_per_trigger: int | None,
    max_trigger_delay_ms: int,
    since_last_batch_ms: float,
) -> TriggerEnd:
    """The end offsets of one trigger.

    ``start``: the batch's start offsets (Spark's); ``owned``: the partitions the query reads now;
    ``latest``: where each owned partition read before ends (high watermark, or last stable offset
    for read_committed; raised to the query's position where the high watermark only lags);
    ``new_positions``: the start of each owned partition not in ``start`` (committed offset,
    earliest, or a kept position); ``restarting``: partitions left out of this end offset (they
    are re-added at a kept position next time); ``target``: Trigger.AvailableNow's target or None;
    ``limit``: Spark's ReadLimit (or None); the three options of admission control;
    ``since_last_batch_ms``: how long ago the last batch with rows was planned."""
    end: dict = {}
    cont = []
    for tp in sorted(owned):
        if tp in restarting or tp not in start:
            continue
        cont.append(tp)
        end[tp] = latest[tp]
    for tp in sorted(new_positions):
        end[tp] = new_positions[tp]
    # Trigger.AvailableNow: never beyond the target
    if target is not None:
        target = dict(target)
        for tp in cont:
            if tp not in target:
                target[tp] = latest[tp]
            end[tp] = max(start[tp], min(end[tp], target[tp]))
    # admission control (only continuing partitions have rows in this batch)
    if limit is not None and not isinstance(limit, ReadAllAvailable) and cont:
        cont_start = {tp: start[tp] for tp in cont}
        cont_end = {tp: end[tp] for tp in cont}
        available = sum(cont_end[tp] - cont_start[tp] for tp in cont)
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else max_offsets_per_trigger
        min_rows = limit.min_rows if isinstance(limit, ReadMinRows) else min_offsets_per_trigger
        if (
            min_rows is not None
            and target is None
            and 0 < available < min_rows
            and since_last_batch_ms < max_trigger_delay_ms
        ):
            cont_end = dict(cont_start)  # wait for more data, at most maxTriggerDelay
        elif max_rows is not None:
            cont_end = _offsets.rate_limit(cont_start, cont_end, max_rows)
        end.update(cont_end)
    return TriggerEnd(end=end, continuing=cont, target=target)
