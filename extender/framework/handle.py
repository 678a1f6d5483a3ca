"""What a plugin may ask of the engine: state, time, the cluster writer and the waiting room.

Plugins receive a Handle at construction. They never reach the cache, the queue or the HTTP layer
directly; the runtime implements this protocol (``extender.runtime.handle.EngineHandle``).
"""

from __future__ import annotations

from typing import (TYPE_CHECKING, AbstractSet, Any, Callable, Collection, Hashable, Iterable, Iterator, Mapping,
                    Protocol, Sequence, TypeVar)

from extender.framework.clock import Clock
from extender.framework.cycle_state import CycleState
from extender.framework.elastic_quota import QuotaSpec
from extender.framework.pod_group import GroupCount, MemberState, PodGroupSpec
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo

if TYPE_CHECKING:
    from extender.framework.eviction import Evictions

T = TypeVar("T")


class WriteError(Exception):
    """A write to the cluster failed. ``conflict`` marks a lost precondition (HTTP 409: the object
    changed, the pod is already bound, the UID differs) as opposed to a transient failure.
    ``uncertain`` marks a write that may have taken effect all the same: its reply was lost and
    nothing could tell (a Binding the API server may have stored, the pod unreadable after)."""

    def __init__(self, message: str, *, conflict: bool = False, uncertain: bool = False) -> None:
        super().__init__(message)
        self.conflict = conflict
        self.uncertain = uncertain


class ClusterWriter(Protocol):
    """Writes to the cluster. Implementations: in-memory (``extender.cluster.memory``) and
    Kubernetes. Every method raises WriteError on failure and is safe to call from many threads."""

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        """Bind the pod to ``node`` with its UID as a precondition, setting ``annotations`` on
        it in the same write (a Binding's annotations are merged into the pod atomically with
        ``spec.nodeName``). Already bound to ``node`` is success; bound elsewhere or a different
        UID raises WriteError(conflict=True); a Binding that may have been stored though the
        writer cannot tell raises WriteError(uncertain=True)."""

    def bound_node(self, namespace: str, name: str, uid: str) -> str | None:
        """The node the pod with this UID is bound to as the cluster has it now (a read, not the
        watch's view); None when it is unbound, gone, or the name is another pod's. Raises
        WriteError when it cannot be read. What settles a Binding of unknown outcome. Added in
        API 1.2."""

    def patch_pod_metadata(self, namespace: str, name: str, *, annotations: Mapping[str, str | None] | None = None,
                           labels: Mapping[str, str | None] | None = None,
                           resource_version: str | None = None, uid: str | None = None) -> None:
        """Merge-patch annotations/labels (None deletes a key), with optional resourceVersion and
        UID preconditions (a conflict WriteError when the pod changed or was re-created)."""

    def evict(self, namespace: str, name: str, uid: str, grace_period_seconds: int | None = None) -> None:
        """Evict the pod through the Eviction API (PodDisruptionBudgets honoured)."""

    def remove_scheduling_gate(self, namespace: str, name: str, gate: str, uid: str | None = None) -> None:
        """Remove one scheduling gate (and only that one) from the pod; no-op if it is gone."""

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        """Set (or, with None, clear) the pod's ``status.nominatedNodeName``."""

    def record_event(self, obj: Mapping[str, Any], *, type_: str, reason: str, message: str,
                     related: Mapping[str, Any] | None = None) -> None:
        """Record an Event about ``obj`` (best effort: never raises). ``related``: a second pod the
        event is about (the preemptor of a preempted pod), as kube-scheduler's Events name it."""


class SnapshotView(Protocol):
    """A consistent, read-only view of the cluster for one request."""

    generation: int

    def get(self, name: str) -> NodeInfo | None: ...

    def __len__(self) -> int: ...

    def __iter__(self) -> Iterator[NodeInfo]: ...


class WaitingPodView(Protocol):
    """A pod held in Permit. ``allow`` by every waiting plugin lets it bind; one ``reject`` ends it."""

    pod: PodInfo
    node_name: str

    def pending_plugins(self) -> list[str]: ...

    def allow(self, plugin: str) -> None: ...

    def reject(self, plugin: str, message: str) -> bool:
        """End the wait rejected (its bind fails, Unreserve runs). False when every plugin had
        allowed it already: the reject did not take and the pod goes on to bind."""
        ...


class WaitingPodsView(Protocol):
    @property
    def left(self) -> int:
        """Grows whenever a pod leaves the room: while it is unchanged, every pod seen in the
        room is still there (a plugin need not look it up again). Added in API 1.2."""

    def get(self, uid: str) -> WaitingPodView | None: ...

    def __iter__(self) -> Iterator[WaitingPodView]: ...


class ReservationsView(Protocol):
    """Capacity held on nodes for pods that are not bound yet (``extender.queue.reservations``).
    A slot counts against every other pod of equal or lower priority, in Filter and at bind."""

    version: int
    """Grows whenever slots are placed or go away."""

    def atomically(self, work: Callable[[], T]) -> T:
        """Run ``work`` with no other writer of the reservations in between and return its result:
        plan-then-place, so two plans never count the same capacity. ``work`` may read and write
        the reservations and run the Filter plugins."""

    def place(self, owner: str, priority: int, placements: Iterable[tuple[str, PodInfo]], ttl: float,
              member: Callable[[PodInfo], bool] = ..., extend: bool = ...) -> None:
        """Hold one slot per (node, pod) for ``owner``, replacing what it held (``extend``: adding
        to it); expires after ``ttl`` seconds without a claim or consume. Unclaimed slots do not
        count against the pods ``member`` accepts."""

    def claim(self, owner: str, uid: str, prefer: Collection[str] | None = None,
              requests: Mapping[str, int] | None = None) -> str | None:
        """The node of the slot pod ``uid`` holds, claiming a free one (planned for it, else sized
        like ``requests``; in ``prefer`` if given)."""

    def unclaim_except(self, owner: str, keep: Collection[str]) -> int:
        """Free the slots claimed by pods not in ``keep``."""

    def consume(self, owner: str, uid: str, node: str, requests: Mapping[str, int] | None = None) -> bool:
        """Pod ``uid`` is now accounted on ``node``: drop the slot it stood for."""

    def keep(self, owner: str, seconds: float) -> None:
        """Hold the reservation at least ``seconds`` from now."""

    def release(self, owner: str) -> bool: ...

    def get(self, owner: str) -> Any:
        """The live reservation of ``owner`` (``slots``: uid -> slot with ``node``, ``claimed_by``)
        or None."""

    def nodes(self) -> set[str]:
        """Nodes where some slot is held (expired reservations are dropped first)."""

    def held_on(self, node: str, pod: PodInfo) -> list[PodInfo]:
        """Placeholders on ``node`` that count against ``pod``."""

    def held(self) -> list[tuple[str, PodInfo]]:
        """Every live slot as (the UID of the pod it stands for: its claimer, else the member it
        was planned for; its placeholder, with the namespace, node and managed requests held).
        Lock-free, like ``held_on``."""


class Handle(Protocol):
    """The engine, as seen by a plugin."""

    clock: Clock
    writer: ClusterWriter
    managed_resources: frozenset[str]
    annotation_prefix: str

    @property
    def reservations(self) -> ReservationsView:
        """Capacity held for pods not bound yet (pod group placements)."""

    @property
    def waiting_pods(self) -> WaitingPodsView:
        """Pods held in Permit; plugins allow or reject them through this."""

    @property
    def evictions(self) -> Evictions:
        """Pods evicted (``extender.framework.eviction.evict``) that the snapshot does not show
        going yet: what a plugin that preempts must not take for running pods. Added in API 1.2."""

    def snapshot(self) -> SnapshotView:
        """The latest consistent snapshot (cheap: shared until the cluster changes)."""

    def run_filters(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The pod's profile's Filter plugins on ``node`` (which may be a simulated NodeInfo, e.g.
        with victims removed), counting capacity held for nominated pods of equal or higher
        priority: what preemption uses to ask "would it fit then?"."""

    def run_pre_filters(self, state: CycleState, pod: PodInfo,
                        skip: AbstractSet[str] = frozenset()) -> tuple[frozenset[str] | None, Status]:
        """The pod's profile's PreFilter plugins on ``state`` (a fresh one) as a cycle of the pod's
        own would run them at bind, with no candidates (``state.candidates`` None) - but those
        named in ``skip`` (the caller itself, when it asks for another pod than the request's).
        Returns the nodes they allow (None: any) and the first rejection. What a plugin that runs
        ``run_filters`` for another pod (Gang planning a group's members) prepares the state with:
        Filter plugins then find their PreFilter's data and SKIPs. Added in API 1.2."""

    def with_held(self, node: NodeInfo, pod: PodInfo) -> NodeInfo:
        """``node`` plus the capacity held on it against ``pod``: pods nominated to it of equal or
        higher priority and reservation slots that count against ``pod`` (what Filter sees)."""

    def held_nodes(self) -> set[str]:
        """The nodes where ``with_held`` may add something."""

    def nominations(self) -> list[tuple[str, PodInfo]]:
        """(node, pod) of every pending pod nominated now, as ``with_held`` counts them: by its
        ``status.nominatedNodeName``, or by a PostFilter of this process that the watch has not
        shown yet - the pod itself perhaps not yet either (kube-scheduler's watch may show a pod
        before ours). Added in API 1.2."""

    def held_version(self) -> Hashable:
        """Equal between two calls only if ``with_held`` adds the same to every node for every
        pod (no slot placed or gone, no nomination made, moved or ended): a plugin that keeps an
        answer counting held capacity keys it by this (with the snapshot's ``generation``).
        Added in API 1.2."""

    def find_pods(self, namespace: str, labels: Mapping[str, str]) -> list[PodInfo]:
        """Pods the extender follows (pending, assumed or bound) in ``namespace`` carrying all of
        ``labels``."""

    def group_count(self, namespace: str, name: str) -> GroupCount:
        """How many of the pods ``find_pods(namespace, {GROUP_LABEL: name})`` would return there
        are, are on a node and are bound, and a mark of the last time one left: kept current by
        the cache as pods change (assumes, forgets and expiries included), so it costs O(1)
        whatever the group's size. Added in API 1.2."""

    def group_member(self, namespace: str, name: str, uid: str) -> MemberState | None:
        """Pod ``uid`` as a member of that group (None when it is not one): O(1). Added in API
        1.2."""

    def requeue_after(self, pod: PodInfo, seconds: float) -> None:
        """Have kube-scheduler retry ``pod`` after ``seconds`` (the pod is touched then): for a
        rejection that ends with time, such as a back-off, which no cluster event announces."""

    def pdb_violations(self, victims: Sequence[PodInfo], evicting: bool = True) -> set[str]:
        """UIDs of ``victims`` whose eviction (in the given order) would exceed a
        PodDisruptionBudget's allowance, or that more than one budget covers while the Eviction
        API checks their budgets (``disruption.budget_checked``: it refuses those, a 500).
        ``evicting`` False: victims kube-scheduler deletes itself (the preempt verb's), where a
        pod of two budgets is charged to both, as kube-scheduler counts (API 1.2)."""

    def budget_covered(self, pods: Sequence[PodInfo], at_least: int = 1) -> set[str]:
        """UIDs of ``pods`` some PodDisruptionBudget covers: the pods whose eviction the API
        server may refuse (a budget's allowance can be spent before the watch shows it).
        ``at_least``: how many budgets cover each pod returned - with 2, the pods the Eviction
        API refuses whatever the budgets allow, of those whose budgets it checks
        (``disruption.budget_checked``; a Pending pod, say, it evicts). Added in API 1.2."""

    def pod_group(self, namespace: str, name: str) -> PodGroupSpec | None:
        """The PodGroup (``scheduling.x-k8s.io/v1alpha1``) ``namespace/name``; None when there is
        none (not created yet, or the CRD is not installed) or it is malformed (logged once by
        the cache), so the plugin falls back to its own defaults."""

    def quotas(self) -> list[QuotaSpec]:
        """The valid ElasticQuotas (``scheduling.x-k8s.io/v1alpha1``) the cluster holds, ordered
        by namespace then name; none when the CRD is not installed or readable."""

    def pending_pods(self) -> list[PodInfo]:
        """Followed pods that are neither bound nor assumed (gated ones included)."""

    def change_count(self) -> int:
        """Grows with every change the extender sees (nodes, pods - pending ones included -,
        PodGroups, ElasticQuotas...): what a plugin keys a derived table on."""

    def permit_budget(self) -> float:
        """Seconds a Permit wait may last: the scheduler's httpTimeout minus the margin needed to
        write annotations and the Binding afterwards."""
