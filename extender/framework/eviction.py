"""What the plugins that preempt share: whether a pod may preempt now, and preemption's writes
(evict the victims, nominate the pod).

Both write through the plugin's ``ClusterWriter`` and say what they did in Events, as
kube-scheduler does: ``Preempted`` on each victim (naming the preemptor), ``Preempting`` on the
preemptor.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

from extender.framework.handle import ClusterWriter, SnapshotView, WriteError
from extender.framework.status import Status
from extender.framework.views import PodInfo

log = logging.getLogger(__name__)


def held_back(pod: PodInfo, snapshot: SnapshotView, earlier: Callable[[PodInfo], bool]) -> Status | None:
    """Why ``pod`` may not preempt now (None: it may): its ``preemptionPolicy`` is Never, or pods
    ``earlier`` accepts as victims of an earlier preemption for it still terminate on its
    nominated node (evicting more would take more than it needs)."""
    if pod.preemption_policy == "Never":
        return Status.unschedulable("preemptionPolicy is Never")
    nominated = snapshot.get(pod.nominated_node_name) if pod.nominated_node_name else None
    if nominated is not None and any(p.deleting and earlier(p) for p in nominated.pods.values()):
        return Status.unschedulable("waiting for earlier victims to terminate")
    return None


def evict(writer: ClusterWriter, preemptor: PodInfo, node: str, victims: Sequence[PodInfo],
          why: Callable[[PodInfo], str] = lambda victim: "") -> int:
    """Evict ``victims`` in order through the Eviction API with their grace period, with a
    ``Preempted`` Event on each (``why(victim)``, when not empty, ends its message). Stops at the
    first refusal (a PodDisruptionBudget, say) and returns how many were evicted: 0 means nothing
    was lost and another node may be tried; more means pods are gone here already."""
    evicted = 0
    for victim in victims:
        grace = (victim.raw.get("spec") or {}).get("terminationGracePeriodSeconds")
        try:
            writer.evict(victim.namespace, victim.name, victim.uid, int(grace) if isinstance(grace, int) else None)
        except WriteError as exc:
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
