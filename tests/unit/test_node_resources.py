"""NodeResources: the pure rules (logic.py) and the plugin through the engine."""

from __future__ import annotations

from typing import Any

import pytest
from builders import GPU, cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.runtime.engine import Candidate
from policies.node_resources import logic
from policies.node_resources.logic import Lack

G = 1000  # one GPU in milli-units


@pytest.mark.parametrize("need, alloc, used, freed, lack", [
    (1 * G, {GPU: 4 * G}, {GPU: 3 * G}, None, None),
    (2 * G, {GPU: 4 * G}, {GPU: 3 * G}, None, Lack.INSUFFICIENT),
    (2 * G, {GPU: 4 * G}, {GPU: 3 * G}, {GPU: 1 * G}, None),
    (5 * G, {GPU: 4 * G}, {}, None, Lack.EXCEEDS_ALLOCATABLE),
    (1 * G, {GPU: 0}, {}, None, Lack.EXCEEDS_ALLOCATABLE),
    (1 * G, {}, {}, None, Lack.ABSENT),
    (0, {}, {}, None, None),
], ids=["fits", "short", "victims free enough", "above allocatable", "zero allocatable", "absent", "zero request"])
def test_check_fit(need: int, alloc: dict, used: dict, freed: dict | None, lack: Lack | None) -> None:
    shortage = logic.check_fit({GPU: need}, alloc, used, freed)
    assert (shortage.lack if shortage else None) is lack


@pytest.mark.parametrize("lack, reason", [
    (Lack.INSUFFICIENT, "Insufficient example.com/gpu"),
    (Lack.ABSENT, "node(s) didn't offer example.com/gpu"),
    (Lack.EXCEEDS_ALLOCATABLE, "node(s) had too little allocatable example.com/gpu"),
])
def test_reasons_are_node_independent(lack: Lack, reason: str) -> None:
    a = logic.Shortage(GPU, lack, 2 * G, 1 * G, 4 * G)
    b = logic.Shortage(GPU, lack, 3 * G, 0, 8 * G)
    assert a.reason == b.reason == reason
    assert a.detail != b.detail


@pytest.mark.parametrize("used, most, expected", [
    (0, True, 25), (2 * G, True, 75), (3 * G, True, 100),
    (0, False, 75), (2 * G, False, 25), (3 * G, False, 0),
], ids=["binpack empty", "binpack half", "binpack full", "spread empty", "spread half", "spread full"])
def test_allocation_score(used: int, most: bool, expected: int) -> None:
    assert logic.allocation_score({GPU: G}, {GPU: 4 * G}, {GPU: used}, {GPU: 1}, most) == expected


def test_score_ignores_resources_not_requested_or_not_offered() -> None:
    assert logic.allocation_score({}, {GPU: 4 * G}, {}, {GPU: 1}, True) == 0
    assert logic.allocation_score({GPU: G}, {}, {}, {GPU: 1}, True) == 0


def engine_over(nodes: list[dict], pods: list[dict], **overrides: Any) -> Any:
    app = create_app(config_of(**overrides), source=MemoryCluster(cluster_objects(nodes, pods)), clock=FakeClock())
    return app.extensions["kube_extender"].engine


NODES = [make_node("empty").alloc(gpu=4).obj(), make_node("half").alloc(gpu=4).obj(),
         make_node("small").alloc(gpu=1).obj(), make_node("cpu").obj()]
RUNNING = [make_pod("r1").uid("r1").req(gpu=2).priority(10).node("half").obj(),
           make_pod("r2").uid("r2").req(gpu=1).priority(500).node("small").obj()]


def test_filter_classifies_every_node() -> None:
    outcome = engine_over(NODES, RUNNING).filter(make_pod("p").req(gpu=2).priority(100).obj(),
                                                 ["empty", "half", "small", "cpu"])
    assert outcome.feasible == ["empty", "half"]
    assert outcome.failed == {}
    assert outcome.unresolvable == {"small": "node(s) had too little allocatable example.com/gpu",
                                    "cpu": "node(s) didn't offer example.com/gpu"}


@pytest.mark.parametrize("strategy, best", [("MostAllocated", "half"), ("LeastAllocated", "empty")])
def test_prioritize_binpack_or_spread(strategy: str, best: str) -> None:
    engine = engine_over(NODES, RUNNING, profiles=[{"schedulerName": "default-scheduler", "pluginConfig": [
        {"name": "NodeResources", "args": {"scoringStrategy": {"type": strategy}}}]}])
    scores = dict(engine.prioritize(make_pod("p").req(gpu=1).obj(), ["empty", "half"]))
    assert max(scores, key=scores.get) == best


def test_pods_without_managed_requests_pass_every_known_node() -> None:
    outcome = engine_over(NODES, RUNNING).filter(make_pod("p").req(cpu=1).obj(), ["empty", "cpu", "x"])
    assert outcome.feasible == ["empty", "cpu"] and list(outcome.failed) == ["x"]


@pytest.mark.parametrize("preemptor, candidates, kept", [
    pytest.param(make_pod("hi").req(gpu=3).priority(100), {"half": ["r1"]}, {"half": ["r1"]},
                 id="victim frees enough"),
    pytest.param(make_pod("hi").req(gpu=4).priority(100), {"small": ["r2"]}, {}, id="node too small"),
    pytest.param(make_pod("hi").req(gpu=1).priority(100), {"small": ["r2"]}, {}, id="victim of higher priority"),
    pytest.param(make_pod("hi").req(gpu=3).priority(10), {"half": ["r1"]}, {}, id="victim of equal priority"),
    pytest.param(make_pod("hi").req(gpu=3).priority(100).never_preempt(), {"half": ["r1"]}, {},
                 id="preemptionPolicy Never"),
    pytest.param(make_pod("hi").req(gpu=1).priority(100), {"ghost": ["r1"]}, {}, id="unknown node"),
    pytest.param(make_pod("hi").req(gpu=3).priority(100), {"half": ["cpu-only-pod", "r1"]},
                 {"half": ["cpu-only-pod", "r1"]}, id="untracked victims kept in order"),
])
def test_preempt(preemptor: Any, candidates: dict[str, list[str]], kept: dict[str, list[str]]) -> None:
    engine = engine_over(NODES, RUNNING)
    decisions = engine.preempt(preemptor.obj(), {n: Candidate([(u, None) for u in uids], 1)
                                                 for n, uids in candidates.items()})
    assert {n: d.victims for n, d in decisions.items()} == kept
    assert all(d.num_pdb_violations == 1 for d in decisions.values())


def test_preempt_with_full_victim_pods_uses_their_priority() -> None:
    engine = engine_over(NODES, RUNNING)
    stranger = make_pod("s").uid("s1").priority(1000).node("half").obj()
    decisions = engine.preempt(make_pod("hi").req(gpu=3).priority(100).obj(),
                               {"half": Candidate([("s1", stranger), ("r1", None)], 0)})
    assert decisions["half"].victims == ["r1"], "the unknown victim of higher priority is never named"


@pytest.mark.parametrize("gpus", [0, 1, 2, 3, 5], ids=lambda g: f"{g}-gpus")
def test_batch_filter_gives_exactly_the_per_node_verdicts(gpus: int) -> None:
    from extender.framework.cycle_state import CycleState
    engine = engine_over(NODES, RUNNING)
    plugin = engine.frameworks["default-scheduler"].filter_plugins[0]
    pod = engine.pod_info(make_pod("p").req(gpu=gpus).obj() if gpus else make_pod("p").req(cpu=1).obj())
    nodes = list(engine.cache.snapshot())
    one_by_one = {n.name: s for n in nodes if not (s := plugin.filter(CycleState(), pod, n)).ok}
    batch = plugin.filter_all(CycleState(), pod, nodes)
    assert {k: (v.code, v.reasons, v.detail_text) for k, v in batch.items()} == \
        {k: (v.code, v.reasons, v.detail_text) for k, v in one_by_one.items()}
