"""Fluent builders for test objects (raw Kubernetes dicts), in kube-scheduler's style (part of
the test kit for plugin authors, ``extender.testing.kit``; the project's tests use them too):

    pod = make_pod("p").uid("u1").req(gpu=2).priority(10).obj()
    node = make_node("n1").alloc(gpu=4).obj()
    group = make_pod_group("g").min_member(3).timeout(30).obj()

``gpu=`` is shorthand for the managed resource ``example.com/gpu``; other keyword names are used
as given (``cpu="2"``); pass ``**{"vendor.io/x": 1}`` for names that are not identifiers.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import yaml

GPU = "example.com/gpu"
_ALIASES = {"gpu": GPU}
_uids = itertools.count(1)


def _resources(kwargs: dict[str, Any]) -> dict[str, str]:
    return {_ALIASES.get(k, k): str(v) for k, v in kwargs.items()}


class PodBuilder:
    def __init__(self, name: str, namespace: str = "default") -> None:
        self._pod: dict[str, Any] = {
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}-{next(_uids)}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"schedulerName": "default-scheduler", "priority": 0,
                     "containers": [{"name": "main", "image": "example.com/app:1", "resources": {}}]},
            "status": {"phase": "Pending"},
        }

    def uid(self, uid: str) -> PodBuilder:
        self._pod["metadata"]["uid"] = uid
        return self

    def req(self, **kwargs: Any) -> PodBuilder:
        """Requests (and equal limits) on the first container."""
        res = self._pod["spec"]["containers"][0]["resources"]
        res.setdefault("requests", {}).update(_resources(kwargs))
        res.setdefault("limits", {}).update({k: v for k, v in _resources(kwargs).items() if "/" in k})
        return self

    def limits_only(self, **kwargs: Any) -> PodBuilder:
        self._pod["spec"]["containers"][0]["resources"].setdefault("limits", {}).update(_resources(kwargs))
        return self

    def container(self, name: str, **kwargs: Any) -> PodBuilder:
        self._pod["spec"]["containers"].append({"name": name, "image": "x", "resources": {"requests": _resources(kwargs)}})
        return self

    def init_container(self, name: str, sidecar: bool = False, **kwargs: Any) -> PodBuilder:
        c: dict[str, Any] = {"name": name, "image": "x", "resources": {"requests": _resources(kwargs)}}
        if sidecar:
            c["restartPolicy"] = "Always"
        self._pod["spec"].setdefault("initContainers", []).append(c)
        return self

    def priority(self, value: int) -> PodBuilder:
        self._pod["spec"]["priority"] = value
        return self

    def never_preempt(self) -> PodBuilder:
        self._pod["spec"]["preemptionPolicy"] = "Never"
        return self

    def node(self, name: str) -> PodBuilder:
        self._pod["spec"]["nodeName"] = name
        self._pod["status"]["phase"] = "Running"
        return self

    def phase(self, phase: str) -> PodBuilder:
        self._pod["status"]["phase"] = phase
        return self

    def scheduler(self, name: str) -> PodBuilder:
        self._pod["spec"]["schedulerName"] = name
        return self

    def created(self, ts: str) -> PodBuilder:
        self._pod["metadata"]["creationTimestamp"] = ts
        return self

    def labels(self, **labels: str) -> PodBuilder:
        self._pod["metadata"].setdefault("labels", {}).update(labels)
        return self

    def annotations(self, **annotations: str) -> PodBuilder:
        """``**{"example.com/key": "value"}`` for keys that are not identifiers."""
        self._pod["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._pod)


class NodeBuilder:
    def __init__(self, name: str) -> None:
        self._node: dict[str, Any] = {
            "metadata": {"name": name, "uid": f"node-uid-{name}", "labels": {"kubernetes.io/hostname": name}},
            "spec": {},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }

    def alloc(self, **kwargs: Any) -> NodeBuilder:
        self._node["status"]["allocatable"].update(_resources(kwargs))
        self._node["status"]["capacity"].update(_resources(kwargs))
        return self

    def labels(self, **labels: str) -> NodeBuilder:
        self._node["metadata"]["labels"].update(labels)
        return self

    def annotations(self, **annotations: str) -> NodeBuilder:
        self._node["metadata"].setdefault("annotations", {}).update(annotations)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._node)


class PodGroupBuilder:
    """A ``scheduling.x-k8s.io/v1alpha1`` PodGroup; ``spec(...)`` sets raw spec fields as given
    (malformed values included), ``spec_is(...)`` replaces the whole spec (even with a non-map)."""

    def __init__(self, name: str, namespace: str = "default") -> None:
        self._group: dict[str, Any] = {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace, "uid": f"pg-uid-{name}-{next(_uids)}",
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"minMember": 1},
        }

    def uid(self, uid: str) -> PodGroupBuilder:
        self._group["metadata"]["uid"] = uid
        return self

    def min_member(self, value: Any) -> PodGroupBuilder:
        self._group["spec"]["minMember"] = value
        return self

    def timeout(self, seconds: Any) -> PodGroupBuilder:
        self._group["spec"]["scheduleTimeoutSeconds"] = seconds
        return self

    def min_resources(self, **kwargs: Any) -> PodGroupBuilder:
        self._group["spec"]["minResources"] = _resources(kwargs)
        return self

    def spec(self, **fields: Any) -> PodGroupBuilder:
        self._group["spec"].update(fields)
        return self

    def spec_is(self, spec: Any) -> PodGroupBuilder:
        self._group["spec"] = spec
        return self

    def status(self, **fields: Any) -> PodGroupBuilder:
        self._group.setdefault("status", {}).update(fields)
        return self

    def obj(self) -> dict[str, Any]:
        return copy.deepcopy(self._group)


def make_pod(name: str, namespace: str = "default") -> PodBuilder:
    return PodBuilder(name, namespace)


def make_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


def make_pod_group(name: str, namespace: str = "default") -> PodGroupBuilder:
    return PodGroupBuilder(name, namespace)


def cluster_objects(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None,
                    pod_groups: list[dict[str, Any]] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Objects grouped by kind, as ``MemoryCluster(...)`` takes them."""
    return {"Node": nodes, "Pod": pods or [], "PriorityClass": [], "PodDisruptionBudget": [],
            "PodGroup": pod_groups or []}


_KINDS = (("Node", "v1"), ("Pod", "v1"), ("PodGroup", "scheduling.x-k8s.io/v1alpha1"))


def cluster_yaml(nodes: list[dict[str, Any]], pods: list[dict[str, Any]] | None = None,
                 pod_groups: list[dict[str, Any]] | None = None) -> str:
    """The objects as a cluster file (YAML documents with ``apiVersion`` and ``kind``), as
    ``kube-extender serve --cluster`` and ``kube-extender simulate --cluster`` read it."""
    objects = cluster_objects(nodes, pods, pod_groups)
    docs = [{"apiVersion": api, "kind": kind, **obj} for kind, api in _KINDS for obj in objects[kind]]
    return yaml.safe_dump_all(docs, sort_keys=False)
