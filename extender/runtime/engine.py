"""Engine: the four extender verbs, run as framework cycles over the cache.

* ``filter``: snapshot -> PreFilter -> Filter per candidate -> (nothing fits) PostFilter.
  Names the extender does not know are rejected as Unschedulable, "node not in extender cache"
  (it may know them on the next attempt).
* ``prioritize``: PreScore -> Score -> NormalizeScore -> weights; 0..100 per node.
* ``preempt``: kube-scheduler's candidates, refined so the managed resources really fit; victims
  of equal or higher priority are never named; ``preemptionPolicy: Never`` preempts nothing.
* ``bind`` (binding cycle, concurrent): find the pod, re-validate the node against current state
  and assume it atomically -> Reserve -> Permit (maybe wait) -> PreBind -> Bind -> PostBind ->
  finish_binding. Any failure: Unreserve in reverse order, forget, return the error text.
  Idempotent: already bound or assumed on the same node is success; a second bind of a pod whose
  bind is in flight waits for the first one's result.

The engine knows no HTTP and no wire format: ``extender.api`` converts to and from the wire.
"""

from __future__ import annotations

import itertools
import logging
from datetime import datetime
import threading
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from extender.cache.cache import AssumeError, ClusterCache
from extender.framework import ledger
from extender.framework.batch import Ints
from extender.framework.cycle_state import CycleState
from extender.framework.handle import WriteError
from extender.framework.interfaces import Victim
from extender.framework.pod_group import group_of
from extender.framework.resources import QuantityError
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo, pod_key
from extender.metrics import Metrics
from extender.runtime.batch import BatchFilter, Priorities, filter_names, score_names
from extender.runtime.explain import ExplainLog, Verdict
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle

log = logging.getLogger(__name__)

NOT_IN_CACHE = Status(Code.UNSCHEDULABLE, ("node not in extender cache",), plugin="extender")
PREFILTER_EXCLUDED = Status(Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                            ("node(s) excluded by the extender's PreFilter",), plugin="extender")


def admission_owner(uid: str) -> str:
    """The reservation owner holding the capacity of pod ``uid`` between its admission and its
    bind (``extender.runtime.admission``)."""
    return f"admitted/{uid}"


def same_unit(pod: PodInfo) -> Callable[[PodInfo], bool]:
    """Pods that capacity held for ``pod`` does not count against (outside admission): the pod
    itself and the members of its pod group, which Gang plans and holds for as one."""
    uid, namespace, group = pod.uid, pod.namespace, group_of(pod.labels)
    if group is None:
        return lambda other: other.uid == uid
    return lambda other: other.uid == uid or (other.namespace == namespace and group_of(other.labels) == group)


def _by(st: Status) -> str:
    return f"{st.plugin}: {st.message}" if st.plugin else st.message


class InvalidRequest(ValueError):
    """The request cannot be acted on as sent (a malformed pod, a bad quantity): HTTP 400."""


class EngineError(RuntimeError):
    """An internal failure while answering a verb (a plugin error in Score, say)."""


@dataclass
class FilterOutcome:
    feasible: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""
    nominated: str | None = None


@dataclass(frozen=True)
class Candidate:
    """One node kube-scheduler proposes for preemption. ``victims`` pairs a UID with the full pod
    when kube-scheduler sent full pods (nodeCacheCapable: false), else None."""

    victims: list[tuple[str, Mapping[str, Any] | None]]
    num_pdb_violations: int = 0


@dataclass(frozen=True)
class PreemptDecision:
    victims: list[str]
    num_pdb_violations: int


@dataclass(frozen=True)
class Rejection:
    """The extender's last Filter answer for ``pod`` rejected every node: which plugins rejected
    (``extender`` for nodes it did not know), why (the most common reason), when, and the cache's
    change count before the answer's snapshot (only later changes can help)."""

    pod: PodInfo
    plugins: frozenset[str]
    reason: str
    at: float
    seq: int


@dataclass
class _BindFlight:
    node: str
    done: threading.Event = field(default_factory=threading.Event)
    result: str = ""


class Engine:
    def __init__(self, handle: EngineHandle, frameworks: Mapping[str, Framework], *, default_profile: str,
                 metrics: Metrics | None = None, explain: ExplainLog | None = None,
                 remember_pods: int = 4096) -> None:
        if default_profile not in frameworks:
            raise ValueError(f"default profile {default_profile!r} is not among the profiles")
        self.handle = handle
        self.cache: ClusterCache = handle.cache
        self.frameworks = dict(frameworks)
        self.default_profile = default_profile
        self.metrics = metrics
        self.explain = explain or ExplainLog()
        self._seen: OrderedDict[str, PodInfo] = OrderedDict()
        self._seen_capacity = remember_pods
        self._seen_lock = threading.Lock()
        self._inflight: dict[str, _BindFlight] = {}
        self._inflight_lock = threading.Lock()
        self._simulated = itertools.count(-1, -1)
        self._rejections: OrderedDict[str, Rejection] = OrderedDict()
        self._wakeups: dict[str, tuple[PodInfo, float]] = {}
        self.batch = True
        """Filter and prioritize through the columnar batch path (``extender.runtime.batch``);
        False: the per-node path only (the property test compares the two)."""
        handle.engine = self

    # ---- helpers ----------------------------------------------------------------------------

    def framework_for(self, pod: PodInfo) -> Framework:
        """The profile named by the pod's schedulerName; pods of other schedulers that still reach
        this extender (extenders are shared by all kube-scheduler profiles) get the default one."""
        return self.frameworks.get(pod.scheduler_name) or self.frameworks[self.default_profile]

    def pod_info(self, raw: Mapping[str, Any]) -> PodInfo:
        """Parse the request's pod. Always parsed anew: callers (tests, tools) may send different
        pods under one uid and resourceVersion, and a stale parse would decide wrongly."""
        try:
            pod = PodInfo.from_pod(raw, self.handle.managed_resources)
        except (ValueError, QuantityError, TypeError, AttributeError) as exc:
            raise InvalidRequest(f"Pod: {exc}") from exc
        with self._seen_lock:
            self._seen[pod.uid] = pod
            self._seen.move_to_end(pod.uid)
            while len(self._seen) > self._seen_capacity:
                self._seen.popitem(last=False)
        return pod

    def with_held(self, info: NodeInfo, pod: PodInfo, strict: bool = False) -> NodeInfo:
        """``info`` plus the capacity held on it against ``pod``: pods nominated to it whose
        priority is not lower (capacity freed by preemption stays theirs, as kube-scheduler does
        for its own resources) and reservation slots of equal or higher priority that ``pod`` did
        not claim itself (a pod group's planned placement, pods admitted and not bound yet);
        ``strict``: slots held for the pod's own group count too (see ``Reservations.held_on``).
        A simulated NodeInfo gets a negative generation (never cached); with nothing held,
        ``info`` itself. The held pods are added in one copy (``NodeInfo.with_pods``), not one
        per pod."""
        held = [p.bound_to(info.name) for p in self.cache.nominated(info.name)
                if p.uid != pod.uid and p.priority >= pod.priority]
        held.extend(self.handle.reservations.held_on(info.name, pod, strict, info.pods))
        if not held:
            return info
        return info.with_pods(held, next(self._simulated))

    def placement(self, pod: PodInfo, names: Iterable[str] | None = None, *, strict: bool = False,
                  extra: Mapping[str, Sequence[PodInfo]] | None = None) -> str | None:
        """The node among ``names`` (default: every node) that ``pod`` would go to now, as Filter
        and Score choose it, with every capacity held against it counted (``with_held``;
        ``strict``: its own group's holds too) and the pods of ``extra`` (node -> pods) counted
        where they are listed; None when no node has room. PreFilter runs without candidates, so
        a plugin that plans (Gang) does not plan: this is a question, not a scheduling cycle."""
        fw = self.framework_for(pod)
        state = CycleState()
        snapshot = self.cache.snapshot()
        allowed, st = fw.run_pre_filter(state, pod, snapshot)
        if not st.ok:
            return None
        held = self.held_nodes()
        extra = extra or {}
        nodes: list[NodeInfo] = []
        for info in (snapshot if names is None else filter(None, map(snapshot.get, names))):
            if allowed is not None and info.name not in allowed:
                continue
            if info.name in held:
                info = self.with_held(info, pod, strict)
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

    def _adjusted(self, info: NodeInfo, pod: PodInfo, own_node: str | None, held: set[str]) -> NodeInfo:
        """``info`` as Filter sees it for ``pod``: without the pod's own reservation (no rival of
        itself), with the capacity held on it against the pod (``with_held``)."""
        if own_node == info.name:
            info = info.without_pod(pod.uid, next(self._simulated))
        return self.with_held(info, pod) if info.name in held else info

    def held_nodes(self) -> set[str]:
        """Nodes where ``with_held`` may add something."""
        return self.cache.nominated_nodes() | self.handle.reservations.nodes()

    def _count(self, verb: str, statuses: Mapping[str, Status], feasible: int) -> None:
        if self.metrics is None:
            return
        if feasible:
            self.metrics.decisions.labels(verb, "Success").inc(feasible)
        for code, n in Counter(st.code for st in statuses.values()).items():
            self.metrics.decisions.labels(verb, code.name).inc(n)

    def queue_state(self) -> dict[str, Any]:
        """What ``/debug/queue`` shows: pods held in Permit, nominated pods (capacity held for
        them) and gated pods, each list in the profile's QueueSort order, with waiting times; the
        pending pods the extender's last Filter answer rejected everywhere, with the reason; and
        the reservations held for pod groups."""
        now = self.handle.clock.monotonic()
        wall = self.handle.clock.now()

        ordered = self.frameworks[self.default_profile].sorted_queue

        def age(p: PodInfo) -> float | None:
            try:
                return round(wall - datetime.fromisoformat(p.creation_timestamp.replace("Z", "+00:00")).timestamp(), 3)
            except ValueError:
                return None

        waiting = [dict(wp.as_dict(), waitingSeconds=round(now - wp.since, 3), position=i)
                   for i, wp in enumerate(sorted(self.handle.waiting_pods, key=lambda w: w.since))]
        nominated = []
        for node in sorted(self.cache.nominated_nodes()):
            for i, p in enumerate(ordered(self.cache.nominated(node))):
                nominated.append({"pod": p.key, "uid": p.uid, "node": node, "priority": p.priority, "position": i,
                                  "pendingSeconds": age(p), "reason": "capacity held after preemption"})
        gated = []
        for i, p in enumerate(ordered([p for p in self.cache.pending_pods()
                                       if (p.raw.get("spec") or {}).get("schedulingGates")])):
            gates = [g.get("name") for g in p.raw["spec"]["schedulingGates"] if isinstance(g, dict)]
            gated.append({"pod": p.key, "uid": p.uid, "priority": p.priority, "position": i, "gates": gates,
                          "pendingSeconds": age(p), "reason": "waiting for its scheduling gates to be removed"})
        rejected = []
        for r in self.rejections():
            current = self.cache.pending_pod(r.pod.namespace, r.pod.name)
            if current is not None and current.uid == r.pod.uid:
                rejected.append({"pod": r.pod.key, "uid": r.pod.uid, "plugins": sorted(r.plugins), "reason": r.reason,
                                 "sinceSeconds": round(now - r.at, 3)})
        return {"waitingInPermit": waiting, "nominated": nominated, "gated": gated,
                "rejectedInFilter": rejected, "reserved": self.handle.reservations.describe()}

    # ---- filter -----------------------------------------------------------------------------

    def filter(self, raw_pod: Mapping[str, Any], node_names: list[str]) -> FilterOutcome:
        pod = self.pod_info(raw_pod)
        fw = self.framework_for(pod)
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
            held = self.held_nodes()
            own = self.cache.pod(pod.uid) if self.cache.is_ledger_reservation(pod.uid) else None
            own_node = own.node_name if own is not None else None  # its own reservation is no rival
            if self.batch:  # the columnar path (extender.runtime.batch); None: per node below
                batch = filter_names(fw, state, pod, snapshot, node_names, allowed=allowed,
                                     adjusted=held | {own_node} if own_node else held,
                                     adjust=lambda info: self._adjusted(info, pod, own_node, held),
                                     unknown=NOT_IN_CACHE, excluded=PREFILTER_EXCLUDED)
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
                        rejected[name] = PREFILTER_EXCLUDED
                    else:
                        candidates.append(self._adjusted(info, pod, own_node, held))
            result = fw.run_filter(state, pod, candidates)
            feasible = result.feasible
            rejected.update(result.rejected)
        verdicts: Mapping[str, Status] = rejected if batch is None else batch.rejected
        if not outcome.error and batch is None:
            unresolvable, failed = outcome.unresolvable, outcome.failed
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
            if outcome.error:
                failed.clear()
                unresolvable.clear()
            else:
                outcome.feasible = feasible
        if not outcome.error:
            if not feasible and fw.post_filter_plugins:
                nominated, pst = fw.run_post_filter(state, pod, verdicts)
                if pst.code is Code.ERROR:
                    log.error("post-filter failed", extra={"pod": pod.key, "error": pst.message})
                outcome.nominated = nominated if pst.ok else None
        if not feasible and not outcome.error and verdicts:
            self._explain_rejection(raw_pod, pod, verdicts)
            self._remember_rejection(pod, verdicts, seq)
        elif feasible:
            self.drop_rejection(pod.uid)
        if outcome.error:
            self._count("filter", verdicts, len(feasible))
        elif self.metrics is not None:
            decisions = self.metrics.decisions
            for status, n in (("Success", len(feasible)), ("UNSCHEDULABLE", len(outcome.failed)),
                              ("UNSCHEDULABLE_AND_UNRESOLVABLE", len(outcome.unresolvable))):
                if n:
                    decisions.labels("filter", status).inc(n)
        self.explain.record(pod.key, Verdict("filter", pod.uid, self.handle.clock.now(), feasible, verdicts,
                                             outcome="error" if outcome.error else
                                             ("feasible" if feasible else "unschedulable"),
                                             error=outcome.error))
        return outcome

    def _remember_rejection(self, pod: PodInfo, rejected: Mapping[str, Status], seq: int) -> None:
        reasons = Counter(_by(st) for st in rejected.values())
        entry = Rejection(pod, frozenset(st.plugin or "extender" for st in rejected.values()),
                          reasons.most_common(1)[0][0], self.handle.clock.monotonic(), seq)
        with self._seen_lock:
            self._rejections[pod.uid] = entry
            self._rejections.move_to_end(pod.uid)
            while len(self._rejections) > self._seen_capacity:
                self._rejections.popitem(last=False)

    def rejections(self) -> list[Rejection]:
        """Pods whose last Filter answer rejected every node (oldest first)."""
        with self._seen_lock:
            return list(self._rejections.values())

    def drop_rejection(self, uid: str) -> None:
        with self._seen_lock:
            self._rejections.pop(uid, None)

    def requeue_after(self, pod: PodInfo, seconds: float) -> None:
        """Have ``pod`` touched after ``seconds`` so kube-scheduler retries it: for rejections that
        end with time (a back-off), which no cluster event announces (``extender.runtime.requeue``)."""
        due = self.handle.clock.monotonic() + max(0.0, seconds)
        with self._seen_lock:
            self._wakeups[pod.uid] = (pod, due)
            while len(self._wakeups) > self._seen_capacity:
                del self._wakeups[next(iter(self._wakeups))]

    def pending_wakeups(self) -> int:
        with self._seen_lock:
            return len(self._wakeups)

    def due_wakeups(self) -> list[PodInfo]:
        """The pods whose requested retry time has come (each returned once)."""
        now = self.handle.clock.monotonic()
        with self._seen_lock:
            due = [uid for uid, (_, at) in self._wakeups.items() if at <= now]
            return [self._wakeups.pop(uid)[0] for uid in due]

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

    def prioritize(self, raw_pod: Mapping[str, Any], node_names: list[str]) -> Priorities:
        """(node, score 0..100) for every input name, in input order; unknown nodes score 0.
        Raises EngineError if a PreScore/Score plugin fails."""
        return Priorities(node_names, self.prioritize_scores(raw_pod, node_names))

    def prioritize_scores(self, raw_pod: Mapping[str, Any], node_names: list[str]) -> Ints:
        """``prioritize``'s scores, as an int64 array aligned with ``node_names``."""
        pod = self.pod_info(raw_pod)
        fw = self.framework_for(pod)
        snapshot = self.cache.snapshot()
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

    # ---- preempt ----------------------------------------------------------------------------

    def preempt(self, raw_pod: Mapping[str, Any], candidates: Mapping[str, Candidate]) -> dict[str, PreemptDecision]:
        """Keep the candidates where evicting lower-priority victims lets the pod fit; never name a
        victim of equal or higher priority; nothing at all for ``preemptionPolicy: Never``."""
        pod = self.pod_info(raw_pod)
        if pod.preemption_policy == "Never":
            return {}
        fw = self.framework_for(pod)
        snapshot = self.cache.snapshot()
        state = CycleState()
        out: dict[str, PreemptDecision] = {}
        dropped: dict[str, Status] = {}
        for node_name, cand in candidates.items():
            node = snapshot.get(node_name)
            if node is None:
                dropped[node_name] = NOT_IN_CACHE
                continue
            victims: list[Victim] = []
            for uid, raw in cand.victims:
                known = node.pods.get(uid)
                if known is None and raw is not None:
                    try:
                        known = PodInfo.from_pod(raw, self.handle.managed_resources)
                    except (ValueError, QuantityError, TypeError, AttributeError) as exc:
                        raise InvalidRequest(f"NodeNameToVictims[{node_name}]: {exc}") from exc
                if known is not None and known.priority >= pod.priority:
                    continue
                victims.append(Victim(uid, known))
            if not victims:
                dropped[node_name] = Status.unresolvable("no victims of lower priority than the preemptor")
                continue
            chosen, st = fw.run_preemption(state, pod, node, victims)
            if st.code is Code.ERROR:
                raise EngineError(st.message)
            if not st.ok or not chosen:
                dropped[node_name] = st if not st.ok else Status.unresolvable("no victims left")
                continue
            out[node_name] = PreemptDecision([v.uid for v in chosen],
                                             self._pdb_count(cand.num_pdb_violations, victims, chosen))
        self.explain.record(pod.key, Verdict("preempt", pod.uid, self.handle.clock.now(), sorted(out), dropped,
                                             outcome=f"{len(out)} of {len(candidates)} candidates kept"))
        return out

    def _pdb_count(self, proposed_count: int, proposed: list[Victim], chosen: list[Victim]) -> int:
        """kube-scheduler's count for its proposal, adjusted by what the plugins changed: the
        violations among the victims the extender knows, chosen minus proposed."""
        def known(vs: list[Victim]) -> list[PodInfo]:
            return [v.pod for v in vs if v.pod is not None]
        delta = len(self.handle.pdb_violations(known(chosen))) - len(self.handle.pdb_violations(known(proposed)))
        return max(0, proposed_count + delta)

    # ---- bind -------------------------------------------------------------------------------

    def bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        """Run the binding cycle; returns "" on success, else the error text for ``Error``."""
        with self._inflight_lock:
            flight = self._inflight.get(uid)
            owner = flight is None
            if flight is None:
                flight = self._inflight[uid] = _BindFlight(node)
        if not owner:
            if flight.node != node:
                return f"pod {pod_key(namespace, name)} is being bound to node {flight.node}"
            if not flight.done.wait(self.handle.http_timeout):
                return f"pod {pod_key(namespace, name)}: an earlier bind to {node} is still in progress"
            return flight.result
        result = "internal error"
        try:
            result = self._bind(namespace, name, uid, node)
        except Exception as exc:  # noqa: BLE001 - reported in Error, never a crash
            log.exception("bind failed", extra={"pod": pod_key(namespace, name), "node": node})
            result = f"internal error while binding: {type(exc).__name__}: {exc}"
        finally:
            flight.result = result
            flight.done.set()
            with self._inflight_lock:
                self._inflight.pop(uid, None)
        self.explain.record(pod_key(namespace, name),
                            Verdict("bind", uid, self.handle.clock.now(), [node] if not result else [],
                                    outcome="bound" if not result else "failed", error=result))
        return result

    def _find_pod(self, namespace: str, name: str, uid: str) -> PodInfo | str:
        key = pod_key(namespace, name)
        pending = self.cache.pending_pod(namespace, name)
        if pending is not None:
            if pending.uid == uid:
                return pending
            return (f"pod {key} has UID {pending.uid}, not {uid}: it was deleted and re-created; "
                    "refusing to bind the new pod")
        with self._seen_lock:
            seen = self._seen.get(uid)
        if seen is not None and seen.key == key:
            return seen
        return f"pod {key} (UID {uid}) is not known to the extender"

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> str:
        key = pod_key(namespace, name)
        # A reservation held only by an allocation annotation (from before a restart or leader
        # change, never bound) is no binding: assume() takes it over atomically below.
        existing = None if self.cache.is_ledger_reservation(uid) else self.cache.pod(uid)
        if existing is not None:
            if existing.node_name == node:
                return ""
            return f"pod {key} is already assigned to node {existing.node_name}"
        found = self._find_pod(namespace, name, uid)
        if isinstance(found, str):
            return found
        pod = found
        fw = self.framework_for(pod)
        state = CycleState()
        self.cache.cleanup_expired()
        _, st = fw.run_pre_filter(state, pod, self.cache.snapshot())
        if not st.ok:
            return f"pod {key} cannot be bound: {st.message}"
        try:
            st = self.cache.assume(pod, node,
                                   check=lambda info: fw.run_filter_node(state, pod, self.with_held(info, pod)))
        except AssumeError as exc:
            return f"cannot bind pod {key} to {node}: {exc}"
        if not st.ok:
            return f"node {node} no longer fits pod {key}: {st.message}"
        # the pod now counts where it is assumed: capacity held since its admission is no longer needed
        self.handle.reservations.consume(admission_owner(pod.uid), pod.uid, node)
        st = fw.run_reserve(state, pod, node)
        if not st.ok:
            self.cache.forget(pod.uid)
            return f"reserve failed for pod {key} on {node}: {_by(st)}"
        for phase in ("permit", "preBind", "bind"):
            if phase == "permit":
                st = fw.run_permit(state, pod, node)
                if st.code is Code.WAIT:
                    st = fw.wait_on_permit(pod)
            elif phase == "preBind":
                st = fw.run_pre_bind(state, pod, node)
                if st.ok:
                    st = self._record_allocation(state, pod, node)
            else:
                st = fw.run_bind(state, pod, node)
            if not st.ok:
                fw.run_unreserve(state, pod, node)
                self.cache.forget(pod.uid)
                return f"{phase} failed for pod {key} on {node}: {_by(st)}"
        self.cache.finish_binding(pod.uid)
        self.drop_rejection(pod.uid)
        fw.run_post_bind(state, pod, node)
        self._clear_displaced_nominations(pod, node)
        return ""

    def _clear_displaced_nominations(self, bound: PodInfo, node: str) -> None:
        """A pod of higher priority took capacity on ``node``: nominations of lower-priority pods
        that no longer fit there are cleared (they may preempt elsewhere), as the seeds define."""
        info = self.cache.snapshot().get(node)
        if info is None:
            return
        for nominee in sorted(self.cache.nominated(node), key=lambda p: -p.priority):
            if nominee.priority >= bound.priority:
                continue
            fw = self.framework_for(nominee)
            state = CycleState()
            _, st = fw.run_pre_filter(state, nominee, self.cache.snapshot())
            if st.ok:
                st = fw.run_filter_node(state, nominee, self.with_held(info, nominee))
            if not st.code.is_rejection:
                continue
            try:
                self.handle.writer.set_nominated_node(nominee.namespace, nominee.name, None)
                self.handle.writer.record_event(nominee.raw, type_="Normal", reason="NominationCleared",
                                                message=f"pod {bound.key} of higher priority took the capacity "
                                                        f"held on {node}")
            except WriteError as exc:
                log.warning("clearing a nomination failed", extra={"pod": nominee.key, "error": str(exc)})

    def _record_allocation(self, state: CycleState, pod: PodInfo, node: str) -> Status:
        """Add the allocation ledger entry to the annotations PreBind wants on the pod; the Bind
        plugin carries them all on the Binding, one write. A Binding cannot remove annotations,
        so removals PreBind asked for are one merge patch first (a second write, only then)."""
        if pod.requests:
            entry = ledger.Allocation(node, dict(pod.requests), self.handle.term(), self.handle.clock.now(),
                                      dict(state.allocation_extra))
            state.pod_annotations[ledger.key(self.handle.annotation_prefix)] = ledger.encode(entry)
        removed = [k for k, v in state.pod_annotations.items() if v is None]
        if not removed:
            return Status()
        try:
            self.handle.writer.patch_pod_metadata(pod.namespace, pod.name, annotations=dict.fromkeys(removed),
                                                  uid=pod.uid)
        except WriteError as exc:
            return Status(Code.ERROR, (f"removing annotations failed: {exc}",), plugin="ledger", error=exc)
        return Status()

    def collect_orphans(self) -> int:
        """Release expired reservations and remove their allocation annotations from pods that are
        still unbound (orphans of a crash, a lost bind reply or a deposed leader). Call on the
        leader only. Returns how many annotations were removed."""
        self.cache.cleanup_expired()
        removed = 0
        annotation = ledger.key(self.handle.annotation_prefix)
        for gone in self.cache.take_expired():
            current = self.cache.pending_pod(gone.namespace, gone.name)
            if current is None or current.uid != gone.uid or annotation not in current.annotations:
                continue
            try:
                self.handle.writer.patch_pod_metadata(gone.namespace, gone.name, annotations={annotation: None},
                                                      resource_version=current.resource_version or None,
                                                      uid=current.uid)
            except WriteError as exc:
                log.warning("orphan allocation not removed", extra={"pod": gone.key, "error": str(exc)})
                continue
            removed += 1
            log.info("orphan allocation removed", extra={"pod": gone.key, "node": gone.node_name})
        if removed and self.metrics is not None:
            self.metrics.orphans.inc(removed)
        return removed
