"""score_all, the batch Score entry point: NodeResources gives exactly what ``score`` gives node by
node, and the framework runs it as it runs per-node Score (normalize, weights, errors)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from builders import make_node, make_pod
from fakes import fake

from extender.cache.cache import ClusterCache
from extender.framework.clock import FakeClock
from extender.framework.cycle_state import CycleState
from extender.framework.status import Code, Status
from extender.framework.views import NodeInfo, PodInfo
from extender.runtime.framework import Framework
from extender.runtime.handle import EngineHandle
from extender.runtime.waiting_pods import WaitingPods
from policies.node_resources.args import STRATEGIES, NodeResourcesArgs
from policies.node_resources.plugin import NodeResources

GPU, FPGA = "example.com/gpu", "vendor.io/fpga"
G = 1000  # one unit in milli-units

NODES = [
    NodeInfo("empty", None, {GPU: 4 * G}, {}),
    NodeInfo("half", None, {GPU: 4 * G}, {GPU: 2 * G}),
    NodeInfo("one-left", None, {GPU: 4 * G}, {GPU: 3 * G}),
    NodeInfo("full", None, {GPU: 4 * G}, {GPU: 4 * G}),
    NodeInfo("overcommitted", None, {GPU: 4 * G}, {GPU: 5 * G}),
    NodeInfo("thirds", None, {GPU: 3 * G}, {GPU: 1 * G}),
    NodeInfo("big", None, {GPU: 8 * G, FPGA: 2 * G}, {GPU: 1 * G, FPGA: 1 * G}),
    NodeInfo("fpga-only", None, {FPGA: 4 * G}, {FPGA: 3 * G}),
    NodeInfo("zero-allocatable", None, {GPU: 0}, {}),
    NodeInfo("cpu-only", None, {}, {}),
]


def plugin(strategy: str, weights: dict[str, int]) -> NodeResources:
    return NodeResources(NodeResourcesArgs(strategy, weights), SimpleNamespace(managed_resources=[GPU, FPGA]))


def pod(requests: dict[str, int]) -> PodInfo:
    return PodInfo(uid="u", namespace="default", name="p", requests=requests)


@pytest.mark.parametrize("requests", [
    {}, {GPU: G}, {GPU: 500}, {GPU: 3 * G}, {GPU: 9 * G}, {GPU: 0}, {FPGA: G}, {GPU: G, FPGA: G},
    {GPU: 2 * G, FPGA: 0}, {FPGA: 3 * G, GPU: 1},
], ids=["nothing", "1 gpu", "half a gpu", "3 gpus", "more than any node", "zero gpus", "1 fpga",
        "gpu and fpga", "gpu and zero fpga", "fpga and a sliver of gpu"])
@pytest.mark.parametrize("weights", [{}, {GPU: 3, FPGA: 1}, {GPU: 1}, {FPGA: 2}],
                         ids=["default weights", "gpu x3", "gpu only", "fpga only"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_nodes_resources_score_all_equals_score_node_by_node(requests: dict[str, int], weights: dict[str, int],
                                                              strategy: str) -> None:
    p, subject = plugin(strategy, weights), pod(requests)
    scores, st = p.score_all(CycleState(), subject, NODES)
    assert st.ok
    assert scores == {n.name: p.score(CycleState(), subject, n) for n in NODES}
    assert list(scores) == [n.name for n in NODES]


def test_nodes_resources_score_all_of_no_nodes() -> None:
    assert plugin("MostAllocated", {}).score_all(CycleState(), pod({GPU: G}), []) == ({}, Status())


# ---- the framework's side ---------------------------------------------------------------------

class NullWriter:
    def bind(self, *a: Any) -> None: ...
    def patch_pod_metadata(self, *a: Any, **k: Any) -> None: ...
    def evict(self, *a: Any) -> None: ...
    def record_event(self, *a: Any, **k: Any) -> None: ...


POD = PodInfo.from_pod(make_pod("p").obj())
THREE = [NodeInfo(n, make_node(n).obj()) for n in ("n1", "n2", "n3")]


def framework(score: list[tuple[Any, int]]) -> Framework:
    clock = FakeClock()
    handle = EngineHandle(ClusterCache([GPU], clock), NullWriter(), clock, WaitingPods(), frozenset({GPU}))
    return Framework("default-scheduler", handle, score=score)


def batch(name: str, answer: Any, journal: list[tuple[str, str, str]] | None = None, **points: Any) -> Any:
    """A fake Score plugin (``fakes.fake``) that also has ``score_all``, answering ``answer``: a
    dict of scores, a (dict, Status) pair, or an exception to raise."""
    journal = journal if journal is not None else []

    def score_all(self: Any, state: Any, pod: Any, nodes: Any) -> Any:
        journal.append((name, "score_all", ",".join(n.name for n in nodes)))
        if isinstance(answer, BaseException):
            raise answer
        return answer if isinstance(answer, tuple) else (dict(answer), Status())

    per_node = type(fake(name, {"score"}, journal, **points))
    return type(f"Batch{name}", (per_node,), {"score_all": score_all})()


def test_run_score_uses_score_all_and_never_score() -> None:
    journal: list[tuple[str, str, str]] = []
    a = batch("A", {"n1": 10, "n2": 20, "n3": 40}, journal)
    totals, st = framework([(a, 1)]).run_score(CycleState(), POD, THREE)
    assert st.ok and totals == {"n1": 10, "n2": 20, "n3": 40}
    assert journal == [("A", "score_all", "n1,n2,n3")]


def test_score_all_is_normalized_and_weighted_like_score() -> None:
    scores = {"n1": 10, "n2": 20, "n3": 40}

    def normalize(s: dict[str, int]) -> None:
        s.update({k: v * 100 // 40 for k, v in s.items()})

    per_node = fake("A", {"score"}, score=lambda n: scores[n], normalize=normalize)
    batched = batch("A", scores, normalize=normalize)
    other = fake("B", {"score"}, score=lambda n: 100 if n == "n1" else 0)
    expected, st = framework([(per_node, 1), (other, 3)]).run_score(CycleState(), POD, THREE)
    assert st.ok and expected == {"n1": 81, "n2": 12, "n3": 25}
    assert framework([(batched, 1), (other, 3)]).run_score(CycleState(), POD, THREE) == (expected, Status())


@pytest.mark.parametrize("answer, says", [
    ({"n1": 10, "n2": 101, "n3": 0}, "invalid score 101 for node n2"),
    ({"n1": 10, "n2": 5.0, "n3": 0}, "invalid score 5.0 for node n2"),
    ({"n1": 10, "n3": 0}, "invalid score None for node n2"),
    ({"n1": True, "n2": 1, "n3": 0}, "invalid score True for node n1"),
    (({}, Status.unschedulable("no capacity data")), "A failed in Score: no capacity data"),
    (({}, Status(Code.SKIP)), "A failed in Score: SKIP"),
    (RuntimeError("boom"), "boom"),
], ids=["out of range", "not an int", "a node missing", "a bool", "a rejection", "a skip", "an exception"])
def test_score_all_failures_are_errors_naming_the_plugin(answer: Any, says: str) -> None:
    totals, st = framework([(batch("A", answer), 1)]).run_score(CycleState(), POD, THREE)
    assert totals == {} and st.code is Code.ERROR and st.plugin == "A"
    assert says in st.message


def test_scores_of_nodes_not_asked_about_are_ignored() -> None:
    a = batch("A", {"n1": 10, "n2": 20, "n3": 40, "elsewhere": 1000})
    assert framework([(a, 1)]).run_score(CycleState(), POD, THREE) == ({"n1": 10, "n2": 20, "n3": 40}, Status())
