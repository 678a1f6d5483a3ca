"""EngineHandle: the engine's implementation of ``extender.framework.handle.Handle``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.disruption import violating
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo

if TYPE_CHECKING:
    from extender.runtime.engine import Engine

from extender.cache.cache import ClusterCache
from extender.cache.snapshot import Snapshot
from extender.framework.clock import Clock
from extender.framework.handle import ClusterWriter
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

    engine: Engine | None = None
    """Set by the Engine when it is built (plugins are built before it)."""

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Filters on ``node`` with the capacity held for nominated pods of equal or higher
        priority counted, as kube-scheduler's preemption simulation does."""
        if self.engine is None:
            raise RuntimeError("the engine is not built yet")
        return self.engine.framework_for(pod).run_filter_node(state, pod, self.engine.with_nominated(node, pod))

    def find_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]:
        def match(p: PodInfo) -> bool:
            return p.namespace == namespace and all(p.labels.get(k) == v for k, v in labels.items())
        found = {p.uid: p for p in self.cache.accounted_pods() if match(p)}
        for p in self.cache.pending_pods():
            if match(p):
                found.setdefault(p.uid, p)
        return list(found.values())

    def pdb_violations(self, victims: Sequence[PodInfo]) -> set[str]:
        budgets = self.cache.budgets()
        if not budgets or not victims:
            return set()
        return violating(victims, budgets, self.cache.accounted_pods())

    def snapshot(self) -> Snapshot:
        return self.cache.snapshot()

    def permit_budget(self) -> float:
        """httpTimeout minus the bind margin (at least a tenth of the timeout is kept for the
        margin when the timeout is small), never negative."""
        margin = min(BIND_MARGIN_SECONDS, self.http_timeout * 0.5)
        return max(0.0, self.http_timeout - margin)
