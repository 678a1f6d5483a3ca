"""NodeResources plugin: adapts ``logic`` to Filter, Score, Reserve/Unreserve and Preemption.

Accounting lives in the cache: when bind assumes a pod, its managed requests count on the node at
once (atomically with the re-validating Filter). Reserve then checks the node is not overcommitted
on the live cache (a pod bound behind the extender's back may have landed since); Unreserve has
nothing of its own to release, because the engine forgets the assumed pod, which returns its
capacity.
"""

from __future__ import annotations

from typing import Sequence

from extender.framework.cycle_state import CycleState
from extender.framework.handle import Handle
from extender.framework.interfaces import Victim
from extender.framework.status import Status
from extender.framework.views import NodeInfo, PodInfo
from extender.runtime.registry import PluginSpec
from policies._args import parser
from policies.node_resources import logic
from policies.node_resources.args import NodeResourcesArgs, NodeResourcesArgsSchema

NAME = "NodeResources"


class NodeResources:
    name = NAME

    def __init__(self, args: NodeResourcesArgs, handle: Handle) -> None:
        self.handle = handle
        self.most_allocated = args.strategy == "MostAllocated"
        self.weights = dict(args.weights) or {r: 1 for r in handle.managed_resources}

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not pod.requests:
            return Status()
        shortage = logic.check_fit(pod.requests, node.allocatable, node.requested)
        if shortage is None:
            return Status()
        if shortage.lack is logic.Lack.INSUFFICIENT:
            return Status.unschedulable(shortage.reason, detail=shortage.detail)
        return Status.unresolvable(shortage.reason, detail=shortage.detail)

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return logic.allocation_score(pod.requests, node.allocatable, node.requested, self.weights,
                                      self.most_allocated)

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


SPEC = PluginSpec(NAME, NodeResources, parser(NodeResourcesArgsSchema),
                  "Managed extended resources: fit, binpack/spread scoring, reserve, preemption.")
