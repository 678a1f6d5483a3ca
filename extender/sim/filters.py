"""A documented subset of kube-scheduler's in-tree plugins, over :class:`~extender.sim.cache.NodeState`.

Filter plugins, in the default profile's order; the first failure ends a node (as
``RunFilterPlugins`` does):

=================  ====================================================  ==============================
plugin             rejects when                                          status, reason
=================  ====================================================  ==============================
NodeUnschedulable  ``spec.unschedulable`` and the pod does not tolerate  UnschedulableAndUnresolvable
                   ``node.kubernetes.io/unschedulable:NoSchedule``       "node(s) were unschedulable"
NodeName           ``spec.nodeName`` set to another node                 UnschedulableAndUnresolvable
                                                                         "node(s) didn't match the
                                                                         requested node name"
TaintToleration    a NoSchedule/NoExecute taint is not tolerated         UnschedulableAndUnresolvable
                                                                         "node(s) had untolerated taint
                                                                         {key: value}"
NodeAffinity       ``nodeSelector`` or required node affinity terms      UnschedulableAndUnresolvable
                   (In, NotIn, Exists, DoesNotExist, Gt, Lt;             "node(s) didn't match Pod's
                   matchFields on metadata.name) do not match            node affinity/selector"
NodeResourcesFit   pods count, cpu, memory, ephemeral-storage or an      Unschedulable "Too many pods",
                   extended resource not in ``ignoredResources`` does    "Insufficient cpu", ... (all
                   not fit allocatable minus requested                   shortages, one status)
=================  ====================================================  ==============================

Not emulated: NodePorts, volumes (VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
VolumeZone), PodTopologySpread, InterPodAffinity, DRA, and the newer "request exceeds
allocatable -> UnschedulableAndUnresolvable" refinement of NodeResourcesFit.

Score plugins (0..100 each, times the default weight): NodeResourcesFit ``LeastAllocated`` on
cpu and memory with non-zero defaults (weight 1), NodeResourcesBalancedAllocation (weight 1),
TaintToleration on PreferNoSchedule taints, reverse-normalised (weight 3), NodeAffinity on
preferred terms, normalised (weight 2). Extender scores are added as ``score x weight x 10``
by the scheduler (§4.4).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping, Protocol, Sequence

from extender.framework import node_constraints as constraints
from extender.framework.node_constraints import expression_matches, required_affinity_matches, term_matches
from extender.framework.node_constraints import tolerated as _tolerated
from extender.framework.status import Code, Status
from extender.sim.cache import NodeState, PodRecord

MAX_NODE_SCORE = 100
_BASIC = {"cpu": "cpu", "memory": "memory", "ephemeral-storage": "ephemeral-storage"}


class NodeLike(Protocol):
    """What filters read from a node: a NodeState, or a working copy in a preemption dry run."""

    @property
    def name(self) -> str: ...

    @property
    def raw(self) -> Mapping[str, Any]: ...

    @property
    def allocatable(self) -> Mapping[str, int]: ...

    @property
    def requested(self) -> Mapping[str, int]: ...

    @property
    def pod_count(self) -> int: ...


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("spec") or {}


# ---- filters -------------------------------------------------------------------------------------------


def node_unschedulable(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> Status:
    why = constraints.unschedulable(pod.raw, node.raw)
    return Status.unresolvable(why) if why else Status()


def node_name(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> Status:
    why = constraints.other_node_name(pod.raw, node.name)
    return Status.unresolvable(why) if why else Status()


def taint_toleration(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> Status:
    why = constraints.untolerated_taint(pod.raw, node.raw)
    return Status.unresolvable(why) if why else Status()


def node_affinity(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> Status:
    why = constraints.affinity_mismatch(pod.raw, node.raw)
    return Status.unresolvable(why) if why else Status()


def is_extended_resource(name: str) -> bool:
    if name in _BASIC or name.startswith("hugepages-") or name.startswith("requests."):
        return False
    if "/" not in name:
        return False
    prefix = name.split("/", 1)[0]
    return not (prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"))


def insufficient_resources(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> list[str]:
    """``fitsRequest``: every shortage, in upstream's order (pods, cpu, memory,
    ephemeral-storage, then scalar resources in request order)."""
    reasons: list[str] = []
    allowed_pods = node.allocatable.get("pods", 0) // 1000
    if node.pod_count + 1 > allowed_pods:
        reasons.append("Too many pods")
    req = pod.requests
    if not any(v for v in req.values()):
        return reasons
    for basic in ("cpu", "memory", "ephemeral-storage"):
        need = req.get(basic, 0)
        if need > 0 and need > node.allocatable.get(basic, 0) - node.requested.get(basic, 0):
            reasons.append(f"Insufficient {basic}")
    for name, need in req.items():
        if name in _BASIC or need == 0:
            continue
        if is_extended_resource(name) and name in ignored:
            continue
        if need > node.allocatable.get(name, 0) - node.requested.get(name, 0):
            reasons.append(f"Insufficient {name}")
    return reasons


def node_resources_fit(pod: PodRecord, node: NodeLike, ignored: frozenset[str]) -> Status:
    reasons = insufficient_resources(pod, node, ignored)
    return Status(Code.UNSCHEDULABLE, tuple(reasons)) if reasons else Status()


def admits(pod: PodRecord, node: NodeLike) -> bool:
    """``preCheckForNode`` (1.29-1.31, QueueingHints off): may a node event move ``pod`` out of
    the unschedulable pool? ``AdmissionCheck`` - NodeResourcesFit's ``Fits`` with **no ignored
    resources** (an ``ignoredByScheduler`` extended resource is checked against the node's
    allocatable like any other), required node affinity and nodeSelector, NodeName (host ports
    are not emulated) - then no untolerated ``NoSchedule`` taint (``NoExecute`` and
    ``PreferNoSchedule`` taints do not count here). ``spec.unschedulable`` is not looked at.
    ``node`` is the node as the cache holds it after the event, its pods accounted."""
    if insufficient_resources(pod, node, frozenset()):
        return False
    if not required_affinity_matches(pod.raw, node.raw):
        return False
    if not node_name(pod, node, frozenset()).ok:
        return False
    tolerations = _spec(pod.raw).get("tolerations") or []
    return not any(taint.get("effect") == "NoSchedule" and not _tolerated(tolerations, taint)
                   for taint in _spec(node.raw).get("taints") or [])


FilterFn = Callable[[PodRecord, NodeLike, frozenset[str]], Status]
FILTERS: tuple[tuple[str, FilterFn], ...] = (
    ("NodeUnschedulable", node_unschedulable),
    ("NodeName", node_name),
    ("TaintToleration", taint_toleration),
    ("NodeAffinity", node_affinity),
    ("NodeResourcesFit", node_resources_fit),
)


POD_DEPENDENT: frozenset[str] = frozenset({"NodeResourcesFit"})
"""The filters whose verdict depends on the pods on the node (the others read the node and the
pod's own spec only)."""


def run_filters(pod: PodRecord, node: NodeLike, ignored: frozenset[str], pods_only: bool = False) -> Status:
    """The first failing plugin's status (with ``plugin`` set), or success. ``pods_only`` runs
    only the :data:`POD_DEPENDENT` filters (preemption's reprieve loop, after a full pass)."""
    for name, fn in FILTERS:
        if pods_only and name not in POD_DEPENDENT:
            continue
        st = fn(pod, node, ignored)
        if not st.ok:
            return st.with_plugin(name)
    return Status()


# ---- scores ----------------------------------------------------------------------------------------------


def least_allocated(pod: PodRecord, node: NodeState) -> int:
    """NodeResourcesFit LeastAllocated on cpu and memory (weights 1) with non-zero requests."""
    total = weight = 0
    for requested, alloc in ((node.nonzero_cpu + pod.nonzero_cpu, node.allocatable.get("cpu", 0)),
                             (node.nonzero_memory + pod.nonzero_memory, node.allocatable.get("memory", 0))):
        if alloc == 0:
            continue
        score = 0 if requested > alloc else (alloc - requested) * MAX_NODE_SCORE // alloc
        total += score
        weight += 1
    return total // weight if weight else 0


def balanced_allocation(pod: PodRecord, node: NodeState) -> int:
    """NodeResourcesBalancedAllocation on cpu and memory (actual requests)."""
    fractions = []
    for res in ("cpu", "memory"):
        alloc = node.allocatable.get(res, 0)
        if alloc == 0:
            continue
        fractions.append(min((node.requested.get(res, 0) + pod.requests.get(res, 0)) / alloc, 1.0))
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:  # pragma: no cover - only cpu and memory are scored here
        mean = sum(fractions) / len(fractions)
        std = math.sqrt(sum((f - mean) ** 2 for f in fractions) / len(fractions))
    else:
        std = 0.0
    return int((1 - std) * MAX_NODE_SCORE)


def _prefer_no_schedule_count(pod: PodRecord, node: NodeState) -> int:
    tolerations = [t for t in _spec(pod.raw).get("tolerations") or [] if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"]
    return sum(1 for taint in _spec(node.raw).get("taints") or []
               if taint.get("effect") == "PreferNoSchedule" and not _tolerated(tolerations, taint))


def _preferred_affinity(pod: PodRecord, node: NodeState) -> int:
    prefs = ((((_spec(pod.raw).get("affinity") or {}).get("nodeAffinity") or {})
              .get("preferredDuringSchedulingIgnoredDuringExecution")) or [])
    return sum(int(p.get("weight") or 0) for p in prefs if term_matches(p.get("preference") or {}, node.raw))


def default_normalize(scores: dict[str, int], reverse: bool) -> dict[str, int]:
    """``helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)``."""
    top = max(scores.values(), default=0)
    if top == 0:
        return {n: MAX_NODE_SCORE if reverse else 0 for n in scores}
    out = {}
    for n, s in scores.items():
        s = MAX_NODE_SCORE * s // top
        out[n] = MAX_NODE_SCORE - s if reverse else s
    return out


SCORE_WEIGHTS = {"NodeResourcesFit": 1, "NodeResourcesBalancedAllocation": 1, "TaintToleration": 3, "NodeAffinity": 2}


def score_nodes(pod: PodRecord, nodes: Sequence[NodeState]) -> dict[str, dict[str, int]]:
    """node -> plugin -> weighted score (already multiplied by the plugin weight)."""
    taints = default_normalize({n.name: _prefer_no_schedule_count(pod, n) for n in nodes}, reverse=True)
    affinity = default_normalize({n.name: _preferred_affinity(pod, n) for n in nodes}, reverse=False)
    out: dict[str, dict[str, int]] = {}
    for n in nodes:
        out[n.name] = {
            "NodeResourcesFit": least_allocated(pod, n) * SCORE_WEIGHTS["NodeResourcesFit"],
            "NodeResourcesBalancedAllocation": balanced_allocation(pod, n) * SCORE_WEIGHTS["NodeResourcesBalancedAllocation"],
            "TaintToleration": taints[n.name] * SCORE_WEIGHTS["TaintToleration"],
            "NodeAffinity": affinity[n.name] * SCORE_WEIGHTS["NodeAffinity"],
        }
    return out


class WorkingNode:
    """A mutable copy of a node for "what if" evaluations (nominated pods, preemption dry runs)."""

    def __init__(self, node: NodeState) -> None:
        self.name = node.name
        self.raw = node.raw
        self.allocatable = node.allocatable
        self.requested: dict[str, int] = dict(node.requested)
        self.pods: dict[str, PodRecord] = dict(node.pods)

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    def add(self, pod: PodRecord) -> None:
        if pod.uid in self.pods:
            return
        self.pods[pod.uid] = pod
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) + v

    def remove(self, pod: PodRecord) -> None:
        if self.pods.pop(pod.uid, None) is None:
            return
        for k, v in pod.requests.items():
            self.requested[k] = self.requested.get(k, 0) - v
