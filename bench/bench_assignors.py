"""Assignor benchmark: range / roundrobin / sticky at KAFKA-9987's scales.

    .venv/bin/python bench/bench_assignors.py [--repeat 3] [--quick]

Scales:
* 2,100 consumers x 2,100 partitions (one topic): KAFKA-9987 reports 2.5 minutes for the old
  general sticky algorithm; goal <= 50 ms.
* 2,000 consumers x 500 topics x 2,000 partitions (1,000,000 partitions): Java's constrained
  assignor takes ~1.4 s; goal <= 1.4 s.

Each is measured fresh (no owners) and with prior ownership (the sticky path): ``steady`` = the same
members re-assigning with their current partitions as owned, ``join`` = one member joined a group
whose owners came from the previous assignment.  The baseline measured in the same run is pyklog's
general sticky path (what runs when subscriptions differ: place on the least loaded, then balance),
forced on the same inputs, i.e. the algorithm KAFKA-9987 replaces for equal subscriptions.
Figures are the best of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

from pyklog.connector import assignors  # noqa: E402
from pyklog.connector.assignors import assign  # noqa: E402


def best(fn, repeat):
    times = []
    result = None
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return min(times), result


def general_sticky(members, partitions, owned):
    """The general path on inputs that would take the constrained one."""
    return assignors.sticky_general_assign(members, partitions, owned)


def fmt(s):
    return f"{s * 1000:9.1f} ms" if s < 10 else f"{s:9.2f} s "


def run_scale(name, n_members, topics, repeat, goal_s, baseline=True):
    members = {f"consumer-{i:05d}": topics.keys() for i in range(n_members)}
    members = {m: frozenset(t) for m, t in members.items()}
    total = sum(topics.values())
    print(
        f"\n== {name}: {n_members:,} consumers, {len(topics):,} topics, {total:,} partitions "
        f"(goal <= {fmt(goal_s).strip()}) =="
    )
    rows = []
    for strategy in ("range", "roundrobin", "sticky"):
        t, _ = best(lambda: assign(strategy, members, topics), repeat)
        rows.append((strategy, "fresh", t))
    _, prev = best(lambda: assign("sticky", members, topics), 1)
    t, again = best(lambda: assign("sticky", members, topics, prev), repeat)
    assert again == prev, "steady-state sticky must not move anything"
    rows.append(("sticky", "steady (owned = current)", t))
    smaller = dict(list(members.items())[:-1])
    before = assign("sticky", smaller, topics)
    t, joined = best(lambda: assign("sticky", members, topics, before), repeat)
    moved = sum(len(set(before[m]) - set(joined[m])) for m in smaller)
    rows.append(("sticky", f"join (1 new member, {moved:,} moved)", t))
    t, _ = best(lambda: assign("range", members, topics, before), repeat)
    rows.append(("range", "with owners (ignored)", t))
    for strategy, case, t in rows:
        ok = "ok" if t <= goal_s else "OVER GOAL"
        print(f"  {strategy:<10} {case:<34} {fmt(t)}   {ok}")
    if baseline:
        tb, _ = best(lambda: general_sticky(members, topics, None), 1)
        tc = min(t for s, c, t in rows if s == "sticky" and c == "fresh")
        print(f"  baseline: general sticky path, fresh            {fmt(tb)}   constrained is {tb / tc:.1f}x faster")
        tb2, _ = best(lambda: general_sticky(members, topics, before), 1)
        tj = next(t for s, c, t in rows if c.startswith("join"))
        print(f"  baseline: general sticky path, join             {fmt(tb2)}   constrained is {tb2 / tj:.1f}x faster")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="only the 2,100 x 2,100 scale")
    args = ap.parse_args(argv)
    print(f"python {sys.version.split()[0]}, best of {args.repeat}")
    run_scale("KAFKA-9987 report", 2100, {"topic": 2100}, args.repeat, 0.050)
    if not args.quick:
        run_scale("1M partitions", 2000, {f"topic-{i:03d}": 2000 for i in range(500)}, args.repeat, 1.4)


if __name__ == "__main__":
    main()
