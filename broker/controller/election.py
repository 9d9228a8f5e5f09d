"""Leader election algorithms, as Kafka's ``PartitionLeaderElectionAlgorithms`` (ZooKeeper mode).

Pure functions: assignment order, ISR and live brokers in, the new leader (or None) out.  The
controller (:mod:`pyklog.broker.controller.controller`) reads the partition state znodes, calls
these, and writes the result conditionally.  Thread-safe (stateless).

* offline partition (a leader died, or the partition had none): the first replica in assignment
  order that is live and in the ISR; with unclean leader election allowed, failing that, the first
  live replica (out of the ISR: records the old leader acknowledged may be lost).
* reassignment: the first replica of the *target* assignment that is live and in the ISR.
* preferred replica: the first replica of the assignment, if it is live and in the ISR.
* controlled shutdown: the first replica in assignment order that is live, in the ISR and not
  shutting down.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Election(NamedTuple):
    leader: int | None  # None: no replica can lead
    unclean: bool = False  # elected from outside the ISR


def offline_partition_leader(
    assignment: Iterable[int], isr: Iterable[int], live: Iterable[int], *, unclean_allowed: bool = False
) -> Election:
    """Kafka's ``offlinePartitionLeaderElection``."""
    isr, live = set(isr), set(live)
    for r in assignment:
        if r in live and r in isr:
            return Election(r)
    if unclean_allowed:
        for r in assignment:
            if r in live:
                return Election(r, unclean=True)
    return Election(None)


def reassign_partition_leader(reassignment: Iterable[int], isr: Iterable[int], live: Iterable[int]) -> Election:
    """Kafka's ``reassignPartitionLeaderElection``: from the target replicas only."""
    isr, live = set(isr), set(live)
    for r in reassignment:
        if r in live and r in isr:
            return Election(r)
    return Election(None)


def preferred_replica_leader(assignment: list[int], isr: Iterable[int], live: Iterable[int]) -> Election:
    """Kafka's ``preferredReplicaPartitionLeaderElection``."""
    if assignment and assignment[0] in set(live) and assignment[0] in set(isr):
        return Election(assignment[0])
    return Election(None)


def controlled_shutdown_leader(
    assignment: Iterable[int], isr: Iterable[int], live: Iterable[int], shutting_down: Iterable[int]
) -> Election:
    """Kafka's ``controlledShutdownPartitionLeaderElection``."""
    isr, live, down = set(isr), set(live), set(shutting_down)
    for r in assignment:
        if r in live and r in isr and r not in down:
            return Election(r)
    return Election(None)


def imbalanced_brokers(leaders: dict, assignments: dict, percentage: int) -> dict[int, list]:
    """Kafka's ``checkAndTriggerAutoLeaderRebalance`` arithmetic: ``{preferred broker: [partitions it
    should lead but does not]}`` for each broker whose ratio of such partitions to the partitions it
    is preferred for exceeds ``percentage`` percent.  ``leaders``/``assignments``: ``{tp: leader}``
    and ``{tp: [replicas]}``."""
    by_broker: dict[int, list] = {}
    for tp, replicas in assignments.items():
        if replicas:
            by_broker.setdefault(replicas[0], []).append(tp)
    out = {}
    for broker, tps in sorted(by_broker.items()):
        not_led = sorted(tp for tp in tps if leaders.get(tp) != broker)
        if tps and len(not_led) / len(tps) > percentage / 100.0:
            out[broker] = not_led
    return out
