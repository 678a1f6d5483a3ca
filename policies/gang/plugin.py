"""Gang plugin: coscheduling through PreEnqueue, PreFilter and Permit inside the bind call.

* PreEnqueue (for pods created with the extender's scheduling gate): a member is admitted only
  once ``minMember`` members of its group exist, so kube-scheduler does not start on a group that
  cannot complete.
* PreFilter: members of a group that recently timed out are rejected for ``backoff`` seconds.
* Permit: a member's bind waits (inside the HTTP call, always below kube-scheduler's httpTimeout)
  until ``minMember`` members are waiting or bound; then every waiting member is allowed at once.
* Unreserve: when one member fails or times out, every other waiting member of the group is
  rejected and the group backs off: all or nothing, no partial group left holding resources.

Not yet: planning the whole group's placement at the first member (so two gangs can never each
hold part of what both need) and PodGroup objects (CRD) as the source of ``minMember``.
"""

from __future__ import annotations

import threading

from extender.framework.cycle_state import CycleState
from extender.framework.handle import Handle, SnapshotView
from extender.framework.interfaces import PreFilterResult
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.runtime.registry import PluginSpec
from policies._args import parser
from policies.gang import logic
from policies.gang.args import GangArgs, GangArgsSchema

NAME = "Gang"


class Gang:
    name = NAME

    def __init__(self, args: GangArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.min_key = handle.annotation_prefix + "pod-group-min-member"
        self._backoff_until: dict[tuple[str, str], float] = {}
        self._lock = threading.Lock()

    def _group(self, pod: PodInfo) -> tuple[str, str] | None:
        name = logic.group_of(pod.labels)
        return (pod.namespace, name) if name else None

    def _members(self, group: tuple[str, str]) -> list[PodInfo]:
        return self.handle.find_pods(group[0], {logic.GROUP_LABEL: group[1]})

    def _needed(self, pod: PodInfo, members: list[PodInfo]) -> int:
        return logic.min_member([pod.annotations, *(m.annotations for m in members)], self.min_key) or 1

    def pre_enqueue(self, pod: PodInfo) -> Status:
        group = self._group(pod)
        if group is None:
            return Status()
        members = self._members(group)
        needed = self._needed(pod, members)
        if len(members) < needed:
            return Status.unschedulable(f"pod group {group[1]} has {len(members)} of {needed} members")
        return Status()

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: SnapshotView) -> tuple[PreFilterResult | None, Status]:
        group = self._group(pod)
        if group is None:
            return None, Status(Code.SKIP)
        with self._lock:
            until = self._backoff_until.get(group, 0.0)
        if self.handle.clock.monotonic() < until:
            return None, Status.unschedulable(f"pod group {group[1]} is backing off after a timeout")
        return None, Status()

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        group = self._group(pod)
        if group is None:
            return Status(), 0.0
        members = self._members(group)
        needed = self._needed(pod, members)
        waiting = [wp for wp in self.handle.waiting_pods if self._group(wp.pod) == group and wp.pod.uid != pod.uid]
        held = {wp.pod.uid for wp in waiting} | {pod.uid}
        placed = sum(1 for m in members if m.node_name and m.uid not in held)  # bound, or past Permit
        if logic.ready(len(waiting) + 1, placed, needed):
            for wp in waiting:
                wp.allow(NAME)
            return Status(), 0.0
        return Status.wait(f"waiting for pod group {group[1]}: {len(waiting) + 1 + placed} of {needed}"), \
            self.args.permit_timeout

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """A member failed (timeout, denial, bind error): the whole group stops and backs off."""
        group = self._group(pod)
        if group is None:
            return
        with self._lock:
            self._backoff_until[group] = self.handle.clock.monotonic() + self.args.backoff
        for wp in self.handle.waiting_pods:
            if self._group(wp.pod) == group and wp.pod.uid != pod.uid:
                wp.reject(NAME, f"pod group {group[1]}: member {pod.key} did not make it")


SPEC = PluginSpec(NAME, Gang, parser(GangArgsSchema), "Coscheduling: all-or-nothing pod groups via Permit in bind.")

