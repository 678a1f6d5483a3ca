"""The cluster and configuration the example's tests share: one node per accelerator model."""

from __future__ import annotations

from typing import Any

from extender.testing.kit import make_node, make_pod

GPU = "nvidia.com/gpu"
MODELS = "accelerator.example.com/models"
A100, H100, T4 = "NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "Tesla-T4"
PRICES = {A100: 3.2, H100: 9.8, T4: 0.35}

ARGS = {"AcceleratorModel": {"prices": PRICES}}
MANAGED = {"managedResources": [{"name": GPU, "ignoredByScheduler": True}]}
"""The ExtenderConfiguration keys besides the profile: the GPUs are the extender's to account."""


def gpu_node(name: str, model: str | None, gpus: int = 4) -> dict[str, Any]:
    node = make_node(name).alloc(**{GPU: gpus})
    if model is not None:
        node.labels(**{"nvidia.com/gpu.product": model})
    return node.obj()


def nodes() -> list[dict[str, Any]]:
    return [gpu_node("a100-1", A100), gpu_node("h100-1", H100), gpu_node("t4-1", T4, gpus=8), make_node("cpu-1").obj()]


def gpu_pod(name: str, gpus: int, models: str | None = None) -> dict[str, Any]:
    pod = make_pod(name).req(**{GPU: gpus})
    if models is not None:
        pod.annotations(**{MODELS: models})
    return pod.obj()
