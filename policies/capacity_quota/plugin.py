"""CapacityQuota: elastic quotas per namespace (guaranteed ``min``, ceiling ``max``, borrowing and
reclaim) for the managed resources, through PreEnqueue, PreFilter/Filter and PostFilter.

Quotas come from ElasticQuota objects (``scheduling.x-k8s.io/v1alpha1``) when the cluster serves
the CRD and from the plugin's args (``quotas``) otherwise; an object wins over the args for its
namespace. The rules are ``logic``'s; this module feeds them what the engine holds:

* **Use** of a namespace = its pods accounted on nodes (bound, assumed, reserved from the
  allocation ledger) + capacity held for its pods not bound yet (reservation slots: pods admitted
  at the gate, a gang's planned placement) + its pending pods nominated after a preemption. Pods
  being deleted do not count (their capacity is on its way back). All of it is read from the
  cache and the reservations, so it is rebuilt after a restart with nothing of its own to lose;
  it is recomputed only when one of them changed.
* **Admission** (PreEnqueue, pods created with the extender's scheduling gate) also counts the
  pods already admitted - pending without a scheduling gate, in kube-scheduler's queue - so pods
  over quota never reach kube-scheduler. A gang is judged whole: the demand is every pending
  member of its group, so either the group fits or none of it is admitted.
* **Filter** (PreFilter once per cycle; Filter for simulated nodes, where the pods missing from
  the node - preemption victims - no longer count): over ``max``, or borrowing more than the
  others leave unused, is Unschedulable with the numbers.
* **PostFilter**: preemption that honours the quotas (``logic.victims_on``): a pod within its
  ``min`` reclaims from borrowers; victims are evicted with their grace period (one waiting in
  Permit is rejected there in this plugin's name), Events on both sides, the pod is nominated
  to the node (the engine then holds the room for it) and the nominations of lower-priority
  pods to that node are cleared (they try elsewhere), as kube-scheduler's preemption does. The
  admitter runs it for a gated pod no node has room for, so reclaim works at the gate too.
* **Preempt verb**: kube-scheduler's own victims are kept only as far as the quotas allow.
"""

from __future__ import annotations

import itertools
import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Collection, Mapping, Sequence

from extender.framework import eviction
from extender.framework.cycle_state import CycleState
from extender.framework.elastic_quota import QuotaSpec
from extender.framework.handle import Handle
from extender.framework.interfaces import PreFilterResult, Victim
from extender.framework.pod_group import GROUP_LABEL, group_of
from extender.framework.registration import PluginSpec, schema_parser
from extender.framework.resources import format_milli
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from policies.capacity_quota import logic
from policies.capacity_quota.args import QuotaArgs, QuotaArgsSchema

NAME = "CapacityQuota"
log = logging.getLogger(__name__)

_CHECKED = NAME + "/checked"
"""CycleState key: PreFilter found the pod within its quota on the real cluster (``_as_of`` then);
``_STILL`` or a refusal's reason once Filter judged in this cycle."""
_STILL = object()
"""``_CHECKED`` once a Filter call found PreFilter's verdict current (``_as_of``) or judged again
and found the pod fits: the rest of the cycle trusts it without asking again (the bind's one
Filter call, inside the assume, is the one that must ask)."""


@dataclass
class _Table:
    """The use per namespace and what each pod not accounted on a node contributes, for one
    state of cache and holds."""

    key: tuple[Any, ...]
    quotas: dict[str, QuotaSpec]
    snapshot: Any
    """The snapshot the use was read from: ask ``Evictions.going`` about this one, so that what
    is subtracted for pods evicted already is what the table counts."""
    in_use: dict[str, dict[str, int]] = field(default_factory=dict)
    admitted: dict[str, dict[str, int]] = field(default_factory=dict)
    """Pending pods out of the gate (in kube-scheduler's queue), per namespace."""
    waiting: dict[str, dict[str, int]] = field(default_factory=dict)
    """What pending pods ask for, per namespace (the pending demand)."""
    by_uid: dict[str, list[tuple[str, Mapping[str, int], bool]]] = field(default_factory=dict)
    """uid -> (namespace, amounts, counted only at admission) per contribution of a pod that is
    not accounted on a node (held for it, nominated, admitted)."""
    nominated: dict[str, tuple[str, int]] = field(default_factory=dict)
    """uid -> (namespace, priority) of the nominated pods counted (``lower_nominated``)."""

    def lower_nominated(self, pod: PodInfo) -> list[str]:
        """The nominated pods of ``pod``'s namespace of lower priority: they hold no quota
        against it (as capacityscheduling counts a namespace's nominated pods only when at
        least as important, and as ``with_held`` holds their capacity)."""
        return [uid for uid, (ns, priority) in self.nominated.items()
                if ns == pod.namespace and priority < pod.priority and uid != pod.uid]

    def count(self, uid: str, namespace: str, amounts: Mapping[str, int], admitted: bool = False) -> None:
        logic.add((self.admitted if admitted else self.in_use).setdefault(namespace, {}), amounts)
        self.by_uid.setdefault(uid, []).append((namespace, amounts, admitted))

    def used(self, admission: bool, without: Sequence[str] = (),
             removed: Sequence[PodInfo] = ()) -> dict[str, dict[str, int]]:
        """Use per namespace (``admission``: admitted pods too), minus the contributions of the
        pods ``without`` (pending: the pod judged and its group) and of ``removed`` (pods
        accounted on a node, taken away in a simulation)."""
        out = {ns: dict(v) for ns, v in self.in_use.items()}
        if admission:
            for ns, v in self.admitted.items():
                logic.add(out.setdefault(ns, {}), v)
        for uid in without:
            for ns, amounts, at_admission in self.by_uid.get(uid, ()):
                if admission or not at_admission:
                    logic.add(out.setdefault(ns, {}), amounts, -1)
        for p in removed:
            if _counted(p):
                logic.add(out.setdefault(p.namespace, {}), p.requests, -1)
        return out


def _counted(p: PodInfo) -> bool:
    """Does this pod, accounted on a node, count in its namespace's use?"""
    return bool(p.requests) and not p.deleting and not p.terminal


@dataclass
class _NodeUse:
    generation: int
    uids: frozenset[str]
    per_namespace: dict[str, dict[str, int]]


def _gated(pod: PodInfo) -> bool:
    return bool((pod.raw.get("spec") or {}).get("schedulingGates"))


class CapacityQuota:
    name = NAME

    def __init__(self, args: QuotaArgs, handle: Handle) -> None:
        self.handle = handle
        managed = handle.managed_resources
        self.configured = {ns: q.limited_to(managed) for ns, q in args.quotas.items()}
        self._table_cache: _Table | None = None
        self._lock = threading.Lock()
        self._nodes: dict[str, _NodeUse] = {}
        """What each node's pods use, by the generation of the NodeInfo it was read from: a
        rebuild reads again only the nodes that changed."""
        self._accounted: dict[str, dict[str, int]] = {}
        """The sum of ``_nodes``, per namespace."""
        self._node_of: dict[str, str] = {}
        """uid -> node, of every pod accounted on a node."""
        self._generations = itertools.count(-2 * 10**9, -1)
        self._shadowed: set[str] = set()

    # ---- what the cluster holds ---------------------------------------------------------------

    def quotas(self, objects: Sequence[QuotaSpec]) -> dict[str, QuotaSpec]:
        """The quota of each namespace that has one: its ElasticQuota (of ``objects``, the first
        by name when it has several), else the configured one; managed resources only."""
        out = dict(self.configured)
        seen: set[str] = set()
        for spec in objects:
            if spec.namespace in seen:
                if spec.namespace not in self._shadowed:
                    self._shadowed.add(spec.namespace)
                    log.warning("several ElasticQuotas in one namespace: the first by name counts",
                                extra={"namespace": spec.namespace, "ignored": spec.source})
                continue
            seen.add(spec.namespace)
            out[spec.namespace] = spec.limited_to(self.handle.managed_resources)
        return out

    def _table(self) -> _Table:
        """The table for the cluster as it is now, rebuilt when the cache or the holds changed.
        Everything is read from the handle before the plugin's lock is taken, and nothing is
        read under it: Filter runs inside the cache's assume (cache lock held), and gang
        planning with the reservations' lock held, so this lock must be a leaf."""
        held_version = self.handle.held_version()  # first: what is read after it is at least as new
        held = self.handle.reservations.held()
        snapshot = self.handle.snapshot()
        key = (self.handle.change_count(), snapshot.generation, held_version, len(held))
        with self._lock:
            if self._table_cache is not None and self._table_cache.key == key:
                return self._table_cache
        # read after the key: a change meanwhile makes the next key differ (never a stale table)
        pending = self.handle.pending_pods()
        nominations = self.handle.nominations()
        objects = self.handle.quotas()
        # and the nodes after the pending pods: a pod bound in between is then in both (counted
        # once, on its node), never in neither
        snapshot = self.handle.snapshot()
        with self._lock:
            if self._table_cache is not None and self._table_cache.key == key:
                return self._table_cache
            self._follow_nodes(snapshot)
            table = _Table(key, self.quotas(objects), snapshot, {ns: dict(v) for ns, v in self._accounted.items()})
            self._add_unbound(table, self._node_of.keys(), held, pending, nominations)
            self._table_cache = table
        return table

    def _follow_nodes(self, snapshot: Any) -> None:
        """Bring ``_nodes``, ``_accounted`` and ``_node_of`` to ``snapshot`` (lock held)."""
        seen: set[str] = set()
        for node in snapshot:
            seen.add(node.name)
            known = self._nodes.get(node.name)
            if known is not None and known.generation == node.generation:
                continue
            per_namespace: dict[str, dict[str, int]] = {}
            for p in node.pods.values():
                if _counted(p):
                    logic.add(per_namespace.setdefault(p.namespace, {}), p.requests)
            self._forget_node(node.name)
            use = _NodeUse(node.generation, frozenset(node.pods), per_namespace)
            self._nodes[node.name] = use
            for ns, amounts in per_namespace.items():
                logic.add(self._accounted.setdefault(ns, {}), amounts)
            for uid in use.uids:
                self._node_of[uid] = node.name
        for name in [n for n in self._nodes if n not in seen]:
            self._forget_node(name)

    def _forget_node(self, name: str) -> None:
        known = self._nodes.pop(name, None)
        if known is None:
            return
        for ns, amounts in known.per_namespace.items():
            logic.add(self._accounted[ns], amounts, -1)
        for uid in known.uids:
            if self._node_of.get(uid) == name:
                del self._node_of[uid]

    @staticmethod
    def _add_unbound(table: _Table, accounted: Collection[str], held: Sequence[tuple[str, PodInfo]],
                     pending: Sequence[PodInfo], nominations: Sequence[tuple[str, PodInfo]]) -> None:
        """Count what is ``held``, nominated (``nominations``: ``Handle.nominations``) or
        admitted for pods not accounted on a node, and what pending pods ask for (``pending``,
        and nominated pods the cache does not hold yet)."""
        nominated = {p.uid: p for _, p in nominations}
        represented: set[str] = set()
        leaving = {p.uid for p in pending if p.deleting or p.terminal}
        for uid, placeholder in held:
            if uid not in accounted and uid not in leaving and placeholder.requests:
                table.count(uid or placeholder.uid, placeholder.namespace, placeholder.requests)
                represented.add(uid)
        for p in pending:
            here = nominated.pop(p.uid, None) is not None  # nominated as with_held counts it (ours included)
            if not p.requests or p.deleting or p.terminal or p.uid in accounted:
                continue
            logic.add(table.waiting.setdefault(p.namespace, {}), p.requests)
            if p.uid in represented:
                continue
            if p.nominated_node_name or here:
                table.count(p.uid, p.namespace, p.requests)
                table.nominated[p.uid] = (p.namespace, p.priority)
            elif not _gated(p):
                table.count(p.uid, p.namespace, p.requests, admitted=True)
        for p in nominated.values():  # nominated here before the watch showed the pod at all
            if p.requests and p.uid not in accounted and p.uid not in represented:
                logic.add(table.waiting.setdefault(p.namespace, {}), p.requests)
                table.count(p.uid, p.namespace, p.requests)
                table.nominated[p.uid] = (p.namespace, p.priority)

    def _unit(self, pod: PodInfo) -> list[PodInfo]:
        """The pod, and the pending members of its pod group: judged as one."""
        group = group_of(pod.labels)
        if group is None:
            return [pod]
        return [pod, *(m for m in self.handle.find_pods(pod.namespace, {GROUP_LABEL: group})
                       if not m.node_name and m.uid != pod.uid)]

    def _accounted_already(self, unit: Sequence[PodInfo], removed: Sequence[PodInfo] = ()) -> list[PodInfo]:
        """Those of ``unit`` (pending) the table counts on a node already - the reservation an
        allocation annotation holds for them, say, after a restart: their use is the demand
        judged, not counted twice."""
        gone = {p.uid for p in removed}
        return [u for u in unit if u.uid in self._node_of and u.uid not in gone]

    def verdict(self, pod: PodInfo, *, admission: bool, removed: Sequence[PodInfo] = ()) -> str | None:
        """None when ``pod`` (with its group) fits its namespace's quota; else why not. ``removed``:
        pods taken away in a simulation (victims) no longer count."""
        table = self._table()
        if pod.namespace not in table.quotas or not pod.requests:
            return None
        unit = self._unit(pod)
        gone = {p.uid for p in removed}
        going = [g for uid, g in self.handle.evictions.going(table.snapshot, confirmed=True).items() if uid not in gone]
        used = table.used(admission, [*(u.uid for u in unit), *table.lower_nominated(pod)],
                          [*removed, *going, *self._accounted_already(unit, removed)])
        demand = logic.total(u.requests for u in unit)
        why = logic.check(table.quotas, used, pod.namespace, demand)
        if why and len(unit) > 1:
            why += f" for pod group {group_of(pod.labels)} ({len(unit)} pending members)"
        return why

    # ---- extension points ---------------------------------------------------------------------

    def pre_enqueue(self, pod: PodInfo) -> Status:
        why = self.verdict(pod, admission=True)
        return Status.unschedulable(why) if why else Status()

    def pre_filter(self, state: CycleState, pod: PodInfo, snapshot: Any) -> tuple[PreFilterResult | None, Status]:
        # a gated pod is never sent by kube-scheduler: this is admission's simulation (make_room),
        # which counts the pods admitted before it, as PreEnqueue does
        as_of = self._as_of()  # first: a change while judging moves it, and Filter judges again
        why = self.verdict(pod, admission=_gated(pod))
        if why:
            return None, Status.unschedulable(why)
        state.write(_CHECKED, as_of)
        return None, Status()

    def _as_of(self) -> tuple[Any, ...]:
        """What PreFilter's verdict was judged on: Filter trusts it only while this is the same.
        A bind runs PreFilter before the cache's lock and Filter inside the assume: two pods of
        one namespace binding at once each passed PreFilter without the other, and both went
        over ``max`` (capacityscheduling's Reserve, in the serial cycle, rules that out). The
        evictions' version too: one refused meanwhile gives its pod's use back to its namespace."""
        return (self.handle.snapshot().generation, self.handle.held_version(), self.handle.change_count(),
                self.handle.evictions.version)

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        removed: list[PodInfo] = []
        if node.generation < 0:  # simulated: the pods it lacks (victims) give their quota back
            real = self.handle.snapshot().get(node.name)
            if real is not None:
                removed = [p for uid, p in real.pods.items() if uid not in node.pods]
        checked = state.get(_CHECKED)
        if not removed and isinstance(checked, str):
            return Status.unschedulable(checked)  # judged again in this cycle, and refused
        if not removed and checked is not None and (checked is _STILL or checked == self._as_of()):
            state.write(_CHECKED, _STILL)  # looked at once per cycle: a request's snapshot is fixed
            return Status()
        why = self.verdict(pod, admission=_gated(pod), removed=removed)
        if not removed and checked is not None:
            # judged again: the verdict stands for the next nodes of this cycle, either way
            state.write(_CHECKED, why or _STILL)
        return Status.unschedulable(why) if why else Status()

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> tuple[str | None, Status]:
        table = self._table()
        snapshot = table.snapshot
        going = self.handle.evictions.going(snapshot)
        wait = eviction.held_back(pod, snapshot, lambda victim: True, going.keys(), statuses)  # borrowers: any priority
        if wait is not None:
            return None, wait
        used, reclaiming = self._stance(pod, table, going)
        gone = going.keys()
        candidates = []
        for name, st in statuses.items():
            node = snapshot.get(name) if st.code is Code.UNSCHEDULABLE else None
            if node is None:
                continue
            pods = list(node.pods.values())
            # the budgets' allowances spent over all the potential victims, most important first
            # (as capacityscheduling's SelectVictimsOnNode, by filterPodsWithPDBViolation): two
            # pods of a budget that allows one eviction are each fine alone, not both - the less
            # important one is protected
            potential = [p for p in pods if not eviction.leaving(p, gone)
                         and logic.may_evict(p, pod, table.quotas, reclaiming)]
            protected = self.handle.pdb_violations(sorted(potential, key=logic.importance))
            victims = logic.victims_on(pods, pod, table.quotas, used, reclaiming, self._fitting(pod, node, state),
                                       protected, gone)
            if victims:
                fresh = tuple(v for v in victims if not eviction.leaving(v, gone))
                candidates.append(logic.Candidate(name, fresh, len(self.handle.pdb_violations(fresh)),
                                                  tuple(v for v in victims if eviction.leaving(v, gone))))
        now = self.handle.clock.now()
        for candidate in sorted(candidates, key=lambda c: c.rank(now)):
            if self._preempt(pod, candidate, table, used):
                return candidate.node, Status()
        what = "borrowers or lower-priority pods" if reclaiming else "lower-priority pods"
        return None, Status.unschedulable(f"no node where evicting {what} makes room within the quotas")

    def process_preemption(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                           victims: Sequence[Victim]) -> tuple[list[Victim], Status]:
        """kube-scheduler's own preemption (the preempt verb) knows no quotas: of its victims
        (all of lower priority) keep those this plugin's rules allow - never a pod whose eviction
        takes a namespace with a quota below its ``min``, nor one of another namespace with a
        quota when the preemptor is beyond its own ``min`` - and drop the node when those left do
        not make room (Filter, this plugin's check included, on the node without them)."""
        table = self._table()
        going = self.handle.evictions.going(table.snapshot)
        used, reclaiming = self._stance(pod, table, going)
        if not table.quotas:
            return list(victims), Status()
        gone = going.keys()
        known = [v.pod for v in victims if v.pod is not None and not eviction.leaving(v.pod, gone)]
        allowed = {p.uid for p in logic.allowed_victims(known, pod, table.quotas, used, reclaiming)}
        # pods leaving already (of lower priority: the engine dropped the others) free their room
        # whatever the quotas: their namespaces no longer count them
        kept = [v for v in victims if v.pod is None or v.pod.uid in allowed or eviction.leaving(v.pod, gone)]
        if not self._fitting(pod, node, state)([v.pod for v in kept if v.pod is not None]):
            dropped = sorted(v.pod.key for v in victims
                             if v.pod is not None and v.pod.uid not in allowed and not eviction.leaving(v.pod, gone))
            if not dropped:
                return [], Status.unschedulable("evicting the victims would not make the pod fit (its namespace's "
                                                "quota, or the node)")
            return [], Status.unschedulable(f"the victims that make room ({', '.join(dropped)}) are protected by "
                                            "their namespaces' quotas")
        return kept, Status()

    def _stance(self, pod: PodInfo, table: _Table, going: Mapping[str, PodInfo]
                ) -> tuple[dict[str, dict[str, int]], bool]:
        """For preemption: the use by ``table`` without ``pod`` and its group and without the pods
        evicted already (``going``: ``Handle.evictions`` about ``table.snapshot``), and whether
        it reclaims (stays within its namespace's ``min``)."""
        unit = self._unit(pod)
        without = [*(u.uid for u in unit), *table.lower_nominated(pod)]
        accounted = self._accounted_already(unit)
        used = table.used(False, without, [*accounted, *going.values()])
        # whether it reclaims is its own use as ``verdict`` counts it: at admission (a gated
        # pod: admission's make_room) with the pods of its namespace admitted before it, as
        # PreEnqueue and Filter count them - another namespace's pending pods hold nothing, and
        # make it no borrower -, and with the victims whose Eviction is not answered yet (were
        # one refused, the pod was a borrower all along: it may not take another namespace's)
        answered = self.handle.evictions.going(table.snapshot, confirmed=True)
        own = (used if not _gated(pod) and answered.keys() == going.keys()
               else table.used(_gated(pod), without, [*accounted, *answered.values()]))
        reclaiming = logic.within_min(table.quotas.get(pod.namespace), own.get(pod.namespace, {}),
                                      logic.total(u.requests for u in unit))
        return used, reclaiming

    def _fitting(self, pod: PodInfo, node: NodeInfo, state: CycleState) -> Callable[[Sequence[PodInfo]], bool]:
        """Does ``pod`` pass the profile's filters on ``node`` without the given victims (each
        trial on a copy of the cycle's ``state``: Filter plugins find their PreFilter's data)?"""
        def fits(victims: Sequence[PodInfo]) -> bool:
            sim = node
            for v in victims:
                sim = sim.without_pod(v.uid, next(self._generations))
            return self.handle.run_filters(state.clone(), pod, sim).ok
        return fits

    def _preempt(self, pod: PodInfo, candidate: logic.Candidate, table: _Table,
                 used: Mapping[str, Mapping[str, int]]) -> bool:
        fresh, waits = candidate.victims, candidate.waits
        if fresh and not eviction.evict(self.handle, pod, candidate.node, fresh,
                                        lambda victim: self._why(victim, pod, table, used), plugin=NAME):
            return False  # nothing lost: try the next node
        borrowers = [v.key for v in fresh if v.namespace != pod.namespace and v.namespace in table.quotas]
        message = f"{eviction.account(fresh, waits, 'pod(s)')} on node {candidate.node}; nominated there"
        if borrowers:
            message += f"; reclaimed namespace {pod.namespace}'s guaranteed quota from borrowers {', '.join(borrowers)}"
        eviction.nominate(self.handle.writer, pod, candidate.node, message)
        eviction.clear_lower_nominations(self.handle, pod, candidate.node)
        log.info("preempted", extra={"pod": pod.key, "node": candidate.node, "reclaimed_from": borrowers,
                                     "victims": [v.key for v in fresh], "leaving": [v.key for v in waits]})
        return True

    @staticmethod
    def _why(victim: PodInfo, pod: PodInfo, table: _Table, used: Mapping[str, Mapping[str, int]]) -> str:
        quota = table.quotas.get(victim.namespace)
        if victim.namespace == pod.namespace or quota is None:
            return "lower priority"
        mine = used.get(victim.namespace, {})
        over = ", ".join(f"{r} {format_milli(mine.get(r, 0))} of min {format_milli(quota.min.get(r, 0))}"
                         for r in sorted(victim.requests) if mine.get(r, 0) > quota.min.get(r, 0))
        return (f"namespace {victim.namespace} borrows beyond its min ({over}) and namespace {pod.namespace} "
                f"reclaims its guaranteed quota")

    # ---- what /debug/quota, /debug/pods and the gauges show ------------------------------------

    def quota_verdict(self, pod: PodInfo) -> str | None:
        return self.verdict(pod, admission=_gated(pod))

    def quota_report(self) -> dict[str, dict[str, dict[str, int | None]]]:
        """Per namespace with a quota, per resource: min, max (None: none), used, borrowed, lent,
        pending (milli-units)."""
        table = self._table()
        going = self.handle.evictions.going(table.snapshot, confirmed=True).values()  # as ``verdict``
        shares = logic.shares(table.quotas, table.used(False, removed=list(going)), table.waiting)
        return {ns: {r: {"min": s.min, "max": s.max, "used": s.used, "borrowed": s.borrowed, "lent": s.lent,
                         "pending": s.pending} for r, s in per.items()}
                for ns, per in sorted(shares.items())}


SPEC = PluginSpec(NAME, CapacityQuota, schema_parser(QuotaArgsSchema),
                  "Elastic quotas per namespace: guaranteed min, max, borrowing and reclaim (ElasticQuota).")
