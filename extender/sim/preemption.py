"""DefaultPreemption's PostFilter with extenders (§6).

:func:`find_candidates` is ``findCandidates`` + ``DryRunPreemption``: potential nodes are those
whose status is ``Unschedulable`` (``UnschedulableAndUnresolvable`` never; nodes without a status,
e.g. dropped silently by an extender, only with ``absent_nodes_are_candidates``, §6.4); the dry
run uses the **in-tree filters only** (extender Filter is not consulted): remove every
lower-priority pod, check the preemptor fits, then reprieve victims most-important-first,
PDB-violating ones first. A node where the pod fits with no victim is not a candidate but an
error "expected at least one victim pod on node X" - which is how a shortage of an
``ignoredByScheduler`` resource ends preemption before any extender is asked (§13.4). The
search starts at a random offset and stops after ``max(10% of potential nodes, 100)``
candidates.

:func:`call_extenders` is ``callExtenders`` (§6.1.4, §6.2), :func:`pick_one_node` is
``pickOneNodeForPreemption`` (§6.3).

PodDisruptionBudgets are simplified: ``status.disruptionsAllowed`` is used when present, else
derived from ``minAvailable``/``maxUnavailable`` (integers or percentages) and the bound pods the
selector matches; ``status.disruptedPods`` is not tracked.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

from extender.framework.status import Code, Status
from extender.sim.cache import NodeState, PodRecord, Snapshot
from extender.sim.client import ExtenderError, HTTPExtender, Victims
from extender.sim.filters import WorkingNode, expression_matches

MAX_INT32 = 2**31 - 1
NOT_HELPFUL = "Preemption is not helpful for scheduling"
NO_VICTIMS = "No preemption victims found for incoming pod"


@dataclass
class Candidate:
    node: str
    victims: list[PodRecord]
    num_pdb_violations: int = 0


@dataclass
class PDB:
    """A PodDisruptionBudget reduced to what preemption reads."""

    namespace: str
    selector: Mapping[str, Any] | None
    disruptions_allowed: int

    def matches(self, pod: PodRecord) -> bool:
        if pod.namespace != self.namespace or not self.selector or not pod.labels:
            return False
        labels = pod.labels
        for k, v in (self.selector.get("matchLabels") or {}).items():
            if labels.get(k) != v:
                return False
        return all(expression_matches(e, labels) for e in self.selector.get("matchExpressions") or [])


def _scaled(value: Any, total: int, round_up: bool) -> int:
    if isinstance(value, str) and value.endswith("%"):
        pct = int(value[:-1] or 0)
        amount = total * pct / 100
        return math.ceil(amount) if round_up else math.floor(amount)
    return int(value)


def pdbs_from(objects: Iterable[Mapping[str, Any]], bound: Sequence[PodRecord],
              pending: Sequence[PodRecord] = ()) -> list[PDB]:
    """The budgets preemption reads: a budget's ``status.disruptionsAllowed`` when it has one,
    else counted as the disruption controller counts - the covered pods (``bound`` and
    ``pending``) expected, the bound ones not being deleted healthy."""
    out = []
    for obj in objects:
        meta = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        status = obj.get("status") or {}
        pdb = PDB(str(meta.get("namespace") or "default"), spec.get("selector"), 0)
        if isinstance(status.get("disruptionsAllowed"), int):
            pdb.disruptions_allowed = status["disruptionsAllowed"]
        else:
            healthy = sum(1 for p in bound if pdb.matches(p) and not p.deleting)
            expected = [p for p in (*bound, *pending) if pdb.matches(p)]
            if spec.get("minAvailable") is not None:
                pdb.disruptions_allowed = max(0, healthy - _scaled(spec["minAvailable"], len(expected), True))
            elif spec.get("maxUnavailable") is not None:
                pdb.disruptions_allowed = max(
                    0, healthy - (len(expected) - _scaled(spec["maxUnavailable"], len(expected), True)))
        out.append(pdb)
    return out


def start_time_key(pod: PodRecord, now: float) -> float:
    """``GetPodStartTime``: status.startTime, or now when unset."""
    return pod.start_time if pod.start_time is not None else now


def more_important_first(pods: Iterable[PodRecord], now: float) -> list[PodRecord]:
    """Sorted by ``MoreImportantPod``: higher priority, then earlier start."""
    return sorted(pods, key=lambda p: (-p.priority, start_time_key(p, now)))


def split_by_pdb(pods: Sequence[PodRecord], pdbs: Sequence[PDB]) -> tuple[list[PodRecord], list[PodRecord]]:
    """``filterPodsWithPDBViolation``: (violating, non-violating), order kept."""
    allowed = [p.disruptions_allowed for p in pdbs]
    violating: list[PodRecord] = []
    ok: list[PodRecord] = []
    for pod in pods:
        violated = False
        for i, pdb in enumerate(pdbs):
            if pdb.matches(pod):
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else ok).append(pod)
    return violating, ok


FitCheck = Callable[[PodRecord, WorkingNode, bool], Status]
"""``fits(pod, node, pods_only)``: the in-tree filters (with nominated pods); with ``pods_only``
only those whose verdict depends on the pods on the node (NodeResourcesFit in this subset)."""


def select_victims_on_node(pod: PodRecord, node: NodeState, fits: FitCheck, pdbs: Sequence[PDB],
                           now: float) -> tuple[list[PodRecord], int, Status]:
    """``SelectVictimsOnNode`` of DefaultPreemption.

    One shortcut, with the same result: when the pod already fits with every pod in place,
    reprieving all potential victims would succeed one by one, so there are no victims (the
    caller turns that into "expected at least one victim pod on node X")."""
    potential = [p for p in node.pods.values() if p.priority < pod.priority]
    if not potential:
        return [], 0, Status.unresolvable(NO_VICTIMS)
    work = WorkingNode(node)
    if fits(pod, work, False).ok:
        return [], 0, Status()
    for p in potential:
        work.remove(p)
    st = fits(pod, work, False)
    if not st.ok:
        return [], 0, st
    potential = more_important_first(potential, now)
    violating, non_violating = split_by_pdb(potential, pdbs)
    victims: list[PodRecord] = []
    num_violating = 0

    def reprieve(p: PodRecord) -> bool:
        work.add(p)
        if fits(pod, work, True).ok:
            return True
        work.remove(p)
        victims.append(p)
        return False

    for p in violating:
        if not reprieve(p):
            num_violating += 1
    for p in non_violating:
        reprieve(p)
    if violating and non_violating:
        victims = more_important_first(victims, now)
    return victims, num_violating, Status()


@dataclass
class DryRun:
    candidates: list[Candidate] = field(default_factory=list)
    statuses: dict[str, Status] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    potential: int = 0


def nodes_where_preemption_might_help(snapshot: Snapshot, statuses: Mapping[str, Status],
                                      absent_are_candidates: bool) -> tuple[list[NodeState], dict[str, Status]]:
    potential: list[NodeState] = []
    not_helpful: dict[str, Status] = {}
    for node in snapshot.ordered():
        st = statuses.get(node.name)
        if st is None and not absent_are_candidates:
            code = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        else:
            code = st.code if st is not None else Code.SUCCESS
        if code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
            not_helpful[node.name] = Status.unresolvable(NOT_HELPFUL)
            continue
        potential.append(node)
    return potential, not_helpful


def find_candidates(pod: PodRecord, snapshot: Snapshot, statuses: Mapping[str, Status], fits: FitCheck,
                    pdbs: Sequence[PDB], rng: random.Random, now: float, *, absent_are_candidates: bool,
                    min_pct: int = 10, min_abs: int = 100) -> DryRun:
    potential, not_helpful = nodes_where_preemption_might_help(snapshot, statuses, absent_are_candidates)
    out = DryRun(statuses=dict(not_helpful), potential=len(potential))
    if not potential:
        return out
    n = len(potential)
    num_candidates = min(max(n * min_pct // 100, min_abs), n)
    offset = rng.randrange(n)
    violating: list[Candidate] = []
    non_violating: list[Candidate] = []
    for i in range(n):
        node = potential[(offset + i) % n]
        victims, num_pdb, st = select_victims_on_node(pod, node, fits, pdbs, now)
        if st.ok and victims:
            (non_violating if num_pdb == 0 else violating).append(Candidate(node.name, victims, num_pdb))
            if non_violating and len(non_violating) + len(violating) >= num_candidates:
                break
            continue
        if st.ok and not victims:
            st = Status.failure(f'expected at least one victim pod on node "{node.name}"')
        if st.code is Code.ERROR:
            out.errors.append(st.message)
        out.statuses[node.name] = st
    out.candidates = non_violating + violating
    return out


def aggregate(errors: Sequence[str]) -> str:
    """``utilerrors.NewAggregate(errs).Error()``: one message as is, several deduplicated in brackets."""
    seen: list[str] = []
    for e in errors:
        if e not in seen:
            seen.append(e)
    if len(seen) == 1:
        return seen[0]
    return "[" + ", ".join(seen) + "]"


@dataclass
class ExtenderRound:
    extender: str
    sent: dict[str, list[str]]
    kept: dict[str, list[str]] | None
    error: str = ""


def call_extenders(pod: PodRecord, candidates: Sequence[Candidate], extenders: Sequence[HTTPExtender],
                   snapshot: Snapshot, rounds: list[ExtenderRound]) -> tuple[list[Candidate] | None, str]:
    """``callExtenders``: each interested preempt-capable extender, in order, gets the current
    map; returns (candidates, "") or (None, error message)."""
    by_uid: dict[str, PodRecord] = {}
    for node in snapshot.nodes.values():
        for uid, p in node.pods.items():
            by_uid[uid] = p
    victims_map: dict[str, Victims] = {c.node: Victims([p.raw for p in c.victims], c.num_pdb_violations)
                                       for c in candidates}
    for ext in extenders:
        if not ext.spec.supports_preemption or not ext.spec.is_interested(pod.raw):
            continue
        sent = {n: [_uid(p) for p in v.pods] for n, v in victims_map.items()}
        try:
            result = ext.process_preemption(pod.raw, victims_map, snapshot.pods_on)
        except ExtenderError as exc:
            rounds.append(ExtenderRound(ext.name, sent, None, str(exc)))
            if ext.spec.ignorable:
                continue
            return None, str(exc)
        for node_name in list(result):
            if not result[node_name].pods:
                if ext.spec.ignorable:
                    del result[node_name]
                    continue
                rounds.append(ExtenderRound(ext.name, sent, None, "zero victims"))
                return None, f'expected at least one victim pod on node "{node_name}"'
        rounds.append(ExtenderRound(ext.name, sent, {n: [_uid(p) for p in v.pods] for n, v in result.items()}))
        victims_map = result
        if not victims_map:
            break
    out = []
    for node_name, v in victims_map.items():
        records = [by_uid.get(_uid(p)) or PodRecord.from_raw(p) for p in v.pods]
        out.append(Candidate(node_name, records, v.num_pdb_violations))
    return out, ""


def _uid(pod: Mapping[str, Any]) -> str:
    return str((pod.get("metadata") or {}).get("uid") or "")


def pick_one_node(candidates: Sequence[Candidate], rng: random.Random, now: float) -> Candidate | None:
    """``SelectCandidate`` / ``pickOneNodeForPreemption``: fewest PDB violations, lowest
    highest-victim priority, lowest priority sum, fewest victims, latest earliest start time,
    then the first left (Go map order: random, seeded here)."""
    if not candidates:
        return None
    if len(candidates) == 1:
        return candidates[0]
    pool = list(candidates)
    rng.shuffle(pool)

    def earliest_start(c: Candidate) -> float:
        """``GetEarliestPodStartTime`` among the highest-priority victims."""
        if not c.victims:
            return -math.inf
        top = max(p.priority for p in c.victims)
        return min(start_time_key(p, now) for p in c.victims if p.priority == top)

    score_funcs: list[Callable[[Candidate], float]] = [
        lambda c: -c.num_pdb_violations,
        lambda c: -c.victims[0].priority if c.victims else 0,
        lambda c: -sum(p.priority + MAX_INT32 + 1 for p in c.victims),
        lambda c: -len(c.victims),
        earliest_start,
    ]
    for f in score_funcs:
        best = -math.inf
        selected: list[Candidate] = []
        for c in pool:
            s = f(c)
            if s > best:
                best, selected = s, []
            if s == best:
                selected.append(c)
        if len(selected) == 1:
            return selected[0]
        pool = selected
    return pool[0]


def fit_error_message(num_all_nodes: int, statuses: Mapping[str, Status], post_filter: str = "") -> str:
    """``FitError.Error()``: "0/N nodes are available: 3 Insufficient cpu, 1 ... ." plus the
    PostFilter message; reasons counted by identical text and sorted as strings."""
    counts: dict[str, int] = {}
    for st in statuses.values():
        for reason in st.reasons:
            counts[reason] = counts.get(reason, 0) + 1
    msg = f"0/{num_all_nodes} nodes are available:"
    if counts:
        msg += " " + ", ".join(sorted(f"{v} {k}" for k, v in counts.items())) + "."
    if post_filter:
        msg += f" {post_filter}."
    return msg
