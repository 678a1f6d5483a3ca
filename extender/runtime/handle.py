"""EngineHandle: the runtime's implementation of ``extender.framework.handle.Handle``.

Built from the pieces it exposes before the engine and the plugins exist: the cache, the queue
(held capacity, reservations, timed wake-ups) and the profiles (filled once the plugins are
built). It knows nothing of the Engine: plugins never call back up into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import AbstractSet, Callable, Hashable, Mapping, Sequence

from extender.cache.cache import ClusterCache
from extender.cache.snapshot import Snapshot
from extender.framework.clock import Clock
from extender.framework.cycle_state import CycleState
from extender.framework.disruption import violating
from extender.framework.elastic_quota import QuotaSpec
from extender.framework.eviction import Evictions
from extender.framework.handle import ClusterWriter
from extender.framework.pod_group import GroupCount, MemberState, PodGroupSpec
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo
from extender.queue.queue import SchedulingQueue
from extender.queue.reservations import Reservations
from extender.runtime.profiles import Profiles
from extender.runtime.waiting_pods import WaitingPods

BIND_MARGIN_SECONDS = 1.0
"""Time reserved after a Permit wait for PreBind's patch and the Binding call, so the whole bind
answers before kube-scheduler's httpTimeout."""


@dataclass
class EngineHandle:
    cache: ClusterCache
    writer: ClusterWriter
    clock: Clock
    waiting_pods: WaitingPods
    managed_resources: frozenset[str]
    annotation_prefix: str = "kube-extender.io/"
    http_timeout: float = 5.0
    term: Callable[[], int] = field(default=lambda: 0)
    """The current leader term, written into allocations (fencing); 0 without leader election."""

    queue: SchedulingQueue = None  # type: ignore[assignment]
    """The queue over ``cache``; built from ``cache`` and ``clock`` when not given."""

    profiles: Profiles = field(default_factory=Profiles)
    """The frameworks by profile, installed once the plugins (built with this handle) are."""

    evictions: Evictions = None  # type: ignore[assignment]
    """Pods evicted that the watches do not show yet (every preempting plugin's); built over
    ``cache``'s budgets and ``clock`` when not given."""

    def __post_init__(self) -> None:
        if self.queue is None:
            self.queue = SchedulingQueue(self.cache, self.clock)
        if self.evictions is None:
            self.evictions = Evictions(self.cache.budgets, self.clock.monotonic)
        self.cache.on_pod_change(self._pod_changed)

    def _pod_changed(self, uid: str, pod: PodInfo | None) -> None:
        """A pod deleted while it waits in Permit is rejected there (as kube-scheduler's delete
        handler does) and leaves the room at once: a plugin counting the room - Gang counting a
        group - must not count it, even before its bind request has woken up."""
        if pod is None:
            waiting = self.waiting_pods.get(uid)
            if waiting is not None:
                waiting.reject("", "the pod was deleted while it waited in Permit")
                self.waiting_pods.remove(uid)

    @property
    def reservations(self) -> Reservations:
        """Capacity held for pods not bound yet (the queue's)."""
        return self.queue.reservations

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Filters on ``node`` with the capacity held against ``pod`` counted (``with_held``), as
        kube-scheduler's preemption simulation does for nominated pods."""
        return self.profiles.framework_for(pod).run_filter_node(state, pod, self.queue.held.with_held(node, pod))

    def run_pre_filters(self, state: CycleState, pod: PodInfo,
                        skip: AbstractSet[str] = frozenset()) -> tuple[frozenset[str] | None, Status]:
        return self.profiles.framework_for(pod).run_pre_filter(state, pod, self.cache.snapshot(), skip)

    def with_held(self, node: NodeInfo, pod: PodInfo) -> NodeInfo:
        return self.queue.held.with_held(node, pod)

    def held_nodes(self) -> set[str]:
        return set(self.queue.held.held_nodes())  # the plugin's own

    def nominations(self) -> list[tuple[str, PodInfo]]:
        return self.queue.nominator.nominations()

    def held_version(self) -> Hashable:
        return self.queue.held.version()

    def find_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]:
        def match(p: PodInfo) -> bool:
            return p.namespace == namespace and all(p.labels.get(k) == v for k, v in labels.items())
        if labels:  # through the cache's index of the first label (which it checks)
            (key, value), *rest = labels.items()
            labelled = self.cache.pods_labelled(namespace, key, value)
            return [p for p in labelled if match(p)] if rest else labelled
        found = {p.uid: p for p in self.cache.accounted_pods() if match(p)}
        for p in self.cache.pending_pods():
            if match(p):
                found.setdefault(p.uid, p)
        return list(found.values())

    def group_count(self, namespace: str, name: str) -> GroupCount:
        return self.cache.group_count(namespace, name)

    def group_member(self, namespace: str, name: str, uid: str) -> MemberState | None:
        return self.cache.group_member(namespace, name, uid)

    def requeue_after(self, pod: PodInfo, seconds: float) -> None:
        self.queue.requeue_after(pod, seconds)

    def pdb_violations(self, victims: Sequence[PodInfo], evicting: bool = True) -> set[str]:
        """``evicting``: False for victims kube-scheduler deletes itself (the preempt verb's count,
        ``disruption.violating``)."""
        budgets = self.cache.budgets()
        if not budgets or not victims:
            return set()
        followed = {p.uid: p for p in self.cache.pending_pods()}  # a pending covered pod is unavailable
        followed.update((p.uid, p) for p in self.cache.accounted_pods())
        return violating(victims, budgets, list(followed.values()), self.evictions.going(self.snapshot()).keys(),
                         self.evictions.unseen(budgets), evicting=evicting)

    def budget_covered(self, pods: Sequence[PodInfo], at_least: int = 1) -> set[str]:
        budgets = self.cache.budgets()
        return {p.uid for p in pods if sum(1 for b in budgets if b.covers(p)) >= at_least} if budgets else set()

    def snapshot(self) -> Snapshot:
        return self.cache.snapshot()

    def pod_group(self, namespace: str, name: str) -> PodGroupSpec | None:
        return self.cache.pod_group_spec(namespace, name)

    def quotas(self) -> list[QuotaSpec]:
        return self.cache.quota_specs()

    def pending_pods(self) -> list[PodInfo]:
        return self.cache.pending_pods()

    def change_count(self) -> int:
        return self.cache.change_count()

    def permit_budget(self) -> float:
        """httpTimeout minus the bind margin (at least a tenth of the timeout is kept for the
        margin when the timeout is small), never negative."""
        margin = min(BIND_MARGIN_SECONDS, self.http_timeout * 0.5)
        return max(0.0, self.http_timeout - margin)
