"""AcceleratorModel under the emulated kube-scheduler (the test kit's ``simulate``): a workload
of training and inference pods lands on the cheapest accepted models, and what cannot fit waits."""

from __future__ import annotations

from accelerator_cluster import A100, ARGS, H100, MANAGED, MODELS, T4, nodes

from accelerator_model.plugin import SPEC
from extender.testing.kit import cluster_yaml, simulate

CONFIG = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "ExtenderConfiguration", **MANAGED,
          "profiles": [{"schedulerName": "default-scheduler",
                        "plugins": {"multiPoint": {"enabled": [{"name": "AcceleratorModel"}]}},
                        "pluginConfig": [{"name": name, "args": args} for name, args in ARGS.items()]}]}

WORKLOAD = {"apiVersion": "kube-extender.io/v1alpha1", "kind": "Workload", "pods": [
    {"name": "train", "namespace": "ml", "count": 3, "requests": {"cpu": "1", "nvidia.com/gpu": 4},
     "annotations": {MODELS: f"{A100},{H100}"}},
    {"name": "infer", "namespace": "ml", "arrival": 1, "requests": {"cpu": "1", "nvidia.com/gpu": 1},
     "annotations": {MODELS: T4}},
    {"name": "web", "namespace": "default", "arrival": 1, "requests": {"cpu": "1"}},
]}


def test_a_workload_lands_on_the_cheapest_accepted_models() -> None:
    result = simulate(SPEC, config=CONFIG, cluster=cluster_yaml(nodes()), workload=WORKLOAD, seed=1)
    # the cheapest accepted model first, then the next; the T4 node has room but is not accepted
    assert result.placements == {"default/web": "cpu-1", "ml/infer": "t4-1", "ml/train-0": "a100-1",
                                 "ml/train-1": "h100-1"}
    assert list(result.pending) == ["ml/train-2"]
    assert "1 node's accelerator model is not one the pod accepts" in result.pending["ml/train-2"]
