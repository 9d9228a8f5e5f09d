"""Streaming offsets of the pyklog source: ``{"topic": {"partition": offset}}`` JSON dicts.

Spark stores the offsets a source returns as JSON text (the checkpoint's offset log) and decides
whether a trigger has new data by comparing that text: the same offsets with another key order
would make an empty micro-batch on every trigger.  So every offset dict is built here, with topics
sorted by name and partitions sorted by number, every time.

Meaning of a micro-batch ``(start, end)`` (both such dicts), which makes a replay deterministic:

* a partition in both reads ``[start[p], end[p])``;
* a partition only in ``end`` reads nothing in this batch: its entry records where the query
  starts reading it (a partition newly owned, at the group's committed offset), and the next batch
  reads from there;
* a partition only in ``start`` is not read any more (released to another group member, or its
  topic is gone).

Pure code, thread-safe.
"""

from __future__ import annotations

from pyklog.broker.errors import ConfigError

TopicPartition = tuple  # (topic: str, partition: int)


def to_json(offsets: dict) -> dict:
    """``{(topic, partition): offset}`` -> ``{"topic": {"partition": offset}}`` in sorted order."""
    out: dict = {}
    for (topic, partition), off in sorted(offsets.items(), key=lambda kv: (kv[0][0], int(kv[0][1]))):
        out.setdefault(topic, {})[str(int(partition))] = int(off)
    return out


def from_json(obj) -> dict:
    """Inverse of :func:`to_json` (accepts what json.loads gives back: string keys)."""
    if obj is None:
        return {}
    if not isinstance(obj, dict):
        raise ConfigError(f"pyklog offsets: expected a JSON object {{topic: {{partition: offset}}}}, read {obj!r}")
    out = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise ConfigError(f"pyklog offsets: expected {{partition: offset}} for topic {topic!r}, read {parts!r}")
        for p, off in parts.items():
            try:
                out[(topic, int(p))] = int(off)
            except (TypeError, ValueError):
                raise ConfigError(
                    f"pyklog offsets: expected integer partition and offset for topic {topic!r}, read {p!r}: {off!r}"
                ) from None
    return out


def ranges(start: dict, end: dict) -> list[tuple[str, int, int, int]]:
    """``[(topic, partition, from, until)]`` with rows to read in the batch ``(start, end)``
    (sorted; dict arguments as returned by :func:`from_json`)."""
    out = []
    for tp in sorted(end, key=lambda tp: (tp[0], tp[1])):
        if tp not in start:
            continue
        a, b = start[tp], end[tp]
        if b < a:
            raise ValueError(f"pyklog offsets: end offset {b} of {tp[0]}-{tp[1]} is before its start {a}")
        if b > a:
            out.append((tp[0], tp[1], a, b))
    return out


def split_ranges(
    rngs: list, min_partitions: int | None, max_records: int | None = None
) -> list[tuple[str, int, int, int]]:
    """Split offset ranges into Spark tasks as Spark's KafkaOffsetRangeCalculator does: first no
    task gets more than ``max_records`` offsets (``maxRecordsPerPartition``: a range of n offsets
    becomes ceil(n / max_records) nearly equal pieces), then, while there are fewer than
    ``min_partitions`` tasks, each range gets a share of ``min_partitions`` proportional to its
    size, at least one.  Pure; the same inputs always give the same pieces, in input order."""
    rngs = [r for r in rngs if r[3] > r[2]]
    if max_records:
        pieces = []
        for t, p, a, b in rngs:
            pieces.extend((t, p, lo, hi) for lo, hi in _even_split(a, b, -(-(b - a) // max_records)))
        rngs = pieces
    if not min_partitions or len(rngs) >= min_partitions or not rngs:
        return list(rngs)
    total = sum(b - a for _, _, a, b in rngs)
    out = []
    for t, p, a, b in rngs:
        size = b - a
        parts = max(int(size * min_partitions / total + 0.5), 1)  # half up, as Spark's Math.round
        out.extend((t, p, lo, hi) for lo, hi in _even_split(a, b, min(parts, size)))
    return out


def _even_split(a: int, b: int, parts: int):
    """``[a, b)`` in ``parts`` pieces whose sizes differ by at most one."""
    size = b - a
    for i in range(parts):
        lo = a + size * i // parts
        hi = a + size * (i + 1) // parts
        if hi > lo:
            yield lo, hi


def rate_limit(start: dict, latest: dict, limit: int) -> dict:
    """Advance each partition from ``start`` towards ``latest`` so that at most ``limit`` offsets
    are admitted in total, shared in proportion to what each partition has available.

    The split is exact (floor of each share, the remainder to the largest fractional parts, ties
    by partition order), so the same inputs always give the same offsets.
    """
    avail = {tp: max(latest[tp] - start[tp], 0) for tp in latest if tp in start}
    total = sum(avail.values())
    out = dict(latest)
    if total <= limit:
        return out
    keys = sorted(avail, key=lambda tp: (tp[0], tp[1]))
    shares = {}
    rema = []
    used = 0
    for tp in keys:
        num = avail[tp] * limit
        q, r = divmod(num, total)
        shares[tp] = q
        used += q
        rema.append((-r, tp[0], tp[1]))
    left = limit - used
    for _, t, p in sorted(rema)[:left]:
        shares[(t, p)] += 1
    for tp in keys:
        out[tp] = start[tp] + shares[tp]
    return out
