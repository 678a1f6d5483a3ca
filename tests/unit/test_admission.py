"""Admission through scheduling gates: PreEnqueue with an unmodified kube-scheduler."""

from __future__ import annotations

from typing import Any

import pytest
from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock

GATE = "kube-extender.io/admission"


def gated(name: str, gpus: int, priority: int, created: str, *others: str) -> dict[str, Any]:
    pod = make_pod(name).uid(f"u-{name}").req(gpu=gpus).priority(priority).created(created).obj()
    pod["spec"]["schedulingGates"] = [{"name": g} for g in (*others, GATE)]
    return pod


def setup(pods: list[dict], strategy: str = "BestEffortFIFO", gpus: int = 4) -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=gpus).obj()], pods))
    app = create_app(config_of(admission={"strategy": strategy}), source=cluster, clock=FakeClock(),
                     background=False)
    return app.extensions["kube_extender"].admitter, cluster


def gates(cluster: MemoryCluster, name: str) -> list[str]:
    return [g["name"] for g in cluster.get_pod("default", name)["spec"].get("schedulingGates") or []]


QUEUE = [gated("big", 4, 100, "2026-01-01T00:00:00Z"), gated("small", 1, 10, "2026-01-01T00:00:01Z"),
         gated("older-small", 1, 10, "2026-01-01T00:00:00Z")]


@pytest.mark.parametrize("strategy, admitted", [
    ("BestEffortFIFO", ["default/older-small", "default/small"]),
    ("StrictFIFO", []),
])
def test_strategies_with_a_head_that_does_not_fit(strategy: str, admitted: list[str]) -> None:
    admitter, cluster = setup(QUEUE + [make_pod("running").uid("r").req(gpu=1).node("n1").obj()], strategy)
    result = admitter.run_once()
    assert result.admitted == admitted
    assert "no node has enough free example.com/gpu" in result.held["default/big"]
    if strategy == "StrictFIFO":
        assert "StrictFIFO" in result.held["default/small"]


def test_admission_follows_queue_order_and_does_not_reserve() -> None:
    admitter, cluster = setup(QUEUE)
    # each pod is checked against current free capacity: admission keeps kube-scheduler from trying
    # pods that fit nowhere; reservations happen at bind, as for any other pod
    assert admitter.run_once().admitted == ["default/big", "default/older-small", "default/small"]
    assert all(gates(cluster, n) == [] for n in ("big", "small", "older-small"))


def test_only_the_extenders_gate_is_removed() -> None:
    pod = gated("p", 1, 0, "2026-01-01T00:00:00Z", "other.io/quota")
    admitter, cluster = setup([pod])
    assert admitter.run_once().admitted == ["default/p"]
    assert gates(cluster, "p") == ["other.io/quota"]
    assert admitter.run_once().admitted == [], "removing it again is a no-op"


def test_pods_without_the_gate_are_left_alone() -> None:
    pod = make_pod("free").uid("u").req(gpu=9).obj()
    pod["spec"]["schedulingGates"] = [{"name": "other.io/quota"}]
    admitter, cluster = setup([pod])
    assert admitter.run_once().admitted == [] and gates(cluster, "free") == ["other.io/quota"]


def test_debug_queue_lists_gated_pods_in_order() -> None:
    admitter, cluster = setup(QUEUE)
    state = admitter.engine.queue_state()
    assert [g["pod"] for g in state["gated"]] == ["default/big", "default/older-small", "default/small"]


# ---- queueing hints ---------------------------------------------------------------------------------

def test_a_held_pod_is_evaluated_again_only_after_an_event_its_plugin_declared() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, cluster = setup([gated("waiting", 2, 0, "2026-01-01T00:00:00Z"), running])
    first = admitter.run_once()
    assert first.evaluated == 1 and "no node has enough free" in first.held["default/waiting"]
    steps = [
        ("nothing happened", lambda: None, 0, []),
        ("a pod elsewhere appeared (NodeResources does not care)",
         lambda: cluster.add_pod(make_pod("cpu-only", namespace="other").uid("c").obj()), 0, []),
        ("the pod itself changed", lambda: cluster.patch_pod_metadata("default", "waiting", labels={"x": "y"}), 1, []),
        ("capacity was released", lambda: cluster.delete_pod("default", "running"), 1, ["default/waiting"]),
    ]
    for what, act, evaluated, admitted in steps:
        act()
        result = admitter.run_once()
        assert (result.evaluated, result.admitted) == (evaluated, admitted), what
        if not admitted:
            assert "no node has enough free" in result.held["default/waiting"], what


def test_a_skipped_head_still_blocks_under_strict_fifo() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, cluster = setup([gated("head", 2, 10, "2026-01-01T00:00:00Z"), running], "StrictFIFO")
    admitter.run_once()
    cluster.add_pod(gated("behind", 1, 0, "2026-01-01T00:00:01Z"))
    result = admitter.run_once()
    assert result.evaluated == 0 and result.admitted == [], "the new pod is behind the head that wants the same"
    assert "StrictFIFO" in result.held["default/behind"]


def test_a_full_pass_evaluates_everyone() -> None:
    running = make_pod("running").uid("r").req(gpu=4).node("n1").obj()
    admitter, _ = setup([gated("a", 2, 0, "2026-01-01T00:00:00Z"), gated("b", 2, 0, "2026-01-01T00:00:01Z"), running])
    admitter.run_once()
    assert admitter.run_once().evaluated == 0
    assert admitter.run_once(full=True).evaluated == 2


def test_capacity_held_for_a_nominated_pod_of_higher_priority_is_not_admitted_to_others() -> None:
    nominee = make_pod("nominee").uid("u-nominee").req(gpu=4).priority(100).obj()
    nominee["status"]["nominatedNodeName"] = "n1"
    admitter, cluster = setup([gated("low", 1, 0, "2026-01-01T00:00:00Z"), nominee])
    result = admitter.run_once()
    assert result.admitted == [] and "no node has enough free example.com/gpu" in result.held["default/low"]
    cluster.delete_pod("default", "nominee")
    assert admitter.run_once().admitted == ["default/low"]
