"""HeldCapacity: what a node holds against a pod besides what is bound or assumed there.

Two kinds, counted alike in Filter, at bind and in every "would it fit?" question: pods nominated
to the node (after preemption) whose priority is not lower, and reservation slots of equal or
higher priority (a pod group's plan, pods admitted and not bound yet). Plugins see it through
the handle (``with_held`` / ``held_nodes``); the engine through the queue.
"""

from __future__ import annotations

import itertools
import operator
from typing import AbstractSet, Callable, Container, Mapping

from extender.framework.batch import Ints
from extender.framework.views import NodeInfo, PodInfo
from extender.queue.nominator import Nominator
from extender.queue.reservations import Reservations


class HeldCapacity:
    def __init__(self, nominator: Nominator, reservations: Reservations) -> None:
        self.nominator = nominator
        self.reservations = reservations
        self._simulated = itertools.count(-1, -1)
        self._last: tuple[NodeInfo, list[PodInfo], NodeInfo] | None = None
        """The last ``with_held`` that added pods: to which NodeInfo, which, and the answer."""
        self._exact: tuple[object, object, frozenset[str]] = ((), None, frozenset())
        """The last claims ``held_amounts`` looked at, as of what, and which were accounted."""

    def with_held(self, info: NodeInfo, pod: PodInfo, strict: bool = False,
                  placed: Container[str] = ()) -> NodeInfo:
        """``info`` plus the capacity held on it against ``pod``: pods nominated to it whose
        priority is not lower (capacity freed by preemption stays theirs, as kube-scheduler does
        for its own resources) and reservation slots of equal or higher priority that ``pod`` did
        not claim itself (a pod group's planned placement, pods admitted and not bound yet);
        ``strict``: slots held for the pod's own group count too; ``placed``: pods counted where
        the caller placed them, whose planned slots do not count (see ``Reservations.held_on``).
        A simulated NodeInfo gets a negative generation (never cached); with nothing held,
        ``info`` itself. The held pods are added in one copy (``NodeInfo.with_pods``), not one
        per pod - and not again when the same slots are held on the same NodeInfo as in the last
        call (a gang member's slot node is filtered twice in its filter call: by Gang's
        PreFilter and by the Filter phase)."""
        held = [p.bound_to(info.name) for p in self.nominator.nominated(info.name)
                if p.uid != pod.uid and p.priority >= pod.priority]
        held.extend(self.reservations.held_on(info.name, pod, strict, info.pods, placed))
        if not held:
            return info
        last = self._last
        if (last is not None and last[0] is info and len(last[1]) == len(held)
                and all(map(operator.is_, last[1], held))):
            return last[2]  # the same pods (objects: placeholders) added to the same node
        out = info.with_pods(held, next(self._simulated))
        self._last = (info, held, out)
        return out

    def held_amounts(self, pod: PodInfo, index: Mapping[str, int], size: int,
                     accounted: Callable[[str], Container[str]],
                     as_of: object) -> tuple[dict[str, Ints], AbstractSet[str]] | None:
        """``with_held`` (not strict) for the batch Filter, over the rows of a snapshot's columns
        (``index``: node -> row, ``size`` rows; ``accounted(node)``: the UIDs the node counts,
        which are the same while ``as_of`` - the snapshot - is the same object): per resource,
        the requests held against ``pod`` summed per row, and the nodes ``with_held`` must still
        judge one by one - those with pods nominated to them, and those where a slot's claimer is
        already accounted (``Reservations.held_amounts``). None: judge every held node with
        ``with_held``. Which claimers are accounted is looked up again only when the claims or
        ``as_of`` changed: a gang's claimed slots cost each filter call nothing."""
        found = self.reservations.held_amounts(pod, index, size)
        if found is None:
            return None
        amounts, claims = found
        last = self._exact
        if last[0] is claims and last[1] is as_of:
            exact = last[2]
        else:
            exact = frozenset(node for node, uid in claims if uid in accounted(node))
            self._exact = (claims, as_of, exact)
        nominated = self.nominator.nominated_nodes()
        return amounts, exact | nominated if nominated else exact

    def version(self) -> tuple[int, int]:
        """Changes whenever what ``with_held`` adds may have changed (slots placed or gone, a
        nomination made, moved or ended) - claims aside, which count only for their claimers."""
        return self.reservations.version, self.nominator.version

    def held_nodes(self) -> AbstractSet[str]:
        """Nodes where ``with_held`` may add something (read-only: it may be the reservations'
        own set)."""
        nominated = self.nominator.nominated_nodes()
        return nominated | self.reservations.node_set() if nominated else self.reservations.node_set()
