"""A trigger's end offsets from what the planner's look-ups returned
(:func:`pyklog.connector.spark.end_offsets.plan_end_offsets`): pure, no server."""

from __future__ import annotations

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from pyklog.connector.spark.end_offsets import TriggerEnd, plan_end_offsets, start_of_owned_partition

A0, A1, B0 = ("a", 0), ("a", 1), ("b", 0)


def plan(
    start,
    owned,
    latest,
    new=None,
    restarting=(),
    *,
    target=None,
    limit=None,
    max_rows=None,
    min_rows=None,
    delay_ms=0,
    since_ms=0.0,
) -> TriggerEnd:
    return plan_end_offsets(
        start,
        owned,
        latest,
        new or {},
        set(restarting),
        target=target,
        limit=limit,
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=delay_ms,
        since_last_batch_ms=since_ms,
    )


def test_continuing_partitions_advance_new_ones_start_restarting_ones_wait():
    got = plan({A0: 5, A1: 7, ("gone", 0): 3}, {A0, A1, B0}, {A0: 10, A1: 7}, {B0: 4}, restarting={A1})
    assert got.end == {A0: 10, B0: 4}
    assert list(got.end) == [A0, B0]  # the continuing partitions, then the new ones
    assert got.continuing == [A0] and got.target is None
    assert got.advanced({A0: 5, A1: 7}) is True
    still = plan({A0: 10}, {A0}, {A0: 10})
    assert still.end == {A0: 10} and still.advanced({A0: 10}) is False


def test_new_partition_only_is_not_an_advance():
    got = plan({A0: 10}, {A0, B0}, {A0: 10}, {B0: 0})
    assert got.end == {A0: 10, B0: 0} and got.continuing == [A0] and not got.advanced({A0: 10})


def test_available_now_never_goes_beyond_the_target_and_learns_new_continuing_partitions():
    target = {A0: 8}
    got = plan({A0: 5, A1: 2}, {A0, A1}, {A0: 20, A1: 6}, target=target, limit=ReadAllAvailable())
    assert got.end == {A0: 8, A1: 6}
    assert got.target == {A0: 8, A1: 6}
    assert target == {A0: 8}  # the caller's dict is not changed; the new one is returned
    # a target below the start (records removed meanwhile): the partition stays where it is
    assert plan({A0: 9}, {A0}, {A0: 20}, target={A0: 8}).end == {A0: 9}


def test_max_rows_shares_the_limit_over_the_continuing_partitions_only():
    got = plan({A0: 0, A1: 0}, {A0, A1, B0}, {A0: 100, A1: 300}, {B0: 50}, limit=ReadMaxRows(40))
    assert got.end == {A0: 10, A1: 30, B0: 50}
    # the option applies when Spark's limit is another kind
    got = plan({A0: 0}, {A0}, {A0: 100}, limit=ReadMinRows(1), max_rows=25, delay_ms=0)
    assert got.end == {A0: 25}
    assert plan({A0: 0}, {A0}, {A0: 100}, limit=ReadAllAvailable(), max_rows=25).end == {A0: 100}
    assert plan({A0: 0}, {A0}, {A0: 100}, limit=None, max_rows=25).end == {A0: 100}


def test_min_rows_waits_for_more_data_at_most_max_trigger_delay():
    waits = plan({A0: 0}, {A0}, {A0: 5}, limit=ReadMinRows(10), delay_ms=1000, since_ms=200.0)
    assert waits.end == {A0: 0} and not waits.advanced({A0: 0})
    late = plan({A0: 0}, {A0}, {A0: 5}, limit=ReadMinRows(10), delay_ms=1000, since_ms=1500.0)
    assert late.end == {A0: 5}
    enough = plan({A0: 0}, {A0}, {A0: 12}, limit=ReadMinRows(10), delay_ms=1000, since_ms=0.0)
    assert enough.end == {A0: 12}
    nothing = plan({A0: 0}, {A0}, {A0: 0}, limit=ReadMinRows(10), delay_ms=1000)
    assert nothing.end == {A0: 0}
    # Trigger.AvailableNow never waits
    assert plan({A0: 0}, {A0}, {A0: 5}, target={A0: 5}, limit=ReadMinRows(10), delay_ms=1000).end == {A0: 5}


def test_a_partition_owned_again_never_starts_behind_the_query_position():
    # the group's commit lags the query (it could not be written during a ZooKeeper outage)
    assert start_of_owned_partition(742, 4098, 0) == 4098
    assert start_of_owned_partition(None, 4098, 0) == 4098
    # another member advanced the partition meanwhile: resume where it committed
    assert start_of_owned_partition(5000, 4098, 0) == 5000
    # never read in this process: the group's commit, else the earliest offset
    assert start_of_owned_partition(742, None, 0) == 742
    assert start_of_owned_partition(None, None, 7) == 7
