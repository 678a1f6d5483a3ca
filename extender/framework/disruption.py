"""PodDisruptionBudgets, as preemption weighs them: which victims an eviction set would take
beyond what their budgets allow.

A budget's allowance is ``status.disruptionsAllowed`` when the disruption controller has written
it (a real cluster); otherwise it is computed from the spec over the pods the extender follows
(``minAvailable`` / ``maxUnavailable`` as integers or percentages, rounded up like Kubernetes),
an approximation: it cannot see a workload's scale, so a pod evicted through the budget that is
gone and not replaced yet no longer counts as expected here (the memory cluster, which refuses
the eviction then as a cluster does, counts it: ``absent``), nor do pods the extender does not
follow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import AbstractSet, Any, Iterable, Mapping, Sequence

from extender.framework.views import PodInfo


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """LabelSelector semantics; a null selector matches nothing, an empty one everything."""
    if selector is None:
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if (op == "In" and labels.get(key) not in values) or (op == "NotIn" and labels.get(key) in values) \
                or (op == "Exists" and key not in labels) or (op == "DoesNotExist" and key in labels):
            return False
    return True


@dataclass(frozen=True)
class Budget:
    namespace: str
    name: str
    selector: Mapping[str, Any] | None
    min_available: Any = None
    max_unavailable: Any = None
    disruptions_allowed: int | None = None
    disrupted: frozenset[str] = frozenset()
    """``status.disruptedPods``: names of the pods the API server evicted through this budget
    that the disruption controller has not seen go yet (already out of ``disruptions_allowed``)."""

    @classmethod
    def from_object(cls, raw: Mapping[str, Any]) -> Budget:
        meta, spec, status = raw.get("metadata") or {}, raw.get("spec") or {}, raw.get("status") or {}
        allowed = status.get("disruptionsAllowed")
        disrupted = status.get("disruptedPods")
        return cls(str(meta.get("namespace") or "default"), str(meta.get("name") or ""), spec.get("selector"),
                   spec.get("minAvailable"), spec.get("maxUnavailable"),
                   allowed if isinstance(allowed, int) and "observedGeneration" in status else None,
                   frozenset(disrupted) if isinstance(disrupted, Mapping) else frozenset())

    def covers(self, pod: PodInfo) -> bool:
        return pod.namespace == self.namespace and selector_matches(self.selector, pod.labels)

    def allowed(self, followed: Iterable[PodInfo], going: AbstractSet[str] = frozenset(),
                evicted: Iterable[PodInfo] = (), absent: int = 0) -> int:
        """How many more covered pods may be evicted: the status's ``disruptionsAllowed`` when
        the disruption controller has written it - less the covered pods ``evicted`` since
        that it does not name in ``disruptedPods`` (``Evictions.unseen``: the status is the one
        from before their evictions) -, else counted as it counts: the covered pods
        (``followed``: pending ones included) not terminal are expected, those on a node and not
        leaving (deleting, or UIDs in ``going``: evicted, not shown deleting yet) healthy, and
        ``absent`` more are expected, none of them healthy (pods evicted through the budget, gone
        and not replaced yet: the memory cluster's stand-in for their controller's scale)."""
        if self.disruptions_allowed is not None:
            unseen = sum(1 for p in evicted if p.name not in self.disrupted and self.covers(p))
            return max(0, self.disruptions_allowed - unseen)
        expected = [p for p in followed if self.covers(p) and not p.terminal]
        healthy = sum(1 for p in expected if p.node_name and not p.deleting and p.uid not in going)
        count = len(expected) + absent
        if self.min_available is not None:
            return max(0, healthy - _amount(self.min_available, count))
        if self.max_unavailable is not None:
            return max(0, healthy - (count - _amount(self.max_unavailable, count)))
        return healthy


def _amount(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def budget_checked(pod: PodInfo) -> bool:
    """Does the Eviction API check ``pod``'s budgets? Not for a pod being deleted, nor for one
    Pending (not started), Succeeded or Failed: those are evicted whatever their budgets."""
    return not pod.deleting and pod.phase not in ("Pending", "Succeeded", "Failed")


def violating(victims: Sequence[PodInfo], budgets: Sequence[Budget], followed: Sequence[PodInfo],
              going: AbstractSet[str] = frozenset(), evicted: Sequence[PodInfo] = (), *,
              evicting: bool = True) -> set[str]:
    """UIDs of the victims whose eviction goes beyond a budget's allowance (victims are charged
    to their budgets in the given order, most important first; ``going``, ``evicted``: see
    ``Budget.allowed``), and - ``evicting``: they go through the Eviction API - of those more
    than one budget covers and it checks (``budget_checked``): that API refuses such a pod
    whatever the budgets allow (a 500), so it counts as a violation and spends no allowance.
    Not ``evicting`` (deleted, as kube-scheduler deletes its victims) such a pod is charged to
    each of its budgets, as kube-scheduler counts."""
    left = {(b.namespace, b.name): b.allowed(followed, going, evicted) for b in budgets}
    out: set[str] = set()
    for v in victims:
        covering = [b for b in budgets if b.covers(v)]
        if evicting and len(covering) > 1 and budget_checked(v):
            out.add(v.uid)
            continue
        for b in covering:
            key = (b.namespace, b.name)
            if left[key] <= 0:
                out.add(v.uid)
            left[key] -= 1
    return out
