"""Admission through scheduling gates: the extender's PreEnqueue, with an unmodified kube-scheduler.

Pods created with the extender's gate (``spec.schedulingGates: [{name: kube-extender.io/admission}]``)
are never tried by kube-scheduler. The Admitter looks at them in QueueSort order (priority, then
age) and runs the PreEnqueue plugins of each pod's profile; a pod every plugin admits gets the
extender's gate removed (and only that gate: other controllers' gates stay), after which
kube-scheduler schedules it within a fraction of a second.

Strategies:

* ``StrictFIFO``: a pod that is not admitted blocks the pods behind it that want any of the same
  managed resources (a big job is not starved by a stream of small ones).
* ``BestEffortFIFO``: a pod that is not admitted is skipped; those behind it are still considered.

Admitted pods hold their capacity until they are bound. When a pod is admitted, the node it
would go to is chosen as Filter and Score would choose it - every capacity already held counted,
that of pods admitted before it included - and its managed requests are held there
(the queue's reservations, owner ``admitted/<uid>``) at its priority, as a nomination holds
capacity: later pods of the same pass, later passes, and kube-scheduler's Filter of pods of equal
or lower priority all see it as taken. So one pass never admits more pods than fit. The hold ends
when the pod is bound (by this extender: at assume; by anyone else: at the next pass), deleted,
planned for by another reservation (Gang's plan for its group, which holds it from then on), or
after ``holdTimeout`` seconds without kube-scheduler binding it, whichever comes first; it never
counts against the pod itself or the members of its pod group (Gang plans for those as one). A
pod that keeps other controllers' gates holds nothing and is preempted for nowhere
(kube-scheduler cannot try it yet); a pod being deleted is not admitted at all.
A pod that PreEnqueue admits but for which no node has room once the holds are counted stays
gated - unless ``make_room`` (the runtime's preemption at admission: its profile's PostFilter,
e.g. a quota plugin reclaiming lent capacity) makes room for it, as kube-scheduler's cycle would:
it is then admitted, nominated to that node, and the nomination holds the room instead of an
admission hold. A pod a PreEnqueue plugin refused for want of room may make room the same way.

Pod groups (pods labelled ``scheduling.x-k8s.io/pod-group``) go all or nothing. A group's gated
members are placed together when the pass reaches the first of them PreEnqueue admits: those with
room at once get seats, booked ahead of the pods behind them (admitted one by one, two groups
interleaved in queue order would each take a part of the room). A member with a seat is evaluated
in this pass whatever its kept verdict, and under StrictFIFO is not blocked by a pod between it and
the first member (that pod had no room because of the seats); a member another controller still
gates gets no seat (kube-scheduler cannot try it). When the group has a PodGroup
(``ClusterView.pod_group_spec``), the member's profile waits for the group in Permit
(``QueuePlugins.waits_for_pod_group``: Gang) and cannot make room (no ``make_room`` for it: a
profile that preempts makes room for its members one by one, as kube-scheduler's PostFilter would -
judged by the room free now, a group that fits once victims leave would never be let in, so there a
group may be admitted in part while preemption frees its room), the members that can run must reach
its ``minMember``: those with a seat or asking for no managed resource, plus those past the gate -
on a node, bound or assumed (``ClusterView.group_count``), or pending with no scheduling gate left
and not being deleted (what Gang's Permit counts) and either holding room (an admission hold, a
reservation's slot, a nomination) or fitting where the others leave room (they are placed before
the seats are booked). Else none of them is admitted in this pass: the seats go back to the pods
behind, each says ``pod group NS/NAME: N of minMember M members have room``, and under StrictFIFO
they block what they want, as a pod without room does. (The part admitted would hold its capacity,
then wait in Gang's Permit, until it timed out.) A group with no usable PodGroup - sized by its
members' annotation, which only Gang reads - or of a profile without Gang (nothing waits for the
group: its members run as any pods) has the members with room admitted.

A pod held at the gate says why on itself: an Event (``Normal``, reason ``WaitingForAdmission``,
the plugin's message - or, kept behind the head under StrictFIFO, that) whenever why is new or
changes, so ``kubectl describe pod`` tells a pod waiting for its group's other members from one
waiting for room or for the pods ahead of it. Repeats of the same reason write nothing.

Queueing hints: a pod a PreEnqueue plugin held is evaluated again only after a cluster event that
plugin declared (``events_to_register`` / ``queueing_hint``, see ``extender.framework.events``)
or a change to the pod itself; in between it keeps its verdict (and, under StrictFIFO, its place
at the head). A pass runs when the cluster changed, at most every ``interval`` seconds; every
``resync`` seconds all gated pods are evaluated, events or not.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from extender.framework.handle import ClusterWriter, WriteError
from extender.framework.pod_group import group_of
from extender.framework.views import PodInfo
from extender.queue.interfaces import MakeRoom, Place, QueueMetrics, QueuePlugins
from extender.queue.queue import SchedulingQueue, admission_owner

log = logging.getLogger(__name__)

STRATEGIES = ("StrictFIFO", "BestEffortFIFO")

BLOCKED = "behind a pod of the queue that wants the same resources (StrictFIFO)"
"""Why a pod that StrictFIFO keeps behind the head stays gated."""

NO_ROOM = "admission"
"""The verdict's plugin when PreEnqueue admitted a pod but no node has room for it once the
capacity held for pods admitted before it is counted (every event may change that)."""

GROUP_SHORT = "admission/pod-group"
"""The verdict's plugin when a pod group's members with room, plus those past the gate, are
fewer than its PodGroup's minMember (every event may change that)."""


def same_unit(pod: PodInfo) -> Callable[[PodInfo], bool]:
    """Pods that capacity held for ``pod`` does not count against (outside admission): the pod
    itself and the members of its pod group, which Gang plans and holds for as one."""
    uid, namespace, group = pod.uid, pod.namespace, group_of(pod.labels)
    if group is None:
        return lambda other: other.uid == uid
    return lambda other: other.uid == uid or (other.namespace == namespace and group_of(other.labels) == group)


@dataclass
class AdmissionResult:
    admitted: list[str]
    held: dict[str, str]
    """pod key -> why it stays gated."""
    evaluated: int = 0
    """Pods run through PreEnqueue in this pass (the others kept their verdict)."""


@dataclass(frozen=True)
class _Verdict:
    plugin: str
    reason: str


class Admitter:
    """Handed what it needs rather than the engine: the queue (the cache's view - pods, PodGroups,
    pod groups' member counts - and the reservations are its), the profiles'
    PreEnqueue/QueueSort/hints (``plugins``), ``place`` (where a pod would go now:
    ``Engine.placement``) and the writer."""

    def __init__(self, queue: SchedulingQueue, plugins: QueuePlugins, place: Place, writer: ClusterWriter,
                 gate: str, strategy: str = "BestEffortFIFO", hold_timeout: float = 30.0,
                 metrics: QueueMetrics | None = None, make_room: MakeRoom | None = None) -> None:
        if strategy not in STRATEGIES:
            raise ValueError(f"strategy must be one of {STRATEGIES}")
        self.queue = queue
        self.cluster = queue.cluster
        self.reservations = queue.reservations
        self.plugins = plugins
        self.place = place
        self.make_room = make_room
        self.writer = writer
        self.metrics = metrics
        self.gate = gate
        self.strategy = strategy
        self.hold_timeout = hold_timeout
        self.last: AdmissionResult = AdmissionResult([], {})
        self._stop = threading.Event()
        self._seq: int | None = None
        self._verdicts: dict[str, _Verdict] = {}
        self._stale: set[str] = set()
        self._said: dict[str, str] = {}
        """What the last WaitingForAdmission Event on each gated pod said, by UID."""
        self._holds: dict[str, PodInfo] = {}
        """Admitted pods whose capacity is held, by UID."""
        self._failed_writes = 0
        """Gate removals that failed so far (``change_count`` adds them)."""
        queue.on_hold_again = self._follow  # a failed bind's hold given back: ended as any other
        self.cluster.on_pod_change(self._pod_changed)

    def _pod_changed(self, uid: str, pod: PodInfo | None) -> None:
        """An admitted pod the cluster shows on a node now ends its hold at once (kube-scheduler
        bound it: no bind of this process consumed the hold): until the next pass the hold would
        count beside the pod itself, and a pod filtered meanwhile be refused room that is free."""
        if pod is None or not pod.node_name or uid not in self._holds:
            return
        accounted = self.cluster.pod(uid)
        if accounted is not None and self._holds.pop(uid, None) is not None:
            self.reservations.consume(admission_owner(uid), uid, accounted.node_name)

    def gated(self, pending: Sequence[PodInfo] | None = None) -> list[PodInfo]:
        """Pending pods (``pending``, else the cluster's) carrying the extender's gate, in the
        default profile's QueueSort order - but those being deleted (kube-scheduler never
        schedules them)."""
        pods = [p for p in (self.cluster.pending_pods() if pending is None else pending)
                if not p.deleting and any(isinstance(g, dict) and g.get("name") == self.gate
                                          for g in (p.raw.get("spec") or {}).get("schedulingGates") or ())]
        return self.plugins.sort(pods)

    def _past_gate(self, pending: Sequence[PodInfo]) -> Callable[[tuple[str, str]], tuple[int, list[PodInfo]]]:
        """Per pod group: its members past the gate, as Gang counts them towards minMember - on a
        node (bound or assumed: ``group_count``'s ``assigned``), or pending with no scheduling gate
        left and not being deleted (kube-scheduler may try them) - as (those sure of their room:
        on a node, or pending with room held for them - an admission hold, a reservation's slot
        planned for or claimed by them, a nomination; the pending ones holding nothing, whose
        room is to be found). ``pending`` is read once, at the first group asked about."""
        ungated: dict[tuple[str, str], tuple[int, list[PodInfo]]] | None = None

        def count(key: tuple[str, str]) -> tuple[int, list[PodInfo]]:
            nonlocal ungated
            if ungated is None:
                ungated = {}
                holding = {uid for uid, _ in self.reservations.held()}
                holding.update(p.uid for _, p in self.queue.nominator.nominations())
                for p in pending:
                    name = group_of(p.labels)
                    if (name is not None and not p.deleting and not (p.raw.get("spec") or {}).get("schedulingGates")
                            and self.cluster.pod(p.uid) is None):  # an assumed one is counted as assigned
                        sure, loose = ungated.get((p.namespace, name), (0, []))
                        if p.uid in holding or not p.requests:
                            sure += 1
                        else:
                            loose.append(p)
                        ungated[(p.namespace, name)] = (sure, loose)
            sure, loose = ungated.get(key, (0, []))
            return sure + self.cluster.group_count(*key).assigned, loose
        return count

    def _min_member(self, key: tuple[str, str], pod: PodInfo) -> int | None:
        """The minMember of pod group ``key``'s PodGroup, ``pod`` one of its members; None without
        one (or a malformed one), or when ``pod``'s profile does not wait for its group in Permit
        (no Gang: nothing there counts the group, its members run as any pods)."""
        if not key[1] or not self.plugins.waits_for_pod_group(pod):
            return None
        spec = self.cluster.pod_group_spec(*key)
        return spec.min_member if spec is not None else None

    def run_once(self, full: bool = False) -> AdmissionResult:
        """One pass over the gated pods in queue order. ``full``: evaluate every pod, not only
        those the events since the last pass may help."""
        self._end_holds()  # first: holds that ended freed capacity, a change this pass must see
        full = full or self._seq is None
        changes, self._seq, complete = self.cluster.changes_since(None if full else self._seq)
        full = full or not complete
        admitted: list[str] = []
        held: dict[str, str] = {}
        blocked: set[str] = set()
        evaluated = 0
        pending = self.cluster.pending_pods()
        gated = self.gated(pending)
        past_gate = self._past_gate(pending)
        live = {p.uid for p in gated}
        self._verdicts = {uid: v for uid, v in self._verdicts.items() if uid in live}
        self._stale &= live
        self._said = {uid: text for uid, text in self._said.items() if uid in live}
        units: dict[tuple[str, str], list[PodInfo]] = {}
        for pod in gated:
            group = group_of(pod.labels)
            if group is not None:
                units.setdefault((pod.namespace, group), []).append(pod)
        # pod group -> its gated members' seats (uid -> node, member), booked at its first member:
        # the room its members have at once, ahead of the pods behind them in this pass
        booked: dict[tuple[str, str], dict[str, tuple[str, PodInfo]]] = {}
        short: dict[tuple[str, str], str] = {}
        """Pod groups whose members with room plus those past the gate are fewer than their
        PodGroup's minMember: why none of their members is admitted in this pass."""

        def others(key: tuple[str, str]) -> dict[str, list[PodInfo]] | None:
            extra: dict[str, list[PodInfo]] = {}
            for k, seats in booked.items():
                if k != key:
                    for node, member in seats.values():
                        extra.setdefault(node, []).append(member)
            return extra or None
        for pod in gated:
            wants = set(pod.requests)
            key = (pod.namespace, group_of(pod.labels) or "")
            seated = pod.uid in booked.get(key, {})  # its room was booked ahead of the pods since
            if self.strategy == "StrictFIFO" and wants & blocked and key not in short and not seated:
                # not blocked by its own group, nor by a pod behind its group's booked seats
                kept = self._verdicts.get(pod.uid)
                if kept is not None and (full or self.plugins.wakes(pod, kept.plugin, changes)):
                    self._stale.add(pod.uid)  # woken while blocked: evaluate it once unblocked
                held[pod.key] = BLOCKED
                self._say(pod, BLOCKED)
                continue
            verdict = self._verdicts.get(pod.uid)
            if (verdict is not None and not full and pod.uid not in self._stale and not seated
                    and not self.plugins.wakes(pod, verdict.plugin, changes)):
                held[pod.key] = verdict.reason
                if verdict.plugin == GROUP_SHORT and key not in booked:
                    short.setdefault(key, verdict.reason)  # nothing changed: its group is still short
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            if key in short:  # its group is not admitted in this pass: no PreEnqueue, no preemption
                self._stale.discard(pod.uid)
                self._hold_short(pod, short[key], held)
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            evaluated += 1
            self._stale.discard(pod.uid)
            st = self.plugins.pre_enqueue(pod)
            # preemption only for a pod kube-scheduler may try once our gate is gone (it neither
            # tries nor preempts for one another controller gates: the room would be held for ever)
            make_room = self.make_room if self._only_our_gate(pod) else None
            unit = units.get(key, [])
            rest = unit[unit.index(pod):] if unit else []  # its group's gated members not passed yet
            preempted = not st.ok and make_room is not None and make_room(pod, st)
            if not st.ok and not preempted:
                reason = f"{st.plugin}: {st.message}" if st.plugin else st.message
                held[pod.key] = reason
                self._hold_at_gate(pod, _Verdict(st.plugin or "", reason))
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            if unit and not preempted and key not in booked:
                # all or nothing only where no room can be made: a profile that preempts makes
                # room for its members one by one, as kube-scheduler's PostFilter would - judged
                # by the room free now, a group that fits once victims leave would never be let in
                need = None if make_room is not None and self.plugins.preempts(pod) else self._min_member(key, pod)
                if need is not None:
                    booked[key], why = self._group_seats(key, need, rest, others(key), past_gate)
                    if why is not None:  # all or nothing: the seats go back to the pods behind
                        short[key] = why
                elif len(unit) > 1:
                    booked[key], _ = self._book(rest, others(key))
            if key in short:
                self._hold_short(pod, short[key], held)
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            extra = others(key)
            if preempted or not pod.requests:
                node = ""
            elif key in booked and pod.uid not in booked[key] and self._only_our_gate(pod):
                node = None  # the room its group has at once went to the members before it
            else:
                node = self.place(pod, strict=True, extra=extra)
            booked.get(key, {}).pop(pod.uid, None)  # held (or not) from here on
            if node is None and make_room is not None and make_room(pod, None):
                node = ""  # as when preempted above: admitted on its nomination, which holds the room
            if node and self.reservations.planned_elsewhere(pod.uid, admission_owner(pod.uid)):
                node = ""  # a plan (Gang's, for its group) holds its room: a hold would count it twice
            elif node and self._only_our_gate(pod):  # else kube-scheduler cannot try it yet: nothing to hold for
                node = self._hold_where_it_fits(pod, node, extra)
            elif node:
                node = ""
            if node is None:
                reason = "no node has room for it once the capacity held for pods admitted before it is counted"
                held[pod.key] = reason
                self._hold_at_gate(pod, _Verdict(NO_ROOM, reason))
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            self._verdicts.pop(pod.uid, None)
            try:
                self.writer.remove_scheduling_gate(pod.namespace, pod.name, self.gate, uid=pod.uid)
            except WriteError as exc:
                held[pod.key] = f"removing the gate failed: {exc}"
                self._failed_writes += 1  # a reason for the loop's next pass
                if node:
                    self._release(pod.uid)
                if self.strategy == "StrictFIFO":
                    blocked |= wants
                continue
            admitted.append(pod.key)
            log.info("admitted", extra={"pod": pod.key, "gate": self.gate})
        metrics = self.metrics
        if metrics is not None:
            metrics.admission_evaluations.labels("evaluated").inc(evaluated)
            metrics.admission_evaluations.labels("skipped").inc(len(gated) - evaluated)
        self.last = AdmissionResult(admitted, held, evaluated)
        return self.last

    def _book(self, unit: list[PodInfo], extra: Mapping[str, Sequence[PodInfo]] | None,
              loose: Sequence[PodInfo] = ()) -> tuple[dict[str, tuple[str, PodInfo]], int]:
        """Seats for the gated members of one pod group (``unit``, in queue order) that have room
        at once - each placed with the ones before it and ``extra`` (other groups' seats)
        counted, every capacity held counted: only those are admitted (none when they are too
        few for the group's PodGroup minMember: see the module doc), and the seats count against
        the pods behind them in the pass. Admitted one by one, two groups interleaved in queue
        order would each take a part of the room, and neither could run. A member another
        controller still gates gets no seat: kube-scheduler cannot try it, so it neither holds
        room nor counts as having it. ``loose`` (members past the gate holding no room) are
        placed first, as kube-scheduler may place them ahead of the gated ones; the second value
        is how many of them fit."""
        seats: dict[str, tuple[str, PodInfo]] = {}
        trial: dict[str, list[PodInfo]] = {node: list(pods) for node, pods in (extra or {}).items()}
        fit = 0
        for member in loose:
            node = self.place(member, strict=True, extra=trial)
            if node is not None:
                fit += 1
                trial.setdefault(node, []).append(member)
        for member in unit:
            if not member.requests or not self._only_our_gate(member):
                continue  # needs no seat; or kube-scheduler cannot try it yet: it has none
            node = self.place(member, strict=True, extra=trial)
            if node is not None:
                seats[member.uid] = (node, member)
                trial.setdefault(node, []).append(member)
        return seats, fit

    def _group_seats(self, key: tuple[str, str], need: int, rest: list[PodInfo],
                     extra: Mapping[str, Sequence[PodInfo]] | None,
                     past_gate: Callable[[tuple[str, str]], tuple[int, list[PodInfo]]],
                     ) -> tuple[dict[str, tuple[str, PodInfo]], str | None]:
        """All or nothing for pod group ``key`` of minMember ``need``: the seats of ``rest`` (its
        gated members not passed yet, ``_book``) and None when those with a seat, or asking for
        no managed resource (and gated by no other controller), plus those past the gate with
        room reach ``need``; else no seats and why the group is short."""
        sure, loose = past_gate(key)
        seats, fit = self._book(rest, extra, loose)
        have = len(seats) + sum(1 for m in rest if not m.requests and self._only_our_gate(m)) + sure + fit
        if have < need:
            return {}, f"pod group {key[0]}/{key[1]}: {have} of minMember {need} members have room"
        return seats, None

    def _hold_short(self, pod: PodInfo, reason: str, held: dict[str, str]) -> None:
        """Keep a member of a pod group short of room at the gate."""
        held[pod.key] = reason
        self._hold_at_gate(pod, _Verdict(GROUP_SHORT, reason))

    def _hold_at_gate(self, pod: PodInfo, verdict: _Verdict) -> None:
        """Keep ``verdict`` for the pod and say it on the pod."""
        self._verdicts[pod.uid] = verdict
        self._say(pod, verdict.reason)

    def _say(self, pod: PodInfo, reason: str) -> None:
        """Why ``pod`` stays gated, as an Event on it when that is not what it said last (best
        effort)."""
        if self._said.get(pod.uid) == reason:
            return
        self._said[pod.uid] = reason
        try:
            self.writer.record_event(pod.raw, type_="Normal", reason="WaitingForAdmission",
                                     message=f"held at scheduling gate {self.gate}: {reason}")
        except Exception:  # noqa: BLE001 - events are best effort
            log.debug("event not recorded", exc_info=True)

    def _only_our_gate(self, pod: PodInfo) -> bool:
        gates = (pod.raw.get("spec") or {}).get("schedulingGates") or ()
        return all(isinstance(g, dict) and g.get("name") == self.gate for g in gates)

    def _hold_where_it_fits(self, pod: PodInfo, node: str,
                            extra: Mapping[str, Sequence[PodInfo]] | None = None) -> str | None:
        """Hold ``node`` for ``pod``, then look again where the pod goes with the hold in place:
        a bind that came between ``place`` and the hold did not see it, and may have taken the
        room (a bind after the hold counts it). Where the pod no longer fits, the hold moves to
        where it goes now; None (nothing held) when it goes nowhere."""
        for _ in range(3):
            self._hold(pod, node)
            now = self.place(pod, strict=True, extra=extra)
            if now == node:
                return node
            self._release(pod.uid)
            if now is None:
                return None
            node = now
        return None

    def _hold(self, pod: PodInfo, node: str) -> None:
        self.reservations.place(admission_owner(pod.uid), pod.priority, [(node, pod)],
                                self.hold_timeout, member=same_unit(pod))
        self._holds[pod.uid] = pod

    def _follow(self, pod: PodInfo) -> None:
        """A hold a failed bind gave back (``SchedulingQueue.on_hold_again``): ended as any other."""
        self._holds[pod.uid] = pod

    def _release(self, uid: str) -> None:
        self._holds.pop(uid, None)
        self.reservations.release(admission_owner(uid))

    def _end_holds(self) -> None:
        """Holds of admitted pods that are bound (the hold was consumed at bind, or someone else
        bound the pod), deleted, re-created or expired end here."""
        reservations = self.reservations
        reservations.nodes()  # expires the reservations whose time is up (a capacity change)
        for uid, pod in list(self._holds.items()):
            owner = admission_owner(uid)
            if reservations.get(owner) is None:
                self._holds.pop(uid, None)
                continue
            current = self.cluster.pending_pod(pod.namespace, pod.name)
            if current is not None and current.uid == uid and not current.deleting:
                continue
            accounted = self.cluster.pod(uid)
            if accounted is not None:
                if self._holds.pop(uid, None) is not None:  # not ended by _pod_changed meanwhile
                    reservations.consume(owner, uid, accounted.node_name)
            else:
                self._release(uid)

    def change_count(self) -> int:
        """The cluster's change count, once holds whose time is up have ended (reservations expire
        only when read, and their release is the change that lets the pods behind them in), plus
        the gate removals that failed (each is a reason for another pass)."""
        self.reservations.expire_due()
        return self.cluster.change_count() + self._failed_writes

    def run_forever(self, interval: float, leading: Callable[[], bool], resync: float = 60.0) -> None:
        """Admit after cluster changes (at most every ``interval`` seconds) and evaluate every gated
        pod every ``resync`` seconds; leader only."""
        seen, last, last_full = -1, float("-inf"), float("-inf")
        while not self._stop.wait(min(0.2, interval)):
            changes, now = self.change_count(), time.monotonic()
            full = now - last_full >= resync
            if not full and (changes == seen or now - last < interval):
                continue
            if not leading():
                self._seq = None  # a new leader starts with a full pass
                continue
            seen, last = changes, now
            if full:
                last_full = now
            try:
                self.run_once(full=full)
            except Exception:  # noqa: BLE001 - the loop must survive anything
                log.exception("admission pass failed")

    def stop(self) -> None:
        self._stop.set()
