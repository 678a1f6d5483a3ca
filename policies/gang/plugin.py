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
  resources. A member that fails after Permit let its group go (its Binding failed) cannot take
  the others back: their Bindings are on their way. Its place is held instead (a slot on its
  node, planned for it) so kube-scheduler's retry completes the group, rather than the group
  backing off partly bound while others take the capacity its last member needs.

Size and timeout come from the group's PodGroup object (``spec.minMember``,
``spec.scheduleTimeoutSeconds``) when there is one, else from the members' annotation.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.events import CAPACITY_EVENTS, Change, ClusterEvent
from extender.framework.handle import Handle, SnapshotView, WaitingPodView
from extender.framework.interfaces import PreFilterResult
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.framework.registration import PluginSpec
from extender.framework.registration import schema_parser as parser
from policies.gang import logic
from policies.gang.args import GangArgs, GangArgsSchema

NAME = "Gang"

Group = tuple[str, str]

SWEEP_SECONDS = 10.0
"""How often what the plugin keeps per group is checked for groups that are done (``_sweep``)."""


class Gang:
    name = NAME

    def __init__(self, args: GangArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.reservations = handle.reservations
        self.min_key = handle.annotation_prefix + "pod-group-min-member"
        self._backoff_until: dict[Group, float] = {}
        self._allowed: dict[Group, set[str]] = {}
        """Members Permit let go and the cluster has not confirmed bound yet, per group."""
        self._no_fit: dict[Group, tuple[tuple[object, ...], Status]] = {}
        """The last failed plan per group and what it was made against (so a member of a group
        that does not fit does not re-plan until something changed)."""
        self._waiting: dict[Group, set[str]] = {}
        """UIDs of the members each group has in Permit, each registered by its own Permit: a
        Permit looks at its group's members (checked against the waiting room), not at every pod
        waiting there - with a thousand binds waiting, that scan was a tenth of the worker's time."""
        self._lock = threading.Lock()
        self._next_sweep = 0.0

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
        """minMember: the PodGroup's, else the annotation of the oldest member (the pod asked about
        included) that states one; None when neither says."""
        spec = self.handle.pod_group(*group)
        if spec is not None:
            return spec.min_member
        return logic.min_member((((m.creation_timestamp, m.uid), m.annotations) for m in (*members, pod)),
                                self.min_key)

    def _undefined(self, group: Group) -> Status:
        return Status.unresolvable(f"pod group {group[1]} is not defined: create PodGroup {group[1]} "
                                   f"or annotate its pods with {self.min_key}")

    def _backing_off(self, group: Group) -> float:
        """Seconds left of the group's back-off (0 when none)."""
        with self._lock:
            until = self._backoff_until.get(group, 0.0)
        return max(0.0, until - self.handle.clock.monotonic())

    def _sweep(self) -> None:
        """At most every SWEEP_SECONDS, forget what is kept for groups that no longer need it:
        members Permit let go once the cluster shows them bound or they are gone (a group that
        completed is not looked at again, so its own Permit never drops them), the failed plan of
        a group with no member left, back-offs that ended. Without it these grow with every group
        ever scheduled."""
        now = self.handle.clock.monotonic()
        with self._lock:
            if now < self._next_sweep:
                return
            self._next_sweep = now + SWEEP_SECONDS
            self._backoff_until = {g: t for g, t in self._backoff_until.items() if t > now}
            before = {g: set(uids) for g, uids in self._allowed.items()}
            groups = set(before) | set(self._no_fit)
            for group in list(self._waiting):
                self._in_permit(group)
        for group in groups:
            members = self._members(group)  # the cache, outside our lock
            unbound = {m.uid for m in members if not (m.raw.get("spec") or {}).get("nodeName")}
            with self._lock:
                if group in self._allowed:  # members allowed since ``before`` was taken stay
                    self._allowed[group] -= before.get(group, set()) - unbound
                    if not self._allowed[group]:
                        del self._allowed[group]
                if not members:
                    self._no_fit.pop(group, None)

    def _in_permit(self, group: Group, joining: str = "") -> list[WaitingPodView]:
        """The members of ``group`` in the waiting room (lock held), after registering
        ``joining``, which is in the room now; members that left are forgotten. Registering and
        counting in one step under the lock: of two members arriving together, the later one
        always sees the earlier."""
        uids = self._waiting.setdefault(group, set())
        if joining:
            uids.add(joining)
        room = self.handle.waiting_pods
        found = []
        for uid in list(uids):
            wp = room.get(uid)
            if wp is not None and self._group(wp.pod) == group:
                found.append(wp)
            else:
                uids.discard(uid)
        if not uids:
            del self._waiting[group]
        return found

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
        return (ClusterEvent.POD_ADD, ClusterEvent.POD_UPDATE, ClusterEvent.POD_GROUP_CHANGE, *CAPACITY_EVENTS)

    def queueing_hint(self, pod: PodInfo, change: Change) -> bool:
        """A new pod or a PodGroup matters only in the pod's namespace (and a PodGroup only if it
        is the pod's own)."""
        if change.event in (ClusterEvent.POD_ADD, ClusterEvent.POD_UPDATE):  # a member appeared or was relabelled
            return change.key.startswith(pod.namespace + "/")
        if change.event is ClusterEvent.POD_GROUP_CHANGE:
            group = self._group(pod)
            return group is not None and change.key == f"{group[0]}/{group[1]}"
        return True

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: SnapshotView) -> tuple[PreFilterResult | None, Status]:
        """Gang rejections are UnschedulableAndUnresolvable: evicting pods on one node cannot make
        a group complete, stop backing off or fit as a whole (as upstream coscheduling says)."""
        group = self._group(pod)
        if group is None:
            return None, Status(Code.SKIP)
        self._sweep()
        left = self._backing_off(group)
        if left:
            self.handle.requeue_after(pod, left)  # no cluster event says when the back-off ends
            return None, Status.unresolvable(f"pod group {group[1]} is backing off after a timeout")
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
            node = None
            for _ in range(2):  # a second round after dropping a plan that no longer fits
                if self.reservations.get(owner) is None:
                    st = self._plan(owner, group, pod, members, needed - placed, candidates, snapshot)
                    if not st.ok:
                        return None, st
                else:  # slots claimed by members deleted meanwhile go to whoever comes next
                    self.reservations.unclaim_except(owner, {m.uid for m in members} | {pod.uid})
                node = self.reservations.claim(owner, pod.uid, prefer=offered, requests=pod.requests)
                info = snapshot.get(node) if node is not None and node in offered else None
                if info is None or self.handle.run_filters(CycleState(), pod, info).ok:
                    break
                # the capacity planned for it is gone (a pod of higher priority took it, the node
                # shrank): plan the group again rather than steer members to where they fail
                self.reservations.release(owner)
                node = None
        if node is None or node not in offered:
            return None, Status()  # no planned slot among the offered nodes: wherever it fits
        return PreFilterResult(frozenset((node,))), Status()

    def _plan(self, owner: str, group: Group, pod: PodInfo, members: list[PodInfo], count: int,
              candidates: Sequence[str], snapshot: SnapshotView) -> Status:
        """Place the ``count`` members still to go on the candidates and reserve them; holding
        nothing, Unresolvable, if they do not fit. Who: ``pod`` and the other unplaced members
        that ask for managed resources, largest first (members asking for none need no slot and
        count for the group), then copies of ``pod`` for members that do not exist yet. Where:
        roomiest nodes first, filled while the next member fits (the profile's Filter plugins,
        with the members placed before it and every capacity held for others counted)."""
        others = [m for m in members if not m.node_name and m.uid != pod.uid]
        asking = sorted((m for m in others if m.requests), key=lambda m: (m.creation_timestamp, m.uid))
        free_riders = len(others) - len(asking)
        wanted = [pod, *asking][:count]
        wanted += [pod] * max(0, count - len(wanted) - free_riders)
        wanted.sort(key=lambda m: -sum(m.requests.values()))
        self.reservations.nodes()  # drops expired reservations first: the version then tells
        key = (snapshot.generation, self.reservations.version, tuple(candidates), tuple(m.uid for m in wanted))
        with self._lock:
            known = self._no_fit.get(group)
        if known is not None and known[0] == key:
            return known[1]
        nodes = [info for info in map(snapshot.get, candidates) if info is not None]
        placements: list[tuple[str, PodInfo]] = []
        queue = list(wanted)
        for info in logic.planning_order(nodes, pod.requests):
            sim = info
            while queue and self.handle.run_filters(CycleState(), queue[0], sim).ok:
                member = queue.pop(0)
                placements.append((info.name, member))
                sim = sim.with_pod(dataclasses.replace(member, uid=f"{member.uid}/planned/{len(placements)}",
                                                       node_name=info.name), -1)
            if not queue:
                break
        if queue:
            st = Status.unresolvable(f"pod group {group[1]} does not fit: {len(placements)} of {len(wanted)} "
                                     "members have room (capacity held for other groups counted)")
            with self._lock:
                self._no_fit[group] = (key, st)
            return st
        with self._lock:
            self._no_fit.pop(group, None)
        self.reservations.place(owner, pod.priority, placements, self.args.reservation_timeout,
                                member=lambda p: self._group(p) == group)
        return Status()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        group = self._group(pod)
        if group is not None:
            self.reservations.consume(self._owner(group), pod.uid, node_name, pod.requests)
        return Status()

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Allow when the members waiting here, those allowed before and those the cluster shows
        bound reach minMember; deny when the group's size is unknown (its PodGroup is gone) or it
        is backing off - never let part of a group go."""
        self._sweep()
        group = self._group(pod)
        if group is None:
            return Status(), 0.0
        members = self._members(group)
        needed = self._needed(group, pod, members)
        if needed is None:
            return self._undefined(group), 0.0
        if self._backing_off(group):
            return Status.unresolvable(f"pod group {group[1]} is backing off after a timeout"), 0.0
        bound = {m.uid for m in members if (m.raw.get("spec") or {}).get("nodeName")}
        with self._lock:
            waiting = [wp for wp in self._in_permit(group, pod.uid) if wp.pod.uid != pod.uid]
            held = {wp.pod.uid for wp in waiting} | {pod.uid}
            allowed = self._allowed.get(group, set()) - bound
            placed = len((bound | allowed) - held)
            go = logic.ready(len(waiting) + 1, placed, needed)
            if go:
                self._allowed[group] = allowed | held
                left = self._waiting.pop(group, set()) - held  # let go: they leave the room
                if left:
                    self._waiting[group] = left
            elif allowed:
                self._allowed[group] = allowed
            else:
                self._allowed.pop(group, None)
        if go:
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
        now = self.handle.clock.monotonic()
        with self._lock:
            let_go = pod.uid in self._allowed.get(group, ())
            if let_go:
                self._allowed[group].discard(pod.uid)
            else:
                self._backoff_until = {g: t for g, t in self._backoff_until.items() if t > now}
                self._backoff_until[group] = now + self.args.backoff
                self._allowed.pop(group, None)
                self._no_fit.pop(group, None)
                waiting = [wp for wp in self._in_permit(group) if wp.pod.uid != pod.uid]
        if let_go:  # the rest of the group is being bound: hold this member's place for its retry
            if pod.requests:
                self.reservations.place(self._owner(group), pod.priority, [(node_name, pod)],
                                        self.args.reservation_timeout, member=lambda p: self._group(p) == group,
                                        extend=True)
            return
        self.reservations.release(self._owner(group))
        for wp in waiting:
            wp.reject(NAME, f"pod group {group[1]}: member {pod.key} did not make it")


SPEC = PluginSpec(NAME, Gang, parser(GangArgsSchema), "Coscheduling: all-or-nothing pod groups via Permit in bind.")
