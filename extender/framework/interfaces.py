"""One Protocol per extension point, in the order a pod meets them.

A plugin is any object with a ``name`` and the methods of the points it implements; the runtime
checks which protocols a plugin satisfies when a profile enables it. Conventions:

* Verdicts are returned as ``Status``; a raised exception becomes ``Status(ERROR)`` naming the
  plugin, and the server stays up.
* ``filter`` is called per node, in configured plugin order; the first rejection ends that node.
* ``score`` returns an int in ``0..MAX_NODE_SCORE`` (after ``normalize_score`` if the plugin has
  one); the runtime applies weights and converts once to the wire's 0..10.
* ``unreserve`` must be idempotent and tolerate "reserve never ran" for this pod.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from extender.framework.cycle_state import CycleState
from extender.framework.handle import SnapshotView
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo

MAX_NODE_SCORE = 100
MIN_NODE_SCORE = 0


@runtime_checkable
class Plugin(Protocol):
    name: str


@runtime_checkable
class PreEnqueuePlugin(Plugin, Protocol):
    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Success admits the pod to the scheduling queue; anything else keeps it gated."""


@runtime_checkable
class QueueSortPlugin(Plugin, Protocol):
    def less(self, a: PodInfo, b: PodInfo) -> bool:
        """True if ``a`` should be scheduled before ``b``. Exactly one per profile."""


@dataclass(frozen=True, slots=True)
class PreFilterResult:
    """Nodes worth filtering; ``None`` means all. Results of several plugins intersect."""

    node_names: frozenset[str] | None = None


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: SnapshotView) -> tuple[PreFilterResult | None, Status]:
        """Error or rejection aborts the cycle (every node fails with this status); SKIP means this
        plugin's Filter is not called in this cycle."""


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """Can ``pod`` run on ``node``? Must be cheap: it runs for every candidate node. A plugin
        may also define ``filter_all(state, pod, nodes) -> dict[node name, Status]`` returning
        the rejections only, with exactly the verdicts ``filter`` would give; the runtime uses it
        when the plugin is a profile's only Filter plugin (one loop, no per-node call overhead)."""


@runtime_checkable
class PostFilterPlugin(Plugin, Protocol):
    def post_filter(self, state: CycleState, pod: PodInfo,
                    statuses: Mapping[str, Status]) -> tuple[str | None, Status]:
        """Runs only when no node fits. Success with a node name nominates that node (typically
        after preemption): from that answer on, the engine holds what the pod asks there against
        pods of lower priority, before the watch shows the pod's ``nominatedNodeName`` - which
        the plugin writes (``handle.writer.set_nominated_node``). The first plugin that
        succeeds ends PostFilter."""


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Error aborts prioritize; SKIP means this plugin's Score is not called."""


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """A score for the node (``0..MAX_NODE_SCORE`` unless normalize_score rescales). A plugin
        may also define ``normalize_score(state, pod, scores: dict[str, int]) -> None``, called once
        per cycle with all its scores, to rescale them in place, and ``score_all(state, pod, nodes)
        -> (dict[node name, int], Status)`` giving exactly the scores ``score`` would give for every
        node in one call (no per-node call overhead); the runtime then uses it instead of ``score``.
        A non-success Status from ``score_all`` fails prioritize, as an exception does."""


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Claim plugin state for the pod on the node (the cache already counts it as assumed).
        Failure runs every Reserve plugin's Unreserve in reverse order."""

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Release whatever reserve claimed. Idempotent; must not fail."""


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Approve (SUCCESS), deny (a rejection) or WAIT with a timeout in seconds. A waiting pod is
        released by ``handle.waiting_pods.get(uid).allow(name)`` and times out into a denial."""


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Work before binding (e.g. persist the allocation). Failure unreserves the pod."""


@runtime_checkable
class BindPlugin(Plugin, Protocol):
    def bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Bind the pod, or return SKIP to let the next Bind plugin do it."""


@runtime_checkable
class PostBindPlugin(Plugin, Protocol):
    def post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """Informational, after a successful bind."""


@dataclass(frozen=True, slots=True)
class Victim:
    """A pod kube-scheduler proposes to evict. ``pod`` is None when the extender does not track it
    (it holds none of the managed resources); such victims are kept as proposed."""

    uid: str
    pod: PodInfo | None


@runtime_checkable
class PreemptionPlugin(Plugin, Protocol):
    def process_preemption(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                           victims: Sequence[Victim]) -> tuple[list[Victim], Status]:
        """The preempt verb: given kube-scheduler's victims on ``node`` (already stripped of pods
        of equal or higher priority), return the victims to evict (a subset or a superset drawn
        from the node's pods, most important first) or a rejection to drop the node."""


@dataclass(frozen=True, slots=True)
class NodeCapacity:
    """Capacity a plugin accounts on a node beyond what the node's status advertises (devices
    known from an annotation or labels), for the debug views and the simulator's report."""

    resources: Mapping[str, tuple[int, int]]
    """Resource name -> (total, in use), in milli-units like ``NodeInfo.allocatable``."""
    devices: Sequence[Mapping[str, Any]] = ()
    """Per device, JSON-able: id, health, used and total amounts, the pods holding it."""
    source: str = ""
    """Where the inventory came from (e.g. an annotation, or GPU Feature Discovery labels)."""


@runtime_checkable
class CapacityReporter(Plugin, Protocol):
    """Not an extension point: a Filter plugin that accounts such capacity says what it sees."""

    def node_capacity(self, node: NodeInfo) -> NodeCapacity | None:
        """What the plugin accounts on ``node`` (None: nothing, e.g. no devices)."""


@runtime_checkable
class QuotaReporter(Plugin, Protocol):
    """Not an extension point: a plugin that enforces quotas says where each namespace stands."""

    def quota_report(self) -> Mapping[str, Mapping[str, Mapping[str, int | None]]]:
        """Namespace -> resource -> ``min``, ``max`` (None: none), ``used``, ``borrowed``, ``lent``
        and ``pending`` (asked by pods that wait), in milli-units."""

    def quota_verdict(self, pod: PodInfo) -> str | None:
        """Why ``pod`` does not fit its namespace's quota now (None: it does), as admission
        judges a gated pod and Filter any other."""


EXTENSION_POINTS: dict[str, type] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
    "preemption": PreemptionPlugin,
}
"""Configuration key of each extension point -> the protocol a plugin must satisfy there."""
