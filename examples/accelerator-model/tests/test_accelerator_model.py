"""AcceleratorModel inside a real kube-extender (the test kit's PluginHarness): the verdicts of
filter, prioritize and bind, and the configuration mistakes start-up refuses."""

from __future__ import annotations

import pytest
from accelerator_cluster import A100, ARGS, H100, MANAGED, T4, gpu_node, gpu_pod, nodes

from accelerator_model import logic
from accelerator_model.plugin import SPEC
from extender.config.model import ConfigError
from extender.framework import Code
from extender.testing.kit import PluginHarness, make_pod

NOT_ACCEPTED = "node's accelerator model is not one the pod accepts"


def harness(**overrides: object) -> PluginHarness:
    return PluginHarness(SPEC, args=ARGS, nodes=nodes(), config=MANAGED, **overrides)  # type: ignore[arg-type]


@pytest.mark.parametrize("models, feasible", [
    (None, ["a100-1", "h100-1", "t4-1"]),
    (A100, ["a100-1"]),
    (f"{A100}, {H100}", ["a100-1", "h100-1"]),
    ("B200", []),
], ids=["any model", "one model", "two models", "a model nobody has"])
def test_filter_keeps_the_nodes_of_the_accepted_models(models: str | None, feasible: list[str]) -> None:
    verdict = harness().filter(gpu_pod("p", 1, models))
    assert verdict.feasible == feasible
    for node in {"a100-1", "h100-1", "t4-1"} - set(feasible):
        st = verdict.rejected[node]
        assert (st.plugin, st.code, st.reasons) == ("AcceleratorModel", Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                                                    (NOT_ACCEPTED,))
    assert verdict.rejected["cpu-1"].plugin == "NodeResources"  # no GPU at all: rejected before us


def test_an_annotation_naming_nothing_rejects_the_pod_everywhere_instead_of_meaning_any() -> None:
    verdict = harness().filter(gpu_pod("p", 1, " , "))
    assert verdict.feasible == []
    assert verdict.reasons("a100-1") == ("annotation accelerator.example.com/models names no model: ' , '",)


def test_a_pod_without_accelerators_is_left_alone() -> None:
    verdict = harness().filter(make_pod("web").req(cpu="1").obj())
    assert verdict.feasible == ["a100-1", "cpu-1", "h100-1", "t4-1"]


def test_an_unlabelled_gpu_node_is_refused() -> None:
    h = PluginHarness(SPEC, args=ARGS, nodes=[gpu_node("mystery", None)], config=MANAGED)
    assert h.filter(gpu_pod("p", 1)).reasons("mystery") == ("node has no accelerator model label",)


def test_the_cheapest_accepted_model_scores_highest() -> None:
    scores = harness().prioritize(gpu_pod("p", 1, f"{A100},{H100}"), ["a100-1", "h100-1"])
    assert scores["a100-1"] > scores["h100-1"]


def test_pods_go_to_the_cheapest_model_with_room_and_stay_pending_when_none_has() -> None:
    h = harness()
    placed = [h.schedule(gpu_pod(f"train-{i}", 4, f"{A100},{H100}")) for i in range(3)]
    assert [b.node if b else None for b in placed] == ["a100-1", "h100-1", None]
    assert all(b.outcome == "bound" for b in placed if b)
    assert h.pod("default", "train-0")["spec"]["nodeName"] == "a100-1"
    assert h.schedule(gpu_pod("infer", 1, T4)).node == "t4-1"  # type: ignore[union-attr]


def test_bind_refuses_a_node_of_a_model_the_pod_does_not_accept() -> None:
    binding = harness().bind(gpu_pod("p", 1, A100), "t4-1")
    assert binding.outcome == "failed" and NOT_ACCEPTED in binding.error


@pytest.mark.parametrize("args, config, fragment", [
    ({"AcceleratorModel": {"prices": {A100: -1}}}, MANAGED, "pluginConfig[AcceleratorModel].args.prices"),
    ({"AcceleratorModel": {"nodelabel": "x"}}, MANAGED, "did you mean nodeLabel?"),
    (ARGS, {}, "resource nvidia.com/gpu is not among the managedResources"),
], ids=["negative price", "misspelt key", "resource not managed"])
def test_start_up_refuses_a_configuration_the_plugin_cannot_work_with(args: dict, config: dict,
                                                                       fragment: str) -> None:
    with pytest.raises(ConfigError) as refused:
        PluginHarness(SPEC, args=args, nodes=nodes(), config=config)
    assert fragment in str(refused.value)


@pytest.mark.parametrize("prices, scores", [
    ({"a": 1.0, "b": 3.0, "c": 2.0}, {"a": 100, "b": 0, "c": 50}),
    ({"a": 2.0, "b": 2.0}, {"a": 100, "b": 100}),
    ({"a": 2.0, "b": None}, {"a": 100, "b": 0}),
    ({"a": None}, {"a": 0}),
], ids=["linear", "all equal", "unpriced", "nothing priced"])
def test_price_scores(prices: dict, scores: dict) -> None:
    assert logic.price_scores(prices, 100) == scores
