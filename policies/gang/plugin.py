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

This module is the adapter: what Gang remembers per group and the Permit and Unreserve decisions
are in ``policies.gang.manager``, the rules and the planning arithmetic in ``policies.gang.logic``;
here the framework's calls are translated to them and their side effects carried out (the
reservations, the waiting room, requeues). Every call into the handle and the reservations is
made here.
"""

from __future__ import annotations

from typing import Callable, Collection, Hashable, Iterator, Mapping, Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.events import CAPACITY_EVENTS, Change, ClusterEvent
from extender.framework.handle import Handle, SnapshotView, WaitingPodView
from extender.framework.interfaces import PreFilterResult
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.framework.registration import PluginSpec
from extender.framework.registration import schema_parser as parser
from policies.gang import logic
from policies.gang.args import GangArgs, GangArgsSchema
from policies.gang.logic import Group
from policies.gang.manager import BoundMembers, GroupManager, Verdict

NAME = "Gang"
_SELF = frozenset((NAME,))
"""Left out of the PreFilter plugins run for a member it plans (``Handle.run_pre_filters``)."""


class _Offered(Collection[str]):
    """The names a filter request offers, as a set, asked "is this node among them?" about the
    member's slot - once or twice: those answers come from scanning the list (cheaper than
    hashing 500 names into a set), and the set is made only when more nodes are asked about."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = names
        self._answers: dict[object, bool] = {}
        self._set: frozenset[str] | None = None

    def _all(self) -> frozenset[str]:
        if self._set is None:
            self._set = frozenset(self._names)
        return self._set

    def __contains__(self, name: object) -> bool:
        known = self._answers.get(name)
        if known is None:
            names = self._names if self._set is None and len(self._answers) < 2 else self._all()
            known = self._answers[name] = name in names
        return known

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class Gang:
    name = NAME
    WAITS_FOR_POD_GROUP = True
    """Its Permit holds a pod group's members until its PodGroup's minMember of them are waiting
    or bound: the admission gate admits such a profile's groups all or nothing
    (``Profiles.waits_for_pod_group``)."""

    def __init__(self, args: GangArgs, handle: Handle) -> None:
        self.args = args
        self.handle = handle
        self.reservations = handle.reservations
        self.min_key = handle.annotation_prefix + "pod-group-min-member"
        self.groups: GroupManager[WaitingPodView] = GroupManager(
            lambda: self.handle.clock.monotonic(), args.backoff, self._waiting_member,
            room_left=lambda: self.handle.waiting_pods.left)
        """Per group: members in Permit, members let go, the failed plan, the back-off."""
        self._claims_checked: dict[str, int] = {}
        """Per reservation owner: the group's ``GroupCount.left`` mark when every pod holding one
        of its slots was last seen to be a member (no owner: look before the next claim)."""
        self._planned_at: dict[str, tuple[int, Hashable]] = {}
        """Per reservation owner: the snapshot generation and held version its plan was made at."""

    # ---- the group ----------------------------------------------------------------------------

    @staticmethod
    def _group(pod: PodInfo) -> Group | None:
        return logic.group_key(pod)

    @staticmethod
    def _owner(group: Group) -> str:
        return f"pod-group/{group[0]}/{group[1]}"

    def _members(self, group: Group) -> list[PodInfo]:
        return self.handle.find_pods(group[0], {logic.GROUP_LABEL: group[1]})

    @staticmethod
    def _bound(members: list[PodInfo]) -> Mapping[str, bool]:
        """uid -> bound: whether the cluster shows the member bound (``spec.nodeName``; a member
        only assumed by the extender is not)."""
        return {m.uid: bool((m.raw.get("spec") or {}).get("nodeName")) for m in members}

    def _needed(self, group: Group, pod: PodInfo, members: list[PodInfo]) -> int | None:
        """minMember (the pod asked about counted among the members); None when nothing says."""
        return logic.needed(self.handle.pod_group(*group), (*members, pod), self.min_key)

    def _size(self, group: Group, pod: PodInfo) -> int | None:
        """``_needed`` without reading the members when the PodGroup states the size (they are
        read only for their annotations, without one)."""
        spec = self.handle.pod_group(*group)
        if spec is not None:
            return spec.min_member
        return self._needed(group, pod, self._members(group))

    def _bound_members(self, group: Group) -> BoundMembers:
        def is_bound(uid: str) -> bool:
            state = self.handle.group_member(*group, uid)
            return state is not None and state.bound
        return BoundMembers(lambda: self.handle.group_count(*group).bound, is_bound,
                            lambda uid: self.handle.group_member(*group, uid) is not None)

    def _undefined(self, group: Group) -> Status:
        return Status.unresolvable(f"pod group {group[1]} is not defined: create PodGroup {group[1]} "
                                   f"or annotate its pods with {self.min_key}")

    def _sweep(self) -> None:
        self.groups.sweep(lambda group: self._bound(self._members(group)))  # the cache, outside its lock

    def _waiting_member(self, group: Group, uid: str) -> WaitingPodView | None:
        """The waiting room's entry of ``uid`` when it waits there as a member of ``group``."""
        wp = self.handle.waiting_pods.get(uid)
        return wp if wp is not None and self._group(wp.pod) == group else None

    def _fitting(self) -> Callable[[PodInfo, NodeInfo], bool]:
        """A member's fit on a node as a cycle of its own would judge it: the profile's PreFilter
        plugins but Gang's (planning is what it does) once per member on a state of its own, then
        per node the Filter plugins on a copy of that state, capacity held against it counted."""
        prepared: dict[str, tuple[CycleState, frozenset[str] | None, bool]] = {}

        def fits(pod: PodInfo, node: NodeInfo) -> bool:
            known = prepared.get(pod.uid)
            if known is None:
                state = CycleState()
                allowed, st = self.handle.run_pre_filters(state, pod, skip=_SELF)
                known = prepared[pod.uid] = (state, allowed, st.ok)
            state, allowed, ok = known
            return ok and (allowed is None or node.name in allowed) and \
                self.handle.run_filters(state.clone(), pod, node).ok
        return fits

    def _permit_timeout(self, group: Group) -> float:
        return logic.permit_timeout(self.handle.pod_group(*group), self.args.permit_timeout)

    # ---- extension points ---------------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        group = self._group(pod)
        if group is None:
            return Status()
        needed = self._size(group, pod)
        if needed is None:
            return self._undefined(group)
        known = self.handle.group_count(*group).members
        if known < needed:
            return Status.unschedulable(f"pod group {group[1]} has {known} of {needed} members")
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
        left = self.groups.backing_off(group)
        if left:
            self.handle.requeue_after(pod, left)  # no cluster event says when the back-off ends
            return None, Status.unresolvable(f"pod group {group[1]} is backing off after a timeout")
        candidates = state.candidates
        if candidates is None:  # the re-check at bind: the plan was made at filter time
            return None, Status()
        needed = self._size(group, pod)
        if needed is None:
            return None, self._undefined(group)
        # read before the members (to plan, or to free claims): a member leaving after it changes
        # ``count.left`` again, so a look that missed it is made again
        count, me = self.handle.group_count(*group), self.handle.group_member(*group, pod.uid)
        if me is not None and me.assigned:  # counted on a node already (a Binding of unknown outcome held
            return None, Status()           # there, an allocation from before a restart): no plan of its own
        placed = count.assigned  # other members on a node
        if placed >= needed or not pod.requests:  # complete, or nothing of ours to hold
            return None, Status()
        owner = self._owner(group)
        offered = _Offered(candidates)
        fits = self._fitting()

        def plan_and_claim() -> tuple[str | None, Status]:
            node = None
            for _ in range(2):  # a second round after dropping a plan that no longer fits
                if self.reservations.get(owner) is None:
                    st = self._plan(owner, group, pod, self._members(group), needed - placed, candidates, snapshot,
                                    fits)
                    if not st.ok:
                        return None, st
                    for gone in [o for o in self._claims_checked if self.reservations.get(o) is None]:
                        del self._claims_checked[gone]  # what ended since the last plan
                    for gone in [o for o in self._planned_at if self.reservations.get(o) is None]:
                        del self._planned_at[gone]
                    self._claims_checked[owner] = count.left
                    self._planned_at[owner] = (snapshot.generation, self.handle.held_version())
                elif self._claims_checked.get(owner) != count.left:
                    # slots claimed by members gone meanwhile go to whoever comes next (only
                    # looked for when a member left, or a pod not known as a member claimed)
                    keep = {m.uid for m in self._members(group)} | {pod.uid}
                    self.reservations.unclaim_except(owner, keep)
                    self._claims_checked[owner] = count.left
                if me is None:
                    self._claims_checked.pop(owner, None)  # its claim is checked by the next member
                node = self.reservations.claim(owner, pod.uid, prefer=offered, requests=pod.requests)
                info = snapshot.get(node) if node is not None and node in offered else None
                if info is None or self._fit_known(owner, pod, snapshot) or fits(pod, info):
                    break
                # the capacity planned for it is gone (a pod of higher priority took it, the node
                # shrank): plan the group again rather than steer members to where they fail
                self.reservations.release(owner)
                node = None
            return node, Status()

        node, st = self.reservations.atomically(plan_and_claim)
        if not st.ok:
            return None, st
        if node is None or node not in offered:
            return None, Status()  # no planned slot among the offered nodes: wherever it fits
        return PreFilterResult(frozenset((node,))), Status()

    def _fit_known(self, owner: str, pod: PodInfo, snapshot: SnapshotView) -> bool:
        """The slot ``pod`` claimed was planned for it (the plan found it fits there) and neither
        the cluster nor the capacity held changed since the plan: no need to look again."""
        if self._planned_at.get(owner) != (snapshot.generation, self.handle.held_version()):
            return False
        res = self.reservations.get(owner)
        slot = res.claims.get(pod.uid) if res is not None else None
        return slot is not None and slot.planned_for == pod.uid

    def _plan(self, owner: str, group: Group, pod: PodInfo, members: list[PodInfo], count: int,
              candidates: Sequence[str], snapshot: SnapshotView, fits: Callable[[PodInfo, NodeInfo], bool]) -> Status:
        """Place the ``count`` members still to go on the candidates and reserve them; holding
        nothing, Unresolvable, if they do not fit (``logic.wanted`` says who, ``logic.place``
        where; a member fits where its own cycle would pass it - ``_fitting`` -, with the members
        placed before it and every capacity held for others counted). A plan that failed is not made
        again until the cluster, the capacity held (reservations, nominations), the nodes offered
        or the members change."""
        wanted = logic.wanted(pod, members, count)
        self.reservations.nodes()  # drops expired reservations first: the version then tells
        key = (snapshot.generation, self.handle.held_version(), tuple(candidates), tuple(m.uid for m in wanted))
        known = self.groups.failed_plan(group, key)
        if known is not None:
            return known
        nodes = [info for info in map(snapshot.get, candidates) if info is not None]
        placements, missing = logic.place(wanted, nodes, pod.requests, fits)
        if missing:
            st = Status.unresolvable(f"pod group {group[1]} does not fit: {len(placements)} of {len(wanted)} "
                                     "members have room (capacity held for other groups counted)")
            self.groups.plan_failed(group, key, st)
            return st
        self.groups.plan_made(group)
        self.reservations.place(owner, pod.priority, placements, self.args.reservation_timeout,
                                member=lambda p: self._group(p) == group)
        return Status()

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        group = self._group(pod)
        if group is not None:
            self.reservations.consume(self._owner(group), pod.uid, node_name, pod.requests)
        return Status()

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """The manager decides (``GroupManager.permit``): allow this member and let the others
        waiting go when the group is complete (what its plan still holds is released), else wait
        (its slots are held as long), or deny when the group's size is unknown (its PodGroup is
        gone) or it is backing off - never let part of a group go."""
        self._sweep()
        group = self._group(pod)
        if group is None:
            return Status(), 0.0
        needed = self._size(group, pod)
        decision = self.groups.permit(group, pod.uid, needed, self._bound_members(group))
        if decision.verdict is Verdict.UNDEFINED:
            return self._undefined(group), 0.0
        if decision.verdict is Verdict.BACKING_OFF:
            return Status.unresolvable(f"pod group {group[1]} is backing off after a timeout"), 0.0
        if decision.verdict is Verdict.ALLOW:
            self.reservations.release(self._owner(group))
            for wp in decision.others:
                wp.allow(NAME)
            return Status(), 0.0
        timeout = self._permit_timeout(group)
        self.reservations.keep(self._owner(group), timeout)  # the rest of the group's slots wait as long
        return Status.wait(f"waiting for pod group {group[1]}: {decision.counted} of {needed}"), timeout

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        """A member failed (timeout, denial, bind error). Before its group was let go, the whole
        group stops: it releases what it holds, its waiting members are rejected and it backs off.
        After (its Binding failed), its place is held for kube-scheduler's retry instead (a
        Binding of unknown outcome, ``binding_outcome_unknown``: claimed by the member, so that it
        counts only once the engine's hold of the member is gone)."""
        group = self._group(pod)
        if group is None:
            return
        decision = self.groups.unreserve(group, pod.uid)
        if decision.keep_place:  # the rest of the group is being bound: hold this member's place for its retry
            if pod.requests:
                owner = self._owner(group)

                def keep() -> None:
                    self.reservations.place(owner, pod.priority, [(node_name, pod)], self.args.reservation_timeout,
                                            member=lambda p: self._group(p) == group, extend=True)
                    if state.binding_outcome_unknown:
                        # the engine holds the member there while its Binding may stand: claimed by
                        # it, the slot counts for no one while that hold does (a claimer the node
                        # accounts is skipped), and keeps its place once the hold ends unbound
                        self.reservations.claim(owner, pod.uid, prefer=(node_name,), requests=pod.requests)
                self.reservations.atomically(keep)
            return
        self.reservations.release(self._owner(group))
        for wp in decision.reject:
            wp.reject(NAME, f"pod group {group[1]}: member {pod.key} did not make it")


SPEC = PluginSpec(NAME, Gang, parser(GangArgsSchema), "Coscheduling: all-or-nothing pod groups via Permit in bind.")
