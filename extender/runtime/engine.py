"""Engine: the four extender verbs, each run as framework cycles over the cache and the queue.

* ``filter`` / ``prioritize``, ``placement`` and ``make_room``: the scheduling cycle (``extender.runtime.scheduling``);
* ``preempt``: managed-resource preemption (``extender.runtime.preemption``);
* ``bind`` and ``collect_orphans``: the binding cycle and its upkeep (``extender.runtime.binding``).

They share the pods the verbs were asked about (``RecentPods``: bind gets only a name and UID),
the explain log, the profiles and the handle's cache and queue. The engine knows no HTTP and no
wire format: ``extender.api`` converts to and from the wire (``extender.runtime.outcomes``).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from extender.cache.cache import ClusterCache
from extender.framework.batch import Ints
from extender.framework.status import Status
from extender.framework.views import PodInfo
from extender.metrics import Metrics
from extender.runtime.batch import Priorities
from extender.runtime.binding import BindingCycle
from extender.runtime.explain import ExplainLog
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime.outcomes import Candidate, EngineError, FilterOutcome, InvalidRequest, NodeTexts, PreemptDecision
from extender.runtime.pods import RecentPods
from extender.runtime.preemption import Preemption
from extender.runtime.profiles import Profiles
from extender.runtime.scheduling import SchedulingCycle

__all__ = ["Candidate", "Engine", "EngineError", "FilterOutcome", "InvalidRequest", "NodeTexts", "PreemptDecision"]


class Engine:
    """Runs the verbs over ``handle``'s cache and queue with the frameworks of ``profiles``
    (installed before: the plugins were built with ``handle``)."""

    def __init__(self, handle: EngineHandle, profiles: Profiles, *, metrics: Metrics | None = None,
                 explain: ExplainLog | None = None, remember_pods: int = 4096) -> None:
        self.handle = handle
        self.cache: ClusterCache = handle.cache
        self.queue = handle.queue
        self.profiles = profiles
        self.frameworks: Mapping[str, Framework] = profiles.by_name
        self.default_profile = profiles.default
        self.metrics = metrics
        self.explain = explain or ExplainLog()
        self.pods = RecentPods(handle.managed_resources, remember_pods)
        self.scheduling = SchedulingCycle(handle, profiles, self.pods, self.explain, metrics)
        self.preemption = Preemption(handle, profiles, self.pods, self.explain, metrics)
        self.binding = BindingCycle(handle, profiles, self.pods, self.explain, metrics)

    def framework_for(self, pod: PodInfo) -> Framework:
        """The profile named by the pod's schedulerName (``Profiles.framework_for``)."""
        return self.profiles.framework_for(pod)

    def pod_info(self, raw: Mapping[str, Any]) -> PodInfo:
        """Parse (and remember) a request's pod; InvalidRequest when malformed."""
        return self.pods.parse(raw)

    def filter(self, raw_pod: Mapping[str, Any] | PodInfo, node_names: list[str]) -> FilterOutcome:
        """The Filter verb for a request's pod (raw, or as ``pod_info`` parsed it)."""
        return self.scheduling.filter(raw_pod, node_names)

    def prioritize(self, raw_pod: Mapping[str, Any] | PodInfo, node_names: list[str]) -> Priorities:
        """The Prioritize verb for a request's pod (raw, or as ``pod_info`` parsed it)."""
        return self.scheduling.prioritize(raw_pod, node_names)

    def score_ahead(self, pod: PodInfo, node_names: list[str]) -> Ints | None:
        """Score ``pod`` on ``node_names`` for the prioritize likely to follow
        (``SchedulingCycle.score_ahead``): the scores kept, or None."""
        return self.scheduling.score_ahead(pod, node_names)

    def placement(self, pod: PodInfo, names: Iterable[str] | None = None, *, strict: bool = False,
                  extra: Mapping[str, Sequence[PodInfo]] | None = None) -> str | None:
        return self.scheduling.placement(pod, names, strict=strict, extra=extra)

    def make_room(self, pod: PodInfo, refused: Status | None) -> bool:
        return self.scheduling.make_room(pod, refused)

    def preempt(self, raw_pod: Mapping[str, Any], candidates: Mapping[str, Candidate]) -> dict[str, PreemptDecision]:
        return self.preemption.preempt(raw_pod, candidates)

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        return self.binding.bind(namespace, name, uid, node)

    def collect_orphans(self) -> int:
        return self.binding.collect_orphans()

    def queue_state(self) -> dict[str, Any]:
        """What ``/debug/queue`` shows (``SchedulingQueue.describe``), in the default profile's
        QueueSort order."""
        return self.queue.describe(self.handle.waiting_pods, self.profiles.sort)
