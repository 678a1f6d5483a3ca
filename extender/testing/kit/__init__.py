"""The test kit for plugin authors: everything a policy package's tests need, shipped with
kube-extender (``pip install kube-extender`` brings it; nothing else to install).

* Builders of raw Kubernetes objects: ``make_pod``, ``make_node``, ``make_pod_group``, and the
  cluster they make (``cluster_objects``, ``cluster_yaml`` for a cluster file).
* ``PluginHarness``: the plugin inside a real kube-extender (the engine, a Framework with the
  default plugins, an in-memory cluster, a fake clock) asked filter, prioritize, preempt and bind
  (Permit waits included), returning verdicts.
* ``simulate``: a short ``kube-extender simulate`` run with the plugin enabled: the emulated
  kube-scheduler schedules a workload against it.

Example (a pytest test)::

    from extender.testing.kit import PluginHarness, make_node, make_pod
    from my_policy.plugin import SPEC

    def test_the_cheapest_model_wins() -> None:
        h = PluginHarness(SPEC, nodes=[make_node("a").alloc(gpu=1).obj(), make_node("b").alloc(gpu=1).obj()])
        binding = h.schedule(make_pod("p").req(gpu=1).obj())
        assert binding is not None and binding.outcome == "bound" and binding.node == "a"

``docs/writing-a-policy.md`` walks through a whole package. The kit does not include the fake
Kubernetes API server (``extender.testing.fakeapi``): a plugin never talks to the API server (it
sees the cluster through the Handle), so the in-memory cluster behind the harness is all its
tests need; the fake API server tests kube-extender's own Kubernetes I/O.
"""

from extender.framework.clock import FakeClock
from extender.testing.kit.builders import (GPU, NodeBuilder, PodBuilder, PodGroupBuilder, cluster_objects,
                                           cluster_yaml, make_node, make_pod, make_pod_group)
from extender.testing.kit.harness import Binding, FilterVerdict, HarnessError, PluginHarness
from extender.testing.kit.simulate import SimulationError, SimulationResult, simulate

__all__ = ["Binding", "FakeClock", "FilterVerdict", "GPU", "HarnessError", "NodeBuilder", "PluginHarness",
           "PodBuilder", "PodGroupBuilder", "SimulationError", "SimulationResult", "cluster_objects", "cluster_yaml",
           "make_node", "make_pod", "make_pod_group", "simulate"]
