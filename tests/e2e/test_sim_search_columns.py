"""The emulator's columnar node search (``extender.sim.search``) says "passes" exactly where
``filters.run_filters`` does and scores exactly as ``filters.score_nodes`` does, over random
nodes (taints, cordons, labels, pods, resources) and pods (tolerations, node selectors and
preferences, node names, requests), and follows node and pod changes."""

from __future__ import annotations

from typing import Any

from builders import make_node, make_pod
from hypothesis import given, settings
from hypothesis import strategies as st

from extender.sim.cache import NodeState, PodRecord
from extender.sim.filters import run_filters, score_nodes
from extender.sim.search import NodeSearch

IGNORED = frozenset({"example.com/gpu"})
TAINTS = [{"key": "nvidia.com/gpu", "effect": "NoSchedule"}, {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
          {"key": "soft", "effect": "PreferNoSchedule"}]
TOLERATIONS = [{"key": "nvidia.com/gpu", "operator": "Exists"}, {"key": "dedicated", "value": "ml", "effect": "NoExecute"},
               {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]
quantity = st.sampled_from(["0", "1", "2", "500m", "4", "16"])


@st.composite
def nodes(draw: Any) -> list[NodeState]:
    out = []
    for i in range(draw(st.integers(1, 8))):
        raw = make_node(f"n{i}").alloc(gpu=draw(st.integers(0, 4)), cpu=draw(quantity),
                                       pods=draw(st.sampled_from(["1", "2", "110"]))).labels(
            zone=draw(st.sampled_from(["a", "b"]))).obj()
        raw["spec"]["taints"] = draw(st.lists(st.sampled_from(TAINTS), max_size=2, unique_by=repr))
        raw["spec"]["unschedulable"] = draw(st.booleans()) and draw(st.booleans())
        state = NodeState.of(raw)
        for j in range(draw(st.integers(0, 2))):
            state = state.with_pod(PodRecord.from_raw(make_pod(f"r{i}-{j}").req(cpu=draw(quantity), gpu=1)
                                                      .node(f"n{i}").obj()))
        out.append(state)
    return out


@st.composite
def pods(draw: Any) -> PodRecord:
    b = make_pod("p").req(cpu=draw(quantity), gpu=draw(st.integers(0, 2)), **{"vendor.io/fpga": draw(quantity)})
    raw = b.obj()
    raw["spec"]["tolerations"] = draw(st.lists(st.sampled_from(TOLERATIONS), max_size=3, unique_by=repr))
    if draw(st.booleans()):
        raw["spec"]["nodeSelector"] = {"zone": draw(st.sampled_from(["a", "b"]))}
    if draw(st.booleans()) and draw(st.booleans()):
        raw["spec"]["nodeName"] = draw(st.sampled_from(["n0", "n1"]))
    if draw(st.booleans()):
        raw["spec"]["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": draw(st.integers(1, 100)), "preference": {"matchExpressions": [
                {"key": "zone", "operator": "In", "values": [draw(st.sampled_from(["a", "b"]))]}]}}]}}
    if draw(st.booleans()):
        raw["spec"]["containers"][0]["resources"]["requests"]["memory"] = draw(st.sampled_from(["1Gi", "40Gi"]))
    return PodRecord.from_raw(raw)


@settings(max_examples=150, deadline=None)
@given(cluster=nodes(), pod=pods(), other=pods(), data=st.data())
def test_the_columns_pass_exactly_the_nodes_run_filters_passes(cluster: list[NodeState], pod: PodRecord,
                                                               other: PodRecord, data: Any) -> None:
    search = NodeSearch(IGNORED)
    search.sync(cluster)
    assert search.passing(pod).tolist() == [run_filters(pod, n, IGNORED).ok for n in cluster]
    some = data.draw(st.lists(st.sampled_from(cluster), min_size=1, unique_by=lambda n: n.name), label="scored")
    assert search.scores(pod, some) == score_nodes(pod, some)
    # a node is cordoned, then a pod lands on a node: the columns follow each change
    changed = list(cluster)
    j = data.draw(st.integers(0, len(cluster) - 1))
    raw = {**changed[j].raw, "spec": {**changed[j].raw.get("spec", {}), "unschedulable": True}}
    changed[j] = changed[j].with_node(raw)
    search.sync(changed)
    assert search.passing(pod).tolist() == [run_filters(pod, n, IGNORED).ok for n in changed]
    i = data.draw(st.integers(0, len(cluster) - 1))
    changed[i] = changed[i].with_pod(other.on(changed[i].name))
    search.sync(changed)
    for p in (pod, other):
        assert search.passing(p).tolist() == [run_filters(p, n, IGNORED).ok for n in changed]
        assert search.scores(p, changed) == score_nodes(p, changed)
