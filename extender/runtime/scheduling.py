"""The scheduling cycle's verbs, filter and prioritize, and the "where would it go?" question.

* ``filter``: snapshot -> PreFilter -> Filter per candidate -> (nothing fits) PostFilter.
  Names the extender does not know are rejected as Unschedulable, "node not in extender cache"
  (it may know them on the next attempt). Capacity the queue holds against the pod
  (nominations, reservations) is counted on the nodes where it is held. A pod every node
  rejected is recorded with the queue (its hints decide when a nudge may help) and told so by an
  Event.
* ``prioritize``: PreScore -> Score -> NormalizeScore -> weights; 0..100 per node.
* ``placement``: the node Filter and Score would choose now (admission and nudges ask it).
* ``make_room``: preemption at admission, for a gated pod no node has room for.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter
from dataclasses import dataclass
from typing import AbstractSet, Any, Container, Iterable, Mapping, Sequence

import numpy as np

from extender.cache.columns import Columns
from extender.cache.snapshot import Snapshot
from extender.framework.batch import Ints
from extender.framework.cycle_state import CycleState
from extender.framework.node_constraints import node_excluded
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.metrics import Metrics
from extender.runtime.batch import BatchFilter, Priorities, filter_names, score_names
from extender.runtime.context import VerbContext
from extender.runtime.explain import ExplainLog, Verdict
from extender.runtime.handle import EngineHandle
from extender.runtime.outcomes import NOT_IN_CACHE, PREFILTER_EXCLUDED, EngineError, FilterOutcome, NodeTexts
from extender.runtime.pods import RecentPods
from extender.runtime.profiles import Profiles

log = logging.getLogger(__name__)


def _maybe_bound(node: str) -> Status:
    """Why a pod whose Binding to ``node`` has an unknown outcome fits no other node."""
    return Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                  (f"the pod may be bound to {node} already (the outcome of its Binding there is unknown)",),
                  plugin="extender")


def _sent(texts: Mapping[str, str], names: list[str]) -> int:
    """How many of the request's ``names`` ``texts`` rejects, a name the request repeats counted
    each time as in "Success" (for the decisions counter; ``NodeTexts`` counts without making
    its dict)."""
    if isinstance(texts, NodeTexts):
        return texts.sent()
    return sum(map(texts.__contains__, names)) if texts else 0


@dataclass(frozen=True, slots=True)
class _Ahead:
    """Scores made before prioritize asked (``SchedulingCycle.score_ahead``), and what they hold for."""

    pod: PodInfo
    snapshot: Snapshot
    names: list[str]
    scores: Ints


class SchedulingCycle(VerbContext):
    """Filter, prioritize and placement over the cache's snapshot, with the capacity the queue
    holds counted; rejections recorded with the queue."""

    def __init__(self, handle: EngineHandle, profiles: Profiles, pods: RecentPods, explain: ExplainLog,
                 metrics: Metrics | None = None) -> None:
        super().__init__(handle, profiles, pods, explain, metrics)
        self._simulated = itertools.count(-1, -1)
        self._shifted: tuple[Columns, dict[str, Ints], Columns] | None = None
        """The last ``_held_columns`` made: (columns, held amounts, the sum)."""
        self.batch = True
        """Filter and prioritize through the columnar batch path (``extender.runtime.batch``);
        False: the per-node path only (the property test compares the two)."""
        self._ahead: _Ahead | None = None
        """Scores ``score_ahead`` made, for the prioritize they were made for."""

    def placement(self, pod: PodInfo, names: Iterable[str] | None = None, *, strict: bool = False,
                  extra: Mapping[str, Sequence[PodInfo]] | None = None) -> str | None:
        """The node among ``names`` (default: every node) that ``pod`` would go to now, as Filter
        and Score choose it, with every capacity held against it counted (``with_held``;
        ``strict``: its own group's holds too) and the pods of ``extra`` (node -> pods) counted
        where they are listed, not where a reservation planned them; None when no node has room.
        PreFilter runs without candidates, so a plugin that plans (Gang) does not plan: this is a
        question, not a scheduling cycle."""
        fw = self.profiles.framework_for(pod)
        state = CycleState()
        snapshot = self.cache.snapshot()
        allowed, st = fw.run_pre_filter(state, pod, snapshot)
        if not st.ok:
            return None
        held = self.queue.held_nodes()
        extra = extra or {}
        placed = {p.uid for pods in extra.values() for p in pods}  # their planned slots do not count
        nodes: list[NodeInfo] = []
        for info in (snapshot if names is None else filter(None, map(snapshot.get, names))):
            if allowed is not None and info.name not in allowed or node_excluded(pod.raw, info.node, info.name):
                continue  # (kube-scheduler's own node checks: it sends no such node to filter)
            if info.name in held:
                info = self.queue.with_held(info, pod, strict, placed)
            more = extra.get(info.name)
            if more:
                info = info.with_pods([p.bound_to(info.name) for p in more], next(self._simulated))
            nodes.append(info)
        feasible = set(fw.run_filter(state, pod, nodes).feasible)
        if not feasible:
            return None
        scores, st = fw.run_score(state, pod, [n for n in nodes if n.name in feasible])
        if not st.ok:
            scores = {}
        return min(feasible, key=lambda name: (-scores.get(name, 0), name))

    def make_room(self, pod: PodInfo, refused: Status | None) -> bool:
        """No node has room for gated ``pod`` (``refused``: the PreEnqueue verdict that said so):
        did its profile's PostFilter plugins make some (evicting victims, nominating it)? Only
        when every PreEnqueue plugin that is not also a Filter plugin admits it: those that are
        (capacity, quota) judge what preemption changes; the others (a gang's member count) do
        not. PostFilter sees Filter's statuses over every node, the capacity held against the
        pod counted, as in a filter call."""
        fw = self.profiles.framework_for(pod)
        if not fw.post_filter_plugins or pod.preemption_policy == "Never":
            return False
        if refused is not None:
            if refused.code is not Code.UNSCHEDULABLE:
                return False
            judges = {p.name for p in fw.filter_plugins}
            if any(p.name not in judges and not p.pre_enqueue(pod).ok for p in fw.pre_enqueue_plugins):
                return False
        state = CycleState()
        snapshot = self.cache.snapshot()
        allowed, st = fw.run_pre_filter(state, pod, snapshot)
        if st.code is Code.ERROR:
            return False
        # nodes kube-scheduler's own checks exclude (taints, affinity, cordons) are unresolvable
        # there: no preemption on them, as kube-scheduler's PostFilter never considers them
        unusable = {n.name: Status.unresolvable(why) for n in snapshot
                    if (why := node_excluded(pod.raw, n.node, n.name)) is not None}
        if not st.ok:
            statuses = {n.name: st for n in snapshot}
        else:
            held = self.queue.held_nodes()
            nodes = [self.queue.with_held(n, pod, True) if n.name in held else n for n in snapshot
                     if (allowed is None or n.name in allowed) and n.name not in unusable]
            result = fw.run_filter(state, pod, nodes)
            if result.feasible:
                return False
            statuses = dict(result.rejected)
        statuses.update(unusable)
        nominated, st = fw.run_post_filter(state, pod, statuses)
        if st.ok and nominated:
            self.queue.nominator.nominate(pod, nominated)
            log.info("preempted at admission", extra={"pod": pod.key, "node": nominated})
            return True
        return False

    def _adjusted(self, info: NodeInfo, pod: PodInfo, own_node: str | None, held: AbstractSet[str]) -> NodeInfo:
        """``info`` as Filter sees it for ``pod``: without the pod's own reservation (no rival of
        itself), with the capacity the queue holds on it against the pod (``with_held``)."""
        if own_node == info.name:
            info = info.without_pod(pod.uid, next(self._simulated))
        return self.queue.with_held(info, pod) if info.name in held else info

    def _held_columns(self, pod: PodInfo, snapshot: Snapshot,
                      held: AbstractSet[str]) -> tuple[Columns | None, AbstractSet[str]]:
        """The snapshot's columns with the capacity the queue holds against ``pod`` added (the
        batch Filter counts it there instead of adjusting each of the ``held`` nodes), and the
        held nodes still to be adjusted one by one (``HeldCapacity.held_amounts``); (None,
        ``held``) when the holds must all be judged per node. The shifted columns are reused
        while the holds and the columns are the same objects."""
        columns = snapshot.columns()

        def accounted(node: str) -> Container[str]:
            info = snapshot.get(node)
            return info.pods if info is not None else ()

        found = self.queue.held.held_amounts(pod, columns.index, columns.size, accounted, snapshot)
        if found is None:
            return None, held
        amounts, exact = found
        if not amounts:
            return columns, exact
        last = self._shifted
        if last is not None and last[0] is columns and last[1] is amounts:
            return last[2], exact
        shifted = columns.with_requested(amounts)
        self._shifted = (columns, amounts, shifted)
        return shifted, exact

    def _count(self, verb: str, statuses: Mapping[str, Status], feasible: int) -> None:
        if self.metrics is None:
            return
        if feasible:
            self.metrics.decisions.labels(verb, "Success").inc(feasible)
        for code, n in Counter(st.code for st in statuses.values()).items():
            self.metrics.decisions.labels(verb, code.name).inc(n)

    # ---- filter -----------------------------------------------------------------------------

    def filter(self, raw_pod: Mapping[str, Any] | PodInfo, node_names: list[str]) -> FilterOutcome:
        pod = raw_pod if isinstance(raw_pod, PodInfo) else self.pods.parse(raw_pod)
        fw = self.profiles.framework_for(pod)
        self.cache.cleanup_expired()
        seq = self.cache.change_count()
        snapshot = self.cache.snapshot()
        state = CycleState()
        state.candidates = node_names
        allowed, st = fw.run_pre_filter(state, pod, snapshot)
        rejected: dict[str, Status] = {}
        feasible: list[str] = []
        outcome = FilterOutcome()
        batch: BatchFilter | None = None
        if st.code is Code.ERROR:
            outcome.error = st.message
        elif not st.ok:
            rejected = dict.fromkeys(node_names, st)
        else:
            candidates: list[NodeInfo] = []
            get = snapshot.getter()
            held = self.queue.held_nodes()
            hold = self.cache.own_hold(pod.uid)
            own_node = hold[0].node_name if hold is not None else None  # its own reservation is no rival
            excluded = PREFILTER_EXCLUDED
            if hold is not None and hold[1]:  # its Binding there may have been stored: no other node will do
                only = frozenset({hold[0].node_name})
                allowed = only & allowed if allowed is not None else only
                excluded = _maybe_bound(hold[0].node_name)
            if self.batch:  # the columnar path (extender.runtime.batch); None: per node below
                columns, exact = self._held_columns(pod, snapshot, held) if held else (None, held)
                batch = filter_names(fw, state, pod, snapshot, node_names, allowed=allowed,
                                     adjusted=exact | {own_node} if own_node else exact,
                                     adjust=lambda info: self._adjusted(info, pod, own_node, held),
                                     unknown=NOT_IN_CACHE, excluded=excluded,
                                     held=(columns, held) if columns is not None else None)
        if batch is not None:
            feasible = outcome.feasible = batch.feasible
            outcome.failed, outcome.unresolvable = batch.failed, batch.unresolvable
        elif st.ok:
            found = list(map(get, node_names))
            simple = allowed is None and own_node is None and not held
            known = list(filter(None, found)) if simple else []
            if simple and len(known) == len(found):
                candidates = known  # the common case: every name known, nothing to adjust
            else:
                for name, info in zip(node_names, found):
                    if info is None:
                        rejected[name] = NOT_IN_CACHE
                    elif allowed is not None and name not in allowed:
                        rejected[name] = excluded
                    else:
                        candidates.append(self._adjusted(info, pod, own_node, held))
            result = fw.run_filter(state, pod, candidates)
            feasible = result.feasible
            rejected.update(result.rejected)
        verdicts: Mapping[str, Status] = rejected if batch is None else batch.rejected
        if not outcome.error and batch is None:
            unresolvable: dict[str, str] = {}
            failed: dict[str, str] = {}
            sorted_by: dict[int, tuple[dict[str, str], str]] = {}  # statuses are shared: sort each once
            for name, s in rejected.items():
                where = sorted_by.get(id(s))
                if where is None:
                    if s.code is Code.ERROR and not outcome.error:
                        outcome.error = s.message  # a plugin failed on some node: the whole answer is an error
                    text = s.reasons[0] if len(s.reasons) == 1 else s.message
                    where = sorted_by[id(s)] = (unresolvable if s.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
                                                else failed, text)
                where[0][name] = where[1]
            if not outcome.error:
                outcome.feasible, outcome.failed, outcome.unresolvable = feasible, failed, unresolvable
        if not outcome.error:
            if not feasible and fw.post_filter_plugins:
                nominated, pst = fw.run_post_filter(state, pod, verdicts)
                if pst.code is Code.ERROR:  # logged; the pod stays unschedulable, as in kube-scheduler
                    log.error("post-filter failed", extra={"pod": pod.key, "error": pst.message})
                outcome.nominated = nominated if pst.ok else None
                if outcome.nominated:  # held from now on, as kube-scheduler's nominator holds its own
                    self.queue.nominator.nominate(pod, outcome.nominated)
        if not feasible and not outcome.error and verdicts:
            self._explain_rejection(pod.raw, pod, verdicts)
            self.queue.unschedulable(pod, verdicts, seq)
        elif feasible:
            self.queue.schedulable(pod.uid)
        if outcome.error:
            self._count("filter", verdicts, len(feasible))
        elif self.metrics is not None:
            decisions = self.metrics.decisions
            for status, n in (("Success", len(feasible)), ("UNSCHEDULABLE", _sent(outcome.failed, node_names)),
                              ("UNSCHEDULABLE_AND_UNRESOLVABLE", _sent(outcome.unresolvable, node_names))):
                if n:
                    decisions.labels("filter", status).inc(n)
        self.explain.record(pod.key, Verdict("filter", pod.uid, self.handle.clock.now(), feasible, verdicts,
                                             outcome="error" if outcome.error else
                                             ("feasible" if feasible else "unschedulable"),
                                             error=outcome.error))
        return outcome

    def _explain_rejection(self, raw_pod: Mapping[str, Any], pod: PodInfo, rejected: Mapping[str, Status]) -> None:
        """An Event on the pod, in kube-scheduler's aggregated wording, when no node fits (the
        writer aggregates repeats and rate-limits, so this is cheap to call every attempt)."""
        counts: dict[str, int] = {}
        for st in rejected.values():
            for reason in st.reasons or (st.code.name,):
                counts[reason] = counts.get(reason, 0) + 1
        summary = ", ".join(f"{n} {r}" for r, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        message = (f"0/{len(rejected)} nodes are available to the extender: {summary}. "
                   f"Details: /debug/pods/{pod.namespace}/{pod.name}")
        try:
            self.handle.writer.record_event(raw_pod, type_="Warning", reason="ExtenderFilterRejected", message=message)
        except Exception:  # noqa: BLE001 - events are best effort
            log.debug("event not recorded", exc_info=True)

    # ---- prioritize ---------------------------------------------------------------------------

    def score_ahead(self, pod: PodInfo, node_names: list[str]) -> Ints | None:
        """Score ``pod`` on ``node_names`` now, before kube-scheduler asks: a prioritize of this
        very PodInfo (the one parse a pod's filter and prioritize share) with the same names on
        the same snapshot is then answered with these scores - exactly what it would compute,
        since nothing they depend on can differ. Only for profiles whose Score plugins all read
        nothing but the pod, the snapshot and their own arguments (``SCORES_FROM_SNAPSHOT``),
        with no PreScore; None (and nothing kept) otherwise, or when a plugin fails (prioritize
        then fails as it would have). The scores returned are the very array that prioritize
        returns for them (read-only). Called after a filter answer is on its way: kube-scheduler
        sends the names filter found feasible to prioritize next, and scoring them while it runs
        its own plugins takes the work off the pod's path."""
        fw = self.profiles.framework_for(pod)
        if not self.batch or not node_names or fw.pre_score_plugins or \
                not all(getattr(p, "SCORES_FROM_SNAPSHOT", False) for p, _ in fw.score_plugins):
            return None
        snapshot = self.cache.snapshot()
        scores, st = score_names(fw, CycleState(), pod, snapshot, node_names)
        if not st.ok:
            return None
        self._ahead = _Ahead(pod, snapshot, list(node_names), scores)
        return scores

    def prioritize(self, raw_pod: Mapping[str, Any] | PodInfo, node_names: list[str]) -> Priorities:
        """(node, score 0..100) for every input name, in input order; unknown nodes score 0.
        Raises EngineError if a PreScore/Score plugin fails."""
        return Priorities(node_names, self.prioritize_scores(raw_pod, node_names))

    def prioritize_scores(self, raw_pod: Mapping[str, Any] | PodInfo, node_names: list[str]) -> Ints:
        """``prioritize``'s scores, as an int64 array aligned with ``node_names`` (read-only: it
        may be the array ``score_ahead`` made)."""
        pod = raw_pod if isinstance(raw_pod, PodInfo) else self.pods.parse(raw_pod)
        snapshot = self.cache.snapshot()
        ahead = self._ahead
        if ahead is not None and ahead.pod is pod and ahead.snapshot is snapshot and ahead.names == node_names:
            return ahead.scores
        fw = self.profiles.framework_for(pod)
        if self.batch:
            scores, st = score_names(fw, CycleState(), pod, snapshot, node_names)
            if not st.ok:
                raise EngineError(st.message)
            return scores
        nodes = list(filter(None, map(snapshot.getter(), node_names)))
        by_name, st = fw.run_score(CycleState(), pod, nodes)
        if not st.ok:
            raise EngineError(st.message)
        return np.fromiter(map(by_name.get, node_names, itertools.repeat(0)), np.int64, len(node_names))
