"""The test kit's builders (``extender.testing.kit.builders``), under the name the project's
tests have always imported them by, and ``make_elastic_quota``."""

from typing import Any

from extender.testing.kit.builders import (GPU, NodeBuilder, PodBuilder, PodGroupBuilder, cluster_objects,
                                           make_node, make_pod, make_pod_group)

__all__ = ["GPU", "NodeBuilder", "PodBuilder", "PodGroupBuilder", "cluster_objects", "make_elastic_quota",
           "make_node", "make_pod", "make_pod_group"]


def make_elastic_quota(namespace: str, min: dict[str, Any] | None = None, max: dict[str, Any] | None = None,
                       name: str = "quota") -> dict[str, Any]:
    """A scheduling.x-k8s.io/v1alpha1 ElasticQuota (``gpu`` stands for ``example.com/gpu`` in
    ``min`` and ``max``, as in the builders)."""
    spec = {key: {GPU if r == "gpu" else r: str(v) for r, v in amounts.items()}
            for key, amounts in (("min", min), ("max", max)) if amounts is not None}
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "ElasticQuota",
            "metadata": {"name": name, "namespace": namespace, "uid": f"eq-{namespace}-{name}"}, "spec": spec}
