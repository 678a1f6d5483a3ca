"""Gang plugin: coscheduling through PreEnqueue, PreFilter (placement planning), Reserve and
Permit inside the bind call.

* PreEnqueue (for pods created with the extender's scheduling gate): a member is admitted only
  once ``minMember`` members of its group exist, so kube-scheduler does not start on a group that
  cannot complete.
* PreFilter, first member of a group (filter verb): plan where ``minMember`` members go, over the
  nodes kube-scheduler found feasible, counting the capacity other groups hold, and reserve it
  (``handle.reservations``). No plan fits: the member is Unschedulable and nothing is held, so two
  groups that together exceed the cluster never each hold a part (no deadlock). Every member then
  claims one planned slot and is filtered to its node when kube-scheduler offers it; otherwise it
  may go wherever it fits. Members of a group that timed out are rejected for ``backoff``.
* Reserve: the member's slot is consumed (it is now accounted itself).
* Permit: a member's bind waits (inside the HTTP call, always below kube-scheduler's httpTimeout)
  until ``minMember`` members are waiting or bound; then every waiting member is allowed at once.
* Unreserve: when one member fails or times out, every other waiting member is rejected, the
  reservation is released and the group backs off: all or nothing, no partial group holding
  resources.

Size and timeout come from the group's PodGroup object (``spec.minMember``,
``spec.scheduleTimeoutSeconds``) when there is one, else from the members' annotation.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.events import CAPACITY_EVENTS, Change, ClusterEvent
from extender.framework.handle import Handle, SnapshotView
from extender.framework.interfaces import PreFilterResult
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.runtime.registry import PluginSpec
from policies._args import parser
from policies.gang import logic
from policies.gang.args import GangArgs, GangArgsSchema

NAME = "Gang"

Group = tuple[str, str]


class Gang:
    name = NAME

    def __init__(self, args: GangArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.reservations = handle.reservations
        self.min_key = handle.annotation_prefix + "pod-group-min-member"
        self._backoff_until: dict[Group, float] = {}
        self._lock = threading.Lock()

    # ---- the group ----------------------------------------------------------------------------

    def _group(self, pod: PodInfo) -> Group | None:
        name = logic.group_of(pod.labels)
        return (pod.namespace, name) if name else None

    @staticmethod
    def _owner(group: Group) -> str:
        return f"pod-group/{group[0]}/{group[1]}"

    def _members(self, group: Group) -> list[PodInfo]:
        return self.handle.find_pods(group[0], {logic.GROUP_LABEL: group[1]})

    def _needed(self, group: Group, pod: PodInfo, members: list[PodInfo]) -> int | None:
        """minMember: the PodGroup's, else the members' annotation; None when neither says."""
        spec = self.handle.pod_group(*group)
        if spec is not None:
            return spec.min_member
        return logic.min_member([pod.annotations, *(m.annotations for m in members)], self.min_key)

    def _undefined(self, group: Group) -> Status:
        return Status.unschedulable(f"pod group {group[1]} is not defined: create PodGroup {group[1]} "
                                    f"or annotate its pods with {self.min_key}")

    def _permit_timeout(self, group: Group) -> float:
        spec = self.handle.pod_group(*group)
        if spec is not None and spec.schedule_timeout_seconds:
            return spec.schedule_timeout_seconds
        return self.args.permit_timeout

    # ---- extension points ---------------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        group = self._group(pod)
        if group is None:
            return Status()
        members = self._members(group)
        needed = self._needed(group, pod, members)
        if needed is None:
            return self._undefined(group)
        if len(members) < needed:
            return Status.unschedulable(f"pod group {group[1]} has {len(members)} of {needed} members")
        return Status()

    def events_to_register(self) -> tuple[ClusterEvent, ...]:
        """Members appearing, the PodGroup changing, and anything that frees or adds capacity
        (a group that did not fit may fit)."""
        return (ClusterEvent.POD_ADD, ClusterEvent.POD_GROUP_CHANGE, *CAPACITY_EVENTS)

    def queueing_hint(self, pod: PodInfo, change: Change) -> bool:
        """A new pod or a PodGroup matters only in the pod's namespace (and a PodGroup only if it
        is the pod's own)."""
        if change.event is ClusterEvent.POD_ADD:
            return change.key.startswith(pod.namespace + "/")
        if change.event is ClusterEvent.POD_GROUP_CHANGE:
            group = self._group(pod)
            return group is not None and change.key == f"{group[0]}/{group[1]}"
        return True

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: SnapshotView) -> tuple[PreFilterResult | None, Status]:
        group = self._group(pod)
        if group is None:
            return None, Status(Code.SKIP)
        with self._lock:
            until = self._backoff_until.get(group, 0.0)
        now = self.handle.clock.monotonic()
        if now < until:
            self.handle.requeue_after(pod, until - now)  # no cluster event says when the back-off ends
            return None, Status.unschedulable(f"pod group {group[1]} is backing off after a timeout")
        candidates = state.candidates
        if candidates is None:  # the re-check at bind: the plan was made at filter time
            return None, Status()
        members = self._members(group)
        needed = self._needed(group, pod, members)
        if needed is None:
            return None, self._undefined(group)
        placed = sum(1 for m in members if m.node_name and m.uid != pod.uid)
        if placed >= needed or not pod.requests:  # complete, or nothing of ours to hold
            return None, Status()
        owner = self._owner(group)
        offered = frozenset(candidates)
        with self.reservations.lock:
            if self.reservations.get(owner) is None:
                st = self._plan(owner, group, pod, needed - placed, candidates, snapshot)
                if not st.ok:
                    return None, st
            else:  # slots claimed by members deleted meanwhile go to whoever comes next
                self.reservations.unclaim_except(owner, {m.uid for m in members} | {pod.uid})
            node = self.reservations.claim(owner, pod.uid, prefer=offered)
        if node is None or node not in offered:
            return None, Status()  # no planned slot among the offered nodes: wherever it fits
        return PreFilterResult(frozenset((node,))), Status()

    def _plan(self, owner: str, group: Group, pod: PodInfo, count: int, candidates: Sequence[str],
              snapshot: SnapshotView) -> Status:
        """Place ``count`` copies of ``pod`` on the candidates (roomiest first, each copy checked
        by the profile's Filter plugins with the copies before it and every capacity held for
        others counted) and reserve them; Unschedulable, holding nothing, if they do not fit."""
        nodes = [info for info in map(snapshot.get, candidates) if info is not None]
        placements: list[str] = []
        for info in logic.planning_order(nodes, pod.requests):
            sim = info
            while len(placements) < count and self.handle.run_filters(CycleState(), pod, sim).ok:
                placements.append(info.name)
                copy = dataclasses.replace(pod, uid=f"{pod.uid}/planned/{len(placements)}", node_name=info.name)
                sim = sim.with_pod(copy, -1)
            if len(placements) >= count:
                break
        if len(placements) < count:
            return Status.unschedulable(f"pod group {group[1]} does not fit: {len(placements)} of {count} "
                                        "members have room (capacity held for other groups counted)")
        self.reservations.place(owner, pod.priority, [(n, pod) for n in placements], self.args.reservation_timeout,
                                member=lambda p: self._group(p) == group)
        return Status()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        group = self._group(pod)
        if group is not None:
            self.reservations.consume(self._owner(group), pod.uid, node_name)
        return Status()

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        group = self._group(pod)
        if group is None:
            return Status(), 0.0
        members = self._members(group)
        needed = self._needed(group, pod, members) or 1
        waiting = [wp for wp in self.handle.waiting_pods if self._group(wp.pod) == group and wp.pod.uid != pod.uid]
        held = {wp.pod.uid for wp in waiting} | {pod.uid}
        placed = sum(1 for m in members if m.node_name and m.uid not in held)  # bound, or past Permit
        if logic.ready(len(waiting) + 1, placed, needed):
            self.reservations.release(self._owner(group))
            for wp in waiting:
                wp.allow(NAME)
            return Status(), 0.0
        timeout = self._permit_timeout(group)
        self.reservations.keep(self._owner(group), timeout)  # the rest of the group's slots wait as long
        return Status.wait(f"waiting for pod group {group[1]}: {len(waiting) + 1 + placed} of {needed}"), timeout

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """A member failed (timeout, denial, bind error): the whole group stops, releases what it
        holds and backs off."""
        group = self._group(pod)
        if group is None:
            return
        with self._lock:
            self._backoff_until[group] = self.handle.clock.monotonic() + self.args.backoff
        self.reservations.release(self._owner(group))
        for wp in self.handle.waiting_pods:
            if self._group(wp.pod) == group and wp.pod.uid != pod.uid:
                wp.reject(NAME, f"pod group {group[1]}: member {pod.key} did not make it")


SPEC = PluginSpec(NAME, Gang, parser(GangArgsSchema), "Coscheduling: all-or-nothing pod groups via Permit in bind.")
