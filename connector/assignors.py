"""Partition assignors for ZooKeeper consumer groups: ``range``, ``roundrobin`` and ``sticky``.

Every assignor is a pure, deterministic function with one interface (chosen by Kafka's
``partition.assignment.strategy``)::

    assign(strategy, members, partitions, owned=None) -> {member_id: sorted [(topic, partition)]}

* ``members``: ``{member_id: set of subscribed topics}`` (every member of the group).
* ``partitions``: ``{topic: number of partitions}``; partition ids are ``0 .. n-1``.  Subscribed
  topics missing from it (not created yet) or with 0 partitions are ignored.
* ``owned``: ``{member_id: [(topic, partition), ...]}``, the current owners (the partition owner
  registry); only ``sticky`` uses it.  Stale entries (departed members, topics no longer
  subscribed, partitions that no longer exist, a partition claimed twice) are ignored.

The result has one entry per member (possibly empty) and assigns every partition of every
subscribed topic exactly once, to a member subscribed to its topic.  Because the inputs are sorted
inside, every member of a group computes the same answer from the same registry contents, so
ZooKeeper groups need no leader.

Strategies
----------
``range``
    The seed's algorithm, per topic: the topic's partitions sorted, the members subscribed to it
    sorted, member ``i`` gets a contiguous range; with ``P`` partitions and ``C`` members each gets
    ``P // C`` and the first ``P % C`` members one extra.
``roundrobin``
    Kafka's RoundRobinAssignor: all subscribed topic-partitions sorted by (topic, partition), members
    sorted, partitions dealt round robin, skipping members not subscribed to the partition's topic.
``sticky``
    KAFKA-9987's constrained algorithm when every member has the same subscription: each member keeps
    what it owned up to its quota (``floor(P/N)``, or ``ceil(P/N)`` for at most ``P mod N`` members),
    the rest is dealt in partition-major order (t0-p0, t1-p0, ..., t0-p1, ...) to the members below
    quota; the result is balanced within one.  When subscriptions differ, a general fallback keeps
    valid owned partitions, gives each unowned partition (topics with the fewest subscribers first)
    to the least-loaded subscribed member, then moves partitions from a member to a subscribed
    member with at least two fewer until no such move exists (Kafka's notion of "balanced"),
    moving newly placed partitions before previously owned ones.

Partitions are handled as integer ids (topics sorted, ``id = base[topic] + partition``) so large
groups (a million partitions) are assigned in about a second; see ``bench/bench_assignors.py``.

All functions are pure and thread-safe.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from itertools import repeat

from pyklog.broker.errors import ConfigError

TopicPartition = tuple  # (topic: str, partition: int)

STRATEGIES = ("range", "roundrobin", "sticky")


def assign(
    strategy: str,
    members: Mapping[str, Iterable[str]],
    partitions: Mapping[str, int],
    owned: Mapping[str, Iterable[TopicPartition]] | None = None,
) -> dict[str, list[TopicPartition]]:
    """Assign the partitions of ``partitions`` to ``members`` with ``strategy`` (see the module doc)."""
    fn = _ASSIGNORS.get(strategy)
    if fn is None:
        raise ConfigError(f"partition.assignment.strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    member_ids, subs, counts = _normalize(members, partitions)
    return fn(member_ids, subs, counts, owned or {})


def range_assign(members, partitions, owned=None):
    return assign("range", members, partitions, owned)


def roundrobin_assign(members, partitions, owned=None):
    return assign("roundrobin", members, partitions, owned)


def sticky_assign(members, partitions, owned=None):
    return assign("sticky", members, partitions, owned)


def sticky_general_assign(members, partitions, owned=None):
    """The sticky assignor's general path (for differing subscriptions) on any input, even one
    ``sticky`` would give its constrained path: the same contract as :func:`sticky_assign`, for
    ``bench/bench_assignors.py`` to time the two paths on the same groups."""
    member_ids, subs, counts = _normalize(members, partitions)
    return _sticky_general(member_ids, subs, counts, owned or {})


# ----------------------------------------------------------------------------------------------
# input normalisation


def _normalize(members, partitions):
    """Sorted member ids, {member: frozenset(topics that exist)}, {topic: n > 0}."""
    counts: dict[str, int] = {}
    for topic, n in partitions.items():
        if not isinstance(topic, str):
            raise TypeError(f"topic names must be str; got {topic!r}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"partition count of topic {topic!r} must be an int >= 0; got {n!r}")
        if n:
            counts[topic] = n
    member_ids = sorted(members)
    subs: dict[str, frozenset] = {}
    cache: dict[frozenset, frozenset] = {}
    for m in member_ids:
        topics = members[m]
        if isinstance(topics, str):
            raise TypeError(f"subscription of member {m!r} must be a collection of topics, not the string {topics!r}")
        key = topics if isinstance(topics, frozenset) else frozenset(topics)
        s = cache.get(key)
        if s is None:
            s = frozenset(t for t in key if t in counts)
            cache[key] = s
        subs[m] = s
    return member_ids, subs, counts


def _subscription_groups(member_ids, subs):
    """{frozenset(topics): sorted [member ids]} (member_ids is sorted, so the lists are too)."""
    groups: dict[frozenset, list[str]] = {}
    for m in member_ids:
        groups.setdefault(subs[m], []).append(m)
    return groups


def _members_by_topic(member_ids, subs):
    """{topic: sorted [member ids subscribed to it]}, sharing lists between equal subscriptions."""
    groups = _subscription_groups(member_ids, subs)
    by_topic: dict[str, list[str]] = {}
    shared: dict[str, bool] = {}
    for topics, ms in groups.items():
        for t in topics:
            cur = by_topic.get(t)
            if cur is None:
                by_topic[t] = ms
                shared[t] = True
            else:
                if shared[t]:
                    cur = list(cur)
                    shared[t] = False
                cur.extend(ms)
                by_topic[t] = cur
    for t, was_shared in shared.items():
        if not was_shared:
            by_topic[t].sort()
    return by_topic


# ----------------------------------------------------------------------------------------------
# range


def _range(member_ids, subs, counts, owned):
    result: dict[str, list] = {m: [] for m in member_ids}
    by_topic = _members_by_topic(member_ids, subs)
    for t in sorted(by_topic):
        consumers = by_topic[t]
        n = counts[t]
        q, r = divmod(n, len(consumers))
        if q == 0:
            for i in range(r):
                result[consumers[i]].append((t, i))
            continue
        start = 0
        for i, m in enumerate(consumers):
            end = start + q + (1 if i < r else 0)
            if end - start == 1:
                result[m].append((t, start))
            else:
                result[m].extend(zip(repeat(t), range(start, end)))
            start = end
    return result


# ----------------------------------------------------------------------------------------------
# roundrobin


def _roundrobin(member_ids, subs, counts, owned):
    result: dict[str, list] = {m: [] for m in member_ids}
    consumers = [m for m in member_ids if subs[m]]
    if not consumers:
        return result
    topics = sorted(set().union(*(subs[m] for m in consumers)))
    all_tp: list = []
    for t in topics:
        all_tp.extend(zip(repeat(t), range(counts[t])))
    c = len(consumers)
    first = subs[consumers[0]]
    if all(subs[m] is first or subs[m] == first for m in consumers):
        # same subscription: partition k goes to consumer k mod C
        for i, m in enumerate(consumers):
            result[m] = all_tp[i::c]
        return result
    i = 0
    for tp in all_tp:
        t = tp[0]
        while t not in subs[consumers[i]]:
            i += 1
            if i == c:
                i = 0
        result[consumers[i]].append(tp)
        i += 1
        if i == c:
            i = 0
    return result


# ----------------------------------------------------------------------------------------------
# sticky


class _Ids:
    """Integer ids for the partitions of ``topics`` (sorted): id = base[topic] + partition."""

    __slots__ = ("topics", "base", "counts", "total", "_all")

    def __init__(self, topics, counts):
        self.topics = topics
        self.base = {}
        self.counts = counts
        pos = 0
        for t in topics:
            self.base[t] = pos
            pos += counts[t]
        self.total = pos
        self._all = None

    def id_of(self, tp):
        """The id of ``tp``, or -1 when its topic is not among ``topics`` or the partition does not exist."""
        try:
            t, p = tp
        except (TypeError, ValueError):
            return -1
        b = self.base.get(t)
        if b is None or p.__class__ is not int or p < 0 or p >= self.counts[t]:
            return -1
        return b + p

    def all_tp(self):
        if self._all is None:
            tps: list = []
            for t in self.topics:
                tps.extend(zip(repeat(t), range(self.counts[t])))
            self._all = tps
        return self._all

    def to_tps(self, ids):
        tps = self.all_tp()
        ids.sort()
        return list(map(tps.__getitem__, ids))

    def unassigned_in_partition_major_order(self, assigned: bytearray, n_free: int):
        """Ids whose ``assigned`` byte is 0, in partition-major order."""
        if n_free * 8 >= self.total:
            return [i for i in self.partition_major_order() if not assigned[i]]
        free = []
        find = assigned.find
        i = find(0)
        while i >= 0:
            free.append(i)
            i = find(0, i + 1)
        return self.sort_partition_major(free)

    def sort_partition_major(self, some_ids):
        """``some_ids`` sorted in partition-major order (t0-p0, t1-p0, ..., t0-p1, ...)."""
        starts = [self.base[t] for t in self.topics]

        def key(i):
            ti = bisect_right(starts, i) - 1
            return (i - starts[ti], ti)

        some_ids.sort(key=key)
        return some_ids

    def partition_major_order(self):
        """All ids in the order t0-p0, t1-p0, ..., t0-p1, t1-p1, ... (KAFKA-9987, for data parallelism)."""
        bases = [self.base[t] for t in self.topics]
        ns = [self.counts[t] for t in self.topics]
        n0 = ns[0]
        if all(n == n0 for n in ns):
            return [b + p for p in range(n0) for b in bases]
        pairs = list(zip(bases, ns))
        out = []
        for p in range(max(ns)):
            out.extend([b + p for b, n in pairs if p < n])
        return out


def _sticky(member_ids, subs, counts, owned):
    consumers = [m for m in member_ids if subs[m]]
    if not consumers:
        return {m: [] for m in member_ids}
    first = subs[consumers[0]]
    if len(consumers) == len(member_ids) and all(subs[m] is first or subs[m] == first for m in consumers):
        return _sticky_constrained(member_ids, first, counts, owned)
    return _sticky_general(member_ids, subs, counts, owned)


def _valid_owned(ids: _Ids, member_ids, owned, allowed=None):
    """{member index: sorted [ids]} of owned partitions that still exist (and, when ``allowed`` is
    given, whose topic the member subscribes to); a partition claimed by several members stays with
    the first in member order."""
    seen: set = set()
    out: dict[int, list[int]] = {}
    bn = {t: (b, ids.counts[t]) for t, b in ids.base.items()}
    for mi, m in enumerate(member_ids):
        tps = owned.get(m)
        if not tps:
            continue
        sub = allowed[m] if allowed is not None else None
        try:  # fast path: well-formed (topic, int) pairs of known topics
            if sub is None:
                got = {b_n[0] + p for t, p in tps if 0 <= p < (b_n := bn[t])[1]}
            else:
                got = {b_n[0] + p for t, p in tps if t in sub and 0 <= p < (b_n := bn[t])[1]}
        except (KeyError, TypeError, ValueError):
            got = set()
            for tp in tps:
                i = ids.id_of(tp)
                if i >= 0 and (sub is None or tp[0] in sub):
                    got.add(i)
        got.discard(-1)
        if seen:
            got -= seen
        if got:
            seen |= got
            out[mi] = sorted(got)
    return out


def _sticky_constrained(member_ids, topics, counts, owned):
    """KAFKA-9987: every member subscribes to the same topics."""
    ids = _Ids(sorted(topics), counts)
    total = ids.total
    n_members = len(member_ids)
    min_quota, extra = divmod(total, n_members)
    max_quota = min_quota + (1 if extra else 0)
    over_left = extra  # members that may still hold max_quota (> min_quota)
    assigned_ids: list[list[int]] = [[] for _ in member_ids]
    pool = None
    if owned:
        valid = _valid_owned(ids, member_ids, owned)
        n_valid = 0
        excess: list[int] = []  # owned beyond the member's quota: back to the pool
        for mi, own in valid.items():
            n = len(own)
            n_valid += n
            if n >= max_quota and over_left and max_quota > min_quota:
                cap = max_quota
                over_left -= 1
            else:
                cap = min_quota
            if n > cap:
                excess.extend(own[cap:])
                own = own[:cap]
            assigned_ids[mi] = own
        if n_valid == total:  # every partition had an owner: the pool is what members gave up
            pool = ids.sort_partition_major(excess)
        elif n_valid:
            assigned = bytearray(total)
            n_assigned = 0
            for own in assigned_ids:
                n_assigned += len(own)
                for i in own:
                    assigned[i] = 1
            pool = ids.unassigned_in_partition_major_order(assigned, total - n_assigned)
    if pool is None:
        pool = ids.partition_major_order()

    # fill every member up to min_quota, in member order, with contiguous slices of the pool
    pos = 0
    for mi in range(n_members):
        have = len(assigned_ids[mi])
        if have < min_quota:
            need = min_quota - have
            if have:
                assigned_ids[mi].extend(pool[pos : pos + need])
            else:
                assigned_ids[mi] = pool[pos : pos + need]
            pos += need
    # the remaining partitions (exactly ``over_left`` of them): one more each to members at min_quota
    if pos < len(pool):
        for mi in range(n_members):
            if pos >= len(pool):
                break
            if len(assigned_ids[mi]) == min_quota:
                assigned_ids[mi].append(pool[pos])
                pos += 1
    if pos != len(pool):  # cannot happen: the quotas add up to ``total``
        raise AssertionError(f"sticky assignor left {len(pool) - pos} of {total} partitions unassigned")
    return {m: ids.to_tps(assigned_ids[mi]) for mi, m in enumerate(member_ids)}


def _sticky_general(member_ids, subs, counts, owned):
    """Subscriptions differ: keep owned, place the rest on the least loaded, then balance."""
    topics = sorted(set().union(*subs.values()))
    ids = _Ids(topics, counts)
    n_members = len(member_ids)
    count = [0] * n_members
    # held[mi][topic] = set of ids; orig[mi] = ids owned before (to prefer moving other ones)
    held: list[dict[str, set]] = [{} for _ in member_ids]
    topic_of = []  # id -> topic
    for t in topics:
        topic_of.extend(repeat(t, counts[t]))
    assigned = bytearray(ids.total)
    orig: dict[int, set] = {}
    if owned:
        valid = _valid_owned(ids, member_ids, owned, allowed=subs)
        for mi, own in valid.items():
            orig[mi] = set(own)
            h = held[mi]
            for i in own:
                h.setdefault(topic_of[i], set()).add(i)
                assigned[i] = 1
            count[mi] = len(own)

    eligible: dict[str, list[int]] = {t: [] for t in topics}
    for mi, m in enumerate(member_ids):
        for t in subs[m]:
            eligible[t].append(mi)

    # place unowned partitions, topics with the fewest subscribers first, on the least loaded member
    for t in sorted(topics, key=lambda t: (len(eligible[t]), t)):
        b = ids.base[t]
        free = [b + p for p in range(counts[t]) if not assigned[b + p]]
        if not free:
            continue
        heap = [(count[mi], mi) for mi in eligible[t]]
        heapq.heapify(heap)
        for i in free:
            c, mi = heap[0]
            held[mi].setdefault(t, set()).add(i)
            count[mi] = c + 1
            heapq.heapreplace(heap, (c + 1, mi))

    # balance: move a partition of t from a holder to a subscriber of t with >= 2 fewer partitions
    changed = True
    while changed:
        changed = False
        for t in topics:
            elig = eligible[t]
            if len(elig) < 2:
                continue
            while True:
                lo = min(elig, key=count.__getitem__)
                hi = -1
                hi_count = -1
                for mi in elig:
                    if count[mi] > hi_count and held[mi].get(t):
                        hi, hi_count = mi, count[mi]
                if hi < 0 or hi_count - count[lo] < 2:
                    break
                mine = held[hi][t]
                was = orig.get(hi, ())
                new = [i for i in mine if i not in was]
                i = min(new) if new else min(mine)
                mine.discard(i)
                held[lo].setdefault(t, set()).add(i)
                count[hi] -= 1
                count[lo] += 1
                changed = True
    result = {}
    for mi, m in enumerate(member_ids):
        lst = []
        for s in held[mi].values():
            lst.extend(s)
        result[m] = ids.to_tps(lst)
    return result


_ASSIGNORS = {"range": _range, "roundrobin": _roundrobin, "sticky": _sticky}
