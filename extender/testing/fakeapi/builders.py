"""Small builders for the objects tests seed into the fake API server.

Contract: every function returns a fresh plain dict (``kind``/``apiVersion`` set) shaped like
the real object, containing only what was asked for plus the minimum the real API requires
(e.g. a pod always has one container with an image). Nothing here talks to a server.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

__all__ = ["pod", "node", "pdb", "lease", "podgroup", "elastic_quota", "priority_class"]


def pod(
    name: str,
    namespace: str = "default",
    *,
    node: str | None = None,
    phase: str | None = None,
    ready: bool | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    cpu: str | None = None,
    memory: str | None = None,
    gates: Iterable[str] = (),
    scheduler_name: str | None = None,
    priority_class: str | None = None,
    containers: int = 1,
) -> dict[str, Any]:
    """A Pod. ``phase``/``ready`` fill ``status`` (only kept by direct store writes)."""
    requests: dict[str, str] = {}
    if cpu is not None:
        requests["cpu"] = cpu
    if memory is not None:
        requests["memory"] = memory
    spec: dict[str, Any] = {
        "containers": [
            {"name": f"c{i}" if containers > 1 else "main", "image": "registry.k8s.io/pause:3.9",
             **({"resources": {"requests": dict(requests)}} if requests else {})}
            for i in range(containers)
        ]
    }
    if node is not None:
        spec["nodeName"] = node
    gates = list(gates)
    if gates:
        spec["schedulingGates"] = [{"name": g} for g in gates]
    if scheduler_name is not None:
        spec["schedulerName"] = scheduler_name
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}
    if phase is not None or ready is not None:
        status: dict[str, Any] = {"phase": phase or "Pending"}
        if ready is not None:
            status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
        obj["status"] = status
    return obj


def node(
    name: str,
    *,
    cpu: str = "4",
    memory: str = "16Gi",
    pods: str = "110",
    labels: Mapping[str, str] | None = None,
    taints: Iterable[Mapping[str, str]] = (),
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node with capacity/allocatable and a Ready condition."""
    alloc = {"cpu": cpu, "memory": memory, "pods": pods}
    spec: dict[str, Any] = {}
    taints = [dict(t) for t in taints]
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": spec,
        "status": {
            "capacity": dict(alloc),
            "allocatable": dict(alloc),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pdb(
    name: str,
    namespace: str = "default",
    *,
    match_labels: Mapping[str, str],
    min_available: int | str | None = None,
    max_unavailable: int | str | None = None,
    unhealthy_pod_eviction_policy: str | None = None,
) -> dict[str, Any]:
    """A policy/v1 PodDisruptionBudget."""
    spec: dict[str, Any] = {"selector": {"matchLabels": dict(match_labels)}}
    if min_available is not None:
        spec["minAvailable"] = min_available
    if max_unavailable is not None:
        spec["maxUnavailable"] = max_unavailable
    if unhealthy_pod_eviction_policy is not None:
        spec["unhealthyPodEvictionPolicy"] = unhealthy_pod_eviction_policy
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def lease(name: str, namespace: str = "kube-system", *, holder: str | None = None, duration: int = 15) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease."""
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder is not None:
        spec["holderIdentity"] = holder
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def podgroup(name: str, namespace: str = "default", *, min_member: int = 1) -> dict[str, Any]:
    """A scheduling.x-k8s.io/v1alpha1 PodGroup."""
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace}, "spec": {"minMember": min_member}}


def elastic_quota(namespace: str, *, min: dict[str, str] | None = None, max: dict[str, str] | None = None,
                  name: str = "quota") -> dict[str, Any]:
    """A scheduling.x-k8s.io/v1alpha1 ElasticQuota (the scheduler-plugins CRD)."""
    spec = {k: dict(v) for k, v in (("min", min), ("max", max)) if v is not None}
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def priority_class(name: str, value: int, *, global_default: bool = False,
                   preemption_policy: str | None = None) -> dict[str, Any]:
    """A scheduling.k8s.io/v1 PriorityClass."""
    obj: dict[str, Any] = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                           "metadata": {"name": name}, "value": value, "globalDefault": global_default}
    if preemption_policy is not None:
        obj["preemptionPolicy"] = preemption_policy
    return obj
