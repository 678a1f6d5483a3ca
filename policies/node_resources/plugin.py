"""NodeResources plugin: adapts ``logic`` to Filter, Score, Reserve/Unreserve and Preemption.

Accounting lives in the cache: when bind assumes a pod, its managed requests count on the node at
once (atomically with the re-validating Filter). Reserve then checks the node is not overcommitted
on the live cache (a pod bound behind the extender's back may have landed since); Unreserve has
nothing of its own to release, because the engine forgets the assumed pod, which returns its
capacity.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from extender.framework.batch import Batch, Column, Ints, Rejection, Rows, fits_exactly
from extender.framework.cycle_state import CycleState
from extender.framework.events import CAPACITY_EVENTS, ClusterEvent
from extender.framework.handle import Handle
from extender.framework.interfaces import Victim
from extender.framework.node_constraints import node_excluded
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.framework.registration import ArgsError, PluginSpec
from extender.framework.registration import schema_parser as parser
from policies.node_resources import logic
from policies.node_resources.args import NodeResourcesArgs, NodeResourcesArgsSchema

NAME = "NodeResources"


class NodeResources:
    name = NAME
    SCORES_FROM_SNAPSHOT = True
    """Its scores read nothing but the pod, the snapshot and its arguments: the engine may score
    a filter's feasible nodes ahead of the prioritize that follows (``score_ahead``)."""

    def __init__(self, args: NodeResourcesArgs, handle: Handle) -> None:
        self.handle = handle
        self.most_allocated = args.strategy == "MostAllocated"
        unmanaged = sorted(set(args.weights) - set(handle.managed_resources))
        if unmanaged:  # weights it would never use, and the managed resources then scored by none
            raise ArgsError({"scoringStrategy": {"resources": [
                f"{', '.join(unmanaged)}: not a managed resource (managedResources: "
                f"{', '.join(sorted(handle.managed_resources)) or 'none'})"]}})
        self.weights = dict(args.weights) or {r: 1 for r in handle.managed_resources}
        self._rejections: dict[tuple[str, int, int, int | None], Status] = {}
        self._reasons: dict[tuple[str, logic.Lack], str] = {}

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        """The hot path (every candidate node): an inlined ``logic.check_fit`` that builds nothing
        for a node that fits and only a lazily explained Status for one that does not."""
        allocatable = node.allocatable
        for resource, need in pod.requests.items():
            if need <= 0:
                continue
            alloc = allocatable.get(resource)
            if alloc is None:
                return self._reject(logic.Lack.ABSENT, resource, need, 0, None)
            free = alloc - node.requested.get(resource, 0)
            if need > free:
                lack = logic.Lack.EXCEEDS_ALLOCATABLE if need > alloc else logic.Lack.INSUFFICIENT
                return self._reject(lack, resource, need, free, alloc)
        return _OK

    def filter_all(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> dict[str, Status]:
        """``filter`` over many nodes in one loop: the rejections, by node name."""
        wants = [(r, n) for r, n in pod.requests.items() if n > 0]
        out: dict[str, Status] = {}
        if not wants:
            return out
        reject, shared = self._reject, self._rejections
        absent, exceeds, short = logic.Lack.ABSENT, logic.Lack.EXCEEDS_ALLOCATABLE, logic.Lack.INSUFFICIENT
        if len(wants) == 1:  # the common case (one managed resource asked for): no inner loop
            resource, need = wants[0]
            for node in nodes:
                alloc = node.allocatable.get(resource)
                if alloc is None:
                    st = shared.get((resource, need, 0, None))  # _reject's key, without the call
                    out[node.name] = st if st is not None else reject(absent, resource, need, 0, None)
                    continue
                free = alloc - node.requested.get(resource, 0)
                if need > free:
                    st = shared.get((resource, need, free, alloc))
                    out[node.name] = st if st is not None else reject(exceeds if need > alloc else short,
                                                                      resource, need, free, alloc)
            return out
        for node in nodes:
            allocatable, requested = node.allocatable, node.requested
            for resource, need in wants:
                alloc = allocatable.get(resource)
                if alloc is None:
                    out[node.name] = reject(absent, resource, need, 0, None)
                    break
                free = alloc - requested.get(resource, 0)
                if need > free:
                    out[node.name] = reject(exceeds if need > alloc else short, resource, need, free, alloc)
                    break
        return out

    def filter_batch(self, state: CycleState, pod: PodInfo, batch: Batch) -> list[Rejection] | None:
        """``filter`` over a batch of candidates in array operations (see
        ``extender.framework.batch``): per requested resource in the pod's order, among the
        candidates every earlier resource let through, the ones that lack it - by kind of
        shortage, each kind one group with ``filter``'s reason and, per node, ``filter``'s own
        (shared) Status."""
        wants = [(r, n) for r, n in pod.requests.items() if n > 0]
        out: list[Rejection] = []
        if not wants:
            return out
        if not fits_exactly(dict(wants)):
            return None
        columns, rows = batch.columns, batch.rows
        left: Rows | None = None  # positions every earlier resource let through (None: all)
        for i, (resource, need) in enumerate(wants):
            column = columns.column(resource)
            if column is None:
                return None
            at = rows if left is None else rows[left]
            alloc = column.allocatable[at]
            # requests are never negative, so a node that lacks the resource in any way (does not
            # offer it: allocatable 0; offers less than the request) is short of it here too:
            # one check settles every node that fits, the kinds of shortage are told apart only
            # among the few that do not
            lacks = alloc - column.requested[at] < need
            if not np.count_nonzero(lacks):
                continue
            found = lacks.nonzero()[0]
            positions = found if left is None else left[found]
            if not np.count_nonzero(alloc < need):  # the common case: all merely short (a node
                # offering ``need`` > 0 offers the resource; one offering less lacks it)
                out.append(self._rejection(logic.Lack.INSUFFICIENT, resource, need, positions, column, rows))
            else:
                offered = column.offered[at[found]]
                exceeds = offered & (alloc[found] < need)
                for mask, lack in ((~offered, logic.Lack.ABSENT), (exceeds, logic.Lack.EXCEEDS_ALLOCATABLE),
                                   (offered & ~exceeds, logic.Lack.INSUFFICIENT)):
                    if mask.any():
                        out.append(self._rejection(lack, resource, need, positions[mask], column, rows))
            if i + 1 == len(wants):
                break
            left = np.flatnonzero(~lacks) if left is None else left[~lacks]
            if not len(left):
                break
        return out

    def _rejection(self, lack: logic.Lack, resource: str, need: int, positions: Rows, column: Column,
                   rows: Rows) -> Rejection:
        code = Code.UNSCHEDULABLE if lack is logic.Lack.INSUFFICIENT else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        reason = self._reasons.get((resource, lack))
        if reason is None:  # the wording depends on these two only (bounded: resources x kinds)
            reason = self._reasons[(resource, lack)] = logic.Shortage(resource, lack, need, 0, None).reason
        if lack is logic.Lack.ABSENT:
            st = self._reject(lack, resource, need, 0, None)
            return Rejection(positions, code, reason, lambda _k: st)

        def status_at(k: int) -> Status:
            row = rows[k]
            alloc = int(column.allocatable[row])
            return self._reject(lack, resource, need, alloc - int(column.requested[row]), alloc)
        return Rejection(positions, code, reason, status_at)

    def _reject(self, lack: logic.Lack, resource: str, need: int, free: int, alloc: int | None) -> Status:
        """Statuses are immutable and nodes repeat the same numbers (full nodes, no devices), so
        one Status per distinct shortage is shared (bounded cache). The numbers decide the kind
        of shortage, so they are the key."""
        key = (resource, need, free, alloc)
        cached = self._rejections.get(key)
        if cached is not None:
            return cached
        shortage = logic.Shortage(resource, lack, need, free, alloc)
        code = Code.UNSCHEDULABLE if lack is logic.Lack.INSUFFICIENT else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        detail: Callable[[], str] = lambda: shortage.detail  # noqa: E731 - formatted only when explained
        status = Status(code, (shortage.reason,), NAME, detail)
        if len(self._rejections) >= 4096:
            self._rejections.clear()
        self._rejections[key] = status
        return status

    def events_to_register(self) -> tuple[ClusterEvent, ...]:
        """What can make room for a pod this plugin rejected: capacity freed, or a node added or
        changed (allocatable, labels or annotations)."""
        return CAPACITY_EVENTS

    def pre_enqueue(self, pod: PodInfo) -> Status:
        """Admission (for pods carrying the extender's gate): only once some node has enough of
        every managed resource free - counting what is held against the pod there, as Filter
        does (nominations, pod group reservations) - so kube-scheduler is not asked to try pods
        that fit nowhere."""
        if not pod.requests:
            return Status()
        held = self.handle.held_nodes()
        for node in self.handle.snapshot():
            if node_excluded(pod.raw, node.node, node.name):
                continue  # a node kube-scheduler would never send it to (taints, affinity, cordon)
            if node.name in held:
                node = self.handle.with_held(node, pod)
            if logic.check_fit(pod.requests, node.allocatable, node.requested) is None:
                return Status()
        return Status.unschedulable(f"no node has enough free {', '.join(sorted(pod.requests))}")

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return logic.allocation_score(pod.requests, node.allocatable, node.requested, self.weights,
                                      self.most_allocated)

    def score_all(self, state: CycleState, pod: PodInfo,
                  nodes: Sequence[NodeInfo]) -> tuple[dict[str, int], Status]:
        """``score`` over many nodes in one call: every node's score, by name. A pod asking for
        one weighted resource (the common case) is scored in one inlined loop with exactly
        ``logic.allocation_score``'s arithmetic; anything else calls it per node."""
        requests, weights, most = pod.requests, self.weights, self.most_allocated
        wants = [(r, need) for r, need in requests.items() if need > 0 and weights.get(r, 0) > 0]
        if not wants:
            return dict.fromkeys((n.name for n in nodes), 0), _OK
        if len(wants) > 1:
            score = logic.allocation_score
            return {n.name: score(requests, n.allocatable, n.requested, weights, most) for n in nodes}, _OK
        resource, need = wants[0]
        top = logic.MAX_SCORE
        out: dict[str, int] = {}
        for node in nodes:
            alloc = node.allocatable.get(resource, 0)
            used = node.requested.get(resource, 0) + need
            if alloc <= 0 or used > alloc:
                out[node.name] = 0
            else:
                out[node.name] = (used if most else alloc - used) * top // alloc
        return out, _OK

    def score_batch(self, state: CycleState, pod: PodInfo, batch: Batch) -> Ints | None:
        """``score`` over a batch of candidates in array operations: ``logic.allocation_score``'s
        arithmetic per requested, weighted resource the node offers, weight-averaged; 0 where
        the pod does not fit or nothing counts."""
        wants = [(r, need) for r, need in pod.requests.items() if need > 0 and self.weights.get(r, 0) > 0]
        n = len(batch)
        if not wants:
            return np.zeros(n, np.int64)
        if not fits_exactly(dict(wants)):
            return None
        top = logic.MAX_SCORE
        if len(wants) == 1:  # one resource: its weight cancels out of the average
            column = batch.columns.column(wants[0][0])
            if column is None:
                return None
            alloc = column.allocatable[batch.rows]
            used = column.requested[batch.rows] + wants[0][1]
            fits = (alloc > 0) & (used <= alloc)
            share = (used if self.most_allocated else alloc - used) * top // np.where(fits, alloc, 1)
            return np.where(fits, share, 0)
        total = np.zeros(n, np.int64)
        weight_sum = np.zeros(n, np.int64)
        overflow = np.zeros(n, np.bool_)
        for resource, need in wants:
            column = batch.columns.column(resource)
            if column is None:
                return None
            weight = self.weights[resource]
            alloc = column.allocatable[batch.rows]
            used = column.requested[batch.rows] + need
            counted = alloc > 0
            overflow |= counted & (used > alloc)
            share = (used if self.most_allocated else alloc - used) * top // np.where(counted, alloc, 1)
            total += np.where(counted, share * weight, 0)
            weight_sum += np.where(counted, weight, 0)
        scores = total // np.where(weight_sum > 0, weight_sum, 1)
        scores[overflow] = 0
        return scores

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        node = self.handle.snapshot().get(node_name)
        if node is None:
            return Status.unschedulable(f"node {node_name} disappeared while binding")
        resource = logic.overcommitted(pod.requests, node.allocatable, node.requested)
        if resource is not None:
            return Status.unschedulable(f"Insufficient {resource}",
                                        detail=f"{resource} overcommitted on {node_name} while binding")
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        return None

    def process_preemption(self, state: CycleState, pod: PodInfo, node: NodeInfo,
                           victims: Sequence[Victim]) -> tuple[list[Victim], Status]:
        freed = logic.freed_by(node.pods[v.uid].requests for v in victims if v.uid in node.pods)
        shortage = logic.check_fit(pod.requests, node.allocatable, node.requested, freed)
        if shortage is not None:
            return [], Status.unresolvable(f"evicting the proposed victims would not free enough {shortage.resource}",
                                           detail=shortage.detail)
        return list(victims), Status()


_OK = Status()

SPEC = PluginSpec(NAME, NodeResources, parser(NodeResourcesArgsSchema),
                  "Managed extended resources: fit, binpack/spread scoring, reserve, preemption.")
