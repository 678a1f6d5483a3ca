"""Typed, immutable views over raw Pod and Node dicts.

Raw Kubernetes objects stay dicts at the edges (HTTP, the API server, YAML files); inside, plugins
see ``PodInfo`` and ``NodeInfo``: frozen values with the fields scheduling needs precomputed
(managed-resource requests in milli-units, priority). A NodeInfo is never mutated: the cache
replaces it with a new one on every change (copy-on-write), which is what lets a snapshot share
NodeInfos with the cache and stay consistent while binds run concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from extender.framework.resources import pod_requests, resource_list

_EMPTY: Mapping[str, int] = MappingProxyType({})
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


_K = TypeVar("_K")
_V = TypeVar("_V")


def _copied(mapping: Mapping[_K, _V]) -> dict[_K, _V]:
    """A dict with ``mapping``'s items. A NodeInfo's maps are read-only proxies of dicts, whose
    ``copy()`` copies the table in one go: ``dict(proxy)`` reads it key by key, ~10x slower -
    and nodes are copied on every change the cache sees and every time capacity held on them
    is counted."""
    if type(mapping) is MappingProxyType or type(mapping) is dict:
        return mapping.copy()  # type: ignore[attr-defined, no-any-return]
    return dict(mapping)


def pod_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


@dataclass(frozen=True, slots=True)
class PodInfo:
    """A pod as the engine accounts it. ``requests`` holds only the tracked (managed) resources."""

    uid: str
    namespace: str
    name: str
    priority: int = 0
    preemption_policy: str = "PreemptLowerPriority"
    creation_timestamp: str = ""
    start_time: str = ""
    node_name: str = ""
    nominated_node_name: str = ""
    phase: str = ""
    scheduler_name: str = "default-scheduler"
    deleting: bool = False
    resource_version: str = ""
    requests: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def key(self) -> str:
        return pod_key(self.namespace, self.name)

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def labels(self) -> Mapping[str, str]:
        return (self.raw.get("metadata") or {}).get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return (self.raw.get("metadata") or {}).get("annotations") or {}

    @classmethod
    def from_pod(cls, raw: Mapping[str, Any], resources: Iterable[str] | None = None) -> PodInfo:
        """Build from a raw Pod dict. Raises ValueError (or QuantityError) on a malformed pod."""
        meta = raw.get("metadata")
        spec = raw.get("spec")
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping):
            raise ValueError("pod must have metadata and spec objects")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError("pod metadata.name must be a non-empty string")
        priority = spec.get("priority", 0)
        if priority is None:
            priority = 0
        if isinstance(priority, bool) or not isinstance(priority, int):
            raise ValueError("pod spec.priority must be an integer")
        status = raw.get("status") or {}
        return cls(
            uid=str(meta.get("uid") or ""),
            namespace=str(meta.get("namespace") or "default"),
            name=name,
            priority=priority,
            preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
            creation_timestamp=str(meta.get("creationTimestamp") or ""),
            start_time=str(status.get("startTime") or ""),
            node_name=str(spec.get("nodeName") or ""),
            nominated_node_name=str(status.get("nominatedNodeName") or ""),
            phase=str(status.get("phase") or ""),
            scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
            deleting=bool(meta.get("deletionTimestamp")),
            resource_version=str(meta.get("resourceVersion") or ""),
            requests=MappingProxyType(pod_requests(raw, resources)),
            raw=raw,
        )

    def bound_to(self, node_name: str) -> PodInfo:
        """A copy of this pod as if assigned to ``node_name`` (used when assuming)."""
        return PodInfo(self.uid, self.namespace, self.name, self.priority, self.preemption_policy,
                       self.creation_timestamp, self.start_time, node_name, self.nominated_node_name,
                       self.phase, self.scheduler_name, self.deleting, self.resource_version, self.requests,
                       self.raw)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node with the pods accounted on it. ``allocatable`` and ``requested`` cover the tracked
    resources only; a resource absent from ``allocatable`` is not offered by the node at all.
    ``generation`` is the cache generation of the last change (snapshots update by it)."""

    name: str
    node: Mapping[str, Any] | None
    allocatable: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    requested: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    pods: Mapping[str, PodInfo] = field(default_factory=lambda: MappingProxyType({}))
    generation: int = 0

    @property
    def labels(self) -> Mapping[str, str]:
        return ((self.node or {}).get("metadata") or {}).get("labels") or {}

    @property
    def annotations(self) -> Mapping[str, str]:
        return ((self.node or {}).get("metadata") or {}).get("annotations") or {}

    def free(self, resource: str) -> int:
        """Allocatable minus requested; 0 for a resource the node does not offer."""
        return self.allocatable.get(resource, 0) - self.requested.get(resource, 0)

    @staticmethod
    def allocatable_of(node: Mapping[str, Any], resources: Iterable[str]) -> dict[str, int]:
        status = node.get("status") or {}
        return resource_list(status.get("allocatable") or status.get("capacity"), resources)

    def with_node(self, node: Mapping[str, Any] | None, allocatable: Mapping[str, int], generation: int) -> NodeInfo:
        return NodeInfo(self.name, node, MappingProxyType(dict(allocatable)), self.requested, self.pods, generation)

    def with_pod(self, pod: PodInfo, generation: int) -> NodeInfo:
        """This node with ``pod`` accounted (a pod with the same uid is replaced, its requests
        leave), at ``generation``."""
        return self.with_pods((pod,), generation)

    def with_pods(self, pods: Iterable[PodInfo], generation: int) -> NodeInfo:
        """This node with ``pods`` accounted, in order: the same pods and requests as calling
        ``with_pod`` for each in turn, with ``generation``, but copying the pod and request maps
        once. No pods: this NodeInfo itself, generation unchanged."""
        adding = tuple(pods)
        if not adding:
            return self
        accounted = _copied(self.pods)
        requested = _copied(self.requested)
        for pod in adding:
            previous = accounted.get(pod.uid)
            accounted[pod.uid] = pod
            if previous is not None:
                for k, v in previous.requests.items():
                    requested[k] = requested.get(k, 0) - v
            for k, v in pod.requests.items():
                requested[k] = requested.get(k, 0) + v
        return NodeInfo(self.name, self.node, self.allocatable, MappingProxyType(requested),
                        MappingProxyType(accounted), generation)

    def without_pod(self, uid: str, generation: int) -> NodeInfo:
        if uid not in self.pods:
            return self
        pods = _copied(self.pods)
        gone = pods.pop(uid)
        requested = _copied(self.requested)
        for k, v in gone.requests.items():
            requested[k] = requested.get(k, 0) - v
            if requested[k] == 0:
                del requested[k]
        return NodeInfo(self.name, self.node, self.allocatable, MappingProxyType(requested),
                        MappingProxyType(pods), generation)

    def summary(self) -> dict[str, Any]:
        """A JSON-ready description for the debug endpoints."""
        return {
            "name": self.name,
            "allocatable": dict(self.allocatable),
            "requested": dict(self.requested),
            "free": {r: self.free(r) for r in self.allocatable},
            "pods": sorted(p.key for p in self.pods.values()),
            "generation": self.generation,
        }
