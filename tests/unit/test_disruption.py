"""PodDisruptionBudgets in victim choice: allowances, preference for victims that violate none,
and NumPDBViolations in the preempt reply."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock
from extender.framework.disruption import Budget, violating
from extender.framework.eviction import Evictions
from extender.framework.views import PodInfo
from extender.runtime.engine import Candidate


def running(name: str, app: str = "w", priority: int = 10, node: str = "n1", **req: Any) -> dict[str, Any]:
    return make_pod(name).uid(f"u-{name}").labels(app=app).priority(priority).req(**(req or {"cpu": "1"})) \
        .node(node).obj()


def pdb(name: str, app: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}, **spec}}


PODS = [PodInfo.from_pod(running(f"w{i}")) for i in range(4)]


@pytest.mark.parametrize("spec, status, victims, expected", [
    ({"minAvailable": 3}, {}, 1, 0), ({"minAvailable": 3}, {}, 2, 1), ({"minAvailable": "50%"}, {}, 3, 1),
    ({"maxUnavailable": 1}, {}, 2, 1), ({"maxUnavailable": "25%"}, {}, 1, 0),
    ({"minAvailable": 0}, {"disruptionsAllowed": 0, "observedGeneration": 1}, 1, 1),
], ids=["min3-one", "min3-two", "min50%-three", "maxun1-two", "maxun25%-one", "status wins"])
def test_allowances(spec: dict, status: dict, victims: int, expected: int) -> None:
    budget = Budget.from_object({**pdb("b", "w", **spec), "status": status})
    assert len(violating(PODS[:victims], [budget], PODS)) == expected


def test_a_pod_two_budgets_cover_is_a_violation_and_spends_no_allowance() -> None:
    """The Eviction API refuses a pod more than one budget covers (a 500), whatever they allow:
    x (app=w, tier=a) is a violation, and app=w's one allowed disruption stays for y."""
    x = PodInfo.from_pod(make_pod("x").uid("u-x").labels(app="w", tier="a").req(cpu="1").node("n1").obj())
    y = PodInfo.from_pod(make_pod("y").uid("u-y").labels(app="w").req(cpu="1").node("n1").obj())
    by_app = Budget.from_object(pdb("by-app", "w", maxUnavailable=1))
    by_tier = Budget.from_object({"metadata": {"name": "by-tier", "namespace": "default"},
                                  "spec": {"selector": {"matchLabels": {"tier": "a"}}, "maxUnavailable": 1}})
    assert violating([x, y], [by_app, by_tier], [x, y]) == {"u-x"}
    # unless the API server checks no budget of x: Pending (not started) - charged as before
    pending = replace(x, phase="Pending")
    assert violating([pending, y], [by_app, by_tier], [pending, y]) == {"u-y"}
    assert violating([x, y], [by_app], [x, y]) == {"u-y"}  # one budget: x spends the allowance
    # deleted, as kube-scheduler deletes its victims: x is charged to both budgets, as it counts
    assert violating([x, y], [by_app, by_tier], [x, y], evicting=False) == {"u-y"}


def _leaving() -> dict[str, Any]:
    raw = running("w-leaving")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    return raw


UNAVAILABLE = [
    # id, spec, what makes one of the 4 covered pods unavailable, victims among the other 3, violations
    ("maxun1-one-deleting", {"maxUnavailable": 1}, "deleting", 1, 1),
    ("maxun1-one-evicted-not-shown", {"maxUnavailable": 1}, "going", 1, 1),
    ("maxun1-one-pending", {"maxUnavailable": 1}, "pending", 1, 1),
    ("maxun2-one-deleting", {"maxUnavailable": 2}, "deleting", 2, 1),
    ("min3-one-evicted-not-shown", {"minAvailable": 3}, "going", 1, 1),
    ("min50%-one-deleting", {"minAvailable": "50%"}, "deleting", 1, 0),  # 50% of 4 expected: 2
    ("min50%-one-deleting-two", {"minAvailable": "50%"}, "deleting", 2, 1),
]


@pytest.mark.parametrize("spec, how, victims, expected", [c[1:] for c in UNAVAILABLE],
                         ids=[c[0] for c in UNAVAILABLE])
def test_allowances_count_the_pods_already_unavailable(spec: dict, how: str, victims: int, expected: int) -> None:
    """As the disruption controller counts: every covered pod not terminal is expected, one on a
    node and not leaving - not deleting, not evicted already (``going``) - healthy."""
    budget = Budget.from_object(pdb("b", "w", **spec))
    first = PODS[0]
    if how == "deleting":
        first = PodInfo.from_pod({**_leaving(), "metadata": {**_leaving()["metadata"], "uid": "u-w0"}})
    elif how == "pending":
        first = PodInfo.from_pod(make_pod("w0").uid("u-w0").labels(app="w").req(cpu="1").obj())
    followed = [first, *PODS[1:]]
    going = {"u-w0"} if how == "going" else set()
    assert len(violating(PODS[1:1 + victims], [budget], followed, going)) == expected


@pytest.mark.parametrize("disrupted, victims, expected", [
    pytest.param({}, 1, 1, id="evicted-not-in-the-status-yet"),
    pytest.param({"w0": "2026-01-01T00:01:00Z"}, 1, 0, id="evicted-and-in-the-status"),
])
def test_a_status_allowance_less_the_evictions_it_does_not_show(disrupted: dict, victims: int, expected: int) -> None:
    """The API server takes an eviction out of ``disruptionsAllowed`` and names the pod in
    ``disruptedPods`` at once; the watch may show either later. A pod evicted (``evicted``:
    ``Evictions.unnamed``) that the status does not name yet is taken out here - once, not
    again when it does - whether or not the pods watch shows it going (``going``)."""
    budget = Budget.from_object({**pdb("b", "w", minAvailable=2),
                                 "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "disruptedPods": disrupted}})
    assert len(violating(PODS[1:1 + victims], [budget], PODS, {"u-w0"}, [PODS[0]])) == expected
    assert len(violating(PODS[1:1 + victims], [budget], PODS, frozenset(), [PODS[0]])) == expected


def status_budget(app: str, allowed: int = 1, disrupted: dict[str, str] | None = None) -> Budget:
    return Budget.from_object({**pdb("b", app, minAvailable=1), "status": {
        "observedGeneration": 1, "disruptionsAllowed": allowed, "disruptedPods": disrupted or {}}})


BEFORE = status_budget("w", 2)
"""The budget's status when w0 is evicted: two disruptions allowed."""

UNSEEN = [  # (id, the budgets at each look, seconds after the eviction, w0 counted at each look)
    ("counted-while-the-status-is-the-one-from-before", [[BEFORE], [status_budget("w", 2)]], [1, 119], [True, True]),
    ("forgotten-once-a-status-names-it", [[status_budget("w", 1, {"w0": "t"})], [BEFORE]], [1, 2], [False, False]),
    ("forgotten-once-the-controller-wrote-another", [[status_budget("w", 1)]], [1], [False]),  # w0 unhealthy
    ("forgotten-120s-after-the-eviction", [[BEFORE]], [120], [False]),
    ("forgotten-when-its-budget-is-gone", [[], [BEFORE]], [1, 2], [False, False]),
]


@pytest.mark.parametrize("looks, seconds, counted", [c[1:] for c in UNSEEN], ids=[c[0] for c in UNSEEN])
def test_an_eviction_counts_against_the_status_from_before_it_only(looks: list[list[Budget]], seconds: list[float],
                                                                  counted: list[bool]) -> None:
    """The API server's write and the disruption controller's later ones all count the eviction:
    it is taken out of the status the budget had when it was made, and of no other."""
    clock = [1000.0]
    evictions = Evictions(lambda: [BEFORE], lambda: clock[0])
    evictions.add([PODS[0]])
    seen = []
    for budgets, t in zip(looks, seconds):
        clock[0] = 1000.0 + t
        seen.append(evictions.unseen(budgets) == [PODS[0]])
    assert seen == counted


@pytest.mark.parametrize("budgets, kept", [
    pytest.param([Budget.from_object(pdb("b", "w", minAvailable=1))], False, id="a-budget-without-status"),
    pytest.param([status_budget("other")], False, id="no-budget-covers-it"),
    pytest.param([BEFORE], True, id="a-status-covers-it"),
])
def test_only_an_eviction_a_status_covered_is_kept(budgets: list[Budget], kept: bool) -> None:
    evictions = Evictions(lambda: budgets, lambda: 0.0)
    evictions.add([PODS[0]])
    assert (evictions.unseen(budgets) == [PODS[0]]) is kept


def test_a_refused_eviction_is_not_counted_and_at_most_4096_are_kept() -> None:
    evictions = Evictions(lambda: [BEFORE], lambda: 0.0)
    evictions.add([PODS[0]])
    evictions.discard(PODS[0].uid)
    assert evictions.unseen([BEFORE]) == []
    many = [PodInfo.from_pod(running(f"m{i}")) for i in range(4097)]
    evictions.add(many)
    assert evictions.unseen([BEFORE]) == many[1:]


def test_null_selector_covers_nothing() -> None:
    budget = Budget.from_object({"metadata": {"name": "b"}, "spec": {"minAvailable": 4}})
    assert violating(PODS, [budget], PODS) == set()


def engine_over(nodes: list[dict], pods: list[dict], pdbs: list[dict], plugins: dict, **overrides: Any) -> Any:
    objs = cluster_objects(nodes, pods)
    objs["PodDisruptionBudget"] = pdbs
    cluster = MemoryCluster(objs)
    config = config_of(profiles=[{"schedulerName": "default-scheduler", "plugins": plugins}], **overrides)
    return create_app(config, source=cluster, clock=FakeClock(), background=False).extensions["kube_extender"].engine, cluster


def test_managed_preemption_prefers_the_node_whose_victims_violate_no_budget() -> None:
    pods = [running("guarded-a", "guarded", 10, "a", gpu=2), running("guarded-a2", "guarded", 10, "a2", gpu=2),
            running("free-b", "free", 20, "b", gpu=2)]
    nodes = [make_node(n).alloc(gpu=2).obj() for n in ("a", "a2", "b")]
    engine, cluster = engine_over(nodes, pods, [pdb("keep", "guarded", minAvailable=2)],
                                  {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}})
    preemptor = make_pod("hi").uid("u-hi").req(gpu=2).priority(100).obj()
    cluster.add_pod(preemptor)
    outcome = engine.filter(cluster.get_pod("default", "hi"), ["a", "a2", "b"])
    assert outcome.nominated == "b", "a higher-priority victim that violates no budget beats a guarded one"
    assert {p["metadata"]["name"] for p in cluster.pods()} >= {"guarded-a", "guarded-a2"}


def test_managed_preemption_passes_over_a_victim_two_budgets_cover() -> None:
    """Two generous budgets cover twin-a: the Eviction API would refuse it (a 500) every time.
    The lower-priority victim is not the better choice then: free-b, which one budget covers
    and allows, is evicted and the preemptor nominated there (before: a, then a refusal)."""
    twin = running("twin-a", "twin", 10, "a", gpu=2)
    twin["metadata"]["labels"]["tier"] = "x"
    pods = [twin, running("free-b", "free", 20, "b", gpu=2)]
    nodes = [make_node(n).alloc(gpu=2).obj() for n in ("a", "b")]
    tier = {"metadata": {"name": "by-tier", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"tier": "x"}}, "maxUnavailable": 5}}
    engine, cluster = engine_over(nodes, pods, [pdb("by-app", "twin", maxUnavailable=5), tier,
                                                pdb("free", "free", maxUnavailable=5)],
                                  {"postFilter": {"enabled": [{"name": "ManagedPreemption"}]}})
    cluster.add_pod(make_pod("hi").uid("u-hi").req(gpu=2).priority(100).obj())
    outcome = engine.filter(cluster.get_pod("default", "hi"), ["a", "b"])
    assert outcome.nominated == "b"
    assert {p["metadata"]["name"] for p in cluster.pods()} == {"twin-a", "hi"}


def device_holder(name: str, app: str, device: int, mem: int, prio: int) -> dict[str, Any]:
    p = make_pod(name).uid(f"u-{name}").labels(app=app).req(**{"example.com/gpu-memory": mem}).priority(prio) \
        .node("gpu").obj()
    p["metadata"]["annotations"] = {"kube-extender.io/devices": json.dumps(
        {"node": "gpu", "containers": {"main": {"devices": [device], "memoryMiB": mem}}})}
    return p


DEVICE_PLUGINS = {"multiPoint": {"enabled": [{"name": "DeviceShare"}], "disabled": ["NodeResources"]}}


def gpu_node() -> dict[str, Any]:
    node = make_node("gpu").obj()
    node["metadata"]["annotations"] = {"kube-extender.io/device-inventory": json.dumps({"devices": 2, "memoryMiB": 16384})}
    return node


@pytest.mark.parametrize("budgets, victims, violations", [
    pytest.param([], ["u-guarded", "u-cpu"], 0, id="no budget: the lowest priority"),
    pytest.param([pdb("keep", "guarded", minAvailable=1)], ["u-free", "u-cpu"], 0, id="the guarded pod is spared"),
    pytest.param([pdb("keep", "guarded", minAvailable=1), pdb("keep2", "free", minAvailable=1)],
                 ["u-guarded", "u-cpu"], 1, id="both guarded: lowest priority, and the violation is reported"),
])
def test_device_level_preempt_prefers_victims_without_violations(budgets: list, victims: list, violations: int) -> None:
    pods = [device_holder("guarded", "guarded", 0, 16384, 10), device_holder("free", "free", 1, 16384, 20),
            running("cpu", "cpu", 5, "gpu")]
    engine, _ = engine_over([gpu_node()], pods, budgets, DEVICE_PLUGINS,
                            managedResources=[{"name": "example.com/gpu-memory"}])
    preemptor = make_pod("hi").uid("u-hi").req(**{"example.com/gpu-memory": 8192}).priority(100).obj()
    # kube-scheduler proposes a cpu-only victim; the device needs one more
    decisions = engine.preempt(preemptor, {"gpu": Candidate([("u-cpu", None)], 0)})
    assert decisions["gpu"].victims == victims
    assert decisions["gpu"].num_pdb_violations == violations


def test_the_preempt_verb_counts_a_pod_two_budgets_cover_as_kube_scheduler_deletes_it() -> None:
    """kube-scheduler deletes the preempt verb's victims: a pod two generous budgets cover
    violates nothing there. DeviceShare adds twin (no violation), not free (its budget allows
    none) - found in review: the Eviction API's rule was applied to it."""
    twin = device_holder("twin", "twin", 0, 16384, 20)
    twin["metadata"]["labels"]["tier"] = "x"
    pods = [twin, device_holder("free", "free", 1, 16384, 10), running("cpu", "cpu", 5, "gpu")]
    tier = {"metadata": {"name": "by-tier", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"tier": "x"}}, "maxUnavailable": 5}}
    engine, _ = engine_over([gpu_node()], pods, [pdb("by-app", "twin", maxUnavailable=5), tier,
                                                  pdb("keep-free", "free", minAvailable=1)], DEVICE_PLUGINS,
                            managedResources=[{"name": "example.com/gpu-memory"}])
    preemptor = make_pod("hi").uid("u-hi").req(**{"example.com/gpu-memory": 8192}).priority(100).obj()
    decisions = engine.preempt(preemptor, {"gpu": Candidate([("u-cpu", None)], 0)})
    assert (sorted(decisions["gpu"].victims), decisions["gpu"].num_pdb_violations) == (["u-cpu", "u-twin"], 0)
