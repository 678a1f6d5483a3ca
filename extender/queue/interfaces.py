"""What the queue is handed: the cache's view, the profiles' queue plugins and a way to place a pod.

The cache's view includes the PodGroups and the pod groups' member counts: admission admits a
group's gated members only when enough of them can run (see ``extender.queue.admission``), if the
profiles say the pod's profile waits for its group (``QueuePlugins.waits_for_pod_group``).

The queue sits below the runtime (``extender.runtime``) and beside the cache: it imports neither.
The app hands it these; the runtime's ``Profiles`` and ``Engine.placement`` and the cache's
``ClusterCache`` satisfy them. So admission and nudges run PreEnqueue, QueueSort and the queueing
hints of each pod's profile without knowing the Framework or the Engine.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence

from extender.framework.events import Change, ClusterEvent
from extender.framework.pod_group import GroupCount, PodGroupSpec
from extender.framework.status import Status
from extender.framework.views import PodInfo


class ClusterView(Protocol):
    """What the queue reads of the cluster cache, and the two ways it writes back to it."""

    def pending_pods(self) -> list[PodInfo]: ...

    def pending_pod(self, namespace: str, name: str) -> PodInfo | None: ...

    def pod(self, uid: str) -> PodInfo | None:
        """A pod accounted on a node (bound or assumed)."""

    def change_count(self) -> int: ...

    def changes_since(self, seq: int | None) -> tuple[list[Change], int, bool]:
        """(changes after ``seq``, the latest sequence number, complete)."""

    def note_released(self, nodes: Iterable[str], key: str = "") -> None:
        """Capacity held outside the cache came free on ``nodes``: a change like a pod's release."""

    def on_pod_change(self, listener: Callable[[str, PodInfo | None], None]) -> None:
        """Call ``listener(uid, pod or None)`` after each pod event, in order, outside the lock."""

    def pod_group_spec(self, namespace: str, name: str) -> PodGroupSpec | None:
        """PodGroup ``namespace/name``'s typed spec; None when there is none or it is malformed."""

    def group_count(self, namespace: str, name: str) -> GroupCount:
        """The counts of pod group ``namespace/name``'s members (those on a node: ``assigned``)."""


class WakeRuleView(Protocol):
    """What may wake a pod a plugin rejected: its registered events (None: every event) and its
    queueing hint (None: every registered event)."""

    @property
    def events(self) -> frozenset[ClusterEvent] | None: ...

    @property
    def hint(self) -> Callable[[PodInfo, Change], bool] | None: ...


class QueuePlugins(Protocol):
    """The queue's side of the profiles: each pod's profile's PreEnqueue plugins and queueing
    hints, and the default profile's QueueSort."""

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Run the PreEnqueue plugins of ``pod``'s profile; the first one that does not admit it
        is named in the Status."""

    def sort(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        """``pods`` in QueueSort order (the default profile's)."""

    def wake_rule(self, pod: PodInfo, plugin: str) -> WakeRuleView: ...

    def wakes(self, pod: PodInfo, plugin: str, changes: Sequence[Change]) -> bool:
        """May ``changes`` make ``pod``, last rejected by ``plugin``, schedulable?"""

    def waits_for_pod_group(self, pod: PodInfo) -> bool:
        """Does ``pod``'s profile hold a pod group's members in Permit until its PodGroup's
        minMember of them are waiting or bound (Gang)? Only then does admission admit the
        group all or nothing (and only when it cannot make room for it: ``preempts``)."""

    def preempts(self, pod: PodInfo) -> bool:
        """May ``pod``'s profile make room for it (PostFilter plugins, and the pod's
        ``preemptionPolicy`` is not ``Never``)?"""


class Place(Protocol):
    """The node ``pod`` would go to now, as Filter and Score choose it, with every capacity held
    against it counted (``strict``: its own group's holds too) and ``extra`` pods counted on their
    nodes; ``names`` limits the nodes looked at. None when no node has room."""

    def __call__(self, pod: PodInfo, names: Iterable[str] | None = None, *, strict: bool = False,
                 extra: Mapping[str, Sequence[PodInfo]] | None = None) -> str | None: ...


class MakeRoom(Protocol):
    """Preemption at admission: no node has room for ``pod`` (``refused``: the PreEnqueue verdict
    that said so; None when PreEnqueue admitted it and ``Place`` found no node). Did its profile's
    PostFilter make some - evicting victims and nominating it to a node? (``Engine.make_room``)"""

    def __call__(self, pod: PodInfo, refused: Status | None) -> bool: ...


class QueueMetrics(Protocol):
    """The counters the queue's loops move (``extender.metrics.Metrics`` has them)."""

    admission_evaluations: Any
    nudges: Any
