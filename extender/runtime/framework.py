"""Framework: one profile's plugins, run at each extension point with the seeds' semantics.

* PreFilter: all plugins in order; an error or rejection aborts the cycle (every node fails with
  that status); results narrowing the node set intersect; SKIP drops that plugin's Filter.
* Filter: per node, plugins in configured order; the first non-success ends that node.
* PostFilter: only when no node fits; stops at the first plugin that succeeds.
* PreScore / Score / NormalizeScore: every plugin scores every node (0..MAX_NODE_SCORE),
  normalize once per plugin per cycle, then the weighted average keeps the total on 0..100.
* Reserve in order; if one fails, Unreserve of *every* Reserve plugin in reverse order.
* Permit: approve, deny, or wait (the pod joins the waiting room; ``wait_on_permit`` blocks).
* PreBind in order; Bind: the first plugin that does not SKIP handles the pod; PostBind.

A plugin that raises yields ``Status(ERROR)`` naming the plugin and extension point.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Iterable, Mapping, Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.events import Change, ClusterEvent
from extender.framework.handle import Handle, SnapshotView
from extender.framework.interfaces import (MAX_NODE_SCORE, MIN_NODE_SCORE, BindPlugin, FilterPlugin,
                                           PermitPlugin, PostBindPlugin, PostFilterPlugin, PreBindPlugin,
                                           PreEnqueuePlugin, PreemptionPlugin, PreFilterPlugin,
                                           PreFilterResult, PreScorePlugin, QueueSortPlugin, ReservePlugin,
                                           ScorePlugin, Victim)
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.metrics import Metrics
from extender.runtime.waiting_pods import WaitingPod, WaitingPods

log = logging.getLogger(__name__)


def _crash(plugin: str, point: str, exc: BaseException) -> Status:
    log.exception("plugin failed", extra={"plugin": plugin, "extension_point": point})
    return Status(Code.ERROR, (f"plugin {plugin} failed in {point}: {type(exc).__name__}: {exc}",),
                  plugin=plugin, error=exc)


def _status(st: Any, point: str) -> Status:
    """``st`` when a plugin returned a Status as it must; else TypeError (in the plugin's ``try``:
    reported as that plugin's failure, not as an anonymous error of the engine)."""
    if not isinstance(st, Status):
        raise TypeError(f"{point} returned {type(st).__name__} {str(st)[:60]!r}, not a Status")
    return st


_REJECTS = frozenset({Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.ERROR})
"""What a Filter may answer besides Success."""


def _rejection(st: Any, plugin: str) -> Status:
    """A Filter's non-success answer, with its plugin: a rejection or an error; anything else
    (not a Status, SKIP, WAIT) raises TypeError - a Filter answers yes, no or failed."""
    if not isinstance(st, Status) or st.code not in _REJECTS:
        what = st.code.name if isinstance(st, Status) else f"{type(st).__name__} {str(st)[:60]!r}"
        raise TypeError(f"Filter returned {what}: only Success, Unschedulable, UnschedulableAndUnresolvable "
                        "or Error")
    return st if st.plugin == plugin else st.with_plugin(plugin)


_INT = frozenset({int})


def _invalid_score(plugin: str, scores: Mapping[str, Any], names: Mapping[str, Any]) -> Status | None:
    """An error naming the first node of ``names`` whose score is not an int in
    MIN_NODE_SCORE..MAX_NODE_SCORE, or None. All valid (the rule) is settled by a few C-level
    passes; node by node only to name the culprit. Scores of other names are ignored."""
    values = scores.values()
    if (scores.keys() >= names.keys() and set(map(type, values)) <= _INT
            and (not values or (MIN_NODE_SCORE <= min(values) and max(values) <= MAX_NODE_SCORE))):
        return None
    for name in names:
        s = scores.get(name)
        if type(s) is not int or not MIN_NODE_SCORE <= s <= MAX_NODE_SCORE:
            return Status(Code.ERROR, (f"plugin {plugin} returned invalid score {s!r} for node {name}",),
                          plugin=plugin)
    return None


def _weighted_average(names: Mapping[str, Any], weighted: Sequence[tuple[Mapping[str, int], int]]) -> dict[str, int]:
    """Per name, the weight-averaged (rounded down) score of the plugins; 0 without weight.
    With a single plugin that is its own score, taken as is."""
    weight_sum = sum(weight for _, weight in weighted)
    if not weight_sum:
        return dict.fromkeys(names, 0)
    if len(weighted) == 1:
        only = weighted[0][0]
        return {name: only[name] for name in names}
    return {name: sum(scores[name] * weight for scores, weight in weighted) // weight_sum for name in names}


@dataclass(frozen=True, slots=True)
class WakeRule:
    """What may wake a pod a plugin rejected (see ``framework.events``): its registered
    ``events`` (None: it registered nothing, so every event does) and its ``hint`` (None: every
    registered event does)."""

    events: frozenset[ClusterEvent] | None = None
    hint: Callable[[PodInfo, Change], bool] | None = None


_EVERY_EVENT = WakeRule()


def _wake_rule(plugin: Any) -> WakeRule:
    """A plugin's WakeRule, asked once. A plugin whose ``events_to_register`` fails is treated as
    registering nothing (every event wakes its pods: a bug must not hide pods for ever)."""
    register = getattr(plugin, "events_to_register", None)
    if register is None:
        return _EVERY_EVENT
    try:
        events = frozenset(register())
    except Exception:  # noqa: BLE001
        log.exception("events_to_register failed", extra={"plugin": getattr(plugin, "name", "?")})
        return _EVERY_EVENT
    return WakeRule(events, getattr(plugin, "queueing_hint", None))


@dataclass
class FilterResult:
    """Outcome of the Filter phase over a node list: survivors in input order, and the status of
    every rejected node (the rejecting plugin is named in ``Status.plugin``)."""

    feasible: list[str] = field(default_factory=list)
    rejected: dict[str, Status] = field(default_factory=dict)


class Framework:
    """The plugins of one profile, per extension point, in configured order."""

    def __init__(self, profile_name: str, handle: Handle, *, metrics: Metrics | None = None,
                 pre_enqueue: Sequence[PreEnqueuePlugin] = (), queue_sort: QueueSortPlugin | None = None,
                 pre_filter: Sequence[PreFilterPlugin] = (), filter: Sequence[FilterPlugin] = (),
                 post_filter: Sequence[PostFilterPlugin] = (), pre_score: Sequence[PreScorePlugin] = (),
                 score: Sequence[tuple[ScorePlugin, int]] = (), reserve: Sequence[ReservePlugin] = (),
                 permit: Sequence[PermitPlugin] = (), pre_bind: Sequence[PreBindPlugin] = (),
                 bind: Sequence[BindPlugin] = (), post_bind: Sequence[PostBindPlugin] = (),
                 preemption: Sequence[PreemptionPlugin] = ()) -> None:
        self.profile_name = profile_name
        self.handle = handle
        self.metrics = metrics
        self.pre_enqueue_plugins = list(pre_enqueue)
        self.queue_sort_plugin = queue_sort
        self.pre_filter_plugins = list(pre_filter)
        self.filter_plugins = list(filter)
        self.post_filter_plugins = list(post_filter)
        self.pre_score_plugins = list(pre_score)
        self.score_plugins = list(score)
        self.reserve_plugins = list(reserve)
        self.permit_plugins = list(permit)
        self.pre_bind_plugins = list(pre_bind)
        self.bind_plugins = list(bind)
        self.post_bind_plugins = list(post_bind)
        self.preemption_plugins = list(preemption)
        self.waiting_pods: WaitingPods = handle.waiting_pods  # type: ignore[assignment]
        self._by_name: dict[str, Any] = {}
        for group in (self.pre_enqueue_plugins, self.pre_filter_plugins, self.filter_plugins,
                      self.post_filter_plugins, self.reserve_plugins, self.permit_plugins):
            for p in group:
                self._by_name.setdefault(p.name, p)
        self._wake_rules: dict[str, WakeRule] = {name: _wake_rule(p) for name, p in self._by_name.items()}

    def _observe(self, plugin: str, point: str, seconds: float) -> None:
        if self.metrics is not None:
            self.metrics.observe_plugin(plugin, point, seconds)

    def describe(self) -> dict[str, Any]:
        """Plugins per extension point, for the start-up log and the debug endpoint."""
        names = lambda ps: [p.name for p in ps]  # noqa: E731
        return {
            "schedulerName": self.profile_name,
            "preEnqueue": names(self.pre_enqueue_plugins),
            "queueSort": [self.queue_sort_plugin.name] if self.queue_sort_plugin else [],
            "preFilter": names(self.pre_filter_plugins), "filter": names(self.filter_plugins),
            "postFilter": names(self.post_filter_plugins), "preScore": names(self.pre_score_plugins),
            "score": [{"name": p.name, "weight": w} for p, w in self.score_plugins],
            "reserve": names(self.reserve_plugins), "permit": names(self.permit_plugins),
            "preBind": names(self.pre_bind_plugins), "bind": names(self.bind_plugins),
            "postBind": names(self.post_bind_plugins), "preemption": names(self.preemption_plugins),
        }

    # ---- queue ------------------------------------------------------------------------------

    def run_pre_enqueue(self, pod: PodInfo) -> Status:
        for p in self.pre_enqueue_plugins:
            try:
                st = p.pre_enqueue(pod)
            except Exception as exc:  # noqa: BLE001 - a plugin bug must not take the server down
                return _crash(p.name, "PreEnqueue", exc)
            if not st.ok:
                return st.with_plugin(p.name)
        return Status()

    def wakes(self, rejector: str, pod: PodInfo, changes: Sequence[Change]) -> bool:
        """May ``changes`` make ``pod``, last rejected by plugin ``rejector``, schedulable? A
        change to the pod itself always counts; otherwise the plugin's registered events and its
        queueing hint decide (no registration: every event counts; see ``framework.events``).
        The registration is the one read at construction (``wake_rule``)."""
        rule = self.wake_rule(rejector)
        events, hint = rule.events, rule.hint
        if events is None:
            return bool(changes)
        for change in changes:
            if change.key == pod.key:
                return True
            if change.event in events:
                try:
                    if hint is None or hint(pod, change):
                        return True
                except Exception:  # noqa: BLE001 - a broken hint must not hide the pod for ever
                    log.exception("queueing hint failed", extra={"plugin": rejector, "pod": pod.key})
                    return True
        return False

    def wake_rule(self, rejector: str) -> WakeRule:
        """Plugin ``rejector``'s registered events and queueing hint, read once at construction
        (an unknown name, e.g. ``extender``: every event counts)."""
        return self._wake_rules.get(rejector, _EVERY_EVENT)

    def less(self, a: PodInfo, b: PodInfo) -> bool:
        if self.queue_sort_plugin is None:
            return False
        return self.queue_sort_plugin.less(a, b)

    def sorted_queue(self, pods: Iterable[PodInfo]) -> list[PodInfo]:
        """``pods`` in this profile's QueueSort order."""
        def compare(a: PodInfo, b: PodInfo) -> int:
            return -1 if self.less(a, b) else (1 if self.less(b, a) else 0)
        return sorted(pods, key=functools.cmp_to_key(compare))

    # ---- scheduling cycle ---------------------------------------------------------------------

    def run_pre_filter(self, state: CycleState, pod: PodInfo, snapshot: SnapshotView,
                       skip: AbstractSet[str] = frozenset()) -> tuple[frozenset[str] | None, Status]:
        """PreFilter plugins in order (but those named in ``skip``): the nodes they allow (None:
        any) and the first rejection; a SKIP leaves the plugin's Filter out of ``state``'s cycle."""
        allowed: frozenset[str] | None = None
        for p in self.pre_filter_plugins:
            if p.name in skip:
                continue
            t0 = time.perf_counter()
            try:
                result, st = p.pre_filter(state, pod, snapshot)
                _status(st, "PreFilter")
            except Exception as exc:  # noqa: BLE001
                return None, _crash(p.name, "PreFilter", exc)
            finally:
                self._observe(p.name, "PreFilter", time.perf_counter() - t0)
            if st.code is Code.SKIP:
                state.skip_filter.add(p.name)
                continue
            if not st.ok:
                return None, st.with_plugin(p.name)
            if isinstance(result, PreFilterResult) and result.node_names is not None:
                names = result.node_names  # a frozenset by the API; any collection of names is taken
                if type(names) is not frozenset:
                    names = frozenset(names)
                allowed = names if allowed is None else allowed & names
        return allowed, Status()

    def run_filter(self, state: CycleState, pod: PodInfo, nodes: Iterable[NodeInfo]) -> FilterResult:
        """Run Filter plugins over ``nodes`` (the hot path: keep it lean). A plugin that raises
        ends the whole phase: one Error status (one logged traceback) for the node it failed on
        and every node not decided yet, since the answer is an error anyway."""
        plugins = [p for p in self.filter_plugins if p.name not in state.skip_filter]
        out = FilterResult()
        feasible = out.feasible
        rejected = out.rejected
        clock = time.perf_counter
        node_list = nodes if isinstance(nodes, list) else list(nodes)
        if len(plugins) == 1:  # the common case: one timer for the loop, not two per node
            only = plugins[0]
            t0 = clock()
            batch = getattr(only, "filter_all", None) if len(node_list) > 1 else None  # one node: its filter
            try:
                if batch is not None:
                    found = batch(state, pod, node_list)
                    for node in node_list:
                        st = found.get(node.name)
                        if st is None:
                            feasible.append(node.name)
                        else:
                            rejected[node.name] = _rejection(st, only.name)
                else:
                    for node in node_list:
                        st = only.filter(state, pod, node)
                        if st.code is Code.SUCCESS:
                            feasible.append(node.name)
                        else:
                            rejected[node.name] = _rejection(st, only.name)
            except Exception as exc:  # noqa: BLE001
                self._fail_filter(out, node_list, _crash(only.name, "Filter", exc))
            self._observe(only.name, "Filter", clock() - t0)
            return out
        spent = [0.0] * len(plugins)
        for node in node_list:
            for i, p in enumerate(plugins):
                t0 = clock()
                try:
                    st = p.filter(state, pod, node)
                    if st.code is not Code.SUCCESS:
                        rejected[node.name] = _rejection(st, p.name)
                        break
                except Exception as exc:  # noqa: BLE001
                    self._fail_filter(out, node_list, _crash(p.name, "Filter", exc))
                    return out
                finally:
                    spent[i] += clock() - t0
            else:
                feasible.append(node.name)
        for i, p in enumerate(plugins):
            self._observe(p.name, "Filter", spent[i])
        return out

    @staticmethod
    def _fail_filter(out: FilterResult, nodes: Sequence[NodeInfo], error: Status) -> None:
        """A plugin failed: ``error`` for every node, none feasible."""
        out.feasible.clear()
        out.rejected.update(dict.fromkeys((n.name for n in nodes), error))

    def run_filter_node(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        result = self.run_filter(state, pod, (node,))
        return result.rejected.get(node.name, Status())

    def run_post_filter(self, state: CycleState, pod: PodInfo,
                        statuses: Mapping[str, Status]) -> tuple[str | None, Status]:
        """Returns (nominated node, status). Unschedulable if no plugin could help."""
        last = Status(Code.UNSCHEDULABLE, ("no PostFilter plugin made the pod schedulable",))
        for p in self.post_filter_plugins:
            try:
                nominated, st = p.post_filter(state, pod, statuses)
                _status(st, "PostFilter")
            except Exception as exc:  # noqa: BLE001
                return None, _crash(p.name, "PostFilter", exc)
            if st.ok:
                return nominated, st.with_plugin(p.name)
            if st.code is Code.ERROR:
                return None, st.with_plugin(p.name)
            last = st.with_plugin(p.name)
        return None, last

    def run_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> tuple[dict[str, int], Status]:
        """PreScore, Score, NormalizeScore and weights. Returns node -> 0..MAX_NODE_SCORE (the
        weighted average of the plugins' scores), or an error status that aborts prioritize."""
        for pre in self.pre_score_plugins:
            try:
                st = _status(pre.pre_score(state, pod, nodes), "PreScore")
            except Exception as exc:  # noqa: BLE001
                return {}, _crash(pre.name, "PreScore", exc)
            if st.code is Code.SKIP:
                state.skip_score.add(pre.name)
            elif not st.ok:
                return {}, st.with_plugin(pre.name)
        names = dict.fromkeys(n.name for n in nodes)
        weighted: list[tuple[Mapping[str, int], int]] = []
        for p, weight in self.score_plugins:
            if p.name in state.skip_score:
                continue
            t0 = time.perf_counter()
            try:
                scores, st = self._plugin_scores(p, state, pod, nodes)
            except Exception as exc:  # noqa: BLE001
                return {}, _crash(p.name, "Score", exc)
            finally:
                self._observe(p.name, "Score", time.perf_counter() - t0)
            if not st.ok:
                return {}, st
            invalid = _invalid_score(p.name, scores, names)
            if invalid is not None:
                return {}, invalid
            weighted.append((scores, weight))
        return _weighted_average(names, weighted), Status()

    @staticmethod
    def _plugin_scores(p: ScorePlugin, state: CycleState, pod: PodInfo,
                       nodes: Sequence[NodeInfo]) -> tuple[dict[str, Any], Status]:
        """One plugin's scores by node name, normalized: its batch ``score_all`` when it has one
        (a non-success status becomes an error naming the plugin, as a failed Score does in
        kube-scheduler), else ``score`` per node. Plugin exceptions propagate to the caller."""
        batch = getattr(p, "score_all", None)
        if batch is not None:
            scores, st = batch(state, pod, nodes)
            if not st.ok:
                return {}, Status(Code.ERROR, (f"plugin {p.name} failed in Score: {st.message or st.code.name}",),
                                  plugin=p.name, error=st.error)
        else:
            scores = {n.name: p.score(state, pod, n) for n in nodes}
        normalize = getattr(p, "normalize_score", None)
        if normalize is not None:
            normalize(state, pod, scores)
        return scores, Status()

    # ---- preempt verb -----------------------------------------------------------------------

    def run_preemption(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                       victims: list[Victim]) -> tuple[list[Victim], Status]:
        for p in self.preemption_plugins:
            try:
                victims, st = p.process_preemption(state, pod, node, victims)
                _status(st, "Preemption")
            except Exception as exc:  # noqa: BLE001
                return [], _crash(p.name, "Preemption", exc)
            if not st.ok:
                return [], st.with_plugin(p.name)
        return victims, Status()

    # ---- binding cycle ----------------------------------------------------------------------

    def run_reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """Reserve in order; on failure, Unreserve every Reserve plugin in reverse order."""
        for p in self.reserve_plugins:
            try:
                st = _status(p.reserve(state, pod, node_name), "Reserve")
            except Exception as exc:  # noqa: BLE001
                st = _crash(p.name, "Reserve", exc)
            if not st.ok:
                self.run_unreserve(state, pod, node_name)
                return st.with_plugin(p.name)
        return Status()

    def run_unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for p in reversed(self.reserve_plugins):
            try:
                p.unreserve(state, pod, node_name)
            except Exception:  # noqa: BLE001 - Unreserve must not fail; log and go on
                log.exception("unreserve failed", extra={"plugin": p.name, "pod": pod.key})

    def run_permit(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        """SUCCESS (all approve), a rejection (one denied), or WAIT (call ``wait_on_permit``).
        The pod is in the waiting room while its plugins decide (see ``runtime.waiting_pods``):
        plugins that count the pods in Permit see it, and may allow it before it waits."""
        wp = WaitingPod(pod, node_name, self.handle.clock)
        self.waiting_pods.add(wp)
        timeouts: dict[str, float] = {}
        st = Status()
        for p in self.permit_plugins:
            try:
                st, timeout = p.permit(state, pod, node_name)
                if _status(st, "Permit").code is Code.WAIT:
                    timeouts[p.name] = max(0.0, float(timeout))  # a timeout that is no number fails here
                    st = Status()
            except Exception as exc:  # noqa: BLE001
                st = _crash(p.name, "Permit", exc)
            if not st.ok:
                st = st.with_plugin(p.name)
                break
        if not st.ok:
            self.waiting_pods.remove(pod.uid)
            return st
        final = wp.settle(timeouts)
        if final is not None:  # no plugin asked it to wait, or others decided meanwhile
            self.waiting_pods.remove(pod.uid)
            return final
        return Status(Code.WAIT, ("waiting in Permit",), plugin=", ".join(sorted(timeouts)))

    def wait_on_permit(self, pod: PodInfo) -> Status:
        """After ``run_permit`` answered WAIT: block until the pod is allowed, rejected or timed
        out. A pod no longer in the room was taken out of it (deleted meanwhile): rejected."""
        wp = self.waiting_pods.get(pod.uid)
        if wp is None:
            return Status(Code.UNSCHEDULABLE, ("the pod left the Permit waiting room (deleted)",))
        t0 = time.monotonic()
        try:
            st = wp.wait(self.handle.permit_budget())
        finally:
            self.waiting_pods.remove(pod.uid)
        if self.metrics is not None:
            self.metrics.permit_waits.labels("allowed" if st.ok else "rejected").observe(time.monotonic() - t0)
        return st

    def run_pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for p in self.pre_bind_plugins:
            try:
                st = _status(p.pre_bind(state, pod, node_name), "PreBind")
            except Exception as exc:  # noqa: BLE001
                return _crash(p.name, "PreBind", exc)
            if not st.ok:
                return st.with_plugin(p.name)
        return Status()

    def run_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        for p in self.bind_plugins:
            try:
                st = _status(p.bind(state, pod, node_name), "Bind")
            except Exception as exc:  # noqa: BLE001
                return _crash(p.name, "Bind", exc)
            if st.code is Code.SKIP:
                continue
            return st.with_plugin(p.name)
        return Status(Code.ERROR, ("no Bind plugin handled the pod",))

    def run_post_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        for p in self.post_bind_plugins:
            try:
                p.post_bind(state, pod, node_name)
            except Exception:  # noqa: BLE001 - informational only
                log.exception("post-bind failed", extra={"plugin": p.name, "pod": pod.key})
