"""Pure rules of preemption, as the seeds define them (Pod Priority and Preemption).

* Only pods of *lower* priority than the preemptor are ever victims; no cross-node preemption.
* On a node: remove every lower-priority pod; if the preemptor still does not fit, the node is no
  candidate. Otherwise put them back, most important first, keeping each one that still lets the
  preemptor fit: the rest are the victims (the smallest set of the least important pods).
  Pods leaving already (deleting, or evicted) are never put back: they cost no new eviction.
* Pods whose eviction would violate a PodDisruptionBudget are put back first (victims only when
  nothing else makes room), and candidate nodes with fewer violations are preferred.
* Among candidate nodes: the one whose most important victim has the lowest priority; then the
  lowest sum of victim priorities; then the fewest victims; then the node whose earliest-started
  victim started latest (least work lost); then the name, so the choice is deterministic.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Callable, Sequence

from extender.framework.eviction import leaving
from extender.framework.views import NodeInfo, PodInfo


def importance(p: PodInfo) -> tuple[int, str, str]:
    """Sort key, most important first: higher priority, then earlier start."""
    return (-p.priority, p.start_time or "~", p.key)


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]
    pdb_violations: int = 0

    def rank(self) -> tuple[int, int, int, int, str, str]:
        top = max(v.priority for v in self.victims)
        total = sum(v.priority for v in self.victims)
        earliest = min((v.start_time for v in self.victims if v.start_time), default="")
        return (self.pdb_violations, top, total, len(self.victims), _later_first(earliest), self.node)


def _later_first(ts: str) -> str:
    """Sort key putting later times first; an unknown time sorts last."""
    return "".join(chr(0x10FFFF - ord(c)) for c in ts) if ts else "\U0010FFFF"


def victims_on(node: NodeInfo, preemptor: PodInfo, fits: Callable[[NodeInfo], bool],
               generation: Callable[[], int], protected: AbstractSet[str] = frozenset(),
               going: AbstractSet[str] = frozenset()) -> tuple[PodInfo, ...] | None:
    """The victims needed on ``node`` for ``preemptor`` to fit, or None when no eviction of
    lower-priority pods helps. ``fits`` runs the profile's filters on a simulated NodeInfo
    (counting what is held for nominated pods, as kube-scheduler's dry run does);
    ``generation`` numbers the simulated NodeInfos (never cached). Pods in ``protected`` (their
    eviction would violate a PodDisruptionBudget) are put back first, so they are victims only
    when nothing else makes room. Lower-priority pods leaving already - deleting, or in
    ``going`` (evicted, not shown deleting yet) - are never put back: they are victims whenever
    the node is a candidate (``eviction.leaving`` tells them apart; evicting them again is not
    needed).
    What they free is no earlier preemptor's to keep from a pod that outranks it: the earlier
    preemptor's nomination is counted by ``fits`` against pods of its priority or lower."""
    lower = [p for p in node.pods.values() if p.priority < preemptor.priority]
    if not lower:
        return None
    sim = node
    for p in lower:
        sim = sim.without_pod(p.uid, generation())
    if not fits(sim):
        return None
    victims = [p for p in lower if leaving(p, going)]
    for p in sorted((p for p in lower if not leaving(p, going)), key=lambda p: (p.uid not in protected, importance(p))):
        trial = sim.with_pod(p, generation())
        if fits(trial):
            sim = trial
        else:
            victims.append(p)
    return tuple(victims) if victims else None


def pick(candidates: Sequence[Candidate]) -> Candidate | None:
    return min(candidates, key=Candidate.rank) if candidates else None
