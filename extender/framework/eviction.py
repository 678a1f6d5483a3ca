"""What the plugins that preempt share: whether a pod may preempt now, how candidate nodes rank
(kube-scheduler's ``pickOneNodeForPreemption``: ``preemption_rank``), preemption's writes (evict
the victims, nominate the pod, clear the nominations it displaces), and the record of pods
evicted that the snapshot does not show going yet (``Evictions``, one per engine:
``Handle.evictions``).

The writes go through the handle's ``ClusterWriter`` and say what they did in Events, as
kube-scheduler does: ``Preempted`` on each victim (naming the preemptor), ``Preempting`` on the
preemptor.
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, AbstractSet, Callable, Iterable, Mapping, Sequence

from extender.framework.disruption import Budget, budget_checked
from extender.framework.handle import ClusterWriter, SnapshotView, WriteError
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo

if TYPE_CHECKING:
    from extender.framework.handle import Handle

log = logging.getLogger(__name__)


UNSEEN_FOR = 120.0
"""Seconds at most an eviction counts against a budget status that has not changed since
(``Evictions.unseen``): the disruption controller drops a ``status.disruptedPods`` entry this
long after the eviction (its DeletionTimeout) and writes the status anew."""

_UNSEEN_AT_MOST = 4096
"""Evictions ``unseen`` keeps at most (far more than two minutes of preemptions ever evict)."""


class Evictions:
    """Pods evicted through ``evict`` that the watches do not show yet. The pods watch lags the
    Eviction API's answer: until it shows the deletion, the snapshot shows such a pod running,
    and a plugin that preempts would take it for a victim to evict again (so that two
    preemptors count the capacity it frees), count it as its namespace's use, or not wait for
    it - every preempting plugin reads ``going`` with the snapshot it decides on. The budgets
    watch lags it too, on its own: ``unseen``. Thread-safe.

    ``budgets``: the PodDisruptionBudgets as the watch shows them now; ``clock``: seconds, the
    monotonic clock."""

    def __init__(self, budgets: Callable[[], Sequence[Budget]] = tuple,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._pods: dict[str, PodInfo] = {}
        self._budgets = budgets
        self._clock = clock
        self._unseen: dict[str, tuple[PodInfo, float, tuple[Budget, ...]]] = {}
        """UID -> (pod, when evicted, the budgets with a status that covered it then, as they
        were then)."""
        self._lock = threading.Lock()
        self.version = 0
        """Moves on every ``add`` and ``discard``: a verdict that counted the pods ``going`` holds
        only while it is the same (a refused eviction puts its pod's use back)."""
        self._unanswered: set[str] = set()
        """UIDs added whose Eviction (or rejection in Permit) has not been answered (``confirm``):
        going for preemption's arithmetic, still using their namespace's quota (``going`` with
        ``confirmed``) - an Eviction refused later would otherwise let a pod in over ``max``."""

    def add(self, victims: Iterable[PodInfo], budgeted: bool = True) -> None:
        """``victims`` are being evicted (called before the Eviction: from the API server's
        answer on, others must see them going). ``budgeted``: False for pods that leave without
        an Eviction (rejected in Permit: not bound, so no budget's status counts them; they are
        never ``unseen``)."""
        victims = list(victims)
        statuses = [b for b in self._budgets() if b.disruptions_allowed is not None] if budgeted else []
        at = self._clock()
        with self._lock:
            for v in victims:
                self._pods[v.uid] = v
                self._unanswered.add(v.uid)
                covering = tuple(b for b in statuses if b.covers(v))
                if covering:
                    self._unseen[v.uid] = (v, at, covering)
            while len(self._unseen) > _UNSEEN_AT_MOST:  # the oldest first: a dict keeps order
                del self._unseen[next(iter(self._unseen))]
            self.version += 1

    def discard(self, uid: str) -> None:
        """The eviction was refused: nothing is going."""
        with self._lock:
            self._pods.pop(uid, None)
            self._unseen.pop(uid, None)
            self._unanswered.discard(uid)
            self.version += 1

    def confirm(self, uid: str) -> None:
        """The API server accepted the Eviction (or the pod was rejected in Permit): the pod is
        going for sure. ``version`` stays: a verdict that still counted it only erred on the safe
        side."""
        with self._lock:
            self._unanswered.discard(uid)

    def unseen(self, budgets: Sequence[Budget]) -> list[PodInfo]:
        """The evicted pods covered by a budget (of ``budgets``, the watch's now) whose status is
        still the one it had when they were evicted. The API server takes an eviction out of
        ``disruptionsAllowed`` and names the pod in ``disruptedPods`` in one write; the budgets
        watch may show it after the pods watch shows the pod deleting, even gone, and until then
        the status's allowance has the eviction in it still (``Budget.allowed`` takes these
        out). Any status written since counts the eviction - naming the pod, or (the disruption
        controller's) counting it unhealthy or gone -, so a pod is forgotten once its budget's
        status differs, and ``UNSEEN_FOR`` seconds after its eviction at the latest (an eviction
        the API server made without taking it out of the budget - an unhealthy pod's - leaves
        the status as it was: it is taken out meanwhile, which may keep a victim protected
        that long)."""
        if not self._unseen:
            return []
        now = self._clock()
        current = {(b.namespace, b.name): b for b in budgets}
        out: list[PodInfo] = []
        with self._lock:
            for uid, (pod, at, before) in list(self._unseen.items()):
                if now - at >= UNSEEN_FOR or not any(current.get((b.namespace, b.name)) == b for b in before):
                    del self._unseen[uid]
                else:
                    out.append(pod)
        return out

    def going(self, snapshot: SnapshotView, confirmed: bool = False) -> dict[str, PodInfo]:
        """UID -> pod of the evicted pods ``snapshot`` still shows running on their node; those it
        shows deleting or gone are forgotten (the snapshot tells from then on). ``confirmed``:
        only those whose Eviction was accepted (``confirm``). Lock-free while there are none (a
        dict's size is one read): quota checks ask on every request."""
        if not self._pods:
            return {}
        with self._lock:
            for uid, victim in list(self._pods.items()):
                node = snapshot.get(victim.node_name)
                now = node.pods.get(uid) if node is not None else None
                if now is None or now.deleting or now.terminal:
                    del self._pods[uid]
                    self._unanswered.discard(uid)
            if confirmed and self._unanswered:
                return {uid: p for uid, p in self._pods.items() if uid not in self._unanswered}
            return dict(self._pods)


NO_VICTIM = -(1 << 31) - 1
"""Below every pod priority (int32): the top victim priority of a preemption that evicts nothing."""


def started(pod: PodInfo, now: float) -> float:
    """``status.startTime`` in seconds since the epoch; ``now`` when the pod has none (assumed,
    or bound and not started) or it does not parse - as kube-scheduler's ``GetPodStartTime``."""
    if not pod.start_time:
        return now
    try:
        at = datetime.fromisoformat(pod.start_time.replace("Z", "+00:00"))
    except ValueError:
        return now
    return (at if at.tzinfo else at.replace(tzinfo=timezone.utc)).timestamp()


def preemption_rank(victims: Sequence[PodInfo], pdb_violations: int, now: float) -> tuple[int, int, int, int, float]:
    """The sort key (best first) of a candidate node evicting ``victims`` (the pods evicted now,
    of which ``pdb_violations`` break a PodDisruptionBudget), by kube-scheduler's
    ``pickOneNodeForPreemption``: fewest budget violations, the lowest priority of the most
    important victim (``NO_VICTIM`` when none: a node where leaving pods alone make room comes
    first), the lowest sum of priorities (each victim adding its priority + MaxInt32 + 1, so a
    victim always adds), the fewest victims, then the latest ``started`` of the earliest-started
    victim of that highest priority (``now``: wall-clock seconds, also for a node that evicts
    nothing). The caller breaks the last tie (kube-scheduler takes the first node; the node's
    name, for a deterministic choice)."""
    top = max((v.priority for v in victims), default=NO_VICTIM)
    total = sum(v.priority + (1 << 31) for v in victims)
    earliest = min((started(v, now) for v in victims if v.priority == top), default=now)
    return (pdb_violations, top, total, len(victims), -earliest)


def leaving(pod: PodInfo, going: AbstractSet[str]) -> bool:
    """``pod`` is going away already: deleting, or evicted (its UID in ``going``:
    ``Evictions.going``). A preempting plugin counts such a pod of lower priority as a victim
    that needs no eviction, as kube-scheduler's dry run counts a terminating one."""
    return pod.deleting or pod.uid in going


def account(evicted: Sequence[PodInfo], waited: Sequence[PodInfo], what: str) -> str:
    """What a preemption did, for the preemptor's ``Preempting`` Event: "Evicted 2 <what>
    (ns/a, ns/b)", then "waits for 1 leaving already (ns/c)" when some victims were going."""
    said = [f"Evicted {len(evicted)} {what} ({', '.join(v.key for v in evicted)})"] if evicted else []
    if waited:
        said.append(f"{'w' if evicted else 'W'}aits for {len(waited)} leaving already "
                    f"({', '.join(v.key for v in waited)})")
    return "; ".join(said)


def held_back(pod: PodInfo, snapshot: SnapshotView, earlier: Callable[[PodInfo], bool],
              going: AbstractSet[str] = frozenset(),
              statuses: Mapping[str, Status] | None = None) -> Status | None:
    """Why ``pod`` may not preempt now (None: it may): its ``preemptionPolicy`` is Never, or pods
    ``earlier`` accepts as victims are leaving its nominated node - deleting (its own victims,
    or pods their owners deleted: what they free may be what it needs), or evicted and not shown
    deleting yet (UIDs in ``going``, ``Evictions.going``) -: evicting more now may take more
    than it needs. Unless Filter found that node ``UNSCHEDULABLE_AND_UNRESOLVABLE`` for it
    (``statuses``): no wait there helps, and it may preempt elsewhere (as kube-scheduler's
    ``PodEligibleToPreemptOthers``)."""
    if pod.preemption_policy == "Never":
        return Status.unschedulable("preemptionPolicy is Never")
    nominated = snapshot.get(pod.nominated_node_name) if pod.nominated_node_name else None
    st = statuses.get(pod.nominated_node_name) if statuses is not None and nominated is not None else None
    if st is not None and st.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
        return None
    if nominated is not None and any(leaving(p, going) and earlier(p) for p in nominated.pods.values()):
        return Status.unschedulable("waiting for earlier victims to terminate")
    return None


def evict(handle: Handle, preemptor: PodInfo, node: str, victims: Sequence[PodInfo],
          why: Callable[[PodInfo], str] = lambda victim: "", plugin: str = "") -> int:
    """Evict ``victims`` through the Eviction API with their grace period (each one evicted is
    added to ``handle.evictions``), with a ``Preempted`` Event on each (``why(victim)``, when
    not empty, ends its message): the ones a PodDisruptionBudget covers first (the API server
    refuses only those, and may though the budget's status as watched allows it: the allowance
    can be spent already), then the others, each in the given order. A victim waiting in Permit
    (``handle.waiting_pods``: assumed, not bound) is rejected there in the name of ``plugin``
    instead - its bind fails, Unreserve runs, its reservation is freed -, as kube-scheduler's
    preemption rejects a waiting pod rather than deleting it; it is added to
    ``handle.evictions`` too (going until its failed bind forgets it), never refused, so it comes
    after the covered pods. One allowed already (the reject does not take: it is being bound), or
    out of the waiting room by then, is evicted like the others. Stops at the first refusal and returns how
    many were evicted or rejected: 0 means nothing was lost and another node may be tried;
    more means pods are gone here already."""
    writer = handle.writer
    evicted = 0
    waiting = {v.uid: w for v in victims if (w := handle.waiting_pods.get(v.uid)) is not None}
    covered = handle.budget_covered(victims).difference(waiting)
    if covered and handle.budget_covered([v for v in victims if v.uid in covered and budget_checked(v)], at_least=2):
        return 0  # the Eviction API refuses a pod two budgets cover (a 500): evict none, lose none
    for victim in sorted(victims, key=lambda v: v.uid not in covered) if covered else victims:
        in_permit = None
        if victim.uid in waiting:
            # recorded going first, then looked up again: a pod still in the waiting room now
            # leaves it - and its failed bind discards the record - only after this
            handle.evictions.add((victim,), budgeted=False)
            in_permit = handle.waiting_pods.get(victim.uid)
            if in_permit is not None and in_permit.reject(
                    plugin, f"preempted by pod {preemptor.key} (priority {preemptor.priority})"):
                log.info("rejected in Permit", extra={"pod": preemptor.key, "victim": victim.key, "node": node})
            else:  # allowed, or out of the room meanwhile: evicted as any other victim (kube-scheduler deletes it)
                handle.evictions.discard(victim.uid)
                in_permit = None
        if in_permit is None:
            grace = (victim.raw.get("spec") or {}).get("terminationGracePeriodSeconds")
            handle.evictions.add((victim,))  # first: from the API server's answer on, others must see it going
            try:
                writer.evict(victim.namespace, victim.name, victim.uid, int(grace) if isinstance(grace, int) else None)
            except WriteError as exc:
                handle.evictions.discard(victim.uid)
                log.info("eviction refused", extra={"pod": preemptor.key, "victim": victim.key, "node": node,
                                                    "error": str(exc), "already_evicted": evicted})
                return evicted
        handle.evictions.confirm(victim.uid)
        evicted += 1
        reason = why(victim)
        writer.record_event(victim.raw, type_="Normal", reason="Preempted",
                            message=f"Preempted by pod {preemptor.key} (priority {preemptor.priority}) on node {node}"
                                    + (f": {reason}" if reason else ""), related=preemptor.raw)
    return evicted


def nominate(writer: ClusterWriter, preemptor: PodInfo, node: str, message: str) -> None:
    """Set the preemptor's ``status.nominatedNodeName`` to ``node`` (a failure is logged: the
    room is made, kube-scheduler's next attempt finds it) and record ``Preempting`` on it."""
    try:
        writer.set_nominated_node(preemptor.namespace, preemptor.name, node)
    except WriteError as exc:
        log.warning("nominating failed", extra={"pod": preemptor.key, "error": str(exc)})
    writer.record_event(preemptor.raw, type_="Normal", reason="Preempting", message=message)


def clear_lower_nominations(handle: Handle, preemptor: PodInfo, node: str) -> list[PodInfo]:
    """Clear the ``status.nominatedNodeName`` of the pods nominated to ``node``
    (``handle.nominations()``) whose priority is lower than ``preemptor``'s, once it preempted
    there, as kube-scheduler's preemption does (``getLowerPriorityNominatedPods``): the room is
    the preemptor's now, and they go back to trying elsewhere rather than waiting for room they
    may no longer get. Records ``NominationCleared`` on each; a failed write is logged and the
    others go on (not critical, as in kube-scheduler). Returns the pods whose nomination was
    cleared. Their capacity stays held until the watch shows the write (the nominator follows
    the cluster), only ever against pods of their priority or lower."""
    cleared: list[PodInfo] = []
    for where, nominee in handle.nominations():
        if where != node or nominee.priority >= preemptor.priority or nominee.uid == preemptor.uid:
            continue
        try:
            handle.writer.set_nominated_node(nominee.namespace, nominee.name, None)
        except WriteError as exc:
            log.warning("clearing a nomination failed", extra={"pod": nominee.key, "node": node, "error": str(exc)})
            continue
        handle.writer.record_event(nominee.raw, type_="Normal", reason="NominationCleared",
                                   message=f"pod {preemptor.key} of higher priority preempted on node {node}")
        cleared.append(nominee)
    return cleared
