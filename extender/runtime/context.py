"""VerbContext: what the parts of the engine (scheduling, preemption, binding) share."""

from __future__ import annotations

from extender.cache.cache import ClusterCache
from extender.metrics import Metrics
from extender.runtime.explain import ExplainLog
from extender.runtime.handle import EngineHandle
from extender.runtime.pods import RecentPods
from extender.runtime.profiles import Profiles


class VerbContext:
    """The handle (its cache and queue), the profiles, the pods the verbs were asked about, the
    explain log and the metrics, shared by every part of one engine."""

    def __init__(self, handle: EngineHandle, profiles: Profiles, pods: RecentPods, explain: ExplainLog,
                 metrics: Metrics | None = None) -> None:
        self.handle = handle
        self.cache: ClusterCache = handle.cache
        self.queue = handle.queue
        self.profiles = profiles
        self.pods = pods
        self.explain = explain
        self.metrics = metrics
