"""The AcceleratorModel plugin: ``logic`` adapted to kube-extender's extension points.

* PreFilter reads the pod's annotation once per request (a malformed one rejects the pod
  everywhere, naming the annotation) and skips the pod's Filter when it requests no accelerator.
* Filter (the hot path: every candidate node) only compares the node's label with what PreFilter
  stored in the CycleState.
* PreScore prices the nodes being scored once, Score hands each its share.

Imports only ``extender.framework`` of kube-extender: the stable plugin API.
"""

from __future__ import annotations

from typing import Sequence

from extender.framework import (MAX_NODE_SCORE, SKIP, SUCCESS, ClusterEvent, CycleState, Handle, NodeInfo,
                                PluginSpec, PodInfo, PreFilterResult, SnapshotView, Status, schema_parser)

from accelerator_model import logic
from accelerator_model.args import AcceleratorModelArgs, AcceleratorModelArgsSchema

NAME = "AcceleratorModel"
_SCORES = NAME + "/scores"
_UNREAD = object()


class AcceleratorModel:
    name = NAME

    def __init__(self, args: AcceleratorModelArgs, handle: Handle) -> None:
        if args.resource not in handle.managed_resources:
            # the plugin would never see the pods' requests: refuse to start rather than do nothing
            raise ValueError(f"resource {args.resource} is not among the managedResources "
                             f"({', '.join(sorted(handle.managed_resources)) or 'none'})")
        self.args = args
        self._rejections: dict[str, Status] = {}

    def events_to_register(self) -> Sequence[ClusterEvent]:
        """A pod rejected here fits only once a node is added or relabelled."""
        return (ClusterEvent.NODE_ADD, ClusterEvent.NODE_UPDATE)

    def _accepted(self, state: CycleState, pod: PodInfo) -> frozenset[str] | None:
        """The pod's accepted models: PreFilter's reading, else (a cycle without PreFilter) read now."""
        found = state.get(NAME, _UNREAD)
        if found is not _UNREAD:
            return found  # type: ignore[no-any-return]
        return logic.accepted_models(pod.annotations.get(self.args.pod_annotation))

    def pre_filter(self, state: CycleState, pod: PodInfo,
                   snapshot: SnapshotView) -> tuple[PreFilterResult | None, Status]:
        if not pod.requests.get(self.args.resource):
            return None, SKIP  # not an accelerator pod: its Filter is not called
        try:
            state.write(NAME, logic.accepted_models(pod.annotations.get(self.args.pod_annotation)))
        except ValueError as exc:
            return None, Status.unresolvable(f"annotation {self.args.pod_annotation} {exc}")
        return None, Status()

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        why = logic.rejection(node.labels.get(self.args.node_label), self._accepted(state, pod))
        if why is None:
            return SUCCESS
        # one Status per reason, made once: the hot path allocates nothing for a rejected node
        st = self._rejections.get(why)
        if st is None:
            st = self._rejections.setdefault(why, Status.unresolvable(why))
        return st

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        if not pod.requests.get(self.args.resource):
            return SKIP
        prices = {n.name: self.args.prices.get(n.labels.get(self.args.node_label, "")) for n in nodes}
        state.write(_SCORES, logic.price_scores(prices, MAX_NODE_SCORE))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return int(state.read(_SCORES).get(node.name, 0))


SPEC = PluginSpec(NAME, AcceleratorModel, schema_parser(AcceleratorModelArgsSchema),
                  "Pods choose accelerator models (node label); the cheapest accepted model scores highest.")
