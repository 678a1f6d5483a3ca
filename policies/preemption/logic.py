"""Pure rules of preemption, as the seeds define them (Pod Priority and Preemption).

* Only pods of *lower* priority than the preemptor are ever victims; no cross-node preemption.
* On a node: remove every lower-priority pod; if the preemptor still does not fit, the node is no
  candidate. Otherwise put them back, most important first, keeping each one that still lets the
  preemptor fit: the rest are the victims (the smallest set of the least important pods).
* Pods whose eviction would violate a PodDisruptionBudget are put back first (victims only when
  nothing else makes room), and candidate nodes with fewer violations are preferred.
* Pods leaving already (deleting, or evicted) are put back last: they are the victims that cost
  nothing (no eviction; what they free is free anyway), so they are counted on before any pod
  is evicted, and only when needed.
* Among candidate nodes, by the pods evicted now: the one whose most important victim has the
  lowest priority (a node where leaving pods alone make room first); then the lowest sum of
  victim priorities; then the fewest victims; then the node whose earliest-started victim of
  the highest victim priority started latest (least work lost; a victim with no
  ``status.startTime`` counts as started now, as kube-scheduler's ``GetEarliestPodStartTime``
  and ``GetPodStartTime`` count them); then the name, so the choice is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Callable, Sequence

from extender.framework.eviction import leaving, preemption_rank
from extender.framework.views import NodeInfo, PodInfo


def importance(p: PodInfo) -> tuple[int, str, str]:
    """Sort key, most important first: higher priority, then earlier start."""
    return (-p.priority, p.start_time or "~", p.key)


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]
    """The pods to evict (none when the ``waits`` alone make room)."""
    pdb_violations: int = 0
    waits: tuple[PodInfo, ...] = ()
    """Victims leaving already: counted on, not evicted."""

    def rank(self, now: float) -> tuple[int, int, int, int, float, str]:
        """The sort key of kube-scheduler's ``pickOneNodeForPreemption`` (best first), by the
        pods evicted now: ``eviction.preemption_rank`` (fewest budget violations, lowest most
        important victim, lowest sum of priorities, fewest victims, latest start of the earliest
        victim of that highest priority; ``now``: wall-clock seconds, the start of a victim that
        has none), then the name."""
        return (*preemption_rank(self.victims, self.pdb_violations, now), self.node)


def victims_on(node: NodeInfo, preemptor: PodInfo, fits: Callable[[NodeInfo], bool],
               generation: Callable[[], int], protected: AbstractSet[str] = frozenset(),
               going: AbstractSet[str] = frozenset()) -> Candidate | None:
    """The candidate ``node`` is for ``preemptor``, or None when no eviction of lower-priority pods
    helps. ``fits`` runs the profile's filters on a simulated NodeInfo (counting what is held for
    nominated pods, as kube-scheduler's dry run does); ``generation`` numbers the simulated
    NodeInfos (never cached). Pods in ``protected`` (their eviction would violate a
    PodDisruptionBudget once the more important lower-priority pods' evictions have spent its
    allowance: ``Handle.pdb_violations`` over them all, by ``importance``) are put back first, so
    they are victims only when nothing else makes room; lower-priority pods leaving already -
    deleting, or in ``going`` (evicted, not shown deleting yet) - last, so that they are counted on
    (``Candidate.waits``) before any pod is evicted, and only when needed. What they free is no
    earlier preemptor's to keep from a pod that outranks it: the earlier preemptor's nomination is
    counted by ``fits`` against pods of its priority or lower. ``pdb_violations`` is left for the
    caller to count."""
    lower = [p for p in node.pods.values() if p.priority < preemptor.priority]
    if not lower:
        return None
    sim = node
    for p in lower:
        sim = sim.without_pod(p.uid, generation())
    if not fits(sim):
        return None
    victims: list[PodInfo] = []
    for p in sorted(lower, key=lambda p: (leaving(p, going), p.uid not in protected, importance(p))):
        trial = sim.with_pod(p, generation())
        if fits(trial):
            sim = trial
        else:
            victims.append(p)
    if not victims:
        return None
    return Candidate(node.name, tuple(v for v in victims if not leaving(v, going)),
                     waits=tuple(v for v in victims if leaving(v, going)))


def pick(candidates: Sequence[Candidate], now: float) -> Candidate | None:
    """The best of ``candidates`` by ``Candidate.rank`` (``now``: see there); None if none."""
    return min(candidates, key=lambda c: c.rank(now)) if candidates else None
