"""Pure rules of elastic quotas: the arithmetic per resource, the max and borrowing checks, what a
namespace lends, and whom a reclaim evicts. No I/O: the plugin hands in what the cluster holds.

Amounts are milli-units per resource name (``extender.framework.resources``); a namespace's use is
what its pods hold of the managed resources. With ``quotas`` the namespaces that have one:

* **max**: a namespace never uses more of a resource than its ``max`` (no max: no ceiling).
* **min and borrowing**: up to ``min`` a namespace needs nobody's leave. Beyond it, it borrows, and
  borrows only what other namespaces' guarantees leave unused: the use of all namespaces with a
  quota, plus the request, must stay within the sum of their ``min`` (for a resource some quota
  guarantees; one no quota guarantees is bounded by ``max`` alone - there is nothing to lend).
* **reclaim**: a pod that keeps its namespace within ``min`` may evict borrowers - pods of other
  namespaces above their ``min`` - whatever their priority, lowest priority first, never taking a
  namespace below its own ``min``. Inside one namespace, and for pods of namespaces without a
  quota, only lower priority is ever evicted. A pod beyond its namespace's ``min`` takes nothing
  from namespaces with a quota.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Callable, Iterable, Mapping, Sequence

from extender.framework.elastic_quota import QuotaSpec
from extender.framework.eviction import leaving, preemption_rank
from extender.framework.resources import format_milli
from extender.framework.views import PodInfo

Amounts = Mapping[str, int]


def add(into: dict[str, int], amounts: Amounts, sign: int = 1) -> None:
    for name, amount in amounts.items():
        into[name] = into.get(name, 0) + sign * amount


def total(parts: Iterable[Amounts]) -> dict[str, int]:
    out: dict[str, int] = {}
    for part in parts:
        add(out, part)
    return out


def _fmt(amount: int) -> str:
    return format_milli(amount)


def check(quotas: Mapping[str, QuotaSpec], used: Mapping[str, Amounts], namespace: str,
          demand: Amounts) -> str | None:
    """None when ``namespace`` may take ``demand`` on top of ``used`` (per namespace); else why
    not, with the numbers. A namespace without a quota is never limited."""
    quota = quotas.get(namespace)
    if quota is None:
        return None
    mine = used.get(namespace, {})
    asked = sorted(r for r, v in demand.items() if v > 0)
    for r in asked:
        after = mine.get(r, 0) + demand[r]
        if r in quota.max and after > quota.max[r]:
            return (f"namespace {namespace} would use {_fmt(after)} {r}, above its max {_fmt(quota.max[r])} "
                    f"(in use {_fmt(mine.get(r, 0))}, asking {_fmt(demand[r])})")
    for r in asked:
        after = mine.get(r, 0) + demand[r]
        guaranteed = sum(q.min.get(r, 0) for q in quotas.values())
        if after <= quota.min.get(r, 0) or not guaranteed:
            continue
        in_use = sum(used.get(ns, {}).get(r, 0) for ns in quotas)
        if in_use + demand[r] > guaranteed:
            return (f"namespace {namespace} would borrow {_fmt(after - quota.min.get(r, 0))} {r} beyond its min "
                    f"{_fmt(quota.min.get(r, 0))}, but only {_fmt(max(0, guaranteed - in_use))} of the namespaces' "
                    f"guaranteed {_fmt(guaranteed)} is unused (asking {_fmt(demand[r])})")
    return None


def within_min(quota: QuotaSpec | None, used: Amounts, demand: Amounts) -> bool:
    """Does ``demand`` keep the namespace within its guaranteed ``min`` on every resource asked?"""
    if quota is None:
        return False
    return all(used.get(r, 0) + v <= quota.min.get(r, 0) for r, v in demand.items() if v > 0)


@dataclass(frozen=True)
class Share:
    """What ``/debug/quota`` and the gauges show for one namespace and resource."""

    min: int | None
    max: int | None
    used: int
    borrowed: int
    """Use beyond ``min``."""
    lent: int
    """This namespace's share of what borrowers use: its unused guarantee, in proportion."""
    pending: int
    """Asked by its pods that wait (gated or not placed yet)."""


def shares(quotas: Mapping[str, QuotaSpec], used: Mapping[str, Amounts],
           pending: Mapping[str, Amounts]) -> dict[str, dict[str, Share]]:
    """Per namespace with a quota, per resource it names, uses or waits for: its Share. What is
    borrowed is lent by the namespaces under their ``min``, each in proportion to its unused part
    (rounded down)."""
    resources = sorted({r for q in quotas.values() for r in (*q.min, *q.max)}
                       | {r for ns in quotas for r in (*used.get(ns, {}), *pending.get(ns, {}))})
    out: dict[str, dict[str, Share]] = {ns: {} for ns in quotas}
    for r in resources:
        borrowed = {ns: max(0, used.get(ns, {}).get(r, 0) - q.min.get(r, 0)) for ns, q in quotas.items()}
        unused = {ns: max(0, q.min.get(r, 0) - used.get(ns, {}).get(r, 0)) for ns, q in quotas.items()}
        lending = min(sum(borrowed.values()), sum(unused.values()))
        pool = sum(unused.values())
        for ns, q in quotas.items():
            out[ns][r] = Share(q.min.get(r), q.max.get(r), used.get(ns, {}).get(r, 0), borrowed[ns],
                               unused[ns] * lending // pool if pool else 0, pending.get(ns, {}).get(r, 0))
    return out


# ---- reclaim ------------------------------------------------------------------------------------


def importance(p: PodInfo) -> tuple[int, str, str]:
    """Sort key, most important first: higher priority, then earlier start."""
    return (-p.priority, p.start_time or "~", p.key)


def may_evict(victim: PodInfo, preemptor: PodInfo, quotas: Mapping[str, QuotaSpec], reclaiming: bool) -> bool:
    """Is ``victim`` one ``preemptor`` may evict at all (the namespace's ``min`` is checked apart)?
    ``reclaiming``: the preemptor stays within its namespace's ``min``. Whether it is leaving
    already is the caller's to tell (``victims_on``)."""
    if victim.namespace == preemptor.namespace or victim.namespace not in quotas:
        return victim.priority < preemptor.priority
    if reclaiming:
        return True
    return preemptor.namespace not in quotas and victim.priority < preemptor.priority


class _Budget:
    """What evictions may still take from each namespace with a quota without taking it below
    its ``min`` (the preemptor's own namespace is bound by priority alone)."""

    def __init__(self, preemptor: PodInfo, quotas: Mapping[str, QuotaSpec], used: Mapping[str, Amounts]) -> None:
        self.preemptor, self.quotas, self.used = preemptor, quotas, used
        self.taken: dict[str, dict[str, int]] = {}

    def take(self, p: PodInfo) -> bool:
        """Take ``p`` if its namespace stays at or above its ``min`` on every resource it holds."""
        quota = self.quotas.get(p.namespace)
        if quota is not None and p.namespace != self.preemptor.namespace:
            mine, gone = self.used.get(p.namespace, {}), self.taken.get(p.namespace, {})
            if any(mine.get(r, 0) - gone.get(r, 0) - v < quota.min.get(r, 0) for r, v in p.requests.items() if v > 0):
                return False
        add(self.taken.setdefault(p.namespace, {}), p.requests)
        return True


def allowed_victims(pods: Iterable[PodInfo], preemptor: PodInfo, quotas: Mapping[str, QuotaSpec],
                    used: Mapping[str, Amounts], reclaiming: bool) -> list[PodInfo]:
    """Of ``pods`` (proposed victims), those the quotas let ``preemptor`` evict together, taken
    lowest priority first."""
    budget = _Budget(preemptor, quotas, used)
    return [p for p in sorted(pods, key=importance, reverse=True)
            if may_evict(p, preemptor, quotas, reclaiming) and budget.take(p)]


def victims_on(pods: Iterable[PodInfo], preemptor: PodInfo, quotas: Mapping[str, QuotaSpec],
               used: Mapping[str, Amounts], reclaiming: bool, fits: Callable[[Sequence[PodInfo]], bool],
               protected: AbstractSet[str] = frozenset(),
               going: AbstractSet[str] = frozenset()) -> tuple[PodInfo, ...] | None:
    """The victims on one node that make ``preemptor`` fit - the pods to evict, and the pods
    leaving already it counts on (``eviction.leaving`` tells them apart) -, or None when no
    allowed eviction makes room. Pods it may evict (``may_evict``) go lowest priority first (then the latest
    started) - those whose eviction a PodDisruptionBudget refuses (``protected``: the caller
    spends each budget's allowance over all the potential victims, most important first) last -, each
    only while its namespace stays at or above its ``min`` on every resource it holds, until
    ``fits(victims)``; then those whose return still lets it fit are spared, protected ones
    first, then the most important. A pod the namespace's ``min`` refused on the way may be
    the one that makes room alone: the search is made again with each such pod first, and the
    best set kept (fewest protected, then as ``Candidate.rank`` orders nodes) - the fewest,
    least important victims. Pods leaving already (deleting, or in ``going``) that the rules
    would let it evict are counted on first and never charged to their namespace's ``min``
    (``used`` no longer counts them): they cost no eviction; those not needed are spared last.
    The sets are compared by the pods evicted now only."""
    free = [p for p in pods if leaving(p, going) and may_evict(p, preemptor, quotas, reclaiming)]
    allowed = sorted((p for p in pods if not leaving(p, going) and may_evict(p, preemptor, quotas, reclaiming)),
                     key=lambda p: (p.uid not in protected, importance(p)), reverse=True)
    best, refused = _victims(allowed, preemptor, quotas, used, fits, protected, free)
    for first in refused:
        found, _ = _victims([first, *(p for p in allowed if p is not first)], preemptor, quotas, used, fits,
                            protected, free)
        if found is not None and (best is None or _cost(found, protected, going) < _cost(best, protected, going)):
            best = found
    return best


def _victims(order: Sequence[PodInfo], preemptor: PodInfo, quotas: Mapping[str, QuotaSpec],
             used: Mapping[str, Amounts], fits: Callable[[Sequence[PodInfo]], bool],
             protected: AbstractSet[str], free: Sequence[PodInfo] = ()
             ) -> tuple[tuple[PodInfo, ...] | None, list[PodInfo]]:
    """``victims_on``'s search taking pods in ``order`` after the ``free`` ones (leaving
    already): the victims (None: no room made) and the pods the namespaces' ``min`` refused on
    the way."""
    budget = _Budget(preemptor, quotas, used)
    victims: list[PodInfo] = []
    refused: list[PodInfo] = []
    for p in order:
        if fits([*free, *victims]):
            break
        (victims if budget.take(p) else refused).append(p)
    if not (free or victims) or not fits([*free, *victims]):
        return None, refused
    for p in sorted(victims, key=lambda p: (p.uid not in protected, importance(p))):
        trial = [v for v in victims if v.uid != p.uid]
        if fits([*free, *trial]):
            victims = trial
    needed = list(free)
    for p in sorted(free, key=importance):  # the leaving pods not needed are no victims
        trial = [f for f in needed if f.uid != p.uid]
        if fits([*trial, *victims]):
            needed = trial
    return tuple(sorted([*needed, *victims], key=importance)), refused


def _cost(victims: Sequence[PodInfo], protected: AbstractSet[str],
          going: AbstractSet[str]) -> tuple[int, int, int, int]:
    """How a set of victims on one node compares (lowest best), by the pods evicted now: the
    fewest protected, then as ``Candidate.rank`` orders nodes - without the start-time tie-break
    (the first set found is kept on a tie)."""
    evicted = [v for v in victims if not leaving(v, going)]
    return preemption_rank(evicted, sum(v.uid in protected for v in evicted), 0.0)[:4]


@dataclass(frozen=True)
class Candidate:
    node: str
    victims: tuple[PodInfo, ...]
    """The pods to evict (none when the ``waits`` alone make room)."""
    pdb_violations: int = 0
    waits: tuple[PodInfo, ...] = ()
    """Victims leaving already: counted on, not evicted."""

    def rank(self, now: float) -> tuple[int, int, int, int, float, str]:
        """The sort key of kube-scheduler's ``pickOneNodeForPreemption``, which capacityscheduling
        picks its node with (best first), by the pods evicted now (a node where leaving pods
        alone make room first): ``eviction.preemption_rank`` - fewest budget violations, the
        lowest most important victim, the lowest sum of priorities, the fewest victims, the
        latest start of the earliest victim of that highest priority (``now``: wall-clock
        seconds, the start of a victim that has none) -, then the name."""
        return (*preemption_rank(self.victims, self.pdb_violations, now), self.node)
