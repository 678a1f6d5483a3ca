"""The data of ``/debug/queue``: where every pod the extender holds back is, and why."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Iterable, Protocol

from extender.framework.clock import Clock
from extender.framework.views import PodInfo
from extender.queue.interfaces import ClusterView
from extender.queue.nominator import Nominator
from extender.queue.reservations import Reservations
from extender.queue.unschedulable import UnschedulablePods


class WaitingInPermit(Protocol):
    since: float
    """When it started waiting (the clock's monotonic time)."""

    def as_dict(self) -> dict[str, object]: ...


def queue_view(*, clock: Clock, cluster: ClusterView, nominator: Nominator, unschedulable: UnschedulablePods,
               reservations: Reservations, waiting: Iterable[WaitingInPermit],
               sort: Callable[[Iterable[PodInfo]], list[PodInfo]]) -> dict[str, Any]:
    """Pods held in Permit, nominated pods (capacity held for them) and gated pods, each list in
    QueueSort order (``sort``), with waiting times; the pending pods the extender's last Filter
    answer rejected everywhere, with the reason; and the reservations held for pod groups."""
    now = clock.monotonic()
    wall = clock.now()

    def age(p: PodInfo) -> float | None:
        try:
            return round(wall - datetime.fromisoformat(p.creation_timestamp.replace("Z", "+00:00")).timestamp(), 3)
        except ValueError:
            return None

    in_permit = [dict(wp.as_dict(), waitingSeconds=round(now - wp.since, 3), position=i)
                 for i, wp in enumerate(sorted(waiting, key=lambda w: w.since))]
    nominated = []
    for node in sorted(nominator.nominated_nodes()):
        for i, p in enumerate(sort(nominator.nominated(node))):
            nominated.append({"pod": p.key, "uid": p.uid, "node": node, "priority": p.priority, "position": i,
                              "pendingSeconds": age(p), "reason": "capacity held after preemption"})
    gated = []
    for i, p in enumerate(sort([p for p in cluster.pending_pods() if (p.raw.get("spec") or {}).get("schedulingGates")])):
        gates = [g.get("name") for g in p.raw["spec"]["schedulingGates"] if isinstance(g, dict)]
        gated.append({"pod": p.key, "uid": p.uid, "priority": p.priority, "position": i, "gates": gates,
                      "pendingSeconds": age(p), "reason": "waiting for its scheduling gates to be removed"})
    rejected = []
    for r in unschedulable.list():
        current = cluster.pending_pod(r.pod.namespace, r.pod.name)
        if current is not None and current.uid == r.pod.uid:
            rejected.append({"pod": r.pod.key, "uid": r.pod.uid, "plugins": sorted(r.plugins), "reason": r.reason,
                             "sinceSeconds": round(now - r.at, 3)})
    return {"waitingInPermit": in_permit, "nominated": nominated, "gated": gated,
            "rejectedInFilter": rejected, "reserved": reservations.describe()}
