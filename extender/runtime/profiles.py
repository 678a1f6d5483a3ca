"""Profiles: the Framework of each profile, by schedulerName, and the queue's view of them.

Plugins are built with the handle, and the handle's ``run_filters`` needs the pod's profile: so
the handle is given an empty Profiles, the frameworks are built, then installed into it. The
queue reads PreEnqueue, QueueSort and the queueing hints through it (``QueuePlugins``).
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

from extender.framework.events import Change
from extender.framework.status import Status
from extender.framework.views import PodInfo
from extender.runtime.framework import Framework, WakeRule


class Profiles:
    def __init__(self) -> None:
        self.by_name: dict[str, Framework] = {}
        self.default = ""

    def install(self, frameworks: Mapping[str, Framework], default: str) -> None:
        """Make ``frameworks`` the profiles; ``default`` names the one for pods of other
        schedulers and the queue's order. Raises ValueError if it is not among them."""
        if default not in frameworks:
            raise ValueError(f"default profile {default!r} is not among the profiles")
        self.by_name = dict(frameworks)
        self.default = default

    def framework_for(self, pod: PodInfo) -> Framework:
        """The profile named by the pod's schedulerName; pods of other schedulers that still reach
        this extender (extenders are shared by all kube-scheduler profiles) get the default one.
        Raises RuntimeError before ``install``."""
        fw = self.by_name.get(pod.scheduler_name) or self.by_name.get(self.default)
        if fw is None:
            raise RuntimeError("the profiles are not built yet")
        return fw

    @property
    def default_framework(self) -> Framework:
        return self.by_name[self.default]

    # ---- the queue's view (extender.queue.interfaces.QueuePlugins) -----------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        return self.framework_for(pod).run_pre_enqueue(pod)

    def sort(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        return self.default_framework.sorted_queue(pods)

    def wake_rule(self, pod: PodInfo, plugin: str) -> WakeRule:
        return self.framework_for(pod).wake_rule(plugin)

    def wakes(self, pod: PodInfo, plugin: str, changes: Sequence[Change]) -> bool:
        return self.framework_for(pod).wakes(plugin, pod, changes)

    def waits_for_pod_group(self, pod: PodInfo) -> bool:
        """Whether a Permit plugin of ``pod``'s profile says (class attribute
        ``WAITS_FOR_POD_GROUP = True``, Gang) that it holds a pod group's members until its
        PodGroup's minMember of them are waiting or bound."""
        return any(getattr(p, "WAITS_FOR_POD_GROUP", False) for p in self.framework_for(pod).permit_plugins)

    def preempts(self, pod: PodInfo) -> bool:
        """Whether ``pod``'s profile may make room for it: PostFilter plugins, and a
        ``preemptionPolicy`` other than ``Never`` (as ``Scheduling.make_room`` checks)."""
        return bool(self.framework_for(pod).post_filter_plugins) and pod.preemption_policy != "Never"
