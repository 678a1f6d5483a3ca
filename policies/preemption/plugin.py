"""ManagedPreemption: a PostFilter that preempts for the managed resources itself.

kube-scheduler never calls the preempt verb when the only shortage is a resource it ignores
(``ignoredByScheduler: true``): its dry run finds the pod fits everywhere without victims (seen with
the real kube-scheduler). So when no node passes the extender's Filter, this plugin does what
DefaultPreemption would: it considers the nodes that rejected the pod as Unschedulable (never
UnschedulableAndUnresolvable ones), picks victims and a node by ``logic``, evicts the victims
through the Eviction API with their grace period (PodDisruptionBudgets are enforced there: a
refused eviction makes that node fail and the next candidate is tried; a victim waiting in
Permit is rejected there instead, as kube-scheduler does), sets the preemptor's
``status.nominatedNodeName``, clears the nominations of lower-priority pods to that node (they
try elsewhere, as kube-scheduler's preemption has them do), records Events on victims and
preemptor, and the engine then holds the freed capacity for the nominated pod against
lower-priority pods.

No preemption for ``preemptionPolicy: Never``, and none while lower-priority pods are leaving
its nominated node (``eviction.held_back``: its earlier victims, or pods their owners deleted)
unless that node cannot take it any more. Pods evicted already (deleting, or
evicted and not shown deleting yet: ``Handle.evictions``) are never evicted again: where a
candidate's victims are all leaving, the pod is only nominated there (it waits for them, as
kube-scheduler's own preemption does with terminating victims); what they free stays held for an
earlier preemptor against pods of its priority or lower (its nomination), not against a pod that
outranks it.
"""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from typing import Any, Mapping

from extender.framework.cycle_state import CycleState
from extender.framework import eviction
from extender.framework.handle import Handle
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo
from extender.framework.registration import PluginSpec
from policies.preemption import logic

NAME = "ManagedPreemption"
log = logging.getLogger(__name__)


class ManagedPreemption:
    name = NAME

    def __init__(self, args: Any, handle: Handle) -> None:
        self.handle = handle
        self._generations = itertools.count(-10**9, -1)

    def post_filter(self, state: CycleState, pod: PodInfo, statuses: Mapping[str, Status]) -> tuple[str | None, Status]:
        snapshot = self.handle.snapshot()
        going = self.handle.evictions.going(snapshot).keys()
        wait = eviction.held_back(pod, snapshot, lambda victim: victim.priority < pod.priority, going, statuses)
        if wait is not None:
            return None, wait
        candidates = []
        for name, st in statuses.items():
            if st.code is not Code.UNSCHEDULABLE:
                continue
            node = snapshot.get(name)
            if node is None:
                continue
            lower = [p for p in node.pods.values() if p.priority < pod.priority and not eviction.leaving(p, going)]
            # the budgets' allowances spent over all of them, most important first (as
            # kube-scheduler's filterPodsWithPDBViolation): two pods of a budget that allows one
            # eviction are each fine alone, not both - the less important one is protected
            protected = frozenset(self.handle.pdb_violations(sorted(lower, key=logic.importance)))
            # each trial on a copy of this cycle's state: Filter plugins find their PreFilter's data
            found = logic.victims_on(node, pod, lambda n: self.handle.run_filters(state.clone(), pod, n).ok,
                                     lambda: next(self._generations), protected, going)
            if found is not None:
                candidates.append(replace(found, pdb_violations=len(self.handle.pdb_violations(found.victims))))
        now = self.handle.clock.now()
        for candidate in sorted(candidates, key=lambda c: c.rank(now)):
            if self._preempt(pod, candidate):
                return candidate.node, Status()
        return None, Status.unschedulable("no node where evicting lower-priority pods makes room")

    def _preempt(self, pod: PodInfo, candidate: logic.Candidate) -> bool:
        victims, waits = candidate.victims, candidate.waits
        if victims and not eviction.evict(self.handle, pod, candidate.node, victims, plugin=NAME):
            return False  # nothing lost: try the next node
        eviction.nominate(self.handle.writer, pod, candidate.node,
                          f"{eviction.account(victims, waits, 'lower-priority pod(s)')} on node {candidate.node}; "
                          "nominated there")
        eviction.clear_lower_nominations(self.handle, pod, candidate.node)
        log.info("preempted", extra={"pod": pod.key, "node": candidate.node,
                                     "victims": [v.key for v in victims], "leaving": [v.key for v in waits]})
        return True


SPEC = PluginSpec(NAME, ManagedPreemption, description="Extender-driven preemption for managed resources.")
