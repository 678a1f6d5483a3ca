"""Nudges and timed wake-ups: pods the extender rejected are touched when an event that may help
them happens (so kube-scheduler 1.29 retries them) or when a plugin's back-off ends; rate-limited."""

from __future__ import annotations

from typing import Any

from builders import cluster_objects, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock

NUDGED = "kube-extender.io/nudged-at"


def setup(pending: int = 1, qps: float = 100.0, min_interval: str = "10s") -> tuple[Any, Any, MemoryCluster, FakeClock]:
    pods = [make_pod("running").uid("r").req(gpu=4).node("n1").obj()]
    pods += [make_pod(f"p{i}").uid(f"u-p{i}").req(gpu=1).obj() for i in range(pending)]
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=4).obj()], pods))
    clock = FakeClock()
    app = create_app(config_of(requeue={"nudge": True, "qps": qps, "minInterval": min_interval}), source=cluster,
                     clock=clock, background=False)
    state = app.extensions["kube_extender"]
    for i in range(pending):
        assert not state.engine.filter(cluster.get_pod("default", f"p{i}"), ["n1"]).feasible
    return state.engine, state.nudger, cluster, clock


def nudged(cluster: MemoryCluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.pods()
                  if NUDGED in (p["metadata"].get("annotations") or {}))


def test_a_rejected_pod_is_nudged_when_capacity_is_released_and_not_before() -> None:
    engine, nudger, cluster, _ = setup()
    assert [r.plugins for r in engine.rejections()] == [frozenset({"NodeResources"})]
    assert engine.queue_state()["rejectedInFilter"][0]["reason"].startswith("NodeResources: Insufficient")
    cluster.add_pod(make_pod("cpu-only").uid("c").obj())  # an event NodeResources did not declare
    assert nudger.run_once() == [] and nudged(cluster) == []
    cluster.delete_pod("default", "running")
    assert nudger.run_once() == ["default/p0"] and nudged(cluster) == ["p0"]
    assert engine.rejections() == [] and nudger.run_once() == [], "once: its own update does not count"


def test_nudges_are_rate_limited_and_due_pods_wait_for_a_token() -> None:
    engine, nudger, cluster, clock = setup(pending=5, qps=1.0)  # burst 2
    cluster.delete_pod("default", "running")
    assert len(nudger.run_once()) == 2
    assert nudger.run_once() == [], "no token, no new event: the others stay due"
    clock.advance(1.0)
    assert len(nudger.run_once()) == 1
    clock.advance(10.0)
    assert len(nudger.run_once()) == 2 and len(nudged(cluster)) == 5


def test_a_pod_is_nudged_at_most_once_per_min_interval() -> None:
    engine, nudger, cluster, clock = setup(min_interval="30s")
    cluster.add_node(make_node("n2").alloc(gpu=0).obj())
    assert nudger.run_once() == ["default/p0"]
    engine.filter(cluster.get_pod("default", "p0"), ["n1", "n2"])  # rejected again
    cluster.add_node(make_node("n3").alloc(gpu=0).obj())
    assert nudger.run_once() == []
    clock.advance(31)
    assert nudger.run_once() == ["default/p0"]


def test_pods_bound_or_deleted_meanwhile_are_not_nudged() -> None:
    engine, nudger, cluster, _ = setup(pending=2)
    cluster.delete_pod("default", "p0")
    cluster.bind("default", "p1", "u-p1", "n1")
    cluster.add_node(make_node("n2").alloc(gpu=1).obj())
    assert nudger.run_once() == [] and engine.rejections() == []


def test_event_nudges_are_off_by_default_but_timed_wake_ups_are_not() -> None:
    cluster = MemoryCluster(cluster_objects([make_node("n1").alloc(gpu=1).obj()],
                                            [make_pod("p0").uid("u-p0").req(gpu=2).obj()]))
    clock = FakeClock()
    state = create_app(config_of(), source=cluster, clock=clock, background=False).extensions["kube_extender"]
    engine, nudger = state.engine, state.nudger
    assert not engine.filter(cluster.get_pod("default", "p0"), ["n1"]).feasible
    cluster.add_node(make_node("n2").alloc(gpu=2).obj())
    assert nudger.run_once() == [] and nudged(cluster) == []
    engine.requeue_after(engine.cache.pending_pod("default", "p0"), 5.0)
    assert nudger.run_once() == []
    clock.advance(5.0)
    assert nudger.run_once() == ["default/p0"] and nudged(cluster) == ["p0"]
    assert nudger.run_once() == [], "a wake-up is done once"
