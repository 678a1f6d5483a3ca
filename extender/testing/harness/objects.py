"""Seed objects for harness scenarios: nodes and pods with a managed resource, priority classes.

Every function returns a fresh plain dict with ``kind``/``apiVersion`` (ready for
:meth:`Harness.create_pod` or the ``objects`` of a :class:`~extender.testing.harness.Harness`).
Pods never carry a UID or resourceVersion: the API server assigns them.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from extender.testing.fakeapi import builders

GPU = "example.com/gpu"
"""The managed resource of the extender's default configuration."""

ADMISSION_GATE = "kube-extender.io/admission"
"""The extender's admission scheduling gate (its configuration's default)."""

priority_class = builders.priority_class


def node(name: str, gpus: int = 0, *, resource: str = GPU, cpu: str = "64", memory: str = "256Gi",
         labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A Ready node with ``gpus`` of ``resource`` allocatable (and plenty of cpu and memory)."""
    obj = builders.node(name, cpu=cpu, memory=memory, labels=labels)
    if gpus:
        for key in ("capacity", "allocatable"):
            obj["status"][key][resource] = str(gpus)
    return obj


def pod(name: str, gpus: int = 1, *, resource: str = GPU, namespace: str = "default", node: str | None = None,
        priority_class: str | None = None, gates: Iterable[str] = (), labels: Mapping[str, str] | None = None,
        annotations: Mapping[str, str] | None = None, cpu: str = "100m") -> dict[str, Any]:
    """A pod asking ``gpus`` of ``resource`` (requests and limits, as the API server defaults an
    extended resource) and a little cpu; ``node``: already bound there (a running pod);
    ``gates``: scheduling gates, e.g. ``(ADMISSION_GATE,)``."""
    obj = builders.pod(name, namespace, node=node, cpu=cpu, gates=gates, labels=labels, annotations=annotations,
                       priority_class=priority_class)
    if gpus:
        resources = obj["spec"]["containers"][0]["resources"]
        resources["requests"][resource] = str(gpus)
        resources["limits"] = {resource: str(gpus)}
    return obj
