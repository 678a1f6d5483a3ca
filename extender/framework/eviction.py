"""What the plugins that preempt share: whether a pod may preempt now, preemption's writes
(evict the victims, nominate the pod), and the record of pods evicted that the snapshot does not
show going yet (``Evictions``, one per engine: ``Handle.evictions``).

The writes go through the handle's ``ClusterWriter`` and say what they did in Events, as
kube-scheduler does: ``Preempted`` on each victim (naming the preemptor), ``Preempting`` on the
preemptor.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, AbstractSet, Callable, Iterable, Mapping, Sequence

from extender.framework.disruption import Budget
from extender.framework.handle import ClusterWriter, SnapshotView, WriteError
from extender.framework.status import Code, Status
from extender.framework.views import PodInfo

if TYPE_CHECKING:
    from extender.framework.handle import Handle

log = logging.getLogger(__name__)


UNNAMED_FOR = 120.0
"""Seconds an eviction counts against a budget status that does not name the pod (``unnamed``):
the disruption controller drops a ``status.disruptedPods`` entry this long after the eviction
(its DeletionTimeout), so by then any status it writes counts the pod as it is."""


_UNNAMED_AT_MOST = 4096
"""Evictions ``unnamed`` keeps at most (far more than two minutes of preemptions ever evict)."""


class Evictions:
    """Pods evicted through ``evict`` that the snapshot does not show deleting or gone yet. The
    watch lags the Eviction API's answer: until it shows the deletion, the snapshot shows such a
    pod running, and a plugin that preempts would take it for a victim to evict again (so that
    two preemptors count the capacity it frees), count it as its namespace's use, or not wait
    for it. Every preempting plugin reads ``going`` with the snapshot it decides on.
    Thread-safe."""

    def __init__(self) -> None:
        self._pods: dict[str, PodInfo] = {}
        self._unnamed: dict[str, tuple[PodInfo, float | None]] = {}
        """UID -> (pod, when ``unnamed`` first saw it) of the evicted pods no budget status has
        been seen to name yet."""
        self._lock = threading.Lock()

    def add(self, victims: Iterable[PodInfo], budgeted: AbstractSet[str] = frozenset()) -> None:
        """``victims`` are being evicted; those whose UID is in ``budgeted`` (a budget covers
        them) count for ``unnamed`` too."""
        with self._lock:
            for v in victims:
                self._pods[v.uid] = v
                if v.uid in budgeted:
                    self._unnamed[v.uid] = (v, None)
            while len(self._unnamed) > _UNNAMED_AT_MOST:  # the oldest first: a dict keeps order
                del self._unnamed[next(iter(self._unnamed))]

    def discard(self, uid: str) -> None:
        """The eviction was refused: nothing is going."""
        with self._lock:
            self._pods.pop(uid, None)
            self._unnamed.pop(uid, None)

    def unnamed(self, budgets: Sequence[Budget], now: float) -> list[PodInfo]:
        """The evicted pods that a budget with a status covers and does not name in its
        ``disruptedPods`` (``now``: the monotonic clock). The API server takes an eviction out of
        ``disruptionsAllowed`` and names the pod there in one write; the budgets watch shows it
        after the pods watch perhaps - the pod deleting, even gone -, and until then the
        status's allowance has the eviction in it still (``Budget.allowed`` takes these out).
        Once a status names the pod the pod is forgotten here: the disruption controller's later
        statuses count it unhealthy or gone. A pod no status names within ``UNNAMED_FOR``
        seconds of the first look (an eviction the API server made without its budget: an
        unhealthy pod's, say; or the naming status missed by a re-list) is forgotten then."""
        if not self._unnamed:
            return []
        out: list[PodInfo] = []
        with self._lock:
            for uid, (pod, since) in list(self._unnamed.items()):
                if since is None:
                    self._unnamed[uid] = (pod, now)
                    since = now
                covering = [b for b in budgets if b.covers(pod)]
                if now - since >= UNNAMED_FOR or any(pod.name in b.disrupted for b in covering):
                    del self._unnamed[uid]
                elif any(b.disruptions_allowed is not None for b in covering):
                    out.append(pod)
        return out

    def going(self, snapshot: SnapshotView) -> dict[str, PodInfo]:
        """UID -> pod of the evicted pods ``snapshot`` still shows running on their node; those it
        shows deleting or gone are forgotten (the snapshot tells from then on). Lock-free while
        there are none (a dict's size is one read): quota checks ask on every request."""
        if not self._pods:
            return {}
        with self._lock:
            for uid, victim in list(self._pods.items()):
                node = snapshot.get(victim.node_name)
                now = node.pods.get(uid) if node is not None else None
                if now is None or now.deleting or now.terminal:
                    del self._pods[uid]
            return dict(self._pods)


NO_VICTIM = -(1 << 31) - 1
"""Below every pod priority (int32): the top victim priority of a preemption that evicts nothing."""


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
          why: Callable[[PodInfo], str] = lambda victim: "") -> int:
    """Evict ``victims`` through the Eviction API with their grace period (each one evicted is
    added to ``handle.evictions``), with a ``Preempted`` Event on each (``why(victim)``, when
    not empty, ends its message): the ones a PodDisruptionBudget covers first (the API server
    refuses only those, and may though the budget's status as watched allows it: the allowance
    can be spent already), then the others, each in the given order. Stops at the first refusal
    and returns how many were evicted: 0 means nothing was lost and another node may be tried;
    more means pods are gone here already."""
    writer = handle.writer
    evicted = 0
    covered = handle.budget_covered(victims)
    for victim in sorted(victims, key=lambda v: v.uid not in covered) if covered else victims:
        grace = (victim.raw.get("spec") or {}).get("terminationGracePeriodSeconds")
        handle.evictions.add((victim,), covered)  # first: from the API server's answer on, others must see it going
        try:
            writer.evict(victim.namespace, victim.name, victim.uid, int(grace) if isinstance(grace, int) else None)
        except WriteError as exc:
            handle.evictions.discard(victim.uid)
            log.info("eviction refused", extra={"pod": preemptor.key, "victim": victim.key, "node": node,
                                                "error": str(exc), "already_evicted": evicted})
            return evicted
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
