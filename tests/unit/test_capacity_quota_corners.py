"""CapacityQuota corners: admission reclaim, nominations of lower priority, pods being deleted."""

from __future__ import annotations

from typing import Any

from builders import cluster_objects, make_elastic_quota, make_node, make_pod
from conftest import config_of

from extender.app import create_app
from extender.cluster.memory import MemoryCluster
from extender.framework.clock import FakeClock

GATE = "kube-extender.io/admission"


def pod(name: str, ns: str, priority: int = 0, node: str = "", gpu: int = 1, gated: bool = False) -> dict[str, Any]:
    b = make_pod(name, ns).uid(f"u-{name}").req(gpu=gpu).priority(priority)
    raw = (b.node(node) if node else b).obj()
    if node:
        raw["status"]["startTime"] = "2026-01-01T00:00:00Z"
    if gated:
        raw["spec"]["schedulingGates"] = [{"name": GATE}]
    return raw


def app(nodes: list[dict], pods: list[dict], quotas: list[dict], **config: Any) -> tuple[Any, MemoryCluster]:
    cluster = MemoryCluster({**cluster_objects(nodes, pods), "ElasticQuota": quotas})
    config.setdefault("profiles", [{"schedulerName": "default-scheduler",
                                    "plugins": {"multiPoint": {"enabled": [{"name": "CapacityQuota"}]}}}])
    built = create_app(config_of(**config), source=cluster, clock=FakeClock(), background=False)
    return built.extensions["kube_extender"], cluster


def alive(cluster: MemoryCluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods()}


def test_reclaim_at_admission_counts_the_pods_admitted_before() -> None:
    """b (min 1) has b1 admitted already (out of the gate, pending: PreEnqueue counts it). Gated
    p (b, 1 GPU) would take b to 2, beyond its min: at admission it may borrow (d's min is
    unused) but must not reclaim a's borrowers - yet PostFilter's stance ignores b1."""
    state, cluster = app([make_node("n1").alloc(gpu=2).obj()],
                         [pod("x1", "a", 0, "n1"), pod("x2", "a", 0, "n1"), pod("b1", "b", 0)],
                         [make_elastic_quota("a", min={"gpu": 0}, max={"gpu": 4}),
                          make_elastic_quota("b", min={"gpu": 1}),
                          make_elastic_quota("d", min={"gpu": 3})],
                         admission={"enabled": True})
    cluster.add_pod(pod("p", "b", 0, gated=True))
    result = state.admitter.run_once()
    assert {"x1", "x2"} <= alive(cluster), "a borrower was evicted for a pod beyond its namespace's min"
    assert result.admitted == []


def test_a_lower_priority_nomination_does_not_hold_quota_against_a_higher_priority_pod() -> None:
    """L (a, priority 0) is nominated to n1; H (a, priority 100) comes. Nominated pods hold
    capacity only against pods of their priority or lower (with_held; upstream
    capacityscheduling counts same-quota nominated pods only when at least as important):
    H must not be refused a's max because of L."""
    state, cluster = app([make_node("n1").alloc(gpu=2).obj(), make_node("n2").alloc(gpu=2).obj()],
                         [pod("L", "a", 0, gpu=2)],
                         [make_elastic_quota("a", min={"gpu": 2}, max={"gpu": 2})])
    cluster.set_nominated_node("a", "L", "n1")
    cluster.add_pod(pod("H", "a", 100, gpu=2))
    outcome = state.engine.filter(cluster.get_pod("a", "H"), ["n1", "n2"])
    assert outcome.feasible == ["n1", "n2"], outcome.failed  # L's room on n1 is held against lower priorities only


def test_an_admission_hold_of_a_pod_being_deleted_does_not_count() -> None:
    """a (max 1): g was admitted (its hold counts in a's use), then deleted - it stays pending
    with a deletionTimestamp while a finalizer (a Job's) is removed. README: pods being deleted
    no longer count; h must be admitted."""
    state, cluster = app([make_node("n1").alloc(gpu=8).obj()], [],
                         [make_elastic_quota("a", min={"gpu": 1}, max={"gpu": 1})],
                         admission={"enabled": True})
    cluster.add_pod(pod("g", "a", 0, gated=True))
    assert state.admitter.run_once().admitted == ["a/g"]
    g = cluster.get_pod("a", "g")
    g["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    g["metadata"]["finalizers"] = ["batch.kubernetes.io/job-tracking"]
    cluster.add_pod(g)
    cluster.add_pod(pod("h", "a", 0, gated=True))
    assert state.admitter.run_once().admitted == ["a/h"]


def test_admission_reclaim_does_not_count_another_namespaces_pending_pods_as_its_use() -> None:
    """b (min 2) runs b1, b2 on n1 - exactly its min, no borrowing - and has b3 pending (no
    gate: merely waiting in kube-scheduler's queue, holding nothing). Gated p (a, within a's min)
    finds no room. b is no borrower: reclaim must not take it below its min. But _stance now
    uses admission=True for the whole table, so b's use counts b3 (3 > min 2) and b1/b2 look
    evictable down to 'min' - p evicts one of b's running pods, leaving b at 1 of its min 2."""
    state, cluster = app([make_node("n1").alloc(gpu=2).obj()],
                         [pod("b1", "b", 0, "n1"), pod("b2", "b", 0, "n1"), pod("b3", "b", 0)],
                         [make_elastic_quota("a", min={"gpu": 2}),
                          make_elastic_quota("b", min={"gpu": 2})],
                         admission={"enabled": True})
    cluster.add_pod(pod("p", "a", 0, gated=True))
    state.admitter.run_once()
    assert {"b1", "b2"} <= alive(cluster), "a pod of a namespace within its min was evicted for reclaim"
