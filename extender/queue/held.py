"""HeldCapacity: what a node holds against a pod besides what is bound or assumed there.

Two kinds, counted alike in Filter, at bind and in every "would it fit?" question: pods nominated
to the node (after preemption) whose priority is not lower, and reservation slots of equal or
higher priority (a pod group's plan, pods admitted and not bound yet). Plugins see it through
the handle (``with_held`` / ``held_nodes``); the engine through the queue.
"""

from __future__ import annotations

import itertools

from extender.framework.views import NodeInfo, PodInfo
from extender.queue.nominator import Nominator
from extender.queue.reservations import Reservations


class HeldCapacity:
    def __init__(self, nominator: Nominator, reservations: Reservations) -> None:
        self.nominator = nominator
        self.reservations = reservations
        self._simulated = itertools.count(-1, -1)

    def with_held(self, info: NodeInfo, pod: PodInfo, strict: bool = False) -> NodeInfo:
        """``info`` plus the capacity held on it against ``pod``: pods nominated to it whose
        priority is not lower (capacity freed by preemption stays theirs, as kube-scheduler does
        for its own resources) and reservation slots of equal or higher priority that ``pod`` did
        not claim itself (a pod group's planned placement, pods admitted and not bound yet);
        ``strict``: slots held for the pod's own group count too (see ``Reservations.held_on``).
        A simulated NodeInfo gets a negative generation (never cached); with nothing held,
        ``info`` itself. The held pods are added in one copy (``NodeInfo.with_pods``), not one
        per pod."""
        held = [p.bound_to(info.name) for p in self.nominator.nominated(info.name)
                if p.uid != pod.uid and p.priority >= pod.priority]
        held.extend(self.reservations.held_on(info.name, pod, strict, info.pods))
        if not held:
            return info
        return info.with_pods(held, next(self._simulated))

    def held_nodes(self) -> set[str]:
        """Nodes where ``with_held`` may add something."""
        return self.nominator.nominated_nodes() | self.reservations.nodes()
